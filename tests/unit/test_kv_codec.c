/* test_kv_codec.c - the KV block formats: names and sizes; round trips
 * F32 -> fmt -> F32 within each format's stated error on random and edge data
 * (zeros, constant rows and channels, outliers, partial blocks whose padding
 * slots come out zero); conversions between formats; and the INT8 and F16
 * blocks a forward pass writes into a pool are byte for byte what the codec
 * makes of the same values.
 *
 * Error bounds (per element, x the original, e = |decoded - x|):
 *   F32   e = 0
 *   F16   e <= 2^-11 |x| (round to nearest, normal range)
 *   INT8  e <= max|row| / 254 (half a step of max|row| / 127), row = the
 *         position's head_dim values
 *   INT4  e <= (max - min) / 30 of its group (half a step of (max - min) / 15):
 *         K per channel over the block's valid positions, V per position
 *         over its head_dim values
 * each plus 1e-6 relative slack for float rounding of the scale arithmetic.
 */
#include "kv_codec.h"
#include "model.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Values of one block as floats: (n_layer, 2, n_head_kv, block_size, head_dim). */
static size_t s_block_floats(const kern_kv_shape_t *s) {
    return (size_t)s->n_layer * 2 * s->n_head_kv * s->block_size * s->head_dim;
}

static float *s_f32_at(const kern_kv_shape_t *s, float *x, int layer, int kv, int h, int slot) {
    size_t slab = (size_t)s->block_size * s->head_dim;
    return x + ((size_t)(layer * 2 + kv) * s->n_head_kv + h) * slab + (size_t)slot * s->head_dim;
}

typedef enum { D_RANDOM, D_ZEROS, D_CONST_ROWS, D_CONST_CHANNELS, D_OUTLIERS } s_data_t;

/* Fill an F32 block: slots >= n_valid hold garbage that must not leak. */
static void s_fill(const kern_kv_shape_t *s, float *x, int n_valid, s_data_t kind, uint64_t *rng) {
    for (int l = 0; l < s->n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < s->n_head_kv; h++)
                for (int t = 0; t < s->block_size; t++) {
                    float *r = s_f32_at(s, x, l, kv, h, t);
                    float row_c = test_rand_f32(rng, -3, 3);
                    for (int c = 0; c < s->head_dim; c++) {
                        float v = test_rand_f32(rng, -2, 2);
                        if (t >= n_valid)
                            v = 1e6f; /* garbage past the valid slots */
                        else if (kind == D_ZEROS)
                            v = 0;
                        else if (kind == D_CONST_ROWS)
                            v = row_c;
                        else if (kind == D_CONST_CHANNELS)
                            v = 0.25f * (float)(c - s->head_dim / 2) + 0.125f * (float)h;
                        else if (kind == D_OUTLIERS && c == (t * 3 + h) % s->head_dim)
                            v = (t % 2 ? -1 : 1) * 50.0f; /* one big channel per row */
                        r[c] = v;
                    }
                }
}

/* Round trip F32 -> fmt -> F32 and check each element against the bound. */
static void s_check_round_trip(const kern_kv_shape_t *s, int fmt, int n_valid, s_data_t kind,
                               uint64_t seed) {
    uint64_t rng = seed;
    size_t nf = s_block_floats(s), bytes = kv_fmt_block_bytes(s, fmt);
    float *x = malloc(nf * sizeof(float)), *y = malloc(nf * sizeof(float));
    uint8_t *enc = malloc(bytes);
    ck_assert(x && y && enc);
    s_fill(s, x, n_valid, kind, &rng);
    memset(enc, 0xAB, bytes);
    ck_assert_int_eq(kv_codec_convert(s, KV_FMT_F32, x, fmt, enc, n_valid), 0);
    for (size_t i = 0; i < nf; i++)
        y[i] = NAN;
    ck_assert_int_eq(kv_codec_convert(s, fmt, enc, KV_FMT_F32, y, n_valid), 0);
    const int D = s->head_dim;
    for (int l = 0; l < s->n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < s->n_head_kv; h++)
                for (int t = 0; t < s->block_size; t++) {
                    const float *xr = s_f32_at(s, x, l, kv, h, t);
                    const float *yr = s_f32_at(s, y, l, kv, h, t);
                    if (t >= n_valid) { /* padding decodes as zeros */
                        for (int c = 0; c < D; c++)
                            ck_assert_msg(yr[c] == 0, "%s: slot %d >= n_valid %d not zero",
                                          kv_fmt_name(fmt), t, n_valid);
                        continue;
                    }
                    float rmax = 0, rlo = xr[0], rhi = xr[0];
                    for (int c = 0; c < D; c++) {
                        rmax = fmaxf(rmax, fabsf(xr[c]));
                        rlo = fminf(rlo, xr[c]), rhi = fmaxf(rhi, xr[c]);
                    }
                    for (int c = 0; c < D; c++) {
                        double bound = 0;
                        if (fmt == KV_FMT_F16)
                            bound = ldexp(fabs(xr[c]), -11);
                        else if (fmt == KV_FMT_I8)
                            bound = rmax / 254.0 + 1e-6 * rmax;
                        else if (fmt == KV_FMT_I4 && kv == 1)
                            bound = (rhi - rlo) / 30.0 + 1e-6 * fmax(fabs(rlo), fabs(rhi));
                        else if (fmt == KV_FMT_I4) { /* K: the channel over valid slots */
                            float clo = INFINITY, chi = -INFINITY;
                            for (int u = 0; u < n_valid; u++) {
                                float v = s_f32_at(s, x, l, kv, h, u)[c];
                                clo = fminf(clo, v), chi = fmaxf(chi, v);
                            }
                            bound = (chi - clo) / 30.0 + 1e-6 * fmax(fabs(clo), fabs(chi));
                        }
                        double e = fabs((double)yr[c] - xr[c]);
                        ck_assert_msg(e <= bound,
                                      "%s kind %d n_valid %d: layer %d %s head %d slot %d ch %d: "
                                      "%.9g -> %.9g (error %.3g > bound %.3g)",
                                      kv_fmt_name(fmt), kind, n_valid, l, kv ? "V" : "K", h, t, c,
                                      xr[c], yr[c], e, bound);
                    }
                }
    /* the encoded form of a partial block does not depend on the garbage:
     * encoding again after zeroing the padding gives the same bytes */
    if (n_valid < s->block_size) {
        uint8_t *enc2 = malloc(bytes);
        for (int l = 0; l < s->n_layer; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < s->n_head_kv; h++)
                    for (int t = n_valid; t < s->block_size; t++)
                        memset(s_f32_at(s, x, l, kv, h, t), 0, sizeof(float) * D);
        memset(enc2, 0x5A, bytes);
        ck_assert_int_eq(kv_codec_convert(s, KV_FMT_F32, x, fmt, enc2, n_valid), 0);
        ck_assert_msg(memcmp(enc, enc2, bytes) == 0, "%s: padding garbage leaked into the block",
                      kv_fmt_name(fmt));
        free(enc2);
    }
    free(x), free(y), free(enc);
}

START_TEST(test_names_and_sizes) {
    ck_assert_str_eq(kv_fmt_name(KV_FMT_F32), "f32");
    ck_assert_str_eq(kv_fmt_name(KV_FMT_I4), "int4");
    ck_assert_ptr_null(kv_fmt_name(KV_FMT_COUNT));
    ck_assert_ptr_null(kv_fmt_name(-1));
    for (int f = 0; f < KV_FMT_COUNT; f++)
        ck_assert_int_eq(kv_fmt_parse(kv_fmt_name(f)), f);
    ck_assert_int_eq(kv_fmt_parse("q8"), KV_FMT_I8);
    ck_assert_int_eq(kv_fmt_parse("i4"), KV_FMT_I4);
    ck_assert_int_eq(kv_fmt_parse("int3"), -1);
    ck_assert_int_eq(kv_fmt_parse(NULL), -1);
    ck_assert_int_eq(kv_fmt_pool_type(KV_FMT_F16), KERN_F16);
    ck_assert_int_eq(kv_fmt_pool_type(KV_FMT_I8), KERN_I8);
    ck_assert_int_eq(kv_fmt_pool_type(KV_FMT_I4), -1);
    ck_assert_int_eq(kv_fmt_of_pool_type(KERN_I8), KV_FMT_I8);
    ck_assert_int_eq(kv_fmt_of_pool_type(KERN_Q4_0), -1);

    /* SmolLM2-135M: 30 layers, 3 KV heads of 64, blocks of 16 */
    kern_kv_shape_t s = {30, 3, 64, 16};
    size_t slabs = 30 * 3; /* (layer, head) pairs, each a K and a V slab */
    ck_assert_uint_eq(kv_fmt_block_bytes(&s, KV_FMT_F32), slabs * 2 * 16 * 64 * 4);
    ck_assert_uint_eq(kv_fmt_block_bytes(&s, KV_FMT_F16), slabs * 2 * 16 * 64 * 2);
    ck_assert_uint_eq(kv_fmt_block_bytes(&s, KV_FMT_I8), slabs * 2 * (16 * 64 + 16 * 4));
    /* INT4: K slab 512 nibble bytes + 64 channel (scale, min); V 512 + 16 slot pairs */
    ck_assert_uint_eq(kv_fmt_block_bytes(&s, KV_FMT_I4), slabs * ((512 + 64 * 8) + (512 + 16 * 8)));
    ck_assert_uint_eq(kv_fmt_block_bytes(&s, KV_FMT_COUNT), 0);
    kern_kv_shape_t bad = {30, 3, 0, 16};
    ck_assert_uint_eq(kv_fmt_block_bytes(&bad, KV_FMT_F16), 0);
    /* the pool's INT8 and F16 blocks are the codec's */
    kern_kv_shape_t cs = {30, 3, 64, 16};
    ck_assert_uint_eq(kern_kv_block_bytes(&cs, KERN_I8), kv_fmt_block_bytes(&cs, KV_FMT_I8));
    ck_assert_uint_eq(kern_kv_block_bytes(&cs, KERN_F16), kv_fmt_block_bytes(&cs, KV_FMT_F16));
    ck_assert_uint_eq(kern_kv_block_bytes(&cs, KERN_F32), kv_fmt_block_bytes(&cs, KV_FMT_F32));
}
END_TEST

START_TEST(test_round_trips) {
    /* shapes: a real one, odd block size and odd head_dim (INT4 nibble
     * sharing across slots), block of one */
    const kern_kv_shape_t shapes[] = {{2, 3, 64, 16}, {1, 2, 5, 7}, {2, 1, 32, 1}, {1, 1, 128, 32}};
    uint64_t seed = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const kern_kv_shape_t *s = &shapes[si];
        int valids[] = {s->block_size, 1, (s->block_size + 1) / 2, s->block_size - 1};
        for (int fmt = 0; fmt < KV_FMT_COUNT; fmt++)
            for (int kind = D_RANDOM; kind <= D_OUTLIERS; kind++)
                for (int vi = 0; vi < 4; vi++)
                    if (valids[vi] >= 1)
                        s_check_round_trip(s, fmt, valids[vi], (s_data_t)kind, seed++);
    }
}
END_TEST

/* Edge data decodes exactly where the format can represent it. */
START_TEST(test_exact_cases) {
    kern_kv_shape_t s = {1, 1, 8, 4};
    float x[2 * 4 * 8], y[2 * 4 * 8];
    uint8_t enc[4096];
    /* zeros: every format exactly zero (INT8 scale 0; INT4 scale 0 min 0) */
    memset(x, 0, sizeof x);
    for (int fmt = 0; fmt < KV_FMT_COUNT; fmt++) {
        ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, fmt, enc, 4), 0);
        ck_assert_int_eq(kv_codec_convert(&s, fmt, enc, KV_FMT_F32, y, 4), 0);
        for (int i = 0; i < 64; i++)
            ck_assert_msg(y[i] == 0, "%s: zeros", kv_fmt_name(fmt));
    }
    /* INT4: constant V rows and constant K channels decode to their value
     * exactly (scale 0, min = the value) */
    for (int t = 0; t < 4; t++)
        for (int c = 0; c < 8; c++) {
            x[t * 8 + c] = 0.1f * (float)c - 0.3f;   /* K: channel c constant over slots */
            x[32 + t * 8 + c] = 1.7f * (float)t - 2; /* V: row t constant */
        }
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, KV_FMT_I4, enc, 4), 0);
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_I4, enc, KV_FMT_F32, y, 4), 0);
    ck_assert_int_eq(memcmp(x, y, sizeof x), 0);
    /* INT8: a row of one value and zeros: the value is +-127 steps, exact up
     * to the rounding of max / 127 * 127 */
    memset(x, 0, sizeof x);
    x[3] = 5.5f, x[32 + 9] = -0.75f;
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, KV_FMT_I8, enc, 4), 0);
    ck_assert_int_eq(((int8_t *)enc)[3], 127);
    ck_assert_int_eq(((int8_t *)enc)[4 * 8 + 4 * 4 + 9], -127); /* V slab after K's 32 + 16 */
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_I8, enc, KV_FMT_F32, y, 4), 0);
    ck_assert_float_eq_tol(y[3], 5.5f, 1e-6f);
    ck_assert_float_eq_tol(y[32 + 9], -0.75f, 1e-6f);
    ck_assert_float_eq(y[4], 0.0f);
}
END_TEST

/* Conversions between formats go through floats: F16 -> INT8 equals
 * F32(decoded F16) -> INT8; same-format partial copies zero the padding and
 * may run in place. */
START_TEST(test_conversions) {
    kern_kv_shape_t s = {2, 2, 16, 8};
    size_t nf = s_block_floats(&s);
    uint64_t rng = 77;
    float *x = malloc(nf * 4), *xd = malloc(nf * 4);
    size_t maxb = kv_fmt_block_bytes(&s, KV_FMT_F32);
    uint8_t *h = malloc(maxb), *a = malloc(maxb), *b = malloc(maxb), *c = malloc(maxb);
    s_fill(&s, x, 8, D_OUTLIERS, &rng);
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, KV_FMT_F16, h, 8), 0);
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F16, h, KV_FMT_F32, xd, 8), 0);
    for (int to = KV_FMT_I8; to <= KV_FMT_I4; to++) {
        ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F16, h, to, a, 8), 0);
        ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, xd, to, b, 8), 0);
        ck_assert_int_eq(memcmp(a, b, kv_fmt_block_bytes(&s, to)), 0);
    }
    /* same format, partial: a copy of the valid slots, zeros after, in place too */
    for (int fmt = 0; fmt < KV_FMT_COUNT; fmt++) {
        size_t bytes = kv_fmt_block_bytes(&s, fmt);
        ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, fmt, a, 5), 0);
        /* a block of 8 cut to 5: the slots past 5 become zeros, in place or
         * not (INT4's K groups span the valid slots, so there 8 cut to 5 is
         * not an encoding of 5: only the in-place copy of a is checked) */
        if (fmt != KV_FMT_I4)
            ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, fmt, c, 8), 0);
        else
            memcpy(c, a, bytes);
        ck_assert_int_eq(kv_codec_convert(&s, fmt, c, fmt, b, 5), 0);
        ck_assert_msg(memcmp(a, b, bytes) == 0, "%s: partial copy", kv_fmt_name(fmt));
        ck_assert_int_eq(kv_codec_convert(&s, fmt, c, fmt, c, 5), 0); /* in place */
        ck_assert_msg(memcmp(a, c, bytes) == 0, "%s: partial in-place copy", kv_fmt_name(fmt));
        ck_assert_int_eq(kv_codec_convert(&s, fmt, a, fmt, b, 8), 0); /* full: plain copy */
        ck_assert_int_eq(memcmp(a, b, bytes), 0);
    }
    /* bad arguments */
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, KV_FMT_F16, h, 0), -EINVAL);
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, KV_FMT_F16, h, 9), -EINVAL);
    ck_assert_int_eq(kv_codec_convert(&s, 7, x, KV_FMT_F16, h, 8), -EINVAL);
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, x, -1, h, 8), -EINVAL);
    ck_assert_int_eq(kv_codec_convert(NULL, KV_FMT_F32, x, KV_FMT_F16, h, 8), -EINVAL);
    ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, NULL, KV_FMT_F16, h, 8), -EINVAL);
    free(x), free(xd), free(h), free(a), free(b), free(c);
}
END_TEST

/* The forward pass writes K and V into a KERN_I8 (and KERN_F16) pool; the
 * codec's conversion of the same values from an F32 pool must give the same
 * bytes.  K and V of layer 0 depend only on the tokens, so the pools must
 * agree exactly there; deeper layers see attention over the quantized KV, so
 * they are compared after decoding, within a loose bound (a wrong slab order
 * or scale position would be far off).  A synthetic model, head_dim 64, 20
 * tokens: one full block of 16 and a partial one of 4. */
START_TEST(test_pool_layout_is_codec) {
    char path[] = "/tmp/strata_kvcodec_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[256];
    test_synth_t syn = {.n_layer = 3,
                        .d_model = 256,
                        .n_head = 4,
                        .n_head_kv = 2,
                        .d_ff = 128,
                        .n_vocab = 64,
                        .seed = 5};
    ck_assert_msg(test_synth_model(path, &syn, err, sizeof err) == 0, "%s", err);
    model_t *m = model_load(path, err, sizeof err);
    unlink(path);
    ck_assert_msg(m != NULL, "%s", err);
    const model_config_t *cfg = model_config(m);
    ck_assert_int_eq(cfg->head_dim, 64);
    const int bs = 16, n = 20;
    kern_kv_shape_t s = model_kv_shape(cfg, bs);
    int32_t toks[20], pos[20], seq[20] = {0}, blocks[2] = {1, 0};
    bool want[20] = {false};
    for (int i = 0; i < n; i++)
        toks[i] = 3 + (i * 7) % 60, pos[i] = i;
    model_seq_view_t sv = {blocks, 2, NULL, 0, 0};
    model_batch_t b = {n, toks, pos, seq, want, 1, &sv, NULL};
    kern_kv_pool_t pools[3];
    const kern_type_t types[3] = {KERN_F32, KERN_F16, KERN_I8};
    model_ctx_t *ctx = model_ctx_new(m, n, 64, 2, NULL);
    ck_assert_ptr_nonnull(ctx);
    for (int p = 0; p < 3; p++) {
        ck_assert_int_eq(kern_kv_pool_init(&pools[p], &s, types[p], 2), 0);
        ck_assert_uint_eq(pools[p].block_bytes,
                          kv_fmt_block_bytes(&s, kv_fmt_of_pool_type(types[p])));
        memset(pools[p].base, 0, pools[p].block_bytes * 2); /* the padding slots compare */
        ck_assert_int_eq(model_ctx_forward(ctx, &b, &pools[p], NULL), 0);
    }
    const int D = cfg->head_dim, Hkv = cfg->n_head_kv;
    size_t nf = s_block_floats(&s);
    float *dec = malloc(nf * 4);
    for (int bi = 0; bi < 2; bi++) {
        int nv = bi == 0 ? bs : n - bs; /* logical block bi lives in blocks[bi] */
        const uint8_t *f32 = pools[0].base + (size_t)blocks[bi] * pools[0].block_bytes;
        for (int p = 1; p < 3; p++) {
            int fmt = kv_fmt_of_pool_type(types[p]);
            size_t bytes = kv_fmt_block_bytes(&s, fmt);
            uint8_t *enc = malloc(bytes);
            const uint8_t *pool = pools[p].base + (size_t)blocks[bi] * pools[p].block_bytes;
            ck_assert_int_eq(kv_codec_convert(&s, KV_FMT_F32, f32, fmt, enc, nv), 0);
            /* layer 0: its 2 * Hkv slabs, exactly */
            size_t slab = bytes / ((size_t)s.n_layer * 2 * Hkv);
            ck_assert_msg(memcmp(enc, pool, 2 * Hkv * slab) == 0,
                          "%s pool block %d layer 0 differs from the codec", kv_fmt_name(fmt), bi);
            /* all layers: decoded pool near the F32 pool */
            ck_assert_int_eq(kv_codec_convert(&s, fmt, pool, KV_FMT_F32, dec, nv), 0);
            const float *ref = (const float *)f32;
            for (int l = 0; l < s.n_layer; l++)
                for (int kv = 0; kv < 2; kv++)
                    for (int h = 0; h < Hkv; h++)
                        for (int t = 0; t < nv; t++) {
                            size_t o = (((size_t)(l * 2 + kv) * Hkv + h) * bs + t) * D;
                            double rmax = 0, e = 0;
                            for (int c = 0; c < D; c++) {
                                rmax = fmax(rmax, fabs(ref[o + c]));
                                e = fmax(e, fabs((double)dec[o + c] - ref[o + c]));
                            }
                            ck_assert_msg(e <= 0.1 * rmax + 1e-6,
                                          "%s layer %d %s head %d pos %d: error %.3g of %.3g",
                                          kv_fmt_name(fmt), l, kv ? "V" : "K", h, bi * bs + t, e,
                                          rmax);
                        }
            free(enc);
        }
    }
    free(dec);
    for (int p = 0; p < 3; p++)
        kern_kv_pool_free(&pools[p]);
    model_ctx_destroy(&ctx);
    model_destroy(&m);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("kv_codec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_names_and_sizes);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_exact_cases);
    tcase_add_test(tc, test_conversions);
    tcase_add_test(tc, test_pool_layout_is_codec);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_NOFORK);
}
