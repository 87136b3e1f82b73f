/* model.h - the model, whatever its architecture: configuration and weights from a GGUF,
 * and the batched forward pass over paged KV.  This is the seam between model/ and the rest
 * of strata: nothing outside model/ knows which architecture it runs (model/model_arch.h
 * declares them, one file each).  The forward pass takes a batch of tokens from any number
 * of sequences (continuous batching): each token carries its sequence and position, each
 * sequence a block table into a KV pool the caller owns.
 */
#ifndef MODEL_H
#define MODEL_H

#include "kern_kv.h"
#include "kern_ops.h"
#include "model_gguf.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How an MoE layer turns router logits into the weights of its K experts
 * (GGUF key strata.expert_gating).  Top-K ties go to the lower expert index. */
typedef enum {
    MODEL_GATING_SOFTMAX_TOPK = 0, /* "softmax_topk" (default, Mixtral): the K largest logits,
                                      weights = softmax over those K */
    MODEL_GATING_SOFTMAX_ALL,      /* "softmax_all": softmax over all E, the top K keep their
                                      probabilities (not renormalized) */
    MODEL_GATING_UNIT,             /* "unit": the K largest logits, each weight 1.0 (moefy) */
} model_gating_t;

/* Hyper-parameters read from the GGUF (<arch>.* keys, as the architecture declares them). */
typedef struct {
    char arch[32];         /* general.architecture ("llama", "mistral", "gemma3") */
    char name[128];        /* general.name, or the file name */
    int n_layer;           /* transformer blocks */
    int d_model;           /* embedding width */
    int n_head;            /* query heads */
    int n_head_kv;         /* key/value heads (GQA when < n_head) */
    int head_dim;          /* per head */
    int d_ff;              /* feed-forward width (of ONE expert in an MoE model) */
    int n_vocab;           /* vocabulary size (rows of token_embd) */
    int n_ctx_train;       /* context length the model was trained for */
    int n_rot;             /* RoPE dimensions per head */
    float rope_base;       /* RoPE frequency base */
    float rope_base_swa;   /* RoPE frequency base of the sliding-window layers (gemma3: 10000) */
    int swa_window;        /* positions a sliding-window layer sees, its own included; 0: none */
    int query_scalar;      /* attention scores scaled by 1/sqrt(query_scalar) (head_dim) */
    float rms_eps;         /* RMSNorm epsilon */
    bool rope_neox;        /* rotate halves (NeoX) instead of adjacent pairs */
    kern_type_t ftype;     /* type of most weight matrices (for display) */
    int n_expert;          /* experts per FFN layer (llama.expert_count); 0: dense */
    int n_expert_used;     /* experts per token, K (llama.expert_used_count); 0 when dense */
    model_gating_t gating; /* router weights (strata.expert_gating) */
} model_config_t;

/* One weight matrix: rows of `cols` elements of `type`. */
typedef struct {
    kern_type_t type; /* element type */
    const void *data; /* in the GGUF mapping */
    int64_t rows;     /* output features */
    int64_t cols;     /* input features (contiguous) */
    size_t row_bytes; /* bytes per row */
    void *packed;     /* the kernels' packed (row-interleaved) copy, or NULL; owned by the model */
} model_weight_t;

typedef struct model_t model_t;

/* Open and validate the GGUF at path: its general.architecture must be one of the table
 * in model_arch.c, and every key and tensor the architecture declares must be there with
 * its shape.  NULL on failure with a one-line reason in err that names the architecture,
 * key or tensor. */
model_t *model_load(const char *path, char *err, size_t errlen);
/* Frees the weights' copies and closes the GGUF; nulls *self_p; safe on NULL. */
void model_destroy(model_t **self_p);
/* Only the configuration of an open GGUF (no weights are read): what a KV
 * store needs to know the block shape.  0, or -EINVAL with a one-line reason. */
int model_config_read(const model_gguf_t *g, model_config_t *cfg, char *err, size_t errlen);
const model_config_t *model_config(const model_t *self);
/* The GGUF the model reads from (for the tokenizer); owned by the model. */
const model_gguf_t *model_file(const model_t *self);
/* Bytes of weights (the tensors' data). */
size_t model_weight_bytes(const model_t *self);
/* Bytes of weights one decoded token reads: every matrix, one row of an untied token
 * embedding, n_expert_used of each MoE layer's n_expert experts (KV reads not counted). */
size_t model_decode_bytes(const model_t *self);

/* ---- KV: the block layout is kernels/kern_kv.h's (kvstore/ manages the pool in the service). */

/* The shape of a KV block of block_size positions for this model. */
kern_kv_shape_t model_kv_shape(const model_config_t *cfg, int block_size);

/* ---- batched forward */

/* A sequence as the forward pass sees it: its block table, and where an attention-score
 * KV policy (kvstore/kv_compress.h) collects the weights its KV rows receive. */
typedef struct {
    const int32_t *blocks; /* block ids in slot order */
    int n_blocks;          /* entries in blocks (capacity = n_blocks * block_size slots) */
    /* NULL, or (n_layer * n_head_kv, weights_stride) floats: the softmax weight every query
     * of this batch at a slot >= weights_from gives each KV row (summed over the query heads
     * of the row's KV head) is added to weights[(layer * n_head_kv + head) * weights_stride
     * + row slot].  Only model_ctx_forward (the CPU pass) collects them. */
    float *weights;
    int weights_stride; /* >= the slots the sequence can hold */
    int weights_from;   /* first slot whose queries count */
} model_seq_view_t;

/* Tokens to run.  Token i is at position pos[i] of sequence seq[i]; its K and V go to
 * KV row slot[i] of that sequence (NULL: slot = pos), and it attends rows 0 .. slot[i]:
 * rows below slot[i] must already be in the KV (or earlier in this batch).  Rows and
 * positions differ only once a KV policy has dropped rows (kvstore/kv_compress.h): RoPE
 * takes the position, the KV row its slot.  want[i]: produce logits for token i (NULL:
 * none). */
typedef struct {
    int n_tokens;
    const int32_t *tokens; /* (n_tokens) */
    const int32_t *pos;    /* (n_tokens) */
    const int32_t *seq;    /* (n_tokens) index into seqs */
    const bool *want;      /* (n_tokens) or NULL */
    int n_seqs;
    const model_seq_view_t *seqs; /* (n_seqs) */
    const int32_t *slot;          /* (n_tokens) or NULL: slot = pos */
} model_batch_t;

typedef struct model_ctx_t model_ctx_t;

/* Scratch and threads for forward passes of up to max_tokens tokens per batch,
 * attending over at most max_ctx positions.  kernels NULL: kern_ops_best(). */
model_ctx_t *model_ctx_new(const model_t *model, int max_tokens, int max_ctx, int n_threads,
                           const kern_ops_t *kernels);
void model_ctx_destroy(model_ctx_t **self_p);
int model_ctx_max_tokens(const model_ctx_t *self);
int model_ctx_threads(const model_ctx_t *self);

/* Run the batch: writes K/V of every token into the pool, and the logits of
 * every wanted token, in batch order, into logits (n_wanted, n_vocab).
 * Returns the number of wanted tokens, or -EINVAL for a batch that is too
 * large, a token id out of range, or a position beyond its block table. */
int model_ctx_forward(model_ctx_t *self, const model_batch_t *batch, const kern_kv_pool_t *kv,
                      float *logits);

/* model_ctx_forward, and also the final hidden state of every token i with hidden[i]
 * (hidden: (n_tokens)) -- after the output norm, before the output projection: what an
 * embedding pools -- into row i of hidden_out (n_tokens, d_model); the other rows are
 * left as they were.  hidden NULL: exactly model_ctx_forward.  Same returns, and -EINVAL
 * when hidden is set but hidden_out is NULL.  The normal path pays nothing for this:
 * the stage runs only when asked. */
int model_ctx_forward_hidden(model_ctx_t *self, const model_batch_t *batch,
                             const kern_kv_pool_t *kv, float *logits, const bool *hidden,
                             float *hidden_out);

/* ---- hooks */

/* One MoE layer's expert work for a step, handed to a remote executor.  Rows are
 * the routed (token, expert) pairs, grouped by expert ascending (within an
 * expert, by token ascending). */
typedef struct {
    int layer;    /* MoE layer index */
    int n_tokens; /* tokens of the step */
    int d_model;
    int n_expert;          /* E */
    const float *h;        /* (n_tokens, d_model) normed FFN input of each token */
    const float *logits;   /* (n_tokens, n_expert) router logits r = h W_router of each token
                            * (the executor's choice of a substitute for an overflowed row) */
    int n_rows;            /* routed (token, expert) pairs, grouped by expert ascending */
    const int32_t *token;  /* (n_rows) token index into h */
    const int32_t *expert; /* (n_rows) expert id */
    float *y;              /* (n_rows, d_model) out: expert(h[token]) WITHOUT the gate weight */
} model_moe_call_t;
/* Returns 0 or -errno.  Called on the thread that called model_ctx_forward (pool
 * thread 0 is the caller), while the other pool threads wait at a barrier: fn may
 * use sockets and other state that thread owns.  The pointers are valid during
 * the call only. */
typedef int (*model_moe_exec_fn)(void *user, const model_moe_call_t *call);
/* Run the experts of every MoE layer through fn instead of locally (NULL: local
 * experts).  The forward calls fn once per MoE layer per step, then combines y
 * with the gate weights in the fixed order; if fn fails, model_ctx_forward
 * returns its error (the KV of the step's tokens is then partly written: the
 * caller reruns the whole step).  user is borrowed. */
void model_ctx_set_moe_exec(model_ctx_t *ctx, model_moe_exec_fn fn, void *user);
/* The expert computation an expert actor runs: y (n, d_model) =
 * down(swiglu(gate h, up h)) of expert `expert` of MoE layer `layer` for the n
 * rows of h (n, d_model), on ctx's threads and kernels; bitwise what the local
 * forward computes for those rows.  n may exceed ctx's max_tokens (done in
 * chunks).  0, or -EINVAL for a dense layer or an index out of range. */
int model_moe_expert_rows(model_ctx_t *ctx, int layer, int expert, int n, const float *h, float *y);

/* FFN tap: called per layer per step (from one thread, after a barrier) with
 * h = the normed FFN input (n_tokens, d_model) and, for dense layers, act =
 * silu(h Wg) * (h Wu) (n_tokens, d_ff) before Wdown; act is NULL for MoE layers.
 * The pointers are valid during the call only. */
typedef void (*model_ffn_tap_fn)(void *user, int layer, int n_tokens, const float *h, int d_model,
                                 const float *act, int d_ff);
/* Set (fn NULL: clear) the tap.  No cost when unset.  user is borrowed. */
void model_ctx_set_ffn_tap(model_ctx_t *ctx, model_ffn_tap_fn fn, void *user);

#endif
