/* grammar_mask.h - token masks: which tokens of a vocabulary the grammar allows next.
 * A vocabulary (plain byte strings, as a tokenizer's pieces) is indexed once as a byte
 * trie; a grammar_index_t then precomputes, for every byte-set position of one grammar and
 * one vocabulary, the tokens it accepts whatever the stack below holds and the few that
 * depend on it (checked at run time).  docs/GRAMMAR.md describes the technique and cost.
 *
 * A mask is (n_vocab + 63) / 64 words; bit i (word i / 64, bit i % 64) set means token i
 * is allowed.  Vocabulary and index are immutable once built and may be shared by threads.
 */
#ifndef GRAMMAR_MASK_H
#define GRAMMAR_MASK_H

#include "grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct grammar_vocab_t grammar_vocab_t;
typedef struct grammar_index_t grammar_index_t;

/* n tokens; token i stands for the len[i] bytes at piece[i] (copied).  A token with no
 * bytes (a special token) is never allowed, except the end-of-generation ids in eog
 * (n_eog of them), allowed exactly when the grammar's sentence is complete.  NULL if out of
 * memory or an eog id is out of range. */
grammar_vocab_t *grammar_vocab_new(int32_t n, const char *const *piece, const uint32_t *len,
                                   const int32_t *eog, int n_eog);
void grammar_vocab_destroy(grammar_vocab_t **self_p);
int32_t grammar_vocab_size(const grammar_vocab_t *self);
/* Words in a mask of this vocabulary. */
size_t grammar_vocab_mask_words(const grammar_vocab_t *self);
bool grammar_vocab_is_eog(const grammar_vocab_t *self, int32_t id);
/* Token id's bytes (owned by the vocabulary) and their count; -ERANGE for a bad id. */
int grammar_vocab_piece(const grammar_vocab_t *self, int32_t id, const char **bytes, uint32_t *len);

/* The precomputed per-position token sets of g over v (both borrowed: they must outlive
 * the index).  NULL with a reason in err on failure (out of memory). */
grammar_index_t *grammar_index_new(const grammar_t *g, const grammar_vocab_t *v, char *err,
                                   size_t errlen);
void grammar_index_destroy(grammar_index_t **self_p);

typedef struct {
    int positions;     /* byte-set positions indexed */
    int64_t accepted;  /* sum over positions of context-independent accepted tokens */
    int64_t uncertain; /* sum over positions of context-dependent tokens */
    size_t bytes;      /* memory the index holds */
    double build_ms;   /* time grammar_index_new took */
} grammar_index_stats_t;

void grammar_index_stats(const grammar_index_t *self, grammar_index_stats_t *out);

/* The allowed tokens of state s (made over the index's grammar) into mask.  0, or -ENOMEM.
 * The state keeps scratch memory for it; it does not change what the state has accepted. */
int grammar_state_mask(grammar_state_t *s, const grammar_index_t *ix, uint64_t *mask);

/* Accept token id: its bytes, or for an end-of-generation token the end of the sentence.
 * 0 (one checkpoint recorded), -EINVAL if the grammar refuses it (state unchanged), or
 * -ERANGE for an id outside the vocabulary. */
int grammar_state_accept_token(grammar_state_t *s, const grammar_index_t *ix, int32_t id);

/* Set logits[i] to -INFINITY for every token i the mask refuses (n logits): what the
 * sampler does before temperature, top-k and top-p; greedy then picks the best allowed. */
void grammar_mask_apply(const uint64_t *mask, float *logits, int32_t n);

#endif
