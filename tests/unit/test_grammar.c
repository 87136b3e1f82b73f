/* test_grammar.c - the grammar engine against brute-force references: regexes against
 * PCRE2 over every short string of a small alphabet (full matches, and that the state
 * machine accepts exactly the viable prefixes), a context-free grammar against a
 * backtracking recogniser written here, token masks against accepting each token on its
 * own, replay and rollback, UTF-8 classes, and the refusals. */
#include "grammar.h"
#include "grammar_mask.h"
#include "test_util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- enumeration helpers */

/* Every string over alpha of length <= max, in order of length: calls fn for each. */
static void s_enum(const char *alpha, int max, void (*fn)(const char *, int, void *), void *ctx) {
    int a = (int)strlen(alpha);
    char buf[16];
    int idx[16];
    for (int len = 0; len <= max; len++) {
        memset(idx, 0, sizeof idx);
        for (;;) {
            for (int i = 0; i < len; i++)
                buf[i] = alpha[idx[i]];
            buf[len] = 0;
            fn(buf, len, ctx);
            int i = len - 1;
            while (i >= 0 && ++idx[i] == a)
                idx[i--] = 0;
            if (i < 0)
                break;
        }
    }
}

/* What the engine says about s: 1 complete, 0 a viable prefix only, -1 refused. */
static int s_engine(const grammar_t *g, const char *s, int len) {
    grammar_state_t *st = grammar_state_new(g);
    ck_assert_ptr_nonnull(st);
    int rc = grammar_state_accept_bytes(st, s, (size_t)len);
    int r = rc < 0 ? -1 : grammar_state_accepting(st) ? 1 : 0;
    ck_assert(rc == 0 || rc == -EINVAL);
    grammar_state_destroy(&st);
    return r;
}

/* ---- regex vs PCRE2 */

typedef struct {
    const grammar_t *g;
    pcre2_code *re;
    pcre2_match_data *md;
    const char *re_text; /* the regex */
    char (*valid)[16];   /* strings PCRE2 matches fully */
    int n_valid;
    int n_checked;
} s_rx_ctx_t;

static void s_collect(const char *s, int len, void *p) {
    s_rx_ctx_t *c = p;
    int rc = pcre2_match(c->re, (PCRE2_SPTR)s, (size_t)len, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                         c->md, NULL);
    int eng = s_engine(c->g, s, len);
    ck_assert_msg((rc >= 0) == (eng == 1), "\"%s\": pcre2 %d, engine %d", s, rc, eng);
    if (rc >= 0 && c->n_valid < 20000)
        strcpy(c->valid[c->n_valid++], s);
    c->n_checked++;
}

/* Viable prefixes: the engine refuses s exactly when no valid string (of the enumerated
 * length) starts with it. */
static void s_prefix(const char *s, int len, void *p) {
    s_rx_ctx_t *c = p;
    bool viable = false;
    for (int i = 0; i < c->n_valid && !viable; i++)
        viable = !strncmp(c->valid[i], s, (size_t)len);
    int eng = s_engine(c->g, s, len);
    if (viable)
        ck_assert_msg(eng >= 0, "prefix \"%s\" of a valid string refused", s);
    else if (eng >= 0) /* allowed: it must still be viable with a longer completion */
        ck_assert_msg(len >= 4, "%s: \"%s\": engine keeps a dead prefix", c->re_text, s);
}

static void s_check_regex(const char *re, const char *alpha, int max) {
    char err[256];
    char *gbnf = grammar_regex_to_gbnf(re, err, sizeof err);
    ck_assert_msg(gbnf != NULL, "%s: %s", re, err);
    grammar_t *g = grammar_new(gbnf, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s\n%s", re, err, gbnf);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    ck_assert_ptr_nonnull(code);
    s_rx_ctx_t c = {.g = g,
                    .re = code,
                    .md = pcre2_match_data_create_from_pattern(code, NULL),
                    .re_text = re,
                    .valid = malloc(20000 * sizeof *c.valid)};
    s_enum(alpha, max, s_collect, &c);
    /* prefixes: only over strings shorter than the enumeration, which any valid string of
     * length <= max extends */
    s_enum(alpha, max - 2 > 0 ? max - 2 : 0, s_prefix, &c);
    free(c.valid);
    pcre2_match_data_free(c.md);
    pcre2_code_free(code);
    grammar_destroy(&g);
    free(gbnf);
}

START_TEST(regex_matches_pcre2) {
    static const char *const res[] = {
        "a*b",      "(ab|ba)+",   "a?b?a?",     "[ab]{2,3}",       "(a|b)*abb",
        "[^a]+",    "a{3}",       "(a+)*b",     "(?:a|ab)(c|bcd)", "a.c",
        "\\d+-\\d", "[0-9]{1,2}", "(a|)b{0,2}", "a|b|c+",          "[a-c]*c[a-c]",
    };
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++)
        s_check_regex(res[i], "abcd0-", 6);
}
END_TEST

/* ---- a context-free grammar vs a backtracking recogniser */

static const char *const s_cfg = "root ::= item*\n"
                                 "item ::= \"(\" item* \")\" | \"[\" item* \"]\" | \"x\"\n";

/* Backtracking reference: how many bytes of s[i..) item* can consume such that the rest
 * matches; here items are deterministic, so a greedy recursive descent suffices. */
static int s_ref_items(const char *s, int i, int n);
static int s_ref_item(const char *s, int i, int n) {
    if (i < n && s[i] == 'x')
        return i + 1;
    if (i < n && (s[i] == '(' || s[i] == '[')) {
        char close = s[i] == '(' ? ')' : ']';
        int j = s_ref_items(s, i + 1, n);
        if (j < n && s[j] == close)
            return j + 1;
    }
    return -1;
}
static int s_ref_items(const char *s, int i, int n) {
    for (;;) {
        int j = s_ref_item(s, i, n);
        if (j < 0)
            return i;
        i = j;
    }
}

/* A prefix is viable iff no closer mismatches its opener and no closer is unopened. */
static bool s_ref_viable(const char *s, int n) {
    char st[32];
    int d = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] == '(' || s[i] == '[')
            st[d++] = s[i];
        else if (s[i] == ')' || s[i] == ']') {
            if (!d || st[--d] != (s[i] == ')' ? '(' : '['))
                return false;
        } else if (s[i] != 'x')
            return false;
    }
    return true;
}

static const grammar_t *s_cfg_g;

static void s_cfg_check(const char *s, int len, void *p) {
    (void)p;
    bool full = s_ref_items(s, 0, len) == len;
    int eng = s_engine(s_cfg_g, s, len);
    ck_assert_msg(full == (eng == 1), "\"%s\": reference %d, engine %d", s, full, eng);
    ck_assert_msg(s_ref_viable(s, len) == (eng >= 0), "\"%s\": viability", s);
}

START_TEST(cfg_matches_reference) {
    char err[256];
    grammar_t *g = grammar_new(s_cfg, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    s_cfg_g = g;
    s_enum("()[]x", 7, s_cfg_check, NULL);
    grammar_destroy(&g);
}
END_TEST

/* ---- masks against accepting each token */

/* A vocabulary over alpha: every single byte of it, then random strings of 2..6 bytes,
 * then one end token (empty piece). */
static grammar_vocab_t *s_vocab(const char *alpha, int n_multi, uint64_t seed, int32_t *eog) {
    int a = (int)strlen(alpha), n = a + n_multi + 1;
    const char **p = malloc((size_t)n * sizeof *p);
    uint32_t *len = malloc((size_t)n * sizeof *len);
    char *buf = malloc((size_t)n * 8);
    for (int i = 0; i < n; i++) {
        char *b = buf + (size_t)i * 8;
        int l = i < a ? 1 : i < n - 1 ? 2 + (int)(test_rand_u64(&seed) % 5) : 0;
        for (int k = 0; k < l; k++)
            b[k] = i < a ? alpha[i] : alpha[test_rand_u64(&seed) % (uint64_t)a];
        p[i] = b;
        len[i] = (uint32_t)l;
    }
    *eog = n - 1;
    grammar_vocab_t *v = grammar_vocab_new(n, p, len, eog, 1);
    free(p);
    free(len);
    free(buf);
    return v;
}

/* Walk randomly; at every step the mask must equal "accept_token succeeds" for every token,
 * and a rollback must give the same mask back. */
static void s_check_masks(const char *gbnf, const char *alpha, uint64_t seed) {
    char err[256];
    grammar_t *g = grammar_new(gbnf, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    int32_t eog;
    grammar_vocab_t *v = s_vocab(alpha, 400, seed, &eog);
    ck_assert_ptr_nonnull(v);
    grammar_index_t *ix = grammar_index_new(g, v, err, sizeof err);
    ck_assert_msg(ix != NULL, "%s", err);
    int32_t n = grammar_vocab_size(v);
    size_t words = grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(words * 8), *again = malloc(words * 8);
    for (int walk = 0; walk < 8; walk++) {
        grammar_state_t *s = grammar_state_new(g);
        for (int step = 0; step < 30; step++) {
            ck_assert_int_eq(grammar_state_mask(s, ix, mask), 0);
            int cp = grammar_state_checkpoint(s), n_allowed = 0;
            int32_t pick = -1;
            for (int32_t t = 0; t < n; t++) {
                bool bit = (mask[t >> 6] >> (t & 63)) & 1;
                int rc = grammar_state_accept_token(s, ix, t);
                ck_assert_msg(bit == (rc == 0), "token %d: mask %d, accept %d", t, bit, rc);
                if (rc == 0) {
                    ck_assert_int_eq(grammar_state_rollback(s, cp), 0);
                    if (test_rand_u64(&seed) % (uint64_t)++n_allowed == 0)
                        pick = t;
                }
            }
            ck_assert_int_eq(grammar_state_mask(s, ix, again), 0);
            ck_assert_mem_eq(mask, again, words * 8);
            if (pick < 0 || pick == eog)
                break;
            ck_assert_int_eq(grammar_state_accept_token(s, ix, pick), 0);
        }
        grammar_state_destroy(&s);
    }
    free(mask);
    free(again);
    grammar_index_destroy(&ix);
    grammar_vocab_destroy(&v);
    grammar_destroy(&g);
}

START_TEST(mask_matches_accept) {
    /* recursion (rules with many callers: the run-time path) */
    s_check_masks(s_cfg, "()[]x", 1);
    /* a small JSON-like grammar with a shared value rule */
    s_check_masks("root ::= val\n"
                  "val ::= \"{\" ws (kv (\",\" ws kv)*)? \"}\" | \"[\" (val (\",\" val)*)? \"]\" | "
                  "num | \"\\\"\" [a-c]* \"\\\"\"\n"
                  "kv ::= \"\\\"\" [a-c]{1,3} \"\\\":\" ws val\n"
                  "num ::= \"-\"? [0-9]+\n"
                  "ws ::= \" \"?\n",
                  "{}[],:\" abc0-9", 2);
    /* single callers everywhere (the precomputed path) and bounded repetition */
    s_check_masks("root ::= \"a\" [bc]{2,5} (\"d\" | \"e\" \"f\"?) \"x\"*\n", "abcdefx", 3);
}
END_TEST

START_TEST(schema_masks_match_accept) {
    char err[256];
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                         "\"minimum\":-5,\"maximum\":12},\"s\":{\"enum\":[\"ab\",\"b\"]},"
                         "\"l\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},"
                         "\"maxItems\":2}},\"required\":[\"n\"]}";
    char *gbnf = grammar_schema_to_gbnf(schema, strlen(schema), err, sizeof err);
    ck_assert_msg(gbnf != NULL, "%s", err);
    s_check_masks(gbnf, "{}[],:\" abnlstrufe0123456789-\n", 4);
    free(gbnf);
}
END_TEST

/* ---- state: replay, copy, rollback */

START_TEST(replay_copy_rollback) {
    char err[256];
    grammar_t *g = grammar_new(s_cfg, err, sizeof err);
    int32_t eog;
    grammar_vocab_t *v = s_vocab("()[]x", 100, 9, &eog);
    grammar_index_t *ix = grammar_index_new(g, v, err, sizeof err);
    ck_assert_ptr_nonnull(ix);
    size_t words = grammar_vocab_mask_words(v);
    uint64_t *m1 = malloc(words * 8), *m2 = malloc(words * 8), *m0 = malloc(words * 8);
    const char *text = "([x]((x)";
    grammar_state_t *a = grammar_state_new(g), *b = grammar_state_new(g);
    ck_assert_int_eq(grammar_state_mask(a, ix, m0), 0);
    for (const char *p = text; *p; p++) /* one byte at a time vs all at once */
        ck_assert_int_eq(grammar_state_accept_bytes(a, p, 1), 0);
    ck_assert_int_eq(grammar_state_accept_bytes(b, text, strlen(text)), 0);
    ck_assert_int_eq(grammar_state_mask(a, ix, m1), 0);
    ck_assert_int_eq(grammar_state_mask(b, ix, m2), 0);
    ck_assert_mem_eq(m1, m2, words * 8);
    ck_assert_int_eq(grammar_state_checkpoint(a), (int)strlen(text));
    /* a copy is independent of its original */
    grammar_state_t *c = grammar_state_copy(a);
    ck_assert_int_eq(grammar_state_accept_bytes(a, "))", 2), 0);
    ck_assert_int_eq(grammar_state_mask(c, ix, m2), 0);
    ck_assert_mem_eq(m1, m2, words * 8);
    /* a refused byte leaves the state as it was */
    ck_assert_int_eq(grammar_state_accept_bytes(c, "]", 1), -EINVAL);
    ck_assert_int_eq(grammar_state_mask(c, ix, m2), 0);
    ck_assert_mem_eq(m1, m2, words * 8);
    /* speculative draft: accept three, reject the last two */
    int cp = grammar_state_checkpoint(c);
    ck_assert_int_eq(grammar_state_accept_bytes(c, "x", 1), 0);
    ck_assert_int_eq(grammar_state_accept_bytes(c, ")", 1), 0);
    ck_assert_int_eq(grammar_state_accept_bytes(c, ")", 1), 0);
    ck_assert(grammar_state_accepting(c));
    ck_assert_int_eq(grammar_state_rollback(c, cp + 1), 0);
    ck_assert(!grammar_state_accepting(c));
    ck_assert_int_eq(grammar_state_rollback(c, 0), 0);
    ck_assert_int_eq(grammar_state_mask(c, ix, m2), 0);
    ck_assert_mem_eq(m0, m2, words * 8);
    ck_assert_int_eq(grammar_state_rollback(c, 5), -EINVAL);
    /* the end token only where the sentence is complete */
    ck_assert((m0[eog >> 6] >> (eog & 63)) & 1); /* item* accepts "" */
    ck_assert(!((m1[eog >> 6] >> (eog & 63)) & 1));
    /* masking logits */
    float *logits = malloc((size_t)grammar_vocab_size(v) * sizeof *logits);
    for (int i = 0; i < grammar_vocab_size(v); i++)
        logits[i] = 1.0f;
    grammar_mask_apply(m1, logits, grammar_vocab_size(v));
    for (int i = 0; i < grammar_vocab_size(v); i++)
        ck_assert(((m1[i >> 6] >> (i & 63)) & 1) ? logits[i] == 1.0f : isinf(logits[i]));
    free(logits);
    grammar_state_destroy(&a);
    grammar_state_destroy(&b);
    grammar_state_destroy(&c);
    grammar_state_destroy(&c); /* safe twice */
    ck_assert_ptr_null(c);
    free(m0);
    free(m1);
    free(m2);
    grammar_index_destroy(&ix);
    grammar_vocab_destroy(&v);
    grammar_destroy(&g);
}
END_TEST

/* ---- UTF-8 and refusals */

START_TEST(utf8_classes) {
    char err[256];
    grammar_t *g =
        grammar_new("root ::= [α-ω]+ [^a-z\\u0100-\\U0010FFFF] \"é\"\n", err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_int_eq(s_engine(g, "αβω!é", (int)strlen("αβω!é")), 1);
    ck_assert_int_eq(s_engine(g, "αÿé", (int)strlen("αÿé")), 1);  /* U+00FF: 2 bytes */
    ck_assert_int_eq(s_engine(g, "αaé", (int)strlen("αaé")), -1); /* excluded */
    ck_assert_int_eq(s_engine(g, "α\xce", 3), 0);                 /* half a character */
    ck_assert_int_eq(s_engine(g, "α\xce\x41", 4), -1);            /* broken UTF-8 */
    ck_assert_int_eq(s_engine(g, "αĀé", (int)strlen("αĀé")), -1); /* U+0100 excluded */
    grammar_destroy(&g);
}
END_TEST

START_TEST(refusals) {
    static const struct {
        const char *gbnf, *msg;
    } bad[] = {
        {"root ::= a\na ::= a \"x\" | \"y\"\n", "left recursion"},
        {"root ::= b? root \"x\" | \"y\"\nb ::= \"b\"\n", "left recursion"},
        {"root ::= undefinedrule\n", "undefined rule undefinedrule"},
        {"root ::= \"x\" root\n", "derives no string"},
        {"root ::= \"unterminated\n", "line 1"},
        {"a ::= \"x\"\n", "no root"},
        {"root ::= \"x\"\nroot ::= \"y\"\n", "defined twice"},
        {"root ::= [z-a]\n", "reversed range"},
        {"root ::= * \"x\"\n", "without a symbol"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        grammar_t *g = grammar_new(bad[i].gbnf, err, sizeof err);
        ck_assert_msg(g == NULL, "accepted: %s", bad[i].gbnf);
        ck_assert_msg(strstr(err, bad[i].msg), "%s: got \"%s\"", bad[i].gbnf, err);
    }
    static const char *const bad_re[] = {"(a)\\1", "(?=a)",       "\\bx",   "a^b", "a**",
                                         "^a|b$",  "[[:alpha:]]", "a{2,1}", "(ab"};
    for (size_t i = 0; i < sizeof bad_re / sizeof bad_re[0]; i++) {
        char *g = grammar_regex_to_gbnf(bad_re[i], err, sizeof err);
        ck_assert_msg(g == NULL, "accepted regex %s", bad_re[i]);
        ck_assert_msg(strstr(err, "regex at offset"), "%s", err);
    }
    /* fail-closed schemas name the path and the keyword */
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                         "\"items\":{\"type\":\"integer\",\"multipleOf\":2}}}}";
    ck_assert_ptr_null(grammar_schema_to_gbnf(schema, strlen(schema), err, sizeof err));
    ck_assert_str_eq(err, "#/properties/a/items: multipleOf: not supported");
}
END_TEST

/* ---- JSON Schema: enforced or refused, never silently ignored (issue 37).  Schemas are
 * written with ' for " to stay readable; want 1: the text is a sentence, 0: it is not (or the
 * schema is refused), else the refusal must contain want_err. */

/* 1 if schema's grammar accepts text, 0 if not; -1 (err filled) if the schema is refused. */
static int s_schema_check(const char *schema_q, const char *text, char *err, size_t errlen) {
    char *schema = strdup(schema_q);
    ck_assert_ptr_nonnull(schema);
    for (char *p = schema; *p; p++)
        if (*p == '\'')
            *p = '"';
    char *gbnf = grammar_schema_to_gbnf(schema, strlen(schema), err, errlen);
    free(schema);
    if (!gbnf)
        return -1;
    grammar_t *g = grammar_new(gbnf, err, errlen);
    ck_assert_msg(g != NULL, "%s: %s", schema_q, err);
    free(gbnf);
    int r = s_engine(g, text, (int)strlen(text)) == 1;
    grammar_destroy(&g);
    return r;
}

START_TEST(schema_enforced) {
    static const struct {
        const char *schema, *text;
        int want;             /* 1 accepted, 0 not a sentence (or refused) */
        const char *want_err; /* non-NULL: the schema must be refused with this */
    } cases[] = {
        /* defect 1: an object without properties admits any members */
        {"{'type':'object'}", "{\"name\":\"x\",\"age\":3}", 1, NULL},
        {"{'type':'object'}", "{\"a\":[1,{\"b\":null}]}", 1, NULL},
        {"{'type':'object','additionalProperties':{'type':'integer'},'maxProperties':1}",
         "{\"a\":1}", 1, NULL},
        {"{'type':'object','additionalProperties':{'type':'integer'},'maxProperties':1}",
         "{\"a\":1,\"b\":2}", 0, NULL},
        {"{'type':'object','additionalProperties':false}", "{\"a\":1}", 0, NULL},
        {"{'type':'object','propertyNames':{'enum':['x','y']}}", "{\"x\":true}", 1, NULL},
        {"{'type':'object','propertyNames':{'enum':['x','y']}}", "{\"z\":true}", 0, NULL},
        {"{}", "{\"a\":[1,{\"b\":null}]}", 1, NULL},
        /* allOf with a $ref branch applies the branches after it */
        {"{'$defs':{'Base':{'type':'object','properties':{'name':{'type':'string'},"
         "'id':{'type':'integer'}}},'Other':{}},'allOf':[{'$ref':'#/$defs/Base'},"
         "{'required':['name']}]}",
         "{\"id\":1}", 0, NULL},
        {"{'$defs':{'Base':{'type':'object','properties':{'name':{'type':'string'},"
         "'id':{'type':'integer'}}},'Other':{}},'allOf':[{'$ref':'#/$defs/Base'},"
         "{'required':['name']}]}",
         "{\"name\":\"n\",\"id\":1}", 1, NULL},
        /* allOf merged deeply: a branch's prefixItems does not hide the parent's items */
        {"{'type':'array','items':{'type':'integer'},'allOf':[{'prefixItems':[{'type':'number'}]}]"
         "}",
         "[1.5]", 0, NULL},
        {"{'type':'array','items':{'type':'integer'},'allOf':[{'prefixItems':[{'type':'number'}]}]"
         "}",
         "[1,2]", 1, NULL},
        /* a branch's additionalProperties applies to the other branches' properties */
        {"{'type':'object','properties':{'a':{'type':'integer'}},'additionalProperties':false,"
         "'allOf':[{'properties':{'b':{'type':'integer'}}}]}",
         "{\"a\":1,\"b\":2}", 0, NULL},
        {"{'allOf':[{'type':'object','unevaluatedProperties':false}]}", "{}", 0,
         "#/allOf/0: unevaluatedProperties"},
        /* uniqueItems without type */
        {"{'uniqueItems':true}", "[1,1]", 0, "uniqueItems"},
        /* enum / const with the keywords beside them */
        {"{'type':'integer','enum':[1,5,50],'maximum':10}", "50", 0, NULL},
        {"{'type':'integer','enum':[1,5,50],'maximum':10}", "5", 1, NULL},
        {"{'enum':[[1],[1,2]],'maxItems':1}", "[1,2]", 0, NULL},
        {"{'enum':[{'a':1},{}],'required':['a']}", "{}", 0, NULL},
        {"{'enum':[{'a':1},{}],'required':['a']}", "{\"a\":1}", 1, NULL},
        {"{'enum':[[1,1],[1,2]],'uniqueItems':true}", "[1,1]", 0, NULL},
        {"{'enum':[[1,1],[1,2]],'uniqueItems':true}", "[1,2]", 1, NULL},
        /* oneOf: disjoint by the types a branch allows, not the ones it implies */
        {"{'oneOf':[{'properties':{'a':{'type':'integer'}}},{'type':'string'}]}", "\"x\"", 0,
         "#: oneOf"},
        /* oneOf over objects told apart by a const property (a discriminated union) */
        {"{'oneOf':[{'type':'object','properties':{'k':{'const':'a'},'x':{'type':'integer'}},"
         "'required':['k','x']},{'type':'object','properties':{'k':{'const':'b'}},"
         "'required':['k']}],'discriminator':{'propertyName':'k'}}",
         "{\"k\":\"b\"}", 1, NULL},
        /* $ref resolves against the nearest $id; percent-encoded and ~-escaped pointers */
        {"{'$defs':{'t':{'type':'integer'}},'type':'object','required':['p'],'properties':{'p':"
         "{'$id':'http://x.test/p','$defs':{'t':{'type':'string'}},'$ref':'#/$defs/t'}}}",
         "{\"p\":\"s\"}", 1, NULL},
        {"{'$defs':{'t':{'type':'integer'}},'type':'object','required':['p'],'properties':{'p':"
         "{'$id':'http://x.test/p','$defs':{'t':{'type':'string'}},'$ref':'#/$defs/t'}}}",
         "{\"p\":1}", 0, NULL},
        {"{'$defs':{'a%b':{'type':'integer'},'c~d':{'type':'string'},'e/f':{'type':'boolean'}},"
         "'type':'array','prefixItems':[{'$ref':'#/$defs/a%25b'},{'$ref':'#/$defs/c~0d'},"
         "{'$ref':'#/$defs/e~1f'}],'items':false}",
         "[1,\"x\",true]", 1, NULL},
        /* NUL in strings; integers beyond a double's precision */
        {"{'const':'a\\u0000b'}", "\"a\\u0000b\"", 1, NULL},
        {"{'const':'a\\u0000b'}", "\"a\"", 0, NULL},
        {"{'type':'object','properties':{'a\\u0000b':{'type':'integer'}},'required':['a\\u0000b']}",
         "{\"a\\u0000b\":1}", 1, NULL},
        {"{'type':'string','pattern':'^a\\u0000$'}", "\"a\\u0000\"", 1, NULL},
        {"{'enum':[12345678901234567]}", "12345678901234567", 1, NULL},
        /* \s is ECMA-262's white space */
        {"{'type':'string','pattern':'^\\\\s$'}", "\"\xC2\xA0\"", 1, NULL},
        {"{'type':'string','pattern':'^\\\\s$'}", "\"\xE3\x80\x80\"", 1, NULL},
        {"{'type':'string','pattern':'^\\\\S$'}", "\"\xE2\x80\xA8\"", 0, NULL},
        /* number bounds: decimals, negatives, exclusive */
        {"{'type':'number','minimum':-1.5,'maximum':2.25}", "-1.5", 1, NULL},
        {"{'type':'number','minimum':-1.5,'maximum':2.25}", "2.25", 1, NULL},
        {"{'type':'number','minimum':-1.5,'maximum':2.25}", "2.26", 0, NULL},
        {"{'type':'number','minimum':-1.5,'maximum':2.25}", "-2", 0, NULL},
        {"{'type':'number','exclusiveMinimum':0,'exclusiveMaximum':1}", "0.5", 1, NULL},
        {"{'type':'number','exclusiveMinimum':0,'exclusiveMaximum':1}", "0", 0, NULL},
        {"{'type':'number','exclusiveMinimum':0,'exclusiveMaximum':1}", "1", 0, NULL},
        /* anyOf beside type and properties */
        {"{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'string'}},"
         "'anyOf':[{'required':['a']},{'required':['b']}]}",
         "{\"a\":1}", 1, NULL},
        {"{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'string'}},"
         "'anyOf':[{'required':['a']},{'required':['b']}]}",
         "{}", 0, NULL},
        /* false subschemas, annotations beside $ref, content annotations */
        {"{'type':'object','properties':{'a':false,'b':{'type':'integer'}}}", "{\"b\":1}", 1, NULL},
        {"{'type':'object','properties':{'a':false,'b':{'type':'integer'}}}", "{\"a\":1}", 0, NULL},
        {"{'$defs':{'t':{'type':'integer'}},'$ref':'#/$defs/t','examples':[1],'deprecated':true,"
         "'readOnly':true}",
         "1", 1, NULL},
        {"{'type':'string','contentMediaType':'application/json','contentEncoding':'base64'}",
         "\"x\"", 1, NULL},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        int r = s_schema_check(cases[i].schema, cases[i].text, err, sizeof err);
        bool ok = cases[i].want_err ? r < 0 && strstr(err, cases[i].want_err)
                                    : r == cases[i].want || (r < 0 && !cases[i].want);
        if (!ok) {
            fprintf(stderr, "schema %s, text %s: got %d (%s), want %d %s\n", cases[i].schema,
                    cases[i].text, r, err, cases[i].want,
                    cases[i].want_err ? cases[i].want_err : "");
            failed++;
        }
    }
    ck_assert_int_eq(failed, 0);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("grammar");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, regex_matches_pcre2);
    tcase_add_test(tc, cfg_matches_reference);
    tcase_add_test(tc, mask_matches_accept);
    tcase_add_test(tc, schema_masks_match_accept);
    tcase_add_test(tc, replay_copy_rollback);
    tcase_add_test(tc, utf8_classes);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, schema_enforced);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(make_suite)
