/* kv_kivi.h - KIVI's KV quantization (Liu et al., "KIVI: a tuning-free asymmetric 2bit
 * quantization for KV cache"): keys per channel, values per token, both asymmetric
 * (x ~= min + q * scale, q in 0 .. 2^bits - 1), and the most recent `residual` positions
 * kept in full precision until a whole group of them can be quantized.
 *
 * Groups.  Keys: one (scale, min) per channel over a group of `block_size` consecutive
 * positions -- a KV block, so that a block is quantized once, when it is full and older
 * than the residual window (KIVI groups 32 tokens; strata's blocks hold 16 by default).
 * Values: one (scale, min) per position over a group of `v_group` channels.  Scales and
 * minimums are rounded to F16, as a stored block would keep them.
 *
 * This is the quantizer and its parameters.  What it costs in quality is measured by
 * `strata kv-quality` with kivi in its policy list, which rounds every sealed block of a
 * sequence through it in place (the attention then reads exactly the values a kernel
 * dequantizing the stored codes would): T0 does not store KIVI blocks yet. */
#ifndef KV_KIVI_H
#define KV_KIVI_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int bits;     /* 2 or 4 */
    int residual; /* most recent positions kept in full precision (default 32) */
    int v_group;  /* channels per value group (default 32; a divisor of head_dim) */
} kv_kivi_t;

/* Parse "kivi4" or "kivi2", optionally ",residual=N" and ",group=N".  0, or -EINVAL with
 * the reason in err. */
int kv_kivi_parse(const char *spec, kv_kivi_t *out, char *err, size_t errlen);
/* The spec of k ("kivi4,residual=64"; defaults left out). */
void kv_kivi_format(const kv_kivi_t *k, char *buf, size_t len);

/* Keys: quantize and dequantize in place n positions x D channels (row r, channel d at
 * x[r * row_stride + d]), one (scale, min) per channel over the n positions. */
void kv_kivi_keys(float *x, int n, int D, size_t row_stride, int bits);
/* Values: quantize and dequantize one position's D channels in place, one (scale, min)
 * per group of `group` channels (D a multiple of group). */
void kv_kivi_values(float *x, int D, int group, int bits);

/* Bytes of one stored block of n positions x D channels per (layer, KV head), keys and
 * values together: codes, and F16 (scale, min) pairs -- what T0 would hold per block. */
size_t kv_kivi_block_bytes(const kv_kivi_t *k, int n, int D);

#endif
