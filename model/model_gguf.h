/* model_gguf.h - a validating, mmap-based reader of GGUF files (versions 2 and 3).
 * Every count, length, offset and size is checked against the file before use;
 * a malformed file yields an error message naming the problem and the file
 * offset of the bad item, never a crash.
 */
#ifndef MODEL_GGUF_H
#define MODEL_GGUF_H

#include "kern_blocks.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF metadata value types, as stored in the file. */
typedef enum {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13
} model_gguf_vtype_t;

/* A string inside the mapped file: not NUL-terminated. */
typedef struct {
    const char *ptr; /* points into the mapping */
    uint64_t len;    /* bytes */
} model_gguf_str_t;

/* One metadata key/value.  Scalars are decoded; arrays point into the mapping. */
typedef struct {
    model_gguf_str_t key;    /* key name */
    model_gguf_vtype_t type; /* value type */
    union {
        uint64_t u64; /* any unsigned integer or bool */
        int64_t i64;  /* any signed integer */
        double f64;   /* float32 or float64 */
        model_gguf_str_t str;
    } v;
    model_gguf_vtype_t arr_type; /* element type when type == GGUF_ARRAY */
    uint64_t arr_len;            /* element count when type == GGUF_ARRAY */
    const uint8_t *arr_data;     /* first element in the mapping (strings: len-prefixed) */
} model_gguf_kv_t;

/* One tensor: name, shape (ne[0] is the contiguous dimension), type, data. */
typedef struct {
    model_gguf_str_t name; /* tensor name */
    int n_dims;            /* 1..4 */
    int64_t ne[4];         /* elements per dimension; unused ones are 1 */
    kern_type_t type;      /* element type (validated: a supported type) */
    uint64_t offset;       /* from the start of the data section */
    uint64_t nbytes;       /* size of the data */
    const void *data;      /* in the mapping */
} model_gguf_tensor_t;

typedef struct model_gguf_t model_gguf_t;

/* Map and validate the file at path.  On failure returns NULL and writes a
 * one-line reason into err[errlen]: "<path>: at offset N: <problem>", N the file
 * offset of the bad item (for a file that cannot be opened or mapped, no offset).
 * A path that names no file and has no '/' is a model name: model_gguf_resolve
 * finds its file in the model cache (`-m gemma`). */
model_gguf_t *model_gguf_open(const char *path, char *err, size_t errlen);
/* The model cache: $STRATA_MODEL_DIR, else $HOME/.cache/strata/models. */
const char *model_gguf_cache_dir(char *buf, size_t len);
/* The file of a model name: the .gguf file in the model cache whose name or
 * stem is name, else the one whose name starts with it (case-insensitive;
 * "gemma" -> gemma-3-270m-q4_k_m.gguf).
 * 0 with the path in out, or -ENOENT (none; err lists the cache's models) or
 * -EEXIST (several; err lists them). */
int model_gguf_resolve(const char *name, char *out, size_t outlen, char *err, size_t errlen);
/* Unmap and free; nulls *self_p; safe on NULL. */
void model_gguf_destroy(model_gguf_t **self_p);

uint32_t model_gguf_version(const model_gguf_t *self);
const char *model_gguf_path(const model_gguf_t *self);
size_t model_gguf_file_size(const model_gguf_t *self);
uint64_t model_gguf_alignment(const model_gguf_t *self);
/* Offset of the tensor data section from the start of the file. */
uint64_t model_gguf_data_offset(const model_gguf_t *self);

int64_t model_gguf_kv_count(const model_gguf_t *self);
const model_gguf_kv_t *model_gguf_kv_at(const model_gguf_t *self, int64_t i);
/* The entry with this key, or NULL. */
const model_gguf_kv_t *model_gguf_find(const model_gguf_t *self, const char *key);

/* Typed getters: return false (leaving *out untouched) if the key is missing
 * or has an incompatible type.  Integers of any width convert when in range. */
bool model_gguf_get_u64(const model_gguf_t *self, const char *key, uint64_t *out);
bool model_gguf_get_i64(const model_gguf_t *self, const char *key, int64_t *out);
bool model_gguf_get_f64(const model_gguf_t *self, const char *key, double *out);
bool model_gguf_get_bool(const model_gguf_t *self, const char *key, bool *out);
/* String value: *out is a malloc'd NUL-terminated copy the caller frees. */
bool model_gguf_get_str(const model_gguf_t *self, const char *key, char **out);

/* Array access.  For a string array, model_gguf_arr_str returns element i
 * (pointer into the mapping; O(i): it walks the preceding strings). */
bool model_gguf_get_arr(const model_gguf_t *self, const char *key, model_gguf_vtype_t *elt_type,
                        uint64_t *len);
bool model_gguf_arr_str(const model_gguf_t *self, const char *key, uint64_t i,
                        model_gguf_str_t *out);
/* The first n elements of a string array into out[0..n) (one O(total) walk:
 * use this, not model_gguf_arr_str in a loop, to read a vocabulary). */
bool model_gguf_arr_strs(const model_gguf_t *self, const char *key, model_gguf_str_t *out,
                         uint64_t n);
/* Numeric array element i converted to double (int or float arrays). */
bool model_gguf_arr_num(const model_gguf_t *self, const char *key, uint64_t i, double *out);

int64_t model_gguf_tensor_count(const model_gguf_t *self);
const model_gguf_tensor_t *model_gguf_tensor_at(const model_gguf_t *self, int64_t i);
/* The tensor with this name, or NULL (a hash lookup: names are unique). */
const model_gguf_tensor_t *model_gguf_tensor(const model_gguf_t *self, const char *name);

/* Compare a GGUF string with a C string. */
bool model_gguf_str_eq(model_gguf_str_t s, const char *c);

#endif
