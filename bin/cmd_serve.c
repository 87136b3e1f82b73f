/* cmd_serve.c - `strata serve`: the service.  With no --topology every actor
 * runs as a thread of this process over inproc:// (the embedded default); with
 * --topology FILE each actor runs as its own process under a supervisor that
 * restarts the ones that die. */
#include "cli.h"

#include "actors/actor_frontend.h"
#include "actors/actor_runtime.h"
#include "actors/actor_supervisor.h"
#include "actors/actor_topology.h"
#include "kvstore/kv_codec.h"
#include "kvstore/kv_policy.h"

#include <czmq.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_help(FILE *f) {
    fprintf(f,
            "usage: strata serve [options]\n"
            "\n"
            "Runs the inference service: a frontend (ZeroMQ ROUTER, MessagePack protocol, see\n"
            "docs/PROTOCOL.md), a tokenizer, a router and N target workers with continuous\n"
            "batching, a KV tier manager and a prefetcher (unless --no-tiers) and, with\n"
            "--draft, a draft worker.  Without --topology every actor is a thread of this\n"
            "process.\n"
            "\n"
            "  -m, --model PATH      GGUF model (default: %s)\n"
            "      --endpoint EP     client endpoint (default %s)\n"
            "      --workers N       target workers (default 1)\n"
            "  -t, --threads N       threads per worker (default: CPUs / workers)\n"
            "      --max-batch N     requests running at once per worker (default 16)\n"
            "      --kv-blocks N     KV blocks of 16 positions per worker (default 512)\n"
            "      --queue N         requests waiting per worker before 'overloaded' (default 64)\n"
            "      --step-tokens N   tokens per forward step, decode + prefill chunks (default 256)\n"
            "      --max-ctx N       positions per request, prompt + max_tokens (default 2048)\n"
            "\n"
            "KV store (docs/KVSTORE.md):\n"
            "      --kv-type T       T0 (worker) KV format: f32, f16 or int8 (default f32)\n"
            "      --kv-policy P     eviction order in every tier: lru, lfu, scored (default scored)\n"
            "      --no-prefix-cache every request computes its whole prompt\n"
            "      --no-tiers        no KV tier manager or prefetcher: evicted blocks are dropped\n"
            "      --t1-blocks N     T1 DRAM pool of the tier manager, in blocks (default 256)\n"
            "      --t1-type T       T1 format: f32, f16, int8, int4 (default: the T0 format)\n"
            "      --t2-dir DIR      T2: SSD files in DIR (io_uring, O_DIRECT); default: no T2\n"
            "      --t2-blocks N     T2 capacity in blocks (default 1024)\n"
            "      --t2-type T       T2 format (default: the T1 format)\n"
            "      --prefetch-wait-ms N  how long a request waits for its promotions (default 200)\n"
            "\n"
            "Speculative decoding:\n"
            "      --draft KIND      ngram (prompt lookup) or model (needs --draft-model); a draft\n"
            "                        worker proposes tokens, the target verifies them in one pass\n"
            "      --draft-model PATH  draft GGUF with the target's vocabulary (e.g. a Q4_1 copy)\n"
            "      --spec-k N        fixed draft depth 1..16 (default 0: adaptive, from acceptance\n"
            "                        and load)\n"
            "      --spec-k-max N    adaptive: the largest depth (default 8)\n"
            "      --spec-wait-ms N  longest wait for a draft before a step runs without it\n"
            "                        (default 20; when every running request waits for its\n"
            "                        draft, up to 10x that, following the drafts' latency)\n"
            "\n"
            "      --topology FILE   process mode: one process per actor (docs/TOPOLOGY.md);\n"
            "                        the file's options replace the ones above\n"
            "  -h, --help            this help\n"
            "\n"
            "SIGINT or SIGTERM stops the service cleanly.\n",
            cli_default_model(), ACTOR_FRONTEND_DEFAULT_ENDPOINT);
}

/* The embedded default: every actor over inproc:// in this process. */
static int s_thread_mode(actor_topology_t *topo, int workers, const char *endpoint) {
    const char *order_stop[] = {"frontend", "tokenizer", "router"};
    actor_t **actors = calloc((size_t)workers + 6, sizeof *actors);
    int n = 0, rc = 1;
    char err[512];
    if (!actors)
        return 1;
    /* the KV tiers and workers first (they load what they own), the frontend
     * last: clients are only accepted when everything behind it is ready */
    const char *kv_actors[] = {"kvtier", "prefetcher", "draft"};
    for (int i = 0; i < 3; i++)
        if (actor_topology_endpoint(topo, kv_actors[i]) &&
            !(actors[n++] = actor_new(kv_actors[i], topo, 0, err, sizeof err)))
            goto fail;
    for (int i = 0; i < workers; i++) {
        char name[32];
        snprintf(name, sizeof name, "worker%d", i);
        if (!(actors[n++] = actor_new(name, topo, 0, err, sizeof err)))
            goto fail;
    }
    for (int i = 2; i >= 0; i--)
        if (!(actors[n++] = actor_new(order_stop[i], topo, 0, err, sizeof err)))
            goto fail;
    fprintf(stderr, "strata serve: ready on %s (%d worker%s)\n", endpoint, workers,
            workers == 1 ? "" : "s");
    fflush(stderr);
    rc = 0;
    while (!zsys_interrupted && !rc) {
        zclock_sleep(100);
        for (int i = 0; i < n; i++) {
            int arc;
            if (actor_exited(actors[i], &arc)) {
                fprintf(stderr, "strata serve: actor %s ended (%d): stopping\n",
                        actor_name(actors[i]), arc);
                rc = 1;
            }
        }
    }
    fprintf(stderr, "strata serve: stopping\n");
    goto stop;
fail:
    fprintf(stderr, "strata serve: %s\n", err);
    n--;
stop:
    for (int i = n - 1; i >= 0; i--) /* frontend first, workers last */
        actor_destroy(&actors[i]);
    free(actors);
    return rc;
}

static int s_process_mode(actor_topology_t *topo, const char *path) {
    char exe[1024], err[512];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        fprintf(stderr, "strata serve: cannot find the strata binary\n");
        return 1;
    }
    exe[k] = 0;
    actor_supervisor_t *sup = actor_supervisor_new(topo, path, exe, err, sizeof err);
    if (!sup) {
        fprintf(stderr, "strata serve: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (actor_supervisor_start(sup, 300000, err, sizeof err)) {
        fprintf(stderr, "strata serve: %s\n", err);
        rc = 1;
    } else {
        int workers = actor_topology_workers(topo);
        fprintf(stderr, "strata serve: ready on %s (%d worker%s, process mode)\n",
                actor_topology_opt(topo, "frontend", "client", ACTOR_FRONTEND_DEFAULT_ENDPOINT),
                workers, workers == 1 ? "" : "s");
        fflush(stderr);
        while (!zsys_interrupted)
            actor_supervisor_poll(sup, 100);
        fprintf(stderr, "strata serve: stopping\n");
    }
    actor_supervisor_destroy(&sup);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    const char *C = "serve";
    const char *model = NULL, *endpoint = ACTOR_FRONTEND_DEFAULT_ENDPOINT, *topo_path = NULL;
    long workers = 1, threads = 0, max_batch = 16, kv_blocks = 512, queue = 64, step = 256,
         max_ctx = 2048, t1_blocks = 256, t2_blocks = 1024, wait_ms = 200;
    const char *kv_type = "f32", *policy = "scored", *t1_type = NULL, *t2_type = NULL,
               *t2_dir = NULL;
    bool prefix = true, tiers = true;
    const char *draft = NULL, *draft_model = NULL;
    long spec_k = 0, spec_k_max = 8, spec_wait_ms = 20;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"endpoint", required_argument, 0, 1},
        {"workers", required_argument, 0, 2},      {"threads", required_argument, 0, 't'},
        {"max-batch", required_argument, 0, 3},    {"kv-blocks", required_argument, 0, 4},
        {"queue", required_argument, 0, 5},        {"step-tokens", required_argument, 0, 6},
        {"max-ctx", required_argument, 0, 7},      {"topology", required_argument, 0, 8},
        {"kv-type", required_argument, 0, 9},      {"kv-policy", required_argument, 0, 10},
        {"no-prefix-cache", no_argument, 0, 11},   {"no-tiers", no_argument, 0, 12},
        {"t1-blocks", required_argument, 0, 13},   {"t1-type", required_argument, 0, 14},
        {"t2-dir", required_argument, 0, 15},      {"t2-blocks", required_argument, 0, 16},
        {"t2-type", required_argument, 0, 17},     {"prefetch-wait-ms", required_argument, 0, 18},
        {"draft", required_argument, 0, 19},       {"draft-model", required_argument, 0, 20},
        {"spec-k", required_argument, 0, 21},      {"spec-k-max", required_argument, 0, 22},
        {"spec-wait-ms", required_argument, 0, 23},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "m:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 1: endpoint = optarg; break;
        case 2: if (!cli_int(C, "--workers", optarg, 1, 64, &workers)) return 1; break;
        case 't': if (!cli_int(C, "--threads", optarg, 1, 256, &threads)) return 1; break;
        case 3: if (!cli_int(C, "--max-batch", optarg, 1, 4096, &max_batch)) return 1; break;
        case 4: if (!cli_int(C, "--kv-blocks", optarg, 1, 1 << 24, &kv_blocks)) return 1; break;
        case 5: if (!cli_int(C, "--queue", optarg, 0, 1 << 20, &queue)) return 1; break;
        case 6: if (!cli_int(C, "--step-tokens", optarg, 1, 1 << 16, &step)) return 1; break;
        case 7: if (!cli_int(C, "--max-ctx", optarg, 2, 1 << 20, &max_ctx)) return 1; break;
        case 8: topo_path = optarg; break;
        case 9: kv_type = optarg; break;
        case 10: policy = optarg; break;
        case 11: prefix = false; break;
        case 12: tiers = false; break;
        case 13: if (!cli_int(C, "--t1-blocks", optarg, 1, 1 << 24, &t1_blocks)) return 1; break;
        case 14: t1_type = optarg; break;
        case 15: t2_dir = optarg; break;
        case 16: if (!cli_int(C, "--t2-blocks", optarg, 1, 1 << 26, &t2_blocks)) return 1; break;
        case 17: t2_type = optarg; break;
        case 19: draft = optarg; break;
        case 20: draft_model = optarg; break;
        case 21: if (!cli_int(C, "--spec-k", optarg, 0, 16, &spec_k)) return 1; break;
        case 22: if (!cli_int(C, "--spec-k-max", optarg, 1, 16, &spec_k_max)) return 1; break;
        case 23: if (!cli_int(C, "--spec-wait-ms", optarg, 0, 60000, &spec_wait_ms)) return 1; break;
        case 18: if (!cli_int(C, "--prefetch-wait-ms", optarg, 0, 60000, &wait_ms)) return 1; break;
        case 'h': s_help(stdout); return 0;
        default: s_help(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strata serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!strstr(endpoint, "://")) {
        fprintf(stderr, "strata serve: --endpoint must look like tcp://HOST:PORT\n");
        return 2;
    }
    int f0 = kv_fmt_parse(kv_type);
    if (f0 < 0 || kv_fmt_pool_type(f0) < 0) {
        fprintf(stderr, "strata serve: --kv-type must be f32, f16 or int8 (got '%s')\n", kv_type);
        return 2;
    }
    if (kv_policy_parse(policy) < 0) {
        fprintf(stderr, "strata serve: --kv-policy must be lru, lfu or scored (got '%s')\n",
                policy);
        return 2;
    }
    if (draft && strcmp(draft, "ngram") && strcmp(draft, "model")) {
        fprintf(stderr, "strata serve: --draft must be ngram or model (got '%s')\n", draft);
        return 2;
    }
    if (draft && !strcmp(draft, "model") && !draft_model) {
        fprintf(stderr, "strata serve: --draft model needs --draft-model PATH\n");
        return 2;
    }
    if (draft_model && !draft)
        draft = "model";
    if (draft_model && access(draft_model, R_OK)) {
        fprintf(stderr, "strata serve: cannot read the draft model '%s'\n", draft_model);
        return 1;
    }
    if (!t1_type)
        t1_type = kv_fmt_name(f0);
    if (!t2_type)
        t2_type = t1_type;
    if (kv_fmt_parse(t1_type) < 0 || kv_fmt_parse(t2_type) < 0) {
        fprintf(stderr, "strata serve: --t1-type / --t2-type must be f32, f16, int8 or int4\n");
        return 2;
    }
    if (!model)
        model = cli_default_model();
    if (access(model, R_OK)) {
        fprintf(stderr, "strata serve: cannot read the model '%s'\n", model);
        return 1;
    }
    if (!threads) {
        threads = cli_default_threads() / workers;
        if (threads < 1)
            threads = 1;
    }
    actor_topology_t *topo = calloc(1, sizeof *topo);
    if (!topo)
        return 1;
    zsys_init();
    int rc;
    char err[512];
    if (topo_path) {
        if (actor_topology_load(topo, topo_path, err, sizeof err)) {
            fprintf(stderr, "strata serve: %s\n", err);
            free(topo);
            return 1;
        }
        rc = s_process_mode(topo, topo_path);
    } else {
        char ep[128], num[32];
        int pid = (int)getpid();
        actor_topo_entry_t *d = actor_topology_add(topo, "defaults", "-");
        actor_topology_set(d, "model", model);
#define SET_NUM(key, v) (snprintf(num, sizeof num, "%ld", (long)(v)), actor_topology_set(d, key, num))
        SET_NUM("threads", threads);
        SET_NUM("max_batch", max_batch);
        SET_NUM("kv_blocks", kv_blocks);
        SET_NUM("queue", queue);
        SET_NUM("step_tokens", step);
        SET_NUM("max_ctx", max_ctx);
        SET_NUM("prefix_cache", prefix);
        SET_NUM("prefetch_wait_ms", wait_ms);
        SET_NUM("t1_blocks", t1_blocks);
        SET_NUM("t2_blocks", t2_blocks);
#undef SET_NUM
        actor_topology_set(d, "kv_type", kv_type);
        actor_topology_set(d, "kv_policy", policy);
        actor_topology_set(d, "policy", policy);
        actor_topology_set(d, "t1_fmt", t1_type);
        actor_topology_set(d, "t2_fmt", t2_type);
        actor_topology_set(d, "t2_dir", t2_dir ? t2_dir : "none");
        snprintf(num, sizeof num, "%ld", spec_k);
        actor_topology_set(d, "spec_k", num);
        snprintf(num, sizeof num, "%ld", spec_k_max);
        actor_topology_set(d, "spec_k_max", num);
        snprintf(num, sizeof num, "%ld", spec_wait_ms * 1000);
        actor_topology_set(d, "spec_wait_us", num);
        if (draft) {
            snprintf(ep, sizeof ep, "inproc://strata-%d-draft", pid);
            actor_topo_entry_t *e = actor_topology_add(topo, "draft", ep);
            actor_topology_set(e, "draft", draft);
            if (draft_model)
                actor_topology_set(e, "draft_model", draft_model);
        }
        if (tiers) {
            snprintf(ep, sizeof ep, "inproc://strata-%d-kvtier", pid);
            actor_topology_add(topo, "kvtier", ep);
            snprintf(ep, sizeof ep, "inproc://strata-%d-prefetcher", pid);
            actor_topology_add(topo, "prefetcher", ep);
        }
        snprintf(ep, sizeof ep, "inproc://strata-%d-frontend", pid);
        actor_topology_set(actor_topology_add(topo, "frontend", ep), "client", endpoint);
        snprintf(ep, sizeof ep, "inproc://strata-%d-tokenizer", pid);
        actor_topology_add(topo, "tokenizer", ep);
        snprintf(ep, sizeof ep, "inproc://strata-%d-router", pid);
        actor_topology_add(topo, "router", ep);
        for (int i = 0; i < workers; i++) {
            char name[32];
            snprintf(name, sizeof name, "worker%d", i);
            snprintf(ep, sizeof ep, "inproc://strata-%d-%s", pid, name);
            actor_topology_add(topo, name, ep);
        }
        rc = s_thread_mode(topo, (int)workers, endpoint);
    }
    free(topo);
    return rc;
}
