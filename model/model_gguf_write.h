/* model_gguf_write.h - a minimal GGUF v3 writer: metadata key/values and tensors,
 * written aligned to a temporary file in the destination's folder, then renamed,
 * so a reader never sees a half-written model.  Assumes a little-endian host.
 */
#ifndef MODEL_GGUF_WRITE_H
#define MODEL_GGUF_WRITE_H

#include "kern_blocks.h"
#include "model_gguf.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct model_gguf_write_t model_gguf_write_t;

/* Produce the nbytes of data of tensor i (in add order) into dst.  Returns 0 or a
 * negative errno, which aborts model_gguf_write_save. */
typedef int (*model_gguf_write_fill_fn)(void *arg, int64_t i, void *dst, size_t nbytes);

/* An empty writer (no metadata, no tensors), or NULL when out of memory. */
model_gguf_write_t *model_gguf_write_new(void);
/* Free everything the writer owns; nulls *self_p; safe on NULL and twice. */
void model_gguf_write_destroy(model_gguf_write_t **self_p);

/* Copy every metadata key/value of src, in order (replacing keys already set).
 * Returns 0, -ENOMEM, or -ENOTSUP for a value the writer cannot re-encode. */
int model_gguf_write_copy_kvs(model_gguf_write_t *self, const model_gguf_t *src);

/* Set a metadata key, replacing its value (and type) if it exists, else appending.
 * Return 0, -EINVAL (empty key), or -ENOMEM. */
int model_gguf_write_set_u32(model_gguf_write_t *self, const char *key, uint32_t v);
int model_gguf_write_set_i32(model_gguf_write_t *self, const char *key, int32_t v);
int model_gguf_write_set_u64(model_gguf_write_t *self, const char *key, uint64_t v);
int model_gguf_write_set_f32(model_gguf_write_t *self, const char *key, float v);
int model_gguf_write_set_bool(model_gguf_write_t *self, const char *key, bool v);
int model_gguf_write_set_str(model_gguf_write_t *self, const char *key, const char *v);
/* A numeric array (elt_type not STRING/ARRAY) of n elements, copied from data. */
int model_gguf_write_set_arr(model_gguf_write_t *self, const char *key, model_gguf_vtype_t elt_type,
                             uint64_t n, const void *data);
/* An array of n NUL-terminated strings, copied. */
int model_gguf_write_set_arr_str(model_gguf_write_t *self, const char *key, const char *const *v,
                                 uint64_t n);
/* Remove a key if present (no error when absent). */
void model_gguf_write_remove(model_gguf_write_t *self, const char *key);
int64_t model_gguf_write_kv_count(const model_gguf_write_t *self);

/* Add a tensor: name (copied), type, n_dims (1..4) dimensions ne[0..n_dims) with ne[0]
 * the contiguous one and a multiple of the type's block size.  data (borrowed: it must
 * stay valid until save) holds its kern_row_size(type, ne[0]) * rows bytes; when data is
 * NULL, save asks the fill callback for them instead.  Returns the tensor's index,
 * -EINVAL (bad type, shape or duplicate name; err says which), or -ENOMEM. */
int64_t model_gguf_write_add_tensor(model_gguf_write_t *self, const char *name, kern_type_t type,
                                    int n_dims, const int64_t *ne, const void *data, char *err,
                                    size_t errlen);
/* The callback save uses for tensors added with data == NULL. */
void model_gguf_write_set_fill(model_gguf_write_t *self, model_gguf_write_fill_fn fn, void *arg);

/* Write the file: magic, version 3, metadata, tensor infos, then each tensor's data,
 * every data start aligned to general.alignment (if set as a u32, else 32).  Writes
 * to "<path>.tmp.XXXXXX" and renames it over path on success; on failure removes the
 * temporary, leaves path untouched, returns a negative errno and a one-line reason in err. */
int model_gguf_write_save(model_gguf_write_t *self, const char *path, char *err, size_t errlen);

#endif
