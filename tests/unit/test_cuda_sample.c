/* test_cuda_sample.c - token choice on the GPU against the CPU: argmax equal
 * to model_argmax, and the device sampler's token equal to
 * model_sampler_sample's for the same logits, parameters, history and
 * position, over random logits (with ties) and a spread of parameters.
 * Skips (CTest code 77) in a build without CUDA or on a machine without a GPU. */
#include "model_sampler.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STRATA_HAVE_CUDA
#include "cuda/kern_cuda.h"

/* Logits of one row: Gaussian-ish values, optionally coarsened to 1/8 steps so
 * that many are equal (the tie order, lowest id first, is part of the contract). */
static void s_logits(float *x, int n, uint64_t *st, bool ties) {
    for (int i = 0; i < n; i++) {
        float v = test_rand_f32(st, -4, 4) + test_rand_f32(st, -4, 4);
        x[i] = ties ? roundf(v * 8) / 8 : v;
    }
}

int main(void) {
    if (kern_cuda_device_count() < 1)
        test_skip(false, "no CUDA device"); /* CI may lack a GPU: a skip there too */
    kern_cuda_ctx_t *c = kern_cuda_ctx_new(0);
    if (!c) {
        printf("FAIL: kern_cuda_ctx_new(0)\n");
        return 1;
    }
    int fails = 0, checks = 0;
    uint64_t st = 99;
    const int vocabs[] = {5000, 49152};
    /* Parameter sets: the defaults, greedy with a penalty, top-k 1, the
     * largest device top-k, top-k = vocabulary (when small), hot and cold
     * temperatures, top-p alone, min-p alone. */
    model_sampler_params_t ps[] = {
        model_sampler_defaults(),
        {0.0f, 40, 0.95f, 0.05f, 1.3f, 64, 0},
        {0.8f, 1, 1.0f, 0.0f, 1.0f, 64, 5},
        {1.0f, KERN_CUDA_TOPK_MAX, 1.0f, 0.0f, 1.0f, 64, 6},
        {1.5f, 200, 0.9f, 0.0f, 1.2f, 16, 7},
        {0.2f, 50, 1.0f, 0.1f, 1.0f, 64, 8},
        {0.7f, 100, 0.5f, 0.0f, 1.0f, 64, 9},
        {1.0f, 256, 1.0f, 0.2f, 1.0f, 64, 10},
    };
    const int n_ps = (int)(sizeof ps / sizeof ps[0]);
    for (int vi = 0; vi < 2; vi++) {
        int n = vocabs[vi], rows = 24;
        model_sampler_t *cpu = model_sampler_new(n);
        float *x = malloc(sizeof(float) * rows * n), *xc = malloc(sizeof(float) * n);
        float *dx = NULL;
        int32_t hist[24 * 20], hoff[24], nh[24], pos[24], got[24], want[24];
        kern_cuda_sample_params_t kp[24];
        if (!cpu || !x || !xc || kern_cuda_malloc(c, (void **)&dx, sizeof(float) * rows * n)) {
            printf("FAIL: allocation\n");
            return 1;
        }
        for (int round = 0; round < 4; round++) {
            for (int r = 0; r < rows; r++) {
                s_logits(x + (size_t)r * n, n, &st, (r + round) % 3 == 0);
                const model_sampler_params_t *p = &ps[(r + round * 5) % n_ps];
                kp[r] = (kern_cuda_sample_params_t){p->temperature,
                                                    p->top_k,
                                                    p->top_p,
                                                    p->min_p,
                                                    p->repeat_penalty,
                                                    p->repeat_last_n,
                                                    p->seed + (uint64_t)round};
                hoff[r] = r * 20;
                nh[r] = r % 20; /* 0 .. 19 history tokens, with repeats */
                for (int j = 0; j < 20; j++)
                    hist[r * 20 + j] = (int32_t)(test_rand_u64(&st) % 64);
                pos[r] = (int32_t)(test_rand_u64(&st) % 4096);
            }
            /* the CPU's choice, row by row, on copies (the penalty edits them) */
            for (int r = 0; r < rows; r++) {
                memcpy(xc, x + (size_t)r * n, sizeof(float) * n);
                model_sampler_params_t p = {
                    kp[r].temperature,    kp[r].top_k,         kp[r].top_p, kp[r].min_p,
                    kp[r].repeat_penalty, kp[r].repeat_last_n, kp[r].seed};
                want[r] = model_sampler_sample(cpu, &p, xc, hist + hoff[r], nh[r], pos[r]);
            }
            int32_t *dh = NULL, *doff = NULL, *dn = NULL;
            int rc = kern_cuda_malloc(c, (void **)&dh, sizeof hist);
            rc = rc ? rc : kern_cuda_malloc(c, (void **)&doff, sizeof hoff);
            rc = rc ? rc : kern_cuda_malloc(c, (void **)&dn, sizeof nh);
            rc = rc ? rc : kern_cuda_upload(c, dh, hist, sizeof hist);
            rc = rc ? rc : kern_cuda_upload(c, doff, hoff, sizeof hoff);
            rc = rc ? rc : kern_cuda_upload(c, dn, nh, sizeof nh);
            rc = rc ? rc : kern_cuda_upload(c, dx, x, sizeof(float) * rows * n);
            rc = rc ? rc : kern_cuda_sample(c, dx, rows, n, kp, dh, doff, dn, pos, got);
            if (rc) {
                printf("FAIL: kern_cuda_sample rc %d: %s\n", rc, kern_cuda_last_error(c));
                fails++;
            } else {
                for (int r = 0; r < rows; r++, checks++)
                    if (got[r] != want[r]) {
                        fails++;
                        printf("FAIL: vocab %d row %d (T %.2f k %d p %.2f min_p %.2f rp %.2f): "
                               "cuda %d, cpu %d\n",
                               n, r, kp[r].temperature, kp[r].top_k, kp[r].top_p, kp[r].min_p,
                               kp[r].repeat_penalty, got[r], want[r]);
                    }
            }
            /* argmax of the unpenalised rows equals model_argmax */
            rc = kern_cuda_upload(c, dx, x, sizeof(float) * rows * n);
            rc = rc ? rc : kern_cuda_argmax(c, dx, rows, n, got);
            for (int r = 0; r < rows; r++, checks++)
                if (rc || got[r] != model_argmax(x + (size_t)r * n, n)) {
                    fails++;
                    printf("FAIL: argmax vocab %d row %d: cuda %d (rc %d), cpu %d\n", n, r, got[r],
                           rc, model_argmax(x + (size_t)r * n, n));
                }
            kern_cuda_free(c, dh);
            kern_cuda_free(c, doff);
            kern_cuda_free(c, dn);
        }
        /* a top-k the device does not do is refused, not approximated */
        kern_cuda_sample_params_t wide = {1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 1};
        int32_t p0 = 0, id = -1;
        checks++;
        if (kern_cuda_sample(c, dx, 1, n, &wide, NULL, NULL, NULL, &p0, &id) != -ENOTSUP) {
            fails++;
            printf("FAIL: top_k 0 over %d tokens should be -ENOTSUP\n", n);
        }
        kern_cuda_free(c, dx);
        free(x);
        free(xc);
        model_sampler_destroy(&cpu);
    }
    /* argmax edge cases: ties take the first index; all -inf gives the first -inf */
    {
        float e[300];
        for (int i = 0; i < 300; i++)
            e[i] = i % 7 == 3 ? 2.0f : 1.0f;
        float *de = NULL;
        int32_t id = -1;
        int rc = kern_cuda_malloc(c, (void **)&de, sizeof e);
        rc = rc ? rc : kern_cuda_upload(c, de, e, sizeof e);
        rc = rc ? rc : kern_cuda_argmax(c, de, 1, 300, &id);
        checks++;
        if (rc || id != model_argmax(e, 300)) {
            fails++;
            printf("FAIL: argmax ties: cuda %d cpu %d\n", id, model_argmax(e, 300));
        }
        for (int i = 0; i < 300; i++)
            e[i] = -INFINITY;
        e[0] = NAN;
        rc = rc ? rc : kern_cuda_upload(c, de, e, sizeof e);
        rc = rc ? rc : kern_cuda_argmax(c, de, 1, 300, &id);
        checks++;
        if (rc || id != model_argmax(e, 300)) {
            fails++;
            printf("FAIL: argmax all -inf: cuda %d cpu %d\n", id, model_argmax(e, 300));
        }
        kern_cuda_free(c, de);
    }
    kern_cuda_ctx_destroy(&c);
    printf("%d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
#else
int main(void) {
    test_skip(false, "built without CUDA (STRATA_CUDA=OFF or no nvcc)");
}
#endif
