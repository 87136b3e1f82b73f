#!/usr/bin/env python3
"""bench_semcache.py - what the answer cache (issue 28, docs/SEMCACHE.md) buys and what it
costs, for BENCHMARKS.md.

Parts (--part, default all; each chunk writes its rows when it ends and is skipped on a
rerun with the same options, so a stopped run resumes from the last finished chunk):

  latency  one client, `strata serve --semcache exact`: --latency-n distinct questions of
           tests/data/semcache_pairs.jsonl asked once (generated, then kept) and again
           (exact hits): client-side latency of each, p50/p99 (latency.jsonl).
  replay   a replayed workload at --concurrency clients: --replay-n single-turn chat
           requests drawn with a seed from the pair set's questions -- each one a repeat of
           an earlier question with probability --repeat (0.30: production caches report
           20-45 %% hits), the paraphrase of an earlier question with probability
           --paraphrase (0.10; the pair set's positives), else a new question -- served by
           `strata serve` without the semcache, with `--semcache exact` and with
           `--semcache semantic` (cold: the error bound starts with no verified outcome, as
           a fresh server does); requests/s, hit rate, latency by outcome
           (replay-MODE-rR.jsonl, --runs R each).
  eval     `strata semcache-eval` on the pair set: the embedding's ROC AUC, the threshold,
           hit and wrong-hit rates at delta 1/2/5/10/20 %% over random calibration/test
           splits (eval.json, pairs.csv; the summary adds what fixed thresholds, as gateways
           use, would give on the same pairs); and on a larger generated set of paraphrases
           against unrelated questions only (scripts/make-semcache-pairs --per-kind 1000,
           the other kinds dropped: traffic the embedding can separate), eval-easy.json.
           And the pair set judged as the service verifies a hit: "same" when the model's
           greedy answers (48 tokens) are equal after whitespace normalisation
           (eval-answers.json).
  index    the exact index's cost at --index entries (10k/100k/1M; index.json).
  ann      the approximate (HNSW) index at --ann entries (10k/100k): build time, lookup
           times, recall@1 against the exact search on near-duplicate queries (ann.json).

Timing parts take /tmp/strata-bench.lock.  Output: bench/results/DATE-semcache/ (--out):
summary.md (the tables), the raw rows, the provenance (commit, CPU).
"""
import argparse
import datetime
import fcntl
import json
import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_kv_common as C  # noqa: E402
import zmq  # noqa: E402

PAIRS = os.path.join(ROOT, "tests", "data", "semcache_pairs.jsonl")
MODES = ["none", "exact", "semantic"]


def pairs():
    return C.read_jsonl(PAIRS)


def questions():
    seen, out = set(), []
    for p in pairs():
        for q in (p["a"], p["b"]):
            if q not in seen:
                seen.add(q)
                out.append(q)
    return out


def workload(a):
    """(question, how it was drawn) for each request of the replay."""
    rng = random.Random(a.seed)
    pool = questions()
    rng.shuffle(pool)
    para = {}
    for p in pairs():
        if p["same"]:
            para.setdefault(p["a"], []).append(p["b"])
            para.setdefault(p["b"], []).append(p["a"])
    fresh, asked, out = iter(pool), [], []
    for _ in range(a.replay_n):
        x = rng.random()
        if asked and x < a.repeat:
            out.append((rng.choice(asked), "repeat"))
            continue
        cands = [q for q in asked if para.get(q)]
        if cands and x < a.repeat + a.paraphrase:
            q = rng.choice(para[rng.choice(cands)])
            kind = "paraphrase"
        else:
            q, kind = next(fresh), "new"
        asked.append(q)
        out.append((q, kind))
    return out


def ask(sock, rid, q, a, mode):
    m = {"type": "generate", "v": 1, "id": rid, "max_tokens": a.max_tokens, "temperature": 0,
         "stream": False, "messages": [{"role": "user", "content": q}]}
    if mode != "none":
        m["cache"] = mode
    t0 = time.perf_counter()
    sock.send(C.msgpack.packb(m))
    if not sock.poll(300000):
        raise RuntimeError("no answer to %s" % rid)
    d = C.msgpack.unpackb(sock.recv())
    if d.get("type") != "done":
        raise RuntimeError("%s: %r" % (rid, d))
    return {"id": rid, "q": q, "ms": (time.perf_counter() - t0) * 1000,
            "cache": d.get("cache", "generated"), "finish": d["finish_reason"],
            "completion_tokens": d["usage"]["completion_tokens"]}


def serve_args(a, mode):
    args = ["--threads", str(a.threads), "--no-tiers"]
    return args + (["--semcache", "off"] if mode != "none" else [])


def part_latency(a, out):
    path = os.path.join(out, "latency.jsonl")
    if os.path.exists(path):
        return
    qs = questions()[:a.latency_n]
    print("latency: %d questions, generated then hit ..." % len(qs), flush=True)
    with C.Serve(a.bin, serve_args(a, "exact"), os.path.join(out, "serve-latency.log")) as s:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(s.endpoint)
        rows = [dict(ask(sock, "g%d" % i, q, a, "exact"), round=1) for i, q in enumerate(qs)]
        rows += [dict(ask(sock, "h%d" % i, q, a, "exact"), round=2) for i, q in enumerate(qs)]
        sock.close()
    C.write_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def replay_one(a, out, mode, run):
    path = os.path.join(out, "replay-%s-r%d.jsonl" % (mode, run))
    if os.path.exists(path):
        return
    work = workload(a)
    print("replay: %s, run %d, %d requests at %d clients ..." % (mode, run, len(work),
                                                               a.concurrency), flush=True)
    rows, lock, nxt = [], threading.Lock(), [0]
    with C.Serve(a.bin, serve_args(a, mode), os.path.join(out, "serve-replay.log")) as s:
        def client(k):
            sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(s.endpoint)
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= len(work):
                    break
                r = ask(sock, "r%d" % i, work[i][0], a, mode)
                r.update(i=i, drawn=work[i][1], client=k, t_end=time.time())
                with lock:
                    rows.append(r)
            sock.close()
        t0 = time.time()
        ts = [threading.Thread(target=client, args=(k,)) for k in range(a.concurrency)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        st = C.stats(s.endpoint)
    rows.sort(key=lambda r: r["i"])
    head = {"mode": mode, "run": run, "wall_s": wall, "requests": len(rows),
            "counters": {k: v for k, v in st.items() if "cache" in k}}
    C.write_atomic(path, json.dumps(head) + "\n" + "".join(json.dumps(r) + "\n" for r in rows))


def part_replay(a, out):
    for run in range(a.runs):
        for mode in MODES:
            replay_one(a, out, mode, run)


DELTAS = "0.01,0.02,0.05,0.1,0.2"


def run_eval(a, out, name, pairs_file, csv, extra=()):
    path = os.path.join(out, name)
    if os.path.exists(path):
        return
    print("eval: semcache-eval on %s %s..." % (pairs_file, " ".join(extra)), flush=True)
    subprocess.run([a.bin, "semcache-eval", "-f", pairs_file, "--splits", str(a.splits),
                    "--deltas", DELTAS, "--json", path + ".tmp", "--csv-pairs",
                    os.path.join(out, csv), "-t", str(a.threads)] + list(extra), check=True,
                   timeout=900, stdout=subprocess.DEVNULL)
    os.replace(path + ".tmp", path)


def part_eval(a, out):
    run_eval(a, out, "eval.json", PAIRS, "pairs.csv")
    easy = os.path.join(out, "pairs-easy.jsonl")
    if not os.path.exists(easy):
        big = os.path.join(out, "pairs-large.jsonl.tmp")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make-semcache-pairs"),
                        "--out", big, "--per-kind", "1000"], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
        rows = [r for r in C.read_jsonl(big) if r["kind"] in ("paraphrase", "unrelated")]
        os.remove(big)
        C.write_atomic(easy, "".join(json.dumps(r) + "\n" for r in rows))
    run_eval(a, out, "eval-easy.json", easy, "pairs-easy.csv")
    # "the same" as the service verifies it: the model's greedy answers equal
    run_eval(a, out, "eval-answers.json", PAIRS, "pairs-answers.csv", ["--answers", "48"])


def part_index(a, out):
    path = os.path.join(out, "index.json")
    if not os.path.exists(path):
        print("eval: the exact index at %s entries ..." % a.index, flush=True)
        subprocess.run([a.bin, "semcache-eval", "--index", a.index, "--json", path + ".tmp"],
                       check=True, timeout=900)
        os.replace(path + ".tmp", path)


def part_ann(a, out):
    path = os.path.join(out, "ann.json")
    if not os.path.exists(path):
        print("ann: the approximate index at %s entries ..." % a.ann, flush=True)
        subprocess.run([a.bin, "semcache-eval", "--ann", a.ann, "--json", path + ".tmp"],
                       check=True, timeout=900)
        os.replace(path + ".tmp", path)


def ms_stats(xs):
    return "%.1f / %.1f" % (C.pct(xs, 50), C.pct(xs, 99)) if xs else "-"


def summary(a, out):
    lines = ["# Answer cache (issue 28)", ""] + C.provenance(a.bin, sys.argv) + [""]
    path = os.path.join(out, "latency.jsonl")
    if os.path.exists(path):
        rows = C.read_jsonl(path)
        gen = [r["ms"] for r in rows if r["round"] == 1]
        hit = [r["ms"] for r in rows if r["round"] == 2 and r["cache"] == "exact"]
        lines += ["## Hit vs generation, one client (ms, p50 / p99)", "",
                  "| | requests | latency p50 / p99 ms |", "|---|---|---|",
                  "| generated (max_tokens %d) | %d | %s |" % (a.max_tokens, len(gen),
                                                              ms_stats(gen)),
                  "| exact hit | %d of %d | %s |" % (len(hit), len(gen), ms_stats(hit)), ""]
    reps = {}
    for mode in MODES:
        for run in range(a.runs):
            p = os.path.join(out, "replay-%s-r%d.jsonl" % (mode, run))
            if os.path.exists(p):
                reps.setdefault(mode, []).append(C.read_jsonl(p))
    if reps:
        lines += ["## Replayed workload (%d requests, %d clients, repeat %.0f %%, paraphrase "
                  "%.0f %%)" % (a.replay_n, a.concurrency, a.repeat * 100, a.paraphrase * 100),
                  "", "| semcache | runs | requests/s (median, range) | hits (exact / kb / "
                  "semantic) | generated p50 / p99 ms | hit p50 / p99 ms |",
                  "|---|---|---|---|---|---|"]
        for mode, runs in reps.items():
            rps = sorted(r[0]["requests"] / r[0]["wall_s"] for r in runs)
            rows = [x for r in runs for x in r[1:]]
            n = len(rows)
            hits = {k: sum(1 for x in rows if x["cache"] == k) for k in ("exact", "kb",
                                                                          "semantic")}
            lines.append("| %s | %d | %.2f (%.2f..%.2f) | %.1f %% (%d / %d / %d) | %s | %s |" % (
                mode, len(runs), C.pct(rps, 50), rps[0], rps[-1],
                100.0 * sum(hits.values()) / n, hits["exact"], hits["kb"], hits["semantic"],
                ms_stats([x["ms"] for x in rows if x["cache"] == "generated"]),
                ms_stats([x["ms"] for x in rows if x["cache"] != "generated"])))
        lines.append("")
    lines += eval_tables(out)
    C.write_atomic(os.path.join(out, "summary.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


def fixed_thresholds(csv_path):
    import csv
    with open(csv_path) as f:
        rows = [(float(r["similarity"]), r["same"] == "1") for r in csv.DictReader(f)]
    pos = sum(1 for _, y in rows if y)
    out = ["| fixed threshold | hits | wrong hits | wrong-hit rate | recall |", "|---|---|---|---|---|"]
    for t in (0.80, 0.85, 0.90, 0.95, 0.98, 0.99):
        hits = [y for s, y in rows if s >= t]
        wrong = sum(1 for y in hits if not y)
        out.append("| %.2f | %d | %d | %s | %.3f |" % (
            t, len(hits), wrong, "%.3f" % (wrong / len(hits)) if hits else "-",
            (len(hits) - wrong) / pos if pos else 0))
    return out


def bound_table(ev):
    b = ev["bound"]
    out = ["%d splits: %d calibration / %d test pairs, alpha %g, min_obs %d" % (
        b["splits"], b["calib_pairs"], b["test_pairs"], b["alpha"], b["min_obs"]), "",
        "| delta | median threshold | splits with none | median hit rate | median recall | "
        "hits (pooled) | wrong | wrong-hit rate (upper 95 %) | splits above delta |",
        "|---|---|---|---|---|---|---|---|---|"]
    for d in b["deltas"]:
        th = d["median_threshold"]
        out.append("| %g | %s | %d | %.3f | %.3f | %d | %d | %s | %d (%d flagged) |" % (
            d["delta"], "none" if th is None else "%.2f" % th, d["splits_no_threshold"],
            d["median_hit_rate"], d["median_recall"], d["hits"], d["wrong"],
            "-" if d["pooled_wrong_rate"] is None else "%.4f (%.4f)" % (
                d["pooled_wrong_rate"], d["pooled_wrong_upper"]),
            d["splits_above_delta"], d["splits_flagged"]))
    return out


def eval_tables(out):
    lines = []
    for name, csv_name, title in (("eval.json", "pairs.csv", "the labelled pair set"),
                                  ("eval-easy.json", "pairs-easy.csv",
                                   "paraphrases vs unrelated questions only"),
                                  ("eval-answers.json", "pairs-answers.csv",
                                   "the pair set, judged by the model's own answers (48 "
                                   "greedy tokens, equal after whitespace normalisation)")):
        p = os.path.join(out, name)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            ev = json.load(f)
        auc = ev["auc"]
        lines += ["## The semantic layer on %s (%d pairs, %d same)" % (title, ev["pairs"],
                                                                    ev["positive"]), "",
                  "Embedding: %s, mean-pooled final hidden state (width %d).  ROC AUC of "
                  "similarity vs same: %.4f%s." % (
                      os.path.basename(ev["model"]), ev["dim"], auc["all"],
                      "".join("; vs %s %.4f" % kv for kv in sorted(auc["by_kind"].items()))),
                  ""] + bound_table(ev) + [""]
        if os.path.exists(os.path.join(out, csv_name)):
            lines += ["What fixed thresholds give on all of these pairs (no calibration, no "
                      "guarantee):", ""] + fixed_thresholds(os.path.join(out, csv_name)) + [""]
    p = os.path.join(out, "index.json")
    if os.path.exists(p):
        with open(p) as f:
            ix = json.load(f)["index"]
        lines += ["## The exact index (a dot product per entry)", "",
                  "| entries | width | lookup p50 / p99 us | lookups/s | table MiB |",
                  "|---|---|---|---|---|"]
        for r in ix:
            lines.append("| %d | %d | %.0f / %.0f | %.0f | %.0f |" % (
                r["entries"], r["dim"], r["p50_us"], r["p99_us"], r["lookups_per_s"],
                r["table_bytes"] / 2 ** 20))
        lines.append("")
    p = os.path.join(out, "ann.json")
    if os.path.exists(p):
        with open(p) as f:
            ann = json.load(f)["ann"]
        lines += ["## The approximate index (HNSW: M 16, ef_construction 100, ef 128, 32 "
                  "candidates)", "",
                  "| entries | build s | lookup p50 / p99 us | recall@1 (near-duplicate queries) |",
                  "|---|---|---|---|"]
        for r in ann:
            lines.append("| %d | %.1f | %.0f / %.0f | %.3f |" % (
                r["entries"], r["build_s"], r["p50_us"], r["p99_us"], r["recall_at_1"]))
        lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="all", choices=["all", "latency", "replay", "eval",
                                                      "index", "ann", "summary"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat() +
                                                  "-semcache"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--latency-n", type=int, default=40)
    ap.add_argument("--replay-n", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeat", type=float, default=0.30)
    ap.add_argument("--paraphrase", type=float, default=0.10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--index", default="10000,100000,1000000")
    ap.add_argument("--ann", default="10000,100000")
    a = ap.parse_args()
    if not (0 <= a.repeat and 0 <= a.paraphrase and a.repeat + a.paraphrase < 1):
        sys.exit("bench-semcache: --repeat and --paraphrase must be >= 0 with a sum below 1")
    os.makedirs(a.out, exist_ok=True)
    C.check_config(a.out, {k: v for k, v in vars(a).items() if k not in ("part", "bin", "out")})
    with open("/tmp/strata-bench.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if a.part in ("all", "latency"):
            part_latency(a, a.out)
        if a.part in ("all", "replay"):
            part_replay(a, a.out)
        if a.part in ("all", "eval"):
            part_eval(a, a.out)
        if a.part in ("all", "index"):
            part_index(a, a.out)
        if a.part in ("all", "ann"):
            part_ann(a, a.out)
    summary(a, a.out)


if __name__ == "__main__":
    main()
