/* model_pretok.h - the pre-tokenizers of byte-level BPE as table rows: how a GGUF's
 * tokenizer.ggml.pre names them and how each splits text into the words BPE then merges
 * (a PCRE2 regex, digits isolated first or not, whole-word tokens kept unmerged or not).
 * Adding a pre-tokenizer is a row in model_pretok.c and a case in
 * tests/unit/test_tokenizer.c (and the tokenizer oracle for a real model).
 */
#ifndef MODEL_PRETOK_H
#define MODEL_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

/* One pre-tokenizer: a row of the table. */
typedef struct {
    const char *names[4]; /* the tokenizer.ggml.pre values that select it, NULL-terminated */
    const char *regex;    /* the split rule: each match, and any text between matches, is a
                             word (PCRE2 syntax, compiled with UTF + UCP) */
    bool digits_first;    /* each \p{N} character is a word of its own, and the regex runs on
                             the text between digits (SmolLM, StarCoder) */
    bool ignore_merges;   /* a word that is a vocabulary token is that token, unmerged (Llama 3) */
} model_pretok_row_t;

/* The rows, ended by a row with names[0] == NULL; the first one (GPT-2's) is also what a
 * GGUF without tokenizer.ggml.pre, or with a name no row has, gets. */
extern const model_pretok_row_t model_pretok_rows[];

/* The row named pre (NULL: the default row); *known is false when no row has that name
 * (then the default row comes back too).  known may be NULL. */
const model_pretok_row_t *model_pretok_find(const char *pre, bool *known);

/* A row with its regexes compiled. */
typedef struct model_pretok_t model_pretok_t;
/* Per-call match scratch: one per thread that splits at the same time. */
typedef struct model_pretok_match_t model_pretok_match_t;

/* Compile the row for tokenizer.ggml.pre = pre (NULL: none; an unknown name gets the
 * default row, with a warning).  NULL on failure with a one-line reason in err. */
model_pretok_t *model_pretok_new(const char *pre, char *err, size_t errlen);
void model_pretok_destroy(model_pretok_t **self_p);
const model_pretok_row_t *model_pretok_row(const model_pretok_t *self);

model_pretok_match_t *model_pretok_match_new(const model_pretok_t *self); /* NULL: no memory */
void model_pretok_match_destroy(model_pretok_match_t **self_p);

/* Called with each word in order; returns false to stop the split. */
typedef bool (*model_pretok_word_fn)(void *ctx, const char *word, size_t len);

/* Split text[0..len) into words, calling word for each in order (the words cover the text
 * exactly).  m: this call's scratch from model_pretok_match_new(self). */
void model_pretok_split(const model_pretok_t *self, model_pretok_match_t *m, const char *text,
                        size_t len, model_pretok_word_fn word, void *ctx);

#endif
