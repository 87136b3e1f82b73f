"""test_probes.py - the probes, each with its own meaning (issue 27, docs/OPERATIONS.md).

Process mode (every actor its own process under the supervisor), two workers, the HTTP
gateway.  When ready: /livez, /startupz, /readyz (and its alias /health), /progressz are 200,
/readyz?verbose lists every check and actor; the native health says started, ready, progress.
Then, one at a time:
- SIGSTOP a worker while 4 streaming requests run: /progressz goes 503 ("stalled") within
  2 s (a worker that holds requests answers no heartbeat) while /readyz stays 200 (the other
  worker takes traffic); after the supervisor kills and restarts it, the requests end (moved
  to the other worker) and /progressz is 200 again;
- SIGSTOP the router: /readyz goes 503 within 2 s and is 200 again after its restart;
- SIGSTOP the frontend: /readyz and /startupz go 503 ("unavailable") within 3 s (its health
  stops coming: the gateway's copy goes stale after 2 s) while /livez stays 200 (the
  gateway's own loop); 200 again after its restart.
Every stopped process is continued or killed in the finally block; the serve process group is
stopped by PID.  Exit 0 pass, 1 fail, 77 skip."""
import os
import shutil
import signal
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

HANG_MS = 2000


def get(port, path):
    """(status, parsed body) of a probe."""
    st, _, body = u.http_get(port, path, timeout=5)
    return st, body


def until(port, path, status, within, what):
    """Seconds until path answers status (fails after within s)."""
    t0 = time.time()
    u.wait_for(lambda: get(port, path)[0] == status, within, what)
    return time.time() - t0


def pid_of(s, name):
    pids = u.actor_pids(s.read_log(), name)
    return pids[-1] if pids else None


def main():
    if u.TIMEOUT_SCALE > 1:  # a sanitizer build: 5-10x slower, its heartbeats late
        u.testenv.skip("the probes' 1-2 s timings are measured in a normal build, not under a "
                       "sanitizer", ci_fails=False)
    d = tempfile.mkdtemp(prefix="strata-probes-")
    port, hport = u.free_port(), u.free_port()
    path = u.process_topology(d, port, opts={
        "supervisor": "hang_timeout_ms=%d" % HANG_MS,
        "frontend": "hang_timeout_ms=%d" % HANG_MS,
        "http": "listen=127.0.0.1:%d" % hport}, extra=("http",))
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    stopped = []
    try:
        with s:
            until(hport, "/readyz", 200, 30, "/readyz 200 at start")
            u.wait_for(lambda: get(hport, "/startupz")[0] == 200, 10, "/startupz 200: %r"
                       % (get(hport, "/startupz?verbose"),))
            for p in ("/livez", "/startupz", "/readyz", "/health", "/progressz"):
                st, body = get(hport, p)
                u.check(st == 200 and body["status"] == "ok", "%s at rest: %d %r" % (p, st, body))
            st, body = get(hport, "/readyz?verbose")
            names = {a["name"] for a in body.get("actors", [])}
            u.check(body["checks"]["started"] and body["checks"]["progress"] and
                    {"frontend", "tokenizer", "router", "worker0", "worker1"} <= names,
                    "/readyz?verbose: %r" % body)
            h = u.health(s.endpoint)
            u.check(h.get("started") and h.get("ready") and h.get("progress") and
                    not h.get("draining"), "native health at rest: %r" % h)

            # a worker stops while it holds requests: progress, not readiness
            res = {}

            def stop_worker(running):
                pid = pid_of(s, "worker0")
                stopped.append(pid)
                os.kill(pid, signal.SIGSTOP)
                stop_worker.t = time.time()
                # the probes are read while the streams go on (the other worker's)
                stop_worker.progress = until(hport, "/progressz", 503, 2.5,
                                             "/progressz 503 with worker0 stopped")
                stop_worker.ready = get(hport, "/readyz")[0]
            prompts = [u.PROMPTS[i] for i in range(4)]
            res = u.run_concurrent(s.endpoint, prompts, 40, timeout=120, fault=stop_worker)
            u.check(all(res[i][1]["type"] == "done" for i in res), "requests after the stop: %r"
                    % {i: res[i][1] for i in res})
            u.check(stop_worker.ready == 200, "/readyz with one worker of two stopped: %d"
                    % stop_worker.ready)
            back = until(hport, "/progressz", 200, 20, "/progressz 200 after the restart")
            print("SIGSTOP worker0 holding requests: /progressz 503 in %.2f s, /readyz stayed 200; "
                  "4/4 requests done; /progressz 200 again %.1f s later"
                  % (stop_worker.progress, back))
            u.wait_for(lambda: u.health(s.endpoint)["ok"], 30, "every actor back")

            for name, within, probe in (("router", 2.5, "/readyz"), ("frontend", 3.5, "/readyz")):
                pid = pid_of(s, name)
                stopped.append(pid)
                os.kill(pid, signal.SIGSTOP)
                t = until(hport, probe, 503, within, "%s 503 with %s stopped" % (probe, name))
                extra = ""
                if name == "frontend":
                    u.check(get(hport, "/livez")[0] == 200, "/livez with the frontend stopped")
                    u.check(get(hport, "/startupz")[0] == 503, "/startupz with the frontend "
                            "stopped")
                    extra = ", /livez stayed 200, /startupz 503"
                back = until(hport, "/readyz", 200, 30, "/readyz 200 after %s's restart" % name)
                print("SIGSTOP %s: %s 503 in %.2f s%s; 200 again %.1f s later (restarted)"
                      % (name, probe, t, extra, back))
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, TypeError):
                pass
        shutil.rmtree(d, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
