/* model_klbase.h - a validating reader of llama.cpp's KL-divergence base file: the
 * next-token log-probabilities that `llama-perplexity --kl-divergence-base FILE` saves, so
 * that another engine can be measured against llama.cpp's own forward pass.
 *
 * The layout (llama.cpp tools/perplexity, all little-endian):
 *   char[8]   "_logits_"
 *   uint32    n_ctx                 tokens per chunk
 *   int32     n_vocab
 *   int32     n_chunk
 *   int32     tokens[n_chunk * n_ctx]   the evaluated text (before a chunk's first token is
 *                                       replaced by BOS, which the model may ask for)
 *   then per chunk, n_ctx - 1 - n_ctx/2 rows (positions n_ctx/2 .. n_ctx-2, each predicting
 *   the next token) of nv = 2*((n_vocab+1)/2) + 4 uint16 each:
 *     float32 scale, float32 min_log_prob (the row's first 8 bytes), then n_vocab uint16 u
 *     (padded to an even count): log p = scale * u + min_log_prob.  Logits more than 16 below
 *     the row's maximum are stored as u = 0.
 */
#ifndef MODEL_KLBASE_H
#define MODEL_KLBASE_H

#include <stddef.h>
#include <stdint.h>

typedef struct model_klbase_t model_klbase_t;

/* Open and validate path: magic, header ranges, every token id in [0, n_vocab), and the
 * file size (exactly what the header implies).  NULL on failure, with a message naming the
 * problem in err (errlen bytes, may be 0). */
model_klbase_t *model_klbase_open(const char *path, char *err, size_t errlen);
/* Close; nulls *self_p, safe on NULL and twice. */
void model_klbase_destroy(model_klbase_t **self_p);

int model_klbase_n_ctx(const model_klbase_t *self);
int model_klbase_n_vocab(const model_klbase_t *self);
int model_klbase_n_chunks(const model_klbase_t *self);
/* Scored rows per chunk: n_ctx - 1 - n_ctx/2 (row r is position n_ctx/2 + r). */
int model_klbase_n_rows(const model_klbase_t *self);
/* The evaluated tokens (n_chunks * n_ctx), borrowed. */
const int32_t *model_klbase_tokens(const model_klbase_t *self);

/* Read row `row` of chunk `chunk` as n_vocab natural-log probabilities into logp.
 * Entries stored as 0 (clipped) read as the row's min_log_prob.  0, -EINVAL for an index out
 * of range, -EIO on a read error, -EPROTO for a non-finite scale or minimum. */
int model_klbase_row(model_klbase_t *self, int chunk, int row, float *logp);

#endif
