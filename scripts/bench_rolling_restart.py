#!/usr/bin/env python3
"""bench_rolling_restart.py - planned restarts under load (issue 27; docs/OPERATIONS.md,
"Planned restarts").

Starts `strata serve --topology FILE --ctl ipc://...` (process mode: frontend, tokenizer,
router, two workers and the HTTP gateway for the probes), runs N streaming clients
(default 16; clients/python/strata_client.py, which resume after a lost connection)
sending greedy chat requests back to back, and measures:
  1. steady state: D seconds of load, nothing restarted;
  2. the roll: `strata ctl restart --all` R times in a row under the same load (each
     worker drained, every actor stopped and started, one at a time);
  for both: requests sent, done, failed (by code), lost (no final event before the
  request timeout), outputs different from the same prompt's steady-state output, and
  the latency of a whole request (p50, p99, max), and the roll's phases (ctl's lines);
  3. detection: for each actor kind, SIGSTOP its process while clients stream and time
     until /readyz and /progressz answer something else than 200 (or --detect-max s),
     then SIGCONT (the supervisor may have killed and restarted it already) and wait
     until both are 200 again.
Raw results go to OUT: requests.jsonl (one line per request and phase), roll.txt (ctl's
output), detect.json, serve.log, cpu.txt, summary.txt.

  usage: scripts/bench-rolling-restart [--clients 16] [--duration 20] [--rolls 2]
                                       [--kinds worker0,router,tokenizer,frontend]
                                       [--bin build/strata] [--out DIR]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, HERE)
from strata_client import StrataClient, StrataError  # noqa: E402

from bench_chaos import PROMPTS  # noqa: E402  (the same prompts as the chaos run)
KINDS = ["worker0", "router", "tokenizer", "frontend"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def topology(d, port, hport, threads):
    return ("supervisor ipc://%(d)s/supervisor\n"
            "defaults   -                    threads=%(t)d max_batch=32 kv_blocks=1024\n"
            "frontend   ipc://%(d)s/frontend client=tcp://127.0.0.1:%(port)d\n"
            "tokenizer  ipc://%(d)s/tokenizer\n"
            "router     ipc://%(d)s/router\n"
            "worker0    ipc://%(d)s/worker0\n"
            "worker1    ipc://%(d)s/worker1\n"
            "http       ipc://%(d)s/http     listen=127.0.0.1:%(hport)d\n"
            % {"d": d, "port": port, "hport": hport, "t": threads})


def pids_of(log):
    """{actor: current pid} from the supervisor's 'started NAME (pid N)' lines."""
    return {name: int(pid) for name, pid in re.findall(r"started (\w+) \(pid (\d+)\)", log)}


def probe(hport, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", hport, timeout=1)
        c.request("GET", path)
        st = c.getresponse().status
        c.close()
        return st
    except OSError:
        return 0


class Load:
    """N clients sending requests back to back while running; every request recorded
    with the phase it started in."""

    def __init__(self, ep, n, max_tokens, timeout):
        self.ep, self.n, self.max_tokens, self.timeout = ep, n, max_tokens, timeout
        self.lock = threading.Lock()
        self.records = []
        self.phase = "steady"
        self.running = True
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True)
                        for i in range(n)]

    def loop(self, ci):
        c = StrataClient(self.ep, timeout=self.timeout)
        k = ci
        while self.running:
            pi = k % len(PROMPTS)
            k += 1
            rec = {"client": ci, "prompt": pi, "phase": self.phase, "t0": time.time(),
                   "tokens": []}
            try:
                for ev in c.generate(messages=[{"role": "user", "content": PROMPTS[pi]}],
                                     max_tokens=self.max_tokens, temperature=0):
                    if ev["type"] == "token":
                        rec["tokens"].append(ev["token"])
                    else:
                        rec["final"] = "done"
                rec["resumes"] = c.resumes
            except StrataError as e:
                rec["final"] = "lost" if e.code == "timeout" else "error"
                rec["code"], rec["message"] = e.code, e.message
                if e.code == "timeout":
                    c.close()
                    c = StrataClient(self.ep, timeout=self.timeout)
            rec["t1"] = time.time()
            with self.lock:
                self.records.append(rec)
        c.close()

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.running = False
        for t in self.threads:
            t.join(self.timeout + 30)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def summarize(recs, phase, ref):
    rs = [r for r in recs if r["phase"] == phase]
    done = [r for r in rs if r.get("final") == "done"]
    errors = {}
    for r in rs:
        if r.get("final") == "error":
            errors[r["code"]] = errors.get(r["code"], 0) + 1
    lost = sum(r.get("final") == "lost" for r in rs)
    differ = sum(r["prompt"] in ref and r["tokens"] != ref[r["prompt"]] for r in done)
    lat = [r["t1"] - r["t0"] for r in done]
    resumed = sum(r.get("resumes", 0) > 0 for r in done)
    return ("%-7s requests %4d, done %4d, failed %d %s, lost %d, outputs differing %d, "
            "resumed by the client %d; latency s p50 %.2f p99 %.2f max %.2f"
            % (phase, len(rs), len(done), sum(errors.values()), errors or "", lost, differ,
               resumed, pct(lat, 50), pct(lat, 99), max(lat) if lat else float("nan")))


def wait_healthy(hport, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if probe(hport, "/readyz") == 200 and probe(hport, "/progressz") == 200:
            return True
        time.sleep(0.1)
    return False


def detect(name, pid, hport, limit):
    """SIGSTOP pid; seconds until /readyz and /progressz leave 200 (None: not within
    limit); then SIGCONT."""
    got = {"/readyz": None, "/progressz": None}
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        while time.time() - t0 < limit and None in got.values():
            for path in got:
                if got[path] is None and probe(hport, path) != 200:
                    got[path] = time.time() - t0
            time.sleep(0.05)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # the supervisor killed it as hung
    return {"actor": name, "pid": pid, "readyz_s": got["/readyz"],
            "progressz_s": got["/progressz"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=20, help="seconds of steady load")
    ap.add_argument("--rolls", type=int, default=2, help="restart --all this many times")
    ap.add_argument("--grace", type=float, default=30, help="a worker's drain grace, s")
    ap.add_argument("--kinds", default=",".join(KINDS), help="actors to SIGSTOP ('' : none)")
    ap.add_argument("--detect-max", type=float, default=15, help="give up a detection after")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--request-timeout", type=float, default=60,
                    help="a request without any event for this long is lost")
    ap.add_argument("--threads", type=int, default=1, help="threads per worker")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--out", default=None,
                    help="raw results (default bench/results/DATE-rolling-restart)")
    args = ap.parse_args()
    out = args.out or os.path.join(ROOT, "bench", "results",
                                   time.strftime("%Y-%m-%d") + "-rolling-restart")
    os.makedirs(out, exist_ok=True)
    kinds = [k for k in args.kinds.split(",") if k]
    with open(os.path.join(out, "cpu.txt"), "w") as f:
        f.write(subprocess.run(["lscpu"], capture_output=True, text=True).stdout)

    d = tempfile.mkdtemp(prefix="strata-roll-")
    port, hport = free_port(), free_port()
    ep, ctl = "tcp://127.0.0.1:%d" % port, "ipc://%s/ctl" % d
    topo = os.path.join(d, "topology.txt")
    with open(topo, "w") as f:
        f.write(topology(d, port, hport, args.threads))
    log_path = os.path.join(out, "serve.log")
    log = open(log_path, "w")
    srv = subprocess.Popen([args.bin, "serve", "--topology", topo, "--ctl", ctl,
                            "--drain-timeout", str(int(args.grace))], stdout=log, stderr=log,
                           env=dict(os.environ, STRATA_LOG="info"), start_new_session=True)
    load = Load(ep, args.clients, args.max_tokens, args.request_timeout)
    roll_text, detections = [], []
    try:
        deadline = time.time() + 120
        while "strata serve: ready on" not in open(log_path).read():
            if srv.poll() is not None or time.time() > deadline:
                sys.exit("strata serve did not start:\n" + open(log_path).read()[-3000:])
            time.sleep(0.2)
        if not wait_healthy(hport, 30):
            sys.exit("the probes never said ready")
        print("serving; %d clients: %.0f s steady, then %d rolls" % (args.clients, args.duration,
                                                                     args.rolls), flush=True)
        load.start()
        time.sleep(args.duration)
        load.phase = "roll"
        for i in range(args.rolls):
            t0 = time.time()
            r = subprocess.run([args.bin, "ctl", "--ctl", ctl, "restart", "--all", "--grace",
                                str(args.grace)], capture_output=True, text=True)
            roll_text.append("# roll %d: exit %d, %.2f s\n%s%s" % (i + 1, r.returncode,
                                                                   time.time() - t0, r.stdout,
                                                                   r.stderr))
            print(roll_text[-1], end="", flush=True)
        load.phase = "after"
        time.sleep(1)
        load.phase = "detect"
        for name in kinds:
            pid = pids_of(open(log_path).read()).get(name)
            if not pid:
                continue
            x = detect(name, pid, hport, args.detect_max)
            x["healthy_again"] = wait_healthy(hport, 60)
            detections.append(x)
            print("SIGSTOP %-10s /readyz %s  /progressz %s" % (
                name, "%.2f s" % x["readyz_s"] if x["readyz_s"] is not None else "stayed 200",
                "%.2f s" % x["progressz_s"] if x["progressz_s"] is not None else "stayed 200"),
                flush=True)
        load.stop()
    finally:
        load.running = False
        os.killpg(srv.pid, signal.SIGTERM)
        try:
            srv.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
        log.close()
        shutil.rmtree(d, ignore_errors=True)

    recs = load.records
    ref = {}
    for r in recs:  # the steady state's output of each prompt is the reference
        if r["phase"] == "steady" and r.get("final") == "done":
            ref.setdefault(r["prompt"], r["tokens"])
    with open(os.path.join(out, "requests.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(out, "roll.txt"), "w") as f:
        f.write("".join(roll_text))
    with open(os.path.join(out, "detect.json"), "w") as f:
        json.dump(detections, f, indent=1)
    lines = ["strata rolling restart: %d clients, %.0f s steady, %d rolls (restart --all, "
             "grace %.0f s), max_tokens %d" % (args.clients, args.duration, args.rolls,
                                               args.grace, args.max_tokens)]
    for phase in ("steady", "roll", "after", "detect"):
        lines.append(summarize(recs, phase, ref))
    lines.append("SIGSTOP -> probe not 200, s (None: stayed 200 for %.0f s):" % args.detect_max)
    for x in detections:
        lines.append("  %-10s /readyz %-6s /progressz %-6s healthy again: %s" % (
            x["actor"], "%.2f" % x["readyz_s"] if x["readyz_s"] is not None else "None",
            "%.2f" % x["progressz_s"] if x["progressz_s"] is not None else "None",
            x["healthy_again"]))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
