/* model_llama.h - the llama-architecture model (SmolLM2, TinyLlama, Llama 2/3.x,
 * Mistral): configuration and weights from a GGUF, and the batched forward pass
 * over paged KV.  The forward pass takes a batch of tokens from any number of
 * sequences (continuous batching): each token carries its sequence and position,
 * each sequence a block table into a KV pool the caller owns.
 */
#ifndef MODEL_LLAMA_H
#define MODEL_LLAMA_H

#include "kern_kv.h"
#include "kern_ops.h"
#include "model_gguf.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hyper-parameters read from the GGUF (llama.* keys). */
typedef struct {
    char arch[32];       /* general.architecture ("llama") */
    char name[128];      /* general.name, or the file name */
    int n_layer;         /* transformer blocks */
    int d_model;         /* embedding width */
    int n_head;          /* query heads */
    int n_head_kv;       /* key/value heads (GQA when < n_head) */
    int head_dim;        /* per head */
    int d_ff;            /* feed-forward width */
    int n_vocab;         /* vocabulary size (rows of token_embd) */
    int n_ctx_train;     /* context length the model was trained for */
    int n_rot;           /* RoPE dimensions per head */
    float rope_base;     /* RoPE frequency base */
    float rms_eps;       /* RMSNorm epsilon */
    bool rope_neox;      /* rotate halves (NeoX) instead of adjacent pairs */
    kern_type_t ftype;   /* type of most weight matrices (for display) */
} model_config_t;

/* One weight matrix: rows of `cols` elements of `type`. */
typedef struct {
    kern_type_t type;  /* element type */
    const void *data;  /* in the GGUF mapping */
    int64_t rows;      /* output features */
    int64_t cols;      /* input features (contiguous) */
    size_t row_bytes;  /* bytes per row */
    void *packed;      /* the kernels' packed (row-interleaved) copy, or NULL; owned by the model */
} model_weight_t;

typedef struct model_llama_t model_llama_t;

/* Open and validate the GGUF at path (architecture, shapes, types).  NULL on
 * failure with a one-line reason in err. */
model_llama_t *model_llama_load(const char *path, char *err, size_t errlen);
void model_llama_destroy(model_llama_t **self_p);
/* Only the configuration of an open GGUF (no weights are read): what a KV
 * store needs to know the block shape.  0, or -EINVAL with a one-line reason. */
int model_llama_read_config(const model_gguf_t *g, model_config_t *cfg, char *err, size_t errlen);
const model_config_t *model_llama_config(const model_llama_t *self);
/* The GGUF the model reads from (for the tokenizer); owned by the model. */
const model_gguf_t *model_llama_gguf(const model_llama_t *self);
/* Bytes of weights (the tensors' data). */
size_t model_llama_weight_bytes(const model_llama_t *self);

/* ---- KV: the block layout is kernels/kern_kv.h's (kvstore/ manages the pool in the service). */

/* The shape of a KV block of block_size positions for this model. */
kern_kv_shape_t model_kv_shape(const model_config_t *cfg, int block_size);

/* ---- batched forward */

/* A sequence as the forward pass sees it: its block table. */
typedef struct {
    const int32_t *blocks; /* block ids in position order */
    int n_blocks;          /* entries in blocks (capacity = n_blocks * block_size positions) */
} model_seq_view_t;

/* Tokens to run.  Token i is at position pos[i] of sequence seq[i]; positions
 * below pos[i] of that sequence must already be in the KV (or earlier in this
 * batch).  want[i]: produce logits for token i (NULL: none). */
typedef struct {
    int n_tokens;
    const int32_t *tokens;       /* (n_tokens) */
    const int32_t *pos;          /* (n_tokens) */
    const int32_t *seq;          /* (n_tokens) index into seqs */
    const bool *want;            /* (n_tokens) or NULL */
    int n_seqs;
    const model_seq_view_t *seqs; /* (n_seqs) */
} model_batch_t;

typedef struct model_ctx_t model_ctx_t;

/* Scratch and threads for forward passes of up to max_tokens tokens per batch,
 * attending over at most max_ctx positions.  kernels NULL: kern_ops_best(). */
model_ctx_t *model_ctx_new(const model_llama_t *model, int max_tokens, int max_ctx, int n_threads,
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

#endif
