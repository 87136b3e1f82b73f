/* serve_emit.c - see serve_emit.h.  The emitter owns the scratch an event's text is
 * written into and the log-probabilities kept for the next event. */
#include "serve_emit.h"

#include <stdlib.h>
#include <string.h>

#define S_SCRATCH 8192 /* a token's bytes plus held-back stop-string prefixes fit easily */

struct serve_emit_t {
    const model_tokenizer_t *tok; /* borrowed: pieces and detokenization */
    int n_vocab;                  /* tokens in a log-softmax row */
    int index;                    /* the worker's number, in every event */
    const char *name;             /* the worker's name, in its trace steps */
    char piece[S_SCRATCH];        /* one token's text */
    char text[S_SCRATCH];         /* the text of one event */
    /* the log-probabilities of the token the next event carries (serve_emit_logprobs) */
    bool lp_valid;                          /* kept for the next event */
    float lp;                               /* of the token */
    msg_top_t lp_top[MSG_MAX_TOP_LOGPROBS]; /* the most likely tokens */
    int lp_n_top;                           /* how many */
    char lp_piece[MSG_MAX_PIECE_BYTES + 1]; /* the token's own text */
};

serve_emit_t *serve_emit_new(const model_tokenizer_t *tok, int n_vocab, int index,
                             const char *name) {
    serve_emit_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->tok = tok;
    self->n_vocab = n_vocab;
    self->index = index;
    self->name = name;
    return self;
}

void serve_emit_destroy(serve_emit_t **self_p) {
    free(*self_p);
    *self_p = NULL;
}

/* The text of token t alone, for an alternative (bytes that are not UTF-8 on their
 * own, e.g. half a character, become U+FFFD). */
static void s_piece(const serve_emit_t *self, int32_t t, char *out, size_t cap) {
    size_t n = 0, o = 0;
    const char *raw = model_tokenizer_piece(self->tok, t, true, &n);
    for (size_t i = 0; raw && i < n && o + 4 < cap;) {
        size_t len = 0; /* the valid UTF-8 character starting at i, 1..4 bytes */
        for (size_t k = 1; k <= 4 && i + k <= n && !len; k++)
            if (msg_utf8_valid(raw + i, k, NULL))
                len = k;
        if (len) {
            memcpy(out + o, raw + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    out[o] = 0;
}

void serve_emit_logprobs(serve_emit_t *self, const serve_work_t *w, const float *lsm, int32_t t) {
    self->lp_valid = w->seq.logprobs;
    if (!w->seq.logprobs)
        return;
    self->lp = lsm[t] > -1e30f ? lsm[t] : -1e30f;
    s_piece(self, t, self->lp_piece, sizeof self->lp_piece);
    /* one pass keeping the k best in order (k <= 20: an insertion into a short list) */
    msg_top_t *top = self->lp_top;
    int k = w->top_logprobs, n = 0;
    for (int i = 0; i < self->n_vocab && k > 0; i++) {
        float v = lsm[i];
        if (v <= -1e30f || (n == k && v <= top[n - 1].logprob))
            continue;
        int j = n < k ? n++ : n - 1; /* ties keep the lower id first */
        for (; j > 0 && top[j - 1].logprob < v; j--)
            top[j] = top[j - 1];
        top[j].token = i;
        top[j].logprob = v;
    }
    for (int j = 0; j < n; j++)
        s_piece(self, top[j].token, top[j].text, sizeof top[j].text);
    self->lp_n_top = n;
}

/* The text of te: token's (through the detokenizer and the stopper), and at the end what
 * they still hold.  May turn te->finish into MSG_FINISH_STOP. */
static void s_text(serve_emit_t *self, serve_work_t *w, int index, int32_t token,
                   msg_text_event_t *te) {
    size_t n = 0;
    if (index >= 0 && token >= 0) {
        int pl = model_detok_push(&w->detok, token, self->piece, S_SCRATCH);
        n = model_stopper_push(&w->stopper, self->piece, (size_t)(pl > 0 ? pl : 0), self->text,
                               S_SCRATCH);
        if (w->stopper.stopped)
            te->finish = MSG_FINISH_STOP;
    }
    if (te->finish && te->finish != MSG_FINISH_STOP) {
        int pl = model_detok_flush(&w->detok, self->piece, S_SCRATCH);
        n += model_stopper_push(&w->stopper, self->piece, (size_t)(pl > 0 ? pl : 0), self->text + n,
                                S_SCRATCH - n);
        if (w->stopper.stopped)
            te->finish = MSG_FINISH_STOP;
        else
            n += model_stopper_flush(&w->stopper, self->text + n, S_SCRATCH - n);
    }
    self->text[n] = 0;
    te->text = self->text;
    te->text_len = n;
}

/* What the final event te of w says about the whole request: the last trace step, the
 * timings, the cache and draft counts. */
static void s_final(serve_emit_t *self, serve_work_t *w, uint64_t now, msg_text_event_t *te) {
    if (w->seq.trace) {
        static const char *const why[] = {"", "the model ended the text (end of generation)",
                                          "max_tokens reached", "a stop string matched",
                                          "cancelled"};
        serve_work_trace(w, self->name, now, "finish", "%s after %d tokens",
                         te->finish > 0 && te->finish <= MSG_FINISH_CANCELLED ? why[te->finish]
                                                                              : "?",
                         serve_step_done(&w->seq));
        te->steps = w->steps;
        te->n_steps = w->n_steps;
    }
    const serve_step_seq_t *s = &w->seq;
    uint64_t tp = s->t_prefill ? s->t_prefill : now, tf = s->t_first ? s->t_first : now;
    te->timings.queued_us = tp > w->t_arrival ? tp - w->t_arrival : 0;
    te->timings.prefill_us = tf - tp;
    te->timings.ttft_us = tf > w->t_arrival ? tf - w->t_arrival : 0;
    te->timings.decode_us = s->t_last > tf ? s->t_last - tf : 0;
    te->cached_tokens = s->n_cached < te->prompt_tokens ? s->n_cached : te->prompt_tokens;
    te->draft_proposed = s->proposed;
    te->draft_accepted = s->accepted;
}

int serve_emit_event(serve_emit_t *self, serve_work_t *w, int index, int32_t token, int finish,
                     uint64_t now_us, msg_text_event_t *te) {
    msg_text_event_init(te);
    te->rid = w->seq.rid;
    te->worker = self->index;
    te->index = index;
    te->token = token;
    te->count = serve_step_done(&w->seq);
    te->finish = finish;
    te->prompt_tokens = w->seq.n_prompt - w->seq.n_carried;
    s_text(self, w, index, token, te);
    if (self->lp_valid && index >= 0) {
        te->logprob = self->lp;
        te->has_logprob = true;
        te->top = self->lp_n_top ? self->lp_top : NULL;
        te->n_top = self->lp_n_top;
        memcpy(te->piece, self->lp_piece, sizeof te->piece);
    }
    self->lp_valid = false;
    if (te->finish)
        s_final(self, w, now_us, te);
    return te->finish;
}

void serve_emit_work_event(const msg_text_event_t *te, msg_work_event_t *ev) {
    msg_work_event_init(ev);
    ev->rid = te->rid;
    ev->index = te->index;
    ev->token = te->token;
    ev->finish = te->finish;
    ev->prompt_tokens = te->prompt_tokens;
    ev->timings = te->timings;
}
