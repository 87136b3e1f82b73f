/* serve_events.c - see serve_events.h. */
#include "serve_events.h"

#include "base_spans.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static double s_ms(uint64_t us) {
    return (double)us / 1000.0;
}

void serve_events_token(const serve_request_t *r, const msg_text_event_t *te, msg_token_t *t) {
    msg_token_init(t);
    msg_set_str(t->id, sizeof t->id, r->id);
    t->index = te->index;
    t->token = te->token;
    t->text = te->text;
    t->text_len = te->text_len;
    t->logprob = te->logprob;
    t->has_logprob = te->has_logprob;
    t->top = te->top;
    t->n_top = te->n_top;
    memcpy(t->piece, te->piece, sizeof t->piece);
}

int serve_events_done(const serve_request_t *r, const msg_text_event_t *te, msg_done_t *d) {
    msg_done_init(d);
    msg_set_str(d->id, sizeof d->id, r->id);
    d->finish_reason = te->finish;
    if (r->lps) {
        d->logprobs = r->lps;
        d->n_logprobs = r->n_tokens;
    }
    if (!r->stream) {
        d->text = r->text ? r->text : "";
        d->text_len = r->text_len;
    } else if (te->index < 0 && te->text_len) { /* held-back text flushed at the end */
        d->text = te->text;
        d->text_len = te->text_len;
    }
    d->usage.prompt_tokens = te->prompt_tokens;
    d->usage.completion_tokens = r->n_tokens;
    d->usage.cached_tokens = te->cached_tokens;
    d->usage.draft_proposed = te->draft_proposed;
    d->usage.draft_accepted = te->draft_accepted;
    d->timings.queued_ms = s_ms(te->timings.queued_us);
    d->timings.prefill_ms = s_ms(te->timings.prefill_us);
    d->timings.decode_ms = s_ms(te->timings.decode_us);
    d->timings.ttft_ms = s_ms(te->timings.ttft_us);
    if (r->tools)
        return serve_requests_tool_calls(r->text, r->text_len, r->id, &d->tool_calls,
                                         &d->n_tool_calls);
    return 0;
}

void serve_events_done_clear(msg_done_t *d) {
    serve_requests_tool_calls_free(d->tool_calls, d->n_tool_calls);
    d->tool_calls = NULL;
    d->n_tool_calls = 0;
}

int serve_events_trace(const serve_request_t *r, const msg_text_event_t *te, uint64_t now_us,
                       msg_trace_t *t) {
    int64_t total = now_us > r->t_arrival_us ? (int64_t)(now_us - r->t_arrival_us) : 0;
    int n = r->n_steps + te->n_steps + 1;
    if (n > MSG_MAX_TRACE_STEPS)
        n = MSG_MAX_TRACE_STEPS;
    msg_trace_init(t);
    msg_set_str(t->id, sizeof t->id, r->id);
    if (!(t->steps = malloc((size_t)n * sizeof *t->steps)))
        return -ENOMEM;
    int k = 0;
    for (int i = 0; i < r->n_steps && k < n - 1; i++)
        t->steps[k++] = r->steps[i];
    for (int i = 0; i < te->n_steps && k < n - 1; i++)
        t->steps[k++] = te->steps[i];
    int64_t from = k ? t->steps[k - 1].t_us + t->steps[k - 1].dur_us : 0; /* worker -> here */
    msg_trace_step_fill(&t->steps[k++], "frontend", "deliver", from < total ? from : total, total,
                        "the final event reached the frontend");
    t->n_steps = k;
    t->total_ms = (double)total / 1000.0;
    /* sources: spans of the completion (24 bytes or more: a phrase, not a word) in the input */
    const char *srcs[MSG_MAX_MESSAGES];
    size_t lens[MSG_MAX_MESSAGES];
    int ns = 0;
    if (r->gen.prompt) {
        srcs[ns] = r->gen.prompt;
        lens[ns++] = r->gen.prompt_len;
    }
    for (int i = 0; i < r->gen.n_messages && ns < MSG_MAX_MESSAGES; i++) {
        srcs[ns] = r->gen.messages[i].content;
        lens[ns++] = r->gen.messages[i].content_len;
    }
    base_span_t spans[MSG_MAX_SOURCES];
    int m = base_spans_find(r->text ? r->text : "", r->text_len, srcs, lens, ns, 24, spans,
                            MSG_MAX_SOURCES);
    if (m > 0 && !(t->sources = calloc((size_t)m, sizeof *t->sources))) {
        serve_events_trace_clear(t);
        return -ENOMEM;
    }
    for (int i = 0; i < m; i++)
        t->sources[t->n_sources++] =
            (msg_source_t){(int)spans[i].out_start, (int)spans[i].out_end,
                           r->gen.prompt ? -1 : spans[i].src, (int)spans[i].src_start,
                           (int)(spans[i].src_start + spans[i].out_end - spans[i].out_start)};
    return 0;
}

void serve_events_trace_clear(msg_trace_t *t) {
    free(t->steps);
    free(t->sources);
    t->steps = NULL;
    t->sources = NULL;
    t->n_steps = t->n_sources = 0;
}
