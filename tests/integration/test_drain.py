"""test_drain.py - `strata serve` drains on SIGTERM (issue 27, docs/OPERATIONS.md).

Thread mode, with the HTTP gateway.  4 streaming greedy chat requests (and a long one, its
end-of-turn tokens banned, that keeps the drain going) are in flight when the server gets
SIGTERM:
- within 2 s the probes say so: /readyz is 503 with status "draining" (and /livez still
  200), the native health says draining, not ready, in_flight 6;
- a new request is refused at once with error code "draining" (native) and 503 with
  Retry-After (HTTP);
- the 4 finish, every token once and in order, equal to `strata generate --chat --greedy`;
- the process exits 0 soon after the last one ends.
Then the grace running out: 2 long requests (end-of-turn tokens banned by logit_bias) on a
server with --drain-timeout 1 end with error "draining" after about a second, the server
exits 0, and each, resumed on a second server with the tokens it had (the client's side of
"handed to another host"), ends with exactly the tokens of the same request run there
uninterrupted.  Every process is stopped by PID.  Exit 0 pass, 1 fail, 77 skip."""
import http.client
import json
import signal
import struct
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

N, MAX_TOKENS = 4, 32
# tokens: the drain lasts seconds at ~400 tokens/s while the probes are read (a sanitizer
# build, TIMEOUT_SCALE 10, decodes ~10x slower: as many seconds with fewer tokens)
LONG = max(80, 800 // u.TIMEOUT_SCALE)
BAN_EOT = [{"token": 0, "bias": -100.0}, {"token": 2, "bias": -100.0}]


def http_post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(text or b"null")


def start_streams(ep, reqs):
    clients = []
    for m in reqs:
        c = u.Client(zmq.Context.instance(), ep)
        c.send(m)
        clients.append(c)
    return clients


def collect(clients, first_only=False, timeout=120, have=None):
    """{i: (tokens, final event or None)}; first_only: return once each has a token; have:
    the tokens each had from an earlier call (the indexes go on from there)."""
    toks = {i: list(have[i][0]) if have else [] for i in range(len(clients))}
    final = {}
    poller = zmq.Poller()
    for c in clients:
        poller.register(c.sock, zmq.POLLIN)
    by = {c.sock: i for i, c in enumerate(clients)}
    deadline = time.time() + timeout
    while len(final) < len(clients) and time.time() < deadline:
        if first_only and all(toks[i] or i in final for i in toks):
            break
        for sock, _ in poller.poll(50):
            i = by[sock]
            m = u.unpack(sock.recv())
            if m["type"] == "token":
                u.check(m["index"] == len(toks[i]), "request %d: index %d after %d tokens"
                        % (i, m["index"], len(toks[i])))
                toks[i].append(m["token"])
            else:
                final[i] = m
    return {i: (toks[i], final.get(i)) for i in toks}


def wait_exit(proc, timeout):
    try:
        return proc.wait(timeout)
    except Exception:
        proc.kill()
        proc.wait()
        raise AssertionError("strata serve did not exit within %d s of its drain" % timeout)


def drain_finishes():
    want = {i: u.reference(u.PROMPTS[i], MAX_TOKENS) for i in range(N)}
    hport = u.free_port()
    s = u.Server(["--http", "127.0.0.1:%d" % hport, "--drain-timeout", "30", "--threads", "1"])
    s.start()
    try:
        u.wait_for(lambda: u.http_get(hport, "/readyz")[0] == 200, 30, "/readyz 200")
        reqs = [u.chat_request("d%d" % i, u.PROMPTS[i], MAX_TOKENS) for i in range(N)]
        reqs.append(long_request(5, LONG))  # keeps the drain going while the probes are read
        clients = start_streams(s.endpoint, reqs)
        got = collect(clients, first_only=True)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        st = u.wait_for(lambda: (lambda r: r if r[0] == 503 and r[2]["status"] == "draining"
                                 else None)(u.http_get(hport, "/readyz")),
                        2 * u.TIMEOUT_SCALE, "/readyz 503 'draining' after SIGTERM")
        took = time.time() - t0
        u.check(st[2]["status"] == "draining", "readyz body %r" % st[2])
        u.check(u.http_get(hport, "/livez")[0] == 200, "/livez must stay 200 while draining")
        h = u.health(s.endpoint)
        u.check(h.get("draining") is True and h.get("ready") is False and h.get("in_flight", 0) >= 1,
                "native health while draining: %r" % {k: h.get(k) for k in
                                                       ("draining", "ready", "in_flight")})
        late = u.Client(zmq.Context.instance(), s.endpoint)
        m = late.call(u.chat_request("late", u.PROMPTS[7], 8))
        late.close()
        u.check(m["type"] == "error" and m["code"] == "draining", "a new request: %r" % m)
        code, hdrs, body = http_post(hport, "/v1/chat/completions", {
            "model": u.MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        u.check(code == 503 and "retry-after" in hdrs, "HTTP while draining: %d %r" % (code, body))
        rest = collect(clients, have=got)
        for c in clients:
            c.close()
        u.check(rest[N][1] is not None and rest[N][1]["type"] == "done" and len(rest[N][0]) == LONG,
                "the long request: %d tokens, %r" % (len(rest[N][0]), rest[N][1]))
        for i in range(N):
            toks, fin = rest[i]
            u.check(fin is not None and fin["type"] == "done", "request %d ended %r" % (i, fin))
            u.check(toks == want[i], "request %d differs from the reference\n  got  %s\n  want %s"
                    % (i, toks, want[i]))
        t_done = time.time()
        rc = wait_exit(s.proc, 15)
        u.check(rc == 0, "strata serve exited %d after its drain" % rc)
        print("drain: /readyz 503 'draining' %.2f s after SIGTERM; a new request refused "
              "(draining, HTTP 503 + Retry-After); 5/5 in flight finished, 4 equal to the reference; "
              "exit 0 %.1f s after the last" % (took, time.time() - t_done))
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def long_request(i, n):
    m = u.chat_request("g%d" % i, u.PROMPTS[8 + i], n)
    m["logit_bias"] = BAN_EOT
    return m


def grace_then_resume():
    n_tok = max(100, 1000 // u.TIMEOUT_SCALE)  # well past the 1 s grace (~600 tokens/s for two)
    a = u.Server(["--drain-timeout", "1", "--threads", "1"])
    a.start()
    try:
        clients = start_streams(a.endpoint, [long_request(i, n_tok) for i in range(2)])
        first = collect(clients, first_only=True)
        t0 = time.time()
        a.proc.send_signal(signal.SIGTERM)
        cut = collect(clients, timeout=30, have=first)
        for c in clients:
            c.close()
        took = time.time() - t0
        for i in range(2):
            toks, fin = cut[i]
            u.check(fin is not None and fin["type"] == "error" and fin["code"] == "draining",
                    "request %d at the grace's end: %r" % (i, fin))
            u.check(0 < len(toks) < n_tok, "request %d had %d tokens when cut" % (i, len(toks)))
        rc = wait_exit(a.proc, 15)
        u.check(rc == 0, "strata serve exited %d after the grace" % rc)
    finally:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()
    with u.Server(["--threads", "1"]) as b:
        # the two resumes and the two uninterrupted runs, batched together
        reqs = []
        for i in range(2):
            have = cut[i][0]
            r = long_request(i, n_tok)
            r.update(type="resume", have=len(have), tokens=struct.pack("<%di" % len(have), *have))
            reqs.append(r)
        reqs += [long_request(i, n_tok) for i in range(2)]
        got = collect(start_streams(b.endpoint, reqs), timeout=240,
                      have={0: (cut[0][0], None), 1: (cut[1][0], None), 2: ([], None),
                            3: ([], None)})
        for i in range(2):
            rest, fresh = got[i], got[2 + i]
            u.check(rest[1] and rest[1]["type"] == "done", "resume %d ended %r" % (i, rest[1]))
            u.check(rest[0] == fresh[0], "request %d resumed elsewhere differs from the same "
                    "request uninterrupted (cut at %d of %d)" % (i, len(cut[i][0]), n_tok))
    print("grace: 2 long requests ended with error 'draining' %.1f s after SIGTERM (grace 1 s), "
          "exit 0; resumed on another server from the tokens they had, each equal to the "
          "request run there uninterrupted" % took)


def main():
    drain_finishes()
    grace_then_resume()
    print("ok")


if __name__ == "__main__":
    main()
