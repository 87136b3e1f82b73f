"""test_faults.py - no request is lost when an actor process dies or hangs (issue 10).

Process mode (`strata serve --topology FILE`: one process per actor under the
supervisor), 8 concurrent streaming clients, two workers, the KV tier manager, the
prefetcher and an n-gram draft actor.  For each actor kind in turn, SIGKILL of its
process while the 8 requests stream: every request ends with `done`, its token
events come exactly once and in order (index 0, 1, 2, ...), and the tokens equal
`strata generate --chat --greedy`; every kill lands while requests are in flight, and a
worker's kill resumes some of them (frontend.resumed grows).  Seeded sampled requests interrupted by a worker
kill equal the same requests served without a fault.  SIGSTOP of a worker: its
requests move to the other worker within the hang timeout and complete; the
supervisor kills and restarts the stopped process.  Every process started is
stopped by PID (the serve process group on exit, and any stopped actor is
continued/killed in the finally block)."""
import os
import shutil
import signal
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

N_CLIENTS = 8
MAX_TOKENS = 40
# under a sanitizer build a forward step is many times slower, and the server's hang
# timeouts are TIMEOUT_SCALE times longer (hang_timeout_ms below is scaled by the build)
SLOW = u.TIMEOUT_SCALE
HANG_MS = 2000


def write_topology(d, port):
    return u.process_topology(d, port, opts={
        "supervisor": "hang_timeout_ms=%d" % HANG_MS,
        "frontend": "hang_timeout_ms=%d accept_ms=2000" % HANG_MS,
        "kvtier": "t1_blocks=512 t2_dir=none", "draft": "draft=ngram"},
        extra=("kvtier", "prefetcher", "draft"))


def pid_of(log, name):
    pids = u.actor_pids(log, name)
    return pids[-1] if pids else None


def request(i, sampled):
    m = u.chat_request("r%d" % i, u.PROMPTS[i], MAX_TOKENS)
    if sampled:
        m.update(temperature=0.8, top_k=40, top_p=0.95, seed=1000 + i)
    return m


def run_round(ep, sampled, fault, timeout=120 * SLOW):
    """8 streaming clients; fault() runs once every client has a token (or after
    `fault.early` s when set); fault.in_flight is then set to the requests without a
    final event at that moment.  Returns ({i: [token ids]}, {i: final event},
    {i: [indexes]})."""
    ctx = zmq.Context.instance()
    clients = [u.Client(ctx, ep) for _ in range(N_CLIENTS)]
    for i, c in enumerate(clients):
        c.send(request(i, sampled))
    poller = zmq.Poller()
    for c in clients:
        poller.register(c.sock, zmq.POLLIN)
    by_sock = {c.sock: i for i, c in enumerate(clients)}
    toks = {i: [] for i in range(N_CLIENTS)}
    idx = {i: [] for i in range(N_CLIENTS)}
    final = {}
    t_start = time.time()
    fired = fault is None
    deadline = t_start + timeout
    while len(final) < N_CLIENTS and time.time() < deadline:
        if not fired:
            early = getattr(fault, "early", None)
            if (early is not None and time.time() - t_start >= early) or \
                    (early is None and all(toks[i] or i in final for i in toks)):
                fault.in_flight = [i for i in toks if i not in final]
                fault()
                fired = True
        for sock, _ in poller.poll(20):
            i = by_sock[sock]
            m = u.unpack(sock.recv())
            if m["type"] == "token":
                idx[i].append(m["index"])
                toks[i].append(m["token"])
            elif m["type"] in ("done", "error"):
                final[i] = m
    for c in clients:
        c.close()
    return toks, final, idx


def check_round(what, toks, final, idx, want):
    for i in range(N_CLIENTS):
        m = final.get(i)
        u.check(m is not None, "%s: request %d got no final event (lost)" % (what, i))
        u.check(m["type"] == "done", "%s: request %d ended with %r" % (what, i, m))
        u.check(idx[i] == list(range(len(idx[i]))),
                "%s: request %d: indexes not 0..n-1 once each: %s" % (what, i, idx[i]))
        u.check(toks[i] == want[i], "%s: request %d differs from the reference\n  got  %s\n"
                "  want %s" % (what, i, toks[i], want[i]))


def main():
    d = tempfile.mkdtemp(prefix="strata-faults-")
    port = u.free_port()
    path = write_topology(d, port)
    greedy_ref = {i: u.reference(u.PROMPTS[i], MAX_TOKENS) for i in range(N_CLIENTS)}
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    stopped = []
    try:
        with s:
            ep = s.endpoint
            u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok")
            # the sampled reference: the same requests served without a fault
            toks, final, idx = run_round(ep, True, None)
            sampled_ref = dict(toks)
            check_round("sampled, no fault", toks, final, idx, sampled_ref)

            def kill(name, early=None):
                def fire():
                    pid = pid_of(s.read_log(), name)
                    fire.t = time.time()
                    os.kill(pid, signal.SIGKILL)
                fire.early = early
                return fire

            # the tokenizer and the router are killed while requests pass through
            # them (10 ms after they were sent), the others mid-stream
            def resumed():
                return u.stats(ep).get("frontend.resumed", 0)

            for name, early in (("worker0", None), ("worker1", None), ("tokenizer", 0.01),
                                ("router", 0.01), ("kvtier", None), ("prefetcher", None),
                                ("draft", None)):
                old = pid_of(s.read_log(), name)
                t0 = time.time()
                resumed0 = resumed()
                fault = kill(name, early)
                toks, final, idx = run_round(ep, False, fault)
                check_round("SIGKILL %s" % name, toks, final, idx, greedy_ref)
                n_resumed = resumed() - resumed0
                print("SIGKILL %-10s: %d in flight at the kill, 8/8 complete and equal to the "
                      "reference in %.1f s, resumed %d" % (name, len(fault.in_flight),
                                                         time.time() - t0, n_resumed))
                u.check(fault.in_flight, "SIGKILL %s: no request was in flight" % name)
                # a worker's requests are resumed elsewhere from their delivered tokens
                # (8 requests over 2 workers: each has some)
                u.check(n_resumed >= 1 or not name.startswith("worker"),
                        "SIGKILL %s hit no in-flight request (frontend.resumed +%d)"
                        % (name, n_resumed))
                u.wait_for(lambda: pid_of(s.read_log(), name) != old, 15 * SLOW,
                           "%s restarted" % name)
                u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok after %s" % name)

            resumed0 = resumed()
            toks, final, idx = run_round(ep, True, kill("worker1"))
            check_round("sampled, SIGKILL worker1", toks, final, idx, sampled_ref)
            n_resumed = resumed() - resumed0
            u.check(n_resumed >= 1, "sampled SIGKILL worker1 resumed no request")
            print("SIGKILL worker1 (seeded sampling): %d resumed, 8/8 equal to the fault-free "
                  "run" % n_resumed)
            u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok")

            # a hang: SIGSTOP worker0 mid-stream
            old = pid_of(s.read_log(), "worker0")

            def stop():
                stopped.append(old)
                stop.t = time.time()
                os.kill(old, signal.SIGSTOP)
            toks, final, idx = run_round(ep, False, stop)
            took = time.time() - stop.t
            check_round("SIGSTOP worker0", toks, final, idx, greedy_ref)
            # the requests may all have ended before the timeout (none was on worker0, or
            # they finished): the hang is noticed all the same, within the timeout
            def noticed():
                st = u.stats(ep)
                sup = "worker0 hung (no heartbeat" in s.read_log()
                return (sup, st.get("frontend.workers_hung", 0)) if sup or \
                    st.get("frontend.workers_hung", 0) >= 1 else None
            by_supervisor, by_frontend = u.wait_for(noticed, HANG_MS * SLOW / 1000 + 5,
                                                    "the hang to be noticed")
            print("SIGSTOP worker0: 8/8 complete %.1f s after the stop (hang timeout %.1f s); "
                  "noticed by the supervisor: %s, by the frontend: %d"
                  % (took, HANG_MS * SLOW / 1000, by_supervisor, by_frontend))
            new = u.wait_for(lambda: (lambda p: p if p != old else None)(
                pid_of(s.read_log(), "worker0")), 10 * SLOW + HANG_MS * SLOW / 1000,
                "the supervisor to restart the stopped worker0")
            print("the supervisor replaced the stopped worker0 (pid %d -> %d)" % (old, new))
            u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok after the hang")
    finally:
        for pid in stopped:  # never leave a stopped process behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
