/* serve_grammars.c - see serve_grammars.h.  The cache is a small array scanned by text
 * (its capacity is the batch size, tens of entries: a scan costs nothing next to a
 * compile); each entry knows whether it is still cached and how many requests hold it. */
#include "serve_grammars.h"

#include "base_clock.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct serve_grammar_t {
    char *text;          /* its GBNF (the cache's key) */
    grammar_t *g;        /* compiled */
    grammar_index_t *ix; /* over the cache's vocabulary */
    int refs;            /* requests holding it */
    bool cached;         /* in the cache (else freed with its last reference) */
    uint64_t used;       /* last use (LRU tick) */
};

struct serve_grammars_t {
    const model_tokenizer_t *tok; /* borrowed: the pieces */
    int n_vocab;                  /* pieces of tok the vocabulary has */
    grammar_vocab_t *vocab;       /* built at the first grammar */
    serve_grammar_t **slots;      /* (capacity) the cached grammars, NULL where free */
    int capacity;                 /* slots */
    uint64_t clock;               /* LRU ticks */
    serve_grammars_stats_t stats; /* hits, compiles */
};

static void s_free(serve_grammar_t **gp) {
    serve_grammar_t *g = *gp;
    if (!g)
        return;
    grammar_index_destroy(&g->ix);
    grammar_destroy(&g->g);
    free(g->text);
    free(g);
    *gp = NULL;
}

serve_grammars_t *serve_grammars_new(const model_tokenizer_t *tok, int n_vocab, int capacity) {
    if (capacity < 1)
        return NULL;
    serve_grammars_t *self = calloc(1, sizeof *self);
    if (self)
        self->slots = calloc((size_t)capacity, sizeof *self->slots);
    if (!self || !self->slots) {
        free(self);
        return NULL;
    }
    self->tok = tok;
    self->n_vocab = n_vocab;
    self->capacity = capacity;
    return self;
}

void serve_grammars_destroy(serve_grammars_t **self_p) {
    serve_grammars_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; i < self->capacity; i++) /* no request holds one any more */
        s_free(&self->slots[i]);
    grammar_vocab_destroy(&self->vocab);
    free(self->slots);
    free(self);
    *self_p = NULL;
}

/* The model's pieces as a grammar vocabulary (end-of-generation tokens end a sentence). */
static grammar_vocab_t *s_vocab(serve_grammars_t *self) {
    if (self->vocab)
        return self->vocab;
    int n = self->n_vocab, n_eog = 0;
    const char **p = malloc((size_t)n * sizeof *p);
    uint32_t *len = malloc((size_t)n * sizeof *len);
    int32_t *eog = model_tokenizer_eog_ids(self->tok, n, &n_eog);
    if (p && len && eog) {
        for (int i = 0; i < n; i++) {
            size_t l = 0;
            const char *s = model_tokenizer_piece(self->tok, i, false, &l);
            p[i] = s ? s : "";
            len[i] = s && !model_tokenizer_is_eog(self->tok, i) ? (uint32_t)l : 0;
        }
        self->vocab = grammar_vocab_new(n, p, len, eog, n_eog);
    }
    free(p);
    free(len);
    free(eog);
    return self->vocab;
}

serve_grammar_t *serve_grammars_get(serve_grammars_t *self, const char *text, char *err,
                                    size_t errlen) {
    int lru = 0;
    for (int i = 0; i < self->capacity; i++) {
        serve_grammar_t *g = self->slots[i];
        if (g && !strcmp(g->text, text)) {
            g->refs++;
            g->used = ++self->clock;
            self->stats.hits++;
            return g;
        }
        if (!g || (self->slots[lru] && g->used < self->slots[lru]->used))
            lru = i; /* a free slot, else the least recently used */
    }
    grammar_vocab_t *v = s_vocab(self);
    serve_grammar_t *g = calloc(1, sizeof *g);
    if (!v || !g || !(g->text = strdup(text))) {
        snprintf(err, errlen, "out of memory");
        free(g);
        return NULL;
    }
    uint64_t t0 = base_now_us();
    g->g = grammar_new(text, err, errlen);
    g->ix = g->g ? grammar_index_new(g->g, v, err, errlen) : NULL;
    if (!g->ix) {
        s_free(&g);
        return NULL;
    }
    self->stats.compiled++;
    self->stats.compile_us += (int64_t)(base_now_us() - t0);
    serve_grammar_t *old = self->slots[lru];
    if (old) { /* pushed out: freed now, or by its last request */
        old->cached = false;
        if (old->refs == 0)
            s_free(&self->slots[lru]);
    } else {
        self->stats.cached++;
    }
    g->cached = true;
    g->refs = 1;
    g->used = ++self->clock;
    self->slots[lru] = g;
    return g;
}

serve_grammars_stats_t serve_grammars_stats(const serve_grammars_t *self) {
    return self->stats;
}

void serve_grammar_release(serve_grammar_t **gp) {
    serve_grammar_t *g = *gp;
    *gp = NULL;
    if (g && --g->refs == 0 && !g->cached)
        s_free(&g);
}

const grammar_t *serve_grammar_grammar(const serve_grammar_t *g) {
    return g->g;
}

const grammar_index_t *serve_grammar_index(const serve_grammar_t *g) {
    return g->ix;
}
