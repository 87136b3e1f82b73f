/* model_device.h - the forward pass written on the backend seam (kernels/kern_backend.h): the
 * model's weights uploaded once to a backend (the CPU one, which is the reference, or CUDA
 * beside it), its activations in the backend's memory, each stage one backend op, and only
 * token ids in and logits out crossing to the host.  It is what a GPU worker runs; the CPU
 * worker keeps model_ctx_forward (threads over kern_ops), and tests/unit/test_model_device.c
 * checks this one against that one on the CPU backend.
 *
 * It covers the dense models of every architecture strata loads (model_arch.h: llama, qwen,
 * gemma3 stages: biases, per-head norms, sandwich norms, SwiGLU or GeGLU, scaled embeddings,
 * sliding-window layers with their own RoPE base).  It refuses (-ENOTSUP, naming it) MoE
 * layers, whose routing has no backend op yet. */
#ifndef MODEL_DEVICE_H
#define MODEL_DEVICE_H

#include "kern_backend.h"
#include "model.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct model_dev_t model_dev_t;

/* m's weights uploaded to be (both borrowed: they outlive it), and backend scratch for
 * batches of up to max_tokens tokens over at most max_seqs sequences of at most max_blocks
 * KV blocks each.  NULL with a one-line reason in err: a stage or weight type this path or
 * this backend lacks (named), or out of memory. */
model_dev_t *model_dev_new(const model_t *m, kern_backend_t *be, int max_tokens, int max_seqs,
                           int max_blocks, char *err, size_t errlen);
/* Free the uploads and the scratch; nulls *self_p; safe on NULL and twice. */
void model_dev_destroy(model_dev_t **self_p);

/* Run batch b as model_ctx_forward does over the KV pool kv, whose base is backend memory
 * (kern_kv.h's layout): every token's K and V stored, the logits of every wanted token, in
 * batch order, into logits (host, (n_wanted, n_vocab)).  Returns the number of wanted
 * tokens, -EINVAL for a batch outside the limits (as model_ctx_forward, and more sequences
 * or blocks than made for), or a backend's error. */
int model_dev_forward(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv,
                      float *logits);

/* model_dev_forward, and the final hidden state of every token i with hidden[i] (after
 * the output norm, before the output projection: what an embedding pools) into row i of
 * hidden_out (host, (n_tokens, d_model)), as model_ctx_forward_hidden; hidden NULL:
 * exactly model_dev_forward.  -EINVAL when hidden is set and hidden_out is NULL. */
int model_dev_forward_hidden(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv,
                             float *logits, const bool *hidden, float *hidden_out);

/* model_dev_forward_hidden, with only the logits rows o (0 .. wanted-1) with host_rows[o]
 * downloaded into logits (row o at its place; NULL: all of them); every row stays in the
 * backend's memory until the next forward, for model_dev_sample and model_dev_logits. */
int model_dev_forward_rows(model_dev_t *d, const model_batch_t *b, const kern_kv_pool_t *kv,
                           float *logits, const bool *hidden, float *hidden_out,
                           const bool *host_rows);

/* Recent tokens a row sampled on the backend may look at (its repetition window). */
#define MODEL_DEV_HIST 256

/* ids[r] (host) = the token model_sampler_sample picks from row row0 + r of the last
 * forward's logits (left on the backend), with p[r] (kern_backend_sample_t: no logit bias,
 * no presence or frequency penalty), the row's history hist[r][0 .. n_hist[r]) (host; only
 * its last MODEL_DEV_HIST tokens are sent) and position pos[r]: on a GPU only the ids come
 * back.  -ENOTSUP when the backend cannot (no sampler, a repetition window past
 * MODEL_DEV_HIST, CUDA's top-k limit): download the rows (model_dev_logits) and sample on
 * the host; -EINVAL for rows the last forward did not leave. */
int model_dev_sample(model_dev_t *d, int row0, int n, const kern_backend_sample_t *p,
                     const int32_t *const *hist, const int *n_hist, const int32_t *pos,
                     int32_t *ids);
/* Rows row0 .. row0+n-1 of the last forward's logits into logits (host, n rows). */
int model_dev_logits(model_dev_t *d, int row0, int n, float *logits);

/* CUDA graphs for decode: on a backend with graphs (kern_backend.h: CUDA), a batch of up to
 * 8 tokens without hidden states runs as one recorded graph per shape (tokens, wanted rows,
 * the context bound rounded up to 256, the KV pool), recorded the second time a shape comes
 * and replayed after; a shape whose recording fails runs op by op.  On by default; off with
 * on false, or the environment STRATA_GRAPHS=0 at model_dev_new.  No effect on a backend
 * without graphs (the CPU's). */
void model_dev_use_graphs(model_dev_t *d, bool on);

typedef struct {
    int64_t recorded; /* graphs recorded */
    int64_t replayed; /* forward passes run as a graph */
    int64_t failed;   /* recordings that failed (the shape then runs op by op) */
    int64_t stale;    /* graphs recorded again because the backend's scratch moved */
} model_dev_graph_stats_t;
model_dev_graph_stats_t model_dev_graph_stats(const model_dev_t *d);

#endif
