/* test_kernels.c - the CPU kernels: type traits and conversions, the exact
 * GGUF block formats, quantization error bounds, the scalar reference against
 * plain float arithmetic, and every SIMD table against the scalar reference.
 */
#include "kern_ops.h"
#include "test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kern_type_t s_wtypes[] = {KERN_F32,  KERN_F16,  KERN_BF16, KERN_Q4_0,
                                       KERN_Q4_1, KERN_Q5_0, KERN_Q5_1, KERN_Q8_0,
                                       KERN_Q4_K, KERN_Q5_K, KERN_Q6_K};
#define N_WTYPES ((int)(sizeof s_wtypes / sizeof s_wtypes[0]))

/* The tables of KERN_ISA_LIST: s_all_tables(0 .. N_TABLES-1) is the table of
 * variant i, the reference first (KERN_ISA_scalar = 0), NULL where this CPU
 * cannot run it; s_simd_tables gives those this machine runs but the
 * reference, at most N_SIMD. */
#define N_TABLES KERN_ISA_COUNT
#define N_SIMD (N_TABLES - 1)
static const kern_ops_t *s_all_tables(int i) {
    return kern_ops_isa(i);
}

static int s_simd_tables(const kern_ops_t *t[N_SIMD]) {
    int n = 0;
    for (int i = 0; i < N_TABLES; i++)
        if (i != KERN_ISA_scalar && kern_ops_isa(i))
            t[n++] = kern_ops_isa(i);
    return n;
}

static void s_fill(uint64_t *rng, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        x[i] = test_rand_f32(rng, lo, hi);
}

static int s_bs(kern_type_t t) {
    return kern_type_traits((int)t)->block_size;
}

/* ---- traits and conversions ------------------------------------------- */

START_TEST(test_traits) {
    ck_assert_ptr_null(kern_type_traits(-1));
    ck_assert_ptr_null(kern_type_traits(4)); /* GGML's removed Q4_2 */
    ck_assert_ptr_null(kern_type_traits(KERN_TYPE_COUNT));
    ck_assert_int_eq(kern_type_traits(KERN_Q4_1)->vec_dot_type, KERN_Q8_1);
    ck_assert_int_eq(kern_type_traits(KERN_Q5_1)->vec_dot_type, KERN_Q8_1);
    ck_assert_int_eq(kern_type_traits(KERN_Q4_0)->vec_dot_type, KERN_Q8_0);
    ck_assert_int_eq(kern_type_traits(KERN_Q5_0)->vec_dot_type, KERN_Q8_0);
    ck_assert_int_eq(kern_type_traits(KERN_Q8_0)->vec_dot_type, KERN_Q8_0);
    ck_assert_int_eq(kern_type_traits(KERN_Q6_K)->vec_dot_type, KERN_Q8_K);
    ck_assert_int_eq(kern_type_traits(KERN_F16)->vec_dot_type, KERN_F32);
    ck_assert_int_eq(kern_type_traits(KERN_BF16)->vec_dot_type, KERN_F32);
    ck_assert(!kern_type_traits(KERN_Q8_K)->is_weight);
    ck_assert_str_eq(kern_type_traits(KERN_Q4_K)->name, "q4_K");
    ck_assert_uint_eq(kern_row_size(KERN_Q4_1, 576), 18 * 20);
    ck_assert_uint_eq(kern_row_size(KERN_Q6_K, 512), 2 * 210);
    ck_assert_uint_eq(kern_row_size(KERN_F16, 7), 14);
    ck_assert_ptr_nonnull(kern_ops_best());
    ck_assert_ptr_nonnull(kern_ops_ref());
    /* the list: names, the reference always there, kern_ops_best the last table
     * of the list that this CPU runs */
    ck_assert_str_eq(kern_isa_name(KERN_ISA_scalar), "scalar");
    ck_assert_ptr_eq(kern_ops_isa(KERN_ISA_scalar), kern_ops_ref());
    ck_assert_ptr_null(kern_isa_name(-1));
    ck_assert_ptr_null(kern_isa_name(KERN_ISA_COUNT));
    ck_assert_ptr_null(kern_ops_isa(KERN_ISA_COUNT));
    ck_assert_ptr_null(kern_ops_named("bogus"));
    ck_assert_ptr_eq(kern_ops_named("ref"), kern_ops_ref());
    const char *env = getenv("STRATA_KERNELS");
    char saved[32] = "";
    if (env)
        snprintf(saved, sizeof saved, "%s", env);
    unsetenv("STRATA_KERNELS");
    const kern_ops_t *best = kern_ops_best();
    const kern_ops_t *last = NULL;
    for (int i = 0; i < KERN_ISA_COUNT; i++) {
        const kern_ops_t *o = kern_ops_isa(i);
        ck_assert_ptr_nonnull(kern_isa_name(i));
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(kern_isa_name(i), kern_isa_name(j));
        ck_assert_ptr_eq(kern_ops_named(kern_isa_name(i)), o);
        if (o) {
            ck_assert_str_eq(o->name, kern_isa_name(i));
            last = o;
        }
        /* STRATA_KERNELS picks a table; one this CPU cannot run is ignored */
        setenv("STRATA_KERNELS", kern_isa_name(i), 1);
        ck_assert_ptr_eq(kern_ops_best(), o ? o : best);
    }
    ck_assert_ptr_eq(best, last);
    /* an unknown name is ignored too (with a warning that lists the names) */
    setenv("STRATA_KERNELS", "bogus", 1);
    ck_assert_ptr_eq(kern_ops_best(), best);
    unsetenv("STRATA_KERNELS");
    if (env)
        setenv("STRATA_KERNELS", saved, 1);
    /* the aliases of the names before the list */
    ck_assert_ptr_eq(kern_ops_avx2(), kern_ops_named("avx2"));
    ck_assert_ptr_eq(kern_ops_avxvnni(), kern_ops_named("avxvnni"));
    ck_assert_ptr_eq(kern_ops_avx512(), kern_ops_named("avx512"));
    /* the documented priority, independently of the list's order */
    if (kern_ops_avx512())
        ck_assert_ptr_eq(best, kern_ops_avx512());
    else if (kern_ops_avxvnni())
        ck_assert_ptr_eq(best, kern_ops_avxvnni());
    /* every table packs the 32-element block types */
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (ops)
            ck_assert_msg(ops->packed_size(KERN_Q4_1, 64, 16) > 0 && ops->pack && ops->gemm_packed,
                          "%s has no packed layout", ops->name);
    }
}
END_TEST

START_TEST(test_half) {
    /* every finite half survives half -> float -> half */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF))
            ck_assert(isnan(kern_f16_to_f32((kern_f16_t)h)));
        else
            ck_assert_uint_eq(kern_f32_to_f16(kern_f16_to_f32((kern_f16_t)h)), h);
    }
    ck_assert_float_eq(kern_f16_to_f32(0x3C00), 1.0f);
    ck_assert_float_eq(kern_f16_to_f32(0xC000), -2.0f);
    ck_assert_float_eq(kern_f16_to_f32(0x0001), 5.9604644775390625e-8f);
    ck_assert_uint_eq(kern_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(kern_f32_to_f16(65520.0f), 0x7C00);           /* ties to even: overflow */
    ck_assert_uint_eq(kern_f32_to_f16(1.0f + 1.0f / 2048), 0x3C00); /* tie -> even */
    ck_assert_uint_eq(kern_f32_to_f16(1.0f + 3.0f / 2048), 0x3C02); /* tie -> even */
    ck_assert_uint_eq(kern_f32_to_f16(2.98023223876953125e-8f), 0x0000); /* half of min: even */
    ck_assert_uint_eq(kern_f32_to_f16(4.0e-8f), 0x0001);
    ck_assert_uint_eq(kern_f32_to_f16(-0.0f), 0x8000);
    ck_assert(isnan(kern_f16_to_f32(kern_f32_to_f16(NAN))));
    /* bfloat16 rounds to nearest even */
    ck_assert_uint_eq(kern_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_float_eq(kern_bf16_to_f32(0xC040), -3.0f);
    float up, tie;
    uint32_t u = 0x3F808001u, t = 0x3F808000u;
    memcpy(&up, &u, 4);
    memcpy(&tie, &t, 4);
    ck_assert_uint_eq(kern_f32_to_bf16(up), 0x3F81);
    ck_assert_uint_eq(kern_f32_to_bf16(tie), 0x3F80);
    ck_assert(isnan(kern_bf16_to_f32(kern_f32_to_bf16(NAN))));
}
END_TEST

/* ---- exact GGUF block formats (hand-built blocks) ----------------------- */

START_TEST(test_format_simple) {
    const kern_ops_t *ref = kern_ops_ref();
    float y[32];
    kern_block_q4_0 b0 = {.d = kern_f32_to_f16(0.5f)};
    for (int j = 0; j < 16; j++)
        b0.qs[j] = (uint8_t)(j | (15 - j) << 4);
    ref->dequant_row(KERN_Q4_0, &b0, y, 32);
    for (int j = 0; j < 16; j++) {
        ck_assert_float_eq(y[j], 0.5f * (j - 8));
        ck_assert_float_eq(y[j + 16], 0.5f * (7 - j));
    }
    kern_block_q4_1 b1 = {.d = kern_f32_to_f16(2.0f), .m = kern_f32_to_f16(-1.0f)};
    memset(b1.qs, 0xF3, 16);
    ref->dequant_row(KERN_Q4_1, &b1, y, 32);
    ck_assert_float_eq(y[0], 5.0f);
    ck_assert_float_eq(y[16], 29.0f);
    /* Q5_0: bit j of qh (little-endian) is the fifth bit of element j */
    kern_block_q5_0 b5 = {.d = kern_f32_to_f16(1.0f), .qh = {0x01, 0x00, 0x02, 0x80}};
    memset(b5.qs, 0, 16);
    ref->dequant_row(KERN_Q5_0, &b5, y, 32);
    for (int j = 0; j < 32; j++) {
        float want = (j == 0 || j == 17 || j == 31) ? 0.0f : -16.0f;
        ck_assert_float_eq(y[j], want);
    }
    kern_block_q5_1 b51 = {
        .d = kern_f32_to_f16(1.0f), .m = kern_f32_to_f16(0.5f), .qh = {0xFF, 0xFF, 0xFF, 0xFF}};
    memset(b51.qs, 0xFF, 16);
    ref->dequant_row(KERN_Q5_1, &b51, y, 32);
    for (int j = 0; j < 32; j++)
        ck_assert_float_eq(y[j], 31.5f);
    kern_block_q8_0 b8 = {.d = kern_f32_to_f16(0.25f)};
    for (int j = 0; j < 32; j++)
        b8.qs[j] = (int8_t)(j * 8 - 128);
    ref->dequant_row(KERN_Q8_0, &b8, y, 32);
    for (int j = 0; j < 32; j++)
        ck_assert_float_eq(y[j], 0.25f * (j * 8 - 128));
}
END_TEST

START_TEST(test_format_kquants) {
    const kern_ops_t *ref = kern_ops_ref();
    float y[256];
    /* Q4_K: scales[0..3] low 6 bits = scale 0..3, scales[4..7] = min 0..3;
     * scale/min 4..7 take their low 4 bits from scales[8..11] and their top 2
     * bits from the top bits of scales[0..3] / scales[4..7]. */
    kern_block_q4_K k4;
    memset(&k4, 0, sizeof k4);
    k4.d = kern_f32_to_f16(1.0f);
    k4.dmin = kern_f32_to_f16(0.5f);
    k4.scales[0] = 3 | (1 << 6); /* sc0 = 3, sc4 high bits = 1 */
    k4.scales[4] = 2 | (2 << 6); /* m0 = 2, m4 high bits = 2 */
    k4.scales[8] = 5 | (7 << 4); /* sc4 low = 5, m4 low = 7 */
    k4.scales[1] = 9;            /* sc1 = 9 */
    for (int l = 0; l < 32; l++) {
        k4.qs[l] = (uint8_t)(1 | (2 << 4));      /* sub-block 0 (low) = 1, sub-block 1 = 2 */
        k4.qs[64 + l] = (uint8_t)(4 | (6 << 4)); /* sub-block 4 = 4, sub-block 5 = 6 */
    }
    ref->dequant_row(KERN_Q4_K, &k4, y, 256);
    ck_assert_float_eq(y[0], 3.0f * 1 - 0.5f * 2);
    ck_assert_float_eq(y[32], 9.0f * 2);
    /* sc4 = 5 | 1 << 4 = 21, m4 = 7 | 2 << 4 = 39 */
    ck_assert_float_eq(y[128], 21.0f * 4 - 0.5f * 39);
    ck_assert_float_eq(y[160], 0.0f);
    /* Q5_K: the fifth bit of element 64c + l is bit 2c of qh[l], of 64c + 32 + l bit 2c + 1 */
    kern_block_q5_K k5;
    memset(&k5, 0, sizeof k5);
    k5.d = kern_f32_to_f16(1.0f);
    for (int j = 0; j < 4; j++)
        k5.scales[j] = 1;
    k5.scales[8] = k5.scales[9] = k5.scales[10] = k5.scales[11] = 1;
    k5.qh[3] = 1 << 5;        /* element 2*64 + 32 + 3 = 163 */
    k5.qs[2 * 32 + 3] = 0x20; /* element 163 low bits 2 */
    ref->dequant_row(KERN_Q5_K, &k5, y, 256);
    for (int j = 0; j < 256; j++)
        ck_assert_float_eq(y[j], j == 163 ? 18.0f : 0.0f);
    /* Q6_K: element 128n + 32g + l: low 4 bits from ql[64n + l (+32 for g odd)]
     * (low nibble for g < 2), high 2 bits from qh[32n + l] bits 2g..2g+1; scale per 16 */
    kern_block_q6_K k6;
    memset(&k6, 0, sizeof k6);
    k6.d = kern_f32_to_f16(0.5f);
    for (int j = 0; j < 16; j++)
        k6.scales[j] = (int8_t)(j - 8);
    memset(k6.ql, 0, sizeof k6.ql);
    memset(k6.qh, 0xAA, sizeof k6.qh); /* high bits 2 for every element: q = 32 + low */
    k6.ql[64 + 32 + 5] = 0x70;         /* element 128 + 96 + 5 = 229: low 4 bits 7 */
    ref->dequant_row(KERN_Q6_K, &k6, y, 256);
    for (int j = 0; j < 256; j++) {
        float want = j == 229 ? 0.5f * (float)(j / 16 - 8) * 7.0f : 0.0f;
        ck_assert_float_eq(y[j], want);
    }
}
END_TEST

/* ---- quantization error ------------------------------------------------- */

/* RMS error of dequant(quant(x)) relative to RMS(x), for x uniform in [-1, 1). */
static const struct {
    kern_type_t t;
    double rel_rms;
} s_qerr[] = {
    {KERN_F16, 5e-4},  {KERN_BF16, 4e-3},  {KERN_Q8_0, 6e-3},  {KERN_Q8_1, 6e-3},
    {KERN_Q8_K, 6e-3}, {KERN_Q5_0, 0.04},  {KERN_Q5_1, 0.035}, {KERN_Q4_0, 0.08},
    {KERN_Q4_1, 0.07}, {KERN_Q6_K, 0.025}, {KERN_Q5_K, 0.045}, {KERN_Q4_K, 0.09},
};

START_TEST(test_quant_error) {
    uint64_t rng = 42;
    const int64_t n = 4096;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    void *q = malloc(n * 4);
    const kern_ops_t *ref = kern_ops_ref();
    for (size_t i = 0; i < sizeof s_qerr / sizeof s_qerr[0]; i++) {
        kern_type_t t = s_qerr[i].t;
        s_fill(&rng, x, n, -1, 1);
        /* some blocks with an offset, to exercise the minimum of Q4_1/Q5_1/K-quants */
        for (int64_t j = 1024; j < 2048; j++)
            x[j] = x[j] * 0.3f + 0.6f;
        ref->quant_row(t, x, q, n);
        ref->dequant_row(t, q, y, n);
        double e2 = 0, x2 = 0;
        for (int64_t j = 0; j < n; j++) {
            e2 += (double)(y[j] - x[j]) * (y[j] - x[j]);
            x2 += (double)x[j] * x[j];
        }
        double rel = sqrt(e2 / x2);
        ck_assert_msg(rel < s_qerr[i].rel_rms, "%s: relative rms error %g >= %g",
                      kern_type_traits((int)t)->name, rel, s_qerr[i].rel_rms);
        /* zeros stay zeros, and tiny values stay finite */
        memset(x, 0, n * 4);
        ref->quant_row(t, x, q, n);
        ref->dequant_row(t, q, y, n);
        for (int64_t j = 0; j < n; j++)
            ck_assert_float_eq(y[j], 0.0f);
        s_fill(&rng, x, n, -1e-7f, 1e-7f);
        ref->quant_row(t, x, q, n);
        ref->dequant_row(t, q, y, n);
        for (int64_t j = 0; j < n; j++)
            ck_assert(isfinite(y[j]) && fabsf(y[j]) < 1e-6f);
    }
    free(x);
    free(y);
    free(q);
}
END_TEST

/* Every SIMD table quantizes and dequantizes exactly as the reference does. */
START_TEST(test_quant_simd_exact) {
    const kern_ops_t *tabs[N_SIMD];
    int nt = s_simd_tables(tabs);
    uint64_t rng = 7;
    const int64_t n = 1024;
    float *x = malloc(n * 4), *y0 = malloc(n * 4), *y1 = malloc(n * 4);
    uint8_t *q0 = malloc(n * 4), *q1 = malloc(n * 4);
    kern_type_t all[] = {KERN_F32,  KERN_F16,  KERN_BF16, KERN_Q4_0, KERN_Q4_1,
                         KERN_Q5_0, KERN_Q5_1, KERN_Q8_0, KERN_Q8_1, KERN_Q4_K,
                         KERN_Q5_K, KERN_Q6_K, KERN_Q8_K};
    for (int ti = 0; ti < nt; ti++) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            kern_type_t t = all[i];
            for (int scale = 0; scale < 3; scale++) {
                float s = scale == 0 ? 1.0f : scale == 1 ? 300.0f : 1e-5f;
                s_fill(&rng, x, n, -s, s);
                size_t rs = kern_row_size(t, n);
                kern_ops_ref()->quant_row(t, x, q0, n);
                tabs[ti]->quant_row(t, x, q1, n);
                ck_assert_msg(memcmp(q0, q1, rs) == 0, "%s quant_row %s differs", tabs[ti]->name,
                              kern_type_traits((int)t)->name);
                kern_ops_ref()->dequant_row(t, q0, y0, n);
                tabs[ti]->dequant_row(t, q0, y1, n);
                ck_assert_msg(memcmp(y0, y1, n * 4) == 0, "%s dequant_row %s differs",
                              tabs[ti]->name, kern_type_traits((int)t)->name);
            }
        }
    }
    free(x), free(y0), free(y1), free(q0), free(q1);
}
END_TEST

/* ---- gemm ------------------------------------------------------------- */

/* W_RAWEXT: the levels at their extremes (nibbles and fifth bits all 1, Q8_0
 * bytes +127 or -128 at random), for integer overflow in SIMD dot products. */
typedef enum { W_RANDOM, W_ZERO, W_HUGE, W_TINY, W_NEG, W_RAWMAX, W_RAWRAND, W_RAWEXT } s_wkind_t;

/* Fill nr rows of type t with k elements each (row stride ws bytes). */
static void s_make_w(uint64_t *rng, kern_type_t t, s_wkind_t kind, int64_t k, int nr, uint8_t *w,
                     size_t ws, float *tmp) {
    size_t rs = kern_row_size(t, k);
    for (int r = 0; r < nr; r++) {
        uint8_t *row = w + (size_t)r * ws;
        float lo = -1, hi = 1;
        if (kind == W_HUGE)
            lo = -3000, hi = 3000;
        if (kind == W_TINY)
            lo = -1e-4f, hi = 1e-4f;
        if (kind == W_NEG)
            lo = -2, hi = -0.5f;
        s_fill(rng, tmp, k, lo, hi);
        if (kind == W_ZERO)
            memset(tmp, 0, (size_t)k * 4);
        kern_ops_ref()->quant_row(t, tmp, row, k);
        if ((kind == W_RAWMAX || kind == W_RAWRAND || kind == W_RAWEXT) && s_bs(t) > 1) {
            /* raw level bytes: every nibble / bit at its maximum, or random; the
             * f16 scale fields are kept from the quantizer so values stay sane */
            size_t tsz = kern_type_traits((int)t)->type_size;
            for (size_t b = 0; b < rs / tsz; b++) {
                uint8_t *blk = row + b * tsz;
                size_t s0 = 0, s1 = tsz; /* byte range of levels to overwrite */
                switch (t) {
                case KERN_Q4_0:
                    s0 = 2;
                    break;
                case KERN_Q4_1:
                    s0 = 4;
                    break;
                case KERN_Q5_0:
                    s0 = 2;
                    break;
                case KERN_Q5_1:
                    s0 = 4;
                    break;
                case KERN_Q8_0:
                    s0 = 2;
                    break;
                case KERN_Q4_K:
                case KERN_Q5_K:
                    s0 = 4;
                    break; /* scales too: all 63 */
                case KERN_Q6_K:
                    s1 = 192;
                    break; /* ql, qh */
                default:
                    break;
                }
                for (size_t j = s0; j < s1; j++)
                    blk[j] = kind == W_RAWRAND ? (uint8_t)test_rand_u64(rng) : 0xFF;
                if (t == KERN_Q8_0 && kind == W_RAWEXT)
                    for (size_t j = s0; j < s1; j++)
                        blk[j] = (test_rand_u64(rng) & 1) ? 0x7F : 0x80; /* +127, -128 */
                if (t == KERN_Q8_0 && kind == W_RAWMAX)
                    for (size_t j = s0; j < s1; j++)
                        blk[j] = (j & 1) ? 0x7F : 0x81; /* +127, -127 */
            }
        }
    }
}

/* Sum over the dot product of |w_i x_i|, from dequantized values: the scale
 * of rounding errors in a float dot product. */
static double s_absdot(const float *w, const float *x, int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < k; i++)
        s += fabs((double)w[i] * x[i]);
    return s;
}

/* The sum over blocks of |m * s| for the offset types (Q4_1/Q5_1 with Q8_1):
 * s is stored as a half, so it carries a relative error of 2^-11. */
static double s_minterm(kern_type_t t, const uint8_t *w, const uint8_t *x, int64_t k) {
    if (t != KERN_Q4_1 && t != KERN_Q5_1)
        return 0;
    size_t tsz = kern_type_traits((int)t)->type_size;
    double s = 0;
    for (int64_t b = 0; b < k / 32; b++) {
        kern_f16_t m, xs;
        memcpy(&m, w + b * tsz + 2, 2);
        memcpy(&xs, x + b * sizeof(kern_block_q8_1) + 2, 2);
        s += fabs((double)kern_f16_to_f32(m) * kern_f16_to_f32(xs));
    }
    return s;
}

static void s_check_gemm(kern_type_t t, s_wkind_t kind, int64_t k, int nr, int nc, uint64_t seed) {
    uint64_t rng = seed;
    const kern_type_t vt = kern_type_traits((int)t)->vec_dot_type;
    size_t ws = kern_row_size(t, k) + 8 * (seed & 1); /* a padded stride sometimes */
    size_t xs = kern_row_size(vt, k) + 4 * (seed & 2);
    size_t os = (size_t)nr + (seed & 1);
    uint8_t *w = malloc(ws * nr), *x = malloc(xs * nc);
    float *tmp = malloc((size_t)k * 4), *wf = malloc((size_t)k * 4 * nr),
          *xf = malloc((size_t)k * 4 * nc);
    float *o_ref = malloc(os * nc * 4), *o = malloc(os * nc * 4);
    s_make_w(&rng, t, kind, k, nr, w, ws, tmp);
    for (int c = 0; c < nc; c++) {
        s_fill(&rng, tmp, k, -1, 1);
        if (c % 3 == 2) /* an activation column with a large magnitude and an outlier */
            for (int64_t i = 0; i < k; i++)
                tmp[i] *= (i == 5 ? 400.0f : 20.0f);
        kern_ops_ref()->quant_row(vt, tmp, x + (size_t)c * xs, k);
        kern_ops_ref()->dequant_row(vt, x + (size_t)c * xs, xf + (size_t)c * k, k);
    }
    for (int r = 0; r < nr; r++)
        kern_ops_ref()->dequant_row(t, w + (size_t)r * ws, wf + (size_t)r * k, k);
    kern_ops_ref()->gemm(t, k, nr, nc, w, ws, x, xs, o_ref, os);

    /* The reference against dequantize-then-float-dot.  Tolerance: float
     * rounding of the block sums, a random walk over the blocks (rel =
     * 1e-6 * sqrt(blocks + 4) of sum |w_i x_i|), plus, for Q4_1/Q5_1, 1e-3 of
     * sum |m s| (Q8_1 stores s = d * sum(q) as a half). */
    const double rel = 1e-6 * sqrt((double)(k / s_bs(t) + 4));
    for (int c = 0; c < nc; c++) {
        for (int r = 0; r < nr; r++) {
            double want = 0;
            for (int64_t i = 0; i < k; i++)
                want += (double)wf[(size_t)r * k + i] * xf[(size_t)c * k + i];
            double mag = s_absdot(wf + (size_t)r * k, xf + (size_t)c * k, k);
            double tol = rel * mag + 1e-3 * s_minterm(t, w + r * ws, x + c * xs, k) + 1e-30;
            double got = o_ref[(size_t)c * os + r];
            ck_assert_msg(fabs(got - want) <= tol,
                          "ref %s kind %d k %lld (%d,%d): %g vs float %g (tol %g)",
                          kern_type_traits((int)t)->name, kind, (long long)k, r, c, got, want, tol);
        }
    }
    /* Every SIMD table against the reference: the integer block sums are exact
     * in both, only the order of float additions differs (same bound). */
    const kern_ops_t *tabs[N_SIMD];
    int nt = s_simd_tables(tabs);
    for (int ti = 0; ti < nt; ti++) {
        for (size_t i = 0; i < os * nc; i++)
            o[i] = -12345.0f;
        tabs[ti]->gemm(t, k, nr, nc, w, ws, x, xs, o, os);
        for (int c = 0; c < nc; c++) {
            for (int r = 0; r < nr; r++) {
                double mag = s_absdot(wf + (size_t)r * k, xf + (size_t)c * k, k);
                double tol = rel * mag + 1e-30;
                double got = o[(size_t)c * os + r], want = o_ref[(size_t)c * os + r];
                ck_assert_msg(fabs(got - want) <= tol,
                              "%s %s kind %d k %lld nr %d nc %d (%d,%d): %.9g vs ref %.9g (tol %g)",
                              tabs[ti]->name, kern_type_traits((int)t)->name, kind, (long long)k,
                              nr, nc, r, c, got, want, tol);
            }
            if (os > (size_t)nr) /* the padding between columns is left alone */
                ck_assert_float_eq(o[(size_t)c * os + nr], -12345.0f);
        }
    }
    free(w), free(x), free(tmp), free(wf), free(xf), free(o_ref), free(o);
}

START_TEST(test_gemm) {
    kern_type_t t = s_wtypes[_i];
    int bs = s_bs(t) > 1 ? s_bs(t) : 1;
    /* k: one block, a few blocks, many blocks; float types also odd lengths */
    int64_t ks[4] = {bs == 1 ? 37 : bs, bs == 1 ? 8 : 3 * bs, bs == 1 ? 576 : 18 * bs,
                     bs == 256 ? 6 * 256 : 48 * (bs == 1 ? 32 : bs)};
    static const int shapes[][2] = {{1, 1},  {3, 5}, {5, 1}, {7, 17},
                                    {17, 3}, {8, 8}, {4, 2}, {9, 4}};
    uint64_t seed = 1000 + (uint64_t)_i * 77;
    for (int ki = 0; ki < 4; ki++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            s_check_gemm(t, W_RANDOM, ks[ki], shapes[s][0], shapes[s][1], seed++);
    for (int kind = W_ZERO; kind <= W_RAWEXT; kind++) {
        s_check_gemm(t, (s_wkind_t)kind, ks[1], 7, 5, seed++);
        s_check_gemm(t, (s_wkind_t)kind, ks[2], 5, 1, seed++);
        s_check_gemm(t, (s_wkind_t)kind, ks[0], 1, 3, seed++);
    }
}
END_TEST

/* ---- element-wise ops --------------------------------------------------- */

static const int s_lens[] = {1, 3, 5, 7, 8, 17, 64, 576, 1000};
#define N_LENS ((int)(sizeof s_lens / sizeof s_lens[0]))

START_TEST(test_rmsnorm_softmax_swiglu) {
    uint64_t rng = 99;
    float x[1000], w[1000], o[1000], o2[1000], want[1000];
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (ops == NULL)
            continue;
        for (int li = 0; li < N_LENS; li++) {
            int n = s_lens[li];
            /* rmsnorm against double precision */
            s_fill(&rng, x, n, -3, 3);
            s_fill(&rng, w, n, 0.5f, 1.5f);
            double ss = 0;
            for (int i = 0; i < n; i++)
                ss += (double)x[i] * x[i];
            double inv = 1.0 / sqrt(ss / n + 1e-5);
            ops->rmsnorm(o, x, w, n, 1e-5f);
            for (int i = 0; i < n; i++)
                ck_assert(fabs(o[i] - x[i] * inv * w[i]) <= 1e-5 * (1 + fabs(x[i] * inv * w[i])));
            memcpy(o2, x, n * 4); /* in place */
            ops->rmsnorm(o2, o2, w, n, 1e-5f);
            ck_assert(memcmp(o, o2, n * 4) == 0);
            /* softmax: large offsets, -inf entries (masked positions) */
            s_fill(&rng, x, n, -30, 30);
            for (int i = 0; i < n; i++)
                x[i] += 1000.0f;
            if (n > 2)
                x[1] = -INFINITY;
            double mx = -INFINITY, sum = 0;
            for (int i = 0; i < n; i++)
                mx = fmax(mx, x[i]);
            for (int i = 0; i < n; i++)
                sum += exp((double)x[i] - mx);
            for (int i = 0; i < n; i++)
                want[i] = (float)(exp((double)x[i] - mx) / sum);
            ops->softmax(x, n);
            double tot = 0;
            for (int i = 0; i < n; i++) {
                ck_assert_msg(fabs(x[i] - want[i]) <= 2e-6 * want[i] + 1e-9, "%s softmax n %d",
                              ops->name, n);
                tot += x[i];
            }
            ck_assert(fabs(tot - 1) < 1e-5);
            /* swiglu, including saturating arguments; out may equal gate */
            s_fill(&rng, x, n, -12, 12);
            if (n > 3)
                x[0] = -100, x[1] = 100, x[2] = 0;
            s_fill(&rng, w, n, -2, 2);
            ops->swiglu(o, x, w, n);
            for (int i = 0; i < n; i++) {
                double g = x[i], e = g / (1 + exp(-g)) * w[i];
                ck_assert_msg(fabs(o[i] - e) <= 2e-6 * fabs(e) + 1e-30, "%s swiglu %g", ops->name,
                              g);
            }
            ops->swiglu(x, x, w, n);
            ck_assert(memcmp(o, x, n * 4) == 0);
            /* geglu against double precision, saturating and tiny arguments included (as
             * g sigmoid(2u): 0.5 g (1 + tanh u) cancels to 0 in double for g << 0) */
            s_fill(&rng, x, n, -8, 8);
            if (n > 5)
                x[0] = -100, x[1] = 100, x[2] = 0, x[3] = 1e-4f, x[4] = -1e-20f;
            s_fill(&rng, w, n, -2, 2);
            ops->geglu(o, x, w, n);
            float o3[1000];
            kern_ops_ref()->geglu(o3, x, w, n); /* the SIMD tables against the reference */
            for (int i = 0; i < n; i++) {
                double g = x[i], u = sqrt(2 / M_PI) * (g + 0.044715 * g * g * g);
                double e = g / (1 + exp(-2 * u)) * w[i];
                /* e^(-2u) carries the float rounding of its argument: relative 2|u| ulp */
                double tol = (2e-6 + 2.4e-7 * fabs(2 * u)) * fabs(e) + 1e-30;
                ck_assert_msg(fabs(o[i] - e) <= tol, "%s geglu %g: %.9g vs %.9g", ops->name, g,
                              o[i], e);
                ck_assert_msg(fabs(o[i] - o3[i]) <= tol, "%s geglu vs reference %g", ops->name, g);
            }
            ops->geglu(x, x, w, n);
            ck_assert(memcmp(o, x, n * 4) == 0);
        }
    }
}
END_TEST

START_TEST(test_rope) {
    uint64_t rng = 5;
    const int dims[][2] = {{64, 64}, {64, 32}, {20, 20}, {128, 128}, {6, 2}}; /* head_dim, n_rot */
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (ops == NULL)
            continue;
        for (int di = 0; di < 5; di++) {
            for (int neox = 0; neox < 2; neox++) {
                int hd = dims[di][0], nrot = dims[di][1], nh = 3;
                float x[3 * 128], y[3 * 128], cs[128];
                int pos = 17 + di;
                for (int i = 0; i < nrot / 2; i++) {
                    double th = pos * pow(10000.0, -2.0 * i / nrot);
                    cs[2 * i] = (float)cos(th), cs[2 * i + 1] = (float)sin(th);
                }
                s_fill(&rng, x, nh * hd, -2, 2);
                memcpy(y, x, sizeof(float) * nh * hd);
                ops->rope(y, nh, hd, nrot, cs, neox);
                for (int h = 0; h < nh; h++) {
                    const float *a = x + h * hd, *b = y + h * hd;
                    for (int i = 0; i < nrot / 2; i++) {
                        int i0 = neox ? i : 2 * i, i1 = neox ? i + nrot / 2 : 2 * i + 1;
                        double c = cs[2 * i], s = cs[2 * i + 1];
                        ck_assert(fabs(b[i0] - (a[i0] * c - a[i1] * s)) < 1e-5);
                        ck_assert(fabs(b[i1] - (a[i0] * s + a[i1] * c)) < 1e-5);
                    }
                    for (int i = nrot; i < hd; i++) /* unrotated tail untouched */
                        ck_assert_float_eq(b[i], a[i]);
                }
            }
        }
    }
}
END_TEST

/* ---- attention ---------------------------------------------------------- */

/* Every table's attention against a double-precision softmax over the K and
 * V values the pool holds (for KERN_I8 the dequantized q * scale), within
 * 2e-6 (INT8, whose rows carry outliers: 2e-5, relative above 1).  KERN_I8 also: the scalar
 * reference equals, bit for bit, the F32 reference over a pool of those dequantized values (both
 * compute q * scale per element), and each SIMD table is within that tolerance of it; the rows
 * include zeros (scale 0) and outliers.  pos0 > 0: a sliding window, positions pos0 .. n_ctx-1
 * only (the rows before it hold data too, which must not count). */
static void s_check_attention_w(kern_type_t kvt, int D, int n_q, int n_ctx, int pos0, int bsz,
                                uint64_t seed) {
    uint64_t rng = seed;
    const int n_blocks = (n_ctx + bsz - 1) / bsz + 2;
    const size_t elt = kvt == KERN_I8 ? 1 : kvt == KERN_F16 ? 2 : 4;
    /* a slab of bsz rows (and, INT8, bsz scales); another head lives in between */
    const size_t slab = (size_t)bsz * D * elt + (kvt == KERN_I8 ? 4 * (size_t)bsz : 0);
    const size_t stride = slab * 2 + 64;
    const size_t stride32 = (size_t)bsz * D * 4 + 64; /* the dequantized F32 copy */
    uint8_t *kb = malloc(stride * n_blocks), *vb = malloc(stride * n_blocks);
    uint8_t *kb32 = malloc(stride32 * n_blocks), *vb32 = malloc(stride32 * n_blocks);
    int32_t *table = malloc(sizeof(int32_t) * n_blocks);
    float *q = malloc(sizeof(float) * n_q * D), *kf = malloc(sizeof(float) * n_ctx * D),
          *vf = malloc(sizeof(float) * n_ctx * D), *sc = malloc(sizeof(float) * n_q * n_ctx),
          *want = malloc(sizeof(float) * n_q * D), *out = malloc(sizeof(float) * n_q * D),
          *again = malloc(sizeof(float) * n_q * D);
    for (size_t i = 0; i < stride * n_blocks; i++)
        kb[i] = vb[i] = 0xCD; /* poison; must never be read */
    /* a block table out of order: logical block j lives in physical block perm[j] */
    for (int j = 0; j < n_blocks; j++)
        table[j] = j;
    for (int j = n_blocks - 1; j > 0; j--) {
        int o = (int)(test_rand_u64(&rng) % (uint64_t)(j + 1));
        int32_t t = table[j];
        table[j] = table[o], table[o] = t;
    }
    float *krow = malloc(sizeof(float) * D), *vrow = malloc(sizeof(float) * D);
    for (int p = 0; p < n_ctx; p++) {
        uint8_t *ko = kb + (size_t)table[p / bsz] * stride + (size_t)(p % bsz) * D * elt;
        uint8_t *vo = vb + (size_t)table[p / bsz] * stride + (size_t)(p % bsz) * D * elt;
        if (kvt == KERN_I8) {
            for (int i = 0; i < D; i++)
                krow[i] = test_rand_f32(&rng, -2, 2), vrow[i] = test_rand_f32(&rng, -1, 1);
            if (p % 7 == 3) /* an outlier channel */
                krow[p % D] = 40.0f, vrow[(p * 5) % D] = -25.0f;
            if (p % 11 == 5) /* zero rows: scale 0 */
                memset(krow, 0, sizeof(float) * D), memset(vrow, 0, sizeof(float) * D);
            size_t so = (size_t)table[p / bsz] * stride + (size_t)bsz * D + 4 * (size_t)(p % bsz);
            float ksc = kern_i8_quant_row(krow, (int8_t *)ko, D);
            float vsc = kern_i8_quant_row(vrow, (int8_t *)vo, D);
            memcpy(kb + so, &ksc, 4), memcpy(vb + so, &vsc, 4);
            size_t o32 = (size_t)table[p / bsz] * stride32 + (size_t)(p % bsz) * D * 4;
            for (int i = 0; i < D; i++) {
                float kv = (float)((int8_t *)ko)[i] * ksc, vv = (float)((int8_t *)vo)[i] * vsc;
                kf[(size_t)p * D + i] = kv, vf[(size_t)p * D + i] = vv;
                memcpy(kb32 + o32 + 4 * i, &kv, 4), memcpy(vb32 + o32 + 4 * i, &vv, 4);
            }
            continue;
        }
        for (int i = 0; i < D; i++) {
            float kv = test_rand_f32(&rng, -2, 2), vv = test_rand_f32(&rng, -1, 1);
            if (kvt == KERN_F16) {
                kern_f16_t kh = kern_f32_to_f16(kv), vh = kern_f32_to_f16(vv);
                memcpy(ko + 2 * i, &kh, 2), memcpy(vo + 2 * i, &vh, 2);
                kv = kern_f16_to_f32(kh), vv = kern_f16_to_f32(vh);
            } else {
                memcpy(ko + 4 * i, &kv, 4), memcpy(vo + 4 * i, &vv, 4);
            }
            kf[(size_t)p * D + i] = kv, vf[(size_t)p * D + i] = vv;
        }
    }
    s_fill(&rng, q, (int64_t)n_q * D, -1, 1);
    float scale = 1.0f / sqrtf((float)D);
    /* naive: contiguous K and V, double precision */
    for (int h = 0; h < n_q; h++) {
        double mx = -INFINITY, sum = 0;
        double *s = malloc(sizeof(double) * n_ctx);
        for (int p = pos0; p < n_ctx; p++) {
            double d = 0;
            for (int i = 0; i < D; i++)
                d += (double)q[h * D + i] * kf[(size_t)p * D + i];
            s[p] = d * scale;
            mx = fmax(mx, s[p]);
        }
        for (int p = pos0; p < n_ctx; p++)
            sum += (s[p] = exp(s[p] - mx));
        for (int i = 0; i < D; i++) {
            double o = 0;
            for (int p = pos0; p < n_ctx; p++)
                o += s[p] / sum * vf[(size_t)p * D + i];
            want[h * D + i] = (float)o;
        }
        free(s);
    }
    /* float rounding grows with the magnitudes: INT8 rows carry outliers (K 40, V -25) */
    const double tol = kvt == KERN_I8 ? 2e-5 : 2e-6;
    /* INT8: the reference over the dequantized values in an F32 pool */
    float *ref32 = malloc(sizeof(float) * n_q * D);
    if (kvt == KERN_I8) {
        kern_attn_args_t a32 = {.head_dim = D,
                                .n_q = n_q,
                                .q = q,
                                .out = ref32,
                                .n_ctx = n_ctx,
                                .pos0 = pos0,
                                .blocks = table,
                                .block_size = bsz,
                                .k_base = kb32,
                                .v_base = vb32,
                                .block_stride = stride32,
                                .kv_type = KERN_F32,
                                .scale = scale,
                                .scratch = sc};
        kern_ops_ref()->attention(&a32);
    }
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (ops == NULL)
            continue;
        kern_attn_args_t a = {.head_dim = D,
                              .n_q = n_q,
                              .q = q,
                              .out = out,
                              .n_ctx = n_ctx,
                              .pos0 = pos0,
                              .blocks = table,
                              .block_size = bsz,
                              .k_base = kb,
                              .v_base = vb,
                              .block_stride = stride,
                              .kv_type = kvt,
                              .scale = scale,
                              .scratch = sc};
        for (int i = 0; i < n_q * D; i++)
            out[i] = NAN; /* every output must be written */
        ops->attention(&a);
        for (int i = 0; i < n_q * D; i++)
            ck_assert_msg(fabs(out[i] - want[i]) < tol * fmax(1, fabs(want[i])),
                          "%s attention D %d n_q %d n_ctx %d pos0 %d bsz %d: %.9g vs %.9g",
                          ops->name, D, n_q, n_ctx, pos0, bsz, out[i], want[i]);
        if (kvt == KERN_I8) {
            for (int i = 0; i < n_q * D; i++)
                ck_assert_msg(ti == 0 ? out[i] == ref32[i]
                                      : fabs(out[i] - ref32[i]) < tol * fmax(1, fabs(ref32[i])),
                              "%s int8 attention vs f32 over dequantized, D %d n_q %d n_ctx %d "
                              "bsz %d: %g vs %g",
                              ops->name, D, n_q, n_ctx, bsz, out[i], ref32[i]);
        }
        /* deterministic: the same arguments give the same bits, whatever the
         * scratch held */
        memcpy(again, out, sizeof(float) * n_q * D);
        for (int i = 0; i < n_q * n_ctx; i++)
            sc[i] = (float)i;
        ops->attention(&a);
        ck_assert_msg(memcmp(again, out, sizeof(float) * n_q * D) == 0,
                      "%s attention D %d n_q %d n_ctx %d: not deterministic", ops->name, D, n_q,
                      n_ctx);
    }
    free(kb), free(vb), free(table), free(q), free(kf), free(vf), free(sc), free(want), free(out);
    free(again), free(kb32), free(vb32), free(krow), free(vrow), free(ref32);
}

static void s_check_attention(kern_type_t kvt, int D, int n_q, int n_ctx, int bsz, uint64_t seed) {
    s_check_attention_w(kvt, D, n_q, n_ctx, 0, bsz, seed);
}

START_TEST(test_attention) {
    uint64_t seed = 300;
    kern_type_t kvts[3] = {KERN_F32, KERN_F16, KERN_I8};
    for (int t = 0; t < 3; t++) {
        s_check_attention(kvts[t], 64, 1, 1, 16, seed++);
        s_check_attention(kvts[t], 64, 3, 37, 16, seed++);
        s_check_attention(kvts[t], 64, 3, 130, 16, seed++);
        s_check_attention(kvts[t], 20, 2, 9, 4, seed++);
        s_check_attention(kvts[t], 128, 4, 64, 16, seed++);
        s_check_attention(kvts[t], 8, 1, 5, 1, seed++);
        s_check_attention(kvts[t], 32, 5, 23, 8, seed++); /* two query groups */
        s_check_attention(kvts[t], 16, 2, 3, 2, seed++);
        s_check_attention(kvts[t], 64, 9, 50, 16, seed++); /* 4 + 4 + 1 heads */
    }
}
END_TEST

/* The tiled kernels: 16-position tiles (tails of 1, 15, 16, 17), chunks of
 * 64, long contexts, the head sizes and group sizes of real models, block
 * sizes that are and are not multiples of 16, every block table shuffled. */
START_TEST(test_attention_tiles) {
    uint64_t seed = 900;
    kern_type_t kvts[3] = {KERN_F32, KERN_F16, KERN_I8};
    const int ctxs[] = {1, 15, 16, 17, 63, 64, 65, 200};
    const int nqs[] = {1, 3, 4, 8};
    for (int t = 0; t < 3; t++) {
        for (int c = 0; c < (int)(sizeof ctxs / sizeof *ctxs); c++)
            for (int i = 0; i < 4; i++) {
                s_check_attention(kvts[t], 64, nqs[i], ctxs[c], 16, seed++);
                s_check_attention(kvts[t], 128, nqs[i], ctxs[c], 32, seed++);
            }
        for (int i = 0; i < 4; i++) {
            s_check_attention(kvts[t], 64, nqs[i], 1000, 16, seed++);
            s_check_attention(kvts[t], 128, nqs[i], 4097, 16, seed++);
        }
        s_check_attention(kvts[t], 64, 3, 100, 5, seed++); /* tiles across blocks */
        s_check_attention(kvts[t], 64, 3, 100, 7, seed++); /* odd rows: unaligned scales */
        s_check_attention(kvts[t], 64, 3, 100, 8, seed++);
        s_check_attention(kvts[t], 128, 2, 130, 48, seed++);
        s_check_attention(kvts[t], 96, 3, 77, 16, seed++); /* 8-wide path */
        s_check_attention(kvts[t], 256, 2, 40, 16, seed++);
        s_check_attention(kvts[t], 48, 8, 33, 16, seed++);
        s_check_attention(kvts[t], 64, 12, 40, 16, seed++); /* more than 8 heads */
    }
}
END_TEST

/* Sliding windows (pos0 > 0): windows starting inside a block, on a block edge and on a
 * 16-row tile edge, for every path (head_dim 256 as Gemma 3's, 128, 64, 96, 20), prefill-like
 * (a window much shorter than the context) and barely-sliding (pos0 = 1). */
START_TEST(test_attention_window) {
    uint64_t seed = 1700;
    kern_type_t kvts[3] = {KERN_F32, KERN_F16, KERN_I8};
    const int ds[] = {256, 128, 64, 96, 20};
    const int win[][2] = {{40, 1}, {40, 16}, {40, 17}, {100, 37}, {130, 64}, {200, 195}, {9, 8}};
    for (int t = 0; t < 3; t++)
        for (int d = 0; d < 5; d++)
            for (int w = 0; w < 7; w++) {
                s_check_attention_w(kvts[t], ds[d], 4, win[w][0], win[w][1], 16, seed++);
                s_check_attention_w(kvts[t], ds[d], 3, win[w][0], win[w][1], 7, seed++);
            }
}
END_TEST

/* Long rows: the kernels prepare activation scales in bounded chunks and
 * fall back to smaller tiles when they would not fit; both must agree. */
START_TEST(test_gemm_long_rows) {
    kern_type_t ts[] = {KERN_Q4_0, KERN_Q4_1, KERN_Q8_0, KERN_Q5_1, KERN_Q6_K, KERN_F16};
    uint64_t seed = 9000;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        int64_t k = s_bs(ts[i]) == 256 ? 256 * 70 : 32 * 1100; /* > 1024 blocks */
        s_check_gemm(ts[i], W_RANDOM, k, 5, 1, seed++);
        s_check_gemm(ts[i], W_RANDOM, k, 2, 9, seed++);
        s_check_gemm(ts[i], W_RANDOM, k, 6, 3, seed++);
        /* 500 blocks: panels of 8 columns */
        s_check_gemm(ts[i], W_RANDOM, s_bs(ts[i]) == 256 ? 256 * 63 : 32 * 500, 4, 10, seed++);
    }
}
END_TEST

/* ---- batch invariance ------------------------------------------------------
 * Continuous batching runs a sequence's token in gemms of any width nc; its
 * greedy output must not depend on what else shares the batch.  So each
 * column of every table's gemm must be bitwise equal to the same column
 * computed alone (nc = 1), for every nc and offset. */
START_TEST(test_gemm_batch_invariant) {
    const kern_type_t t = s_wtypes[_i];
    const kern_type_traits_t *tr = kern_type_traits((int)t);
    const int64_t k = 1536;
    const int nr = 37, ncmax = 23;
    uint64_t rng = 977 + (uint64_t)_i;
    float *wf = malloc(sizeof(float) * k * nr), *xf = malloc(sizeof(float) * k * ncmax);
    s_fill(&rng, wf, k * nr, -1, 1);
    s_fill(&rng, xf, k * ncmax, -1, 1);
    for (int i = 0; i < ncmax; i++)
        xf[(size_t)i * k + (size_t)(i * 37) % k] = 60.0f; /* an outlier per column */
    size_t wb = kern_row_size(t, k), xb = kern_row_size(tr->vec_dot_type, k);
    uint8_t *w = malloc(wb * nr), *x = malloc(xb * ncmax);
    for (int r = 0; r < nr; r++)
        kern_ops_ref()->quant_row(t, wf + (size_t)r * k, w + (size_t)r * wb, k);
    float *alone = malloc(sizeof(float) * nr * ncmax), *batch = malloc(sizeof(float) * nr * ncmax);
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (!ops)
            continue;
        for (int c = 0; c < ncmax; c++)
            ops->quant_row(tr->vec_dot_type, xf + (size_t)c * k, x + (size_t)c * xb, k);
        for (int c = 0; c < ncmax; c++)
            ops->gemm(t, k, nr, 1, w, wb, x + (size_t)c * xb, xb, alone + (size_t)c * nr, nr);
        for (int nc = 2; nc <= ncmax; nc++)
            for (int c0 = 0; c0 + nc <= ncmax; c0 += nc) {
                ops->gemm(t, k, nr, nc, w, wb, x + (size_t)c0 * xb, xb, batch, nr);
                ck_assert_msg(!memcmp(batch, alone + (size_t)c0 * nr, sizeof(float) * nr * nc),
                              "%s %s: columns differ at nc=%d", ops->name, tr->name, nc);
            }
    }
    free(wf);
    free(xf);
    free(w);
    free(x);
    free(alone);
    free(batch);
}
END_TEST

/* ---- packed weights -------------------------------------------------------
 * kern_ops_t.pack / gemm_packed: the row-interleaved layout of the simple
 * quants.  Each table's packed gemm must match the reference gemm within the
 * tolerance of s_check_gemm, equal the reference table's packed gemm bitwise
 * (the float operations are specified), and give every row range and every
 * column placement the same bits. */

static const kern_type_t s_ptypes[] = {KERN_Q4_0, KERN_Q4_1, KERN_Q5_0, KERN_Q5_1, KERN_Q8_0};
#define N_PTYPES ((int)(sizeof s_ptypes / sizeof s_ptypes[0]))

/* Pack nr rows with ops (NULL if it has no packed layout for t); free() the result. */
static void *s_pack(const kern_ops_t *ops, kern_type_t t, int64_t k, int nr, const uint8_t *w,
                    size_t ws) {
    size_t n = ops->packed_size(t, k, nr);
    if (!n)
        return NULL;
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    ck_assert_ptr_nonnull(p);
    ops->pack(t, k, nr, w, ws, p);
    return p;
}

static void s_check_packed(kern_type_t t, s_wkind_t kind, int64_t k, int nr, int nc,
                           uint64_t seed) {
    uint64_t rng = seed;
    const kern_type_t vt = kern_type_traits((int)t)->vec_dot_type;
    size_t ws = kern_row_size(t, k) + 8 * (seed & 1);
    size_t xs = kern_row_size(vt, k) + 4 * (seed & 2);
    size_t os = (size_t)nr + (seed & 1);
    uint8_t *w = malloc(ws * nr), *x = malloc(xs * nc);
    float *tmp = malloc((size_t)k * 4), *wf = malloc((size_t)k * 4 * nr),
          *xf = malloc((size_t)k * 4 * nc);
    float *o_ref = malloc(os * nc * 4), *o_pref = malloc(os * nc * 4), *o = malloc(os * nc * 4);
    s_make_w(&rng, t, kind, k, nr, w, ws, tmp);
    for (int c = 0; c < nc; c++) {
        s_fill(&rng, tmp, k, -1, 1);
        if (c % 3 == 2)
            for (int64_t i = 0; i < k; i++)
                tmp[i] *= (i == 5 ? 400.0f : 20.0f);
        if (c % 4 == 1 || c % 4 == 3) /* every level +127 or every level -127 */
            for (int64_t i = 0; i < k; i++)
                tmp[i] = c % 4 == 1 ? 1.0f : -1.0f;
        kern_ops_ref()->quant_row(vt, tmp, x + (size_t)c * xs, k);
        kern_ops_ref()->dequant_row(vt, x + (size_t)c * xs, xf + (size_t)c * k, k);
    }
    for (int r = 0; r < nr; r++)
        kern_ops_ref()->dequant_row(t, w + (size_t)r * ws, wf + (size_t)r * k, k);
    kern_ops_ref()->gemm(t, k, nr, nc, w, ws, x, xs, o_ref, os);
    const double rel = 1e-6 * sqrt((double)(k / s_bs(t) + 4));
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (!ops)
            continue;
        void *pk = s_pack(ops, t, k, nr, w, ws);
        if (!pk) {
            ck_assert_msg(ti != 0, "the reference has a packed layout for %s",
                          kern_type_traits((int)t)->name);
            continue;
        }
        float *dst = ti == 0 ? o_pref : o;
        for (size_t i = 0; i < os * nc; i++)
            dst[i] = -12345.0f;
        ops->gemm_packed(t, k, 0, nr, nc, pk, x, xs, dst, os);
        for (int c = 0; c < nc; c++) {
            for (int r = 0; r < nr; r++) {
                double mag = s_absdot(wf + (size_t)r * k, xf + (size_t)c * k, k);
                double tol = rel * mag + 1e-30;
                double got = dst[(size_t)c * os + r], want = o_ref[(size_t)c * os + r];
                ck_assert_msg(fabs(got - want) <= tol,
                              "%s packed %s kind %d k %lld nr %d nc %d (%d,%d): %.9g vs ref %.9g "
                              "(tol %g)",
                              ops->name, kern_type_traits((int)t)->name, kind, (long long)k, nr, nc,
                              r, c, got, want, tol);
            }
            if (os > (size_t)nr)
                ck_assert_float_eq(dst[(size_t)c * os + nr], -12345.0f);
        }
        if (ti > 0)
            ck_assert_msg(!memcmp(o, o_pref, os * nc * 4),
                          "%s packed %s k %lld: not bitwise "
                          "equal to the reference",
                          ops->name, kern_type_traits((int)t)->name, (long long)k);
        /* row ranges that start on a group: the same bits as the whole */
        for (int r0 = 16; r0 < nr; r0 += 16) {
            int n = nr - r0 > 21 ? 21 : nr - r0;
            ops->gemm_packed(t, k, r0, n, nc, pk, x, xs, o, os);
            for (int c = 0; c < nc; c++)
                ck_assert_msg(
                    !memcmp(o + (size_t)c * os, o_pref + (size_t)c * os + r0, sizeof(float) * n),
                    "%s packed %s rows %d+%d column %d differ", ops->name,
                    kern_type_traits((int)t)->name, r0, n, c);
        }
        free(pk);
    }
    free(w), free(x), free(tmp), free(wf), free(xf), free(o_ref), free(o_pref), free(o);
}

START_TEST(test_gemm_packed) {
    kern_type_t t = s_ptypes[_i];
    static const int shapes[][2] = {{1, 1}, {16, 1}, {17, 3}, {5, 9}, {33, 8}, {48, 17}, {40, 2}};
    static const int64_t ks[] = {32, 3 * 32, 18 * 32, 48 * 32};
    uint64_t seed = 5000 + (uint64_t)_i * 91;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            s_check_packed(t, W_RANDOM, ks[ki], shapes[s][0], shapes[s][1], seed++);
    for (int kind = W_ZERO; kind <= W_RAWEXT; kind++) {
        s_check_packed(t, (s_wkind_t)kind, 96, 23, 5, seed++);
        s_check_packed(t, (s_wkind_t)kind, 576, 37, 1, seed++);
    }
    /* every width 1..37 (all tile remainders), k from 32 to 1536, nr not a
     * multiple of 16 (with the row ranges from 16 of s_check_packed) */
    for (int nc = 1; nc <= 37; nc++)
        s_check_packed(t, nc % 5 == 4 ? W_RAWEXT : W_RANDOM, 32 * (1 + (nc * 13) % 48),
                       1 + (nc * 7) % 50, nc, seed++);
    /* more than one pass over k (512 blocks) and over columns */
    s_check_packed(t, W_RANDOM, 32 * 1100, 20, 3, seed++);
    s_check_packed(t, W_RANDOM, 32 * 600, 17, 12, seed++);
}
END_TEST

/* Every column of a packed gemm is bitwise the column computed alone, for
 * nc 1..40 at every offset, and for any row range. */
START_TEST(test_gemm_packed_batch_invariant) {
    const kern_type_t t = s_ptypes[_i];
    const kern_type_traits_t *tr = kern_type_traits((int)t);
    const int64_t k = 576;
    const int nr = 45, ncmax = 40;
    uint64_t rng = 3131 + (uint64_t)_i;
    float *wf = malloc(sizeof(float) * k * nr), *xf = malloc(sizeof(float) * k * ncmax);
    s_fill(&rng, wf, k * nr, -1, 1);
    s_fill(&rng, xf, k * ncmax, -1, 1);
    for (int i = 0; i < ncmax; i++)
        xf[(size_t)i * k + (size_t)(i * 37) % k] = 60.0f;
    size_t wb = kern_row_size(t, k), xb = kern_row_size(tr->vec_dot_type, k);
    uint8_t *w = malloc(wb * nr), *x = malloc(xb * ncmax);
    for (int r = 0; r < nr; r++)
        kern_ops_ref()->quant_row(t, wf + (size_t)r * k, w + (size_t)r * wb, k);
    float *alone = malloc(sizeof(float) * nr * ncmax), *batch = malloc(sizeof(float) * nr * ncmax);
    for (int ti = 0; ti < N_TABLES; ti++) {
        const kern_ops_t *ops = s_all_tables(ti);
        if (!ops)
            continue;
        void *pk = s_pack(ops, t, k, nr, w, wb);
        if (!pk)
            continue;
        for (int c = 0; c < ncmax; c++)
            ops->quant_row(tr->vec_dot_type, xf + (size_t)c * k, x + (size_t)c * xb, k);
        for (int c = 0; c < ncmax; c++)
            ops->gemm_packed(t, k, 0, nr, 1, pk, x + (size_t)c * xb, xb, alone + (size_t)c * nr,
                             nr);
        int step = ti == 0 ? 7 : 1; /* the scalar table is slow: fewer widths */
        for (int nc = 1; nc <= ncmax; nc += step)
            for (int c0 = 0; c0 + nc <= ncmax; c0 += (nc > 8 ? 3 : 1)) {
                ops->gemm_packed(t, k, 0, nr, nc, pk, x + (size_t)c0 * xb, xb, batch, nr);
                ck_assert_msg(!memcmp(batch, alone + (size_t)c0 * nr, sizeof(float) * nr * nc),
                              "%s packed %s: columns differ at nc=%d offset %d", ops->name,
                              tr->name, nc, c0);
                if (ti == 0)
                    break;
            }
        /* rows 16.. alone, and in a strided out */
        ops->gemm_packed(t, k, 16, nr - 16, ncmax, pk, x, xb, batch, nr);
        for (int c = 0; c < ncmax; c++)
            ck_assert(!memcmp(batch + (size_t)c * nr, alone + (size_t)c * nr + 16,
                              sizeof(float) * (nr - 16)));
        free(pk);
    }
    free(wf);
    free(xf);
    free(w);
    free(x);
    free(alone);
    free(batch);
}
END_TEST

/* The K-quants' packed layout through every table (test_kernels_kpacked.c
 * tests the kernels themselves): bitwise the reference, for any r0 and nc. */
START_TEST(test_gemm_kpacked_tables) {
    static const kern_type_t kt[] = {KERN_Q4_K, KERN_Q5_K, KERN_Q6_K};
    static const int shapes[][3] = {{256, 1, 1}, {256, 17, 5}, {768, 40, 37}, {1536, 33, 2}};
    const kern_type_t t = kt[_i];
    uint64_t rng = 4242 + (uint64_t)_i;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t k = shapes[si][0];
        const int nr = shapes[si][1], nc = shapes[si][2];
        size_t ws = kern_row_size(t, k), xs = kern_row_size(KERN_Q8_K, k);
        uint8_t *w = malloc(ws * nr), *x = malloc(xs * nc);
        float *tmp = malloc(sizeof(float) * k), *want = malloc(sizeof(float) * nr * nc),
              *got = malloc(sizeof(float) * nr * nc);
        s_make_w(&rng, t, W_RANDOM, k, nr, w, ws, tmp);
        for (int c = 0; c < nc; c++) {
            s_fill(&rng, tmp, k, -1, 1);
            kern_ops_ref()->quant_row(KERN_Q8_K, tmp, x + (size_t)c * xs, k);
        }
        void *pr = s_pack(kern_ops_ref(), t, k, nr, w, ws);
        ck_assert_ptr_nonnull(pr);
        kern_ops_ref()->gemm_packed(t, k, 0, nr, nc, pr, x, xs, want, nr);
        for (int ti = 1; ti < N_TABLES; ti++) {
            const kern_ops_t *ops = s_all_tables(ti);
            if (!ops)
                continue;
            if (t == KERN_Q6_K && ops->packed_size(t, k, nr) == 0 &&
                strcmp(ops->name, "avx512") != 0)
                continue; /* the ymm tables keep Q6_K unpacked (gemm_packed_x86.h) */
            void *pk = s_pack(ops, t, k, nr, w, ws);
            ck_assert_msg(pk != NULL, "%s has no packed %s", ops->name,
                          kern_type_traits((int)t)->name);
            ops->gemm_packed(t, k, 0, nr, nc, pk, x, xs, got, nr);
            ck_assert_msg(!memcmp(got, want, sizeof(float) * nr * nc),
                          "%s packed %s k %lld nr %d nc %d: not bitwise the reference", ops->name,
                          kern_type_traits((int)t)->name, (long long)k, nr, nc);
            if (nr > 16) {
                ops->gemm_packed(t, k, 16, nr - 16, nc, pk, x, xs, got, nr);
                for (int c = 0; c < nc; c++)
                    ck_assert(!memcmp(got + (size_t)c * nr, want + (size_t)c * nr + 16,
                                      sizeof(float) * (nr - 16)));
            }
            free(pk);
        }
        free(pr), free(w), free(x), free(tmp), free(want), free(got);
    }
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_traits);
    tcase_add_test(tc, test_half);
    tcase_add_test(tc, test_format_simple);
    tcase_add_test(tc, test_format_kquants);
    tcase_add_test(tc, test_quant_error);
    tcase_add_test(tc, test_quant_simd_exact);
    tcase_add_loop_test(tc, test_gemm, 0, N_WTYPES);
    tcase_add_test(tc, test_gemm_long_rows);
    tcase_add_loop_test(tc, test_gemm_batch_invariant, 0, N_WTYPES);
    tcase_add_loop_test(tc, test_gemm_packed, 0, N_PTYPES);
    tcase_add_loop_test(tc, test_gemm_packed_batch_invariant, 0, N_PTYPES);
    tcase_add_loop_test(tc, test_gemm_kpacked_tables, 0, 3);
    tcase_add_test(tc, test_rmsnorm_softmax_swiglu);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_attention_window);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_attention_tiles);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
