/* serve_metrics.c - the request and step histograms of docs/METRICS.md (buckets declared
 * here, once), observed by the frontend and the workers and exported as counters. */
#include "serve_metrics.h"

#include <stdlib.h>

struct serve_metrics_req_t {
    base_hist_t *ttft;   /* ttft_us: arrival -> first token */
    base_hist_t *tpot;   /* tpot_us: decode time / (completion tokens - 1) */
    base_hist_t *queue;  /* queue_us: arrival -> start of prefill */
    base_hist_t *e2e;    /* latency_us: arrival -> last token (ttft + decode) */
    base_hist_t *cached; /* cached_tokens: prompt tokens reused from the KV cache (T0..T2) */
    base_hist_t *accept; /* draft_accept_pct: accepted * 100 / proposed (with drafts only) */
};

serve_metrics_req_t *serve_metrics_req_new(void) {
    serve_metrics_req_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->ttft = base_hist_new("ttft_us", 1000, 100000000);    /* 1 ms .. 100 s */
    self->tpot = base_hist_new("tpot_us", 100, 10000000);      /* 0.1 ms .. 10 s */
    self->queue = base_hist_new("queue_us", 100, 100000000);   /* 0.1 ms .. 100 s */
    self->e2e = base_hist_new("latency_us", 1000, 1000000000); /* 1 ms .. 1000 s */
    self->cached = base_hist_new("cached_tokens", 1, 100000);
    self->accept = base_hist_new("draft_accept_pct", 1, 100);
    if (!self->ttft || !self->tpot || !self->queue || !self->e2e || !self->cached || !self->accept)
        serve_metrics_req_destroy(&self);
    return self;
}

void serve_metrics_req_destroy(serve_metrics_req_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_metrics_req_t *self = *self_p;
    base_hist_destroy(&self->ttft);
    base_hist_destroy(&self->tpot);
    base_hist_destroy(&self->queue);
    base_hist_destroy(&self->e2e);
    base_hist_destroy(&self->cached);
    base_hist_destroy(&self->accept);
    free(self);
    *self_p = NULL;
}

static int64_t s_us(double ms) {
    return ms > 0 ? (int64_t)(ms * 1000.0 + 0.5) : 0;
}

void serve_metrics_req_observe(serve_metrics_req_t *self, const msg_done_t *d) {
    if (!self)
        return;
    const msg_timings_ms_t *t = &d->timings;
    if (d->usage.completion_tokens > 0) { /* a request that produced no token has no TTFT */
        base_hist_observe(self->ttft, s_us(t->ttft_ms));
        base_hist_observe(self->e2e, s_us(t->ttft_ms + t->decode_ms));
    }
    if (d->usage.completion_tokens > 1)
        base_hist_observe(self->tpot, s_us(t->decode_ms / (d->usage.completion_tokens - 1)));
    base_hist_observe(self->queue, s_us(t->queued_ms));
    base_hist_observe(self->cached, d->usage.cached_tokens);
    if (d->usage.draft_proposed > 0)
        base_hist_observe(self->accept,
                          (int64_t)d->usage.draft_accepted * 100 / d->usage.draft_proposed);
}

void serve_metrics_req_export(const serve_metrics_req_t *self, base_hist_put_fn put, void *user) {
    if (!self)
        return;
    base_hist_export(self->ttft, put, user);
    base_hist_export(self->tpot, put, user);
    base_hist_export(self->queue, put, user);
    base_hist_export(self->e2e, put, user);
    base_hist_export(self->cached, put, user);
    base_hist_export(self->accept, put, user);
}

struct serve_metrics_step_t {
    base_hist_t *batch;  /* batch_size: requests in one forward step */
    base_hist_t *tokens; /* step_tokens: tokens of one forward step */
    base_hist_t *prefix; /* prefix_hit_tokens: prompt tokens attached from the prefix cache */
};

serve_metrics_step_t *serve_metrics_step_new(void) {
    serve_metrics_step_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->batch = base_hist_new("batch_size", 1, 5000);
    self->tokens = base_hist_new("step_tokens", 1, 100000);
    self->prefix = base_hist_new("prefix_hit_tokens", 1, 100000);
    if (!self->batch || !self->tokens || !self->prefix)
        serve_metrics_step_destroy(&self);
    return self;
}

void serve_metrics_step_destroy(serve_metrics_step_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_metrics_step_t *self = *self_p;
    base_hist_destroy(&self->batch);
    base_hist_destroy(&self->tokens);
    base_hist_destroy(&self->prefix);
    free(self);
    *self_p = NULL;
}

void serve_metrics_step_observe(serve_metrics_step_t *self, int n_requests, int n_tokens) {
    if (!self)
        return;
    base_hist_observe(self->batch, n_requests);
    base_hist_observe(self->tokens, n_tokens);
}

void serve_metrics_step_prefix(serve_metrics_step_t *self, int cached_tokens) {
    if (self)
        base_hist_observe(self->prefix, cached_tokens);
}

void serve_metrics_step_export(const serve_metrics_step_t *self, base_hist_put_fn put, void *user) {
    if (!self)
        return;
    base_hist_export(self->batch, put, user);
    base_hist_export(self->tokens, put, user);
    base_hist_export(self->prefix, put, user);
}
