/* serve_models.c - see serve_models.h. */
#include "serve_models.h"

#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

int serve_models_init(serve_models_t *m, const char *id, const char *path, const char *version,
                      char *why, size_t whylen) {
    memset(m, 0, sizeof *m);
    const char *slash = path ? strrchr(path, '/') : NULL;
    const char *file = slash ? slash + 1 : path;
    snprintf(m->id, sizeof m->id, "%s", id ? id : file ? file : "strata");
    snprintf(m->fingerprint, sizeof m->fingerprint, "fp_%016llx",
             (unsigned long long)XXH3_64bits_withSeed(m->id, strlen(m->id),
                                                      XXH3_64bits(version, strlen(version))));
    snprintf(m->names[0], sizeof m->names[0], "%s", m->id);
    if (!path)
        return 0;
    snprintf(m->names[1], sizeof m->names[1], "%s", file);
    snprintf(m->names[2], sizeof m->names[2], "%s", file);
    size_t n = strlen(m->names[2]);
    if (n > 5 && !strcmp(m->names[2] + n - 5, ".gguf"))
        m->names[2][n - 5] = 0;
    model_gguf_t *g = model_gguf_open(path, why, whylen);
    model_config_t cfg;
    int rc = -EIO;
    if (g && !model_config_read(g, &cfg, why, whylen)) {
        m->dim = cfg.d_model;
        snprintf(m->names[3], sizeof m->names[3], "%s", cfg.name);
        rc = 0;
    }
    model_gguf_destroy(&g);
    return rc;
}

bool serve_models_known(const serve_models_t *m, const char *name) {
    for (int i = 0; i < 4; i++)
        if (m->names[i][0] && !strcmp(m->names[i], name))
            return true;
    return false;
}

cJSON *serve_models_object(const serve_models_t *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", 0);
    cJSON_AddStringToObject(o, "owned_by", "strata");
    return o;
}

cJSON *serve_models_list(const serve_models_t *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), serve_models_object(m));
    return o;
}
