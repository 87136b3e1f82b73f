/* test_sched.c - the continuous-batching scheduler: admission against the
 * batch and KV caps, the bounded queue, chunked prefill under the step budget,
 * decode-first planning, removal on finish/cancel, load counters; priorities (admission
 * order, aging against starvation, preemption of worse-priority running requests and
 * only when it makes room). */
#include "sched_batch.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>

static sched_batch_config_t s_cfg(void) {
    return (sched_batch_config_t){.max_batch = 4,
                                  .max_queue = 3,
                                  .kv_blocks = 16,
                                  .block_size = 16,
                                  .step_tokens = 32,
                                  .max_ctx = 512};
}

/* The positions a request can ever hold: max_ctx, or the pool when it holds less; exactly
 * that much is admitted, one more is never. */
START_TEST(context_room) {
    sched_batch_config_t c = s_cfg();
    sched_batch_t *s = sched_batch_new(&c);
    ck_assert_int_eq(sched_batch_context(s), 16 * 16); /* the pool (256) < max_ctx (512) */
    ck_assert_int_eq(sched_batch_submit(s, 1, 200, 57, NULL), -E2BIG);
    ck_assert_int_eq(sched_batch_submit(s, 1, 200, 56, NULL), 0);
    sched_batch_destroy(&s);
    c.kv_blocks = 64;
    s = sched_batch_new(&c);
    ck_assert_int_eq(sched_batch_context(s), 512); /* max_ctx < the pool (1024) */
    ck_assert_int_eq(sched_batch_submit(s, 1, 500, 13, NULL), -E2BIG);
    ck_assert_int_eq(sched_batch_submit(s, 1, 500, 12, NULL), 0);
    sched_batch_destroy(&s);
}
END_TEST

/* Run a plan as a worker would: every item advances; sampled items generate. */
static int s_step(sched_batch_t *s, sched_batch_item_t *items, int cap) {
    int n = sched_batch_plan(s, items, cap);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(sched_batch_advance(s, items[i].rid, items[i].n, items[i].sample), 0);
    return n;
}

START_TEST(submit_limits) {
    sched_batch_config_t c = s_cfg();
    sched_batch_t *s = sched_batch_new(&c);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(sched_batch_submit(s, 1, 0, 8, NULL), -EINVAL);
    ck_assert_int_eq(sched_batch_submit(s, 1, 8, 0, NULL), -EINVAL);
    ck_assert_int_eq(sched_batch_submit(s, 1, 500, 100, NULL), -E2BIG);   /* > max_ctx */
    ck_assert_int_eq(sched_batch_submit(s, 1, 16 * 16, 1, NULL), -E2BIG); /* > kv_blocks */
    /* the first 4 run at once (max_batch 4), the next 3 wait, then the queue is full */
    for (uint64_t r = 1; r <= 7; r++)
        ck_assert_int_eq(sched_batch_submit(s, r, 10, 10, NULL), 0);
    ck_assert_int_eq(sched_batch_submit(s, 1, 10, 10, NULL), -EEXIST);
    ck_assert_int_eq(sched_batch_submit(s, 8, 10, 10, NULL), -EAGAIN); /* queue of 3 full */
    sched_batch_load_t l = sched_batch_load(s);
    ck_assert_int_eq(l.n_running, 4);
    ck_assert_int_eq(l.n_waiting, 3);
    ck_assert_int_eq(l.queued_tokens, 60);
    ck_assert_int_eq(l.active_tokens, 80);
    ck_assert_int_eq(l.kv_free_blocks, 8); /* 4 x ceil(20 / 16) reserved */
    sched_batch_destroy(&s);
    sched_batch_destroy(&s);
    ck_assert_ptr_null(s);
    c.max_batch = 0;
    ck_assert_ptr_null(sched_batch_new(&c));
}
END_TEST

START_TEST(chunked_prefill_then_decode) {
    sched_batch_config_t c = s_cfg();
    sched_batch_t *s = sched_batch_new(&c);
    int tag = 7;
    ck_assert_int_eq(sched_batch_submit(s, 9, 70, 3, &tag), 0);
    sched_batch_item_t it[8];
    /* 70 prompt tokens with a budget of 32: chunks of 32, 32, 6; only the last samples. */
    int want_n[] = {32, 32, 6}, want_pos[] = {0, 32, 64};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(sched_batch_plan(s, it, 8), 1);
        ck_assert_ptr_eq(it[0].user, &tag);
        ck_assert_int_eq(it[0].pos0, want_pos[k]);
        ck_assert_int_eq(it[0].n, want_n[k]);
        ck_assert(it[0].prefill);
        ck_assert_int_eq(it[0].sample, k == 2);
        ck_assert_int_eq(sched_batch_advance(s, 9, it[0].n, it[0].sample), 0);
    }
    /* decode: one token per step at positions 70, 71 */
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(sched_batch_plan(s, it, 8), 1);
        ck_assert_int_eq(it[0].pos0, 70 + k);
        ck_assert_int_eq(it[0].n, 1);
        ck_assert(it[0].sample && !it[0].prefill);
        ck_assert_int_eq(sched_batch_advance(s, 9, 1, true), 0);
    }
    ck_assert_int_eq(sched_batch_generated(s, 9), 3);
    /* a 4th token would exceed max_tokens */
    ck_assert_int_eq(sched_batch_advance(s, 9, 1, true), -EINVAL);
    ck_assert_ptr_eq(sched_batch_remove(s, 9), &tag);
    ck_assert_ptr_null(sched_batch_remove(s, 9));
    ck_assert_int_eq(sched_batch_plan(s, it, 8), 0);
    ck_assert_int_eq(sched_batch_load(s).kv_free_blocks, 16);
    sched_batch_destroy(&s);
}
END_TEST

START_TEST(new_requests_join_running_batch) {
    sched_batch_config_t c = s_cfg();
    sched_batch_t *s = sched_batch_new(&c);
    sched_batch_item_t it[8];
    ck_assert_int_eq(sched_batch_submit(s, 1, 4, 10, NULL), 0);
    ck_assert_int_eq(s_step(s, it, 8), 1); /* prefill of 1, samples */
    ck_assert_int_eq(sched_batch_submit(s, 2, 40, 10, NULL), 0);
    /* next step: decode of 1 first, then 31 prompt tokens of 2 (budget 32) */
    int n = sched_batch_plan(s, it, 8);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(it[0].rid, 1);
    ck_assert_int_eq(it[0].n, 1);
    ck_assert(!it[0].prefill);
    ck_assert_int_eq(it[1].rid, 2);
    ck_assert_int_eq(it[1].n, 31);
    ck_assert(it[1].prefill && !it[1].sample);
    sched_batch_destroy(&s);
}
END_TEST

START_TEST(kv_cap_and_batch_cap_gate_admission) {
    sched_batch_config_t c = s_cfg();
    c.max_queue = 8;
    sched_batch_t *s = sched_batch_new(&c);
    sched_batch_item_t it[8];
    /* each needs (100 + 28) / 16 = 8 blocks: only two fit in 16 */
    for (uint64_t r = 1; r <= 3; r++)
        ck_assert_int_eq(sched_batch_submit(s, r, 100, 28, NULL), 0);
    sched_batch_plan(s, it, 8);
    sched_batch_load_t l = sched_batch_load(s);
    ck_assert_int_eq(l.n_running, 2);
    ck_assert_int_eq(l.n_waiting, 1);
    ck_assert_int_eq(l.kv_free_blocks, 0);
    /* cancelling a running one lets the third in at the next plan */
    sched_batch_remove(s, 1);
    sched_batch_plan(s, it, 8);
    l = sched_batch_load(s);
    ck_assert_int_eq(l.n_running, 2);
    ck_assert_int_eq(l.n_waiting, 0);
    ck_assert(sched_batch_has(s, 3));
    sched_batch_destroy(&s);

    /* batch cap: 4 running at most with plenty of KV */
    c.kv_blocks = 1000;
    s = sched_batch_new(&c);
    for (uint64_t r = 1; r <= 6; r++)
        ck_assert_int_eq(sched_batch_submit(s, r, 2, 2, NULL), 0);
    sched_batch_plan(s, it, 8);
    l = sched_batch_load(s);
    ck_assert_int_eq(l.n_running, 4);
    ck_assert_int_eq(l.n_waiting, 2);
    sched_batch_destroy(&s);
}
END_TEST

/* A request under KV compression reserves max(prompt, cap) positions, never more than
 * prompt + max_tokens: four such fit where two uncapped ones did. */
START_TEST(capped_footprint) {
    sched_batch_config_t c = s_cfg();
    c.max_queue = 8;
    sched_batch_t *s = sched_batch_new(&c);
    sched_batch_item_t it[8];
    /* (100 + 28) positions uncapped: 8 blocks; capped at 48: the prompt, 7 blocks; capped
     * at 60 with a 40-token prompt: 4 blocks */
    ck_assert_int_eq(sched_batch_submit_capped(s, 1, 100, 28, 48, NULL), 0);
    ck_assert_int_eq(sched_batch_submit_capped(s, 2, 40, 400, 60, NULL), 0);
    ck_assert_int_eq(sched_batch_submit_capped(s, 3, 40, 400, 60, NULL), 0);
    ck_assert_int_eq(sched_batch_load(s).kv_free_blocks, 16 - 7 - 4 - 4);
    ck_assert_int_eq(sched_batch_submit_capped(s, 4, 10, 6, 60, NULL), 0); /* 16 < cap: 1 */
    sched_batch_plan(s, it, 8);
    sched_batch_load_t l = sched_batch_load(s);
    ck_assert_int_eq(l.n_running, 4);
    ck_assert_int_eq(l.kv_free_blocks, 0);
    ck_assert_int_eq(sched_batch_submit_capped(s, 5, 10, 6, -1, NULL), -EINVAL);
    /* the context limit still counts every position */
    ck_assert_int_eq(sched_batch_submit_capped(s, 6, 400, 200, 60, NULL), -E2BIG);
    sched_batch_destroy(&s);
}
END_TEST

START_TEST(run_to_completion_random) {
    /* Many requests of random sizes: every one finishes with exactly its prompt
     * computed once and max_tokens generated, positions strictly in order. */
    sched_batch_config_t c = {.max_batch = 5,
                              .max_queue = 64,
                              .kv_blocks = 40,
                              .block_size = 16,
                              .step_tokens = 48,
                              .max_ctx = 256};
    sched_batch_t *s = sched_batch_new(&c);
    enum { N = 40 };
    int n_prompt[N], max_tok[N], next_pos[N], gen[N];
    uint64_t st = 12345;
    for (int i = 0; i < N; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        n_prompt[i] = 1 + (int)(st % 120);
        max_tok[i] = 1 + (int)((st >> 20) % 40);
        next_pos[i] = gen[i] = 0;
        ck_assert_int_eq(sched_batch_submit(s, (uint64_t)i + 1, n_prompt[i], max_tok[i], NULL), 0);
    }
    sched_batch_item_t it[8];
    int finished = 0, steps = 0;
    while (finished < N && steps < 10000) {
        int n = sched_batch_plan(s, it, 8);
        ck_assert_int_gt(n, 0);
        int tokens = 0;
        for (int k = 0; k < n; k++) {
            int i = (int)it[k].rid - 1;
            ck_assert_int_eq(it[k].pos0, next_pos[i]);
            next_pos[i] += it[k].n;
            tokens += it[k].n;
            ck_assert_int_eq(sched_batch_advance(s, it[k].rid, it[k].n, it[k].sample), 0);
            if (it[k].sample && ++gen[i] == max_tok[i]) {
                ck_assert_int_eq(next_pos[i], n_prompt[i] + max_tok[i] - 1);
                sched_batch_remove(s, it[k].rid);
                finished++;
            }
        }
        ck_assert_int_le(tokens, 48);
        ck_assert_int_ge(sched_batch_load(s).kv_free_blocks, 0);
        steps++;
    }
    ck_assert_int_eq(finished, N);
    sched_batch_load_t l = sched_batch_load(s);
    ck_assert_int_eq(l.n_running + l.n_waiting, 0);
    ck_assert_int_eq(l.kv_free_blocks, 40);
    sched_batch_destroy(&s);
}
END_TEST

static uint64_t s_clock_us;
static uint64_t s_clock(void *arg) {
    (void)arg;
    return s_clock_us;
}

/* The rids running now, in admission order, into out; their count. */
static int s_running(const sched_batch_t *s, uint64_t *out) {
    int n = sched_batch_count(s);
    for (int i = 0; i < n; i++)
        out[i] = (uint64_t)(uintptr_t)sched_batch_user_at(s, i);
    return n;
}

/* Waiting requests are admitted by priority (lower first), then arrival; aging lifts a
 * request that waited past one that came later with a better priority. */
START_TEST(priority_orders_admission) {
    sched_batch_config_t c = s_cfg();
    c.max_batch = 1;
    c.aging_ms = 1000;
    sched_batch_t *s = sched_batch_new(&c);
    sched_batch_set_clock(s, s_clock, NULL);
    s_clock_us = 1000000;
    sched_batch_item_t it[4];
    ck_assert_int_eq(sched_batch_submit(s, 1, 4, 1, (void *)1), 0); /* runs at once */
    ck_assert_int_eq(sched_batch_submit(s, 2, 4, 1, (void *)2), 0);
    ck_assert_int_eq(sched_batch_submit(s, 3, 4, 1, (void *)3), 0);
    ck_assert_int_eq(sched_batch_set_priority(s, 3, -1), 0);
    ck_assert_int_eq(sched_batch_set_priority(s, 9, -1), -ENOENT);
    ck_assert_int_eq(s_step(s, it, 4), 1); /* 1 runs to its end */
    ck_assert_ptr_eq(sched_batch_remove(s, 1), (void *)1);
    uint64_t run[4];
    ck_assert_int_eq(s_step(s, it, 4), 1);
    ck_assert(s_running(s, run) == 1 && run[0] == 3); /* -1 before 0, though it came later */
    sched_batch_remove(s, 3);
    /* 2 (priority 0) has waited 2.5 s: aged to -2, it goes before a new -1 */
    s_clock_us += 2500000;
    ck_assert_int_eq(sched_batch_submit(s, 4, 4, 1, (void *)4), 0);
    ck_assert_int_eq(sched_batch_set_priority(s, 4, -1), 0);
    ck_assert_int_eq(s_step(s, it, 4), 1);
    ck_assert(s_running(s, run) == 1 && run[0] == 2);
    uint64_t pre[4];
    ck_assert_int_eq(sched_batch_take_preempted(s, pre, 4), 0); /* aging never preempts */
    sched_batch_destroy(&s);
}
END_TEST

/* A better-priority request that does not fit preempts the worst running one (the latest
 * among equals), which goes back to the queue with its tokens as prompt; one that would
 * not fit even then preempts nothing; without preempt it waits. */
START_TEST(preemption_makes_room) {
    sched_batch_config_t c = s_cfg();
    c.max_batch = 2;
    c.preempt = true;
    sched_batch_t *s = sched_batch_new(&c);
    sched_batch_set_clock(s, s_clock, NULL);
    s_clock_us = 1000000;
    sched_batch_item_t it[4];
    ck_assert_int_eq(sched_batch_submit(s, 1, 10, 20, (void *)1), 0);
    ck_assert_int_eq(sched_batch_submit(s, 2, 10, 20, (void *)2), 0);
    sched_batch_set_priority(s, 1, 3);
    sched_batch_set_priority(s, 2, 3);
    for (int i = 0; i < 4; i++) /* prefill, then 3 decode steps: 4 tokens each */
        ck_assert_int_eq(s_step(s, it, 4), 2);
    ck_assert_int_eq(sched_batch_generated(s, 2), 4);
    ck_assert_int_eq(sched_batch_submit(s, 3, 10, 20, (void *)3), 0); /* priority 0 */
    ck_assert_int_eq(sched_batch_plan(s, it, 4), 2);
    uint64_t pre[4], run[4];
    ck_assert_int_eq(sched_batch_take_preempted(s, pre, 4), 1);
    ck_assert_int_eq(pre[0], 2); /* the later of two equals */
    ck_assert_int_eq(sched_batch_take_preempted(s, pre, 4), 0);
    ck_assert(s_running(s, run) == 2 && run[0] == 1 && run[1] == 3);
    sched_batch_load_t l = sched_batch_load(s);
    ck_assert(l.n_waiting == 1 && l.preempted == 1);
    /* 2 waits with 14 prompt tokens (10 + the 4 it generated) and 16 to go */
    ck_assert_int_eq(l.queued_tokens, 14 + 16);
    for (int i = 0; i < 2; i++) /* the plan above is run */
        ck_assert_int_eq(sched_batch_advance(s, it[i].rid, it[i].n, it[i].sample), 0);
    /* an equal priority preempts nothing */
    ck_assert_int_eq(sched_batch_submit(s, 4, 10, 20, (void *)4), 0);
    ck_assert_int_eq(sched_batch_set_priority(s, 4, 3), 0);
    ck_assert_int_eq(s_step(s, it, 4), 2);
    ck_assert_int_eq(sched_batch_take_preempted(s, pre, 4), 0);
    sched_batch_remove(s, 4);
    /* a request that would not fit even with every worse one out preempts nothing: 15
     * blocks of priority 1, where only 1 (priority 3) is worse and frees 2 of the 4 taken */
    ck_assert_int_eq(sched_batch_submit(s, 5, 200, 40, (void *)5), 0);
    sched_batch_set_priority(s, 5, 1);
    ck_assert_int_eq(s_step(s, it, 4), 2);
    ck_assert_int_eq(sched_batch_take_preempted(s, pre, 4), 0);
    ck_assert(s_running(s, run) == 2 && run[0] == 1 && run[1] == 3);
    sched_batch_destroy(&s);
    /* preempt off: a better priority waits for the slot */
    c.preempt = false;
    s = sched_batch_new(&c);
    ck_assert_int_eq(sched_batch_submit(s, 1, 10, 20, (void *)1), 0);
    ck_assert_int_eq(sched_batch_submit(s, 2, 10, 20, (void *)2), 0);
    sched_batch_set_priority(s, 1, 3);
    sched_batch_set_priority(s, 2, 3);
    ck_assert_int_eq(sched_batch_submit(s, 3, 10, 20, (void *)3), 0);
    ck_assert_int_eq(s_step(s, it, 4), 2);
    ck_assert_int_eq(sched_batch_take_preempted(s, pre, 4), 0);
    ck_assert_int_eq(sched_batch_load(s).n_waiting, 1);
    sched_batch_destroy(&s);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, submit_limits);
    tcase_add_test(tc, context_room);
    tcase_add_test(tc, chunked_prefill_then_decode);
    tcase_add_test(tc, new_requests_join_running_batch);
    tcase_add_test(tc, kv_cap_and_batch_cap_gate_admission);
    tcase_add_test(tc, capped_footprint);
    tcase_add_test(tc, run_to_completion_random);
    tcase_add_test(tc, priority_orders_admission);
    tcase_add_test(tc, preemption_makes_room);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}
