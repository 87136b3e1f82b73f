"""test_quantize_oracle.py - `strata quantize` to f16 and q8_0, then the forward oracle on each
new file: the reference reads the new file's own (dequantized) weights, so this checks both
that the written GGUF is well-formed and that strata computes correctly with those types.

Tolerances (units: the reference's per-position logit std; see test_forward_oracle.py):
- f16: F16 matrices are multiplied with float activations (no 8-bit rounding), so only
  summation order differs from the reference.  Measured: max |diff| 1e-4, max |diff|/std
  < 5e-5; limits 0.005 / 0.001 (100x headroom, still far below any real bug).
- q8_0: activations are rounded to Q8_0 as for the default model: the same limits as there.
  Measured: max |diff|/std 0.48, rms/std 0.20, argmax flips at top-2 gaps up to 0.85 (hence
  the near-tie threshold of 1.0); greedy identical on all prompts.

Env: STRATA_BIN (set by CTest), STRATA_MODEL (optional).  Exit 0 on success, 1 on failure.
"""

import os
import sys
import tempfile
import time

import oracle_util as U

TOLERANCES = {
    "f16": U.Tolerance("float activations", max_rel=0.005, rms_rel=0.001, tie_abs=0.01),
    "q8_0": U.Tolerance("8-bit activations", max_rel=1.0, rms_rel=0.5, tie_abs=1.0),
}
# The weight type every 2-D matrix must have in the output (token_embd included: neither
# type is below 8 bits, so no exception applies); norms stay f32.
MATRIX_TYPE = {"f16": "F16", "q8_0": "Q8_0"}


def check_types(ref, qtype):
    """The rules of `strata quantize` on the tensors' types; returns ok."""
    ok = True
    for name, t in ref.types.items():
        w = ref.w[name]
        want = MATRIX_TYPE[qtype] if w.ndim >= 2 else "F32"
        if t != want:
            print(f"  FAIL {name}: type {t}, expected {want}")
            ok = False
    return ok


def main():
    t0 = time.time()
    model = U.model_path()
    binp = U.strata_bin()
    ok = True
    with tempfile.TemporaryDirectory(prefix="strata_qoracle_") as d:
        for qtype, tol in TOLERANCES.items():
            out = os.path.join(d, f"model-{qtype}.gguf")
            t1 = time.time()
            U.run([binp, "quantize", "--threads", "2", "--quiet", model, out, qtype])
            print(f"{qtype}: quantized in {time.time() - t1:.1f}s, "
                  f"{os.path.getsize(out) / 2**20:.1f} MiB")
            ref = U.R.load(out)
            ok = check_types(ref, qtype) and ok
            ok = U.run_oracle(ref, binp, out, tol) and ok
            del ref
            os.unlink(out)
    print(f"{'PASS' if ok else 'FAIL'}: quantize oracle (f16, q8_0), {time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
