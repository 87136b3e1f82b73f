/* test_attention.c - paged attention of every kernel table over the model's real layout
 * (a kern_kv_pool_t of every layer and KV head), against a double-precision softmax;
 * the GQA shapes of the models strata runs, F32 and F16 pools.  test_kernels.c checks
 * the general contract; this suite the pool layout and the decode shapes.
 *
 * STRATA_ATTN_BENCH=1 also prints a micro-benchmark: one decode step's attention (all
 * layers and KV heads of SmolLM2-135M's shape, one thread) per table and pool type at
 * several depths, the minimum thread CPU time of many repetitions. */
#include "kern_kv.h"
#include "kern_ops.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A pool holding n_ctx positions of K and V for every layer and KV head of shape s,
 * random values in [-2, 2) (K) and [-1, 1) (V) as stored in type (F16: rounded), the
 * sequence's blocks in a shuffled order.  kf, vf (layer, head, n_ctx, D) get the values
 * the pool holds, as floats, when not NULL. */
typedef struct {
    kern_kv_shape_t s;
    kern_kv_pool_t pool;
    int32_t *table; /* the sequence's block table */
    int n_ctx;
    float *kf, *vf;
} s_kv_t;

static void s_kv_make(s_kv_t *kv, const kern_kv_shape_t *s, kern_type_t type, int n_ctx, bool keep,
                      uint64_t seed) {
    memset(kv, 0, sizeof *kv);
    kv->s = *s, kv->n_ctx = n_ctx;
    const int nb = (n_ctx + s->block_size - 1) / s->block_size;
    ck_assert_int_eq(kern_kv_pool_init(&kv->pool, s, type, nb + 1), 0);
    kv->table = malloc(sizeof(int32_t) * (size_t)nb);
    uint64_t rng = seed;
    for (int j = 0; j < nb; j++)
        kv->table[j] = j + 1; /* block 0 never used: left poisoned */
    for (int j = nb - 1; j > 0; j--) {
        int o = (int)(test_rand_u64(&rng) % (uint64_t)(j + 1));
        int32_t t = kv->table[j];
        kv->table[j] = kv->table[o], kv->table[o] = t;
    }
    memset(kv->pool.base, 0xCD, kv->pool.block_bytes);
    const int D = s->head_dim, H = s->n_head_kv, bs = s->block_size;
    const size_t elt = type == KERN_F16 ? 2 : 4;
    const size_t slab = kern_kv_slab_bytes(type, bs, D);
    const size_t nval = (size_t)s->n_layer * H * n_ctx * D;
    if (keep) {
        kv->kf = malloc(sizeof(float) * nval);
        kv->vf = malloc(sizeof(float) * nval);
    }
    for (int l = 0; l < s->n_layer; l++)
        for (int h = 0; h < H; h++)
            for (int p = 0; p < n_ctx; p++)
                for (int kvi = 0; kvi < 2; kvi++) {
                    uint8_t *row =
                        kv->pool.base + (size_t)kv->table[p / bs] * kv->pool.block_bytes +
                        ((size_t)(l * 2 + kvi) * H + h) * slab + (size_t)(p % bs) * D * elt;
                    float *dst =
                        keep ? (kvi ? kv->vf : kv->kf) + (((size_t)l * H + h) * n_ctx + p) * D
                             : NULL;
                    for (int i = 0; i < D; i++) {
                        float x = kvi ? test_rand_f32(&rng, -1, 1) : test_rand_f32(&rng, -2, 2);
                        if (type == KERN_F16) {
                            kern_f16_t hx = kern_f32_to_f16(x);
                            memcpy(row + 2 * i, &hx, 2);
                            x = kern_f16_to_f32(hx);
                        } else {
                            memcpy(row + 4 * i, &x, 4);
                        }
                        if (dst)
                            dst[i] = x;
                    }
                }
}

static void s_kv_free(s_kv_t *kv) {
    kern_kv_pool_free(&kv->pool);
    free(kv->table), free(kv->kf), free(kv->vf);
}

/* The arguments of layer l, KV head h, the first n_ctx positions, as the forward pass
 * fills them (model_forward.c). */
static kern_attn_args_t s_args(const s_kv_t *kv, int l, int h, int n_q, int n_ctx, const float *q,
                               float *out, float *scratch) {
    const int D = kv->s.head_dim, H = kv->s.n_head_kv;
    const size_t slab = kern_kv_slab_bytes(kv->pool.type, kv->s.block_size, D);
    return (kern_attn_args_t){
        .head_dim = D,
        .n_q = n_q,
        .q = q,
        .out = out,
        .n_ctx = n_ctx,
        .blocks = kv->table,
        .block_size = kv->s.block_size,
        .k_base = kv->pool.base + ((size_t)(l * 2 + 0) * H + h) * slab,
        .v_base = kv->pool.base + ((size_t)(l * 2 + 1) * H + h) * slab,
        .block_stride = kv->pool.block_bytes,
        .kv_type = kv->pool.type,
        .scale = 1.0f / sqrtf((float)D),
        .scratch = scratch,
    };
}

/* Table i of KERN_ISA_LIST (0 .. KERN_ISA_COUNT-1, the reference first), or
 * NULL where this CPU cannot run it or an earlier table has the same
 * attention (the AVX-VNNI table runs the AVX2 one's). */
static const kern_ops_t *s_table(int i) {
    const kern_ops_t *ops = kern_ops_isa(i);
    for (int j = 0; ops && j < i; j++)
        if (kern_ops_isa(j) && kern_ops_isa(j)->attention == ops->attention)
            return NULL;
    return ops;
}

/* Every table against double precision over the values the pool holds, within 2e-6
 * (relative above 1), for every layer and head of a small model of shape (D, n_q
 * queries per KV head, block size bs). */
static void s_check(kern_type_t type, int D, int n_q, int bs, int n_ctx, uint64_t seed) {
    const kern_kv_shape_t s = {.n_layer = 2, .n_head_kv = 2, .head_dim = D, .block_size = bs};
    s_kv_t kv;
    s_kv_make(&kv, &s, type, n_ctx, true, seed);
    uint64_t rng = seed * 7 + 1;
    float *q = malloc(sizeof(float) * n_q * D), *out = malloc(sizeof(float) * n_q * D);
    float *scratch = malloc(sizeof(float) * n_q * n_ctx);
    double *sc = malloc(sizeof(double) * n_ctx);
    float *want = malloc(sizeof(float) * n_q * D);
    double *want_w = malloc(sizeof(double) * n_ctx);
    float *w = malloc(sizeof(float) * n_ctx);
    for (int l = 0; l < s.n_layer; l++)
        for (int h = 0; h < s.n_head_kv; h++) {
            /* every prefix length is a decode step; try a few */
            const int lens[] = {1, n_ctx / 2 + 1, n_ctx};
            for (int li = 0; li < 3; li++) {
                const int n = lens[li];
                for (int i = 0; i < n_q * D; i++)
                    q[i] = test_rand_f32(&rng, -1, 1);
                const float *kf = kv.kf + ((size_t)l * s.n_head_kv + h) * n_ctx * D;
                const float *vf = kv.vf + ((size_t)l * s.n_head_kv + h) * n_ctx * D;
                for (int p = 0; p < n; p++)
                    want_w[p] = 0.5; /* the kernel adds to what is there */
                for (int g = 0; g < n_q; g++) {
                    double mx = -INFINITY, sum = 0;
                    for (int p = 0; p < n; p++) {
                        double d = 0;
                        for (int i = 0; i < D; i++)
                            d += (double)q[g * D + i] * kf[(size_t)p * D + i];
                        sc[p] = d / sqrt((double)D);
                        mx = fmax(mx, sc[p]);
                    }
                    for (int p = 0; p < n; p++)
                        sum += (sc[p] = exp(sc[p] - mx));
                    for (int p = 0; p < n; p++)
                        want_w[p] += sc[p] / sum;
                    for (int i = 0; i < D; i++) {
                        double o = 0;
                        for (int p = 0; p < n; p++)
                            o += sc[p] * vf[(size_t)p * D + i];
                        want[g * D + i] = (float)(o / sum);
                    }
                }
                for (int ti = 0; ti < KERN_ISA_COUNT; ti++) {
                    const kern_ops_t *ops = s_table(ti);
                    if (ops == NULL)
                        continue;
                    for (int i = 0; i < n_q * D; i++)
                        out[i] = NAN;
                    kern_attn_args_t a = s_args(&kv, l, h, n_q, n, q, out, scratch);
                    ops->attention(&a);
                    for (int i = 0; i < n_q * D; i++)
                        ck_assert_msg(fabs(out[i] - want[i]) < 2e-6 * fmax(1, fabs(want[i])),
                                      "%s %s D %d n_q %d bs %d n_ctx %d layer %d head %d: "
                                      "out[%d] %.9g, want %.9g",
                                      ops->name, type == KERN_F16 ? "f16" : "f32", D, n_q, bs, n, l,
                                      h, i, out[i], want[i]);
                    /* again, collecting the weights: the same output, and each position's
                     * softmax weight summed over the query heads added to w */
                    for (int p = 0; p < n; p++)
                        w[p] = 0.5f;
                    a.weights = w;
                    ops->attention(&a);
                    for (int i = 0; i < n_q * D; i++)
                        ck_assert_msg(fabs(out[i] - want[i]) < 2e-6 * fmax(1, fabs(want[i])),
                                      "%s with weights: out[%d] %.9g, want %.9g", ops->name, i,
                                      out[i], want[i]);
                    for (int p = 0; p < n; p++)
                        ck_assert_msg(fabs(w[p] - want_w[p]) < 2e-6 * n_q,
                                      "%s D %d n_q %d n_ctx %d: weight[%d] %.9g, want %.9g",
                                      ops->name, D, n_q, n, p, w[p], want_w[p]);
                }
            }
        }
    free(q), free(out), free(scratch), free(sc), free(want), free(want_w), free(w);
    s_kv_free(&kv);
}

/* SmolLM2-135M (D 64, 3 queries per KV head), SmolLM2-360M / Llama (D 64, 5; D 128, 4),
 * TinyLlama (D 64, 8), Qwen-like (D 128, 7), no GQA (D 64, 1), in 16-token blocks, at
 * depths across tile and block edges. */
START_TEST(test_attention_pool) {
    const kern_type_t types[] = {KERN_F32, KERN_F16};
    uint64_t seed = 11;
    for (int t = 0; t < 2; t++) {
        s_check(types[t], 64, 3, 16, 70, seed++);
        s_check(types[t], 64, 3, 16, 300, seed++);
        s_check(types[t], 64, 5, 16, 97, seed++);
        s_check(types[t], 64, 8, 16, 33, seed++);
        s_check(types[t], 64, 1, 16, 129, seed++);
        s_check(types[t], 128, 4, 16, 66, seed++);
        s_check(types[t], 128, 7, 32, 75, seed++);
        s_check(types[t], 32, 6, 16, 41, seed++);
        s_check(types[t], 64, 3, 5, 53, seed++);  /* tiles across blocks */
        s_check(types[t], 80, 2, 16, 45, seed++); /* a head_dim of 8-multiples only */
    }
}
END_TEST

/* Inputs far from 0: scores of hundreds (the running max moves by large steps, e^-big
 * underflows to 0), against double precision. */
START_TEST(test_attention_large_scores) {
    const kern_kv_shape_t s = {.n_layer = 1, .n_head_kv = 1, .head_dim = 64, .block_size = 16};
    const kern_type_t types[] = {KERN_F32, KERN_F16};
    for (int t = 0; t < 2; t++) {
        s_kv_t kv;
        const int n = 200, nq = 3, D = 64;
        s_kv_make(&kv, &s, types[t], n, true, 5 + t);
        float q[3 * 64], out[3 * 64], want[3 * 64], scratch[3 * 200];
        double sc[200];
        uint64_t rng = 77;
        for (int i = 0; i < nq * D; i++)
            q[i] = test_rand_f32(&rng, -1, 1) * 30.0f * (float)(1 + i / D);
        for (int g = 0; g < nq; g++) {
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < n; p++) {
                double d = 0;
                for (int i = 0; i < D; i++)
                    d += (double)q[g * D + i] * kv.kf[(size_t)p * D + i];
                sc[p] = d / 8.0;
                mx = fmax(mx, sc[p]);
            }
            for (int p = 0; p < n; p++)
                sum += (sc[p] = exp(sc[p] - mx));
            for (int i = 0; i < D; i++) {
                double o = 0;
                for (int p = 0; p < n; p++)
                    o += sc[p] * kv.vf[(size_t)p * D + i];
                want[g * D + i] = (float)(o / sum);
            }
        }
        for (int ti = 0; ti < KERN_ISA_COUNT; ti++) {
            const kern_ops_t *ops = s_table(ti);
            if (ops == NULL)
                continue;
            kern_attn_args_t a = s_args(&kv, 0, 0, nq, n, q, out, scratch);
            ops->attention(&a);
            /* scores of hundreds: float rounding of the scores is ~1e-5 absolute */
            for (int i = 0; i < nq * D; i++)
                ck_assert_msg(fabs(out[i] - want[i]) < 1e-4, "%s: out[%d] %.9g, want %.9g",
                              ops->name, i, out[i], want[i]);
        }
        s_kv_free(&kv);
    }
}
END_TEST

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The micro-benchmark (STRATA_ATTN_BENCH): prints, per table, pool type and depth, the
 * CPU time of one decode step's attention (30 layers x 3 KV heads, 3 queries each, D 64,
 * 16-token blocks in order) and the K+V bytes it reads per microsecond. */
START_TEST(test_attention_bench) {
    const char *env = getenv("STRATA_ATTN_BENCH");
    if (env == NULL || env[0] == '\0' || env[0] == '0')
        return;
    const kern_kv_shape_t s = {.n_layer = 30, .n_head_kv = 3, .head_dim = 64, .block_size = 16};
    const int depths[] = {1, 128, 512, 1024, 2048};
    const int nq = 3, D = 64, maxn = 2048;
    float *q = malloc(sizeof(float) * nq * D), *out = malloc(sizeof(float) * nq * D);
    float *scratch = malloc(sizeof(float) * nq * maxn);
    uint64_t rng = 3;
    for (int i = 0; i < nq * D; i++)
        q[i] = test_rand_f32(&rng, -1, 1);
    const kern_type_t types[] = {KERN_F32, KERN_F16};
    for (int t = 0; t < 2; t++) {
        s_kv_t kv;
        s_kv_make(&kv, &s, types[t], maxn, false, 9);
        for (int j = 0; j < (maxn + 15) / 16; j++)
            kv.table[j] = j + 1; /* in order, as a fresh sequence gets them */
        for (int ti = 0; ti < KERN_ISA_COUNT; ti++) {
            const kern_ops_t *ops = s_table(ti);
            if (ops == NULL)
                continue;
            for (int di = 0; di < 5; di++) {
                const int n = depths[di];
                const int reps = ti == 0 ? 3 : n < 512 ? 60 : 20;
                double best = INFINITY;
                for (int r = 0; r < reps; r++) {
                    double t0 = s_now();
                    for (int l = 0; l < s.n_layer; l++)
                        for (int h = 0; h < s.n_head_kv; h++) {
                            kern_attn_args_t a = s_args(&kv, l, h, nq, n, q, out, scratch);
                            ops->attention(&a);
                        }
                    double dt = s_now() - t0;
                    best = dt < best ? dt : best;
                }
                double bytes = 2.0 * s.n_layer * s.n_head_kv * n * D * (t ? 2 : 4);
                printf("attn-bench %-6s %s depth %4d: %8.1f us/step  %6.0f MB/s\n", ops->name,
                       t ? "f16" : "f32", n, best * 1e6, bytes / best / 1e6);
            }
        }
        s_kv_free(&kv);
    }
    free(q), free(out), free(scratch);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_attention_pool);
    tcase_add_test(tc, test_attention_large_scores);
    tcase_add_test(tc, test_attention_bench);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
