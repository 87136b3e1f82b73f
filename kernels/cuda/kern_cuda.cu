// kern_cuda.cu - CUDA kernels and device helpers behind kern_cuda.h.
#include "kern_cuda.h"

#include <cerrno>
#include <cstdio>
#include <cuda_runtime.h>

extern "C" int kern_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}

extern "C" int kern_cuda_device_name(char *buf, int len) {
    cudaDeviceProp p;
    if (kern_cuda_device_count() < 1 || cudaGetDeviceProperties(&p, 0) != cudaSuccess)
        return -ENODEV;
    snprintf(buf, (size_t)len, "%s", p.name);
    return 0;
}

// One block per row: a tree reduction of x^2 in shared memory, then scale.
__global__ static void s_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    extern __shared__ float part[];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *orow = out + (size_t)blockIdx.x * n;
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i] * xr[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    float scale = rsqrtf(part[0] / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        orow[i] = xr[i] * scale * w[i];
}

extern "C" int kern_cuda_rmsnorm_host(float *out, const float *x, const float *w, int n_rows, int n,
                                      float eps) {
    if (kern_cuda_device_count() < 1)
        return -ENODEV;
    float *dx = nullptr, *dw = nullptr, *dout = nullptr;
    size_t bytes = (size_t)n_rows * n * sizeof(float);
    int rc = -EIO;
    if (cudaMalloc(&dx, bytes) != cudaSuccess || cudaMalloc(&dout, bytes) != cudaSuccess ||
        cudaMalloc(&dw, n * sizeof(float)) != cudaSuccess)
        goto done;
    if (cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dw, w, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        goto done;
    s_rmsnorm<<<n_rows, 256, 256 * sizeof(float)>>>(dout, dx, dw, n, eps);
    if (cudaGetLastError() != cudaSuccess ||
        cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        goto done;
    rc = 0;
done:
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dout);
    return rc;
}
