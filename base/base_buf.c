/* base_buf.c - see base_buf.h. */
#include "base_buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL. */
static int s_reserve(base_buf_t *b, size_t n) {
    if (n > (size_t)-1 / 2 - b->len)
        return -ENOMEM;
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    size_t c = b->cap ? b->cap : 256;
    while (c < need)
        c *= 2;
    char *p = realloc(b->p, c);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = c;
    return 0;
}

int base_buf_add(base_buf_t *b, const void *s, size_t n) {
    if (s_reserve(b, n))
        return -ENOMEM;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int base_buf_adds(base_buf_t *b, const char *s) {
    return base_buf_add(b, s, strlen(s));
}

int base_buf_vprintf(base_buf_t *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return -EINVAL;
    if (s_reserve(b, (size_t)n))
        return -ENOMEM;
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int base_buf_printf(base_buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = base_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void base_buf_consume(base_buf_t *b, size_t n) {
    if (n >= b->len) {
        base_buf_reset(b);
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

void base_buf_reset(base_buf_t *b) {
    b->len = 0;
    if (b->p)
        b->p[0] = 0;
}

char *base_buf_take(base_buf_t *b) {
    char *p = b->p;
    *b = (base_buf_t){0};
    return p;
}

void base_buf_free(base_buf_t *b) {
    free(b->p);
    *b = (base_buf_t){0};
}

int base_buf_add_file(base_buf_t *b, const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    size_t len0 = b->len;
    char chunk[4096];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = b->len - len0 + n > max ? -EFBIG : base_buf_add(b, chunk, n);
    if (!rc && ferror(f))
        rc = -EIO;
    fclose(f);
    if (rc) { /* as it was */
        b->len = len0;
        if (b->p)
            b->p[len0] = 0;
    }
    return rc;
}
