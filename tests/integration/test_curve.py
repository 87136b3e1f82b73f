#!/usr/bin/env python3
"""test_curve.py - CURVE on tcp:// (docs/SECURITY.md): `strata keygen` writes
zcert key pairs and refuses to overwrite them; a process-mode topology over
tcp://127.0.0.1 with `security - keys=DIR` serves greedy output equal to
`strata generate --greedy`; a PUSH with an unknown key to an actor's inbound
endpoint is refused (its frame never arrives, curve.refused goes up) while a
known key gets through; the CURVE client endpoint serves a client with an
allowed key (Python client and `strata client`) and refuses one without; a tcp
topology with neither keys nor insecure_tcp=1 is refused at start."""
import os
import shutil
import subprocess
import sys
import tempfile

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq
import zmq.auth

sys.path.insert(0, os.path.join(os.environ.get("STRATA_SRC", "."), "clients", "python"))
from strata_client import StrataClient, StrataError  # noqa: E402

MAX_TOKENS = 12
PROMPT = "Name three colors."


def keygen(*args):
    return subprocess.run([u.BIN, "keygen"] + list(args), capture_output=True, text=True,
                          timeout=30)


def write_topology(d, keys, ports, client_port, extra="", http_port=None):
    path = os.path.join(d, "topo.txt")
    ep = {n: "tcp://127.0.0.1:%d" % p for n, p in ports.items()}
    with open(path, "w") as f:
        f.write("# CURVE between actors, and on the client endpoint\n"
                "%s\n"
                "supervisor %s\n"
                "defaults   -   threads=1 kv_blocks=64\n"
                "frontend   %s  client=tcp://127.0.0.1:%d client_secret=%s/server.key "
                "client_allow=%s\n"
                "tokenizer  %s\n"
                "router     %s\n"
                "worker0    %s\n"
                % (extra if extra else "security - keys=%s" % keys, ep["supervisor"],
                   ep["frontend"], client_port, os.path.join(d, "srv"), os.path.join(d, "clients"),
                   ep["tokenizer"], ep["router"], ep["worker0"]))
        if http_port:  # the OpenAI gateway: a CURVE client of the frontend (alice's pair)
            f.write("http       %s  listen=127.0.0.1:%d client_key=%s\n"
                    % (ep["http"], http_port, os.path.join(d, "clients", "alice.key_secret")))
    return path


def router_counters(client):
    c = dict(client.stats())
    return c.get("router.curve.refused"), c.get("router.malformed", 0)


def push(endpoint, server_pub, cert):
    """A raw PUSH with CURVE key pair cert (a _secret file) to endpoint."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 0)
    s.curve_serverkey = zmq.auth.load_certificate(server_pub)[0]
    s.curve_publickey, s.curve_secretkey = zmq.auth.load_certificate(cert)
    s.connect(endpoint)
    return s


def main():
    if not zmq.has("curve"):  # Debian's libzmq5 has it: CI must (a failure there)
        u.testenv.skip("this pyzmq/libzmq has no CURVE")
    d = tempfile.mkdtemp(prefix="strata-curve-")
    try:
        run(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("all ok")


def run(d):
    keys = os.path.join(d, "keys")
    # ---- strata keygen
    p = subprocess.run([u.BIN, "keygen", "--help"], capture_output=True, text=True, timeout=30)
    u.check(p.returncode == 0 and "key_secret" in p.stdout, "strata keygen --help")
    names = ["supervisor", "frontend", "tokenizer", "router", "worker0", "http"]
    u.check(keygen(keys, *names).returncode == 0, "keygen of the actors' pairs")
    pub, sec = zmq.auth.load_certificate(os.path.join(keys, "router.key_secret"))
    u.check(len(pub) == 40 and sec and len(sec) == 40, "zcert files with both keys")
    u.check(os.stat(os.path.join(keys, "router.key_secret")).st_mode & 0o077 == 0,
            "the secret file is private")
    before = open(os.path.join(keys, "router.key")).read()
    p = keygen(keys, "router")
    u.check(p.returncode != 0 and "--force" in p.stderr, "keygen refuses to overwrite: %r" % p.stderr)
    u.check(open(os.path.join(keys, "router.key")).read() == before, "the old key is kept")
    u.check(keygen("--force", os.path.join(d, "tmp"), "x").returncode == 0, "keygen --force")
    u.check(keygen(os.path.join(d, "srv"), "server").returncode == 0, "client endpoint pair")
    u.check(keygen(os.path.join(d, "clients"), "alice").returncode == 0, "allowed client")
    u.check(keygen(os.path.join(d, "others"), "mallory").returncode == 0, "unknown key")

    ports = {n: u.free_port() for n in names}
    client_port = u.free_port()

    # ---- tcp without keys and without insecure_tcp=1: refused at start
    path = write_topology(d, keys, ports, client_port, extra="# no security line")
    p = subprocess.run([u.BIN, "serve", "--topology", path], capture_output=True, text=True,
                       timeout=60)
    u.check(p.returncode != 0 and "insecure_tcp" in p.stderr and "keys" in p.stderr,
            "tcp without keys is refused: %r" % p.stderr)
    path = write_topology(d, keys, ports, client_port, extra="security - insecure_tcp=1")
    p = subprocess.run([u.BIN, "actor", "nosuch", "--topology", path], capture_output=True,
                       text=True, timeout=60)
    u.check("no actor 'nosuch'" in p.stderr, "insecure_tcp=1 parses: %r" % p.stderr)
    # a key missing for one actor: refused at start, naming it
    path = write_topology(d, keys, ports, client_port,
                          extra="security - keys=%s" % os.path.join(d, "clients"))
    p = subprocess.run([u.BIN, "serve", "--topology", path], capture_output=True, text=True,
                       timeout=60)
    u.check(p.returncode != 0 and "strata keygen" in p.stderr, "a missing pair: %r" % p.stderr)

    # ---- CURVE everywhere
    http_port = u.free_port()
    path = write_topology(d, keys, ports, client_port, http_port=http_port)
    s = u.Server(["--topology", path])
    s.port, s.endpoint = client_port, "tcp://127.0.0.1:%d" % client_port
    srv_pub = os.path.join(d, "srv", "server.key")
    alice = os.path.join(d, "clients", "alice.key_secret")
    mallory = os.path.join(d, "others", "mallory.key_secret")
    with s:
        c = StrataClient(s.endpoint, timeout=60, server_key=srv_pub, client_key=alice)
        u.wait_for(lambda: c.health()[0], 20, "health ok over CURVE")
        toks = [e["token"] for e in c.generate(messages=[{"role": "user", "content": PROMPT}],
                                                max_tokens=MAX_TOKENS, temperature=0)
                if e["type"] == "token"]
        ref = u.reference(PROMPT, MAX_TOKENS)
        u.check(toks == ref, "greedy over CURVE equals strata generate: %r vs %r" % (toks, ref))
        print("ok   greedy output over CURVE (%d tokens)" % len(toks))
        text = "".join(e["text"] for e in c.generate(
            messages=[{"role": "user", "content": PROMPT}], max_tokens=MAX_TOKENS,
            temperature=0) if e["type"] in ("token", "done") and e.get("text"))
        # the http actor reaches the CURVE client endpoint with its own key pair
        import http.client
        import json
        def over_http():
            try:
                h = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
                h.request("POST", "/v1/chat/completions", json.dumps({
                    "messages": [{"role": "user", "content": PROMPT}],
                    "max_tokens": MAX_TOKENS, "temperature": 0}),
                    {"Content-Type": "application/json"})
                r = h.getresponse()
                return r.status, json.loads(r.read())
            except OSError:
                return None
        got = u.wait_for(over_http, 20, "the http actor to answer")
        u.check(got[0] == 200 and got[1]["choices"][0]["message"]["content"] == text,
                "OpenAI API over a CURVE client endpoint: %r vs %r" % (got, text))
        print("ok   the http actor is a CURVE client of the frontend (same text)")

        # the C client (strata client) with the same keys
        p = subprocess.run([u.BIN, "client", "-e", s.endpoint, "--server-key", srv_pub,
                            "--client-key", alice, "--health", "--timeout", "10"],
                           capture_output=True, text=True, timeout=30)
        u.check(p.returncode == 0, "strata client over CURVE: %r" % p.stderr)

        # a client key not on client_allow: no answer
        bad = StrataClient(s.endpoint, timeout=2, server_key=srv_pub, client_key=mallory)
        try:
            bad.health()
            u.check(False, "a client with an unknown key was served")
        except StrataError as e:  # the DEALER never completes its handshake: no answer
            u.check(e.code == "timeout", "an unknown client key: %r, want a timeout" % e)
        bad._monitor()
        u.check(bad.conn == 0, "an unknown client key completed %d handshakes" % bad.conn)
        print("ok   unknown client key refused (no handshake, no answer)")
        bad.close()
        # a plain client gets nothing either
        plain = u.Client(zmq.Context.instance(), s.endpoint)
        plain.send({"type": "health"})
        u.check(not plain.sock.poll(1500), "a plain client is not served on a CURVE endpoint")
        plain.close()

        # an actor's inbound endpoint: an unknown key is refused and counted
        refused0, malformed0 = router_counters(c)
        u.check(refused0 == 0, "router reports curve.refused from the start (%r)" % refused0)
        router_ep, router_pub = "tcp://127.0.0.1:%d" % ports["router"], \
            os.path.join(keys, "router.key")
        m = push(router_ep, router_pub, mallory)
        try:
            m.send(b"\xc1 not msgpack", zmq.NOBLOCK)  # queued; the handshake fails
        except zmq.Again:
            pass
        u.wait_for(lambda: (router_counters(c)[0] or 0) > 0, 10, "router curve.refused > 0")
        refused = router_counters(c)[0]
        # a known key (the tokenizer's pair) reaches the router: its garbage is counted.
        # Sent after the refusal, with the refused peer still connected (and retrying):
        # malformed goes up by exactly one, the known key's frame, never by the other.
        k = push(router_ep, router_pub, os.path.join(keys, "tokenizer.key_secret"))
        u.wait_for(lambda: k.poll(100, zmq.POLLOUT), 10, "a known key connects")
        k.send(b"\xc1 not msgpack")
        malformed = u.wait_for(lambda: (lambda x: x if x > malformed0 else None)(
            router_counters(c)[1]), 10, "the known key's frame arrives")
        u.check(malformed == malformed0 + 1, "malformed %d -> %d: the refused peer's frame "
                "arrived too" % (malformed0, malformed))
        print("ok   unknown actor key refused (router curve.refused=%d), a known key's frame "
              "arrives alone" % refused)
        m.close()
        k.close()
        c.close()


if __name__ == "__main__":
    main()
