/* kv_kivi.c - KIVI's asymmetric KV quantizer (kv_kivi.h). */
#include "kv_kivi.h"

#include "kern_ops.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_kivi_parse(const char *spec, kv_kivi_t *out, char *err, size_t errlen) {
    kv_kivi_t k = {0, 32, 32};
    const char *p = spec ? spec : "";
    if (!strncmp(p, "kivi4", 5) && (p[5] == 0 || p[5] == ','))
        k.bits = 4;
    else if (!strncmp(p, "kivi2", 5) && (p[5] == 0 || p[5] == ','))
        k.bits = 2;
    else {
        if (err && errlen)
            snprintf(err, errlen, "'%.40s': KIVI is kivi4 or kivi2[,residual=N][,group=N]", p);
        return -EINVAL;
    }
    for (p += 5; *p == ',';) {
        p++;
        int *dst = !strncmp(p, "residual=", 9) ? &k.residual
                   : !strncmp(p, "group=", 6)  ? &k.v_group
                                               : NULL;
        const char *v = dst ? strchr(p, '=') + 1 : NULL;
        char *end = NULL;
        long x = v ? strtol(v, &end, 10) : -1;
        if (!dst || end == v || x < (dst == &k.residual ? 0 : 1) || x > (1 << 20) ||
            (*end && *end != ',')) {
            if (err && errlen)
                snprintf(err, errlen, "'%.40s': expected residual=N (0 or more) or group=N", p);
            return -EINVAL;
        }
        *dst = (int)x;
        p = end;
    }
    if (*p) {
        if (err && errlen)
            snprintf(err, errlen, "'%.40s': unexpected text", p);
        return -EINVAL;
    }
    *out = k;
    return 0;
}

void kv_kivi_format(const kv_kivi_t *k, char *buf, size_t len) {
    int n = snprintf(buf, len, "kivi%d", k->bits);
    if (n > 0 && (size_t)n < len && k->residual != 32)
        n += snprintf(buf + n, len - (size_t)n, ",residual=%d", k->residual);
    if (n > 0 && (size_t)n < len && k->v_group != 32)
        snprintf(buf + n, len - (size_t)n, ",group=%d", k->v_group);
}

/* Round-trip the n values x[i * stride] through `bits`-bit asymmetric codes with one F16
 * (scale, min) pair. */
static void s_roundtrip(float *x, int n, size_t stride, int bits) {
    float mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float v = x[(size_t)i * stride];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    const int top = (1 << bits) - 1;
    const float m = kern_f16_to_f32(kern_f32_to_f16(mn));
    const float s = kern_f16_to_f32(kern_f32_to_f16((mx - mn) / (float)top));
    for (int i = 0; i < n; i++) {
        float *v = &x[(size_t)i * stride];
        float q = s > 0 ? rintf((*v - m) / s) : 0;
        q = q < 0 ? 0 : q > (float)top ? (float)top : q;
        *v = m + q * s;
    }
}

void kv_kivi_keys(float *x, int n, int D, size_t row_stride, int bits) {
    for (int d = 0; d < D; d++)
        s_roundtrip(x + d, n, row_stride, bits);
}

void kv_kivi_values(float *x, int D, int group, int bits) {
    for (int g = 0; g + group <= D; g += group)
        s_roundtrip(x + g, group, 1, bits);
}

size_t kv_kivi_block_bytes(const kv_kivi_t *k, int n, int D) {
    size_t codes = 2 * (size_t)n * D * k->bits / 8;         /* K and V */
    size_t k_params = (size_t)D * 2 * 2;                    /* per channel: F16 scale, min */
    size_t v_params = (size_t)n * (D / k->v_group) * 2 * 2; /* per (row, group) */
    return codes + k_params + v_params;
}
