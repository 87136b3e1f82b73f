/* model_arch.h - what an architecture is to model/: its hyper-parameters (GGUF keys), its
 * tensors (names, shapes, required or optional) and the stages of each layer, declared as
 * data.  One file per architecture (model_arch_llama.c, ...) fills a model_arch_t; one table
 * (model_arch.c) maps general.architecture to them.  The loader (model_load.c) reads keys
 * and tensors from the declaration; the forward pass (model_forward.c) runs the declared
 * stages.  Internal to model/: outside it there is only model.h.
 *
 * Adding an architecture:
 *   1. model/model_arch_<name>.c: a const model_arch_t with its keys, tensors and stages
 *      (copy model_arch_llama.c; a per-layer variation, such as Gemma 3's five sliding-window
 *      layers to one full one, goes in layer_stages).
 *   2. one row in s_table of model/model_arch.c: the general.architecture string and the
 *      declaration (a dense and an MoE variant may share a name: the row's moe flag and the
 *      GGUF's <arch>.expert_count choose).
 *   3. a stage the forward pass does not run yet (model_arch_unsupported() names it: Q/K/V
 *      biases, LayerNorm, a GELU MoE)
 *      is one case in the stage of model_forward.c that its switch names, and the NumPy
 *      oracle's matching switch in tests/oracle/ref_model.py plus tests/oracle/ref_arch_<name>.py.
 * For example Qwen2 is llama with qkv_bias; Qwen3 llama with qk_norm; Gemma 3 has
 * norm_post_attn and norm_post_ffn (sandwich), MODEL_ACT_GELU, embd_scale, a sliding window
 * on most layers and Q/K norms.
 */
#ifndef MODEL_ARCH_H
#define MODEL_ARCH_H

#include "model.h"
#include <stdbool.h>
#include <stddef.h>

/* ---- hyper-parameters */

/* Where a key's value goes: a field of model_config_t, an int or a float. */
typedef enum {
    MODEL_KEY_INT,   /* a positive integer up to 2^30; an invalid optional one keeps the default */
    MODEL_KEY_FLOAT, /* a positive number; an invalid optional one keeps the default */
} model_key_kind_t;

/* One GGUF key "<general.architecture>.<key>". */
typedef struct {
    const char *key;       /* after the "<arch>." prefix: "block_count" */
    model_key_kind_t kind; /* int or float */
    size_t field;          /* offsetof(model_config_t, ...) */
    bool required;         /* absent: refused, naming the key */
    double fallback;       /* absent and not required; 0: derived (model_load.c says how:
                              n_head_kv = n_head, head_dim = d_model / n_head, n_rot = head_dim,
                              query_scalar = head_dim, rope_base_swa = rope_base) */
} model_key_t;

/* Rows of a key table: an int key (required, or with a fallback) and an optional float key. */
#define MODEL_KEY_I(k, f, req, def)                                                                \
    { k, MODEL_KEY_INT, offsetof(model_config_t, f), req, def }
#define MODEL_KEY_F(k, f, def)                                                                     \
    { k, MODEL_KEY_FLOAT, offsetof(model_config_t, f), false, def }

/* ---- tensors */

/* A dimension of a declared tensor, in terms of the configuration. */
typedef enum {
    MODEL_DIM_NONE = 0, /* no such dimension (the tensor has fewer) */
    MODEL_DIM_D_MODEL,  /* d_model */
    MODEL_DIM_Q,        /* n_head * head_dim */
    MODEL_DIM_KV,       /* n_head_kv * head_dim */
    MODEL_DIM_FF,       /* d_ff (of one expert) */
    MODEL_DIM_VOCAB,    /* n_vocab (rows of token_embd) */
    MODEL_DIM_EXPERT,   /* n_expert */
    MODEL_DIM_HEAD,     /* head_dim (Q/K norms) */
    MODEL_DIM_ROT_HALF, /* n_rot / 2 (rope frequency factors) */
} model_dim_t;

/* Which weight of the model a tensor is (a slot of the model or of each layer). */
typedef enum {
    /* the model's */
    MODEL_W_EMBD,       /* token_embd (n_vocab, d_model) */
    MODEL_W_OUT_NORM,   /* output_norm (d_model) */
    MODEL_W_OUT,        /* output head (n_vocab, d_model); absent + tied_output: token_embd */
    MODEL_W_ROPE_FREQS, /* rope frequency divisors (n_rot/2) */
    /* each layer's */
    MODEL_W_ATTN_NORM,      /* (d_model) before attention */
    MODEL_W_Q,              /* (q_dim, d_model) */
    MODEL_W_K,              /* (kv_dim, d_model) */
    MODEL_W_V,              /* (kv_dim, d_model) */
    MODEL_W_O,              /* (d_model, q_dim) */
    MODEL_W_Q_BIAS,         /* (q_dim)       with qkv_bias */
    MODEL_W_K_BIAS,         /* (kv_dim)      with qkv_bias */
    MODEL_W_V_BIAS,         /* (kv_dim)      with qkv_bias */
    MODEL_W_O_BIAS,         /* (d_model)     with out_bias */
    MODEL_W_Q_NORM,         /* (head_dim)    with qk_norm */
    MODEL_W_K_NORM,         /* (head_dim)    with qk_norm */
    MODEL_W_ATTN_POST_NORM, /* (d_model)     with norm_post_attn */
    MODEL_W_FFN_NORM,       /* (d_model) before the feed-forward */
    MODEL_W_GATE,           /* (d_ff, d_model) dense */
    MODEL_W_UP,             /* (d_ff, d_model) dense */
    MODEL_W_DOWN,           /* (d_model, d_ff) dense */
    MODEL_W_ROUTER,         /* (n_expert, d_model) MoE */
    MODEL_W_GATE_EXPS,      /* (n_expert, d_ff, d_model) MoE, stacked */
    MODEL_W_UP_EXPS,        /* (n_expert, d_ff, d_model) MoE, stacked */
    MODEL_W_DOWN_EXPS,      /* (n_expert, d_model, d_ff) MoE, stacked */
    MODEL_W_FFN_POST_NORM,  /* (d_model)     with norm_post_ffn */
    MODEL_W_COUNT
} model_slot_t;

/* One tensor.  Shapes are in GGUF order: ne[0] is the contiguous (input) dimension, so a
 * (rows, cols) matrix is {cols, rows}.  A 1-D tensor is read into floats, a 2-D one is a
 * weight matrix, a 3-D one E stacked matrices (one slab per expert). */
typedef struct {
    const char *name;   /* "output_norm.weight", or per layer "blk.%d.attn_q.weight" */
    model_slot_t slot;  /* where it goes */
    model_dim_t ne[3];  /* shape, GGUF order; MODEL_DIM_NONE past the last dimension */
    bool required;      /* absent: refused, naming the tensor; optional: slot left empty */
    const char *forbid; /* or NULL: this tensor must be absent unless key "<arch>.<forbid>"
                           says otherwise (a dense declaration meeting an MoE tensor) */
} model_tensor_t;

/* ---- stages */

typedef enum {
    MODEL_NORM_RMS = 0, /* x / sqrt(mean(x^2) + eps) * w */
    MODEL_NORM_LAYER,   /* (x - mean) / sqrt(var + eps) * w + b (not run yet) */
} model_norm_t;

typedef enum {
    MODEL_ATTN_FULL = 0, /* causal attention over every earlier position */
    MODEL_ATTN_SLIDING,  /* over the last window positions only, its own included; RoPE with
                            rope_base_swa */
} model_attn_t;

typedef enum {
    MODEL_FFN_DENSE = 0, /* down(act(gate h) * up h) */
    MODEL_FFN_MOE,       /* router, top-K of E experts each a dense FFN (model_moe.c) */
} model_ffn_t;

typedef enum {
    MODEL_ACT_SILU = 0, /* SwiGLU: silu(gate) * up */
    MODEL_ACT_GELU,     /* GeGLU: gelu_tanh(gate) * up (dense only) */
} model_act_t;

typedef enum {
    MODEL_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) (GGUF llama's permuted Q/K) */
    MODEL_ROPE_NEOX,     /* rotate halves (x[i], x[i + n_rot/2]) */
} model_rope_t;

/* What one layer computes, in dataflow order:
 *   h = norm(x)                               norm kind
 *   q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)  qkv_bias
 *   q, k = norm_head(q), norm_head(k)         qk_norm (RMSNorm per head)
 *   q, k = rope(q), rope(k)                   rope kind
 *   a = attention(q, KV)                      full or sliding window
 *   o = a Wo (+bo)                            out_bias
 *   x += norm(o)  or  x += o                  norm_post_attn (sandwich)
 *   h = norm(x) ; f = ffn(h)                  ffn kind, act
 *   x += norm(f)  or  x += f                  norm_post_ffn
 */
typedef struct {
    model_norm_t norm;   /* kind of every norm of the layer */
    bool norm_post_attn; /* a norm on the attention output before the residual add */
    bool norm_post_ffn;  /* a norm on the FFN output before the residual add */
    model_attn_t attn;   /* full or sliding window */
    int window;          /* positions seen by a sliding-window layer */
    bool qkv_bias;       /* biases on Q, K, V */
    bool out_bias;       /* bias on the attention output projection */
    bool qk_norm;        /* RMSNorm of each Q and K head before RoPE */
    model_ffn_t ffn;     /* dense or MoE */
    model_act_t act;     /* gate activation */
} model_stages_t;

/* An architecture. */
typedef struct model_arch_t model_arch_t;
struct model_arch_t {
    const char *name;          /* shown in messages: "llama", "llama-moe" */
    const char *models;        /* examples, for the unsupported-architecture message */
    const model_key_t *keys;   /* hyper-parameters, ended by {NULL} */
    const model_tensor_t *top; /* the model's tensors, ended by {NULL} */
    const model_tensor_t *blk; /* each layer's tensors ("blk.%d." names), ended by {NULL} */
    model_stages_t stages;     /* every layer's stages ... */
    /* ... unless this is set: the stages of layer l (NULL: stages for every layer) */
    void (*layer_stages)(const model_arch_t *arch, const model_config_t *cfg, int l,
                         model_stages_t *out);
    model_rope_t rope; /* RoPE kind (base and dimensions: keys; factors: a rope_freqs tensor) */
    bool embd_scale;   /* x = embed(token) * sqrt(d_model) */
    bool tied_output;  /* no MODEL_W_OUT tensor: logits use token_embd */
};

/* The declarations (model_arch_<name>.c). */
extern const model_arch_t model_arch_llama;     /* dense llama: SmolLM2, Llama 2/3.x, Mistral */
extern const model_arch_t model_arch_llama_moe; /* llama with experts: Mixtral layout */
extern const model_arch_t model_arch_qwen2;     /* llama + Q/K/V biases, NEOX RoPE: Qwen2(.5) */
extern const model_arch_t model_arch_qwen3;     /* llama + Q/K head norms, NEOX RoPE: Qwen3 */
extern const model_arch_t model_arch_gemma3;    /* Gemma 3: sandwich norms, GeGLU, 5:1 windows */

/* The architecture for general.architecture `name` whose FFN is MoE iff moe: NULL when the
 * table has no such row. */
const model_arch_t *model_arch_find(const char *name, bool moe);
/* Whether some row of the table is called name. */
bool model_arch_known(const char *name);
/* The table's names, comma-separated, for messages ("llama, mistral"). */
const char *model_arch_names(void);
/* The stages of layer l. */
void model_arch_layer_stages(const model_arch_t *arch, const model_config_t *cfg, int l,
                             model_stages_t *out);
/* NULL when the forward pass runs everything arch declares for cfg's layers, else what it
 * lacks ("Q/K/V biases"), for a one-line refusal naming the architecture. */
const char *model_arch_unsupported(const model_arch_t *arch, const model_config_t *cfg);

#endif
