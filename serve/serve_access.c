/* serve_access.c - see serve_access.h. */
#include "serve_access.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct serve_access_t {
    char *keys[SERVE_ACCESS_MAX_KEYS]; /* (n_keys) owned */
    int n_keys;
    char *cors; /* allowed origins, comma-separated, or "*"; "": CORS off */
};

void serve_access_destroy(serve_access_t **self_p) {
    serve_access_t *a = self_p ? *self_p : NULL;
    if (!a)
        return;
    for (int i = 0; i < a->n_keys; i++)
        free(a->keys[i]);
    free(a->cors);
    free(a);
    *self_p = NULL;
}

/* Read the keys of path.  0, or -errno with why. */
static int s_load(serve_access_t *a, const char *path, char *why, size_t whylen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, whylen, "cannot read the API key file '%s': %s", path, strerror(errno));
        return -ENOENT;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *s = line, *e;
        while (*s == ' ' || *s == '\t')
            s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            *--e = 0;
        if (!*s || *s == '#')
            continue;
        if (a->n_keys == SERVE_ACCESS_MAX_KEYS || !(a->keys[a->n_keys] = strdup(s))) {
            fclose(f);
            snprintf(why, whylen, "%s: more than %d keys", path, SERVE_ACCESS_MAX_KEYS);
            return -ENOSPC;
        }
        a->n_keys++;
    }
    fclose(f);
    if (!a->n_keys) {
        snprintf(why, whylen, "the API key file '%s' has no key", path);
        return -EINVAL;
    }
    return 0;
}

serve_access_t *serve_access_new(const char *keys_path, const char *cors, char *why,
                                 size_t whylen) {
    serve_access_t *a = calloc(1, sizeof *a);
    if (!a || !(a->cors = strdup(cors ? cors : ""))) {
        snprintf(why, whylen, "out of memory");
        serve_access_destroy(&a);
        return NULL;
    }
    if (keys_path && s_load(a, keys_path, why, whylen))
        serve_access_destroy(&a);
    return a;
}

/* Equal in time that depends on the key's length only, never on where a byte differs. */
static bool s_key_eq(const char *given, size_t glen, const char *key) {
    size_t klen = strlen(key);
    unsigned char diff = glen != klen;
    for (size_t i = 0; i < klen; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < glen ? given[i] : 0);
    return diff == 0;
}

bool serve_access_authorized(const serve_access_t *a, const char *authorization) {
    if (!a->n_keys)
        return true;
    const char *k = authorization;
    if (!k || strncasecmp(k, "Bearer ", 7))
        return false;
    k += 7;
    while (*k == ' ')
        k++;
    size_t n = strlen(k);
    while (n && (k[n - 1] == ' ' || k[n - 1] == '\t'))
        n--;
    bool ok = false;
    for (int i = 0; i < a->n_keys; i++) /* every key, whatever matched */
        ok |= s_key_eq(k, n, a->keys[i]);
    return ok;
}

int serve_access_keys(const serve_access_t *a) {
    return a->n_keys;
}

bool serve_access_cors(const serve_access_t *a) {
    return a->cors[0] != 0;
}

const char *serve_access_cors_list(const serve_access_t *a) {
    return a->cors;
}

bool serve_access_origin(const serve_access_t *a, const char *origin) {
    if (!a->cors[0] || !origin || !*origin)
        return false;
    if (!strcmp(a->cors, "*"))
        return true;
    size_t n = strlen(origin);
    for (const char *p = a->cors; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, origin, n))
            return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}
