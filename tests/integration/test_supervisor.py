"""test_supervisor.py - the supervisor of process mode (`strata serve --topology FILE`)
against hangs and its own death (docs/TOPOLOGY.md, "Supervision"): a SIGSTOP'd
worker sends no heartbeat, so the supervisor SIGKILLs it after --hang-timeout-ms,
restarts it (a new PID, worker_down to the router) and it serves again, in that
order and once each (no speed is asserted: the waits only bound liveness); the same
for the tokenizer; SIGKILL of the supervisor, while one child is stopped, leaves no
child process behind (they go with it), and a new `strata serve` on the same topology (same
ipc files and ports) is ready at once; a SIGINT to every process at once (a
terminal's Ctrl-C) stops it cleanly.  Every started PID is killed in the end."""
import os
import re
import shutil
import signal
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

HANG_MS = 1500
HANG_S = HANG_MS / 1000 * u.TIMEOUT_SCALE  # the build scales it (base/base_clock.h)
NAMES = ("frontend", "tokenizer", "router", "worker0", "worker1")


def serves(ep):
    res = u.run_concurrent(ep, u.PROMPTS[:2], 4, timeout=60)
    return all(r[1]["type"] == "done" for r in res.values())


def hang(s, ep, name, started):
    """SIGSTOP name; the supervisor calls it hung (after no heartbeat for at least the
    hang timeout, by its own clock), kills it, then restarts it, in that order and once
    each, and health is ok again.  The waits are bounds on liveness, generous on a busy
    machine, not speed checks.  Returns the silence the supervisor measured (s)."""
    log0 = len(s.read_log())
    pid = u.actor_pids(s.read_log(), name)[-1]
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    hung = "%s hung (no heartbeat for" % name
    u.wait_for(lambda: hung in s.read_log()[log0:], HANG_S + 30,
               "the supervisor to call %s hung" % name)
    u.wait_for(lambda: not u.alive(pid), 30, "the stopped %s to be killed" % name)
    new = u.wait_for(lambda: (lambda p: p if p[-1] != pid else None)(
        u.actor_pids(s.read_log(), name)), 30, "%s restarted" % name)[-1]
    started.add(new)
    u.wait_for(lambda: u.health(ep)["ok"], 30, "health ok after %s restarted" % name)
    after = s.read_log()[log0:]
    lines = [l for l in after.splitlines() if hung in l]
    u.check(len(lines) == 1, "%s called hung once: %r" % (name, lines))
    silence = float(re.search(r"no heartbeat for ([0-9.]+) s", lines[0]).group(1))
    print("%s: %r; restarted (pid %d -> %d), healthy after %.2f s" % (
        name, lines[0], pid, new, time.time() - t0))
    # not before the timeout: the silence it measured (printed to 0.1 s) is at least that
    u.check(silence >= HANG_S - 0.05, "%s called hung after %.1f s of silence, under the "
            "hang timeout %.1f s" % (name, silence, HANG_S))
    restarted = "started %s (pid %d)" % (name, new)
    u.check(restarted in after and after.index(lines[0]) < after.index(restarted),
            "%s: hung, then restarted, in order:\n%s" % (name, after[-2000:]))
    u.check(len(u.actor_pids(after, name)) == 1, "%s restarted once: %r"
            % (name, u.actor_pids(after, name)))
    u.check(serves(ep), "served after %s restarted" % name)
    return silence


def main():
    d = tempfile.mkdtemp(prefix="strata-super-")
    port = u.free_port()
    path = u.process_topology(d, port, "threads=1 max_batch=8 kv_blocks=256")
    started = set()  # every actor PID seen, killed in finally
    servers = []
    try:
        s = u.Server(["--topology", path, "--hang-timeout-ms", str(HANG_MS)])
        s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
        servers.append(s)
        s.start()
        ep = s.endpoint
        u.wait_for(lambda: u.health(ep)["ok"], 20, "health ok")
        log = s.read_log()
        for n in NAMES:
            started.update(u.actor_pids(log, n))
        u.check(len(started) == len(NAMES), "one process per actor: %r" % started)
        u.check(serves(ep), "serves")
        time.sleep(HANG_S + 0.5)  # quiet and idle actors keep beating: no false hang
        u.check(" hung " not in s.read_log(), "no actor called hung while idle")

        hang(s, ep, "worker0", started)
        st = u.stats(ep)
        u.check(st.get("router.worker_down", 0) == 1, "router counted worker_down: %r" %
                st.get("router.worker_down"))
        hang(s, ep, "tokenizer", started)

        # ---- the supervisor dies (SIGKILL) while a child is stopped
        log = s.read_log()
        kids = [u.actor_pids(log, n)[-1] for n in NAMES]
        os.kill(kids[NAMES.index("router")], signal.SIGSTOP)
        t0 = time.time()
        s.proc.kill()
        s.proc.wait()
        u.wait_for(lambda: not any(u.alive(p) for p in kids), 10 * u.TIMEOUT_SCALE,
                   "no child left after the supervisor's SIGKILL: %r" %
                   [p for p in kids if u.alive(p)])
        print("every child gone %.2f s after the supervisor's SIGKILL" % (time.time() - t0))

        # ---- the ports and ipc files are free: a new service starts at once
        s2 = u.Server(["--topology", path], ready_timeout=30)
        s2.port, s2.endpoint = port, "tcp://127.0.0.1:%d" % port
        servers.append(s2)
        s2.start()
        for n in NAMES:
            started.update(u.actor_pids(s2.read_log(), n))
        u.wait_for(lambda: u.health(ep)["ok"], 20, "health ok on the new service")
        u.check(serves(ep), "the new service serves")

        # ---- Ctrl-C in a terminal: SIGINT reaches every process of the group at
        # once, then the supervisor's SIGTERM reaches the children a second time;
        # every process stops cleanly (no libzmq assertion from a teardown a second
        # signal interrupted, no czmq "dangling socket"), exit 0, no child left
        kids = [u.actor_pids(s2.read_log(), n)[-1] for n in NAMES]
        for p in kids + [s2.proc.pid]:
            os.kill(p, signal.SIGINT)
        for delay in (0.005, 0.02, 0.05):  # and more signals while they tear down
            time.sleep(delay)
            for p in kids:
                if u.alive(p):
                    os.kill(p, signal.SIGTERM)
        try:
            rc = s2.proc.wait(15 * u.TIMEOUT_SCALE)
        except Exception:
            rc = None
        log = s2.read_log()
        u.check(rc == 0, "serve exits 0 after a group SIGINT (rc %r)" % rc)
        u.check("Assertion" not in log and "dangling" not in log,
                "no assertion or dangling socket at a group SIGINT:\n" + log[-2000:])
        u.wait_for(lambda: not any(u.alive(p) for p in kids), 5,
                   "no child left after a group SIGINT: %r" % [p for p in kids if u.alive(p)])
        print("ok")
    finally:
        for s in servers:
            if s.proc and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        for p in started:
            if u.alive(p):
                os.kill(p, signal.SIGKILL)
        for s in servers:
            if os.path.exists(s.log.name):
                os.unlink(s.log.name)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
