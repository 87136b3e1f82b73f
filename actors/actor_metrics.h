/* actor_metrics.h - the metrics actor: serves the service's counters over HTTP in the
 * Prometheus text exposition format (0.0.4), and a status page that plots them
 * (docs/METRICS.md).  It gets the counters as any client does: a DEALER to the
 * frontend's client endpoint sending `stats` (docs/PROTOCOL.md), at most once per
 * cache_ms however often it is scraped.
 *
 * HTTP (libmicrohttpd, one internal thread, max_conns connections, conn_timeout_s):
 *   GET /metrics      -> 200 text/plain; version=0.0.4: every counter of the stats_reply
 *                        (histograms, counters, gauges; names in docs/METRICS.md);
 *                        503 when the frontend did not answer within stats_timeout_ms
 *   GET /  (/status)  -> 200 text/html: the status page (self-contained: inline JS/CSS)
 *   HEAD of those     -> the same headers
 *   another method    -> 405 (Allow: GET, HEAD); another path -> 404
 *
 * Command / reply table (inbound PULL socket):
 *   ping / stats_query -> pong / stats_answer to the frontend (its own counters:
 *                         http.*, scrapes, stats.*)
 *   stop              -> ends the actor
 * Its DEALER reads stats_reply (and drops anything else).
 *
 * Threads: the HTTP thread shares nothing mutable with the actor's thread.  It asks
 * for the rendered text over an inproc PAIR ("scrape SEQ") and gets a copy back in a
 * message ("SEQ", text); it reports what it served as "count NAME" messages.
 *
 * Options: actor_metrics_opts in actor_metrics.c (`strata actor --help`).
 *
 * Also here, for the actors that keep histograms of requests (frontend) and steps
 * (workers): the histograms of docs/METRICS.md, declared once (name and buckets), with
 * the calls that observe them and put them in the actor's counters.
 */
#ifndef ACTOR_METRICS_H
#define ACTOR_METRICS_H

#include "actor_runtime.h"
#include "base_hist.h"
#include "msg_client.h"

/* The options of metrics, loaded by the runtime through actor_metrics_opts (one
 * field per option, named after its key): actor_env_cfg(env) in the actor. */
typedef struct {
    const char *listen;     /* HTTP address of /metrics and the status page: HOST:PORT */
    const char *frontend;   /* client endpoint asked for stats */
    const char *client_key; /* CURVE key pair */
    int cache_ms;           /* a scrape within this long of the last stats answer is served */
    int stats_timeout_ms;   /* a scrape the frontend does not answer within this long gets 503 */
    int max_conns;          /* HTTP connections at once */
    int conn_timeout_s;     /* an idle HTTP connection is closed after this long */
} actor_metrics_cfg_t;

int actor_metrics_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_metrics_opts[];

/* Render counters (n of them, as a stats_reply carries them) as Prometheus text
 * exposition format 0.0.4 (docs/METRICS.md).  *out: malloc'd, NUL-terminated, *len bytes
 * (the caller frees it).  0, or -ENOMEM. */
int actor_metrics_render(const msg_counter_t *counters, int n, char **out, size_t *len);

/* ---- histograms kept by other actors (docs/METRICS.md) */

/* Per request, at its done (frontend): TTFT, time per output token, queue wait, the
 * prompt tokens that came from the KV cache, the share of draft tokens accepted. */
typedef struct actor_metrics_req_t actor_metrics_req_t;
/* NULL when out of memory (then observe and export do nothing). */
actor_metrics_req_t *actor_metrics_req_new(void);
void actor_metrics_req_destroy(actor_metrics_req_t **self_p);
/* Observe the usage and timings of one finished request (a done, as sent to the client).
 * NULL self: nothing. */
void actor_metrics_req_observe(actor_metrics_req_t *self, const msg_done_t *d);
/* Set their counters (name.bucket.le_B, name.sum, name.count) in c.  NULL self: nothing. */
void actor_metrics_req_export(const actor_metrics_req_t *self, actor_counters_t *c);

/* Per forward step (worker): the requests in the step's batch, the tokens of the step;
 * per admitted request: its prompt tokens reused from the prefix cache. */
typedef struct actor_metrics_step_t actor_metrics_step_t;
actor_metrics_step_t *actor_metrics_step_new(void);
void actor_metrics_step_destroy(actor_metrics_step_t **self_p);
void actor_metrics_step_observe(actor_metrics_step_t *self, int n_requests, int n_tokens);
void actor_metrics_step_prefix(actor_metrics_step_t *self, int cached_tokens);
void actor_metrics_step_export(const actor_metrics_step_t *self, actor_counters_t *c);

#endif
