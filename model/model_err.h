/* model_err.h - the one way model/ reports an error: a one-line reason written into the
 * caller's (err, errlen) buffer, and the negative errno returned, so a failing path reads
 * `return model_err_set(err, errlen, -EINVAL, "%s: missing tensor '%s'", path, name);`.
 */
#ifndef MODEL_ERR_H
#define MODEL_ERR_H

#include <stddef.h>

/* Format the reason into err (truncated to errlen - 1 characters; err NULL or errlen 0:
 * nothing is written) and return rc unchanged (a negative errno). */
int model_err_set(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
