/* test_cuda.c - every CUDA kernel against the CPU reference.  Skips (CTest
 * code 77) in a build without CUDA or on a machine without a GPU. */
#include "kern_ops.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef STRATA_HAVE_CUDA
#include "cuda/kern_cuda.h"

int main(void) {
    int n_dev = kern_cuda_device_count();
    if (n_dev < 1)
        test_skip(false, "no CUDA device"); /* CI may lack a GPU: a skip there too */
    char name[256];
    kern_cuda_device_name(name, sizeof name);
    printf("CUDA device 0: %s\n", name);
    const int rows = 7, n = 576;
    uint64_t st = 1;
    float *x = malloc(sizeof(float) * rows * n), *w = malloc(sizeof(float) * n);
    float *ref = malloc(sizeof(float) * rows * n), *got = malloc(sizeof(float) * rows * n);
    for (int i = 0; i < rows * n; i++)
        x[i] = test_rand_f32(&st, -3, 3);
    for (int i = 0; i < n; i++)
        w[i] = test_rand_f32(&st, 0.5f, 1.5f);
    for (int r = 0; r < rows; r++)
        kern_ops_ref()->rmsnorm(ref + r * n, x + r * n, w, n, 1e-5f);
    if (kern_cuda_rmsnorm_host(got, x, w, rows, n, 1e-5f) != 0) {
        printf("FAIL: kern_cuda_rmsnorm_host\n");
        return 1;
    }
    double worst = 0;
    for (int i = 0; i < rows * n; i++)
        worst = fmax(worst, fabs(ref[i] - got[i]) / (fabs(ref[i]) + 1e-3));
    printf("rmsnorm: worst relative error %.2e (tolerance 1e-5)\n", worst);
    free(x);
    free(w);
    free(ref);
    free(got);
    if (worst > 1e-5) {
        printf("1 passed, 1 failed\n");
        return 1;
    }
    printf("1 passed, 0 failed\n");
    return 0;
}
#else
int main(void) {
    test_skip(false, "built without CUDA (STRATA_CUDA=OFF or no nvcc)");
}
#endif
