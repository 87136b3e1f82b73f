"""test_http_hardening.py - what an independent client found at the HTTP gateway, fixed
(issue 27, docs/HTTP.md "Limits"):
- slow headers (a byte a second, never idle): the connection is closed at header_timeout_s
  (here 2 s) instead of never;
- a slow body (Content-Length 200, a byte every 0.3 s): closed at body_timeout_s (2 s);
- more connections from one address than max_per_ip (4): the extra ones are refused;
- a chunked body over max_body is cut as soon as it passes the limit, while the client is
  still sending (libmicrohttpd cannot answer mid-body) -- instead of being read to its end,
  or waited for for ever (a Content-Length over it gets 413 first: test_http_openai);
- a text/plain body: 415; a key given twice, a \\u0000 in a string: 400 naming it -- as the
  native protocol refuses them;
- a `resume` on the native protocol whose keys differ from the request it resumes (still
  running): refused with bad_request;
- HTTPS: `--http-tls-cert/--http-tls-key` with a self-signed certificate made by openssl:
  a chat completion over TLS, verified against that certificate, and plain HTTP to the same
  port gets no HTTP answer.
Process mode (the http actor's limits are topology options); HTTPS in thread mode.  Exit 0 pass, 1 fail, 77 skip."""
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

CHAT = "/v1/chat/completions"


def conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def closed_within(s, seconds, feed=None, every=1.0):
    """Seconds until the server closes s (feeding feed() every `every` s meanwhile), or
    None if still open after `seconds`."""
    t0 = time.time()
    s.settimeout(0.1)
    next_feed = t0
    while time.time() - t0 < seconds:
        if feed and time.time() >= next_feed:
            try:
                feed()
            except OSError:
                return time.time() - t0
            next_feed += every
        try:
            if s.recv(4096) == b"":
                return time.time() - t0
        except socket.timeout:
            pass
        except OSError:
            return time.time() - t0
    return None


def response(s, timeout=10):
    """(status, body) of the first response on s."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(4096)
        except ConnectionResetError:  # closed after its answer, before we read it all
            chunk = b""
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head else 0
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return status, json.loads(body) if body else None


def post(port, body, ctype="application/json"):
    s = conn(port)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
              % (CHAT.encode(), ctype.encode(), len(raw)) + raw)
    r = response(s)
    s.close()
    return r


def tls_case():
    d = tempfile.mkdtemp(prefix="strata-tls-")
    cert, key = d + "/cert.pem", d + "/key.pem"
    try:
        p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                            "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", key, "-out", cert], capture_output=True, timeout=60)
    except FileNotFoundError:
        u.testenv.skip("openssl is not installed (it makes the test certificate)")
    u.check(p.returncode == 0, "openssl: %s" % p.stderr.decode(errors="replace"))
    hport = u.free_port()
    try:
        with u.Server(["--http", "127.0.0.1:%d" % hport, "--http-tls-cert", cert,
                       "--http-tls-key", key, "--threads", "1"]):
            ctx = ssl.create_default_context(cafile=cert)
            u.wait_for(lambda: tls_get(hport, ctx, "/readyz") == 200, 30, "HTTPS /readyz 200")
            c = http.client.HTTPSConnection("127.0.0.1", hport, context=ctx, timeout=60)
            c.request("POST", CHAT, body=json.dumps({
                "model": u.MODEL_ID, "messages": [{"role": "user", "content": u.PROMPTS[0]}],
                "max_tokens": 8, "temperature": 0}), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read())
            c.close()
            u.check(r.status == 200 and body["choices"][0]["message"]["content"],
                    "chat over HTTPS: %d %r" % (r.status, body))
            plain = conn(hport)
            plain.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            plain.settimeout(5)
            try:
                got = plain.recv(4096)
            except (socket.timeout, OSError):
                got = b""
            plain.close()
            u.check(not got.startswith(b"HTTP/1.1 200"), "plain HTTP on the TLS port: %r" % got[:40])
            print("HTTPS: a chat completion over TLS (certificate verified); plain HTTP on the "
                  "port gets no HTTP answer")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def tls_get(port, ctx, path):
    try:
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        c.request("GET", path)
        st = c.getresponse().status
        c.close()
        return st
    except OSError:
        return 0


def main():
    d = tempfile.mkdtemp(prefix="strata-hard-")
    port, hport = u.free_port(), u.free_port()
    path = u.process_topology(d, port, opts={
        "http": "listen=127.0.0.1:%d header_timeout_s=2 body_timeout_s=2 max_per_ip=4 "
                "max_body=1024 timeout_s=30" % hport}, extra=("http",))
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    try:
        with s:
            u.wait_for(lambda: u.health(s.endpoint)["ok"], 30, "health ok")
            # slow headers
            c = conn(hport)
            c.sendall(b"POST " + CHAT.encode() + b" HTTP/1.1\r\n")
            hdr = iter(b"X-Slow: " + b"a" * 200)
            t = closed_within(c, 6, lambda: c.sendall(bytes([next(hdr)])), every=1.0)
            c.close()
            u.check(t is not None and 1.5 <= t <= 4.0,
                    "slow headers: closed after %s s (header_timeout_s 2)" % t)
            print("slow headers (a byte a second): closed after %.1f s" % t)
            # slow body
            c = conn(hport)
            c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 200\r\n\r\n" % CHAT.encode())
            tb = closed_within(c, 6, lambda: c.sendall(b" "), every=0.3)
            c.close()
            u.check(tb is not None and tb <= 4.0, "slow body: closed after %s s" % tb)
            print("slow body (a byte every 0.3 s): closed after %.1f s" % tb)
            # connections per address
            held = [conn(hport) for _ in range(4)]
            extra = conn(hport)
            te = closed_within(extra, 3)
            u.check(te is not None, "a 5th connection from one address stayed open (max_per_ip 4)")
            for x in held + [extra]:
                x.close()
            print("max_per_ip 4: a 5th connection closed after %.2f s" % te)
            # a chunked body is cut as soon as it passes max_body (libmicrohttpd cannot answer
            # mid-body), while the client is still sending -- ended or never ended (a
            # Content-Length over it gets 413 before any byte: test_http_openai)
            for ending in (True, False):
                c = conn(hport)
                c.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n" % CHAT.encode())
                sent = [0]

                def chunk():
                    c.sendall(b"190\r\n" + b"x" * 400 + b"\r\n")  # 400 bytes
                    sent[0] += 400
                t = closed_within(c, 5, chunk, every=0.2)
                if ending and t is None:
                    c.sendall(b"0\r\n\r\n")
                c.close()
                u.check(t is not None and sent[0] <= 2400,
                        "chunked over max_body (%s): open after %d bytes sent"
                        % ("to end" if ending else "never ended", sent[0]))
                print("chunked body over max_body 1024: cut after %d bytes sent (%.1f s)"
                      % (sent[0], t))
            # media type, duplicate keys, NUL
            ok_body = {"model": u.MODEL_ID, "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 2}
            st, body = post(hport, ok_body, "text/plain")
            u.check(st == 415, "text/plain: %d %r" % (st, body))
            dup = b'{"model": "%s", "max_tokens": 2, "max_tokens": 3, "messages": [{"role": ' \
                  b'"user", "content": "hi"}]}' % u.MODEL_ID.encode()
            st, body = post(hport, dup)
            u.check(st == 400 and "max_tokens" in body["error"]["message"], "duplicate key: %d %r"
                    % (st, body))
            nul = b'{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": ' \
                  b'"a\\u0000b"}]}' % u.MODEL_ID.encode()
            st, body = post(hport, nul)
            u.check(st == 400 and "NUL" in body["error"]["message"], "\\u0000: %d %r" % (st, body))
            esc = b'{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": ' \
                  b'"a\\\\u0000b"}]}' % u.MODEL_ID.encode()  # an escaped backslash: no NUL
            st, body = post(hport, esc)
            u.check(st == 200, "a literal backslash-u0000 text: %d %r" % (st, body))
            print("text/plain 415; a key twice and \\u0000 400 (naming them); a literal "
                  "'\\u0000' text accepted")
            # a resume that changes its request's keys
            cl = u.Client(zmq.Context.instance(), s.endpoint)
            g = u.chat_request("chg", u.PROMPTS[0], 200)
            cl.send(g)
            m = cl.recv(30)
            u.check(m["type"] == "token", "first event %r" % m)
            r = dict(g, type="resume", have=1, temperature=0.7)
            cl.send(r)
            while True:
                m = cl.recv(60)
                if m["type"] == "error":
                    break
                u.check(m["type"] == "token", "while waiting for the refusal: %r" % m)
            u.check(m["code"] == "bad_request" and "unchanged" in m["message"],
                    "changed resume: %r" % m)
            cl.close()
            print("a resume whose temperature differs from the running request: bad_request")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    tls_case()
    print("ok")


if __name__ == "__main__":
    main()
