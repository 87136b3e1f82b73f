/* grammar_mask.c - the vocabulary trie, the per-position token index and the mask.
 *
 * The technique (after XGrammar's split of tokens into context-independent and
 * context-dependent ones, Dong et al. 2024, and llama.cpp's walk of a token trie with the
 * grammar's stacks): for every byte-set position p of the grammar, walk the vocabulary's
 * byte trie once with the stack "p, then its static return chain" (the places its rule
 * returns to, followed upwards while each rule has a single caller, see ctx in
 * grammar_internal.h).  A token whose bytes some path consumes is accepted whatever the
 * real stack below holds; one whose every path dies first is refused; one for which a path
 * returns past the known chain (into grammar_sentinel) is uncertain and checked at run time
 * against the real stack, walking the uncertain tokens in trie order so common prefixes are
 * stepped once.  Grammars made by the schema compiler give every rule one caller wherever
 * they can, so the uncertain lists are mostly empty and a mask is a few ORs.
 */
#include "grammar_mask.h"
#include "grammar_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct grammar_vocab_t {
    int32_t n;        /* tokens */
    uint8_t *bytes;   /* every token's bytes, back to back */
    size_t *off;      /* (n + 1) token i: bytes[off[i] .. off[i+1]) */
    uint8_t *eog;     /* (n) 1 for end-of-generation tokens */
    int32_t *eog_ids; /* (n_eog) the same as a list */
    int n_eog;        /* their count */
    int max_len;      /* longest token, bytes */
    /* the trie, nodes in preorder; node i's subtree is [i, end[i]) */
    int32_t n_nodes;  /* nodes */
    uint8_t *nbyte;   /* (n_nodes) the byte leading to the node */
    uint16_t *ndepth; /* (n_nodes) its depth (1 for the root's children) */
    int32_t *nend;    /* (n_nodes) end of its subtree */
    int32_t *ntok;    /* (n_nodes) first token ending there, -1 none */
    int32_t *tnext;   /* (n) next token with the same bytes, -1 none */
};

static const uint8_t *s_tok(const grammar_vocab_t *v, int32_t t, size_t *len) {
    *len = v->off[t + 1] - v->off[t];
    return v->bytes + v->off[t];
}

static const grammar_vocab_t *s_sort_vocab; /* qsort has no context argument */

static int s_tok_cmp(const void *a, const void *b) {
    size_t la, lb;
    const uint8_t *pa = s_tok(s_sort_vocab, *(const int32_t *)a, &la);
    const uint8_t *pb = s_tok(s_sort_vocab, *(const int32_t *)b, &lb);
    int c = memcmp(pa, pb, la < lb ? la : lb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

void grammar_vocab_destroy(grammar_vocab_t **self_p) {
    if (!self_p || !*self_p)
        return;
    grammar_vocab_t *v = *self_p;
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v->eog_ids);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nend);
    free(v->ntok);
    free(v->tnext);
    free(v);
    *self_p = NULL;
}

grammar_vocab_t *grammar_vocab_new(int32_t n, const char *const *piece, const uint32_t *len,
                                   const int32_t *eog, int n_eog) {
    grammar_vocab_t *v = calloc(1, sizeof *v);
    int32_t *order = NULL, *stack = NULL;
    if (!v || n <= 0)
        goto fail;
    v->n = n;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += len[i];
    v->bytes = malloc(total + 1);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->eog = calloc((size_t)n, 1);
    v->tnext = malloc((size_t)n * sizeof *v->tnext);
    order = malloc((size_t)n * sizeof *order);
    if (!v->bytes || !v->off || !v->eog || !v->tnext || !order)
        goto fail;
    total = 0;
    int n_order = 0;
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = total;
        memcpy(v->bytes + total, piece[i], len[i]);
        total += len[i];
        v->tnext[i] = -1;
        if (len[i] > 65535)
            goto fail;
        if (len[i]) {
            order[n_order++] = i;
            if ((int)len[i] > v->max_len)
                v->max_len = (int)len[i];
        }
    }
    v->off[n] = total;
    v->eog_ids = malloc(((size_t)n_eog + 1) * sizeof *v->eog_ids);
    if (!v->eog_ids)
        goto fail;
    for (int i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n)
            goto fail;
        if (!v->eog[eog[i]])
            v->eog_ids[v->n_eog++] = eog[i];
        v->eog[eog[i]] = 1;
    }
    s_sort_vocab = v;
    qsort(order, (size_t)n_order, sizeof *order, s_tok_cmp);
    /* nodes: at most one per byte of every token */
    size_t cap = total + 1;
    v->nbyte = malloc(cap);
    v->ndepth = malloc(cap * sizeof *v->ndepth);
    v->nend = malloc(cap * sizeof *v->nend);
    v->ntok = malloc(cap * sizeof *v->ntok);
    stack = malloc(((size_t)v->max_len + 1) * sizeof *stack); /* open node per depth */
    if (!v->nbyte || !v->ndepth || !v->nend || !v->ntok || !stack)
        goto fail;
    int32_t nn = 0, open = 0; /* open: depth of the current path */
    size_t plen = 0;
    const uint8_t *prev = NULL;
    for (int k = 0; k < n_order; k++) {
        int32_t t = order[k];
        size_t l;
        const uint8_t *p = s_tok(v, t, &l);
        size_t lcp = 0;
        while (prev && lcp < l && lcp < plen && p[lcp] == prev[lcp])
            lcp++;
        if (prev && lcp == l && l == plen) { /* same bytes: chain onto the node's tokens */
            int32_t u = v->ntok[stack[open - 1]];
            while (v->tnext[u] >= 0)
                u = v->tnext[u];
            v->tnext[u] = t;
            continue;
        }
        while (open > (int)lcp) /* close the nodes the new token leaves */
            v->nend[stack[--open]] = nn;
        for (size_t d = lcp; d < l; d++) {
            v->nbyte[nn] = p[d];
            v->ndepth[nn] = (uint16_t)(d + 1);
            v->ntok[nn] = -1;
            stack[open++] = nn++;
        }
        v->ntok[stack[open - 1]] = t;
        prev = p;
        plen = l;
    }
    while (open > 0)
        v->nend[stack[--open]] = nn;
    v->n_nodes = nn;
    free(order);
    free(stack);
    return v;
fail:
    free(order);
    free(stack);
    grammar_vocab_destroy(&v);
    return NULL;
}

int32_t grammar_vocab_size(const grammar_vocab_t *self) {
    return self->n;
}

size_t grammar_vocab_mask_words(const grammar_vocab_t *self) {
    return ((size_t)self->n + 63) / 64;
}

bool grammar_vocab_is_eog(const grammar_vocab_t *self, int32_t id) {
    return id >= 0 && id < self->n && self->eog[id];
}

int grammar_vocab_piece(const grammar_vocab_t *self, int32_t id, const char **bytes,
                        uint32_t *len) {
    if (id < 0 || id >= self->n)
        return -ERANGE;
    size_t l;
    *bytes = (const char *)s_tok(self, id, &l);
    *len = (uint32_t)l;
    return 0;
}

/* ---- the index */

typedef struct {
    uint64_t *bits; /* (mask words) accepted tokens as a bitset, or NULL */
    int32_t *ids;   /* (n_ids) accepted tokens as a list when sparse */
    int32_t n_ids;  /* their count */
    int32_t *unc;   /* (n_unc) uncertain tokens, in trie order */
    uint16_t *lcp;  /* (n_unc) bytes each shares with the one before */
    int32_t n_unc;  /* their count */
} s_pos_t;

struct grammar_index_t {
    const grammar_t *g;       /* borrowed */
    const grammar_vocab_t *v; /* borrowed */
    s_pos_t *pos;             /* (g->n_el) per position; filled for byte-set positions */
    grammar_index_stats_t st; /* what it holds and cost */
};

typedef struct {
    int32_t *v;
    int32_t n, cap;
} s_ids_t;

static bool s_ids_push(s_ids_t *a, int32_t x) {
    if (a->n == a->cap) {
        int32_t cap = a->cap ? a->cap * 2 : 256;
        int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v)
            return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

/* Push node i's tokens (duplicates included). */
static bool s_push_node(const grammar_vocab_t *v, int32_t i, s_ids_t *a) {
    for (int32_t t = v->ntok[i]; t >= 0; t = v->tnext[t])
        if (!s_ids_push(a, t))
            return false;
    return true;
}

/* The static return chain of a rule's context, as frames in pool (depth-limited). */
static const gnode_t *s_chain(const grammar_t *g, gpool_t *pool, int ctx, int depth) {
    if (ctx == GC_ROOT)
        return NULL;
    if (ctx < 0 || depth > 64)
        return &grammar_sentinel;
    const gnode_t *up = s_chain(g, pool, g->ctx[g->rule_of[ctx]], depth + 1);
    return up ? gpool_frame(pool, ctx, up) : gpool_frame(pool, ctx, NULL);
}

/* CPU time of this thread: what building the index costs, whatever else the machine runs. */
static double s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Walk the whole trie from the frame of byte-set position p and sort every token into
 * accepted or uncertain (refused ones are left out). */
static int s_classify(const grammar_index_t *ix, gpool_t *pool, gset_t *lev, size_t *mark,
                      bool *hit, int p, s_ids_t *acc, s_ids_t *unc) {
    const grammar_t *g = ix->g;
    const grammar_vocab_t *v = ix->v;
    gpool_reset(pool, 0);
    const gnode_t *up = s_chain(g, pool, g->ctx[g->rule_of[p]], 0);
    const gnode_t *top = up || g->ctx[g->rule_of[p]] == GC_ROOT ? gpool_frame(pool, p, up) : NULL;
    if (!top)
        return -ENOMEM;
    gset_clear(&lev[0]);
    lev[0].n = 0;
    if (!lev[0].cap) {
        lev[0].v = malloc(16 * sizeof *lev[0].v);
        if (!lev[0].v)
            return -ENOMEM;
        lev[0].cap = 16;
    }
    lev[0].v[lev[0].n++] = top;
    mark[0] = gpool_mark(pool);
    hit[0] = false;
    for (int32_t i = 0; i < v->n_nodes;) {
        int d = v->ndepth[i];
        gpool_reset(pool, mark[d - 1]);
        grammar_step(g, pool, &lev[d - 1], v->nbyte[i], &lev[d]);
        if (lev[d].oom)
            return -ENOMEM;
        mark[d] = gpool_mark(pool);
        bool now = lev[d].hit, live = lev[d].n > 0 || lev[d].acc;
        hit[d] = hit[d - 1] || now;
        if (v->ntok[i] >= 0 && (live || now || hit[d]) &&
            !s_push_node(v, i, live || now ? acc : unc))
            return -ENOMEM;
        if (lev[d].n > 0) {
            i++;
            continue;
        }
        if (hit[d]) /* dead here, but the unknown stack below may go on */
            for (int32_t j = i + 1; j < v->nend[i]; j++)
                if (v->ntok[j] >= 0 && !s_push_node(v, j, unc))
                    return -ENOMEM;
        i = v->nend[i];
    }
    return 0;
}

void grammar_index_destroy(grammar_index_t **self_p) {
    if (!self_p || !*self_p)
        return;
    grammar_index_t *ix = *self_p;
    if (ix->pos)
        for (int p = 0; p < ix->g->n_el; p++) {
            free(ix->pos[p].bits);
            free(ix->pos[p].ids);
            free(ix->pos[p].unc);
            free(ix->pos[p].lcp);
        }
    free(ix->pos);
    free(ix);
    *self_p = NULL;
}

grammar_index_t *grammar_index_new(const grammar_t *g, const grammar_vocab_t *v, char *err,
                                   size_t errlen) {
    double t0 = s_now_ms();
    grammar_index_t *ix = calloc(1, sizeof *ix);
    gpool_t *pool = gpool_new(false);
    int D = v->max_len + 1;
    gset_t *lev = calloc((size_t)D, sizeof *lev);
    size_t *mark = malloc((size_t)D * sizeof *mark);
    bool *hit = malloc((size_t)D * sizeof *hit);
    s_ids_t acc = {0}, unc = {0};
    size_t words = grammar_vocab_mask_words(v);
    if (!ix || !pool || !lev || !mark || !hit)
        goto oom;
    ix->g = g;
    ix->v = v;
    ix->pos = calloc((size_t)g->n_el, sizeof *ix->pos);
    if (!ix->pos)
        goto oom;
    ix->st.bytes = (size_t)g->n_el * sizeof *ix->pos;
    for (int p = 0; p < g->n_el; p++) {
        if (g->el[p].kind != GE_BYTES || g->ctx[g->rule_of[p]] == GC_NONE)
            continue; /* not a stack top, or unreachable from the root */
        acc.n = unc.n = 0;
        if (s_classify(ix, pool, lev, mark, hit, p, &acc, &unc) < 0)
            goto oom;
        s_pos_t *sp = &ix->pos[p];
        ix->st.positions++;
        ix->st.accepted += acc.n;
        ix->st.uncertain += unc.n;
        if ((size_t)acc.n * 32 < (size_t)v->n) { /* a list is smaller than a bitset */
            sp->ids = malloc(((size_t)acc.n + 1) * sizeof *sp->ids);
            if (!sp->ids)
                goto oom;
            memcpy(sp->ids, acc.v, (size_t)acc.n * sizeof *sp->ids);
            sp->n_ids = acc.n;
            ix->st.bytes += (size_t)acc.n * sizeof *sp->ids;
        } else {
            sp->bits = calloc(words, sizeof *sp->bits);
            if (!sp->bits)
                goto oom;
            for (int32_t k = 0; k < acc.n; k++)
                sp->bits[acc.v[k] >> 6] |= 1ull << (acc.v[k] & 63);
            ix->st.bytes += words * sizeof *sp->bits;
        }
        if (unc.n) {
            sp->unc = malloc((size_t)unc.n * sizeof *sp->unc);
            sp->lcp = malloc((size_t)unc.n * sizeof *sp->lcp);
            if (!sp->unc || !sp->lcp)
                goto oom;
            memcpy(sp->unc, unc.v, (size_t)unc.n * sizeof *sp->unc);
            for (int32_t k = 0; k < unc.n; k++) {
                size_t la, lb = 0, l = 0;
                const uint8_t *a = s_tok(v, unc.v[k], &la), *b = NULL;
                if (k)
                    b = s_tok(v, unc.v[k - 1], &lb);
                while (b && l < la && l < lb && a[l] == b[l])
                    l++;
                sp->lcp[k] = (uint16_t)l;
            }
            sp->n_unc = unc.n;
            ix->st.bytes += (size_t)unc.n * (sizeof *sp->unc + sizeof *sp->lcp);
        }
    }
    goto done;
oom:
    snprintf(err, errlen, "out of memory building the grammar's token index");
    grammar_index_destroy(&ix);
done:
    if (lev)
        for (int d = 0; d < D; d++)
            gset_free(&lev[d]);
    free(lev);
    free(mark);
    free(hit);
    free(acc.v);
    free(unc.v);
    gpool_destroy(&pool);
    if (ix)
        ix->st.build_ms = s_now_ms() - t0;
    return ix;
}

void grammar_index_stats(const grammar_index_t *self, grammar_index_stats_t *out) {
    *out = self->st;
}

/* Check the uncertain tokens of top's position against the real stack under top. */
static int s_check_uncertain(const grammar_index_t *ix, grammar_state_t *s, const gnode_t *top,
                             const s_pos_t *sp, uint64_t *mask) {
    const grammar_vocab_t *v = ix->v;
    gset_t *lev = grammar_state_levels(s, v->max_len + 1);
    gpool_t *pool = grammar_state_scratch(s);
    if (!lev)
        return -ENOMEM;
    size_t base = gpool_mark(pool);
    gset_clear(&lev[0]);
    if (!lev[0].cap) {
        lev[0].v = malloc(16 * sizeof *lev[0].v);
        if (!lev[0].v)
            return -ENOMEM;
        lev[0].cap = 16;
    }
    lev[0].v[lev[0].n++] = top;
    int valid = 0; /* levels 0..valid hold the previous token's path */
    for (int32_t k = 0; k < sp->n_unc; k++) {
        int32_t t = sp->unc[k];
        int d = sp->lcp[k] < valid ? sp->lcp[k] : valid;
        if ((mask[t >> 6] >> (t & 63)) & 1) {
            valid = d;
            continue;
        }
        size_t len;
        const uint8_t *b = s_tok(v, t, &len);
        int i = d;
        while (i < (int)len && lev[i].n > 0) {
            /* frames of levels deeper than i are no longer referenced: drop them */
            if (i == 0)
                gpool_reset(pool, base);
            grammar_step(ix->g, pool, &lev[i], b[i], &lev[i + 1]);
            if (lev[i + 1].oom)
                return -ENOMEM;
            i++;
        }
        valid = i;
        if (i == (int)len && (lev[i].n > 0 || lev[i].acc))
            mask[t >> 6] |= 1ull << (t & 63);
    }
    gpool_reset(pool, base);
    return 0;
}

int grammar_state_mask(grammar_state_t *s, const grammar_index_t *ix, uint64_t *mask) {
    const grammar_vocab_t *v = ix->v;
    size_t words = grammar_vocab_mask_words(v);
    memset(mask, 0, words * sizeof *mask);
    const gset_t *cur = grammar_state_set(s);
    if (cur->acc)
        for (int i = 0; i < v->n_eog; i++)
            mask[v->eog_ids[i] >> 6] |= 1ull << (v->eog_ids[i] & 63);
    for (int k = 0; k < cur->n; k++) {
        const gnode_t *top = cur->v[k];
        const s_pos_t *sp = &ix->pos[top->pos];
        bool seen = false; /* the context-independent part once per position */
        for (int j = 0; j < k && !seen; j++)
            seen = cur->v[j]->pos == top->pos;
        if (!seen) {
            if (sp->bits)
                for (size_t w = 0; w < words; w++)
                    mask[w] |= sp->bits[w];
            else
                for (int32_t i = 0; i < sp->n_ids; i++)
                    mask[sp->ids[i] >> 6] |= 1ull << (sp->ids[i] & 63);
        }
        if (sp->n_unc) {
            int rc = s_check_uncertain(ix, s, top, sp, mask);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int grammar_state_accept_token(grammar_state_t *s, const grammar_index_t *ix, int32_t id) {
    const grammar_vocab_t *v = ix->v;
    if (id < 0 || id >= v->n)
        return -ERANGE;
    if (v->eog[id])
        return grammar_state_finish(s);
    size_t len;
    const uint8_t *b = s_tok(v, id, &len);
    if (!len)
        return -EINVAL;
    return grammar_state_accept_bytes(s, b, len);
}

void grammar_mask_apply(const uint64_t *mask, float *logits, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (!((mask[i >> 6] >> (i & 63)) & 1))
            logits[i] = -INFINITY;
}
