/* actor_semcache.h - the answer cache (issue 28, docs/SEMCACHE.md): a request the
 * frontend may answer without inference -- the same request in the same context (the
 * exact layer), a knowledge-base record of the same question, or a similar request
 * within a wrong-hit rate the caller sets (the semantic layer, its threshold calibrated
 * from verified outcomes: serve/serve_semcache_bound.h).  It embeds questions itself
 * with the served model's pooled final hidden state (or another GGUF: `model`), the
 * vector the embeddings path returns.
 *
 * Command / reply table (inbound PULL socket):
 *   cache_lookup (frontend) -> cache_answer: exact, kb or semantic hit with the answer;
 *                              or a miss, with the nearest entry's answer hash and
 *                              similarity (the frontend hands them back with the fresh
 *                              answer: a verification); a sampled share of semantic hits
 *                              is marked verify (answered by generation, then checked)
 *   cache_store (frontend)  -> a finished answer or a knowledge-base record kept (with a
 *                              verification: the outcome feeds the error bound);
 *                              cache_done when it names a client
 *   cache_drop (frontend)   -> cache_done {count dropped}
 *   ping / stats_query      -> pong / stats_answer to the frontend
 *   stop                    -> ends the actor (the cache saved first when `path` is set)
 *
 * Options: actor_semcache_opts in actor_semcache.c (`strata actor --help`).
 */
#ifndef ACTOR_SEMCACHE_H
#define ACTOR_SEMCACHE_H

#include "actor_runtime.h"

typedef struct {
    const char *model;    /* GGUF to embed with; unset: worker0's */
    int mode;             /* what a request that names no mode gets: off, exact, semantic */
    double delta;         /* the wrong-hit rate a semantic hit may have, unless a request says */
    double alpha;         /* 1 - the confidence of the bound */
    int min_obs;          /* verified outcomes at a threshold before it may pass */
    int keep;             /* verified outcomes kept (the most recent) */
    double verify;        /* share of semantic hits checked by generating anyway */
    int entries;          /* the size bound (LRU beyond) */
    int ann_min;          /* > 0: an HNSW index, searched from this many embedded entries on */
    int ttl_s;            /* an answer's time to live (0: never expires) */
    int short_ttl_s;      /* a time-sensitive question's */
    const char *path;     /* persistence file; unset: none */
    int save_s;           /* how often a changed cache is saved */
    int embed_max_tokens; /* longest question embedded (tokens) */
    int embed_threads;    /* threads of the embedding pass */
} actor_semcache_cfg_t;

int actor_semcache_main(actor_env_t *env);
/* Its options, declared once (name, type, default, range, help). */
extern const actor_opt_t actor_semcache_opts[];

#endif
