/* kv_compress.h - in-sequence KV compression: which KV rows of a sequence to keep when it
 * holds more than its budget.  Pure policy (no pool, no sockets): kv_cache_compact moves
 * the rows chosen here, the forward pass collects the attention weights h2o and snapkv
 * rank by (model_seq_view_t.weights).
 *
 * Rows and positions.  A sequence's KV rows start as its positions (row p holds position
 * p).  Compression keeps a subset of rows, in position order, and packs them to the front;
 * later tokens append rows after them.  Keys are stored after RoPE at their original
 * position and queries are rotated at theirs, so the relative positions attention sees
 * are the true ones (as H2O's and SnapKV's reference code do; StreamingLLM re-numbers the
 * positions inside its cache instead, which only matters past the trained length, where
 * strata refuses a request anyway).
 *
 * Groups.  Every (layer, KV head) chooses its own rows (H2O's and SnapKV's per-head
 * eviction): the paged layout gives each (layer, K|V, head) its own slab of rows in a
 * block, so heads can hold different positions in the same row as long as they keep the
 * same number of rows.  All groups keep the same count.
 *
 * The policies (budget B rows; n positions seen so far; r rows held; S sinks; R recent):
 *   window  StreamingLLM: the first S positions and the last B - S.
 *   h2o     Heavy hitters: the first S and the last R rows, and of the rows between them
 *           the B - S - R with the largest attention weight accumulated since the row
 *           was written (summed over the group's query heads and every later query).
 *   snapkv  Once, after the prompt: the observation window (the last R prompt positions)
 *           is kept, and of the rows before it the B - R whose weight from the window's
 *           queries, max-pooled over `pool` neighbouring rows, is largest.  Generated
 *           tokens are all kept.
 * Ties go to the earlier row; a choice is a function of the weights alone, so the same
 * tokens run the same way reach the same rows. */
#ifndef KV_COMPRESS_H
#define KV_COMPRESS_H

#include "kv_cache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KV_COMPRESS_NONE = 0,
    KV_COMPRESS_WINDOW,
    KV_COMPRESS_H2O,
    KV_COMPRESS_SNAPKV,
} kv_compress_kind_t;

typedef struct {
    kv_compress_kind_t kind;
    int budget; /* rows kept, > 0; or 0 when frac is set */
    float frac; /* (0, 1): keep ceil(frac * n) rows of n positions; 0 when budget is set */
    int n_sink; /* S: first positions always kept (window 4, h2o 0; snapkv none) */
    int recent; /* R: h2o's recent rows (default: half the budget), snapkv's observation
                   window (default 32); window: unused (everything after the sinks) */
    int pool;   /* snapkv: max-pool width over rows (odd; default 7; 1: none) */
} kv_compress_t;

#define KV_COMPRESS_SPEC_MAX 96

/* Parse "none", or "KIND:BUDGET[,sink=S][,recent=R][,pool=P]" with KIND window | h2o |
 * snapkv and BUDGET a row count ("1024") or a percentage ("25%", more than 0 and less
 * than 100).  0, or -EINVAL with the reason in err. */
int kv_compress_parse(const char *spec, kv_compress_t *out, char *err, size_t errlen);
/* 0 when spec parses, else -EINVAL (an option table's check). */
int kv_compress_valid(const char *spec);
/* The spec of c in the form kv_compress_parse reads (defaults left out); "none". */
void kv_compress_format(const kv_compress_t *c, char *buf, size_t len);
/* Rows a sequence of n positions may keep (n for none, or when the budget is above n). */
int kv_compress_budget(const kv_compress_t *c, int n);
/* The policy ranks rows by attention weights (h2o, snapkv). */
bool kv_compress_wants_weights(const kv_compress_t *c);
/* Prompt positions a request under c may take from the prefix cache: weights come only
 * from queries that run, so h2o computes its whole prompt (0) and snapkv its observation
 * window (n_prompt - R); window and none take what is there (n_prompt). */
int kv_compress_cached_max(const kv_compress_t *c, int n_prompt);
/* The first query row whose weights count: 0 (h2o), the observation window's first row
 * (snapkv: n_prompt - R), or -1 (no weights). */
int kv_compress_weights_from(const kv_compress_t *c, int n_prompt);
/* Rows to keep now for a sequence holding `rows` rows of n positions, of which n_prompt
 * are the prompt; prefill_done: the whole prompt has run.  Nothing is dropped before the
 * prompt has run whole (so the state after it does not depend on how it was chunked; the
 * prompt's KV is held whole until then, as H2O and SnapKV do).  Then window and h2o hold
 * at most their budget, compacting in steps of `slack` rows (a block: once per block of
 * new rows, not per token, down to budget - slack + 1); snapkv is due once, right after
 * the prompt (the caller remembers that it ran).  A number below rows when compression is
 * due, else rows. */
int kv_compress_target(const kv_compress_t *c, int rows, int n, int n_prompt, bool prefill_done,
                       int slack);

/* Choose keep rows of `rows` for each of n_groups groups: keep[g * keep .. + keep) gets
 * group g's rows, ascending.  weights: (n_groups, w_stride) floats, row r of group g at
 * g * w_stride + r (NULL for window).  tmp: at least 2 * rows floats + rows ints of
 * scratch (kv_compress_tmp_bytes).  0, or -EINVAL. */
int kv_compress_select(const kv_compress_t *c, int n_groups, int rows, int keep,
                       const float *weights, int w_stride, int32_t *keep_rows, void *tmp);
size_t kv_compress_tmp_bytes(int rows);
/* Move each group's weights along with its kept rows (weights[g][i] = weights[g][keep[i]])
 * and zero the rest of the row (w_stride floats per group). */
void kv_compress_move_weights(float *weights, int w_stride, int n_groups, int keep,
                              const int32_t *keep_rows, int rows);

/* What one sequence under a policy carries between steps (plain data; zero it, then
 * kv_compress_seq_init). */
typedef struct {
    kv_compress_t policy;
    int n_groups;        /* n_layer * n_head_kv */
    int w_stride;        /* rows the weights hold per group (the sequence's most) */
    float *weights;      /* (n_groups, w_stride) accumulated weights, or NULL (window, none) */
    bool snapped;        /* snapkv: the prompt was compressed */
    int64_t compactions; /* times rows were dropped */
    int64_t dropped;     /* rows dropped, per group */
} kv_compress_seq_t;

/* For a sequence of at most max_rows rows of a model with n_groups (layer, KV head)
 * groups.  0 or -ENOMEM. */
int kv_compress_seq_init(kv_compress_seq_t *cs, const kv_compress_t *policy, int n_groups,
                         int max_rows);
void kv_compress_seq_free(kv_compress_seq_t *cs);
/* The sequence starts again from its first position (preempted): weights zeroed, snapkv
 * due again; the policy and the counts stay. */
void kv_compress_seq_reset(kv_compress_seq_t *cs);
/* What the forward pass should collect for a sequence that has n_prompt prompt positions:
 * the weights array (NULL: none) and the first query row that counts (*from). */
float *kv_compress_seq_weights(const kv_compress_seq_t *cs, int n_prompt, int *from);
/* Compress seq if the policy says it is due (it holds `rows` rows of n positions, n_prompt
 * of them the prompt; prefill_done: all of the prompt has run): choose the rows, compact
 * them in T0 (kv_cache_compact) and move the weights along; the schedule's step is the
 * cache's block size.  Returns the rows held after (rows when nothing was due), or
 * -errno with nothing changed. */
int kv_compress_run(kv_compress_seq_t *cs, kv_cache_t *kv, kv_seq_t *seq, int rows, int n,
                    int n_prompt, bool prefill_done);

#endif
