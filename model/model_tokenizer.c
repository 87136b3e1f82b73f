/* model_tokenizer.c - text <-> token ids from a GGUF's tokenizer metadata.
 * Owns a copy of the vocabulary and its indexes (text -> id, merge pair -> rank), the
 * compiled pre-tokenizer (a row of model_pretok.c) and the chat template (a row of
 * model_chat_template.c).  Two algorithms: byte-level BPE ranked by merge order ("gpt2")
 * and SentencePiece-style BPE ranked by score ("llama").  Both merge with a binary heap
 * over a linked list of symbols: O(n log n).
 */
#include "model_tokenizer.h"
#include "model_chat_template.h"
#include "model_err.h"
#include "model_pretok.h"

#include "base_log.h"
#include "base_map.h"
#include "base_strmap.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "tokenizer"

/* token_type values, as GGUF stores them */
enum {
    TT_UNDEF = 0,
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6
};

typedef enum { TOK_BPE = 0, TOK_SPM = 1 } tok_kind_t;

struct model_tokenizer_t {
    tok_kind_t kind;     /* BPE (gpt2) or SPM (llama) */
    int32_t n_vocab;     /* number of tokens */
    char *text_blob;     /* every token's GGUF text, NUL-separated */
    uint32_t *text_off;  /* (n_vocab) offset of token i's text in text_blob */
    uint32_t *text_len;  /* (n_vocab) its length in bytes */
    char *piece_blob;    /* every token's detokenized bytes, NUL-separated */
    uint32_t *piece_off; /* (n_vocab) offset of token i's piece in piece_blob */
    uint32_t *piece_len; /* (n_vocab) its length */
    uint8_t *type;       /* (n_vocab) token type (TT_*) */
    float *score;        /* (n_vocab) SPM merge scores, NULL for BPE */
    bool *eog;           /* (n_vocab) end-of-generation flags */

    base_strmap_t vocab; /* GGUF text (in text_blob) -> token id */
    base_map_t merges;   /* (uint64)left << 32 | right -> (uint64)rank << 32 | result (BPE) */

    int32_t byte_tok[256]; /* token for each raw byte (byte-level char or <0xNN>), -1 if none */

    int32_t *special;           /* ids of CONTROL/USER tokens matched in text, by first byte then
                                   length descending */
    int32_t special_start[257]; /* special[special_start[b] .. special_start[b+1]) start with b */

    model_pretok_t *pretok; /* the pre-tokenizer (BPE only) */
    bool ignore_merges;     /* BPE: a word that is a token is that token, unmerged (llama3) */

    int32_t bos, eos, unk; /* -1 if none */
    bool add_bos;          /* tokenizer.ggml.add_bos_token */
    bool add_space_prefix; /* SPM: a leading U+2581 before the text */

    model_chat_template_t chat; /* the recognised chat template (row NULL: none) */
};

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */

/* Length of the UTF-8 sequence starting with byte c (1 for an invalid lead byte). */
static int s_utf8_len(uint8_t c) {
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 1;
}

/* Length of the valid UTF-8 character at p[0..n), 0 if the bytes there are invalid, or
 * -1 if they are a valid but incomplete prefix (more bytes needed). */
static int s_utf8_valid(const uint8_t *p, size_t n) {
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    int len = s_utf8_len(c);
    if (len == 1)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return -1;
        uint8_t d = p[i];
        uint8_t lo = 0x80, hi = 0xBF;
        if (i == 1) { /* overlongs, surrogates, > U+10FFFF */
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
            else if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        }
        if (d < lo || d > hi)
            return 0;
    }
    return len;
}

static int s_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode one (assumed valid) UTF-8 char at p; *n receives its length. */
static uint32_t s_utf8_decode(const uint8_t *p, size_t avail, int *n) {
    int v = s_utf8_valid(p, avail);
    if (v <= 0) {
        *n = 1;
        return 0xFFFFFFFFu;
    }
    *n = v;
    if (v == 1)
        return p[0];
    if (v == 2)
        return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    if (v == 3)
        return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
           ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

/* GPT-2's byte <-> unicode map: printable bytes stand for themselves; the 68 others
 * (0x00-0x20, 0x7F-0xA0, 0xAD) for U+0100.. in byte order. */
static bool s_byte_printable(int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

static uint32_t s_byte_to_cp(uint8_t b) {
    if (s_byte_printable(b))
        return b;
    if (b <= 32)
        return 256u + b; /* U+0100..U+0120 */
    if (b >= 127 && b <= 160)
        return 256u + 33 + (b - 127); /* U+0121..U+0142 */
    return 256u + 33 + 34;            /* 0xAD: U+0143 */
}

/* Inverse of s_byte_to_cp: the byte for code point cp, or -1. */
static int s_cp_to_byte(uint32_t cp) {
    if (cp < 256)
        return s_byte_printable((int)cp) ? (int)cp : -1;
    if (cp <= 256 + 32)
        return (int)(cp - 256);
    if (cp <= 256 + 33 + 33)
        return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 33 + 34)
        return 0xAD;
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Vocabulary and merge indexes                                                                */

static const char *s_text(const model_tokenizer_t *t, int32_t id, uint32_t *len) {
    *len = t->text_len[id];
    return t->text_blob + t->text_off[id];
}

/* The id whose GGUF text is exactly p[0..n), or -1. */
static int32_t s_lookup(const model_tokenizer_t *t, const char *p, size_t n) {
    uint64_t id;
    return base_strmap_get(&t->vocab, p, n, &id) ? (int32_t)id : -1;
}

static int s_build_vocab_index(model_tokenizer_t *t) {
    if (base_strmap_init(&t->vocab, (size_t)t->n_vocab))
        return -ENOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t n;
        const char *p = s_text(t, id, &n);
        /* a duplicate text keeps the lowest id (-EEXIST); the map was sized: no -ENOMEM */
        base_strmap_add(&t->vocab, p, n, (uint64_t)id, NULL);
    }
    return 0;
}

/* The merge of ids (a, b): its rank and result, or false when the pair does not merge. */
static bool s_merge_find(const model_tokenizer_t *t, int32_t a, int32_t b, int32_t *rank,
                         int32_t *result) {
    uint64_t v;
    if (a < 0 || b < 0 ||
        !base_map_get(&t->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, &v))
        return false;
    *rank = (int32_t)(v >> 32);
    *result = (int32_t)(uint32_t)v;
    return true;
}

/* Index tokenizer.ggml.merges ("left right" strings, rank = position).  A merge whose
 * halves or result are not in the vocabulary is skipped, and so is one whose result
 * is a special token: merging never produces those. */
static int s_build_merges(model_tokenizer_t *t, const model_gguf_t *g, char *err, size_t errlen) {
    model_gguf_vtype_t et;
    uint64_t n = 0;
    if (!model_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) || et != GGUF_STRING) {
        model_err_set(err, errlen, -EINVAL,
                      "tokenizer: BPE model without a tokenizer.ggml.merges string array");
        return -EPROTO;
    }
    if (n > (uint64_t)INT32_MAX / 4) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: too many merges (%llu)",
                      (unsigned long long)n);
        return -EPROTO;
    }
    model_gguf_str_t *m = malloc(sizeof(*m) * (n ? n : 1));
    if (!m)
        return -ENOMEM;
    if (!model_gguf_arr_strs(g, "tokenizer.ggml.merges", m, n)) {
        free(m);
        model_err_set(err, errlen, -EINVAL, "tokenizer: cannot read tokenizer.ggml.merges");
        return -EPROTO;
    }
    char *buf = malloc(1024);
    if (!buf || base_map_init(&t->merges, (size_t)n)) {
        free(m);
        free(buf);
        return -ENOMEM;
    }
    uint64_t skipped = 0;
    for (uint64_t r = 0; r < n; r++) {
        const char *p = m[r].ptr;
        size_t len = m[r].len;
        /* split at the first space that leaves a non-empty left half */
        const char *sp = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
        if (!sp || len > 1024) {
            skipped++;
            continue;
        }
        size_t ll = (size_t)(sp - p), rl = len - ll - 1;
        int32_t a = s_lookup(t, p, ll), b = s_lookup(t, sp + 1, rl);
        memcpy(buf, p, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t c = s_lookup(t, buf, ll + rl);
        if (a < 0 || b < 0 || c < 0 || t->type[c] == TT_CONTROL || t->type[c] == TT_USER) {
            skipped++;
            continue;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        if (base_map_get(&t->merges, key, NULL))
            continue; /* repeated pair: the first rank wins */
        /* sized for n merges: never grows, so never fails */
        base_map_put(&t->merges, key, ((uint64_t)r << 32) | (uint32_t)c);
    }
    if (skipped)
        LOG_W(TAG, "%llu of %llu merges name tokens not in the vocabulary; skipped",
              (unsigned long long)skipped, (unsigned long long)n);
    free(buf);
    free(m);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Pieces (detokenized bytes of each token)                                                    */

/* Byte value of an SPM byte token "<0xNN>", or -1. */
static int s_byte_token_value(const char *p, uint32_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Write token id's detokenized bytes into out (capacity >= 4 * text length + 4); returns
 * the length. */
static size_t s_make_piece(const model_tokenizer_t *t, int32_t id, char *out) {
    uint32_t n;
    const uint8_t *p = (const uint8_t *)s_text(t, id, &n);
    uint8_t ty = t->type[id];
    if (ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN || ty == TT_UNUSED) {
        memcpy(out, p, n); /* special tokens are stored as plain text */
        return n;
    }
    size_t o = 0;
    if (t->kind == TOK_SPM) {
        int bv = ty == TT_BYTE ? s_byte_token_value((const char *)p, n) : -1;
        if (bv >= 0) {
            out[0] = (char)bv;
            return 1;
        }
        for (uint32_t i = 0; i < n;) {
            if (i + 3 <= n && p[i] == 0xE2 && p[i + 1] == 0x96 && p[i + 2] == 0x81) {
                out[o++] = ' '; /* U+2581 */
                i += 3;
            } else {
                out[o++] = (char)p[i++];
            }
        }
        return o;
    }
    /* byte-level: each code point stands for one byte */
    for (uint32_t i = 0; i < n;) {
        int cl;
        uint32_t cp = s_utf8_decode(p + i, n - i, &cl);
        int b = cp == 0xFFFFFFFFu ? -1 : s_cp_to_byte(cp);
        if (b >= 0)
            out[o++] = (char)b;
        else {
            memcpy(out + o, p + i, (size_t)cl); /* not a mapped char: keep it */
            o += (size_t)cl;
        }
        i += (uint32_t)cl;
    }
    return o;
}

static int s_build_pieces(model_tokenizer_t *t, size_t text_total) {
    t->piece_off = malloc(sizeof(uint32_t) * (size_t)t->n_vocab);
    t->piece_len = malloc(sizeof(uint32_t) * (size_t)t->n_vocab);
    t->piece_blob = malloc(text_total + (size_t)t->n_vocab + 1); /* pieces never grow */
    if (!t->piece_off || !t->piece_len || !t->piece_blob)
        return -ENOMEM;
    size_t o = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n = s_make_piece(t, id, t->piece_blob + o);
        t->piece_off[id] = (uint32_t)o;
        t->piece_len[id] = (uint32_t)n;
        o += n;
        t->piece_blob[o++] = '\0';
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Special tokens, EOG, chat template                                                          */

static int s_build_specials(model_tokenizer_t *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if ((t->type[id] == TT_CONTROL || t->type[id] == TT_USER) && t->text_len[id] > 0)
            n++;
    t->special = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!t->special)
        return -ENOMEM;
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if ((t->type[id] == TT_CONTROL || t->type[id] == TT_USER) && t->text_len[id] > 0)
            t->special[n++] = id;
    /* sort by first byte, then longest first (so the first match is the longest); qsort
     * has no context argument, so a bottom-up merge sort */
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!tmp)
        return -ENOMEM;
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = lo + width < n ? lo + width : n;
            int32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int32_t a = t->special[i], b = t->special[j];
                uint8_t fa = (uint8_t)t->text_blob[t->text_off[a]];
                uint8_t fb = (uint8_t)t->text_blob[t->text_off[b]];
                bool take_a = fa != fb                           ? fa < fb
                              : t->text_len[a] != t->text_len[b] ? t->text_len[a] > t->text_len[b]
                                                                 : a <= b;
                tmp[k++] = take_a ? t->special[i++] : t->special[j++];
            }
            while (i < mid)
                tmp[k++] = t->special[i++];
            while (j < hi)
                tmp[k++] = t->special[j++];
        }
        memcpy(t->special, tmp, sizeof(int32_t) * (size_t)n);
    }
    free(tmp);
    int32_t k = 0;
    for (int b = 0; b < 256; b++) {
        t->special_start[b] = k;
        while (k < n && (uint8_t)t->text_blob[t->text_off[t->special[k]]] == b)
            k++;
    }
    t->special_start[256] = k;
    return 0;
}

static void s_build_eog(model_tokenizer_t *t, const model_gguf_t *g) {
    static const char *names[] = {"<|im_end|>",    "<|eot_id|>", "<|end_of_text|>",
                                  "<end_of_turn>", "</s>",       "<|endoftext|>",
                                  "<|eom_id|>",    "<|end|>",    "<|return|>"};
    if (t->eos >= 0)
        t->eog[t->eos] = true;
    int64_t v;
    if (model_gguf_get_i64(g, "tokenizer.ggml.eot_token_id", &v) && v >= 0 && v < t->n_vocab)
        t->eog[v] = true;
    if (model_gguf_get_i64(g, "tokenizer.ggml.eom_token_id", &v) && v >= 0 && v < t->n_vocab)
        t->eog[v] = true;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = s_lookup(t, names[i], strlen(names[i]));
        if (id >= 0 && t->type[id] != TT_NORMAL && t->type[id] != TT_UNDEF)
            t->eog[id] = true;
    }
}

/* Whether the vocabulary has a special (non-normal) token with text name. */
static bool s_has_special(void *ctx, const char *name) {
    const model_tokenizer_t *t = ctx;
    int32_t id = s_lookup(t, name, strlen(name));
    return id >= 0 && t->type[id] != TT_NORMAL && t->type[id] != TT_UNDEF;
}

/* The chat template's row, from tokenizer.chat_template's text; a GGUF without that key
 * (Gemma 3 270M's has none) gets the row whose vocabulary markers it has. */
static int s_build_chat(model_tokenizer_t *t, const model_gguf_t *g) {
    char *tmpl = NULL;
    if (!model_gguf_get_str(g, "tokenizer.chat_template", &tmpl))
        tmpl = NULL;
    int rc = model_chat_template_init(&t->chat, tmpl, s_has_special, t);
    free(tmpl);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Construction                                                                                */

/* Numeric array element i of kv (found once, by key): the common types decoded here, the
 * others through the reader's generic (slower) accessor. */
static bool s_arr_num(const model_gguf_t *g, const char *key, const model_gguf_kv_t *kv, uint64_t i,
                      double *out) {
    const uint8_t *p;
    switch (kv->arr_type) {
    case GGUF_UINT8:
        *out = kv->arr_data[i];
        return true;
    case GGUF_INT8:
        *out = (int8_t)kv->arr_data[i];
        return true;
    case GGUF_INT32: {
        int32_t v;
        p = kv->arr_data + 4 * i;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    case GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, kv->arr_data + 4 * i, 4);
        *out = v;
        return true;
    }
    case GGUF_FLOAT32: {
        float v;
        memcpy(&v, kv->arr_data + 4 * i, 4);
        *out = v;
        return true;
    }
    default:
        return model_gguf_arr_num(g, key, i, out);
    }
}

static int s_setup_pretokenizer(model_tokenizer_t *t, const model_gguf_t *g, char *err,
                                size_t errlen) {
    char *pre = NULL;
    model_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    t->pretok = model_pretok_new(pre, err, errlen);
    free(pre);
    if (!t->pretok)
        return -EINVAL;
    t->ignore_merges = model_pretok_row(t->pretok)->ignore_merges;
    return 0;
}

model_tokenizer_t *model_tokenizer_new(const model_gguf_t *gguf, char *err, size_t errlen) {
    if (err && errlen)
        err[0] = '\0';
    if (!gguf) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: no GGUF");
        return NULL;
    }
    char *model = NULL;
    model_gguf_str_t *strs = NULL;
    model_tokenizer_t *t = calloc(1, sizeof *t);
    if (!t)
        goto nomem;
    if (!model_gguf_get_str(gguf, "tokenizer.ggml.model", &model)) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: the GGUF has no tokenizer.ggml.model key");
        goto fail;
    }
    if (!strcmp(model, "gpt2"))
        t->kind = TOK_BPE;
    else if (!strcmp(model, "llama"))
        t->kind = TOK_SPM;
    else {
        model_err_set(err, errlen, -EINVAL,
                      "tokenizer: unsupported tokenizer.ggml.model '%s' (gpt2, llama)", model);
        goto fail;
    }

    /* vocabulary */
    model_gguf_vtype_t et;
    uint64_t n = 0;
    if (!model_gguf_get_arr(gguf, "tokenizer.ggml.tokens", &et, &n) || et != GGUF_STRING) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: no tokenizer.ggml.tokens string array");
        goto fail;
    }
    if (n == 0 || n > (1u << 24)) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: bad vocabulary size %llu",
                      (unsigned long long)n);
        goto fail;
    }
    t->n_vocab = (int32_t)n;
    strs = malloc(sizeof(*strs) * n);
    if (!strs)
        goto nomem;
    if (!model_gguf_arr_strs(gguf, "tokenizer.ggml.tokens", strs, n)) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: cannot read tokenizer.ggml.tokens");
        goto fail;
    }
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len > 65536) {
            model_err_set(err, errlen, -EINVAL, "tokenizer: token %llu is %llu bytes long",
                          (unsigned long long)i, (unsigned long long)strs[i].len);
            goto fail;
        }
        total += strs[i].len + 1;
    }
    if (total >= UINT32_MAX / 2) {
        model_err_set(err, errlen, -EINVAL, "tokenizer: vocabulary text too large");
        goto fail;
    }
    t->text_blob = malloc(total);
    t->text_off = malloc(sizeof(uint32_t) * n);
    t->text_len = malloc(sizeof(uint32_t) * n);
    t->type = malloc(n);
    t->eog = calloc(n, sizeof(bool));
    if (!t->text_blob || !t->text_off || !t->text_len || !t->type || !t->eog)
        goto nomem;
    size_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(t->text_blob + o, strs[i].ptr, strs[i].len);
        t->text_off[i] = (uint32_t)o;
        t->text_len[i] = (uint32_t)strs[i].len;
        o += strs[i].len;
        t->text_blob[o++] = '\0';
    }
    free(strs);
    strs = NULL;

    /* token types (default NORMAL) and scores */
    const model_gguf_kv_t *tkv = model_gguf_find(gguf, "tokenizer.ggml.token_type");
    for (uint64_t i = 0; i < n; i++) {
        double v;
        t->type[i] = TT_NORMAL;
        if (tkv && tkv->type == GGUF_ARRAY && tkv->arr_len == n &&
            s_arr_num(gguf, "tokenizer.ggml.token_type", tkv, i, &v) && v >= 0 && v <= 6)
            t->type[i] = (uint8_t)v;
    }
    if (tkv && (tkv->type != GGUF_ARRAY || tkv->arr_len != n))
        LOG_W(TAG, "tokenizer.ggml.token_type has the wrong shape; ignored");
    if (t->kind == TOK_SPM) {
        const model_gguf_kv_t *skv = model_gguf_find(gguf, "tokenizer.ggml.scores");
        t->score = calloc(n, sizeof(float));
        if (!t->score)
            goto nomem;
        if (skv && skv->type == GGUF_ARRAY && skv->arr_len == n) {
            for (uint64_t i = 0; i < n; i++) {
                double v = 0;
                if (s_arr_num(gguf, "tokenizer.ggml.scores", skv, i, &v))
                    t->score[i] = (float)v;
            }
        } else {
            LOG_W(TAG, "SentencePiece model without usable tokenizer.ggml.scores");
        }
    }

    if (s_build_vocab_index(t) < 0 || s_build_pieces(t, total) < 0 || s_build_specials(t) < 0)
        goto nomem;

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int len;
        if (t->kind == TOK_BPE)
            len = s_utf8_encode(s_byte_to_cp((uint8_t)b), buf);
        else
            len = snprintf(buf, sizeof buf, "<0x%02X>", b);
        t->byte_tok[b] = s_lookup(t, buf, (size_t)len);
    }

    /* special ids and flags */
    int64_t v;
    t->bos = t->eos = t->unk = -1;
    if (model_gguf_get_i64(gguf, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v < (int64_t)n)
        t->bos = (int32_t)v;
    if (model_gguf_get_i64(gguf, "tokenizer.ggml.eos_token_id", &v) && v >= 0 && v < (int64_t)n)
        t->eos = (int32_t)v;
    if (model_gguf_get_i64(gguf, "tokenizer.ggml.unknown_token_id", &v) && v >= 0 && v < (int64_t)n)
        t->unk = (int32_t)v;
    t->add_bos = t->kind == TOK_SPM; /* SentencePiece models add BOS unless told otherwise */
    model_gguf_get_bool(gguf, "tokenizer.ggml.add_bos_token", &t->add_bos);
    t->add_space_prefix = t->kind == TOK_SPM;
    model_gguf_get_bool(gguf, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    if (t->bos < 0)
        t->add_bos = false;

    if (t->kind == TOK_BPE) {
        int rc = s_build_merges(t, gguf, err, errlen);
        if (rc == -ENOMEM)
            goto nomem;
        if (rc < 0)
            goto fail;
        if (s_setup_pretokenizer(t, gguf, err, errlen) < 0)
            goto fail;
    }
    s_build_eog(t, gguf);
    if (s_build_chat(t, gguf) < 0)
        goto nomem;
    free(model);
    return t;
nomem:
    model_err_set(err, errlen, -EINVAL, "tokenizer: out of memory");
fail:
    free(strs);
    free(model);
    model_tokenizer_destroy(&t);
    return NULL;
}

void model_tokenizer_destroy(model_tokenizer_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_tokenizer_t *t = *self_p;
    free(t->text_blob);
    free(t->text_off);
    free(t->text_len);
    free(t->piece_blob);
    free(t->piece_off);
    free(t->piece_len);
    free(t->type);
    free(t->score);
    free(t->eog);
    base_strmap_free(&t->vocab);
    base_map_free(&t->merges);
    free(t->special);
    model_pretok_destroy(&t->pretok);
    model_chat_template_free(&t->chat);
    free(t);
    *self_p = NULL;
}

int32_t model_tokenizer_n_vocab(const model_tokenizer_t *self) {
    return self->n_vocab;
}
int32_t model_tokenizer_bos(const model_tokenizer_t *self) {
    return self->bos;
}
int32_t model_tokenizer_eos(const model_tokenizer_t *self) {
    return self->eos;
}
bool model_tokenizer_add_bos(const model_tokenizer_t *self) {
    return self->add_bos;
}

bool model_tokenizer_is_eog(const model_tokenizer_t *self, int32_t id) {
    return id >= 0 && id < self->n_vocab && self->eog[id];
}

int32_t *model_tokenizer_eog_ids(const model_tokenizer_t *self, int n_vocab, int *n) {
    int32_t *ids = malloc((size_t)(n_vocab > 0 ? n_vocab : 1) * sizeof *ids);
    *n = 0;
    for (int32_t id = 0; ids && id < n_vocab; id++)
        if (model_tokenizer_is_eog(self, id))
            ids[(*n)++] = id;
    return ids;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                    */

/* Where ids go: counts all, stores the first max. */
typedef struct {
    int32_t *out; /* caller's buffer */
    int max;      /* its capacity */
    long n;       /* ids produced so far */
} emit_t;

static void s_emit(emit_t *e, int32_t id) {
    if (e->n < e->max)
        e->out[e->n] = id;
    e->n++;
}

/* One symbol of a word being merged: a doubly linked list over an array. */
typedef struct {
    int32_t id;   /* BPE: current token id (-1: unmergeable byte) */
    int32_t prev; /* index of the previous live symbol, -1 at the start */
    int32_t next; /* index of the next live symbol, -1 at the end */
    uint32_t off; /* SPM: byte offset of the symbol in the word */
    uint32_t len; /* bytes (0 once merged into its left neighbour) */
} sym_t;

/* A candidate merge of symbols left and right; stale ones are skipped when popped. */
typedef struct {
    double prio;    /* lower first: BPE rank, or SPM -score */
    int32_t left;   /* index of the left symbol */
    int32_t right;  /* index of the right symbol */
    int32_t a, b;   /* BPE: ids the two symbols had; SPM: b = combined length */
    int32_t result; /* token produced */
} cand_t;

/* Per-call scratch buffers, grown as needed. */
typedef struct {
    sym_t *sym;
    size_t sym_cap;
    cand_t *heap;
    size_t heap_n, heap_cap;
    char *buf; /* SPM: the word with spaces replaced */
    size_t buf_cap;
    model_pretok_match_t *pm; /* BPE: the pre-tokenizer's match scratch */
    int oom;                  /* an allocation failed */
} scratch_t;

static bool s_cand_less(const cand_t *x, const cand_t *y) {
    if (x->prio != y->prio)
        return x->prio < y->prio;
    return x->left < y->left;
}

static void s_heap_push(scratch_t *s, cand_t c) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        cand_t *h = realloc(s->heap, cap * sizeof *h);
        if (!h) {
            s->oom = 1;
            return;
        }
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!s_cand_less(&c, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static cand_t s_heap_pop(scratch_t *s) {
    cand_t top = s->heap[0];
    cand_t last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand_t *best = &last;
        if (l < n && s_cand_less(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (r < n && s_cand_less(&s->heap[r], best))
            m = r;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

static bool s_reserve_syms(scratch_t *s, size_t n) {
    if (n <= s->sym_cap)
        return true;
    size_t cap = s->sym_cap ? s->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    sym_t *p = realloc(s->sym, cap * sizeof *p);
    if (!p) {
        s->oom = 1;
        return false;
    }
    s->sym = p;
    s->sym_cap = cap;
    return true;
}

static void s_bpe_try(const model_tokenizer_t *t, scratch_t *s, int32_t left) {
    int32_t right = s->sym[left].next;
    if (right < 0)
        return;
    int32_t rank, result;
    if (!s_merge_find(t, s->sym[left].id, s->sym[right].id, &rank, &result))
        return;
    cand_t c = {(double)rank, left, right, s->sym[left].id, s->sym[right].id, result};
    s_heap_push(s, c);
}

/* Byte-level BPE of one pre-token word p[0..n). */
static void s_bpe_word(const model_tokenizer_t *t, scratch_t *s, const char *p, size_t n,
                       emit_t *e) {
    if (n == 0 || !s_reserve_syms(s, n))
        return;
    if (t->ignore_merges) { /* the whole word, in byte-level characters, may be a token */
        if (2 * n + 1 > s->buf_cap) {
            char *b = realloc(s->buf, 2 * n + 1);
            if (!b) {
                s->oom = 1;
                return;
            }
            s->buf = b;
            s->buf_cap = 2 * n + 1;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += (size_t)s_utf8_encode(s_byte_to_cp((uint8_t)p[i]), s->buf + m);
        int32_t id = s_lookup(t, s->buf, m);
        if (id >= 0) {
            s_emit(e, id);
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        sym_t *y = &s->sym[i];
        y->id = t->byte_tok[(uint8_t)p[i]];
        y->prev = (int32_t)i - 1;
        y->next = i + 1 < n ? (int32_t)i + 1 : -1;
        y->len = 1;
        y->off = (uint32_t)i;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        s_bpe_try(t, s, (int32_t)i);
    while (s->heap_n > 0) {
        cand_t c = s_heap_pop(s);
        sym_t *l = &s->sym[c.left];
        if (l->len == 0 || l->next != c.right || l->id != c.a || s->sym[c.right].id != c.b)
            continue; /* stale */
        sym_t *r = &s->sym[c.right];
        l->id = c.result;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = c.left;
        if (l->prev >= 0)
            s_bpe_try(t, s, l->prev);
        s_bpe_try(t, s, c.left);
    }
    /* a byte with no token (vocabularies often lack 0xC0, 0xC1, 0xF5-0xFF) is dropped,
     * as a byte-level BPE without an unknown token does: emitting unk here could mean
     * emitting an end-of-text control token */
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        if (s->sym[i].id >= 0)
            s_emit(e, s->sym[i].id);
}

/* What the pre-tokenizer hands each word to: BPE of that word. */
typedef struct {
    const model_tokenizer_t *t;
    scratch_t *s;
    emit_t *e;
} bpe_words_t;

static bool s_bpe_on_word(void *ctx, const char *word, size_t n) {
    bpe_words_t *w = ctx;
    s_bpe_word(w->t, w->s, word, n, w->e);
    return !w->s->oom;
}

/* Byte-level BPE of span p[0..n): the pre-tokenizer's words, each merged on its own. */
static void s_bpe_text(const model_tokenizer_t *t, scratch_t *s, const char *p, size_t n,
                       emit_t *e) {
    bpe_words_t w = {t, s, e};
    model_pretok_split(t->pretok, s->pm, p, n, s_bpe_on_word, &w);
}

static void s_spm_try(const model_tokenizer_t *t, scratch_t *s, int32_t left) {
    int32_t right = s->sym[left].next;
    if (right < 0)
        return;
    const sym_t *l = &s->sym[left], *r = &s->sym[right];
    /* any token of the vocabulary may be a merge, whatever its type, as in llama.cpp */
    int32_t id = s_lookup(t, s->buf + l->off, l->len + r->len);
    if (id < 0)
        return;
    cand_t c = {-(double)t->score[id], left, right, 0, (int32_t)(l->len + r->len), id};
    s_heap_push(s, c);
}

/* SentencePiece BPE of text p[0..n): spaces become U+2581, characters merge by score,
 * what is left without a token falls back to <0xNN> byte tokens (or unk). */
static void s_spm_text(const model_tokenizer_t *t, scratch_t *s, const char *p, size_t n,
                       bool prefix, emit_t *e) {
    size_t need = 3 * n + 4;
    if (need > s->buf_cap) {
        char *b = realloc(s->buf, need);
        if (!b) {
            s->oom = 1;
            return;
        }
        s->buf = b;
        s->buf_cap = need;
    }
    size_t m = 0;
    if (prefix) {
        memcpy(s->buf, "\xE2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') {
            memcpy(s->buf + m, "\xE2\x96\x81", 3);
            m += 3;
        } else {
            s->buf[m++] = p[i];
        }
    }
    if (m == 0 || !s_reserve_syms(s, m))
        return;
    int32_t ns = 0;
    for (size_t i = 0; i < m;) {
        int cl = s_utf8_valid((const uint8_t *)s->buf + i, m - i);
        if (cl <= 0)
            cl = 1;
        sym_t *y = &s->sym[ns];
        y->off = (uint32_t)i;
        y->len = (uint32_t)cl;
        y->prev = ns - 1;
        y->next = -1;
        if (ns > 0)
            s->sym[ns - 1].next = ns;
        ns++;
        i += (size_t)cl;
    }
    s->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        s_spm_try(t, s, i);
    while (s->heap_n > 0) {
        cand_t c = s_heap_pop(s);
        sym_t *l = &s->sym[c.left];
        if (l->len == 0 || l->next != c.right || l->len + s->sym[c.right].len != (uint32_t)c.b)
            continue; /* stale */
        sym_t *r = &s->sym[c.right];
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = c.left;
        if (l->prev >= 0)
            s_spm_try(t, s, l->prev);
        s_spm_try(t, s, c.left);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const sym_t *y = &s->sym[i];
        int32_t id = s_lookup(t, s->buf + y->off, y->len);
        if (id >= 0) {
            s_emit(e, id);
            continue;
        }
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t b = t->byte_tok[(uint8_t)s->buf[y->off + k]];
            if (b >= 0)
                s_emit(e, b);
            else if (t->unk >= 0) {
                s_emit(e, t->unk);
                break; /* one unk for the whole symbol */
            }
        }
    }
}

/* The special token that starts at p[0..n), or -1. */
static int32_t s_match_special(const model_tokenizer_t *t, const char *p, size_t n,
                               bool parse_special) {
    uint8_t b = (uint8_t)p[0];
    for (int32_t k = t->special_start[b]; k < t->special_start[b + 1]; k++) {
        int32_t id = t->special[k];
        if (t->type[id] == TT_CONTROL && !parse_special)
            continue;
        uint32_t len = t->text_len[id];
        if (len <= n && memcmp(p, t->text_blob + t->text_off[id], len) == 0)
            return id;
    }
    return -1;
}

int model_tokenizer_encode(const model_tokenizer_t *self, const char *text, size_t len,
                           bool add_bos, bool parse_special, int32_t *out, int max_out) {
    if (!self || (!text && len > 0) || max_out < 0 || (!out && max_out > 0))
        return -EINVAL;
    if (len > (size_t)INT_MAX / 4)
        return -E2BIG; /* symbol indexes are int32 */
    emit_t e = {out, max_out, 0};
    scratch_t s;
    memset(&s, 0, sizeof s);
    if (self->pretok) {
        s.pm = model_pretok_match_new(self->pretok);
        if (!s.pm)
            return -ENOMEM;
    }
    if (add_bos && self->bos >= 0)
        s_emit(&e, self->bos);
    /* split out special tokens, tokenize the text between them */
    size_t start = 0, i = 0;
    bool after_special = true; /* SPM: a space prefix starts the text and follows a special */
    while (i <= len && !s.oom) {
        int32_t sp = i < len ? s_match_special(self, text + i, len - i, parse_special) : -1;
        if (sp < 0 && i < len) {
            i++;
            continue;
        }
        if (i > start) {
            if (self->kind == TOK_BPE)
                s_bpe_text(self, &s, text + start, i - start, &e);
            else
                s_spm_text(self, &s, text + start, i - start,
                           after_special && self->add_space_prefix, &e);
            after_special = false;
        }
        if (sp < 0)
            break; /* i == len */
        s_emit(&e, sp);
        after_special = true;
        i += self->text_len[sp];
        start = i;
        if (i == len)
            break;
    }
    int oom = s.oom;
    free(s.sym);
    free(s.heap);
    free(s.buf);
    model_pretok_match_destroy(&s.pm);
    if (oom)
        return -ENOMEM;
    if (e.n > INT_MAX)
        return -E2BIG;
    return (int)e.n;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                    */

static bool s_is_hidden(const model_tokenizer_t *t, int32_t id) {
    uint8_t ty = t->type[id];
    return ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_UNUSED;
}

const char *model_tokenizer_piece(const model_tokenizer_t *self, int32_t id, bool render_special,
                                  size_t *len) {
    if (!self || id < 0 || id >= self->n_vocab) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (!render_special && s_is_hidden(self, id)) {
        if (len)
            *len = 0;
        return "";
    }
    if (len)
        *len = self->piece_len[id];
    return self->piece_blob + self->piece_off[id];
}

char *model_tokenizer_decode(const model_tokenizer_t *self, const int32_t *ids, int n) {
    if (!self || n < 0 || (n > 0 && !ids))
        return NULL;
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        size_t l = 0;
        model_tokenizer_piece(self, ids[i], false, &l);
        total += l;
    }
    char *out = malloc(total);
    if (!out)
        return NULL;
    size_t o = 0;
    /* SentencePiece with add_space_prefix: the space encode added before the text goes */
    bool strip = self->kind == TOK_SPM && self->add_space_prefix;
    for (int i = 0; i < n; i++) {
        size_t l = 0;
        const char *p = model_tokenizer_piece(self, ids[i], false, &l);
        if (!p || !l)
            continue;
        if (strip && p[0] == ' ') {
            p++;
            l--;
        }
        strip = false;
        memcpy(out + o, p, l);
        o += l;
    }
    out[o] = '\0';
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Chat templates                                                                              */

/* The rendered text does not include a BOS token's text (Llama 2/3 templates begin with
 * bos_token): encode it with add_bos = model_tokenizer_add_bos() to get the BOS id. */
char *model_tokenizer_chat(const model_tokenizer_t *self, const model_chat_msg_t *msgs, int n,
                           bool add_assistant) {
    return self ? model_chat_template_render(&self->chat, msgs, n, add_assistant) : NULL;
}

const char *model_tokenizer_chat_name(const model_tokenizer_t *self) {
    return self && self->chat.row ? self->chat.row->name : NULL;
}

const char *model_tokenizer_chat_row_name(int i) {
    for (int k = 0; model_chat_rows[k].name; k++)
        if (k == i)
            return model_chat_rows[k].name;
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Incremental detokenization                                                                  */

void model_detok_init(model_detok_t *d, const model_tokenizer_t *tok) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
}

/* Append n bytes if they fit (leaving room for the NUL). */
static bool s_out(char *out, size_t cap, size_t *o, const char *p, size_t n) {
    if (*o + n + 1 > cap)
        return false;
    memcpy(out + *o, p, n);
    *o += n;
    return true;
}

int model_detok_push(model_detok_t *d, int32_t id, char *out, size_t cap) {
    if (!d || !out || cap == 0)
        return 0;
    size_t o = 0, plen = 0;
    out[0] = '\0';
    const char *piece = model_tokenizer_piece(d->tok, id, false, &plen);
    if (!piece)
        plen = 0;
    /* work on pending + piece without copying the piece: index through both */
    size_t np = (size_t)d->n_pending, total = np + plen;
    uint8_t win[4];
#define AT(k) ((k) < np ? (uint8_t)d->pending[k] : (uint8_t)piece[(k)-np])
    size_t k = 0;
    while (k < total) {
        uint8_t c = AT(k);
        if (c < 0x80) {
            char ch = (char)c;
            if (!s_out(out, cap, &o, &ch, 1))
                break;
            k++;
            continue;
        }
        size_t avail = total - k < 4 ? total - k : 4;
        for (size_t j = 0; j < avail; j++)
            win[j] = AT(k + j);
        int v = s_utf8_valid(win, avail);
        if (v < 0) { /* incomplete at the end: hold it */
            break;
        }
        if (v == 0) { /* invalid byte: U+FFFD */
            if (!s_out(out, cap, &o, "\xEF\xBF\xBD", 3))
                break;
            k++;
            continue;
        }
        if (!s_out(out, cap, &o, (const char *)win, (size_t)v))
            break;
        k += (size_t)v;
    }
    /* keep the unfinished tail (at most 3 bytes; anything longer did not fit in out and
     * is dropped rather than overflowing pending) */
    size_t rest = total - k;
    if (rest > 3) {
        LOG_W(TAG, "detok: output buffer too small, %zu bytes dropped", rest);
        rest = 0;
    }
    char tmp[4];
    for (size_t j = 0; j < rest; j++)
        tmp[j] = (char)AT(k + j);
#undef AT
    memcpy(d->pending, tmp, rest);
    d->n_pending = (int)rest;
    out[o] = '\0';
    return (int)o;
}

int model_detok_flush(model_detok_t *d, char *out, size_t cap) {
    if (!d || !out || cap == 0)
        return 0;
    size_t o = 0;
    if (d->n_pending > 0)
        s_out(out, cap, &o, "\xEF\xBF\xBD", 3);
    d->n_pending = 0;
    out[o] = '\0';
    return (int)o;
}
