"""ref_arch_qwen.py - Qwen2/Qwen2.5 (qwen2) and Qwen3 (qwen3) as the NumPy reference declares
them: the oracle's mirror of model/model_arch_qwen.c, written independently of it, in the
form ref_arch_llama.py documents (KEYS, TOP, BLK, STAGES; one module per general.architecture
here, so QWEN2 and QWEN3 are namespaces with those names).

Both are llama's layer with RoPE on halves (llama.cpp's NEOX mode: the converter leaves Q and
K unpermuted) and a head that may be tied; qwen2 adds a bias after each of the Q, K and V
projections, qwen3 an RMSNorm of each Q and K head (weights of head_dim, eps the model's)
before RoPE.  llama.cpp's rope base default is 10000; Qwen files carry 1e6.
"""

import types

from ref_arch_llama import DERIVED, REQUIRED

KEYS = [
    ("n_layers", "block_count", int, REQUIRED),
    ("d_model", "embedding_length", int, REQUIRED),
    ("d_ff", "feed_forward_length", int, REQUIRED),
    ("n_heads", "attention.head_count", int, REQUIRED),
    ("n_kv_heads", "attention.head_count_kv", int, DERIVED),
    ("head_dim", "attention.key_length", int, DERIVED),
    ("n_rot", "rope.dimension_count", int, DERIVED),
    ("rope_base", "rope.freq_base", float, 10000.0),
    ("eps", "attention.layer_norm_rms_epsilon", float, 1e-6),
]

TOP = [
    ("token_embd.weight", True),
    ("output_norm.weight", True),
    ("output.weight", False),  # absent: tied to token_embd (Qwen2.5-0.5B, Qwen3-0.6B)
]

_ATTN = [
    ("blk.{L}.attn_norm.weight", True),
    ("blk.{L}.attn_q.weight", True),
    ("blk.{L}.attn_k.weight", True),
    ("blk.{L}.attn_v.weight", True),
    ("blk.{L}.attn_output.weight", True),
]
_FFN = [
    ("blk.{L}.ffn_norm.weight", True),
    ("blk.{L}.ffn_gate.weight", True),
    ("blk.{L}.ffn_up.weight", True),
    ("blk.{L}.ffn_down.weight", True),
]

_STAGES = {
    "norm": "rms",
    "norm_post_attn": False,
    "norm_post_ffn": False,
    "attn": "full",
    "qkv_bias": False,
    "out_bias": False,
    "qk_norm": False,
    "act": "silu",
    "rope": "neox",
    "embd_scale": False,
    "tied_output": True,
}

QWEN2 = types.SimpleNamespace(
    KEYS=KEYS, TOP=TOP,
    BLK={"dense": _ATTN + [("blk.{L}.attn_q.bias", True), ("blk.{L}.attn_k.bias", True),
                           ("blk.{L}.attn_v.bias", True)] + _FFN},
    STAGES=dict(_STAGES, qkv_bias=True))

QWEN3 = types.SimpleNamespace(
    KEYS=KEYS, TOP=TOP,
    BLK={"dense": _ATTN + [("blk.{L}.attn_q_norm.weight", True),
                           ("blk.{L}.attn_k_norm.weight", True)] + _FFN},
    STAGES=dict(_STAGES, qk_norm=True))
