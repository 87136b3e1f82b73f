/* test_kv_compress.c - in-sequence KV compression (kvstore/kv_compress.h) and its
 * compaction in T0 (kv_cache_compact).
 *
 * The policy: specs parse and print back, bad ones are refused with a reason; budgets and
 * the compaction schedule; the rows each policy keeps, against a brute-force choice from
 * the same weights (window: sinks + the last rows; h2o: sinks + recent + the heaviest of
 * the rest, ties to the earlier row; snapkv: max-pooled weights).  The cache: every
 * (layer, KV head) group's kept rows end up packed at the front of its slabs, K and V and
 * the INT8 scales alike; a block shared with another sequence or the prefix index is
 * copied first (the other reader still sees every position), or, with no free block, one
 * only the index holds is taken back from it; the compacted blocks are never published;
 * the invariants hold throughout. */
#include "kv_cache.h"
#include "kv_compress.h"
#include "kv_kivi.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_parse) {
    kv_compress_t c;
    char err[160], buf[KV_COMPRESS_SPEC_MAX];
    ck_assert_int_eq(kv_compress_parse("none", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.kind, KV_COMPRESS_NONE);
    ck_assert_int_eq(kv_compress_budget(&c, 100), 100);
    ck_assert_int_eq(kv_compress_parse("window:512", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.kind, KV_COMPRESS_WINDOW);
    ck_assert_int_eq(c.budget, 512);
    ck_assert_int_eq(c.n_sink, 4);
    ck_assert_int_eq(kv_compress_budget(&c, 100), 100);
    ck_assert_int_eq(kv_compress_budget(&c, 1000), 512);
    ck_assert_int_eq(kv_compress_parse("h2o:25%", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.kind, KV_COMPRESS_H2O);
    ck_assert_int_eq(kv_compress_budget(&c, 1000), 250);
    ck_assert_int_eq(kv_compress_budget(&c, 1001), 251); /* ceil */
    kv_compress_format(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "h2o:25%");
    ck_assert_int_eq(kv_compress_parse("snapkv:12.5%,recent=16,pool=5", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.recent, 16);
    ck_assert_int_eq(c.pool, 5);
    kv_compress_format(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "snapkv:12.5%,recent=16,pool=5");
    ck_assert_int_eq(kv_compress_parse("window:64,sink=8", &c, err, sizeof err), 0);
    kv_compress_format(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "window:64,sink=8");
    const char *bad[] = {"",
                         "lru:5",
                         "window",
                         "window:",
                         "window:0",
                         "h2o:100%",
                         "h2o:0%",
                         "h2o:-5",
                         "h2o:5x",
                         "window:64,recent=3",
                         "snapkv:64,sink=2",
                         "snapkv:64,pool=4",
                         "h2o:64,foo=1",
                         "window:4",
                         "h2o:50%,recent=0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        ck_assert_msg(kv_compress_parse(bad[i], &c, err, sizeof err) == -EINVAL, "'%s'", bad[i]);
        ck_assert_msg(strlen(err) > 10, "'%s': no reason given", bad[i]);
    }
}
END_TEST

START_TEST(test_target) {
    kv_compress_t c;
    ck_assert_int_eq(kv_compress_parse("window:64", &c, NULL, 0), 0);
    ck_assert_int_eq(kv_compress_target(&c, 64, 64, 10, true, 16), 64); /* within budget */
    ck_assert_int_eq(kv_compress_target(&c, 65, 65, 10, true, 16), 49); /* 64 - 15 */
    ck_assert_int_eq(kv_compress_target(&c, 1000, 1000, 1000, true, 1), 64);
    ck_assert_int_eq(kv_compress_target(&c, 1000, 1000, 1200, false, 1), 1000); /* prompt */
    ck_assert_int_eq(kv_compress_parse("h2o:50%", &c, NULL, 0), 0);
    ck_assert_int_eq(kv_compress_target(&c, 100, 200, 10, true, 16), 100);
    ck_assert_int_eq(kv_compress_target(&c, 101, 200, 10, true, 16), 85);
    ck_assert_int_eq(kv_compress_weights_from(&c, 300), 0);
    /* snapkv: once, when the prompt has run and nothing was generated yet */
    ck_assert_int_eq(kv_compress_parse("snapkv:100", &c, NULL, 0), 0);
    ck_assert_int_eq(kv_compress_target(&c, 300, 300, 300, false, 16), 300);
    ck_assert_int_eq(kv_compress_target(&c, 300, 300, 300, true, 16), 100);
    ck_assert_int_eq(kv_compress_target(&c, 101, 301, 300, true, 16), 101);
    ck_assert_int_eq(kv_compress_weights_from(&c, 300), 268);
    ck_assert(!kv_compress_wants_weights(&(kv_compress_t){.kind = KV_COMPRESS_WINDOW}));
}
END_TEST

/* Brute force: is row r among the k heaviest of [lo, hi) (ties: earlier rows first)? */
static bool s_heavy(const float *w, int lo, int hi, int k, int r) {
    int better = 0;
    for (int j = lo; j < hi; j++)
        if (w[j] > w[r] || (w[j] == w[r] && j < r))
            better++;
    return better < k;
}

START_TEST(test_select) {
    enum { G = 3, ROWS = 50, KEEP = 20 };
    uint64_t rng = 7;
    float w[G * 64], pooled[64];
    for (int i = 0; i < G * 64; i++)
        w[i] = (float)(test_rand_u64(&rng) % 13); /* many ties */
    int32_t keep[G * KEEP];
    void *tmp = malloc(kv_compress_tmp_bytes(ROWS));
    kv_compress_t c;
    /* window: sinks 0..3, then the last 16 */
    ck_assert_int_eq(kv_compress_parse("window:20", &c, NULL, 0), 0);
    ck_assert_int_eq(kv_compress_select(&c, G, ROWS, KEEP, NULL, 0, keep, tmp), 0);
    for (int g = 0; g < G; g++)
        for (int i = 0; i < KEEP; i++)
            ck_assert_int_eq(keep[g * KEEP + i], i < 4 ? i : ROWS - KEEP + i);
    /* h2o: sink 2, recent 6, the 12 heaviest of rows 2 .. 43 */
    ck_assert_int_eq(kv_compress_parse("h2o:20,sink=2,recent=6", &c, NULL, 0), 0);
    ck_assert_int_eq(kv_compress_select(&c, G, ROWS, KEEP, w, 64, keep, tmp), 0);
    for (int g = 0; g < G; g++) {
        const float *wg = w + g * 64;
        int n = 0;
        for (int r = 0; r < ROWS; r++) {
            bool want = r < 2 || r >= ROWS - 6 || s_heavy(wg, 2, ROWS - 6, 12, r);
            if (want)
                ck_assert_int_eq(keep[g * KEEP + n++], r);
        }
        ck_assert_int_eq(n, KEEP);
    }
    /* snapkv: the observation window (last 8) and the 12 best max-pooled (width 3) */
    ck_assert_int_eq(kv_compress_parse("snapkv:20,recent=8,pool=3", &c, NULL, 0), 0);
    ck_assert_int_eq(kv_compress_select(&c, G, ROWS, KEEP, w, 64, keep, tmp), 0);
    for (int g = 0; g < G; g++) {
        const float *wg = w + g * 64;
        for (int r = 0; r < ROWS - 8; r++) {
            pooled[r] = wg[r];
            if (r > 0 && wg[r - 1] > pooled[r])
                pooled[r] = wg[r - 1];
            if (r + 1 < ROWS - 8 && wg[r + 1] > pooled[r])
                pooled[r] = wg[r + 1];
        }
        int n = 0;
        for (int r = 0; r < ROWS; r++)
            if (r >= ROWS - 8 || s_heavy(pooled, 0, ROWS - 8, 12, r))
                ck_assert_int_eq(keep[g * KEEP + n++], r);
        ck_assert_int_eq(n, KEEP);
    }
    /* the weights follow their rows */
    float moved[G * 64];
    memcpy(moved, w, sizeof w);
    kv_compress_move_weights(moved, 64, G, KEEP, keep, ROWS);
    for (int g = 0; g < G; g++)
        for (int i = 0; i < 64; i++)
            ck_assert(moved[g * 64 + i] == (i < KEEP ? w[g * 64 + keep[g * KEEP + i]] : 0));
    /* bad arguments */
    ck_assert_int_eq(kv_compress_select(&c, G, ROWS, KEEP, NULL, 64, keep, tmp), -EINVAL);
    ck_assert_int_eq(kv_compress_select(&c, G, ROWS, ROWS + 1, w, 64, keep, tmp), -EINVAL);
    free(tmp);
}
END_TEST

/* ---- compaction in T0: 2 layers, 2 KV heads, head_dim 4, blocks of 4 */

enum { L = 2, H = 2, D = 4, BS = 4 };

/* The value of element i of group (l, h)'s K (kv 0) or V (kv 1) at position p. */
static float s_val(int l, int h, int kv, int p, int i) {
    return (float)(((l * H + h) * 2 + kv) * 1000 + p * 4 + i) / 64.0f;
}

static uint8_t *s_rowp(kv_cache_t *kc, const kv_seq_t *q, int l, int h, int kv, int r,
                       float **scale) {
    const kern_kv_pool_t *pool = kv_cache_pool(kc);
    size_t slab = kern_kv_slab_bytes(pool->type, BS, D);
    uint8_t *base = pool->base + (size_t)q->blocks[r / BS] * pool->block_bytes +
                    ((size_t)(l * 2 + kv) * H + h) * slab;
    size_t elt = pool->type == KERN_F32 ? 4 : pool->type == KERN_F16 ? 2 : 1;
    *scale = pool->type == KERN_I8 ? (float *)(base + (size_t)BS * D + 4 * (r % BS)) : NULL;
    return base + (size_t)(r % BS) * D * elt;
}

/* Write positions [p0, p1) of q at rows [p0, p1). */
static void s_write(kv_cache_t *kc, const kv_seq_t *q, int p0, int p1) {
    for (int p = p0; p < p1; p++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                for (int kv = 0; kv < 2; kv++) {
                    float *sc, x[D];
                    uint8_t *row = s_rowp(kc, q, l, h, kv, p, &sc);
                    for (int i = 0; i < D; i++)
                        x[i] = s_val(l, h, kv, p, i);
                    if (sc) {
                        *sc = kern_i8_quant_row(x, (int8_t *)row, D);
                    } else {
                        memcpy(row, x, sizeof x);
                    }
                }
}

/* Row r of group (l, h) of q holds position p (every element, K and V). */
static void s_expect(kv_cache_t *kc, const kv_seq_t *q, int l, int h, int r, int p) {
    for (int kv = 0; kv < 2; kv++) {
        float *sc;
        uint8_t *row = s_rowp(kc, q, l, h, kv, r, &sc);
        for (int i = 0; i < D; i++) {
            float got = sc ? ((int8_t *)row)[i] * *sc : ((float *)row)[i];
            float want = s_val(l, h, kv, p, i);
            ck_assert_msg(fabsf(got - want) <= (sc ? fabsf(want) / 100 + 0.01f : 0),
                          "group (%d, %d) %s row %d element %d: %g, want position %d's %g", l, h,
                          kv ? "V" : "K", r, i, got, p, want);
        }
    }
}

static void s_check(kv_cache_t *kc, const kv_seq_t *a, const kv_seq_t *b) {
    char err[200];
    const kv_seq_t *seqs[2] = {a, b};
    int rc = kv_cache_check(kc, seqs, b ? 2 : 1, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
}

static void s_compact_case(int fmt) {
    kern_kv_shape_t shape = {L, H, D, BS};
    kv_cache_config_t cc = {fmt, BS, 32, KV_POLICY_LRU, true, NULL};
    kv_cache_t *kc = kv_cache_new(&shape, &cc);
    ck_assert_ptr_nonnull(kc);
    int32_t toks[24];
    for (int i = 0; i < 24; i++)
        toks[i] = 100 + i;
    /* sequence a: 24 positions, published (the prefix index holds its 6 blocks) */
    kv_seq_t a = {0}, b = {0};
    ck_assert_int_eq(kv_cache_reserve(kc, &a, 0, 24), 0);
    s_write(kc, &a, 0, 24);
    ck_assert_int_eq(kv_cache_publish(kc, &a, toks, 24, false, 0), 0);
    /* sequence b attaches the first 20 and writes 20..23 itself */
    ck_assert_int_eq(kv_cache_attach_prefix(kc, &b, toks, 21), 20);
    ck_assert_int_eq(kv_cache_reserve(kc, &b, 20, 24), 0);
    s_write(kc, &b, 20, 24);
    s_check(kc, &a, &b);
    /* b keeps, per group g, rows 0..5 and six more that differ between groups */
    enum { KEEP = 12 };
    int32_t keep[L * H * KEEP];
    for (int g = 0; g < L * H; g++) {
        const int32_t rest[6] = {6 + g, 11 + g, 16, 19, 21, 23};
        for (int i = 0; i < KEEP; i++)
            keep[g * KEEP + i] = i < 6 ? i : rest[i - 6];
    }
    ck_assert_int_eq(kv_cache_compact(kc, &b, 24, KEEP, keep), 0);
    ck_assert_int_eq(b.n, KEEP / BS);
    ck_assert(b.compacted);
    ck_assert_int_eq(b.n_exact, 1); /* rows 0..5 exact: block 0 only (block 1 changed) */
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < KEEP; i++)
                s_expect(kc, &b, l, h, i, keep[(l * H + h) * KEEP + i]);
    /* a still sees every position: the shared blocks were copied before the moves */
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int p = 0; p < 24; p++)
                s_expect(kc, &a, l, h, p, p);
    s_check(kc, &a, &b);
    /* b's compacted blocks are not published, whatever it asks */
    kv_cache_stats_t st0 = kv_cache_stats(kc);
    int32_t other[12];
    for (int i = 0; i < 12; i++)
        other[i] = 900 + i;
    ck_assert_int_eq(kv_cache_publish(kc, &b, other, 12, true, 0), 0);
    ck_assert_int_eq(b.n_published, 1);
    ck_assert_int_eq(kv_cache_match(kc, other, 12), 0);
    kv_cache_stats_t st1 = kv_cache_stats(kc);
    ck_assert_int_eq(st1.n_cached + st1.n_used, st0.n_cached + st0.n_used);
    s_check(kc, &a, &b);
    /* appending after compaction: rows KEEP.. are fresh */
    ck_assert_int_eq(kv_cache_reserve(kc, &b, KEEP, KEEP + 5), 0);
    s_check(kc, &a, &b);
    /* bad keep lists change nothing */
    int32_t bad[L * H * 4] = {0, 2, 1, 3};
    ck_assert_int_eq(kv_cache_compact(kc, &b, KEEP, 4, bad), -EINVAL);
    ck_assert_int_eq(kv_cache_compact(kc, &b, 99, 4, keep), -EINVAL);
    kv_cache_release(kc, &a);
    kv_cache_release(kc, &b);
    s_check(kc, NULL, NULL);
    kv_cache_destroy(&kc);
}

/* No free block for a copy: the blocks the moves write into, held by the index alone, are
 * taken back from it instead (the prefix cache loses them; nothing is allocated). */
START_TEST(test_compact_full_pool) {
    kern_kv_shape_t shape = {L, H, D, BS};
    kv_cache_config_t cc = {KV_FMT_F32, BS, 6, KV_POLICY_LRU, true, NULL};
    kv_cache_t *kc = kv_cache_new(&shape, &cc);
    int32_t toks[24];
    for (int i = 0; i < 24; i++)
        toks[i] = 7 + i;
    kv_seq_t a = {0};
    ck_assert_int_eq(kv_cache_reserve(kc, &a, 0, 24), 0);
    s_write(kc, &a, 0, 24);
    ck_assert_int_eq(kv_cache_publish(kc, &a, toks, 24, false, 0), 0);
    ck_assert_int_eq(kv_cache_stats(kc).n_free, 0);
    ck_assert_int_eq(kv_cache_match(kc, toks, 24), 24);
    enum { KEEP = 12 };
    int32_t keep[L * H * KEEP];
    for (int g = 0; g < L * H; g++)
        for (int i = 0; i < KEEP; i++)
            keep[g * KEEP + i] = i < 6 ? i : 12 + i; /* rows 0..5, 18..23 */
    ck_assert_int_eq(kv_cache_compact(kc, &a, 24, KEEP, keep), 0);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < KEEP; i++)
                s_expect(kc, &a, l, h, i, keep[i]);
    ck_assert_int_eq(kv_cache_stats(kc).cow_copies, 0);
    ck_assert_int_eq(kv_cache_match(kc, toks, 24), 4); /* block 0 is still there */
    s_check(kc, &a, NULL);
    kv_cache_release(kc, &a);
    s_check(kc, NULL, NULL);
    kv_cache_destroy(&kc);
}
END_TEST

START_TEST(test_compact_f32) {
    s_compact_case(KV_FMT_F32);
}
END_TEST

START_TEST(test_compact_i8) {
    s_compact_case(KV_FMT_I8);
}
END_TEST

/* KIVI's quantizer: specs; keys per channel and values per group, each within half a
 * step of its group's range (scale = (max - min) / (2^bits - 1), F16 rounded), the ends
 * of every group's range kept, a constant group exact; 2 bits coarser than 4. */
START_TEST(test_kivi) {
    kv_kivi_t k;
    char err[160], buf[64];
    ck_assert_int_eq(kv_kivi_parse("kivi4", &k, err, sizeof err), 0);
    ck_assert(k.bits == 4 && k.residual == 32 && k.v_group == 32);
    ck_assert_int_eq(kv_kivi_parse("kivi2,residual=64,group=16", &k, err, sizeof err), 0);
    ck_assert(k.bits == 2 && k.residual == 64 && k.v_group == 16);
    kv_kivi_format(&k, buf, sizeof buf);
    ck_assert_str_eq(buf, "kivi2,residual=64,group=16");
    const char *bad[] = {"kivi3",         "kivi",        "kivi4,", "kivi4,residual=-1",
                         "kivi4,group=0", "kivi4,foo=2", "kivi44"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(kv_kivi_parse(bad[i], &k, err, sizeof err) == -EINVAL, "%s", bad[i]);
    enum { N = 16, DD = 64 };
    uint64_t rng = 3;
    double err_sum[2] = {0, 0};
    for (int bits = 4, bi = 0; bits >= 2; bits -= 2, bi++) {
        float x[N * DD], y[N * DD];
        for (int i = 0; i < N * DD; i++)
            x[i] = y[i] = test_rand_f32(&rng, -3, 3) * (i % DD == 5 ? 20 : 1); /* an outlier
                                                                                  channel */
        kv_kivi_keys(y, N, DD, DD, bits);
        for (int d = 0; d < DD; d++) {
            float mn = INFINITY, mx = -INFINITY;
            for (int r = 0; r < N; r++) {
                mn = fminf(mn, x[r * DD + d]);
                mx = fmaxf(mx, x[r * DD + d]);
            }
            float step = (mx - mn) / (float)((1 << bits) - 1);
            for (int r = 0; r < N; r++) {
                float e = fabsf(y[r * DD + d] - x[r * DD + d]);
                ck_assert_msg(e <= step * 0.5f * 1.01f + fabsf(mn) * 1e-3f + 1e-3f,
                              "bits %d channel %d row %d: error %g, step %g", bits, d, r, e, step);
                err_sum[bi] += e;
            }
        }
        float v[DD], w[DD];
        for (int i = 0; i < DD; i++)
            v[i] = w[i] = test_rand_f32(&rng, -1, 1);
        kv_kivi_values(w, DD, 32, bits);
        for (int g = 0; g < DD; g += 32) {
            float mn = INFINITY, mx = -INFINITY;
            for (int i = g; i < g + 32; i++)
                mn = fminf(mn, v[i]), mx = fmaxf(mx, v[i]);
            float step = (mx - mn) / (float)((1 << bits) - 1);
            for (int i = g; i < g + 32; i++)
                ck_assert(fabsf(w[i] - v[i]) <= step * 0.5f * 1.01f + 1e-3f);
        }
    }
    ck_assert(err_sum[1] > 2 * err_sum[0]); /* 2 bits are coarser */
    float c[32];
    for (int i = 0; i < 32; i++)
        c[i] = 0.75f;
    kv_kivi_values(c, 32, 32, 2);
    for (int i = 0; i < 32; i++)
        ck_assert(c[i] == 0.75f);
    k = (kv_kivi_t){4, 32, 32};
    /* 16 x 64 at 4 bits: codes 2 x 512, per-channel pairs 256, per (row, group) 16 x 2 x 4 */
    ck_assert_int_eq(kv_kivi_block_bytes(&k, 16, 64), 1024 + 256 + 128);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("kv_compress");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_target);
    tcase_add_test(tc, test_select);
    tcase_add_test(tc, test_compact_f32);
    tcase_add_test(tc, test_compact_full_pool);
    tcase_add_test(tc, test_kivi);
    tcase_add_test(tc, test_compact_i8);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
