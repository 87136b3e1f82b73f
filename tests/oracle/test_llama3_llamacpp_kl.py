"""test_llama3_llamacpp_kl.py - strata's Llama 3.x forward pass against llama.cpp's
(test_llamacpp_kl.py's comparison: llama-perplexity --kl-divergence-base, then strata
perplexity --kl-base on the same tokens): the two things a Llama 3.2 GGUF has that the
default model (SmolLM2) lacks, a rope_freqs.weight tensor of long-context frequency factors
and a head tied to the embeddings without output.weight.

Case: scripts/make_shape_gguf.py's llama3-1b (Llama-3.2-1B widths, rope base 500000, the
factors of rope_scaling type llama3: factor 32, low/high frequency factors 1 and 4, original
context 8192; the oracle scaling of the Qwen shapes), 2 layers, the default model's
tokenizer, written F16 and quantized to Q8_0 by `strata quantize`; 2 chunks of 512 tokens of
tests/data/alice29_ch1-6.txt (the last 256 positions of each scored), F16 KV on both sides.
At base 500000 and head_dim 64, pairs 15..31 of 32 have factors above 1; over 512 positions
the blended ones (15..17, wavelengths 2048..8192) turn by up to ~1.5 rad more without them,
so a context of 512 is long enough for the factors to matter.
Bounds: mean KL < 0.02, p99 < 0.1, top-1 >= 90 % (test_llamacpp_kl.py's).
Negative control: the same weights written with every factor 1.0 (Llama 3 without its
scaling), run by strata against llama.cpp's logits of the real file, must miss the mean-KL
bound by a wide margin (NEG_KL_MIN): the comparison sees the factors.
Measured at the commit that added this test: mean KL 0.0020, p99 0.0034, top-1 95.5 %,
perplexity 0.13 % from llama-perplexity's own; the negative control: mean KL 0.44, top-1
45.5 %.  About 45 s on 2 cores.

Needs the llama.cpp peer's llama-perplexity (tests/testenv.py's peer_tool): without it the
test skips (77); under CI=true a missing peer fails.
Env: STRATA_BIN (set by CTest), STRATA_MODEL (the tokenizer's source), STRATA_PEER_BIN.
Exit 0 pass, 1 fail, 77 skip.
"""

import os
import sys
import tempfile
import time

import oracle_util as U  # noqa: I001  (first: it checks for numpy and gguf)
from test_llamacpp_kl import TEXT, kl_vs_llamacpp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
import make_shape_gguf  # noqa: E402

SHAPE = "llama3-1b"
LAYERS = 2
CTX, CHUNKS = 512, 2
BOUNDS = (0.02, 0.1, 90.0)  # mean KL limit, p99 limit, top-1 % lower bound
NEG_KL_MIN = 0.1  # the factors-1.0 file's mean KL must be at least this (5x the bound)


def main():
    t0 = time.time()
    binp = U.strata_bin()
    tok = U.model_path()  # the tokenizer's source; skips without it
    lp = U.testenv.peer_tool("llama-perplexity")
    with tempfile.TemporaryDirectory(prefix="strata_llama3_kl_") as d:
        g = {}
        for name, factors in (("real", None), ("ones", [1.0] * 32)):
            f16 = make_shape_gguf.write(os.path.join(d, f"{name}-f16.gguf"), SHAPE, tok,
                                        layers=LAYERS, rope_freqs=factors)
            g[name] = os.path.join(d, f"{name}-q8_0.gguf")
            U.run([binp, "quantize", "--threads", "2", "--quiet", f16, g[name], "q8_0"])
            os.unlink(f16)
        label = f"{SHAPE} q8_0"
        ok = kl_vs_llamacpp(binp, lp, g["real"], label, BOUNDS, d, CTX, CHUNKS)[0]
        # llama.cpp's logits of the real file (kl_vs_llamacpp's base file) against strata
        # on the factors-1.0 file
        neg = U.parse_kl_lines(U.run([binp, "perplexity", "-m", g["ones"], "--kl-base",
                                      os.path.join(d, f"{label}.kld"), "-f", TEXT, "-t", "2",
                                      "--kv-type", "f16"]))
        neg_ok = neg["kl_mean"] >= NEG_KL_MIN
        print(f"  negative control: rope_freqs all 1.0 for strata only: mean KL "
              f"{neg['kl_mean']:.4f}, top-1 {neg['top1']:.1f} % (must be >= {NEG_KL_MIN}: "
              f"{'it is' if neg_ok else 'FAIL, the comparison does not see the factors'})")
    ok = ok and neg_ok
    print(f"{'PASS' if ok else 'FAIL'}: strata vs llama.cpp on Llama 3.x (rope_freqs, tied "
          f"head), {time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
