"""make_shape_gguf.py - write a random-weight GGUF of a real model's shape (the Python half of
scripts/make-shape-gguf, which quantizes the result; the Qwen oracle tests call write()).

    python make_shape_gguf.py --shape llama-3b --out OUT.gguf --tokenizer-from M.gguf
    python make_shape_gguf.py --shape qwen3-0.6b --layers 4 --type f32 --out OUT.gguf \\
                              --tokenizer-from M.gguf
    python make_shape_gguf.py --shape llama3-1b --layers 2 --out OUT.gguf --tokenizer-from M.gguf
    python make_shape_gguf.py --list

The vocabulary is the tokenizer GGUF's (the default model's: 49152 tokens), so the token
embedding and output matrices are that many rows.  --layers keeps the width and cuts the
depth; --type picks F16 (default) or F32 matrices (vectors are always F32).

llama shapes: a noise model read like a real one for speed measurements: weights normal with
std 0.02, norm weights 1, the output matrix untied.
llama3 shapes (Llama-3.2-1B as it really is): the llama-1b widths with what the llama shapes
leave out: a rope_freqs.weight tensor of Llama 3's frequency factors (rope_factors() below,
computed as llama.cpp's convert_hf_to_gguf.py does for rope_scaling type "llama3"), no
output.weight (the head tied to the embeddings), and the oracle scaling of the Qwen shapes
(next paragraph), so that logits are not flat and positions matter to attention.
qwen2 / qwen3 shapes (Qwen2.5-0.5B: Q/K/V biases; Qwen3-0.6B: Q/K head norms, head_dim 128 so
q_dim 2048 != d_model 1024; both tied to the embeddings, rope base 1e6, NEOX RoPE as
llama.cpp runs them): scaled as tests/oracle/make_moe_gguf.py is, for forward-pass oracles
whose outputs must not be degenerate: each matrix normal with std 1/sqrt(its input width)
(Q and K twice that, so that the Q/K head norms have something to undo), the tied embeddings
std 3/sqrt(d_model) (output logits with a std of about 3), norm weights 1 + N(0, 0.1) and
biases N(0, 0.5): leaving out a bias or a norm moves the logits by whole std.
"""

import argparse
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "oracle"))
from make_moe_gguf import _copy_tokenizer  # noqa: E402

# name -> (arch, layers, d_model, d_ff, heads, kv heads, head_dim, rope base, stands for)
SHAPES = {
    "llama-1b": ("llama", 16, 2048, 8192, 32, 8, 64, 500000.0, "Llama-3.2-1B"),
    "llama-3b": ("llama", 28, 3072, 8192, 24, 8, 128, 500000.0, "Llama-3.2-3B-like"),
    "llama-8b": ("llama", 32, 4096, 14336, 32, 8, 128, 500000.0, "Llama-3.1-8B"),
    "llama3-1b": ("llama", 16, 2048, 8192, 32, 8, 64, 500000.0, "Llama-3.2-1B, tied, rope_freqs"),
    "qwen2-0.5b": ("qwen2", 24, 896, 4864, 14, 2, 64, 1000000.0, "Qwen2.5-0.5B"),
    "qwen3-0.6b": ("qwen3", 28, 1024, 3072, 16, 8, 128, 1000000.0, "Qwen3-0.6B"),
}
# llama3 shapes -> their rope_scaling: (factor, low_freq_factor, high_freq_factor,
# original_max_position_embeddings), Llama-3.2-1B's config.json
LLAMA3_ROPE = {"llama3-1b": (32.0, 1.0, 4.0, 8192)}
TYPES = {"f16": (np.float16, GGMLQuantizationType.F16, 1),
         "f32": (np.float32, GGMLQuantizationType.F32, 0)}


def rope_factors(head_dim, base, factor, low_freq_factor, high_freq_factor, old_ctx):
    """Llama 3's RoPE frequency factors (the divisors of each pair's rate), as llama.cpp's
    converter writes them into rope_freqs.weight: 1 for wavelengths under old_ctx /
    high_freq_factor, `factor` over old_ctx / low_freq_factor, a smooth blend between."""
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen, high_wavelen = old_ctx / low_freq_factor, old_ctx / high_freq_factor
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write(path, shape, tokenizer_from, seed=1, layers=None, wtype="f16", rope_freqs=None):
    """Write shape's GGUF to path.  rope_freqs (llama3 shapes only): the factors to write
    instead of the real ones (a test's negative control: all 1.0 is Llama 3 without its
    long-context scaling)."""
    arch, n_layer, d, ff, nh, nkv, hd, base, _ = SHAPES[shape]
    layers = layers or n_layer
    llama3 = LLAMA3_ROPE.get(shape)
    qwen = arch != "llama" or llama3 is not None  # the oracle scaling (and a tied head)
    dtype, gtype, ftype = TYPES[wtype]
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, arch)
    n_vocab = _copy_tokenizer(w, tokenizer_from)
    w.add_name(f"{shape}-random")
    w.add_block_count(layers)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_context_length(131072 if llama3 else 32768 if qwen else 8192)
    w.add_rope_freq_base(base)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5 if arch == "llama" else 1e-6)
    w.add_file_type(ftype)

    def mat(name, rows, cols, std=None):  # GGUF shape [cols, rows]: numpy (rows, cols)
        std = (1.0 / np.sqrt(cols) if qwen else 0.02) if std is None else std
        a = np.empty((rows, cols), dtype=dtype)
        for r0 in range(0, rows, 1024):  # in slices: no 2x float32 copy of the whole matrix
            r1 = min(rows, r0 + 1024)
            a[r0:r1] = rng.standard_normal((r1 - r0, cols), dtype=np.float32) * np.float32(std)
        w.add_tensor(name, a, raw_dtype=gtype)

    def vec(name, n, mean, std):
        w.add_tensor(name, (mean + rng.standard_normal(n) * std).astype(np.float32))

    def norm(name, n):
        vec(name, n, 1.0, 0.1 if qwen else 0.0)

    if llama3:
        w.add_tensor("rope_freqs.weight", rope_factors(hd, base, *llama3) if rope_freqs is None
                     else np.asarray(rope_freqs, dtype=np.float32))
    mat("token_embd.weight", n_vocab, d, 3.0 / np.sqrt(d) if qwen else None)
    for i in range(layers):
        p = f"blk.{i}."
        qk = 2.0 / np.sqrt(d) if qwen else None
        norm(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", nh * hd, d, qk)
        mat(p + "attn_k.weight", nkv * hd, d, qk)
        mat(p + "attn_v.weight", nkv * hd, d)
        if arch == "qwen2":
            vec(p + "attn_q.bias", nh * hd, 0.0, 0.5)
            vec(p + "attn_k.bias", nkv * hd, 0.0, 0.5)
            vec(p + "attn_v.bias", nkv * hd, 0.0, 0.5)
        if arch == "qwen3":
            norm(p + "attn_q_norm.weight", hd)
            norm(p + "attn_k_norm.weight", hd)
        mat(p + "attn_output.weight", d, nh * hd)
        norm(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d)
        mat(p + "ffn_up.weight", ff, d)
        mat(p + "ffn_down.weight", d, ff)
    norm("output_norm.weight", d)
    if not qwen:  # the Qwen and llama3 shapes are tied, as their models are
        mat("output.weight", n_vocab, d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--out")
    ap.add_argument("--tokenizer-from")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, help="fewer layers than the shape's (same width)")
    ap.add_argument("--type", choices=sorted(TYPES), default="f16", help="matrix type")
    ap.add_argument("--list", action="store_true", help="print the shapes and exit")
    a = ap.parse_args()
    if a.list:
        for k, v in SHAPES.items():
            print(f"{k} ({v[8]}: {v[0]}, {v[1]} layers, d {v[2]}, FFN {v[3]}, "
                  f"{v[4]}/{v[5]} heads of {v[6]})")
        return 0
    if not (a.shape and a.out and a.tokenizer_from):
        ap.error("--shape, --out and --tokenizer-from are required")
    write(a.out, a.shape, a.tokenizer_from, a.seed, a.layers, a.type)
    return 0


if __name__ == "__main__":
    sys.exit(main())
