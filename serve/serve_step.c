/* serve_step.c - the target worker's step (serve_step.h): plan, attach cached
 * prefixes, reserve KV, assemble one batch (drafts after their decode token), run the
 * forward pass, then per item publish / write through, sample or verify, and end what
 * is done.  Owns only the step buffers. */
#include "serve_step.h"

#include "base_clock.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct serve_step_t {
    serve_step_config_t cfg;        /* borrowed objects and switches */
    serve_step_sink_t sink;         /* where results go */
    int n_vocab;                    /* logits per row */
    int block_size;                 /* positions per KV block */
    int max_batch;                  /* items per step */
    double step_us;                 /* EMA of a forward step's wall time */
    sched_batch_item_t *items;      /* (max_batch) */
    int32_t *b_tok, *b_pos, *b_seq; /* (room) */
    int32_t *b_slot;                /* (room) each token's KV row */
    bool *b_want;                   /* (room) */
    model_seq_view_t *b_seqs;       /* (max_batch) */
    float *logits;                  /* (rows, n_vocab) rows = max_batch * (1 + K with spec) */
    float *lp_rows;                 /* ((1 + MODEL_SPEC_MAX_K), n_vocab) log-softmax rows */
    uint64_t *mask;                 /* a grammar's token mask (words for n_vocab) */
    int d_model;                    /* width of a hidden state */
    bool *b_hid;                    /* (room) the token's hidden state is pooled */
    float *hidden;                  /* (room, d_model) final hidden states (embeddings) */
    float *vec;                     /* (d_model) an embedding being finished */
    /* sampling on the device (cfg.dev): which logits rows come to the host, and the tokens
     * of the rows picked there */
    bool *host_row;           /* (rows) */
    int32_t *dev_next;        /* (rows) */
    kern_backend_sample_t *p; /* (rows) model_dev_sample's arguments */
    const int32_t **p_hist;   /* (rows) */
    int *p_nhist;             /* (rows) */
    int32_t *p_pos;           /* (rows) */
};

static void s_count(serve_step_t *st, const char *name, int64_t v) {
    if (st->sink.count)
        st->sink.count(st->sink.arg, name, v);
}

static void s_note(serve_step_t *st, serve_step_seq_t *s, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void s_note(serve_step_t *st, serve_step_seq_t *s, const char *what, const char *fmt, ...) {
    if (!s->trace || !st->sink.note)
        return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    st->sink.note(st->sink.arg, s, what, why);
}

int serve_step_max_tokens(const sched_batch_config_t *sc, bool spec) {
    int step = sc->step_tokens < sc->max_batch ? sc->max_batch : sc->step_tokens;
    return step + (spec ? sc->max_batch * MODEL_SPEC_MAX_K : 0);
}

void serve_step_destroy(serve_step_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_step_t *st = *self_p;
    free(st->items);
    free(st->b_tok);
    free(st->b_pos);
    free(st->b_seq);
    free(st->b_slot);
    free(st->b_want);
    free(st->b_seqs);
    free(st->logits);
    free(st->lp_rows);
    free(st->mask);
    free(st->b_hid);
    free(st->hidden);
    free(st->vec);
    free(st->host_row);
    free(st->dev_next);
    free(st->p);
    free(st->p_hist);
    free(st->p_nhist);
    free(st->p_pos);
    free(st);
    *self_p = NULL;
}

serve_step_t *serve_step_new(const serve_step_config_t *cfg, const serve_step_sink_t *sink) {
    serve_step_t *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->cfg = *cfg;
    st->sink = *sink;
    const sched_batch_config_t *sc = sched_batch_config(cfg->sched);
    st->n_vocab = model_config(cfg->model)->n_vocab;
    st->block_size = kv_cache_block_size(cfg->kv);
    st->max_batch = sc->max_batch;
    int room = serve_step_max_tokens(sc, cfg->spec);
    int rows = st->max_batch * (cfg->spec ? 1 + MODEL_SPEC_MAX_K : 1);
    st->items = malloc((size_t)st->max_batch * sizeof *st->items);
    st->b_tok = malloc((size_t)room * sizeof *st->b_tok);
    st->b_pos = malloc((size_t)room * sizeof *st->b_pos);
    st->b_seq = malloc((size_t)room * sizeof *st->b_seq);
    st->b_slot = malloc((size_t)room * sizeof *st->b_slot);
    st->b_want = malloc((size_t)room * sizeof *st->b_want);
    st->b_seqs = malloc((size_t)st->max_batch * sizeof *st->b_seqs);
    st->logits = malloc((size_t)rows * st->n_vocab * sizeof *st->logits);
    st->lp_rows = malloc((size_t)(1 + MODEL_SPEC_MAX_K) * st->n_vocab * sizeof *st->lp_rows);
    st->mask = malloc(((size_t)st->n_vocab + 63) / 64 * sizeof *st->mask);
    st->d_model = model_config(cfg->model)->d_model;
    st->b_hid = malloc((size_t)room * sizeof *st->b_hid);
    st->hidden = malloc((size_t)room * st->d_model * sizeof *st->hidden);
    st->vec = malloc((size_t)st->d_model * sizeof *st->vec);
    st->host_row = malloc((size_t)rows * sizeof *st->host_row);
    st->dev_next = malloc((size_t)rows * sizeof *st->dev_next);
    st->p = malloc((size_t)rows * sizeof *st->p);
    st->p_hist = malloc((size_t)rows * sizeof *st->p_hist);
    st->p_nhist = malloc((size_t)rows * sizeof *st->p_nhist);
    st->p_pos = malloc((size_t)rows * sizeof *st->p_pos);
    if (!st->host_row || !st->dev_next || !st->p || !st->p_hist || !st->p_nhist || !st->p_pos ||
        !st->b_hid || !st->hidden || !st->vec || !st->mask || !st->items || !st->b_tok ||
        !st->b_pos || !st->b_seq || !st->b_slot || !st->b_want || !st->b_seqs || !st->logits ||
        !st->lp_rows)
        serve_step_destroy(&st);
    return st;
}

double serve_step_us(const serve_step_t *self) {
    return self->step_us;
}

int serve_step_kv_cap(const serve_step_t *self, const serve_step_seq_t *s) {
    if (s->kvc.policy.kind == KV_COMPRESS_NONE)
        return 0;
    /* after the prompt: the budget, a block of rows between compactions, a step's token
     * and its drafts */
    const int kp = s->n_prompt - s->n_carried; /* its own prompt (s_kv_prompt) */
    int b = kv_compress_budget(&s->kvc.policy, kp + s->max_tokens);
    if (s->kvc.policy.kind == KV_COMPRESS_SNAPKV) /* the prompt's rows; generated ones kept */
        b = kv_compress_budget(&s->kvc.policy, kp) + s->max_tokens;
    /* and the prompt's first decode step, should its compaction have to wait a step */
    int k = 1 + (self->cfg.spec ? MODEL_SPEC_MAX_K : 0);
    int after = b + self->block_size + k, first = kp + k;
    return after > first ? after : first;
}

int serve_step_admit(serve_step_t *self, serve_step_seq_t *s, const char **why) {
    s->fresh = true;
    int rc = sched_batch_submit_capped(self->cfg.sched, s->rid, s->n_prompt,
                                       s->max_tokens - s->n_carried, serve_step_kv_cap(self, s), s);
    if (rc == 0 && s->priority)
        sched_batch_set_priority(self->cfg.sched, s->rid, s->priority);
    if (why)
        *why = rc == 0         ? ""
               : rc == -EAGAIN ? "the worker's queue is full"
               : rc == -E2BIG  ? "prompt + max_tokens do not fit in the context or KV pool"
               : rc == -EEXIST ? "duplicate request id"
                               : "invalid request";
    return rc;
}

int serve_step_draft(serve_step_t *self, serve_step_seq_t *s, int base, const int32_t *tokens,
                     int n) {
    if (base != s->n_hist)
        return -ESTALE;
    if (n < 0 || n > MODEL_SPEC_MAX_K)
        return -EINVAL;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= self->n_vocab)
            return -EINVAL;
    memcpy(s->draft, tokens, (size_t)n * sizeof *s->draft);
    s->n_draft = n;
    s->draft_base = base;
    return 0;
}

void serve_step_publish(serve_step_t *self, serve_step_seq_t *s, int upto, bool last_partial) {
    int bs = self->block_size;
    if (upto > s->n_hist)
        upto = s->n_hist;
    int pin_end = s->pin_tokens / bs * bs;
    if (pin_end > upto)
        pin_end = upto / bs * bs;
    if (pin_end > 0)
        kv_cache_publish(self->cfg.kv, &s->kv, s->hist, pin_end, false, 200);
    kv_cache_publish(self->cfg.kv, &s->kv, s->hist, upto, last_partial, 0);
}

/* Log-softmax of a row of raw logits (the model's own distribution, before any
 * sampling transform) into out (n). */
static void s_log_softmax(const float *logits, float *out, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    for (int i = 0; i < n; i++)
        out[i] = logits[i] - lse;
}

/* s ends (out of the scheduler first). */
static void s_finish(serve_step_t *st, serve_step_seq_t *s, int index, int32_t token, int why,
                     const float *lsm) {
    sched_batch_remove(st->cfg.sched, s->rid);
    st->sink.finish(st->sink.arg, s, index, token, why, lsm);
}

static void s_fail(serve_step_t *st, serve_step_seq_t *s, int rc, const char *why) {
    sched_batch_remove(st->cfg.sched, s->rid);
    st->sink.error(st->sink.arg, s, rc, why);
}

/* Token t of s was sampled: the end of generation ends it, max_tokens too (with t),
 * otherwise it goes to the sink.  advance: positions the scheduler records before
 * the sink hears of it (-1: none, the caller advances later).  True while s goes on. */
static bool s_emit(serve_step_t *st, serve_step_seq_t *s, int32_t t, const float *lsm,
                   int advance) {
    int index = serve_step_done(s);
    if (st->cfg.tok && model_tokenizer_is_eog(st->cfg.tok, t)) {
        s_finish(st, s, -1, -1, SERVE_STEP_EOS, NULL);
        return false;
    }
    s->hist[s->n_hist++] = t;
    s_count(st, "tokens.generated", 1);
    if (index + 1 >= s->max_tokens) {
        s_finish(st, s, index, t, SERVE_STEP_LENGTH, lsm);
        return false;
    }
    if (advance >= 0)
        sched_batch_advance(st->cfg.sched, s->rid, advance, true);
    if (st->sink.token(st->sink.arg, s, index, t, lsm)) { /* a stop string matched */
        sched_batch_remove(st->cfg.sched, s->rid);
        s_count(st, "stopped", 1);
        s_count(st, "completed", 1);
        st->sink.ended(st->sink.arg, s);
        return false;
    }
    return true;
}

/* Mask lg (n_vocab logits) with s's grammar: refused tokens get -INFINITY, so greedy
 * takes the best allowed one and temperature / top-k / top-p see only allowed ones.
 * False when s ended here (nothing allowed: the sentence is complete, or the mask
 * failed). */
static bool s_constrain(serve_step_t *st, serve_step_seq_t *s, float *lg) {
    uint64_t t0 = base_now_ns();
    int rc = grammar_state_mask(s->grammar, s->gindex, st->mask);
    if (rc) {
        s_fail(st, s, rc, "the grammar's token mask failed");
        return false;
    }
    grammar_mask_apply(st->mask, lg, st->n_vocab);
    uint64_t ns = base_now_ns() - t0;
    s_count(st, "grammar.masks", 1);
    s_count(st, "grammar.mask_ns", (int64_t)ns);
    size_t words = ((size_t)st->n_vocab + 63) / 64, any = 0;
    for (size_t i = 0; i < words && !any; i++)
        any = st->mask[i] != 0;
    if (!any) {
        s_count(st, "grammar.completed", 1);
        s_finish(st, s, -1, -1, SERVE_STEP_EOS, NULL);
        return false;
    }
    return true;
}

/* Advance s's grammar over token t (an end-of-generation token ends the sentence).
 * True when s failed here (the grammar refused a token its mask allowed). */
static bool s_advance(serve_step_t *st, serve_step_seq_t *s, int32_t t) {
    int rc = grammar_state_accept_token(s->grammar, s->gindex, t);
    if (rc == 0)
        return false;
    s_count(st, "grammar.refused", 1);
    s_fail(st, s, rc, "the grammar refused a token its mask allowed");
    return true;
}

/* How many of s's nd drafts its grammar takes in turn, stopping before one it refuses
 * and before one that completes the sentence (the target's own token completes it, from
 * a row that still allows something).  The grammar's state is unchanged. */
static int s_grammar_drafts(serve_step_seq_t *s, int nd) {
    const int c0 = grammar_state_checkpoint(s->grammar);
    int ok = 0;
    while (ok < nd && grammar_state_accept_token(s->grammar, s->gindex, s->draft[ok]) == 0 &&
           grammar_state_can_continue(s->grammar))
        ok++;
    grammar_state_rollback(s->grammar, c0);
    return ok;
}

/* Mask row i of lg (nd + 1 rows) with the grammar's state after draft[0..i), as plain
 * decoding would have masked that position: model_spec_verify then accepts or replaces
 * each draft against constrained distributions.  False when s failed (a mask failed). */
static bool s_constrain_rows(serve_step_t *st, serve_step_seq_t *s, float *lg, int nd) {
    const int c0 = grammar_state_checkpoint(s->grammar);
    int rc = 0;
    for (int i = 0; i <= nd && !rc; i++) {
        rc = grammar_state_mask(s->grammar, s->gindex, st->mask);
        if (!rc)
            grammar_mask_apply(st->mask, lg + (size_t)i * st->n_vocab, st->n_vocab);
        if (!rc && i < nd)
            rc = grammar_state_accept_token(s->grammar, s->gindex, s->draft[i]);
    }
    grammar_state_rollback(s->grammar, c0);
    s_count(st, "grammar.masks", nd + 1);
    if (rc)
        s_fail(st, s, rc, "the grammar's token mask failed on a draft");
    return rc == 0;
}

/* A decode item ran with nd drafts: verify them (model_spec_verify), emit the
 * accepted tokens and the target's own next one, roll the KV of the rejected
 * positions back.  lg: (nd + 1, n_vocab) logits. */
static void s_verify(serve_step_t *st, serve_step_seq_t *s, const sched_batch_item_t *it, float *lg,
                     int nd) {
    int32_t out[MODEL_SPEC_MAX_K + 1];
    int nv = st->n_vocab;
    int h = s->n_hist;                           /* position of the first new token */
    for (int i = 0; s->logprobs && i <= nd; i++) /* before verify changes the rows */
        s_log_softmax(lg + (size_t)i * nv, st->lp_rows + (size_t)i * nv, nv);
    if (s->grammar && !s_constrain_rows(st, s, lg, nd))
        return;
    int e =
        model_spec_verify(st->cfg.sampler, &s->sp, lg, s->draft, nd, s->hist, s->n_hist, h, out);
    s->n_draft = 0;
    if (e < 1) {
        s_fail(st, s, e < 0 ? e : -EIO, "speculative verification failed");
        return;
    }
    int acc = e - 1;
    model_spec_adapt_observe(&s->adapt, nd, acc);
    s->proposed += nd;
    s->accepted += acc;
    s_count(st, "spec.proposed", nd);
    s_count(st, "spec.accepted", acc);
    s_count(st, "spec.steps", 1);
    /* positions it->pos0 .. it->pos0 + acc hold valid KV; the rest is rolled back */
    s->n_computed = it->pos0 + 1 + acc;
    kv_cache_truncate(st->cfg.kv, &s->kv, s->n_computed - s->kv_dropped);
    int n_emit = 0;
    for (int i = 0; i < e; i++) {
        const float *lsm = s->logprobs ? st->lp_rows + (size_t)i * nv : NULL;
        if (s->grammar && s_advance(st, s, out[i]))
            return;
        if (!s_emit(st, s, out[i], lsm, -1))
            return;
        n_emit++;
        if (s->grammar && !grammar_state_can_continue(s->grammar)) { /* the sentence is done */
            s_count(st, "grammar.completed", 1);
            s_finish(st, s, -1, -1, SERVE_STEP_EOS, NULL);
            return;
        }
    }
    sched_batch_advance_spec(st->cfg.sched, s->rid, 1 + acc, n_emit);
    if (st->sink.decoded)
        st->sink.decoded(st->sink.arg, s);
}

/* The prompt as KV compression sees it: the request's own prompt, without the tokens it
 * generated before a preemption or before it was resumed here (n_carried), which it
 * recomputes one per step, compressed as they were the first time (s_kv_chunk). */
static int s_kv_prompt(const serve_step_seq_t *s) {
    return s->n_prompt - s->n_carried;
}

/* A compressed request's prefill item: its own prompt in any chunks, but the carried
 * tokens one per step, so that each is computed over the rows it had the first time and
 * the compressed state, a deterministic function of the tokens, comes out the same. */
static void s_kv_chunk(const serve_step_seq_t *s, sched_batch_item_t *it) {
    const int kp = s_kv_prompt(s);
    if (it->pos0 >= kp)
        it->n = 1;
    else if (it->pos0 + it->n > kp)
        it->n = kp - it->pos0;
    it->sample = it->pos0 + it->n == s->n_prompt;
}

/* Compress s's KV if its policy says so now (before its next tokens reserve rows): the
 * rows it drops are counted in kv_dropped.  A failure (no block for a copy-on-write)
 * leaves it uncompressed until the next step. */
static void s_compress(serve_step_t *st, serve_step_seq_t *s) {
    const int rows = s->n_computed - s->kv_dropped, kp = s_kv_prompt(s);
    if (rows <= 0)
        return;
    int r =
        kv_compress_run(&s->kvc, st->cfg.kv, &s->kv, rows, s->n_computed, kp, s->n_computed >= kp);
    if (r < 0) {
        s_count(st, "kv_compress.failed", 1);
        return;
    }
    if (r == rows)
        return;
    s->kv_dropped += rows - r;
    s_count(st, "kv_compress.compactions", 1);
    s_count(st, "kv_compress.rows_dropped", rows - r);
    if (s->trace) {
        char spec[KV_COMPRESS_SPEC_MAX];
        kv_compress_format(&s->kvc.policy, spec, sizeof spec);
        const kern_kv_pool_t *pool = kv_cache_pool(st->cfg.kv);
        double row_bytes = (double)pool->block_bytes / pool->block_size;
        s_note(st, s, "kv_compress",
               "%s: %d of %d positions' KV rows kept in every layer and KV head (%d dropped "
               "here, %d in all); %.1f KiB of KV held instead of %.1f KiB",
               spec, r, s->n_computed, rows - r, s->kv_dropped, r * row_bytes / 1024,
               s->n_computed * row_bytes / 1024);
    }
}

/* How many of nd drafts a compressed sequence verifies this step so that every token
 * is computed over the very rows a run of one token per step would hold (so speculation
 * leaves its output unchanged): window, as long as no compaction would fall between them
 * (its rows stay within the budget); h2o, none (a rejected draft's attention would count
 * in the weights); snapkv, all (it compresses once, after the prompt). */
static int s_kv_drafts(const serve_step_seq_t *s, int nd) {
    const kv_compress_t *p = &s->kvc.policy;
    if (p->kind == KV_COMPRESS_NONE || p->kind == KV_COMPRESS_SNAPKV)
        return nd;
    if (p->kind == KV_COMPRESS_H2O)
        return 0;
    const int rows = s->n_computed - s->kv_dropped, pos = s->n_computed;
    int j = 0; /* draft j + 1 sits at row rows + j + 1, position pos + j + 1 */
    while (j < nd && rows + j + 1 <= kv_compress_budget(p, pos + j + 1))
        j++;
    return j;
}

/* A request runs for the first time: attach its cached prefix and start its
 * first prefill chunk after it (the positions skipped are reported to the
 * scheduler with the chunk, in s->skip). */
static void s_attach(serve_step_t *st, serve_step_seq_t *s, sched_batch_item_t *it) {
    s->fresh = false;
    s->skip = 0;
    if (!it->prefill || it->pos0 != 0 || s->embed_sum) /* an embedding pools every position */
        return;
    /* a policy ranking rows by attention needs the queries of what it ranks to run, and
     * carried tokens are recomputed one per step (s_kv_chunk) */
    int lim = s->kvc.policy.kind == KV_COMPRESS_NONE
                  ? s->n_prompt
                  : kv_compress_cached_max(&s->kvc.policy, s_kv_prompt(s));
    int c = lim > 0 ? kv_cache_attach_prefix(st->cfg.kv, &s->kv, s->hist,
                                             lim < s->n_prompt ? lim + 1 : s->n_prompt)
                    : 0;
    s_note(st, s, "admit",
           "a batch slot and KV room (its reservation: prompt + max_tokens); %d of %d positions "
           "attached from the prefix cache",
           c > 0 ? c : 0, s->n_prompt);
    serve_metrics_step_prefix(st->cfg.metrics, c > 0 ? c : 0);
    if (c <= 0)
        return;
    s->n_cached = s->n_computed = s->skip = c;
    s_count(st, "kv.cached_tokens", c);
    it->pos0 = c;
    if (it->n > s->n_prompt - c)
        it->n = s->n_prompt - c;
    it->sample = it->pos0 + it->n == s->n_prompt;
}

/* The batch of the step's items: each item's tokens, then a decode item's drafts.
 * The number of tokens, or -ENOSPC. */
static int s_assemble(serve_step_t *st, int n_items, bool *any_hidden) {
    uint64_t now = base_now_us();
    int nt = 0;
    *any_hidden = false;
    for (int k = 0; k < n_items; k++) {
        sched_batch_item_t *it = &st->items[k];
        serve_step_seq_t *s = it->user;
        if (s->fresh)
            s_attach(st, s, it);
        if (s->kvc.policy.kind != KV_COMPRESS_NONE && !s->embed_sum) {
            if (it->prefill)
                s_kv_chunk(s, it);
            s_compress(st, s);
        }
        const int d = s->kv_dropped; /* position p is row p - d */
        if (kv_cache_reserve(st->cfg.kv, &s->kv, it->pos0 - d, it->pos0 + it->n - d)) {
            /* cannot happen while the scheduler's accounting holds: every
             * block in use belongs to a running request's reservation */
            s_count(st, "kv.reserve_failed", 1);
            return -ENOSPC;
        }
        if (it->prefill && !s->t_prefill)
            s->t_prefill = now;
        /* a decode item verifies its drafts in the same pass: the last known
         * token then draft[0..nd) at the following positions, logits for all */
        int nd = 0;
        if (st->cfg.spec && !it->prefill && it->sample && s->n_draft > 0 &&
            s->draft_base == s->n_hist) {
            nd = s->grammar ? s_grammar_drafts(s, s->n_draft) : s->n_draft;
            if (s->grammar && nd < s->n_draft)
                s_count(st, "grammar.drafts_cut", s->n_draft - nd);
            int kd = s_kv_drafts(s, nd);
            if (kd < nd)
                s_count(st, "kv_compress.drafts_cut", nd - kd);
            nd = kd;
            if (nd && kv_cache_reserve(st->cfg.kv, &s->kv, it->pos0 - d, it->pos0 + 1 + nd - d))
                nd = 0; /* no room: plain decode this step */
        }
        s->n_draft = nd; /* what this step verifies */
        int from;
        float *w = kv_compress_seq_weights(&s->kvc, s_kv_prompt(s), &from);
        st->b_seqs[k] = (model_seq_view_t){s->kv.blocks, s->kv.n, w, s->kvc.w_stride, from};
        for (int j = 0; j < it->n; j++, nt++) {
            st->b_tok[nt] = s->hist[it->pos0 + j];
            st->b_pos[nt] = it->pos0 + j;
            st->b_slot[nt] = it->pos0 + j - d;
            st->b_seq[nt] = k;
            st->b_want[nt] = it->sample && j == it->n - 1 && !s->embed_sum;
            st->b_hid[nt] = s->embed_sum != NULL;
            *any_hidden |= s->embed_sum != NULL;
        }
        for (int j = 0; j < nd; j++, nt++) {
            st->b_tok[nt] = s->draft[j];
            st->b_pos[nt] = it->pos0 + 1 + j;
            st->b_slot[nt] = it->pos0 + 1 + j - d;
            st->b_seq[nt] = k;
            st->b_want[nt] = true;
            st->b_hid[nt] = false;
        }
        if (nd)
            s_count(st, "tokens.verified", nd);
        s_count(st, it->prefill ? "tokens.prefill" : "tokens.decode", it->n);
    }
    return nt;
}

/* An embedding item ran: add the hidden states of its tokens (batch rows row0 ..
 * row0 + it->n) to s's sum; after its last prompt position, the mean, L2-normalised,
 * goes to the sink and s ends (nothing of it is published: its blocks are released). */
static void s_pool(serve_step_t *st, serve_step_seq_t *s, const sched_batch_item_t *it, int row0,
                   int skip) {
    int d = st->d_model;
    for (int j = 0; j < it->n; j++) {
        const float *h = st->hidden + (size_t)(row0 + j) * d;
        for (int i = 0; i < d; i++)
            s->embed_sum[i] += h[i];
    }
    if (!it->sample) {
        sched_batch_advance(st->cfg.sched, s->rid, skip + it->n, false);
        return;
    }
    double norm = 0;
    for (int i = 0; i < d; i++) {
        double m = s->embed_sum[i] / s->n_prompt;
        norm += m * m;
    }
    norm = sqrt(norm);
    for (int i = 0; i < d; i++) /* a zero vector stays zero (llama.cpp does the same) */
        st->vec[i] = norm > 0 ? (float)(s->embed_sum[i] / s->n_prompt / norm) : 0.0f;
    s_count(st, "embeddings", 1);
    sched_batch_remove(st->cfg.sched, s->rid);
    st->sink.embedded(st->sink.arg, s, st->vec, d);
}

/* True when s's next token can be picked on the device (only its id coming back): no drafts
 * to verify, no grammar, no logprobs, no logit bias or OpenAI penalties (the device sampler
 * has neither), not an embedding. */
static bool s_device_picks(const serve_step_t *st, const serve_step_seq_t *s, int nd) {
    const model_sampler_params_t *p = &s->sp;
    return st->cfg.dev && nd == 0 && !s->grammar && !s->logprobs && !s->embed_sum &&
           p->n_bias == 0 && p->presence_penalty == 0 && p->frequency_penalty == 0;
}

/* Which logits rows of this step the host needs (host_row); the others are picked on the
 * device after the forward pass. */
static void s_plan_rows(serve_step_t *st, int n_items) {
    int row = 0;
    for (int k = 0; k < n_items; k++) {
        const sched_batch_item_t *it = &st->items[k];
        const serve_step_seq_t *s = it->user;
        if (!it->sample || s->embed_sum)
            continue;
        int nd = it->prefill ? 0 : s->n_draft;
        bool host = !s_device_picks(st, s, nd);
        for (int j = 0; j <= nd; j++)
            st->host_row[row + j] = host;
        row += 1 + nd;
    }
}

/* Pick rows [r0, r1) on the device into dev_next; a run the device refuses (-ENOTSUP:
 * CUDA's top-k limit, a long repetition window) comes to the host instead. */
static int s_pick_run(serve_step_t *st, int r0, int r1) {
    int n = r1 - r0;
    int rc = model_dev_sample(st->cfg.dev, r0, n, st->p, st->p_hist, st->p_nhist, st->p_pos,
                              st->dev_next + r0);
    if (rc != -ENOTSUP) {
        s_count(st, "sample.device", rc ? 0 : n);
        return rc;
    }
    for (int j = r0; j < r1; j++)
        st->host_row[j] = true;
    return model_dev_logits(st->cfg.dev, r0, n, st->logits + (size_t)r0 * st->n_vocab);
}

/* The tokens of the rows the device picks (s_plan_rows), in runs of consecutive rows.  0 or
 * a backend's error. */
static int s_device_pick(serve_step_t *st, int n_items) {
    int row = 0, r0 = 0, rc = 0;
    for (int k = 0; k < n_items && !rc; k++) {
        const sched_batch_item_t *it = &st->items[k];
        const serve_step_seq_t *s = it->user;
        if (!it->sample || s->embed_sum)
            continue;
        if (st->host_row[row]) { /* a host row ends the run before it */
            rc = row > r0 ? s_pick_run(st, r0, row) : 0;
            row += 1 + (it->prefill ? 0 : s->n_draft);
            r0 = row;
            continue;
        }
        int j = row - r0; /* its place in the run's arguments */
        st->p[j] = (kern_backend_sample_t){
            s->sp.temperature,    s->sp.top_k,         s->sp.top_p, s->sp.min_p,
            s->sp.repeat_penalty, s->sp.repeat_last_n, s->sp.seed};
        st->p_hist[j] = s->hist;
        st->p_nhist[j] = s->n_hist;
        st->p_pos[j] = it->pos0 + it->n;
        row += 1;
    }
    return !rc && row > r0 ? s_pick_run(st, r0, row) : rc;
}

/* s was preempted (sched_batch_take_preempted): what it computed is published, its blocks
 * released, its tokens so far become prompt (n_carried keeps its completion index). */
static void s_preempt(serve_step_t *st, serve_step_seq_t *s) {
    int was = s->n_computed;
    if (!s->embed_sum && s->n_computed > 0)
        serve_step_publish(st, s, s->n_computed, false);
    kv_cache_release(st->cfg.kv, &s->kv);
    s->n_carried += s->n_hist - s->n_prompt;
    s->n_prompt = s->n_hist;
    s->n_computed = s->n_cached = s->skip = 0;
    s->n_draft = 0;
    s->fresh = true;
    s->kv_dropped = 0; /* it runs again from its first position: compressed again */
    kv_compress_seq_reset(&s->kvc);
    s->preemptions++;
    if (s->embed_sum) /* an embedding pools again from its first position */
        memset(s->embed_sum, 0, (size_t)st->d_model * sizeof *s->embed_sum);
    s_count(st, "preempted", 1);
    s_note(st, s, "preempt",
           "a request of a better priority needed its room: its %d computed positions stay in "
           "the prefix cache, its %d tokens so far are recomputed from there when it runs again",
           was, s->n_hist);
}

int serve_step_run(serve_step_t *self) {
    serve_step_t *st = self;
    int n_items = sched_batch_plan(st->cfg.sched, st->items, st->max_batch);
    uint64_t rids[16];
    for (int n; (n = sched_batch_take_preempted(st->cfg.sched, rids, 16)) > 0;)
        for (int i = 0; i < n; i++) {
            serve_step_seq_t *s = sched_batch_find(st->cfg.sched, rids[i]);
            if (s)
                s_preempt(st, s);
        }
    if (n_items <= 0)
        return 0;
    bool any_hidden;
    int nt = s_assemble(st, n_items, &any_hidden);
    if (nt < 0)
        return nt;
    model_batch_t b = {nt,         st->b_tok, st->b_pos,  st->b_seq,
                       st->b_want, n_items,   st->b_seqs, st->b_slot};
    uint64_t t_fwd = base_now_us();
    const kern_kv_pool_t *pool = kv_cache_pool(st->cfg.kv);
    bool *hid = any_hidden ? st->b_hid : NULL;
    int got;
    if (st->cfg.dev) {
        s_plan_rows(st, n_items);
        got = model_dev_forward_rows(st->cfg.dev, &b, pool, st->logits, hid, st->hidden,
                                     st->host_row);
        int rc = got < 0 ? 0 : s_device_pick(st, n_items);
        got = rc ? rc : got;
    } else {
        got = model_ctx_forward_hidden(st->cfg.ctx, &b, pool, st->logits, hid, st->hidden);
    }
    double dt = (double)(base_now_us() - t_fwd);
    st->step_us = st->step_us > 0 ? 0.9 * st->step_us + 0.1 * dt : dt;
    s_count(st, "steps", 1);
    serve_metrics_step_observe(st->cfg.metrics, n_items, nt);
    if (got < 0) {
        for (int k = 0; k < n_items; k++)
            s_fail(st, st->items[k].user, got, "forward pass failed");
        return got;
    }
    uint64_t now = base_now_us();
    int row = 0, nv = st->n_vocab, brow = 0; /* brow: the item's first token in the batch */
    for (int k = 0; k < n_items; k++) {
        sched_batch_item_t *it = &st->items[k];
        serve_step_seq_t *s = it->user;
        if (it->prefill)
            s_note(st, s, "prefill", "positions %d..%d of %d in a step of %d requests, %d tokens",
                   it->pos0, it->pos0 + it->n, s->n_prompt, n_items, nt);
        else
            s_note(st, s, "decode",
                   "token %d in a step of %d requests, %d tokens; %d drafts verified%s%s",
                   serve_step_done(s), n_items, nt, s->n_draft, s->n_draft ? ": " : "",
                   s->n_draft ? s->spec_why : "");
        s->n_computed = it->pos0 + it->n;
        int row0 = brow;
        brow += it->n + (it->prefill ? 0 : s->n_draft);
        if (s->embed_sum) {
            if (!s->t_first && it->sample)
                s->t_first = s->t_last = now;
            const int skip = s->skip;
            s->skip = 0;
            s_pool(st, s, it, row0, skip); /* may end s (its sink frees it) */
            continue;
        }
        /* full blocks are shareable as soon as they are computed; with write-through
         * they go to the lower tiers then too */
        bool wt = st->cfg.write_through && st->sink.written;
        if (it->prefill || (wt && s->n_computed % st->block_size == 0))
            serve_step_publish(st, s, s->n_computed, false);
        if (wt)
            kv_cache_write_through(st->cfg.kv, &s->kv, st->sink.written, st->sink.arg);
        int skip = s->skip; /* cached positions before this chunk (first chunk only) */
        s->skip = 0;
        if (!it->sample) {
            sched_batch_advance(st->cfg.sched, s->rid, skip + it->n, false);
            continue;
        }
        float *lg = st->logits + (size_t)row * nv;
        int nd = it->prefill ? 0 : s->n_draft;
        row += 1 + nd;
        int pos = it->pos0 + it->n;
        if (!s->t_first)
            s->t_first = now;
        s->t_last = now;
        if (nd > 0) {
            s_verify(st, s, it, lg, nd);
            continue;
        }
        if (s->logprobs)
            s_log_softmax(lg, st->lp_rows, nv);
        if (s->grammar && !s_constrain(st, s, lg))
            continue;
        int32_t next =
            st->cfg.dev && !st->host_row[row - 1]
                ? st->dev_next[row - 1] /* picked on the device */
                : model_sampler_sample(st->cfg.sampler, &s->sp, lg, s->hist, s->n_hist, pos);
        if (s->grammar && s_advance(st, s, next))
            continue;
        if (!s_emit(st, s, next, s->logprobs ? st->lp_rows : NULL, skip + it->n))
            continue;
        if (s->grammar && !grammar_state_can_continue(s->grammar)) { /* the sentence is done */
            s_count(st, "grammar.completed", 1);
            s_finish(st, s, -1, -1, SERVE_STEP_EOS, NULL);
            continue;
        }
        if (st->sink.decoded)
            st->sink.decoded(st->sink.arg, s);
    }
    return n_items;
}
