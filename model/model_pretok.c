/* model_pretok.c - the pre-tokenizer table (one row per tokenizer.ggml.pre family, its
 * split rule as data) and the one split loop every row runs through (model_pretok.h).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model_pretok.h"
#include "model_err.h"

#include "base_log.h"

#include <errno.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TAG "tokenizer"

/* GPT-2: contractions, letters, numbers and other runs each with one optional leading
 * space, then whitespace. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3: contractions in either case (ASCII classes, not (?i), which would let "'\u017f"
 * match), letters with one leading non-letter, numbers of up to three digits. */
#define RE_LLAMA3                                                                                  \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"                                   \
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"                                                   \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2: Llama 3's rule except the digits, each of which is a word of its own. */
#define RE_QWEN2                                                                                   \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"                                   \
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"                                                        \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DIGIT "\\p{N}"

const model_pretok_row_t model_pretok_rows[] = {
    /* names                                   regex      digits_first ignore_merges */
    {{"gpt2", "default"}, RE_GPT2, false, false},
    {{"smollm", "starcoder", "refact"}, RE_GPT2, true, false},
    {{"llama-bpe", "llama3", "llama-v3"}, RE_LLAMA3, false, true},
    {{"qwen2", "deepseek-r1-qwen"}, RE_QWEN2, false, false},
    {{NULL}, NULL, false, false},
};

const model_pretok_row_t *model_pretok_find(const char *pre, bool *known) {
    if (known)
        *known = true;
    if (!pre)
        return &model_pretok_rows[0];
    for (const model_pretok_row_t *r = model_pretok_rows; r->names[0]; r++)
        for (int i = 0; i < 4 && r->names[i]; i++)
            if (!strcmp(r->names[i], pre))
                return r;
    if (known)
        *known = false;
    return &model_pretok_rows[0];
}

struct model_pretok_t {
    const model_pretok_row_t *row; /* the table row */
    pcre2_code *re_main;           /* its regex */
    pcre2_code *re_digit;          /* \p{N} when the row isolates digits first, else NULL */
};

struct model_pretok_match_t {
    pcre2_match_data *md; /* match data sized for either regex (neither has groups) */
};

static pcre2_code *s_compile(const char *pattern, char *err, size_t errlen) {
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP;
#ifdef PCRE2_MATCH_INVALID_UTF
    opts |= PCRE2_MATCH_INVALID_UTF;
#endif
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        model_err_set(err, errlen, -EINVAL, "tokenizer: regex error at %zu: %s", (size_t)eo,
                      (char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    return re;
}

model_pretok_t *model_pretok_new(const char *pre, char *err, size_t errlen) {
    bool known;
    const model_pretok_row_t *row = model_pretok_find(pre, &known);
    if (!known)
        LOG_W(TAG, "unknown pre-tokenizer '%s': using the GPT-2 regex", pre);
    model_pretok_t *self = calloc(1, sizeof *self);
    if (!self) {
        model_err_set(err, errlen, -ENOMEM, "tokenizer: out of memory");
        return NULL;
    }
    self->row = row;
    self->re_main = s_compile(row->regex, err, errlen);
    if (!self->re_main ||
        (row->digits_first && !(self->re_digit = s_compile(RE_DIGIT, err, errlen))))
        model_pretok_destroy(&self);
    return self;
}

void model_pretok_destroy(model_pretok_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_pretok_t *self = *self_p;
    if (self->re_main)
        pcre2_code_free(self->re_main);
    if (self->re_digit)
        pcre2_code_free(self->re_digit);
    free(self);
    *self_p = NULL;
}

const model_pretok_row_t *model_pretok_row(const model_pretok_t *self) {
    return self->row;
}

model_pretok_match_t *model_pretok_match_new(const model_pretok_t *self) {
    model_pretok_match_t *m = malloc(sizeof *m);
    if (!m)
        return NULL;
    m->md = pcre2_match_data_create_from_pattern(self->re_main, NULL);
    if (!m->md) {
        free(m);
        return NULL;
    }
    return m;
}

void model_pretok_match_destroy(model_pretok_match_t **self_p) {
    if (!self_p || !*self_p)
        return;
    pcre2_match_data_free((*self_p)->md);
    free(*self_p);
    *self_p = NULL;
}

/* Length of the UTF-8 sequence starting with byte c (1 for an invalid lead byte). */
static size_t s_utf8_len(uint8_t c) {
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 1;
}

/* Split p[0..n) with the main regex; each match, and any text between matches, is one
 * word.  False when word asked to stop. */
static bool s_regex(const model_pretok_t *self, pcre2_match_data *md, const char *p, size_t n,
                    model_pretok_word_fn word, void *ctx) {
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(self->re_main, (PCRE2_SPTR)p, n, off, 0, md, NULL);
        if (rc < 0) {
            if (rc != PCRE2_ERROR_NOMATCH)
                LOG_W(TAG, "pre-tokenizer regex failed (%d): %zu bytes taken as one word", rc,
                      n - off);
            return word(ctx, p + off, n - off);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0) { /* an empty match: cannot happen with these patterns; step a char */
            m1 = m0 + s_utf8_len((uint8_t)p[m0]);
            if (m1 > n)
                m1 = n;
        }
        if (m0 > off && !word(ctx, p + off, m0 - off))
            return false;
        if (!word(ctx, p + m0, m1 - m0))
            return false;
        off = m1;
    }
    return true;
}

void model_pretok_split(const model_pretok_t *self, model_pretok_match_t *m, const char *text,
                        size_t len, model_pretok_word_fn word, void *ctx) {
    if (!self->re_digit) {
        s_regex(self, m->md, text, len, word, ctx);
        return;
    }
    /* digits first: each \p{N} character is a word of its own, the rest between them is
     * split separately (so the regex's look-ahead stops at a digit) */
    size_t off = 0;
    while (off < len) {
        int rc = pcre2_match(self->re_digit, (PCRE2_SPTR)text, len, off, 0, m->md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0)
            break;
        if (m0 > off && !s_regex(self, m->md, text + off, m0 - off, word, ctx))
            return;
        if (!word(ctx, text + m0, m1 - m0))
            return;
        off = m1;
    }
    if (off < len)
        s_regex(self, m->md, text + off, len - off, word, ctx);
}
