/* router_moe.h - MoE expert dispatch as pure policy (no sockets): where each
 * expert lives (static placement from the topology's `experts=` sets, or
 * round-robin), which hot experts get replicas within each expert actor's slot
 * budget, each expert's capacity factor from the observed load (the router's
 * control plane: router_moe_t), and how a worker splits one MoE layer's routed
 * rows over the replicas of a published table (router_moe_assign).  Every
 * decision is deterministic: ties go to the lower index.  Not thread-safe.
 */
#ifndef ROUTER_MOE_H
#define ROUTER_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- placement */

/* Parse an expert set such as "0-3", "0,5" or "1-2,7" for n_expert experts into
 * set (n_expert bytes, 0/1).  0, or -EINVAL with why ("'9': expert out of range
 * 0..7", "'3-1': empty range"). */
int router_moe_parse_set(const char *spec, int n_expert, uint8_t *set, char *why, size_t whylen);

/* The static owners of every expert: owners[a * n_expert + e] = 1 when actor a
 * hosts e.  specs[a] is actor a's `experts=` set, or NULL: automatic, the
 * experts e with e % n_actors == a.  0, or -EINVAL with why (a bad set, or an
 * expert no actor hosts). */
int router_moe_static_owners(int n_expert, int n_actors, const char *const *specs, uint8_t *owners,
                             char *why, size_t whylen);

/* ---- a dispatch table as a worker sees it (msg_expert_table_t's arrays) */
typedef struct {
    int n_expert;         /* E */
    int n_actors;         /* A */
    bool load_aware;      /* false: static (first alive owner, no capacity) */
    const int32_t *hosts; /* (A * E) 0/1 */
    const int32_t *cap;   /* (E) capacity factors in thousandths; 0: unlimited */
    const int32_t *load;  /* (A) reported backlog in rows */
    const int32_t *alive; /* (A) 0/1 */
    int cap_min;          /* rows a replica always takes per step */
} router_moe_view_t;

/* Rows of one step a replica of expert e takes: max(cap_min, ceil(cap[e] / 1000 *
 * n_rows / E)); INT32_MAX when unlimited (cap[e] == 0 or a static table). */
int router_moe_capacity(const router_moe_view_t *t, int e, int n_rows);

/* Where one MoE layer's rows go.  Inputs: n_rows routed (token, expert) rows,
 * token[r] and expert[r] (grouped by expert ascending), logits (the step's
 * router logits, row token[r] of E floats, or NULL), skip (A bytes or NULL:
 * actors to avoid, e.g. one that timed out).  Outputs: actor[r] (-1: no actor
 * can take it; the worker computes it itself), used[r] (the expert that computes
 * row r: expert[r], or a substitute when the row overflowed the capacity of
 * every replica of its expert: then the token's next best expert, the one with
 * the largest logit among those it did not select that has room (a tie: the
 * lower index; logits NULL: the least filled such expert); that changes the
 * output), and overflow (E ints, added to: rows of each expert moved to a
 * substitute).  Static: each row to the lowest alive owner not skipped.
 * Load-aware: each row to the replica with the fewest rows (the table's backlog
 * plus the rows given to it in this call) that has room under the capacity;
 * overflowed rows are placed after every other row, in row order.  Returns the
 * rows substituted. */
int router_moe_assign(const router_moe_view_t *t, int n_rows, const int32_t *token,
                      const int32_t *expert, const float *logits, const uint8_t *skip, int *actor,
                      int32_t *used, int64_t *overflow);

/* ---- the router's control plane */

typedef struct {
    int n_expert;        /* E (from the first load report) */
    int n_actors;        /* A: expert actors of the topology */
    bool load_aware;     /* moe_dispatch=load; false: static */
    int cf_permille;     /* base capacity factor in thousandths; 0: unlimited */
    int cf_max_permille; /* the largest factor a hot expert gets */
    int cap_min;         /* rows a replica always takes per step */
    double hot_ratio;    /* an expert whose load per replica exceeds this x the mean gets one */
} router_moe_config_t;

typedef struct router_moe_t router_moe_t;

/* A control plane for cfg (copied) with static owners (A * E bytes, copied) and
 * slots[a] (A ints, copied: experts actor a may host; raised to its static
 * count).  Every actor starts alive with no load.  NULL on a bad config. */
router_moe_t *router_moe_new(const router_moe_config_t *cfg, const uint8_t *owners,
                             const int *slots);
void router_moe_destroy(router_moe_t **self_p);

/* A load report of actor a: rows[e] served over period_us (E ints), the queue
 * backlog in frames and rows per frame.  Marks a alive.  -EINVAL for a bad a. */
int router_moe_report(router_moe_t *self, int a, const int32_t *rows, int frames, int queue,
                      int64_t period_us, uint64_t now_us);
/* Actor a is gone (expert_down, or silent): it hosts nothing until it reports. */
void router_moe_down(router_moe_t *self, int a);
/* Actors silent for longer than stale_us are marked down.  Returns how many. */
int router_moe_expire(router_moe_t *self, uint64_t now_us, uint64_t stale_us);

/* Recompute the table from the loads: hosts (static owners that are alive, an
 * orphaned expert given to the alive actor hosting fewest, then replicas of
 * hot experts, greedily, on the least loaded actor with a free slot) and
 * capacity factors (load-aware: cf * share * E / replicas, clamped to
 * [cf, cf_max]).  The version increases.  Returns it. */
uint64_t router_moe_plan(router_moe_t *self);

uint64_t router_moe_version(const router_moe_t *self);
/* The current table (valid until the next call that changes self). */
router_moe_view_t router_moe_view(const router_moe_t *self);
int router_moe_replicas(const router_moe_t *self, int e);
/* Expert e's load: rows per second (EMA over the reports). */
double router_moe_expert_load(const router_moe_t *self, int e);
bool router_moe_alive(const router_moe_t *self, int a);

#endif
