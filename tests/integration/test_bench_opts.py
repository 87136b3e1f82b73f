#!/usr/bin/env python3
"""The benchmark options of the CLI: `strata bench-model --depth D` (llama-bench's
depth: pp and tg both timed at positions D..) and `strata perplexity --kl-ref
MODEL` (KL divergence against a reference model).  Small sizes: this checks the
options work and report what they say, not speed.  Exits 77 (skipped) without the
default model, a failure under CI=true (tests/testenv.py)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

BIN = testenv.strata_bin()
MODEL = testenv.model_path()  # a skip without the model (a failure under CI=true)
TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "alice29_ch1-6.txt")
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def run(args):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=300)


def main():
    p = run(["bench-model", "-m", MODEL, "-t", "2", "-r", "1", "-p", "16", "-n", "4", "-d", "24",
             "--kv-type", "f16"])
    check("bench-model --depth runs", p.returncode == 0, p.stderr[-300:])
    check("bench-model --depth reports the depth",
          re.search(r"^pp16 @ d24: [0-9.]+ tok/s", p.stdout, re.M) is not None
          and re.search(r"^tg4 @ d24: [0-9.]+ tok/s", p.stdout, re.M) is not None
          and "kv f16" in p.stdout, repr(p.stdout))
    p = run(["bench-model", "-m", MODEL, "-r", "1", "-p", "8", "-n", "2", "-d", "0"])
    check("bench-model --depth 0", p.returncode == 0 and "tg2 @ d0:" in p.stdout, repr(p.stdout))
    p = run(["bench-model", "-m", MODEL, "-b", "2", "-d", "8"])
    check("bench-model --depth with --batch is refused",
          p.returncode == 2 and "--depth" in p.stderr, repr(p.stderr))
    p = run(["bench-model", "-m", MODEL, "-d", "-1"])
    check("bench-model bad --depth", p.returncode != 0 and "--depth" in p.stderr, repr(p.stderr))

    # the model against itself (same F32 KV: the --kl-ref model always runs with F32 KV):
    # KL exactly 0, same top token everywhere
    p = run(["perplexity", "-m", MODEL, "-f", TEXT, "-c", "64", "--chunks", "2", "-t", "2",
             "--kv-type", "f32", "--kl-ref", MODEL])
    m = re.search(r"kl-divergence mean ([0-9.]+) .* max ([0-9.]+)", p.stdout)
    check("perplexity --kl-ref self: KL 0", p.returncode == 0 and m is not None
          and float(m.group(2)) == 0.0 and "same top token 100.000" in p.stdout, repr(p.stdout))
    ppl = re.search(r"^perplexity ([0-9.]+)", p.stdout, re.M)
    ref = re.search(r"^kl-ref .*: perplexity ([0-9.]+)", p.stdout, re.M)
    check("perplexity --kl-ref self: same perplexity", ppl is not None and ref is not None
          and ppl.group(1) == ref.group(1), repr(p.stdout))
    # F16 KV against the same model with F32 KV: small but non-negative KL
    p = run(["perplexity", "-m", MODEL, "-f", TEXT, "-c", "64", "--chunks", "2", "-t", "2",
             "--kv-type", "f16", "--kl-ref", MODEL])
    m = re.search(r"kl-divergence mean ([0-9.]+) ", p.stdout)
    check("perplexity --kl-ref, f16 KV: small KL", p.returncode == 0 and m is not None
          and 0.0 <= float(m.group(1)) < 0.01, repr(p.stdout))
    p = run(["perplexity", "-m", MODEL, "-f", TEXT, "--kl-ref", "/nonexistent.gguf"])
    check("perplexity --kl-ref missing file", p.returncode == 1, repr(p.stderr))
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print("all ok")


if __name__ == "__main__":
    main()
