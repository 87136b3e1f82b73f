/* test_cuda_sample.c - token choice on the GPU against the CPU: argmax equal
 * to model_argmax, and the device sampler's token equal to
 * model_sampler_sample's for the same logits, parameters, history and
 * position, over random logits (with ties) and a spread of parameters (logit
 * bias and OpenAI's presence / frequency penalties included: the adjusted logits
 * must be bitwise the CPU's).
 * Skips (CTest code 77) in a build without CUDA or on a machine without a GPU. */
#include "model_sampler.h"
#include "test_util.h"

#include <errno.h>
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
        {.temperature = 0.0f,
         .top_k = 40,
         .top_p = 0.95f,
         .min_p = 0.05f,
         .repeat_penalty = 1.3f,
         .repeat_last_n = 64},
        {.temperature = 0.8f,
         .top_k = 1,
         .top_p = 1.0f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .seed = 5},
        {.temperature = 1.0f,
         .top_k = KERN_CUDA_TOPK_MAX,
         .top_p = 1.0f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .seed = 6},
        {.temperature = 1.5f,
         .top_k = 200,
         .top_p = 0.9f,
         .repeat_penalty = 1.2f,
         .repeat_last_n = 16,
         .seed = 7},
        {.temperature = 0.2f,
         .top_k = 50,
         .top_p = 1.0f,
         .min_p = 0.1f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .seed = 8},
        {.temperature = 0.7f,
         .top_k = 100,
         .top_p = 0.5f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .seed = 9},
        {.temperature = 1.0f,
         .top_k = 256,
         .top_p = 1.0f,
         .min_p = 0.2f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .seed = 10},
        /* OpenAI's penalties: greedy and sampled, positive and negative, with the
         * repetition penalty too */
        {.temperature = 0.0f,
         .top_k = 40,
         .top_p = 1.0f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .presence_penalty = 0.5f,
         .frequency_penalty = 1.5f},
        {.temperature = 0.9f,
         .top_k = 64,
         .top_p = 0.95f,
         .min_p = 0.05f,
         .repeat_penalty = 1.1f,
         .repeat_last_n = 8,
         .seed = 11,
         .presence_penalty = -0.7f,
         .frequency_penalty = 2.0f},
        {.temperature = 0.0f,
         .top_k = 0,
         .top_p = 1.0f,
         .repeat_penalty = 1.0f,
         .repeat_last_n = 64,
         .presence_penalty = 2.0f,
         .frequency_penalty = -2.0f},
    };
    const int n_ps = (int)(sizeof ps / sizeof ps[0]);
    for (int vi = 0; vi < 2; vi++) {
        int n = vocabs[vi], rows = 24;
        model_sampler_t *cpu = model_sampler_new(n);
        float *x = malloc(sizeof(float) * rows * n), *xc = malloc(sizeof(float) * n);
        float *dx = NULL;
        float *xa = malloc(sizeof(float) * rows * n); /* the CPU's adjusted rows */
        int32_t hist[24 * 20], hoff[24], nh[24], pos[24], got[24], want[24];
        kern_cuda_sample_params_t kp[24];
        /* logit_bias: 6 distinct tokens on every third row, among the history's ids
         * (so bias and penalties meet): -100 (a ban), +100 (forced), and others */
        kern_cuda_logit_bias_t bias[24 * 6] = {{0, 0}};
        kern_cuda_logit_bias_t *dbias = NULL;
        if (!cpu || !x || !xc || !xa ||
            kern_cuda_malloc(c, (void **)&dx, sizeof(float) * rows * n) ||
            kern_cuda_malloc(c, (void **)&dbias, sizeof bias)) {
            printf("FAIL: allocation\n");
            return 1;
        }
        for (int round = 0; round < 4; round++) {
            for (int r = 0; r < rows; r++) {
                s_logits(x + (size_t)r * n, n, &st, (r + round) % 3 == 0);
                const model_sampler_params_t *p = &ps[(r + round * 5) % n_ps];
                int nb = (r + round) % 3 == 1 ? 6 : 0;
                for (int j = 0; j < nb; j++) {
                    float v = j == 0                ? -100.0f
                              : j == 1 && round % 2 ? 100.0f
                                                    : test_rand_f32(&st, -8, 8);
                    bias[r * 6 + j] = (kern_cuda_logit_bias_t){(int32_t)(j * 11 + round), v};
                }
                kp[r] = (kern_cuda_sample_params_t){p->temperature,
                                                    p->top_k,
                                                    p->top_p,
                                                    p->min_p,
                                                    p->repeat_penalty,
                                                    p->repeat_last_n,
                                                    p->seed + (uint64_t)round,
                                                    p->presence_penalty,
                                                    p->frequency_penalty,
                                                    r % 7, /* gen_start: prompt of 0..6 */
                                                    nb ? dbias + r * 6 : NULL,
                                                    nb};
                hoff[r] = r * 20;
                nh[r] = r % 20; /* 0 .. 19 history tokens, with repeats */
                for (int j = 0; j < 20; j++)
                    hist[r * 20 + j] = (int32_t)(test_rand_u64(&st) % 64);
                pos[r] = (int32_t)(test_rand_u64(&st) % 4096);
            }
            /* the CPU's choice, row by row, on copies (the penalty edits them) */
            for (int r = 0; r < rows; r++) {
                memcpy(xc, x + (size_t)r * n, sizeof(float) * n);
                model_sampler_params_t p = {kp[r].temperature,
                                            kp[r].top_k,
                                            kp[r].top_p,
                                            kp[r].min_p,
                                            kp[r].repeat_penalty,
                                            kp[r].repeat_last_n,
                                            kp[r].seed,
                                            kp[r].presence_penalty,
                                            kp[r].frequency_penalty,
                                            kp[r].gen_start,
                                            kp[r].n_bias ? (const model_logit_bias_t *)&bias[r * 6]
                                                         : NULL,
                                            kp[r].n_bias};
                want[r] = model_sampler_sample(cpu, &p, xc, hist + hoff[r], nh[r], pos[r]);
                memcpy(xa + (size_t)r * n, xc, sizeof(float) * n);
            }
            int32_t *dh = NULL, *doff = NULL, *dn = NULL;
            int rc = kern_cuda_malloc(c, (void **)&dh, sizeof hist);
            rc = rc ? rc : kern_cuda_malloc(c, (void **)&doff, sizeof hoff);
            rc = rc ? rc : kern_cuda_malloc(c, (void **)&dn, sizeof nh);
            rc = rc ? rc : kern_cuda_upload(c, dh, hist, sizeof hist);
            rc = rc ? rc : kern_cuda_upload(c, doff, hoff, sizeof hoff);
            rc = rc ? rc : kern_cuda_upload(c, dn, nh, sizeof nh);
            rc = rc ? rc : kern_cuda_upload(c, dbias, bias, sizeof bias);
            rc = rc ? rc : kern_cuda_upload(c, dx, x, sizeof(float) * rows * n);
            rc = rc ? rc : kern_cuda_sample(c, dx, rows, n, kp, dh, doff, dn, pos, got);
            /* bias and penalties left the device's logits bitwise as the CPU's */
            float *xd = malloc(sizeof(float) * rows * n);
            rc = rc ? rc : !xd ? -ENOMEM : kern_cuda_download(c, xd, dx, sizeof(float) * rows * n);
            for (int r = 0; !rc && r < rows; r++, checks++)
                if (memcmp(xd + (size_t)r * n, xa + (size_t)r * n, sizeof(float) * n)) {
                    fails++;
                    printf("FAIL: vocab %d row %d: adjusted logits differ (pp %.2f fp %.2f, %d "
                           "biases)\n",
                           n, r, kp[r].presence_penalty, kp[r].frequency_penalty, kp[r].n_bias);
                }
            free(xd);
            if (rc) {
                printf("FAIL: kern_cuda_sample rc %d: %s\n", rc, kern_cuda_last_error(c));
                fails++;
            } else {
                for (int r = 0; r < rows; r++, checks++)
                    if (got[r] != want[r]) {
                        fails++;
                        printf("FAIL: vocab %d row %d (T %.2f k %d p %.2f min_p %.2f rp %.2f pp "
                               "%.2f fp %.2f, %d biases): cuda %d, cpu %d\n",
                               n, r, kp[r].temperature, kp[r].top_k, kp[r].top_p, kp[r].min_p,
                               kp[r].repeat_penalty, kp[r].presence_penalty,
                               kp[r].frequency_penalty, kp[r].n_bias, got[r], want[r]);
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
        kern_cuda_sample_params_t wide = {.temperature = 1.0f,
                                          .top_p = 1.0f,
                                          .repeat_penalty = 1.0f,
                                          .repeat_last_n = 64,
                                          .seed = 1};
        int32_t p0 = 0, id = -1;
        checks++;
        if (kern_cuda_sample(c, dx, 1, n, &wide, NULL, NULL, NULL, &p0, &id) != -ENOTSUP) {
            fails++;
            printf("FAIL: top_k 0 over %d tokens should be -ENOTSUP\n", n);
        }
        kern_cuda_free(c, dx);
        kern_cuda_free(c, dbias);
        free(x);
        free(xc);
        free(xa);
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
