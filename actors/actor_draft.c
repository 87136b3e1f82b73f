/* actor_draft.c - the draft worker actor: decodes draft requests into jobs for a
 * drafter (serve/serve_drafter.h: n-gram lookup or a small draft model), batches
 * what arrived together and replies draft_reply to the target worker that asked. */
#include "actor_draft.h"

#include "base_log.h"
#include "model_spec.h"
#include "serve_drafter.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "draft"

/* The drafter's counter updates go to the actor's counters (serve_drafter_count_fn). */
static void s_count(void *counters, const char *name, int64_t value, bool set) {
    if (set)
        actor_counters_set(counters, name, value);
    else
        actor_counters_add(counters, name, value);
}

/* ------------------------------------------------------------------ the actor */

#define S_MAX_JOBS 64 /* draft requests drafted together */

typedef struct {
    actor_env_t *env;    /* runtime */
    zsock_t *in;         /* inbound PULL */
    zsock_t *to_front;   /* PUSH to the frontend (pong, stats); NULL without one */
    zsock_t **to_worker; /* (n_workers) PUSH to each target worker, made on first use */
    int n_workers;
    serve_drafter_t *drafter;   /* n-gram or model */
    actor_loop_t *loop;         /* polling, control messages, counters */
    actor_counters_t *counters; /* the loop's */
    msg_any_t *pending;         /* (S_MAX_JOBS) draft requests received, not yet answered */
    int n_pending;
} s_actor_t;

_Static_assert(SERVE_DRAFTER_NGRAM == 0 && SERVE_DRAFTER_MODEL == 1,
               "draft=ngram|model loads as its index, a serve_drafter_mode_t");

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
    serve_drafter_job_t jobs[S_MAX_JOBS];
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
            (serve_drafter_job_t){q->worker, q->rid, q->tokens, q->n_tokens, q->k, out[nj], 0, 0};
        nj++;
    }
    int rc = serve_drafter_propose(a->drafter, jobs, nj);
    if (rc == -EINVAL) { /* a bad history (token out of range): draft them one by one */
        for (int x = 0; x < nj; x++)
            if (serve_drafter_propose(a->drafter, &jobs[x], 1))
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
    serve_drafter_reset(a->drafter, m->worker, m->rid);
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
    serve_drafter_destroy(&a->drafter);
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
    serve_drafter_config_t c = {0};
    c.mode = (serve_drafter_mode_t)conf->draft; /* draft=ngram|model: the index */
    if (c.mode == SERVE_DRAFTER_MODEL) {
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
    c.count = a.counters ? s_count : NULL;
    c.count_arg = a.counters;
    char err[512];
    a.drafter = serve_drafter_new(&c, err, sizeof err);
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
    LOG_I(name, "ready: %s drafter%s%s", c.mode == SERVE_DRAFTER_MODEL ? "model" : "ngram",
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
