/* model_gguf.c - GGUF reader: mmap the file, then walk header, metadata and
 * tensor infos with a bounds-checked cursor.  Nothing is trusted: every length
 * and count is compared with the bytes that remain before it is used.
 */
#include "model_gguf.h"
#include "kern_ops.h"
#include "model_err.h"

#include "base_strmap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_KEY 65536u
#define GGUF_MAX_NAME 4096u
#define GGUF_MAX_NE (1ull << 40)  /* elements along one dimension */
#define GGUF_MAX_NEL (1ull << 50) /* elements in one tensor */

struct model_gguf_t {
    char *path;                   /* copy of the path */
    const uint8_t *map;           /* whole file, read-only */
    size_t size;                  /* bytes mapped */
    uint32_t version;             /* 2 or 3 */
    uint64_t alignment;           /* general.alignment or 32 */
    uint64_t data_offset;         /* start of tensor data */
    int64_t n_kv;                 /* metadata entries */
    model_gguf_kv_t *kv;          /* (n_kv) */
    int64_t n_tensors;            /* tensor count */
    model_gguf_tensor_t *tensors; /* (n_tensors) */
    base_strmap_t by_name;        /* tensor name (borrowed from the mapping) -> index */
};

/* Bounds-checked reader over the mapping.  Every error names the file offset of
 * the item that is wrong: "<path>: at offset N: <what is wrong>". */
typedef struct {
    const uint8_t *base; /* first byte of the file */
    const uint8_t *p;    /* next byte */
    const uint8_t *end;  /* one past the last byte */
    char *err;           /* where the first error goes */
    size_t errlen;
    const char *path;
    bool failed;
} s_cursor_t;

static void s_fail(s_cursor_t *c, const void *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_fail(s_cursor_t *c, const void *at, const char *fmt, ...) {
    if (c->failed)
        return;
    c->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    model_err_set(c->err, c->errlen, -EPROTO, "%s: at offset %zu: %s", c->path,
                  (size_t)((const uint8_t *)at - c->base), msg);
}

static size_t s_left(const s_cursor_t *c) {
    return (size_t)(c->end - c->p);
}

static bool s_take(s_cursor_t *c, void *dst, size_t n, const char *what) {
    if (c->failed)
        return false;
    if (s_left(c) < n) {
        s_fail(c, c->p, "truncated file: %s needs %zu bytes, %zu remain", what, n, s_left(c));
        return false;
    }
    if (dst)
        memcpy(dst, c->p, n);
    c->p += n;
    return true;
}

static bool s_str(s_cursor_t *c, model_gguf_str_t *out, const char *what) {
    /* v2 and v3 share 64-bit lengths */
    const uint8_t *at = c->p;
    uint64_t len = 0;
    if (!s_take(c, &len, 8, what))
        return false;
    if (len > s_left(c)) {
        s_fail(c, at, "string length %llu for %s runs past the end of the file",
               (unsigned long long)len, what);
        return false;
    }
    out->ptr = (const char *)c->p;
    out->len = len;
    c->p += len;
    return true;
}
static size_t s_vtype_size(model_gguf_vtype_t t) {
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL:
        return 1;
    case GGUF_UINT16:
    case GGUF_INT16:
        return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32:
        return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* Decode one scalar of type t at p into kv->v. */
static void s_scalar(model_gguf_vtype_t t, const uint8_t *p, model_gguf_kv_t *kv) {
    switch (t) {
    case GGUF_UINT8:
        kv->v.u64 = p[0];
        break;
    case GGUF_BOOL:
        kv->v.u64 = p[0] != 0;
        break;
    case GGUF_INT8:
        kv->v.i64 = (int8_t)p[0];
        break;
    case GGUF_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        kv->v.u64 = x;
        break;
    }
    case GGUF_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        kv->v.i64 = x;
        break;
    }
    case GGUF_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        kv->v.u64 = x;
        break;
    }
    case GGUF_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        kv->v.i64 = x;
        break;
    }
    case GGUF_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        kv->v.f64 = x;
        break;
    }
    case GGUF_UINT64:
        memcpy(&kv->v.u64, p, 8);
        break;
    case GGUF_INT64:
        memcpy(&kv->v.i64, p, 8);
        break;
    case GGUF_FLOAT64:
        memcpy(&kv->v.f64, p, 8);
        break;
    default:
        break;
    }
}

/* One metadata entry at the cursor: key, value type, value.  Arrays are
 * walked (string arrays element by element) but not copied. */
static bool s_read_kv(s_cursor_t *c, model_gguf_kv_t *kv, int64_t idx) {
    char what[64];
    snprintf(what, sizeof what, "metadata key #%lld", (long long)idx);
    const uint8_t *at = c->p;
    if (!s_str(c, &kv->key, what))
        return false;
    if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY) {
        s_fail(c, at, "metadata key #%lld has invalid length %llu", (long long)idx,
               (unsigned long long)kv->key.len);
        return false;
    }
    uint32_t t;
    at = c->p;
    if (!s_take(c, &t, 4, "metadata value type"))
        return false;
    if (t >= GGUF_TYPE_COUNT) {
        s_fail(c, at, "metadata '%.*s' has unknown value type %u", (int)kv->key.len, kv->key.ptr,
               t);
        return false;
    }
    kv->type = (model_gguf_vtype_t)t;
    if (t == GGUF_STRING)
        return s_str(c, &kv->v.str, "metadata string value");
    if (t != GGUF_ARRAY) {
        size_t n = s_vtype_size(kv->type);
        const uint8_t *p = c->p;
        if (!s_take(c, NULL, n, "metadata value"))
            return false;
        s_scalar(kv->type, p, kv);
        return true;
    }
    uint32_t at_type;
    uint64_t len = 0;
    const uint8_t *at_elt = c->p, *at_len = c->p + 4;
    if (!s_take(c, &at_type, 4, "array element type") || !s_take(c, &len, 8, "array length"))
        return false;
    if (at_type >= GGUF_TYPE_COUNT || at_type == GGUF_ARRAY) {
        s_fail(c, at_elt, "metadata '%.*s' has unsupported array element type %u", (int)kv->key.len,
               kv->key.ptr, at_type);
        return false;
    }
    kv->arr_type = (model_gguf_vtype_t)at_type;
    kv->arr_len = len;
    kv->arr_data = c->p;
    if (at_type == GGUF_STRING) {
        for (uint64_t i = 0; i < len; i++) {
            model_gguf_str_t s;
            if (!s_str(c, &s, "array string"))
                return false;
        }
        return true;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(len, (uint64_t)s_vtype_size(kv->arr_type), &bytes) ||
        bytes > s_left(c)) {
        s_fail(c, at_len, "metadata array '%.*s' of %llu elements runs past the end of the file",
               (int)kv->key.len, kv->key.ptr, (unsigned long long)len);
        return false;
    }
    c->p += bytes;
    return true;
}

/* Tensor info #idx at the cursor: name (unique), dimensions, type, data offset.
 * Every product of dimensions is checked; nbytes is the data size. */
static bool s_read_tensor(s_cursor_t *c, model_gguf_t *self, int64_t idx) {
    model_gguf_tensor_t *t = &self->tensors[idx];
    char what[64];
    snprintf(what, sizeof what, "tensor #%lld name", (long long)idx);
    const uint8_t *at = c->p;
    if (!s_str(c, &t->name, what))
        return false;
    if (t->name.len == 0 || t->name.len > GGUF_MAX_NAME) {
        s_fail(c, at, "tensor #%lld has invalid name length %llu", (long long)idx,
               (unsigned long long)t->name.len);
        return false;
    }
    uint64_t first;
    /* sized for every tensor: never grows, so -EEXIST is the only error */
    if (base_strmap_add(&self->by_name, t->name.ptr, t->name.len, (uint64_t)idx, &first)) {
        s_fail(c, at, "duplicate tensor name '%.*s' (tensor #%lld; #%lld has it already)",
               (int)t->name.len, t->name.ptr, (long long)idx, (long long)first);
        return false;
    }
    uint32_t nd;
    at = c->p;
    if (!s_take(c, &nd, 4, "tensor dimension count"))
        return false;
    if (nd < 1 || nd > GGUF_MAX_DIMS) {
        s_fail(c, at, "tensor '%.*s' has %u dimensions (1..4 allowed)", (int)t->name.len,
               t->name.ptr, nd);
        return false;
    }
    t->n_dims = (int)nd;
    const uint8_t *at_ne0 = c->p;
    uint64_t nel = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        uint64_t ne = 1;
        at = c->p;
        if (i < (int)nd && !s_take(c, &ne, 8, "tensor dimension"))
            return false;
        if (ne == 0 || ne > GGUF_MAX_NE || __builtin_mul_overflow(nel, ne, &nel) ||
            nel > GGUF_MAX_NEL) {
            s_fail(c, at,
                   "tensor '%.*s' has invalid dimension %d = %llu (at most 2^40 each, "
                   "2^50 elements in all)",
                   (int)t->name.len, t->name.ptr, i, (unsigned long long)ne);
            return false;
        }
        t->ne[i] = (int64_t)ne;
    }
    uint32_t type;
    at = c->p;
    if (!s_take(c, &type, 4, "tensor type") || !s_take(c, &t->offset, 8, "tensor offset"))
        return false;
    const kern_type_traits_t *tr = kern_type_traits((int)type);
    if (!tr || !tr->is_weight) {
        s_fail(c, at,
               "tensor '%.*s' has unsupported type %u (supported: f32 f16 bf16 q4_0 q4_1 "
               "q5_0 q5_1 q8_0 q4_K q5_K q6_K)",
               (int)t->name.len, t->name.ptr, type);
        return false;
    }
    if (t->ne[0] % tr->block_size) {
        s_fail(c, at_ne0,
               "tensor '%.*s': row length %lld is not a multiple of the %s block size %d",
               (int)t->name.len, t->name.ptr, (long long)t->ne[0], tr->name, tr->block_size);
        return false;
    }
    t->type = (kern_type_t)type;
    uint64_t rows = nel / (uint64_t)t->ne[0];
    if (__builtin_mul_overflow((uint64_t)kern_row_size(t->type, t->ne[0]), rows, &t->nbytes)) {
        s_fail(c, at_ne0, "tensor '%.*s' is too large", (int)t->name.len, t->name.ptr);
        return false;
    }
    return true;
}

/* File offset of tensor t's data-offset field (its info ends with type, offset). */
static const uint8_t *s_offset_field(const model_gguf_tensor_t *t) {
    return (const uint8_t *)t->name.ptr + t->name.len + 4 + 8 * (size_t)t->n_dims + 4;
}

const char *model_gguf_cache_dir(char *buf, size_t len) {
    const char *dir = getenv("STRATA_MODEL_DIR");
    if (dir && *dir)
        snprintf(buf, len, "%s", dir);
    else
        snprintf(buf, len, "%s/.cache/strata/models", getenv("HOME") ? getenv("HOME") : ".");
    return buf;
}

static bool s_is_gguf_name(const char *f) {
    const size_t n = strlen(f);
    return n > 5 && strcasecmp(f + n - 5, ".gguf") == 0;
}

int model_gguf_resolve(const char *name, char *out, size_t outlen, char *err, size_t errlen) {
    char dir[4096], found[1024] = "", all[1024] = "";
    model_gguf_cache_dir(dir, sizeof dir);
    DIR *d = opendir(dir);
    int hits = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!s_is_gguf_name(e->d_name))
            continue;
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", *all ? ", " : "", e->d_name);
        const size_t nl = strlen(name), fl = strlen(e->d_name);
        if ((nl == fl || nl == fl - 5) && strncasecmp(e->d_name, name, nl) == 0) {
            snprintf(out, outlen, "%s/%s", dir, e->d_name); /* the whole name or stem: it */
            hits = 1;
            break;
        }
        if (strncasecmp(e->d_name, name, nl) == 0) {
            if (hits++ == 0)
                snprintf(out, outlen, "%s/%s", dir, e->d_name);
            snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s",
                     *found ? ", " : "", e->d_name);
        }
    }
    if (d)
        closedir(d);
    if (hits == 1)
        return 0;
    if (hits > 1)
        return model_err_set(err, errlen, -EEXIST,
                             "%s: no such file, and several models in %s start with it: %s", name,
                             dir, found);
    return model_err_set(err, errlen, -ENOENT,
                         "%s: no such file, and no model in %s starts with it (there: %s)", name,
                         dir, *all ? all : "no .gguf file");
}

model_gguf_t *model_gguf_open(const char *path, char *err, size_t errlen) {
    if (err && errlen)
        err[0] = 0;
    char resolved[4096];
    if (!strchr(path, '/') && access(path, F_OK) != 0) { /* a model name */
        if (model_gguf_resolve(path, resolved, sizeof resolved, err, errlen) != 0)
            return NULL;
        path = resolved;
    }
    model_gguf_t *self = calloc(1, sizeof *self);
    int fd = -1;
    if (!self)
        goto oom;
    self->path = strdup(path);
    if (!self->path)
        goto oom;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        model_err_set(err, errlen, -EIO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        model_err_set(err, errlen, -EINVAL, "%s: not a regular file", path);
        goto fail;
    }
    self->size = (size_t)st.st_size;
    if (self->size < 4) {
        model_err_set(err, errlen, -EPROTO, "%s: not a GGUF file (only %zu bytes)", path,
                      self->size);
        goto fail;
    }
    void *m = mmap(NULL, self->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        model_err_set(err, errlen, -EIO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    self->map = m;
    close(fd);
    fd = -1;

    s_cursor_t c = {self->map, self->map, self->map + self->size, err, errlen, path, false};
    uint32_t magic = 0;
    s_take(&c, &magic, 4, "magic");
    if (magic != GGUF_MAGIC) {
        s_fail(&c, self->map, "not a GGUF file (bad magic 0x%08x)", magic);
        goto fail;
    }
    if (!s_take(&c, &self->version, 4, "version"))
        goto fail;
    if (self->version != 2 && self->version != 3) {
        s_fail(&c, self->map + 4, "unsupported GGUF version %u (2 and 3 are supported)",
               self->version);
        goto fail;
    }
    uint64_t nt, nkv;
    if (!s_take(&c, &nt, 8, "tensor count") || !s_take(&c, &nkv, 8, "metadata count"))
        goto fail;
    /* Each entry takes at least 8+1+4 (kv) or 8+1+4+8+4+8 (tensor) bytes. */
    if (nt > self->size / 33 || nkv > self->size / 13) {
        s_fail(&c, self->map + (nt > self->size / 33 ? 8 : 16),
               "truncated or corrupt file: %llu tensors and %llu metadata entries cannot "
               "fit in %zu bytes",
               (unsigned long long)nt, (unsigned long long)nkv, self->size);
        goto fail;
    }
    self->n_kv = (int64_t)nkv;
    self->n_tensors = (int64_t)nt;
    self->kv = calloc(nkv ? nkv : 1, sizeof *self->kv);
    self->tensors = calloc(nt ? nt : 1, sizeof *self->tensors);
    if (!self->kv || !self->tensors || base_strmap_init(&self->by_name, (size_t)nt))
        goto oom;
    for (int64_t i = 0; i < self->n_kv; i++)
        if (!s_read_kv(&c, &self->kv[i], i))
            goto fail;
    self->alignment = 32;
    const model_gguf_kv_t *al = model_gguf_find(self, "general.alignment");
    if (al) {
        if (al->type != GGUF_UINT32 || al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1))) {
            /* the value follows the key and its 4-byte type */
            s_fail(&c, al->key.ptr + al->key.len + 4,
                   "general.alignment must be a power-of-two uint32");
            goto fail;
        }
        self->alignment = al->v.u64;
    }
    for (int64_t i = 0; i < self->n_tensors; i++)
        if (!s_read_tensor(&c, self, i))
            goto fail;
    /* header <= file size and alignment <= 2^31: no overflow */
    uint64_t hdr = (uint64_t)(c.p - self->map);
    self->data_offset = (hdr + self->alignment - 1) / self->alignment * self->alignment;
    if (self->data_offset > self->size && self->n_tensors > 0) {
        s_fail(&c, c.p, "truncated file: tensor data section missing (the header ends at %llu)",
               (unsigned long long)hdr);
        goto fail;
    }
    for (int64_t i = 0; i < self->n_tensors; i++) {
        model_gguf_tensor_t *t = &self->tensors[i];
        if (t->offset % self->alignment) {
            s_fail(&c, s_offset_field(t), "tensor '%.*s' offset %llu is not aligned to %llu",
                   (int)t->name.len, t->name.ptr, (unsigned long long)t->offset,
                   (unsigned long long)self->alignment);
            goto fail;
        }
        uint64_t avail = self->size - self->data_offset;
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            s_fail(&c, s_offset_field(t),
                   "truncated file: tensor '%.*s' (%llu bytes at data offset %llu) runs "
                   "past the end of the file (%zu bytes, data from %llu)",
                   (int)t->name.len, t->name.ptr, (unsigned long long)t->nbytes,
                   (unsigned long long)t->offset, self->size,
                   (unsigned long long)self->data_offset);
            goto fail;
        }
        t->data = self->map + self->data_offset + t->offset;
    }
    return self;
oom:
    model_err_set(err, errlen, -ENOMEM, "%s: out of memory", path);
fail:
    if (fd >= 0)
        close(fd);
    model_gguf_destroy(&self);
    return NULL;
}

void model_gguf_destroy(model_gguf_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_gguf_t *self = *self_p;
    if (self->map)
        munmap((void *)self->map, self->size);
    free(self->kv);
    free(self->tensors);
    base_strmap_free(&self->by_name);
    free(self->path);
    free(self);
    *self_p = NULL;
}

uint32_t model_gguf_version(const model_gguf_t *self) {
    return self->version;
}
const char *model_gguf_path(const model_gguf_t *self) {
    return self->path;
}
size_t model_gguf_file_size(const model_gguf_t *self) {
    return self->size;
}
uint64_t model_gguf_alignment(const model_gguf_t *self) {
    return self->alignment;
}
uint64_t model_gguf_data_offset(const model_gguf_t *self) {
    return self->data_offset;
}
int64_t model_gguf_kv_count(const model_gguf_t *self) {
    return self->n_kv;
}
int64_t model_gguf_tensor_count(const model_gguf_t *self) {
    return self->n_tensors;
}

const model_gguf_kv_t *model_gguf_kv_at(const model_gguf_t *self, int64_t i) {
    return i >= 0 && i < self->n_kv ? &self->kv[i] : NULL;
}

const model_gguf_tensor_t *model_gguf_tensor_at(const model_gguf_t *self, int64_t i) {
    return i >= 0 && i < self->n_tensors ? &self->tensors[i] : NULL;
}

bool model_gguf_str_eq(model_gguf_str_t s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && !memcmp(s.ptr, c, n);
}

const model_gguf_kv_t *model_gguf_find(const model_gguf_t *self, const char *key) {
    for (int64_t i = 0; i < self->n_kv; i++)
        if (model_gguf_str_eq(self->kv[i].key, key))
            return &self->kv[i];
    return NULL;
}

const model_gguf_tensor_t *model_gguf_tensor(const model_gguf_t *self, const char *name) {
    uint64_t k;
    return base_strmap_get(&self->by_name, name, strlen(name), &k) ? &self->tensors[k] : NULL;
}

static bool s_is_unsigned(model_gguf_vtype_t t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64 ||
           t == GGUF_BOOL;
}

static bool s_is_signed(model_gguf_vtype_t t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

bool model_gguf_get_u64(const model_gguf_t *self, const char *key, uint64_t *out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv)
        return false;
    if (s_is_unsigned(kv->type)) {
        *out = kv->v.u64;
        return true;
    }
    if (s_is_signed(kv->type) && kv->v.i64 >= 0) {
        *out = (uint64_t)kv->v.i64;
        return true;
    }
    return false;
}

bool model_gguf_get_i64(const model_gguf_t *self, const char *key, int64_t *out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv)
        return false;
    if (s_is_signed(kv->type)) {
        *out = kv->v.i64;
        return true;
    }
    if (s_is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->v.u64;
        return true;
    }
    return false;
}

bool model_gguf_get_f64(const model_gguf_t *self, const char *key, double *out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv)
        return false;
    if (kv->type == GGUF_FLOAT32 || kv->type == GGUF_FLOAT64)
        *out = kv->v.f64;
    else if (s_is_signed(kv->type))
        *out = (double)kv->v.i64;
    else if (s_is_unsigned(kv->type))
        *out = (double)kv->v.u64;
    else
        return false;
    return true;
}

bool model_gguf_get_bool(const model_gguf_t *self, const char *key, bool *out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv || kv->type != GGUF_BOOL)
        return false;
    *out = kv->v.u64 != 0;
    return true;
}

bool model_gguf_get_str(const model_gguf_t *self, const char *key, char **out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv || kv->type != GGUF_STRING)
        return false;
    char *s = malloc(kv->v.str.len + 1);
    if (!s)
        return false;
    memcpy(s, kv->v.str.ptr, kv->v.str.len);
    s[kv->v.str.len] = 0;
    *out = s;
    return true;
}

bool model_gguf_get_arr(const model_gguf_t *self, const char *key, model_gguf_vtype_t *elt_type,
                        uint64_t *len) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv || kv->type != GGUF_ARRAY)
        return false;
    if (elt_type)
        *elt_type = kv->arr_type;
    if (len)
        *len = kv->arr_len;
    return true;
}

bool model_gguf_arr_strs(const model_gguf_t *self, const char *key, model_gguf_str_t *out,
                         uint64_t n) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || n > kv->arr_len)
        return false;
    /* Lengths were validated at open, so this walk stays inside the mapping. */
    const uint8_t *p = kv->arr_data;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t len;
        memcpy(&len, p, 8);
        out[k].ptr = (const char *)p + 8;
        out[k].len = len;
        p += 8 + len;
    }
    return true;
}

bool model_gguf_arr_str(const model_gguf_t *self, const char *key, uint64_t i,
                        model_gguf_str_t *out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->arr_len)
        return false;
    const uint8_t *p = kv->arr_data;
    for (uint64_t k = 0; k < i; k++) {
        uint64_t len;
        memcpy(&len, p, 8);
        p += 8 + len;
    }
    uint64_t len;
    memcpy(&len, p, 8);
    out->ptr = (const char *)p + 8;
    out->len = len;
    return true;
}

bool model_gguf_arr_num(const model_gguf_t *self, const char *key, uint64_t i, double *out) {
    const model_gguf_kv_t *kv = model_gguf_find(self, key);
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->arr_len || kv->arr_type == GGUF_STRING)
        return false;
    model_gguf_kv_t tmp;
    memset(&tmp, 0, sizeof tmp);
    const uint8_t *p = kv->arr_data + i * s_vtype_size(kv->arr_type);
    s_scalar(kv->arr_type, p, &tmp);
    if (kv->arr_type == GGUF_FLOAT32 || kv->arr_type == GGUF_FLOAT64)
        *out = tmp.v.f64;
    else if (s_is_signed(kv->arr_type))
        *out = (double)tmp.v.i64;
    else
        *out = (double)tmp.v.u64;
    return true;
}
