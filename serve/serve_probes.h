/* serve_probes.h - the HTTP gateway's probes, each with one meaning (docs/OPERATIONS.md):
 *
 *   /livez      liveness of this process: its loop answers (always 200 when answered)
 *   /startupz   startup: every actor answered once since start (the models are loaded)
 *   /readyz     readiness: takes traffic -- the frontend answers (its health at most 2 s
 *               old), is not draining, and the tokenizer, the router and a worker are up;
 *               /health is the same probe
 *   /progressz  forward progress: no request in flight has stalled (its worker answers
 *               heartbeats and produced a token within the frontend's progress_ms)
 *
 * 200 when the probe holds, else 503; the body is {"status": ...}, and with ?verbose every
 * check and the actors' states.  Library code: the gateway keeps the frontend's last
 * health_reply (every 500 ms) and answers from it. */
#ifndef SERVE_PROBES_H
#define SERVE_PROBES_H

#include "msg_client.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    SERVE_PROBE_LIVE,
    SERVE_PROBE_STARTUP,
    SERVE_PROBE_READY,
    SERVE_PROBE_PROGRESS,
} serve_probe_t;

/* The frontend's health as the gateway last heard it. */
typedef struct {
    uint64_t at_us;       /* when (0: never) */
    msg_health_reply_t h; /* its reply (actors owned: serve_probes_take / _clear) */
} serve_probes_t;

/* Keep reply (its actors array taken over; reply is left empty) heard at now_us. */
void serve_probes_take(serve_probes_t *self, msg_health_reply_t *reply, uint64_t now_us);
/* Free what it keeps; zeroed. */
void serve_probes_clear(serve_probes_t *self);
/* The answer to probe at now_us: the HTTP status (200 or 503) and its body (*body: a new
 * cJSON object, the caller's). */
int serve_probes_answer(const serve_probes_t *self, serve_probe_t probe, bool verbose,
                        uint64_t now_us, cJSON **body);

#endif
