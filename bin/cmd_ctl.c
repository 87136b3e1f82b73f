/* cmd_ctl.c - `strata ctl`: commands to the supervisor of a process-mode server (its
 * control endpoint, `strata serve --ctl`; docs/OPERATIONS.md): status, drain, and the
 * planned restart of one actor or of every actor in turn.  One DEALER, one ctl message,
 * the ctl_reply messages printed as they come. */
#include "cli.h"
#include "cli_flags.h"

#include "msg_any.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *ctl;  /* --ctl (NULL: the default of --port and --host) */
    int port;         /* the server's client port, for the default endpoint */
    const char *host; /* its --host, for the default endpoint */
    bool all;         /* restart --all */
    double grace_s;   /* a worker's drain (restart) or the server's (drain); < 0: serve's */
    double timeout_s; /* the longest silence of the server */
} s_ctl_opts_t;

#define S_OPT(member) ACTOR_OPT_FIELD(s_ctl_opts_t, member)
static const cli_flag_t s_ctl_flags[] = {
    {.name = "ctl",
     .short_name = 'e',
     .arg = "EP",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "the server's control endpoint (what `strata serve` printed at start)",
             .field = S_OPT(ctl)},
     .def_text = "ipc://$XDG_RUNTIME_DIR/strata-ctl-PORT, else under /tmp"},
    {.name = "port",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 65535,
             .help = "the port of the server's client endpoint: picks the default --ctl",
             .field = S_OPT(port)}},
    {.name = "host",
     .arg = "NAME",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "the supervisor of `strata serve --host NAME`: picks the default --ctl",
             .field = S_OPT(host)}},
    {.name = "all",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "restart: every actor, one at a time",
             .field = S_OPT(all)}},
    {.name = "grace",
     .arg = "S",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = -1,
             .max = 3600,
             .help = "restart: how long a worker drains before its remaining requests move; "
                     "drain: the server's grace (-1: serve's --drain-timeout)",
             .field = S_OPT(grace_s)}},
    {.name = "timeout",
     .arg = "S",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 0.1,
             .max = 3600,
             .help = "give up when the server says nothing for this long (a restart sends a "
                     "line at least every second)",
             .field = S_OPT(timeout_s)}},
    {NULL},
};
#undef S_OPT

static const cli_cmd_t s_cmd = {
    "ctl",
    "usage: strata ctl [--ctl EP | --port N] status\n"
    "       strata ctl [--ctl EP | --port N] restart NAME | restart --all  [--grace S]\n"
    "       strata ctl [--ctl EP | --port N] drain [--grace S]\n"
    "\n"
    "Commands to a running `strata serve --topology FILE` (process mode), through its\n"
    "supervisor's control endpoint:\n"
    "  status          every actor: state, pid, restarts, time since its start\n"
    "  restart NAME    drain that actor (a worker: the router sends it nothing new, its\n"
    "                  requests finish or, past the grace, resume on the other workers),\n"
    "                  stop it (SIGTERM, SIGKILL after 5 s), start it, wait until it is\n"
    "                  ready; prints each phase and how long it took\n"
    "  restart --all   every actor in turn, each ready before the next: the workers, then\n"
    "                  the others in start order, the frontend last but its gateway\n"
    "  drain           drain the whole server and stop it, as SIGTERM does\n",
    "Exit status: 0 done, 1 the server refused or failed (the reason on stderr) or did not\n"
    "answer, 2 bad usage.  docs/OPERATIONS.md says what clients see during a restart.\n",
    {{s_ctl_flags, 0}, {NULL}},
};

const char *cli_ctl_default(const char *client_ep, const char *host, char *buf, size_t len) {
    const char *dir = getenv("XDG_RUNTIME_DIR");
    if (!dir || !*dir)
        dir = "/tmp";
    char key[128];
    const char *colon = client_ep ? strrchr(client_ep, ':') : NULL;
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
        snprintf(key, sizeof key, "%s", colon + 1);
    } else { /* not host:port: its text, as a file name */
        const char *p = client_ep && strstr(client_ep, "://") ? strstr(client_ep, "://") + 3 : "";
        size_t k = 0;
        for (; *p && k + 1 < sizeof key; p++)
            key[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                               (*p >= '0' && *p <= '9') || *p == '.' || *p == '-'
                           ? *p
                           : '_';
        key[k] = 0;
    }
    snprintf(buf, len, "ipc://%s/strata-ctl-%s%s%s", dir, key, host ? "-" : "", host ? host : "");
    return buf;
}

/* status: one line per actor. */
static void s_print_status(const msg_ctl_reply_t *r) {
    printf("%-12s %-10s %8s %8s %10s\n", "ACTOR", "STATE", "PID", "RESTARTS", "UP");
    for (int i = 0; i < r->n_actors; i++) {
        const msg_ctl_actor_t *a = &r->actors[i];
        char pid[24] = "-", up[24] = "-";
        if (a->pid) {
            snprintf(pid, sizeof pid, "%lld", (long long)a->pid);
            snprintf(up, sizeof up, "%.1f s", (double)a->up_ms / 1000);
        }
        printf("%-12s %-10s %8s %8lld %10s\n", a->name, msg_ctl_state_name(a->state), pid,
               (long long)a->restarts, up);
    }
}

/* Send c to ep and print the replies until the final one.  The exit status. */
static int s_run(const char *ep, const msg_ctl_t *c, double timeout_s) {
    void *buf;
    size_t len;
    msg_err_t e;
    if (msg_ctl_encode(c, &buf, &len, &e)) {
        fprintf(stderr, "strata ctl: %s\n", e.msg);
        return 2;
    }
    struct stat st;
    if (!strncmp(ep, "ipc://", 6) && stat(ep + 6, &st)) {
        fprintf(stderr,
                "strata ctl: no server at %s (no such socket file: is `strata serve --topology` "
                "running? --ctl names the endpoint it printed)\n",
                ep);
        free(buf);
        return 1;
    }
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (!s || (zsock_set_linger(s, 0), zsock_set_maxmsgsize(s, MSG_MAX_INTERNAL_FRAME),
               zsock_connect(s, "%s", ep) < 0)) {
        fprintf(stderr, "strata ctl: cannot connect to %s\n", ep);
        zsock_destroy(&s);
        free(buf);
        return 1;
    }
    zframe_t *f = zframe_new(buf, len);
    free(buf);
    zframe_send(&f, s, 0);
    int rc = 1;
    zpoller_t *poller = zpoller_new(s, NULL);
    for (;;) {
        if (!zpoller_wait(poller, (int)(timeout_s * 1000))) {
            fprintf(stderr, "strata ctl: %s from %s within %.1f s\n",
                    zpoller_terminated(poller) ? "interrupted: no answer" : "no answer", ep,
                    timeout_s);
            break;
        }
        zframe_t *in = zframe_recv(s);
        msg_ctl_reply_t r;
        int drc = in ? msg_ctl_reply_decode(zframe_data(in), zframe_size(in), &r, &e) : -EIO;
        zframe_destroy(&in);
        if (drc) {
            fprintf(stderr, "strata ctl: a bad answer from %s: %s\n", ep,
                    drc == -EIO ? "unreadable" : e.msg);
            break;
        }
        if (r.n_actors)
            s_print_status(&r);
        if (r.message[0] && r.ok)
            printf("%s\n", r.message);
        else if (r.message[0])
            fprintf(stderr, "strata ctl: %s\n", r.message);
        fflush(stdout);
        bool final = r.final, ok = r.ok;
        msg_ctl_reply_clear(&r);
        if (final) {
            rc = ok ? 0 : 1;
            break;
        }
    }
    zpoller_destroy(&poller);
    zsock_destroy(&s);
    return rc;
}

int cmd_ctl(int argc, char **argv) {
    s_ctl_opts_t o = {.port = 5555, .grace_s = -1, .timeout_s = 10};
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, &o, &next);
    if (rc != CLI_PARSED)
        return rc;
    msg_ctl_t c;
    msg_ctl_init(&c);
    const char *what = next < argc ? argv[next] : NULL;
    int operands = argc - next;
    if (!what) {
        fprintf(stderr, "strata ctl: a command expected: status, drain, restart NAME, restart "
                        "--all (strata ctl --help)\n");
        return 2;
    } else if (!strcmp(what, "status") || !strcmp(what, "drain")) {
        c.cmd = !strcmp(what, "status") ? MSG_CTL_STATUS : MSG_CTL_DRAIN;
        if (operands > 1 || o.all) {
            fprintf(stderr, "strata ctl: %s takes no %s\n", what, o.all ? "--all" : "actor name");
            return 2;
        }
    } else if (!strcmp(what, "restart")) {
        c.cmd = MSG_CTL_RESTART;
        c.all = o.all;
        if ((operands == 2) == o.all || operands > 2) {
            fprintf(stderr, "strata ctl: restart takes one actor name (e.g. worker0) or --all\n");
            return 2;
        }
        if (operands == 2 && msg_set_str(c.name, sizeof c.name, argv[next + 1])) {
            fprintf(stderr, "strata ctl: no actor is named '%s' (too long)\n", argv[next + 1]);
            return 1;
        }
    } else {
        fprintf(stderr,
                "strata ctl: unknown command '%s' (status, drain, restart NAME, restart --all)\n",
                what);
        return 2;
    }
    if (o.grace_s >= 0)
        c.grace_ms = (int64_t)(o.grace_s * 1000 + 0.5);
    char def[256], client[64];
    snprintf(client, sizeof client, "tcp://127.0.0.1:%d", o.port);
    const char *ep = o.ctl ? o.ctl : cli_ctl_default(client, o.host, def, sizeof def);
    if (strncmp(ep, "ipc://", 6) && strncmp(ep, "tcp://", 6)) {
        fprintf(stderr, "strata ctl: --ctl %s: ipc://PATH or tcp://HOST:PORT expected\n", ep);
        return 2;
    }
    zsys_init();
    return s_run(ep, &c, o.timeout_s);
}
