/* sched_batch.c - continuous batching policy: a FIFO wait queue, a running
 * set in admission order, block accounting against the KV cap, and a per-step
 * token budget shared by decode tokens (first) and prefill chunks. */
#include "sched_batch.h"

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
} s_req_t;

struct sched_batch_t {
    sched_batch_config_t cfg; /* limits */
    s_req_t *waiting;         /* (max_queue) FIFO, oldest first; n_waiting valid */
    int n_waiting;
    s_req_t *running; /* (max_batch) admission order; n_running valid */
    int n_running;
    int blocks_reserved; /* sum of running[].blocks */
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
    self->waiting = calloc((size_t)cfg->max_queue + 1, sizeof *self->waiting);
    self->running = calloc((size_t)cfg->max_batch, sizeof *self->running);
    if (!self->waiting || !self->running)
        sched_batch_destroy(&self);
    return self;
}

void sched_batch_destroy(sched_batch_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->waiting);
    free((*self_p)->running);
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

int sched_batch_submit(sched_batch_t *self, uint64_t rid, int n_prompt, int max_tokens,
                       void *user) {
    if (n_prompt < 1 || max_tokens < 1)
        return -EINVAL;
    if (sched_batch_has(self, rid))
        return -EEXIST;
    int64_t positions = (int64_t)n_prompt + max_tokens;
    if (positions > self->cfg.max_ctx)
        return -E2BIG;
    int blocks = (int)((positions + self->cfg.block_size - 1) / self->cfg.block_size);
    if (blocks > self->cfg.kv_blocks)
        return -E2BIG;
    s_req_t r = {rid, user, n_prompt, max_tokens, 0, 0, blocks};
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

/* Admit from the head of the queue while the batch and the KV pool have room. */
static void s_admit(sched_batch_t *self) {
    while (self->n_waiting > 0 && self->n_running < self->cfg.max_batch) {
        s_req_t *r = &self->waiting[0];
        if (self->blocks_reserved + r->blocks > self->cfg.kv_blocks)
            break;
        self->blocks_reserved += r->blocks;
        self->running[self->n_running++] = *r;
        s_erase(self->waiting, &self->n_waiting, 0);
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
    return l;
}
