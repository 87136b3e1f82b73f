/* actor_router_kv.c - KV events into the router's dispatch (actor_router_kv.h). */
#include "actor_router_kv.h"

#include "base_log.h"
#include "kv_events.h"
#include "serve_prefix.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct actor_router_kv_t {
    serve_prefix_t *prefix; /* the workers' cached blocks */
    int n_workers;
    zsock_t **socks;            /* (2 * n_workers) SUB of worker i at i, DEALER (replay, or
                                   NULL) at n_workers + i */
    bool *replaying;            /* (n_workers) a replay was asked and has not ended */
    double weight;              /* option prefix_weight */
    actor_counters_t *counters; /* the router loop's */
};

/* Endpoint of worker i from a pattern (port + i) or a comma-separated list (the i-th);
 * a bind address's wildcard host ("*", as the workers were given it) becomes
 * 127.0.0.1. */
static int s_endpoint(const char *spec, int i, char *out, size_t len) {
    if (!strncmp(spec, "tcp://*:", 8)) {
        char local[256];
        int n = snprintf(local, sizeof local, "tcp://127.0.0.1:%s", spec + 8);
        if (n < 0 || (size_t)n >= sizeof local)
            return -EINVAL;
        return s_endpoint(local, i, out, len);
    }
    if (!strchr(spec, ','))
        return kv_events_endpoint_for(spec, i, out, len);
    const char *p = spec;
    for (int k = 0; k < i && p; k++)
        p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    if (!p)
        return -EINVAL;
    size_t n = strcspn(p, ",");
    if (!n || n >= len)
        return -EINVAL;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

actor_router_kv_t *actor_router_kv_new(const char *from, const char *replay_from, double weight,
                                       int n_workers, actor_counters_t *counters, char *err,
                                       size_t errlen) {
    if (errlen)
        err[0] = '\0';
    if (!from || !*from)
        return NULL;
    actor_router_kv_t *self = calloc(1, sizeof *self);
    if (!self || !(self->prefix = serve_prefix_new(n_workers)) ||
        !(self->socks = calloc(2 * (size_t)n_workers, sizeof *self->socks)) ||
        !(self->replaying = calloc((size_t)n_workers, sizeof *self->replaying))) {
        snprintf(err, errlen, "kv_events_from: out of memory");
        goto fail;
    }
    self->n_workers = n_workers;
    self->weight = weight;
    self->counters = counters;
    for (int i = 0; i < n_workers; i++) {
        char ep[512];
        if (s_endpoint(from, i, ep, sizeof ep)) {
            snprintf(err, errlen, "kv_events_from '%s': no endpoint for worker%d", from, i);
            goto fail;
        }
        if (!(self->socks[i] = zsock_new_sub(ep, ""))) {
            snprintf(err, errlen, "kv_events_from: cannot connect to %s", ep);
            goto fail;
        }
        if (!replay_from || !*replay_from)
            continue;
        if (s_endpoint(replay_from, i, ep, sizeof ep) ||
            !(self->socks[n_workers + i] = zsock_new_dealer(ep))) {
            snprintf(err, errlen, "kv_events_replay_from '%s': no endpoint for worker%d",
                     replay_from, i);
            goto fail;
        }
        zsock_set_linger(self->socks[n_workers + i], 0);
    }
    return self;
fail:
    actor_router_kv_destroy(&self);
    return NULL;
}

void actor_router_kv_destroy(actor_router_kv_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_router_kv_t *self = *self_p;
    for (int i = 0; self->socks && i < 2 * self->n_workers; i++)
        zsock_destroy(&self->socks[i]);
    free(self->socks);
    free(self->replaying);
    serve_prefix_destroy(&self->prefix);
    free(self);
    *self_p = NULL;
}

zsock_t **actor_router_kv_sockets(actor_router_kv_t *self, int *n) {
    *n = 2 * self->n_workers;
    return self->socks;
}

static int64_t s_seq(zframe_t *f) {
    if (!f || zframe_size(f) != 8)
        return -2;
    uint64_t q = 0;
    for (int i = 0; i < 8; i++)
        q = q << 8 | zframe_data(f)[i];
    return (int64_t)q;
}

/* Apply one batch of worker w; on a gap, ask its replay socket (once at a time). */
static void s_apply(actor_router_kv_t *self, int w, int64_t seq, zframe_t *body) {
    int64_t expect = serve_prefix_next_seq(self->prefix, w);
    zsock_t *rep = self->socks[self->n_workers + w];
    if (seq > expect && rep && !self->replaying[w]) {
        uint8_t sb[8];
        for (int i = 0; i < 8; i++)
            sb[i] = (uint8_t)((uint64_t)expect >> (56 - 8 * i));
        if (zsock_send(rep, "zb", sb, (size_t)8) == 0) {
            self->replaying[w] = true;
            actor_counters_add(self->counters, "kv_events.replays", 1);
        }
    }
    if (serve_prefix_apply(self->prefix, w, seq, zframe_data(body), zframe_size(body)) < 0)
        actor_counters_add(self->counters, "kv_events.bad", 1);
}

void actor_router_kv_read(actor_router_kv_t *self, zsock_t *sock) {
    int w = -1;
    for (int i = 0; i < 2 * self->n_workers && w < 0; i++)
        if (self->socks[i] == sock)
            w = i;
    zmsg_t *m = zmsg_recv_nowait(sock);
    if (w < 0 || !m) {
        zmsg_destroy(&m);
        return;
    }
    bool replay = w >= self->n_workers;
    w %= self->n_workers;
    zframe_t *first = zmsg_pop(m); /* the topic, or a replay's empty delimiter */
    zframe_destroy(&first);
    zframe_t *seqf = zmsg_pop(m), *body = zmsg_pop(m);
    int64_t seq = s_seq(seqf);
    if (replay && seq == -1)
        self->replaying[w] = false; /* the end of the replay */
    else if (seq >= 0 && body)
        s_apply(self, w, seq, body);
    else
        actor_counters_add(self->counters, "kv_events.bad", 1);
    zframe_destroy(&seqf);
    zframe_destroy(&body);
    zmsg_destroy(&m);
    serve_prefix_stats_t st = serve_prefix_stats(self->prefix);
    actor_counters_set(self->counters, "kv_events.batches", st.batches);
    actor_counters_set(self->counters, "kv_events.gaps", st.gaps);
}

int64_t actor_router_kv_bonus(actor_router_kv_t *self, const int32_t *tokens, int n,
                              int64_t *cached, int64_t *bonus) {
    int best = serve_prefix_match(self->prefix, tokens, n, cached);
    for (int i = 0; i < self->n_workers; i++)
        bonus[i] = (int64_t)((double)cached[i] * self->weight);
    actor_counters_add(self->counters, "prefix.lookups", 1);
    return best;
}

void actor_router_kv_forget(actor_router_kv_t *self, int w) {
    serve_prefix_forget(self->prefix, w);
    if (w >= 0 && w < self->n_workers)
        self->replaying[w] = false;
}
