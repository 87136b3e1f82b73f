/* test_backend.c - the backend seam (kern_backend.h): the CPU backend gives
 * bit for bit what the kernels it wraps give when called directly, and its
 * sampler picks model_sampler_sample's token.  The CUDA backend is compared
 * with it in the cuda-labelled suites (test_cuda*.c). */
#include "kern_backend.h"
#include "kern_kv.h"
#include "model_sampler.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void rand_fill(float *x, size_t n, uint64_t *st, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = test_rand_f32(st, lo, hi);
}

START_TEST(table_is_complete) {
    kern_backend_t *be = kern_backend_cpu_new(NULL);
    ck_assert_ptr_nonnull(be);
    ck_assert_str_eq(be->name, "cpu");
    ck_assert_ptr_nonnull(be->matmul[KERN_Q4_K]);
    ck_assert_ptr_nonnull(be->matmul[KERN_F16]);
    ck_assert_ptr_null(be->matmul[KERN_Q8_K]); /* an activation type, not a weight */
    ck_assert(be->attention && be->kv_store && be->rmsnorm && be->softmax && be->rope &&
              be->swiglu && be->embed && be->sample && be->alloc && be->free && be->upload &&
              be->download && be->sync && be->destroy);
    kern_backend_destroy(&be);
    ck_assert_ptr_null(be);
    kern_backend_destroy(&be); /* safe twice */
#ifndef STRATA_HAVE_CUDA
    ck_assert_ptr_null(kern_backend_cuda_new(0)); /* no CUDA in this build */
#endif
}
END_TEST

/* matmul = quantize the activations to the weight's vec_dot_type, then gemm. */
START_TEST(matmul_is_quant_then_gemm) {
    const kern_ops_t *ops = kern_ops_best();
    kern_backend_t *be = kern_backend_cpu_new(ops);
    const kern_type_t types[] = {KERN_F32,  KERN_F16,  KERN_Q4_0, KERN_Q4_1,
                                 KERN_Q8_0, KERN_Q4_K, KERN_Q6_K};
    const int64_t k = 512;
    const int nr = 19, nc = 5;
    uint64_t st = 3;
    float *wf = malloc(sizeof(float) * k), *x = malloc(sizeof(float) * k * nc);
    float *got = malloc(sizeof(float) * nr * nc), *want = malloc(sizeof(float) * nr * nc);
    rand_fill(x, (size_t)k * nc, &st, -1, 1);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        kern_type_t t = types[ti];
        size_t row = kern_row_size(t, k);
        uint8_t *w = malloc(row * nr);
        for (int r = 0; r < nr; r++) {
            rand_fill(wf, (size_t)k, &st, -1, 1);
            if (t == KERN_F32)
                memcpy(w + row * r, wf, row);
            else
                ops->quant_row(t, wf, w + row * r, k);
        }
        kern_type_t vt = kern_type_traits(t)->vec_dot_type;
        if (vt == KERN_F32) {
            ops->gemm(t, k, nr, nc, w, row, x, (size_t)k * 4, want, nr);
        } else {
            size_t xr = kern_row_size(vt, k);
            uint8_t *xq = malloc(xr * nc);
            for (int c = 0; c < nc; c++)
                ops->quant_row(vt, x + (size_t)c * k, xq + xr * c, k);
            ops->gemm(t, k, nr, nc, w, row, xq, xr, want, nr);
            free(xq);
        }
        ck_assert_int_eq(be->matmul[t](be, t, k, nr, nc, w, row, x, (size_t)k, got, nr), 0);
        ck_assert_mem_eq(got, want, sizeof(float) * nr * nc);
        /* a ragged k is refused, not truncated */
        if (kern_type_traits(t)->block_size > 1)
            ck_assert_int_eq(be->matmul[t](be, t, k - 1, nr, nc, w, row, x, (size_t)k, got, nr),
                             -EINVAL);
        free(w);
    }
    free(wf);
    free(x);
    free(got);
    free(want);
    kern_backend_destroy(&be);
}
END_TEST

START_TEST(row_ops_are_the_kernels) {
    const kern_ops_t *ops = kern_ops_best();
    kern_backend_t *be = kern_backend_cpu_new(ops);
    enum { R = 3, N = 256, T = 4, NH = 5, HD = 32, NROT = 24 }; /* R * N >= T * NH * HD */
    uint64_t st = 5;
    float x[R * N], w[N], u[R * N], got[R * N], want[R * N], cs[T * NROT];
    rand_fill(x, R * N, &st, -4, 4);
    rand_fill(w, N, &st, 0.5f, 1.5f);
    rand_fill(u, R * N, &st, -1, 1);
    rand_fill(cs, T * NROT, &st, -1, 1);
    for (int r = 0; r < R; r++)
        ops->rmsnorm(want + r * N, x + r * N, w, N, 1e-6f);
    ck_assert_int_eq(be->rmsnorm(be, got, x, w, R, N, 1e-6f), 0);
    ck_assert_mem_eq(got, want, sizeof got);

    memcpy(want, x, sizeof x);
    memcpy(got, x, sizeof x);
    for (int r = 0; r < R; r++)
        ops->softmax(want + r * N, N);
    ck_assert_int_eq(be->softmax(be, got, R, N), 0);
    ck_assert_mem_eq(got, want, sizeof got);

    ops->swiglu(want, x, u, R * N);
    ck_assert_int_eq(be->swiglu(be, got, x, u, R * N), 0);
    ck_assert_mem_eq(got, want, sizeof got);

    for (int neox = 0; neox < 2; neox++) {
        memcpy(want, x, sizeof(float) * T * NH * HD);
        memcpy(got, x, sizeof(float) * T * NH * HD);
        for (int t = 0; t < T; t++)
            ops->rope(want + t * NH * HD, NH, HD, NROT, cs + t * NROT, neox);
        ck_assert_int_eq(be->rope(be, got, T, NH, HD, NROT, cs, neox), 0);
        ck_assert_mem_eq(got, want, sizeof(float) * T * NH * HD);
    }
    ck_assert_int_eq(be->rope(be, got, T, NH, HD, HD + 2, cs, false), -EINVAL);
    kern_backend_destroy(&be);
}
END_TEST

START_TEST(embed_is_dequant_row) {
    const kern_ops_t *ops = kern_ops_best();
    kern_backend_t *be = kern_backend_cpu_new(ops);
    enum { ROWS = 10, DIM = 256 };
    uint64_t st = 9;
    float f[DIM], got[3 * DIM], want[3 * DIM];
    size_t row = kern_row_size(KERN_Q4_K, DIM);
    uint8_t *table = malloc(row * ROWS);
    for (int r = 0; r < ROWS; r++) {
        rand_fill(f, DIM, &st, -1, 1);
        ops->quant_row(KERN_Q4_K, f, table + row * r, DIM);
    }
    int32_t ids[3] = {9, 0, 4};
    for (int t = 0; t < 3; t++)
        ops->dequant_row(KERN_Q4_K, table + row * ids[t], want + t * DIM, DIM);
    ck_assert_int_eq(be->embed(be, KERN_Q4_K, table, row, ROWS, ids, 3, DIM, got), 0);
    ck_assert_mem_eq(got, want, sizeof got);
    int32_t bad[1] = {ROWS};
    ck_assert_int_eq(be->embed(be, KERN_Q4_K, table, row, ROWS, bad, 1, DIM, got), -EINVAL);
    free(table);
    kern_backend_destroy(&be);
}
END_TEST

/* kv_store puts rows where kern_kv.h says; attention is ops->attention on the
 * slabs of the right layer and KV head, for every pool type. */
START_TEST(kv_store_and_attention_follow_the_layout) {
    const kern_ops_t *ops = kern_ops_best();
    kern_backend_t *be = kern_backend_cpu_new(ops);
    enum { L = 2, H = 4, HKV = 2, D = 32, BS = 8, MAXB = 4, NT = 20 };
    const kern_type_t kv_types[] = {KERN_F32, KERN_F16, KERN_I8};
    kern_kv_shape_t shape = {L, HKV, D, BS};
    int32_t blocks[MAXB] = {3, 0, 2, 1}, pos[NT], seq[NT];
    for (int t = 0; t < NT; t++) {
        pos[t] = t;
        seq[t] = 0;
    }
    uint64_t st = 11;
    float k[NT * HKV * D], v[NT * HKV * D], q[H * D], got[H * D], want[H * D];
    for (size_t ti = 0; ti < 3; ti++) {
        kern_type_t kt = kv_types[ti];
        kern_kv_pool_t pool;
        ck_assert_int_eq(kern_kv_pool_init(&pool, &shape, kt, MAXB), 0);
        size_t slab = kern_kv_slab_bytes(kt, BS, D);
        for (int l = 0; l < L; l++) {
            rand_fill(k, NT * HKV * D, &st, -1, 1);
            rand_fill(v, NT * HKV * D, &st, -1, 1);
            kern_backend_kv_t kv = {.pool = pool.base,
                                    .block_bytes = pool.block_bytes,
                                    .block_size = BS,
                                    .n_head_kv = HKV,
                                    .head_dim = D,
                                    .layer = l,
                                    .kv_type = kt,
                                    .n_tok = NT,
                                    .k = k,
                                    .v = v,
                                    .pos = pos,
                                    .seq = seq,
                                    .blocks = blocks,
                                    .max_blocks = MAXB};
            ck_assert_int_eq(be->kv_store(be, &kv), 0);
        }
        /* token 13's V of head 1 in the last layer: block blocks[1], slot 5 */
        const uint8_t *sl = pool.base + (size_t)blocks[13 / BS] * pool.block_bytes +
                            ((size_t)((L - 1) * 2 + 1) * HKV + 1) * slab;
        const float *src = v + (13 * HKV + 1) * D;
        if (kt == KERN_F32)
            ck_assert_mem_eq(sl + (size_t)(13 % BS) * D * 4, src, D * 4);
        else if (kt == KERN_F16)
            for (int d = 0; d < D; d++)
                ck_assert_uint_eq(((const kern_f16_t *)sl)[(13 % BS) * D + d],
                                  kern_f32_to_f16(src[d]));
        else {
            int8_t qrow[D];
            float sc = kern_i8_quant_row(src, qrow, D), stored;
            ck_assert_mem_eq(sl + (size_t)(13 % BS) * D, qrow, D);
            memcpy(&stored, sl + (size_t)BS * D + (size_t)(13 % BS) * 4, 4);
            ck_assert(stored == sc);
        }
        /* attention of the token at position 17 (n_ctx 18), layer 1, vs the kernel */
        rand_fill(q, H * D, &st, -1, 1);
        int32_t n_ctx[1] = {18}, s0[1] = {0};
        kern_backend_attn_t a = {.n_head = H,
                                 .n_head_kv = HKV,
                                 .head_dim = D,
                                 .n_tok = 1,
                                 .q = q,
                                 .out = got,
                                 .n_ctx = n_ctx,
                                 .seq = s0,
                                 .blocks = blocks,
                                 .max_blocks = MAXB,
                                 .max_ctx = 18,
                                 .pool = pool.base,
                                 .block_bytes = pool.block_bytes,
                                 .block_size = BS,
                                 .layer = 1,
                                 .kv_type = kt,
                                 .scale = 0.125f};
        ck_assert_int_eq(be->attention(be, &a), 0);
        float scratch[2 * 18];
        for (int hk = 0; hk < HKV; hk++) {
            kern_attn_args_t d = {.head_dim = D,
                                  .n_q = H / HKV,
                                  .q = q + hk * 2 * D,
                                  .out = want + hk * 2 * D,
                                  .n_ctx = 18,
                                  .blocks = blocks,
                                  .block_size = BS,
                                  .k_base = pool.base + ((size_t)(1 * 2 + 0) * HKV + hk) * slab,
                                  .v_base = pool.base + ((size_t)(1 * 2 + 1) * HKV + hk) * slab,
                                  .block_stride = pool.block_bytes,
                                  .kv_type = kt,
                                  .scale = 0.125f,
                                  .scratch = scratch};
            ops->attention(&d);
        }
        ck_assert_mem_eq(got, want, sizeof got);
        kern_kv_pool_free(&pool);
    }
    kern_backend_destroy(&be);
}
END_TEST

/* The backend's host sampler and model_sampler_sample pick the same token. */
START_TEST(sample_is_model_sampler) {
    kern_backend_t *be = kern_backend_cpu_new(NULL);
    enum { NV = 3000, ROWS = 16 };
    model_sampler_t *ms = model_sampler_new(NV);
    float *x = malloc(sizeof(float) * NV * ROWS), *xc = malloc(sizeof(float) * NV);
    uint64_t st = 21;
    const model_sampler_params_t ps[] = {model_sampler_defaults(),
                                         {.temperature = 0.0f,
                                          .top_k = 40,
                                          .top_p = 0.95f,
                                          .min_p = 0.05f,
                                          .repeat_penalty = 1.3f,
                                          .repeat_last_n = 64,
                                          .seed = 0},
                                         {.temperature = 1.0f,
                                          .top_k = 0,
                                          .top_p = 0.9f,
                                          .min_p = 0.0f,
                                          .repeat_penalty = 1.0f,
                                          .repeat_last_n = 64,
                                          .seed = 4},
                                         {.temperature = 0.7f,
                                          .top_k = 5000,
                                          .top_p = 1.0f,
                                          .min_p = 0.1f,
                                          .repeat_penalty = 1.1f,
                                          .repeat_last_n = 8,
                                          .seed = 5},
                                         {.temperature = 1.3f,
                                          .top_k = 1,
                                          .top_p = 1.0f,
                                          .min_p = 0.0f,
                                          .repeat_penalty = 1.0f,
                                          .repeat_last_n = 64,
                                          .seed = 6}};
    kern_backend_sample_t kp[ROWS];
    int32_t hist[ROWS * 10], off[ROWS], nh[ROWS], pos[ROWS], ids[ROWS];
    for (int round = 0; round < 5; round++) {
        for (int r = 0; r < ROWS; r++) {
            const model_sampler_params_t *p = &ps[(r + round) % 5];
            kp[r] = (kern_backend_sample_t){p->temperature,
                                            p->top_k,
                                            p->top_p,
                                            p->min_p,
                                            p->repeat_penalty,
                                            p->repeat_last_n,
                                            p->seed + (uint64_t)r};
            for (int i = 0; i < NV; i++) /* coarse values: many ties */
                x[r * NV + i] =
                    roundf(test_rand_f32(&st, -6, 6) * (r % 2 ? 4 : 1000)) / (r % 2 ? 4 : 1000);
            off[r] = r * 10;
            nh[r] = r % 11;
            for (int j = 0; j < 10; j++)
                hist[r * 10 + j] = (int32_t)(test_rand_u64(&st) % 50);
            pos[r] = (int32_t)(test_rand_u64(&st) % 1000);
        }
        float *xb = malloc(sizeof(float) * NV * ROWS);
        memcpy(xb, x, sizeof(float) * NV * ROWS);
        ck_assert_int_eq(be->sample(be, xb, ROWS, NV, kp, hist, off, nh, pos, ids), 0);
        for (int r = 0; r < ROWS; r++) {
            memcpy(xc, x + r * NV, sizeof(float) * NV);
            model_sampler_params_t p = {.temperature = kp[r].temperature,
                                        .top_k = kp[r].top_k,
                                        .top_p = kp[r].top_p,
                                        .min_p = kp[r].min_p,
                                        .repeat_penalty = kp[r].repeat_penalty,
                                        .repeat_last_n = kp[r].repeat_last_n,
                                        .seed = kp[r].seed};
            ck_assert_int_eq(ids[r],
                             model_sampler_sample(ms, &p, xc, hist + off[r], nh[r], pos[r]));
            ck_assert_mem_eq(xb + r * NV, xc, sizeof(float) * NV); /* same penalty, in place */
        }
        free(xb);
    }
    free(x);
    free(xc);
    model_sampler_destroy(&ms);
    kern_backend_destroy(&be);
}
END_TEST

START_TEST(memory_ops) {
    kern_backend_t *be = kern_backend_cpu_new(NULL);
    void *p = NULL;
    ck_assert_int_eq(be->alloc(be, &p, 64), 0);
    const char msg[] = "backend memory";
    char back[sizeof msg];
    ck_assert_int_eq(be->upload(be, p, msg, sizeof msg), 0);
    ck_assert_int_eq(be->download(be, back, p, sizeof msg), 0);
    ck_assert_str_eq(back, msg);
    ck_assert_int_eq(be->sync(be), 0);
    ck_assert_int_eq(be->alloc(be, &p, 0), -EINVAL);
    be->free(be, p);
    be->free(be, NULL);
    kern_backend_destroy(&be);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("backend");
    TCase *tc = tcase_create("cpu");
    tcase_add_test(tc, table_is_complete);
    tcase_add_test(tc, matmul_is_quant_then_gemm);
    tcase_add_test(tc, row_ops_are_the_kernels);
    tcase_add_test(tc, embed_is_dequant_row);
    tcase_add_test(tc, kv_store_and_attention_follow_the_layout);
    tcase_add_test(tc, sample_is_model_sampler);
    tcase_add_test(tc, memory_ops);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(make_suite)
