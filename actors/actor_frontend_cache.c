/* actor_frontend_cache.c - the answer cache's side of the frontend actor
 * (actor_frontend_int.h, docs/SEMCACHE.md): a cacheable request asks the semcache before
 * it is tokenized and routed; a hit is the request's answer (no inference), a miss goes
 * on as any request and its answer is kept when it finishes; a sampled share of hits is
 * generated anyway, and its answer checked against the cached one.  The semcache may be
 * dead or slow: a request waits for its answer at most cache_wait_ms, then is generated
 * (nothing is lost, only the hit).  Clients' knowledge-base records and invalidations
 * pass through to it and its answer comes back. */
#include "actor_frontend_int.h"

#include "base_log.h"
#include "serve_semcache_req.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG ACTOR_FRONTEND_TAG

/* A new step at the end of r's trace, or NULL (not traced, full, no memory); it spans
 * from where the chain ended to now (*from, *end), which becomes its end. */
static msg_trace_step_t *s_step(serve_request_t *r, int64_t *from, int64_t *end) {
    if (!r->gen.trace || r->n_steps >= MSG_MAX_TRACE_STEPS / 2)
        return NULL;
    msg_trace_step_t *x = realloc(r->steps, (size_t)(r->n_steps + 1) * sizeof *x);
    if (!x)
        return NULL;
    r->steps = x;
    *end = (int64_t)(base_now_us() - r->t_arrival_us);
    *from = r->trace_end_us < *end ? r->trace_end_us : *end;
    r->trace_end_us = *end;
    return &r->steps[r->n_steps++];
}

/* A step of r's trace: the lookup and what came of it. */
static void s_trace_step(serve_request_t *r, const msg_cache_answer_t *m) {
    int64_t from, end;
    msg_trace_step_t *st = s_step(r, &from, &end);
    if (!st)
        return;
    char th[48];
    if (m->threshold > 1)
        snprintf(th, sizeof th, "no threshold passes yet");
    else
        snprintf(th, sizeof th, "threshold %.3f", m->threshold);
    switch (m->kind) {
    case MSG_CACHE_EXACT:
        msg_trace_step_fill(st, "semcache", "cache_hit", from, end,
                            "exact hit: the same request in the same context, entry '%s'", m->name);
        break;
    case MSG_CACHE_KB:
        msg_trace_step_fill(st, "semcache", "cache_hit", from, end,
                            "knowledge-base hit: record '%s', similarity %.3f", m->name,
                            m->similarity);
        break;
    case MSG_CACHE_SEMANTIC:
        msg_trace_step_fill(st, "semcache", m->verify ? "cache_verify" : "cache_hit", from, end,
                            "semantic hit: entry '%s', similarity %.3f >= %s%s", m->name,
                            m->similarity, th,
                            m->verify ? "; sampled for verification: generated anyway" : "");
        break;
    default:
        if (m->similarity > -2)
            msg_trace_step_fill(st, "semcache", "cache_miss", from, end,
                                "miss: nearest entry similarity %.3f, %s%s", m->similarity, th,
                                m->store ? "; the answer will be kept" : "");
        else
            msg_trace_step_fill(st, "semcache", "cache_miss", from, end, "miss: %s",
                                m->store ? "nothing near; the answer will be kept"
                                         : "the server's cache mode is off");
    }
}

void actor_frontend_cache_timeout(actor_frontend_t *f, serve_request_t *r) {
    r->cache_state = SERVE_CACHE_NONE;
    actor_counters_add(f->counters, "cache.timeouts", 1);
    int64_t from, end;
    msg_trace_step_t *st = s_step(r, &from, &end);
    if (st)
        msg_trace_step_fill(st, "frontend", "cache_timeout", from, end,
                            "the semcache did not answer within cache_wait_ms (%.0f ms): "
                            "generated, nothing kept",
                            (double)f->cache_wait_us / 1000);
}

bool actor_frontend_cache_lookup(actor_frontend_t *f, serve_request_t *r) {
    if (!f->to_cache || r->embed || r->gen.cache == MSG_CACHE_OFF || r->n_tokens || r->skip)
        return false; /* a client's resume goes on from what it has */
    serve_semcache_req_t k;
    const char *why = serve_semcache_req_key(&r->gen, &k);
    if (why) {
        char name[64];
        snprintf(name, sizeof name, "cache.skipped.%s", why);
        for (char *p = name; *p; p++)
            if (*p == ' ')
                *p = '_';
        actor_counters_add(f->counters, name, 1);
        return false;
    }
    msg_cache_lookup_t q;
    msg_cache_lookup_init(&q);
    q.rid = r->rid;
    q.context = k.context;
    q.exact = k.exact;
    q.kb_exact = k.kb_exact;
    q.text = (char *)k.text; /* borrowed for the send */
    q.text_len = k.text_len;
    q.delta = r->gen.cache_delta;
    q.mode = r->gen.cache;
    if (actor_send(f->to_cache, MSG_CACHE_LOOKUP, &q)) {
        actor_counters_add(f->counters, "cache.unsent", 1);
        return false;
    }
    actor_counters_add(f->counters, "cache.lookups", 1);
    r->cache_state = SERVE_CACHE_LOOKUP;
    r->retry_at_us = base_now_us() + f->cache_wait_us; /* then the watch submits it */
    return true;
}

/* End r with the cached answer of m. */
static void s_hit(actor_frontend_t *f, serve_request_t *r, const msg_cache_answer_t *m) {
    if (m->answer_len && serve_requests_keep_text(r, m->answer, m->answer_len))
        actor_counters_add(f->counters, "cache.oom", 1);
    if (f->audit)
        audit_digest_update(&r->out, m->answer, m->answer_len);
    if (r->gen.trace) {
        msg_text_event_t te;
        msg_text_event_init(&te);
        te.rid = r->rid;
        actor_frontend_trace(f, r, &te);
    }
    msg_done_t d;
    msg_done_init(&d);
    msg_set_str(d.id, sizeof d.id, r->id);
    d.finish_reason = m->finish ? m->finish : MSG_FINISH_EOS; /* as the answer ended */
    d.text = r->text ? r->text : "";
    d.text_len = r->text_len;
    d.cache = m->kind;
    msg_set_str(d.cache_entry, sizeof d.cache_entry, m->name);
    d.cache_similarity = m->similarity;
    static const char *const names[] = {"", "cache.hits.exact", "cache.hits.semantic",
                                        "cache.hits.kb"};
    actor_counters_add(f->counters, names[m->kind], 1);
    actor_counters_add(f->counters, "finished.cache", 1);
    actor_frontend_end(f, r, MSG_DONE, &d);
}

void actor_frontend_on_cache_answer(void *self, const msg_cache_answer_t *m) {
    actor_frontend_t *f = self;
    serve_request_t *r = serve_requests_find_rid(f->reqs, m->rid);
    if (!r || r->cache_state != SERVE_CACHE_LOOKUP || r->final_due_us) {
        actor_counters_add(f->counters, "cache.late", 1); /* it went on without the answer */
        return;
    }
    r->retry_at_us = 0;
    s_trace_step(r, m);
    if (r->cancel_sent) { /* cancelled while it waited */
        r->cache_state = SERVE_CACHE_NONE;
        actor_frontend_resubmit(f, r, "cancelled", 0); /* ends it as cancelled */
        return;
    }
    if (m->kind != MSG_CACHE_MISS && !m->verify) {
        s_hit(f, r, m);
        return;
    }
    r->cache_state = m->store ? SERVE_CACHE_STORE : SERVE_CACHE_NONE;
    r->cache_verify_hash = m->nearest_hash;
    r->cache_verify_sim = m->similarity;
    actor_counters_add(f->counters, m->verify ? "cache.verifying" : "cache.misses", 1);
    actor_frontend_submit(f, r);
}

void actor_frontend_cache_store(actor_frontend_t *f, serve_request_t *r,
                                const msg_text_event_t *te) {
    if (r->cache_state != SERVE_CACHE_STORE || !f->to_cache)
        return;
    r->cache_state = SERVE_CACHE_NONE;
    serve_semcache_req_t k;
    if (te->finish == MSG_FINISH_CANCELLED || !r->text || serve_semcache_req_key(&r->gen, &k)) {
        actor_counters_add(f->counters, "cache.not_kept", 1); /* cancelled: not an answer */
        return;
    }
    msg_cache_store_t s;
    msg_cache_store_init(&s);
    s.rid = r->rid;
    s.context = k.context;
    s.exact = k.exact;
    s.text = (char *)k.text; /* borrowed for the send */
    s.text_len = k.text_len;
    s.answer = r->text;
    s.answer_len = r->text_len;
    msg_set_str(s.name, sizeof s.name, r->id);
    msg_set_str(s.tags, sizeof s.tags, r->gen.cache_tags);
    s.ttl_s = r->gen.has_cache_ttl ? r->gen.cache_ttl_s : -1;
    s.finish = te->finish;
    s.mode = r->gen.cache;
    s.verify_hash = r->cache_verify_hash;
    s.verify_sim = r->cache_verify_sim;
    if (!r->text_len)
        return; /* an empty answer is not kept */
    if (actor_send(f->to_cache, MSG_CACHE_STORE, &s))
        actor_counters_add(f->counters, "cache.unsent", 1);
    else
        actor_counters_add(f->counters, "cache.stored", 1);
}

static void s_hex(const uint8_t *p, size_t n, char *out, size_t cap) {
    static const char digits[] = "0123456789abcdef";
    size_t k = 0;
    for (size_t i = 0; i < n && k + 2 < cap; i++) {
        out[k++] = digits[p[i] >> 4];
        out[k++] = digits[p[i] & 15];
    }
    out[k] = 0;
}

static int s_unhex(const char *s, uint8_t *out, size_t cap) {
    size_t n = strlen(s);
    if (n % 2 || n / 2 > cap)
        return -EINVAL;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -EINVAL;
        out[i] = (uint8_t)v;
    }
    return (int)(n / 2);
}

void actor_frontend_on_cache_op(actor_frontend_t *f, const uint8_t *ident, size_t ident_len,
                                const msg_any_t *m) {
    const char *id = m->type == MSG_CACHE_PUT ? m->u.cache_put.id : m->u.cache_invalidate.id;
    if (!f->to_cache) {
        actor_frontend_reply_error(f, ident, ident_len, false, id, MSG_CODE_BAD_REQUEST,
                                   "this server runs no semcache actor (strata serve --semcache)");
        return;
    }
    char client[MSG_MAX_CLIENT_HEX + 1];
    s_hex(ident, ident_len, client, sizeof client);
    int rc;
    if (m->type == MSG_CACHE_PUT) {
        const msg_cache_put_t *p = &m->u.cache_put;
        msg_cache_store_t s;
        msg_cache_store_init(&s);
        snprintf(s.client, sizeof s.client, "%s", client);
        snprintf(s.id, sizeof s.id, "%s", p->id);
        s.kb = true;
        s.exact = serve_semcache_question_hash(p->question, p->question_len);
        s.text = p->question; /* borrowed for the send */
        s.text_len = p->question_len;
        s.answer = p->answer;
        s.answer_len = p->answer_len;
        snprintf(s.name, sizeof s.name, "%s", p->name[0] ? p->name : p->id);
        snprintf(s.tags, sizeof s.tags, "%s", p->tags);
        s.ttl_s = p->ttl_s;
        rc = actor_send(f->to_cache, MSG_CACHE_STORE, &s);
    } else {
        const msg_cache_invalidate_t *v = &m->u.cache_invalidate;
        msg_cache_drop_t d;
        msg_cache_drop_init(&d);
        snprintf(d.client, sizeof d.client, "%s", client);
        snprintf(d.id, sizeof d.id, "%s", v->id);
        snprintf(d.prefix, sizeof d.prefix, "%s", v->prefix);
        snprintf(d.tag, sizeof d.tag, "%s", v->tag);
        d.all = v->all;
        rc = actor_send(f->to_cache, MSG_CACHE_DROP, &d);
    }
    actor_counters_add(f->counters, m->type == MSG_CACHE_PUT ? "cache.puts" : "cache.invalidates",
                       1);
    if (rc)
        actor_frontend_reply_error(f, ident, ident_len, false, id, MSG_CODE_OVERLOADED,
                                   "the semcache's queue is full: retry");
}

void actor_frontend_on_cache_done(void *self, const msg_cache_done_t *m) {
    actor_frontend_t *f = self;
    uint8_t ident[SERVE_MAX_IDENT];
    int n = s_unhex(m->client, ident, sizeof ident);
    if (n <= 0) {
        actor_counters_add(f->counters, "cache.done_unroutable", 1);
        return;
    }
    if (m->code) {
        actor_frontend_reply_error(f, ident, (size_t)n, false, m->id, m->code, m->message);
        return;
    }
    msg_cache_reply_t r;
    msg_cache_reply_init(&r);
    snprintf(r.id, sizeof r.id, "%s", m->id);
    r.count = m->count;
    r.entries = m->entries;
    if (actor_frontend_reply(f, ident, (size_t)n, false, MSG_CACHE_REPLY, &r))
        actor_counters_add(f->counters, "errors.undelivered", 1);
}
