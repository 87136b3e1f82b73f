// kern_cuda.cu - devices, contexts, device memory, the pinned-buffer pool for
// KV transfers, error plumbing and the measurement helpers behind kern_cuda.h.
#include "cuda_common.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>

int kern_cuda_fail(kern_cuda_ctx_t *c, cudaError_t e, const char *what) {
    if (c)
        snprintf(c->err, sizeof c->err, "%s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int kern_cuda_blas_fail(kern_cuda_ctx_t *c, cublasStatus_t s, const char *what) {
    if (c)
        snprintf(c->err, sizeof c->err, "%s: cuBLAS status %d", what, (int)s);
    return s == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

int kern_cuda_launched(kern_cuda_ctx_t *c, const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : kern_cuda_fail(c, e, what);
}

int kern_cuda_scratch(kern_cuda_ctx_t *c, size_t bytes, void **p) {
    if (bytes > c->scratch_bytes) {
        // The old scratch may still be read by queued kernels: wait first.
        KC_CHECK(c, cudaStreamSynchronize(c->stream));
        cudaFree(c->scratch);
        c->scratch = nullptr;
        c->scratch_bytes = 0;
        size_t want = bytes + bytes / 4;
        c->scratch_gen++;
        KC_CHECK(c, cudaMalloc(&c->scratch, want));
        c->scratch_bytes = want;
    }
    *p = c->scratch;
    return 0;
}

extern "C" int kern_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" int kern_cuda_device_name(char *buf, int len) {
    cudaDeviceProp p;
    if (!buf || len < 1)
        return -EINVAL;
    if (kern_cuda_device_count() < 1 || cudaGetDeviceProperties(&p, 0) != cudaSuccess)
        return -ENODEV;
    snprintf(buf, (size_t)len, "%s", p.name);
    return 0;
}

extern "C" kern_cuda_ctx_t *kern_cuda_ctx_new(int device) {
    if (device < 0 || device >= kern_cuda_device_count())
        return nullptr;
    kern_cuda_ctx_t *c = (kern_cuda_ctx_t *)calloc(1, sizeof *c);
    if (!c)
        return nullptr;
    c->device = device;
    if (cudaSetDevice(device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&c->t0) != cudaSuccess || cudaEventCreate(&c->t1) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->order, cudaEventDisableTiming) != cudaSuccess)
        goto fail;
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        c->blas = nullptr;
        goto fail;
    }
    if (cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    return c;
fail:
    kern_cuda_ctx_destroy(&c);
    return nullptr;
}

extern "C" int kern_cuda_ctx_bind(kern_cuda_ctx_t *c) {
    if (!c)
        return -EINVAL;
    KC_CHECK(c, cudaSetDevice(c->device));
    return 0;
}

extern "C" void kern_cuda_ctx_destroy(kern_cuda_ctx_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kern_cuda_ctx_t *c = *self_p;
    cudaSetDevice(c->device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->blas)
        cublasDestroy(c->blas);
    cudaFree(c->scratch);
    if (c->t0)
        cudaEventDestroy(c->t0);
    if (c->t1)
        cudaEventDestroy(c->t1);
    if (c->order)
        cudaEventDestroy(c->order);
    if (c->copy)
        cudaStreamDestroy(c->copy);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    *self_p = nullptr;
}

extern "C" int kern_cuda_sync(kern_cuda_ctx_t *c) {
    if (!c)
        return -EINVAL;
    KC_CHECK(c, cudaStreamSynchronize(c->stream));
    return kern_cuda_launched(c, "kernel");
}

extern "C" const char *kern_cuda_last_error(const kern_cuda_ctx_t *c) {
    return c ? c->err : "";
}

// ---- memory -----------------------------------------------------------------

extern "C" int kern_cuda_malloc(kern_cuda_ctx_t *c, void **dptr, size_t bytes) {
    if (!c || !dptr || bytes == 0)
        return -EINVAL;
    *dptr = nullptr;
    cudaError_t e = cudaMalloc(dptr, bytes);
    if (e != cudaSuccess) {
        *dptr = nullptr;
        return kern_cuda_fail(c, e, "cudaMalloc");
    }
    return 0;
}

extern "C" void kern_cuda_free(kern_cuda_ctx_t *c, void *dptr) {
    (void)c;
    if (dptr)
        cudaFree(dptr);
}

static int s_copy(kern_cuda_ctx_t *c, void *dst, const void *src, size_t bytes,
                  cudaMemcpyKind kind) {
    if (!c || (!dst && bytes) || (!src && bytes))
        return -EINVAL;
    if (bytes == 0)
        return 0;
    KC_CHECK(c, cudaMemcpyAsync(dst, src, bytes, kind, c->stream));
    KC_CHECK(c, cudaStreamSynchronize(c->stream));
    return 0;
}

extern "C" int kern_cuda_upload(kern_cuda_ctx_t *c, void *dst, const void *src, size_t bytes) {
    return s_copy(c, dst, src, bytes, cudaMemcpyHostToDevice);
}

extern "C" int kern_cuda_download(kern_cuda_ctx_t *c, void *dst, const void *src, size_t bytes) {
    return s_copy(c, dst, src, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int kern_cuda_copy(kern_cuda_ctx_t *c, void *dst, const void *src, size_t bytes) {
    if (!c || !dst || !src)
        return -EINVAL;
    KC_CHECK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return 0;
}

extern "C" int kern_cuda_mem_info(kern_cuda_ctx_t *c, size_t *free_bytes, size_t *total_bytes) {
    if (!c || !free_bytes || !total_bytes)
        return -EINVAL;
    KC_CHECK(c, cudaSetDevice(c->device));
    KC_CHECK(c, cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

extern "C" int kern_cuda_memzero(kern_cuda_ctx_t *c, void *dst, size_t bytes) {
    if (!c || !dst)
        return -EINVAL;
    KC_CHECK(c, cudaMemsetAsync(dst, 0, bytes, c->stream));
    return 0;
}

// ---- graphs -----------------------------------------------------------------

struct kern_cuda_graph_t {
    cudaGraphExec_t exec; // the instantiated graph
    uint64_t gen;         // scratch_gen when it was captured
};

extern "C" int kern_cuda_capture_begin(kern_cuda_ctx_t *c) {
    if (!c)
        return -EINVAL;
    KC_CHECK(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capture_gen = c->scratch_gen;
    return 0;
}

extern "C" int kern_cuda_capture_end(kern_cuda_ctx_t *c, kern_cuda_graph_t **out) {
    if (!c || !out)
        return -EINVAL;
    *out = nullptr;
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || !g) {
        if (g)
            cudaGraphDestroy(g);
        cudaGetLastError(); // an invalidated capture is not sticky: clear it
        return kern_cuda_fail(c, e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated,
                              "stream capture");
    }
    if (c->scratch_gen != c->capture_gen) { // scratch moved while capturing: stale at once
        cudaGraphDestroy(g);
        return -ESTALE;
    }
    kern_cuda_graph_t *h = (kern_cuda_graph_t *)calloc(1, sizeof *h);
    if (!h) {
        cudaGraphDestroy(g);
        return -ENOMEM;
    }
    e = cudaGraphInstantiate(&h->exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        free(h);
        return kern_cuda_fail(c, e, "cudaGraphInstantiate");
    }
    h->gen = c->capture_gen;
    *out = h;
    return 0;
}

extern "C" int kern_cuda_graph_launch(kern_cuda_ctx_t *c, kern_cuda_graph_t *h) {
    if (!c || !h)
        return -EINVAL;
    if (h->gen != c->scratch_gen)
        return -ESTALE;
    KC_CHECK(c, cudaGraphLaunch(h->exec, c->stream));
    return 0;
}

extern "C" void kern_cuda_graph_free(kern_cuda_graph_t *h) {
    if (!h)
        return;
    cudaGraphExecDestroy(h->exec);
    free(h);
}

// ---- the pinned pool --------------------------------------------------------

extern "C" int kern_cuda_host_alloc(kern_cuda_ctx_t *c, void **p, size_t bytes) {
    if (!c || !p || bytes == 0)
        return -EINVAL;
    *p = nullptr;
    KC_CHECK(c, cudaSetDevice(c->device));
    KC_CHECK(c, cudaHostAlloc(p, bytes, cudaHostAllocPortable));
    return 0;
}

extern "C" void kern_cuda_host_free(kern_cuda_ctx_t *c, void *p) {
    (void)c;
    if (p)
        cudaFreeHost(p);
}

struct kern_cuda_pinned_t {
    int n_bufs;       // buffers in the pool
    size_t buf_bytes; // bytes each
    void **bufs;      // (n_bufs) the cudaHostAlloc'd buffers
    int *free_list;   // (n_bufs) indices of free buffers, a stack
    int n_free;       // entries on the stack
};

extern "C" kern_cuda_pinned_t *kern_cuda_pinned_new(kern_cuda_ctx_t *ctx, int n_bufs,
                                                    size_t buf_bytes) {
    if (!ctx || n_bufs < 1 || buf_bytes == 0)
        return nullptr;
    kern_cuda_pinned_t *p = (kern_cuda_pinned_t *)calloc(1, sizeof *p);
    if (!p)
        return nullptr;
    p->buf_bytes = buf_bytes;
    p->bufs = (void **)calloc((size_t)n_bufs, sizeof *p->bufs);
    p->free_list = (int *)calloc((size_t)n_bufs, sizeof *p->free_list);
    if (!p->bufs || !p->free_list)
        goto fail;
    cudaSetDevice(ctx->device);
    for (int i = 0; i < n_bufs; i++) {
        cudaError_t e = cudaHostAlloc(&p->bufs[i], buf_bytes, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            p->bufs[i] = nullptr;
            kern_cuda_fail(ctx, e, "cudaHostAlloc");
            goto fail;
        }
        p->n_bufs = i + 1;
        p->free_list[p->n_free++] = i;
    }
    return p;
fail:
    kern_cuda_pinned_destroy(&p);
    return nullptr;
}

extern "C" void kern_cuda_pinned_destroy(kern_cuda_pinned_t **self_p) {
    if (!self_p || !*self_p)
        return;
    kern_cuda_pinned_t *p = *self_p;
    for (int i = 0; i < p->n_bufs; i++)
        if (p->bufs[i])
            cudaFreeHost(p->bufs[i]);
    free(p->bufs);
    free(p->free_list);
    free(p);
    *self_p = nullptr;
}

extern "C" void *kern_cuda_pinned_get(kern_cuda_pinned_t *p) {
    if (!p || p->n_free == 0)
        return nullptr;
    return p->bufs[p->free_list[--p->n_free]];
}

extern "C" int kern_cuda_pinned_put(kern_cuda_pinned_t *p, void *buf) {
    if (!p || !buf)
        return -EINVAL;
    for (int i = 0; i < p->n_bufs; i++) {
        if (p->bufs[i] != buf)
            continue;
        for (int j = 0; j < p->n_free; j++)
            if (p->free_list[j] == i)
                return -EINVAL; // put twice
        p->free_list[p->n_free++] = i;
        return 0;
    }
    return -EINVAL;
}

extern "C" int kern_cuda_pinned_in_use(const kern_cuda_pinned_t *p) {
    return p ? p->n_bufs - p->n_free : 0;
}

static int s_block_copy(kern_cuda_ctx_t *c, void *dst, const void *src, size_t bytes,
                        cudaMemcpyKind kind) {
    if (!c || !dst || !src || bytes == 0)
        return -EINVAL;
    // what the compute stream queued before (the forward pass that wrote the block, a
    // copy-on-write) lands first; later compute work does not wait for the copy
    KC_CHECK(c, cudaEventRecord(c->order, c->stream));
    KC_CHECK(c, cudaStreamWaitEvent(c->copy, c->order, 0));
    KC_CHECK(c, cudaMemcpyAsync(dst, src, bytes, kind, c->copy));
    KC_CHECK(c, cudaStreamSynchronize(c->copy));
    return 0;
}

extern "C" int kern_cuda_block_d2h(kern_cuda_ctx_t *c, void *host, const void *dev, size_t bytes) {
    return s_block_copy(c, host, dev, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int kern_cuda_block_h2d(kern_cuda_ctx_t *c, void *dev, const void *host, size_t bytes) {
    return s_block_copy(c, dev, host, bytes, cudaMemcpyHostToDevice);
}

// ---- host-buffer RMSNorm (tests) --------------------------------------------

extern "C" int kern_cuda_rmsnorm_host(float *out, const float *x, const float *w, int n_rows, int n,
                                      float eps) {
    if (!out || !x || !w || n_rows < 1 || n < 1)
        return -EINVAL;
    kern_cuda_ctx_t *c = kern_cuda_ctx_new(0);
    if (!c)
        return -ENODEV;
    float *dx = nullptr, *dw = nullptr;
    size_t bytes = (size_t)n_rows * n * sizeof(float);
    int rc = kern_cuda_malloc(c, (void **)&dx, bytes);
    if (!rc)
        rc = kern_cuda_malloc(c, (void **)&dw, (size_t)n * sizeof(float));
    if (!rc)
        rc = kern_cuda_upload(c, dx, x, bytes);
    if (!rc)
        rc = kern_cuda_upload(c, dw, w, (size_t)n * sizeof(float));
    if (!rc)
        rc = kern_cuda_rmsnorm(c, dx, dx, dw, n_rows, n, eps);
    if (!rc)
        rc = kern_cuda_download(c, out, dx, bytes);
    kern_cuda_free(c, dx);
    kern_cuda_free(c, dw);
    kern_cuda_ctx_destroy(&c);
    return rc;
}

// ---- measurement ------------------------------------------------------------

// A plain streaming copy with 16-byte loads: what a bandwidth-bound kernel can reach.
__global__ static void s_copy_kernel(uint4 *dst, const uint4 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

extern "C" int kern_cuda_copy_bandwidth(kern_cuda_ctx_t *c, size_t bytes, int iters, double *gbps) {
    if (!c || !gbps || bytes < 16 || iters < 1)
        return -EINVAL;
    void *a = nullptr, *b = nullptr;
    int rc = kern_cuda_malloc(c, &a, bytes);
    if (!rc)
        rc = kern_cuda_malloc(c, &b, bytes);
    if (!rc)
        rc = kern_cuda_memzero(c, a, bytes);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device);
    double best = 0;
    for (int i = 0; !rc && i <= iters; i++) {
        rc = kern_cuda_timer_start(c);
        if (rc)
            break;
        s_copy_kernel<<<sms * 8, 512, 0, c->stream>>>((uint4 *)b, (const uint4 *)a, bytes / 16);
        rc = kern_cuda_launched(c, "copy kernel");
        double s = 0;
        if (!rc)
            rc = kern_cuda_timer_stop(c, &s);
        double gb = 2.0 * (double)(bytes / 16 * 16) / 1e9; // read + written
        if (!rc && i > 0 && s > 0 && gb / s > best)        // the first run warms up
            best = gb / s;
    }
    kern_cuda_free(c, a);
    kern_cuda_free(c, b);
    *gbps = best;
    return rc;
}

extern "C" int kern_cuda_timer_start(kern_cuda_ctx_t *c) {
    if (!c)
        return -EINVAL;
    KC_CHECK(c, cudaEventRecord(c->t0, c->stream));
    return 0;
}

extern "C" int kern_cuda_timer_stop(kern_cuda_ctx_t *c, double *seconds) {
    if (!c || !seconds)
        return -EINVAL;
    KC_CHECK(c, cudaEventRecord(c->t1, c->stream));
    KC_CHECK(c, cudaEventSynchronize(c->t1));
    float ms = 0;
    KC_CHECK(c, cudaEventElapsedTime(&ms, c->t0, c->t1));
    *seconds = ms / 1e3;
    return 0;
}
