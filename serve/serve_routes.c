/* serve_routes.c - the table of the gateway's routes and its two look-ups.  The paths
 * without /v1 are OpenAI's base-URL-without-/v1 spelling, accepted as aliases. */
#include "serve_routes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const serve_route_t s_routes[] = {
    /* path                  prefix  method  auth   handler */
    {"/v1/chat/completions", false, "POST", true, SERVE_HANDLER_CHAT},
    {"/v1/completions", false, "POST", true, SERVE_HANDLER_COMPLETIONS},
    {"/v1/embeddings", false, "POST", true, SERVE_HANDLER_EMBEDDINGS},
    {"/v1/models", false, "GET", true, SERVE_HANDLER_MODELS},
    {"/v1/models/", true, "GET", true, SERVE_HANDLER_MODEL},
    {"/v1/responses", false, "POST", true, SERVE_HANDLER_RESPONSES},
    {"/v1/responses/", true, "GET", true, SERVE_HANDLER_RESPONSE},
    {"/v1/responses/", true, "DELETE", true, SERVE_HANDLER_RESPONSE},
    {"/v1/cache/invalidate", false, "POST", true, SERVE_HANDLER_CACHE_INVALIDATE},
    {"/health", false, "GET", false, SERVE_HANDLER_HEALTH}, /* probes carry no key */
    {"/readyz", false, "GET", false, SERVE_HANDLER_HEALTH},
    {"/livez", false, "GET", false, SERVE_HANDLER_LIVEZ},
    {"/startupz", false, "GET", false, SERVE_HANDLER_STARTUPZ},
    {"/progressz", false, "GET", false, SERVE_HANDLER_PROGRESSZ},
    {"/chat/completions", false, "POST", true, SERVE_HANDLER_CHAT},
    {"/completions", false, "POST", true, SERVE_HANDLER_COMPLETIONS},
    {"/embeddings", false, "POST", true, SERVE_HANDLER_EMBEDDINGS},
    {"/models", false, "GET", true, SERVE_HANDLER_MODELS},
    {"/models/", true, "GET", true, SERVE_HANDLER_MODEL},
    {"/responses", false, "POST", true, SERVE_HANDLER_RESPONSES},
    {"/responses/", true, "GET", true, SERVE_HANDLER_RESPONSE},
    {"/responses/", true, "DELETE", true, SERVE_HANDLER_RESPONSE},
    {"/cache/invalidate", false, "POST", true, SERVE_HANDLER_CACHE_INVALIDATE},
};
#define S_N_ROUTES (int)(sizeof s_routes / sizeof s_routes[0])

const serve_route_t *serve_routes(int *n) {
    *n = S_N_ROUTES;
    return s_routes;
}

/* Whether path is row's: equal, or (prefix) starting with it and going on. */
static bool s_match(const serve_route_t *row, const char *path) {
    if (!row->prefix)
        return !strcmp(row->path, path);
    size_t n = strlen(row->path);
    return !strncmp(row->path, path, n) && path[n];
}

const char *serve_routes_arg(const serve_route_t *row, const char *path) {
    return row->prefix && s_match(row, path) ? path + strlen(row->path) : "";
}

int serve_routes_find(const char *path, const char *method, const serve_route_t **row) {
    const serve_route_t *first = NULL;
    for (int i = 0; i < S_N_ROUTES; i++) {
        if (!s_match(&s_routes[i], path))
            continue;
        if (!strcmp(s_routes[i].method, method)) {
            *row = &s_routes[i];
            return 0;
        }
        if (!first)
            first = &s_routes[i];
    }
    if (!first)
        return -ENOENT;
    *row = first;
    return -EOPNOTSUPP;
}

void serve_routes_allow(const char *path, char *buf, size_t len) {
    size_t at = 0;
    if (len)
        buf[0] = 0;
    for (int i = 0; i < S_N_ROUTES && at < len; i++)
        if (s_match(&s_routes[i], path)) {
            int n = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", s_routes[i].method);
            at += n > 0 ? (size_t)n : 0;
        }
}
