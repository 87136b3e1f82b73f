/* grammar_internal.h - the compiled grammar and the stack machine over it, shared by
 * grammar.c (parser, state) and grammar_mask.c (vocabulary index).  Not for other modules.
 *
 * A compiled grammar is one array of elements: each rule is its alternatives one after the
 * other, each ended by GE_END_ALT, the rule ended by GE_END_RULE.  An element is a byte set
 * (one byte of input) or a reference to a rule.  A parse stack is a persistent linked list
 * of positions: the top is a byte-set element, below it the return positions.  A parse
 * state is a set of such stacks (the grammar may be ambiguous), plus "accepting" when one
 * path has completed the root rule.
 */
#ifndef GRAMMAR_INTERNAL_H
#define GRAMMAR_INTERNAL_H

#include "grammar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GE_END_ALT = 0, GE_END_RULE = 1, GE_BYTES = 2, GE_RULE = 3 };

typedef struct {
    uint32_t kind : 2; /* GE_* */
    uint32_t arg : 30; /* GE_BYTES: byte-set index; GE_RULE: rule id */
} ge_t;

struct grammar_t {
    ge_t *el;            /* (n_el) all rules' elements */
    int n_el;            /* elements */
    uint64_t (*sets)[4]; /* (n_sets) 256-bit byte sets */
    int n_sets;          /* byte sets */
    int n_rules;         /* rules (named and synthetic) */
    char **names;        /* (n_rules) rule names */
    int *alt_off;        /* (n_rules + 1) rule r's alternatives: alts[alt_off[r] .. alt_off[r+1]) */
    int *alts;           /* first element of each alternative */
    int *rule_of;        /* (n_el) the rule each element belongs to */
    int *ctx;            /* (n_rules) static return context: GC_ROOT, GC_MANY or a position */
    int root;            /* the start rule */
};

/* ctx values: the rule ends the sentence / it returns to more than one place */
#define GC_ROOT (-3)
#define GC_MANY (-2)
#define GC_NONE (-1)

/* One stack frame.  Immutable once made, shared between stacks. */
typedef struct gnode_t {
    int32_t pos;                  /* element index */
    const struct gnode_t *parent; /* the frame below; NULL: the root's end */
} gnode_t;

/* The parent that marks "the rest of the stack is not known here" (index precompute). */
extern const gnode_t grammar_sentinel;

/* A bump allocator of frames; with hashing it interns them, so equal stacks are equal
 * pointers (the persistent states); without, it can be reset to a mark (scratch). */
typedef struct gpool_t gpool_t;
gpool_t *gpool_new(bool intern);
void gpool_destroy(gpool_t **self_p);
size_t gpool_mark(const gpool_t *self);
void gpool_reset(gpool_t *self, size_t mark); /* scratch pools only */
/* The frame (pos, parent) from the pool (interned in interning pools); NULL if OOM. */
const gnode_t *gpool_frame(gpool_t *self, int32_t pos, const gnode_t *parent);

/* A set of stacks (tops). */
typedef struct {
    const gnode_t **v; /* (cap) tops */
    int n, cap;        /* used, allocated */
    bool acc;          /* some path completed the root */
    bool hit;          /* some path popped into grammar_sentinel */
    bool oom;          /* an allocation failed while building it */
} gset_t;

void gset_clear(gset_t *s);
void gset_free(gset_t *s);
/* out = the stacks reached from frame (pos, parent) by expanding rule references and
 * returns until every top is a byte set (added to out, which is not cleared). */
void grammar_expand(const grammar_t *g, gpool_t *pool, int pos, const gnode_t *parent, gset_t *out);
/* out (cleared first) = in advanced over one byte. */
void grammar_step(const grammar_t *g, gpool_t *pool, const gset_t *in, uint8_t byte, gset_t *out);

static inline bool grammar_set_has(const grammar_t *g, int set, uint8_t b) {
    return (g->sets[set][b >> 6] >> (b & 63)) & 1;
}

/* The current stack set of a state (borrowed; valid until the state changes). */
const gset_t *grammar_state_set(const grammar_state_t *self);
/* Scratch pool and level buffers of a state, for mask computation. */
gpool_t *grammar_state_scratch(grammar_state_t *self);
/* At least n level sets of the state (grown as needed), NULL if out of memory. */
gset_t *grammar_state_levels(grammar_state_t *self, int n);
/* Accept the end of the sentence (an end-of-generation token): 0 and a checkpoint when
 * the state is accepting (nothing but the end is allowed afterwards), else -EINVAL. */
int grammar_state_finish(grammar_state_t *self);

/* A growable string for the compilers that write GBNF text. */
typedef struct {
    char *s;       /* NUL-terminated text */
    size_t n, cap; /* length, allocated */
    bool oom;      /* an append failed */
} gbuf_t;

void gbuf_add(gbuf_t *b, const char *s);
void gbuf_printf(gbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append to out a GBNF expression (one parenthesised group) for regular expression re.
 * json_string: the expression matches the JSON-encoded text of the strings the regex
 * matches (quotes, backslashes and control characters escaped), and an unanchored regex
 * matches anywhere (JSON Schema "pattern"); otherwise it matches the raw bytes, implicitly
 * anchored.  0, or -EINVAL with "regex at offset N: what" in err. */
int grammar_regex_emit(const char *re, bool json_string, gbuf_t *out, char *err, size_t errlen);

/* The JSON-string form of one character class (code point ranges, sorted, merged) into
 * out, as a parenthesised GBNF group. */
typedef struct {
    int lo, hi;
} grange_t;
void grammar_emit_class(gbuf_t *out, const grange_t *r, int n, bool json_string);

/* Decode one UTF-8 character at *pp, advancing *pp past it: its code point, or -1 (and *pp
 * unchanged) on invalid UTF-8 (grammar.c; the GBNF and the regex parsers read text with it). */
int grammar_utf8_decode(const char **pp);

#endif
