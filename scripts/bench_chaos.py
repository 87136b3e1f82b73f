#!/usr/bin/env python3
"""bench_chaos.py - the chaos benchmark of issue 10 (BENCHMARKS.md, "Faults").

Starts `strata serve --topology FILE` (process mode: frontend, tokenizer, router,
two workers, the KV tier manager, the prefetcher and an n-gram draft actor, each a
process under the supervisor), runs N concurrent streaming clients (default 32)
sending greedy chat requests back to back for D seconds, and meanwhile SIGKILLs a
random actor process every K seconds (and, with --faults, injects message faults
on every link).  Reports:
  - requests sent, completed, failed (by error code), lost (no final event before
    the per-request deadline);
  - completed outputs compared with `strata generate --chat --greedy` (identical %);
  - recovery time per kill by actor kind: kill -> the moment every request that
    was in flight at the kill has received its next event (p50/p99);
  - RSS of every actor process over time (start, max, end).
Clients are clients/python/strata_client.py (they resume by themselves after a
frontend restart); with --no-resume-client they are plain DEALER sockets that
never resume (what a client of the build before issue 10 could do).
Raw results (JSON lines per request, kills, RSS samples, the server log) go to OUT.

  usage: scripts/bench-chaos [--clients 32] [--duration 60] [--kill-every 3]
                             [--faults SPEC] [--bin build/strata] [--out DIR]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import msgpack  # noqa: E402
import zmq  # noqa: E402
from strata_client import StrataClient, StrataError  # noqa: E402

PROMPTS = [
    "What is the capital of France?", "Write a haiku about autumn.",
    "Name three primary colors.", "How many legs does a spider have?",
    "Explain gravity to a child.", "What is 12 times 12?",
    "Give me a synonym for happy.", "Describe the smell of rain.",
    "Why do cats purr?", "Tell me a joke about computers.",
    "What is the boiling point of water?", "Translate 'good morning' into Spanish.",
    "List two planets larger than Earth.", "What does a baker do?",
    "Suggest a name for a pet goldfish.", "Summarize the story of Cinderella in one sentence.",
]
KINDS = ["worker0", "worker1", "tokenizer", "router", "kvtier", "prefetcher", "draft",
         "frontend"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def topology(d, port, faults, threads):
    fl = " faults=%s" % faults if faults else ""
    return ("supervisor ipc://%(d)s/supervisor\n"
            "defaults   -                      threads=%(t)d max_batch=32 kv_blocks=1024%(fl)s\n"
            "frontend   ipc://%(d)s/frontend   client=tcp://127.0.0.1:%(port)d\n"
            "tokenizer  ipc://%(d)s/tokenizer\n"
            "router     ipc://%(d)s/router\n"
            "worker0    ipc://%(d)s/worker0\n"
            "worker1    ipc://%(d)s/worker1\n"
            "kvtier     ipc://%(d)s/kvtier     t1_blocks=1024 t2_dir=none\n"
            "prefetcher ipc://%(d)s/prefetcher\n"
            "draft      ipc://%(d)s/draft      draft=ngram\n"
            % {"d": d, "port": port, "fl": fl, "t": threads})


def pids_of(log):
    """{actor: current pid} from the supervisor's 'started NAME (pid N)' lines."""
    out = {}
    for name, pid in re.findall(r"started (\w+) \(pid (\d+)\)", log):
        out[name] = int(pid)
    return out


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reference(bin_, prompt, n):
    out = subprocess.run([bin_, "generate", "--chat", "-p", prompt, "-n", str(n), "--greedy",
                          "--print-ids", "-t", "1"], capture_output=True, text=True, timeout=300)
    if out.returncode:
        sys.exit("strata generate failed: " + out.stderr)
    return [int(x) for x in out.stdout.split()]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.records = []      # one dict per request
        self.events = []       # (time, client) of every event, for recovery times


def client_loop(ci, ep, args, stop_at, stats, resume):
    """Requests back to back until stop_at; each one recorded."""
    rng = random.Random(ci)
    k = ci
    c = StrataClient(ep, timeout=args.request_timeout) if resume else None
    ctx = zmq.Context.instance()
    while time.time() < stop_at:
        pi = k % len(PROMPTS)
        k += 1
        rec = {"client": ci, "prompt": pi, "t0": time.time(), "tokens": [], "indexes": []}
        try:
            if resume:
                for ev in c.generate(messages=[{"role": "user", "content": PROMPTS[pi]}],
                                     max_tokens=args.max_tokens, temperature=0):
                    now = time.time()
                    with stats.lock:
                        stats.events.append((now, ci))
                    if ev["type"] == "token":
                        rec["tokens"].append(ev["token"])
                        rec["indexes"].append(ev["index"])
                    else:
                        rec["final"] = "done"
                        rec["finish"] = ev.get("finish_reason")
            else:
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(ep)
                s.send(msgpack.packb({"type": "generate", "v": 1, "id": "c%d-%d" % (ci, k),
                                      "max_tokens": args.max_tokens, "temperature": 0,
                                      "messages": [{"role": "user",
                                                    "content": PROMPTS[pi]}]}))
                deadline = time.time() + args.request_timeout
                while "final" not in rec:
                    left = deadline - time.time()
                    if left <= 0 or not s.poll(int(left * 1000)):
                        raise StrataError("timeout", "no final event")
                    ev = msgpack.unpackb(s.recv(), raw=False)
                    with stats.lock:
                        stats.events.append((time.time(), ci))
                    if ev["type"] == "token":
                        rec["tokens"].append(ev["token"])
                        rec["indexes"].append(ev["index"])
                    elif ev["type"] == "done":
                        rec["final"] = "done"
                    elif ev["type"] == "error":
                        raise StrataError(ev.get("code"), ev.get("message"))
                s.close(0)
        except StrataError as e:
            rec["final"] = "lost" if e.code == "timeout" else "error"
            rec["code"] = e.code
            rec["message"] = e.message
            if not resume:
                s.close(0)
            elif e.code == "timeout":  # a fresh connection for the next request
                c.close()
                c = StrataClient(ep, timeout=args.request_timeout)
        rec["t1"] = time.time()
        with stats.lock:
            stats.records.append(rec)
        time.sleep(rng.random() * 0.05)
    if c:
        c.close()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60, help="seconds of load")
    ap.add_argument("--kill-every", type=float, default=3, help="seconds between kills")
    ap.add_argument("--kinds", default=",".join(KINDS), help="actor names to kill")
    ap.add_argument("--faults", default="", help="message faults on every link (topology "
                    "faults=, docs/FAULTS.md); empty: kills only")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--request-timeout", type=float, default=60,
                    help="a request without any event for this long is lost")
    ap.add_argument("--threads", type=int, default=1, help="threads per worker")
    ap.add_argument("--seed", type=int, default=1, help="which actors are killed, when")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--no-resume-client", action="store_true",
                    help="plain clients that never resume (for a build without 'resume')")
    ap.add_argument("--out", default=None, help="raw results (default bench/results/DATE-chaos)")
    args = ap.parse_args()
    out = args.out or os.path.join(ROOT, "bench", "results", time.strftime("%Y-%m-%d") + "-chaos")
    os.makedirs(out, exist_ok=True)
    kinds = [k for k in args.kinds.split(",") if k]
    with open(os.path.join(out, "cpu.txt"), "w") as f:
        f.write(subprocess.run(["lscpu"], capture_output=True, text=True).stdout)

    print("reference outputs (strata generate --greedy) ...", flush=True)
    ref = {i: reference(args.bin, p, args.max_tokens) for i, p in enumerate(PROMPTS)}

    d = tempfile.mkdtemp(prefix="strata-chaos-")
    port = free_port()
    ep = "tcp://127.0.0.1:%d" % port
    topo = os.path.join(d, "topology.txt")
    with open(topo, "w") as f:
        f.write(topology(d, port, args.faults, args.threads))
    log_path = os.path.join(out, "serve.log")
    log = open(log_path, "w")
    srv = subprocess.Popen([args.bin, "serve", "--topology", topo], stdout=log, stderr=log,
                           env=dict(os.environ, STRATA_LOG="info"), start_new_session=True)
    stats = Stats()
    kills, rss = [], []
    try:
        deadline = time.time() + 120
        while "strata serve: ready on" not in open(log_path).read():
            if srv.poll() is not None or time.time() > deadline:
                sys.exit("strata serve did not start:\n" + open(log_path).read()[-3000:])
            time.sleep(0.2)
        print("serving; %d clients for %.0f s, a kill every %.1f s among %s, faults %r"
              % (args.clients, args.duration, args.kill_every, kinds, args.faults or "none"),
              flush=True)
        t_start = time.time()
        stop_at = t_start + args.duration
        threads = [threading.Thread(target=client_loop,
                                    args=(i, ep, args, stop_at, stats, not args.no_resume_client))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        rng = random.Random(args.seed)
        next_kill = t_start + args.kill_every
        while time.time() < stop_at:
            now = time.time()
            pids = pids_of(open(log_path).read())
            rss.append({"t": now - t_start,
                        "rss_kb": {n: rss_kb(p) for n, p in pids.items()}})
            if now >= next_kill:
                name = rng.choice(kinds)
                pid = pids.get(name)
                if pid:
                    # requests in flight now: clients whose last request has not ended
                    with stats.lock:
                        done_clients = {}
                        for r in stats.records:
                            done_clients[r["client"]] = max(done_clients.get(r["client"], 0),
                                                            r["t1"])
                    try:
                        os.kill(pid, signal.SIGKILL)
                        kills.append({"t": time.time(), "name": name, "pid": pid})
                        print("  %5.1f s: SIGKILL %s (pid %d)" % (time.time() - t_start, name,
                                                                 pid), flush=True)
                    except ProcessLookupError:
                        pass
                next_kill += args.kill_every
            time.sleep(0.25)
        for t in threads:
            t.join(args.request_timeout + 30)
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        try:
            srv.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
        log.close()
        shutil.rmtree(d, ignore_errors=True)

    recs = stats.records
    sent = len(recs)
    done = [r for r in recs if r.get("final") == "done"]
    errors = {}
    for r in recs:
        if r.get("final") == "error":
            errors[r["code"]] = errors.get(r["code"], 0) + 1
    lost = [r for r in recs if r.get("final") == "lost"]
    same = [r for r in done if r["tokens"] == ref[r["prompt"]]]
    bad_order = [r for r in recs if r["indexes"] != list(range(len(r["indexes"])))]
    # recovery: for each kill, the requests in flight at that moment (started before,
    # ended after); the time until every one of them had an event after the kill
    evs = sorted(stats.events)
    recov = {}
    for k in kills:
        inflight = {r["client"] for r in recs if r["t0"] < k["t"] < r["t1"]}
        if not inflight:
            continue
        seen, t_all = set(), None
        for t, ci in evs:
            if t <= k["t"] or ci not in inflight:
                continue
            seen.add(ci)
            if seen == inflight:
                t_all = t
                break
        if t_all is not None:
            k["recovery_s"] = t_all - k["t"]
            recov.setdefault(k["name"], []).append(t_all - k["t"])
    with open(os.path.join(out, "requests.jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(out, "kills.json"), "w") as f:
        json.dump(kills, f, indent=1)
    with open(os.path.join(out, "rss.jsonl"), "w") as f:
        for s in rss:
            f.write(json.dumps(s) + "\n")

    lines = []
    lines.append("strata chaos: %d clients, %.0f s, %d kills (every %.1f s), faults %s, "
                 "max_tokens %d, %s clients"
                 % (args.clients, args.duration, len(kills), args.kill_every,
                    args.faults or "none", args.max_tokens,
                    "plain" if args.no_resume_client else "resuming"))
    lines.append("requests: sent %d, completed %d, failed %d %s, lost %d"
                 % (sent, len(done), sum(errors.values()), errors or "", len(lost)))
    lines.append("completed outputs identical to strata generate --greedy: %d/%d (%.1f%%); "
                 "requests with an index gap or repeat: %d"
                 % (len(same), len(done), 100.0 * len(same) / max(1, len(done)), len(bad_order)))
    lines.append("recovery (kill -> every in-flight request has its next event), s:")
    for name in sorted(recov):
        xs = recov[name]
        lines.append("  %-10s kills %2d  p50 %.2f  p99 %.2f  max %.2f"
                     % (name, len(xs), pct(xs, 50), pct(xs, 99), max(xs)))
    allx = [x for xs in recov.values() for x in xs]
    if allx:
        lines.append("  %-10s kills %2d  p50 %.2f  p99 %.2f  max %.2f"
                     % ("all", len(allx), pct(allx, 50), pct(allx, 99), max(allx)))
    names = sorted({n for s in rss for n in s["rss_kb"]})
    lines.append("RSS MiB (first sample, max, last sample) per actor name:")
    for n in names:
        xs = [s["rss_kb"].get(n) for s in rss if s["rss_kb"].get(n)]
        if xs:
            lines.append("  %-10s %7.1f %7.1f %7.1f" % (n, xs[0] / 1024, max(xs) / 1024,
                                                        xs[-1] / 1024))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
