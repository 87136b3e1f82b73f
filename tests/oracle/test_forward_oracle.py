"""test_forward_oracle.py - strata's forward pass against the NumPy reference (ref_llama.py)
on the default model (Q4_1 matrices, Q8_0 tied output head): logits at every prompt position
within tolerance, argmax agreement, and identical 64-token greedy continuations.

Tolerance: strata, like llama.cpp, rounds each matmul input to 8 bits per block of 32 (Q8_1
for Q4_1 weights, Q8_0 for the Q8_0 head) before its integer dot products; the reference
computes in float.  Simulating that rounding inside the reference (ref_llama's act_q8 switch)
on these prompts moved the logits by at most 0.55 std per position (max |diff| 1.85 at
std ~3.5, mostly at positions after <|im_start|> tokens whose activations have outliers) and
at most 0.24 std in RMS, and flipped the argmax only at near-ties (top-2 gap <= 0.37).
Measured strata on the four prompts: max |diff|/std 0.57 (scalar kernels) to 0.77
(AVX-512), rms/std 0.20 (scalar) to 0.39 (AVX-512), worst at the system prompt's special
tokens.  The spread between kernel tables is not a kernel error: each table sums in its
own order, a different order flips a few 8-bit roundings, and the network amplifies the
flips; swapping any single AVX-512 op (attention, gemm, norms) for the reference moves
rms/std between 0.19 and 0.39 (see the commit that introduced these limits).  Limits:
max |diff|/std 1.0, rms/std 0.5 — above everything measured, and still well below what a
real bug (wrong RoPE pairing, GQA mapping, missing norm) does: several std.  Near-tie
threshold 1.0 logit (the q8_0 oracle saw a flip at a gap of 0.85).  Greedy continuations
are identical on all four prompts with every kernel table (scalar, AVX2, AVX-512).

Env: STRATA_BIN (set by CTest), STRATA_MODEL (optional).  Exit 0 on success, 1 on failure.
"""

import sys
import time

import oracle_util as U

TOL_Q8_ACTIVATIONS = U.Tolerance("8-bit activations", max_rel=1.0, rms_rel=0.5, tie_abs=1.0)


def main():
    t0 = time.time()
    model = U.model_path()
    binp = U.strata_bin()
    ref = U.R.load(model)
    print(f"reference loaded from {model} in {time.time() - t0:.1f}s")
    ok = U.run_oracle(ref, binp, model, TOL_Q8_ACTIVATIONS)
    print(f"{'PASS' if ok else 'FAIL'}: forward oracle, {len(U.PROMPTS)} prompts, "
          f"{time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
