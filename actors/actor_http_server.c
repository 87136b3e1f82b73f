/* actor_http_server.c - the HTTP side of the http actor (actor_http_int.h): libmicrohttpd's
 * callbacks in "external polling" mode on the actor's thread, the handler of each route of
 * serve_routes, OpenAI-shaped errors, and the answers' bytes (JSON, or SSE from a content
 * reader that suspends the connection while nothing is buffered).  What the answers say is
 * serve_answer's; what is sent to the frontend is actor_http.c's. */
#include "actor_http_int.h"

#include "base_log.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define TAG ACTOR_HTTP_TAG

static enum MHD_Result s_error(actor_http_req_t *r, unsigned status, const char *param,
                               const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Resume r when it is suspended (an event came, or its client is gone). */
void actor_http_wake(actor_http_req_t *r) {
    if (r->parent)
        r = r->parent;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

static void s_suspend(actor_http_req_t *r) {
    if (!r->suspended) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
}

static void s_count_status(actor_http_t *h, unsigned status) {
    char name[32];
    snprintf(name, sizeof name, "status.%u", status);
    actor_counters_add(h->counters, name, 1);
}

/* CORS (docs/HTTP.md): whether origin is one of the allowed ones. */
/* The CORS headers of a response to an allowed origin. */
static void s_cors_headers(const actor_http_req_t *r, struct MHD_Response *resp) {
    if (!r->origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

/* Queue body (malloc'd, taken) as r's response with status. */
static enum MHD_Result s_queue(actor_http_req_t *r, unsigned status, char *body, const char *ctype,
                               const char *hdr, const char *hdr_value) {
    struct MHD_Response *resp =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hdr)
        MHD_add_response_header(resp, hdr, hdr_value);
    s_cors_headers(r, resp);
    enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->state = ACTOR_HTTP_RESPONDED;
    s_count_status(r->h, status);
    return rc;
}

static enum MHD_Result s_queue_json(actor_http_req_t *r, unsigned status, cJSON *obj,
                                    const char *hdr, const char *hdr_value) {
    char *body = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    return s_queue(r, status, body, "application/json", hdr, hdr_value);
}

static enum MHD_Result s_error(actor_http_req_t *r, unsigned status, const char *param,
                               const char *code, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401   ? "authentication_error"
                       : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    const char *hdr = NULL, *val = NULL;
    if (status == 429 || status == 503)
        hdr = MHD_HTTP_HEADER_RETRY_AFTER, val = "1";
    else if (status == 401)
        hdr = MHD_HTTP_HEADER_WWW_AUTHENTICATE, val = "Bearer";
    else if (status == 405)
        hdr = MHD_HTTP_HEADER_ALLOW, val = r->allow;
    return s_queue_json(r, status, serve_answer_error_obj(msg, type, param, code), hdr, val);
}

/* The HTTP answer to a frontend error code. */
static enum MHD_Result s_error_from_code(actor_http_req_t *r) {
    switch (r->code) {
    case MSG_CODE_BAD_REQUEST:
        if (r->route == SERVE_HANDLER_EMBEDDINGS && strstr(r->emsg, "fit in the context"))
            return s_error(r, 400, "input", "context_length_exceeded", "%s", r->emsg);
        return s_error(r, 400, NULL, "bad_request", "%s", r->emsg);
    case MSG_CODE_CONTEXT:
        return s_error(r, 400, r->route == SERVE_HANDLER_CHAT ? "messages" : "prompt",
                       "context_length_exceeded", "%s", r->emsg);
    case MSG_CODE_OVERLOADED:
        return s_error(r, 429, NULL, "overloaded", "%s", r->emsg);
    case MSG_CODE_DRAINING:
        return s_error(r, 503, NULL, "draining", "%s", r->emsg);
    default:
        return s_error(r, 500, NULL, "internal", "%s", r->emsg);
    }
}

/* The 404 of a model name no one serves here. */
static enum MHD_Result s_model_not_found(actor_http_req_t *r, const char *name) {
    return s_error(r, 404, "model", "model_not_found",
                   "The model '%s' does not exist: this server serves '%s'", name, r->h->model.id);
}

/* POST /v1/embeddings: read the inputs, send one embed each, wait for all. */
static enum MHD_Result s_respond_embeddings(actor_http_req_t *r) {
    actor_http_t *h = r->h;
    if (r->too_big)
        return s_error(r, 413, NULL, "body_too_large", "the body is larger than %zu bytes",
                       h->max_body);
    if (!h->model.dim)
        return s_error(r, 500, NULL, "internal", "the model's embedding size is not known");
    serve_openai_bad_t b = {{0}, {0}};
    serve_embed_request_t q;
    int rc = serve_embed_parse(&q, r->body.p ? r->body.p : "", r->body.len, h->model.dim, &b);
    base_buf_free(&r->body);
    if (rc) {
        if (rc == -EBADMSG)
            actor_counters_add(h->counters, "bad_json", 1);
        return s_error(r, rc == -ENOMEM ? 500 : 400, b.param,
                       rc == -ENOMEM ? "internal" : "invalid_request", "%s", b.msg);
    }
    if (q.model && !serve_models_known(&h->model, q.model)) {
        enum MHD_Result x = s_model_not_found(r, q.model);
        serve_embed_clear(&q);
        return x;
    }
    r->embq = malloc(sizeof *r->embq);
    r->emb = malloc((size_t)q.n_inputs * h->model.dim * sizeof *r->emb);
    r->emb_got = calloc((size_t)q.n_inputs, sizeof *r->emb_got);
    if (!r->embq || !r->emb || !r->emb_got) {
        serve_embed_clear(&q);
        return s_error(r, 500, NULL, "internal", "out of memory");
    }
    *r->embq = q; /* taken */
    snprintf(r->id, sizeof r->id, "embd-%s%llx", h->boot, (unsigned long long)++h->seq);
    for (int i = 0; i < q.n_inputs; i++) {
        rc = actor_http_embed_send(h, r, i);
        if (rc) {
            actor_http_embed_forget(h, r, true);
            return s_error(r, rc == -EINVAL ? 400 : 429, rc == -EINVAL ? "input" : NULL,
                           rc == -EINVAL ? "invalid_request" : "overloaded", "%s",
                           rc == -EINVAL ? "an input is longer than the protocol allows"
                                         : "the server is overloaded (its queue to the "
                                           "frontend is full)");
        }
        char id[MSG_MAX_ID_BYTES + 1];
        actor_http_embed_id(r, i, id, sizeof id);
        zhashx_insert(h->by_id, id, r);
    }
    r->in_flight = true;
    actor_counters_add(h->counters, "embeddings", 1);
    actor_counters_add(h->counters, "embeddings.inputs", q.n_inputs);
    r->state = ACTOR_HTTP_WAITING;
    s_suspend(r);
    return MHD_YES;
}

static enum MHD_Result s_respond_embedded(actor_http_req_t *r) {
    const serve_embed_request_t *q = r->embq;
    cJSON *o = serve_embed_response(r->emb, q->n_inputs, r->h->model.dim, q->base64, r->h->model.id,
                                    r->emb_tokens);
    if (!o)
        return s_error(r, 500, NULL, "internal", "out of memory");
    return s_queue_json(r, 200, o, NULL, NULL);
}

/* Content reader of a stream: what is buffered, else suspend until there is more. */
static ssize_t s_read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    actor_http_req_t *r = cls;
    if (r->peer_gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (r->out_off < r->out.len) {
        size_t n = r->out.len - r->out_off;
        if (n > max)
            n = max;
        memcpy(buf, r->out.p + r->out_off, n);
        r->out_off += n;
        if (r->out_off == r->out.len) {
            base_buf_reset(&r->out);
            r->out_off = 0;
        }
        return (ssize_t)n;
    }
    if (r->finished)
        return MHD_CONTENT_READER_END_OF_STREAM;
    s_suspend(r);
    return 0;
}

static enum MHD_Result s_respond_stream(actor_http_req_t *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, s_read_stream, r, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    s_cors_headers(r, resp);
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->state = ACTOR_HTTP_RESPONDED;
    s_count_status(r->h, 200);
    return rc;
}

/* The answer: one choice, or n (a child each, in index order); X-Strata-Cache when the
 * cache gave it or was asked for (serve_answer_cache_header). */
static enum MHD_Result s_respond_json(actor_http_req_t *r) {
    serve_answer_t *a[SERVE_CHOICES_MAX];
    int n = actor_http_answers(r, a);
    cJSON *o = serve_answer_json(a, n, &r->usage);
    if (!o)
        return s_error(r, 500, NULL, "internal", "out of memory");
    const char *hit = serve_answer_cache_header(a, n);
    return s_queue_json(r, 200, o, hit ? "X-Strata-Cache" : NULL, hit);
}

static enum MHD_Result s_respond_models(actor_http_req_t *r) {
    return s_queue_json(r, 200, serve_models_list(&r->h->model), NULL, NULL);
}

/* GET /v1/models/{id}: the model object when id is one of its names. */
static enum MHD_Result s_respond_model(actor_http_req_t *r) {
    const char *id = r->body.p ? r->body.p : ""; /* the route's argument, put there */
    if (!serve_models_known(&r->h->model, id))
        return s_model_not_found(r, id);
    return s_queue_json(r, 200, serve_models_object(&r->h->model), NULL, NULL);
}

/* GET /v1/responses/{id}: a kept response; DELETE: forget it. */
static enum MHD_Result s_respond_response(actor_http_req_t *r) {
    const char *id = r->body.p ? r->body.p : ""; /* the route's argument, put there */
    const cJSON *kept = serve_responses_store_response(r->h->store, id);
    if (!kept)
        return s_error(r, 404, "response_id", "not_found", "No response with id '%.80s' is kept",
                       id);
    if (!r->del)
        return s_queue_json(r, 200, cJSON_Duplicate(kept, true), NULL, NULL);
    serve_responses_store_delete(r->h->store, id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "response.deleted");
    cJSON_AddBoolToObject(o, "deleted", true);
    return s_queue_json(r, 200, o, NULL, NULL);
}

/* /readyz (/health), /livez, /startupz, /progressz: serve_probes' answer (?verbose: every
 * check). */
static enum MHD_Result s_respond_probe(actor_http_req_t *r) {
    serve_probe_t p = r->route == SERVE_HANDLER_LIVEZ       ? SERVE_PROBE_LIVE
                      : r->route == SERVE_HANDLER_STARTUPZ  ? SERVE_PROBE_STARTUP
                      : r->route == SERVE_HANDLER_PROGRESSZ ? SERVE_PROBE_PROGRESS
                                                            : SERVE_PROBE_READY;
    const char *v = NULL;
    size_t vlen = 0; /* ?verbose, with or without a value */
    bool verbose = MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, "verbose", 7, &v,
                                                 &vlen) == MHD_YES;
    cJSON *o;
    int status = serve_probes_answer(&r->h->probes, p, verbose, base_now_us(), &o);
    return s_queue_json(r, (unsigned)status, o, NULL, NULL);
}

/* A chat or legacy completion (or a cache invalidation): parse, send the generate (the
 * cache_invalidate), wait for its events. */
static enum MHD_Result s_respond_generate(actor_http_req_t *r) {
    actor_http_t *h = r->h;
    if (r->too_big)
        return s_error(r, 413, NULL, "body_too_large", "the body is larger than %zu bytes",
                       h->max_body);
    cJSON *body = r->body.p ? cJSON_ParseWithLength(r->body.p, r->body.len) : NULL;
    const cJSON *model =
        cJSON_IsObject(body) ? cJSON_GetObjectItemCaseSensitive(body, "model") : NULL;
    if (cJSON_IsString(model) && !serve_models_known(&h->model, model->valuestring)) {
        enum MHD_Result x = s_model_not_found(r, model->valuestring);
        cJSON_Delete(body);
        return x;
    }
    cJSON_Delete(body);
    serve_openai_bad_t b = {{0}, {0}};
    unsigned status = r->route == SERVE_HANDLER_CACHE_INVALIDATE
                          ? actor_http_invalidate_submit(h, r, &b)
                          : actor_http_submit(h, r, &b);
    base_buf_free(&r->body);
    if (status)
        return s_error(r, status, status == 400 ? b.param : NULL,
                       !strcmp(b.param, "previous_response_id") ? "previous_response_not_found"
                       : status == 400                          ? "invalid_request"
                       : status == 429                          ? "overloaded"
                                                                : "internal",
                       "%s", b.msg);
    r->state = ACTOR_HTTP_WAITING;
    s_suspend(r);
    return MHD_YES;
}

/* A connection opened (its deadlines start) or closed. */
static void s_on_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                            enum MHD_ConnectionNotificationCode toe) {
    actor_http_t *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_ctx = ci ? serve_conns_open(h->conns, ci->connect_fd, base_now_us()) : NULL;
    } else {
        serve_conns_close(h->conns, *socket_ctx);
        *socket_ctx = NULL;
    }
}

/* The deadline bookkeeping of conn (NULL: untracked, out of memory). */
static serve_conn_t *s_conn(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A POST body the gateway refuses before reading it (r->refusal the answer queued): a
 * Content-Type that is not JSON (415), a key given twice or a \u0000 (400, as the native
 * protocol refuses them). */
static bool s_body_refused(actor_http_req_t *r) {
    if (r->route != SERVE_HANDLER_CHAT && r->route != SERVE_HANDLER_COMPLETIONS &&
        r->route != SERVE_HANDLER_EMBEDDINGS && r->route != SERVE_HANDLER_RESPONSES)
        return false;
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && strncasecmp(ct, "application/json", 16)) {
        r->refusal = s_error(r, 415, NULL, "unsupported_media_type",
                             "Content-Type '%.64s': the body must be JSON (application/json)", ct);
        return true;
    }
    char why[256];
    if (serve_json_check(r->body.p, r->body.len, why, sizeof why)) {
        r->refusal = s_error(r, 400, NULL, "invalid_request", "%s", why);
        return true;
    }
    return false;
}

/* The function of each handler of serve_routes' table. */
static enum MHD_Result (*const s_handlers[SERVE_HANDLER_N])(actor_http_req_t *r) = {
    [SERVE_HANDLER_CHAT] = s_respond_generate,
    [SERVE_HANDLER_COMPLETIONS] = s_respond_generate,
    [SERVE_HANDLER_MODELS] = s_respond_models,
    [SERVE_HANDLER_MODEL] = s_respond_model,
    [SERVE_HANDLER_EMBEDDINGS] = s_respond_embeddings,
    [SERVE_HANDLER_HEALTH] = s_respond_probe,
    [SERVE_HANDLER_LIVEZ] = s_respond_probe,
    [SERVE_HANDLER_STARTUPZ] = s_respond_probe,
    [SERVE_HANDLER_PROGRESSZ] = s_respond_probe,
    [SERVE_HANDLER_RESPONSES] = s_respond_generate,
    [SERVE_HANDLER_RESPONSE] = s_respond_response,
    [SERVE_HANDLER_CACHE_INVALIDATE] = s_respond_generate, /* sent on, answered at its reply */
};

/* A CORS preflight (OPTIONS with CORS on): 204 with the Access-Control-Allow-* headers
 * when the origin is allowed, without them when not (the browser then refuses); 404 for
 * a path no route has. */
static enum MHD_Result s_preflight(actor_http_req_t *r, const char *url) {
    char allow[48];
    serve_routes_allow(url, allow, sizeof allow);
    if (!allow[0])
        return s_error(r, 404, NULL, "not_found", "no such path: %s", url);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    if (r->origin) {
        char methods[64];
        snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
        const char *want =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        s_cors_headers(r, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                want && *want ? want : "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    } else {
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    enum MHD_Result rc = MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    r->state = ACTOR_HTTP_RESPONDED;
    s_count_status(r->h, 204);
    return rc;
}

static enum MHD_Result s_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **ctx) {
    (void)version;
    actor_http_t *h = cls;
    actor_http_req_t *r = *ctx;
    if (!r) { /* headers are in: route, method, key, declared size */
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->h = h;
        r->conn = conn;
        actor_http_link(h, r);
        *ctx = r;
        actor_counters_add(h->counters, "requests", 1);
        serve_conns_headers(h->conns, s_conn(conn), base_now_us());
        const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
        r->origin = serve_access_origin(h->access, origin) ? origin : NULL;
        if (serve_access_cors(h->access) && !strcmp(method, "OPTIONS")) /* no key: a preflight */
            return s_preflight(r, url);
        const serve_route_t *route;
        int rc = serve_routes_find(url, method, &route);
        if (rc == -ENOENT)
            return s_error(r, 404, NULL, "not_found", "no such path: %s", url);
        r->route = route->handler;
        r->del = !strcmp(method, "DELETE");
        if (rc) {
            serve_routes_allow(url, r->allow, sizeof r->allow);
            return s_error(r, 405, NULL, "method_not_allowed", "%s %s: use %s", method, url,
                           r->allow);
        }
        if (route->auth &&
            !serve_access_authorized(
                h->access, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization")))
            return s_error(r, 401, NULL, "invalid_api_key",
                           "a valid API key is needed: 'Authorization: Bearer KEY'");
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->max_body)
            return s_error(r, 413, NULL, "body_too_large",
                           "the body has %s bytes, more than the limit of %zu", cl, h->max_body);
        if (route->prefix) /* the route's argument (a model id), for its handler */
            if (base_buf_adds(&r->body, serve_routes_arg(route, url)))
                return MHD_NO;
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->state == ACTOR_HTTP_READING && !r->too_big) {
            if (r->body.len + *upload_size > h->max_body) {
                /* past the limit with the body still coming (chunked: no Content-Length told
                 * it before): libmicrohttpd cannot answer mid-body, so the connection is
                 * closed now rather than read to its end (or never, when it has none) */
                r->too_big = true;
                *upload_size = 0;
                base_buf_free(&r->body);
                actor_counters_add(h->counters, "rejected.body_too_large", 1);
                return MHD_NO;
            } else {
                if (base_buf_add(&r->body, upload, *upload_size))
                    return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    switch (r->state) {
    case ACTOR_HTTP_READING: /* the body is in: the route's handler answers */
        serve_conns_body(h->conns, s_conn(conn));
        if (s_body_refused(r))
            return r->refusal;
        return s_handlers[r->route](r);
    case ACTOR_HTTP_WAITING: /* resumed: an event came, or the client left */
        if (r->peer_gone)
            return MHD_NO;
        if (r->failed && !r->started)
            return s_error_from_code(r);
        if (r->embq && r->finished)
            return s_respond_embedded(r);
        if (r->route == SERVE_HANDLER_CACHE_INVALIDATE && r->finished)
            return s_queue_json(r, 200, actor_http_invalidate_answer(r), NULL, NULL);
        if (r->stream && (r->started || r->finished))
            return s_respond_stream(r);
        if (!r->stream && r->finished)
            return s_respond_json(r);
        s_suspend(r); /* nothing to answer yet */
        return MHD_YES;
    case ACTOR_HTTP_RESPONDED:
        return MHD_YES;
    }
    return MHD_NO;
}

/* Unlink r and free it, with its choices. */
static void s_free(actor_http_t *h, actor_http_req_t *r) {
    for (int i = 0; r->kids && i < serve_choices_n(r->choices); i++)
        if (r->kids[i])
            s_free(h, r->kids[i]);
    free(r->kids);
    serve_choices_destroy(&r->choices);
    if (r->prev)
        r->prev->next = r->next;
    else
        h->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    base_buf_free(&r->body);
    base_buf_free(&r->out);
    serve_answer_destroy(&r->ans);
    cJSON_Delete(r->echo);
    cJSON_Delete(r->history);
    free(r->gen);
    free(r->toks);
    if (r->embq)
        serve_embed_clear(r->embq);
    free(r->embq);
    free(r->emb);
    free(r->emb_got);
    free(r);
}

/* The request ended (answered, or the connection closed): cancel it if it still runs. */
static void s_on_completed(void *cls, struct MHD_Connection *conn, void **ctx,
                           enum MHD_RequestTerminationCode why) {
    actor_http_t *h = cls;
    serve_conns_idle(h->conns, s_conn(conn), base_now_us()); /* the next request's headers */
    actor_http_req_t *r = *ctx;
    if (!r)
        return;
    if (r->in_flight && r->embq) {
        actor_http_embed_forget(h, r, true);
        actor_counters_add(h->counters, "cancelled", 1);
        r->in_flight = false;
    }
    bool running = r->in_flight;
    if (r->in_flight)
        actor_http_cancel(h, r);
    if (actor_http_cancel_kids(h, r) || running)
        LOG_I(TAG, "%s: the client left (%d): cancelled", r->id, (int)why);
    s_free(h, r);
    *ctx = NULL;
}

static void s_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n')
        line[n - 1] = 0;
    LOG_D(TAG, "libmicrohttpd: %s", line);
}

/* Every wakeup: let MHD do its work; wait at most until its next timeout. */
int actor_http_server_idle(void *self) {
    actor_http_t *h = self;
    MHD_run(h->d);
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(h->d, &to) == MHD_YES)
        return to < 100 ? (int)to : 100;
    return 100;
}

int actor_http_server_start(actor_http_t *h, const char *listen, const actor_http_limits_t *lim,
                            int *epoll_fd, char *why, size_t whylen) {
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1]) {
        snprintf(why, whylen, "listen=%s: expected HOST:PORT", listen);
        return -1;
    }
    const char *hs = listen, *he = colon;
    if (*hs == '[' && he[-1] == ']')
        hs++, he--;
    snprintf(host, sizeof host, "%.*s", (int)(he - hs), hs);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    int rc = getaddrinfo(!strcmp(host, "*") ? NULL : host, colon + 1, &hints, &ai);
    if (rc || !ai) {
        snprintf(why, whylen, "listen=%s: %s", listen, gai_strerror(rc));
        return -1;
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    const char *cert = NULL, *key = NULL; /* HTTPS: libmicrohttpd takes the PEM text */
    if (lim->tls_cert || lim->tls_key) {
        int e = 0;
        if (!lim->tls_cert || !lim->tls_key)
            snprintf(why, whylen, "HTTPS needs both tls_cert and tls_key");
        else if ((e = base_buf_add_file(&h->tls_cert, lim->tls_cert, 1 << 20)))
            snprintf(why, whylen, "tls_cert=%s: %s", lim->tls_cert, strerror(-e));
        else if ((e = base_buf_add_file(&h->tls_key, lim->tls_key, 1 << 20)))
            snprintf(why, whylen, "tls_key=%s: %s", lim->tls_key, strerror(-e));
        else if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            snprintf(why, whylen,
                     "this libmicrohttpd has no TLS: serve plain HTTP behind a "
                     "TLS proxy (docs/HTTP.md)");
        else
            cert = h->tls_cert.p, key = h->tls_key.p;
        if (!cert || !key) {
            freeaddrinfo(ai);
            return -1;
        }
        flags |= MHD_USE_TLS;
    }
    h->conns = serve_conns_new((uint64_t)lim->header_timeout_s * 1000000,
                               (uint64_t)lim->body_timeout_s * 1000000);
    h->d = !h->conns ? NULL
                     : MHD_start_daemon(flags, 0, NULL, NULL, s_on_request, h, MHD_OPTION_SOCK_ADDR,
                                        ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
                                        (unsigned)lim->max_conn, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                        (unsigned)lim->max_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
                                        (unsigned)lim->timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                                        s_on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
                                        s_on_connection, h, MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log,
                                        NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
                                        cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, cert,
                                        MHD_OPTION_HTTPS_MEM_KEY, key, MHD_OPTION_END);
    freeaddrinfo(ai);
    const union MHD_DaemonInfo *di =
        h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!h->d) {
        snprintf(why, whylen, "cannot listen on %s (in use, or not an address of this host%s)",
                 listen, cert ? "; or the TLS certificate or key is not valid PEM" : "");
        return -1;
    }
    if (!di) {
        snprintf(why, whylen, "no epoll fd from libmicrohttpd");
        return -1;
    }
    *epoll_fd = di->epoll_fd;
    return 0;
}

void actor_http_server_peek(actor_http_t *h) {
    for (actor_http_req_t *r = h->reqs; r; r = r->next) {
        if (!r->suspended)
            continue;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        char c;
        if (ci && recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            r->peer_gone = true;
            actor_http_wake(r);
        }
    }
    int fds[64], slow_headers, slow_bodies; /* past their deadline: libmicrohttpd closes them */
    int n = h->conns
                ? serve_conns_overdue(h->conns, base_now_us(), fds, 64, &slow_headers, &slow_bodies)
                : 0;
    for (int i = 0; i < n; i++)
        shutdown(fds[i], SHUT_RDWR);
    if (n) {
        actor_counters_add(h->counters, "connections.slow_headers", slow_headers);
        actor_counters_add(h->counters, "connections.slow_bodies", slow_bodies);
    }
}

void actor_http_server_stop(actor_http_t *h) {
    if (!h->d) {
        serve_conns_destroy(&h->conns);
        base_buf_free(&h->tls_cert);
        base_buf_free(&h->tls_key);
        return;
    }
    for (actor_http_req_t *r = h->reqs; r; r = r->next) { /* end the suspended requests */
        r->peer_gone = true;
        actor_http_wake(r);
    }
    MHD_run(h->d);
    MHD_stop_daemon(h->d);
    h->d = NULL;
    serve_conns_destroy(&h->conns);
    base_buf_free(&h->tls_cert);
    base_buf_free(&h->tls_key);
}
