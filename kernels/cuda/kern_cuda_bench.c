/* kern_cuda_bench.c - the GPU kernel microbenchmark scripts/device-check runs:
 * decode mat-vec (nc = 1) and small-batch (nc = 8) bandwidth per weight type
 * on Llama-3.2-1B's matrix shapes, against the device's HBM bandwidth as a
 * copy kernel measures it, and cublasGemmEx F16 TFLOP/s at prefill shapes.
 * Prints Markdown tables (pasteable into BENCHMARKS.md).  Exits 2 without a
 * device.  Usage: strata_cuda_bench [iterations (default 50)]
 *         strata_cuda_bench --probe   (print the device's name; exit 2 without one) */
#include "cuda/kern_cuda.h"
#include "kern_ops.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "strata_cuda_bench: %s failed (%d): %s\n", #call, rc_,                 \
                    kern_cuda_last_error(c));                                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Llama-3.2-1B: d_model 2048, FFN 8192, 32 query and 8 KV heads of 64, vocabulary 128256. */
typedef struct {
    const char *name; /* which matrix */
    int nr, k;        /* rows (outputs), columns (inputs) */
} s_shape_t;

static const s_shape_t k_shapes[] = {
    {"attn_q/o 2048x2048", 2048, 2048},    {"attn_k/v 512x2048", 512, 2048},
    {"ffn_gate/up 8192x2048", 8192, 2048}, {"ffn_down 2048x8192", 2048, 8192},
    {"output 128256x2048", 128256, 2048},
};

/* Seconds per call of nc-column matmuls on a weight of the shape, best of iters. */
static double s_time_matmul(kern_cuda_ctx_t *c, kern_type_t wt, const s_shape_t *s, int nc,
                            int iters, size_t *bytes) {
    const kern_ops_t *ref = kern_ops_ref();
    size_t row = kern_row_size(wt, s->k);
    *bytes = row * (size_t)s->nr;
    /* one quantized random row, repeated: valid scales, and no CPU time spent */
    float *f = malloc(sizeof(float) * (size_t)s->k);
    uint8_t *r0 = malloc(row), *w = malloc(*bytes);
    uint64_t st = 88172645463325252ull;
    for (int i = 0; i < s->k; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        f[i] = (float)((st >> 40) & 0xFFFF) / 32768.0f - 1.0f;
    }
    if (wt == KERN_F32)
        memcpy(r0, f, row);
    else
        ref->quant_row(wt, f, r0, s->k);
    for (int r = 0; r < s->nr; r++)
        memcpy(w + row * r, r0, row);
    void *dw, *dx, *dout;
    CHECK(kern_cuda_malloc(c, &dw, *bytes));
    CHECK(kern_cuda_malloc(c, &dx, sizeof(float) * (size_t)s->k * nc));
    CHECK(kern_cuda_malloc(c, &dout, sizeof(float) * (size_t)s->nr * nc));
    CHECK(kern_cuda_upload(c, dw, w, *bytes));
    CHECK(kern_cuda_memzero(c, dx, sizeof(float) * (size_t)s->k * nc));
    double best = 1e30;
    for (int i = 0; i <= iters; i++) {
        double t;
        CHECK(kern_cuda_timer_start(c));
        CHECK(kern_cuda_matmul(c, wt, s->k, s->nr, nc, dw, row, dx, (size_t)s->k, dout,
                               (size_t)s->nr));
        CHECK(kern_cuda_timer_stop(c, &t));
        if (i > 0 && t < best) /* the first call warms up */
            best = t;
    }
    CHECK(kern_cuda_sync(c));
    kern_cuda_free(c, dw);
    kern_cuda_free(c, dx);
    kern_cuda_free(c, dout);
    free(f);
    free(r0);
    free(w);
    return best;
}

static double s_time_gemm(kern_cuda_ctx_t *c, int m, int n, int k, int iters) {
    void *a, *b, *out;
    CHECK(kern_cuda_malloc(c, &a, 2 * (size_t)m * k));
    CHECK(kern_cuda_malloc(c, &b, 2 * (size_t)k * n));
    CHECK(kern_cuda_malloc(c, &out, 4 * (size_t)m * n));
    CHECK(kern_cuda_memzero(c, a, 2 * (size_t)m * k));
    CHECK(kern_cuda_memzero(c, b, 2 * (size_t)k * n));
    double best = 1e30;
    for (int i = 0; i <= iters; i++) {
        double t;
        CHECK(kern_cuda_timer_start(c));
        CHECK(kern_cuda_gemm_f16(c, m, n, k, a, b, out));
        CHECK(kern_cuda_timer_stop(c, &t));
        if (i > 0 && t < best)
            best = t;
    }
    kern_cuda_free(c, a);
    kern_cuda_free(c, b);
    kern_cuda_free(c, out);
    return best;
}

int main(int argc, char **argv) {
    bool probe = argc > 1 && !strcmp(argv[1], "--probe");
    int iters = argc > 1 && !probe ? atoi(argv[1]) : 50;
    if (iters < 1)
        iters = 1;
    if (kern_cuda_device_count() < 1) {
        fprintf(stderr, "strata_cuda_bench: no CUDA device (no driver, or no GPU visible)\n");
        return 2;
    }
    char name[256] = "?";
    kern_cuda_device_name(name, sizeof name);
    if (probe) {
        printf("%d CUDA device(s); device 0: %s\n", kern_cuda_device_count(), name);
        return 0;
    }
    kern_cuda_ctx_t *c = kern_cuda_ctx_new(0);
    if (!c) {
        fprintf(stderr, "strata_cuda_bench: cannot make a CUDA context on device 0\n");
        return 1;
    }
    double copy_gbps = 0;
    CHECK(kern_cuda_copy_bandwidth(c, (size_t)1 << 30, 10, &copy_gbps));
    printf("### GPU kernels: %s\n\n", name);
    printf("HBM bandwidth (device copy kernel, 1 GiB, read + write): **%.0f GB/s**\n\n", copy_gbps);
    const kern_type_t types[] = {KERN_F16, KERN_Q8_0, KERN_Q4_0, KERN_Q4_1, KERN_Q4_K, KERN_Q6_K};
    const int n_types = (int)(sizeof types / sizeof types[0]);
    const int n_shapes = (int)(sizeof k_shapes / sizeof k_shapes[0]);
    for (int nc = 1; nc <= 8; nc += 7) {
        printf("Mat-vec, nc = %d (%s): weight GB/s and %% of the copy bandwidth\n\n", nc,
               nc == 1 ? "decode, batch 1" : "small batch");
        printf("| shape |");
        for (int t = 0; t < n_types; t++)
            printf(" %s |", kern_type_traits(types[t])->name);
        printf("\n|---|");
        for (int t = 0; t < n_types; t++)
            printf("---|");
        printf("\n");
        for (int s = 0; s < n_shapes; s++) {
            printf("| %s |", k_shapes[s].name);
            for (int t = 0; t < n_types; t++) {
                size_t bytes;
                double sec = s_time_matmul(c, types[t], &k_shapes[s], nc, iters, &bytes);
                double gbps = bytes / sec / 1e9;
                printf(" %.0f (%.0f%%) |", gbps, 100.0 * gbps / copy_gbps);
                fflush(stdout);
            }
            printf("\n");
        }
        printf("\n");
    }
    printf("cublasGemmEx, F16 in, F32 accumulate and out (prefill shapes)\n\n");
    printf("| m x n x k | ms | TFLOP/s |\n|---|---|---|\n");
    const int g[][3] = {
        {2048, 512, 2048}, {8192, 512, 2048}, {2048, 512, 8192}, {4096, 4096, 4096}};
    for (int i = 0; i < 4; i++) {
        double sec = s_time_gemm(c, g[i][0], g[i][1], g[i][2], iters);
        printf("| %d x %d x %d | %.3f | %.1f |\n", g[i][0], g[i][1], g[i][2], sec * 1e3,
               2.0 * g[i][0] * g[i][1] * g[i][2] / sec / 1e12);
    }
    kern_cuda_ctx_destroy(&c);
    return 0;
}
