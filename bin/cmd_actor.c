/* cmd_actor.c - `strata actor NAME --topology FILE`: one actor as its own
 * process (what the supervisor of `strata serve --topology` spawns).  Exits 0
 * after a clean stop (SIGTERM, stop command), non-zero when the actor fails. */
#include "cli.h"

#include "actors/actor_runtime.h"
#include "actors/actor_topology.h"

#include <czmq.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static void s_help(FILE *f) {
    fprintf(f, "usage: strata actor NAME --topology FILE\n"
               "\n"
               "Runs actor NAME (frontend, tokenizer, router, worker<N>) of the topology FILE\n"
               "(docs/TOPOLOGY.md) in this process and reports ready to the topology's\n"
               "supervisor endpoint.  Normally started by `strata serve --topology FILE`.\n");
}

int cmd_actor(int argc, char **argv) {
    const char *topo_path = NULL;
    static const struct option opts[] = {
        {"topology", required_argument, 0, 1}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 1: topo_path = optarg; break;
        case 'h': s_help(stdout); return 0;
        default: s_help(stderr); return 2;
        }
    }
    if (optind != argc - 1 || !topo_path) {
        s_help(stderr);
        return 2;
    }
    const char *name = argv[optind];
    actor_topology_t *topo = calloc(1, sizeof *topo);
    char err[512];
    if (!topo)
        return 1;
    if (actor_topology_load(topo, topo_path, err, sizeof err)) {
        fprintf(stderr, "strata actor: %s\n", err);
        free(topo);
        return 1;
    }
    if (!actor_topology_opt(topo, name, "model", NULL)) {
        actor_topo_entry_t *d = (actor_topo_entry_t *)actor_topology_find(topo, "defaults");
        if (!d)
            d = actor_topology_add(topo, "defaults", "-");
        if (d)
            actor_topology_set(d, "model", cli_default_model());
    }
    if (!actor_lookup(name) || !actor_topology_endpoint(topo, name)) {
        fprintf(stderr, "strata actor: no actor '%s' in %s\n", name, topo_path);
        free(topo);
        return 1;
    }
    zsys_init();
    int rc = actor_process_run(name, topo);
    free(topo);
    return rc;
}
