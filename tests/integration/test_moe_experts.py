"""test_moe_experts.py - MoE experts on expert actors (docs/MOE.md, "Expert actors and
dispatch").  With a synthetic MoE GGUF (tests/oracle/make_moe_gguf.py): greedy output
of the service with 2 expert actors equals `strata generate` on the local MoE forward,
in thread mode (static and load-aware dispatch, no capacity limit) and in process mode;
replica failover: 2 expert actor processes both hosting every expert, SIGKILL of one
while 8 requests stream: every request completes with the same greedy tokens.  Every
process started is stopped by PID (serve's process group; the killed actor is reaped
by its supervisor)."""
import os
import signal
import subprocess
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import testenv

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "oracle", "make_moe_gguf.py")
N_PROMPTS = 4
MAX_TOKENS = 24
SLOW = u.TIMEOUT_SCALE


def make_model(d):
    """A synthetic MoE GGUF with 8 experts, 2 per token (the moe branch's generator)."""
    if not os.path.exists(GEN):
        testenv.skip("no tests/oracle/make_moe_gguf.py (synthetic MoE GGUF generator)")
    path = os.path.join(d, "moe.gguf")
    out = subprocess.run([sys.executable, GEN, "--out", path, "--experts", "8", "--used", "2"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("make_moe_gguf.py failed: " + out.stderr)
    return path


def reference(model, prompt):
    out = subprocess.run([u.BIN, "generate", "-m", model, "--chat", "-p", prompt, "-n",
                          str(MAX_TOKENS), "--greedy", "--print-ids", "-t", "1"],
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


def thread_mode(model, refs, dispatch):
    args = ["-m", model, "--experts", "2", "--no-tiers", "-t", "1", "--moe-dispatch", dispatch,
            "--moe-capacity", "0"]
    with u.Server(args, ready_timeout=120 * SLOW) as s:
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
    with u.Server(["--topology", path], ready_timeout=180 * SLOW) as s:
        s.endpoint = "tcp://127.0.0.1:%d" % port
        res = u.run_concurrent(s.endpoint, u.PROMPTS[:N_PROMPTS], MAX_TOKENS, 300 * SLOW)
        same_as_reference(res, refs, "processes, round-robin experts")


def failover(model, refs, d):
    port = u.free_port()
    path = topology(d, port, model, "experts=0-7")
    prompts = [u.PROMPTS[i % N_PROMPTS] for i in range(8)]
    with u.Server(["--topology", path], ready_timeout=180 * SLOW) as s:
        s.endpoint = "tcp://127.0.0.1:%d" % port
        victim = u.actor_pids(s.read_log(), "expert0")[-1]
        import threading
        box = {}
        t = threading.Thread(target=lambda: box.update(
            r=u.run_concurrent(s.endpoint, prompts, MAX_TOKENS, 300 * SLOW)))
        t.start()
        time.sleep(1.0 * SLOW)  # the requests are streaming
        os.kill(victim, signal.SIGKILL)
        t.join(400 * SLOW)
        u.check("r" in box, "every request finished after expert0 was killed")
        same_as_reference(box["r"], [refs[i % N_PROMPTS] for i in range(8)],
                          "processes, expert0 SIGKILLed mid-stream")
        c = u.stats(s.endpoint)
        moved = sum(c.get("worker%d.moe.%s" % (w, k), 0) for w in (0, 1)
                    for k in ("timeouts", "resent", "local_rows"))
        down = c.get("router.moe.expert_down", 0)
        print("ok   failover: %d rows resent/timeouts/local, router saw %d expert_down"
              % (moved, down))
        u.wait_for(lambda: len(u.actor_pids(s.read_log(), "expert0")) > 1, 30 * SLOW,
                   "the supervisor restarts expert0")


def main():
    with tempfile.TemporaryDirectory(prefix="strata-moe-") as d:
        model = make_model(d)
        refs = [reference(model, p) for p in u.PROMPTS[:N_PROMPTS]]
        thread_mode(model, refs, "static")
        thread_mode(model, refs, "load")
        process_mode(model, refs, d)
        failover(model, refs, d)
    print("all ok")


if __name__ == "__main__":
    main()
