#!/usr/bin/env python3
"""bench_kv_events_overhead.py - what publishing KV events costs in decode throughput
(issue 27, docs/KV_EVENTS.md; the goal: at most 1 %).

Each run starts a fresh `strata serve --workers W --threads T --no-tiers` (default 1 worker,
1 thread: the second core is left to ZeroMQ's I/O threads, the router, the subscriber and
this client), "off" without --kv-events, "on" with `--kv-events tcp://127.0.0.1:PORT`
(so strata's router follows the events too, as in a real deployment) and, in this
script, a SUB socket per worker subscribed to everything and reading every batch, so the
events are really sent and read.  A run: a warm-up round (other prompts, 8 tokens), then
--rounds rounds (default 6) of S concurrent streams (default 8), each a greedy chat
request of exactly N tokens (default 128: the end-of-generation tokens <|im_end|> and
<|endoftext|> are banned with logit_bias -100, so every stream decodes N tokens; distinct
prompts per stream, the same in every run).  A run's throughput: generated tokens / the
rounds' wall time (first send to last `done`).  Runs alternate off, on, off, on, ...
(--pairs pairs, default 6), so a drift of the machine falls on both sides.

Reported: per mode the median and range of tokens/s, the on/off ratio of the medians (and
the overhead 1 - ratio), the mean per-stream decode rate from the server's timings
(completion tokens - 1) / decode_ms, and for "on" runs sum(worker<i>.kv_events.bytes) /
generated tokens (the counters' change over the measured rounds), the batches and bytes
the subscriber read, and its sequence gaps.

Chunks: each run is written when it ends (run-01-off.json, ...); a rerun with the same
options skips finished runs and rewrites summary.md.  Output:
bench/results/DATE-kv-events-overhead/ (--out).

  usage: scripts/bench-kv-events-overhead [--quick] [--pairs 6] [--streams 8]
                                          [--max-tokens 128] [--rounds 6] [--workers 1]
                                          [--threads 1] [--out DIR]
  full run: about 1.5-3 minutes on 2 cores (12 runs of 6 x 8 x 128 tokens, about 1000
  tokens/s with the default SmolLM2-135M); --quick: about 3 s.
"""
import argparse
import json
import os
import statistics
import struct
import sys
import threading
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kv_common as kc  # noqa: E402

PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Describe, step by step, how a city builds a new bridge over a wide river.",
    "Tell the history of a small mountain village over three hundred years.",
    "Explain in detail how a sailing ship crosses an ocean without an engine.",
    "Write a travel diary of a week spent walking along a northern coast.",
    "Describe a day in the life of a baker in a busy market town.",
    "Tell a story about two friends who build a telescope from scrap parts.",
    "Explain how a library decides which books to keep and which to give away.",
    "Write about a train journey across a continent in winter.",
    "Describe the seasons in a forest as an old oak tree would tell them.",
    "Tell the story of a robot that learns to paint landscapes.",
    "Explain how a river changes its course over many centuries.",
    "Write a letter from a ship's cook to her family at home.",
    "Describe how a beekeeper prepares the hives for winter.",
    "Tell the story of a clockmaker and the strangest clock he ever repaired.",
    "Explain how a small island gets its fresh water.",
]


class Subscriber:
    """A thread reading every batch of every worker's PUB socket until stopped."""

    def __init__(self, pub, workers):
        self.batches = self.bytes = self.gaps = 0
        self.ctx = zmq.Context.instance()
        self.socks = []
        for i in range(workers):
            s = self.ctx.socket(zmq.SUB)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect("tcp://127.0.0.1:%d" % (pub + i))
            self.socks.append(s)
        self.last = [None] * workers
        self.running = True
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def loop(self):
        poller = zmq.Poller()
        for s in self.socks:
            poller.register(s, zmq.POLLIN)
        idx = {s: i for i, s in enumerate(self.socks)}
        while self.running:
            for s, _ in poller.poll(100):
                while True:
                    try:
                        f = s.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    i = idx[s]
                    seq = struct.unpack(">Q", f[1])[0] if len(f) == 3 and len(f[1]) == 8 else None
                    if seq is not None and self.last[i] is not None and seq != self.last[i] + 1:
                        self.gaps += 1
                    self.last[i] = seq
                    msgpack.unpackb(f[2], raw=False)  # read: decoded like a consumer would
                    self.batches += 1
                    self.bytes += sum(len(x) for x in f)

    def stop(self):
        time.sleep(0.3)  # the last batches
        self.running = False
        self.th.join()
        for s in self.socks:
            s.close(0)


def one_round(endpoint, prompts, max_tokens, bias):
    """All prompts at once on one DEALER; (tokens, wall s, [decode tok/s per stream])."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    t0 = time.monotonic()
    for i, p in enumerate(prompts):
        sock.send(msgpack.packb({"type": "generate", "v": 1, "id": "s%d" % i,
                                 "messages": [{"role": "user", "content": p}],
                                 "max_tokens": max_tokens, "temperature": 0,
                                 "logit_bias": bias}, use_bin_type=True))
    left, toks, rates = len(prompts), 0, []
    while left:
        if not sock.poll(120000):
            sys.exit("no event for 120 s")
        m = msgpack.unpackb(sock.recv(), raw=False)
        if m["type"] == "token":
            toks += 1
        elif m["type"] == "done":
            left -= 1
            n, ms = m["usage"]["completion_tokens"], m["timings"]["decode_ms"]
            if n > 1 and ms > 0:
                rates.append((n - 1) / ms * 1000)
        elif m["type"] == "error":
            sys.exit("request failed: %r" % m)
    wall = time.monotonic() - t0
    sock.close(0)
    return toks, wall, rates


def run(a, mode, bias, out, k):
    pub = kc.free_port(a.workers) if mode == "on" else None
    args = ["--workers", str(a.workers), "--threads", str(a.threads), "--no-tiers",
            "--max-batch", str(max(16, a.streams))]
    if pub:
        args += ["--kv-events", "tcp://127.0.0.1:%d" % pub]
    log = os.path.join(out, "serve-%02d-%s.log" % (k, mode))
    sub = None
    with kc.Serve(a.bin, args, log) as srv:
        if pub:
            sub = Subscriber(pub, a.workers)
            time.sleep(0.3)  # the subscriptions reach the publishers
        warm = ["Warm-up %d: %s" % (i, p) for i, p in enumerate(PROMPTS[:a.streams])]
        one_round(srv.endpoint, warm, 8, bias)
        before = kc.stats(srv.endpoint)  # waits up to 200 ms: the warm-up's batches arrive
        sub0 = (sub.batches, sub.bytes, sub.gaps) if sub else (0, 0, 0)
        prompts = [PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else " (%d)" % i)
                   for i in range(a.streams)]
        toks, wall, rates = 0, 0.0, []
        for _ in range(a.rounds):
            t, w, r = one_round(srv.endpoint, prompts, a.max_tokens, bias)
            toks, wall, rates = toks + t, wall + w, rates + r
        after = kc.stats(srv.endpoint)
        if sub:
            sub.stop()
    ev = lambda c, key: sum(c.get("worker%d.kv_events.%s" % (i, key), 0)  # noqa: E731
                            for i in range(a.workers))
    row = {"run": k, "mode": mode, "tokens": toks, "wall_s": wall, "tok_s": toks / wall,
           "expected_tokens": a.rounds * a.streams * a.max_tokens,
           "stream_decode_tok_s_mean": statistics.mean(rates) if rates else None,
           "events_bytes": ev(after, "bytes") - ev(before, "bytes"),
           "events_batches": ev(after, "batches") - ev(before, "batches"),
           "events": ev(after, "events") - ev(before, "events"),
           "events_dropped": ev(after, "dropped"),
           "router_batches": after.get("router.kv_events.batches", 0),
           "sub_batches": sub.batches - sub0[0] if sub else 0,
           "sub_bytes": sub.bytes - sub0[1] if sub else 0,
           "sub_gaps": sub.gaps - sub0[2] if sub else 0}
    return row


def summarize(a, rows, out, argv):
    lines = ["# KV events: decode throughput with and without --kv-events", ""]
    lines += kc.provenance(a.bin, argv)
    lines += ["- load: %d concurrent greedy streams x %d tokens (EOS banned), %d rounds per run, "
              "%d pairs of runs alternating off/on, each on a fresh `strata serve --workers %d "
              "--threads %d --no-tiers`; \"on\": --kv-events, strata's router and this "
              "script's SUB socket(s) reading every batch" % (
                  a.streams, a.max_tokens, a.rounds, a.pairs, a.workers, a.threads), ""]
    lines += ["| run | mode | tok/s | stream decode tok/s | tokens | event bytes / token | "
              "events | batches sent | batches read | gaps |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %d | %s | %.1f | %.1f | %d/%d | %s | %d | %d | %d | %d |" % (
            r["run"], r["mode"], r["tok_s"], r["stream_decode_tok_s_mean"] or 0, r["tokens"],
            r["expected_tokens"],
            "%.1f" % (r["events_bytes"] / r["tokens"]) if r["mode"] == "on" else "-",
            r["events"], r["events_batches"], r["sub_batches"], r["sub_gaps"]))
    lines += ["", "tok/s: generated tokens / wall time of the measured rounds; stream decode: "
              "mean over streams of (completion_tokens - 1) / timings.decode_ms; events, "
              "batches sent: the workers' kv_events counters over the measured rounds; batches "
              "read, gaps: this script's subscriber over the same rounds (give or take a batch "
              "at the edges)."]
    by = {m: [r for r in rows if r["mode"] == m] for m in ("off", "on")}
    lines += ["", "| mode | runs | tok/s median | range | stream decode tok/s median | "
              "event bytes per token |", "|---|---|---|---|---|---|"]
    med = {}
    for m in ("off", "on"):
        xs = [r["tok_s"] for r in by[m]]
        if not xs:
            lines.append("| %s | 0 | | | | |" % m)
            continue
        med[m] = statistics.median(xs)
        dec = [r["stream_decode_tok_s_mean"] for r in by[m] if r["stream_decode_tok_s_mean"]]
        bpt = sum(r["events_bytes"] for r in by[m]) / max(1, sum(r["tokens"] for r in by[m]))
        lines.append("| %s | %d | %.1f | %.1f .. %.1f | %.1f | %s |" % (
            m, len(xs), med[m], min(xs), max(xs), statistics.median(dec) if dec else 0,
            "%.1f" % bpt if m == "on" else "-"))
    if len(med) == 2:
        ratio = med["on"] / med["off"]
        lines += ["", "on/off (medians): %.4f, overhead %.2f %% (goal: <= 1 %%)" % (
            ratio, (1 - ratio) * 100)]
        pairs = [(x["tok_s"], y["tok_s"]) for x, y in zip(by["off"], by["on"])]
        if pairs:
            pr = sorted(y / x for x, y in pairs)
            lines.append("per pair on/off: %s (median %.4f)" % (
                " ".join("%.3f" % p for p in pr), statistics.median(pr)))
    text = "\n".join(lines) + "\n"
    kc.write_atomic(os.path.join(out, "summary.md"), text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 pair, 4 streams x 32 tokens, 1 round (about 10 s)")
    ap.add_argument("--pairs", type=int, default=None, help="off/on pairs (default 6)")
    ap.add_argument("--streams", type=int, default=None, help="concurrent (default 8)")
    ap.add_argument("--max-tokens", type=int, default=None, help="per stream (default 128)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per run (default 6)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="per worker")
    ap.add_argument("--bin", default=kc.BIN)
    ap.add_argument("--out", default=None, help="default bench/results/DATE-kv-events-overhead"
                    " (DATE-kv-events-overhead-quick with --quick)")
    a = ap.parse_args()
    for k, full, quick in (("pairs", 6, 1), ("streams", 8, 4), ("max_tokens", 128, 32),
                           ("rounds", 6, 1)):
        if getattr(a, k) is None:
            setattr(a, k, quick if a.quick else full)
    out = a.out or os.path.join(kc.ROOT, "bench", "results", time.strftime("%Y-%m-%d") +
                                "-kv-events-overhead" + ("-quick" if a.quick else ""))
    os.makedirs(out, exist_ok=True)
    kc.check_config(out, {k: getattr(a, k) for k in ("pairs", "streams", "max_tokens", "rounds",
                                                     "workers", "threads")})
    argv = ["scripts/bench-kv-events-overhead"] + sys.argv[1:]
    # the end-of-generation tokens, as the service's tokenizer names them
    bias = []
    for t in ("<|im_end|>", "<|endoftext|>"):
        ids = kc.tokenize(a.bin, t)
        if len(ids) == 1:
            bias.append({"token": ids[0], "bias": -100.0})
    rows, t_all = [], time.time()
    n = 2 * a.pairs
    for k in range(1, n + 1):
        mode = "off" if k % 2 else "on"
        path = os.path.join(out, "run-%02d-%s.json" % (k, mode))
        if os.path.exists(path):
            with open(path) as f:
                rows.append(json.load(f))
            print("[%d/%d] %s: done before, skipped" % (k, n, mode), flush=True)
            continue
        row = run(a, mode, bias, out, k)
        kc.write_atomic(path, json.dumps(row) + "\n")
        rows.append(row)
        el = time.time() - t_all
        print("[%d/%d] %-3s %.1f tok/s (%d tokens in %.2f s)%s; %.0f s so far" % (
            k, n, mode, row["tok_s"], row["tokens"], row["wall_s"],
            ", %.1f event bytes/token" % (row["events_bytes"] / row["tokens"])
            if mode == "on" else "", el), flush=True)
    print(summarize(a, rows, out, argv))


if __name__ == "__main__":
    main()
