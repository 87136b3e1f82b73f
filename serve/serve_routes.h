/* serve_routes.h - the HTTP routes of the http gateway (docs/HTTP.md, "Endpoints") as one
 * table: path, method, whether an API key is needed, and the handler that answers.  The
 * gateway looks a request up here and calls the handler the row names; a path no row has
 * is 404, a method the path's rows lack is 405 with the methods they have (Allow).
 * Library code: strings in, a row out. */
#ifndef SERVE_ROUTES_H
#define SERVE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

/* The handlers a row can name (the gateway has one function per value). */
typedef enum {
    SERVE_HANDLER_CHAT,        /* an OpenAI chat completion (serve_openai: SERVE_OPENAI_CHAT) */
    SERVE_HANDLER_COMPLETIONS, /* a legacy completion (SERVE_OPENAI_COMPLETIONS) */
    SERVE_HANDLER_MODELS,      /* the list of the one model served */
    SERVE_HANDLER_MODEL,       /* one model by its id: GET /v1/models/{id} */
    SERVE_HANDLER_EMBEDDINGS,  /* OpenAI embeddings (serve_embed) */
    SERVE_HANDLER_HEALTH,      /* readiness (/readyz, /health): serve_probes */
    SERVE_HANDLER_LIVEZ,       /* liveness of the gateway's process */
    SERVE_HANDLER_STARTUPZ,    /* startup: every actor answered once */
    SERVE_HANDLER_PROGRESSZ,   /* forward progress */
    SERVE_HANDLER_RESPONSES,   /* an OpenAI response: POST /v1/responses (serve_responses) */
    SERVE_HANDLER_RESPONSE,    /* a kept response: GET or DELETE /v1/responses/{id} */
    SERVE_HANDLER_CACHE_INVALIDATE, /* drop answer-cache entries: POST /v1/cache/invalidate */
    SERVE_HANDLER_N
} serve_handler_t;

/* One route. */
typedef struct {
    const char *path;        /* exact, no query string; with prefix: what the path starts with
                                (the rest, non-empty, is the route's argument) */
    bool prefix;             /* path is a prefix */
    const char *method;      /* "GET", "POST", "DELETE" */
    bool auth;               /* an API key is needed (when the gateway has keys) */
    serve_handler_t handler; /* what answers */
} serve_route_t;

/* The table, n rows (*n set). */
const serve_route_t *serve_routes(int *n);

/* The row of path and method (an exact row before a prefix row): 0 with *row set; -ENOENT when no
 * row has path (404); -EOPNOTSUPP when rows have path but not method (405; *row: the path's first
 * row, so that the caller knows which handler the path belongs to). */
int serve_routes_find(const char *path, const char *method, const serve_route_t **row);

/* The methods of path's rows, ", "-separated (the Allow header of a 405), into buf (len
 * bytes, NUL-terminated, truncated to fit).  "" when no row has path. */
void serve_routes_allow(const char *path, char *buf, size_t len);

/* The argument of path under row (what follows a prefix row's path; "" for an exact
 * row). */
const char *serve_routes_arg(const serve_route_t *row, const char *path);

#endif
