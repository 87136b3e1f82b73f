/* model_arch_gemma3.c - the Gemma 3 architecture (Gemma 3 270M, 1B, 4B, 12B, 27B text
 * weights) as a model_arch.h declaration: the embeddings scaled by sqrt(d_model), RMSNorm
 * before and after each sub-layer (the GGUF converter has folded Gemma's 1 + w into the
 * weights), RMSNorm of each Q and K head before RoPE on halves (NeoX), a GeGLU feed-forward,
 * the output head tied to the embeddings, and five sliding-window layers to one global one.
 */
#include "model_arch.h"

#include <stddef.h>

/* gemma3.* keys; 0 as a fallback: derived (model_arch.h) */
static const model_key_t s_keys[] = {
    MODEL_KEY_I("block_count", n_layer, true, 0),
    MODEL_KEY_I("embedding_length", d_model, true, 0),
    MODEL_KEY_I("feed_forward_length", d_ff, true, 0),
    MODEL_KEY_I("attention.head_count", n_head, true, 0),
    MODEL_KEY_I("attention.head_count_kv", n_head_kv, false, 0), /* n_head */
    MODEL_KEY_I("context_length", n_ctx_train, false, 131072),
    MODEL_KEY_I("attention.key_length", head_dim, false, 0), /* d_model / n_head */
    MODEL_KEY_I("rope.dimension_count", n_rot, false, 0),    /* head_dim */
    MODEL_KEY_I("attention.sliding_window", swa_window, true, 0),
    MODEL_KEY_I("attention.query_pre_attn_scalar", query_scalar, false, 0), /* head_dim */
    MODEL_KEY_F("rope.freq_base", rope_base, 1000000.0),                    /* global layers */
    MODEL_KEY_F("rope.freq_base_swa", rope_base_swa, 10000.0),              /* sliding layers */
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

static const model_tensor_t s_blk[] = {
    {"blk.%d.attn_norm.weight", MODEL_W_ATTN_NORM, {D(D_MODEL)}, true, NULL},
    {"blk.%d.attn_q.weight", MODEL_W_Q, {D(D_MODEL), D(Q)}, true, NULL},
    {"blk.%d.attn_k.weight", MODEL_W_K, {D(D_MODEL), D(KV)}, true, NULL},
    {"blk.%d.attn_v.weight", MODEL_W_V, {D(D_MODEL), D(KV)}, true, NULL},
    {"blk.%d.attn_q_norm.weight", MODEL_W_Q_NORM, {D(HEAD)}, true, NULL},
    {"blk.%d.attn_k_norm.weight", MODEL_W_K_NORM, {D(HEAD)}, true, NULL},
    {"blk.%d.attn_output.weight", MODEL_W_O, {D(Q), D(D_MODEL)}, true, NULL},
    {"blk.%d.post_attention_norm.weight", MODEL_W_ATTN_POST_NORM, {D(D_MODEL)}, true, NULL},
    {"blk.%d.ffn_norm.weight", MODEL_W_FFN_NORM, {D(D_MODEL)}, true, NULL},
    {"blk.%d.ffn_gate.weight", MODEL_W_GATE, {D(D_MODEL), D(FF)}, true, NULL},
    {"blk.%d.ffn_up.weight", MODEL_W_UP, {D(D_MODEL), D(FF)}, true, NULL},
    {"blk.%d.ffn_down.weight", MODEL_W_DOWN, {D(FF), D(D_MODEL)}, true, NULL},
    {"blk.%d.post_ffw_norm.weight", MODEL_W_FFN_POST_NORM, {D(D_MODEL)}, true, NULL},
    {NULL},
};

/* Layers 0-4, 6-10, ... see the last swa_window positions (their own included), with the
 * sliding layers' RoPE base; every sixth layer (l + 1 divisible by 6) sees them all. */
static void s_layer_stages(const model_arch_t *arch, const model_config_t *cfg, int l,
                           model_stages_t *out) {
    (void)arch;
    if ((l + 1) % 6 != 0) {
        out->attn = MODEL_ATTN_SLIDING;
        out->window = cfg->swa_window;
    }
}

const model_arch_t model_arch_gemma3 = {
    .name = "gemma3",
    .models = "Gemma 3",
    .keys = s_keys,
    .top = s_top,
    .blk = s_blk,
    .stages = {.norm = MODEL_NORM_RMS,
               .norm_post_attn = true,
               .norm_post_ffn = true,
               .attn = MODEL_ATTN_FULL,
               .qk_norm = true,
               .ffn = MODEL_FFN_DENSE,
               .act = MODEL_ACT_GELU},
    .layer_stages = s_layer_stages,
    .rope = MODEL_ROPE_NEOX,
    .embd_scale = true,
    .tied_output = true,
};
