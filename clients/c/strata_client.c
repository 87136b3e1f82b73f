/* strata_client.c - the C client: a DEALER socket, the msgs encoders for requests and
 * the validating decoders for everything the server sends, and a monitor of the DEALER's
 * connection that resumes a generation after a reconnect.  Owns its ZeroMQ context.
 */
#include "strata_client.h"
#include "msg_any.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_DEFAULT_ENDPOINT "tcp://127.0.0.1:5555"
/* the DEALER's monitor (one per context, and every client has its own context) */
#define S_MONITOR_ENDPOINT "inproc://strata-client-monitor"
#define S_MONITOR_EVENTS (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
/* ZMTP heartbeats: a silent dead link is noticed after S_HEARTBEAT_TIMEOUT_MS */
#define S_HEARTBEAT_IVL_MS 1000
#define S_HEARTBEAT_TIMEOUT_MS 3000

struct strata_client_t {
    void *ctx;           /* ZeroMQ context (owned) */
    void *sock;          /* DEALER connected to the frontend */
    void *mon;           /* PAIR reading the DEALER's monitor events */
    bool up;             /* a handshake succeeded since the last disconnect */
    unsigned conn;       /* handshakes so far: the number of the current connection */
    int timeout_ms;      /* bound on every wait for the server */
    unsigned long seq;   /* request ids: "c<pid>-<seq>" */
    char cur_id[65];     /* the generation in progress, "" when none */
    char error[256];     /* last failure, one line */
    char error_code[32]; /* server error code of the last -EREMOTEIO */
};

static int s_fail(strata_client_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int s_fail(strata_client_t *c, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return rc;
}

void strata_gen_params_default(strata_gen_params_t *p) {
    memset(p, 0, sizeof *p);
    p->max_tokens = MSG_DEFAULT_MAX_TOKENS;
    msg_sampling_t d = msg_sampling_defaults();
    p->temperature = d.temperature;
    p->top_k = d.top_k;
    p->top_p = d.top_p;
    p->min_p = d.min_p;
    p->repeat_penalty = d.repeat_penalty;
    p->repeat_last_n = d.repeat_last_n;
    p->stream = true;
}

void strata_done_free(strata_done_t *done) {
    if (done) {
        free(done->text);
        done->text = NULL;
    }
}

/* Read the Z85 text of field ("public-key" or "secret-key") of a zcert file
 * into out (41 bytes).  0, or -ENOENT / -EINVAL (no such field). */
static int s_read_key(const char *path, const char *field, char out[41]) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -ENOENT;
    char line[512];
    int rc = -EINVAL;
    size_t n = strlen(field);
    while (rc && fgets(line, sizeof line, f)) {
        const char *p = line + strspn(line, " \t");
        if (strncmp(p, field, n))
            continue;
        const char *q = strchr(p + n, '"');
        if (q && strlen(q) > 41 && q[41] == '"') {
            memcpy(out, q + 1, 40);
            out[40] = 0;
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* Open a DEALER to endpoint; CURVE client with the three keys when serverkey
 * is not NULL. */
static strata_client_t *s_open(const char *endpoint, int timeout_ms, const char *serverkey,
                               const char *publickey, const char *secretkey) {
    strata_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
    c->ctx = zmq_ctx_new();
    if (!c->ctx)
        goto fail;
    c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!c->sock)
        goto fail;
    int linger = 0;
    int64_t maxmsg = MSG_MAX_CLIENT_FRAME;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(c->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &c->timeout_ms, sizeof c->timeout_ms);
    int hb_ivl = S_HEARTBEAT_IVL_MS, hb_timeout = S_HEARTBEAT_TIMEOUT_MS;
    zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(c->sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof hb_timeout);
    if (serverkey && (zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, serverkey, 41) ||
                      zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, publickey, 41) ||
                      zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, secretkey, 41)))
        goto fail;
    /* the monitor first, so that it sees the first handshake too */
    if (zmq_socket_monitor(c->sock, S_MONITOR_ENDPOINT, S_MONITOR_EVENTS) != 0)
        goto fail;
    c->mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (!c->mon)
        goto fail;
    zmq_setsockopt(c->mon, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(c->mon, S_MONITOR_ENDPOINT) != 0)
        goto fail;
    if (zmq_connect(c->sock, endpoint ? endpoint : S_DEFAULT_ENDPOINT) != 0)
        goto fail;
    return c;
fail:
    strata_client_destroy(&c);
    return NULL;
}

strata_client_t *strata_client_new(const char *endpoint, int timeout_ms) {
    return s_open(endpoint, timeout_ms, NULL, NULL, NULL);
}

strata_client_t *strata_client_new_curve(const char *endpoint, int timeout_ms,
                                         const char *server_key, const char *client_key) {
    char server[41], pub[41], sec[41];
    if (!zmq_has("curve") || s_read_key(server_key, "public-key", server) ||
        s_read_key(client_key, "public-key", pub) || s_read_key(client_key, "secret-key", sec))
        return NULL;
    return s_open(endpoint, timeout_ms, server, pub, sec);
}

void strata_client_destroy(strata_client_t **self_p) {
    if (!self_p || !*self_p)
        return;
    strata_client_t *c = *self_p;
    if (c->sock)
        zmq_socket_monitor(c->sock, NULL, 0); /* stop the monitor before its reader goes */
    if (c->mon)
        zmq_close(c->mon);
    if (c->sock)
        zmq_close(c->sock);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    free(c);
    *self_p = NULL;
}

const char *strata_client_error(const strata_client_t *self) {
    return self ? self->error : "";
}

const char *strata_client_error_code(const strata_client_t *self) {
    return self ? self->error_code : "";
}

/* encode and send one message */
static int s_send(strata_client_t *c, int type, const void *m) {
    void *buf;
    size_t len;
    msg_err_t err;
    int rc = msg_encode(type, m, &buf, &len, &err);
    if (rc < 0)
        return s_fail(c, rc, "invalid request: %s", err.msg);
    rc = zmq_send(c->sock, buf, len, 0);
    int e = errno;
    free(buf);
    if (rc < 0)
        return s_fail(c, e == EAGAIN ? -ETIMEDOUT : -EIO, "cannot send to the server: %s",
                      e == EAGAIN ? "timed out" : zmq_strerror(e));
    return 0;
}

static int s_timed_out(strata_client_t *c) {
    return s_fail(c, -ETIMEDOUT, "no answer from the server within %.1f s (is it running?)",
                  c->timeout_ms / 1000.0);
}

/* read one frame (flags: 0, or ZMQ_DONTWAIT: -EAGAIN when none is there) and decode it
 * into *m */
static int s_read(strata_client_t *c, msg_any_t *m, int flags) {
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, c->sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&frame);
        if (e == EAGAIN)
            return -EAGAIN;
        return s_fail(c, -EIO, "receive failed: %s", zmq_strerror(e));
    }
    /* a multi-frame message is not part of the protocol: drop the rest */
    while (zmq_msg_more(&frame)) {
        zmq_msg_close(&frame);
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, c->sock, 0) < 0)
            break;
    }
    msg_err_t err;
    int rc = msg_any_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), m, &err);
    zmq_msg_close(&frame);
    if (rc < 0)
        return s_fail(c, -EPROTO, "bad frame from the server: %s", err.msg);
    return 0;
}

/* wait up to the timeout for one frame and decode it into *m */
static int s_recv(strata_client_t *c, msg_any_t *m) {
    zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, c->timeout_ms);
    if (n < 0)
        return s_fail(c, -EIO, "poll failed: %s", zmq_strerror(errno));
    if (n == 0)
        return s_timed_out(c);
    return s_read(c, m, 0);
}

/* Read the monitor events that are there (without waiting) into c->up / c->conn.
 * Returns the number of handshakes among them. */
static int s_monitor_poll(strata_client_t *c) {
    int handshakes = 0;
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&frame);
            return handshakes;
        }
        /* frame 1: uint16 event, uint32 value (host order); frame 2: the endpoint */
        uint16_t event = 0;
        if (zmq_msg_size(&frame) >= sizeof event)
            memcpy(&event, zmq_msg_data(&frame), sizeof event);
        while (zmq_msg_more(&frame)) {
            zmq_msg_close(&frame);
            zmq_msg_init(&frame);
            if (zmq_msg_recv(&frame, c->mon, 0) < 0)
                break;
        }
        zmq_msg_close(&frame);
        if (event == ZMQ_EVENT_DISCONNECTED) {
            c->up = false;
        } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            c->up = true;
            c->conn++;
            handshakes++;
        }
    }
}

/* an error message from the server -> -EREMOTEIO */
static int s_remote_error(strata_client_t *c, const msg_error_t *e) {
    snprintf(c->error_code, sizeof c->error_code, "%s", msg_code_name(e->code));
    return s_fail(c, -EREMOTEIO, "server error (%s): %s", c->error_code, e->message);
}

static int s_build_generate(strata_client_t *c, const strata_gen_params_t *p, msg_generate_t *g) {
    msg_generate_init(g);
    snprintf(g->id, sizeof g->id, "c%ld-%lu", (long)getpid(), ++c->seq);
    if (p->prompt) {
        g->prompt = (char *)p->prompt;
        g->prompt_len = strlen(p->prompt);
    } else if (p->messages && p->n_messages > 0 && p->n_messages <= MSG_MAX_MESSAGES) {
        g->messages = calloc((size_t)p->n_messages, sizeof *g->messages);
        if (!g->messages)
            return s_fail(c, -ENOMEM, "out of memory");
        g->n_messages = p->n_messages;
        for (int i = 0; i < p->n_messages; i++) {
            if (msg_set_str(g->messages[i].role, sizeof g->messages[i].role, p->messages[i].role) <
                0)
                return s_fail(c, -EINVAL, "message %d: role too long", i);
            g->messages[i].content = (char *)(p->messages[i].content ? p->messages[i].content : "");
            g->messages[i].content_len = strlen(g->messages[i].content);
        }
    } else {
        return s_fail(c, -EINVAL, "a prompt or 1..%d messages are needed", MSG_MAX_MESSAGES);
    }
    g->max_tokens = p->max_tokens;
    g->sampling.temperature = p->temperature;
    g->sampling.top_k = p->top_k;
    g->sampling.top_p = p->top_p;
    g->sampling.min_p = p->min_p;
    g->sampling.repeat_penalty = p->repeat_penalty;
    g->sampling.repeat_last_n = p->repeat_last_n;
    g->sampling.seed = p->seed;
    g->has_seed = p->has_seed;
    if (p->n_stop < 0 || p->n_stop > MSG_MAX_STOP)
        return s_fail(c, -EINVAL, "at most %d stop strings", MSG_MAX_STOP);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !*p->stop[i] ||
            msg_set_str(g->stop[i], sizeof g->stop[i], p->stop[i]) < 0)
            return s_fail(c, -EINVAL, "stop string %d: empty or longer than %d bytes", i,
                          MSG_MAX_STOP_BYTES);
    g->n_stop = p->n_stop;
    g->stream = p->stream;
    return 0;
}

/* A generation in progress: what a resume needs. */
typedef struct {
    msg_generate_t g; /* the request as first sent (g.messages is ours, the strings borrowed) */
    unsigned conn;    /* the connection its last send travels on (c->conn + 1: the next) */
    int32_t *toks;    /* (g.max_tokens) ids of the token events delivered; NULL unless stream */
    int have;         /* token events delivered: indexes 0..have-1 */
    bool cancelled;   /* on_token asked to cancel: a cancel follows every resume */
} s_gen_t;

enum { S_NOT_OURS, S_OURS, S_END };

static int64_t s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The connection came back: send the request again with what this client has. */
static int s_resume(strata_client_t *c, s_gen_t *st, strata_done_t *done) {
    msg_resume_t r;
    msg_resume_init(&r);
    r.gen = st->g;
    r.have = st->g.stream ? st->have : 0;
    r.tokens = r.have ? st->toks : NULL;
    r.n_tokens = r.have;
    st->conn = c->conn;
    done->resumes++;
    done->resumed_after = r.have;
    int rc = s_send(c, MSG_RESUME, &r);
    if (rc == 0 && st->cancelled)
        rc = strata_client_cancel(c, NULL);
    return rc;
}

/* Handle one event m: S_END when it ended the generation (rc in *rc: 0 done, < 0
 * error), S_OURS for another of its events, S_NOT_OURS for anything else. */
static int s_on_event(strata_client_t *c, s_gen_t *st, msg_any_t *m, strata_token_fn on_token,
                      void *user, strata_done_t *done, int *rc) {
    if (m->type == MSG_TOKEN && !strcmp(m->u.token.id, c->cur_id)) {
        const msg_token_t *t = &m->u.token;
        if (t->index < st->have) /* resent after a resume: the callback had it */
            return S_OURS;
        if (!st->toks || t->index > st->have || t->index >= st->g.max_tokens) {
            *rc = s_fail(c, -EPROTO, "token event %d of '%s' out of order (expected %d)", t->index,
                         c->cur_id, st->have);
            return S_END;
        }
        st->toks[st->have++] = t->token;
        if (on_token && !st->cancelled &&
            on_token(user, t->index, t->token, t->text, t->text_len)) {
            st->cancelled = true;
            strata_client_cancel(c, NULL);
        }
        return S_OURS;
    }
    if (m->type == MSG_DONE && !strcmp(m->u.done.id, c->cur_id)) {
        msg_done_t *d = &m->u.done;
        snprintf(done->id, sizeof done->id, "%s", d->id);
        snprintf(done->finish_reason, sizeof done->finish_reason, "%s",
                 msg_finish_name(d->finish_reason));
        done->text = d->text; /* hand over */
        d->text = NULL;
        done->prompt_tokens = d->usage.prompt_tokens;
        done->completion_tokens = d->usage.completion_tokens;
        done->queued_ms = d->timings.queued_ms;
        done->prefill_ms = d->timings.prefill_ms;
        done->decode_ms = d->timings.decode_ms;
        done->ttft_ms = d->timings.ttft_ms;
        *rc = 0;
        return S_END;
    }
    if (m->type == MSG_ERROR && (!strcmp(m->u.error.id, c->cur_id) || !m->u.error.id[0])) {
        *rc = s_remote_error(c, &m->u.error);
        return S_END;
    }
    return S_NOT_OURS; /* a late event of an earlier request */
}

int strata_client_generate(strata_client_t *self, const strata_gen_params_t *p,
                           strata_token_fn on_token, void *user, strata_done_t *done) {
    strata_client_t *c = self;
    memset(done, 0, sizeof *done);
    c->error[0] = c->error_code[0] = 0;
    s_gen_t st = {0};
    int rc = s_build_generate(c, p, &st.g);
    if (rc == 0 && st.g.stream && !(st.toks = malloc((size_t)st.g.max_tokens * sizeof *st.toks)))
        rc = s_fail(c, -ENOMEM, "out of memory");
    if (rc < 0)
        goto out;
    /* the connection the request goes out on: the current one, or the next when the
     * current one is down (the DEALER holds the frame until it is up) */
    s_monitor_poll(c);
    st.conn = c->up ? c->conn : c->conn + 1;
    if ((rc = s_send(c, MSG_GENERATE, &st.g)) < 0)
        goto out;
    snprintf(c->cur_id, sizeof c->cur_id, "%s", st.g.id);
    int64_t deadline = s_now_ms() + c->timeout_ms;
    for (;;) {
        int64_t left = deadline - s_now_ms();
        if (left <= 0) {
            rc = s_timed_out(c);
            break;
        }
        zmq_pollitem_t items[2] = {{c->sock, 0, ZMQ_POLLIN, 0}, {c->mon, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, (long)left) < 0) {
            if (errno == EINTR)
                continue;
            rc = s_fail(c, -EIO, "poll failed: %s", zmq_strerror(errno));
            break;
        }
        /* every event that is there first, so that a resume counts all of them */
        int ev = S_NOT_OURS;
        bool monitor = items[1].revents & ZMQ_POLLIN;
        while (ev != S_END) {
            msg_any_t m;
            int r = s_read(c, &m, ZMQ_DONTWAIT);
            if (r == -EAGAIN)
                break;
            if (r < 0) {
                rc = r;
                ev = S_END;
                break;
            }
            ev = s_on_event(c, &st, &m, on_token, user, done, &rc);
            msg_any_clear(&m);
            if (ev == S_OURS)
                deadline = s_now_ms() + c->timeout_ms;
        }
        if (ev == S_END)
            break;
        /* a new connection that the request did not go out on: resume it there */
        if (monitor && s_monitor_poll(c) && c->up && c->conn != st.conn &&
            (rc = s_resume(c, &st, done)) < 0)
            break;
    }
    c->cur_id[0] = 0;
out:
    free(st.g.messages); /* only the array is ours: the strings are borrowed */
    free(st.toks);
    return rc;
}

int strata_client_cancel(strata_client_t *self, const char *id) {
    msg_cancel_t m;
    msg_cancel_init(&m);
    const char *which = id ? id : self->cur_id;
    if (!which[0] || msg_set_str(m.id, sizeof m.id, which) < 0)
        return s_fail(self, -EINVAL, "no request to cancel");
    return s_send(self, MSG_CANCEL, &m);
}

/* send a field-less request and wait for the reply of type want */
static int s_query(strata_client_t *c, int type, int want, msg_any_t *m) {
    c->error[0] = c->error_code[0] = 0;
    msg_any_t q;
    msg_init(type, &q.u);
    int rc = s_send(c, type, &q.u);
    if (rc < 0)
        return rc;
    for (;;) {
        if ((rc = s_recv(c, m)) < 0)
            return rc;
        if (m->type == want)
            return 0;
        if (m->type == MSG_ERROR && !m->u.error.id[0]) {
            rc = s_remote_error(c, &m->u.error);
            msg_any_clear(m);
            return rc;
        }
        msg_any_clear(m);
    }
}

int strata_client_stats(strata_client_t *self, strata_counter_t **counters, int *n) {
    *counters = NULL;
    *n = 0;
    msg_any_t m;
    int rc = s_query(self, MSG_STATS, MSG_STATS_REPLY, &m);
    if (rc < 0)
        return rc;
    int k = m.u.stats_reply.n_counters;
    strata_counter_t *out = calloc(k ? (size_t)k : 1, sizeof *out);
    if (!out) {
        msg_any_clear(&m);
        return s_fail(self, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < k; i++) {
        snprintf(out[i].name, sizeof out[i].name, "%s", m.u.stats_reply.counters[i].name);
        out[i].value = m.u.stats_reply.counters[i].value;
    }
    msg_any_clear(&m);
    *counters = out;
    *n = k;
    return 0;
}

int strata_client_health(strata_client_t *self, bool *ok, strata_actor_t **actors, int *n) {
    *ok = false;
    *actors = NULL;
    *n = 0;
    msg_any_t m;
    int rc = s_query(self, MSG_HEALTH, MSG_HEALTH_REPLY, &m);
    if (rc < 0)
        return rc;
    int k = m.u.health_reply.n_actors;
    strata_actor_t *out = calloc(k ? (size_t)k : 1, sizeof *out);
    if (!out) {
        msg_any_clear(&m);
        return s_fail(self, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < k; i++) {
        const msg_actor_health_t *a = &m.u.health_reply.actors[i];
        snprintf(out[i].name, sizeof out[i].name, "%s", a->name);
        snprintf(out[i].state, sizeof out[i].state, "%s", msg_state_name(a->state));
        out[i].last_seen_ms = a->last_seen_ms;
    }
    *ok = m.u.health_reply.ok;
    msg_any_clear(&m);
    *actors = out;
    *n = k;
    return 0;
}
