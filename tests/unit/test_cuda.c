/* test_cuda.c - the CUDA kernels against the CPU reference: matmul for every
 * weight type on both paths (dequantize-on-the-fly mat-vec and cuBLAS F16
 * GEMM) and every shape class (decode nc = 1, small batch, prefill), F16
 * dequantization, RMSNorm, softmax, SwiGLU, RoPE and the embedding lookup.
 * Skips (CTest code 77) in a build without CUDA or on a machine without a GPU.
 * Attention and KV transfers: test_cuda_attn.c; sampling: test_cuda_sample.c. */
#include "kern_ops.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STRATA_HAVE_CUDA
#include "cuda/kern_cuda.h"

static int g_pass, g_fail;

static void s_report(bool ok, const char *what, double worst, double tol) {
    printf("%s %-44s worst %.3e (tolerance %.1e)\n", ok ? "ok  " : "FAIL", what, worst, tol);
    if (ok)
        g_pass++;
    else
        g_fail++;
}

static void *s_dev(kern_cuda_ctx_t *c, const void *host, size_t bytes) {
    void *d = NULL;
    if (kern_cuda_malloc(c, &d, bytes) || (host && kern_cuda_upload(c, d, host, bytes))) {
        printf("FAIL: device allocation of %zu bytes: %s\n", bytes, kern_cuda_last_error(c));
        exit(1);
    }
    return d;
}

static void s_get(kern_cuda_ctx_t *c, void *host, const void *dev, size_t bytes) {
    if (kern_cuda_sync(c) || kern_cuda_download(c, host, dev, bytes)) {
        printf("FAIL: download: %s\n", kern_cuda_last_error(c));
        exit(1);
    }
}

/* ---- matmul ------------------------------------------------------------------
 * The oracle is exact arithmetic on the reference's dequantized weights: for
 * each output, ref = sum_i w_i x_i in double and mag = sum_i |w_i x_i|.
 *  - mat-vec path: the kernel decodes each weight exactly as the reference (the
 *    same float operations) and accumulates in F32 along a chain of at most
 *    32 + k/1024 + 5 roundings (a lane's fma chain over one group, the groups
 *    a lane adds, the warp's shuffle tree): <= 50 * 2^-24 ~ 3e-6 of mag for the
 *    k used here; tolerance 1e-5 * mag.
 *  - cuBLAS path: weights and activations are rounded to F16 (2^-11 relative
 *    each), so each product is within ~2 * 2^-11 ~ 1e-3 of its value; F32
 *    accumulation adds far less.  Tolerance 2e-3 * mag, plus 1e-6 * k for
 *    elements that fall into F16's subnormal range (absolute error <= 2^-25). */
static void s_matmul_case(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr, int nc,
                          int force_gemm, uint64_t *st) {
    const kern_ops_t *ref = kern_ops_ref();
    size_t row = kern_row_size(wt, k);
    float *wf = malloc(sizeof(float) * (size_t)k);
    float *wd = malloc(sizeof(float) * (size_t)k * nr); /* dequantized weights */
    uint8_t *w = malloc(row * (size_t)nr);
    float *x = malloc(sizeof(float) * (size_t)k * nc);
    float *got = malloc(sizeof(float) * (size_t)nr * nc);
    for (int r = 0; r < nr; r++) {
        for (int64_t i = 0; i < k; i++)
            wf[i] = test_rand_f32(st, -1, 1) * (r % 3 == 0 ? 4.0f : 0.5f);
        if (wt == KERN_F32)
            memcpy(w + row * r, wf, row);
        else
            ref->quant_row(wt, wf, w + row * r, k);
        ref->dequant_row(wt, w + row * r, wd + (size_t)r * k, k);
    }
    for (int64_t i = 0; i < k * nc; i++)
        x[i] = test_rand_f32(st, -1, 1);
    void *dw = s_dev(c, w, row * (size_t)nr);
    float *dx = s_dev(c, x, sizeof(float) * (size_t)k * nc);
    float *dout = s_dev(c, NULL, sizeof(float) * (size_t)nr * nc);
    int rc = kern_cuda_matmul_path(c, force_gemm, wt, k, nr, nc, dw, row, dx, (size_t)k, dout,
                                   (size_t)nr);
    double worst = 0, tol = force_gemm ? 2e-3 : 1e-5;
    bool ok = rc == 0;
    if (ok) {
        s_get(c, got, dout, sizeof(float) * (size_t)nr * nc);
        for (int cc = 0; cc < nc; cc++)
            for (int r = 0; r < nr; r++) {
                double s = 0, mag = 0;
                for (int64_t i = 0; i < k; i++) {
                    double p = (double)wd[(size_t)r * k + i] * x[(size_t)cc * k + i];
                    s += p;
                    mag += fabs(p);
                }
                double bound = tol * mag + (force_gemm ? 1e-6 * (double)k : 0) + 1e-30;
                double e = fabs(got[(size_t)cc * nr + r] - s) / bound * tol;
                worst = fmax(worst, e);
                if (!(fabs(got[(size_t)cc * nr + r] - s) <= bound))
                    ok = false;
            }
    }
    char what[96];
    snprintf(what, sizeof what, "matmul %-5s %s k=%lld nr=%d nc=%d%s", kern_type_traits(wt)->name,
             force_gemm ? "gemm" : "mv", (long long)k, nr, nc, rc ? " (error)" : "");
    s_report(ok, what, worst, tol);
    if (rc)
        printf("     rc %d: %s\n", rc, kern_cuda_last_error(c));
    kern_cuda_free(c, dw);
    kern_cuda_free(c, dx);
    kern_cuda_free(c, dout);
    free(wf);
    free(wd);
    free(w);
    free(x);
    free(got);
}

/* F16 dequantization for the GEMM tiles: each element is the reference's value
 * rounded to F16, so exactly kern_f32_to_f16(reference) (both round to nearest even). */
static void s_dequant_f16_case(kern_cuda_ctx_t *c, kern_type_t wt, int64_t k, int nr,
                               uint64_t *st) {
    const kern_ops_t *ref = kern_ops_ref();
    size_t row = kern_row_size(wt, k);
    float *wf = malloc(sizeof(float) * (size_t)k), *wd = malloc(sizeof(float) * (size_t)k);
    uint8_t *w = malloc(row * (size_t)nr);
    kern_f16_t *got = malloc(2 * (size_t)k * nr);
    for (int r = 0; r < nr; r++) {
        for (int64_t i = 0; i < k; i++)
            wf[i] = test_rand_f32(st, -2, 2);
        if (wt == KERN_F32)
            memcpy(w + row * r, wf, row);
        else
            ref->quant_row(wt, wf, w + row * r, k);
    }
    void *dw = s_dev(c, w, row * (size_t)nr), *dd = s_dev(c, NULL, 2 * (size_t)k * nr);
    int rc = kern_cuda_dequant_f16(c, wt, k, nr, dw, row, dd);
    int bad = rc ? 1 : 0;
    if (!rc) {
        s_get(c, got, dd, 2 * (size_t)k * nr);
        for (int r = 0; r < nr; r++) {
            ref->dequant_row(wt, w + row * r, wd, k);
            for (int64_t i = 0; i < k; i++)
                bad += got[(size_t)r * k + i] != kern_f32_to_f16(wd[i]);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "dequant_f16 %s (bit-exact)", kern_type_traits(wt)->name);
    s_report(bad == 0, what, bad, 0);
    kern_cuda_free(c, dw);
    kern_cuda_free(c, dd);
    free(wf);
    free(wd);
    free(w);
    free(got);
}

/* ---- row ops ------------------------------------------------------------------ */

/* Relative error of got against ref with a floor: max |got - ref| / (|ref| + floor). */
static double s_rel(const float *got, const float *ref, size_t n, double floor_) {
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + floor_));
    return w;
}

static void s_rows(kern_cuda_ctx_t *c, uint64_t *st) {
    const kern_ops_t *ref = kern_ops_ref();
    const int rows = 7, n = 2048 + 5;
    size_t bytes = sizeof(float) * rows * n;
    float *x = malloc(bytes), *w = malloc(sizeof(float) * n), *u = malloc(bytes);
    float *want = malloc(bytes), *got = malloc(bytes);
    for (int i = 0; i < rows * n; i++) {
        x[i] = test_rand_f32(st, -6, 6);
        u[i] = test_rand_f32(st, -2, 2);
    }
    for (int i = 0; i < n; i++)
        w[i] = test_rand_f32(st, 0.5f, 1.5f);
    float *dx = s_dev(c, x, bytes), *dw = s_dev(c, w, sizeof(float) * n), *du = s_dev(c, u, bytes);
    float *dout = s_dev(c, NULL, bytes);

    /* RMSNorm: the same formula; the sum of squares is reordered (a tree of
     * 256 partial sums): relative error ~ log2(n) * 2^-24 in the scale.  1e-5. */
    for (int r = 0; r < rows; r++)
        ref->rmsnorm(want + r * n, x + r * n, w, n, 1e-5f);
    int rc = kern_cuda_rmsnorm(c, dout, dx, dw, rows, n, 1e-5f);
    if (!rc)
        s_get(c, got, dout, bytes);
    double e = rc ? INFINITY : s_rel(got, want, (size_t)rows * n, 1e-3);
    s_report(e <= 1e-5, "rmsnorm 7 x 2053", e, 1e-5);

    /* Softmax: CUDA expf is within 2 ulp, the sum is a tree: 1e-5 relative
     * (floor 1e-9: probabilities far below that are noise in either). */
    memcpy(want, x, bytes);
    for (int r = 0; r < rows; r++)
        ref->softmax(want + r * n, n);
    rc = kern_cuda_copy(c, dout, dx, bytes);
    if (!rc)
        rc = kern_cuda_softmax(c, dout, rows, n);
    if (!rc)
        s_get(c, got, dout, bytes);
    e = rc ? INFINITY : s_rel(got, want, (size_t)rows * n, 1e-9);
    s_report(e <= 1e-5, "softmax 7 x 2053", e, 1e-5);

    /* SwiGLU: g / (1 + expf(-g)) * u with expf within 2 ulp: 1e-6 relative (floor 1e-6). */
    ref->swiglu(want, x, u, rows * n);
    rc = kern_cuda_swiglu(c, dout, dx, du, (int64_t)rows * n);
    if (!rc)
        s_get(c, got, dout, bytes);
    e = rc ? INFINITY : s_rel(got, want, (size_t)rows * n, 1e-6);
    s_report(e <= 1e-6, "swiglu 14371", e, 1e-6);

    /* RoPE: the reference's expression, products unfused: exact unless the
     * reference itself was contracted to fma; tolerance 2^-22 relative (floor 1e-6). */
    const int n_tok = 5, H = 9, D = 64;
    for (int neox = 0; neox < 2; neox++)
        for (int n_rot = D; n_rot >= D / 2; n_rot -= D / 2) {
            size_t qb = sizeof(float) * n_tok * H * D;
            float *cs = malloc(sizeof(float) * n_tok * n_rot);
            for (int t = 0; t < n_tok; t++)
                for (int i = 0; i < n_rot / 2; i++) {
                    double th = (t * 37 + 3) * pow(10000.0, -2.0 * i / n_rot);
                    cs[t * n_rot + 2 * i] = (float)cos(th);
                    cs[t * n_rot + 2 * i + 1] = (float)sin(th);
                }
            memcpy(want, x, qb);
            for (int t = 0; t < n_tok; t++)
                ref->rope(want + t * H * D, H, D, n_rot, cs + t * n_rot, neox);
            float *dcs = s_dev(c, cs, sizeof(float) * n_tok * n_rot);
            rc = kern_cuda_copy(c, dout, dx, qb);
            if (!rc)
                rc = kern_cuda_rope(c, dout, n_tok, H, D, n_rot, dcs, neox);
            if (!rc)
                s_get(c, got, dout, qb);
            e = rc ? INFINITY : s_rel(got, want, (size_t)n_tok * H * D, 1e-6);
            char what[64];
            snprintf(what, sizeof what, "rope %s n_rot=%d", neox ? "neox" : "norm", n_rot);
            s_report(e <= 2.4e-7, what, e, 2.4e-7);
            kern_cuda_free(c, dcs);
            free(cs);
        }
    kern_cuda_free(c, dx);
    kern_cuda_free(c, dw);
    kern_cuda_free(c, du);
    kern_cuda_free(c, dout);
    free(x);
    free(w);
    free(u);
    free(want);
    free(got);
}

/* Embedding lookup: rows decoded with the reference's float operations, so
 * equal to dequant_row exactly; an id out of range gives a zero row. */
static void s_embed_case(kern_cuda_ctx_t *c, kern_type_t wt, uint64_t *st) {
    const kern_ops_t *ref = kern_ops_ref();
    const int n_rows = 50, dim = 512, n_tok = 6;
    size_t row = kern_row_size(wt, dim);
    uint8_t *table = malloc(row * n_rows);
    float *f = malloc(sizeof(float) * dim), *want = calloc((size_t)n_tok * dim, sizeof(float));
    float *got = malloc(sizeof(float) * n_tok * dim);
    for (int r = 0; r < n_rows; r++) {
        for (int i = 0; i < dim; i++)
            f[i] = test_rand_f32(st, -1, 1);
        if (wt == KERN_F32)
            memcpy(table + row * r, f, row);
        else
            ref->quant_row(wt, f, table + row * r, dim);
    }
    int32_t ids[6] = {0, 49, 7, 7, 50 /* out of range */, 23};
    for (int t = 0; t < n_tok; t++)
        if (ids[t] < n_rows)
            ref->dequant_row(wt, table + row * ids[t], want + (size_t)t * dim, dim);
    void *dt = s_dev(c, table, row * n_rows);
    int32_t *di = s_dev(c, ids, sizeof ids);
    float *dout = s_dev(c, NULL, sizeof(float) * n_tok * dim);
    int rc = kern_cuda_embed(c, wt, dt, row, n_rows, di, n_tok, dim, dout);
    int bad = rc ? 1 : 0;
    if (!rc) {
        s_get(c, got, dout, sizeof(float) * n_tok * dim);
        for (int i = 0; i < n_tok * dim; i++)
            bad += got[i] != want[i];
    }
    char what[64];
    snprintf(what, sizeof what, "embed %s (exact)", kern_type_traits(wt)->name);
    s_report(bad == 0, what, bad, 0);
    kern_cuda_free(c, dt);
    kern_cuda_free(c, di);
    kern_cuda_free(c, dout);
    free(table);
    free(f);
    free(want);
    free(got);
}

/* Bad arguments are refused before anything is launched. */
static void s_errors(kern_cuda_ctx_t *c) {
    float *d = s_dev(c, NULL, 4096);
    bool ok = kern_cuda_matmul(c, KERN_Q5_0, 32, 1, 1, d, 22, d, 32, d, 1) == -ENOTSUP &&
              kern_cuda_matmul(c, KERN_Q4_K, 32, 1, 1, d, 144, d, 32, d, 1) == -EINVAL &&
              kern_cuda_matmul(c, KERN_Q4_0, 32, 0, 1, d, 18, d, 32, d, 1) == -EINVAL &&
              kern_cuda_rmsnorm(c, d, d, NULL, 1, 4, 1e-5f) == -EINVAL && kern_cuda_sync(c) == 0;
    s_report(ok, "argument checks", 0, 0);
    kern_cuda_free(c, d);
}

int main(void) {
    if (kern_cuda_device_count() < 1)
        test_skip(false, "no CUDA device"); /* CI may lack a GPU: a skip there too */
    char name[256];
    kern_cuda_device_name(name, sizeof name);
    printf("CUDA device 0: %s\n", name);
    kern_cuda_ctx_t *c = kern_cuda_ctx_new(0);
    if (!c) {
        printf("FAIL: kern_cuda_ctx_new(0)\n");
        return 1;
    }
    uint64_t st = 12345;
    const kern_type_t types[] = {KERN_F32,  KERN_F16,  KERN_Q4_0, KERN_Q4_1,
                                 KERN_Q8_0, KERN_Q4_K, KERN_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        kern_type_t t = types[i];
        s_matmul_case(c, t, 768, 67, 1, 0, &st);   /* decode */
        s_matmul_case(c, t, 2048, 130, 1, 0, &st); /* decode, longer rows */
        s_matmul_case(c, t, 768, 67, 3, 0, &st);   /* small batch */
        s_matmul_case(c, t, 768, 33, 8, 0, &st);   /* small batch, the largest mat-vec nc */
        s_matmul_case(c, t, 512, 21, 13, 0, &st);  /* mat-vec forced past 8: column chunks */
        s_matmul_case(c, t, 768, 67, 40, 1, &st);  /* prefill: cuBLAS */
        s_matmul_case(c, t, 1024, 300, 9, 1, &st); /* just past the mat-vec limit */
        s_dequant_f16_case(c, t, 512, 5, &st);
        s_embed_case(c, t, &st);
    }
    s_rows(c, &st);
    s_errors(c);
    kern_cuda_ctx_destroy(&c);
    kern_cuda_ctx_destroy(&c); /* safe twice */
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
#else
int main(void) {
    test_skip(false, "built without CUDA (STRATA_CUDA=OFF or no nvcc)");
}
#endif
