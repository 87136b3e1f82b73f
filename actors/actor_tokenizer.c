/* actor_tokenizer.c - the tokenizer actor: render the chat template and encode
 * requests; relay cancels to the router and errors to the frontend.  Token
 * streams are detokenized by the worker that produces them (one hop per token
 * instead of two), with the same library code (model_detok_t, model_stopper_t). */
#include "actor_tokenizer.h"

#include "base_log.h"
#include "model_gguf.h"
#include "model_sampler.h"
#include "model_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    actor_env_t *env;           /* runtime */
    zsock_t *in;                /* inbound PULL */
    zsock_t *to_router;         /* PUSH to the router */
    zsock_t *to_front;          /* PUSH to the frontend */
    model_tokenizer_t *tok;     /* vocabulary */
    actor_loop_t *loop;         /* polling, control messages, counters */
    actor_counters_t *counters; /* the loop's */
} s_tok_t;

/* the tokenizer's sockets */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_tok_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_STREAM, ACTOR_MAX_FRAME, false},
    {ACTOR_SOCK_FIELD(s_tok_t, to_router), ACTOR_SOCK_OUT, "router", ACTOR_HWM_STREAM, 0, false},
    {ACTOR_SOCK_FIELD(s_tok_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_STREAM, 0, false},
    {0},
};

const actor_opt_t actor_tokenizer_opts[] = {
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL, "GGUF path (vocabulary and chat template)",
     .field = ACTOR_OPT_FIELD(actor_tokenizer_cfg_t, model)},
    {NULL},
};

/* Tokens of a chat prompt that belong to its system message: the KV tiers keep
 * them longer (a system prompt is shared by many requests).  0 when the first
 * message is not a system message or its rendering is not a prefix. */
static int s_system_tokens(s_tok_t *t, const msg_generate_t *g, bool bos, const int32_t *tokens,
                           int n) {
    if (g->n_messages < 2 || strcmp(g->messages[0].role, "system"))
        return 0;
    model_chat_msg_t cm = {g->messages[0].role, g->messages[0].content};
    char *sys = model_tokenizer_chat(t->tok, &cm, 1, false);
    if (!sys)
        return 0;
    int need = model_tokenizer_encode(t->tok, sys, strlen(sys), bos, true, NULL, 0);
    int pin = 0;
    int32_t *st = need > 0 && need <= n ? malloc((size_t)need * sizeof *st) : NULL;
    if (st && model_tokenizer_encode(t->tok, sys, strlen(sys), bos, true, st, need) == need &&
        !memcmp(st, tokens, (size_t)need * sizeof *st))
        pin = need;
    free(st);
    free(sys);
    return pin;
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

static void s_on_request(void *self, const msg_tok_request_t *q) {
    s_tok_t *t = self;
    actor_counters_add(t->counters, "requests", 1);
    const msg_generate_t *g = &q->gen;
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
    if (need > 0 && need + q->n_gen <= MSG_MAX_SEQ_TOKENS) {
        /* room for the completion tokens a resumed request carries */
        w.tokens = malloc((size_t)(need + q->n_gen) * sizeof *w.tokens);
        if (w.tokens)
            w.n_tokens = model_tokenizer_encode(t->tok, text, len, bos, chat, w.tokens, need);
    }
    free(rendered);
    if (w.n_tokens <= 0) {
        free(w.tokens);
        actor_counters_add(t->counters, "rejected.empty", 1);
        s_error_front(t, q->rid, MSG_CODE_BAD_REQUEST,
                      need > 0 ? "the prompt is too long" : "the prompt is empty");
        return;
    }
    if (q->n_gen) { /* a resumed request: the worker goes on after these */
        memcpy(w.tokens + w.n_tokens, q->gen_tokens, (size_t)q->n_gen * sizeof *w.tokens);
        w.n_tokens += q->n_gen;
        w.n_gen = q->n_gen;
        actor_counters_add(t->counters, "resumed", 1);
    }
    w.rid = q->rid;
    w.max_tokens = g->max_tokens;
    w.fit_context = g->fit_context;
    w.priority = g->priority;
    memcpy(w.kv_compress, g->kv_compress, sizeof w.kv_compress);
    w.sampling = g->sampling;
    w.logit_bias = g->logit_bias; /* borrowed */
    w.n_logit_bias = g->n_logit_bias;
    memcpy(w.stop, g->stop, sizeof w.stop);
    w.n_stop = g->n_stop;
    w.stream = g->stream;
    w.t_arrival_us = q->t_arrival_us;
    memcpy(w.session, g->session, sizeof w.session);
    w.pin_tokens = chat ? s_system_tokens(t, g, bos, w.tokens, w.n_tokens) : 0;
    w.trace = g->trace;
    w.logprobs = g->logprobs;
    w.top_logprobs = g->top_logprobs;
    w.grammar = g->grammar; /* borrowed: compiled to GBNF by the frontend */
    w.grammar_len = g->grammar_len;
    msg_trace_step_t step;
    if (g->trace) { /* from where the chain ended (the arrival, or a resume) to now */
        uint64_t now = base_now_us();
        int64_t end = now > q->t_arrival_us ? (int64_t)(now - q->t_arrival_us) : 0;
        if (chat)
            msg_trace_step_fill(&step, "tokenizer", "tokenize", q->trace_t_us, end,
                                "chat template over %d messages, then %d tokens (%d of them the "
                                "system prompt, kept longer in the KV tiers)",
                                g->n_messages, w.n_tokens - w.n_gen, w.pin_tokens);
        else
            msg_trace_step_fill(&step, "tokenizer", "tokenize", q->trace_t_us, end,
                                "raw prompt, %d tokens", w.n_tokens - w.n_gen);
        w.steps = &step;
        w.n_steps = 1;
    }
    actor_counters_add(t->counters, "prompt_tokens", w.n_tokens - w.n_gen);
    int rc = actor_send(t->to_router, MSG_WORK_REQUEST, &w);
    free(w.tokens);
    if (rc) {
        s_error_front(t, q->rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_INTERNAL,
                      rc == -EAGAIN ? "the router's queue is full" : "cannot reach the router");
    }
}

/* An embed (docs/PROTOCOL.md): its text tokenized as a raw prompt (or its token ids as
 * they are), then dispatched as a work_request with `embed` set: the router treats it
 * like any request, the worker pools the hidden states instead of generating. */
static void s_on_embed(void *self, const msg_embed_request_t *q) {
    s_tok_t *t = self;
    actor_counters_add(t->counters, "requests.embed", 1);
    msg_work_request_t w;
    msg_work_request_init(&w);
    w.rid = q->rid;
    w.max_tokens = 1;
    w.t_arrival_us = q->t_arrival_us;
    w.embed = true;
    int32_t *owned = NULL;
    if (q->prompt) {
        bool bos = model_tokenizer_add_bos(t->tok);
        int need = model_tokenizer_encode(t->tok, q->prompt, q->prompt_len, bos, false, NULL, 0);
        if (need > 0 && need <= MSG_MAX_SEQ_TOKENS &&
            (owned = malloc((size_t)need * sizeof *owned)))
            w.n_tokens =
                model_tokenizer_encode(t->tok, q->prompt, q->prompt_len, bos, false, owned, need);
        w.tokens = owned;
        if (w.n_tokens <= 0) {
            free(owned);
            actor_counters_add(t->counters, "rejected.empty", 1);
            s_error_front(t, q->rid, MSG_CODE_BAD_REQUEST,
                          need > 0 ? "the input is too long" : "the input is empty");
            return;
        }
    } else {
        w.tokens = q->tokens; /* borrowed */
        w.n_tokens = q->n_tokens;
    }
    actor_counters_add(t->counters, "prompt_tokens", w.n_tokens);
    int rc = actor_send(t->to_router, MSG_WORK_REQUEST, &w);
    free(owned);
    if (rc)
        s_error_front(t, q->rid, rc == -EAGAIN ? MSG_CODE_OVERLOADED : MSG_CODE_INTERNAL,
                      rc == -EAGAIN ? "the router's queue is full" : "cannot reach the router");
}

/* cancels follow the request's path, so one never overtakes it */
static void s_on_cancel(void *self, const msg_work_cancel_t *m) {
    s_tok_t *t = self;
    actor_send(t->to_router, MSG_WORK_CANCEL, m);
}

static void s_on_error(void *self, const msg_work_error_t *m) {
    s_tok_t *t = self;
    actor_send(t->to_front, MSG_WORK_ERROR, m);
}

static void s_cleanup(s_tok_t *t) {
    model_tokenizer_destroy(&t->tok);
    actor_loop_destroy(&t->loop);
    actor_socks_close(s_socks, t);
}

int actor_tokenizer_main(actor_env_t *env) {
    const actor_tokenizer_cfg_t *conf = actor_env_cfg(env);
    s_tok_t t = {0};
    t.env = env;
    char err[512];
    const char *path = conf->model;
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
    t.loop = actor_loop_new(env, &t);
    t.counters = t.loop ? actor_loop_counters(t.loop) : NULL;
    char serr[128];
    int socks = actor_socks_open(env, s_socks, &t, serr, sizeof serr);
    if (socks || !t.loop) {
        actor_env_fail(env, "tokenizer: cannot set up (%s)", socks ? serr : "out of memory");
        s_cleanup(&t);
        return 1;
    }
    actor_loop_inbox(t.loop, t.in, t.to_front, false, "");
    actor_loop_handle_tok_request(t.loop, s_on_request);
    actor_loop_handle_embed_request(t.loop, s_on_embed);
    actor_loop_handle_work_cancel(t.loop, s_on_cancel);
    actor_loop_handle_work_error(t.loop, s_on_error);
    actor_env_ready(env);
    actor_loop_run(t.loop, 500);
    s_cleanup(&t);
    return 0;
}
