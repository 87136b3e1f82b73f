/* model_embedder.h - a text's embedding computed in place, without the service: the
 * mean over its positions of the model's final hidden state (after the output norm),
 * L2-normalised -- the vector the embeddings path pools (serve_step's s_pool), from the
 * same forward pass.  One sequence at a time, its own KV; what the semantic cache embeds
 * requests with and `strata semcache-eval` measures.  Not thread-safe. */
#ifndef MODEL_EMBEDDER_H
#define MODEL_EMBEDDER_H

#include "model.h"
#include "model_tokenizer.h"

#include <stddef.h>

typedef struct model_embedder_t model_embedder_t;

/* model and tok are borrowed (they outlive the embedder).  max_tokens: the longest input
 * (positions); n_threads: the forward pass's threads.  NULL, with the reason in err, when
 * out of memory or on bad arguments. */
model_embedder_t *model_embedder_new(const model_t *model, const model_tokenizer_t *tok,
                                     int max_tokens, int n_threads, char *err, size_t errlen);
void model_embedder_destroy(model_embedder_t **self_p);
/* The embedding width (the model's d_model). */
int model_embedder_dim(const model_embedder_t *self);

/* The embedding of n token ids into out (dim floats).  Returns n, or -EINVAL (n < 1, an
 * id out of range), -E2BIG (n > max_tokens). */
int model_embedder_ids(model_embedder_t *self, const int32_t *ids, int n, float *out);
/* The embedding of len bytes of text, tokenized as a raw prompt (the model's BOS when it
 * asks for one, special tokens as plain text: what an `embed` of that text pools).
 * Returns the positions pooled, or -EINVAL (empty), -E2BIG (too long), -ENOMEM. */
int model_embedder_text(model_embedder_t *self, const char *text, size_t len, float *out);

#endif
