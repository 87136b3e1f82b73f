// test_cuda_decode.cu - the CUDA kernels' block decoders (cuda_common.cuh's
// kc_dequant_group, which every mat-vec, F16 tile and embedding lookup uses)
// against the CPU reference dequant_row, bit for bit, for every CUDA weight
// type, on quantized random rows and on raw random block bytes (every
// pattern of scales, minimums and high bits).  The decoders are host+device
// code, so this runs on the host: built wherever nvcc is, no GPU needed
// (label unit).  The device build of the same source is what test_cuda checks.
#include "cuda_common.cuh"

extern "C" {
#include "kern_ops.h"
}

#include <cstdio>
#include <cstdlib>
#include <cstring>

static uint64_t s_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// A random finite half (exponent never all ones).
static uint16_t s_finite_half(uint64_t *s) {
    uint16_t h = (uint16_t)s_next(s);
    return (h & 0x7C00) == 0x7C00 ? (uint16_t)(h & ~0x4000) : h;
}

// Raw random bytes for n elements of type T, with every F16 field made finite.
static void s_raw(int t, uint8_t *w, int64_t n, uint64_t *s) {
    size_t bytes = kern_row_size((kern_type_t)t, n);
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)s_next(s);
    int bs = 0, n_f16 = 0, off = 0;
    switch (t) {
    case KERN_F32:
        for (int64_t i = 0; i < n; i++) {
            float f = (float)(int64_t)(s_next(s) % 2000001) / 1000.0f - 1000.0f;
            memcpy(w + 4 * i, &f, 4);
        }
        return;
    case KERN_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = s_finite_half(s);
            memcpy(w + 2 * i, &h, 2);
        }
        return;
    case KERN_Q4_0:
        bs = 18, n_f16 = 1, off = 0;
        break;
    case KERN_Q4_1:
        bs = 20, n_f16 = 2, off = 0;
        break;
    case KERN_Q8_0:
        bs = 34, n_f16 = 1, off = 0;
        break;
    case KERN_Q4_K:
        bs = 144, n_f16 = 2, off = 0;
        break;
    case KERN_Q6_K:
        bs = 210, n_f16 = 1, off = 208;
        break;
    default:
        return;
    }
    for (size_t b = 0; b < bytes / bs; b++)
        for (int j = 0; j < n_f16; j++) {
            uint16_t h = s_finite_half(s);
            memcpy(w + b * bs + off + 2 * j, &h, 2);
        }
}

template <int T> static int s_check(const char *name, int64_t k, bool raw, uint64_t *s) {
    const kern_ops_t *ref = kern_ops_ref();
    size_t row = kern_row_size((kern_type_t)T, k);
    float *f = (float *)malloc(sizeof(float) * k), *want = (float *)malloc(sizeof(float) * k);
    float *got = (float *)malloc(sizeof(float) * k);
    // 16-byte aligned, as the device's vector loads of float rows require
    uint8_t *w = (uint8_t *)aligned_alloc(64, (row + 63) / 64 * 64);
    if (raw) {
        s_raw(T, w, k, s);
    } else {
        for (int64_t i = 0; i < k; i++)
            f[i] = (float)(int64_t)(s_next(s) % 200001) / 50000.0f - 2.0f;
        if (T == KERN_F32)
            memcpy(w, f, row);
        else
            ref->quant_row((kern_type_t)T, f, w, k);
    }
    ref->dequant_row((kern_type_t)T, w, want, k);
    for (int64_t g = 0; g < k / KC_GROUP; g++)
        kc_dequant_group<T>(w, g, got + g * KC_GROUP);
    int bad = 0;
    for (int64_t i = 0; i < k; i++)
        if (memcmp(&got[i], &want[i], 4)) {
            if (bad++ < 3)
                printf("  %s [%lld]: decoder %.9g, reference %.9g\n", name, (long long)i, got[i],
                       want[i]);
        }
    printf("%s %-5s k=%-5lld %-9s %d of %lld differ\n", bad ? "FAIL" : "ok  ", name, (long long)k,
           raw ? "raw bytes" : "quantized", bad, (long long)k);
    free(f);
    free(want);
    free(got);
    free(w);
    return bad ? 1 : 0;
}

int main(void) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int fails = 0, runs = 0;
    for (int raw = 0; raw < 2; raw++)
        for (int64_t k = 256; k <= 4096; k *= 4) {
            fails += s_check<KERN_F32>("f32", k, raw, &s);
            fails += s_check<KERN_F16>("f16", k, raw, &s);
            fails += s_check<KERN_Q4_0>("q4_0", k, raw, &s);
            fails += s_check<KERN_Q4_1>("q4_1", k, raw, &s);
            fails += s_check<KERN_Q8_0>("q8_0", k, raw, &s);
            fails += s_check<KERN_Q4_K>("q4_K", k, raw, &s);
            fails += s_check<KERN_Q6_K>("q6_K", k, raw, &s);
            runs += 7;
        }
    printf("%d passed, %d failed\n", runs - fails, fails);
    return fails ? 1 : 0;
}
