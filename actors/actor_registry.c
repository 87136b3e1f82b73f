/* actor_registry.c - the table of every actor strata can run, and the check of
 * an option against the table of the actor it is given to. */
#include "actor_registry.h"

#include "actor_draft.h"
#include "actor_expert.h"
#include "actor_frontend.h"
#include "actor_http.h"
#include "actor_kvtier.h"
#include "actor_metrics.h"
#include "actor_prefetch.h"
#include "actor_router.h"
#include "actor_semcache.h"
#include "actor_tokenizer.h"
#include "actor_worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rank is the start order (ties: topology order), the same in thread mode
 * (bin/cmd_serve.c) and process mode (actor_supervisor.c): the KV tiers, the
 * draft worker and the metrics first, then the experts before the workers that
 * send them rows (the workers take longest to load), then the router, the
 * tokenizer and the frontend (clients are only accepted when everything behind
 * it is ready), and the HTTP gateway after the frontend it is a client of.
 * Actors stop in the reverse order. */
static const actor_info_t s_actors[] = {
    {"frontend", actor_frontend_main, actor_frontend_opts, sizeof(actor_frontend_cfg_t), 90,
     "client-facing ROUTER socket, request table, heartbeats, stats and health"},
    {"tokenizer", actor_tokenizer_main, actor_tokenizer_opts, sizeof(actor_tokenizer_cfg_t), 80,
     "renders the chat template and encodes prompts"},
    {"router", actor_router_main, actor_router_opts, sizeof(actor_router_cfg_t), 70,
     "dispatches requests to the least-loaded target worker"},
    {"worker<N>", actor_worker_main, actor_worker_opts, sizeof(actor_worker_cfg_t), 60,
     "target worker: model, T0 KV cache, continuous batching, speculative verification"},
    {"expert<N>", actor_expert_main, actor_expert_opts, sizeof(actor_expert_cfg_t), 50,
     "MoE expert actor: computes the FFN of the experts it hosts for the target workers"},
    {"draft", actor_draft_main, actor_draft_opts, sizeof(actor_draft_cfg_t), 30,
     "draft worker: proposes tokens by n-gram lookup or a small draft model"},
    {"kvtier", actor_kvtier_main, actor_kvtier_opts, sizeof(actor_kvtier_cfg_t), 10,
     "KV tier manager: T1 DRAM pool and T2 SSD files shared by every worker"},
    {"prefetcher", actor_prefetch_main, actor_prefetch_opts, sizeof(actor_prefetch_cfg_t), 20,
     "promotes a prompt's cached KV towards its worker; keeps chat sessions warm"},
    {"semcache", actor_semcache_main, actor_semcache_opts, sizeof(actor_semcache_cfg_t), 45,
     "answer cache: exact, knowledge-base and semantic hits within an error bound"},
    {"metrics", actor_metrics_main, actor_metrics_opts, sizeof(actor_metrics_cfg_t), 40,
     "serves the stats as Prometheus metrics over HTTP, with a status page"},
    {"http", actor_http_main, actor_http_opts, sizeof(actor_http_cfg_t), 100,
     "OpenAI-compatible HTTP API (libmicrohttpd): a client of the frontend"},
};
#define S_N_ACTORS (int)(sizeof s_actors / sizeof s_actors[0])

static bool s_matches(const char *pattern, const char *name) {
    const char *lt = strchr(pattern, '<');
    if (!lt)
        return !strcmp(pattern, name);
    size_t n = (size_t)(lt - pattern); /* "worker<N>": the prefix, then digits only */
    if (strncmp(pattern, name, n) || !name[n])
        return false;
    for (const char *p = name + n; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

const actor_info_t *actor_info_find(const char *name) {
    for (int i = 0; i < S_N_ACTORS; i++)
        if (!strcmp(s_actors[i].name, name) || s_matches(s_actors[i].name, name))
            return &s_actors[i];
    return NULL;
}

const actor_info_t *actor_info_at(int i) {
    return i >= 0 && i < S_N_ACTORS ? &s_actors[i] : NULL;
}

const char *actor_info_names(char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < S_N_ACTORS && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? ", " : "", s_actors[i].name);
    return buf;
}

/* "a, b, c": the keys of table. */
static const char *s_keys(const actor_opt_t *table, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    for (const actor_opt_t *o = table; o->key && k < len; o++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", o == table ? "" : ", ", o->key);
    return buf;
}

int actor_info_check_opt(const char *name, const char *key, const char *value, char *err,
                         size_t errlen) {
    char why[256], list[1024], common[128];
    bool defaults = !strcmp(name, "defaults");
    const actor_info_t *only = defaults ? NULL : actor_info_find(name);
    if (!defaults && !only) {
        snprintf(err, errlen, "no actor called '%s' (%s)", name,
                 actor_info_names(list, sizeof list));
        return -EINVAL;
    }
    if (!key)
        return 0;
    int declared = 0;
    for (int i = 0; i < S_N_ACTORS; i++) {
        const actor_info_t *a = &s_actors[i];
        if (only && a != only)
            continue;
        const actor_opt_t *o = actor_info_opt(a, key);
        if (!o)
            continue;
        declared++;
        if (actor_opt_check(o, value, why, sizeof why)) {
            if (defaults)
                snprintf(err, errlen, "defaults: %s=%s: %s (an option of %s)", key, value, why,
                         actor_opts_find(a->opts, key) ? a->name : "every actor");
            else
                snprintf(err, errlen, "%s: %s=%s: %s", name, key, value, why);
            return -EINVAL;
        }
    }
    if (declared)
        return 0;
    if (defaults)
        snprintf(err, errlen, "defaults: %s=%s: no actor has an option '%s'", key, value, key);
    else if (!only->opts[0].key)
        snprintf(err, errlen,
                 "%s: %s=%s: unknown option (%s takes none of its own; every actor: %s)", name, key,
                 value, only->name, s_keys(actor_runtime_opts, common, sizeof common));
    else
        snprintf(err, errlen, "%s: %s=%s: unknown option (%s, %s)", name, key, value,
                 s_keys(only->opts, list, sizeof list),
                 s_keys(actor_runtime_opts, common, sizeof common));
    return -EINVAL;
}

int actor_info_start_order(const actor_topology_t *topo, const char *host, const char **names,
                           int max, char *err, size_t errlen) {
    int n = 0;
    int rank[ACTOR_TOPO_MAX_ACTORS];
    for (int i = 0; i < topo->n; i++) {
        const actor_topo_entry_t *e = &topo->entries[i];
        if (actor_topology_reserved(e->name) || (host && strcmp(e->host, host)))
            continue;
        const actor_info_t *a = actor_info_find(e->name);
        if (!a) {
            snprintf(err, errlen, "unknown actor '%s' in the topology", e->name);
            return -EINVAL;
        }
        if (n == max || n == ACTOR_TOPO_MAX_ACTORS) {
            snprintf(err, errlen, "too many actors in the topology");
            return -ENOSPC;
        }
        /* insertion sort on the rank, stable: equal ranks keep the topology's order */
        int k = n++;
        for (; k > 0 && rank[k - 1] > a->rank; k--) {
            rank[k] = rank[k - 1];
            names[k] = names[k - 1];
        }
        rank[k] = a->rank;
        names[k] = e->name;
    }
    return n;
}
