"""make_moe_gguf.py - write a tiny random-weight Mixture-of-Experts llama GGUF (Mixtral layout)
for the MoE oracle test, with the tokenizer of another GGUF (by default strata's default model)
so that `strata tokenize / generate` work on it.

    python make_moe_gguf.py OUT.gguf [--experts 4] [--used 2] [--gating softmax_topk] [--seed 1]
                            [--layers 2] [--d-model 64] [--d-ff 128] [--tokenizer-from M.gguf]

All weights are F32 (quantize the result with `strata quantize`).  Per layer: the usual attention
tensors, ffn_norm, the router blk.N.ffn_gate_inp.weight [d_model, E] and the stacked experts
ffn_gate_exps / ffn_up_exps [d_model, d_ff, E], ffn_down_exps [d_ff, d_model, E];
llama.feed_forward_length is one expert's width.  Scales: router logits have a std of about 4
(so top-K choices are seldom near-ties), output logits a std of about 3.
"""

import argparse
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

GATINGS = ("softmax_topk", "softmax_all", "unit")


_tokenizers = {}  # source path -> [(key, value, type, sub_type)]: GGUFReader is slow to parse


def _copy_tokenizer(w, src):
    """Copy every tokenizer.* key of the GGUF at src into writer w; returns the vocab size."""
    if src not in _tokenizers:
        r = GGUFReader(src)
        _tokenizers[src] = [(k, f.contents(), f.types[0], f.types[1] if len(f.types) > 1 else None)
                            for k, f in r.fields.items() if k.startswith("tokenizer.")]
    n_vocab = 0
    for key, val, t, sub in _tokenizers[src]:
        if t == GGUFValueType.ARRAY:
            w.add_key_value(key, val, t, sub)
        else:
            w.add_key_value(key, val, t)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(val)
    return n_vocab


def make(path, tokenizer_from, experts=4, used=2, gating=None, seed=1, layers=2, d_model=64,
         d_ff=128, n_head=4, n_head_kv=2):
    """Write the model to path; gating None leaves strata.expert_gating out (softmax_topk)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, "llama")
    n_vocab = _copy_tokenizer(w, tokenizer_from)
    w.add_name("moe-synthetic")
    w.add_block_count(layers)
    w.add_embedding_length(d_model)
    w.add_feed_forward_length(d_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_context_length(2048)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(experts)
    w.add_expert_used_count(used)
    if gating is not None:
        w.add_string("strata.expert_gating", gating)

    def rand(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    hd = d_model // n_head
    sd = 1.0 / np.sqrt(d_model)
    # numpy shape = GGUF ne reversed: (rows, cols) for a matrix, (E, rows, cols) for experts
    w.add_tensor("token_embd.weight", rand((n_vocab, d_model), 1.0))
    w.add_tensor("output_norm.weight", np.ones(d_model, dtype=np.float32))
    w.add_tensor("output.weight", rand((n_vocab, d_model), 3.0 / np.sqrt(d_model)))
    for L in range(layers):
        p = f"blk.{L}."
        w.add_tensor(p + "attn_norm.weight", (1.0 + rand(d_model, 0.1)))
        w.add_tensor(p + "attn_q.weight", rand((n_head * hd, d_model), sd))
        w.add_tensor(p + "attn_k.weight", rand((n_head_kv * hd, d_model), sd))
        w.add_tensor(p + "attn_v.weight", rand((n_head_kv * hd, d_model), sd))
        w.add_tensor(p + "attn_output.weight", rand((d_model, n_head * hd), sd))
        w.add_tensor(p + "ffn_norm.weight", (1.0 + rand(d_model, 0.1)))
        w.add_tensor(p + "ffn_gate_inp.weight", rand((experts, d_model), 4.0 * sd))
        w.add_tensor(p + "ffn_gate_exps.weight", rand((experts, d_ff, d_model), sd))
        w.add_tensor(p + "ffn_up_exps.weight", rand((experts, d_ff, d_model), sd))
        w.add_tensor(p + "ffn_down_exps.weight", rand((experts, d_model, d_ff), 1.0 / np.sqrt(d_ff)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--used", type=int, default=2)
    ap.add_argument("--gating", choices=GATINGS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--d-ff", type=int, default=128)
    default_tok = os.path.join(os.environ.get("HOME", "/root"),
                               ".cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--tokenizer-from", default=os.environ.get("STRATA_MODEL", default_tok))
    a = ap.parse_args()
    make(a.out, a.tokenizer_from, a.experts, a.used, a.gating, a.seed, a.layers, a.d_model, a.d_ff)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
