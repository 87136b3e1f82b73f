/* serve_models.h - the model the http gateway serves, as OpenAI's API names it (docs/HTTP.md,
 * "Model names"): its id, the names a request may give as `model`, the system_fingerprint,
 * the embedding size, and the objects of /v1/models.  Library code: reads the GGUF's header
 * once. */
#ifndef SERVE_MODELS_H
#define SERVE_MODELS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char id[256];         /* the model id answers carry */
    char names[4][256];   /* what a request may call it: the id, the GGUF's file name, its
                             stem, its general.name ("" where unknown) */
    char fingerprint[32]; /* fp_ + a hash of strata's version and the id */
    int dim;              /* the embedding size (d_model); 0: unknown (no embeddings) */
} serve_models_t;

/* The model of path (the GGUF; NULL: unknown), called id (NULL: its file name, or "strata"
 * without a path), served by strata version.  0; -EIO when the GGUF's header cannot be read
 * (why says so: the names are then the id and the file's, and dim is 0). */
int serve_models_init(serve_models_t *m, const char *id, const char *path, const char *version,
                      char *why, size_t whylen);
/* Whether name is one of the model's names. */
bool serve_models_known(const serve_models_t *m, const char *name);
/* {"id", "object": "model", "created": 0, "owned_by": "strata"}. */
cJSON *serve_models_object(const serve_models_t *m);
/* {"object": "list", "data": [the model object]}. */
cJSON *serve_models_list(const serve_models_t *m);

#endif
