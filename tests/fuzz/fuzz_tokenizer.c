/* fuzz_tokenizer.c - libFuzzer target for the tokenizer (model/model_tokenizer.c): every
 * input is text, arbitrary bytes.  It is encoded with and without special-token parsing;
 * the ids are in range, the size query agrees with the encode, a short buffer is never
 * overrun; and the round trip holds where it must: the pieces join back to the input
 * byte for byte (special tokens rendered when they were parsed) whenever every input byte
 * has a token of its own, decode gives the input back when it holds no NUL, and the
 * incremental detokenizer does too for valid UTF-8.  Arbitrary ids decode without harm.
 * Vocabulary: the default model's (STRATA_MODEL, else ~/.cache/strata/models/...) when it
 * is there, else a small byte-level BPE built here (256 byte tokens, a few merges, two
 * control tokens).  STRATA_FUZZ_VOCAB=small or =model forces one (model: exit 77 when it
 * is absent, 1 under CI=true).  Built by scripts/fuzz-tokenizer (libFuzzer) and by CMake
 * with fuzz_replay.c, which replays the seeds (tests/fuzz/seeds/tokenizer/). */
#include "model_gguf.h"
#include "model_gguf_write.h"
#include "model_tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define S_MAX_INPUT (64 << 10) /* longer inputs are cut: they find nothing new, slowly */

static model_tokenizer_t *s_tok; /* the vocabulary under test, made on the first input */
static int32_t s_n_vocab;
static bool s_has_token[256]; /* byte b alone encodes to pieces that join back to b */
static size_t s_longest;      /* the longest piece (a detokenizer buffer's need) */

/* The small vocabulary: the 256 byte tokens in GPT-2's byte-to-character mapping, then
 * merged tokens and two control tokens. */
static model_gguf_write_t *s_small_vocab(void) {
    static const char *merged[] = {"th", "the", "\xc4\xa0the", "in", "ing", "\xc4\xa0\xc4\xa0"};
    static const char *merges[] = {"t h", "th e", "\xc4\xa0 the",
                                   "i n", "in g", "\xc4\xa0 \xc4\xa0"};
    enum { N_MERGED = sizeof merged / sizeof merged[0], NV = 256 + N_MERGED + 2 };
    static char store[256][4];
    const char *toks[NV];
    int32_t types[NV];
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned cp = printable ? (unsigned)b : (unsigned)next++;
        if (cp < 0x80) {
            store[b][0] = (char)cp;
        } else {
            store[b][0] = (char)(0xC0 | (cp >> 6));
            store[b][1] = (char)(0x80 | (cp & 0x3F));
        }
        toks[b] = store[b];
        types[b] = 1; /* NORMAL */
    }
    for (int i = 0; i < N_MERGED; i++) {
        toks[256 + i] = merged[i];
        types[256 + i] = 1;
    }
    toks[NV - 2] = "<|user|>";
    toks[NV - 1] = "<|end|>";
    types[NV - 2] = types[NV - 1] = 3; /* CONTROL */
    model_gguf_write_t *w = model_gguf_write_new();
    if (!w || model_gguf_write_set_str(w, "tokenizer.ggml.model", "gpt2") ||
        model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", toks, NV) ||
        model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, NV, types) ||
        model_gguf_write_set_arr_str(w, "tokenizer.ggml.merges", merges, N_MERGED) ||
        model_gguf_write_set_u32(w, "tokenizer.ggml.eos_token_id", NV - 1))
        abort();
    return w;
}

/* The default model's path, or NULL when it is not there. */
static const char *s_model_path(void) {
    static char path[4096];
    const char *env = getenv("STRATA_MODEL");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    return access(path, R_OK) == 0 ? path : NULL;
}

static bool s_in_ci(void) {
    const char *ci = getenv("CI");
    return ci && (!strcasecmp(ci, "true") || !strcmp(ci, "1") || !strcasecmp(ci, "yes"));
}

static void s_open(void) {
    const char *want = getenv("STRATA_FUZZ_VOCAB");
    const char *model = s_model_path();
    char err[512] = "", tmp[] = "/tmp/fuzz-tokenizer-XXXXXX";
    if (want && !strcmp(want, "model") && !model) {
        printf("%s: the default model is absent (set STRATA_MODEL)\n", s_in_ci() ? "FAIL" : "SKIP");
        exit(s_in_ci() ? 1 : 77);
    }
    if (want && !strcmp(want, "small"))
        model = NULL;
    if (!model) {
        int fd = mkstemp(tmp);
        model_gguf_write_t *w = s_small_vocab();
        if (fd < 0 || model_gguf_write_save(w, tmp, err, sizeof err)) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err);
            abort();
        }
        close(fd);
        model_gguf_write_destroy(&w);
    }
    model_gguf_t *g = model_gguf_open(model ? model : tmp, err, sizeof err);
    if (!model)
        unlink(tmp);
    if (!g || !(s_tok = model_tokenizer_new(g, err, sizeof err))) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    model_gguf_destroy(&g);
    printf("fuzz_tokenizer: %s vocabulary\n", model ? model : "the small");
    s_n_vocab = model_tokenizer_n_vocab(s_tok);
    for (int32_t id = 0; id < s_n_vocab; id++) {
        size_t len = 0;
        if (model_tokenizer_piece(s_tok, id, true, &len) && len > s_longest)
            s_longest = len;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t ids[8];
        int n = model_tokenizer_encode(s_tok, &c, 1, false, false, ids, 8);
        size_t len = 0;
        const char *p = n == 1 ? model_tokenizer_piece(s_tok, ids[0], false, &len) : NULL;
        s_has_token[b] = p && len == 1 && p[0] == c;
    }
}

static bool s_valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80             ? 1
                   : (c & 0xE0) == 0xC0 ? 2
                   : (c & 0xF0) == 0xE0 ? 3
                   : (c & 0xF8) == 0xF0 ? 4
                                        : 0;
        if (!k || i + k > n || (k == 2 && c < 0xC2) || (k == 4 && c > 0xF4))
            return false;
        uint32_t cp = k == 1 ? c : c & (0x3F >> (k - 1));
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k;
    }
    return true;
}

/* Encode text; checks the size query, the ids' range and a short buffer.  Returns the
 * malloc'd ids (*n of them). */
static int32_t *s_encode(const char *text, size_t len, bool special, int *n) {
    int need = model_tokenizer_encode(s_tok, text, len, false, special, NULL, 0);
    if (need < 0 || (len > 0 && need == 0 && s_has_token[(uint8_t)text[0]]))
        abort(); /* text whose first byte has a token gives at least one id */
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    if (!ids)
        abort();
    int half = need / 2;
    ids[half] = -7; /* a canary after a short buffer */
    if (model_tokenizer_encode(s_tok, text, len, false, special, ids, half) != need ||
        ids[half] != -7)
        abort(); /* a short buffer gets the same count and is not overrun */
    if (model_tokenizer_encode(s_tok, text, len, false, special, ids, need) != need)
        abort();
    for (int i = 0; i < need; i++)
        if (ids[i] < 0 || ids[i] >= s_n_vocab)
            abort();
    *n = need;
    return ids;
}

/* The pieces of ids joined: equal to text? */
static bool s_pieces_equal(const int32_t *ids, int n, bool render_special, const char *text,
                           size_t len) {
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t pl = 0;
        const char *p = model_tokenizer_piece(s_tok, ids[i], render_special, &pl);
        if (!p || at + pl > len || memcmp(text + at, p, pl))
            return false;
        at += pl;
    }
    return at == len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!s_tok)
        s_open();
    size_t len = size < S_MAX_INPUT ? size : S_MAX_INPUT;
    const char *text = (const char *)data;
    bool every_byte = true, no_nul = true;
    for (size_t i = 0; i < len; i++) {
        every_byte &= s_has_token[data[i]];
        no_nul &= data[i] != 0;
    }
    int n = 0, ns = 0;
    int32_t *ids = s_encode(text, len, false, &n);
    int32_t *sids = s_encode(text, len, true, &ns);
    if (every_byte) {
        /* special-token text stays text when not parsed: the pieces are the bytes */
        if (!s_pieces_equal(ids, n, false, text, len))
            abort();
        /* parsed, a special token's piece is its text when rendered */
        if (!s_pieces_equal(sids, ns, true, text, len))
            abort();
        char *back = model_tokenizer_decode(s_tok, ids, n);
        if (!back || (no_nul && (strlen(back) != len || memcmp(back, text, len))))
            abort();
        free(back);
        if (s_valid_utf8(data, len)) { /* streamed: the same bytes, none held back */
            size_t cap = 64 + s_longest + 8, at = 0;
            char *out = malloc(cap), *all = malloc(len + 1);
            if (!out || !all)
                abort();
            model_detok_t d;
            model_detok_init(&d, s_tok);
            for (int i = 0; i <= n; i++) {
                int k = i < n ? model_detok_push(&d, ids[i], out, cap)
                              : model_detok_flush(&d, out, cap);
                if (k < 0 || at + (size_t)k > len || memcmp(text + at, out, (size_t)k))
                    abort();
                memcpy(all + at, out, (size_t)k);
                at += (size_t)k;
            }
            if (at != len)
                abort();
            free(all);
            free(out);
        }
    }
    free(ids);
    free(sids);
    /* the input as ids: in range they decode, out of range they have no piece */
    int m = (int)(len / 4);
    int32_t *raw = malloc(((size_t)m + 1) * sizeof *raw);
    if (!raw)
        abort();
    for (int i = 0; i < m; i++) {
        uint32_t v;
        memcpy(&v, data + 4 * (size_t)i, 4);
        raw[i] = (int32_t)(v % (uint32_t)s_n_vocab);
        size_t pl;
        if (model_tokenizer_piece(s_tok, (int32_t)v, true, &pl) && (v >= (uint32_t)s_n_vocab))
            abort();
    }
    free(model_tokenizer_decode(s_tok, raw, m));
    free(raw);
    return 0;
}
