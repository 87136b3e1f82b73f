"""test_serve_process.py - `strata serve --topology FILE` (process mode: one
process per actor over ipc://, under the supervisor): greedy outputs of 16
concurrent requests equal `strata generate --greedy`; SIGKILL of a worker
process mid-stream: its request is resumed and completes with every token once,
in order, equal to an uninterrupted run; health reports the worker (restarting
or unhealthy) before the supervisor has restarted it, and it serves again (the waits
bound liveness, generously: no speed is asserted);
SIGTERM stops every process."""
import os
import shutil
import signal
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

MAX_TOKENS = 24
LONG_TOKENS = 160


def pid_of(log, name):
    pids = u.actor_pids(log, name)
    return pids[-1] if pids else None


def state_of(ep, name):
    for a in u.health(ep)["actors"]:
        if a["name"] == name:
            return a["state"]
    return None


def main():
    d = tempfile.mkdtemp(prefix="strata-topo-")
    port = u.free_port()
    # a kill, not a hang, is under test: long hang timeouts, so that a worker slowed by a
    # busy machine (2 shared cores) is not also called hung, which would move its requests
    # and add worker_down events beyond the one the kill causes (test_faults and
    # test_supervisor test the hang timeouts)
    path = u.process_topology(d, port, opts={"supervisor": "hang_timeout_ms=30000",
                                             "frontend": "hang_timeout_ms=30000"})
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    with s:
        ep = s.endpoint
        u.wait_for(lambda: u.health(ep)["ok"], 30 * u.TIMEOUT_SCALE, "health ok")
        log = s.read_log()
        pids = {n: pid_of(log, n) for n in ("frontend", "tokenizer", "router", "worker0",
                                            "worker1")}
        print("actor processes:", pids)
        u.check(all(pids.values()) and len(set(pids.values())) == 5, "one process per actor")

        t0 = time.time()
        res = u.run_concurrent(ep, u.PROMPTS, MAX_TOKENS)
        print("16 concurrent requests: %.1f s" % (time.time() - t0))
        bad = []
        for i, p in enumerate(u.PROMPTS):
            toks, done = res[i]
            u.check(done["type"] == "done", "request %d failed: %r" % (i, done))
            if toks != u.reference(p, MAX_TOKENS):
                bad.append(i)
        if bad:
            print("greedy mismatches (process mode):", bad)

        # two long requests, one per worker (least-loaded dispatch), then kill worker1:
        # its request goes on on worker0 (or the restarted worker1) from the tokens
        # already delivered; both complete, each token exactly once, in order, and
        # the text equals an uninterrupted greedy run
        ctx = zmq.Context.instance()
        cs = [u.Client(ctx, ep) for _ in range(2)]
        long_prompts = ["Write a very long story about a dragon.",
                        "Write a very long story about a lighthouse keeper."]
        for i, c in enumerate(cs):
            c.send(u.chat_request("long%d" % i, long_prompts[i], LONG_TOKENS))
        got = {0: [], 1: []}
        for i, c in enumerate(cs):
            m = c.recv(60)
            u.check(m["type"] == "token", "long request started: %r" % m)
            got[i].append(m)
        st = u.stats(ep)
        print("dispatched:", st.get("router.dispatched.worker0"), st.get("router.dispatched.worker1"))
        t0 = time.time()
        os.kill(pids["worker1"], signal.SIGKILL)
        seen = u.wait_for(lambda: (lambda st: st if st != "ready" else None)(
            state_of(ep, "worker1")), 30 * u.TIMEOUT_SCALE, "health to report worker1")
        print("health reports worker1 %s after %.2f s" % (seen, time.time() - t0))
        final = {}
        deadline = time.time() + 90
        while len(final) < 2 and time.time() < deadline:
            for i, c in enumerate(cs):
                if i in final or not c.sock.poll(50):
                    continue
                m = c.recv(1)
                if m["type"] == "token":
                    got[i].append(m)
                else:
                    final[i] = m
        for c in cs:
            c.close()
        for i in range(2):
            u.check(final.get(i, {}).get("type") == "done",
                    "long%d completed after the kill: %r" % (i, final.get(i)))
            idx = [m["index"] for m in got[i]]
            u.check(idx == list(range(len(idx))), "long%d: every index once, in order" % i)
            ref = u.reference(long_prompts[i], LONG_TOKENS)
            u.check([m["token"] for m in got[i]] == ref,
                    "long%d equals the uninterrupted greedy run" % i)
        st = u.stats(ep)
        print("resumed after the kill: %s" % {k: v for k, v in st.items()
                                               if k.startswith("frontend.resumed")})
        u.check(st.get("frontend.resumed", 0) >= 1, "a request was resumed: %r" % st)
        u.wait_for(lambda: pid_of(s.read_log(), "worker1") != pids["worker1"],
                   30 * u.TIMEOUT_SCALE, "worker1 restarted")
        u.wait_for(lambda: u.health(ep)["ok"], 30, "health ok again")
        print("worker1 restarted and healthy after %.2f s" % (time.time() - t0))
        st = u.stats(ep)
        u.check(st.get("router.worker_down", 0) == 1, "router counted worker_down: %r" % st)
        # the restarted worker serves again: enough requests reach both workers
        res = u.run_concurrent(ep, u.PROMPTS[:4], 8)
        u.check(all(r[1]["type"] == "done" for r in res.values()), "served after restart")
        st = u.wait_for(lambda: (lambda st: st if st.get("worker1.requests") else None)(
            u.stats(ep)), 30 * u.TIMEOUT_SCALE, "the restarted worker1 to take requests")
        new_pid = pid_of(s.read_log(), "worker1")
    # SIGTERM stopped every actor process
    for n, p in list(pids.items()) + [("worker1 (restarted)", new_pid)]:
        u.check(not os.path.exists("/proc/%d" % p) or
                open("/proc/%d/stat" % p).read().split()[2] == "Z", "%s stopped" % n)
    shutil.rmtree(d, ignore_errors=True)
    u.check(not bad, "greedy mismatches for requests %s" % bad)
    print("ok")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
