/* router_moe.c - MoE expert placement, replicas, capacity and the per-step
 * row assignment (router_moe.h).  Pure: no sockets, no clocks but the ones
 * passed in. */
#include "router_moe.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- placement */

int router_moe_parse_set(const char *spec, int n_expert, uint8_t *set, char *why, size_t whylen) {
    memset(set, 0, (size_t)n_expert);
    const char *p = spec;
    if (!p || !*p) {
        snprintf(why, whylen, "empty expert set");
        return -EINVAL;
    }
    while (*p) {
        const char *item = p;
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p || *p == '-' || *p == '+')
            goto bad;
        p = end;
        if (*p == '-') {
            const char *q = p + 1;
            hi = strtol(q, &end, 10);
            if (end == q || *q == '-' || *q == '+')
                goto bad;
            p = end;
        }
        if (*p && *p != ',')
            goto bad;
        size_t n = (size_t)(p - item);
        if (lo > hi) {
            snprintf(why, whylen, "'%.*s': empty range", (int)n, item);
            return -EINVAL;
        }
        if (lo < 0 || hi >= n_expert) {
            snprintf(why, whylen, "'%.*s': expert out of range 0..%d", (int)n, item, n_expert - 1);
            return -EINVAL;
        }
        for (long e = lo; e <= hi; e++)
            set[e] = 1;
        if (*p == ',' && !*++p)
            goto bad;
        continue;
    bad:
        snprintf(why, whylen, "'%s': expected experts such as 0-3 or 0,5", spec);
        return -EINVAL;
    }
    return 0;
}

int router_moe_static_owners(int n_expert, int n_actors, const char *const *specs, uint8_t *owners,
                             char *why, size_t whylen) {
    if (n_expert < 1 || n_actors < 1) {
        snprintf(why, whylen, "no experts or no expert actors");
        return -EINVAL;
    }
    for (int a = 0; a < n_actors; a++) {
        uint8_t *row = owners + (size_t)a * n_expert;
        if (specs && specs[a]) {
            char w[160];
            if (router_moe_parse_set(specs[a], n_expert, row, w, sizeof w)) {
                snprintf(why, whylen, "expert%d: experts=%s", a, w);
                return -EINVAL;
            }
        } else {
            for (int e = 0; e < n_expert; e++)
                row[e] = e % n_actors == a;
        }
    }
    for (int e = 0; e < n_expert; e++) {
        int n = 0;
        for (int a = 0; a < n_actors; a++)
            n += owners[(size_t)a * n_expert + e];
        if (!n) {
            snprintf(why, whylen, "expert %d is hosted by no expert actor (their experts= sets)",
                     e);
            return -EINVAL;
        }
    }
    return 0;
}

/* ---- the per-step assignment */

int router_moe_capacity(const router_moe_view_t *t, int e, int n_rows) {
    if (!t->load_aware || !t->cap || t->cap[e] <= 0)
        return INT32_MAX;
    double c = ceil((double)t->cap[e] / 1000.0 * n_rows / t->n_expert);
    return c < t->cap_min ? t->cap_min : c > INT32_MAX ? INT32_MAX : (int)c;
}

static bool s_can(const router_moe_view_t *t, const uint8_t *skip, int a, int e) {
    return t->hosts[(size_t)a * t->n_expert + e] && t->alive[a] && !(skip && skip[a]);
}

/* The candidate replica of e with room and the fewest rows: -1 when none.
 * taken: (A * E) rows of each expert given to each actor in this call. */
static int s_pick(const router_moe_view_t *t, const uint8_t *skip, int e, int cap,
                  const int64_t *score, const int *taken) {
    int best = -1;
    for (int a = 0; a < t->n_actors; a++) {
        if (!s_can(t, skip, a, e) || taken[(size_t)a * t->n_expert + e] >= cap)
            continue;
        if (best < 0 || score[a] < score[best])
            best = a;
    }
    return best;
}

int router_moe_assign(const router_moe_view_t *t, int n_rows, const int32_t *token,
                      const int32_t *expert, const float *logits, const uint8_t *skip, int *actor,
                      int32_t *used, int64_t *overflow) {
    int E = t->n_expert, A = t->n_actors, moved = 0;
    int64_t *score = calloc((size_t)A, sizeof *score);
    int *taken = calloc((size_t)A * E, sizeof *taken);
    int *capv = malloc((size_t)E * sizeof *capv);
    int *fill = calloc((size_t)E, sizeof *fill); /* rows computed by each expert */
    if (!score || !taken || !capv || !fill) {    /* no memory: every row stays here, unchanged */
        for (int r = 0; r < n_rows; r++) {
            actor[r] = -1;
            used[r] = expert[r];
        }
        goto out;
    }
    for (int a = 0; a < A; a++)
        score[a] = t->load_aware && t->load ? t->load[a] : 0;
    for (int e = 0; e < E; e++)
        capv[e] = router_moe_capacity(t, e, n_rows);
    /* pass 1: every row to a replica of its own expert with room */
    for (int r = 0; r < n_rows; r++) {
        int e = expert[r], a = -1;
        used[r] = e;
        if (e < 0 || e >= E) {
            actor[r] = -1;
            continue;
        }
        if (!t->load_aware) {
            for (int k = 0; k < A && a < 0; k++)
                if (s_can(t, skip, k, e))
                    a = k;
        } else {
            a = s_pick(t, skip, e, capv[e], score, taken);
        }
        actor[r] = a;
        if (a >= 0) {
            score[a]++;
            taken[(size_t)a * E + e]++;
            fill[e]++;
        } else if (t->load_aware) {
            bool any = false; /* -2: over capacity (vs no replica alive at all) */
            for (int k = 0; k < A && !any; k++)
                any = s_can(t, skip, k, e);
            actor[r] = any ? -2 : -1;
        }
    }
    /* pass 2 (load-aware): rows over every replica's capacity go to the token's
     * next best expert (largest logit; without logits, least filled) among those
     * it did not select (nor got as a substitute) that has room; when none has
     * room they stay with their own expert, over its capacity */
    for (int r = 0; r < n_rows; r++) {
        if (actor[r] != -2)
            continue;
        int e = expert[r], best = -1, best_a = -1;
        const float *lg = logits ? logits + (size_t)token[r] * E : NULL;
        for (int f = 0; f < E; f++) {
            bool selected = false;
            for (int q = 0; q < n_rows && !selected; q++)
                selected = token[q] == token[r] && (expert[q] == f || used[q] == f);
            if (selected)
                continue;
            int a = s_pick(t, skip, f, capv[f], score, taken);
            if (a < 0)
                continue;
            bool better = best < 0 || (lg ? lg[f] > lg[best] : fill[f] < fill[best]);
            if (better) { /* strict: a tie keeps the lower index */
                best = f;
                best_a = a;
            }
        }
        if (best >= 0) {
            used[r] = best;
            actor[r] = best_a;
            fill[best]++;
            overflow[e]++;
            moved++;
        } else {
            actor[r] = s_pick(t, skip, e, INT32_MAX, score, taken);
            fill[e]++;
        }
        if (actor[r] >= 0) {
            score[actor[r]]++;
            taken[(size_t)actor[r] * E + used[r]]++;
        }
    }
out:
    free(score);
    free(taken);
    free(capv);
    free(fill);
    return moved;
}

/* ---- the control plane */

struct router_moe_t {
    router_moe_config_t cfg;
    uint8_t *owners;   /* (A * E) static placement */
    int *slots;        /* (A) experts each actor may host */
    double *rate;      /* (A * E) rows/s of each expert served by each actor (EMA) */
    double *backlog;   /* (A) queue backlog in rows (EMA) */
    uint64_t *seen_us; /* (A) last report */
    int32_t *alive;    /* (A) */
    int32_t *hosts;    /* (A * E) the table */
    int32_t *cap;      /* (E) */
    int32_t *load;     /* (A) */
    int *replicas;     /* (E) */
    uint64_t version;
};

router_moe_t *router_moe_new(const router_moe_config_t *cfg, const uint8_t *owners,
                             const int *slots) {
    int E = cfg->n_expert, A = cfg->n_actors;
    if (E < 1 || A < 1 || cfg->cf_permille < 0 || cfg->cap_min < 0)
        return NULL;
    router_moe_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    if (s->cfg.cf_max_permille < s->cfg.cf_permille)
        s->cfg.cf_max_permille = s->cfg.cf_permille;
    if (s->cfg.hot_ratio <= 0)
        s->cfg.hot_ratio = 1.5;
    size_t ae = (size_t)A * E;
    s->owners = malloc(ae);
    s->slots = malloc((size_t)A * sizeof *s->slots);
    s->rate = calloc(ae, sizeof *s->rate);
    s->backlog = calloc((size_t)A, sizeof *s->backlog);
    s->seen_us = calloc((size_t)A, sizeof *s->seen_us);
    s->alive = malloc((size_t)A * sizeof *s->alive);
    s->hosts = calloc(ae, sizeof *s->hosts);
    s->cap = calloc((size_t)E, sizeof *s->cap);
    s->load = calloc((size_t)A, sizeof *s->load);
    s->replicas = calloc((size_t)E, sizeof *s->replicas);
    if (!s->owners || !s->slots || !s->rate || !s->backlog || !s->seen_us || !s->alive ||
        !s->hosts || !s->cap || !s->load || !s->replicas) {
        router_moe_destroy(&s);
        return NULL;
    }
    memcpy(s->owners, owners, ae);
    for (int a = 0; a < A; a++) {
        int own = 0;
        for (int e = 0; e < E; e++)
            own += owners[(size_t)a * E + e];
        s->slots[a] = slots && slots[a] > own ? slots[a] : own;
        s->alive[a] = 1;
    }
    router_moe_plan(s);
    return s;
}

void router_moe_destroy(router_moe_t **self_p) {
    if (!self_p || !*self_p)
        return;
    router_moe_t *s = *self_p;
    free(s->owners);
    free(s->slots);
    free(s->rate);
    free(s->backlog);
    free(s->seen_us);
    free(s->alive);
    free(s->hosts);
    free(s->cap);
    free(s->load);
    free(s->replicas);
    free(s);
    *self_p = NULL;
}

int router_moe_report(router_moe_t *self, int a, const int32_t *rows, int frames, int queue,
                      int64_t period_us, uint64_t now_us) {
    int E = self->cfg.n_expert;
    if (a < 0 || a >= self->cfg.n_actors)
        return -EINVAL;
    double secs = period_us > 0 ? (double)period_us / 1e6 : 0.15;
    int64_t total = 0;
    for (int e = 0; e < E; e++) {
        double r = rows[e] / secs;
        double *x = &self->rate[(size_t)a * E + e];
        *x = self->seen_us[a] ? 0.7 * *x + 0.3 * r : r;
        total += rows[e];
    }
    double per_frame = frames > 0 ? (double)total / frames : 0;
    self->backlog[a] = 0.7 * self->backlog[a] + 0.3 * queue * per_frame;
    self->seen_us[a] = now_us ? now_us : 1;
    self->alive[a] = 1;
    return 0;
}

void router_moe_down(router_moe_t *self, int a) {
    if (a < 0 || a >= self->cfg.n_actors)
        return;
    self->alive[a] = 0;
    self->backlog[a] = 0;
    memset(self->rate + (size_t)a * self->cfg.n_expert, 0,
           (size_t)self->cfg.n_expert * sizeof *self->rate);
}

int router_moe_expire(router_moe_t *self, uint64_t now_us, uint64_t stale_us) {
    int n = 0;
    for (int a = 0; a < self->cfg.n_actors; a++)
        if (self->alive[a] && self->seen_us[a] && now_us > self->seen_us[a] + stale_us) {
            router_moe_down(self, a);
            n++;
        }
    return n;
}

double router_moe_expert_load(const router_moe_t *self, int e) {
    double x = 0;
    for (int a = 0; a < self->cfg.n_actors; a++)
        x += self->rate[(size_t)a * self->cfg.n_expert + e];
    return x;
}

uint64_t router_moe_plan(router_moe_t *self) {
    int E = self->cfg.n_expert, A = self->cfg.n_actors;
    int32_t *H = self->hosts;
    double *load = malloc((size_t)E * sizeof *load), *aload = calloc((size_t)A, sizeof *aload);
    int *count = calloc((size_t)A, sizeof *count);
    uint8_t *done = calloc((size_t)E, 1);
    if (!load || !aload || !count || !done)
        goto out; /* no memory: the table stays as it was */
    double total = 0;
    for (int e = 0; e < E; e++)
        total += load[e] = router_moe_expert_load(self, e);
    /* static owners that are alive */
    for (int a = 0; a < A; a++)
        for (int e = 0; e < E; e++) {
            H[(size_t)a * E + e] = self->alive[a] && self->owners[(size_t)a * E + e];
            count[a] += H[(size_t)a * E + e];
        }
    for (int e = 0; e < E; e++) {
        self->replicas[e] = 0;
        for (int a = 0; a < A; a++)
            self->replicas[e] += H[(size_t)a * E + e];
    }
    /* an orphan (every owner down) goes to the alive actor hosting fewest */
    for (int e = 0; e < E; e++) {
        if (self->replicas[e])
            continue;
        int best = -1;
        for (int a = 0; a < A; a++)
            if (self->alive[a] && (best < 0 || count[a] < count[best]))
                best = a;
        if (best >= 0) {
            H[(size_t)best * E + e] = 1;
            count[best]++;
            self->replicas[e] = 1;
        }
    }
    for (int a = 0; a < A; a++)
        for (int e = 0; e < E; e++)
            if (H[(size_t)a * E + e])
                aload[a] += load[e] / self->replicas[e];
    /* replicas of hot experts, hottest (per replica) first, on the least loaded
     * alive actor that has a free slot and does not host it yet */
    double mean = total / E;
    for (int it = 0; self->cfg.load_aware && total > 0 && it < A * E; it++) {
        int e = -1;
        for (int f = 0; f < E; f++)
            if (!done[f] && self->replicas[f] &&
                (e < 0 || load[f] / self->replicas[f] > load[e] / self->replicas[e]))
                e = f;
        if (e < 0 || load[e] / self->replicas[e] <= self->cfg.hot_ratio * mean)
            break;
        int best = -1;
        for (int a = 0; a < A; a++)
            if (self->alive[a] && !H[(size_t)a * E + e] && count[a] < self->slots[a] &&
                (best < 0 || aload[a] < aload[best]))
                best = a;
        if (best < 0) {
            done[e] = 1;
            continue;
        }
        double before = load[e] / self->replicas[e];
        H[(size_t)best * E + e] = 1;
        count[best]++;
        self->replicas[e]++;
        double after = load[e] / self->replicas[e];
        for (int a = 0; a < A; a++)
            if (H[(size_t)a * E + e])
                aload[a] += after - (a == best ? 0 : before);
    }
    /* capacity factors: cf * (the expert's share of the rows * E) / replicas,
     * within [cf, cf_max]: a hot expert's replicas each take their part of it */
    for (int e = 0; e < E; e++) {
        int cf = self->cfg.cf_permille;
        if (!self->cfg.load_aware || cf == 0) {
            self->cap[e] = self->cfg.load_aware ? cf : 0;
            continue;
        }
        double share = total > 0 ? load[e] / total : 1.0 / E;
        double f = cf * share * E / (self->replicas[e] ? self->replicas[e] : 1);
        if (f < cf)
            f = cf;
        if (f > self->cfg.cf_max_permille)
            f = self->cfg.cf_max_permille;
        self->cap[e] = (int32_t)lround(f);
    }
    for (int a = 0; a < A; a++)
        self->load[a] = self->alive[a] ? (int32_t)lround(self->backlog[a]) : 0;
    self->version++;
out:
    free(load);
    free(aload);
    free(count);
    free(done);
    return self->version;
}

uint64_t router_moe_version(const router_moe_t *self) {
    return self->version;
}

router_moe_view_t router_moe_view(const router_moe_t *self) {
    return (router_moe_view_t){self->cfg.n_expert, self->cfg.n_actors, self->cfg.load_aware,
                               self->hosts,        self->cap,          self->load,
                               self->alive,        self->cfg.cap_min};
}

int router_moe_replicas(const router_moe_t *self, int e) {
    return e >= 0 && e < self->cfg.n_expert ? self->replicas[e] : 0;
}

bool router_moe_alive(const router_moe_t *self, int a) {
    return a >= 0 && a < self->cfg.n_actors && self->alive[a];
}
