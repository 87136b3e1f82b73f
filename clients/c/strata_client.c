/* strata_client.c - the C client: a DEALER socket, the msgs encoders for requests and
 * the validating decoders for everything the server sends.  Owns its ZeroMQ context.
 */
#include "strata_client.h"
#include "msg_any.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define S_DEFAULT_ENDPOINT "tcp://127.0.0.1:5555"

struct strata_client_t {
    void *ctx;             /* ZeroMQ context (owned) */
    void *sock;            /* DEALER connected to the frontend */
    int timeout_ms;        /* bound on every wait for the server */
    unsigned long seq;     /* request ids: "c<pid>-<seq>" */
    char cur_id[65];       /* the generation in progress, "" when none */
    char error[256];       /* last failure, one line */
    char error_code[16];   /* server error code of the last -EREMOTEIO */
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
    if (serverkey && (zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, serverkey, 41) ||
                      zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, publickey, 41) ||
                      zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, secretkey, 41)))
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

/* wait up to the timeout for one frame and decode it into *m */
static int s_recv(strata_client_t *c, msg_any_t *m) {
    zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, c->timeout_ms);
    if (n < 0)
        return s_fail(c, -EIO, "poll failed: %s", zmq_strerror(errno));
    if (n == 0)
        return s_fail(c, -ETIMEDOUT, "no answer from the server within %.1f s (is it running?)",
                      c->timeout_ms / 1000.0);
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, c->sock, 0) < 0) {
        zmq_msg_close(&frame);
        return s_fail(c, -EIO, "receive failed: %s", zmq_strerror(errno));
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
            if (msg_set_str(g->messages[i].role, sizeof g->messages[i].role,
                            p->messages[i].role) < 0)
                return s_fail(c, -EINVAL, "message %d: role too long", i);
            g->messages[i].content = (char *)(p->messages[i].content ? p->messages[i].content
                                                                     : "");
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

int strata_client_generate(strata_client_t *self, const strata_gen_params_t *p,
                           strata_token_fn on_token, void *user, strata_done_t *done) {
    strata_client_t *c = self;
    memset(done, 0, sizeof *done);
    c->error[0] = c->error_code[0] = 0;
    msg_generate_t g;
    int rc = s_build_generate(c, p, &g);
    if (rc == 0)
        rc = s_send(c, MSG_GENERATE, &g);
    free(g.messages); /* only the array is ours: the strings are borrowed */
    if (rc < 0)
        return rc;
    snprintf(c->cur_id, sizeof c->cur_id, "%s", g.id);
    bool cancelled = false;
    for (;;) {
        msg_any_t m;
        if ((rc = s_recv(c, &m)) < 0)
            break;
        if (m.type == MSG_TOKEN && !strcmp(m.u.token.id, c->cur_id)) {
            if (on_token && !cancelled &&
                on_token(user, m.u.token.index, m.u.token.token, m.u.token.text,
                         m.u.token.text_len)) {
                cancelled = true;
                strata_client_cancel(c, NULL);
            }
        } else if (m.type == MSG_DONE && !strcmp(m.u.done.id, c->cur_id)) {
            msg_done_t *d = &m.u.done;
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
            msg_any_clear(&m);
            rc = 0;
            break;
        } else if (m.type == MSG_ERROR &&
                   (!strcmp(m.u.error.id, c->cur_id) || !m.u.error.id[0])) {
            rc = s_remote_error(c, &m.u.error);
            msg_any_clear(&m);
            break;
        }
        /* anything else (a late event of an earlier request) is skipped */
        msg_any_clear(&m);
    }
    c->cur_id[0] = 0;
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
