/* test_tokenizer.c - the tokenizer: known encodings of SmolLM2's byte-level BPE (ids from
 * the `tokenizers` library, an independent implementation), special tokens, the ChatML
 * template, UTF-8-safe incremental detokenization, round trips, 100 KB inputs; and, on tiny
 * GGUFs written here, SentencePiece BPE, the pre-tokenizer regexes, other chat styles and
 * bad metadata.
 */
#include "model_gguf.h"
#include "model_gguf_write.h"
#include "model_pretok.h"
#include "model_tokenizer.h"
#include "test_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers --------------------------------------------------------------------------- */

/* The default model's tokenizer (the "smollm2" tcase runs only when the model is there). */
static model_tokenizer_t *s_open_model(void) {
    const char *path = test_model_path();
    ck_assert_msg(path, "the default model is gone");
    char err[512] = "";
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    ck_assert_msg(g, "open %s: %s", path, err);
    model_tokenizer_t *t = model_tokenizer_new(g, err, sizeof err);
    ck_assert_msg(t, "tokenizer: %s", err);
    model_gguf_destroy(&g); /* the tokenizer keeps its own copy */
    return t;
}

#define OPEN_MODEL(t) model_tokenizer_t *t = s_open_model()

/* Encode text and compare with the expected ids. */
static void s_expect(model_tokenizer_t *t, const char *text, bool special, const int32_t *want,
                     int n_want) {
    int32_t got[256];
    int n = model_tokenizer_encode(t, text, strlen(text), false, special, got, 256);
    ck_assert_msg(n == n_want, "'%s': %d ids, want %d", text, n, n_want);
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "'%s': id %d is %d, want %d", text, i, got[i], want[i]);
}

/* Encode into a malloc'd buffer sized by a first call; *n receives the count. */
static int32_t *s_encode(const model_tokenizer_t *t, const char *text, size_t len, bool bos,
                         bool special, int *n) {
    int need = model_tokenizer_encode(t, text, len, bos, special, NULL, 0);
    ck_assert_int_ge(need, 0);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(need + 1));
    ck_assert_ptr_nonnull(ids);
    *n = model_tokenizer_encode(t, text, len, bos, special, ids, need);
    ck_assert_int_eq(*n, need);
    return ids;
}

/* ---- SmolLM2 (byte-level BPE, pre = smollm) ---------------------------------------------- */

START_TEST(test_metadata) {
    OPEN_MODEL(t);
    ck_assert_int_eq(model_tokenizer_n_vocab(t), 49152);
    ck_assert_int_eq(model_tokenizer_bos(t), 1);
    ck_assert_int_eq(model_tokenizer_eos(t), 2);
    ck_assert(!model_tokenizer_add_bos(t));
    ck_assert(model_tokenizer_is_eog(t, 2)); /* <|im_end|>, the EOS */
    ck_assert(model_tokenizer_is_eog(t, 0)); /* <|endoftext|> */
    ck_assert(!model_tokenizer_is_eog(t, 1));
    ck_assert(!model_tokenizer_is_eog(t, 19556));
    ck_assert(!model_tokenizer_is_eog(t, -1));
    ck_assert(!model_tokenizer_is_eog(t, 49152));
    model_tokenizer_destroy(&t);
    ck_assert_ptr_null(t);
    model_tokenizer_destroy(&t); /* safe twice */
}
END_TEST

START_TEST(test_known_encodings) {
    OPEN_MODEL(t);
    /* expected ids: HF `tokenizers` BPE built from this GGUF's vocab and merges, with
     * Sequence[Digits(individual_digits), ByteLevel] as SmolLM2's tokenizer.json has */
    static const int32_t hello[] = {19556, 905};
    s_expect(t, "Hello world", true, hello, 2);
    static const int32_t mixed[] = {504, 713, 216,   34,    32,  34,    36,    42,
                                    216, 33,  34,    13855, 28,  37366, 1456,  17097,
                                    241, 115, 40993, 179,   120, 248,   47526, 17};
    s_expect(t,
             "The year 2024: 12 apples, caf\xc3\xa9 & \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
             "\xf0\x9f\x99\x82!",
             true, mixed, 24);
    static const int32_t code[] = {1604, 275, 24, 104, 727, 472, 1003, 1792, 216, 907, 2294, 1116};
    s_expect(t, "def f(x):\n    return x  # done\n\n", true, code, 12);
    s_expect(t, "", true, NULL, 0);

    /* add_bos prepends BOS even where the metadata does not ask for it */
    int32_t ids[8];
    int n = model_tokenizer_encode(t, "Hello world", 11, true, true, ids, 8);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 19556);

    /* a short buffer: the count needed comes back, only max_out ids are written */
    ids[1] = -7;
    n = model_tokenizer_encode(t, "Hello world", 11, false, true, ids, 1);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 19556);
    ck_assert_int_eq(ids[1], -7);
    ck_assert_int_lt(model_tokenizer_encode(t, "x", 1, false, true, NULL, 5), 0);
    model_tokenizer_destroy(&t);
}
END_TEST

START_TEST(test_special_tokens) {
    OPEN_MODEL(t);
    const char *text = "<|im_start|>user\nHi<|im_end|>\n";
    static const int32_t parsed[] = {1, 4093, 198, 26843, 2, 198};
    s_expect(t, text, true, parsed, 6);
    static const int32_t plain[] = {44,    108, 306, 79,  3738, 108, 46,  4093, 198,
                                    26843, 44,  108, 306, 79,   486, 108, 46,   198};
    s_expect(t, text, false, plain, 18);

    /* pieces: control tokens show only when asked */
    size_t len = 99;
    const char *p = model_tokenizer_piece(t, 2, false, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(len, 0);
    p = model_tokenizer_piece(t, 2, true, &len);
    ck_assert_uint_eq(len, 10);
    ck_assert(memcmp(p, "<|im_end|>", 10) == 0);
    p = model_tokenizer_piece(t, 905, false, &len); /* "Ġworld" */
    ck_assert_uint_eq(len, 6);
    ck_assert(memcmp(p, " world", 6) == 0);
    ck_assert_ptr_null(model_tokenizer_piece(t, -1, false, &len));
    ck_assert_ptr_null(model_tokenizer_piece(t, 49152, true, &len));

    /* decode drops control tokens */
    char *s = model_tokenizer_decode(t, parsed, 6);
    ck_assert_str_eq(s, "user\nHi\n");
    free(s);
    model_tokenizer_destroy(&t);
}
END_TEST

START_TEST(test_chat_template) {
    OPEN_MODEL(t);
    /* what SmolLM2's Jinja template renders: the default system prompt is added when the
     * first message is not a system message */
    model_chat_msg_t m1[] = {{"user", "What is 2+2?"}};
    char *s = model_tokenizer_chat(t, m1, 1, true);
    ck_assert_str_eq(s, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                        "trained by Hugging Face<|im_end|>\n"
                        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n");
    int n = 0;
    int32_t *ids = s_encode(t, s, strlen(s), model_tokenizer_add_bos(t), true, &n);
    static const int32_t want[] = {1,    9690, 198,   2683, 359,  253,  5356, 5646,  11173, 3365,
                                   3511, 308,  34519, 28,   7018, 411,  407,  19712, 8182,  2,
                                   198,  1,    4093,  198,  1780, 314,  216,  34,    27,    34,
                                   47,   2,    198,   1,    520,  9531, 198};
    ck_assert_int_eq(n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(ids[i], want[i]);
    free(ids);
    free(s);

    model_chat_msg_t m2[] = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
    s = model_tokenizer_chat(t, m2, 4, false);
    ck_assert_str_eq(s, "<|im_start|>system\nBe brief.<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\nHello!<|im_end|>\n"
                        "<|im_start|>user\nBye<|im_end|>\n");
    free(s);
    s = model_tokenizer_chat(t, NULL, 0, true); /* no messages: only the opener */
    ck_assert_str_eq(s, "<|im_start|>assistant\n");
    free(s);
    model_tokenizer_destroy(&t);
}
END_TEST

START_TEST(test_detok_utf8) {
    OPEN_MODEL(t);
    /* U+0663 (2 bytes) is two byte tokens; U+1F642 alone is several */
    const char *text = "a\xd9\xa3 \xf0\x9f\x99\x82\xf0\x9f\x99\x82 \xe6\x97\xa5";
    int n = 0;
    int32_t *ids = s_encode(t, text, strlen(text), false, true, &n);
    ck_assert_int_gt(n, 4);
    model_detok_t d;
    model_detok_init(&d, t);
    char out[256], all[256] = "";
    int split_seen = 0;
    for (int i = 0; i < n; i++) {
        int w = model_detok_push(&d, ids[i], out, sizeof out);
        ck_assert_int_eq(w, (int)strlen(out));
        /* every chunk is valid UTF-8 on its own: it never ends inside a character */
        for (int k = 0; k < w;) {
            unsigned char c = (unsigned char)out[k];
            int cl = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            ck_assert_msg(k + cl <= w, "chunk %d splits a character", i);
            for (int j = 1; j < cl; j++)
                ck_assert(((unsigned char)out[k + j] & 0xC0) == 0x80);
            k += cl;
        }
        if (w == 0)
            split_seen++;
        strcat(all, out);
    }
    ck_assert_int_gt(split_seen, 0); /* some token ended mid-character and was held */
    ck_assert_int_eq(model_detok_flush(&d, out, sizeof out), 0);
    ck_assert_str_eq(all, text);

    /* an unfinished character at the end comes out as U+FFFD on flush */
    model_detok_init(&d, t);
    ck_assert_int_eq(model_detok_push(&d, ids[1], out, sizeof out), 0); /* first byte of U+0663 */
    ck_assert_int_eq(model_detok_flush(&d, out, sizeof out), 3);
    ck_assert_str_eq(out, "\xef\xbf\xbd");
    /* ... and one interrupted by an ASCII token too */
    model_detok_init(&d, t);
    model_detok_push(&d, ids[1], out, sizeof out);
    int w = model_detok_push(&d, ids[0], out, sizeof out); /* "a" */
    ck_assert_int_eq(w, 4);
    ck_assert_str_eq(out, "\xef\xbf\xbd"
                          "a");
    free(ids);
    model_tokenizer_destroy(&t);
}
END_TEST

START_TEST(test_roundtrip) {
    OPEN_MODEL(t);
    const char *texts[] = {
        "Hello world",
        "  leading and trailing  \n\n\ttabs\r\nCRLF",
        "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x91\x8d\xf0\x9f\x8f"
        "\xbd 1234567",
        "<|im_start|>not parsed when special is off<|im_end|>",
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int n = 0;
        int32_t *ids = s_encode(t, texts[k], strlen(texts[k]), false, false, &n);
        char *back = model_tokenizer_decode(t, ids, n);
        ck_assert_str_eq(back, texts[k]);
        free(back);
        free(ids);
    }
    /* arbitrary bytes, invalid UTF-8 included, come back exactly */
    uint64_t rs = 42;
    for (int iter = 0; iter < 50; iter++) {
        char buf[300];
        size_t len = 1 + test_rand_u64(&rs) % 299;
        for (size_t i = 0; i < len; i++) {
            uint64_t r = test_rand_u64(&rs);
            /* bytes SmolLM2 has tokens for (it lacks 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF) */
            unsigned b = r % 4 == 0 ? 0x80 + r % 0x71 : r % 3 == 0 ? ' ' : 0x21 + r % 94;
            buf[i] = (char)(b == 0xC0 || b == 0xC1 ? 0xC2 : b);
        }
        int n = 0;
        int32_t *ids = s_encode(t, buf, len, false, true, &n);
        size_t blen = 0;
        for (int i = 0; i < n; i++) {
            size_t pl;
            const char *p = model_tokenizer_piece(t, ids[i], true, &pl);
            ck_assert_ptr_nonnull(p);
            ck_assert(blen + pl <= len && memcmp(buf + blen, p, pl) == 0);
            blen += pl;
        }
        ck_assert_uint_eq(blen, len);
        free(ids);
    }
    model_tokenizer_destroy(&t);
}
END_TEST

/* 100 KB of prose and one 100 KB "word" (the worst case for merging): both encode and
 * come back byte-exact.  How fast is not asserted here (a shared machine makes any bound
 * flaky); a merge that went quadratic shows as the test's CTest timeout. */
START_TEST(test_long_inputs) {
    OPEN_MODEL(t);
    size_t len = 100 * 1024;
    char *text = malloc(len + 1);
    ck_assert_ptr_nonnull(text);
    const char *para = "The quick brown fox jumps over the lazy dog 12345 times; "
                       "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82\n";
    size_t pl = strlen(para);
    for (size_t i = 0; i < len; i++)
        text[i] = para[i % pl];
    while (len > 0 && ((unsigned char)text[len - 1] & 0xC0) == 0x80)
        len--; /* do not end mid-character (harmless either way) */
    text[len] = 0;
    int n = 0, n_para = 0;
    int32_t *ids = s_encode(t, text, len, false, true, &n);
    int32_t *one = s_encode(t, para, pl, false, true, &n_para);
    /* the paragraph repeats: so do its ids, about len / pl times */
    ck_assert_int_ge(n, (int)(len / pl) * (n_para - 2));
    ck_assert_int_le(n, (int)(len / pl + 1) * (n_para + 2));
    char *back = model_tokenizer_decode(t, ids, n);
    ck_assert_uint_eq(strlen(back), len);
    ck_assert(memcmp(back, text, len) == 0);
    free(back);
    free(one);
    free(ids);

    memset(text, 'a', len);
    text[len] = 0;
    ids = s_encode(t, text, len, false, true, &n);
    ck_assert_int_gt(n, 1);
    ck_assert_int_lt(n, (int)len / 2); /* merged: far fewer ids than bytes */
    back = model_tokenizer_decode(t, ids, n);
    ck_assert_uint_eq(strlen(back), len);
    ck_assert(memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    free(text);
    model_tokenizer_destroy(&t);
}
END_TEST

/* ---- tiny synthetic GGUFs ------------------------------------------------------------------ */

static char s_tmp[256];

static const char *s_tmp_path(const char *tag) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/strata_test_tok_%d_%s.gguf", (int)getpid(), tag);
    return s_tmp;
}

/* Save w to a temporary GGUF and build a tokenizer from it; err receives the reason when
 * that fails. */
static model_tokenizer_t *s_from_writer(model_gguf_write_t *w, const char *tag, char *err,
                                        size_t errlen) {
    const char *path = s_tmp_path(tag);
    int rc = model_gguf_write_save(w, path, err, errlen);
    ck_assert_msg(rc == 0, "write %s: %s", path, err);
    model_gguf_t *g = model_gguf_open(path, err, errlen);
    ck_assert_msg(g, "reopen %s: %s", path, err);
    model_tokenizer_t *t = model_tokenizer_new(g, err, errlen);
    model_gguf_destroy(&g);
    unlink(path);
    return t;
}

/* A byte-level vocabulary: the 256 byte tokens (in GPT-2's byte->char mapping), then
 * "34", then <|eot|> (CONTROL); one merge "3 4". */
static model_gguf_write_t *s_gpt2_writer(const char *pre) {
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_ptr_nonnull(w);
    static char store[258][8];
    const char *toks[258];
    int32_t types[258];
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned cp = printable ? (unsigned)b : (unsigned)next++;
        if (cp < 0x80) {
            store[b][0] = (char)cp;
            store[b][1] = 0;
        } else {
            store[b][0] = (char)(0xC0 | (cp >> 6));
            store[b][1] = (char)(0x80 | (cp & 0x3F));
            store[b][2] = 0;
        }
        toks[b] = store[b];
        types[b] = 1;
    }
    toks[256] = "34";
    types[256] = 1;
    toks[257] = "<|eot|>";
    types[257] = 3;
    const char *merges[] = {"3 4"};
    model_gguf_write_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        model_gguf_write_set_str(w, "tokenizer.ggml.pre", pre);
    model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", toks, 258);
    model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, 258, types);
    model_gguf_write_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    model_gguf_write_set_u32(w, "tokenizer.ggml.eos_token_id", 257);
    return w;
}

/* The words of a split, as test_pretok_table collects them. */
typedef struct {
    int n;
    char words[16][16];
} words_t;

/* model_pretok_split's word callback for test_pretok_table: copies each word. */
static bool s_collect_word(void *ctx, const char *word, size_t len) {
    words_t *got = ctx;
    ck_assert_int_lt(got->n, 16);
    ck_assert_uint_lt(len, 16);
    memcpy(got->words[got->n], word, len);
    got->words[got->n++][len] = '\0';
    return true;
}

START_TEST(test_pretokenizers) {
    /* "12345": gpt2 keeps the digits one word (3 and 4 merge); llama3 splits them 123|45
     * and smollm isolates each digit, so they do not */
    struct {
        const char *pre;
        int n;
    } cases[] = {{"gpt2", 4},  {NULL, 4},     {"llama-bpe", 5},  {"smollm", 5},
                 {"qwen2", 5}, {"refact", 5}, {"no-such-pre", 4}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        model_gguf_write_t *w = s_gpt2_writer(cases[k].pre);
        char err[256] = "";
        model_tokenizer_t *t = s_from_writer(w, "pre", err, sizeof err);
        ck_assert_msg(t, "%s: %s", cases[k].pre ? cases[k].pre : "(none)", err);
        int32_t ids[16];
        int n = model_tokenizer_encode(t, "12345", 5, false, true, ids, 16);
        ck_assert_msg(n == cases[k].n, "pre %s: %d ids", cases[k].pre, n);
        ck_assert(model_tokenizer_is_eog(t, 257));
        ck_assert_int_eq(model_tokenizer_bos(t), -1);
        ck_assert(!model_tokenizer_add_bos(t));
        n = model_tokenizer_encode(t, "1<|eot|>", 8, true, true, ids, 16); /* no BOS to add */
        ck_assert_int_eq(n, 2);
        ck_assert_int_eq(ids[1], 257);
        ck_assert_ptr_null(model_tokenizer_chat(t, NULL, 0, true)); /* no template */
        model_tokenizer_destroy(&t);
        model_gguf_write_destroy(&w);
    }
}
END_TEST

START_TEST(test_pretok_table) {
    /* every name of every row selects that row, and no other row has it */
    int n_rows = 0;
    for (const model_pretok_row_t *r = model_pretok_rows; r->names[0]; r++, n_rows++) {
        ck_assert_ptr_nonnull(r->regex);
        for (int i = 0; i < 4 && r->names[i]; i++) {
            bool known = false;
            ck_assert_ptr_eq(model_pretok_find(r->names[i], &known), r);
            ck_assert(known);
        }
    }
    ck_assert_int_ge(n_rows, 4);
    bool known = true;
    ck_assert_ptr_eq(model_pretok_find(NULL, &known), &model_pretok_rows[0]); /* no key */
    ck_assert(known);
    ck_assert_ptr_eq(model_pretok_find("no-such-pre", &known), &model_pretok_rows[0]);
    ck_assert(!known);
    /* a split covers the text exactly, word after word */
    char err[256] = "";
    model_pretok_t *p = model_pretok_new("llama3", err, sizeof err);
    ck_assert_msg(p, "%s", err);
    model_pretok_match_t *m = model_pretok_match_new(p);
    ck_assert_ptr_nonnull(m);
    static const char text[] = "Hello world's 12345!\n\n  x";
    static const char *want[] = {"Hello", " world", "'s", " ", "123", "45", "!\n\n", " ", " x"};
    words_t got = {0};
    model_pretok_split(p, m, text, sizeof text - 1, s_collect_word, &got);
    ck_assert_int_eq(got.n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < got.n; i++)
        ck_assert_str_eq(got.words[i], want[i]);
    model_pretok_match_destroy(&m);
    model_pretok_destroy(&p);
    model_pretok_destroy(&p); /* safe twice */
}
END_TEST

/* A SentencePiece vocabulary: <unk> <s> </s>, the 256 <0xNN> byte tokens, then pieces. */
static model_gguf_write_t *s_spm_writer(void) {
    static const char *pieces[] = {"\xe2\x96\x81",
                                   "h",
                                   "e",
                                   "l",
                                   "o",
                                   "w",
                                   "r",
                                   "d",
                                   "\xe2\x96\x81h",
                                   "ll",
                                   "llo",
                                   "\xe2\x96\x81he",
                                   "\xe2\x96\x81hello",
                                   "or",
                                   "\xe2\x96\x81w",
                                   "\xe2\x96\x81wor",
                                   "ld",
                                   "\xe2\x96\x81world",
                                   "<|user|>"};
    enum { NP = sizeof pieces / sizeof pieces[0], NV = 3 + 256 + NP };
    static char bytes[256][8];
    const char *toks[NV];
    int32_t types[NV];
    float scores[NV];
    toks[0] = "<unk>", types[0] = 2, scores[0] = 0;
    toks[1] = "<s>", types[1] = 3, scores[1] = 0;
    toks[2] = "</s>", types[2] = 3, scores[2] = 0;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
        scores[3 + b] = 0;
    }
    for (int i = 0; i < NP; i++) {
        toks[259 + i] = pieces[i];
        types[259 + i] = 1;
        scores[259 + i] = -(float)i; /* earlier pieces merge first */
    }
    types[NV - 1] = 4; /* <|user|>: user-defined, always matched */
    model_gguf_write_t *w = model_gguf_write_new();
    ck_assert_ptr_nonnull(w);
    model_gguf_write_set_str(w, "tokenizer.ggml.model", "llama");
    model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", toks, NV);
    model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, NV, types);
    model_gguf_write_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, NV, scores);
    model_gguf_write_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    model_gguf_write_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    model_gguf_write_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    return w;
}

START_TEST(test_sentencepiece) {
    model_gguf_write_t *w = s_spm_writer();
    model_gguf_write_set_str(
        w, "tokenizer.chat_template",
        "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}");
    char err[256] = "";
    model_tokenizer_t *t = s_from_writer(w, "spm", err, sizeof err);
    ck_assert_msg(t, "%s", err);
    ck_assert(model_tokenizer_add_bos(t)); /* SentencePiece default */
    ck_assert(model_tokenizer_is_eog(t, 2));

    /* "hello world" -> [<s>] ▁hello ▁world (the space prefix is added) */
    int32_t ids[64];
    int n = model_tokenizer_encode(t, "hello world", 11, true, true, ids, 64);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 259 + 12);
    ck_assert_int_eq(ids[2], 259 + 17);
    char *s = model_tokenizer_decode(t, ids, n);
    ck_assert_str_eq(s, "hello world"); /* BOS hidden, the added space removed */
    free(s);

    /* byte fallback: é is not a piece, so <0xC3> <0xA9> */
    n = model_tokenizer_encode(t, "h\xc3\xa9", 3, false, true, ids, 64);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 259 + 8); /* ▁h */
    ck_assert_int_eq(ids[1], 3 + 0xC3);
    ck_assert_int_eq(ids[2], 3 + 0xA9);
    s = model_tokenizer_decode(t, ids, n);
    ck_assert_str_eq(s, "h\xc3\xa9");
    free(s);
    size_t pl;
    const char *p = model_tokenizer_piece(t, 3 + 0x41, false, &pl);
    ck_assert_uint_eq(pl, 1);
    ck_assert_int_eq(p[0], 'A');

    /* special tokens: </s> only when parsing specials, <|user|> always */
    n = model_tokenizer_encode(t, "</s><|user|>", 12, false, true, ids, 64);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 259 + 18);
    n = model_tokenizer_encode(t, "</s><|user|>", 12, false, false, ids, 64);
    ck_assert_int_gt(n, 2);
    ck_assert_int_eq(ids[n - 1], 259 + 18);

    /* Llama 2 chat style */
    model_chat_msg_t m[] = {
        {"system", "Sys"}, {"user", " Hi "}, {"assistant", "Yo"}, {"user", "Q"}};
    s = model_tokenizer_chat(t, m, 4, true);
    ck_assert_str_eq(s, "[INST] <<SYS>>\nSys\n<</SYS>>\n\nHi [/INST] Yo </s><s>[INST] Q [/INST]");
    free(s);
    model_tokenizer_destroy(&t);
    model_gguf_write_destroy(&w);
}
END_TEST

START_TEST(test_llama3_chat) {
    model_gguf_write_t *w = s_gpt2_writer("llama-bpe");
    model_gguf_write_set_str(w, "tokenizer.chat_template",
                             "{{ bos_token }}{% for m in messages %}<|start_header_id|>"
                             "{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
                             "<|eot_id|>{% endfor %}");
    char err[256] = "";
    model_tokenizer_t *t = s_from_writer(w, "l3", err, sizeof err);
    ck_assert_msg(t, "%s", err);
    model_chat_msg_t m[] = {{"system", "S"}, {"user", "Hi\n"}};
    char *s = model_tokenizer_chat(t, m, 2, true);
    ck_assert_str_eq(s, "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    model_tokenizer_destroy(&t);
    model_gguf_write_destroy(&w);
}
END_TEST

START_TEST(test_bad_metadata) {
    char err[256];
    /* no tokenizer keys at all */
    model_gguf_write_t *w = model_gguf_write_new();
    model_gguf_write_set_str(w, "general.architecture", "llama");
    err[0] = 0;
    model_tokenizer_t *t = s_from_writer(w, "none", err, sizeof err);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, "tokenizer.ggml.model"), "err: %s", err);
    /* a model kind we do not know */
    model_gguf_write_set_str(w, "tokenizer.ggml.model", "bert");
    t = s_from_writer(w, "bert", err, sizeof err);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, "bert"), "err: %s", err);
    /* gpt2 without tokens, then with tokens but no merges, then tokens of the wrong type */
    model_gguf_write_set_str(w, "tokenizer.ggml.model", "gpt2");
    t = s_from_writer(w, "notoks", err, sizeof err);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, "tokens"), "err: %s", err);
    const char *toks[] = {"a", "b", "ab"};
    model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    t = s_from_writer(w, "nomerges", err, sizeof err);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, "merges"), "err: %s", err);
    int32_t nums[3] = {1, 2, 3};
    model_gguf_write_set_arr(w, "tokenizer.ggml.tokens", GGUF_INT32, 3, nums);
    t = s_from_writer(w, "numtoks", err, sizeof err);
    ck_assert_ptr_null(t);
    /* merges naming unknown tokens and a short token_type array are survivable */
    model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    const char *merges[] = {"a b", "x y", "nospace"};
    model_gguf_write_set_arr_str(w, "tokenizer.ggml.merges", merges, 3);
    model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, 2, nums);
    model_gguf_write_set_u32(w, "tokenizer.ggml.bos_token_id", 99); /* out of range: none */
    t = s_from_writer(w, "odd", err, sizeof err);
    ck_assert_msg(t, "%s", err);
    ck_assert_int_eq(model_tokenizer_bos(t), -1);
    int32_t ids[8];
    int n = model_tokenizer_encode(t, "ab", 2, true, true, ids, 8);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 2);
    n = model_tokenizer_encode(t, "abc", 3, false, true, ids, 8); /* 'c' has no token: */
    ck_assert_int_eq(n, 1);                                       /* dropped */
    model_tokenizer_destroy(&t);
    model_gguf_write_destroy(&w);
    ck_assert_ptr_null(model_tokenizer_new(NULL, err, sizeof err));
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = test_tcase_model(s, "smollm2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_metadata);
    tcase_add_test(tc, test_known_encodings);
    tcase_add_test(tc, test_special_tokens);
    tcase_add_test(tc, test_chat_template);
    tcase_add_test(tc, test_detok_utf8);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_long_inputs);
    TCase *syn = tcase_create("synthetic");
    tcase_add_test(syn, test_pretokenizers);
    tcase_add_test(syn, test_pretok_table);
    tcase_add_test(syn, test_sentencepiece);
    tcase_add_test(syn, test_llama3_chat);
    tcase_add_test(syn, test_bad_metadata);
    suite_add_tcase(s, syn);
    return s;
}

TEST_MAIN(s_suite)
