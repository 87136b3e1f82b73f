/* model_arch_llama.c - the llama architecture (SmolLM2, TinyLlama, Llama 2/3.x, Mistral) and
 * its Mixture-of-Experts variant (Mixtral layout, docs/MOE.md), as model_arch.h declarations:
 * pre-norm RMSNorm, full causal attention with grouped KV heads and no biases, RoPE on
 * adjacent pairs (the GGUF converter permutes Q and K for it), a SwiGLU feed-forward (dense,
 * or K of E experts), an output head that may be tied to the embeddings.
 */
#include "model_arch.h"

#include <stddef.h>

/* <arch>.* keys; 0 as a fallback: derived (model_arch.h) */
static const model_key_t s_keys[] = {
    MODEL_KEY_I("block_count", n_layer, true, 0),
    MODEL_KEY_I("embedding_length", d_model, true, 0),
    MODEL_KEY_I("feed_forward_length", d_ff, true, 0),
    MODEL_KEY_I("attention.head_count", n_head, true, 0),
    MODEL_KEY_I("attention.head_count_kv", n_head_kv, false, 0), /* n_head: no GQA */
    MODEL_KEY_I("context_length", n_ctx_train, false, 2048),
    MODEL_KEY_I("attention.key_length", head_dim, false, 0), /* d_model / n_head */
    MODEL_KEY_I("rope.dimension_count", n_rot, false, 0),    /* head_dim */
    MODEL_KEY_F("rope.freq_base", rope_base, 10000.0),
    MODEL_KEY_F("attention.layer_norm_rms_epsilon", rms_eps, 1e-5),
    {NULL},
};

#define D(x) MODEL_DIM_##x

static const model_tensor_t s_top[] = {
    {"token_embd.weight", MODEL_W_EMBD, {D(D_MODEL), D(VOCAB)}, true, NULL},
    {"output_norm.weight", MODEL_W_OUT_NORM, {D(D_MODEL)}, true, NULL},
    {"output.weight", MODEL_W_OUT, {D(D_MODEL), D(VOCAB)}, false, NULL}, /* absent: tied */
    {"rope_freqs.weight", MODEL_W_ROPE_FREQS, {D(ROT_HALF)}, false, NULL},
    {NULL},
};

/* The attention half of a layer, the same in both variants. */
#define S_ATTENTION                                                                                \
    {"blk.%d.attn_norm.weight", MODEL_W_ATTN_NORM, {D(D_MODEL)}, true, NULL},                      \
        {"blk.%d.attn_q.weight", MODEL_W_Q, {D(D_MODEL), D(Q)}, true, NULL},                       \
        {"blk.%d.attn_k.weight", MODEL_W_K, {D(D_MODEL), D(KV)}, true, NULL},                      \
        {"blk.%d.attn_v.weight", MODEL_W_V, {D(D_MODEL), D(KV)}, true, NULL},                      \
        {"blk.%d.attn_output.weight", MODEL_W_O, {D(Q), D(D_MODEL)}, true, NULL}, {                \
        "blk.%d.ffn_norm.weight", MODEL_W_FFN_NORM, {D(D_MODEL)}, true, NULL                       \
    }

static const model_tensor_t s_blk_dense[] = {
    S_ATTENTION,
    /* an expert tensor without llama.expert_count is a broken MoE file, not a dense one */
    {"blk.%d.ffn_gate_exps.weight", MODEL_W_GATE_EXPS, {D(NONE)}, false, "expert_count"},
    {"blk.%d.ffn_gate.weight", MODEL_W_GATE, {D(D_MODEL), D(FF)}, true, NULL},
    {"blk.%d.ffn_up.weight", MODEL_W_UP, {D(D_MODEL), D(FF)}, true, NULL},
    {"blk.%d.ffn_down.weight", MODEL_W_DOWN, {D(FF), D(D_MODEL)}, true, NULL},
    {NULL},
};

static const model_tensor_t s_blk_moe[] = {
    S_ATTENTION,
    {"blk.%d.ffn_gate_inp.weight", MODEL_W_ROUTER, {D(D_MODEL), D(EXPERT)}, true, NULL},
    {"blk.%d.ffn_gate_exps.weight", MODEL_W_GATE_EXPS, {D(D_MODEL), D(FF), D(EXPERT)}, true, NULL},
    {"blk.%d.ffn_up_exps.weight", MODEL_W_UP_EXPS, {D(D_MODEL), D(FF), D(EXPERT)}, true, NULL},
    {"blk.%d.ffn_down_exps.weight", MODEL_W_DOWN_EXPS, {D(FF), D(D_MODEL), D(EXPERT)}, true, NULL},
    {NULL},
};

const model_arch_t model_arch_llama = {
    .name = "llama",
    .models = "SmolLM2, TinyLlama, Llama 2/3.x, Mistral",
    .keys = s_keys,
    .top = s_top,
    .blk = s_blk_dense,
    .stages = {.norm = MODEL_NORM_RMS,
               .attn = MODEL_ATTN_FULL,
               .ffn = MODEL_FFN_DENSE,
               .act = MODEL_ACT_SILU},
    .rope = MODEL_ROPE_NORM,
    .tied_output = true,
};

const model_arch_t model_arch_llama_moe = {
    .name = "llama-moe",
    .models = "Mixtral",
    .keys = s_keys,
    .top = s_top,
    .blk = s_blk_moe,
    .stages = {.norm = MODEL_NORM_RMS,
               .attn = MODEL_ATTN_FULL,
               .ffn = MODEL_FFN_MOE,
               .act = MODEL_ACT_SILU},
    .rope = MODEL_ROPE_NORM,
    .tied_output = true,
};
