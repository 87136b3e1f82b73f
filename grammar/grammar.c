/* grammar.c - the GBNF parser and compiler (text -> one element array with byte sets), the
 * checks that make the stack machine terminate (no left recursion, every rule productive),
 * the stack machine itself (expand, step) and the parse state with its checkpoints.
 * docs/GRAMMAR.md describes the text form.
 */
#include "grammar_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const gnode_t grammar_sentinel = {-1, NULL};

/* ---- text buffers */

void gbuf_add(gbuf_t *b, const char *s) {
    size_t k = strlen(s);
    if (b->oom)
        return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2 + 256;
        char *v = realloc(b->s, cap);
        if (!v) {
            b->oom = true;
            return;
        }
        b->s = v;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

void gbuf_printf(gbuf_t *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) {
        b->oom = true;
        return;
    }
    gbuf_add(b, tmp);
}

/* ---- frame pools */

#define GPOOL_CHUNK 4096

struct gpool_t {
    gnode_t **chunks;    /* (n_chunks) blocks of GPOOL_CHUNK frames */
    int n_chunks;        /* allocated blocks */
    size_t used;         /* frames handed out */
    bool intern;         /* hash-cons frames (persistent pools) */
    const gnode_t **tab; /* (tab_cap) open-addressing table of interned frames */
    size_t tab_cap;      /* power of two, 0 without interning */
};

gpool_t *gpool_new(bool intern) {
    gpool_t *self = calloc(1, sizeof *self);
    if (self)
        self->intern = intern;
    return self;
}

void gpool_destroy(gpool_t **self_p) {
    if (!self_p || !*self_p)
        return;
    gpool_t *self = *self_p;
    for (int i = 0; i < self->n_chunks; i++)
        free(self->chunks[i]);
    free(self->chunks);
    free(self->tab);
    free(self);
    *self_p = NULL;
}

size_t gpool_mark(const gpool_t *self) {
    return self->used;
}

void gpool_reset(gpool_t *self, size_t mark) {
    if (!self->intern && mark <= self->used)
        self->used = mark;
}

static gnode_t *s_pool_bump(gpool_t *self) {
    size_t c = self->used / GPOOL_CHUNK;
    if ((int)c >= self->n_chunks) {
        gnode_t **ch = realloc(self->chunks, (c + 1) * sizeof *ch);
        if (!ch)
            return NULL;
        self->chunks = ch;
        ch[c] = malloc(GPOOL_CHUNK * sizeof(gnode_t));
        if (!ch[c])
            return NULL;
        self->n_chunks = (int)c + 1;
    }
    return &self->chunks[c][self->used++ % GPOOL_CHUNK];
}

static size_t s_hash(int32_t pos, const gnode_t *parent) {
    uint64_t h = (uint64_t)(uint32_t)pos * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)parent;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return (size_t)(h ^ (h >> 32));
}

static bool s_pool_grow(gpool_t *self) {
    size_t cap = self->tab_cap ? self->tab_cap * 2 : 1024;
    const gnode_t **tab = calloc(cap, sizeof *tab);
    if (!tab)
        return false;
    for (size_t i = 0; i < self->tab_cap; i++) {
        const gnode_t *n = self->tab[i];
        if (!n)
            continue;
        size_t j = s_hash(n->pos, n->parent) & (cap - 1);
        while (tab[j])
            j = (j + 1) & (cap - 1);
        tab[j] = n;
    }
    free(self->tab);
    self->tab = tab;
    self->tab_cap = cap;
    return true;
}

/* The frame (pos, parent): interned in persistent pools, fresh in scratch ones. */
static const gnode_t *s_frame(gpool_t *self, int32_t pos, const gnode_t *parent) {
    if (!self->intern) {
        gnode_t *n = s_pool_bump(self);
        if (n) {
            n->pos = pos;
            n->parent = parent;
        }
        return n;
    }
    if (self->used * 2 >= self->tab_cap && !s_pool_grow(self))
        return NULL;
    size_t j = s_hash(pos, parent) & (self->tab_cap - 1);
    for (; self->tab[j]; j = (j + 1) & (self->tab_cap - 1))
        if (self->tab[j]->pos == pos && self->tab[j]->parent == parent)
            return self->tab[j];
    gnode_t *n = s_pool_bump(self);
    if (!n)
        return NULL;
    n->pos = pos;
    n->parent = parent;
    self->tab[j] = n;
    return n;
}

const gnode_t *gpool_frame(gpool_t *self, int32_t pos, const gnode_t *parent) {
    return s_frame(self, pos, parent);
}

/* ---- stack sets and the stack machine */

void gset_clear(gset_t *s) {
    s->n = 0;
    s->acc = s->hit = s->oom = false;
}

void gset_free(gset_t *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

static void s_add(gset_t *out, const gnode_t *n) {
    for (int i = 0; i < out->n; i++)
        if (out->v[i] == n || (out->v[i]->pos == n->pos && out->v[i]->parent == n->parent))
            return;
    if (out->n == out->cap) {
        int cap = out->cap ? out->cap * 2 : 16;
        const gnode_t **v = realloc(out->v, (size_t)cap * sizeof *v);
        if (!v) {
            out->oom = true;
            return;
        }
        out->v = v;
        out->cap = cap;
    }
    out->v[out->n++] = n;
}

/* Expand frame (pos, parent); self is that frame when it already exists (a return). */
static void s_expand(const grammar_t *g, gpool_t *pool, int pos, const gnode_t *parent,
                     const gnode_t *self, gset_t *out) {
    for (;;) {
        ge_t e = g->el[pos];
        if (e.kind == GE_BYTES) {
            const gnode_t *n = self ? self : s_frame(pool, pos, parent);
            if (!n)
                out->oom = true;
            else
                s_add(out, n);
            return;
        }
        if (e.kind == GE_RULE) {
            /* a reference at the end of an alternative is a tail call: no return frame */
            const gnode_t *ret = parent;
            if (g->el[pos + 1].kind != GE_END_ALT && !(ret = s_frame(pool, pos + 1, parent))) {
                out->oom = true;
                return;
            }
            int r = e.arg, a0 = g->alt_off[r], a1 = g->alt_off[r + 1];
            for (int a = a0; a < a1 - 1; a++)
                s_expand(g, pool, g->alts[a], ret, NULL, out);
            pos = g->alts[a1 - 1];
            parent = ret;
            self = NULL;
            continue;
        }
        /* GE_END_ALT: return to the frame below */
        if (!parent)
            out->acc = true;
        else if (parent == &grammar_sentinel)
            out->hit = true;
        else {
            pos = parent->pos;
            self = parent;
            parent = parent->parent;
            continue;
        }
        return;
    }
}

void grammar_expand(const grammar_t *g, gpool_t *pool, int pos, const gnode_t *parent,
                    gset_t *out) {
    s_expand(g, pool, pos, parent, NULL, out);
}

void grammar_step(const grammar_t *g, gpool_t *pool, const gset_t *in, uint8_t byte, gset_t *out) {
    gset_clear(out);
    for (int i = 0; i < in->n; i++) {
        const gnode_t *n = in->v[i];
        if (grammar_set_has(g, g->el[n->pos].arg, byte))
            s_expand(g, pool, n->pos + 1, n->parent, NULL, out);
    }
}

/* ---- the GBNF parser */

typedef struct {
    ge_t *v;
    int n, cap;
} s_body_t;

typedef struct {
    const char *p;    /* read position */
    int line;         /* 1-based line of p */
    char *err;        /* caller's error buffer */
    size_t errlen;    /* its size */
    bool failed;      /* an error was recorded */
    char **names;     /* (n_rules) */
    s_body_t *bodies; /* (n_rules) elements of each rule */
    bool *defined;    /* (n_rules) seen "name ::=" */
    bool *synth;      /* (n_rules) made by the parser (groups, repetitions, classes) */
    int *ref_line;    /* (n_rules) first line referencing it */
    int n_rules, cap_rules;
    uint64_t (*sets)[4]; /* (n_sets) */
    int n_sets, cap_sets;
} s_parser_t;

static void s_fail(s_parser_t *ps, const char *fmt, ...) {
    if (ps->failed)
        return;
    ps->failed = true;
    int k = snprintf(ps->err, ps->errlen, "line %d: ", ps->line);
    if (k < 0 || (size_t)k >= ps->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + k, ps->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static bool s_push(s_parser_t *ps, int r, int kind, int arg) {
    s_body_t *b = &ps->bodies[r];
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 8;
        ge_t *v = realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) {
            s_fail(ps, "out of memory");
            return false;
        }
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n].kind = (uint32_t)kind;
    b->v[b->n].arg = (uint32_t)arg;
    b->n++;
    return true;
}

/* The rule named name[0..len), made (undefined) on first mention; -1 on OOM. */
static int s_rule(s_parser_t *ps, const char *name, size_t len) {
    for (int i = 0; i < ps->n_rules; i++)
        if (strlen(ps->names[i]) == len && !memcmp(ps->names[i], name, len))
            return i;
    if (ps->n_rules == ps->cap_rules) {
        int cap = ps->cap_rules ? ps->cap_rules * 2 : 32;
        char **nm = realloc(ps->names, (size_t)cap * sizeof *nm);
        if (nm)
            ps->names = nm;
        s_body_t *bd = realloc(ps->bodies, (size_t)cap * sizeof *bd);
        if (bd)
            ps->bodies = bd;
        bool *df = realloc(ps->defined, (size_t)cap * sizeof *df);
        if (df)
            ps->defined = df;
        int *rl = realloc(ps->ref_line, (size_t)cap * sizeof *rl);
        if (rl)
            ps->ref_line = rl;
        bool *sy = realloc(ps->synth, (size_t)cap * sizeof *sy);
        if (sy)
            ps->synth = sy;
        if (!nm || !bd || !df || !rl || !sy) {
            s_fail(ps, "out of memory");
            return -1;
        }
        ps->cap_rules = cap;
    }
    char *s = malloc(len + 1);
    if (!s) {
        s_fail(ps, "out of memory");
        return -1;
    }
    memcpy(s, name, len);
    s[len] = 0;
    int r = ps->n_rules++;
    ps->names[r] = s;
    memset(&ps->bodies[r], 0, sizeof ps->bodies[r]);
    ps->defined[r] = false;
    ps->synth[r] = false;
    ps->ref_line[r] = ps->line;
    return r;
}

/* A fresh synthetic rule named after its parent, already defined. */
static int s_synth(s_parser_t *ps, int parent) {
    char name[160];
    int n = snprintf(name, sizeof name, "%.120s_%d", ps->names[parent], ps->n_rules);
    int r = s_rule(ps, name, (size_t)n);
    if (r >= 0)
        ps->defined[r] = ps->synth[r] = true;
    return r;
}

/* A copy of synthetic rule w and the synthetic rules under it (named rules are shared), so
 * that every copy of a repeated symbol has one caller: the token index can then follow
 * each copy's return (grammar_mask.c).  -1 on OOM. */
static int s_clone_rule(s_parser_t *ps, int w) {
    if (!ps->synth[w])
        return w;
    int c = s_synth(ps, w);
    if (c < 0)
        return -1;
    for (int i = 0; i < ps->bodies[w].n; i++) {
        ge_t e = ps->bodies[w].v[i];
        int arg = (int)e.arg;
        if (e.kind == GE_RULE)
            arg = arg == w ? c : s_clone_rule(ps, arg);
        if (arg < 0 || !s_push(ps, c, (int)e.kind, arg))
            return -1;
    }
    return c;
}

/* Append symbol sym to rule r: itself the first time (*used false), a copy after. */
static bool s_push_sym(s_parser_t *ps, int r, ge_t sym, bool *used) {
    int arg = (int)sym.arg;
    if (sym.kind == GE_RULE && *used && (arg = s_clone_rule(ps, arg)) < 0)
        return false;
    *used = true;
    return s_push(ps, r, (int)sym.kind, arg);
}

static int s_set(s_parser_t *ps, const uint64_t set[4]) {
    for (int i = 0; i < ps->n_sets; i++)
        if (!memcmp(ps->sets[i], set, sizeof ps->sets[i]))
            return i;
    if (ps->n_sets == ps->cap_sets) {
        int cap = ps->cap_sets ? ps->cap_sets * 2 : 32;
        uint64_t(*v)[4] = realloc(ps->sets, (size_t)cap * sizeof *v);
        if (!v) {
            s_fail(ps, "out of memory");
            return -1;
        }
        ps->sets = v;
        ps->cap_sets = cap;
    }
    memcpy(ps->sets[ps->n_sets], set, sizeof ps->sets[0]);
    return ps->n_sets++;
}

static bool s_push_byte_range(s_parser_t *ps, int r, int lo, int hi) {
    uint64_t set[4] = {0};
    for (int b = lo; b <= hi; b++)
        set[b >> 6] |= 1ull << (b & 63);
    int k = s_set(ps, set);
    return k >= 0 && s_push(ps, r, GE_BYTES, k);
}

/* Skip blanks and comments; newlines too when nl. */
static void s_skip(s_parser_t *ps, bool nl) {
    for (;;) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r')
            ps->p++;
        else if (c == '\n' && nl) {
            ps->p++;
            ps->line++;
        } else if (c == '#') {
            while (*ps->p && *ps->p != '\n')
                ps->p++;
        } else
            return;
    }
}

static bool s_is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* True when p starts "name ::=" (the next rule's head). */
static bool s_at_head(const char *p) {
    if (!s_is_name(*p))
        return false;
    while (s_is_name(*p))
        p++;
    while (*p == ' ' || *p == '\t')
        p++;
    return !strncmp(p, "::=", 3);
}

static int s_hex(s_parser_t *ps, int digits) {
    int v = 0;
    for (int i = 0; i < digits; i++) {
        char c = *ps->p;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            s_fail(ps, "bad hex escape");
            return -1;
        }
        v = v * 16 + d;
        ps->p++;
    }
    return v;
}

int grammar_utf8_decode(const char **pp) {
    const unsigned char *p = (const unsigned char *)*pp;
    int c = p[0], n = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0)
        return -1;
    int v = n == 0 ? c : c & (0x3F >> n);
    for (int i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return -1;
        v = (v << 6) | (p[i] & 0x3F);
    }
    *pp += n + 1;
    return v;
}

/* One character of a literal or class: an escape or a UTF-8 character; its code point, or
 * a byte value | 0x1000000 for \xHH in a literal (raw bytes), -1 on error. */
static int s_char(s_parser_t *ps, bool raw_hex) {
    if (*ps->p == '\\') {
        ps->p++;
        char c = *ps->p++;
        switch (c) {
        case 'n':
            return '\n';
        case 'r':
            return '\r';
        case 't':
            return '\t';
        case '0':
            return 0;
        case 'x': {
            int v = s_hex(ps, 2);
            return v < 0 ? -1 : raw_hex ? v | 0x1000000 : v;
        }
        case 'u':
            return s_hex(ps, 4);
        case 'U':
            return s_hex(ps, 8);
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '.':
            return c;
        default:
            s_fail(ps, "unknown escape \\%c", c ? c : '0');
            return -1;
        }
    }
    if (!*ps->p || *ps->p == '\n') {
        s_fail(ps, "unterminated literal or class");
        return -1;
    }
    int v = grammar_utf8_decode(&ps->p);
    if (v < 0)
        s_fail(ps, "invalid UTF-8");
    return v;
}

static int s_utf8_encode(int cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Emit into rule r one alternative per UTF-8 byte-range sequence of code points [lo, hi]
 * (all of one encoded length after splitting), each ended by GE_END_ALT. */
static bool s_utf8_range(s_parser_t *ps, int r, int lo, int hi) {
    if (lo > hi)
        return true;
    static const int bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i])
            return s_utf8_range(ps, r, lo, bounds[i]) && s_utf8_range(ps, r, bounds[i] + 1, hi);
    uint8_t a[4], b[4];
    int n = s_utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        int m = (1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m)
                return s_utf8_range(ps, r, lo, lo | m) && s_utf8_range(ps, r, (lo | m) + 1, hi);
            if ((hi & m) != m)
                return s_utf8_range(ps, r, lo, (hi & ~m) - 1) && s_utf8_range(ps, r, hi & ~m, hi);
        }
    }
    s_utf8_encode(hi, b);
    for (int i = 0; i < n; i++)
        if (!s_push_byte_range(ps, r, a[i], b[i]))
            return false;
    return s_push(ps, r, GE_END_ALT, 0);
}

typedef struct {
    int lo, hi;
} s_range_t;

static int s_range_cmp(const void *a, const void *b) {
    return ((const s_range_t *)a)->lo - ((const s_range_t *)b)->lo;
}

/* Append to rule r the element(s) matching one character of the code point ranges. */
static bool s_push_class(s_parser_t *ps, int r, s_range_t *rg, int n, bool negate) {
    qsort(rg, (size_t)n, sizeof *rg, s_range_cmp);
    s_range_t *out = malloc((size_t)(n + 2) * 2 * sizeof *out);
    if (!out) {
        s_fail(ps, "out of memory");
        return false;
    }
    int m = 0;
    for (int i = 0; i < n; i++) { /* merge */
        if (m && rg[i].lo <= out[m - 1].hi + 1) {
            if (rg[i].hi > out[m - 1].hi)
                out[m - 1].hi = rg[i].hi;
        } else
            out[m++] = rg[i];
    }
    if (negate) {
        s_range_t *neg = out + n + 2;
        int k = 0, next = 0;
        for (int i = 0; i < m; i++) {
            if (out[i].lo > next)
                neg[k++] = (s_range_t){next, out[i].lo - 1};
            next = out[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            neg[k++] = (s_range_t){next, 0x10FFFF};
        memmove(out, neg, (size_t)k * sizeof *out);
        m = k;
    }
    /* split off the surrogates (not characters) and the ASCII part */
    uint64_t ascii[4] = {0};
    bool any_ascii = false, any_multi = false;
    for (int i = 0; i < m; i++) {
        for (int c = out[i].lo; c <= out[i].hi && c < 0x80; c++) {
            ascii[c >> 6] |= 1ull << (c & 63);
            any_ascii = true;
        }
        if (out[i].hi >= 0x80)
            any_multi = true;
    }
    bool ok = true;
    if (!any_multi) {
        int k = any_ascii ? s_set(ps, ascii) : -1;
        if (!any_ascii)
            s_fail(ps, "empty character class");
        ok = k >= 0 && s_push(ps, r, GE_BYTES, k);
    } else {
        int w = s_synth(ps, r);
        ok = w >= 0;
        if (ok && any_ascii) {
            int k = s_set(ps, ascii);
            ok = k >= 0 && s_push(ps, w, GE_BYTES, k) && s_push(ps, w, GE_END_ALT, 0);
        }
        for (int i = 0; ok && i < m; i++) {
            int lo = out[i].lo < 0x80 ? 0x80 : out[i].lo, hi = out[i].hi;
            if (lo <= 0xDFFF && hi >= 0xD800) {
                ok = s_utf8_range(ps, w, lo, 0xD7FF) && s_utf8_range(ps, w, 0xE000, hi);
            } else
                ok = s_utf8_range(ps, w, lo, hi);
        }
        ok = ok && s_push(ps, w, GE_END_RULE, 0) && s_push(ps, r, GE_RULE, w);
    }
    free(out);
    return ok;
}

/* Replace the symbol at rule r's elements [start, n) by the repetition {min, max}
 * (max < 0: unbounded). */
static bool s_repeat(s_parser_t *ps, int r, int start, int min, int max) {
    s_body_t *b = &ps->bodies[r];
    if (b->n - start != 1) { /* a sequence (literal): wrap it in a rule first */
        int w = s_synth(ps, r);
        if (w < 0)
            return false;
        b = &ps->bodies[r];
        for (int i = start; i < b->n; i++)
            if (!s_push(ps, w, b->v[i].kind, b->v[i].arg))
                return false;
        if (!s_push(ps, w, GE_END_ALT, 0) || !s_push(ps, w, GE_END_RULE, 0))
            return false;
        b = &ps->bodies[r];
        b->n = start;
        if (!s_push(ps, r, GE_RULE, w))
            return false;
        b = &ps->bodies[r];
    }
    ge_t sym = b->v[start];
    b->n = start;
    bool used = false;
    for (int i = 0; i < min; i++)
        if (!s_push_sym(ps, r, sym, &used))
            return false;
    if (max < 0) { /* star ::= sym star | (empty) */
        int s = s_synth(ps, r);
        if (s < 0 || !s_push_sym(ps, s, sym, &used) || !s_push(ps, s, GE_RULE, s) ||
            !s_push(ps, s, GE_END_ALT, 0) || !s_push(ps, s, GE_END_ALT, 0) ||
            !s_push(ps, s, GE_END_RULE, 0))
            return false;
        return s_push(ps, r, GE_RULE, s);
    }
    /* opt_k ::= sym opt_(k-1) | (empty): at most max - min more, nested */
    int prev = -1;
    for (int k = 0; k < max - min; k++) {
        int s = s_synth(ps, r);
        if (s < 0 || !s_push_sym(ps, s, sym, &used))
            return false;
        if (prev >= 0 && !s_push(ps, s, GE_RULE, prev))
            return false;
        if (!s_push(ps, s, GE_END_ALT, 0) || !s_push(ps, s, GE_END_ALT, 0) ||
            !s_push(ps, s, GE_END_RULE, 0))
            return false;
        prev = s;
    }
    return prev < 0 || s_push(ps, r, GE_RULE, prev);
}

static int s_int(s_parser_t *ps) {
    if (*ps->p < '0' || *ps->p > '9')
        return -1;
    long v = 0;
    while (*ps->p >= '0' && *ps->p <= '9' && v < 100000)
        v = v * 10 + (*ps->p++ - '0');
    return (int)v;
}

#define GRAMMAR_MAX_REPEAT 10000

static bool s_alternates(s_parser_t *ps, int r, bool nested);

/* One alternative (a sequence) into rule r, ended by GE_END_ALT. */
static bool s_sequence(s_parser_t *ps, int r, bool nested) {
    int last = -1; /* where the last symbol starts in r's body */
    for (;;) {
        s_skip(ps, true);
        char c = *ps->p;
        if (!c || c == '|' || (c == ')' && nested) || (!nested && s_at_head(ps->p)))
            break;
        int start = ps->bodies[r].n;
        if (c == '"') {
            ps->p++;
            while (*ps->p != '"') {
                int v = s_char(ps, true);
                if (v < 0)
                    return false;
                uint8_t u[4];
                int n = v & 0x1000000 ? (u[0] = (uint8_t)v, 1) : s_utf8_encode(v, u);
                for (int i = 0; i < n; i++)
                    if (!s_push_byte_range(ps, r, u[i], u[i]))
                        return false;
            }
            ps->p++;
            if (ps->bodies[r].n == start) { /* "" matches the empty string */
                last = -1;
                continue;
            }
        } else if (c == '[') {
            ps->p++;
            bool neg = *ps->p == '^';
            if (neg)
                ps->p++;
            s_range_t rg[256];
            int n = 0;
            while (*ps->p != ']') {
                int lo = s_char(ps, false), hi = lo;
                if (lo < 0)
                    return false;
                if (ps->p[0] == '-' && ps->p[1] != ']') {
                    ps->p++;
                    hi = s_char(ps, false);
                    if (hi < 0)
                        return false;
                }
                if (hi < lo || n == 256) {
                    s_fail(ps, hi < lo ? "reversed range in class" : "class too long");
                    return false;
                }
                rg[n++] = (s_range_t){lo, hi};
            }
            ps->p++;
            if (!s_push_class(ps, r, rg, n, neg))
                return false;
        } else if (c == '.') {
            ps->p++;
            s_range_t all = {0, 0x10FFFF};
            if (!s_push_class(ps, r, &all, 1, false))
                return false;
        } else if (c == '(') {
            ps->p++;
            int g = s_synth(ps, r);
            if (g < 0 || !s_alternates(ps, g, true))
                return false;
            if (*ps->p != ')') {
                s_fail(ps, "missing )");
                return false;
            }
            ps->p++;
            if (!s_push(ps, r, GE_RULE, g))
                return false;
        } else if (s_is_name(c)) {
            const char *s = ps->p;
            while (s_is_name(*ps->p))
                ps->p++;
            int ref = s_rule(ps, s, (size_t)(ps->p - s));
            if (ref < 0 || !s_push(ps, r, GE_RULE, ref))
                return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) {
                s_fail(ps, "'%c' without a symbol before it", c);
                return false;
            }
            ps->p++;
            int min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            if (c == '{') {
                s_skip(ps, false);
                min = s_int(ps);
                s_skip(ps, false);
                max = min;
                if (*ps->p == ',') {
                    ps->p++;
                    s_skip(ps, false);
                    max = *ps->p == '}' ? -1 : s_int(ps);
                    s_skip(ps, false);
                }
                if (min < 0 || *ps->p != '}' || (max >= 0 && max < min)) {
                    s_fail(ps, "bad {m,n} repetition");
                    return false;
                }
                ps->p++;
                if (min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT) {
                    s_fail(ps, "repetition bound over %d", GRAMMAR_MAX_REPEAT);
                    return false;
                }
            }
            if (!s_repeat(ps, r, last, min, max))
                return false;
            last = -1; /* x** is refused: write (x*)* */
            continue;
        } else {
            s_fail(ps, "unexpected '%c'", c);
            return false;
        }
        last = start;
    }
    return s_push(ps, r, GE_END_ALT, 0);
}

static bool s_alternates(s_parser_t *ps, int r, bool nested) {
    if (!s_sequence(ps, r, nested))
        return false;
    while (*ps->p == '|') {
        ps->p++;
        if (!s_sequence(ps, r, nested))
            return false;
    }
    return s_push(ps, r, GE_END_RULE, 0);
}

/* ---- compile checks */

/* Nullable and productive rules by fixpoint; then left recursion by depth-first search
 * over "r may start with r2" edges. */
static bool s_check(grammar_t *g, char *err, size_t errlen) {
    int R = g->n_rules;
    bool *nullable = calloc((size_t)R, 1), *prod = calloc((size_t)R, 1);
    uint8_t *mark = calloc((size_t)R, 1);
    int *stack = malloc((size_t)R * 2 * sizeof *stack);
    bool ok = nullable && prod && mark && stack;
    if (!ok)
        snprintf(err, errlen, "out of memory");
    for (bool changed = ok; changed;) {
        changed = false;
        for (int r = 0; r < R; r++)
            for (int a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                bool nul = true, pr = true;
                for (int p = g->alts[a]; g->el[p].kind != GE_END_ALT; p++) {
                    if (g->el[p].kind == GE_BYTES)
                        nul = false;
                    else {
                        nul = nul && nullable[g->el[p].arg];
                        pr = pr && prod[g->el[p].arg];
                    }
                }
                if (nul && !nullable[r])
                    nullable[r] = changed = true;
                if (pr && !prod[r])
                    prod[r] = changed = true;
            }
    }
    for (int r = 0; ok && r < R; r++)
        if (!prod[r]) {
            snprintf(err, errlen, "rule %s derives no string (infinite recursion)", g->names[r]);
            ok = false;
        }
    /* left recursion: iterative DFS, mark 1 = on the path, 2 = done */
    for (int s = 0; ok && s < R; s++) {
        if (mark[s])
            continue;
        int sp = 0;
        stack[sp++] = s;
        stack[sp++] = 0; /* next edge index: (alt, element) flattened as element position */
        mark[s] = 1;
        while (ok && sp) {
            int r = stack[sp - 2], *it = &stack[sp - 1];
            /* enumerate left-corner references of r: element positions in order */
            int found = -1;
            for (int a = g->alt_off[r]; a < g->alt_off[r + 1] && found < 0; a++)
                for (int p = g->alts[a]; g->el[p].kind == GE_RULE; p++) {
                    if (p >= *it) {
                        found = p;
                        break;
                    }
                    if (!nullable[g->el[p].arg])
                        break;
                }
            if (found < 0) {
                mark[r] = 2;
                sp -= 2;
                continue;
            }
            *it = found + 1;
            /* found+1 might skip a nullable chain continuation: handled as the loop above
             * visits positions in increasing order and stops at a non-nullable rule */
            int r2 = g->el[found].arg;
            if (mark[r2] == 1) {
                snprintf(err, errlen, "left recursion through rule %s", g->names[r2]);
                ok = false;
            } else if (!mark[r2]) {
                mark[r2] = 1;
                stack[sp++] = r2;
                stack[sp++] = 0;
            }
        }
    }
    free(nullable);
    free(prod);
    free(mark);
    free(stack);
    return ok;
}

/* Whether return positions a and b have the same future: equal elements up to the end of
 * their alternatives, in rules whose own contexts are equal (or have the same future). */
static bool s_same_future(const grammar_t *g, int a, int b, int depth) {
    if (a == GC_ROOT && b == GC_ROOT)
        return true;
    if (a < 0 || b < 0 || depth > 8)
        return false;
    if (a == b)
        return true;
    for (;; a++, b++) {
        if (g->el[a].kind != g->el[b].kind || g->el[a].arg != g->el[b].arg)
            return false;
        if (g->el[a].kind == GE_END_ALT)
            break;
    }
    return s_same_future(g, g->ctx[g->rule_of[a]], g->ctx[g->rule_of[b]], depth + 1);
}

/* The static return context of every rule (GC_ROOT, GC_MANY, a return position), by
 * fixpoint: a reference at the end of an alternative (a tail call) passes its rule's own
 * context on; two return positions with the same future count as one. */
static void s_contexts(grammar_t *g) {
    for (int r = 0; r < g->n_rules; r++)
        g->ctx[r] = GC_NONE;
    g->ctx[g->root] = GC_ROOT;
    for (bool changed = true; changed;) {
        changed = false;
        for (int p = 0; p < g->n_el; p++) {
            if (g->el[p].kind != GE_RULE)
                continue;
            int q = g->rule_of[p], r = g->el[p].arg;
            if (g->ctx[q] == GC_NONE) /* not (yet) reachable: its calls do not count */
                continue;
            int c = g->el[p + 1].kind == GE_END_ALT ? g->ctx[q] : p + 1;
            if (c == GC_NONE || g->ctx[r] == c || g->ctx[r] == GC_MANY)
                continue;
            if (g->ctx[r] != GC_NONE && s_same_future(g, g->ctx[r], c, 0))
                continue;
            g->ctx[r] = g->ctx[r] == GC_NONE ? c : GC_MANY;
            changed = true;
        }
    }
}

grammar_t *grammar_new(const char *gbnf, char *err, size_t errlen) {
    s_parser_t ps = {.p = gbnf, .line = 1, .err = err, .errlen = errlen};
    grammar_t *g = NULL;
    if (errlen)
        err[0] = 0;
    s_skip(&ps, true);
    while (!ps.failed && *ps.p) {
        const char *s = ps.p;
        while (s_is_name(*ps.p))
            ps.p++;
        size_t len = (size_t)(ps.p - s);
        s_skip(&ps, false);
        if (!len || strncmp(ps.p, "::=", 3)) {
            s_fail(&ps, "expected 'name ::='");
            break;
        }
        ps.p += 3;
        int r = s_rule(&ps, s, len);
        if (r < 0)
            break;
        if (ps.defined[r]) {
            s_fail(&ps, "rule %s defined twice", ps.names[r]);
            break;
        }
        ps.defined[r] = true;
        if (!s_alternates(&ps, r, false))
            break;
        if (*ps.p == ')')
            s_fail(&ps, "unbalanced )");
    }
    int root = -1;
    for (int r = 0; !ps.failed && r < ps.n_rules; r++) {
        if (!ps.defined[r]) {
            ps.line = ps.ref_line[r];
            s_fail(&ps, "undefined rule %s", ps.names[r]);
        }
        if (!strcmp(ps.names[r], "root"))
            root = r;
    }
    if (!ps.failed && root < 0)
        s_fail(&ps, "no root rule");
    if (ps.failed)
        goto done;
    g = calloc(1, sizeof *g);
    if (!g)
        goto oom;
    g->n_rules = ps.n_rules;
    g->root = root;
    int n_el = 0, n_alts = 0;
    for (int r = 0; r < ps.n_rules; r++) {
        n_el += ps.bodies[r].n;
        for (int i = 0; i < ps.bodies[r].n; i++)
            n_alts += ps.bodies[r].v[i].kind == GE_END_ALT;
    }
    g->n_el = n_el;
    g->el = malloc((size_t)n_el * sizeof *g->el);
    g->rule_of = malloc((size_t)n_el * sizeof *g->rule_of);
    g->alts = malloc((size_t)n_alts * sizeof *g->alts);
    g->alt_off = malloc((size_t)(ps.n_rules + 1) * sizeof *g->alt_off);
    g->ctx = malloc((size_t)ps.n_rules * sizeof *g->ctx);
    if (!g->el || !g->rule_of || !g->alts || !g->alt_off || !g->ctx)
        goto oom;
    int k = 0, a = 0;
    for (int r = 0; r < ps.n_rules; r++) {
        g->alt_off[r] = a;
        bool alt_start = true;
        for (int i = 0; i < ps.bodies[r].n; i++) {
            if (alt_start && ps.bodies[r].v[i].kind != GE_END_RULE)
                g->alts[a++] = k;
            alt_start = ps.bodies[r].v[i].kind == GE_END_ALT;
            g->rule_of[k] = r;
            g->el[k++] = ps.bodies[r].v[i];
        }
    }
    g->alt_off[ps.n_rules] = a;
    g->names = ps.names;
    ps.names = NULL;
    g->sets = ps.sets;
    g->n_sets = ps.n_sets;
    ps.sets = NULL;
    if (!s_check(g, err, errlen)) {
        grammar_destroy(&g);
        goto done;
    }
    s_contexts(g);
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
    grammar_destroy(&g);
done:
    for (int r = 0; r < ps.n_rules; r++) {
        free(ps.bodies[r].v);
        if (ps.names)
            free(ps.names[r]);
    }
    free(ps.names);
    free(ps.bodies);
    free(ps.defined);
    free(ps.synth);
    free(ps.ref_line);
    free(ps.sets);
    return g;
}

void grammar_destroy(grammar_t **self_p) {
    if (!self_p || !*self_p)
        return;
    grammar_t *g = *self_p;
    if (g->names)
        for (int r = 0; r < g->n_rules; r++)
            free(g->names[r]);
    free(g->names);
    free(g->el);
    free(g->rule_of);
    free(g->alts);
    free(g->alt_off);
    free(g->ctx);
    free(g->sets);
    free(g);
    *self_p = NULL;
}

int grammar_n_positions(const grammar_t *self) {
    return self->n_el;
}

int grammar_n_rules(const grammar_t *self) {
    return self->n_rules;
}

/* ---- parse state */

typedef struct {
    int off, n; /* the set's tops: log[off .. off+n) */
    bool acc;   /* accepting */
} s_cp_t;

struct grammar_state_t {
    const grammar_t *g;  /* borrowed */
    gpool_t *pool;       /* interned frames of every state this one has been in */
    gpool_t *scratch;    /* frames of mask computations (reset each time) */
    gset_t cur;          /* the current set */
    gset_t tmp[2];       /* step buffers */
    const gnode_t **log; /* (n_log) the tops of every checkpoint's set, back to back */
    int n_log, cap_log;
    s_cp_t *cp; /* (n_cp) checkpoints; cp[0] is the start */
    int n_cp, cap_cp;
    gset_t *levels; /* (n_levels) per-byte-depth sets of mask computations */
    int n_levels;
};

static int s_record(grammar_state_t *s) {
    if (s->n_log + s->cur.n > s->cap_log) {
        int cap = (s->n_log + s->cur.n) * 2 + 64;
        const gnode_t **v = realloc(s->log, (size_t)cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        s->log = v;
        s->cap_log = cap;
    }
    if (s->n_cp == s->cap_cp) {
        int cap = s->cap_cp * 2 + 16;
        s_cp_t *v = realloc(s->cp, (size_t)cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        s->cp = v;
        s->cap_cp = cap;
    }
    if (s->cur.n > 0) /* an empty set has no array: memcpy may not take NULL */
        memcpy(s->log + s->n_log, s->cur.v, (size_t)s->cur.n * sizeof *s->log);
    s->cp[s->n_cp++] = (s_cp_t){s->n_log, s->cur.n, s->cur.acc};
    s->n_log += s->cur.n;
    return 0;
}

grammar_state_t *grammar_state_new(const grammar_t *g) {
    grammar_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->g = g;
    s->pool = gpool_new(true);
    s->scratch = gpool_new(false);
    if (!s->pool || !s->scratch)
        goto fail;
    int r = g->root, a0 = g->alt_off[r], a1 = g->alt_off[r + 1];
    for (int a = a0; a < a1; a++)
        grammar_expand(g, s->pool, g->alts[a], NULL, &s->cur);
    if (s->cur.oom || s_record(s) < 0)
        goto fail;
    return s;
fail:
    grammar_state_destroy(&s);
    return NULL;
}

void grammar_state_destroy(grammar_state_t **self_p) {
    if (!self_p || !*self_p)
        return;
    grammar_state_t *s = *self_p;
    gpool_destroy(&s->pool);
    gpool_destroy(&s->scratch);
    gset_free(&s->cur);
    gset_free(&s->tmp[0]);
    gset_free(&s->tmp[1]);
    free(s->log);
    free(s->cp);
    for (int i = 0; i < s->n_levels; i++)
        gset_free(&s->levels[i]);
    free(s->levels);
    free(s);
    *self_p = NULL;
}

/* Re-intern frame n (and everything below it) in pool; NULL stays NULL. */
static const gnode_t *s_clone(gpool_t *pool, const gnode_t *n, bool *oom) {
    if (!n)
        return NULL;
    const gnode_t *p = s_clone(pool, n->parent, oom);
    const gnode_t *c = s_frame(pool, n->pos, p);
    if (!c)
        *oom = true;
    return c;
}

grammar_state_t *grammar_state_copy(const grammar_state_t *self) {
    grammar_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->g = self->g;
    s->pool = gpool_new(true);
    s->scratch = gpool_new(false);
    s->log = malloc(((size_t)self->n_log + 1) * sizeof *s->log);
    s->cp = malloc((size_t)self->n_cp * sizeof *s->cp);
    s->cur.v = malloc(((size_t)self->cur.n + 1) * sizeof *s->cur.v);
    if (!s->pool || !s->scratch || !s->log || !s->cp || !s->cur.v)
        goto fail;
    bool oom = false;
    for (int i = 0; i < self->n_log; i++) /* interning keeps shared frames shared */
        s->log[i] = s_clone(s->pool, self->log[i], &oom);
    if (oom)
        goto fail;
    s->n_log = s->cap_log = self->n_log;
    memcpy(s->cp, self->cp, (size_t)self->n_cp * sizeof *s->cp);
    s->n_cp = s->cap_cp = self->n_cp;
    s->cur.cap = self->cur.n + 1;
    const s_cp_t *last = &s->cp[s->n_cp - 1];
    memcpy(s->cur.v, s->log + last->off, (size_t)last->n * sizeof *s->cur.v);
    s->cur.n = last->n;
    s->cur.acc = last->acc;
    return s;
fail:
    grammar_state_destroy(&s);
    return NULL;
}

int grammar_state_accept_bytes(grammar_state_t *self, const void *bytes, size_t len) {
    const uint8_t *b = bytes;
    const gset_t *in = &self->cur;
    for (size_t i = 0; i < len; i++) {
        gset_t *out = &self->tmp[i & 1];
        grammar_step(self->g, self->pool, in, b[i], out);
        if (out->oom)
            return -ENOMEM;
        if (!out->n && !(out->acc && i + 1 == len))
            return -EINVAL;
        in = out;
    }
    if (len) { /* the result becomes current (swap buffers, no copy) */
        gset_t t = self->cur;
        self->cur = *in;
        *(gset_t *)in = t;
    }
    return s_record(self);
}

bool grammar_state_accepting(const grammar_state_t *self) {
    return self->cur.acc;
}

bool grammar_state_can_continue(const grammar_state_t *self) {
    return self->cur.n > 0;
}

int grammar_state_checkpoint(const grammar_state_t *self) {
    return self->n_cp - 1;
}

int grammar_state_rollback(grammar_state_t *self, int n) {
    if (n < 0 || n >= self->n_cp)
        return -EINVAL;
    const s_cp_t *c = &self->cp[n];
    if (c->n > self->cur.cap) {
        const gnode_t **v = realloc(self->cur.v, (size_t)c->n * sizeof *v);
        if (!v)
            return -ENOMEM;
        self->cur.v = v;
        self->cur.cap = c->n;
    }
    memcpy(self->cur.v, self->log + c->off, (size_t)c->n * sizeof *self->cur.v);
    self->cur.n = c->n;
    self->cur.acc = c->acc;
    self->cur.hit = self->cur.oom = false;
    self->n_cp = n + 1;
    self->n_log = c->off + c->n;
    return 0;
}

const gset_t *grammar_state_set(const grammar_state_t *self) {
    return &self->cur;
}

gpool_t *grammar_state_scratch(grammar_state_t *self) {
    return self->scratch;
}

gset_t *grammar_state_levels(grammar_state_t *self, int n) {
    if (n > self->n_levels) {
        gset_t *v = realloc(self->levels, (size_t)n * sizeof *v);
        if (!v)
            return NULL;
        memset(v + self->n_levels, 0, (size_t)(n - self->n_levels) * sizeof *v);
        self->levels = v;
        self->n_levels = n;
    }
    return self->levels;
}

int grammar_state_finish(grammar_state_t *self) {
    if (!self->cur.acc)
        return -EINVAL;
    self->cur.n = 0;
    return s_record(self);
}
