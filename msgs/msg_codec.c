/* msg_codec.c - the bounded MessagePack reader and the schema engine: one validating
 * decoder, one encoder (msgpack-c packer) and one destructor for every message type.
 * Nothing here trusts the input: every length is checked against the bytes left
 * before it is used, nesting is bounded, and every field is checked against its
 * schema entry before it is stored.
 */
#include "msg_codec.h"
#include "msg_client.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors */

int msg_err_set(msg_err_t *err, int code, int kind, const char *field, const char *fmt, ...) {
    if (!err)
        return code;
    err->code = code;
    err->kind = kind;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

const char *msg_vkind_name(int kind) {
    static const char *const names[] = {"nil", "bool",  "int", "float", "str",
                                        "bin", "array", "map", "ext"};
    return kind >= 0 && kind <= MSG_V_EXT ? names[kind] : "?";
}

/* ---- reader */

void msg_rd_init(msg_rd_t *rd, const void *buf, size_t len) {
    rd->start = buf;
    rd->p = buf;
    rd->end = rd->p + (buf ? len : 0);
}

static uint64_t s_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static int s_truncated(msg_rd_t *rd, msg_err_t *err) {
    return msg_err_set(err, -EBADMSG, MSG_E_MALFORMED, NULL,
                       "truncated MessagePack (frame ends at byte %zu)",
                       (size_t)(rd->end - rd->start));
}

/* take n bytes (0 = bounds ok) */
static int s_need(msg_rd_t *rd, size_t n, msg_err_t *err) {
    if ((size_t)(rd->end - rd->p) < n)
        return s_truncated(rd, err);
    return 0;
}

/* read a big-endian length of nb bytes then the payload of that length */
static int s_payload(msg_rd_t *rd, msg_val_t *v, int nb, msg_err_t *err) {
    if (nb) {
        if (s_need(rd, (size_t)nb, err))
            return -EBADMSG;
        v->n = (uint32_t)s_be(rd->p, nb);
        rd->p += nb;
    }
    if (s_need(rd, v->n, err))
        return -EBADMSG;
    v->p = rd->p;
    rd->p += v->n;
    return 0;
}

static int s_count(msg_rd_t *rd, msg_val_t *v, int nb, uint64_t per, msg_err_t *err) {
    if (nb) {
        if (s_need(rd, (size_t)nb, err))
            return -EBADMSG;
        v->n = (uint32_t)s_be(rd->p, nb);
        rd->p += nb;
    }
    /* every element takes at least one byte: a count larger than what is left is a lie */
    if ((uint64_t)v->n * per > (uint64_t)(rd->end - rd->p))
        return s_truncated(rd, err);
    return 0;
}

static void s_set_int_u(msg_val_t *v, uint64_t u) {
    v->kind = MSG_V_INT;
    v->neg = false;
    v->u = u;
}

static void s_set_int_s(msg_val_t *v, int64_t i) {
    v->kind = MSG_V_INT;
    if (i < 0) {
        v->neg = true;
        v->i = i;
    } else {
        v->neg = false;
        v->u = (uint64_t)i;
    }
}

int msg_rd_next(msg_rd_t *rd, msg_val_t *v, msg_err_t *err) {
    memset(v, 0, sizeof *v);
    if (rd->p >= rd->end)
        return s_truncated(rd, err);
    size_t at = (size_t)(rd->p - rd->start);
    uint8_t c = *rd->p++;
    if (c <= 0x7f) {
        s_set_int_u(v, c);
        return 0;
    }
    if (c >= 0xe0) {
        s_set_int_s(v, (int8_t)c);
        return 0;
    }
    if ((c & 0xe0) == 0xa0) {
        v->kind = MSG_V_STR;
        v->n = c & 0x1f;
        return s_payload(rd, v, 0, err);
    }
    if ((c & 0xf0) == 0x90) {
        v->kind = MSG_V_ARRAY;
        v->n = c & 0x0f;
        return s_count(rd, v, 0, 1, err);
    }
    if ((c & 0xf0) == 0x80) {
        v->kind = MSG_V_MAP;
        v->n = c & 0x0f;
        return s_count(rd, v, 0, 2, err);
    }
    int nb;
    switch (c) {
    case 0xc0:
        v->kind = MSG_V_NIL;
        return 0;
    case 0xc2:
    case 0xc3:
        v->kind = MSG_V_BOOL;
        v->b = c == 0xc3;
        return 0;
    case 0xc4:
    case 0xc5:
    case 0xc6:
        v->kind = MSG_V_BIN;
        return s_payload(rd, v, 1 << (c - 0xc4), err);
    case 0xd9:
    case 0xda:
    case 0xdb:
        v->kind = MSG_V_STR;
        return s_payload(rd, v, 1 << (c - 0xd9), err);
    case 0xdc:
    case 0xdd:
        v->kind = MSG_V_ARRAY;
        return s_count(rd, v, c == 0xdc ? 2 : 4, 1, err);
    case 0xde:
    case 0xdf:
        v->kind = MSG_V_MAP;
        return s_count(rd, v, c == 0xde ? 2 : 4, 2, err);
    case 0xca:
    case 0xcb: {
        nb = c == 0xca ? 4 : 8;
        if (s_need(rd, (size_t)nb, err))
            return -EBADMSG;
        uint64_t bits = s_be(rd->p, nb);
        rd->p += nb;
        v->kind = MSG_V_FLOAT;
        if (nb == 4) {
            uint32_t b32 = (uint32_t)bits;
            float f;
            memcpy(&f, &b32, sizeof f);
            v->f = f;
        } else {
            memcpy(&v->f, &bits, sizeof v->f);
        }
        return 0;
    }
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        nb = 1 << (c - 0xcc);
        if (s_need(rd, (size_t)nb, err))
            return -EBADMSG;
        s_set_int_u(v, s_be(rd->p, nb));
        rd->p += nb;
        return 0;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        nb = 1 << (c - 0xd0);
        if (s_need(rd, (size_t)nb, err))
            return -EBADMSG;
        uint64_t u = s_be(rd->p, nb);
        rd->p += nb;
        int64_t i;
        if (nb < 8 && (u >> (nb * 8 - 1)) & 1) /* sign-extend */
            u |= ~(uint64_t)0 << (nb * 8);
        memcpy(&i, &u, sizeof i);
        s_set_int_s(v, i);
        return 0;
    }
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8: /* fixext 1..16: type byte + payload */
        v->kind = MSG_V_EXT;
        v->n = 1u << (c - 0xd4);
        if (s_need(rd, 1, err))
            return -EBADMSG;
        rd->p++;
        return s_payload(rd, v, 0, err);
    case 0xc7:
    case 0xc8:
    case 0xc9: { /* ext 8/16/32: length, type byte, payload */
        nb = 1 << (c - 0xc7);
        if (s_need(rd, (size_t)nb + 1, err))
            return -EBADMSG;
        v->kind = MSG_V_EXT;
        v->n = (uint32_t)s_be(rd->p, nb);
        rd->p += nb + 1;
        return s_payload(rd, v, 0, err);
    }
    default: /* 0xc1 is never used */
        return msg_err_set(err, -EBADMSG, MSG_E_MALFORMED, NULL,
                           "invalid MessagePack byte 0x%02x at offset %zu", c, at);
    }
}

int msg_rd_skip_body(msg_rd_t *rd, const msg_val_t *v, int depth, msg_err_t *err) {
    if (v->kind != MSG_V_ARRAY && v->kind != MSG_V_MAP)
        return 0;
    if (depth >= MSG_MAX_DEPTH)
        return msg_err_set(err, -EBADMSG, MSG_E_MALFORMED, NULL,
                           "MessagePack nested deeper than %d levels", MSG_MAX_DEPTH);
    uint64_t n = v->kind == MSG_V_MAP ? 2 * (uint64_t)v->n : v->n;
    for (uint64_t i = 0; i < n; i++) {
        msg_val_t e;
        int rc = msg_rd_next(rd, &e, err);
        if (rc < 0)
            return rc;
        if ((rc = msg_rd_skip_body(rd, &e, depth + 1, err)) < 0)
            return rc;
    }
    return 0;
}

/* ---- schema engine: init / clear */

void msg_codec_init(const msg_schema_t *s, void *m) {
    memset(m, 0, s->size);
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        if (f->kind == MSG_F_STRUCT || f->kind == MSG_F_INLINE) {
            /* the sub-struct is already zero; only its defaults remain */
            msg_codec_init(f->sub, (char *)m + f->off);
        }
    }
    if (s->init)
        s->init(m);
}

#define S_AT(m, off, T) ((T *)((char *)(m) + (off)))

static void s_free_fields(const msg_schema_t *s, void *m) {
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        switch (f->kind) {
        case MSG_F_STR_HEAP:
        case MSG_F_BIN_I32:
        case MSG_F_BIN_F32:
        case MSG_F_COUNTERS:
            free(*S_AT(m, f->off, void *));
            *S_AT(m, f->off, void *) = NULL;
            break;
        case MSG_F_ARRAY: {
            char *a = *S_AT(m, f->off, char *);
            int n = *S_AT(m, f->off2, int);
            for (int j = 0; a && j < n; j++)
                s_free_fields(f->sub, a + (size_t)j * f->sub->size);
            free(a);
            *S_AT(m, f->off, void *) = NULL;
            *S_AT(m, f->off2, int) = 0;
            break;
        }
        case MSG_F_STRUCT:
        case MSG_F_INLINE:
            s_free_fields(f->sub, (char *)m + f->off);
            break;
        default:
            break;
        }
    }
}

void msg_codec_clear(const msg_schema_t *s, void *m) {
    s_free_fields(s, m);
    msg_codec_init(s, m);
}

/* ---- strict checks: what the client protocol asks of a whole frame
 * Every str (values and keys, in known fields or not) is well-formed UTF-8, every map
 * key is a str, and no key appears twice in one map.  One walk over the frame, before
 * the schema decode, so that unknown keys (which the schema skips) are held to the
 * same rules.  The error names the offending field by its path ("messages[1].role"). */

typedef struct {
    const uint8_t *p; /* the key's bytes, inside the frame */
    uint32_t n;
} s_key_t;

static int s_key_cmp(const void *a, const void *b) {
    const s_key_t *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->p, y->p, x->n);
}

/* path of a map's key (shown as ASCII, '?' for anything else) */
static void s_path_key(char *out, size_t cap, const char *path, const uint8_t *k, uint32_t n) {
    char shown[48];
    size_t m = n < sizeof shown - 1 ? n : sizeof shown - 1;
    for (size_t i = 0; i < m; i++)
        shown[i] = k[i] >= 0x20 && k[i] < 0x7f && k[i] != '\'' ? (char)k[i] : '?';
    shown[m] = 0;
    if (path[0])
        snprintf(out, cap, "%.40s.%.22s", path, shown);
    else
        snprintf(out, cap, "%s", shown);
}

static int s_strict_value(msg_rd_t *rd, const msg_val_t *v, const char *path, int depth,
                          msg_err_t *err);

/* the pairs of a map whose header v was just read */
static int s_strict_map(msg_rd_t *rd, const msg_val_t *v, const char *path, int depth,
                        msg_err_t *err) {
    s_key_t few[16];
    s_key_t *keys = v->n <= 16 ? few : malloc((size_t)v->n * sizeof *keys);
    if (!keys)
        return msg_err_set(err, -ENOMEM, MSG_E_NOMEM, path, "out of memory");
    char sub[64];
    int rc = 0;
    for (uint32_t i = 0; i < v->n && !rc; i++) {
        msg_val_t k, e;
        if ((rc = msg_rd_next(rd, &k, err)) < 0)
            break;
        if (k.kind != MSG_V_STR) {
            rc = msg_err_set(err, -EPROTO, MSG_E_BAD_TYPE, path, "map key must be a str, got %s",
                             msg_vkind_name(k.kind));
            break;
        }
        if (!msg_utf8_valid(k.p, k.n, NULL)) {
            rc = msg_err_set(err, -EPROTO, MSG_E_UTF8, path, "a key of %s%s%s is not valid UTF-8",
                             path[0] ? "map '" : "the message", path, path[0] ? "'" : "");
            break;
        }
        keys[i] = (s_key_t){k.p, k.n};
        s_path_key(sub, sizeof sub, path, k.p, k.n);
        if ((rc = msg_rd_next(rd, &e, err)) < 0)
            break;
        rc = s_strict_value(rd, &e, sub, depth + 1, err);
    }
    if (!rc && v->n > 1) {
        /* sorted, a key given twice sits next to itself */
        qsort(keys, v->n, sizeof *keys, s_key_cmp);
        for (uint32_t i = 1; i < v->n; i++)
            if (!s_key_cmp(&keys[i - 1], &keys[i])) {
                s_path_key(sub, sizeof sub, path, keys[i].p, keys[i].n);
                rc = msg_err_set(err, -EPROTO, MSG_E_DUPLICATE, sub, "field '%s' appears twice",
                                 sub);
                break;
            }
    }
    if (keys != few)
        free(keys);
    return rc;
}

/* one value whose header v was just read (and its elements) */
static int s_strict_value(msg_rd_t *rd, const msg_val_t *v, const char *path, int depth,
                          msg_err_t *err) {
    if (depth >= MSG_MAX_DEPTH)
        return msg_err_set(err, -EBADMSG, MSG_E_MALFORMED, NULL,
                           "MessagePack nested deeper than %d levels", MSG_MAX_DEPTH);
    size_t at;
    switch (v->kind) {
    case MSG_V_STR:
        if (!msg_utf8_valid(v->p, v->n, &at))
            return msg_err_set(err, -EPROTO, MSG_E_UTF8, path,
                               "field '%s': invalid UTF-8 at byte %zu", path, at);
        return 0;
    case MSG_V_MAP:
        return s_strict_map(rd, v, path, depth, err);
    case MSG_V_ARRAY: {
        char sub[64];
        for (uint32_t i = 0; i < v->n; i++) {
            msg_val_t e;
            int rc = msg_rd_next(rd, &e, err);
            if (rc < 0)
                return rc;
            snprintf(sub, sizeof sub, "%.48s[%u]", path, i);
            if ((rc = s_strict_value(rd, &e, sub, depth + 1, err)) < 0)
                return rc;
        }
        return 0;
    }
    default:
        return 0;
    }
}

/* the whole frame (already known to be one map with nothing after it) */
static int s_strict_frame(const void *buf, size_t len, msg_err_t *err) {
    msg_rd_t rd;
    msg_rd_init(&rd, buf, len);
    msg_val_t top;
    int rc = msg_rd_next(&rd, &top, err);
    if (rc < 0)
        return rc;
    return s_strict_value(&rd, &top, "", 0, err);
}

/* ---- schema engine: decode */

typedef struct {
    msg_rd_t rd;
    msg_err_t *err;
    char path[64]; /* dotted path of the map being decoded ("" at the top) */
} s_dec_t;

/* the full name of field key inside the current map */
static const char *s_fname(s_dec_t *d, const char *key, char *buf, size_t cap) {
    if (!d->path[0])
        return key;
    snprintf(buf, cap, "%.60s.%.30s", d->path, key);
    return buf;
}

static int s_bad_type(s_dec_t *d, const char *fname, const char *want, const msg_val_t *v) {
    return msg_err_set(d->err, -EPROTO, MSG_E_BAD_TYPE, fname, "field '%s': expected %s, got %s",
                       fname, want, msg_vkind_name(v->kind));
}

static int s_too_long(s_dec_t *d, const char *fname, const char *what, uint64_t n, uint64_t max) {
    return msg_err_set(d->err, -EPROTO, MSG_E_TOO_LONG, fname, "field '%s': %llu %s, limit %llu",
                       fname, (unsigned long long)n, what, (unsigned long long)max);
}

static int s_range_int(s_dec_t *d, const char *fname, const msg_val_t *v, int64_t lo, int64_t hi) {
    char val[32];
    if (v->neg)
        snprintf(val, sizeof val, "%lld", (long long)v->i);
    else
        snprintf(val, sizeof val, "%llu", (unsigned long long)v->u);
    return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                       "field '%s': %s is out of range [%lld, %lld]", fname, val, (long long)lo,
                       (long long)hi);
}

/* an int value within [lo, hi] */
static int s_get_int(s_dec_t *d, const char *fname, const msg_val_t *v, int64_t lo, int64_t hi,
                     int64_t *out) {
    if (v->kind != MSG_V_INT)
        return s_bad_type(d, fname, "int", v);
    if (v->neg ? v->i < lo : (v->u > (uint64_t)INT64_MAX || (int64_t)v->u > hi))
        return s_range_int(d, fname, v, lo, hi);
    int64_t x = v->neg ? v->i : (int64_t)v->u;
    if (x < lo || x > hi)
        return s_range_int(d, fname, v, lo, hi);
    *out = x;
    return 0;
}

static int s_get_str(s_dec_t *d, const char *fname, const msg_val_t *v, size_t min, size_t max,
                     bool no_nul) {
    if (v->kind != MSG_V_STR)
        return s_bad_type(d, fname, "str", v);
    if (v->n > max)
        return s_too_long(d, fname, "bytes", v->n, max);
    if (v->n < min)
        return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                           min == 1 ? "field '%s': must not be empty"
                                    : "field '%s': shorter than the minimum",
                           fname);
    if (no_nul && v->n && memchr(v->p, 0, v->n))
        return msg_err_set(d->err, -EPROTO, MSG_E_INVALID, fname, "field '%s': contains a NUL byte",
                           fname);
    return 0;
}

static int s_decode_map(s_dec_t *d, const msg_schema_t *s, void *m, const msg_val_t *mapv,
                        int depth, int type);

/* decode value v (header already read) of field f into m */
static int s_decode_field(s_dec_t *d, const msg_field_t *f, void *m, const msg_val_t *v,
                          int depth) {
    char nb[96];
    const char *fname = s_fname(d, f->key, nb, sizeof nb);
    int rc;
    int64_t x;
    if (v->kind == MSG_V_NIL && (f->flags & MSG_FF_NIL_OK))
        return 0;
    switch (f->kind) {
    case MSG_F_U64:
        if (v->kind != MSG_V_INT)
            return s_bad_type(d, fname, "int", v);
        if (v->neg)
            return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname, "field '%s': %lld is negative",
                               fname, (long long)v->i);
        *S_AT(m, f->off, uint64_t) = v->u;
        return 0;
    case MSG_F_I64:
        if ((rc = s_get_int(d, fname, v, f->lo, f->hi, &x)) < 0)
            return rc;
        *S_AT(m, f->off, int64_t) = x;
        return 0;
    case MSG_F_INT:
        if ((rc = s_get_int(d, fname, v, f->lo, f->hi, &x)) < 0)
            return rc;
        *S_AT(m, f->off, int) = (int)x;
        return 0;
    case MSG_F_I32:
        if ((rc = s_get_int(d, fname, v, f->lo, f->hi, &x)) < 0)
            return rc;
        *S_AT(m, f->off, int32_t) = (int32_t)x;
        return 0;
    case MSG_F_FLOAT:
    case MSG_F_DOUBLE: {
        double y;
        if (v->kind == MSG_V_FLOAT)
            y = v->f;
        else if (v->kind == MSG_V_INT)
            y = v->neg ? (double)v->i : (double)v->u;
        else
            return s_bad_type(d, fname, "float", v);
        if (f->kind == MSG_F_FLOAT && y >= -FLT_MAX && y <= FLT_MAX)
            y = (float)y; /* check the value that will be stored (a tiny double -> 0) */
        bool lo_ok = (f->flags & MSG_FF_LO_OPEN) ? y > f->flo : y >= f->flo;
        if (!(lo_ok && y <= f->fhi)) /* NaN fails here too */
            return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                               "field '%s': %g is out of range %c%g, %g]", fname, y,
                               (f->flags & MSG_FF_LO_OPEN) ? '(' : '[', f->flo, f->fhi);
        if (f->kind == MSG_F_FLOAT)
            *S_AT(m, f->off, float) = (float)y;
        else
            *S_AT(m, f->off, double) = y;
        return 0;
    }
    case MSG_F_BOOL:
        if (v->kind != MSG_V_BOOL)
            return s_bad_type(d, fname, "bool", v);
        *S_AT(m, f->off, bool) = v->b;
        return 0;
    case MSG_F_STR_FIX:
        if ((rc = s_get_str(d, fname, v, f->min, f->max, true)) < 0)
            return rc;
        memcpy(S_AT(m, f->off, char), v->p, v->n);
        S_AT(m, f->off, char)[v->n] = 0;
        return 0;
    case MSG_F_STR_HEAP: {
        if ((rc = s_get_str(d, fname, v, f->min, f->max, false)) < 0)
            return rc;
        char *t = malloc((size_t)v->n + 1);
        if (!t)
            return msg_err_set(d->err, -ENOMEM, MSG_E_NOMEM, fname, "out of memory");
        memcpy(t, v->p, v->n);
        t[v->n] = 0;
        *S_AT(m, f->off, char *) = t;
        *S_AT(m, f->off2, size_t) = v->n;
        return 0;
    }
    case MSG_F_STRS_FIX: {
        if (v->kind != MSG_V_ARRAY)
            return s_bad_type(d, fname, "array of str", v);
        if (v->n > f->max_count)
            return s_too_long(d, fname, "entries", v->n, f->max_count);
        char *base = S_AT(m, f->off, char);
        for (uint32_t i = 0; i < v->n; i++) {
            msg_val_t e;
            char eb[112];
            snprintf(eb, sizeof eb, "%.90s[%u]", fname, i);
            if ((rc = msg_rd_next(&d->rd, &e, d->err)) < 0)
                return rc;
            if ((rc = s_get_str(d, eb, &e, f->min, f->max, true)) < 0)
                return rc;
            char *dst = base + (size_t)i * (f->max + 1);
            memcpy(dst, e.p, e.n);
            dst[e.n] = 0;
        }
        *S_AT(m, f->off2, int) = (int)v->n;
        return 0;
    }
    case MSG_F_BIN_I32:
    case MSG_F_BIN_F32: {
        const bool i32 = f->kind == MSG_F_BIN_I32;
        if (v->kind != MSG_V_BIN)
            return s_bad_type(d, fname, "bin", v);
        if (v->n % 4)
            return msg_err_set(d->err, -EPROTO, MSG_E_INVALID, fname,
                               "field '%s': %u bytes is not a whole number of %s", fname, v->n,
                               i32 ? "int32" : "float32");
        size_t n = v->n / 4;
        if (n > f->max)
            return s_too_long(d, fname, "entries", n, f->max);
        if (n < f->min)
            return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                               "field '%s': %zu entries, at least %zu needed", fname, n, f->min);
        uint32_t *a = malloc(n ? n * sizeof *a : 1); /* int32 or float words, little-endian */
        if (!a)
            return msg_err_set(d->err, -ENOMEM, MSG_E_NOMEM, fname, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const uint8_t *q = v->p + 4 * i;
            a[i] =
                (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            int32_t t;
            float x;
            memcpy(&t, &a[i], sizeof t);
            memcpy(&x, &a[i], sizeof x);
            if (i32 && (t < f->lo || t > f->hi)) {
                free(a);
                return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                                   "field '%s': entry %zu = %d is out of range [%lld, %lld]", fname,
                                   i, t, (long long)f->lo, (long long)f->hi);
            }
            if (!i32 && !isfinite(x)) {
                free(a);
                return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                                   "field '%s': entry %zu is not a finite number", fname, i);
            }
        }
        *S_AT(m, f->off, void *) = a; /* the field is an int32_t * or a float * */
        *S_AT(m, f->off2, int) = (int)n;
        return 0;
    }
    case MSG_F_ENUM: {
        if (v->kind != MSG_V_STR)
            return s_bad_type(d, fname, "str", v);
        for (int i = 0; i < f->n_names; i++)
            if (f->names[i] && strlen(f->names[i]) == v->n && !memcmp(f->names[i], v->p, v->n)) {
                *S_AT(m, f->off, int) = i;
                return 0;
            }
        char shown[40];
        size_t k = v->n < 32 ? v->n : 32;
        memcpy(shown, v->p, k);
        shown[k] = 0;
        for (size_t i = 0; i < k; i++)
            if ((unsigned char)shown[i] < 0x20 || (unsigned char)shown[i] >= 0x7f)
                shown[i] = '?';
        return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                           "field '%s': '%s%s' is not one of the allowed values", fname, shown,
                           v->n > k ? "..." : "");
    }
    case MSG_F_COUNTERS: {
        if (v->kind != MSG_V_MAP)
            return s_bad_type(d, fname, "map", v);
        if (v->n > f->max)
            return s_too_long(d, fname, "entries", v->n, f->max);
        msg_counter_t *c = calloc(v->n ? v->n : 1, sizeof *c);
        if (!c)
            return msg_err_set(d->err, -ENOMEM, MSG_E_NOMEM, fname, "out of memory");
        for (uint32_t i = 0; i < v->n; i++) {
            msg_val_t k, e;
            char eb[112];
            snprintf(eb, sizeof eb, "%.90s[%u]", fname, i);
            if ((rc = msg_rd_next(&d->rd, &k, d->err)) < 0 ||
                (rc = s_get_str(d, eb, &k, 1, MSG_MAX_COUNTER_NAME_BYTES, true)) < 0 ||
                (rc = msg_rd_next(&d->rd, &e, d->err)) < 0 ||
                (rc = s_get_int(d, eb, &e, INT64_MIN, INT64_MAX, &x)) < 0) {
                free(c);
                return rc;
            }
            memcpy(c[i].name, k.p, k.n);
            c[i].name[k.n] = 0;
            c[i].value = x;
        }
        *S_AT(m, f->off, msg_counter_t *) = c;
        *S_AT(m, f->off2, int) = (int)v->n;
        return 0;
    }
    case MSG_F_STRUCT: {
        if (v->kind != MSG_V_MAP)
            return s_bad_type(d, fname, "map", v);
        char saved[64];
        memcpy(saved, d->path, sizeof saved);
        snprintf(d->path, sizeof d->path, "%.60s", fname);
        rc = s_decode_map(d, f->sub, (char *)m + f->off, v, depth + 1, MSG_NONE);
        memcpy(d->path, saved, sizeof saved);
        return rc;
    }
    case MSG_F_ARRAY: {
        if (v->kind != MSG_V_ARRAY)
            return s_bad_type(d, fname, "array", v);
        if (v->n > f->max)
            return s_too_long(d, fname, "entries", v->n, f->max);
        if (v->n < f->min)
            return msg_err_set(d->err, -ERANGE, MSG_E_RANGE, fname,
                               "field '%s': %u entries, at least %zu needed", fname, v->n, f->min);
        if (depth + 1 >= MSG_MAX_DEPTH)
            return msg_err_set(d->err, -EBADMSG, MSG_E_MALFORMED, fname,
                               "MessagePack nested deeper than %d levels", MSG_MAX_DEPTH);
        size_t es = f->sub->size;
        rc = 0;
        char *a = calloc(v->n ? v->n : 1, es);
        if (!a)
            return msg_err_set(d->err, -ENOMEM, MSG_E_NOMEM, fname, "out of memory");
        /* publish now so that a failure half way is freed by the caller's clear */
        *S_AT(m, f->off, char *) = a;
        *S_AT(m, f->off2, int) = (int)v->n;
        for (uint32_t i = 0; i < v->n; i++)
            msg_codec_init(f->sub, a + (size_t)i * es);
        char saved[64];
        memcpy(saved, d->path, sizeof saved);
        for (uint32_t i = 0; i < v->n; i++) {
            msg_val_t e;
            snprintf(d->path, sizeof d->path, "%.48s[%u]", fname, i);
            if ((rc = msg_rd_next(&d->rd, &e, d->err)) < 0)
                break;
            if (e.kind != MSG_V_MAP) {
                rc = s_bad_type(d, d->path, "map", &e);
                break;
            }
            if ((rc = s_decode_map(d, f->sub, a + (size_t)i * es, &e, depth + 2, MSG_NONE)) < 0)
                break;
        }
        memcpy(d->path, saved, sizeof saved);
        return rc < 0 ? rc : 0;
    }
    default:
        return msg_err_set(d->err, -EINVAL, MSG_E_INVALID, fname, "field '%s': bad schema", fname);
    }
}

/* find key among s's fields (and those of its INLINE subs); idx counts flat positions */
static const msg_field_t *s_find(const msg_schema_t *s, const uint8_t *key, uint32_t n,
                                 size_t *base, int *idx) {
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        if (f->kind == MSG_F_INLINE) {
            size_t b0 = *base;
            *base += f->off;
            const msg_field_t *g = s_find(f->sub, key, n, base, idx);
            if (g)
                return g;
            *base = b0;
            continue;
        }
        if (strlen(f->key) == n && !memcmp(f->key, key, n))
            return f;
        (*idx)++;
    }
    return NULL;
}

/* report the first required field not seen; idx as in s_find */
static int s_check_required(s_dec_t *d, const msg_schema_t *s, uint64_t seen, int *idx) {
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        if (f->kind == MSG_F_INLINE) {
            int rc = s_check_required(d, f->sub, seen, idx);
            if (rc < 0)
                return rc;
            continue;
        }
        if ((f->flags & MSG_FF_REQUIRED) && !(seen >> *idx & 1)) {
            char nb[96];
            const char *fname = s_fname(d, f->key, nb, sizeof nb);
            return msg_err_set(d->err, -EPROTO, MSG_E_MISSING, fname, "missing required field '%s'",
                               fname);
        }
        (*idx)++;
    }
    return 0;
}

static int s_run_checks(const msg_schema_t *s, void *m, msg_err_t *err) {
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        if (f->kind == MSG_F_INLINE || f->kind == MSG_F_STRUCT) {
            int rc = s_run_checks(f->sub, (char *)m + f->off, err);
            if (rc < 0)
                return rc;
        }
    }
    return s->check ? s->check(m, err) : 0;
}

/* decode the pairs of a map whose header mapv was read; at the top (type != MSG_NONE)
 * "type" and "v" are the envelope and are checked by the caller (msg_peek_type), here
 * only skipped. */
static int s_decode_map(s_dec_t *d, const msg_schema_t *s, void *m, const msg_val_t *mapv,
                        int depth, int type) {
    if (depth >= MSG_MAX_DEPTH)
        return msg_err_set(d->err, -EBADMSG, MSG_E_MALFORMED, NULL,
                           "MessagePack nested deeper than %d levels", MSG_MAX_DEPTH);
    uint64_t seen = 0;
    int rc;
    for (uint32_t i = 0; i < mapv->n; i++) {
        msg_val_t k, v;
        if ((rc = msg_rd_next(&d->rd, &k, d->err)) < 0)
            return rc;
        if (k.kind != MSG_V_STR)
            return msg_err_set(d->err, -EPROTO, MSG_E_BAD_TYPE, d->path,
                               "map key must be a str, got %s", msg_vkind_name(k.kind));
        if ((rc = msg_rd_next(&d->rd, &v, d->err)) < 0)
            return rc;
        size_t base = 0;
        int idx = 0;
        const msg_field_t *f = NULL;
        if (type != MSG_NONE &&
            ((k.n == 4 && !memcmp(k.p, "type", 4)) || (k.n == 1 && k.p[0] == 'v')))
            f = NULL; /* envelope: checked by msg_peek_type */
        else
            f = s_find(s, k.p, k.n, &base, &idx);
        if (!f) { /* unknown key: ignored */
            if ((rc = msg_rd_skip_body(&d->rd, &v, depth + 1, d->err)) < 0)
                return rc;
            continue;
        }
        if (idx < 64) {
            if (seen >> idx & 1) {
                char nb[96];
                const char *fname = s_fname(d, f->key, nb, sizeof nb);
                return msg_err_set(d->err, -EPROTO, MSG_E_INVALID, fname,
                                   "field '%s' appears twice", fname);
            }
            seen |= (uint64_t)1 << idx;
        }
        if ((rc = s_decode_field(d, f, (char *)m + base, &v, depth)) < 0)
            return rc;
        if ((f->flags & MSG_FF_HAS) && v.kind != MSG_V_NIL)
            *S_AT((char *)m + base, f->off2, bool) = true;
    }
    int idx = 0;
    return s_check_required(d, s, seen, &idx);
}

int msg_codec_decode(const msg_schema_t *s, int type, const void *buf, size_t len, void *m,
                     msg_err_t *err) {
    msg_err_t local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    msg_codec_init(s, m);
    int got = MSG_NONE;
    int rc = msg_peek_type(buf, len, &got, err);
    if (rc < 0)
        return rc;
    if (got != type)
        return msg_err_set(err, -EPROTO, MSG_E_WRONG_TYPE, "type",
                           "expected message type '%s', got '%s'", msg_type_name(type),
                           msg_type_name(got));
    if (msg_type_family(type) == MSG_FAMILY_CLIENT && (rc = s_strict_frame(buf, len, err)) < 0)
        goto fail;
    s_dec_t d = {.err = err};
    msg_rd_init(&d.rd, buf, len);
    msg_val_t top;
    if ((rc = msg_rd_next(&d.rd, &top, err)) < 0) /* peek made sure it is a map */
        goto fail;
    if ((rc = s_decode_map(&d, s, m, &top, 0, type)) < 0)
        goto fail;
    if ((rc = s_run_checks(s, m, err)) < 0)
        goto fail;
    return 0;
fail:
    msg_codec_clear(s, m);
    return rc;
}

/* ---- schema engine: encode */

static void s_pack_str(msgpack_packer *pk, const char *s, size_t n) {
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void s_pack_key(msgpack_packer *pk, const char *key) {
    s_pack_str(pk, key, strlen(key));
}

static int s_count_keys(const msg_schema_t *s, const void *m);

/* whether field f of m is written */
static bool s_present(const msg_field_t *f, const void *m) {
    if (f->flags & MSG_FF_HAS)
        return *S_AT(m, f->off2, bool);
    if (!(f->flags & MSG_FF_OMIT_EMPTY))
        return true;
    switch (f->kind) {
    case MSG_F_STR_HEAP:
        return *S_AT(m, f->off, char *) != NULL;
    case MSG_F_ARRAY:
    case MSG_F_STRS_FIX:
        return *S_AT(m, f->off2, int) > 0;
    case MSG_F_STR_FIX:
        return S_AT(m, f->off, char)[0] != 0;
    case MSG_F_BOOL:
        return *S_AT(m, f->off, bool);
    case MSG_F_INT:
    case MSG_F_ENUM:
        return *S_AT(m, f->off, int) != 0;
    case MSG_F_I64:
        return *S_AT(m, f->off, int64_t) != 0;
    case MSG_F_U64:
        return *S_AT(m, f->off, uint64_t) != 0;
    case MSG_F_FLOAT:
        return *S_AT(m, f->off, float) != 0;
    case MSG_F_DOUBLE:
        return *S_AT(m, f->off, double) != 0;
    default:
        return true;
    }
}

static int s_count_keys(const msg_schema_t *s, const void *m) {
    int n = 0;
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        if (f->kind == MSG_F_INLINE)
            n += s_count_keys(f->sub, (const char *)m + f->off);
        else if (s_present(f, m))
            n++;
    }
    return n;
}

static void s_pack_map(msgpack_packer *pk, const msg_schema_t *s, const void *m, int extra);

static void s_pack_fields(msgpack_packer *pk, const msg_schema_t *s, const void *m) {
    for (int i = 0; i < s->n_fields; i++) {
        const msg_field_t *f = &s->fields[i];
        if (f->kind == MSG_F_INLINE) {
            s_pack_fields(pk, f->sub, (const char *)m + f->off);
            continue;
        }
        if (!s_present(f, m))
            continue;
        s_pack_key(pk, f->key);
        switch (f->kind) {
        case MSG_F_U64:
            msgpack_pack_uint64(pk, *S_AT(m, f->off, uint64_t));
            break;
        case MSG_F_I64:
            msgpack_pack_int64(pk, *S_AT(m, f->off, int64_t));
            break;
        case MSG_F_INT:
            msgpack_pack_int64(pk, *S_AT(m, f->off, int));
            break;
        case MSG_F_I32:
            msgpack_pack_int64(pk, *S_AT(m, f->off, int32_t));
            break;
        case MSG_F_FLOAT:
            msgpack_pack_float(pk, *S_AT(m, f->off, float));
            break;
        case MSG_F_DOUBLE:
            msgpack_pack_double(pk, *S_AT(m, f->off, double));
            break;
        case MSG_F_BOOL:
            if (*S_AT(m, f->off, bool))
                msgpack_pack_true(pk);
            else
                msgpack_pack_false(pk);
            break;
        case MSG_F_STR_FIX: {
            const char *t = S_AT(m, f->off, char);
            size_t n = strnlen(t, f->max + 1);
            if (!n && (f->flags & MSG_FF_NIL_OK))
                msgpack_pack_nil(pk);
            else
                s_pack_str(pk, t, n);
            break;
        }
        case MSG_F_STR_HEAP: {
            const char *t = *S_AT(m, f->off, char *);
            s_pack_str(pk, t ? t : "", t ? *S_AT(m, f->off2, size_t) : 0);
            break;
        }
        case MSG_F_STRS_FIX: {
            int n = *S_AT(m, f->off2, int);
            if (n < 0)
                n = 0;
            if ((size_t)n > f->max_count) /* one too many: the validating decode reports it */
                n = (int)f->max_count + 1;
            msgpack_pack_array(pk, (size_t)n);
            for (int j = 0; j < n; j++) {
                size_t jj = (size_t)j < f->max_count ? (size_t)j : f->max_count - 1;
                const char *t = S_AT(m, f->off, char) + jj * (f->max + 1);
                s_pack_str(pk, t, strnlen(t, f->max + 1));
            }
            break;
        }
        case MSG_F_BIN_I32:
        case MSG_F_BIN_F32: { /* int32 or float words, little-endian */
            const uint8_t *a = *S_AT(m, f->off, const uint8_t *);
            int n = *S_AT(m, f->off2, int);
            if (!a || n < 0)
                n = 0;
            msgpack_pack_bin(pk, (size_t)n * 4);
            for (int j = 0; j < n; j++) {
                uint32_t u;
                memcpy(&u, a + 4 * j, sizeof u);
                uint8_t q[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16),
                                (uint8_t)(u >> 24)};
                msgpack_pack_bin_body(pk, q, 4);
            }
            break;
        }
        case MSG_F_ENUM: {
            int e = *S_AT(m, f->off, int);
            const char *t = e >= 0 && e < f->n_names ? f->names[e] : NULL;
            if (t)
                s_pack_str(pk, t, strlen(t));
            else
                msgpack_pack_int64(pk, e); /* the validating decode reports it */
            break;
        }
        case MSG_F_COUNTERS: {
            const msg_counter_t *c = *S_AT(m, f->off, msg_counter_t *);
            int n = *S_AT(m, f->off2, int);
            if (!c || n < 0)
                n = 0;
            msgpack_pack_map(pk, (size_t)n);
            for (int j = 0; j < n; j++) {
                s_pack_str(pk, c[j].name, strnlen(c[j].name, sizeof c[j].name));
                msgpack_pack_int64(pk, c[j].value);
            }
            break;
        }
        case MSG_F_STRUCT:
            s_pack_map(pk, f->sub, (const char *)m + f->off, 0);
            break;
        case MSG_F_ARRAY: {
            const char *a = *S_AT(m, f->off, const char *);
            int n = *S_AT(m, f->off2, int);
            if (!a || n < 0)
                n = 0;
            msgpack_pack_array(pk, (size_t)n);
            for (int j = 0; j < n; j++)
                s_pack_map(pk, f->sub, a + (size_t)j * f->sub->size, 0);
            break;
        }
        default:
            msgpack_pack_nil(pk);
            break;
        }
    }
}

static void s_pack_map(msgpack_packer *pk, const msg_schema_t *s, const void *m, int extra) {
    msgpack_pack_map(pk, (size_t)(s_count_keys(s, m) + extra));
    s_pack_fields(pk, s, m);
}

int msg_codec_encode(const msg_schema_t *s, int type, const void *m, void **buf, size_t *len,
                     msg_err_t *err) {
    msg_err_t local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    *buf = NULL;
    *len = 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    s_pack_map(&pk, s, m, 2);
    const char *tn = msg_type_name(type);
    s_pack_key(&pk, "type");
    s_pack_str(&pk, tn, strlen(tn));
    s_pack_key(&pk, "v");
    msgpack_pack_int(&pk, msg_type_version(type));
    if (!sb.data) { /* msgpack-c's sbuffer reports allocation failure only this way */
        msgpack_sbuffer_destroy(&sb);
        return msg_err_set(err, -ENOMEM, MSG_E_NOMEM, NULL, "out of memory");
    }
    /* validate by decoding what was written: one set of rules for both directions */
    void *tmp = malloc(s->size);
    if (!tmp) {
        msgpack_sbuffer_destroy(&sb);
        return msg_err_set(err, -ENOMEM, MSG_E_NOMEM, NULL, "out of memory");
    }
    int rc = msg_codec_decode(s, type, sb.data, sb.size, tmp, err);
    msg_codec_clear(s, tmp);
    free(tmp);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&sb);
        if (rc != -ENOMEM)
            rc = err->code = -EINVAL;
        return rc;
    }
    *len = sb.size;
    *buf = msgpack_sbuffer_release(&sb);
    msgpack_sbuffer_destroy(&sb);
    return 0;
}
