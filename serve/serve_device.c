/* serve_device.c - a target worker's device (serve_device.h). */
#include "serve_device.h"

#include "kv_codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_VALUES "cpu, cpu-seam, cuda or cuda:N"

int serve_device_parse(const char *text, serve_device_t *d, char *err, size_t errlen) {
    *d = (serve_device_t){SERVE_DEVICE_CPU, 0};
    if (!text || !*text || !strcmp(text, "cpu"))
        return 0;
    if (!strcmp(text, "cpu-seam")) {
        d->kind = SERVE_DEVICE_SEAM;
        return 0;
    }
    if (!strcmp(text, "cuda")) {
        d->kind = SERVE_DEVICE_CUDA;
        return 0;
    }
    if (!strncmp(text, "cuda:", 5) && text[5] >= '0' && text[5] <= '9') {
        char *end;
        long n = strtol(text + 5, &end, 10);
        if (!*end && n >= 0 && n < 1024) {
            *d = (serve_device_t){SERVE_DEVICE_CUDA, (int)n};
            return 0;
        }
    }
    snprintf(err, errlen, "device '%s' is not %s", text, S_VALUES);
    return -EINVAL;
}

const char *serve_device_name(const serve_device_t *d, char *buf, size_t len) {
    if (d->kind == SERVE_DEVICE_CUDA)
        snprintf(buf, len, "cuda:%d", d->index);
    else
        snprintf(buf, len, "%s", d->kind == SERVE_DEVICE_SEAM ? "cpu-seam" : "cpu");
    return buf;
}

bool serve_device_kv_ok(const serve_device_t *d, int kv_fmt) {
    if (d->kind == SERVE_DEVICE_CUDA)
        return kv_fmt == KV_FMT_F16;
    return kv_fmt == KV_FMT_F32 || kv_fmt == KV_FMT_F16 || kv_fmt == KV_FMT_I8;
}

kern_backend_t *serve_device_backend(const serve_device_t *d, char *err, size_t errlen) {
    if (d->kind == SERVE_DEVICE_CPU)
        return NULL;
    kern_backend_t *be = NULL;
    if (d->kind == SERVE_DEVICE_SEAM) {
        if (!(be = kern_backend_cpu_new(NULL)))
            snprintf(err, errlen, "cpu-seam: out of memory");
        return be;
    }
    char why[256];
    int n = kern_backend_cuda_devices(why, sizeof why);
    if (n <= 0)
        snprintf(err, errlen, "cuda:%d: %s", d->index,
                 n < 0 ? why : "no CUDA device is visible (no GPU, or no driver)");
    else if (d->index >= n)
        snprintf(err, errlen, "cuda:%d: there are %d CUDA devices (0..%d)", d->index, n, n - 1);
    else if (!(be = kern_backend_cuda_new(d->index)))
        snprintf(err, errlen, "cuda:%d: its context could not be made", d->index);
    return be;
}
