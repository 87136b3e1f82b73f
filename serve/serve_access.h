/* serve_access.h - who may call the http gateway, and from which browser origins
 * (docs/HTTP.md, "API keys" and "CORS"): the API keys of a key file, checked against a
 * request's Authorization header in time that does not depend on where a key differs, and
 * the CORS origins allowed.  Library code: strings in, a yes or no out. */
#ifndef SERVE_ACCESS_H
#define SERVE_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

#define SERVE_ACCESS_MAX_KEYS 256 /* keys in a key file */

typedef struct serve_access_t serve_access_t;

/* The rules of keys_path (one key per line, blank lines and # comments skipped; NULL: no
 * key needed) and cors (origins, comma-separated, or "*" for any; NULL or "": CORS off).
 * NULL with why when the key file cannot be read, has no key or too many, or out of
 * memory. */
serve_access_t *serve_access_new(const char *keys_path, const char *cors, char *why, size_t whylen);
void serve_access_destroy(serve_access_t **self_p);

/* Whether a request with this Authorization header value (NULL: none) may call: true when
 * no key is needed, or it is "Bearer KEY" with one of the keys (spaces around KEY
 * ignored; every key compared, whatever matched). */
bool serve_access_authorized(const serve_access_t *a, const char *authorization);
/* Keys loaded (0: none needed). */
int serve_access_keys(const serve_access_t *a);

/* Whether CORS is on; whether origin (an Origin header, NULL: none) is allowed. */
bool serve_access_cors(const serve_access_t *a);
bool serve_access_origin(const serve_access_t *a, const char *origin);
/* The origins as configured ("" when CORS is off). */
const char *serve_access_cors_list(const serve_access_t *a);

#endif
