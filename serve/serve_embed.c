/* serve_embed.c - /v1/embeddings bodies in and answers out (serve_embed.h).  The rule
 * of docs/HTTP.md holds here too: a field that could change the answer is implemented
 * or refused, never ignored; `user` alone is accepted and dropped. */
#include "serve_embed.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_bad(serve_openai_bad_t *b, int rc, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int s_bad(serve_openai_bad_t *b, int rc, const char *param, const char *fmt, ...) {
    snprintf(b->param, sizeof b->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    return rc;
}

void serve_embed_clear(serve_embed_request_t *q) {
    for (int i = 0; q->inputs && i < q->n_inputs; i++) {
        free(q->inputs[i].text);
        free(q->inputs[i].ids);
    }
    free(q->inputs);
    free(q->model);
    memset(q, 0, sizeof *q);
}

/* An array of token ids (non-empty, each an integer 0..2^31-1) into in. */
static int s_ids(const cJSON *a, serve_embed_input_t *in, const char *param,
                 serve_openai_bad_t *b) {
    int n = cJSON_GetArraySize(a);
    if (n == 0)
        return s_bad(b, -EINVAL, param, "'%s' is an empty array of token ids", param);
    if (!(in->ids = malloc((size_t)n * sizeof *in->ids)))
        return s_bad(b, -ENOMEM, "", "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || v != floor(v) || v < 0 || v > INT32_MAX)
            return s_bad(b, -EINVAL, param,
                         "'%s' must hold token ids (integers 0..2147483647) only", param);
        in->ids[in->n_ids++] = (int32_t)v;
    }
    return 0;
}

/* `input`: a string, an array of strings, an array of token ids, or an array of arrays
 * of token ids. */
static int s_input(serve_embed_request_t *q, const cJSON *v, serve_openai_bad_t *b) {
    const char *shape = "'input' must be a string, an array of strings, an array of token ids "
                        "or an array of arrays of token ids";
    if (cJSON_IsString(v)) {
        if (!*v->valuestring)
            return s_bad(b, -EINVAL, "input", "'input' is an empty string");
        if (!(q->inputs = calloc(1, sizeof *q->inputs)) ||
            !(q->inputs[0].text = strdup(v->valuestring)))
            return s_bad(b, -ENOMEM, "", "out of memory");
        q->n_inputs = 1;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return s_bad(b, -EINVAL, "input", "%s", shape);
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return s_bad(b, -EINVAL, "input", "'input' is an empty array");
    const cJSON *first = v->child;
    if (cJSON_IsNumber(first)) { /* one input of token ids */
        if (!(q->inputs = calloc(1, sizeof *q->inputs)))
            return s_bad(b, -ENOMEM, "", "out of memory");
        q->n_inputs = 1;
        return s_ids(v, &q->inputs[0], "input", b);
    }
    if (n > SERVE_EMBED_MAX_INPUTS)
        return s_bad(b, -EINVAL, "input", "'input' has %d entries, at most %d are allowed", n,
                     SERVE_EMBED_MAX_INPUTS);
    if (!(q->inputs = calloc((size_t)n, sizeof *q->inputs)))
        return s_bad(b, -ENOMEM, "", "out of memory");
    bool text = cJSON_IsString(first);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v) {
        char param[32];
        snprintf(param, sizeof param, "input[%d]", i);
        serve_embed_input_t *in = &q->inputs[i];
        q->n_inputs = ++i;
        if (text && cJSON_IsString(e)) {
            if (!*e->valuestring)
                return s_bad(b, -EINVAL, param, "'%s' is an empty string", param);
            if (!(in->text = strdup(e->valuestring)))
                return s_bad(b, -ENOMEM, "", "out of memory");
        } else if (!text && cJSON_IsArray(e)) {
            int rc = s_ids(e, in, param, b);
            if (rc)
                return rc;
        } else {
            return s_bad(b, -EINVAL, param, "%s (not a mix)", shape);
        }
    }
    return 0;
}

int serve_embed_parse(serve_embed_request_t *q, const char *body, size_t len, int dim,
                      serve_openai_bad_t *b) {
    memset(q, 0, sizeof *q);
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return s_bad(b, -EBADMSG, "", "the body is not a JSON object");
    }
    int rc = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, o) { /* fields strata does not know might change the answer */
        const char *k = f->string;
        if (strcmp(k, "input") && strcmp(k, "model") && strcmp(k, "encoding_format") &&
            strcmp(k, "dimensions") && strcmp(k, "user")) {
            rc = s_bad(b, -EINVAL, k, "'%s' is not supported", k);
            goto out;
        }
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) {
            rc = s_bad(b, -EINVAL, "model", "'model' must be a string");
            goto out;
        }
        if (!(q->model = strdup(v->valuestring))) {
            rc = s_bad(b, -ENOMEM, "", "out of memory");
            goto out;
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "user");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v)) {
        rc = s_bad(b, -EINVAL, "user", "'user' must be a string");
        goto out;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "encoding_format");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) ||
            (strcmp(v->valuestring, "float") && strcmp(v->valuestring, "base64"))) {
            rc = s_bad(b, -EINVAL, "encoding_format",
                       "'encoding_format' must be \"float\" or \"base64\"");
            goto out;
        }
        q->base64 = !strcmp(v->valuestring, "base64");
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "dimensions");
    if (v && !cJSON_IsNull(v)) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
        if (!cJSON_IsNumber(v) || d != floor(d) || d < 1) {
            rc = s_bad(b, -EINVAL, "dimensions", "'dimensions' must be an integer of at least 1");
            goto out;
        }
        if (d != dim) {
            rc = s_bad(b, -EINVAL, "dimensions",
                       "'dimensions' %.0f is not supported: this model's embeddings have %d "
                       "dimensions (strata does not shorten them)",
                       d, dim);
            goto out;
        }
        q->dimensions = dim;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "input");
    if (!v || cJSON_IsNull(v)) {
        rc = s_bad(b, -EINVAL, "input", "'input' is required");
        goto out;
    }
    rc = s_input(q, v, b);
out:
    cJSON_Delete(o);
    if (rc)
        serve_embed_clear(q);
    return rc;
}

void serve_embed_base64(const void *data, size_t n, char *out) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *p = data;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[o] = 0;
}

cJSON *serve_embed_response(const float *vecs, int n, int dim, bool base64, const char *model,
                            int prompt_tokens) {
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    char *b64 = base64 ? malloc(4 * (((size_t)dim * 4 + 2) / 3) + 1) : NULL;
    if (!data || (base64 && !b64)) {
        cJSON_Delete(o);
        free(b64);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const float *v = vecs + (size_t)i * dim;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(data, e);
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        if (base64) { /* float32 little-endian, as OpenAI's */
            uint8_t *raw = malloc((size_t)dim * 4);
            if (!raw)
                break;
            for (int j = 0; j < dim; j++) {
                uint32_t u;
                memcpy(&u, &v[j], 4);
                raw[4 * j] = (uint8_t)u, raw[4 * j + 1] = (uint8_t)(u >> 8);
                raw[4 * j + 2] = (uint8_t)(u >> 16), raw[4 * j + 3] = (uint8_t)(u >> 24);
            }
            serve_embed_base64(raw, (size_t)dim * 4, b64);
            free(raw);
            cJSON_AddStringToObject(e, "embedding", b64);
        } else {
            cJSON *a = cJSON_AddArrayToObject(e, "embedding");
            for (int j = 0; j < dim; j++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber(v[j]));
        }
    }
    free(b64);
    cJSON_AddStringToObject(o, "model", model);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens);
    return o;
}
