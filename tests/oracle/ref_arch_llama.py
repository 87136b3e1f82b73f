"""ref_arch_llama.py - the llama architecture as the NumPy reference declares it (SmolLM2,
TinyLlama, Llama 2/3.x, Mistral) and its Mixture-of-Experts variant (Mixtral layout): the
oracle's mirror of model/model_arch_llama.c, written independently of it.

An architecture module declares (ref_model.py reads these names):
  KEYS     (Model attribute, GGUF key after "<general.architecture>.", kind, fallback):
           REQUIRED: the file must have it; DERIVED: ref_model derives it
           (n_kv_heads = n_heads, head_dim = d_model // n_heads, n_rot = head_dim)
  TOP      the model's tensors: (name, required)
  BLK      each layer's tensors for a dense and for an MoE FFN: {"dense": [...], "moe": [...]},
           names with "{L}" for the layer index
  STAGES   the per-layer stages, ref_model.DEFAULT_STAGES's switches (ffn is set from
           <arch>.expert_count: "moe" when > 0)
"""

REQUIRED = "required"
DERIVED = "derived"

KEYS = [
    ("n_layers", "block_count", int, REQUIRED),
    ("d_model", "embedding_length", int, REQUIRED),
    ("d_ff", "feed_forward_length", int, REQUIRED),
    ("n_heads", "attention.head_count", int, REQUIRED),
    ("n_kv_heads", "attention.head_count_kv", int, DERIVED),
    ("head_dim", "attention.key_length", int, DERIVED),
    ("n_rot", "rope.dimension_count", int, DERIVED),
    ("rope_base", "rope.freq_base", float, 10000.0),
    ("eps", "attention.layer_norm_rms_epsilon", float, 1e-5),
]

TOP = [
    ("token_embd.weight", True),
    ("output_norm.weight", True),
    ("output.weight", False),  # absent: tied to token_embd
    ("rope_freqs.weight", False),  # absent: no per-pair frequency divisors
]

_ATTN = [
    ("blk.{L}.attn_norm.weight", True),
    ("blk.{L}.attn_q.weight", True),
    ("blk.{L}.attn_k.weight", True),
    ("blk.{L}.attn_v.weight", True),
    ("blk.{L}.attn_output.weight", True),
    ("blk.{L}.ffn_norm.weight", True),
]

BLK = {
    "dense": _ATTN + [
        ("blk.{L}.ffn_gate.weight", True),
        ("blk.{L}.ffn_up.weight", True),
        ("blk.{L}.ffn_down.weight", True),
    ],
    "moe": _ATTN + [
        ("blk.{L}.ffn_gate_inp.weight", True),
        ("blk.{L}.ffn_gate_exps.weight", True),
        ("blk.{L}.ffn_up_exps.weight", True),
        ("blk.{L}.ffn_down_exps.weight", True),
    ],
}

# Pre-norm RMSNorm, full causal GQA attention without biases or Q/K norms, RoPE on adjacent
# pairs (the llama converter stores Q and K permuted for it: llama.cpp's rope mode 0), a
# SwiGLU feed-forward, the output head tied to the embeddings when output.weight is absent.
STAGES = {
    "norm": "rms",
    "norm_post_attn": False,
    "norm_post_ffn": False,
    "attn": "full",
    "qkv_bias": False,
    "out_bias": False,
    "qk_norm": False,
    "act": "silu",
    "rope": "norm",
    "embd_scale": False,
    "tied_output": True,
}
