/* model_tokenizer.c - text <-> token ids from a GGUF's tokenizer metadata.
 * Owns a copy of the vocabulary, hash indexes (text -> id, merge pair -> rank), the
 * compiled pre-tokenizer regexes and the chat template.  Two algorithms: byte-level
 * BPE ranked by merge order ("gpt2") and SentencePiece-style BPE ranked by score
 * ("llama").  Both merge with a binary heap over a linked list of symbols: O(n log n).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model_tokenizer.h"
#include "model_err.h"

#include "base_log.h"

#include <errno.h>
#include <limits.h>
#include <pcre2.h>
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
typedef enum { CHAT_NONE = 0, CHAT_CHATML, CHAT_LLAMA3, CHAT_LLAMA2, CHAT_GEMMA } chat_style_t;

/* The regexes of the pre-tokenizers (PCRE2 syntax, compiled with UTF + UCP). */
static const char *RE_GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama 3: contractions in either case (ASCII classes, not (?i), which would let "'\u017f"
 * match), letters with one leading non-letter, numbers of up to three digits. */
static const char *RE_LLAMA3 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
                               "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen2: Llama 3's rule except the digits, each of which is a word of its own. */
static const char *RE_QWEN2 = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
                              "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
                              " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *RE_DIGIT = "\\p{N}";

/* One merge in the pair index: (left id, right id) -> rank and result. */
typedef struct {
    uint64_t key;   /* (uint64)left << 32 | right; UINT64_MAX when the slot is empty */
    int32_t rank;   /* position in tokenizer.ggml.merges: lower merges first */
    int32_t result; /* id of the merged token */
} merge_slot_t;

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

    int32_t *vocab_tab;      /* open-addressing table: token id or -1 (text -> id) */
    uint32_t vocab_mask;     /* table size - 1 (a power of two) */
    merge_slot_t *merge_tab; /* open-addressing table of merges (BPE only) */
    uint32_t merge_mask;     /* table size - 1 */

    int32_t byte_tok[256]; /* token for each raw byte (byte-level char or <0xNN>), -1 if none */

    int32_t *special;           /* ids of CONTROL/USER tokens matched in text, by first byte then
                                   length descending */
    int32_t special_start[257]; /* special[special_start[b] .. special_start[b+1]) start with b */

    pcre2_code *re_main;  /* the pre-tokenizer regex (BPE only) */
    pcre2_code *re_digit; /* \p{N}: isolates each digit first (smollm, starcoder), or NULL */
    bool ignore_merges;   /* BPE: a word that is a token is that token, unmerged (llama3) */

    int32_t bos, eos, unk; /* -1 if none */
    bool add_bos;          /* tokenizer.ggml.add_bos_token */
    bool add_space_prefix; /* SPM: a leading U+2581 before the text */

    chat_style_t chat;         /* recognised template style */
    char *chat_default_system; /* ChatML: the template's built-in system prompt, or NULL */
};

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */

static uint32_t s_hash_bytes(const char *p, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 16777619u;
    }
    return h;
}

static uint32_t s_hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32) ^ (uint32_t)key;
}

static uint32_t s_pow2_at_least(uint64_t n) {
    uint32_t s = 16;
    while (s < n && s < (1u << 30))
        s <<= 1;
    return s;
}

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
    uint32_t i = s_hash_bytes(p, n) & t->vocab_mask;
    for (;;) {
        int32_t id = t->vocab_tab[i];
        if (id < 0)
            return -1;
        if (t->text_len[id] == n && memcmp(t->text_blob + t->text_off[id], p, n) == 0)
            return id;
        i = (i + 1) & t->vocab_mask;
    }
}

static int s_build_vocab_index(model_tokenizer_t *t) {
    uint32_t size = s_pow2_at_least((uint64_t)t->n_vocab * 2);
    t->vocab_tab = malloc(sizeof(int32_t) * size);
    if (!t->vocab_tab)
        return -ENOMEM;
    memset(t->vocab_tab, 0xFF, sizeof(int32_t) * size);
    t->vocab_mask = size - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t n;
        const char *p = s_text(t, id, &n);
        if (s_lookup(t, p, n) >= 0)
            continue; /* duplicate text: the lowest id wins */
        uint32_t i = s_hash_bytes(p, n) & t->vocab_mask;
        while (t->vocab_tab[i] >= 0)
            i = (i + 1) & t->vocab_mask;
        t->vocab_tab[i] = id;
    }
    return 0;
}

static const merge_slot_t *s_merge_find(const model_tokenizer_t *t, int32_t a, int32_t b) {
    if (!t->merge_tab || a < 0 || b < 0)
        return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = s_hash_pair(key) & t->merge_mask;
    for (;;) {
        const merge_slot_t *s = &t->merge_tab[i];
        if (s->key == UINT64_MAX)
            return NULL;
        if (s->key == key)
            return s;
        i = (i + 1) & t->merge_mask;
    }
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
    uint32_t size = s_pow2_at_least(n * 2);
    t->merge_tab = malloc(sizeof(merge_slot_t) * size);
    char *buf = malloc(1024);
    if (!t->merge_tab || !buf) {
        free(m);
        free(buf);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < size; i++)
        t->merge_tab[i].key = UINT64_MAX;
    t->merge_mask = size - 1;
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
        if (s_merge_find(t, a, b))
            continue; /* repeated pair: the first rank wins */
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        uint32_t i = s_hash_pair(key) & t->merge_mask;
        while (t->merge_tab[i].key != UINT64_MAX)
            i = (i + 1) & t->merge_mask;
        t->merge_tab[i].key = key;
        t->merge_tab[i].rank = (int32_t)r;
        t->merge_tab[i].result = c;
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

/* ChatML: if the template carries a literal system prompt used when the first message is
 * not a system one ('<|im_start|>system\n...<|im_end|>' inside a string literal), keep it. */
static char *s_chatml_default_system(const char *tmpl) {
    static const char *open = "<|im_start|>system";
    const char *p = strstr(tmpl, open);
    while (p) {
        const char *q = p + strlen(open);
        if (*q == '\n')
            q++;
        else if (q[0] == '\\' && q[1] == 'n')
            q += 2;
        else {
            p = strstr(q, open);
            continue;
        }
        const char *end = strstr(q, "<|im_end|>");
        if (!end)
            return NULL;
        size_t n = (size_t)(end - q);
        /* a literal, not a Jinja expression or the end of a string */
        bool literal = n > 0;
        for (size_t i = 0; i < n && literal; i++)
            if (q[i] == '{' || q[i] == '}' || q[i] == '\'' || q[i] == '"')
                literal = false;
        if (literal) {
            char *s = malloc(n + 1);
            if (!s)
                return NULL;
            size_t o = 0;
            for (size_t i = 0; i < n; i++) {
                if (q[i] == '\\' && i + 1 < n && q[i + 1] == 'n') {
                    s[o++] = '\n';
                    i++;
                } else {
                    s[o++] = q[i];
                }
            }
            s[o] = '\0';
            return s;
        }
        p = strstr(end, open);
    }
    return NULL;
}

/* Whether the vocabulary has a special (non-normal) token with text name. */
static bool s_has_special(const model_tokenizer_t *t, const char *name) {
    int32_t id = s_lookup(t, name, strlen(name));
    return id >= 0 && t->type[id] != TT_NORMAL && t->type[id] != TT_UNDEF;
}

/* The template style, from tokenizer.chat_template's text; a GGUF without that key (Gemma 3
 * 270M's has none) gets Gemma's when the vocabulary has <start_of_turn> and <end_of_turn>. */
static void s_build_chat(model_tokenizer_t *t, const model_gguf_t *g) {
    char *tmpl = NULL;
    if (!model_gguf_get_str(g, "tokenizer.chat_template", &tmpl) || !tmpl) {
        if (s_has_special(t, "<start_of_turn>") && s_has_special(t, "<end_of_turn>"))
            t->chat = CHAT_GEMMA;
        return;
    }
    if (strstr(tmpl, "<start_of_turn>")) {
        t->chat = CHAT_GEMMA;
    } else if (strstr(tmpl, "<|im_start|>")) {
        t->chat = CHAT_CHATML;
        t->chat_default_system = s_chatml_default_system(tmpl);
    } else if (strstr(tmpl, "<|start_header_id|>")) {
        t->chat = CHAT_LLAMA3;
    } else if (strstr(tmpl, "[INST]")) {
        t->chat = CHAT_LLAMA2;
    } else {
        LOG_W(TAG, "chat template not recognised (not ChatML, Llama 3, Llama 2 or Gemma)");
    }
    free(tmpl);
}

/* ------------------------------------------------------------------------------------------ */
/* Construction                                                                                */

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
    const char *re = RE_GPT2;
    bool digits = false;
    if (!pre || !strcmp(pre, "gpt2") || !strcmp(pre, "default")) {
    } else if (!strcmp(pre, "smollm") || !strcmp(pre, "starcoder") || !strcmp(pre, "refact")) {
        digits = true;
    } else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) {
        re = RE_LLAMA3;
        t->ignore_merges = true;
    } else if (!strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen")) {
        re = RE_QWEN2;
    } else {
        LOG_W(TAG, "unknown pre-tokenizer '%s': using the GPT-2 regex", pre);
    }
    free(pre);
    t->re_main = s_compile(re, err, errlen);
    if (!t->re_main)
        return -EINVAL;
    if (digits) {
        t->re_digit = s_compile(RE_DIGIT, err, errlen);
        if (!t->re_digit)
            return -EINVAL;
    }
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
    s_build_chat(t, gguf);
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
    free(t->vocab_tab);
    free(t->merge_tab);
    free(t->special);
    if (t->re_main)
        pcre2_code_free(t->re_main);
    if (t->re_digit)
        pcre2_code_free(t->re_digit);
    free(t->chat_default_system);
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
    pcre2_match_data *md;
    int oom; /* an allocation failed */
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
    const merge_slot_t *m = s_merge_find(t, s->sym[left].id, s->sym[right].id);
    if (!m)
        return;
    cand_t c = {(double)m->rank, left, right, s->sym[left].id, s->sym[right].id, m->result};
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

/* Pre-tokenize span p[0..n) with the main regex; each match, and any text between
 * matches, is one word for BPE. */
static void s_bpe_regex(const model_tokenizer_t *t, scratch_t *s, const char *p, size_t n,
                        emit_t *e) {
    size_t off = 0;
    while (off < n && !s->oom) {
        int rc = pcre2_match(t->re_main, (PCRE2_SPTR)p, n, off, 0, s->md, NULL);
        if (rc < 0) {
            if (rc != PCRE2_ERROR_NOMATCH)
                LOG_W(TAG, "pre-tokenizer regex failed (%d): %zu bytes taken as one word", rc,
                      n - off);
            s_bpe_word(t, s, p + off, n - off, e);
            return;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0) { /* an empty match: cannot happen with these patterns; step a char */
            m1 = m0 + (size_t)s_utf8_len((uint8_t)p[m0]);
            if (m1 > n)
                m1 = n;
        }
        if (m0 > off)
            s_bpe_word(t, s, p + off, m0 - off, e);
        s_bpe_word(t, s, p + m0, m1 - m0, e);
        off = m1;
    }
}

static void s_bpe_text(const model_tokenizer_t *t, scratch_t *s, const char *p, size_t n,
                       emit_t *e) {
    if (!t->re_digit) {
        s_bpe_regex(t, s, p, n, e);
        return;
    }
    /* digits first: each \p{N} character is a word of its own, the rest between them is
     * pre-tokenized separately (so the regex's look-ahead stops at a digit) */
    size_t off = 0;
    while (off < n && !s->oom) {
        int rc = pcre2_match(t->re_digit, (PCRE2_SPTR)p, n, off, 0, s->md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0)
            break;
        if (m0 > off)
            s_bpe_regex(t, s, p + off, m0 - off, e);
        s_bpe_word(t, s, p + m0, m1 - m0, e);
        off = m1;
    }
    if (off < n)
        s_bpe_regex(t, s, p + off, n - off, e);
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
    if (self->re_main) {
        s.md = pcre2_match_data_create_from_pattern(self->re_main, NULL);
        if (!s.md)
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
    if (s.md)
        pcre2_match_data_free(s.md);
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

typedef struct {
    char *p;    /* NUL-terminated */
    size_t n;   /* length */
    size_t cap; /* capacity */
    bool oom;   /* an append failed */
} sbuf_t;

static void s_put(sbuf_t *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void s_puts(sbuf_t *b, const char *s) {
    s_put(b, s, s ? strlen(s) : 0);
}

/* s without leading and trailing whitespace (Jinja's trim / Python's strip, ASCII). */
static void s_put_trimmed(sbuf_t *b, const char *s) {
    if (!s)
        return;
    size_t n = strlen(s), i = 0;
    while (i < n && strchr(" \t\n\r\v\f", s[i]))
        i++;
    while (n > i && strchr(" \t\n\r\v\f", s[n - 1]))
        n--;
    s_put(b, s + i, n - i);
}

/* The rendered text does not include a BOS token's text (Llama 2/3 templates begin with
 * bos_token): encode it with add_bos = model_tokenizer_add_bos() to get the BOS id. */
char *model_tokenizer_chat(const model_tokenizer_t *self, const model_chat_msg_t *msgs, int n,
                           bool add_assistant) {
    if (!self || n < 0 || (n > 0 && !msgs) || self->chat == CHAT_NONE)
        return NULL;
    sbuf_t b = {0};
    s_put(&b, "", 0);
    switch (self->chat) {
    case CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            if (i == 0 && self->chat_default_system &&
                (!msgs[0].role || strcmp(msgs[0].role, "system") != 0)) {
                s_puts(&b, "<|im_start|>system\n");
                s_puts(&b, self->chat_default_system);
                s_puts(&b, "<|im_end|>\n");
            }
            s_puts(&b, "<|im_start|>");
            s_puts(&b, msgs[i].role);
            s_puts(&b, "\n");
            s_puts(&b, msgs[i].content);
            s_puts(&b, "<|im_end|>\n");
        }
        if (add_assistant)
            s_puts(&b, "<|im_start|>assistant\n");
        break;
    case CHAT_LLAMA3:
        for (int i = 0; i < n; i++) {
            s_puts(&b, "<|start_header_id|>");
            s_puts(&b, msgs[i].role);
            s_puts(&b, "<|end_header_id|>\n\n");
            s_put_trimmed(&b, msgs[i].content);
            s_puts(&b, "<|eot_id|>");
        }
        if (add_assistant)
            s_puts(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_GEMMA: {
        /* <start_of_turn>user\n...<end_of_turn>\n, the assistant's role called "model"; Gemma
         * has no system role: the system text (trimmed) opens the next user turn, followed by
         * a blank line; contents are trimmed */
        sbuf_t sys = {0};
        s_put(&sys, "", 0);
        for (int i = 0; i < n; i++) {
            const char *role = msgs[i].role ? msgs[i].role : "";
            if (!strcmp(role, "system")) {
                s_put_trimmed(&sys, msgs[i].content);
                continue;
            }
            bool model = !strcmp(role, "assistant") || !strcmp(role, "model");
            s_puts(&b, "<start_of_turn>");
            s_puts(&b, model ? "model" : role);
            s_puts(&b, "\n");
            if (sys.n > 0 && !model) {
                s_put(&b, sys.p, sys.n);
                s_puts(&b, "\n\n");
                sys.n = 0;
            }
            s_put_trimmed(&b, msgs[i].content);
            s_puts(&b, "<end_of_turn>\n");
        }
        if (sys.oom)
            b.oom = true;
        free(sys.p);
        if (add_assistant)
            s_puts(&b, "<start_of_turn>model\n");
        break;
    }
    case CHAT_LLAMA2: {
        /* [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST] */
        const char *sys = NULL;
        bool open_inst = false, after_answer = false;
        for (int i = 0; i < n; i++) {
            const char *role = msgs[i].role ? msgs[i].role : "";
            if (!strcmp(role, "system")) {
                sys = msgs[i].content;
                continue;
            }
            if (!strcmp(role, "assistant")) {
                if (open_inst)
                    s_puts(&b, " [/INST]");
                s_puts(&b, " ");
                s_put_trimmed(&b, msgs[i].content);
                s_puts(&b, " </s>");
                open_inst = false;
                after_answer = true;
                continue;
            }
            if (after_answer)
                s_puts(&b, "<s>");
            if (open_inst)
                s_puts(&b, " [/INST]");
            s_puts(&b, "[INST] ");
            if (sys) {
                s_puts(&b, "<<SYS>>\n");
                s_put_trimmed(&b, sys);
                s_puts(&b, "\n<</SYS>>\n\n");
                sys = NULL;
            }
            s_put_trimmed(&b, msgs[i].content);
            open_inst = true;
            after_answer = false;
        }
        if (open_inst)
            s_puts(&b, " [/INST]");
        (void)add_assistant; /* the assistant turn simply follows [/INST] */
        break;
    }
    default:
        break;
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
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
