/* serve_routes.c - the table of the gateway's routes and its two look-ups.  The paths
 * without /v1 are OpenAI's base-URL-without-/v1 spelling, accepted as aliases. */
#include "serve_routes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const serve_route_t s_routes[] = {
    /* path                  method  auth   handler */
    {"/v1/chat/completions", "POST", true, SERVE_HANDLER_CHAT},
    {"/v1/completions", "POST", true, SERVE_HANDLER_COMPLETIONS},
    {"/v1/models", "GET", true, SERVE_HANDLER_MODELS},
    {"/health", "GET", false, SERVE_HANDLER_HEALTH}, /* probes carry no key */
    {"/chat/completions", "POST", true, SERVE_HANDLER_CHAT},
    {"/completions", "POST", true, SERVE_HANDLER_COMPLETIONS},
    {"/models", "GET", true, SERVE_HANDLER_MODELS},
};
#define S_N_ROUTES (int)(sizeof s_routes / sizeof s_routes[0])

const serve_route_t *serve_routes(int *n) {
    *n = S_N_ROUTES;
    return s_routes;
}

int serve_routes_find(const char *path, const char *method, const serve_route_t **row) {
    const serve_route_t *first = NULL;
    for (int i = 0; i < S_N_ROUTES; i++) {
        if (strcmp(s_routes[i].path, path))
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
        if (!strcmp(s_routes[i].path, path)) {
            int n = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", s_routes[i].method);
            at += n > 0 ? (size_t)n : 0;
        }
}
