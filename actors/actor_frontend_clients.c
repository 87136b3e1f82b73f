/* actor_frontend_clients.c - the clients' side of the frontend actor (actor_frontend_int.h):
 * the client envelope (ROUTER frames: generate, resume, embed, cancel, stats, health), the
 * replies and errors sent back, and the socket monitor that cancels the requests of a
 * connection that closed. */
#include "actor_frontend_int.h"

#include "actor_curve.h"
#include "base_log.h"
#include "kv_compress.h"
#include "serve_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG ACTOR_FRONTEND_TAG

/* Send one encoded message to a client (after an empty delimiter frame when delim:
 * only the refusal of a REQ-framed message uses it).  0, -EHOSTUNREACH (client gone),
 * -EAGAIN (its queue is full), or an encoder error. */
int actor_frontend_reply(actor_frontend_t *f, const uint8_t *ident, size_t ident_len, bool delim,
                         int type, const void *m) {
    void *buf = NULL;
    size_t len = 0;
    msg_err_t err;
    int rc = msg_encode(type, m, &buf, &len, &err);
    if (rc) {
        LOG_W(TAG, "cannot encode %s: %s", msg_type_name(type), err.msg);
        actor_counters_add(f->counters, "send.encode_failed", 1);
        return rc;
    }
    void *h = zsock_resolve(f->clients);
    rc = zmq_send(h, ident, ident_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ? -zmq_errno() : 0;
    if (!rc && delim)
        rc = zmq_send(h, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ? -zmq_errno() : 0;
    if (!rc)
        rc = zmq_send(h, buf, len, ZMQ_DONTWAIT) < 0 ? -zmq_errno() : 0;
    free(buf);
    if (rc == -EAGAIN)
        actor_counters_add(f->counters, "send.client_full", 1);
    return rc;
}

/* Send an error event.  Whatever id and message it is given, the event is one the
 * encoder accepts: an id that is not UTF-8 becomes nil, a message is cut before its
 * first byte that is not (a message cut at the size limit can end inside a character). */
void actor_frontend_reply_error(actor_frontend_t *f, const uint8_t *ident, size_t ident_len,
                                bool delim, const char *id, int code, const char *message) {
    msg_error_t e;
    msg_error_init(&e);
    msg_set_str(e.id, sizeof e.id, id ? id : "");
    if (!msg_utf8_valid(e.id, strlen(e.id), NULL))
        e.id[0] = 0;
    e.code = code;
    msg_set_str(e.message, sizeof e.message, message);
    size_t bad;
    if (!msg_utf8_valid(e.message, strlen(e.message), &bad))
        e.message[bad] = 0;
    if (!e.message[0])
        msg_set_str(e.message, sizeof e.message, "request refused");
    if (actor_frontend_reply(f, ident, ident_len, delim, MSG_ERROR, &e))
        actor_counters_add(f->counters, "errors.undelivered", 1);
}

static void s_malformed(actor_frontend_t *f, const char *kind) {
    char name[96];
    snprintf(name, sizeof name, "malformed.%s", kind);
    actor_counters_add(f->counters, name, 1);
    actor_counters_add(f->counters, "malformed", 1);
}

/* The client behind ident is gone: stop sending to it, cancel its requests. */
void actor_frontend_client_gone(actor_frontend_t *f, const uint8_t *ident, size_t ident_len) {
    for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
        serve_request_t *r = serve_requests_at(f->reqs, i);
        if (r->rid && r->ident_len == ident_len && !memcmp(r->ident, ident, ident_len)) {
            r->gone = true;
            actor_frontend_cancel(f, r, "unreachable");
        }
    }
}

/* A generate, or a resume (resume: the client has `have` token events, with their
 * token ids when tokens is not NULL).  Takes g's prompt / messages over. */
/* Whether g asks for what r runs: the two generates encode to the same bytes. */
static bool s_same_generate(const serve_request_t *r, const msg_generate_t *g) {
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    msg_err_t err;
    bool same = r && !msg_generate_encode(&r->gen, &a, &na, &err) &&
                !msg_generate_encode(g, &b, &nb, &err) && na == nb && !memcmp(a, b, na);
    free(a);
    free(b);
    return same;
}

static void s_on_generate(actor_frontend_t *f, const uint8_t *ident, size_t ident_len, int fd,
                          const char *client_key, msg_generate_t *g, bool resume, int have,
                          const int32_t *tokens) {
    actor_counters_add(f->counters, resume ? "client_resumes" : "requests", 1);
    char gwhy[256];
    serve_openai_tools_t tools;
    int trc = serve_requests_tools(g, &tools, gwhy, sizeof gwhy);
    if (trc) {
        actor_counters_add(f->counters, "rejected.tools", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, g->id,
                                   trc == -ENOMEM ? MSG_CODE_INTERNAL : MSG_CODE_BAD_REQUEST,
                                   trc == -ENOMEM ? "out of memory" : gwhy);
        return;
    }
    if (f->draining && !(resume && serve_requests_find_client(f->reqs, ident, ident_len, g->id))) {
        actor_counters_add(f->counters, "rejected.draining", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_DRAINING,
                                   "the server is draining (shutting down): retry on another");
        return;
    }
    if (serve_requests_grammar(g, gwhy, sizeof gwhy)) { /* fail-closed: never unconstrained */
        actor_counters_add(f->counters, "rejected.grammar", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_BAD_REQUEST, gwhy);
        return;
    }
    if (g->grammar)
        actor_counters_add(f->counters, "requests.constrained", 1);
    kv_compress_t kvc;
    char kwhy[160];
    if (g->kv_compress[0] && kv_compress_parse(g->kv_compress, &kvc, kwhy, sizeof kwhy)) {
        actor_counters_add(f->counters, "rejected.kv_compress", 1);
        snprintf(gwhy, sizeof gwhy, "kv_compress: %s", kwhy);
        actor_frontend_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_BAD_REQUEST, gwhy);
        return;
    }
    int err = 0;
    serve_request_t *r =
        serve_requests_add(f->reqs, ident, ident_len, g, have, tokens, base_now_us(), &err);
    if (err == -EEXIST && resume) {
        /* the client's first send of this request was still queued when its
         * connection dropped and went out on the new one before this resume:
         * that one runs; the client drops the events it has (by index) -- when the resume
         * asks for the same request (its keys unchanged, docs/PROTOCOL.md) */
        if (!s_same_generate(serve_requests_find_client(f->reqs, ident, ident_len, g->id), g)) {
            actor_counters_add(f->counters, "rejected.resume_changed", 1);
            actor_frontend_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_BAD_REQUEST,
                                       "a resume must repeat its generate's keys unchanged: "
                                       "this one differs from the running request");
            return;
        }
        actor_counters_add(f->counters, "client_resumes.running", 1);
        return;
    }
    if (err == -EEXIST) {
        actor_counters_add(f->counters, "rejected.duplicate_id", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_BAD_REQUEST,
                                   "a request with this id is already running");
        return;
    }
    if (!r) {
        actor_counters_add(f->counters, "rejected.overloaded", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, g->id, MSG_CODE_OVERLOADED,
                                   err == -ENOMEM ? "out of memory"
                                                  : "too many requests in flight");
        return;
    }
    r->tools = tools;
    r->fd = fd;
    r->fd_gen = fd >= 0 && fd < ACTOR_FRONTEND_MAX_FD && f->fd_gen ? f->fd_gen[fd] : 0;
    if (client_key)
        snprintf(r->client_key, sizeof r->client_key, "%s", client_key);
    if (!actor_frontend_cache_lookup(f, r))
        actor_frontend_submit(f, r);
}

/* An embed: a request of the table like a generate (so that a lost worker or a cancel
 * is handled the same way), submitted as embed_requests.  Takes e's prompt and tokens
 * over. */
static void s_on_embed(actor_frontend_t *f, const uint8_t *ident, size_t ident_len, int fd,
                       const char *client_key, msg_embed_t *e) {
    actor_counters_add(f->counters, "requests.embed", 1);
    if (f->draining) {
        actor_counters_add(f->counters, "rejected.draining", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, e->id, MSG_CODE_DRAINING,
                                   "the server is draining (shutting down): retry on another");
        return;
    }
    msg_generate_t g;
    msg_generate_init(&g);
    snprintf(g.id, sizeof g.id, "%s", e->id);
    g.prompt = e->prompt; /* taken over by the table */
    g.prompt_len = e->prompt_len;
    e->prompt = NULL;
    g.max_tokens = 1;
    g.stream = false;
    int err = 0;
    serve_request_t *r =
        serve_requests_add(f->reqs, ident, ident_len, &g, 0, NULL, base_now_us(), &err);
    msg_generate_clear(&g);
    if (!r) {
        actor_counters_add(f->counters,
                           err == -EEXIST ? "rejected.duplicate_id" : "rejected.overloaded", 1);
        actor_frontend_reply_error(f, ident, ident_len, false, e->id,
                                   err == -EEXIST ? MSG_CODE_BAD_REQUEST : MSG_CODE_OVERLOADED,
                                   err == -EEXIST   ? "a request with this id is already running"
                                   : err == -ENOMEM ? "out of memory"
                                                    : "too many requests in flight");
        return;
    }
    r->embed = true;
    r->embed_ids = e->tokens; /* taken over */
    r->n_embed_ids = e->n_tokens;
    e->tokens = NULL;
    e->n_tokens = 0;
    r->fd = fd;
    r->fd_gen = fd >= 0 && fd < ACTOR_FRONTEND_MAX_FD && f->fd_gen ? f->fd_gen[fd] : 0;
    if (client_key)
        snprintf(r->client_key, sizeof r->client_key, "%s", client_key);
    actor_frontend_submit(f, r);
}

/* Read one client message (identity, optional delimiter, payload) and act on it. */
void actor_frontend_on_client(void *self, zsock_t *sock) {
    actor_frontend_t *f = self;
    /* the socket events of a connection precede its messages: read them
     * first, every time, so each request gets its own fd_gen */
    while (zsock_events(f->monitor) & ZMQ_POLLIN)
        actor_frontend_on_monitor(f, f->monitor);
    void *h = zsock_resolve(sock);
    zmq_msg_t part[4];
    int n = 0;
    bool more = true, ok = true;
    int fd = -1;
    while (more) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, h, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&x);
            break;
        }
        more = zmq_msg_more(&x);
        if (n == 1)
            fd = zmq_msg_get(&x, ZMQ_SRCFD);
        if (n < 4)
            part[n++] = x;
        else {
            zmq_msg_close(&x);
            ok = false;
        }
    }
    if (n == 0)
        return;
    const uint8_t *ident = zmq_msg_data(&part[0]);
    size_t ident_len = zmq_msg_size(&part[0]);
    /* a message is exactly one frame (docs/PROTOCOL.md).  Anything else is refused
     * with one error: its id read from the last frame when that one has a readable
     * id, else nil.  A REQ socket's empty delimiter is echoed, so that a REQ client
     * can read why it was refused; nothing it sends is ever served. */
    bool delim = n >= 3 && zmq_msg_size(&part[1]) == 0;
    if (!ok || n != 2) {
        char id[MSG_MAX_ID_BYTES + 1] = "";
        if (n >= 2)
            msg_peek_id(zmq_msg_data(&part[n - 1]), zmq_msg_size(&part[n - 1]), id, sizeof id);
        s_malformed(f, "envelope");
        actor_frontend_reply_error(f, ident, ident_len, delim, id, MSG_CODE_BAD_REQUEST,
                                   n == 3 && delim
                                       ? "an empty delimiter frame before the message: REQ "
                                         "sockets are not supported, use a DEALER"
                                       : "a message must be one single-part frame");
        goto done;
    }
    {
        const void *buf = zmq_msg_data(&part[1]);
        size_t len = zmq_msg_size(&part[1]);
        const char *user_id = f->curve_clients ? zmq_msg_gets(&part[1], "User-Id") : NULL;
        msg_any_t m;
        msg_err_t err;
        if (msg_any_decode(buf, len, &m, &err) < 0) {
            char id[MSG_MAX_ID_BYTES + 1] = "";
            msg_peek_id(buf, len, id, sizeof id); /* bounded: a frame here is <= 4 MiB */
            s_malformed(f, msg_err_kind_name(err.kind));
            actor_frontend_reply_error(f, ident, ident_len, false, id, MSG_CODE_BAD_REQUEST,
                                       err.msg);
            goto done;
        }
        switch (m.type) {
        case MSG_GENERATE:
            s_on_generate(f, ident, ident_len, fd, user_id, &m.u.generate, false, 0, NULL);
            break;
        case MSG_RESUME:
            s_on_generate(f, ident, ident_len, fd, user_id, &m.u.resume.gen, true, m.u.resume.have,
                          m.u.resume.n_tokens ? m.u.resume.tokens : NULL);
            break;
        case MSG_EMBED:
            s_on_embed(f, ident, ident_len, fd, user_id, &m.u.embed);
            break;
        case MSG_CANCEL: {
            serve_request_t *r =
                serve_requests_find_client(f->reqs, ident, ident_len, m.u.cancel.id);
            if (r)
                actor_frontend_cancel(f, r, "client");
            else
                actor_frontend_reply_error(f, ident, ident_len, false, m.u.cancel.id,
                                           MSG_CODE_NOT_FOUND, "no running request with this id");
            break;
        }
        case MSG_CACHE_PUT:
        case MSG_CACHE_INVALIDATE:
            actor_frontend_on_cache_op(f, ident, ident_len, &m);
            break;
        case MSG_STATS:
            actor_frontend_on_stats(f, ident, ident_len);
            break;
        case MSG_HEALTH:
            actor_frontend_on_health(f, ident, ident_len);
            break;
        default: {
            char id[MSG_MAX_ID_BYTES + 1] = "";
            msg_peek_id(buf, len, id, sizeof id);
            s_malformed(f, "not_a_request");
            char why[128];
            snprintf(why, sizeof why, "'%s' is not a client request", msg_type_name(m.type));
            actor_frontend_reply_error(f, ident, ident_len, false, id, MSG_CODE_BAD_REQUEST, why);
        }
        }
        msg_any_clear(&m);
    }
done:
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

void actor_frontend_on_monitor(void *self, zsock_t *sock) {
    actor_frontend_t *f = self;
    zmsg_t *msg = zmsg_recv(sock);
    if (!msg)
        return;
    zframe_t *ev = zmsg_first(msg);
    if (ev && zframe_size(ev) >= 6) {
        const uint8_t *d = zframe_data(ev);
        uint16_t event = (uint16_t)(d[0] | d[1] << 8);
        int32_t value = (int32_t)((uint32_t)d[2] | (uint32_t)d[3] << 8 | (uint32_t)d[4] << 16 |
                                  (uint32_t)d[5] << 24);
        bool tracked = value >= 0 && value < ACTOR_FRONTEND_MAX_FD && f->fd_gen;
        if (event == ZMQ_EVENT_DISCONNECTED) {
            actor_counters_add(f->counters, "clients.disconnected", 1);
            uint32_t gen = tracked ? f->fd_gen[value] : 0;
            for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
                serve_request_t *r = serve_requests_at(f->reqs, i);
                if (r->rid && r->fd == value && r->fd_gen == gen) {
                    r->gone = true;
                    actor_frontend_cancel(f, r, "disconnect");
                }
            }
        } else if (event == ZMQ_EVENT_ACCEPTED) {
            actor_counters_add(f->counters, "clients.accepted", 1);
            if (tracked) {
                /* the event may come after the connection's first messages (the monitor is
                 * another socket): a live request on this fd of the current generation is
                 * this connection's -- the previous one's were cancelled at its DISCONNECTED,
                 * which the monitor delivered before this ACCEPTED */
                uint32_t old = f->fd_gen[value]++;
                for (int i = 0; i < serve_requests_slots(f->reqs); i++) {
                    serve_request_t *r = serve_requests_at(f->reqs, i);
                    if (r->rid && !r->gone && r->fd == value && r->fd_gen == old)
                        r->fd_gen = f->fd_gen[value];
                }
            }
        }
    }
    zmsg_destroy(&msg);
}
