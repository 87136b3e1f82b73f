/* model_arch_qwen.c - Qwen2/Qwen2.5 (qwen2) and Qwen3 (qwen3) as model_arch.h declarations:
 * llama's layer (pre-norm RMSNorm, full causal GQA attention, a SwiGLU feed-forward, an
 * output head that may be tied) with RoPE on halves (NEOX: the converter does not permute
 * Q and K), plus biases after the Q, K and V projections (qwen2) or an RMSNorm of each Q and
 * K head before RoPE (qwen3, whose head_dim is a key: 128 at d_model 1024, q_dim 2048).
 */
#include "model_arch.h"

#include <stddef.h>

/* <arch>.* keys, the same for both; 0 as a fallback: derived (model_arch.h) */
static const model_key_t s_keys[] = {
    MODEL_KEY_I("block_count", n_layer, true, 0),
    MODEL_KEY_I("embedding_length", d_model, true, 0),
    MODEL_KEY_I("feed_forward_length", d_ff, true, 0),
    MODEL_KEY_I("attention.head_count", n_head, true, 0),
    MODEL_KEY_I("attention.head_count_kv", n_head_kv, false, 0), /* n_head: no GQA */
    MODEL_KEY_I("context_length", n_ctx_train, false, 32768),
    MODEL_KEY_I("attention.key_length", head_dim, false, 0), /* d_model / n_head */
    MODEL_KEY_I("rope.dimension_count", n_rot, false, 0),    /* head_dim */
    MODEL_KEY_F("rope.freq_base", rope_base, 10000.0), /* llama.cpp's default; files say 1e6 */
    MODEL_KEY_F("attention.layer_norm_rms_epsilon", rms_eps, 1e-6),
    {NULL},
};

#define D(x) MODEL_DIM_##x

static const model_tensor_t s_top[] = {
    {"token_embd.weight", MODEL_W_EMBD, {D(D_MODEL), D(VOCAB)}, true, NULL},
    {"output_norm.weight", MODEL_W_OUT_NORM, {D(D_MODEL)}, true, NULL},
    {"output.weight", MODEL_W_OUT, {D(D_MODEL), D(VOCAB)}, false, NULL}, /* absent: tied */
    {NULL},
};

/* What both layers share around their attention extras. */
#define S_QKVO                                                                                     \
    {"blk.%d.attn_norm.weight", MODEL_W_ATTN_NORM, {D(D_MODEL)}, true, NULL},                      \
        {"blk.%d.attn_q.weight", MODEL_W_Q, {D(D_MODEL), D(Q)}, true, NULL},                       \
        {"blk.%d.attn_k.weight", MODEL_W_K, {D(D_MODEL), D(KV)}, true, NULL},                      \
        {"blk.%d.attn_v.weight", MODEL_W_V, {D(D_MODEL), D(KV)}, true, NULL}, {                    \
        "blk.%d.attn_output.weight", MODEL_W_O, {D(Q), D(D_MODEL)}, true, NULL                     \
    }
#define S_FFN                                                                                      \
    {"blk.%d.ffn_norm.weight", MODEL_W_FFN_NORM, {D(D_MODEL)}, true, NULL},                        \
        {"blk.%d.ffn_gate.weight", MODEL_W_GATE, {D(D_MODEL), D(FF)}, true, NULL},                 \
        {"blk.%d.ffn_up.weight", MODEL_W_UP, {D(D_MODEL), D(FF)}, true, NULL}, {                   \
        "blk.%d.ffn_down.weight", MODEL_W_DOWN, {D(FF), D(D_MODEL)}, true, NULL                    \
    }

static const model_tensor_t s_blk_qwen2[] = {
    S_QKVO,
    {"blk.%d.attn_q.bias", MODEL_W_Q_BIAS, {D(Q)}, true, NULL},
    {"blk.%d.attn_k.bias", MODEL_W_K_BIAS, {D(KV)}, true, NULL},
    {"blk.%d.attn_v.bias", MODEL_W_V_BIAS, {D(KV)}, true, NULL},
    S_FFN,
    {NULL},
};

static const model_tensor_t s_blk_qwen3[] = {
    S_QKVO,
    {"blk.%d.attn_q_norm.weight", MODEL_W_Q_NORM, {D(HEAD)}, true, NULL},
    {"blk.%d.attn_k_norm.weight", MODEL_W_K_NORM, {D(HEAD)}, true, NULL},
    S_FFN,
    {NULL},
};

const model_arch_t model_arch_qwen2 = {
    .name = "qwen2",
    .models = "Qwen2, Qwen2.5",
    .keys = s_keys,
    .top = s_top,
    .blk = s_blk_qwen2,
    .stages = {.norm = MODEL_NORM_RMS,
               .attn = MODEL_ATTN_FULL,
               .qkv_bias = true,
               .ffn = MODEL_FFN_DENSE,
               .act = MODEL_ACT_SILU},
    .rope = MODEL_ROPE_NEOX,
    .tied_output = true,
};

const model_arch_t model_arch_qwen3 = {
    .name = "qwen3",
    .models = "Qwen3",
    .keys = s_keys,
    .top = s_top,
    .blk = s_blk_qwen3,
    .stages = {.norm = MODEL_NORM_RMS,
               .attn = MODEL_ATTN_FULL,
               .qk_norm = true,
               .ffn = MODEL_FFN_DENSE,
               .act = MODEL_ACT_SILU},
    .rope = MODEL_ROPE_NEOX,
    .tied_output = true,
};
