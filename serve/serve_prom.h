/* serve_prom.h - the counters of a stats_reply as Prometheus text exposition format 0.0.4
 * (docs/METRICS.md): families by actor kind with an actor label, counters as _total, gauges
 * by name, units as seconds, counter triples as histograms.  Library code: counters in,
 * text out (the metrics actor serves it). */
#ifndef SERVE_PROM_H
#define SERVE_PROM_H

#include "msg_client.h"

#include <stddef.h>

/* Render counters (n of them, as a stats_reply carries them).  *out: malloc'd,
 * NUL-terminated, *len bytes (the caller frees it).  0, or -ENOMEM. */
int serve_prom_render(const msg_counter_t *counters, int n, char **out, size_t *len);

#endif
