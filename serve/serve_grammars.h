/* serve_grammars.h - the target worker's compiled grammars: a GBNF text compiled once
 * (grammar_new and its token index over the model's vocabulary, up to 0.6 s at a 49k
 * vocabulary) and shared by every request that brings the same text.  A bounded cache,
 * least recently used first out; a grammar pushed out while requests still use it lives
 * until the last of them releases it.  Size it to at least the requests that run at once
 * (max_batch): a batch of different schemas then never recompiles one another's. */
#ifndef SERVE_GRAMMARS_H
#define SERVE_GRAMMARS_H

#include "grammar.h"
#include "grammar_mask.h"
#include "model_tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct serve_grammars_t serve_grammars_t;
/* One compiled grammar, counted by the requests that hold it. */
typedef struct serve_grammar_t serve_grammar_t;

/* What the cache has done since it was made (the worker's grammar.* counters). */
typedef struct {
    int64_t hits;       /* a request found its grammar compiled */
    int64_t compiled;   /* grammars compiled */
    int64_t compile_us; /* time spent compiling them */
    int cached;         /* grammars in the cache now */
} serve_grammars_stats_t;

/* A cache of capacity (>= 1) grammars over tok's first n_vocab pieces (tok borrowed: it
 * outlives the cache; the vocabulary is built at the first grammar, end-of-generation
 * tokens ending a sentence).  NULL when out of memory or capacity < 1. */
serve_grammars_t *serve_grammars_new(const model_tokenizer_t *tok, int n_vocab, int capacity);
/* Frees the cache and its grammars.  Every grammar must have been released first. */
void serve_grammars_destroy(serve_grammars_t **self_p);

/* The compiled grammar of GBNF text, from the cache or compiled and cached, with one
 * reference for the caller (serve_grammar_release).  NULL with the reason in err: the
 * text does not compile, or out of memory. */
serve_grammar_t *serve_grammars_get(serve_grammars_t *self, const char *text, char *err,
                                    size_t errlen);
serve_grammars_stats_t serve_grammars_stats(const serve_grammars_t *self);

/* Drop the caller's reference and null *gp (safe on NULL): the grammar is freed with the
 * last reference once it has left the cache. */
void serve_grammar_release(serve_grammar_t **gp);
/* The grammar (for grammar_state_new) and its token index (the step's gindex). */
const grammar_t *serve_grammar_grammar(const serve_grammar_t *g);
const grammar_index_t *serve_grammar_index(const serve_grammar_t *g);

#endif
