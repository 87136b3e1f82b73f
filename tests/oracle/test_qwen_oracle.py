"""test_qwen_oracle.py - strata's forward pass for Qwen2 (Q/K/V biases) and Qwen3 (Q/K head
norms), both with NEOX RoPE and tied output, against the NumPy reference (ref_model.py with
ref_arch_qwen.py) on random-weight GGUFs of the real widths at 4 layers
(scripts/make_shape_gguf.py: qwen2-0.5b = Qwen2.5-0.5B, qwen3-0.6b = Qwen3-0.6B, whose q_dim
2048 differs from d_model 1024), F32 weights, the default model's tokenizer: logits at every
prompt position within tolerance, argmax agreement, identical greedy continuations.

Tolerance: F32 weights take float activations (no 8-bit rounding), so strata and the
reference differ only in summation order, as in test_moe_oracle.py's F32 cases; limits
max |diff|/std 1e-4, rms/std 2e-5, near-tie 1e-4 (measured: qwen2 8.8e-6 and 2.1e-6, qwen3
6.6e-6 and 1.5e-6).  Leaving out the Q/K/V biases or the head norms moves the logits by
whole std (measured: max |diff|/std ~5, rms/std ~1, argmax agreeing at 0-2 of 23 positions;
the generator scales the weights so that it does).

Env: STRATA_BIN (set by CTest), STRATA_MODEL (optional: the tokenizer's source).  Exit 0 on
success, 1 on failure, 77 when skipped.
"""

import os
import sys
import tempfile
import time

import oracle_util as U  # noqa: I001  (first: it checks for numpy and gguf)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
import make_shape_gguf  # noqa: E402

R = U.R
TOL_F32 = U.Tolerance("float", max_rel=1e-4, rms_rel=2e-5, tie_abs=1e-4)
SHAPES = ("qwen2-0.5b", "qwen3-0.6b")
LAYERS = 4
PROMPTS = [("count", "1, 2, 3, 4, 5, 6, 7, 8,"), ("words", "The quick brown fox jumps over it.")]
N_GEN = 16


def main():
    t0 = time.time()
    binp = U.strata_bin()
    tok = U.model_path()  # the tokenizer's source; skips without it
    ok = True
    with tempfile.TemporaryDirectory(prefix="strata_qwen_") as d:
        for shape in SHAPES:
            t1 = time.time()
            path = make_shape_gguf.write(os.path.join(d, f"{shape}.gguf"), shape, tok,
                                         layers=LAYERS, wtype="f32")
            ref = R.load(path)
            print(f"{shape}: {ref.arch}, {LAYERS} layers, d {ref.d_model}, {ref.n_heads}/"
                  f"{ref.n_kv_heads} heads of {ref.head_dim}, FFN {ref.d_ff}, stages "
                  f"{ {k: v for k, v in ref.stages.items() if v is True} }")
            for name, text in PROMPTS:
                ids = U.tokenize(binp, path, text, "")
                ok = U.compare_prompt(ref, binp, path, name, ids, TOL_F32, N_GEN) and ok
            print(f"  {time.time() - t1:.1f}s")
            del ref
            os.unlink(path)
    print(f"{'PASS' if ok else 'FAIL'}: Qwen forward oracle, {len(SHAPES)} models x "
          f"{len(PROMPTS)} prompts, {time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
