/* serve_metrics.h - the histograms of docs/METRICS.md that the serving actors keep: per
 * finished request (the frontend) and per forward step (the workers), declared once (name
 * and buckets), with the calls that observe them and export them as plain counters.
 * Plain data owned by one thread; no sockets (the actor puts the export in its counters). */
#ifndef SERVE_METRICS_H
#define SERVE_METRICS_H

#include "base_hist.h"
#include "msg_client.h"

/* Per request: ttft_us, tpot_us, queue_us, latency_us, cached_tokens, draft_accept_pct.
 * Every call accepts NULL (out of memory at new: no histograms, nothing else changes). */
typedef struct serve_metrics_req_t serve_metrics_req_t;
/* NULL when out of memory. */
serve_metrics_req_t *serve_metrics_req_new(void);
/* Frees *self_p and nulls it; safe twice. */
void serve_metrics_req_destroy(serve_metrics_req_t **self_p);
/* One finished request's done (borrowed): its timings and usage.  A request that produced
 * no token has no TTFT; one with fewer than 2 tokens no TPOT; one without drafts no
 * acceptance. */
void serve_metrics_req_observe(serve_metrics_req_t *self, const msg_done_t *d);
/* Every bucket, count and sum as counters, through put (base_hist_export). */
void serve_metrics_req_export(const serve_metrics_req_t *self, base_hist_put_fn put, void *user);

/* Per forward step: batch_size, step_tokens, prefix_hit_tokens.  NULL-safe likewise. */
typedef struct serve_metrics_step_t serve_metrics_step_t;
serve_metrics_step_t *serve_metrics_step_new(void);
void serve_metrics_step_destroy(serve_metrics_step_t **self_p);
/* One step of n_requests requests and n_tokens tokens. */
void serve_metrics_step_observe(serve_metrics_step_t *self, int n_requests, int n_tokens);
/* One admission that attached cached_tokens prompt tokens from the prefix cache. */
void serve_metrics_step_prefix(serve_metrics_step_t *self, int cached_tokens);
void serve_metrics_step_export(const serve_metrics_step_t *self, base_hist_put_fn put, void *user);

#endif
