/* actor_tokenizer.c - the tokenizer actor: encode requests, detokenize event
 * streams with per-request model_detok_t + model_stopper_t state. */
#include "actor_tokenizer.h"

#include "base/base_log.h"
#include "model/model_gguf.h"
#include "model/model_sampler.h"
#include "model/model_tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Detokenization state of one request in flight. */
typedef struct {
    uint64_t rid;            /* request id; 0 = free slot */
    model_detok_t detok;     /* UTF-8-safe incremental decoding */
    model_stopper_t stopper; /* stop strings */
    bool has_stops;          /* stopper in use */
} s_stream_t;

typedef struct {
    actor_env_t *env;       /* runtime */
    zsock_t *in;            /* inbound PULL */
    zsock_t *to_router;     /* PUSH to the router */
    zsock_t *to_front;      /* PUSH to the frontend */
    model_tokenizer_t *tok; /* vocabulary */
    s_stream_t *streams;    /* (cap) open-ended table, linear probing by rid */
    int cap, used;
    actor_counters_t *counters; /* stats */
    char *piece, *out;          /* scratch (SCRATCH bytes) */
} s_tok_t;

#define SCRATCH 8192
#define MAX_STREAMS 65536

static s_stream_t *s_find(s_tok_t *t, uint64_t rid) {
    for (int i = 0; i < t->cap; i++)
        if (t->streams[i].rid == rid)
            return &t->streams[i];
    return NULL;
}

static s_stream_t *s_open(s_tok_t *t, uint64_t rid) {
    if (t->used == t->cap) {
        if (t->cap >= MAX_STREAMS)
            return NULL;
        int cap = t->cap ? t->cap * 2 : 64;
        s_stream_t *s = realloc(t->streams, (size_t)cap * sizeof *s);
        if (!s)
            return NULL;
        memset(s + t->cap, 0, (size_t)(cap - t->cap) * sizeof *s);
        t->streams = s;
        t->cap = cap;
    }
    for (int i = 0; i < t->cap; i++)
        if (t->streams[i].rid == 0) {
            t->used++;
            memset(&t->streams[i], 0, sizeof t->streams[i]);
            t->streams[i].rid = rid;
            return &t->streams[i];
        }
    return NULL;
}

static void s_close(s_tok_t *t, s_stream_t *s) {
    if (s->has_stops)
        model_stopper_free(&s->stopper);
    memset(s, 0, sizeof *s);
    t->used--;
}

static void s_error_front(s_tok_t *t, uint64_t rid, int code, const char *what) {
    msg_work_error_t e;
    msg_work_error_init(&e);
    e.rid = rid;
    e.code = code;
    msg_set_str(e.message, sizeof e.message, what);
    if (actor_send(t->to_front, MSG_WORK_ERROR, &e))
        actor_counters_add(t->counters, "send.failed", 1);
}

static void s_on_request(s_tok_t *t, msg_tok_request_t *q) {
    actor_counters_add(t->counters, "requests", 1);
    msg_generate_t *g = &q->gen;
    char *rendered = NULL;
    const char *text = g->prompt;
    size_t len = g->prompt_len;
    bool chat = g->messages != NULL;
    if (chat) {
        model_chat_msg_t *cm = malloc((size_t)g->n_messages * sizeof *cm);
        if (cm) {
            for (int i = 0; i < g->n_messages; i++)
                cm[i] = (model_chat_msg_t){g->messages[i].role, g->messages[i].content};
            rendered = model_tokenizer_chat(t->tok, cm, g->n_messages, true);
            free(cm);
        }
        if (!rendered) {
            actor_counters_add(t->counters, "rejected.no_template", 1);
            s_error_front(t, q->rid, MSG_CODE_BAD_REQUEST,
                          "this model has no chat template the server knows");
            return;
        }
        text = rendered;
        len = strlen(rendered);
    }
    bool bos = model_tokenizer_add_bos(t->tok);
    msg_work_request_t w;
    msg_work_request_init(&w);
    int need = model_tokenizer_encode(t->tok, text ? text : "", len, bos, chat, NULL, 0);
    if (need > 0 && need <= MSG_MAX_SEQ_TOKENS) {
        w.tokens = malloc((size_t)need * sizeof *w.tokens);
        if (w.tokens)
            w.n_tokens = model_tokenizer_encode(t->tok, text, len, bos, chat, w.tokens, need);
    }
    free(rendered);
    if (w.n_tokens <= 0) {
        free(w.tokens);
        actor_counters_add(t->counters, "rejected.empty", 1);
        s_error_front(t, q->rid, MSG_CODE_BAD_REQUEST,
                      need > MSG_MAX_SEQ_TOKENS ? "the prompt is too long" : "the prompt is empty");
        return;
    }
    w.rid = q->rid;
    w.max_tokens = g->max_tokens;
    w.sampling = g->sampling;
    memcpy(w.stop, g->stop, sizeof w.stop);
    w.n_stop = g->n_stop;
    w.stream = g->stream;
    w.t_arrival_us = q->t_arrival_us;
    s_stream_t *s = s_find(t, q->rid) ? NULL : s_open(t, q->rid);
    if (!s) {
        free(w.tokens);
        s_error_front(t, q->rid, MSG_CODE_OVERLOADED, "too many requests in flight");
        return;
    }
    model_detok_init(&s->detok, t->tok);
    if (g->n_stop > 0) {
        const char *stops[MSG_MAX_STOP];
        for (int i = 0; i < g->n_stop; i++)
            stops[i] = g->stop[i];
        s->has_stops = model_stopper_init(&s->stopper, stops, g->n_stop) == 0;
    }
    actor_counters_add(t->counters, "prompt_tokens", w.n_tokens);
    int rc = actor_send(t->to_router, MSG_WORK_REQUEST, &w);
    free(w.tokens);
    if (rc) {
        s_close(t, s);
        s_error_front(t, q->rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_INTERNAL,
                      rc == -EAGAIN ? "the router's queue is full" : "cannot reach the router");
    }
}

static void s_on_event(s_tok_t *t, const msg_work_event_t *ev) {
    s_stream_t *s = s_find(t, ev->rid);
    if (!s) {
        actor_counters_add(t->counters, "events.unknown_rid", 1);
        return;
    }
    msg_text_event_t te;
    msg_text_event_init(&te);
    te.rid = ev->rid;
    te.index = ev->index;
    te.token = ev->token;
    te.finish = ev->finish;
    te.prompt_tokens = ev->prompt_tokens;
    te.timings = ev->timings;
    size_t n = 0;
    if (ev->index >= 0 && ev->token >= 0) {
        int pl = model_detok_push(&s->detok, ev->token, t->piece, SCRATCH);
        if (pl < 0)
            pl = 0;
        if (s->has_stops) {
            n = model_stopper_push(&s->stopper, t->piece, (size_t)pl, t->out, SCRATCH);
            if (s->stopper.stopped && !ev->finish)
                te.finish = MSG_FINISH_STOP;
            else if (s->stopper.stopped)
                te.finish = MSG_FINISH_STOP;
        } else {
            memcpy(t->out, t->piece, (size_t)pl);
            n = (size_t)pl;
        }
    }
    if (te.finish && te.finish != MSG_FINISH_STOP) {
        /* end of stream: what the detokenizer and the stopper still hold */
        int pl = model_detok_flush(&s->detok, t->piece, SCRATCH);
        if (pl < 0)
            pl = 0;
        if (s->has_stops) {
            n += model_stopper_push(&s->stopper, t->piece, (size_t)pl, t->out + n, SCRATCH - n);
            if (!s->stopper.stopped)
                n += model_stopper_flush(&s->stopper, t->out + n, SCRATCH - n);
            else
                te.finish = MSG_FINISH_STOP;
        } else {
            memcpy(t->out + n, t->piece, (size_t)pl);
            n += (size_t)pl;
        }
    }
    t->out[n] = 0;
    te.text = t->out;
    te.text_len = n;
    if (actor_send(t->to_front, MSG_TEXT_EVENT, &te)) {
        for (int i = 0; i < 1000 && actor_send(t->to_front, MSG_TEXT_EVENT, &te) == -EAGAIN; i++)
            zclock_sleep(1);
    }
    if (te.finish == MSG_FINISH_STOP && !ev->finish) {
        /* the worker does not know about stop strings: stop it */
        msg_work_cancel_t c = {ev->rid};
        actor_send(t->to_router, MSG_WORK_CANCEL, &c);
        actor_counters_add(t->counters, "stopped", 1);
    }
    if (te.finish)
        s_close(t, s);
}

static void s_cleanup(s_tok_t *t) {
    for (int i = 0; i < t->cap; i++)
        if (t->streams[i].rid)
            s_close(t, &t->streams[i]);
    free(t->streams);
    free(t->piece);
    free(t->out);
    model_tokenizer_destroy(&t->tok);
    actor_counters_destroy(&t->counters);
    zsock_destroy(&t->in);
    zsock_destroy(&t->to_router);
    zsock_destroy(&t->to_front);
}

int actor_tokenizer_main(actor_env_t *env) {
    const actor_topology_t *topo = actor_env_topology(env);
    s_tok_t t = {0};
    t.env = env;
    char err[512];
    const char *path = actor_topology_opt(topo, "tokenizer", "model", NULL);
    if (!path) {
        actor_env_fail(env, "tokenizer: no model= option in the topology");
        return 1;
    }
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    if (!g) {
        actor_env_fail(env, "tokenizer: %s", err);
        return 1;
    }
    t.tok = model_tokenizer_new(g, err, sizeof err);
    model_gguf_destroy(&g);
    if (!t.tok) {
        actor_env_fail(env, "tokenizer: %s", err);
        return 1;
    }
    t.counters = actor_counters_new();
    t.piece = malloc(SCRATCH);
    t.out = malloc(SCRATCH * 2 + 1);
    t.in = actor_sock_inbound(actor_topology_endpoint(topo, "tokenizer"),
                              MSG_MAX_INTERNAL_FRAME + 4096, 100000);
    t.to_router = actor_sock_outbound(actor_topology_endpoint(topo, "router"), 100000);
    t.to_front = actor_sock_outbound(actor_topology_endpoint(topo, "frontend"), 100000);
    if (!t.counters || !t.piece || !t.out || !t.in || !t.to_router || !t.to_front) {
        actor_env_fail(env, "tokenizer: cannot set up (sockets or memory)");
        s_cleanup(&t);
        return 1;
    }
    actor_env_ready(env);
    zpoller_t *poller = zpoller_new(actor_env_pipe(env), t.in, NULL);
    zpoller_set_nonstop(poller, true);
    bool stop = false;
    while (!stop) {
        void *which = zpoller_wait(poller, 500);
        if (which == actor_env_pipe(env))
            break;
        msg_any_t m;
        msg_err_t e;
        int rc;
        while (!stop && (rc = actor_recv(t.in, &m, &e)) != -EAGAIN) {
            if (rc < 0) {
                actor_counters_add(t.counters, "malformed", 1);
                continue;
            }
            switch (m.type) {
            case MSG_TOK_REQUEST:
                s_on_request(&t, &m.u.tok_request);
                break;
            case MSG_WORK_EVENT:
                s_on_event(&t, &m.u.work_event);
                break;
            case MSG_WORK_CANCEL:
                if (s_find(&t, m.u.work_cancel.rid))
                    actor_send(t.to_router, MSG_WORK_CANCEL, &m.u.work_cancel);
                break;
            case MSG_WORK_ERROR: {
                s_stream_t *s = s_find(&t, m.u.work_error.rid);
                if (s) {
                    s_close(&t, s);
                    actor_send(t.to_front, MSG_WORK_ERROR, &m.u.work_error);
                } else {
                    actor_counters_add(t.counters, "errors.unknown_rid", 1);
                }
                break;
            }
            default:
                if (actor_ctl_handle(env, &m, t.to_front, t.counters) == 1)
                    stop = true;
                else if (m.type != MSG_PING && m.type != MSG_STATS_QUERY)
                    actor_counters_add(t.counters, "unexpected", 1);
            }
            msg_any_clear(&m);
        }
        actor_counters_set(t.counters, "streams", t.used);
    }
    zpoller_destroy(&poller);
    s_cleanup(&t);
    return 0;
}
