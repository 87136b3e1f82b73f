/* kv_codec.h - formats of a KV block and conversion between them.
 *
 * A block holds block_size positions of K and V for every layer and KV head.
 * T0 (the worker's pool, read by the attention kernels) stores F32, F16 or
 * INT8; lower tiers store F16, INT8 or INT4 and are converted on the way
 * (dequantized on promotion).  Layouts, all (layer, K|V, kv_head) slabs in
 * that order, slab by slab:
 *   F32, F16  (block_size, head_dim) elements (exactly the T0 pool's
 *             KERN_F32 / KERN_F16 layout, kernels/kern_kv.h)
 *   INT8      per-token scales: (block_size, head_dim) int8 then (block_size)
 *             float scales; x = q * scale  (the T0 pool's KERN_I8 layout)
 *   INT4      KIVI: K quantized per channel (over the block's tokens), V per
 *             token; asymmetric 4-bit with float scale and minimum per group;
 *             two values per byte, then the groups' (scale, min) pairs (the
 *             exact byte layout is at the top of kv_codec.c).  Lower tiers
 *             only (the kernels do not read it).
 * Slots at or past n_valid in a partial block are written as zeros.
 */
#ifndef KV_CODEC_H
#define KV_CODEC_H

#include "kern_kv.h"
#include <stddef.h>

typedef enum { KV_FMT_F32 = 0, KV_FMT_F16 = 1, KV_FMT_I8 = 2, KV_FMT_I4 = 3 } kv_fmt_t;
#define KV_FMT_COUNT 4

/* The block shape is kern_kv_shape_t (kernels/kern_kv.h). */

/* "f32", "f16", "int8", "int4"; NULL if invalid. */
const char *kv_fmt_name(int fmt);
/* The inverse (also accepts "i8", "q8", "i4", "q4"); -1 if unknown. */
int kv_fmt_parse(const char *name);
/* The kern_type_t of a T0 pool holding fmt (F32, F16, I8), or -1 (INT4). */
int kv_fmt_pool_type(int fmt);
/* The fmt of a pool type; -1 if none. */
int kv_fmt_of_pool_type(int type);
/* Bytes of one block in fmt; 0 for an invalid fmt or shape. */
size_t kv_fmt_block_bytes(const kern_kv_shape_t *s, int fmt);

/* Convert one block from src (format from) into dst (format to), the first
 * n_valid positions (1..block_size) meaningful; dst's slots past n_valid are
 * written as zeros.  Same format: a copy (src may equal dst only then); other
 * formats: src and dst must not overlap.  The exact byte layouts are in
 * kv_codec.c.  0, -EINVAL (bad shape, format, pointer or n_valid) or -ENOMEM
 * (a one-slab float buffer). */
int kv_codec_convert(const kern_kv_shape_t *s, int from, const void *src, int to, void *dst,
                     int n_valid);

#endif
