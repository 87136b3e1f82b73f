/* cmd_actor.c - `strata actor NAME --topology FILE`: one actor as its own
 * process (what the supervisor of `strata serve --topology` spawns).  Exits 0
 * after a clean stop (SIGTERM, stop command), non-zero when the actor fails.
 * `--help` and `--list-options` print the actor registry and option tables. */
#include "cli.h"

#include "actor_registry.h"
#include "actor_runtime.h"
#include "actor_topology.h"

#include <czmq.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One option of the --help listing. */
static void s_help_opt(FILE *f, const actor_opt_t *o) {
    char range[256];
    fprintf(f, "      %-18s %-18s %s%s%s%s\n", o->key, actor_opt_range(o, range, sizeof range),
            o->help, o->def ? " (default " : "", o->def ? o->def : "", o->def ? ")" : "");
}

static void s_help(FILE *f) {
    fprintf(f, "usage: strata actor NAME --topology FILE\n"
               "       strata actor --list-options\n"
               "\n"
               "Runs actor NAME of the topology FILE (docs/TOPOLOGY.md) in this process and\n"
               "reports ready to the topology's supervisor endpoint.  Normally started by\n"
               "`strata serve --topology FILE`.  --list-options prints every option of every\n"
               "actor, one per line: actor (\"all\": options every actor takes), key, type,\n"
               "default, range, help (tab-separated).\n"
               "\n"
               "Actors and their options (key=value on the actor's topology line):\n");
    for (int i = 0; actor_info_at(i); i++) {
        const actor_info_t *a = actor_info_at(i);
        fprintf(f, "\n  %-12s %s\n", a->name, a->purpose);
        for (const actor_opt_t *o = a->opts; o->key; o++)
            s_help_opt(f, o);
    }
    fprintf(f, "\n  %-12s %s\n", "all", "options every actor takes (read by the runtime)");
    for (const actor_opt_t *o = actor_runtime_opts; o->key; o++)
        s_help_opt(f, o);
}

/* One line of --list-options. */
static void s_list_opt(FILE *f, const char *actor, const actor_opt_t *o) {
    char range[256];
    fprintf(f, "%s\t%s\t%s\t%s\t%s\t%s\n", actor, o->key, actor_opt_type_name(o->type),
            o->def ? o->def : "-", actor_opt_range(o, range, sizeof range), o->help);
}

/* One line per option: actor ("all": every actor's), key, type, default ("-":
 * none), range, help. */
static void s_list_options(FILE *f) {
    for (int i = 0; actor_info_at(i); i++)
        for (const actor_opt_t *o = actor_info_at(i)->opts; o->key; o++)
            s_list_opt(f, actor_info_at(i)->name, o);
    for (const actor_opt_t *o = actor_runtime_opts; o->key; o++)
        s_list_opt(f, "all", o);
}

int cmd_actor(int argc, char **argv) {
    const char *topo_path = NULL;
    static const struct option opts[] = {{"topology", required_argument, 0, 1},
                                         {"list-options", no_argument, 0, 2},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 1:
            topo_path = optarg;
            break;
        case 2:
            s_list_options(stdout);
            return 0;
        case 'h':
            s_help(stdout);
            return 0;
        default:
            s_help(stderr);
            return 2;
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
    if (actor_topology_load(topo, topo_path, actor_info_check_opt, err, sizeof err)) {
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
    const actor_info_t *info = actor_info_find(name);
    if (!info || !actor_topology_endpoint(topo, name)) {
        fprintf(stderr, "strata actor: no actor '%s' in %s\n", name, topo_path);
        free(topo);
        return 1;
    }
    /* SIGTERM (the supervisor's stop) and SIGINT (a terminal's Ctrl-C reaches the
     * whole process group) are taken synchronously: blocked here, before any thread
     * exists, so every thread czmq and the actor start inherits the mask, and polled
     * by actor_process_run's loop.  A second signal (Ctrl-C, then the supervisor's
     * SIGTERM) then cannot interrupt the teardown halfway, where it used to make a
     * zactor destroy its pipe while the actor thread still polled it (libzmq
     * assertions at exit). */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    zsys_init();
    int rc = actor_process_run(info, name, topo);
    free(topo);
    return rc;
}
