/* model_impl.h - what the sources of model/ share and nothing outside model/ includes: the
 * model and context structs, the activation plans and the matrix product the stages use.
 *   model_load.c     keys and tensors of a GGUF, as its architecture declares them
 *   model_forward.c  the context and the forward pass, stage by stage
 *   model_moe.c      the Mixture-of-Experts FFN stage, its remote executor and the FFN tap
 *   model_matmul.c   the activation plans and the threaded matmul both stage files use
 *   model_device.c   the forward pass on the backend seam (kern_backend.h)
 */
#ifndef MODEL_IMPL_H
#define MODEL_IMPL_H

#include "base_pool.h"
#include "model.h"
#include "model_arch.h"

#define MODEL_MAX_QTYPES 3    /* distinct activation formats one input may need */
#define MODEL_MAX_EXPERTS 256 /* experts per layer we accept (Mixtral 8, DeepSeek-V3 256) */

/* ---- the model */

typedef struct {
    float *attn_norm;  /* (d_model) */
    model_weight_t wq; /* (n_head*head_dim, d_model) */
    model_weight_t wk; /* (n_head_kv*head_dim, d_model) */
    model_weight_t wv; /* (n_head_kv*head_dim, d_model) */
    model_weight_t wo; /* (d_model, n_head*head_dim) */
    float *ffn_norm;   /* (d_model) */
    model_weight_t wg; /* (d_ff, d_model) */
    model_weight_t wu; /* (d_ff, d_model) */
    model_weight_t wd; /* (d_model, d_ff) */
    /* MoE layers (n_expert > 0) instead of wg, wu, wd: */
    model_weight_t wr;            /* (n_expert, d_model) router */
    model_weight_t *experts;      /* (3 * n_expert): gate, up, down of each expert, slabs of
                                     the 3-D tensors: eg (d_ff, d_model), eu, ed (d_model, d_ff) */
    model_weight_t *eg, *eu, *ed; /* (n_expert) views into experts */
    /* loaded when the architecture declares them (model_arch.h), else NULL: */
    float *bq, *bk, *bv, *bo; /* (q_dim), (kv_dim), (kv_dim), (d_model) biases */
    float *q_norm, *k_norm;   /* (head_dim) per-head RMSNorm weights */
    float *attn_post_norm;    /* (d_model) norm of the attention output */
    float *ffn_post_norm;     /* (d_model) norm of the FFN output */
    model_stages_t st;        /* this layer's stages */
} model_layer_t;

struct model_t {
    model_gguf_t *gguf;       /* owns the mapping the weights point into */
    const model_arch_t *arch; /* the declaration it was loaded by (static) */
    model_config_t cfg;       /* hyper-parameters */
    model_weight_t embd;      /* (n_vocab, d_model) token embeddings */
    float *out_norm;          /* (d_model) */
    model_weight_t out;       /* (n_vocab, d_model); token_embd when tied */
    float *rope_freqs;        /* (n_rot/2) frequency divisors, or NULL */
    double *rope_theta;       /* (n_rot/2) angle per position of each rotated pair */
    double *rope_theta_swa;   /* (n_rot/2) the same for sliding-window layers with their own
                                 base (rope_base_swa), or NULL: they use rope_theta */
    float embd_mul;           /* embeddings times this: sqrt(d_model) with embd_scale, else 1 */
    float attn_scale;         /* attention scores times this: 1/sqrt(query_scalar) */
    model_layer_t *layers;    /* (n_layer) */
    size_t weight_bytes;      /* sum of tensor sizes */
    void *packed_arena;       /* every packed copy (model_weight_t.packed points in), mmap'd */
    size_t packed_bytes;      /* its size */
};

/* ---- the context */

/* The activation formats one input must be quantized into for its consumers. */
typedef struct {
    int n;                              /* formats in use */
    kern_type_t type[MODEL_MAX_QTYPES]; /* format; slot j lives in ctx->qbuf[j] */
    size_t row_bytes[MODEL_MAX_QTYPES]; /* bytes per row in that format */
} model_plan_t;

enum {
    MODEL_PLAN_QKV,
    MODEL_PLAN_WO,
    MODEL_PLAN_GU,
    MODEL_PLAN_WD,
    MODEL_PLAN_ROUTER,
    MODEL_PLANS_PER_LAYER
};

struct model_ctx_t {
    const model_t *m;    /* borrowed */
    const kern_ops_t *k; /* kernel table */
    base_pool_t *pool;   /* threads */
    int max_tokens;      /* batch capacity */
    int max_rows;        /* FFN rows: max_tokens * n_expert_used (max_tokens when dense) */
    int max_ctx;         /* positions attended at most */
    float *x;            /* (max_tokens, d_model) residual stream */
    float *h;            /* (max_tokens, d_model) normed input of a sub-layer */
    float *q;            /* (max_tokens, n_head*head_dim) */
    float *kv_k;         /* (max_tokens, n_head_kv*head_dim) new keys */
    float *kv_v;         /* (max_tokens, n_head_kv*head_dim) new values */
    float *att;          /* (max_tokens, n_head*head_dim) attention output */
    float *tmp;          /* (max_tokens, d_model) sub-layer output before the residual add */
    float *ff_g;         /* (max_rows, d_ff) gate, then silu(gate)*up */
    float *ff_u;         /* (max_rows, d_ff) up */
    float *cs;           /* (max_tokens, n_rot) cos/sin pairs per token */
    float *cs_swa;       /* (max_tokens, n_rot) the same with rope_theta_swa, or NULL */
    float *scratch;      /* (n_threads, n_head/n_head_kv * max_ctx) attention scores */
    int *out_rows;       /* (max_tokens) batch index of each wanted token */
    uint8_t *qbuf[MODEL_MAX_QTYPES]; /* (max_rows, widest row) quantized activations */
    /* MoE routing of the step (NULL when dense); rows = routed (token, expert) pairs */
    float *rlog;      /* (max_tokens, n_expert) router logits */
    float *gw;        /* (max_tokens, K) gate weight of each token's k-th expert */
    int32_t *row_of;  /* (max_tokens, K) row of each token's k-th expert */
    int32_t *row_tok; /* (max_rows) token of each row; rows grouped by expert ascending */
    int32_t *row_exp; /* (max_rows) expert of each row */
    int *off;         /* (n_expert + 1) rows [off[e], off[e+1]) are expert e's */
    float *y;         /* (max_rows, d_model) expert outputs, before the gate weights */
    int moe_rc;       /* the remote executor's error in this run, or 0 */
    bool collect;     /* some sequence of this run collects attention weights */
    /* model_moe_expert_rows' job, read by its workers */
    struct {
        int layer, expert, n;
        const float *h;
        float *y;
    } xr;
    model_plan_t
        *plans; /* (n_layer * MODEL_PLANS_PER_LAYER + 1) formats per input, fixed at creation */
    /* per-run state, read by the workers */
    const model_batch_t *batch;
    const kern_kv_pool_t *kv;
    float *logits;
    int n_out;
    const bool *hidden; /* (n_tokens) the tokens whose final hidden state is wanted, or NULL */
    float *hidden_out;  /* (n_tokens, d_model) where they go (model_ctx_forward_hidden) */
    /* hooks (model.h), borrowed */
    model_ffn_tap_fn tap; /* FFN tap or NULL */
    void *tap_user;
    model_moe_exec_fn moe_exec; /* remote experts or NULL (local) */
    void *moe_user;
};

/* ---- shared by the stages (model_matmul.c) */

/* The cos/sin pairs of position pos for the angles theta (n_rot/2) into cs (n_rot). */
void model_rope_angles(float *cs, int pos, const double *theta, int n_rot);
/* The activation plan of weights ws[0..nw): the formats their inputs are quantized to. */
void model_plan_make(model_plan_t *qi, const model_weight_t *const *ws, int nw);
/* Quantize rows [t0, t1) of src (cols each) into every format of plan qi. */
void model_ctx_plan_fill(model_ctx_t *c, const model_plan_t *qi, const float *src, int cols, int t0,
                         int t1);
/* This thread's share of out = X W^T for each weight in ws (outputs outs, each
 * row-major (n, rows)), X the n quantized activation rows from row x0 of the
 * plan's buffers.  Rows are split in multiples of 16 so SIMD tiles stay whole. */
void model_ctx_matmul(model_ctx_t *c, const model_plan_t *qi, const model_weight_t *const *ws,
                      float *const *outs, int nw, int x0, int n, int ith, int nth);

/* ---- the MoE stage (model_moe.c) */

/* The Mixture-of-Experts keys: <arch>.expert_count (E, absent or 0: dense),
 * <arch>.expert_used_count (K, 1..E) and strata.expert_gating, into c (c->arch set).
 * 0, or -EINVAL with a one-line reason naming the key. */
int model_moe_config_read(const model_gguf_t *g, model_config_t *c, char *err, size_t errlen);
/* The MoE feed-forward of layer l for the step's n tokens (model_moe.c says how); every
 * pool thread calls it.  0, or the remote executor's error (the same in every thread). */
int model_moe_stage(model_ctx_t *c, int l, int n, int ith, int nth, int t0, int t1);

#endif
