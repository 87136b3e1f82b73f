#!/usr/bin/env python3
"""bench_kv_compress.py - what in-sequence KV compression (issue 26, docs/KV_COMPRESSION.md)
costs in quality and buys in speed and memory, for BENCHMARKS.md.

Parts (--part, default all; each writes its rows when it ends and is skipped on a rerun
with the same options, so a stopped run resumes from the last finished chunk):

  quality  `strata kv-quality` over tests/data/alice29_ch1-6.txt (public domain) at each
           --ctx (2048, 4096, 8192 by default; --chunks-per-ctx slices of each, the last
           256 tokens of a slice scored): for window, h2o and snapkv at 50 %, 25 % and
           12.5 % budgets, KL(full || policy) (mean, p99, max), perplexity with and
           without, top-token agreement, rows held.  One chunk = one (ctx, slice): a
           JSON line per policy in quality-ctxC-sI.jsonl.
  kivi     the same for KIVI's 4- and 2-bit quantization (kivi-ctxC-sI.jsonl), its blocks
           rounded through the quantizer in place once older than 32 positions.
  needle   passkey retrieval: a five-digit number hidden at depths 10..90 % of a --needle-ctx
           token filler (the passkey test's "The grass is green..." lines), then "What is
           the pass key? The pass key is", 8 greedy tokens under the full cache and each
           policy (`kv-quality --generate`); a trial passes when the digits come out first.
           The peer: llama.cpp's llama-server on the same GGUF refuses a prompt longer than
           its context (its context shift acts on generation only), so it gets the prompt
           as its context shift would keep it -- the first 4 tokens (--keep 4) and the most
           recent rest of the budget.  --trials per depth; one JSON line per (trial,
           policy) in needle-ctxN-dD.jsonl.
  speed    decode tokens/s at --speed-ctx depths (64 tokens one per forward pass after the
           depth's prompt, `strata kv-quality --speed`, median of 5 runs, 3 at depths over
           4096) for the full cache
           and each policy at 25 %, and the cost of collecting attention weights alone (h2o
           at a budget above the depth, which drops nothing).

No timing runs beside another benchmark: the quality and needle parts measure no time;
the speed part takes /tmp/strata-bench.lock.  Output: bench/results/DATE-kv-compress/
(--out) with summary.md (the tables), the raw rows and the provenance (commit, CPU).
"""
import argparse
import datetime
import fcntl
import json
import math
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_kv_common as C  # noqa: E402

TEXT = os.path.join(ROOT, "tests", "data", "alice29_ch1-6.txt")
KINDS = ["window", "h2o", "snapkv"]
KIVI = ["kivi4", "kivi2"]  # KIVI's quantization (simulated in place: kvstore/kv_kivi.h)
BUDGETS = ["50%", "25%", "12.5%"]


def policies(budgets=BUDGETS):
    return [k + ":" + b for b in budgets for k in KINDS]


def run_json(cmd, timeout):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd[:3]), out.returncode,
                                                   out.stderr[-800:]))
    return [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]


def part_quality(a, out, kind="quality", pols=None):
    rows = []
    for ctx in a.ctx:
        for i in range(a.chunks_per_ctx.get(ctx, 1)):
            path = os.path.join(out, "%s-ctx%d-s%d.jsonl" % (kind, ctx, i))
            if not os.path.exists(path):
                print("%s: ctx %d slice %d ..." % (kind, ctx, i), flush=True)
                got = run_json([a.bin, "kv-quality", "-f", TEXT, "--ctx", str(ctx), "--score",
                                "256", "--skip-chunks", str(i), "--chunks", "1", "-t",
                                str(a.threads), "--kv-compress", ";".join(pols or policies()),
                                "--json"], 900)
                C.write_atomic(path, "".join(json.dumps(r) + "\n" for r in got))
            rows += [dict(r, slice=i) for r in C.read_jsonl(path)]
    return rows


FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
          "There and back again. ")


def needle_prompt(bin_path, n_tokens, depth, key):
    """A prompt of about n_tokens tokens with the pass key at depth (0..1) of it."""
    per = len(C.tokenize(bin_path, FILLER, False))
    n_fill = max(1, (n_tokens - 60) // per)
    at = int(round(depth * n_fill))
    needle = "The pass key is %d. Remember it. %d is the pass key. " % (key, key)
    head = ("There is important info hidden inside a lot of irrelevant text. Find it and "
            "memorize it. I will quiz you about the important information there. ")
    return (head + FILLER * at + needle + FILLER * (n_fill - at) +
            "What is the pass key? The pass key is")


class LlamaServer:
    """The llama.cpp peer's llama-server on the same GGUF (context --needle-ctx + 64, one
    slot, greedy): a context manager; complete(ids, n) -> text."""

    def __init__(self, a):
        peer = subprocess.run([os.path.join(ROOT, "scripts", "peer-bin"), "--tool",
                               "llama-server"], capture_output=True, text=True)
        if peer.returncode != 0:
            raise SystemExit("no llama.cpp peer: " + peer.stderr)
        self.port = C.free_port()
        self.cmd = [os.path.join(peer.stdout.strip(), "llama-server"), "-m", a.model, "-c",
                    str(a.needle_ctx + 64), "-np", "1", "-t", str(a.threads), "--port",
                    str(self.port), "--no-webui"]

    def __enter__(self):
        self.log = open(os.path.join("/tmp", "llama-server-needle.log"), "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=self.log)
        for _ in range(600):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port,
                                            timeout=1) as r:
                    if r.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        raise SystemExit("llama-server did not start")

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()

    def complete(self, ids, n):
        body = {"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1,
                "cache_prompt": False}
        req = urllib.request.Request("http://127.0.0.1:%d/completion" % self.port,
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())["content"]


def peer_rows(peer, a, prompt, key, trial, d):
    """llama.cpp at each budget: its server refuses a prompt longer than its context (context
    shift acts on generation only), so the prompt goes in as its context shift would have
    kept it -- the first 4 tokens (--keep 4) and the most recent rest of the budget."""
    ids = C.tokenize(a.bin, prompt, False)
    out = []
    for b in ["100%"] + a.needle_budgets:  # 100 %: the whole prompt, the peer's reference
        keep = math.ceil(float(b.rstrip("%")) / 100 * len(ids))
        text = peer.complete(ids[:4] + ids[len(ids) - (keep - 4):], 8)
        m = re.search(r"\d+", text)
        name = "llama.cpp" if b == "100%" else "llama.cpp keep4:" + b
        out.append({"trial": trial, "depth": d, "key": key, "policy": name,
                    "text": text, "ok": bool(m) and m.group(0) == str(key), "rows": keep,
                    "positions": len(ids)})
    return out


def part_needle(a, out):
    with LlamaServer(a) as peer:
        a.peer = peer
        return needle_trials(a, out)


def needle_trials(a, out):
    rows = []
    pols = policies(a.needle_budgets)
    for d in a.depths:
        path = os.path.join(out, "needle-ctx%d-d%d.jsonl" % (a.needle_ctx, d))
        done = C.read_jsonl(path) if os.path.exists(path) else []
        have = {r["trial"] for r in done}
        for t in range(a.trials):
            if t in have:
                continue
            rng = random.Random(1000 * d + t)
            key = rng.randint(10000, 99999)
            sub = os.path.join(out, "needle.txt")
            C.write_atomic(sub, needle_prompt(a.bin, a.needle_ctx, d / 100, key))
            got = run_json([a.bin, "kv-quality", "-f", sub, "--generate", "8", "-t",
                            str(a.threads), "--kv-compress", ";".join(pols)], 600)
            os.unlink(sub)
            prompt = needle_prompt(a.bin, a.needle_ctx, d / 100, key)
            lines = [json.dumps(r) + "\n" for r in peer_rows(a.peer, a, prompt, key, t, d)]
            for r in got:
                m = re.search(r"\d+", r["text"])
                ok = bool(m) and m.group(0) == str(key)
                lines.append(json.dumps({"trial": t, "depth": d, "key": key, "policy": r["policy"],
                                         "text": r["text"], "ok": ok, "rows": r["rows"],
                                         "positions": r["positions"]}) + "\n")
            with open(path, "a") as f:
                f.write("".join(lines))
            print("needle: depth %d%% trial %d: %s" % (d, t, " ".join(
                "%s=%d" % (json.loads(x)["policy"], json.loads(x)["ok"]) for x in lines)),
                flush=True)
        rows += C.read_jsonl(path)
    return rows


def part_speed(a, out):
    rows = []
    pols = ["%s:25%%" % k for k in KINDS]
    for depth in a.speed_ctx:
        path = os.path.join(out, "speed-d%d.jsonl" % depth)
        if not os.path.exists(path):
            with open("/tmp/strata-bench.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                print("speed: depth %d ..." % depth, flush=True)
                # h2o with a budget above the depth drops nothing: the cost of collecting
                # the attention weights alone
                reps = "5" if depth <= 4096 else "3"  # an 8k prompt takes ~20 s per run
                got = run_json([a.bin, "kv-quality", "-f", TEXT, "--ctx", str(depth), "--speed",
                                "64", "-r", reps, "-t", str(a.threads), "--json", "--kv-compress",
                                ";".join(["h2o:%d" % (4 * depth)] + pols)], 900)
            C.write_atomic(path, "".join(json.dumps(r) + "\n" for r in got))
        rows += C.read_jsonl(path)
    return rows


def summary(a, out, q, nd, sp):
    lines = ["# In-sequence KV compression (issue 26)", ""]
    lines += C.provenance(a.bin, sys.argv)
    if q:
        lines += ["", "## Quality vs the full cache (`strata kv-quality`, alice29, last 256 "
                  "tokens of each slice scored)", "",
                  "| ctx | slices | policy | mean KL | p99 KL | max KL | ppl | ppl full | "
                  "top-1 | rows held |", "|---|---|---|---|---|---|---|---|---|---|"]
        by = {}
        for r in q:
            by.setdefault((r["ctx"], r["policy"]), []).append(r)
        for (ctx, p), rs in sorted(by.items(), key=lambda kv: (kv[0][0], pol_key(kv[0][1]))):
            n = sum(r["scored"] for r in rs)
            w = lambda k: sum(r[k] * r["scored"] for r in rs) / n  # noqa: E731
            lines.append("| %d | %d | %s | %.4f | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f |" % (
                ctx, len(rs), p, w("mean_kl"), max(r["p99_kl"] for r in rs),
                max(r["max_kl"] for r in rs), w("ppl"), w("ppl_full"), w("top1"), w("rows")))
    if nd:
        lines += ["", "## Needle (pass key) retrieval, %d-token prompts" % a.needle_ctx, "",
                  "| policy | " + " | ".join("%d%%" % d for d in a.depths) + " | all |",
                  "|---|" + "---|" * (len(a.depths) + 1)]
        pols = sorted({r["policy"] for r in nd}, key=pol_key)
        for p in pols:
            cells, tot, ok = [], 0, 0
            for d in a.depths:
                rs = [r for r in nd if r["policy"] == p and r["depth"] == d]
                k = sum(r["ok"] for r in rs)
                cells.append("%d/%d" % (k, len(rs)))
                tot += len(rs)
                ok += k
            lines.append("| %s | %s | %.2f |" % (p, " | ".join(cells), ok / tot if tot else 0))
    if sp:
        lines += ["", "## Decode speed (`strata kv-quality --speed 64 -r 5 --ctx DEPTH`, -r 3 "
                  "over 4096)", "",
                  "| depth | policy | tokens/s (median) | range | vs none |", "|---|---|---|---|---|"]
        base = {r["depth"]: r["tg_median"] for r in sp if r["policy"] == "none"}
        for r in sorted(sp, key=lambda r: (r["depth"], pol_key(r["policy"]))):
            lines.append("| %d | %s | %.1f | %.1f..%.1f | %.3f |" % (
                r["depth"], r["policy"], r["tg_median"], r["tg_min"], r["tg_max"],
                r["tg_median"] / base[r["depth"]] if r["depth"] in base else float("nan")))
    if q:
        plot_svg(q, os.path.join(out, "quality.svg"))
    C.write_atomic(os.path.join(out, "summary.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


def plot_svg(q, path):
    """quality.svg: mean KL against the budget, one panel per context length, one line per
    policy kind (log scale; no plotting library needed)."""
    ctxs = sorted({r["ctx"] for r in q})
    colors = {"window": "#1f77b4", "h2o": "#d62728", "snapkv": "#2ca02c"}
    budgets = [12.5, 25.0, 50.0]
    W, H, pad = 300, 240, 50
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (W * len(ctxs), H + 40)]
    lo, hi = math.log10(0.005), math.log10(0.5)
    for i, ctx in enumerate(ctxs):
        x0 = i * W
        X = lambda b: x0 + pad + (budgets.index(b)) * (W - pad - 20) / 2  # noqa: E731
        Y = lambda v: 20 + (hi - math.log10(max(v, 1e-4))) / (hi - lo) * (H - 40)  # noqa: E731
        out.append('<text x="%d" y="14">context %d: mean KL vs the full cache</text>' % (
            x0 + pad - 30, ctx))
        for v in (0.01, 0.03, 0.1, 0.3):
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>'
                       '<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (
                           x0 + pad, x0 + W - 20, Y(v), Y(v), x0 + pad - 4, Y(v) + 4, v))
        for b in budgets:
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%g%%</text>' % (
                X(b), H - 2, b))
        for kind, col in colors.items():
            pts = []
            for b in budgets:
                rs = [r for r in q if r["ctx"] == ctx and r["policy"] == "%s:%g%%" % (kind, b)]
                if rs:
                    n = sum(r["scored"] for r in rs)
                    pts.append((X(b), Y(sum(r["mean_kl"] * r["scored"] for r in rs) / n)))
            if pts:
                out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
                    col, " ".join("%.1f,%.1f" % p for p in pts)))
                out += ['<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (x, y, col)
                        for x, y in pts]
        kv = [r for r in q if r["ctx"] == ctx and r["policy"] == "kivi4"]
        if kv:  # KIVI at 4 bits holds every position, in about a third of the bytes
            y = Y(sum(r["mean_kl"] * r["scored"] for r in kv) / sum(r["scored"] for r in kv))
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#777" '
                       'stroke-dasharray="4 3"/><text x="%d" y="%.1f" fill="#777">kivi4 '
                       '(every position, 0.34x the bytes)</text>' % (
                           x0 + pad, x0 + W - 20, y, y, x0 + pad + 4, y - 4))
        for j, (kind, col) in enumerate(colors.items()):
            out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (
                x0 + W - 70, 34 + 14 * j, col, kind))
    out.append("</svg>")
    C.write_atomic(path, "\n".join(out) + "\n")


def pol_key(p):
    order = {"none": 0, "window": 1, "h2o": 2, "snapkv": 3}
    if p in ("none", "llama.cpp"):
        return (-1000.0, 0 if p == "none" else 1, p)
    kind, _, b = p.partition(":")
    try:
        bv = -float(b.split(",")[0].rstrip("%"))
    except ValueError:
        bv = 0
    return (bv, order.get(kind, 9), p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", datetime.date.today().isoformat() + "-kv-compress"))
    ap.add_argument("--part", choices=["all", "quality", "kivi", "needle", "speed", "summary"],
                    default="all")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=os.environ.get("STRATA_MODEL") or os.path.join(
        os.path.expanduser("~"), ".cache", "strata", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--ctx", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--chunks-per-ctx", default="2048:4,4096:2,8192:1",
                    help="slices per context length, CTX:N,...")
    ap.add_argument("--needle-ctx", type=int, default=1024)
    ap.add_argument("--needle-budgets", nargs="+", default=["50%", "25%"])
    ap.add_argument("--depths", type=int, nargs="+", default=[10, 30, 50, 70, 90])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--speed-ctx", type=int, nargs="+", default=[2048, 8192])
    a = ap.parse_args()
    a.chunks_per_ctx = {int(k): int(v) for k, v in
                        (x.split(":") for x in a.chunks_per_ctx.split(","))}
    os.makedirs(a.out, exist_ok=True)
    q = part_quality(a, a.out) if a.part in ("all", "quality") else load(a.out, "quality-")
    q += (part_quality(a, a.out, "kivi", KIVI) if a.part in ("all", "kivi")
          else load(a.out, "kivi-"))
    nd = part_needle(a, a.out) if a.part in ("all", "needle") else load(a.out, "needle-")
    sp = part_speed(a, a.out) if a.part in ("all", "speed") else load(a.out, "speed-")
    summary(a, a.out, q, nd, sp)
    return 0


def load(out, prefix):
    rows = []
    for f in sorted(os.listdir(out)):
        if f.startswith(prefix) and f.endswith(".jsonl"):
            rows += C.read_jsonl(os.path.join(out, f))
    return rows


if __name__ == "__main__":
    sys.exit(main())
