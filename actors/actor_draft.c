/* actor_draft.c - the draft worker actor: n-gram lookup or a small draft model
 * with per-request paged KV (kvstore/kv_blocks), replying draft_reply to the
 * target worker that asked. */
#include "actor_draft.h"

#include "base_log.h"
#include "kv_blocks.h"
#include "model.h"
#include "model_spec.h"
#include "model_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "draft"

/* ------------------------------------------------------------------ vocabulary check */

/* Rows of token_embd (the logits' width), or -1. */
static int64_t s_embd_rows(const model_gguf_t *g) {
    const model_gguf_tensor_t *t = model_gguf_tensor(g, "token_embd.weight");
    return t && t->n_dims == 2 ? t->ne[1] : -1;
}

int actor_draft_check_vocab(const model_gguf_t *target, const model_gguf_t *draft, char *err,
                            size_t errlen) {
    const char *tp = model_gguf_path(target), *dp = model_gguf_path(draft);
    int64_t nt = s_embd_rows(target), nd = s_embd_rows(draft);
    if (nt != nd) {
        snprintf(err, errlen,
                 "the draft model's vocabulary differs from the target's: %lld token "
                 "embeddings in %s, %lld in %s",
                 (long long)nd, dp, (long long)nt, tp);
        return -EINVAL;
    }
    char e1[256] = "", e2[256] = "";
    model_tokenizer_t *tt = model_tokenizer_new(target, e1, sizeof e1);
    model_tokenizer_t *td = model_tokenizer_new(draft, e2, sizeof e2);
    model_gguf_str_t *st = NULL, *sd = NULL;
    int rc = -EINVAL;
    if (!tt || !td) {
        snprintf(err, errlen, "cannot compare vocabularies: %s: %s", tt ? dp : tp, tt ? e2 : e1);
        goto done;
    }
    uint64_t n = (uint64_t)model_tokenizer_n_vocab(tt);
    if ((uint64_t)model_tokenizer_n_vocab(td) != n) {
        snprintf(err, errlen,
                 "the draft model's vocabulary differs from the target's: %d tokens in %s, "
                 "%llu in %s",
                 model_tokenizer_n_vocab(td), dp, (unsigned long long)n, tp);
        goto done;
    }
    st = malloc(n * sizeof *st);
    sd = malloc(n * sizeof *sd);
    if (!st || !sd) {
        snprintf(err, errlen, "out of memory comparing vocabularies");
        rc = -ENOMEM;
        goto done;
    }
    if (!model_gguf_arr_strs(target, "tokenizer.ggml.tokens", st, n) ||
        !model_gguf_arr_strs(draft, "tokenizer.ggml.tokens", sd, n)) {
        snprintf(err, errlen, "cannot read tokenizer.ggml.tokens of %s or %s", dp, tp);
        goto done;
    }
    for (uint64_t i = 0; i < n; i++)
        if (st[i].len != sd[i].len || memcmp(st[i].ptr, sd[i].ptr, st[i].len)) {
            snprintf(err, errlen,
                     "the draft model's vocabulary differs from the target's: token %llu is "
                     "'%.*s' in %s but '%.*s' in %s",
                     (unsigned long long)i, (int)(sd[i].len > 40 ? 40 : sd[i].len), sd[i].ptr, dp,
                     (int)(st[i].len > 40 ? 40 : st[i].len), st[i].ptr, tp);
            goto done;
        }
    rc = 0;
done:
    free(st);
    free(sd);
    model_tokenizer_destroy(&tt);
    model_tokenizer_destroy(&td);
    return rc;
}

/* ------------------------------------------------------------------ the drafter */

/* What the draft model has seen of one request. */
typedef struct {
    int worker;         /* key: target worker */
    uint64_t rid;       /* key: request id */
    int32_t *toks;      /* (cap) tokens whose K/V are in the pool: positions 0..n_cached */
    int n_cached, cap;  /* valid entries; allocated */
    kv_table_t kv;      /* its blocks */
    uint64_t last_used; /* LRU clock */
    bool busy;          /* part of the batch being drafted: not evictable */
} s_state_t;

/* Per-job progress inside actor_draft_run. */
typedef struct {
    s_state_t *st; /* NULL: not drafted with the model */
    int next;      /* next position to prefill */
} s_prog_t;

struct actor_draft_t {
    actor_draft_config_t cfg;   /* with defaults filled in (paths not kept) */
    actor_counters_t *counters; /* borrowed, may be NULL */
    model_t *model;             /* MODEL: the draft model */
    model_ctx_t *ctx;           /* its forward scratch and threads */
    kv_blocks_t *kv;            /* its KV pool */
    int n_vocab;                /* logits per row */
    s_state_t **states;         /* (cap_states) first n_states valid */
    int n_states, cap_states;
    uint64_t tick; /* LRU clock */
    /* one forward pass (step_tokens) */
    int32_t *b_tok, *b_pos, *b_seq; /* (step_tokens) */
    bool *b_want;                   /* (step_tokens) */
    int *b_job;                     /* (step_tokens) job of each wanted row, in order */
    model_seq_view_t *b_seqs;       /* (step_tokens) */
    float *logits;                  /* (step_tokens, n_vocab) */
    s_prog_t *prog;                 /* (cap_prog) */
    int cap_prog;
};

static void s_count(actor_draft_t *d, const char *name, int64_t v) {
    if (d->counters)
        actor_counters_add(d->counters, name, v);
}

static void s_state_free(actor_draft_t *d, s_state_t **sp) {
    s_state_t *s = *sp;
    if (!s)
        return;
    kv_blocks_release(d->kv, &s->kv);
    free(s->toks);
    free(s);
    *sp = NULL;
}

/* Remove states[i] (order is not kept). */
static void s_state_drop(actor_draft_t *d, int i) {
    s_state_free(d, &d->states[i]);
    d->states[i] = d->states[--d->n_states];
    if (d->counters)
        actor_counters_set(d->counters, "states", d->n_states);
}

static int s_state_find(const actor_draft_t *d, int worker, uint64_t rid) {
    for (int i = 0; i < d->n_states; i++)
        if (d->states[i]->worker == worker && d->states[i]->rid == rid)
            return i;
    return -1;
}

static s_state_t *s_state_get(actor_draft_t *d, int worker, uint64_t rid) {
    int i = s_state_find(d, worker, rid);
    if (i >= 0)
        return d->states[i];
    if (d->n_states == d->cap_states) {
        int cap = d->cap_states ? d->cap_states * 2 : 16;
        s_state_t **s = realloc(d->states, (size_t)cap * sizeof *s);
        if (!s)
            return NULL;
        d->states = s;
        d->cap_states = cap;
    }
    s_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->worker = worker;
    s->rid = rid;
    d->states[d->n_states++] = s;
    if (d->counters)
        actor_counters_set(d->counters, "states", d->n_states);
    return s;
}

/* Drop the least recently used state that is not busy.  False when none is. */
static bool s_evict_lru(actor_draft_t *d) {
    int best = -1;
    for (int i = 0; i < d->n_states; i++)
        if (!d->states[i]->busy &&
            (best < 0 || d->states[i]->last_used < d->states[best]->last_used))
            best = i;
    if (best < 0)
        return false;
    s_state_drop(d, best);
    s_count(d, "states.evicted", 1);
    return true;
}

void actor_draft_destroy(actor_draft_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_draft_t *d = *self_p;
    while (d->n_states)
        s_state_drop(d, d->n_states - 1);
    free(d->states);
    kv_blocks_destroy(&d->kv);
    model_ctx_destroy(&d->ctx);
    model_destroy(&d->model);
    free(d->b_tok);
    free(d->b_pos);
    free(d->b_seq);
    free(d->b_want);
    free(d->b_job);
    free(d->b_seqs);
    free(d->logits);
    free(d->prog);
    free(d);
    *self_p = NULL;
}

actor_draft_t *actor_draft_new(const actor_draft_config_t *cfg, char *err, size_t errlen) {
    actor_draft_t *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    actor_draft_config_t c = *cfg;
    c.threads = c.threads > 0 ? c.threads : 1;
    c.ngram_min = c.ngram_min > 0 ? c.ngram_min : 1;
    c.ngram_max = c.ngram_max > 0 ? c.ngram_max : 4;
    c.kv_blocks = c.kv_blocks > 0 ? c.kv_blocks : 256;
    c.block_size = c.block_size > 0 ? c.block_size : 16;
    c.max_ctx = c.max_ctx > 0 ? c.max_ctx : 4096;
    c.step_tokens = c.step_tokens > 0 ? c.step_tokens : 256;
    if (c.ngram_max < c.ngram_min) {
        snprintf(err, errlen, "ngram_max (%d) < ngram_min (%d)", c.ngram_max, c.ngram_min);
        goto fail;
    }
    d->counters = c.counters;
    c.draft_model = c.target_model = NULL; /* borrowed: not kept */
    d->cfg = c;
    if (cfg->mode == ACTOR_DRAFT_NGRAM)
        return d;
    if (cfg->mode != ACTOR_DRAFT_MODEL || !cfg->draft_model) {
        snprintf(err, errlen, "draft=model needs draft_model=PATH");
        goto fail;
    }
    d->model = model_load(cfg->draft_model, err, errlen);
    if (!d->model)
        goto fail;
    if (cfg->target_model) {
        model_gguf_t *tg = model_gguf_open(cfg->target_model, err, errlen);
        if (!tg)
            goto fail;
        int rc = actor_draft_check_vocab(tg, model_file(d->model), err, errlen);
        model_gguf_destroy(&tg);
        if (rc)
            goto fail;
    }
    const model_config_t *mc = model_config(d->model);
    d->n_vocab = mc->n_vocab;
    int st = c.step_tokens;
    d->ctx = model_ctx_new(d->model, st, c.max_ctx, c.threads, NULL);
    kern_kv_shape_t shape = model_kv_shape(mc, c.block_size);
    d->kv = kv_blocks_new(&shape, KERN_F32, c.kv_blocks);
    d->b_tok = malloc((size_t)st * sizeof *d->b_tok);
    d->b_pos = malloc((size_t)st * sizeof *d->b_pos);
    d->b_seq = malloc((size_t)st * sizeof *d->b_seq);
    d->b_want = malloc((size_t)st * sizeof *d->b_want);
    d->b_job = malloc((size_t)st * sizeof *d->b_job);
    d->b_seqs = malloc((size_t)st * sizeof *d->b_seqs);
    d->logits = malloc((size_t)st * d->n_vocab * sizeof *d->logits);
    if (!d->ctx || !d->kv || !d->b_tok || !d->b_pos || !d->b_seq || !d->b_want || !d->b_job ||
        !d->b_seqs || !d->logits) {
        snprintf(err, errlen, "%s: cannot set up the draft model (%s)", cfg->draft_model,
                 !d->kv ? "KV pool too large" : "out of memory");
        goto fail;
    }
    return d;
fail:
    actor_draft_destroy(&d);
    return NULL;
}

int actor_draft_states(const actor_draft_t *self) {
    return self->n_states;
}

void actor_draft_end(actor_draft_t *self, int worker, uint64_t rid) {
    int i = s_state_find(self, worker, rid);
    if (i >= 0)
        s_state_drop(self, i);
}

static void s_ngram(actor_draft_t *d, actor_draft_job_t *j) {
    uint64_t t0 = base_now_us();
    j->by = ACTOR_DRAFT_NGRAM;
    j->n_out = model_spec_ngram(j->tokens, j->n, d->cfg.ngram_min, d->cfg.ngram_max, j->k, j->out);
    s_count(d, "time.ngram_us", (int64_t)(base_now_us() - t0));
}

/* Set up job j for the model: its state, rolled back to the longest common
 * prefix, with KV reserved for the positions it will write.  False: it does
 * not fit (the caller falls back to n-gram lookup). */
static bool s_job_prepare(actor_draft_t *d, actor_draft_job_t *j, s_prog_t *p) {
    p->st = NULL;
    /* positions 0..n+k-2 get K/V: the history, then all drafts but the last */
    int need = j->n + j->k - 1;
    if (need > d->cfg.max_ctx)
        return false;
    s_state_t *s = s_state_get(d, j->worker, j->rid);
    if (!s)
        return false;
    s->busy = true;
    s->last_used = ++d->tick;
    int rc;
    while ((rc = kv_blocks_reserve(d->kv, &s->kv, need)) == -ENOSPC && s_evict_lru(d))
        ;
    if (!rc && s->cap < need) {
        int32_t *t = realloc(s->toks, (size_t)need * sizeof *t);
        if (t) {
            s->toks = t;
            s->cap = need;
        } else {
            rc = -ENOMEM;
        }
    }
    if (rc) {
        s_state_drop(d, s_state_find(d, j->worker, j->rid));
        return false;
    }
    int lcp = 0, m = s->n_cached < j->n ? s->n_cached : j->n;
    while (lcp < m && s->toks[lcp] == j->tokens[lcp])
        lcp++;
    if (lcp >= j->n)
        lcp = j->n - 1; /* the last token runs again: its logits start the drafts */
    memcpy(s->toks + lcp, j->tokens + lcp, (size_t)(j->n - lcp) * sizeof(int32_t));
    s->n_cached = lcp;
    p->st = s;
    p->next = lcp;
    return true;
}

/* One forward pass over b_* (nt tokens, ns sequences, n_wanted rows wanted):
 * the argmax of wanted row r becomes draft `slot` of job b_job[r]. */
static int s_forward(actor_draft_t *d, int nt, int ns, int n_wanted, actor_draft_job_t *jobs,
                     int slot) {
    model_batch_t b = {nt, d->b_tok, d->b_pos, d->b_seq, d->b_want, ns, d->b_seqs};
    int got = model_ctx_forward(d->ctx, &b, kv_blocks_pool(d->kv), d->logits);
    if (got != n_wanted)
        return got < 0 ? got : -EIO;
    for (int r = 0; r < got; r++)
        jobs[d->b_job[r]].out[slot] = model_argmax(d->logits + (size_t)r * d->n_vocab, d->n_vocab);
    return 0;
}

static int s_run_model(actor_draft_t *d, actor_draft_job_t *jobs, int n_jobs) {
    s_prog_t *p = d->prog;
    int st = d->cfg.step_tokens, rc = 0, kmax = 0;
    for (int i = 0; i < n_jobs; i++) {
        actor_draft_job_t *j = &jobs[i];
        if (!s_job_prepare(d, j, &p[i])) {
            s_count(d, "fallback.ngram", 1);
            s_ngram(d, j);
            continue;
        }
        kmax = j->k > kmax ? j->k : kmax;
    }
    /* prefill: every job's new tokens, packed into passes of st tokens; the
     * last token of a job's history wants logits: its argmax is draft 0 */
    for (int i = 0; rc == 0;) {
        while (i < n_jobs && (!p[i].st || p[i].next >= jobs[i].n))
            i++;
        if (i >= n_jobs)
            break;
        int nt = 0, ns = 0, nw = 0;
        for (int q = i; q < n_jobs && nt < st; q++) {
            if (!p[q].st || p[q].next >= jobs[q].n)
                continue;
            d->b_seqs[ns] = (model_seq_view_t){p[q].st->kv.blocks, p[q].st->kv.n};
            for (; p[q].next < jobs[q].n && nt < st; p[q].next++, nt++) {
                d->b_tok[nt] = jobs[q].tokens[p[q].next];
                d->b_pos[nt] = p[q].next;
                d->b_seq[nt] = ns;
                d->b_want[nt] = p[q].next == jobs[q].n - 1;
                if (d->b_want[nt])
                    d->b_job[nw++] = q;
            }
            p[q].st->n_cached = p[q].next;
            ns++;
        }
        s_count(d, "tokens.prefill", nt);
        rc = s_forward(d, nt, ns, nw, jobs, 0);
    }
    /* decode: draft t-1 runs at position n+t-1 and yields draft t */
    for (int t = 1; t < kmax && rc == 0; t++) {
        for (int i = 0; i < n_jobs && rc == 0;) {
            int nt = 0;
            for (; i < n_jobs && nt < st; i++) {
                actor_draft_job_t *j = &jobs[i];
                if (!p[i].st || j->k <= t)
                    continue;
                s_state_t *s = p[i].st;
                d->b_seqs[nt] = (model_seq_view_t){s->kv.blocks, s->kv.n};
                d->b_tok[nt] = j->out[t - 1];
                d->b_pos[nt] = j->n + t - 1;
                d->b_seq[nt] = nt;
                d->b_want[nt] = true;
                d->b_job[nt] = i;
                s->toks[j->n + t - 1] = j->out[t - 1];
                s->n_cached = j->n + t;
                nt++;
            }
            if (nt)
                rc = s_forward(d, nt, nt, nt, jobs, t);
        }
    }
    for (int i = 0; i < n_jobs; i++) {
        if (!p[i].st)
            continue;
        p[i].st->busy = false;
        if (rc) { /* its KV may be half written: forget what it holds */
            p[i].st->n_cached = 0;
            jobs[i].n_out = 0;
        } else {
            jobs[i].n_out = jobs[i].k;
        }
        jobs[i].by = ACTOR_DRAFT_MODEL;
    }
    return rc;
}

int actor_draft_run(actor_draft_t *self, actor_draft_job_t *jobs, int n_jobs) {
    if (!self || n_jobs < 0 || (n_jobs && !jobs))
        return -EINVAL;
    for (int i = 0; i < n_jobs; i++) {
        actor_draft_job_t *j = &jobs[i];
        j->n_out = 0;
        j->by = self->model ? ACTOR_DRAFT_MODEL : ACTOR_DRAFT_NGRAM;
        if (!j->tokens || !j->out || j->n < 1 || j->k < 1 || j->k > MODEL_SPEC_MAX_K)
            return -EINVAL;
        for (int q = 0; q < i; q++)
            if (jobs[q].worker == j->worker && jobs[q].rid == j->rid)
                return -EINVAL;
        if (self->model)
            for (int t = 0; t < j->n; t++)
                if (j->tokens[t] < 0 || j->tokens[t] >= self->n_vocab)
                    return -EINVAL;
    }
    if (!self->model) {
        for (int i = 0; i < n_jobs; i++)
            s_ngram(self, &jobs[i]);
        return 0;
    }
    if (n_jobs > self->cap_prog) {
        s_prog_t *p = realloc(self->prog, (size_t)n_jobs * sizeof *p);
        if (!p)
            return -ENOMEM;
        self->prog = p;
        self->cap_prog = n_jobs;
    }
    uint64_t t0 = base_now_us();
    int rc = s_run_model(self, jobs, n_jobs);
    s_count(self, "time.model_us", (int64_t)(base_now_us() - t0));
    return rc;
}

/* ------------------------------------------------------------------ the actor */

#define S_MAX_JOBS 64 /* draft requests drafted together */

typedef struct {
    actor_env_t *env;    /* runtime */
    zsock_t *in;         /* inbound PULL */
    zsock_t *to_front;   /* PUSH to the frontend (pong, stats); NULL without one */
    zsock_t **to_worker; /* (n_workers) PUSH to each target worker, made on first use */
    int n_workers;
    actor_draft_t *drafter;     /* n-gram or model */
    actor_loop_t *loop;         /* polling, control messages, counters */
    actor_counters_t *counters; /* the loop's */
    msg_any_t *pending;         /* (S_MAX_JOBS) draft requests received, not yet answered */
    int n_pending;
} s_actor_t;

_Static_assert(ACTOR_DRAFT_NGRAM == 0 && ACTOR_DRAFT_MODEL == 1,
               "draft=ngram|model loads as its index, an actor_draft_mode_t");

const actor_opt_t actor_draft_opts[] = {
    {"draft", ACTOR_OPT_ENUM, "ngram", 0, 0, "ngram|model",
     "drafter: ngram (prompt lookup) or model (a small draft model)",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, draft)},
    {"draft_model", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "draft GGUF (same vocabulary as model, checked at start); needed by draft=model",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, draft_model)},
    {"model", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "the target's GGUF (draft=model: to check the vocabularies)",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, model)},
    {"threads", ACTOR_OPT_INT, "1", 1, 256, NULL, "threads of the draft model's forward pass",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, threads)},
    {"ngram_min", ACTOR_OPT_INT, "1", 1, 64, NULL, "shortest n-gram tried",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, ngram_min)},
    {"ngram_max", ACTOR_OPT_INT, "4", 1, 64, NULL, "longest n-gram tried (tried first)",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, ngram_max)},
    {"kv_blocks", ACTOR_OPT_INT, "256", 1, 1 << 24, NULL, "the draft model's KV pool, in blocks",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, kv_blocks)},
    {"block_size", ACTOR_OPT_INT, "16", 1, 256, NULL, "positions per KV block",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, block_size)},
    {"max_ctx", ACTOR_OPT_INT, "4096", 2, 1 << 20, NULL,
     "longest history drafted with the model (longer: n-gram)",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, max_ctx)},
    {"step_tokens", ACTOR_OPT_INT, "256", 1, 1 << 16, NULL, "tokens per draft forward pass",
     .field = ACTOR_OPT_FIELD(actor_draft_cfg_t, step_tokens)},
    {NULL},
};

static void s_reply(s_actor_t *a, const msg_draft_request_t *q, const int32_t *toks, int n) {
    if (q->worker < 0 || q->worker >= a->n_workers) {
        actor_counters_add(a->counters, "bad_worker", 1);
        return;
    }
    if (!a->to_worker[q->worker]) {
        char name[32];
        snprintf(name, sizeof name, "worker%d", q->worker);
        a->to_worker[q->worker] = actor_sock_outbound(actor_env_topology(a->env),
                                                      actor_env_name(a->env), name, ACTOR_HWM_BULK);
        if (!a->to_worker[q->worker]) {
            actor_counters_add(a->counters, "replies.dropped", 1);
            return;
        }
    }
    msg_draft_reply_t r;
    msg_draft_reply_init(&r);
    r.rid = q->rid;
    r.seq = q->seq;
    r.base = q->n_tokens;
    r.tokens = (int32_t *)toks;
    r.n_tokens = n;
    /* a late draft is worth little: wait at most ~10 ms for room, then drop */
    int rc;
    for (int i = 0;
         (rc = actor_send(a->to_worker[q->worker], MSG_DRAFT_REPLY, &r)) == -EAGAIN && i < 10; i++)
        zclock_sleep(1);
    if (rc)
        actor_counters_add(a->counters, "replies.dropped", 1);
    else
        actor_counters_add(a->counters, "tokens.proposed", n);
}

/* Draft for everything pending, in one batch, and answer each request. */
static void s_flush(s_actor_t *a) {
    if (!a->n_pending)
        return;
    actor_draft_job_t jobs[S_MAX_JOBS];
    int32_t out[S_MAX_JOBS][MODEL_SPEC_MAX_K];
    int idx[S_MAX_JOBS], nj = 0;
    /* the newest request of each (worker, rid) is drafted; older ones get no tokens */
    for (int i = a->n_pending - 1; i >= 0; i--) {
        const msg_draft_request_t *q = &a->pending[i].u.draft_request;
        if (q->worker >= a->n_workers) {
            actor_counters_add(a->counters, "bad_worker", 1); /* nobody to answer */
            continue;
        }
        bool dup = false;
        for (int x = 0; x < nj && !dup; x++)
            dup = jobs[x].worker == q->worker && jobs[x].rid == q->rid;
        if (dup) {
            s_reply(a, q, NULL, 0);
            continue;
        }
        idx[nj] = i;
        jobs[nj] =
            (actor_draft_job_t){q->worker, q->rid, q->tokens, q->n_tokens, q->k, out[nj], 0, 0};
        nj++;
    }
    int rc = actor_draft_run(a->drafter, jobs, nj);
    if (rc == -EINVAL) { /* a bad history (token out of range): draft them one by one */
        for (int x = 0; x < nj; x++)
            if (actor_draft_run(a->drafter, &jobs[x], 1))
                jobs[x].n_out = 0;
    } else if (rc) {
        actor_counters_add(a->counters, "draft.failed", 1);
    }
    for (int x = nj - 1; x >= 0; x--)
        s_reply(a, &a->pending[idx[x]].u.draft_request, jobs[x].out, jobs[x].n_out);
    for (int i = 0; i < a->n_pending; i++)
        msg_any_clear(&a->pending[i]);
    a->n_pending = 0;
}

static void s_on_request(void *self, msg_any_t *m, zmq_msg_t *raw) {
    (void)raw;
    s_actor_t *a = self;
    actor_counters_add(a->counters, "requests", 1);
    a->pending[a->n_pending++] = *m; /* owned by pending now */
    m->type = MSG_NONE;
    if (a->n_pending == S_MAX_JOBS)
        s_flush(a);
}

static void s_on_end(void *self, const msg_draft_end_t *m) {
    s_actor_t *a = self;
    s_flush(a); /* drafts still pending for it would recreate the state */
    actor_draft_end(a->drafter, m->worker, m->rid);
    actor_counters_add(a->counters, "ends", 1);
}

/* After every wakeup: what arrived is drafted together, in one batch. */
static int s_idle(void *self) {
    s_flush(self);
    return -1;
}

static void s_actor_cleanup(s_actor_t *a) {
    for (int i = 0; i < a->n_pending; i++)
        msg_any_clear(&a->pending[i]);
    free(a->pending);
    for (int i = 0; a->to_worker && i < a->n_workers; i++)
        zsock_destroy(&a->to_worker[i]);
    free(a->to_worker);
    zsock_destroy(&a->in);
    zsock_destroy(&a->to_front);
    actor_draft_destroy(&a->drafter);
    actor_loop_destroy(&a->loop);
}

int actor_draft_main(actor_env_t *env) {
    const actor_draft_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *t = actor_env_topology(env);
    const char *name = actor_env_name(env);
    s_actor_t a = {0};
    a.env = env;
    a.n_workers = actor_topology_workers(t);
    a.loop = actor_loop_new(env, &a);
    a.counters = a.loop ? actor_loop_counters(a.loop) : NULL;
    a.pending = calloc(S_MAX_JOBS, sizeof *a.pending);
    a.to_worker = calloc((size_t)(a.n_workers > 0 ? a.n_workers : 1), sizeof *a.to_worker);
    if (!a.loop || !a.pending || !a.to_worker) {
        actor_env_fail(env, "%s: out of memory", name);
        s_actor_cleanup(&a);
        return 1;
    }
    actor_draft_config_t c = {0};
    c.mode = (actor_draft_mode_t)conf->draft; /* draft=ngram|model: the index */
    if (c.mode == ACTOR_DRAFT_MODEL) {
        c.draft_model = conf->draft_model;
        c.target_model = conf->model;
        if (!c.draft_model || !c.target_model) {
            actor_env_fail(env,
                           "%s: draft=model needs draft_model=PATH and model=PATH (the "
                           "target's GGUF, to check the vocabularies)",
                           name);
            s_actor_cleanup(&a);
            return 1;
        }
    }
    c.threads = conf->threads;
    c.ngram_min = conf->ngram_min;
    c.ngram_max = conf->ngram_max;
    c.kv_blocks = conf->kv_blocks;
    c.block_size = conf->block_size;
    c.max_ctx = conf->max_ctx;
    c.step_tokens = conf->step_tokens;
    c.counters = a.counters;
    char err[512];
    a.drafter = actor_draft_new(&c, err, sizeof err);
    if (!a.drafter) {
        actor_env_fail(env, "%s: %s", name, err);
        s_actor_cleanup(&a);
        return 1;
    }
    a.in = actor_sock_inbound(t, name, ACTOR_MAX_FRAME, ACTOR_HWM_STREAM);
    const char *fe = actor_topology_endpoint(t, "frontend");
    a.to_front = fe ? actor_sock_outbound(t, name, "frontend", ACTOR_HWM_CTL) : NULL;
    if (!a.in || (fe && !a.to_front)) {
        actor_env_fail(env, "%s: cannot open its sockets", name);
        s_actor_cleanup(&a);
        return 1;
    }
    LOG_I(name, "ready: %s drafter%s%s", c.mode == ACTOR_DRAFT_MODEL ? "model" : "ngram",
          c.draft_model ? " " : "", c.draft_model ? c.draft_model : "");
    actor_env_ready(env);

    actor_loop_inbox(a.loop, a.in, a.to_front, false, "");
    actor_loop_on(a.loop, MSG_DRAFT_REQUEST, s_on_request);
    actor_loop_handle_draft_end(a.loop, s_on_end);
    actor_loop_idle(a.loop, s_idle);
    actor_loop_run(a.loop, 500);
    LOG_I(name, "stopping");
    s_actor_cleanup(&a);
    return 0;
}
