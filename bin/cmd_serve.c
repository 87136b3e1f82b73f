/* cmd_serve.c - `strata serve`: the service.  With no --topology every actor
 * runs as a thread of this process over inproc:// (the embedded default); with
 * --topology FILE each actor runs as its own process under a supervisor that
 * restarts the ones that die. */
#include "cli.h"

#include "actors/actor_frontend.h"
#include "actors/actor_runtime.h"
#include "actors/actor_supervisor.h"
#include "actors/actor_topology.h"

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
            "batching.  Without --topology every actor is a thread of this process.\n"
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
    actor_t **actors = calloc((size_t)workers + 3, sizeof *actors);
    int n = 0, rc = 1;
    char err[512];
    if (!actors)
        return 1;
    /* workers first (they load the weights), the frontend last: clients are
     * only accepted when everything behind it is ready */
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
         max_ctx = 2048;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"endpoint", required_argument, 0, 1},
        {"workers", required_argument, 0, 2},      {"threads", required_argument, 0, 't'},
        {"max-batch", required_argument, 0, 3},    {"kv-blocks", required_argument, 0, 4},
        {"queue", required_argument, 0, 5},        {"step-tokens", required_argument, 0, 6},
        {"max-ctx", required_argument, 0, 7},      {"topology", required_argument, 0, 8},
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
#undef SET_NUM
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
