/* serve_json.h - what the HTTP gateway refuses in a JSON body before it reads it, so that
 * HTTP and the native protocol (docs/PROTOCOL.md: a key given twice, a NUL in a string are
 * refused) accept the same requests: a key given twice in one object (cJSON would keep
 * both, and which one counts would be an accident), and a \u0000 escape (a NUL: the text
 * after it would be cut in C strings).  Library code. */
#ifndef SERVE_JSON_H
#define SERVE_JSON_H

#include <stddef.h>

/* 0 when body (len bytes) has neither, else -EINVAL with why: "duplicate key 'k' in
 * messages[1]" or "a \u0000 (NUL) in a string".  A body that is not JSON at all is 0 here
 * (the parser that follows says so). */
int serve_json_check(const char *body, size_t len, char *why, size_t whylen);

#endif
