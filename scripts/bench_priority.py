#!/usr/bin/env python3
"""bench_priority.py - priority TTFT under saturation (issue 27; docs/OPERATIONS.md,
"Priorities").

One worker (--threads T, --max-batch B) saturated by S streaming low-priority requests
(priority 10, each L tokens, end-of-turn banned so every one runs L, resubmitted as soon
as it ends); every P seconds one high-priority request (priority -10, 16 tokens) arrives;
its TTFT (send to first token) is recorded.  Three modes, each a chunk on a fresh server:
  idle     - the high-priority probes alone (the reference TTFT)
  preempt  - under saturation, the worker option preempt=1 (the default)
  nopreempt- under saturation, preempt=0 (the probe waits for a batch slot)
Per mode: TTFT p50/p99 of the probes, and the low-priority requests finished (none may
starve) and their tokens/s.  The goal (issue 27): high-priority TTFT p99 <= 1.2x idle.
Raw rows in OUT/<mode>.jsonl (a chunk: a rerun skips modes already written), summary.md."""
import argparse
import json
import os
import sys
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kv_common as kc  # noqa: E402

BAN = [{"token": 0, "bias": -100.0}, {"token": 2, "bias": -100.0}]
PROMPTS = ["Tell me a long story about a lighthouse keeper.",
           "Explain how a steam engine works, step by step.",
           "Write a travel diary of a week in the mountains.",
           "Describe the history of printing in detail."]


def gen(rid, prompt, n, prio):
    return {"type": "generate", "v": 1, "id": rid, "max_tokens": n, "temperature": 0,
            "priority": prio, "logit_bias": BAN,
            "messages": [{"role": "user", "content": prompt}]}


def run_mode(args, mode, out):
    ctx = zmq.Context.instance()
    sargs = ["--threads", str(args.threads), "--max-batch", str(args.max_batch), "--no-tiers"]
    env_preempt = "0" if mode == "nopreempt" else "1"
    os.environ["STRATA_WORKER_PREEMPT"] = env_preempt  # configuration from the environment
    rows = []
    with kc.Serve(args.bin, sargs, os.path.join(out, mode + ".log")) as s:
        lows, n_low_done, low_tokens = {}, 0, 0
        poller = zmq.Poller()
        seq = [0]

        def start_low():
            c = ctx.socket(zmq.DEALER)
            c.setsockopt(zmq.LINGER, 0)
            c.connect(s.endpoint)
            seq[0] += 1
            c.send(msgpack.packb(gen("low%d" % seq[0], PROMPTS[seq[0] % 4], args.low_tokens, 10)))
            poller.register(c, zmq.POLLIN)
            lows[c] = time.time()

        if mode != "idle":
            for _ in range(args.streams):
                start_low()
            time.sleep(1.0)  # saturated: the batch full, the rest queued
        t_end = time.time() + args.duration
        probe, t_probe, next_probe, k = None, 0.0, time.time(), 0
        while time.time() < t_end or probe is not None:
            if probe is None and time.time() >= next_probe and time.time() < t_end:
                probe = ctx.socket(zmq.DEALER)
                probe.setsockopt(zmq.LINGER, 0)
                probe.connect(s.endpoint)
                k += 1
                t_probe = time.time()
                probe.send(msgpack.packb(gen("high%d" % k, PROMPTS[k % 4], 16, -10)))
                poller.register(probe, zmq.POLLIN)
                first = None
            for sock, _ in poller.poll(5):
                e = msgpack.unpackb(sock.recv(), raw=False)
                if sock is probe:
                    if e["type"] == "token" and first is None:
                        first = time.time() - t_probe
                    if e["type"] in ("done", "error"):
                        rows.append({"mode": mode, "probe": k, "ttft_s": first,
                                     "end": e["type"], "total_s": time.time() - t_probe})
                        poller.unregister(probe)
                        probe.close(0)
                        probe = None
                        next_probe = time.time() + args.period
                elif e["type"] == "token":
                    low_tokens += 1
                elif e["type"] in ("done", "error"):
                    n_low_done += e["type"] == "done"
                    poller.unregister(sock)
                    sock.close(0)
                    del lows[sock]
                    if time.time() < t_end:
                        start_low()
        st = kc.stats(s.endpoint)
        for c in list(lows):
            c.close(0)
    os.environ.pop("STRATA_WORKER_PREEMPT", None)
    rows.append({"mode": mode, "summary": True, "low_done": n_low_done,
                 "low_tokens": low_tokens, "duration_s": args.duration,
                 "preempted": st.get("worker0.preempted", 0)})
    kc.write_atomic(os.path.join(out, mode + ".jsonl"),
                    "".join(json.dumps(r) + "\n" for r in rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=16, help="saturating low-priority streams")
    ap.add_argument("--low-tokens", type=int, default=128)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--duration", type=float, default=30, help="seconds of probes per mode")
    ap.add_argument("--period", type=float, default=0.5, help="seconds between probes")
    ap.add_argument("--bin", default=kc.BIN)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="a smoke run (4 streams, 4 s)")
    args = ap.parse_args()
    if args.quick:
        args.streams, args.duration = 4, 4
    out = args.out or os.path.join(kc.ROOT, "bench", "results",
                                   time.strftime("%Y-%m-%d") + "-priority" +
                                   ("-quick" if args.quick else ""))
    os.makedirs(out, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k not in ("out", "bin")}
    kc.check_config(out, config)
    for mode in ("idle", "preempt", "nopreempt"):
        if os.path.exists(os.path.join(out, mode + ".jsonl")):
            print("%s: done already" % mode)
            continue
        print("%s ..." % mode, flush=True)
        run_mode(args, mode, out)
    lines = ["# Priority TTFT under saturation (issue 27)", ""] + kc.provenance(args.bin, sys.argv)
    lines += ["", "%d low-priority streams (priority 10, %d tokens each, resubmitted), max_batch "
              "%d, %d thread(s); a priority -10 probe of 16 tokens every %.1f s for %.0f s" % (
                  args.streams, args.low_tokens, args.max_batch, args.threads, args.period,
                  args.duration), "",
              "| mode | probes | TTFT p50 ms | TTFT p99 ms | p99 / idle p99 | low-priority done "
              "| low tokens/s | preemptions |", "|---|---|---|---|---|---|---|---|"]
    idle99 = None
    for mode in ("idle", "preempt", "nopreempt"):
        rows = kc.read_jsonl(os.path.join(out, mode + ".jsonl"))
        probes = [r["ttft_s"] * 1000 for r in rows if not r.get("summary") and r["ttft_s"]]
        summ = [r for r in rows if r.get("summary")][0]
        p50, p99 = kc.pct(probes, 50), kc.pct(probes, 99)
        if mode == "idle":
            idle99 = p99
        lines.append("| %s | %d | %.1f | %.1f | %s | %d | %.0f | %d |" % (
            mode, len(probes), p50, p99, "%.2f" % (p99 / idle99) if idle99 else "-",
            summ["low_done"], summ["low_tokens"] / summ["duration_s"], summ["preempted"]))
    kc.write_atomic(os.path.join(out, "summary.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
