/* sched_batch.c - continuous batching policy: a wait queue in arrival order (admitted by
 * aged priority), a running set in admission order, block accounting against the KV cap,
 * preemption of worse-priority running requests, and a per-step token budget shared by
 * decode tokens (first) and prefill chunks. */
#include "sched_batch.h"

#include "base_clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t rid;   /* request id */
    void *user;     /* caller's pointer */
    int n_prompt;   /* prompt tokens */
    int max_tokens; /* generation limit */
    int n_past;     /* positions computed (in the KV) */
    int n_gen;      /* tokens sampled so far */
    int blocks;     /* KV blocks reserved for the whole request */
    int cap;        /* positions its KV holds at most once its prompt has run (in-sequence
                       compression), or 0: all of them */
    int priority;   /* lower runs sooner */
    uint64_t t_in;  /* when it arrived (us): its place among equals, and its aging */
} s_req_t;

struct sched_batch_t {
    sched_batch_config_t cfg; /* limits */
    s_req_t *waiting;         /* (max_queue) FIFO, oldest first; n_waiting valid */
    int n_waiting;
    s_req_t *running; /* (max_batch) admission order; n_running valid */
    int n_running;
    int blocks_reserved; /* sum of running[].blocks */
    uint64_t *preempted; /* (max_batch) rids preempted, not yet taken; n_preempted valid */
    int n_preempted;
    int64_t n_preemptions;         /* so far */
    uint64_t (*now_us)(void *arg); /* aging's clock; NULL: base_now_us */
    void *now_arg;
};

sched_batch_t *sched_batch_new(const sched_batch_config_t *cfg) {
    if (!cfg || cfg->max_batch < 1 || cfg->max_queue < 0 || cfg->kv_blocks < 1 ||
        cfg->block_size < 1 || cfg->max_ctx < 2)
        return NULL;
    sched_batch_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->cfg = *cfg;
    if (self->cfg.step_tokens < self->cfg.max_batch)
        self->cfg.step_tokens = self->cfg.max_batch;
    /* the queue also takes back what preemption moves out of the running set */
    self->waiting =
        calloc((size_t)cfg->max_queue + (size_t)cfg->max_batch + 1, sizeof *self->waiting);
    self->running = calloc((size_t)cfg->max_batch, sizeof *self->running);
    self->preempted = calloc((size_t)cfg->max_batch, sizeof *self->preempted);
    if (!self->waiting || !self->running || !self->preempted)
        sched_batch_destroy(&self);
    return self;
}

void sched_batch_destroy(sched_batch_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->waiting);
    free((*self_p)->running);
    free((*self_p)->preempted);
    free(*self_p);
    *self_p = NULL;
}

const sched_batch_config_t *sched_batch_config(const sched_batch_t *self) {
    return &self->cfg;
}

int sched_batch_context(const sched_batch_t *self) {
    int64_t pool = (int64_t)self->cfg.kv_blocks * self->cfg.block_size;
    return pool < self->cfg.max_ctx ? (int)pool : self->cfg.max_ctx;
}

static uint64_t s_now(const sched_batch_t *self) {
    return self->now_us ? self->now_us(self->now_arg) : base_now_us();
}

void sched_batch_set_clock(sched_batch_t *self, uint64_t (*now_us)(void *arg), void *arg) {
    self->now_us = now_us;
    self->now_arg = arg;
}

static int s_find(const s_req_t *a, int n, uint64_t rid) {
    for (int i = 0; i < n; i++)
        if (a[i].rid == rid)
            return i;
    return -1;
}

void *sched_batch_find(const sched_batch_t *self, uint64_t rid) {
    int i = s_find(self->running, self->n_running, rid);
    if (i >= 0)
        return self->running[i].user;
    i = s_find(self->waiting, self->n_waiting, rid);
    return i >= 0 ? self->waiting[i].user : NULL;
}

int sched_batch_count(const sched_batch_t *self) {
    return self->n_running;
}

void *sched_batch_user_at(const sched_batch_t *self, int i) {
    return i >= 0 && i < self->n_running ? self->running[i].user : NULL;
}

bool sched_batch_has(const sched_batch_t *self, uint64_t rid) {
    return s_find(self->waiting, self->n_waiting, rid) >= 0 ||
           s_find(self->running, self->n_running, rid) >= 0;
}

/* The blocks r reserves: its prompt + max_tokens positions, or with a cap the larger of
 * its prompt (held whole while it runs) and the cap. */
static int s_blocks(const sched_batch_t *self, const s_req_t *r) {
    int64_t positions = (int64_t)r->n_prompt + r->max_tokens;
    if (r->cap > 0) {
        int64_t held = r->n_prompt > r->cap ? r->n_prompt : r->cap;
        if (held < positions)
            positions = held;
    }
    return (int)((positions + self->cfg.block_size - 1) / self->cfg.block_size);
}

int sched_batch_submit(sched_batch_t *self, uint64_t rid, int n_prompt, int max_tokens,
                       void *user) {
    return sched_batch_submit_capped(self, rid, n_prompt, max_tokens, 0, user);
}

int sched_batch_submit_capped(sched_batch_t *self, uint64_t rid, int n_prompt, int max_tokens,
                              int cap, void *user) {
    if (n_prompt < 1 || max_tokens < 1 || cap < 0)
        return -EINVAL;
    if (sched_batch_has(self, rid))
        return -EEXIST;
    int64_t positions = (int64_t)n_prompt + max_tokens;
    if (positions > self->cfg.max_ctx)
        return -E2BIG;
    s_req_t r = {rid, user, n_prompt, max_tokens, 0, 0, 0, cap, 0, s_now(self)};
    int blocks = r.blocks = s_blocks(self, &r);
    if (blocks > self->cfg.kv_blocks)
        return -E2BIG;
    /* nobody waiting and room now: it runs from the next step, never queued */
    if (self->n_waiting == 0 && self->n_running < self->cfg.max_batch &&
        self->blocks_reserved + blocks <= self->cfg.kv_blocks) {
        self->blocks_reserved += blocks;
        self->running[self->n_running++] = r;
        return 0;
    }
    if (self->n_waiting >= self->cfg.max_queue)
        return -EAGAIN;
    self->waiting[self->n_waiting++] = r;
    return 0;
}

static void s_erase(s_req_t *a, int *n, int i) {
    memmove(a + i, a + i + 1, (size_t)(*n - i - 1) * sizeof *a);
    (*n)--;
}

void *sched_batch_remove(sched_batch_t *self, uint64_t rid) {
    int i = s_find(self->running, self->n_running, rid);
    if (i >= 0) {
        void *user = self->running[i].user;
        self->blocks_reserved -= self->running[i].blocks;
        s_erase(self->running, &self->n_running, i);
        return user;
    }
    i = s_find(self->waiting, self->n_waiting, rid);
    if (i >= 0) {
        void *user = self->waiting[i].user;
        s_erase(self->waiting, &self->n_waiting, i);
        return user;
    }
    return NULL;
}

void *sched_batch_pop(sched_batch_t *self) {
    if (self->n_running)
        return sched_batch_remove(self, self->running[self->n_running - 1].rid);
    if (self->n_waiting)
        return sched_batch_remove(self, self->waiting[self->n_waiting - 1].rid);
    return NULL;
}

int sched_batch_set_priority(sched_batch_t *self, uint64_t rid, int priority) {
    int i = s_find(self->running, self->n_running, rid);
    if (i >= 0) {
        self->running[i].priority = priority;
        return 0;
    }
    i = s_find(self->waiting, self->n_waiting, rid);
    if (i < 0)
        return -ENOENT;
    self->waiting[i].priority = priority;
    return 0;
}

int sched_batch_take_preempted(sched_batch_t *self, uint64_t *rids, int cap) {
    int n = self->n_preempted < cap ? self->n_preempted : cap;
    memcpy(rids, self->preempted, (size_t)n * sizeof *rids);
    memmove(self->preempted, self->preempted + n,
            (size_t)(self->n_preempted - n) * sizeof *self->preempted);
    self->n_preempted -= n;
    return n;
}

/* r's priority less what it has earned waiting (aging_ms per step of 1). */
static int64_t s_effective(const sched_batch_t *self, const s_req_t *r, uint64_t now) {
    int64_t aged = self->cfg.aging_ms > 0 && now > r->t_in
                       ? (int64_t)((now - r->t_in) / 1000 / (uint64_t)self->cfg.aging_ms)
                       : 0;
    return (int64_t)r->priority - aged;
}

/* The waiting request to admit next: the best aged priority, then the earliest. */
static int s_best_waiting(const sched_batch_t *self, uint64_t now) {
    int best = -1;
    int64_t best_p = 0;
    for (int i = 0; i < self->n_waiting; i++) {
        const s_req_t *r = &self->waiting[i];
        int64_t p = s_effective(self, r, now);
        if (best < 0 || p < best_p || (p == best_p && r->t_in < self->waiting[best].t_in)) {
            best = i;
            best_p = p;
        }
    }
    return best;
}

/* Put r back in the queue in arrival order (it keeps its t_in). */
static void s_requeue(sched_batch_t *self, const s_req_t *r) {
    int at = self->n_waiting;
    while (at > 0 && self->waiting[at - 1].t_in > r->t_in)
        at--;
    memmove(self->waiting + at + 1, self->waiting + at,
            (size_t)(self->n_waiting - at) * sizeof *self->waiting);
    self->waiting[at] = *r;
    self->n_waiting++;
}

/* Make room for w by preempting running requests of a worse priority than w's own (the
 * worst first, the latest admitted among equals), only if together they make enough room.
 * True when w fits now. */
static bool s_preempt_for(sched_batch_t *self, const s_req_t *w) {
    int free_slots = self->cfg.max_batch - self->n_running;
    int free_blocks = self->cfg.kv_blocks - self->blocks_reserved;
    int victims[256], n_v = 0; /* running indexes, worst first */
    while (n_v < (int)(sizeof victims / sizeof *victims) &&
           (free_slots < 1 || free_blocks < w->blocks)) {
        int v = -1;
        for (int i = self->n_running - 1; i >= 0; i--) {
            bool taken = false;
            for (int k = 0; k < n_v && !taken; k++)
                taken = victims[k] == i;
            if (!taken && self->running[i].priority > w->priority &&
                (v < 0 || self->running[i].priority > self->running[v].priority))
                v = i;
        }
        if (v < 0)
            return false; /* not enough worse-priority work to make room: preempt nothing */
        victims[n_v++] = v;
        free_slots++;
        free_blocks += self->running[v].blocks;
    }
    if (free_slots < 1 || free_blocks < w->blocks)
        return false;
    /* erase from the highest index down, so the others' indexes hold */
    for (int a = 0; a < n_v; a++)
        for (int b = a + 1; b < n_v; b++)
            if (victims[b] > victims[a]) {
                int t = victims[a];
                victims[a] = victims[b];
                victims[b] = t;
            }
    for (int k = 0; k < n_v; k++) {
        s_req_t r = self->running[victims[k]];
        self->blocks_reserved -= r.blocks;
        s_erase(self->running, &self->n_running, victims[k]);
        /* what it generated becomes prompt: it is recomputed (from the prefix cache) and
         * its next token sampled at the same position, as a resumed request's */
        r.n_prompt += r.n_gen;
        r.max_tokens -= r.n_gen;
        r.n_gen = 0;
        r.n_past = 0;
        r.blocks = s_blocks(self, &r); /* a capped request holds its longer prompt whole */
        s_requeue(self, &r);
        if (self->n_preempted < self->cfg.max_batch)
            self->preempted[self->n_preempted++] = r.rid;
        self->n_preemptions++;
    }
    return true;
}

/* Admit the best waiting request while the batch and the KV pool have room (making room
 * by preemption when allowed); the best one blocks the rest. */
static void s_admit(sched_batch_t *self) {
    uint64_t now = s_now(self);
    while (self->n_waiting > 0) {
        int i = s_best_waiting(self, now);
        s_req_t *r = &self->waiting[i];
        if (self->n_running >= self->cfg.max_batch ||
            self->blocks_reserved + r->blocks > self->cfg.kv_blocks) {
            uint64_t rid = r->rid;
            if (!self->cfg.preempt || !s_preempt_for(self, r))
                break;
            i = s_find(self->waiting, self->n_waiting, rid); /* the queue moved */
            r = &self->waiting[i];
        }
        self->blocks_reserved += r->blocks;
        self->running[self->n_running++] = *r;
        s_erase(self->waiting, &self->n_waiting, i);
    }
}

int sched_batch_plan(sched_batch_t *self, sched_batch_item_t *items, int cap) {
    s_admit(self);
    int n = 0, budget = self->cfg.step_tokens;
    /* Decode tokens first: one per request whose prompt is done. */
    for (int i = 0; i < self->n_running && n < cap && budget > 0; i++) {
        s_req_t *r = &self->running[i];
        int known = r->n_prompt + r->n_gen;
        if (r->n_past < r->n_prompt || r->n_past >= known)
            continue;
        items[n++] = (sched_batch_item_t){r->rid, r->user, r->n_past, 1, true, false};
        budget--;
    }
    /* Then prefill chunks, oldest first, with what is left of the budget. */
    for (int i = 0; i < self->n_running && n < cap && budget > 0; i++) {
        s_req_t *r = &self->running[i];
        if (r->n_past >= r->n_prompt)
            continue;
        int left = r->n_prompt - r->n_past;
        int take = left < budget ? left : budget;
        items[n++] = (sched_batch_item_t){r->rid, r->user, r->n_past, take, take == left, true};
        budget -= take;
    }
    return n;
}

int sched_batch_advance(sched_batch_t *self, uint64_t rid, int n, bool generated) {
    int i = s_find(self->running, self->n_running, rid);
    if (i < 0)
        return -ENOENT;
    s_req_t *r = &self->running[i];
    if (n < 0 || r->n_past + n > r->n_prompt + r->n_gen)
        return -EINVAL;
    if (generated && r->n_gen >= r->max_tokens)
        return -EINVAL;
    r->n_past += n;
    if (generated)
        r->n_gen++;
    return 0;
}

int sched_batch_advance_spec(sched_batch_t *self, uint64_t rid, int n_computed, int n_generated) {
    int i = s_find(self->running, self->n_running, rid);
    if (i < 0)
        return -ENOENT;
    s_req_t *r = &self->running[i];
    if (n_computed < 1 || n_generated < 1 || r->n_gen + n_generated > r->max_tokens ||
        r->n_past + n_computed > r->n_prompt + r->n_gen + n_generated - 1)
        return -EINVAL;
    r->n_past += n_computed;
    r->n_gen += n_generated;
    return 0;
}

int sched_batch_generated(const sched_batch_t *self, uint64_t rid) {
    int i = s_find(self->running, self->n_running, rid);
    return i < 0 ? -ENOENT : self->running[i].n_gen;
}

sched_batch_load_t sched_batch_load(const sched_batch_t *self) {
    sched_batch_load_t l = {0};
    l.n_waiting = self->n_waiting;
    l.n_running = self->n_running;
    for (int i = 0; i < self->n_waiting; i++)
        l.queued_tokens += self->waiting[i].n_prompt + self->waiting[i].max_tokens;
    for (int i = 0; i < self->n_running; i++) {
        const s_req_t *r = &self->running[i];
        l.active_tokens += (r->n_prompt - r->n_past > 0 ? r->n_prompt - r->n_past : 0) +
                           (r->max_tokens - r->n_gen);
    }
    l.kv_free_blocks = self->cfg.kv_blocks - self->blocks_reserved;
    l.preempted = self->n_preemptions;
    return l;
}
