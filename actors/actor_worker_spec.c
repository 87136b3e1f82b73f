/* actor_worker_spec.c - the target worker and the draft worker: after a decode a request
 * asks for proposals continuing its history (the depth chosen by model_spec_adapt from
 * the acceptance seen and the draft's measured cost), the reply goes to the step, which
 * verifies the proposals in its next forward pass; a step waits for outstanding drafts,
 * but not for long. */
#include "actor_worker_int.h"

#include "base_clock.h"

#include <errno.h>
#include <stdio.h>

void actor_worker_want_draft(actor_worker_t *w, actor_worker_req_t *r) {
    serve_step_seq_t *s = &r->work.seq;
    s->n_draft = 0;
    if (!w->to_draft || r->draft_pending)
        return;
    int left = s->max_tokens - serve_step_done(s); /* tokens it may still emit */
    /* drafting is serial with the target's step: its measured latency per
     * token, in target steps, is part of what a deeper k costs */
    double step_us = serve_step_us(w->step);
    if (step_us > 0)
        s->adapt.draft_cost = (float)(w->draft_us_per_token / step_us);
    int k = model_spec_adapt_next_k(&s->adapt, sched_batch_count(w->sched));
    if (s->trace)
        snprintf(s->spec_why, sizeof s->spec_why,
                 "k %d %s (acceptance %.2f, draft cost %.2f steps/token, %d running)", k,
                 s->adapt.k_fixed ? "fixed" : "adaptive", s->adapt.rate, s->adapt.draft_cost,
                 sched_batch_count(w->sched));
    if (k > left - 1)
        k = left - 1; /* every verified position stays inside the request's reservation */
    if (k < 1)
        return;
    msg_draft_request_t q;
    msg_draft_request_init(&q);
    q.rid = s->rid;
    q.worker = w->index;
    q.seq = ++r->draft_seq;
    q.tokens = s->hist;
    q.n_tokens = s->n_hist;
    q.k = k;
    if (actor_send(w->to_draft, MSG_DRAFT_REQUEST, &q)) {
        actor_counters_add(w->counters, "spec.request_dropped", 1);
        return;
    }
    r->draft_pending = true;
    r->draft_k = k;
    r->draft_sent_us = base_now_us();
    w->n_pending_drafts++;
}

void actor_worker_on_draft(void *self, const msg_draft_reply_t *m) {
    actor_worker_t *w = self;
    actor_worker_req_t *r = sched_batch_find(w->sched, m->rid);
    if (!r || !r->draft_pending || m->seq != r->draft_seq) {
        actor_counters_add(w->counters, "spec.reply_stale", 1);
        return;
    }
    r->draft_pending = false;
    w->n_pending_drafts--;
    double per = (double)(base_now_us() - r->draft_sent_us) / (r->draft_k > 0 ? r->draft_k : 1);
    w->draft_us_per_token =
        w->draft_us_per_token > 0 ? 0.8 * w->draft_us_per_token + 0.2 * per : per;
    int rc = serve_step_draft(w->step, &r->work.seq, m->base, m->tokens, m->n_tokens);
    if (rc == -ESTALE || (rc && m->n_tokens > MODEL_SPEC_MAX_K))
        actor_counters_add(w->counters, "spec.reply_stale", 1);
    else if (!rc && !m->n_tokens)
        actor_counters_add(w->counters, "spec.reply_empty", 1);
}

/* Every draft still outstanding missed the wait: a late reply is then stale (the seq
 * moves on). */
static void s_drafts_timed_out(actor_worker_t *w) {
    actor_counters_add(w->counters, "spec.wait_timeouts", 1);
    for (int i = 0; i < sched_batch_count(w->sched); i++) {
        actor_worker_req_t *r = sched_batch_user_at(w->sched, i);
        if (r && r->draft_pending) {
            r->draft_pending = false;
            w->n_pending_drafts--;
            /* a draft that misses the wait is a failed attempt, and its latency
             * (at least the wait) makes deep drafts look as costly as they are */
            model_spec_adapt_observe(&r->work.seq.adapt, r->draft_k, 0);
            double per = (double)w->spec_wait_us / (r->draft_k > 0 ? r->draft_k : 1);
            w->draft_us_per_token = 0.8 * w->draft_us_per_token + 0.2 * per;
        }
    }
}

bool actor_worker_wait_drafts(actor_worker_t *w) {
    if (!w->n_pending_drafts)
        return false;
    /* the oldest outstanding request decides: wait at most spec_wait_us for it */
    uint64_t now = base_now_us(), oldest = now;
    int n = 0, kmax = 1;
    for (int i = 0; i < sched_batch_count(w->sched); i++) {
        actor_worker_req_t *r = sched_batch_user_at(w->sched, i);
        if (r && r->draft_pending) {
            n++;
            kmax = r->draft_k > kmax ? r->draft_k : kmax;
            if (r->draft_sent_us < oldest)
                oldest = r->draft_sent_us;
        }
    }
    if (!n) {
        w->n_pending_drafts = 0;
        return false;
    }
    /* the wait: spec_wait_us; but when every running request is waiting for
     * its draft the step has nothing else to do, so wait as long as drafts
     * have been taking (up to 10x the configured wait) */
    uint64_t wait = (uint64_t)w->spec_wait_us;
    if (n == sched_batch_count(w->sched)) {
        uint64_t expect = (uint64_t)(2.0 * w->draft_us_per_token * kmax);
        uint64_t cap = 10 * (uint64_t)w->spec_wait_us;
        if (expect > wait)
            wait = expect < cap ? expect : cap;
    }
    if (now - oldest < wait)
        return true;
    s_drafts_timed_out(w);
    return false;
}

void actor_worker_draft_end(actor_worker_t *w, actor_worker_req_t *r) {
    if (r->draft_pending)
        w->n_pending_drafts--;
    if (w->to_draft && r->draft_seq) {
        msg_draft_end_t e = {r->work.seq.rid, w->index};
        actor_send(w->to_draft, MSG_DRAFT_END, &e); /* a lost one ages out of the drafter */
    }
}
