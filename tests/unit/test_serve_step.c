/* test_serve_step.c - serve/serve_step: the target worker's step without sockets.  A
 * step admits requests, runs a prompt in prefill chunks (no token before its last chunk),
 * puts decode tokens before prefill chunks, ends a request on max_tokens or when the sink
 * says a stop string matched, and refuses what cannot fit.  On the default model, greedy
 * generation through the step gives the same tokens as plain greedy decoding with the
 * model API (model_ctx_forward, one position at a time from an empty cache), and a draft
 * is verified in the decode pass: the accepted part and the target's own token are
 * emitted, the KV of the rejected positions rolled back; both again with the forward pass
 * on the backend seam (model_dev_forward on the CPU backend, the KV pool in the backend's
 * memory: a GPU worker's path).  The ordering cases run on a small synthetic model
 * (test_synth_model), so they need no download. */
#include "serve_step.h"

#include "kern_kv.h"
#include "kv_codec.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char DIR_[256], SYNTH[300];
static bool S_DEV; /* the world runs its forward pass on the CPU backend's seam */

/* A request as a test holds it: the step's part first, then what the sink collected. */
typedef struct {
    serve_step_seq_t seq;
    int32_t got[64]; /* tokens delivered (token and finish), in order */
    int n_got;
    int finish;      /* SERVE_STEP_*, or -1 while it runs */
    bool freed;      /* finish, ended or error came */
    int stop_after;  /* the sink reports a stop string after this many tokens (0: never) */
    int32_t buf[96]; /* hist */
} s_req_t;

/* Everything a worker would own, and the counters of the last step. */
typedef struct {
    model_t *model;
    model_tokenizer_t *tok;
    model_ctx_t *ctx;   /* the CPU forward, or */
    kern_backend_t *be; /* (S_DEV) the backend and */
    model_dev_t *dev;   /* the forward pass on it */
    kv_cache_t *kv;
    sched_batch_t *sched;
    model_sampler_t *sampler;
    serve_step_t *step;
    int64_t prefill, decode, verified; /* tokens of the last step */
    int64_t device_picked;             /* tokens picked on the device, in all */
    int64_t preempted;                 /* requests preempted, in all */
    int errors;
} s_world_t;

static bool s_token(void *arg, serve_step_seq_t *seq, int index, int32_t token, const float *lsm) {
    (void)arg, (void)lsm;
    s_req_t *r = (s_req_t *)seq;
    ck_assert_int_eq(index, r->n_got); /* in order, once */
    r->got[r->n_got++] = token;
    return r->stop_after && r->n_got >= r->stop_after;
}

static void s_finish(void *arg, serve_step_seq_t *seq, int index, int32_t token, int why,
                     const float *lsm) {
    (void)arg, (void)lsm;
    s_req_t *r = (s_req_t *)seq;
    if (index >= 0) {
        ck_assert_int_eq(index, r->n_got);
        r->got[r->n_got++] = token;
    }
    r->finish = why;
    r->freed = true;
}

static void s_ended(void *arg, serve_step_seq_t *seq) {
    (void)arg;
    ((s_req_t *)seq)->freed = true;
}

static void s_error(void *arg, serve_step_seq_t *seq, int rc, const char *why) {
    (void)rc, (void)why;
    ((s_world_t *)arg)->errors++;
    ((s_req_t *)seq)->freed = true;
}

static void s_count(void *arg, const char *name, int64_t value) {
    s_world_t *w = arg;
    if (!strcmp(name, "tokens.prefill"))
        w->prefill += value;
    else if (!strcmp(name, "tokens.decode"))
        w->decode += value;
    else if (!strcmp(name, "tokens.verified"))
        w->verified += value;
    else if (!strcmp(name, "sample.device"))
        w->device_picked += value;
    else if (!strcmp(name, "preempted"))
        w->preempted += value;
}

/* A world on the model at path: max_batch, step_tokens, KV blocks of 4 positions (f32,
 * so that the step computes what the oracle computes); with_tok: end on EOG tokens. */
static void s_world_init(s_world_t *w, const char *path, int max_batch, int step_tokens,
                         bool with_tok, bool spec) {
    char err[256];
    memset(w, 0, sizeof *w);
    w->model = model_load(path, err, sizeof err);
    ck_assert_msg(w->model != NULL, "%s", err);
    const model_config_t *cfg = model_config(w->model);
    if (with_tok) {
        w->tok = model_tokenizer_new(model_file(w->model), err, sizeof err);
        ck_assert_msg(w->tok != NULL, "%s", err);
    }
    sched_batch_config_t sc = {max_batch, 2, 64, 4, step_tokens, 256, 0, true};
    w->sched = sched_batch_new(&sc);
    int room = serve_step_max_tokens(&sc, spec);
    if (S_DEV) {
        w->be = kern_backend_cpu_new(NULL);
        ck_assert_ptr_nonnull(w->be);
        w->dev = model_dev_new(w->model, w->be, room, max_batch, 256 / 4, err, sizeof err);
        ck_assert_msg(w->dev != NULL, "%s", err);
    } else {
        w->ctx = model_ctx_new(w->model, room, 256, 1, NULL);
        ck_assert_ptr_nonnull(w->ctx);
    }
    kv_cache_config_t kc = {KV_FMT_F32, 4, 64, KV_POLICY_LRU, true, w->be};
    kern_kv_shape_t shape = model_kv_shape(cfg, 4);
    w->kv = kv_cache_new(&shape, &kc);
    w->sampler = model_sampler_new(cfg->n_vocab);
    ck_assert(w->sched && w->kv && w->sampler);
    serve_step_config_t stc = {w->model, w->tok,     w->ctx, w->dev, w->kv,
                               w->sched, w->sampler, NULL,   spec,   false};
    serve_step_sink_t sink = {w,    s_token, s_finish, s_ended, s_error,
                              NULL, NULL,    s_count,  NULL,    NULL};
    w->step = serve_step_new(&stc, &sink);
    ck_assert_ptr_nonnull(w->step);
}

static void s_world_free(s_world_t *w) {
    serve_step_destroy(&w->step);
    serve_step_destroy(&w->step); /* safe twice */
    sched_batch_destroy(&w->sched);
    kv_cache_destroy(&w->kv);
    model_ctx_destroy(&w->ctx);
    model_dev_destroy(&w->dev);
    kern_backend_destroy(&w->be);
    model_sampler_destroy(&w->sampler);
    model_tokenizer_destroy(&w->tok);
    model_destroy(&w->model);
}

/* A greedy request for prompt[0..n) generating max_tokens. */
static void s_req_init(s_req_t *r, uint64_t rid, const int32_t *prompt, int n, int max_tokens) {
    memset(r, 0, sizeof *r);
    ck_assert_int_le(n + max_tokens, 96);
    r->seq.rid = rid;
    r->seq.hist = r->buf;
    memcpy(r->buf, prompt, (size_t)n * sizeof *prompt);
    r->seq.n_prompt = r->seq.n_hist = n;
    r->seq.max_tokens = max_tokens;
    r->seq.sp.temperature = 0; /* greedy */
    r->seq.sp.repeat_penalty = 1;
    r->finish = -1;
}

/* One step; the counters then say what it ran. */
static int s_run(s_world_t *w) {
    w->prefill = w->decode = w->verified = 0;
    return serve_step_run(w->step);
}

/* The model's greedy continuation of prompt (n_gen tokens, fewer when an EOG token
 * comes first; tok may be NULL): one position per forward pass from an empty cache,
 * without the scheduler or kv_cache.  Returns the tokens written. */
static int s_sampled(const s_world_t *w, const int32_t *prompt, int n, int n_gen,
                     const model_sampler_params_t *sp, int32_t *out);
static int s_greedy(const s_world_t *w, const int32_t *prompt, int n, int n_gen, int32_t *out) {
    return s_sampled(w, prompt, n, n_gen, NULL, out);
}

/* s_greedy's continuation drawn by model_sampler_sample with sp (NULL: argmax) instead. */
static int s_sampled(const s_world_t *w, const int32_t *prompt, int n, int n_gen,
                     const model_sampler_params_t *sp, int32_t *out) {
    const model_config_t *cfg = model_config(w->model);
    kern_kv_shape_t shape = model_kv_shape(cfg, 16);
    kern_kv_pool_t kv;
    ck_assert_int_eq(kern_kv_pool_init(&kv, &shape, KERN_F32, 8), 0);
    int32_t blocks[8] = {0, 1, 2, 3, 4, 5, 6, 7}, seq[128], zero = 0;
    model_ctx_t *ctx = S_DEV ? NULL : model_ctx_new(w->model, 1, 128, 1, NULL);
    /* on the seam: its own forward, one position at a time (the same numbers; what is
     * checked is the step's batching, chunks and cache, not the forward's rounding) */
    kern_backend_t *be = S_DEV ? kern_backend_cpu_new(NULL) : NULL;
    char err[256];
    model_dev_t *dev = be ? model_dev_new(w->model, be, 1, 1, 8, err, sizeof err) : NULL;
    float *logits = malloc((size_t)cfg->n_vocab * sizeof *logits);
    model_sampler_t *smp = model_sampler_new(cfg->n_vocab);
    ck_assert((ctx || dev) && logits && smp);
    memcpy(seq, prompt, (size_t)n * sizeof *seq);
    int got = 0;
    for (int p = 0; p < n + n_gen - 1; p++) {
        bool want = p >= n - 1;
        model_seq_view_t sv = {blocks, 8, NULL, 0, 0};
        model_batch_t b = {1, &seq[p], &p, &zero, &want, 1, &sv, NULL};
        ck_assert_int_eq(dev ? model_dev_forward(dev, &b, &kv, logits)
                             : model_ctx_forward(ctx, &b, &kv, logits),
                         want ? 1 : 0);
        if (!want)
            continue;
        int32_t t = sp ? model_sampler_sample(smp, sp, logits, seq, p + 1, p + 1)
                       : model_argmax(logits, cfg->n_vocab);
        if (w->tok && model_tokenizer_is_eog(w->tok, t))
            break;
        seq[p + 1] = out[got++] = t;
    }
    free(logits);
    model_sampler_destroy(&smp);
    model_ctx_destroy(&ctx);
    model_dev_destroy(&dev);
    kern_backend_destroy(&be);
    kern_kv_pool_free(&kv);
    return got;
}

/* ------------------------------------------------------------------ no model needed */

/* A 10-token prompt with 4 tokens per step: two prefill chunks without a token, the
 * third chunk (2 tokens) samples the first token, then one decode token per step until
 * max_tokens ends it with its last token. */
START_TEST(prefill_chunks_then_decode) {
    s_world_t w;
    s_world_init(&w, SYNTH, 4, 4, false, false);
    const int32_t prompt[10] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    s_req_t r;
    s_req_init(&r, 1, prompt, 10, 5);
    const char *why = NULL;
    ck_assert_int_eq(serve_step_admit(w.step, &r.seq, &why), 0);
    int chunks[] = {4, 4, 2};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(s_run(&w), 1);
        ck_assert_int_eq(w.prefill, chunks[i]);
        ck_assert_int_eq(r.n_got, i < 2 ? 0 : 1);
    }
    for (int i = 1; i < 5; i++) {
        ck_assert_int_eq(s_run(&w), 1);
        ck_assert_int_eq(w.decode, 1);
        ck_assert_int_eq(w.prefill, 0);
        ck_assert_int_eq(r.n_got, i + 1);
    }
    ck_assert_int_eq(r.finish, SERVE_STEP_LENGTH);
    ck_assert(r.freed);
    ck_assert(!sched_batch_has(w.sched, 1));
    ck_assert_int_eq(s_run(&w), 0); /* nothing left */
    /* the prompt's full blocks were published: the same prompt attaches them */
    ck_assert_int_ge(kv_cache_match(w.kv, prompt, 10), 8);
    kv_cache_release(w.kv, &r.seq.kv);
    s_world_free(&w);
}
END_TEST

/* A running request's decode token goes first; a new prompt gets the rest of the step. */
START_TEST(decode_before_prefill) {
    s_world_t w;
    s_world_init(&w, SYNTH, 4, 4, false, false);
    const int32_t pa[3] = {3, 4, 5}, pb[8] = {6, 7, 8, 9, 10, 11, 12, 13};
    s_req_t a, b;
    s_req_init(&a, 1, pa, 3, 8);
    s_req_init(&b, 2, pb, 8, 8);
    ck_assert_int_eq(serve_step_admit(w.step, &a.seq, NULL), 0);
    ck_assert_int_eq(s_run(&w), 1); /* a's prompt, and its first token */
    ck_assert_int_eq(a.n_got, 1);
    ck_assert_int_eq(serve_step_admit(w.step, &b.seq, NULL), 0);
    ck_assert_int_eq(s_run(&w), 2);
    ck_assert_int_eq(w.decode, 1);  /* a */
    ck_assert_int_eq(w.prefill, 3); /* b's first chunk: what is left of the step */
    ck_assert_int_eq(a.n_got, 2);
    ck_assert_int_eq(b.n_got, 0);
    /* the sink reports a stop string: the request leaves the scheduler at once */
    a.stop_after = 3;
    ck_assert_int_eq(s_run(&w), 2);
    ck_assert(a.freed);
    ck_assert_int_eq(a.finish, -1);
    ck_assert(!sched_batch_has(w.sched, 1));
    ck_assert(sched_batch_has(w.sched, 2));
    kv_cache_release(w.kv, &a.seq.kv);
    sched_batch_remove(w.sched, 2);
    kv_cache_release(w.kv, &b.seq.kv);
    s_world_free(&w);
}
END_TEST

/* What cannot run is refused with the scheduler's reason; a draft must continue the
 * current history and stay in the vocabulary. */
START_TEST(refusals) {
    s_world_t w;
    s_world_init(&w, SYNTH, 1, 4, false, true);
    const int32_t p[4] = {3, 4, 5, 6};
    s_req_t r[4];
    const char *why = NULL;
    s_req_init(&r[0], 1, p, 4, 90);
    ck_assert_int_eq(serve_step_admit(w.step, &r[0].seq, &why), 0);
    ck_assert_str_eq(why, "");
    s_req_init(&r[1], 1, p, 4, 4);
    ck_assert_int_eq(serve_step_admit(w.step, &r[1].seq, &why), -EEXIST);
    /* one running, a queue of 2: the fourth is overloaded */
    s_req_init(&r[1], 2, p, 4, 4);
    s_req_init(&r[2], 3, p, 4, 4);
    s_req_init(&r[3], 4, p, 4, 4);
    ck_assert_int_eq(s_run(&w), 1); /* r[0] runs (admitted), the others wait */
    ck_assert_int_eq(serve_step_admit(w.step, &r[1].seq, &why), 0);
    ck_assert_int_eq(serve_step_admit(w.step, &r[2].seq, &why), 0);
    ck_assert_int_eq(serve_step_admit(w.step, &r[3].seq, &why), -EAGAIN);
    ck_assert_str_eq(why, "the worker's queue is full");
    /* drafts */
    int32_t d[2] = {5, 6}, bad = 1 << 20;
    ck_assert_int_eq(serve_step_draft(w.step, &r[0].seq, r[0].seq.n_hist - 1, d, 2), -ESTALE);
    ck_assert_int_eq(serve_step_draft(w.step, &r[0].seq, r[0].seq.n_hist, &bad, 1), -EINVAL);
    ck_assert_int_eq(serve_step_draft(w.step, &r[0].seq, r[0].seq.n_hist, d, 2), 0);
    ck_assert_int_eq(r[0].seq.n_draft, 2);
    for (int i = 1; i <= 3; i++)
        sched_batch_remove(w.sched, (uint64_t)i);
    kv_cache_release(w.kv, &r[0].seq.kv);
    s_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ the default model */

/* Two greedy requests batched through the step, prompts in chunks of at most 4
 * tokens: each gives the tokens of plain greedy decoding. */
START_TEST(step_equals_greedy) {
    s_world_t w;
    s_world_init(&w, test_model_path(), 2, 4, true, false);
    const int32_t pa[7] = {504, 3458, 282, 4649, 314, 3575, 30};
    const int32_t pb[5] = {1, 339, 1435, 288, 1117};
    s_req_t a, b;
    s_req_init(&a, 1, pa, 7, 12);
    s_req_init(&b, 2, pb, 5, 12);
    ck_assert_int_eq(serve_step_admit(w.step, &a.seq, NULL), 0);
    ck_assert_int_eq(serve_step_admit(w.step, &b.seq, NULL), 0);
    for (int i = 0; i < 64 && !(a.freed && b.freed); i++)
        ck_assert_int_gt(s_run(&w), 0);
    ck_assert(a.freed && b.freed);
    ck_assert_int_eq(w.errors, 0);
    s_req_t *rs[2] = {&a, &b};
    for (int q = 0; q < 2; q++) {
        s_req_t *r = rs[q];
        int32_t want[16];
        int n = s_greedy(&w, r->seq.hist, r->seq.n_prompt, 12, want);
        ck_assert_int_eq(r->finish, n < 12 ? SERVE_STEP_EOS : SERVE_STEP_LENGTH);
        ck_assert_int_eq(r->n_got, n);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(r->got[i], want[i]);
        kv_cache_release(w.kv, &r->seq.kv);
    }
    s_world_free(&w);
}
END_TEST

/* Seeded sampling with a repetition penalty (top-k 40, top-p 0.9, temperature 0.9): the
 * tokens equal model_sampler_sample's over the same forward one position at a time -- on
 * the seam, where the step picks them on the device (the backend's sampler, its history
 * uploaded), the draws must be the host sampler's. */
START_TEST(step_sampled_equals_reference) {
    s_world_t w;
    s_world_init(&w, test_model_path(), 2, 16, true, false);
    const int32_t pa[7] = {504, 3458, 282, 4649, 314, 3575, 30};
    const int32_t pb[5] = {1, 339, 1435, 288, 1117};
    s_req_t a, b;
    s_req_init(&a, 1, pa, 7, 16);
    s_req_init(&b, 2, pb, 5, 16);
    s_req_t *rs[2] = {&a, &b};
    for (int q = 0; q < 2; q++) {
        rs[q]->seq.sp = model_sampler_defaults();
        rs[q]->seq.sp.temperature = 0.9f;
        rs[q]->seq.sp.top_p = 0.9f;
        rs[q]->seq.sp.repeat_penalty = 1.3f;
        rs[q]->seq.sp.seed = 100 + (uint64_t)q;
        ck_assert_int_eq(serve_step_admit(w.step, &rs[q]->seq, NULL), 0);
    }
    for (int i = 0; i < 64 && !(a.freed && b.freed); i++)
        ck_assert_int_gt(s_run(&w), 0);
    ck_assert(a.freed && b.freed);
    ck_assert_int_eq(w.errors, 0);
    for (int q = 0; q < 2; q++) {
        s_req_t *r = rs[q];
        int32_t want[16];
        int n = s_sampled(&w, r->seq.hist, r->seq.n_prompt, 16, &r->seq.sp, want);
        ck_assert_int_eq(r->n_got, n);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(r->got[i], want[i]);
        kv_cache_release(w.kv, &r->seq.kv);
    }
    ck_assert_int_eq(w.device_picked, S_DEV ? a.n_got + b.n_got : 0);
    s_world_free(&w);
}
END_TEST

/* Priorities: one batch slot; a seeded request of priority 5 runs, one of priority 0
 * arrives and preempts it after a few of its tokens; the first goes back to the queue
 * (its computed blocks published), is admitted again when the slot frees, recomputes its
 * prompt and tokens from the prefix cache and goes on.  Both equal model_sampler_sample's
 * draws over the same forward one position at a time, as if neither had waited. */
START_TEST(preempted_resumes_identically) {
    s_world_t w;
    s_world_init(&w, test_model_path(), 1, 16, true, false);
    const int32_t pa[7] = {504, 3458, 282, 4649, 314, 3575, 30};
    const int32_t pb[5] = {1, 339, 1435, 288, 1117};
    s_req_t a, b;
    s_req_init(&a, 1, pa, 7, 16);
    s_req_init(&b, 2, pb, 5, 8);
    s_req_t *rs[2] = {&a, &b};
    for (int q = 0; q < 2; q++) {
        rs[q]->seq.sp = model_sampler_defaults();
        rs[q]->seq.sp.temperature = 0.9f;
        rs[q]->seq.sp.repeat_penalty = 1.3f;
        rs[q]->seq.sp.seed = 7 + (uint64_t)q;
    }
    a.seq.priority = 5;
    ck_assert_int_eq(serve_step_admit(w.step, &a.seq, NULL), 0);
    for (int i = 0; i < 5; i++) /* its prompt, then 4 tokens */
        ck_assert_int_gt(s_run(&w), 0);
    ck_assert_int_eq(a.n_got, 5);
    ck_assert_int_eq(serve_step_admit(w.step, &b.seq, NULL), 0); /* priority 0: better */
    ck_assert_int_gt(s_run(&w), 0);
    ck_assert_int_eq(w.preempted, 1);
    ck_assert_int_eq(a.seq.preemptions, 1);
    ck_assert_int_eq(a.seq.n_prompt, 7 + 5);      /* its tokens became prompt */
    ck_assert_int_eq(serve_step_done(&a.seq), 5); /* its next token is still its 6th */
    for (int i = 0; i < 64 && !(a.freed && b.freed); i++)
        ck_assert_int_gt(s_run(&w), 0);
    ck_assert(a.freed && b.freed);
    ck_assert_int_eq(w.errors, 0);
    ck_assert_int_eq(w.preempted, 1); /* a never preempts b back */
    const int32_t *prompts[2] = {pa, pb};
    int lens[2] = {7, 5}, gens[2] = {16, 8};
    for (int q = 0; q < 2; q++) {
        s_req_t *r = rs[q];
        int32_t want[16];
        int n = s_sampled(&w, prompts[q], lens[q], gens[q], &r->seq.sp, want);
        ck_assert_int_eq(r->n_got, n);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(r->got[i], want[i]);
        kv_cache_release(w.kv, &r->seq.kv);
    }
    ck_assert_int_gt(kv_cache_stats(w.kv).hit_tokens, 0); /* a's prefix came from the cache */
    s_world_free(&w);
}
END_TEST

/* Under KV compression a preempted request recomputes its own prompt, then the tokens it
 * had generated one per step, compacting as it did the first time: its output is the same
 * as an uninterrupted run's (greedy, each policy at a budget far below its length). */
START_TEST(compressed_preempted_resumes_identically) {
    const char *specs[] = {"window:12", "h2o:12", "snapkv:10,recent=4"};
    const int32_t pa[18] = {504, 3458, 282, 4649, 314, 3575, 30,  504,  3458,
                            282, 4649, 314, 3575, 30,  1117, 288, 1435, 30};
    const int32_t pb[5] = {1, 339, 1435, 288, 1117};
    for (int k = 0; k < 3; k++) {
        int32_t alone[24];
        int n_alone = 0;
        for (int pre = 0; pre < 2; pre++) { /* uninterrupted, then preempted */
            s_world_t w;
            s_world_init(&w, test_model_path(), 1, 16, true, false);
            const model_config_t *cfg = model_config(w.model);
            kv_compress_t pol;
            ck_assert_int_eq(kv_compress_parse(specs[k], &pol, NULL, 0), 0);
            s_req_t a, b;
            s_req_init(&a, 1, pa, 18, 24);
            s_req_init(&b, 2, pb, 5, 4);
            ck_assert_int_eq(
                kv_compress_seq_init(&a.seq.kvc, &pol, cfg->n_layer * cfg->n_head_kv, 64), 0);
            a.seq.priority = 5;
            ck_assert_int_eq(serve_step_admit(w.step, &a.seq, NULL), 0);
            for (int i = 0; i < 12 && !a.freed; i++) /* its prompt, then 11 tokens */
                ck_assert_int_gt(s_run(&w), 0);
            ck_assert_int_gt(a.seq.kv_dropped, 0); /* compacted before the preemption */
            if (pre) {
                ck_assert_int_eq(serve_step_admit(w.step, &b.seq, NULL), 0);
                ck_assert_int_gt(s_run(&w), 0);
                ck_assert_int_eq(a.seq.preemptions, 1);
            }
            for (int i = 0; i < 128 && !(a.freed && (b.freed || !pre)); i++)
                ck_assert_int_gt(s_run(&w), 0);
            ck_assert_int_eq(w.errors, 0);
            if (!pre) {
                n_alone = a.n_got;
                memcpy(alone, a.got, sizeof(int32_t) * (size_t)n_alone);
            } else {
                ck_assert_int_eq(a.n_got, n_alone);
                for (int i = 0; i < n_alone; i++)
                    ck_assert_msg(a.got[i] == alone[i], "%s: token %d is %d, uninterrupted %d",
                                  specs[k], i, a.got[i], alone[i]);
            }
            kv_cache_release(w.kv, &a.seq.kv);
            kv_cache_release(w.kv, &b.seq.kv);
            kv_compress_seq_free(&a.seq.kvc);
            s_world_free(&w);
        }
    }
}
END_TEST

/* A draft whose first token is the model's and whose second is not: the decode pass
 * verifies it, emits the accepted token and the target's own next one, and keeps the
 * KV of those positions only; generation then goes on exactly as plain greedy. */
START_TEST(verify_draft_rolls_back) {
    s_world_t w;
    s_world_init(&w, test_model_path(), 1, 16, true, true);
    const int32_t p[6] = {504, 3458, 282, 4649, 314, 3575};
    int32_t want[16];
    s_req_t r;
    s_req_init(&r, 7, p, 6, 10);
    int n = s_greedy(&w, p, 6, 10, want);
    ck_assert_int_ge(n, 4); /* the prompt is chosen so that no EOG comes early */
    ck_assert_int_eq(serve_step_admit(w.step, &r.seq, NULL), 0);
    ck_assert_int_eq(s_run(&w), 1); /* prefill, and the first token */
    ck_assert_int_eq(r.n_got, 1);
    int32_t d[3] = {want[1], (want[2] + 1) % 1000, want[3]};
    ck_assert_int_eq(serve_step_draft(w.step, &r.seq, r.seq.n_hist, d, 3), 0);
    int pos0 = r.seq.n_hist - 1; /* the decode token's position */
    ck_assert_int_eq(s_run(&w), 1);
    ck_assert_int_eq(w.verified, 3);
    ck_assert_int_eq(r.seq.proposed, 3);
    ck_assert_int_eq(r.seq.accepted, 1);
    ck_assert_int_eq(r.n_got, 3); /* want[1] accepted, want[2] the target's own */
    ck_assert_int_eq(r.seq.n_computed, pos0 + 2);
    ck_assert_int_eq(r.seq.kv.n, (r.seq.n_computed + 3) / 4); /* rejected blocks released */
    ck_assert_int_eq(r.seq.n_draft, 0);
    for (int i = 0; i < 20 && !r.freed; i++)
        ck_assert_int_gt(s_run(&w), 0);
    ck_assert_int_eq(r.n_got, n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(r.got[i], want[i]);
    kv_cache_release(w.kv, &r.seq.kv);
    s_world_free(&w);
}
END_TEST

static void s_dev_on(void) {
    S_DEV = true;
}

static void s_dev_off(void) {
    S_DEV = false;
}

int main(int argc, char **argv) {
    char err[512];
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(DIR_, sizeof DIR_, "%s/strata-test-step-XXXXXX", tmp);
    if (!mkdtemp(DIR_)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(SYNTH, sizeof SYNTH, "%s/synth.gguf", DIR_);
    test_synth_t sc = {.seed = 11};
    if (test_synth_model(SYNTH, &sc, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        rmdir(DIR_);
        return 1;
    }
    Suite *s = suite_create("serve_step");
    TCase *tc = tcase_create("ordering");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, prefill_chunks_then_decode);
    tcase_add_test(tc, decode_before_prefill);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    TCase *tm = test_tcase_model(s, "model");
    tcase_set_timeout(tm, 300);
    tcase_add_test(tm, step_equals_greedy);
    tcase_add_test(tm, verify_draft_rolls_back);
    tcase_add_test(tm, step_sampled_equals_reference);
    tcase_add_test(tm, preempted_resumes_identically);
    tcase_add_test(tm, compressed_preempted_resumes_identically);
    TCase *td = test_tcase_model(s, "model on the seam");
    tcase_set_timeout(td, 300);
    tcase_add_unchecked_fixture(td, s_dev_on, s_dev_off);
    tcase_add_test(td, step_equals_greedy);
    tcase_add_test(td, verify_draft_rolls_back);
    tcase_add_test(td, step_sampled_equals_reference);
    tcase_add_test(td, preempted_resumes_identically);
    TCase *to = tcase_create("ordering on the seam");
    tcase_set_timeout(to, 60);
    tcase_add_unchecked_fixture(to, s_dev_on, s_dev_off);
    tcase_add_test(to, prefill_chunks_then_decode);
    tcase_add_test(to, decode_before_prefill);
    suite_add_tcase(s, to);
    int rc = test_run_suite(argc, argv, s, CK_NOFORK);
    unlink(SYNTH);
    rmdir(DIR_);
    return rc;
}
