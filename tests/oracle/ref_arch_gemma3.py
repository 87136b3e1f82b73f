"""ref_arch_gemma3.py - the Gemma 3 architecture as the NumPy reference declares it: the
oracle's mirror of model/model_arch_gemma3.c, written independently of it from the Gemma 3
paper and llama.cpp's GGUF conventions (the converter adds Gemma's 1 to every norm weight, so
a norm here is x / rms(x) * w as for llama).

Per layer: RMSNorm before and after attention and FFN (sandwich), RMSNorm of each Q and K
head before RoPE on halves (neox), scores scaled by 1/sqrt(query_pre_attn_scalar) (head_dim
without the key), a GELU(tanh)-gated FFN; the embeddings times sqrt(d_model); the head tied
to the embeddings.  Layers l with (l + 1) % 6 != 0 see only the last sliding_window
positions (their own included) and turn RoPE with base rope.freq_base_swa (10000); every
sixth layer sees all positions with rope.freq_base (1e6).  Module names as ref_arch_llama.py
documents them, plus LAYER_STAGES(m, L): the switches that differ in layer L.
"""

from ref_arch_llama import DERIVED, REQUIRED

KEYS = [
    ("n_layers", "block_count", int, REQUIRED),
    ("d_model", "embedding_length", int, REQUIRED),
    ("d_ff", "feed_forward_length", int, REQUIRED),
    ("n_heads", "attention.head_count", int, REQUIRED),
    ("n_kv_heads", "attention.head_count_kv", int, DERIVED),
    ("head_dim", "attention.key_length", int, DERIVED),
    ("n_rot", "rope.dimension_count", int, DERIVED),
    ("window", "attention.sliding_window", int, REQUIRED),
    ("query_scalar", "attention.query_pre_attn_scalar", int, DERIVED),
    ("rope_base", "rope.freq_base", float, 1000000.0),
    ("rope_base_swa", "rope.freq_base_swa", float, 10000.0),
    ("eps", "attention.layer_norm_rms_epsilon", float, 1e-6),
]

TOP = [
    ("token_embd.weight", True),
    ("output_norm.weight", True),
    ("output.weight", False),  # absent: tied to token_embd
]

BLK = {
    "dense": [
        ("blk.{L}.attn_norm.weight", True),
        ("blk.{L}.attn_q.weight", True),
        ("blk.{L}.attn_k.weight", True),
        ("blk.{L}.attn_v.weight", True),
        ("blk.{L}.attn_q_norm.weight", True),
        ("blk.{L}.attn_k_norm.weight", True),
        ("blk.{L}.attn_output.weight", True),
        ("blk.{L}.post_attention_norm.weight", True),
        ("blk.{L}.ffn_norm.weight", True),
        ("blk.{L}.ffn_gate.weight", True),
        ("blk.{L}.ffn_up.weight", True),
        ("blk.{L}.ffn_down.weight", True),
        ("blk.{L}.post_ffw_norm.weight", True),
    ],
    "moe": [],  # no Gemma 3 MoE: refused (a missing dense tensor)
}

STAGES = {
    "norm": "rms",
    "norm_post_attn": True,
    "norm_post_ffn": True,
    "attn": "full",
    "qkv_bias": False,
    "out_bias": False,
    "qk_norm": True,
    "act": "gelu",
    "rope": "neox",
    "embd_scale": True,
    "tied_output": True,
}


def LAYER_STAGES(m, L):
    """Five local layers to one global one: layer L slides unless L + 1 is a multiple of 6."""
    return {"attn": "sliding"} if (L + 1) % 6 else {}
