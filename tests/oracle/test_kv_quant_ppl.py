#!/usr/bin/env python3
"""test_kv_quant_ppl.py - what quantizing the KV cache costs in perplexity, on the default
model over the first 16 chunks of a public-domain text (tests/data/alice29_ch1-6.txt:
chunks of 512 tokens, the second half of each scored, 255 tokens a chunk, 4080 in all).
The whole text (40 chunks) is measured by scripts/bench-kv-quant-ppl (BENCHMARKS.md).

Design: paired per-chunk differences.  The same chunks are scored with F32 KV (the
baseline: what serve and perplexity use by default) and with each quantized format:
- INT8 KV (--kv-type int8: the T0 pool holds int8 rows with a float scale per row, which
  the attention kernels read);
- INT4 tier round trip (--kv-tier-type int4 over an F16 pool: every complete block of 16
  positions is converted to KIVI-style INT4, K per channel and V per token, and back,
  before later positions attend to it).
For chunk i, d_i = (mean NLL of its scored tokens, quantized) - (the same, F32); the chunks,
not the tokens, are the independent units (tokens of one chunk share their context).  The
test asserts the one-sided 99% upper confidence bound of the mean difference,
d_mean + t(0.99, n-1) * sd(d) / sqrt(n), stays within log(1 + limit): the relative
perplexity cost exp(d_mean) - 1 is then below the limit with 99% confidence.

The limits.  The old test asked for |ppl / ppl_f16 - 1| <= 0.5% (INT8) and 3% (INT4 tier)
as point estimates over the whole text.  Per-chunk differences are noisy even between
formats that barely differ: over the 40 chunks sd(d) is 0.0060 nats for F16 vs F32, 0.0074
for INT8 and 0.0106 for the INT4 tier (any KV perturbation moves each token's NLL a
little, either way; F16 shows the floor).  So the old point estimate had a standard error
of ~0.12%, and its 0.5% limit let a true INT8 cost up to ~0.8% pass (at 99%); and an upper bound
at 0.5% can hardly be resolved on this text (the INT8 99% bound is 0.33% over all 40
chunks, 0.41% over the first 16; with sd 0.0074, a 16-chunk bound would exceed 0.5% about
half the time even if the true cost were 0).  The test therefore bounds INT8 at
1.0% and the INT4 tier at 3%, with 99% confidence, from 16 chunks: with the measured sd
and a true cost as measured, the bound stays under its limit with probability ~99.7%
(INT8) and ~100% (INT4) when kernel changes reshuffle the noise.

Measured (SmolLM2-135M-Instruct Q4_1, first 16 chunks, 2026-12): INT8 d_mean -0.0001
(-0.01%), bound +0.0041 (+0.41%, limit 1.0%); INT4 tier d_mean +0.0075 (+0.76%), bound
+0.0127 (+1.28%, limit 3%).  Whole text: F32 17.2509, F16 +0.07%, INT8 +0.04%, INT4 tier
+0.72% (scripts/bench-kv-quant-ppl).

Per-chunk NLLs come from the running perplexity `strata perplexity` prints after each chunk
on stderr ("[i/n] ppl P", 4 decimals): the cumulative NLL after chunk i is
n_i * log(P_i), and a chunk's is the difference.  The rounding of P moves a chunk's mean
NLL by at most ~6e-6 * i nats, under 2% of the INT8 limit here; d_mean itself is exact
(log of the final perplexities).

Under a sanitizer build (ASAN_OPTIONS set, as `STRATA_SANITIZE=1 scripts/test` does) the
Debug binary is ~20x slower: the runs then score 4 chunks and the bounds only have to stay
within 5% - what that build checks is memory safety of the INT8/INT4 paths.

Env: STRATA_BIN (set by CTest), STRATA_MODEL (optional), STRATA_SRC (the source tree;
default: two levels above this file).  Exit 0 on success, 1 on failure, 77 (skipped)
without the model (a failure under CI=true).
"""

import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import testenv  # noqa: E402

SRC = os.environ.get("STRATA_SRC") or os.path.dirname(os.path.dirname(HERE))
TEXT = os.path.join(SRC, "tests", "data", "alice29_ch1-6.txt")
CTX, THREADS = 512, 2
CHUNKS = 16
SANITIZED = bool(os.environ.get("ASAN_OPTIONS"))
if SANITIZED:
    CHUNKS = 4

BASELINE = ("f32", ["--kv-type", "f32"])
RUNS = [  # name, extra arguments, limit on the upper bound of the relative perplexity cost
    ("int8", ["--kv-type", "int8"], 0.010),
    ("int4 tier", ["--kv-type", "f16", "--kv-tier-type", "int4"], 0.03),
]

# one-sided 99% quantiles of Student's t by degrees of freedom (above 30: the value at 30,
# which errs on the safe side)
T99 = [None, 31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764, 2.718,
       2.681, 2.650, 2.624, 2.602, 2.583, 2.567, 2.552, 2.539, 2.528, 2.518, 2.508, 2.500,
       2.492, 2.485, 2.479, 2.473, 2.467, 2.462, 2.457]


def t99(df):
    return T99[min(df, 30)]


def perplexity(binp, model, extra, chunks=None, timeout=600):
    """One `strata perplexity` run: dict with ppl, scored, chunk_nll (mean NLL of each
    chunk's scored tokens), bytes (KV bytes per token by format), secs.  Exits with a
    failure if the run fails."""
    cmd = [binp, "perplexity", "-m", model, "-f", TEXT, "-c", str(CTX), "-t", str(THREADS)]
    cmd += extra + (["--chunks", str(chunks)] if chunks else [])
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        testenv.fail(f"timed out after {timeout} s: {' '.join(cmd)}")
    secs = time.monotonic() - t0
    if p.returncode != 0:
        testenv.fail(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr.strip()[-2000:]}")
    m = re.search(r"^perplexity ([0-9.]+) over (\d+) scored tokens \((\d+) chunks", p.stdout,
                  re.M)
    if not m:
        testenv.fail(f"no perplexity line in the output of {' '.join(cmd)}:\n{p.stdout}")
    ppl, scored, n = float(m.group(1)), int(m.group(2)), int(m.group(3))
    running = [float(x) for x in re.findall(r"^\[\d+/\d+\] ppl ([0-9.]+)", p.stderr, re.M)]
    if len(running) != n or scored % n:
        testenv.fail(f"{' '.join(cmd)}: {len(running)} running perplexities for {n} chunks")
    per = scored // n
    cum = [0.0] + [(i + 1) * per * math.log(x) for i, x in enumerate(running)]
    chunk_nll = [(cum[i + 1] - cum[i]) / per for i in range(n)]
    bpt = {f: float(b) for f, b in re.findall(r"^kv (?:t0|tier) (\w+): ([0-9.]+) bytes/token",
                                              p.stdout, re.M)}
    return {"ppl": ppl, "scored": scored, "chunk_nll": chunk_nll, "bytes": bpt, "secs": secs}


def paired(base, run):
    """(d_mean, se, upper) of the per-chunk NLL differences run - base: their mean, its
    standard error and its one-sided 99% upper confidence bound, in nats."""
    d = [q - b for q, b in zip(run["chunk_nll"], base["chunk_nll"])]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else float("inf")
    se = sd / math.sqrt(n)
    return mean, se, mean + t99(n - 1) * se


def pct(nats):
    return (math.exp(nats) - 1) * 100


def main():
    binp = testenv.strata_bin()
    model = testenv.model_path()
    if not os.path.isfile(TEXT):
        testenv.fail(f"text not found: {TEXT}")
    print(f"model {os.path.basename(model)}, text {os.path.basename(TEXT)}, {CHUNKS} chunks of "
          f"{CTX}, {THREADS} threads")
    t0 = time.monotonic()
    base = perplexity(binp, model, BASELINE[1], CHUNKS)
    if len(base["chunk_nll"]) != CHUNKS:
        testenv.fail(f"the text gives {len(base['chunk_nll'])} chunks, not {CHUNKS}")
    print(f"  {BASELINE[0]:9s} perplexity {base['ppl']:.4f}  ({base['scored']} scored tokens, "
          f"{base['secs']:.1f} s)")
    ok = True
    for name, extra, limit in RUNS:
        if SANITIZED:
            limit = max(limit, 0.05)
        r = perplexity(binp, model, extra, CHUNKS)
        mean, se, upper = paired(base, r)
        good = upper <= math.log1p(limit)
        ok &= good
        sizes = ", ".join(f"{f} {b:.0f}" for f, b in r["bytes"].items())
        print(f"  {name:9s} perplexity {r['ppl']:.4f}  {pct(mean):+.2f}% vs f32 (paired: mean "
              f"{mean:+.5f} nats, SE {se:.5f}); 99% upper bound {pct(upper):+.2f}% (limit "
              f"{limit * 100:.1f}%) {'ok' if good else 'FAIL'}  ({r['secs']:.1f} s)  "
              f"KV bytes/token: {sizes}")
    print(f"total {time.monotonic() - t0:.1f} s")
    if not ok:
        testenv.fail("quantized KV perplexity cost beyond its limit")
    print("PASS")


if __name__ == "__main__":
    main()
