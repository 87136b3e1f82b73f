/* actor_http.h - the http gateway: an OpenAI-compatible HTTP API (libmicrohttpd,
 * cJSON) in front of the frontend.  It is a client of the frontend like any
 * other: one DEALER on the frontend's client endpoint, the client protocol
 * (docs/PROTOCOL.md), requests of all HTTP connections multiplexed by id.
 * docs/HTTP.md is the user's documentation.
 *
 * HTTP (listen=HOST:PORT; the table is serve/serve_routes.c):
 *   POST /v1/chat/completions  -> generate {messages} (n > 1: n generates); JSON or SSE
 *   POST /v1/completions       -> generate {prompt};   JSON or SSE (stream)
 *   POST /v1/responses         -> generate {messages} (serve_responses); JSON or SSE events
 *   GET|DELETE /v1/responses/{id} -> a kept response
 *   POST /v1/embeddings        -> one embed per input
 *   GET  /v1/models[/{id}]     -> the one model (its file name as id)
 *   GET  /health               -> 200 when the frontend says every actor is ready, else 503
 *   an HTTP connection that ends before its generation did -> cancel {id}
 *
 * Command / reply table (inbound PULL socket):
 *   ping / stats_query -> pong / stats_answer to the frontend
 *   stop               -> ends the actor
 * Upstream (DEALER to the frontend's client endpoint):
 *   token / done / error -> the HTTP response of their request (serve_answer)
 *   embedding            -> the vector of one input
 *   health_reply         -> the state /health reports (asked every 500 ms)
 *
 * Options: actor_http_opts in actor_http.c (`strata actor --help`).
 */
#ifndef ACTOR_HTTP_H
#define ACTOR_HTTP_H

#include "actor_runtime.h"

/* The options of http, loaded by the runtime through actor_http_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *listen;       /* HOST:PORT of the OpenAI-compatible HTTP API (docs/HTTP.md) */
    const char *upstream;     /* the frontend's client endpoint it connects to */
    const char *client_key;   /* CURVE key pair */
    const char *api_key_file; /* API keys, one per line: requests need 'Authorization */
    const char *tls_cert;     /* HTTPS: the certificate chain (PEM) */
    const char *tls_key;      /* HTTPS: its private key (PEM) */
    const char *model_name;   /* model id in /v1/models and responses */
    const char *cors_origin;  /* origins allowed by CORS, comma-separated, or "*"; NULL: off */
    int max_body;             /* largest request body in bytes (413 above) */
    int max_connections;      /* HTTP connections open at once (more are refused) */
    int timeout_s;            /* an HTTP connection that sends nothing this long */
    int max_per_ip;           /* connections open at once from one address */
    int header_timeout_s;     /* a request's headers must be in this long after it may start */
    int body_timeout_s;       /* a request's body must be in this long after its headers */
    int max_tokens;           /* ceiling of a request that gives no max_tokens (0: 8192) */
    int top_k;                /* top_k of a request that gives none (0: off, as OpenAI) */
    double min_p;             /* min_p of a request that gives none (0: off, as OpenAI) */
} actor_http_cfg_t;

int actor_http_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_http_opts[];

#endif
