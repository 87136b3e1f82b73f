"""test_moe_experts.py - MoE experts on expert actors (docs/MOE.md, "Expert actors and
dispatch").  With a synthetic MoE GGUF (tests/oracle/make_moe_gguf.py): greedy output
of the service with 2 expert actors equals `strata generate` on the local MoE forward,
in thread mode (static and load-aware dispatch, no capacity limit) and in process mode;
replica failover: 2 expert actor processes both hosting every expert, SIGKILL of one
once every one of 8 requests has streamed its first tokens: every request completes
with the same greedy tokens.  After each server stops, no actor process it started
(restarts included) is running; a leftover is killed by its PID and fails the test."""
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import testenv
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "oracle", "make_moe_gguf.py")
N_PROMPTS = 4
MAX_TOKENS = 24
FAILOVER_TOKENS = 160  # long enough that the kill lands mid-stream
SLOW = u.TIMEOUT_SCALE


def make_model(d):
    """A synthetic MoE GGUF with 8 experts, 2 per token (the moe branch's generator)."""
    if not os.path.exists(GEN):
        testenv.skip("no tests/oracle/make_moe_gguf.py (synthetic MoE GGUF generator)")
    path = os.path.join(d, "moe.gguf")
    out = subprocess.run([sys.executable, GEN, path, "--experts", "8", "--used", "2"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("make_moe_gguf.py failed: " + out.stderr)
    return path


def reference(model, prompt, n):
    out = subprocess.run([u.BIN, "generate", "-m", model, "--chat", "-p", prompt, "-n",
                          str(n), "--greedy", "--print-ids", "-t", "1"],
                         capture_output=True, text=True, timeout=300 * SLOW)
    if out.returncode != 0:
        raise RuntimeError("strata generate failed: " + out.stderr)
    return [int(x) for x in out.stdout.split()]


def same_as_reference(res, refs, what):
    for i, (toks, done) in res.items():
        u.check(done["type"] == "done", "%s: request %d ended with %s" % (what, i, done))
        u.check(toks == refs[i], "%s: request %d: %s != reference %s" % (what, i, toks, refs[i]))
    print("ok   %s: %d requests equal strata generate" % (what, len(res)))


def counter(c, name):
    return sum(v for k, v in c.items() if k == name)


@contextlib.contextmanager
def serving(args, ready_timeout):
    """u.Server, and after it stopped: none of the actor processes it started (restarts
    included, from its log) is still running; a leftover is killed by its PID and fails
    the test."""
    s = u.Server(args, ready_timeout=ready_timeout)
    pids, ok = [], False
    try:
        s.start()
        yield s
        ok = True
    finally:
        if s.proc:
            pids = u.actor_pids(s.read_log())
        rc = s.stop()
        left = [p for p in pids if u.alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        if ok:
            u.check(not left, "actor pids %s still ran after strata serve stopped" % left)
            u.check(rc == 0, "strata serve exited with %s:\n%s" % (rc, s.read_log()))
            os.unlink(s.log.name)


def thread_mode(model, refs, dispatch):
    args = ["-m", model, "--experts", "2", "--no-tiers", "-t", "1", "--moe-dispatch", dispatch,
            "--moe-capacity", "0"]
    with serving(args, 120 * SLOW) as s:
        res = u.run_concurrent(s.endpoint, u.PROMPTS[:N_PROMPTS], MAX_TOKENS, 300 * SLOW)
        same_as_reference(res, refs, "threads, %s dispatch" % dispatch)
        c = u.stats(s.endpoint)
        u.check(c.get("expert0.requests", 0) > 0 and c.get("expert1.requests", 0) > 0,
                "both expert actors served requests")
        u.check(c.get("worker0.moe.rows", 0) > 0, "the worker sent its MoE rows out")
        u.check(c.get("worker0.moe.local_rows", 0) == 0, "no row was computed in the worker")
        u.check(c.get("worker0.moe.overflow", 0) == 0, "no capacity: no overflow")


def topology(d, port, model, expert_opts, defaults_extra=""):
    return u.process_topology(
        d, port, defaults="threads=1 max_batch=16 kv_blocks=512 model=%s %s" % (model,
                                                                                defaults_extra),
        opts={"supervisor": "hang_timeout_ms=3000", "router": "moe_capacity=0",
              "frontend": "hang_timeout_ms=3000", "expert0": expert_opts,
              "expert1": expert_opts, "worker0": "expert_timeout_ms=500",
              "worker1": "expert_timeout_ms=500"},
        extra=("expert0", "expert1"))


def process_mode(model, refs, d):
    port = u.free_port()
    path = topology(d, port, model, "")
    with serving(["--topology", path], 180 * SLOW) as s:
        s.endpoint = "tcp://127.0.0.1:%d" % port
        res = u.run_concurrent(s.endpoint, u.PROMPTS[:N_PROMPTS], MAX_TOKENS, 300 * SLOW)
        same_as_reference(res, refs, "processes, round-robin experts")
        c = u.stats(s.endpoint)
        u.check(c.get("expert0.rows", 0) > 0 and c.get("expert1.rows", 0) > 0,
                "both expert actor processes served rows")
        u.check(sum(c.get("worker%d.moe.local_rows" % w, 0) for w in (0, 1)) == 0,
                "no row was computed in a worker")


def stream_and_kill(endpoint, prompts, max_tokens, victim, timeout):
    """Send every prompt at once; once every request has streamed 2 tokens, SIGKILL
    victim.  Returns ({i: (tokens, done)}, requests already finished at the kill)."""
    ctx = zmq.Context.instance()
    clients = [u.Client(ctx, endpoint) for _ in prompts]
    for i, (c, p) in enumerate(zip(clients, prompts)):
        c.send(u.chat_request("r%d" % i, p, max_tokens))
    poller = zmq.Poller()
    for c in clients:
        poller.register(c.sock, zmq.POLLIN)
    by_sock = {c.sock: i for i, c in enumerate(clients)}
    toks = {i: [] for i in range(len(prompts))}
    result, done_at_kill = {}, None
    deadline = time.time() + timeout
    try:
        while len(result) < len(prompts):
            if time.time() > deadline:
                raise TimeoutError("only %d of %d requests finished" % (len(result),
                                                                        len(prompts)))
            for sock, _ in poller.poll(1000):
                i = by_sock[sock]
                m = u.unpack(sock.recv())
                if m["type"] == "token":
                    toks[i].append(m["token"])
                elif m["type"] in ("done", "error"):
                    result[i] = (toks[i], m)
            if done_at_kill is None and all(len(t) >= 2 for t in toks.values()):
                os.kill(victim, signal.SIGKILL)
                done_at_kill = len(result)
    finally:
        for c in clients:
            c.close()
    u.check(done_at_kill is not None, "expert0 was killed while the requests streamed")
    return result, done_at_kill


def failover(model, refs, d):
    """Both expert actors host every expert; expert0 is SIGKILLed once every request
    has streamed its first tokens: the in-flight rows time out or follow the router's
    new table to expert1, and every request ends as the reference."""
    port = u.free_port()
    path = topology(d, port, model, "experts=0-7")
    n = len(refs)
    prompts = [u.PROMPTS[i % n] for i in range(8)]
    with serving(["--topology", path], 180 * SLOW) as s:
        s.endpoint = "tcp://127.0.0.1:%d" % port
        victim = u.actor_pids(s.read_log(), "expert0")[-1]
        res, done_at_kill = stream_and_kill(s.endpoint, prompts, FAILOVER_TOKENS, victim,
                                            300 * SLOW)
        u.check(done_at_kill < len(prompts), "requests were still running at the kill")
        same_as_reference(res, [refs[i % n] for i in range(8)],
                          "processes, expert0 SIGKILLed mid-stream")
        c = u.stats(s.endpoint)
        moved = sum(c.get("worker%d.moe.%s" % (w, k), 0) for w in (0, 1)
                    for k in ("timeouts", "resent", "local_rows"))
        down = c.get("router.moe.expert_down", 0)
        served = c.get("expert1.rows", 0)
        print("ok   failover: %d of 8 requests done at the kill; %d timeouts + resends + "
              "local rows, router saw %d expert_down, expert1 served %d rows"
              % (done_at_kill, moved, down, served))
        u.check(moved + down > 0, "the failover was exercised (a resend, a timeout or a "
                "table without expert0)")
        u.wait_for(lambda: len(u.actor_pids(s.read_log(), "expert0")) > 1, 30 * SLOW,
                   "the supervisor restarts expert0")


def main():
    with tempfile.TemporaryDirectory(prefix="strata-moe-") as d:
        model = make_model(d)
        long_refs = [reference(model, p, FAILOVER_TOKENS) for p in u.PROMPTS[:N_PROMPTS]]
        refs = [reference(model, p, MAX_TOKENS) for p in u.PROMPTS[:N_PROMPTS]]
        thread_mode(model, refs, "static")
        thread_mode(model, refs, "load")
        process_mode(model, refs, d)
        failover(model, long_refs, d)
    print("all ok")


if __name__ == "__main__":
    main()
