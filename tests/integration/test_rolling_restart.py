"""test_rolling_restart.py - planned restarts through the supervisor's control endpoint
(`strata ctl`, issue 27; docs/OPERATIONS.md, "Planned restarts").

Process mode, two workers, the control endpoint on an ipc:// file of mode 0600:
- `strata ctl status` lists the five actors ready, with the PIDs the supervisor started;
- `strata serve` refuses, before starting anything, a tcp:// control endpoint on a
  topology with CURVE keys, an endpoint of another scheme, and --ctl without --topology;
- bad input answers with one clear line, never a crash: an unknown actor, an unknown
  command, restart with no name or with a name and --all, no server at the endpoint (a
  missing socket file; a tcp:// endpoint nobody answers, within --timeout), and raw frames
  on the endpoint (not MessagePack, another message type, restart of nothing, two frames,
  a REQ client) -- and the supervisor answers status after them;
- 16 streaming greedy chat requests (and 2 seeded sampled ones) run on the idle server:
  the references (one of them also checked against `strata generate --greedy`);
- 18 clients (the Python client, which resumes after a lost connection) each send one
  request after another while `strata ctl restart worker0` drains and restarts worker0
  alone (its PID changes, the others do not), then worker1 with no grace (its requests cut
  and resumed on worker0 by the frontend), then again while `strata ctl restart --all`
  rolls every actor, workers first, the frontend last: every request ends with `done`,
  none lost, each token-for-token equal to its reference, and every actor has a new PID;
- `strata ctl drain` drains and stops the server (exit 0).
Every PID started is killed in the end.  Exit 0 pass, 1 fail, 77 skip."""
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
import strata_client  # noqa: E402

import zmq  # noqa: E402

MAX_TOKENS = 32
NAMES = ("worker0", "worker1", "router", "tokenizer", "frontend")
ROLL = ["worker0", "worker1", "router", "tokenizer", "frontend"]  # restart --all's order
# (prompt, sampling): 16 greedy, 2 seeded sampled
JOBS = [(p, dict(temperature=0)) for p in u.PROMPTS] + [
    ("Write a short poem about the sea.", dict(temperature=0.8, seed=7)),
    ("Invent a name for a spaceship.", dict(temperature=0.9, seed=11, top_k=20))]


def chat(prompt):
    return [{"role": "user", "content": prompt}]


class Stream(threading.Thread):
    """One client connection sending job's request again and again until stop is set (once
    when once): every result as (tokens, done or None, error or None, resumes)."""

    def __init__(self, ep, job, stop=None):
        super().__init__(daemon=True)
        self.ep, self.job, self.stop = ep, job, stop
        self.results, self.first = [], threading.Event()

    def run(self):
        prompt, params = JOBS[self.job]
        with strata_client.StrataClient(self.ep, timeout=30) as c:
            while True:
                toks, done, err = [], None, None
                try:
                    for ev in c.generate(messages=chat(prompt), max_tokens=MAX_TOKENS, **params):
                        if ev["type"] == "token":
                            toks.append(ev["token"])
                            self.first.set()
                        else:
                            done = ev
                except Exception as e:  # noqa: BLE001 - a lost request, reported by the test
                    err = repr(e)
                self.results.append((toks, done, err, c.resumes))
                self.first.set()
                if self.stop is None or self.stop.is_set() or err:
                    return


def ctl(ep, *args, timeout=120):
    """`strata ctl --ctl ep args...`: (exit code, stdout, stderr, seconds)."""
    t0 = time.time()
    r = subprocess.run([u.BIN, "ctl", "--ctl", ep] + list(args), capture_output=True,
                       text=True, timeout=timeout * u.TIMEOUT_SCALE)
    return r.returncode, r.stdout, r.stderr, time.time() - t0


def bad_input(ep, d):
    cases = [(("restart", "nope"), 1, "no actor 'nope' here (its actors: worker0, worker1"),
             (("reboot",), 2, "unknown command 'reboot'"),
             (("restart",), 2, "restart takes one actor name"),
             (("restart", "worker0", "--all"), 2, "restart takes one actor name"),
             (("status", "worker0"), 2, "status takes no actor name")]
    for args, want_rc, want in cases:
        rc, out, err, _ = ctl(ep, *args)
        u.check(rc == want_rc and want in err and len(err.strip().splitlines()) == 1,
                "ctl %s: exit %d, one line with %r; got %d %r" % (args, want_rc, want, rc, err))
    rc, out, err, _ = ctl("ipc://%s/nothing-here" % d, "status")
    u.check(rc == 1 and "no server at ipc://" in err, "no socket file: %d %r" % (rc, err))
    rc, out, err, took = ctl("tcp://127.0.0.1:%d" % u.free_port(), "--timeout", "0.5", "status")
    u.check(rc == 1 and "no answer from tcp://" in err and took < 5,
            "nobody at a tcp endpoint: %d %r in %.1f s" % (rc, err, took))
    # raw frames: each answered by a final ctl_reply with ok false
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(ep)
    for frames, want in (([b"\xc1"], "bad command"),
                         ([u.pack({"type": "generate", "id": "x", "prompt": "hi"})], "bad command"),
                         ([u.pack({"type": "ctl", "cmd": "restart"})], "a name or all"),
                         ([u.pack({"type": "ctl", "cmd": "restart", "name": "x" * 40})],
                          "bad command"),
                         ([u.pack({"type": "ctl", "cmd": "status"}), b"more"], "one frame"),
                         ([b""], "bad command")):
        s.send_multipart(frames)
        u.check(s.poll(5000), "an answer to %r" % frames)
        m = u.unpack(s.recv())
        u.check(m["type"] == "ctl_reply" and m["ok"] is False and m["final"] is True and
                want in m["message"], "raw %r: %r" % (frames[0][:40], m))
    s.close()
    req = ctx.socket(zmq.REQ)  # a REQ client gets the final answer alone
    req.setsockopt(zmq.LINGER, 0)
    req.connect(ep)
    req.send(u.pack({"type": "ctl", "cmd": "status"}))
    u.check(req.poll(5000), "a REQ client's answer")
    m = u.unpack(req.recv())
    req.close()
    u.check(m["ok"] and [a["name"] for a in m["actors"]] == list(NAMES), "REQ status: %r" % m)
    print("bad input: %d ctl command lines and 6 raw frames refused with a reason; "
          "a REQ client answered" % (len(cases) + 2))


def serve_refuses(d):
    """`strata serve` refuses a control endpoint it must not open, before any actor starts:
    tcp:// on a topology with CURVE keys, another scheme, --ctl in thread mode."""
    keys = os.path.join(d, "keys")
    subprocess.run([u.BIN, "keygen", keys, "supervisor"] + list(NAMES), check=True,
                   capture_output=True)
    sd = os.path.join(d, "curve")
    os.makedirs(sd)
    topo = u.process_topology(sd, u.free_port())
    with open(topo, "a") as f:
        f.write("security - keys=%s\n" % keys)
    for args, want in ((["--topology", topo, "--ctl", "tcp://127.0.0.1:%d" % u.free_port()],
                        "the topology has CURVE keys"),
                       (["--topology", topo, "--ctl", "inproc://x"], "ipc://PATH or tcp://"),
                       (["--ctl", "ipc://%s/x" % d], "--ctl needs --topology")):
        r = subprocess.run([u.BIN, "serve"] + args, capture_output=True, text=True,
                           timeout=60 * u.TIMEOUT_SCALE)
        u.check(r.returncode in (1, 2) and want in r.stderr and "started " not in r.stderr,
                "serve %s: refused before a start with %r; got %d %r"
                % (args[-2:], want, r.returncode, r.stderr[-500:]))
    print("serve refuses tcp:// --ctl with CURVE keys, another scheme, --ctl without "
          "--topology")


def pids(log):
    return {n: u.actor_pids(log, n)[-1] for n in NAMES}


def run_streams(ep, action):
    """18 looping clients; action() once every one has a token; then stop them.  Returns
    the results of every request, checked against nothing yet."""
    stop = threading.Event()
    streams = [Stream(ep, j, stop) for j in range(len(JOBS))]
    for t in streams:
        t.start()
    for t in streams:
        u.check(t.first.wait(30 * u.TIMEOUT_SCALE), "a first token for every client")
    out = action()
    time.sleep(0.3)  # a few requests on the restarted service too
    stop.set()
    for t in streams:
        t.join(60 * u.TIMEOUT_SCALE)
        u.check(not t.is_alive(), "client %d ended" % t.job)
    return out, [(t.job, r) for t in streams for r in t.results]


def check_results(results, refs, what):
    resumed = 0
    for job, (toks, done, err, resumes) in results:
        u.check(err is None and done and done["type"] == "done",
                "%s: job %d lost: %s %r" % (what, job, err, done))
        u.check(toks == refs[job], "%s: job %d differs from its idle run\n  got  %s\n  want %s"
                % (what, job, toks, refs[job]))
        u.check(done["usage"]["completion_tokens"] == len(toks), "%s: usage %r" % (what, done))
        resumed += resumes > 0
    print("%s: %d requests, every one done and equal to its idle run (%d resumed by their "
          "client after the frontend's restart)" % (what, len(results), resumed))


def main():
    t_start = time.time()
    d = tempfile.mkdtemp(prefix="strata-roll-")
    port = u.free_port()
    ep_ctl = "ipc://%s/ctl" % d
    s = u.Server(["--topology", u.process_topology(d, port), "--ctl", ep_ctl,
                  "--drain-timeout", "10"])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    ep = s.endpoint
    started = set()
    try:
        s.start()
        started.update(u.actor_pids(s.read_log()))
        u.check(stat.S_IMODE(os.stat(ep_ctl[6:]).st_mode) == 0o600, "the ctl socket is 0600")
        u.check("control endpoint %s" % ep_ctl in s.read_log(), "serve printed the endpoint")
        u.wait_for(lambda: u.health(ep)["ok"], 20 * u.TIMEOUT_SCALE, "health ok")
        rc, out, err, _ = ctl(ep_ctl, "status")
        first = pids(s.read_log())
        rows = {l.split()[0]: l.split() for l in out.splitlines()[1:] if l.split()[0] in NAMES}
        u.check(rc == 0 and sorted(rows) == sorted(NAMES) and
                all(rows[n][1] == "ready" and int(rows[n][2]) == first[n] for n in NAMES),
                "ctl status: %d\n%s%s" % (rc, out, err))
        bad_input(ep_ctl, d)
        serve_refuses(d)

        # references: every job once on the idle server
        idle = [Stream(ep, j) for j in range(len(JOBS))]
        for t in idle:
            t.start()
        for t in idle:
            t.join(60 * u.TIMEOUT_SCALE)
        check_results([(t.job, t.results[0]) for t in idle], [t.results[0][0] for t in idle],
                      "idle")
        refs = [t.results[0][0] for t in idle]
        u.check(refs[0] == u.reference(JOBS[0][0], MAX_TOKENS),
                "the idle run equals strata generate --greedy")

        # one worker, drained and restarted while the clients stream
        (rc, out, err, took), results = run_streams(
            ep, lambda: ctl(ep_ctl, "restart", "worker0", "--grace", "10"))
        print("$ strata ctl restart worker0 (%.2f s)\n%s" % (took, out.rstrip()))
        u.check(rc == 0 and "worker0: drained in" in out and "worker0: stopped in" in out and
                "worker0: started and ready in" in out and "restarted 1 actor in" in out,
                "ctl restart worker0: %d\n%s%s" % (rc, out, err))
        now = pids(s.read_log())
        started.update(now.values())
        u.check(now["worker0"] != first["worker0"] and
                all(now[n] == first[n] for n in NAMES if n != "worker0"),
                "worker0 alone has a new pid: %r -> %r" % (first, now))
        check_results(results, refs, "restart worker0")

        # no grace: worker1 stopped with its requests, which the frontend moves to worker0
        (rc, out, err, took), results = run_streams(
            ep, lambda: ctl(ep_ctl, "restart", "worker1", "--grace", "0"))
        print("$ strata ctl restart worker1 --grace 0 (%.2f s)\n%s" % (took, out.rstrip()))
        u.check(rc == 0 and "drain" not in out.split("\n", 1)[1] and
                "worker1: started and ready in" in out, "restart worker1 --grace 0: %d\n%s%s"
                % (rc, out, err))
        now = pids(s.read_log())
        started.update(now.values())
        check_results(results, refs, "restart worker1 --grace 0")

        # every actor in turn
        (rc, out, err, took), results = run_streams(
            ep, lambda: ctl(ep_ctl, "restart", "--all", "--grace", "10"))
        print("$ strata ctl restart --all (%.2f s)\n%s" % (took, out.rstrip()))
        u.check(rc == 0 and "restarted 5 actors in" in out, "restart --all: %d\n%s%s"
                % (rc, out, err))
        order = [l.split(":")[0] for l in out.splitlines() if "started and ready in" in l]
        u.check(order == ROLL, "the roll's order: %r" % order)
        after = pids(s.read_log())
        started.update(after.values())
        u.check(all(after[n] != now[n] for n in NAMES), "every actor has a new pid: %r -> %r"
                % (now, after))
        check_results(results, refs, "restart --all")
        u.wait_for(lambda: u.health(ep)["ok"], 20 * u.TIMEOUT_SCALE, "health ok after the roll")

        rc, out, err, _ = ctl(ep_ctl, "status")
        u.check(rc == 0 and "5 of 5 actors ready" in out, "status after: %s%s" % (out, err))
        rc, out, err, _ = ctl(ep_ctl, "drain")
        u.check(rc == 0 and "draining" in out, "ctl drain: %d %s%s" % (rc, out, err))
        try:
            rc = s.proc.wait(20 * u.TIMEOUT_SCALE)
        except subprocess.TimeoutExpired:
            rc = None
        u.check(rc == 0, "strata serve exits 0 after ctl drain (rc %r)" % rc)
        u.check(not os.path.exists(ep_ctl[6:]), "the ctl socket file is gone")
    finally:
        if s.proc and s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        started.update(u.actor_pids(s.read_log()))
        for p in started:
            if u.alive(p):
                os.kill(p, signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)
    os.unlink(s.log.name)
    print("ok (%.1f s)" % (time.time() - t_start))


if __name__ == "__main__":
    main()
