/* serve_work.c - see serve_work.h.  Intake checks the request in the order a client
 * reads its error (ids, logit_bias, sampling, context), then builds the request: its
 * history (prompt then room for max_tokens), sampling, stop strings, trace chain and
 * grammar. */
#include "serve_work.h"

#include "model_spec.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_SCRATCH 8192 /* a token's bytes plus held-back stop-string prefixes fit easily */

/* Refuse: fill no, clear w, return the error. */
static int s_refuse(serve_work_t *w, serve_work_refusal_t *no, int rc, int code, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));
static int s_refuse(serve_work_t *w, serve_work_refusal_t *no, int rc, int code, const char *fmt,
                    ...) {
    no->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(no->why, sizeof no->why, fmt, ap);
    va_end(ap);
    serve_work_clear(w);
    return rc;
}

void serve_work_context_error(char *why, size_t cap, int context, int n_prompt, int max_tokens) {
    if (max_tokens)
        snprintf(why, cap,
                 "This model's maximum context length is %d tokens. However, you requested %d "
                 "tokens (%d in the messages, %d in the completion). Please reduce the length "
                 "of the messages or completion.",
                 context, n_prompt + max_tokens, n_prompt, max_tokens);
    else
        snprintf(why, cap,
                 "This model's maximum context length is %d tokens. However, your messages "
                 "resulted in %d tokens. Please reduce the length of the messages.",
                 context, n_prompt);
}

/* q's sampling parameters; bias borrows q's (copied into the request later). */
static model_sampler_params_t s_sampling(const msg_work_request_t *q) {
    return (model_sampler_params_t){.temperature = q->sampling.temperature,
                                    .top_k = q->sampling.top_k,
                                    .top_p = q->sampling.top_p,
                                    .min_p = q->sampling.min_p,
                                    .repeat_penalty = q->sampling.repeat_penalty,
                                    .repeat_last_n = q->sampling.repeat_last_n,
                                    .seed = q->sampling.seed,
                                    .presence_penalty = q->sampling.presence_penalty,
                                    .frequency_penalty = q->sampling.frequency_penalty,
                                    /* the completion starts after the prompt: carried
                                       tokens are completion tokens */
                                    .gen_start = q->n_tokens - q->n_gen,
                                    .bias = (const model_logit_bias_t *)q->logit_bias,
                                    .n_bias = q->n_logit_bias};
}

/* q's history as w's: prompt (and carried tokens), then room for `room` more.  0 or
 * -ENOMEM. */
static int s_history(serve_work_t *w, const msg_work_request_t *q, int room) {
    w->seq.hist = malloc(((size_t)q->n_tokens + (size_t)room) * sizeof *w->seq.hist);
    if (!w->seq.hist)
        return -ENOMEM;
    memcpy(w->seq.hist, q->tokens, (size_t)q->n_tokens * sizeof *w->seq.hist);
    w->seq.rid = q->rid;
    w->seq.n_prompt = w->seq.n_hist = q->n_tokens;
    w->t_arrival = q->t_arrival_us;
    return 0;
}

/* q's logit_bias as w's own (the request outlives q).  0 or -ENOMEM. */
static int s_bias(serve_work_t *w, const msg_work_request_t *q) {
    if (!q->n_logit_bias)
        return 0;
    if (!(w->bias = malloc((size_t)q->n_logit_bias * sizeof *w->bias)))
        return -ENOMEM;
    for (int i = 0; i < q->n_logit_bias; i++)
        w->bias[i] = (model_logit_bias_t){q->logit_bias[i].token, q->logit_bias[i].bias};
    w->seq.sp.bias = w->bias;
    return 0;
}

/* The chain of decisions so far (tokenizer, router), when traced. */
static void s_chain(serve_work_t *w, const msg_work_request_t *q) {
    w->seq.trace = q->trace;
    if (!q->trace || !q->n_steps || !(w->steps = malloc((size_t)q->n_steps * sizeof *w->steps)))
        return; /* out of memory: the worker's steps alone */
    memcpy(w->steps, q->steps, (size_t)q->n_steps * sizeof *w->steps);
    w->n_steps = w->cap_steps = q->n_steps;
    w->trace_end_us = q->steps[q->n_steps - 1].t_us + q->steps[q->n_steps - 1].dur_us;
}

/* w follows GBNF text: its grammar, and a fresh state replayed over the completion tokens
 * it carries (the state is a function of them, so a resumed request goes on exactly as
 * the uninterrupted one).  0, or -EINVAL / -ENOMEM with the reason in no. */
static int s_grammar(serve_work_t *w, const char *text, serve_grammars_t *gs,
                     serve_work_refusal_t *no) {
    no->grammar = true;
    if (!gs)
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "grammars are not supported here");
    char err[256];
    if (!(w->gram = serve_grammars_get(gs, text, err, sizeof err)))
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "%s", err);
    w->seq.gindex = serve_grammar_index(w->gram);
    if (!(w->seq.grammar = grammar_state_new(serve_grammar_grammar(w->gram))))
        return s_refuse(w, no, -ENOMEM, MSG_CODE_BAD_REQUEST, "out of memory");
    int from = w->seq.n_prompt - w->seq.n_carried;
    for (int i = from; i < w->seq.n_prompt; i++)
        if (grammar_state_accept_token(w->seq.grammar, w->seq.gindex, w->seq.hist[i]))
            return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST,
                            "completion token %d does not follow the grammar", i - from);
    no->grammar = false;
    return 0;
}

/* The checks of q that need no allocation: its ids and sampling.  0 or -EINVAL. */
static int s_check(serve_work_t *w, const msg_work_request_t *q, const serve_work_config_t *cfg,
                   serve_work_refusal_t *no) {
    for (int i = 0; i < q->n_tokens; i++)
        if (q->tokens[i] < 0 || q->tokens[i] >= cfg->n_vocab)
            return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "token id out of the vocabulary");
    for (int i = 0; i < q->n_logit_bias; i++)
        if (q->logit_bias[i].token >= cfg->n_vocab)
            return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST,
                            "logit_bias: token %d is not in the vocabulary (0..%d)",
                            (int)q->logit_bias[i].token, cfg->n_vocab - 1);
    model_sampler_params_t sp = s_sampling(q);
    char why[128];
    if (model_sampler_check(&sp, why, sizeof why))
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "%s", why);
    return 0;
}

int serve_work_kv_compress(serve_work_config_t *cfg, const char *spec, const model_config_t *mc,
                           bool on_device, char *err, size_t errlen) {
    char why[160];
    if (kv_compress_parse(spec ? spec : "none", &cfg->kv_compress, why, sizeof why)) {
        snprintf(err, errlen, "kv_compress=%s: %s", spec, why);
        return -1;
    }
    cfg->kv_groups = mc->n_layer * mc->n_head_kv;
    cfg->kv_compress_off = mc->swa_window > 0
                               ? "this model has sliding-window layers (their window counts "
                                 "positions; compressed rows are not positions): full-attention "
                                 "models only"
                           : on_device ? "this worker keeps its KV on a device: the CPU worker only"
                                       : NULL;
    if (cfg->kv_compress.kind != KV_COMPRESS_NONE && cfg->kv_compress_off) {
        snprintf(err, errlen, "kv_compress=%s: %s", spec, cfg->kv_compress_off);
        return -1;
    }
    return 0;
}

/* q's KV compression (its own spec, else the worker's default) into w.  0 or -EINVAL
 * (refused: no says why) or -ENOMEM. */
static int s_kv_compress(serve_work_t *w, const msg_work_request_t *q,
                         const serve_work_config_t *cfg, int max_tokens, serve_work_refusal_t *no) {
    kv_compress_t kc = cfg->kv_compress;
    char why[160];
    if (q->kv_compress[0] && kv_compress_parse(q->kv_compress, &kc, why, sizeof why))
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "kv_compress: %s", why);
    if (kc.kind == KV_COMPRESS_NONE)
        return 0;
    if (cfg->kv_compress_off)
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "kv_compress: %s",
                        cfg->kv_compress_off);
    /* rows never outnumber positions: the prompt, the completion and a step's drafts */
    int rows = q->n_tokens + max_tokens + MODEL_SPEC_MAX_K + 1;
    if (kv_compress_seq_init(&w->seq.kvc, &kc, cfg->kv_groups, rows))
        return s_refuse(w, no, -ENOMEM, MSG_CODE_INTERNAL, "out of memory");
    return 0;
}

int serve_work_init(serve_work_t *w, const msg_work_request_t *q, const serve_work_config_t *cfg,
                    serve_work_refusal_t *no) {
    memset(no, 0, sizeof *no);
    if (s_check(w, q, cfg, no))
        return -EINVAL;
    /* fit_context: max_tokens is a ceiling, lowered to what the context leaves after the
     * prompt (carried completion tokens count as completion) */
    int max_tokens = q->max_tokens, n_prompt = q->n_tokens - q->n_gen;
    int room = cfg->context - n_prompt;
    if (q->fit_context && room < max_tokens) {
        if (room < 1 || room < q->n_gen) {
            no->code = MSG_CODE_CONTEXT;
            serve_work_context_error(no->why, sizeof no->why, cfg->context, n_prompt, 0);
            serve_work_clear(w);
            return -EINVAL;
        }
        max_tokens = room;
    }
    w->seq.sp = s_sampling(q);
    w->seq.sp.bias = NULL;
    if (s_history(w, q, max_tokens) || s_bias(w, q))
        return s_refuse(w, no, -ENOMEM, MSG_CODE_INTERNAL, "out of memory");
    w->seq.n_carried = q->n_gen;
    w->seq.max_tokens = max_tokens;
    w->seq.priority = q->priority;
    model_detok_init(&w->detok, cfg->tok);
    const char *stops[MSG_MAX_STOP];
    int n_stop = q->n_stop < MSG_MAX_STOP ? q->n_stop : MSG_MAX_STOP;
    for (int i = 0; i < n_stop; i++)
        stops[i] = q->stop[i];
    if (model_stopper_init(&w->stopper, stops, n_stop))
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST, "invalid stop strings");
    w->seq.pin_tokens = q->pin_tokens < w->seq.n_prompt ? q->pin_tokens : w->seq.n_prompt;
    w->seq.logprobs = q->logprobs || q->top_logprobs > 0;
    w->top_logprobs = q->top_logprobs;
    s_chain(w, q);
    model_spec_adapt_init(&w->seq.adapt, cfg->spec_k, cfg->spec_k_max);
    int krc = s_kv_compress(w, q, cfg, max_tokens, no);
    if (krc)
        return krc;
    if (q->grammar)
        return s_grammar(w, q->grammar, cfg->grammars, no);
    return 0;
}

int serve_work_init_embed(serve_work_t *w, const msg_work_request_t *q,
                          const serve_work_config_t *cfg, serve_work_refusal_t *no) {
    memset(no, 0, sizeof *no);
    for (int i = 0; i < q->n_tokens; i++)
        if (q->tokens[i] < 0 || q->tokens[i] >= cfg->n_vocab)
            return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST,
                            "token id %d is out of the vocabulary (%d tokens)", q->tokens[i],
                            cfg->n_vocab);
    if (q->n_tokens + 1 > cfg->max_ctx)
        return s_refuse(w, no, -EINVAL, MSG_CODE_BAD_REQUEST,
                        "the input has %d tokens: it " SERVE_STEP_NO_ROOM " (%d tokens)",
                        q->n_tokens, cfg->max_ctx - 1);
    w->seq.embed_sum = calloc((size_t)cfg->d_model, sizeof(double));
    if (!w->seq.embed_sum || s_history(w, q, 1))
        return s_refuse(w, no, -ENOMEM, MSG_CODE_INTERNAL, "out of memory");
    w->seq.max_tokens = 1; /* the scheduler's unit; nothing is generated */
    model_detok_init(&w->detok, cfg->tok);
    return 0;
}

void serve_work_clear(serve_work_t *w) {
    model_stopper_free(&w->stopper);
    grammar_state_destroy(&w->seq.grammar);
    serve_grammar_release(&w->gram);
    free(w->bias);
    free(w->steps);
    free(w->seq.hist);
    free(w->seq.embed_sum);
    kv_compress_seq_free(&w->seq.kvc);
    memset(w, 0, sizeof *w);
}

int serve_work_replay(serve_work_t *w) {
    char piece[S_SCRATCH], text[S_SCRATCH];
    for (int i = w->seq.n_prompt - w->seq.n_carried; i < w->seq.n_prompt; i++) {
        int pl = model_detok_push(&w->detok, w->seq.hist[i], piece, sizeof piece);
        model_stopper_push(&w->stopper, piece, (size_t)(pl > 0 ? pl : 0), text, sizeof text);
    }
    if (w->stopper.stopped)
        return MSG_FINISH_STOP;
    if (w->seq.n_carried >= w->seq.max_tokens)
        return MSG_FINISH_LENGTH;
    if (w->seq.grammar && !grammar_state_can_continue(w->seq.grammar))
        return MSG_FINISH_EOS; /* the carried tokens complete the grammar */
    return 0;
}

bool serve_work_park_wanted(int n_prompt, int in_t0, int block_size) {
    return in_t0 / block_size < (n_prompt - 1) / block_size;
}

void serve_work_trace(serve_work_t *w, const char *who, uint64_t now_us, const char *what,
                      const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    serve_work_vtrace(w, who, now_us, what, fmt, ap);
    va_end(ap);
}

void serve_work_vtrace(serve_work_t *w, const char *who, uint64_t now_us, const char *what,
                       const char *fmt, va_list ap) {
    if (!w->seq.trace)
        return;
    int64_t end = now_us > w->t_arrival ? (int64_t)(now_us - w->t_arrival) : w->trace_end_us;
    if (end < w->trace_end_us)
        end = w->trace_end_us;
    if (w->n_steps >= MSG_MAX_TRACE_STEPS - 8) {
        /* full: the last step becomes a summary of it and every step after it */
        msg_trace_step_t *last = &w->steps[w->n_steps - 1];
        w->n_more = w->n_more ? w->n_more + 1 : 2;
        msg_trace_step_fill(last, who, "more", last->t_us, end,
                            "%d further steps (the trace holds %d)", w->n_more,
                            MSG_MAX_TRACE_STEPS - 8);
        w->trace_end_us = end;
        return;
    }
    if (w->n_steps == w->cap_steps) {
        int cap = w->cap_steps ? 2 * w->cap_steps : 16;
        msg_trace_step_t *x = realloc(w->steps, (size_t)cap * sizeof *x);
        if (!x)
            return;
        w->steps = x;
        w->cap_steps = cap;
    }
    msg_trace_step_vfill(&w->steps[w->n_steps++], who, what, w->trace_end_us, end, fmt, ap);
    w->trace_end_us = end;
}
