#!/usr/bin/env python3
"""Priorities (issue 27; docs/OPERATIONS.md, "Priorities"): one worker with two batch slots,
saturated by four long low-priority streams (priority 10); a high-priority request (-10)
arriving then preempts one of them and gets its first token without waiting for a slot
(well within the time one low-priority request takes alone);
every request ends `done` with the same tokens as its run on the idle server (greedy and
seeded), the preempted ones included; the worker counts its preemptions; nobody starves
(every low-priority request finishes).  Over HTTP, `priority` is accepted and checked."""
import http.client
import json
import os
import sys
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402
import serve_util as u  # noqa: E402

LOW, HIGH, N_LOW, LONG = 10, -10, 4, 200


def req(rid, i, n, prio, seed=None):
    m = u.chat_request(rid, u.PROMPTS[i], n)
    m["priority"] = prio
    m["logit_bias"] = [{"token": 0, "bias": -100.0}, {"token": 2, "bias": -100.0}]  # run n
    if seed is not None:
        m.update(temperature=0.8, seed=seed)
    return m


def stream(ctx, ep, m):
    c = u.Client(ctx, ep)
    c.send(m)
    return c


def collect(clients, timeout):
    """{i: (tokens, first-token time, final event)} for every client."""
    poller = zmq.Poller()
    for c in clients:
        poller.register(c.sock, zmq.POLLIN)
    by = {c.sock: i for i, c in enumerate(clients)}
    out = {i: [[], None, None] for i in range(len(clients))}
    deadline = time.time() + timeout
    while time.time() < deadline and any(v[2] is None for v in out.values()):
        for sock, _ in poller.poll(100):
            i = by[sock]
            e = u.unpack(sock.recv())
            if e["type"] == "token":
                out[i][0].append(e["token"])
                if out[i][1] is None:
                    out[i][1] = time.time()
            elif e["type"] in ("done", "error"):
                out[i][2] = e
    for c in clients:
        c.close()
    return out


def main():
    if not os.path.exists(u.MODEL):
        testenv.skip("model not found: " + u.MODEL)
    ctx = zmq.Context.instance()
    hport = u.free_port()
    lows = [req("low%d" % i, i, LONG, LOW, seed=(i if i % 2 else None)) for i in range(N_LOW)]
    high = req("high", 7, 16, HIGH, seed=3)
    with u.Server(["--threads", "1", "--max-batch", "2", "--http", "127.0.0.1:%d" % hport]) as s:
        # the references: each alone on the idle server
        want, took = {}, {}
        for m in lows + [high]:
            t = time.time()
            got = collect([stream(ctx, s.endpoint, m)], 120 * u.TIMEOUT_SCALE)[0]
            took[m["id"]] = time.time() - t
            u.check(got[2]["type"] == "done", "reference %s: %r" % (m["id"], got[2]))
            want[m["id"]] = got[0]
        clients = [stream(ctx, s.endpoint, m) for m in lows]
        time.sleep(0.2)  # two run, two wait
        t_high = time.time()
        clients.append(stream(ctx, s.endpoint, high))
        res = collect(clients, 240 * u.TIMEOUT_SCALE)
        st = u.stats(s.endpoint)
        for i, m in enumerate(lows + [high]):
            toks, _, fin = res[i]
            u.check(fin is not None and fin["type"] == "done", "%s ended %r" % (m["id"], fin))
            u.check(toks == want[m["id"]], "%s differs from its idle run\n  got  %s\n  want %s"
                    % (m["id"], toks, want[m["id"]]))
        ttft_high = res[N_LOW][1] - t_high
        u.check(st.get("worker0.preempted", 0) >= 1, "no preemption counted: %r"
                % {k: v for k, v in st.items() if "preempt" in k})
        # without preemption it would wait for a slot: until a running low-priority request
        # ends, at least as long as one takes alone, less the 0.2 s it ran
        slot = min(took[m["id"]] for m in lows) - 0.2
        u.check(ttft_high < 0.5 * slot, "the high-priority request waited for a slot: TTFT "
                "%.2f s, a low-priority request alone takes %.2f s" % (ttft_high, slot + 0.2))
        # the native protocol: out of range is bad_request, naming the field
        bad = u.Client(ctx, s.endpoint).call(dict(req("bad", 0, 4, 101)))
        u.check(bad["type"] == "error" and bad["code"] == "bad_request" and
                "priority" in bad["message"], "priority 101: %r" % bad)
        # HTTP: the extension field, checked
        c = http.client.HTTPConnection("127.0.0.1", hport, timeout=60)
        for prio, code in ((-5, 200), (101, 400), ("high", 400)):
            c.request("POST", "/v1/chat/completions", body=json.dumps({
                "model": u.MODEL_ID, "max_tokens": 2, "priority": prio,
                "messages": [{"role": "user", "content": "hi"}]}),
                headers={"Content-Type": "application/json"})
            r = c.getresponse()
            body = r.read()
            u.check(r.status == code, "HTTP priority %r: %d %s" % (prio, r.status, body[:200]))
        c.close()
    print("priorities: a priority %d request among %d saturating priority-%d streams (2 slots) "
          "got its first token %.2f s after it arrived, by preempting (%d preemptions); all %d "
          "equal to their idle runs" % (HIGH, N_LOW, LOW, ttft_high,
                                        st.get("worker0.preempted", 0), N_LOW + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
