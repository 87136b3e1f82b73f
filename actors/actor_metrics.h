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
 * The histograms the frontend and the workers keep (docs/METRICS.md) are library code:
 * serve/serve_metrics.h.
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

#endif
