/* serve_device.h - where a target worker runs its forward pass: `device=` in a topology,
 * `--device` on strata serve.
 *
 *   cpu       the CPU forward (model_ctx_forward: threads over the kern_ops kernels, packed
 *             matrices); the default
 *   cuda      cuda:0
 *   cuda:N    CUDA device N: the forward pass on the backend seam (model_dev_forward) over
 *             the CUDA backend, weights uploaded once, T0 KV in device memory (f16), blocks
 *             to and from T1 through pinned host memory on the copy stream
 *   cpu-seam  the GPU worker's code path on the seam's CPU backend (single-threaded, plain
 *             row products): the same worker, checkable on a machine without a GPU
 *
 * The library half of the worker's set-up: parse the text, make the backend, and say which
 * T0 formats it keeps. */
#ifndef SERVE_DEVICE_H
#define SERVE_DEVICE_H

#include "kern_backend.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    SERVE_DEVICE_CPU,  /* model_ctx_forward */
    SERVE_DEVICE_SEAM, /* model_dev_forward on the CPU backend */
    SERVE_DEVICE_CUDA, /* model_dev_forward on CUDA device `index` */
} serve_device_kind_t;

typedef struct {
    serve_device_kind_t kind;
    int index; /* CUDA device number */
} serve_device_t;

/* text ("cpu", "cpu-seam", "cuda", "cuda:N"; NULL or "" is cpu) into *d.  0, or -EINVAL
 * with a one-line reason (naming the values) in err. */
int serve_device_parse(const char *text, serve_device_t *d, char *err, size_t errlen);
/* The device as the parse takes it ("cpu", "cpu-seam", "cuda:N") into buf; buf. */
const char *serve_device_name(const serve_device_t *d, char *buf, size_t len);
/* True when a worker on d keeps T0 KV of format kv_fmt (kv_codec.h): the CPU backends
 * f32, f16 and int8; CUDA f16. */
bool serve_device_kv_ok(const serve_device_t *d, int kv_fmt);
/* The backend for d: NULL for cpu (no backend: the threaded CPU forward) without an
 * error; otherwise the backend, or NULL with the reason in err (no CUDA in this build, no
 * such device, its context could not be made). */
kern_backend_t *serve_device_backend(const serve_device_t *d, char *err, size_t errlen);

#endif
