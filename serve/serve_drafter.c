/* serve_drafter.c - the n-gram and model drafters (serve_drafter.h): one table of
 * operations per implementation; the model drafter owns its model, forward scratch and
 * a paged KV pool (kvstore/kv_blocks) with one state per (worker, rid). */
#include "serve_drafter.h"

#include "base_clock.h"
#include "kv_blocks.h"
#include "model.h"
#include "model_spec.h"
#include "model_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ vocabulary check */

/* Rows of token_embd (the logits' width), or -1. */
static int64_t s_embd_rows(const model_gguf_t *g) {
    const model_gguf_tensor_t *t = model_gguf_tensor(g, "token_embd.weight");
    return t && t->n_dims == 2 ? t->ne[1] : -1;
}

int serve_drafter_check_vocab(const model_gguf_t *target, const model_gguf_t *draft, char *err,
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
    int base;           /* history length of its last job (its drafts follow it) */
} s_state_t;

/* Per-job progress inside s_model_propose. */
typedef struct {
    s_state_t *st; /* NULL: not drafted with the model */
    int next;      /* next position to prefill */
} s_prog_t;

/* One implementation of the interface (serve_drafter.h says what each does). */
typedef struct {
    const char *name;
    int (*propose)(serve_drafter_t *d, serve_drafter_job_t *jobs, int n_jobs);
    void (*accept)(serve_drafter_t *d, int worker, uint64_t rid, int n_accepted);
    void (*reset)(serve_drafter_t *d, int worker, uint64_t rid);
} s_ops_t;

struct serve_drafter_t {
    const s_ops_t *ops;         /* the n-gram or the model drafter */
    serve_drafter_config_t cfg; /* with defaults filled in (paths not kept) */
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

static void s_count(serve_drafter_t *d, const char *name, int64_t v) {
    if (d->cfg.count)
        d->cfg.count(d->cfg.count_arg, name, v, false);
}

static void s_count_states(serve_drafter_t *d) {
    if (d->cfg.count)
        d->cfg.count(d->cfg.count_arg, "states", d->n_states, true);
}

static void s_state_free(serve_drafter_t *d, s_state_t **sp) {
    s_state_t *s = *sp;
    if (!s)
        return;
    kv_blocks_release(d->kv, &s->kv);
    free(s->toks);
    free(s);
    *sp = NULL;
}

/* Remove states[i] (order is not kept). */
static void s_state_drop(serve_drafter_t *d, int i) {
    s_state_free(d, &d->states[i]);
    d->states[i] = d->states[--d->n_states];
    s_count_states(d);
}

static int s_state_find(const serve_drafter_t *d, int worker, uint64_t rid) {
    for (int i = 0; i < d->n_states; i++)
        if (d->states[i]->worker == worker && d->states[i]->rid == rid)
            return i;
    return -1;
}

static s_state_t *s_state_get(serve_drafter_t *d, int worker, uint64_t rid) {
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
    s_count_states(d);
    return s;
}

/* Drop the least recently used state that is not busy.  False when none is. */
static bool s_evict_lru(serve_drafter_t *d) {
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

void serve_drafter_destroy(serve_drafter_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_drafter_t *d = *self_p;
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

static const s_ops_t s_ngram_ops, s_model_ops;

serve_drafter_t *serve_drafter_new(const serve_drafter_config_t *cfg, char *err, size_t errlen) {
    serve_drafter_t *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    serve_drafter_config_t c = *cfg;
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
    c.draft_model = c.target_model = NULL; /* borrowed: not kept */
    d->cfg = c;
    d->ops = cfg->mode == SERVE_DRAFTER_MODEL ? &s_model_ops : &s_ngram_ops;
    if (cfg->mode == SERVE_DRAFTER_NGRAM)
        return d;
    if (cfg->mode != SERVE_DRAFTER_MODEL || !cfg->draft_model) {
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
        int rc = serve_drafter_check_vocab(tg, model_file(d->model), err, errlen);
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
    serve_drafter_destroy(&d);
    return NULL;
}

static void s_ngram(serve_drafter_t *d, serve_drafter_job_t *j) {
    uint64_t t0 = base_now_us();
    j->by = SERVE_DRAFTER_NGRAM;
    j->n_out = model_spec_ngram(j->tokens, j->n, d->cfg.ngram_min, d->cfg.ngram_max, j->k, j->out);
    s_count(d, "time.ngram_us", (int64_t)(base_now_us() - t0));
}

/* Set up job j for the model: its state, rolled back to the longest common
 * prefix, with KV reserved for the positions it will write.  False: it does
 * not fit (the caller falls back to n-gram lookup). */
static bool s_job_prepare(serve_drafter_t *d, serve_drafter_job_t *j, s_prog_t *p) {
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
    s->base = j->n;
    p->st = s;
    p->next = lcp;
    return true;
}

/* One forward pass over b_* (nt tokens, ns sequences, n_wanted rows wanted):
 * the argmax of wanted row r becomes draft `slot` of job b_job[r]. */
static int s_forward(serve_drafter_t *d, int nt, int ns, int n_wanted, serve_drafter_job_t *jobs,
                     int slot) {
    model_batch_t b = {nt, d->b_tok, d->b_pos, d->b_seq, d->b_want, ns, d->b_seqs, NULL};
    int got = model_ctx_forward(d->ctx, &b, kv_blocks_pool(d->kv), d->logits);
    if (got != n_wanted)
        return got < 0 ? got : -EIO;
    for (int r = 0; r < got; r++)
        jobs[d->b_job[r]].out[slot] = model_argmax(d->logits + (size_t)r * d->n_vocab, d->n_vocab);
    return 0;
}

static int s_run_model(serve_drafter_t *d, serve_drafter_job_t *jobs, int n_jobs) {
    s_prog_t *p = d->prog;
    int st = d->cfg.step_tokens, rc = 0, kmax = 0;
    for (int i = 0; i < n_jobs; i++) {
        serve_drafter_job_t *j = &jobs[i];
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
            d->b_seqs[ns] = (model_seq_view_t){p[q].st->kv.blocks, p[q].st->kv.n, NULL, 0, 0};
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
                serve_drafter_job_t *j = &jobs[i];
                if (!p[i].st || j->k <= t)
                    continue;
                s_state_t *s = p[i].st;
                d->b_seqs[nt] = (model_seq_view_t){s->kv.blocks, s->kv.n, NULL, 0, 0};
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
        jobs[i].by = SERVE_DRAFTER_MODEL;
    }
    return rc;
}

/* ------------------------------------------------------------------ n-gram lookup */

static int s_ngram_propose(serve_drafter_t *d, serve_drafter_job_t *jobs, int n_jobs) {
    for (int i = 0; i < n_jobs; i++)
        s_ngram(d, &jobs[i]);
    return 0;
}

static void s_ngram_accept(serve_drafter_t *d, int worker, uint64_t rid, int n_accepted) {
    (void)d, (void)worker, (void)rid, (void)n_accepted; /* stateless */
}

static void s_ngram_reset(serve_drafter_t *d, int worker, uint64_t rid) {
    (void)d, (void)worker, (void)rid; /* stateless */
}

static const s_ops_t s_ngram_ops = {"ngram", s_ngram_propose, s_ngram_accept, s_ngram_reset};

/* ------------------------------------------------------------------ the draft model */

static int s_model_propose(serve_drafter_t *d, serve_drafter_job_t *jobs, int n_jobs) {
    for (int i = 0; i < n_jobs; i++)
        for (int t = 0; t < jobs[i].n; t++)
            if (jobs[i].tokens[t] < 0 || jobs[i].tokens[t] >= d->n_vocab)
                return -EINVAL;
    if (n_jobs > d->cap_prog) {
        s_prog_t *p = realloc(d->prog, (size_t)n_jobs * sizeof *p);
        if (!p)
            return -ENOMEM;
        d->prog = p;
        d->cap_prog = n_jobs;
    }
    uint64_t t0 = base_now_us();
    int rc = s_run_model(d, jobs, n_jobs);
    s_count(d, "time.model_us", (int64_t)(base_now_us() - t0));
    return rc;
}

/* The last proposals continued a history of s->base tokens; positions base .. base +
 * n_accepted - 1 (the accepted drafts) stay valid, the rest is computed again. */
static void s_model_accept(serve_drafter_t *d, int worker, uint64_t rid, int n_accepted) {
    int i = s_state_find(d, worker, rid);
    if (i < 0 || n_accepted < 0)
        return;
    s_state_t *s = d->states[i];
    int keep = s->base + n_accepted;
    if (s->n_cached > keep)
        s->n_cached = keep;
}

static void s_model_reset(serve_drafter_t *d, int worker, uint64_t rid) {
    int i = s_state_find(d, worker, rid);
    if (i >= 0)
        s_state_drop(d, i);
}

static const s_ops_t s_model_ops = {"model", s_model_propose, s_model_accept, s_model_reset};

/* ------------------------------------------------------------------ the interface */

const char *serve_drafter_name(const serve_drafter_t *self) {
    return self->ops->name;
}

int serve_drafter_propose(serve_drafter_t *self, serve_drafter_job_t *jobs, int n_jobs) {
    if (!self || n_jobs < 0 || (n_jobs && !jobs))
        return -EINVAL;
    for (int i = 0; i < n_jobs; i++) {
        serve_drafter_job_t *j = &jobs[i];
        j->n_out = 0;
        j->by = self->model ? SERVE_DRAFTER_MODEL : SERVE_DRAFTER_NGRAM;
        if (!j->tokens || !j->out || j->n < 1 || j->k < 1 || j->k > MODEL_SPEC_MAX_K)
            return -EINVAL;
        for (int q = 0; q < i; q++)
            if (jobs[q].worker == j->worker && jobs[q].rid == j->rid)
                return -EINVAL;
    }
    return self->ops->propose(self, jobs, n_jobs);
}

void serve_drafter_accept(serve_drafter_t *self, int worker, uint64_t rid, int n_accepted) {
    self->ops->accept(self, worker, rid, n_accepted);
}

void serve_drafter_reset(serve_drafter_t *self, int worker, uint64_t rid) {
    self->ops->reset(self, worker, rid);
}

int serve_drafter_states(const serve_drafter_t *self) {
    return self->n_states;
}

int serve_drafter_cached(const serve_drafter_t *self, int worker, uint64_t rid) {
    int i = s_state_find(self, worker, rid);
    return i < 0 ? 0 : self->states[i]->n_cached;
}
