/* base_buf.h - the one growable byte buffer of strata: bytes appended at the end, always
 * NUL-terminated (so a buffer of text is a C string), grown by doubling.  A zeroed
 * base_buf_t is an empty buffer; base_buf_free makes it one again.  A failed append
 * leaves the buffer as it was.  Plain data owned by the caller; not thread-safe. */
#ifndef BASE_BUF_H
#define BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
    char *p;    /* (len + 1) the bytes and a NUL, or NULL while nothing was appended */
    size_t len; /* bytes held */
    size_t cap; /* bytes allocated */
} base_buf_t;

/* Append n bytes of s.  0, or -ENOMEM (then b is unchanged). */
int base_buf_add(base_buf_t *b, const void *s, size_t n);
/* Append the C string s. */
int base_buf_adds(base_buf_t *b, const char *s);
/* Append printf(fmt, ...).  0, -ENOMEM, or -EINVAL for a bad format. */
int base_buf_printf(base_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int base_buf_vprintf(base_buf_t *b, const char *fmt, va_list ap);
/* Append the whole file at path (at most max bytes).  0, -errno of open or read, -EFBIG
 * past max, or -ENOMEM; on error b is as it was. */
int base_buf_add_file(base_buf_t *b, const char *path, size_t max);
/* Drop the first n bytes (all of them when n >= len); the memory stays. */
void base_buf_consume(base_buf_t *b, size_t n);
/* Empty it; the memory stays for the next appends. */
void base_buf_reset(base_buf_t *b);
/* Hand the bytes to the caller (malloc'd, NUL-terminated; NULL while empty and never
 * grown) and zero b. */
char *base_buf_take(base_buf_t *b);
/* Free the memory and zero b; safe on a zeroed buffer and twice. */
void base_buf_free(base_buf_t *b);

#endif
