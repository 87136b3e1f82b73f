/* serve_probes.c - the gateway's probes (serve_probes.h). */
#include "serve_probes.h"

#include <stdlib.h>
#include <string.h>

#define S_FRESH_US 2000000 /* a health reply older than this: the frontend is unreachable */

void serve_probes_take(serve_probes_t *self, msg_health_reply_t *reply, uint64_t now_us) {
    free(self->h.actors);
    self->h = *reply;
    reply->actors = NULL;
    reply->n_actors = 0;
    self->at_us = now_us;
}

void serve_probes_clear(serve_probes_t *self) {
    free(self->h.actors);
    memset(self, 0, sizeof *self);
}

int serve_probes_answer(const serve_probes_t *self, serve_probe_t probe, bool verbose,
                        uint64_t now_us, cJSON **body) {
    const msg_health_reply_t *h = &self->h;
    bool fresh = self->at_us && now_us - self->at_us < S_FRESH_US;
    bool ok;
    const char *status;
    switch (probe) {
    case SERVE_PROBE_LIVE:
        ok = true;
        status = "ok";
        break;
    case SERVE_PROBE_STARTUP:
        ok = fresh && h->started;
        status = ok ? "ok" : fresh ? "starting" : "unavailable";
        break;
    case SERVE_PROBE_PROGRESS:
        ok = fresh && h->progress;
        status = ok ? "ok" : fresh ? "stalled" : "unavailable";
        break;
    default: /* SERVE_PROBE_READY */
        ok = fresh && h->ready;
        status = ok            ? "ok"
                 : !fresh      ? "unavailable"
                 : h->draining ? "draining"
                 : !h->started ? "starting"
                               : "not_ready";
        break;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", status);
    if (verbose) {
        cJSON *c = cJSON_AddObjectToObject(o, "checks");
        cJSON_AddBoolToObject(c, "frontend_reachable", fresh);
        cJSON_AddBoolToObject(c, "started", fresh && h->started);
        cJSON_AddBoolToObject(c, "ready", fresh && h->ready);
        cJSON_AddBoolToObject(c, "progress", fresh && h->progress);
        cJSON_AddBoolToObject(c, "draining", fresh && h->draining);
        cJSON_AddBoolToObject(c, "all_actors_ready", fresh && h->ok);
        cJSON_AddNumberToObject(o, "in_flight", fresh ? (double)h->in_flight : 0);
        if (self->at_us)
            cJSON_AddNumberToObject(o, "health_age_ms", (double)(now_us - self->at_us) / 1000);
        cJSON *a = cJSON_AddArrayToObject(o, "actors");
        for (int i = 0; fresh && i < h->n_actors; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "name", h->actors[i].name);
            cJSON_AddStringToObject(x, "state", msg_state_name(h->actors[i].state));
            cJSON_AddNumberToObject(x, "last_seen_ms", (double)h->actors[i].last_seen_ms);
            cJSON_AddItemToArray(a, x);
        }
    }
    *body = o;
    return ok ? 200 : 503;
}
