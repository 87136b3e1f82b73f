"""make_shape_gguf.py - write an F16 random-weight llama GGUF of a real model's shape (the
Python half of scripts/make-shape-gguf, which quantizes the result).

    python make_shape_gguf.py --shape llama-3b --out OUT.gguf --tokenizer-from M.gguf
    python make_shape_gguf.py --list

The vocabulary is the tokenizer GGUF's (the default model's: 49152 tokens), so the token
embedding and output matrices are that many rows; the output matrix is untied.  Weights are
normal with std 0.02 (norm weights 1): a noise model, read like a real one.
"""

import argparse
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "oracle"))
from make_moe_gguf import _copy_tokenizer  # noqa: E402

# name -> (layers, d_model, d_ff, heads, kv heads, rope base, what it stands for)
SHAPES = {
    "llama-1b": (16, 2048, 8192, 32, 8, 500000.0, "Llama-3.2-1B"),
    "llama-3b": (28, 3072, 8192, 24, 8, 500000.0, "Llama-3.2-3B-like"),
    "llama-8b": (32, 4096, 14336, 32, 8, 500000.0, "Llama-3.1-8B"),
}


def write(path, shape, tokenizer_from, seed=1):
    layers, d, ff, nh, nkv, base, _ = SHAPES[shape]
    hd = d // nh
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, "llama")
    n_vocab = _copy_tokenizer(w, tokenizer_from)
    w.add_name(f"{shape}-random")
    w.add_block_count(layers)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_context_length(8192)
    w.add_rope_freq_base(base)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)  # mostly F16

    def mat(name, rows, cols):  # GGUF shape [cols, rows]: numpy (rows, cols)
        a = np.empty((rows, cols), dtype=np.float16)
        for r0 in range(0, rows, 1024):  # in slices: no 2x float32 copy of the whole matrix
            r1 = min(rows, r0 + 1024)
            a[r0:r1] = (rng.standard_normal((r1 - r0, cols), dtype=np.float32) * 0.02)
        w.add_tensor(name, a, raw_dtype=GGMLQuantizationType.F16)

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat("token_embd.weight", n_vocab, d)
    for i in range(layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", nh * hd, d)
        mat(p + "attn_k.weight", nkv * hd, d)
        mat(p + "attn_v.weight", nkv * hd, d)
        mat(p + "attn_output.weight", d, nh * hd)
        norm(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d)
        mat(p + "ffn_up.weight", ff, d)
        mat(p + "ffn_down.weight", d, ff)
    norm("output_norm.weight", d)
    mat("output.weight", n_vocab, d)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--out")
    ap.add_argument("--tokenizer-from")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--list", action="store_true", help="print the shapes and exit")
    a = ap.parse_args()
    if a.list:
        for k, v in SHAPES.items():
            print(f"{k} ({v[6]}: {v[0]} layers, d {v[1]}, FFN {v[2]}, {v[3]}/{v[4]} heads)")
        return 0
    if not (a.shape and a.out and a.tokenizer_from):
        ap.error("--shape, --out and --tokenizer-from are required")
    write(a.out, a.shape, a.tokenizer_from, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
