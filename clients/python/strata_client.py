#!/usr/bin/python3
"""strata_client.py - a small Python client for a strata server (docs/PROTOCOL.md).

Needs Debian's python3-zmq and python3-msgpack (import zmq, msgpack).

    from strata_client import StrataClient
    with StrataClient("tcp://127.0.0.1:5555") as c:
        for ev in c.generate("Once upon a time", max_tokens=32):
            if ev["type"] == "token":
                print(ev["text"], end="", flush=True)
        print(c.stats())

As a command:  python3 clients/python/strata_client.py [--chat] "prompt" [-n 64] ...
(--chat sends the prompt as a user message, rendered with the model's chat template:
what an instruct model expects; without it the text goes to the model as is.)

A lost connection is survived: when the DEALER's monitor sees the connection drop
(ZMTP heartbeats notice a silent dead link within 3 s) and come back (the frontend
restarted), generate() sends a "resume" with the token events it has ("have") and their
ids ("tokens"; have = 0 when stream is false), drops events it already yielded, and goes
on: each token index is yielded once, in order, and the output equals an uninterrupted
run.  client.resumes counts the resumes of the last generate(); the timeout still bounds
every wait (no event of the request for `timeout` seconds raises StrataError "timeout").
"""
import argparse
import itertools
import os
import struct
import sys
import time

try:
    import msgpack
    import zmq
    import zmq.auth
    from zmq.utils.monitor import recv_monitor_message
except ImportError as e:
    sys.exit(f"strata_client: {e}: needs Debian's python3-zmq and python3-msgpack "
             f"(run it with /usr/bin/python3 if another python3 comes first on PATH)")

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"
MAX_FRAME = 1 << 20
HEARTBEAT_IVL_MS = 1000      # ZMTP heartbeats: a silent dead link is noticed
HEARTBEAT_TIMEOUT_MS = 3000  # after this long


class StrataError(Exception):
    """The server answered with an error message (code: bad_request, overloaded,
    not_found, internal, context_length_exceeded), or did not answer in time (code:
    timeout)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class StrataClient:
    def __init__(self, endpoint=DEFAULT_ENDPOINT, timeout=30.0, server_key=None,
                 client_key=None):
        """server_key, client_key: for a client endpoint that requires CURVE
        (docs/SECURITY.md): the server's public zcert file and this client's
        secret zcert file (NAME.key_secret), as `strata keygen` writes them."""
        self.timeout_ms = int(timeout * 1000)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        if (server_key is None) != (client_key is None):
            raise ValueError("CURVE needs both server_key and client_key")
        if server_key is not None:
            if not zmq.has("curve"):
                raise RuntimeError("this libzmq has no CURVE")
            self.sock.curve_serverkey = zmq.auth.load_certificate(server_key)[0]
            pub, sec = zmq.auth.load_certificate(client_key)
            if sec is None:
                raise ValueError("%s has no secret key (use NAME.key_secret)" % client_key)
            self.sock.curve_publickey, self.sock.curve_secretkey = pub, sec
        # the monitor before connect, so that it sees the first handshake too
        self.mon = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED
                                                | zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.up = False  # a handshake succeeded since the last disconnect
        self.conn = 0    # handshakes so far: the number of the current connection
        self.sock.connect(endpoint)
        self._ids = itertools.count(1)
        self.current = None  # id of the generation in progress
        self.resumes = 0        # resumes of the last generate()
        self.resumed_after = 0  # token events it had at its last resume
        self._cancelled = None  # id cancel() was called for (a resume cancels it again)

    def close(self):
        self.sock.disable_monitor()
        self.mon.close(0)
        self.sock.close(0)
        self.ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- transport
    def _send(self, msg):
        msg.setdefault("v", 1)
        self.sock.send(msgpack.packb(msg, use_bin_type=True))

    def _recv(self):
        if not self.sock.poll(self.timeout_ms):
            raise StrataError("timeout", f"no answer from the server within "
                              f"{self.timeout_ms / 1000:.1f} s (is it running?)")
        return msgpack.unpackb(self.sock.recv(), raw=False)

    def _monitor(self):
        """Read the monitor events that are there into up / conn; the number of
        handshakes among them."""
        handshakes = 0
        while self.mon.poll(0):
            ev = recv_monitor_message(self.mon)["event"]
            if ev == zmq.EVENT_DISCONNECTED:
                self.up = False
            elif ev == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.up = True
                self.conn += 1
                handshakes += 1
        return handshakes

    # ---- requests
    def generate(self, prompt=None, messages=None, stream=True, **params):
        """Start a generation and yield its events (dicts): "token" events when
        stream is true, then one "done".  An "error" raises StrataError.
        params: max_tokens, temperature, top_k, top_p, min_p, repeat_penalty,
        repeat_last_n, seed, stop (list of str)."""
        rid = f"py{os.getpid()}-{next(self._ids)}"
        req = {"type": "generate", "id": rid, "stream": bool(stream)}
        if messages is not None:
            req["messages"] = list(messages)
        else:
            req["prompt"] = prompt if prompt is not None else ""
        req.update({k: v for k, v in params.items() if v is not None})
        self.resumes = self.resumed_after = 0
        # the connection the request goes out on: the current one, or the next when
        # the current one is down (the DEALER holds the frame until it is up)
        self._monitor()
        conn = self.conn if self.up else self.conn + 1
        self._send(req)
        self.current = rid
        toks = []  # ids of the token events yielded: indexes 0..len-1
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.mon, zmq.POLLIN)
        deadline = time.monotonic() + self.timeout_ms / 1000
        try:
            while True:
                left = deadline - time.monotonic()
                ready = dict(poller.poll(max(0, int(left * 1000)))) if left > 0 else {}
                if not ready:
                    raise StrataError("timeout", f"no answer from the server within "
                                      f"{self.timeout_ms / 1000:.1f} s (is it running?)")
                # every event that is there first, so that a resume counts all of them
                while self.sock.poll(0):
                    ev = msgpack.unpackb(self.sock.recv(), raw=False)
                    if ev.get("id") not in (rid, None):
                        continue  # a late event of an earlier request
                    deadline = time.monotonic() + self.timeout_ms / 1000
                    t = ev.get("type")
                    if t == "error":
                        raise StrataError(ev.get("code"), ev.get("message"))
                    if t == "token":
                        i = ev.get("index")
                        if i < len(toks):
                            continue  # resent after a resume: yielded already
                        if i != len(toks):
                            raise StrataError("protocol", "token event %d of %r out of order "
                                              "(expected %d)" % (i, rid, len(toks)))
                        toks.append(ev["token"])
                        yield ev
                    elif t == "done":
                        yield ev
                        return
                # a new connection that the request did not go out on: resume it there
                if self.mon in ready and self._monitor() and self.up and self.conn != conn:
                    conn = self.conn
                    self.resumes += 1
                    have = self.resumed_after = len(toks) if stream else 0
                    res = dict(req, type="resume", have=have)
                    if have:
                        res["tokens"] = struct.pack("<%di" % have, *toks)
                    self._send(res)
                    if self._cancelled == rid:
                        self.cancel(rid)
        finally:
            self.current = None

    def cancel(self, rid=None):
        """Cancel request rid (default: the generation in progress); the generate
        iterator then ends with a done whose finish_reason is "cancelled"."""
        rid = rid or self.current
        if rid:
            self._cancelled = rid
            self._send({"type": "cancel", "id": rid})

    def _query(self, typ, want):
        self._send({"type": typ})
        while True:
            ev = self._recv()
            if ev.get("type") == want:
                return ev
            if ev.get("type") == "error" and ev.get("id") is None:
                raise StrataError(ev.get("code"), ev.get("message"))

    def stats(self):
        """The server's counters as a list of (name, value)."""
        return sorted(self._query("stats", "stats_reply")["counters"].items())

    def health(self):
        """(ok, actors): ok is true when every actor is ready; actors a list of
        dicts {name, state, last_seen_ms}."""
        r = self._query("health", "health_reply")
        return r["ok"], r["actors"]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Talk to a running strata server.")
    ap.add_argument("prompt", nargs="*", help="prompt (default: stdin)")
    ap.add_argument("-e", "--endpoint", default=DEFAULT_ENDPOINT)
    ap.add_argument("-n", "--max-tokens", type=int, default=None)
    ap.add_argument("--chat", action="store_true", help="send as a user chat message")
    ap.add_argument("--temp", type=float, default=None)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--min-p", type=float, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--stop", action="append", default=None)
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--stats", action="store_true")
    ap.add_argument("--health", action="store_true")
    ap.add_argument("--timeout", type=float, default=30.0)
    a = ap.parse_args(argv)
    try:
        with StrataClient(a.endpoint, a.timeout) as c:
            if a.stats:
                for name, value in c.stats():
                    print(name, value)
                return 0
            if a.health:
                ok, actors = c.health()
                print("ok" if ok else "not ok")
                for x in actors:
                    print(f"{x['name']:16} {x['state']:10} last seen {x['last_seen_ms']} ms ago")
                return 0 if ok else 1
            prompt = " ".join(a.prompt) if a.prompt else sys.stdin.read()
            kw = dict(max_tokens=a.max_tokens, temperature=a.temp, top_k=a.top_k,
                      top_p=a.top_p, min_p=a.min_p, seed=a.seed, stop=a.stop)
            if a.chat:
                events = c.generate(messages=[{"role": "user", "content": prompt}],
                                    stream=not a.no_stream, **kw)
            else:
                events = c.generate(prompt, stream=not a.no_stream, **kw)
            for ev in events:
                if ev["type"] == "token":
                    print(ev["text"], end="", flush=True)
                elif ev.get("text"):
                    print(ev["text"], end="")
            print()
            if c.resumes:
                print("strata_client: connection lost, resumed after %d tokens"
                      % c.resumed_after + (" (%d resumes)" % c.resumes if c.resumes > 1 else ""),
                      file=sys.stderr)
            if (ev.get("finish_reason") == "eos"
                    and ev.get("usage", {}).get("completion_tokens") == 0):
                print("strata_client: the model ended the answer at once (0 tokens)"
                      + ("" if a.chat else ": for an instruct model use the chat form (--chat)"),
                      file=sys.stderr)
            return 0
    except StrataError as e:
        print(f"strata_client: {e.message}" if e.code == "timeout"
              else f"strata_client: server error ({e.code}): {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
