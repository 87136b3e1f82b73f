/* kv_codec.c - the byte layouts of a KV block in each format (F32, F16, INT8,
 * INT4) and conversion of one block between them.  Owns nothing: callers
 * pass both buffers.
 *
 * Every format stores a block as n_layer * 2 * n_head_kv slabs, one per
 * (layer, K|V, kv_head) in that order (layer outermost, then K before V,
 * then head).  Let B = block_size, D = head_dim.  One slab is:
 *
 *   F32   (B, D) float                                   4*B*D bytes
 *   F16   (B, D) IEEE half, rounded to nearest even      2*B*D bytes
 *         (bitwise kern_f32_to_f16, as the pool writer)
 *   INT8  (B, D) int8 q, then (B) float scale            B*D + 4*B bytes
 *         x[s][c] = q[s][c] * scale[s]; the row quantizer is
 *         kern_i8_quant_row (symmetric, scale = max|row| / 127), the same
 *         function model_forward.c uses to write a KERN_I8 pool, so a block
 *         converted here is byte for byte what the forward pass would store.
 *   INT4  (KIVI: K per channel, V per token; asymmetric 4-bit)
 *         first the nibbles: (B, D) values in row-major (slot, channel) order,
 *         two per byte, element 2i in the low nibble of byte i and 2i+1 in the
 *         high nibble; ceil(B*D / 2) bytes (the last high nibble is 0 when
 *         B*D is odd).  Then the groups' parameters, pairs of floats
 *         (scale, min), x = q * scale + min with q in 0..15:
 *           K slab: D pairs, pair c for channel c over slots 0..n_valid-1
 *           V slab: B pairs, pair s for slot s over its D channels
 *         So a K slab is ceil(B*D/2) + 8*D bytes and a V slab
 *         ceil(B*D/2) + 8*B bytes.  scale = (max - min) / 15, q =
 *         round-to-nearest-even((x - min) / scale) clamped to 0..15; a
 *         constant group has scale 0 and decodes exactly to min.
 *
 * All values and parameters are host-endian (little-endian on x86).
 * Conversions between formats decode to floats and encode again; same-format
 * conversions copy bytes.
 *
 * Slots at or past n_valid are written as zeros in every format (values,
 * scales and, for INT4, the per-slot V parameters; the per-channel K
 * parameters only cover valid slots).  Decoding writes zeros there too, so a
 * round trip of a partial block leaves the padding slots zero.
 */
#include "kv_codec.h"

#include "kern_ops.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_names[KV_FMT_COUNT] = {"f32", "f16", "int8", "int4"};

const char *kv_fmt_name(int fmt) {
    return fmt >= 0 && fmt < KV_FMT_COUNT ? s_names[fmt] : NULL;
}

int kv_fmt_parse(const char *name) {
    if (name == NULL)
        return -1;
    for (int f = 0; f < KV_FMT_COUNT; f++)
        if (strcmp(name, s_names[f]) == 0)
            return f;
    if (strcmp(name, "i8") == 0 || strcmp(name, "q8") == 0)
        return KV_FMT_I8;
    if (strcmp(name, "i4") == 0 || strcmp(name, "q4") == 0)
        return KV_FMT_I4;
    return -1;
}

int kv_fmt_pool_type(int fmt) {
    switch (fmt) {
    case KV_FMT_F32:
        return KERN_F32;
    case KV_FMT_F16:
        return KERN_F16;
    case KV_FMT_I8:
        return KERN_I8;
    default:
        return -1;
    }
}

int kv_fmt_of_pool_type(int type) {
    switch (type) {
    case KERN_F32:
        return KV_FMT_F32;
    case KERN_F16:
        return KV_FMT_F16;
    case KERN_I8:
        return KV_FMT_I8;
    default:
        return -1;
    }
}

/* Bytes of one slab (K if !is_v, else V) of fmt; 0 for an invalid fmt. */
static size_t s_slab_bytes(const kern_kv_shape_t *s, int fmt, bool is_v) {
    size_t B = (size_t)s->block_size, D = (size_t)s->head_dim;
    switch (fmt) {
    case KV_FMT_F32:
        return kern_kv_slab_bytes(KERN_F32, s->block_size, s->head_dim);
    case KV_FMT_F16:
        return kern_kv_slab_bytes(KERN_F16, s->block_size, s->head_dim);
    case KV_FMT_I8:
        return kern_kv_slab_bytes(KERN_I8, s->block_size, s->head_dim);
    case KV_FMT_I4:
        return (B * D + 1) / 2 + 8 * (is_v ? B : D);
    default:
        return 0;
    }
}

size_t kv_fmt_block_bytes(const kern_kv_shape_t *s, int fmt) {
    if (!kern_kv_shape_ok(s) || fmt < 0 || fmt >= KV_FMT_COUNT)
        return 0;
    size_t per = s_slab_bytes(s, fmt, false) + s_slab_bytes(s, fmt, true);
    return (size_t)s->n_layer * (size_t)s->n_head_kv * per;
}

/* ---- one slab <-> floats (B, D) ----------------------------------------- */

static inline void s_put_f32(uint8_t *p, float v) {
    memcpy(p, &v, 4);
}

static inline float s_get_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

static inline int s_nib_get(const uint8_t *nib, size_t i) {
    return (nib[i / 2] >> ((i & 1) * 4)) & 0xF;
}

/* INT4 group: min/scale of n values at x with the given stride (floats). */
static void s_i4_params(const float *x, int n, size_t stride, float *scale, float *min) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        float v = x[(size_t)i * stride];
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    *min = lo;
    *scale = (hi - lo) / 15.0f;
}

static inline int s_i4_quant(float x, float scale, float min) {
    if (!(scale > 0))
        return 0;
    float v = (x - min) / scale; /* 0 .. 15 up to rounding */
    v = v < 0 ? 0 : v > 15 ? 15 : v;
    return (int)((v + 12582912.0f) - 12582912.0f); /* 1.5 * 2^23: round to nearest even */
}

/* Encode (B, D) floats x (slots >= n_valid ignored) into a slab of fmt at dst;
 * k converts halves. */
static void s_slab_encode(const kern_ops_t *k, const kern_kv_shape_t *s, int fmt, bool is_v,
                          const float *x, uint8_t *dst, int n_valid) {
    int B = s->block_size, D = s->head_dim;
    size_t nv = (size_t)n_valid * D; /* valid elements */
    memset(dst, 0, s_slab_bytes(s, fmt, is_v));
    switch (fmt) {
    case KV_FMT_F32:
        memcpy(dst, x, nv * 4);
        break;
    case KV_FMT_F16: /* round to nearest even (the SIMD tables give kern_f32_to_f16's bits) */
        k->quant_row(KERN_F16, x, dst, (int64_t)nv);
        break;
    case KV_FMT_I8: {
        uint8_t *scales = dst + (size_t)B * D;
        for (int t = 0; t < n_valid; t++) {
            float sc = kern_i8_quant_row(x + (size_t)t * D, (int8_t *)dst + (size_t)t * D, D);
            s_put_f32(scales + 4 * (size_t)t, sc);
        }
        break;
    }
    case KV_FMT_I4: {
        uint8_t *par = dst + ((size_t)B * D + 1) / 2;
        if (!is_v) { /* K: per channel over the valid slots */
            for (int c = 0; c < D; c++) {
                float sc, mn;
                s_i4_params(x + c, n_valid, (size_t)D, &sc, &mn);
                s_put_f32(par + 8 * (size_t)c, sc);
                s_put_f32(par + 8 * (size_t)c + 4, mn);
                for (int t = 0; t < n_valid; t++) {
                    size_t i = (size_t)t * D + c;
                    dst[i / 2] |= (uint8_t)(s_i4_quant(x[i], sc, mn) << ((i & 1) * 4));
                }
            }
        } else { /* V: per slot over its channels */
            for (int t = 0; t < n_valid; t++) {
                float sc, mn;
                s_i4_params(x + (size_t)t * D, D, 1, &sc, &mn);
                s_put_f32(par + 8 * (size_t)t, sc);
                s_put_f32(par + 8 * (size_t)t + 4, mn);
                for (int c = 0; c < D; c++) {
                    size_t i = (size_t)t * D + c;
                    dst[i / 2] |= (uint8_t)(s_i4_quant(x[i], sc, mn) << ((i & 1) * 4));
                }
            }
        }
        break;
    }
    }
}

/* Decode a slab of fmt at src into (B, D) floats x; slots >= n_valid get 0. */
static void s_slab_decode(const kern_ops_t *k, const kern_kv_shape_t *s, int fmt, bool is_v,
                          const uint8_t *src, float *x, int n_valid) {
    int B = s->block_size, D = s->head_dim;
    size_t nv = (size_t)n_valid * D, n = (size_t)B * D;
    switch (fmt) {
    case KV_FMT_F32:
        memcpy(x, src, nv * 4);
        break;
    case KV_FMT_F16:
        k->dequant_row(KERN_F16, src, x, (int64_t)nv);
        break;
    case KV_FMT_I8: {
        const int8_t *q = (const int8_t *)src;
        const uint8_t *scales = src + n;
        for (int t = 0; t < n_valid; t++) {
            float sc = s_get_f32(scales + 4 * (size_t)t);
            for (int c = 0; c < D; c++)
                x[(size_t)t * D + c] = (float)q[(size_t)t * D + c] * sc;
        }
        break;
    }
    case KV_FMT_I4: {
        const uint8_t *par = src + (n + 1) / 2;
        for (int t = 0; t < n_valid; t++)
            for (int c = 0; c < D; c++) {
                size_t i = (size_t)t * D + c, g = is_v ? (size_t)t : (size_t)c;
                float sc = s_get_f32(par + 8 * g), mn = s_get_f32(par + 8 * g + 4);
                x[i] = (float)s_nib_get(src, i) * sc + mn;
            }
        break;
    }
    }
    memset(x + nv, 0, (n - nv) * sizeof(float));
}

/* Same format, partial block: keep the bytes of the valid slots, zero the
 * rest (src may equal dst). */
static void s_slab_copy(const kern_kv_shape_t *s, int fmt, bool is_v, const uint8_t *src,
                        uint8_t *dst, int n_valid) {
    size_t B = (size_t)s->block_size, D = (size_t)s->head_dim, nv = (size_t)n_valid * D;
    size_t nb = (size_t)n_valid;
    switch (fmt) {
    case KV_FMT_F32:
    case KV_FMT_F16: {
        size_t elt = fmt == KV_FMT_F32 ? 4 : 2;
        memmove(dst, src, nv * elt);
        memset(dst + nv * elt, 0, (B * D - nv) * elt);
        break;
    }
    case KV_FMT_I8:
        memmove(dst, src, nv);
        memset(dst + nv, 0, B * D - nv);
        memmove(dst + B * D, src + B * D, 4 * nb);
        memset(dst + B * D + 4 * nb, 0, 4 * (B - nb));
        break;
    case KV_FMT_I4: {
        size_t nib = (B * D + 1) / 2, keep = nv / 2;
        memmove(dst, src, keep);
        if (nv & 1) /* the low nibble of a shared byte belongs to the last valid slot */
            dst[keep++] = src[nv / 2] & 0x0F;
        memset(dst + keep, 0, nib - keep);
        size_t groups = is_v ? B : D, valid = is_v ? nb : D;
        memmove(dst + nib, src + nib, 8 * valid);
        memset(dst + nib + 8 * valid, 0, 8 * (groups - valid));
        break;
    }
    }
}

int kv_codec_convert(const kern_kv_shape_t *s, int from, const void *src, int to, void *dst,
                     int n_valid) {
    if (!kern_kv_shape_ok(s) || from < 0 || from >= KV_FMT_COUNT || to < 0 || to >= KV_FMT_COUNT ||
        src == NULL || dst == NULL || n_valid < 1 || n_valid > s->block_size)
        return -EINVAL;
    const uint8_t *in = src;
    uint8_t *out = dst;
    if (from == to) {
        if (n_valid == s->block_size) {
            memmove(dst, src, kv_fmt_block_bytes(s, from));
            return 0;
        }
        for (int l = 0; l < s->n_layer; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < s->n_head_kv; h++) {
                    size_t bytes = s_slab_bytes(s, from, kv == 1);
                    s_slab_copy(s, from, kv == 1, in, out, n_valid);
                    in += bytes;
                    out += bytes;
                }
        return 0;
    }
    /* Slab by slab through one (B, D) float buffer. */
    size_t n = (size_t)s->block_size * s->head_dim;
    float *x = malloc(n * sizeof(float));
    if (x == NULL)
        return -ENOMEM;
    const kern_ops_t *k = kern_ops_best();
    for (int l = 0; l < s->n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < s->n_head_kv; h++) {
                s_slab_decode(k, s, from, kv == 1, in, x, n_valid);
                s_slab_encode(k, s, to, kv == 1, x, out, n_valid);
                in += s_slab_bytes(s, from, kv == 1);
                out += s_slab_bytes(s, to, kv == 1);
            }
    free(x);
    return 0;
}
