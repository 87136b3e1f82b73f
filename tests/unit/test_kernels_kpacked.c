/* test_kernels_kpacked.c - the packed layout of the K-quants (Q4_K, Q5_K,
 * Q6_K; kern_cpu.h): pack + gemm_packed of the scalar reference against the
 * dequantize-then-dot product in double (within a stated tolerance), every
 * SIMD variant against the reference (bitwise), row ranges and batch
 * invariance.  STRATA_BENCH_KPACKED=1 also prints timings (medians) of the
 * packed and the unpacked K gemm of each table at two model shapes.
 */
#include "kernels/cpu/kern_cpu.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const kern_type_t s_ktypes[] = {KERN_Q4_K, KERN_Q5_K, KERN_Q6_K};
#define N_KTYPES ((int)(sizeof s_ktypes / sizeof s_ktypes[0]))

typedef void (*s_gemm_packed_fn)(kern_type_t wt, int64_t k, int r0, int nr, int nc,
                                 const void *packed, const void *x, size_t x_stride, float *out,
                                 size_t out_stride);

/* The packed K gemm of table i of KERN_ISA_LIST (0 .. N_VARIANTS-1, the
 * reference first), called directly whether or not the table's packed_size
 * offers the type (the ymm tables leave Q6_K unpacked); NULL where this CPU
 * cannot run it. */
static s_gemm_packed_fn s_variant(int i, const char **name) {
    const kern_ops_t *ops = kern_ops_isa(i);
    *name = kern_isa_name(i);
    return ops ? ops->gemm_packed : NULL;
}
#define N_VARIANTS KERN_ISA_COUNT

/* Rows of weights: kind 0 random in [-1, 1), 1 all positive (large minimums),
 * 2 with outliers, 3 zero rows between random ones. */
static void s_make_w(uint64_t *rng, kern_type_t t, int64_t k, int nr, uint8_t *w, size_t ws,
                     float *wf) {
    float *row = malloc(sizeof(float) * (size_t)k);
    ck_assert_ptr_nonnull(row);
    for (int r = 0; r < nr; r++) {
        const int kind = (int)(test_rand_u64(rng) % 4);
        for (int64_t i = 0; i < k; i++) {
            float v = test_rand_f32(rng, -1, 1);
            if (kind == 1)
                v = 0.5f + v * 0.25f;
            else if (kind == 2 && test_rand_u64(rng) % 61 == 0)
                v *= 40;
            else if (kind == 3 && r % 2)
                v = 0;
            row[i] = v;
        }
        kern_ops_ref()->quant_row(t, row, w + (size_t)r * ws, k);
        kern_ops_ref()->dequant_row(t, w + (size_t)r * ws, wf + (size_t)r * k, k);
    }
    free(row);
}

static void s_make_x(uint64_t *rng, int64_t k, int nc, uint8_t *x, size_t xs, float *xf) {
    float *col = malloc(sizeof(float) * (size_t)k);
    ck_assert_ptr_nonnull(col);
    for (int c = 0; c < nc; c++) {
        for (int64_t i = 0; i < k; i++)
            col[i] = test_rand_f32(rng, -1, 1) * (c % 3 == 2 ? 20.0f : 1.0f);
        if (c % 5 == 4)
            col[(size_t)(c * 37) % (size_t)k] = 300.0f;
        kern_ops_ref()->quant_row(KERN_Q8_K, col, x + (size_t)c * xs, k);
        kern_ops_ref()->dequant_row(KERN_Q8_K, x + (size_t)c * xs, xf + (size_t)c * k, k);
    }
    free(col);
}

/* The minimum part dmin * m_u of each of the k values of a Q4_K / Q5_K row
 * (value = d * sc_u * q - dmin * m_u), 0 for Q6_K: a value's magnitude for
 * the tolerance is |value + part| + part, as the minimum can cancel most of it. */
static void s_min_part(kern_type_t t, const uint8_t *row, int64_t k, float *mp) {
    for (int64_t b = 0; b < k / 256; b++)
        for (int u = 0; u < 8; u++) {
            float v = 0;
            if (t != KERN_Q6_K) {
                const kern_block_q4_K *b4 = (const kern_block_q4_K *)row + b;
                const kern_block_q5_K *b5 = (const kern_block_q5_K *)row + b;
                uint8_t sc, m;
                kern_k4_scale_min(u, t == KERN_Q4_K ? b4->scales : b5->scales, &sc, &m);
                v = kern_f16_to_f32(t == KERN_Q4_K ? b4->dmin : b5->dmin) * (float)m;
            }
            for (int l = 0; l < 32; l++)
                mp[256 * b + 32 * u + l] = v;
        }
}

static void *s_pack(kern_type_t t, int64_t k, int nr, const uint8_t *w, size_t ws) {
    const size_t n = kern_ops_ref()->packed_size(t, k, nr);
    ck_assert_uint_eq(n, (size_t)((nr + 15) / 16) * (size_t)(k / 256) * (size_t)kern_kpk_rec(t));
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    ck_assert_ptr_nonnull(p);
    kern_ops_ref()->pack(t, k, nr, w, ws, p);
    return p;
}

/* Worst |packed - exact| / sum mag |x| seen, printed at the end for the record. */
static double s_worst;

/* The tolerance against the dequantize-then-dot product in double: the packed
 * gemm rounds d * dx, dmin * dx, each super-block's integer sums to float and
 * two FMAs per super-block, and the dequantized values are themselves rounded
 * (d * sc and dmin * m to float, then one product and one difference), so the
 * error is a few float ulps of the magnitude per super-block:
 *   |packed - exact| <= 1e-6 * (k / 256 + 4) * sum_i mag_i |x_i|  (+ 1e-30)
 * with mag_i = |w_i + dmin m_i| + dmin m_i (|w_i| for Q6_K). */
static double s_tol(int64_t k, double mag) {
    return 1e-6 * (double)(k / 256 + 4) * mag + 1e-30;
}

static void s_check(kern_type_t t, int64_t k, int nr, int nc, uint64_t seed) {
    uint64_t rng = seed;
    const char *tn = kern_type_traits((int)t)->name;
    const size_t ws = kern_row_size(t, k) + 16 * (seed & 1);
    const size_t xs = kern_row_size(KERN_Q8_K, k) + 4 * (seed & 2);
    const size_t os = (size_t)nr + (seed & 1);
    uint8_t *w = malloc(ws * nr), *x = malloc(xs * nc);
    float *wf = malloc(sizeof(float) * (size_t)k * nr),
          *xf = malloc(sizeof(float) * (size_t)k * nc);
    float *o_ref = malloc(sizeof(float) * os * nc), *o = malloc(sizeof(float) * os * nc);
    ck_assert(w && x && wf && xf && o_ref && o);
    float *mp = malloc(sizeof(float) * (size_t)k * nr);
    ck_assert_ptr_nonnull(mp);
    s_make_w(&rng, t, k, nr, w, ws, wf);
    s_make_x(&rng, k, nc, x, xs, xf);
    for (int r = 0; r < nr; r++)
        s_min_part(t, w + (size_t)r * ws, k, mp + (size_t)r * k);
    void *pk = s_pack(t, k, nr, w, ws);
    for (size_t i = 0; i < os * nc; i++)
        o_ref[i] = -12345.0f;
    kern_ops_ref()->gemm_packed(t, k, 0, nr, nc, pk, x, xs, o_ref, os);
    for (int c = 0; c < nc; c++) {
        for (int r = 0; r < nr; r++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                const double wv = wf[(size_t)r * k + i], m = mp[(size_t)r * k + i];
                const double xv = xf[(size_t)c * k + i];
                exact += wv * xv;
                mag += (fabs(wv + m) + m) * fabs(xv);
            }
            const double got = o_ref[(size_t)c * os + r], err = fabs(got - exact);
            ck_assert_msg(err <= s_tol(k, mag),
                          "packed %s k %lld nr %d nc %d (%d,%d): %.9g vs exact %.9g (tol %g)", tn,
                          (long long)k, nr, nc, r, c, got, exact, s_tol(k, mag));
            if (mag > 0 && err / mag > s_worst)
                s_worst = err / mag;
        }
        if (os > (size_t)nr)
            ck_assert_float_eq(o_ref[(size_t)c * os + nr], -12345.0f);
    }
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        const char *name;
        s_gemm_packed_fn fn = s_variant(vi, &name);
        if (!fn)
            continue;
        if (vi > 0) {
            for (size_t i = 0; i < os * nc; i++)
                o[i] = -12345.0f;
            fn(t, k, 0, nr, nc, pk, x, xs, o, os);
            ck_assert_msg(!memcmp(o, o_ref, sizeof(float) * os * nc),
                          "%s packed %s k %lld nr %d nc %d: not bitwise equal to the reference",
                          name, tn, (long long)k, nr, nc);
        }
        /* row ranges that start on a group: the same bits as the whole */
        for (int r0 = 16; r0 < nr; r0 += 16) {
            const int n = nr - r0 > 21 ? 21 : nr - r0;
            fn(t, k, r0, n, nc, pk, x, xs, o, os);
            for (int c = 0; c < nc; c++)
                ck_assert_msg(
                    !memcmp(o + (size_t)c * os, o_ref + (size_t)c * os + r0, sizeof(float) * n),
                    "%s packed %s rows %d+%d column %d differ", name, tn, r0, n, c);
        }
    }
    free(pk);
    free(w), free(x), free(wf), free(xf), free(o_ref), free(o), free(mp);
}

START_TEST(test_kpacked_gemm) {
    const kern_type_t t = s_ktypes[_i];
    static const int shapes[][2] = {{1, 1},  {16, 1}, {17, 3},  {5, 9},
                                    {33, 8}, {48, 7}, {40, 13}, {23, 37}};
    static const int64_t ks[] = {256, 3 * 256, 6 * 256, 16 * 256};
    uint64_t seed = 7000 + (uint64_t)_i * 131;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (ks[ki] > 6 * 256 && shapes[s][0] * shapes[s][1] > 200)
                continue; /* the double-precision check is slow */
            s_check(t, ks[ki], shapes[s][0], shapes[s][1], seed++);
        }
    /* more than one pass over k (8 super-blocks) with a partial last one, with
     * several column tiles (passes outermost) and with one (groups outermost) */
    s_check(t, 11 * 256, 20, 6, seed++);
    s_check(t, 11 * 256, 20, 1, seed++);
    /* the models' k: d_model 2048 and 3072, d_ff 8192; decode (1 column) and a few */
    s_check(t, 2048, 32, 1, seed++);
    s_check(t, 3072, 40, 1, seed++);
    s_check(t, 3072, 17, 3, seed++);
    s_check(t, 8192, 24, 1, seed++);
    s_check(t, 8192, 16, 2, seed++);
    fprintf(stderr, "kpacked %s: worst |packed - exact| / sum mag|x| = %.3g\n",
            kern_type_traits((int)t)->name, s_worst);
}
END_TEST

/* Every column of a packed gemm is bitwise the column computed alone, for
 * nc 1..37 at many offsets, and for any row range. */
START_TEST(test_kpacked_batch_invariant) {
    const kern_type_t t = s_ktypes[_i];
    const int64_t k = 1536;
    const int nr = 45, ncmax = 37;
    uint64_t rng = 4242 + (uint64_t)_i;
    const size_t wb = kern_row_size(t, k), xb = kern_row_size(KERN_Q8_K, k);
    uint8_t *w = malloc(wb * nr), *x = malloc(xb * ncmax);
    float *wf = malloc(sizeof(float) * k * nr), *xf = malloc(sizeof(float) * k * ncmax);
    float *alone = malloc(sizeof(float) * nr * ncmax), *batch = malloc(sizeof(float) * nr * ncmax);
    ck_assert(w && x && wf && xf && alone && batch);
    s_make_w(&rng, t, k, nr, w, wb, wf);
    s_make_x(&rng, k, ncmax, x, xb, xf);
    void *pk = s_pack(t, k, nr, w, wb);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        const char *name;
        s_gemm_packed_fn fn = s_variant(vi, &name);
        if (!fn)
            continue;
        for (int c = 0; c < ncmax; c++)
            fn(t, k, 0, nr, 1, pk, x + (size_t)c * xb, xb, alone + (size_t)c * nr, nr);
        const int step = vi == 0 ? 9 : 1; /* the scalar reference is slow: fewer widths */
        for (int nc = 1; nc <= ncmax; nc += step)
            for (int c0 = 0; c0 + nc <= ncmax; c0 += (nc > 8 ? 5 : 1)) {
                fn(t, k, 0, nr, nc, pk, x + (size_t)c0 * xb, xb, batch, nr);
                ck_assert_msg(!memcmp(batch, alone + (size_t)c0 * nr, sizeof(float) * nr * nc),
                              "%s packed %s: columns differ at nc=%d offset %d", name,
                              kern_type_traits((int)t)->name, nc, c0);
                if (vi == 0)
                    break;
            }
        fn(t, k, 16, nr - 16, ncmax, pk, x, xb, batch, nr);
        for (int c = 0; c < ncmax; c++)
            ck_assert(!memcmp(batch + (size_t)c * nr, alone + (size_t)c * nr + 16,
                              sizeof(float) * (nr - 16)));
    }
    free(pk);
    free(w), free(x), free(wf), free(xf), free(alone), free(batch);
}
END_TEST

/* The layout itself, on hand-made Q4_K and Q5_K rows: a byte of qs, a scale,
 * a minimum and a high bit land where kern_cpu.h says. */
START_TEST(test_kpacked_layout) {
    kern_block_q4_K b[2];
    memset(b, 0, sizeof b);
    b[1].qs[4 * 9 + 2] = 0xA5;             /* step 9, byte 2 */
    b[1].scales[3] = 17 | (2 << 6);        /* sc[3] = 17, top bits of sc[7] = 2 */
    b[1].scales[8 + 3] = 0x4 | (0x9 << 4); /* sc[7] low 4 bits 4, m[7] low 4 bits 9 */
    b[1].d = kern_f32_to_f16(0.5f);
    b[1].dmin = kern_f32_to_f16(0.25f);
    uint8_t *p = s_pack(KERN_Q4_K, 256, 2, (const uint8_t *)b, sizeof b[0]);
    /* row 1 (b[1]) is lane 1 of group 0's only record */
    const int sco = kern_kpk_sc_off(KERN_Q4_K), dof = kern_kpk_d_off(KERN_Q4_K);
    const int qs9 = 320 + 64 * 9; /* after the head of 5 lines */
    ck_assert_uint_eq(p[qs9 + 4 + 2], 0xA5);
    ck_assert_uint_eq(p[sco + 16 * 3 + 1], 17);
    ck_assert_uint_eq(p[sco + 16 * 7 + 1], 4 | (2 << 4));
    ck_assert_uint_eq(p[sco + 128 + 16 * 7 + 1], 9);
    uint16_t d;
    memcpy(&d, p + dof + 2, 2);
    ck_assert_uint_eq(d, b[1].d);
    memcpy(&d, p + dof + 32 + 2, 2);
    ck_assert_uint_eq(d, b[1].dmin);
    ck_assert_uint_eq(p[qs9 + 8 + 2], 0); /* lane 2: a padding row */
    ck_assert_uint_eq(p[qs9 + 2], 0);     /* lane 0: b[0], all zero */
    free(p);

    /* Q5_K: element 64 + 6 (chunk 1, step 9, byte 2) has its fifth bit in
     * qh[6] bit 2; steps 8..11 are 4 qs lines and then their high-bit vector,
     * where step 9's low nibbles take bit 2 */
    kern_block_q5_K b5[2];
    memset(b5, 0, sizeof b5);
    b5[1].qs[4 * 9 + 2] = 0x3C;
    b5[1].qh[6] = 1 << 2;
    p = s_pack(KERN_Q5_K, 256, 2, (const uint8_t *)b5, sizeof b5[0]);
    const int q5s9 = 320 + 64 * (5 * 2 + 1), q5h9 = 320 + 64 * (5 * 2 + 4);
    ck_assert_uint_eq(p[q5s9 + 4 + 2], 0x3C);
    ck_assert_uint_eq(p[q5h9 + 4 + 2], 1 << 2);
    for (int i = 0; i < 64; i++) /* no other high bit is set */
        ck_assert_uint_eq(p[q5h9 + i], i == 6 ? 1 << 2 : 0);
    free(p);
}
END_TEST

/* ---- timing (STRATA_BENCH_KPACKED=1) ------------------------------------ */

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int s_cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of reps calls (after one warm-up) of the packed (pk) or the
 * unpacked (pk NULL) gemm of ops / fn. */
static double s_time(const kern_ops_t *ops, s_gemm_packed_fn fn, kern_type_t t, int64_t k, int nr,
                     int nc, const uint8_t *w, size_t ws, const void *pk, const uint8_t *x,
                     size_t xs, float *out, int reps) {
    double ts[32];
    for (int i = -1; i < reps; i++) {
        double t0 = s_now();
        if (pk)
            fn(t, k, 0, nr, nc, pk, x, xs, out, (size_t)nr);
        else
            ops->gemm(t, k, nr, nc, w, ws, x, xs, out, (size_t)nr);
        if (i >= 0)
            ts[i] = s_now() - t0;
    }
    qsort(ts, (size_t)reps, sizeof ts[0], s_cmpd);
    return ts[reps / 2];
}

START_TEST(test_kpacked_bench) {
    const char *e = getenv("STRATA_BENCH_KPACKED");
    if (!e || !*e || !strcmp(e, "0"))
        return;
    static const struct {
        int64_t k;
        int nr;
    } shapes[] = {{1536, 576}, {4096, 4096}};
    static const int ncs[] = {1, 64};
    for (size_t si = 0; si < 2; si++) {
        const int64_t k = shapes[si].k;
        const int nr = shapes[si].nr, ncmax = 64;
        uint64_t rng = 99;
        for (int ti = 0; ti < N_KTYPES; ti++) {
            const kern_type_t t = s_ktypes[ti];
            const size_t ws = kern_row_size(t, k), xs = kern_row_size(KERN_Q8_K, k);
            uint8_t *w = malloc(ws * nr), *x = malloc(xs * ncmax);
            float *row = malloc(sizeof(float) * k), *out = malloc(sizeof(float) * nr * ncmax);
            ck_assert(w && x && row && out);
            for (int r = 0; r < nr; r++) {
                for (int64_t i = 0; i < k; i++)
                    row[i] = test_rand_f32(&rng, -1, 1);
                kern_ops_ref()->quant_row(t, row, w + (size_t)r * ws, k);
            }
            for (int c = 0; c < ncmax; c++) {
                for (int64_t i = 0; i < k; i++)
                    row[i] = test_rand_f32(&rng, -1, 1);
                kern_ops_ref()->quant_row(KERN_Q8_K, row, x + (size_t)c * xs, k);
            }
            void *pk = s_pack(t, k, nr, w, ws);
            for (int vi = 1; vi < N_VARIANTS; vi++) {
                const char *name;
                s_gemm_packed_fn fn = s_variant(vi, &name);
                const kern_ops_t *ops = kern_ops_isa(vi);
                if (!fn || !ops)
                    continue;
                for (size_t ni = 0; ni < 2; ni++) {
                    const int nc = ncs[ni];
                    const int reps = nr * k > 4000000 ? (nc > 1 ? 5 : 15) : (nc > 1 ? 15 : 31);
                    double tu = s_time(ops, fn, t, k, nr, nc, w, ws, NULL, x, xs, out, reps);
                    double tp = s_time(ops, fn, t, k, nr, nc, w, ws, pk, x, xs, out, reps);
                    double gf = 2.0 * (double)k * nr * nc * 1e-9;
                    printf("bench %-6s %s k=%-5lld nr=%-5d nc=%-3d unpacked %9.1f us %7.1f GFLOP/s"
                           "  packed %9.1f us %7.1f GFLOP/s  x%.2f\n",
                           name, kern_type_traits((int)t)->name, (long long)k, nr, nc, tu * 1e6,
                           gf / tu, tp * 1e6, gf / tp, tu / tp);
                    fflush(stdout);
                }
            }
            free(pk);
            free(w), free(x), free(row), free(out);
        }
    }
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("kernels_kpacked");
    TCase *tc = tcase_create("kpacked");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_kpacked_layout);
    tcase_add_loop_test(tc, test_kpacked_gemm, 0, N_KTYPES);
    tcase_add_loop_test(tc, test_kpacked_batch_invariant, 0, N_KTYPES);
    tcase_add_test(tc, test_kpacked_bench);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
