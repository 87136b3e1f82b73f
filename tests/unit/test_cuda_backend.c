/* test_cuda_backend.c - the CUDA backend through the kern_backend.h table
 * against the CPU backend on the same inputs: the table's wiring (every slot
 * reaches the right kern_cuda.h op with the right arguments), its memory ops,
 * and its refusals (-ENOTSUP, NULL slots) where the CPU backend goes further.
 * Skips (CTest code 77) in a build without CUDA or on a machine without a GPU. */
#include "kern_backend.h"
#include "kern_kv.h"
#include "test_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STRATA_HAVE_CUDA
#include "cuda/kern_cuda.h"

static int g_pass, g_fail;

static void s_report(bool ok, const char *what, double worst, double tol) {
    printf("%s %-40s worst %.3e (tolerance %.1e)\n", ok ? "ok  " : "FAIL", what, worst, tol);
    if (ok)
        g_pass++;
    else
        g_fail++;
}

/* A copy of n bytes of host data in the backend's memory (exits on failure). */
static void *s_put(kern_backend_t *be, const void *host, size_t n) {
    void *p = NULL;
    if (be->alloc(be, &p, n) || (host && be->upload(be, p, host, n))) {
        printf("FAIL: %s alloc/upload of %zu bytes\n", be->name, n);
        exit(1);
    }
    return p;
}

static void s_take(kern_backend_t *be, void *host, const void *p, size_t n) {
    if (be->sync(be) || be->download(be, host, p, n)) {
        printf("FAIL: %s sync/download\n", be->name);
        exit(1);
    }
}

static double s_maxrel(const float *a, const float *b, size_t n, double floor_) {
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - b[i]) / (fabs(b[i]) + floor_));
    return w;
}

int main(void) {
    if (kern_cuda_device_count() < 1)
        test_skip(false, "no CUDA device"); /* CI may lack a GPU: a skip there too */
    kern_backend_t *gpu = kern_backend_cuda_new(0), *cpu = kern_backend_cpu_new(kern_ops_ref());
    if (!gpu || !cpu) {
        printf("FAIL: kern_backend_cuda_new(0) / kern_backend_cpu_new\n");
        return 1;
    }
    uint64_t st = 4242;
    s_report(!strcmp(gpu->name, "cuda") && gpu->matmul[KERN_Q4_K] && gpu->matmul[KERN_Q6_K] &&
                 !gpu->matmul[KERN_Q5_0],
             "table: matmul slots for the CUDA types only", 0, 0);

    /* matmul, Q8_0, decode and prefill: the CPU rounds each activation to Q8_0
     * (error <= max|x of its block| / 254 <= 1/254 here), the GPU does not, so
     * |gpu - cpu| <= sum |w| / 254 plus the GPU path's own error (2e-3 of
     * sum |w x| on cuBLAS); tolerance that bound x 1.05. */
    {
        const int64_t k = 1024;
        const int nr = 96;
        const kern_ops_t *ref = kern_ops_ref();
        size_t row = kern_row_size(KERN_Q8_0, k);
        float *wf = malloc(sizeof(float) * k * nr), *x = malloc(sizeof(float) * k * 24);
        uint8_t *w = malloc(row * nr);
        for (int64_t i = 0; i < k * nr; i++)
            wf[i] = test_rand_f32(&st, -1, 1);
        for (int r = 0; r < nr; r++)
            ref->quant_row(KERN_Q8_0, wf + r * k, w + row * r, k);
        for (int64_t i = 0; i < k * 24; i++)
            x[i] = test_rand_f32(&st, -1, 1);
        for (int nc = 1; nc <= 24; nc += 23) {
            float *got = malloc(sizeof(float) * nr * nc), *want = malloc(sizeof(float) * nr * nc);
            void *dw = s_put(gpu, w, row * nr);
            float *dx = s_put(gpu, x, sizeof(float) * k * nc);
            float *dout = s_put(gpu, NULL, sizeof(float) * nr * nc);
            int rc =
                gpu->matmul[KERN_Q8_0](gpu, KERN_Q8_0, k, nr, nc, dw, row, dx, (size_t)k, dout, nr);
            rc = rc ? rc
                    : cpu->matmul[KERN_Q8_0](cpu, KERN_Q8_0, k, nr, nc, w, row, x, (size_t)k, want,
                                             nr);
            bool ok = rc == 0;
            double worst = 0;
            if (ok) {
                s_take(gpu, got, dout, sizeof(float) * nr * nc);
                float *wd = malloc(sizeof(float) * k);
                for (int r = 0; r < nr; r++) {
                    ref->dequant_row(KERN_Q8_0, w + row * r, wd, k);
                    for (int c = 0; c < nc; c++) {
                        double sw = 0, mag = 0;
                        for (int64_t i = 0; i < k; i++) {
                            sw += fabs(wd[i]);
                            mag += fabs(wd[i] * x[c * k + i]);
                        }
                        double bound = 1.05 * (sw / 254 + (nc > 8 ? 2e-3 : 1e-5) * mag);
                        double e = fabs(got[c * nr + r] - want[c * nr + r]);
                        worst = fmax(worst, e / bound);
                        ok = ok && e <= bound;
                    }
                }
                free(wd);
            }
            s_report(ok, nc == 1 ? "matmul q8_0 nc=1 vs cpu" : "matmul q8_0 nc=24 vs cpu", worst,
                     1.0);
            gpu->free(gpu, dw);
            gpu->free(gpu, dx);
            gpu->free(gpu, dout);
            free(got);
            free(want);
        }
        free(wf);
        free(x);
        free(w);
    }

    /* row ops: tolerances as in test_cuda.c (RMSNorm 1e-5, softmax 1e-5,
     * SwiGLU 1e-6, RoPE 2^-22, all relative) */
    {
        enum { R = 4, N = 1000, T = 3, NH = 4, HD = 64, NROT = 64 };
        size_t nb = sizeof(float) * R * N;
        float *x = malloc(nb), *u = malloc(nb), *w = malloc(sizeof(float) * N);
        float *got = malloc(nb), *want = malloc(nb), cs[T * NROT];
        for (int i = 0; i < R * N; i++) {
            x[i] = test_rand_f32(&st, -5, 5);
            u[i] = test_rand_f32(&st, -1, 1);
        }
        for (int i = 0; i < N; i++)
            w[i] = test_rand_f32(&st, 0.5f, 1.5f);
        for (int i = 0; i < T * NROT / 2; i++) {
            cs[2 * i] = cosf(0.1f * i);
            cs[2 * i + 1] = sinf(0.1f * i);
        }
        float *dx = s_put(gpu, x, nb), *du = s_put(gpu, u, nb), *dw = s_put(gpu, w, 4 * N);
        float *dcs = s_put(gpu, cs, sizeof cs), *dout = s_put(gpu, NULL, nb);
        int rc = gpu->rmsnorm(gpu, dout, dx, dw, R, N, 1e-5f);
        cpu->rmsnorm(cpu, want, x, w, R, N, 1e-5f);
        if (!rc)
            s_take(gpu, got, dout, nb);
        double e = rc ? INFINITY : s_maxrel(got, want, R * N, 1e-3);
        s_report(e <= 1e-5, "rmsnorm via table", e, 1e-5);

        memcpy(want, x, nb);
        cpu->softmax(cpu, want, R, N);
        rc = gpu->upload(gpu, dout, x, nb);
        rc = rc ? rc : gpu->softmax(gpu, dout, R, N);
        if (!rc)
            s_take(gpu, got, dout, nb);
        e = rc ? INFINITY : s_maxrel(got, want, R * N, 1e-9);
        s_report(e <= 1e-5, "softmax via table", e, 1e-5);

        cpu->swiglu(cpu, want, x, u, R * N);
        rc = gpu->swiglu(gpu, dout, dx, du, R * N);
        if (!rc)
            s_take(gpu, got, dout, nb);
        e = rc ? INFINITY : s_maxrel(got, want, R * N, 1e-6);
        s_report(e <= 1e-6, "swiglu via table", e, 1e-6);

        /* geglu (the reference's operations; expf within 2 ulp on the device), scale (exact) */
        cpu->geglu(cpu, want, x, u, R * N);
        rc = gpu->geglu(gpu, dout, dx, du, R * N);
        if (!rc)
            s_take(gpu, got, dout, nb);
        e = rc ? INFINITY : s_maxrel(got, want, R * N, 1e-6);
        s_report(e <= 1e-6, "geglu via table", e, 1e-6);
        memcpy(want, x, nb);
        cpu->scale(cpu, want, R * N, 1.7f);
        rc = gpu->upload(gpu, dout, x, nb);
        rc = rc ? rc : gpu->scale(gpu, dout, R * N, 1.7f);
        if (!rc)
            s_take(gpu, got, dout, nb);
        e = rc ? INFINITY : s_maxrel(got, want, R * N, 1e-9);
        s_report(e == 0, "scale via table", e, 0);

        /* add: a residual (stride N), then a bias (stride 0): exact in both */
        memcpy(want, x, nb);
        cpu->add(cpu, want, u, R, N, (size_t)N);
        cpu->add(cpu, want, w, R, N, 0);
        rc = gpu->upload(gpu, dout, x, nb);
        rc = rc ? rc : gpu->add(gpu, dout, du, R, N, (size_t)N);
        rc = rc ? rc : gpu->add(gpu, dout, dw, R, N, 0);
        if (!rc)
            s_take(gpu, got, dout, nb);
        e = rc ? INFINITY : s_maxrel(got, want, R * N, 1e-9);
        s_report(e == 0, "add (residual, bias) via table", e, 0);

        size_t qb = sizeof(float) * T * NH * HD;
        memcpy(want, x, qb);
        cpu->rope(cpu, want, T, NH, HD, NROT, cs, true);
        rc = gpu->upload(gpu, dout, x, qb);
        rc = rc ? rc : gpu->rope(gpu, dout, T, NH, HD, NROT, dcs, true);
        if (!rc)
            s_take(gpu, got, dout, qb);
        e = rc ? INFINITY : s_maxrel(got, want, T * NH * HD, 1e-6);
        s_report(e <= 2.4e-7, "rope (neox) via table", e, 2.4e-7);
        gpu->free(gpu, dx);
        gpu->free(gpu, du);
        gpu->free(gpu, dw);
        gpu->free(gpu, dcs);
        gpu->free(gpu, dout);
        free(x);
        free(u);
        free(w);
        free(got);
        free(want);
    }

    /* KV store + attention (F16 pool), both backends, one sequence of 300
     * positions and a decode query; tolerance as in test_cuda_attn.c. */
    {
        enum { L = 1, H = 4, HKV = 1, D = 128, BS = 32, MAXB = 10, NT = 300 };
        kern_kv_shape_t shape = {L, HKV, D, BS};
        size_t bb = kern_kv_block_bytes(&shape, KERN_F16);
        int32_t blocks[MAXB] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, pos[NT], seq[NT];
        for (int t = 0; t < NT; t++) {
            pos[t] = t;
            seq[t] = 0;
        }
        size_t kvb = sizeof(float) * NT * HKV * D;
        float *k = malloc(kvb), *v = malloc(kvb), q[H * D], got[H * D], want[H * D];
        for (int i = 0; i < NT * HKV * D; i++) {
            k[i] = test_rand_f32(&st, -1, 1);
            v[i] = test_rand_f32(&st, -1, 1);
        }
        for (int i = 0; i < H * D; i++)
            q[i] = test_rand_f32(&st, -1, 1);
        uint8_t *pool = calloc(MAXB, bb);
        void *dpool = s_put(gpu, pool, bb * MAXB);
        int32_t *dblocks = s_put(gpu, blocks, sizeof blocks), *dpos = s_put(gpu, pos, sizeof pos);
        int32_t *dseq = s_put(gpu, seq, sizeof seq), n_ctx[1] = {NT}, s0[1] = {0};
        int32_t *dn = s_put(gpu, n_ctx, sizeof n_ctx), *ds0 = s_put(gpu, s0, sizeof s0);
        float *dk = s_put(gpu, k, kvb), *dv = s_put(gpu, v, kvb), *dq = s_put(gpu, q, sizeof q);
        float *dout = s_put(gpu, NULL, sizeof got);
        kern_backend_kv_t kc = {.pool = pool,
                                .block_bytes = bb,
                                .block_size = BS,
                                .n_head_kv = HKV,
                                .head_dim = D,
                                .layer = 0,
                                .kv_type = KERN_F16,
                                .n_tok = NT,
                                .k = k,
                                .v = v,
                                .pos = pos,
                                .seq = seq,
                                .blocks = blocks,
                                .max_blocks = MAXB};
        kern_backend_kv_t kg = kc;
        kg.pool = dpool, kg.k = dk, kg.v = dv, kg.pos = dpos, kg.seq = dseq, kg.blocks = dblocks;
        int rc = cpu->kv_store(cpu, &kc);
        rc = rc ? rc : gpu->kv_store(gpu, &kg);
        kern_backend_attn_t ac = {.n_head = H,
                                  .n_head_kv = HKV,
                                  .head_dim = D,
                                  .n_tok = 1,
                                  .q = q,
                                  .out = want,
                                  .n_ctx = n_ctx,
                                  .seq = s0,
                                  .blocks = blocks,
                                  .max_blocks = MAXB,
                                  .max_ctx = NT,
                                  .pool = pool,
                                  .block_bytes = bb,
                                  .block_size = BS,
                                  .layer = 0,
                                  .kv_type = KERN_F16,
                                  .scale = 1.0f / sqrtf((float)D)};
        kern_backend_attn_t ag = ac;
        ag.q = dq, ag.out = dout, ag.n_ctx = dn, ag.seq = ds0, ag.blocks = dblocks;
        ag.pool = dpool;
        rc = rc ? rc : cpu->attention(cpu, &ac);
        rc = rc ? rc : gpu->attention(gpu, &ag);
        double worst = 0;
        if (!rc) {
            s_take(gpu, got, dout, sizeof got);
            for (int i = 0; i < H * D; i++)
                worst = fmax(worst, fabs((double)got[i] - want[i]));
        }
        s_report(!rc && worst <= 2e-4, "kv_store + attention via table", worst, 2e-4);
        /* the sliding window (Gemma 3): only the last 100 of the 300 positions */
        ac.window = ag.window = 100;
        rc = cpu->attention(cpu, &ac);
        rc = rc ? rc : gpu->attention(gpu, &ag);
        worst = 0;
        if (!rc) {
            s_take(gpu, got, dout, sizeof got);
            for (int i = 0; i < H * D; i++)
                worst = fmax(worst, fabs((double)got[i] - want[i]));
        }
        s_report(!rc && worst <= 2e-4, "attention with a window of 100 via table", worst, 2e-4);
        ac.window = ag.window = 0;
        ag.kv_type = KERN_F32;
        s_report(gpu->attention(gpu, &ag) == -ENOTSUP, "attention over an F32 pool: -ENOTSUP", 0,
                 0);

        /* sampling: the same token as the CPU backend for the default parameters */
        enum { NV = 4000 };
        float *lg = malloc(sizeof(float) * NV);
        for (int i = 0; i < NV; i++)
            lg[i] = test_rand_f32(&st, -8, 8);
        float *dl = s_put(gpu, lg, sizeof(float) * NV);
        kern_backend_sample_t sp = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 17};
        int bad = 0;
        for (int p = 0; p < 50 && !bad; p++) {
            int32_t pp = p, id_g = -1, id_c = -2;
            bad += gpu->sample(gpu, dl, 1, NV, &sp, NULL, NULL, NULL, &pp, &id_g) != 0;
            bad += cpu->sample(cpu, lg, 1, NV, &sp, NULL, NULL, NULL, &pp, &id_c) != 0;
            bad += id_g != id_c;
        }
        s_report(bad == 0, "sample via table: 50 positions equal", bad, 0);
        gpu->free(gpu, dl);
        free(lg);
        void *pp[] = {dpool, dblocks, dpos, dseq, dn, ds0, dk, dv, dq, dout};
        for (size_t i = 0; i < sizeof pp / sizeof pp[0]; i++)
            gpu->free(gpu, pp[i]);
        free(pool);
        free(k);
        free(v);
    }
    kern_backend_destroy(&gpu);
    kern_backend_destroy(&gpu); /* safe twice */
    kern_backend_destroy(&cpu);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
#else
int main(void) {
    test_skip(false, "built without CUDA (STRATA_CUDA=OFF or no nvcc)");
}
#endif
