/* serve_embed.h - OpenAI's /v1/embeddings for the http gateway (docs/HTTP.md,
 * "Embeddings"): the request body read into inputs (text, or token ids), and the
 * answer built from the vectors.  Library code: JSON in, JSON out; the gateway sends one
 * `embed` per input (docs/PROTOCOL.md) and collects the `embedding`s. */
#ifndef SERVE_EMBED_H
#define SERVE_EMBED_H

#include "serve_openai.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_EMBED_MAX_INPUTS 2048 /* inputs of one request (OpenAI's limit) */

/* One input: text, or token ids. */
typedef struct {
    char *text;   /* NUL-terminated, non-empty; or NULL */
    int32_t *ids; /* (n_ids) when text is NULL */
    int n_ids;
} serve_embed_input_t;

typedef struct {
    serve_embed_input_t *inputs; /* (n_inputs) */
    int n_inputs;
    bool base64;    /* encoding_format "base64": each vector as base64 of float32 LE */
    char *model;    /* the model named, or NULL when not given */
    int dimensions; /* asked for (already checked against the model's), 0: not given */
} serve_embed_request_t;

/* Read body (len bytes of JSON) into q (zeroed first).  dim: the model's embedding
 * size (`dimensions` must equal it).  0, or with *bad filled (param: the field):
 * -EBADMSG (not JSON, not an object), -EINVAL (a field missing, of the wrong type, out
 * of range, or unknown), -ENOMEM.  On failure q holds nothing to free. */
int serve_embed_parse(serve_embed_request_t *q, const char *body, size_t len, int dim,
                      serve_openai_bad_t *bad);
/* Frees what parse made; safe twice and on a zeroed q. */
void serve_embed_clear(serve_embed_request_t *q);

/* OpenAI's answer: {"object": "list", "data": [{"object": "embedding", "index": i,
 * "embedding": [floats] | "base64"}], "model", "usage": {"prompt_tokens",
 * "total_tokens"}}.  vecs: (n, dim) row-major.  NULL when out of memory. */
cJSON *serve_embed_response(const float *vecs, int n, int dim, bool base64, const char *model,
                            int prompt_tokens);

/* Base64 (RFC 4648, padded) of n bytes into out (room for 4 * ((n + 2) / 3) + 1). */
void serve_embed_base64(const void *data, size_t n, char *out);

#endif
