/* actor_http_cache.c - the http actor's answer-cache route (docs/HTTP.md, "The answer
 * cache"): POST /v1/cache/invalidate sent to the frontend as `cache_invalidate`, and its
 * `cache_reply` turned into the answer {dropped, entries} (an `error` instead goes the way
 * of every request's: actor_http.c).  The cache's request fields and the answers'
 * strata_cache / X-Strata-Cache are serve_openai's and serve_answer's. */
#include "actor_http_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned actor_http_invalidate_submit(actor_http_t *h, actor_http_req_t *r, serve_openai_bad_t *b) {
    msg_cache_invalidate_t v;
    msg_cache_invalidate_init(&v);
    int rc = serve_openai_invalidate_parse(r->body.p ? r->body.p : "", r->body.len, &v, b);
    if (rc)
        return 400;
    snprintf(r->id, sizeof r->id, "cacheinv-%s%llx", h->boot, (unsigned long long)++h->seq);
    memcpy(v.id, r->id, sizeof v.id);
    void *buf = NULL;
    size_t len = 0;
    msg_err_t err;
    if (msg_encode(MSG_CACHE_INVALIDATE, &v, &buf, &len, &err)) {
        snprintf(b->param, sizeof b->param, "%s", err.field);
        snprintf(b->msg, sizeof b->msg, "%s", err.msg);
        return 400;
    }
    int sent = zmq_send(zsock_resolve(h->up), buf, len, ZMQ_DONTWAIT);
    free(buf);
    if (sent < 0) {
        snprintf(b->msg, sizeof b->msg,
                 "the server is overloaded (its queue to the frontend is full)");
        return 429;
    }
    r->in_flight = true;
    zhashx_insert(h->by_id, r->id, r);
    actor_counters_add(h->counters, "cache.invalidate", 1);
    return 0;
}

bool actor_http_on_cache_reply(actor_http_t *h, const msg_cache_reply_t *m) {
    actor_http_req_t *r = zhashx_lookup(h->by_id, m->id);
    if (!r || r->route != SERVE_HANDLER_CACHE_INVALIDATE) {
        actor_counters_add(h->counters, "events.orphan", 1);
        return true;
    }
    zhashx_delete(h->by_id, m->id);
    r->cache_dropped = m->count;
    r->cache_entries = m->entries;
    r->in_flight = false;
    r->finished = true;
    actor_http_wake(r);
    return true;
}

cJSON *actor_http_invalidate_answer(const actor_http_req_t *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "dropped", r->cache_dropped);
    cJSON_AddNumberToObject(o, "entries", r->cache_entries);
    return o;
}
