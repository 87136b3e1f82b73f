/* cli_serve_process.c - `strata serve --topology FILE`: process mode.  A supervisor
 * runs every actor (of this host) as its own process and restarts the ones that die;
 * its control endpoint takes `strata ctl` (restart, drain, status); SIGTERM, SIGINT or
 * `strata ctl drain` drain the service, then stop it. */
#include "cli.h"

#include "actor_frontend.h"
#include "actor_supervisor.h"
#include "actor_topology.h"
#include "base_notify.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cli_serve_process(actor_topology_t *topo, const char *path, const char *host, int drain_s,
                      const char *ctl); /* called by bin/cmd_serve.c */

/* Open the control endpoint: --ctl EP, "none", or the default of the client endpoint.
 * false (after a message) when an endpoint given by --ctl cannot be opened; the
 * default failing is only warned about. */
static bool s_open_ctl(actor_supervisor_t *sup, const actor_topology_t *topo, const char *host,
                       int drain_s, const char *ctl) {
    char def[256], err[512];
    const char *ep = ctl;
    if (!ep)
        ep = cli_ctl_default(
            actor_topology_opt(topo, "frontend", "client", ACTOR_FRONTEND_DEFAULT_ENDPOINT), host,
            def, sizeof def);
    if (!strcmp(ep, "none"))
        return true;
    if (actor_supervisor_ctl(sup, ep, (int64_t)drain_s * 1000, err, sizeof err)) {
        fprintf(stderr, "strata serve: %s%s\n", err,
                ctl ? "" : " (no control endpoint: --ctl EP names another)");
        return !ctl;
    }
    fprintf(stderr, "strata serve: control endpoint %s (strata ctl --ctl %s ...)\n", ep, ep);
    return true;
}

int cli_serve_process(actor_topology_t *topo, const char *path, const char *host, int drain_s,
                      const char *ctl) {
    char exe[1024], err[512];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        fprintf(stderr, "strata serve: cannot find the strata binary\n");
        return 1;
    }
    exe[k] = 0;
    if (host && !actor_topology_has_host(topo, host)) {
        fprintf(stderr, "strata serve: --host %s: no actor of %s has host=%s\n", host, path, host);
        return 1;
    }
    if (ctl && strcmp(ctl, "none") && actor_supervisor_ctl_check(topo, ctl, err, sizeof err)) {
        fprintf(stderr, "strata serve: %s\n", err); /* before any actor starts */
        return 1;
    }
    actor_supervisor_t *sup = actor_supervisor_new(topo, path, exe, host, err, sizeof err);
    if (!sup) {
        fprintf(stderr, "strata serve: %s\n", err);
        return 1;
    }
    /* before the actors start: they must not inherit $NOTIFY_SOCKET */
    base_notify_t *notify = base_notify_new();
    int rc = 0;
    if (actor_supervisor_start(sup, 300000, err, sizeof err)) {
        fprintf(stderr, "strata serve: %s\n", err);
        rc = 1;
    } else if (!s_open_ctl(sup, topo, host, drain_s, ctl)) {
        rc = 1;
    } else {
        int workers = actor_topology_workers(topo);
        if (host)
            fprintf(stderr, "strata serve: ready on host %s (%d actor%s, process mode)\n", host,
                    actor_supervisor_count(sup), actor_supervisor_count(sup) == 1 ? "" : "s");
        else
            fprintf(stderr, "strata serve: ready on %s (%d worker%s, process mode)\n",
                    actor_topology_opt(topo, "frontend", "client", ACTOR_FRONTEND_DEFAULT_ENDPOINT),
                    workers, workers == 1 ? "" : "s");
        fflush(stderr);
        base_notify_send(notify, "READY=1\nSTATUS=ready (%d actor%s)", actor_supervisor_count(sup),
                         actor_supervisor_count(sup) == 1 ? "" : "s");
        while (!zsys_interrupted && actor_supervisor_stop_asked(sup) < 0)
            actor_supervisor_poll(sup, 100);
        /* `strata ctl drain` gives its own grace (or serve's); a signal, serve's */
        int64_t grace_ms = actor_supervisor_stop_asked(sup) >= 0 ? actor_supervisor_stop_asked(sup)
                                                                 : (int64_t)drain_s * 1000;
        base_notify_send(notify, "STOPPING=1\nSTATUS=%s", grace_ms > 0 ? "draining" : "stopping");
        if (grace_ms > 0) {
            fprintf(stderr, "strata serve: draining (up to %.1f s)\n", (double)grace_ms / 1000);
            fflush(stderr);
            if (actor_supervisor_drain(sup, (int)grace_ms) == -ETIMEDOUT)
                fprintf(stderr, "strata serve: the frontend did not end its drain in time\n");
        }
        fprintf(stderr, "strata serve: stopping (%d restart%s, %d hung)\n",
                actor_supervisor_restarts(sup), actor_supervisor_restarts(sup) == 1 ? "" : "s",
                actor_supervisor_hangs(sup));
    }
    actor_supervisor_destroy(&sup);
    base_notify_destroy(&notify);
    return rc;
}
