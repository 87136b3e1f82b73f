/* model_gguf_write.c - GGUF v3 writer.  Metadata values are kept already encoded
 * (type tag + payload, exactly as they go to the file); tensors keep name, type,
 * shape and a borrowed data pointer (or come from the fill callback at save time).
 */
#include "model_gguf_write.h"
#include "base_log.h"
#include "kern_ops.h"
#include "model_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32u

/* One metadata entry, value pre-encoded. */
typedef struct {
    char *key;    /* NUL-terminated copy */
    uint8_t *val; /* u32 type tag followed by the value, as in the file */
    size_t len;   /* bytes of val */
} s_kv_t;

/* One tensor to write. */
typedef struct {
    char *name;       /* NUL-terminated copy */
    kern_type_t type; /* element type */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* dimensions, unused ones 1 */
    size_t nbytes;    /* bytes of data */
    const void *data; /* borrowed, or NULL: ask the fill callback */
} s_tensor_t;

struct model_gguf_write_t {
    s_kv_t *kv;                    /* (n_kv) metadata in write order */
    int64_t n_kv, cap_kv;          /* used, allocated */
    s_tensor_t *t;                 /* (n_t) tensors in write order */
    int64_t n_t, cap_t;            /* used, allocated */
    model_gguf_write_fill_fn fill; /* data source for tensors without data */
    void *fill_arg;                /* its argument */
};

/* ---- a growable byte buffer ------------------------------------------------------------- */

typedef struct {
    uint8_t *p; /* bytes */
    size_t n;   /* used */
    size_t cap; /* allocated */
    bool oom;   /* an append failed: the buffer is incomplete */
} s_buf_t;

static void s_put(s_buf_t *b, const void *src, size_t n) {
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void s_put_u32(s_buf_t *b, uint32_t v) {
    s_put(b, &v, 4);
}
static void s_put_u64(s_buf_t *b, uint64_t v) {
    s_put(b, &v, 8);
}
static void s_put_str(s_buf_t *b, const char *s, uint64_t len) {
    s_put_u64(b, len);
    s_put(b, s, (size_t)len);
}

/* Bytes of one scalar of type t, 0 for STRING/ARRAY/unknown. */
static size_t s_scalar_size(model_gguf_vtype_t t) {
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

/* ---- metadata --------------------------------------------------------------------------- */

model_gguf_write_t *model_gguf_write_new(void) {
    return calloc(1, sizeof(model_gguf_write_t));
}

void model_gguf_write_destroy(model_gguf_write_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_gguf_write_t *self = *self_p;
    for (int64_t i = 0; i < self->n_kv; i++) {
        free(self->kv[i].key);
        free(self->kv[i].val);
    }
    free(self->kv);
    for (int64_t i = 0; i < self->n_t; i++)
        free(self->t[i].name);
    free(self->t);
    free(self);
    *self_p = NULL;
}

static int64_t s_find_kv(const model_gguf_write_t *self, const char *key) {
    for (int64_t i = 0; i < self->n_kv; i++)
        if (!strcmp(self->kv[i].key, key))
            return i;
    return -1;
}

/* Store key = the encoded value in b (taking b's bytes), replacing an existing entry. */
static int s_set(model_gguf_write_t *self, const char *key, s_buf_t *b) {
    if (b->oom) {
        free(b->p);
        return -ENOMEM;
    }
    if (!key || !*key) {
        free(b->p);
        return -EINVAL;
    }
    int64_t i = s_find_kv(self, key);
    if (i >= 0) {
        free(self->kv[i].val);
        self->kv[i].val = b->p;
        self->kv[i].len = b->n;
        return 0;
    }
    if (self->n_kv == self->cap_kv) {
        int64_t cap = self->cap_kv ? self->cap_kv * 2 : 32;
        s_kv_t *kv = realloc(self->kv, (size_t)cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return -ENOMEM;
        }
        self->kv = kv;
        self->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b->p);
        return -ENOMEM;
    }
    self->kv[self->n_kv++] = (s_kv_t){.key = k, .val = b->p, .len = b->n};
    return 0;
}

static int s_set_scalar(model_gguf_write_t *self, const char *key, model_gguf_vtype_t t,
                        const void *v) {
    s_buf_t b = {0};
    s_put_u32(&b, (uint32_t)t);
    s_put(&b, v, s_scalar_size(t));
    return s_set(self, key, &b);
}

int model_gguf_write_set_u32(model_gguf_write_t *self, const char *key, uint32_t v) {
    return s_set_scalar(self, key, GGUF_UINT32, &v);
}
int model_gguf_write_set_i32(model_gguf_write_t *self, const char *key, int32_t v) {
    return s_set_scalar(self, key, GGUF_INT32, &v);
}
int model_gguf_write_set_u64(model_gguf_write_t *self, const char *key, uint64_t v) {
    return s_set_scalar(self, key, GGUF_UINT64, &v);
}
int model_gguf_write_set_f32(model_gguf_write_t *self, const char *key, float v) {
    return s_set_scalar(self, key, GGUF_FLOAT32, &v);
}
int model_gguf_write_set_bool(model_gguf_write_t *self, const char *key, bool v) {
    uint8_t u = v ? 1 : 0;
    return s_set_scalar(self, key, GGUF_BOOL, &u);
}

int model_gguf_write_set_str(model_gguf_write_t *self, const char *key, const char *v) {
    s_buf_t b = {0};
    s_put_u32(&b, GGUF_STRING);
    s_put_str(&b, v, strlen(v));
    return s_set(self, key, &b);
}

int model_gguf_write_set_arr(model_gguf_write_t *self, const char *key, model_gguf_vtype_t elt_type,
                             uint64_t n, const void *data) {
    size_t es = s_scalar_size(elt_type);
    if (!es || (n && !data))
        return -EINVAL;
    if (n > SIZE_MAX / es)
        return -ENOMEM;
    s_buf_t b = {0};
    s_put_u32(&b, GGUF_ARRAY);
    s_put_u32(&b, (uint32_t)elt_type);
    s_put_u64(&b, n);
    s_put(&b, data, (size_t)n * es);
    return s_set(self, key, &b);
}

int model_gguf_write_set_arr_str(model_gguf_write_t *self, const char *key, const char *const *v,
                                 uint64_t n) {
    s_buf_t b = {0};
    s_put_u32(&b, GGUF_ARRAY);
    s_put_u32(&b, GGUF_STRING);
    s_put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++)
        s_put_str(&b, v[i], strlen(v[i]));
    return s_set(self, key, &b);
}

void model_gguf_write_remove(model_gguf_write_t *self, const char *key) {
    int64_t i = s_find_kv(self, key);
    if (i < 0)
        return;
    free(self->kv[i].key);
    free(self->kv[i].val);
    memmove(&self->kv[i], &self->kv[i + 1], (size_t)(self->n_kv - i - 1) * sizeof *self->kv);
    self->n_kv--;
}

int64_t model_gguf_write_kv_count(const model_gguf_write_t *self) {
    return self->n_kv;
}

/* Encode one value read by model_gguf (scalars decoded, arrays pointing into the file). */
static void s_encode_kv(s_buf_t *b, const model_gguf_kv_t *kv) {
    s_put_u32(b, (uint32_t)kv->type);
    switch (kv->type) {
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64:
    case GGUF_BOOL:
        s_put(b, &kv->v.u64, s_scalar_size(kv->type)); /* little-endian: low bytes first */
        break;
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32:
    case GGUF_INT64:
        s_put(b, &kv->v.i64, s_scalar_size(kv->type));
        break;
    case GGUF_FLOAT32: {
        float f = (float)kv->v.f64;
        s_put(b, &f, 4);
        break;
    }
    case GGUF_FLOAT64:
        s_put(b, &kv->v.f64, 8);
        break;
    case GGUF_STRING:
        s_put_str(b, kv->v.str.ptr, kv->v.str.len);
        break;
    case GGUF_ARRAY: {
        s_put_u32(b, (uint32_t)kv->arr_type);
        s_put_u64(b, kv->arr_len);
        if (kv->arr_type == GGUF_STRING) {
            /* (u64 len, bytes) pairs, already validated by the reader: copy them as they are */
            const uint8_t *p = kv->arr_data;
            for (uint64_t i = 0; i < kv->arr_len; i++) {
                uint64_t len;
                memcpy(&len, p, 8);
                p += 8 + len;
            }
            s_put(b, kv->arr_data, (size_t)(p - kv->arr_data));
        } else {
            s_put(b, kv->arr_data, (size_t)kv->arr_len * s_scalar_size(kv->arr_type));
        }
        break;
    }
    default:
        b->oom = true; /* unreachable: the reader validated the type */
        break;
    }
}

int model_gguf_write_copy_kvs(model_gguf_write_t *self, const model_gguf_t *src) {
    int64_t n = model_gguf_kv_count(src);
    for (int64_t i = 0; i < n; i++) {
        const model_gguf_kv_t *kv = model_gguf_kv_at(src, i);
        if (kv->type == GGUF_ARRAY &&
            (kv->arr_type == GGUF_ARRAY ||
             (kv->arr_type != GGUF_STRING && !s_scalar_size(kv->arr_type))))
            return -ENOTSUP;
        char *key = strndup(kv->key.ptr, (size_t)kv->key.len);
        if (!key)
            return -ENOMEM;
        s_buf_t b = {0};
        s_encode_kv(&b, kv);
        int rc = s_set(self, key, &b);
        free(key);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- tensors ---------------------------------------------------------------------------- */

int64_t model_gguf_write_add_tensor(model_gguf_write_t *self, const char *name, kern_type_t type,
                                    int n_dims, const int64_t *ne, const void *data, char *err,
                                    size_t errlen) {
    if (!name || !*name)
        return model_err_set(err, errlen, -EINVAL, "tensor with an empty name");
    const kern_type_traits_t *tr = kern_type_traits((int)type);
    if (!tr)
        return model_err_set(err, errlen, -EINVAL, "tensor %s: unsupported type %d", name,
                             (int)type);
    if (n_dims < 1 || n_dims > 4)
        return model_err_set(err, errlen, -EINVAL, "tensor %s: %d dimensions (1..4)", name, n_dims);
    uint64_t n_rows = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return model_err_set(err, errlen, -EINVAL, "tensor %s: dimension %d is %lld", name, d,
                                 (long long)ne[d]);
        if (d > 0) {
            if (n_rows > (UINT64_MAX >> 1) / (uint64_t)ne[d])
                return model_err_set(err, errlen, -EINVAL, "tensor %s: too large", name);
            n_rows *= (uint64_t)ne[d];
        }
    }
    if (ne[0] % tr->block_size)
        return model_err_set(err, errlen, -EINVAL,
                             "tensor %s: row of %lld is not a multiple of %s's block of %d", name,
                             (long long)ne[0], tr->name, tr->block_size);
    for (int64_t i = 0; i < self->n_t; i++)
        if (!strcmp(self->t[i].name, name))
            return model_err_set(err, errlen, -EINVAL, "tensor %s added twice", name);
    size_t row = kern_row_size(type, ne[0]);
    if (n_rows > SIZE_MAX / row)
        return model_err_set(err, errlen, -EINVAL, "tensor %s: too large", name);
    if (self->n_t == self->cap_t) {
        int64_t cap = self->cap_t ? self->cap_t * 2 : 64;
        s_tensor_t *t = realloc(self->t, (size_t)cap * sizeof *t);
        if (!t)
            return -ENOMEM;
        self->t = t;
        self->cap_t = cap;
    }
    s_tensor_t t = {.type = type,
                    .n_dims = n_dims,
                    .ne = {1, 1, 1, 1},
                    .nbytes = (size_t)n_rows * row,
                    .data = data};
    for (int d = 0; d < n_dims; d++)
        t.ne[d] = ne[d];
    t.name = strdup(name);
    if (!t.name)
        return -ENOMEM;
    self->t[self->n_t] = t;
    return self->n_t++;
}

void model_gguf_write_set_fill(model_gguf_write_t *self, model_gguf_write_fill_fn fn, void *arg) {
    self->fill = fn;
    self->fill_arg = arg;
}

/* ---- the file --------------------------------------------------------------------------- */

static uint64_t s_align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* general.alignment if set as a u32 power of two, else 32; -EINVAL if set but unusable. */
static int64_t s_alignment(const model_gguf_write_t *self) {
    int64_t i = s_find_kv(self, "general.alignment");
    if (i < 0)
        return GGUF_DEFAULT_ALIGNMENT;
    const s_kv_t *kv = &self->kv[i];
    uint32_t type, a;
    memcpy(&type, kv->val, 4);
    if (type != GGUF_UINT32 || kv->len != 8)
        return -EINVAL;
    memcpy(&a, kv->val + 4, 4);
    if (a == 0 || (a & (a - 1)))
        return -EINVAL;
    return a;
}

static int s_write_all(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n ? 0 : -EIO;
}

static const uint8_t s_zeros[256];

static int s_pad(FILE *f, uint64_t *pos, uint64_t align) {
    uint64_t to = s_align_up(*pos, align);
    while (*pos < to) {
        size_t n = (size_t)(to - *pos) < sizeof s_zeros ? (size_t)(to - *pos) : sizeof s_zeros;
        if (s_write_all(f, s_zeros, n) < 0)
            return -EIO;
        *pos += n;
    }
    return 0;
}

int model_gguf_write_save(model_gguf_write_t *self, const char *path, char *err, size_t errlen) {
    int64_t align = s_alignment(self);
    if (align < 0)
        return model_err_set(err, errlen, -EINVAL,
                             "%s: general.alignment must be a u32 power of two", path);

    /* header, metadata and tensor infos, built in memory */
    s_buf_t h = {0};
    s_put_u32(&h, 0x46554747u); /* "GGUF" */
    s_put_u32(&h, 3);
    s_put_u64(&h, (uint64_t)self->n_t);
    s_put_u64(&h, (uint64_t)self->n_kv);
    for (int64_t i = 0; i < self->n_kv; i++) {
        s_put_str(&h, self->kv[i].key, strlen(self->kv[i].key));
        s_put(&h, self->kv[i].val, self->kv[i].len);
    }
    uint64_t off = 0; /* offset of each tensor's data within the data section */
    for (int64_t i = 0; i < self->n_t; i++) {
        const s_tensor_t *t = &self->t[i];
        s_put_str(&h, t->name, strlen(t->name));
        s_put_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            s_put_u64(&h, (uint64_t)t->ne[d]);
        s_put_u32(&h, (uint32_t)t->type);
        s_put_u64(&h, off);
        off = s_align_up(off + t->nbytes, (uint64_t)align);
    }
    if (h.oom) {
        free(h.p);
        return model_err_set(err, errlen, -ENOMEM, "%s: out of memory building the header", path);
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(h.p);
        return -ENOMEM;
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int rc = 0;
    FILE *f = NULL;
    void *buf = NULL;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = -errno;
        model_err_set(err, errlen, rc, "cannot create %s (as %s): %s", path, tmp, strerror(-rc));
        free(tmp);
        free(h.p);
        return rc;
    }
    /* mkstemp creates 0600; give the model the mode a plain creat() would */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um) != 0)
        LOG_W("gguf_write", "%s: cannot set permissions: %s", tmp, strerror(errno));
    f = fdopen(fd, "wb");
    if (!f) {
        rc = -errno;
        close(fd);
        model_err_set(err, errlen, rc, "cannot open %s: %s", tmp, strerror(-rc));
        goto fail;
    }

    uint64_t pos = 0;
    if ((rc = s_write_all(f, h.p, h.n)) < 0)
        goto io_fail;
    pos += h.n;
    if ((rc = s_pad(f, &pos, (uint64_t)align)) < 0)
        goto io_fail;
    for (int64_t i = 0; i < self->n_t; i++) {
        const s_tensor_t *t = &self->t[i];
        const void *src = t->data;
        if (!src) {
            if (!self->fill) {
                rc = model_err_set(err, errlen, -EINVAL,
                                   "%s: tensor %s has no data and no fill callback", path, t->name);
                goto fail;
            }
            free(buf);
            buf = malloc(t->nbytes ? t->nbytes : 1);
            if (!buf) {
                rc = model_err_set(err, errlen, -ENOMEM,
                                   "%s: out of memory for tensor %s (%zu bytes)", path, t->name,
                                   t->nbytes);
                goto fail;
            }
            rc = self->fill(self->fill_arg, i, buf, t->nbytes);
            if (rc < 0) {
                model_err_set(err, errlen, rc, "%s: producing tensor %s failed: %s", path, t->name,
                              strerror(-rc));
                goto fail;
            }
            src = buf;
        }
        if ((rc = s_write_all(f, src, t->nbytes)) < 0)
            goto io_fail;
        pos += t->nbytes;
        if ((rc = s_pad(f, &pos, (uint64_t)align)) < 0)
            goto io_fail;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rc = -errno;
        goto io_fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        rc = -errno;
        goto io_fail;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        rc = -errno;
        model_err_set(err, errlen, rc, "cannot rename %s to %s: %s", tmp, path, strerror(-rc));
        goto fail;
    }
    free(buf);
    free(tmp);
    free(h.p);
    return 0;

io_fail:
    if (rc == 0 || rc == -EIO)
        rc = errno ? -errno : -EIO;
    model_err_set(err, errlen, rc, "cannot write %s (as %s): %s", path, tmp, strerror(-rc));
fail:
    if (f)
        fclose(f);
    unlink(tmp);
    free(buf);
    free(tmp);
    free(h.p);
    return rc;
}
