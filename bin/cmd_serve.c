/* cmd_serve.c - `strata serve`: the service.  With no --topology every actor
 * runs as a thread of this process over inproc:// (the embedded default); with
 * --topology FILE each actor runs as its own process under a supervisor that
 * restarts the ones that die.  Its flags are a table mapped onto actor options. */
#include "cli.h"
#include "cli_config.h"
#include "cli_flags.h"

#include "actor_curve.h"
#include "actor_frontend.h"
#include "actor_registry.h"
#include "actor_runtime.h"
#include "actor_supervisor.h"
#include "actor_topology.h"
#include "actor_worker.h"

#include "base_clock.h"
#include "base_notify.h"

#include <czmq.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A flag of `strata serve`.  A flag with a key sets that option of the actor
 * that declares it (on the topology's "defaults" line): its type, range,
 * allowed values, default and help are the option's (actor_opts.h).  A flag
 * may set several options (one row each); flags without a key are serve's own. */
typedef struct {
    const char *flag;    /* long name, without "--" */
    char short_name;     /* or 0 */
    const char *actor;   /* whose option table declares key ("all": actor_runtime_opts,
                            every actor's); NULL: serve's own flag */
    const char *key;     /* the option it sets */
    const char *arg;     /* metavariable; NULL: a switch */
    const char *value;   /* a switch with a key: the value it sets */
    int scale;           /* the option is the flag's value times this (0: 1) */
    const char *help;    /* NULL: the option's help, range and default */
    const char *section; /* a heading printed before it, or NULL */
} s_flag_t;

static const s_flag_t s_flags[] = {
    {"model", 'm', "worker<N>", "model", "PATH", NULL, 0, "GGUF model (default: %s)", NULL},
    {"endpoint", 0, "frontend", "client", "EP", NULL, 0, NULL, NULL},
    {"client-secret", 0, "frontend", "client_secret", "FILE", NULL, 0,
     "CURVE on the client endpoint: its key pair (strata keygen; docs/SECURITY.md)", NULL},
    {"client-allow", 0, "frontend", "client_allow", "DIR", NULL, 0,
     "CURVE on the client endpoint: the directory of client public keys admitted", NULL},
    {"workers", 0, NULL, NULL, "N", NULL, 0, "target workers (1..64, default 1)", NULL},
    {"drain-timeout", 0, NULL, NULL, "S", NULL, 0,
     "on SIGTERM/SIGINT, drain first: refuse new requests (error draining, /readyz 503), let "
     "those in flight finish for up to S seconds, end the rest with error draining (their "
     "clients resume them elsewhere); 0: stop at once (0..3600, default 30; "
     "docs/OPERATIONS.md)",
     NULL},
    {"threads", 't', "worker<N>", "threads", "N", NULL, 0,
     "threads per worker (1..256, default: CPUs / workers)", NULL},
    {"device", 0, "worker<N>", "device", "DEV", NULL, 0,
     "where every worker's forward pass runs: cpu (default), cuda:N (T0 KV f16 in device "
     "memory), or cpu-seam (the GPU worker's code on the CPU, one thread; docs/GPU.md)",
     NULL},
    {"max-batch", 0, "worker<N>", "max_batch", "N", NULL, 0, NULL, NULL},
    {"kv-blocks", 0, "worker<N>", "kv_blocks", "N", NULL, 0, NULL, NULL},
    {"queue", 0, "worker<N>", "queue", "N", NULL, 0, NULL, NULL},
    {"step-tokens", 0, "worker<N>", "step_tokens", "N", NULL, 0, NULL, NULL},
    {"max-ctx", 0, "worker<N>", "max_ctx", "N", NULL, 0, NULL, NULL},
    {"kv-type", 0, "worker<N>", "kv_type", "T", NULL, 0, NULL, "KV store (docs/KVSTORE.md):"},
    {"kv-policy", 0, "worker<N>", "kv_policy", "P", NULL, 0,
     "eviction order in every tier (lru|lfu|scored, default scored)", NULL},
    {"kv-policy", 0, "kvtier", "policy", "P", NULL, 0, NULL, NULL},
    {"kv-compress", 0, "worker<N>", "kv_compress", "SPEC", NULL, 0,
     "in-sequence KV compression of the requests that name none: none (default), window:B "
     "(StreamingLLM), h2o:B (heavy hitters) or snapkv:B, B KV rows or a percentage of the "
     "positions (docs/KV_COMPRESSION.md)",
     NULL},
    {"no-prefix-cache", 0, "worker<N>", "prefix_cache", NULL, "0", 0,
     "every request computes its whole prompt", NULL},
    {"no-tiers", 0, NULL, NULL, NULL, NULL, 0,
     "no KV tier manager or prefetcher: evicted blocks are dropped", NULL},
    {"t1-blocks", 0, "kvtier", "t1_blocks", "N", NULL, 0, NULL, NULL},
    {"t1-type", 0, "kvtier", "t1_fmt", "T", NULL, 0,
     "T1 format (f32|f16|int8|int4, default: the T0 format)", NULL},
    {"t2-dir", 0, "kvtier", "t2_dir", "DIR", NULL, 0,
     "T2: SSD files in DIR (io_uring, O_DIRECT); default: no T2", NULL},
    {"t2-blocks", 0, "kvtier", "t2_blocks", "N", NULL, 0, NULL, NULL},
    {"t2-type", 0, "kvtier", "t2_fmt", "T", NULL, 0, "T2 format (default: the T1 format)", NULL},
    {"prefetch-wait-ms", 0, "worker<N>", "prefetch_wait_ms", "N", NULL, 0, NULL, NULL},
    {"kv-events", 0, "worker<N>", "kv_events", "EP", NULL, 0,
     "publish KV cache events in vLLM's format (EventBatch over ZeroMQ PUB) for KV-aware "
     "routers, e.g. tcp://*:5557; worker i binds port + i; the router follows them too "
     "(docs/KV_EVENTS.md)",
     NULL},
    {"kv-events", 0, "router", "kv_events_from", "EP", NULL, 0, NULL, NULL},
    {"kv-events-replay", 0, "worker<N>", "kv_events_replay", "EP", NULL, 0,
     "with --kv-events: a ROUTER socket answering replay requests (port + i too)", NULL},
    {"kv-events-replay", 0, "router", "kv_events_replay_from", "EP", NULL, 0, NULL, NULL},
    {"kv-events-tiers", 0, "kvtier", "tier_events", "EP", NULL, 0,
     "publish the KV tier manager's events too (T1 as medium CPU, T2 as DISK), e.g. "
     "tcp://*:5600",
     NULL},
    {"prefix-weight", 0, "router", "prefix_weight", "W", NULL, 0,
     "with --kv-events the router sends a request where its prompt's prefix is cached: a "
     "cached token counts W tokens off that worker's load (0..1000, default 1)",
     NULL},
    {"no-write-through", 0, "worker<N>", "write_through", NULL, "0", 0,
     "full KV blocks of running requests reach T1 only when evicted (not at once)", NULL},
    {"draft", 0, "draft", "draft", "KIND", NULL, 0,
     "ngram (prompt lookup) or model (needs --draft-model); a draft worker proposes "
     "tokens, the target verifies them in one pass",
     "Speculative decoding:"},
    {"draft-model", 0, "draft", "draft_model", "PATH", NULL, 0,
     "draft GGUF with the target's vocabulary (e.g. a Q4_1 copy)", NULL},
    {"spec-k", 0, "worker<N>", "spec_k", "N", NULL, 0, NULL, NULL},
    {"spec-k-max", 0, "worker<N>", "spec_k_max", "N", NULL, 0, NULL, NULL},
    {"spec-wait-ms", 0, "worker<N>", "spec_wait_us", "N", NULL, 1000,
     "longest wait for a draft before a step runs without it (0..60000, default 20; when "
     "every running request waits for its draft, up to 10x that, following the drafts' "
     "latency)",
     NULL},
    {"experts", 0, NULL, NULL, "N", NULL, 0,
     "MoE models: N expert actors (0..64, default 0: experts run inside the workers); "
     "experts are placed round-robin (docs/MOE.md)",
     "MoE expert actors:"},
    {"expert-slots", 0, "expert<N>", "expert_slots", "N", NULL, 0, NULL, NULL},
    {"expert-dtype", 0, "worker<N>", "expert_dtype", "T", NULL, 0, NULL, NULL},
    {"expert-timeout-ms", 0, "worker<N>", "expert_timeout_ms", "N", NULL, 0, NULL, NULL},
    {"moe-dispatch", 0, "router", "moe_dispatch", "MODE", NULL, 0, NULL, NULL},
    {"moe-capacity", 0, "router", "moe_capacity", "F", NULL, 0, NULL, NULL},
    {"semcache", 0, "semcache", "mode", "MODE", NULL, 0,
     "run the answer cache (docs/SEMCACHE.md); MODE is what a request that names no cache "
     "mode gets: off (only requests that ask are cached), exact or semantic",
     "Answer cache:"},
    {"semcache-delta", 0, "semcache", "delta", "D", NULL, 0, NULL, NULL},
    {"semcache-path", 0, "semcache", "path", "FILE", NULL, 0, NULL, NULL},
    {"semcache-entries", 0, "semcache", "entries", "N", NULL, 0, NULL, NULL},
    {"metrics", 0, "metrics", "listen", "HOST:PORT", NULL, 0,
     "serve Prometheus metrics (/metrics) and a status page (/) over HTTP on HOST:PORT "
     "(docs/METRICS.md)",
     "Observability:"},
    {"http", 0, "http", "listen", "HOST:PORT", NULL, 0,
     "also serve the OpenAI-compatible HTTP API there, e.g. 127.0.0.1:8080 (docs/HTTP.md)",
     "HTTP (OpenAI API):"},
    {"http-tls-cert", 0, "http", "tls_cert", "FILE", NULL, 0, NULL, NULL},
    {"http-tls-key", 0, "http", "tls_key", "FILE", NULL, 0, NULL, NULL},
    {"api-key-file", 0, "http", "api_key_file", "FILE", NULL, 0,
     "with --http: API keys, one per line; requests need 'Authorization: Bearer KEY'", NULL},
    {"cors-origin", 0, "http", "cors_origin", "ORIGIN", NULL, 0,
     "with --http: allow browser calls (CORS) from ORIGIN, e.g. https://app.example.com; "
     "repeat it for more, or * for any (default: none, no CORS headers)",
     NULL},
    {"faults", 0, "all", "faults", "SPEC", NULL, 0,
     "inject faults on the links between actors, every actor alike: e.g. "
     "'seed=1,drop=0.05,delay=0.1:20,to=router' (docs/FAULTS.md)",
     "Testing:"},
    {"audit-dir", 0, "frontend", "audit_dir", "DIR", NULL, 0, NULL, "Audit log (docs/AUDIT.md):"},
    {"audit-fsync", 0, "frontend", "audit_fsync", "POLICY", NULL, 0, NULL, NULL},
    {"audit-text", 0, "frontend", "audit_text", NULL, "1", 0, NULL, NULL},
    {"topology", 0, NULL, NULL, "FILE", NULL, 0,
     "process mode: one process per actor (docs/TOPOLOGY.md); the file's options replace "
     "the ones above",
     ""},
    {"host", 0, NULL, NULL, "NAME", NULL, 0,
     "with --topology: start only the actors with host=NAME (one supervisor per host)", NULL},
    {"ctl", 0, NULL, NULL, "EP", NULL, 0,
     "with --topology: the supervisor's control endpoint for `strata ctl` (restart, drain, "
     "status): ipc://PATH (a 0600 socket file) or tcp://HOST:PORT (refused with CURVE); "
     "none: no endpoint (default ipc://$XDG_RUNTIME_DIR, else /tmp, /strata-ctl-PORT, PORT "
     "the client endpoint's; docs/OPERATIONS.md)",
     NULL},
    {"hang-timeout-ms", 0, "supervisor", "hang_timeout_ms", "N", NULL, 0,
     "an actor silent (no heartbeat) this long is hung (default 2000; 0: never): in process "
     "mode the supervisor kills and restarts it; a hung worker's requests move to the "
     "others",
     NULL},
    {"hang-timeout-ms", 0, "frontend", "hang_timeout_ms", "N", NULL, 0, NULL, NULL},
    {"print-config", 0, NULL, NULL, NULL, NULL, 0,
     "print every option of every actor, its value and where it came from (a flag, the "
     "topology file, the environment's STRATA_<ACTOR>_<OPTION>, the default), then exit",
     NULL},
    {"help", 'h', NULL, NULL, NULL, NULL, 0, "this help", NULL},
};
#define S_N_FLAGS (int)(sizeof s_flags / sizeof s_flags[0])

/* The declaration of the option flag row r sets, scaled to the flag's unit
 * (spec-wait-ms: spec_wait_us / 1000). */
static actor_opt_t s_flag_opt(const s_flag_t *r) {
    const actor_opt_t *o = !strcmp(r->actor, "all") ? actor_opts_find(actor_runtime_opts, r->key)
                           : !strcmp(r->actor, "supervisor")
                               ? actor_opts_find(actor_topology_supervisor_opts, r->key)
                               : actor_info_opt(actor_info_find(r->actor), r->key);
    actor_opt_t x = *o;
    if (r->scale > 1) {
        x.min /= r->scale;
        x.max /= r->scale;
    }
    return x;
}

/* The first row of flag name (rows of one flag follow each other). */
static bool s_first_row(int r) {
    return r == 0 || strcmp(s_flags[r - 1].flag, s_flags[r].flag);
}

static void s_help(FILE *f) {
    fprintf(f, "usage: strata serve [options]\n"
               "\n"
               "Runs the inference service: a frontend (ZeroMQ ROUTER, MessagePack protocol, see\n"
               "docs/PROTOCOL.md), a tokenizer, a router and N target workers with continuous\n"
               "batching, a KV tier manager and a prefetcher (unless --no-tiers) and, with\n"
               "--draft, a draft worker.  Without --topology every actor is a thread of this\n"
               "process.  Option texts come from the actors' option tables\n"
               "(`strata actor --help`).\n");
    for (int r = 0; r < S_N_FLAGS; r++) {
        const s_flag_t *x = &s_flags[r];
        if (!s_first_row(r))
            continue;
        if (x->section)
            fprintf(f, "\n%s%s", x->section, *x->section ? "\n" : "");
        else if (r == 0)
            fprintf(f, "\n");
        char left[64], help[512], range[256];
        snprintf(left, sizeof left, "%c%c%c --%s%s%s", x->short_name ? '-' : ' ',
                 x->short_name ? x->short_name : ' ', x->short_name ? ',' : ' ', x->flag,
                 x->arg ? " " : "", x->arg ? x->arg : "");
        if (x->help) {
            snprintf(help, sizeof help, x->help, cli_default_model());
        } else {
            actor_opt_t o = s_flag_opt(x);
            char def[64];
            if (x->scale > 1 && o.def)
                snprintf(def, sizeof def, "%ld", actor_opt_parse_int(o.def) / x->scale);
            else
                snprintf(def, sizeof def, "%s", o.def ? o.def : "none");
            bool text = o.type == ACTOR_OPT_STRING || o.type == ACTOR_OPT_PATH ||
                        o.type == ACTOR_OPT_FAULTS;
            snprintf(help, sizeof help, "%s (%s%sdefault %s)", o.help,
                     text ? "" : actor_opt_range(&o, range, sizeof range), text ? "" : ", ", def);
        }
        cli_help_line(f, left, help);
    }
    fprintf(f, "\nSIGINT or SIGTERM stops the service cleanly.\n");
}

/* The value given for flag (its first row), or NULL. */
static const char *s_val(char (*vals)[ACTOR_TOPO_VALUE], const char *flag) {
    for (int r = 0; r < S_N_FLAGS; r++)
        if (!strcmp(s_flags[r].flag, flag))
            return vals[r][0] ? vals[r] : NULL;
    return NULL;
}

/* Set the value of every row of flag (serve's own defaults). */
static void s_set(char (*vals)[ACTOR_TOPO_VALUE], const char *flag, const char *value) {
    char v[ACTOR_TOPO_VALUE];
    snprintf(v, sizeof v, "%s", value); /* value may be one of vals */
    for (int r = 0; r < S_N_FLAGS; r++)
        if (!strcmp(s_flags[r].flag, flag))
            snprintf(vals[r], sizeof vals[r], "%s", v);
}

/* The embedded default: every actor over inproc:// in this process. */
/* Thread mode's drain: a drain message to the frontend, then wait for it to end (it does
 * when nothing is in flight, or at the grace's end); a few seconds past the grace, stop
 * anyway. */
static void s_drain_threads(const actor_topology_t *topo, actor_t **actors, int n, int drain_s) {
    actor_t *front = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(actor_name(actors[i]), "frontend"))
            front = actors[i];
    zsock_t *push =
        front ? actor_sock_outbound(topo, "supervisor", "frontend", ACTOR_HWM_CTL) : NULL;
    msg_drain_t d = {(int64_t)drain_s * 1000};
    if (!push || actor_send(push, MSG_DRAIN, &d)) {
        zsock_destroy(&push);
        return;
    }
    fprintf(stderr, "strata serve: draining (up to %d s)\n", drain_s);
    fflush(stderr);
    uint64_t deadline = base_now_us() + (uint64_t)(drain_s + 5) * 1000000;
    int arc;
    while (!actor_exited(front, &arc) && base_now_us() < deadline)
        zclock_sleep(50);
    zsock_destroy(&push);
}

static int s_thread_mode(actor_topology_t *topo, int workers, const char *endpoint, int drain_s) {
    actor_t **actors = calloc((size_t)topo->n, sizeof *actors);
    const char *order[ACTOR_TOPO_MAX_ACTORS];
    int n = 0, rc = 1;
    char err[512];
    if (!actors)
        return 1;
    base_notify_t *notify = base_notify_new(); /* systemd's Type=notify (deploy/systemd) */
    /* the client endpoint's CURVE allow-list (--client-allow): before any socket */
    actor_curve_t *curve = actor_curve_new(topo, NULL, err, sizeof err);
    if (!curve) {
        fprintf(stderr, "strata serve: %s\n", err);
        free(actors);
        base_notify_destroy(&notify);
        return 1;
    }
    /* the registry's one start order, as the supervisor's: what loads the
     * longest first, the frontend (then its HTTP gateway) last */
    int n_order = actor_info_start_order(topo, NULL, order, ACTOR_TOPO_MAX_ACTORS, err, sizeof err);
    if (n_order < 0) {
        n++; /* fail: undoes one slot too many, and there is none */
        goto fail;
    }
    for (int i = 0; i < n_order; i++)
        if (actor_topology_endpoint(topo, order[i]) &&
            !(actors[n++] =
                  actor_new(actor_info_find(order[i]), order[i], topo, 0, err, sizeof err)))
            goto fail;
    fprintf(stderr, "strata serve: ready on %s (%d worker%s)\n", endpoint, workers,
            workers == 1 ? "" : "s");
    if (actor_topology_endpoint(topo, "http"))
        fprintf(stderr, "strata serve: OpenAI API on http://%s/v1\n",
                actor_topology_opt(topo, "http", "listen", "?"));
    fflush(stderr);
    base_notify_send(notify, "READY=1\nSTATUS=ready on %s (%d worker%s)", endpoint, workers,
                     workers == 1 ? "" : "s");
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
    base_notify_send(notify, "STOPPING=1\nSTATUS=%s", drain_s > 0 ? "draining" : "stopping");
    if (!rc && drain_s > 0)
        s_drain_threads(topo, actors, n, drain_s);
    fprintf(stderr, "strata serve: stopping\n");
    goto stop;
fail:
    fprintf(stderr, "strata serve: %s\n", err);
    n--;
stop:
    for (int i = n - 1; i >= 0; i--) /* frontend first, workers last */
        actor_destroy(&actors[i]);
    free(actors);
    actor_curve_destroy(&curve);
    base_notify_destroy(&notify);
    return rc;
}

/* Check value of flag row r; the text the option gets (scaled) in out.
 * false after printing "strata serve: --flag value: why". */
static bool s_flag_value(int r, const char *value, char *out, size_t len) {
    const s_flag_t *x = &s_flags[r];
    actor_opt_t o = s_flag_opt(x);
    char why[256];
    if (actor_opt_check(&o, value, why, sizeof why)) {
        fprintf(stderr, "strata serve: --%s %s: %s\n", x->flag, value, why);
        return false;
    }
    if (x->scale > 1)
        snprintf(out, len, "%ld", actor_opt_parse_int(value) * x->scale);
    else
        snprintf(out, len, "%s", value);
    return true;
}

/* What the flags of one `strata serve` say. */
typedef struct {
    char vals[S_N_FLAGS][ACTOR_TOPO_VALUE]; /* what each row sets; "" = not given */
    long workers, experts;
    long drain_s;          /* --drain-timeout */
    bool print_config;     /* --print-config */
    bool given[S_N_FLAGS]; /* the row's flag was on the command line */
    const char *endpoint, *topo_path, *host;
    const char *ctl; /* --ctl, or NULL: the default */
    bool tiers;
} s_serve_t;

/* getopt_long's table of s_flags (one entry per flag: its first row) and its short
 * options. */
static void s_getopt_table(struct option *opts, char *shorts) {
    int n_opts = 0;
    shorts[0] = 0;
    for (int r = 0; r < S_N_FLAGS; r++) {
        if (!s_first_row(r))
            continue;
        opts[n_opts++] = (struct option){
            s_flags[r].flag, s_flags[r].arg ? required_argument : no_argument, 0, 256 + r};
        if (s_flags[r].short_name) {
            size_t k = strlen(shorts);
            shorts[k] = s_flags[r].short_name;
            shorts[k + 1] = s_flags[r].arg ? ':' : 0;
            shorts[k + 2] = 0;
        }
    }
    opts[n_opts] = (struct option){0, 0, 0, 0};
}

/* Flag row r given (value: its argument, or NULL for a switch): serve's own flags
 * into s, the options it maps to into s->vals.  -1 to go on, or the exit status. */
static int s_take(s_serve_t *s, int r, const char *value) {
    const char *flag = s_flags[r].flag;
    if (!strcmp(flag, "help")) {
        s_help(stdout);
        return 0;
    } else if (!strcmp(flag, "workers")) {
        if (!cli_int("serve", "--workers", value, 1, 64, &s->workers))
            return 1;
    } else if (!strcmp(flag, "experts")) {
        if (!cli_int("serve", "--experts", value, 0, 64, &s->experts))
            return 1;
    } else if (!strcmp(flag, "print-config")) {
        s->print_config = true;
    } else if (!strcmp(flag, "drain-timeout")) {
        if (!cli_int("serve", "--drain-timeout", value, 0, 3600, &s->drain_s))
            return 1;
    } else if (!strcmp(flag, "no-tiers")) {
        s->tiers = false;
    } else if (!strcmp(flag, "topology")) {
        s->topo_path = value;
    } else if (!strcmp(flag, "host")) {
        s->host = value;
    } else if (!strcmp(flag, "ctl")) {
        s->ctl = value;
    }
    for (int k = r; k < S_N_FLAGS && !strcmp(s_flags[k].flag, flag); k++)
        s->given[k] = true;
    char prev[ACTOR_TOPO_VALUE] = ""; /* --cors-origin repeated: a list */
    if (!strcmp(flag, "cors-origin"))
        snprintf(prev, sizeof prev, "%s", s->vals[r]);
    for (int k = r; k < S_N_FLAGS && !strcmp(s_flags[k].flag, flag); k++)
        if (s_flags[k].key &&
            !s_flag_value(k, value ? value : s_flags[k].value, s->vals[k], sizeof s->vals[k]))
            return 1;
    if (prev[0]) {
        size_t a = strlen(prev), b = strlen(s->vals[r]);
        if (a + 1 + b >= sizeof s->vals[r]) {
            fprintf(stderr, "strata serve: --cors-origin: too many origins\n");
            return 2;
        }
        memmove(s->vals[r] + a + 1, s->vals[r], b + 1);
        memcpy(s->vals[r], prev, a);
        s->vals[r][a] = ',';
    }
    return -1;
}

/* Parse argv into s.  -1 to go on, or the exit status after a message. */
static int s_parse(s_serve_t *s, int argc, char **argv) {
    struct option opts[S_N_FLAGS + 1];
    char shorts[16];
    s_getopt_table(opts, shorts);
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        int r = -1, rc;
        if (o >= 256)
            r = o - 256;
        for (int k = 0; k < S_N_FLAGS && r < 0; k++)
            if (s_flags[k].short_name && s_flags[k].short_name == o)
                r = k;
        if (r < 0) {
            s_help(stderr);
            return 2;
        }
        if ((rc = s_take(s, r, optarg)) >= 0)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "strata serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return -1;
}

#define VAL(flag) s_val(s->vals, flag)

/* The checks between flags and serve's own defaults.  -1 to go on, or the exit
 * status after a message. */
static int s_settle(s_serve_t *s) {
    if ((s->host || s->ctl || VAL("hang-timeout-ms")) && !s->topo_path) {
        fprintf(stderr, "strata serve: --%s needs --topology (process mode)\n",
                s->host  ? "host"
                : s->ctl ? "ctl"
                         : "hang-timeout-ms");
        return 2;
    }
    if (VAL("endpoint"))
        s->endpoint = VAL("endpoint");
    if (!strstr(s->endpoint, "://")) {
        fprintf(stderr, "strata serve: --endpoint must look like tcp://HOST:PORT\n");
        return 2;
    }
    const char *draft = VAL("draft"), *draft_model = VAL("draft-model");
    if (draft && !strcmp(draft, "model") && !draft_model) {
        fprintf(stderr, "strata serve: --draft model needs --draft-model PATH\n");
        return 2;
    }
    if (draft_model && !draft)
        s_set(s->vals, "draft", "model");
    if (draft_model && access(draft_model, R_OK)) {
        fprintf(stderr, "strata serve: cannot read the draft model '%s'\n", draft_model);
        return 1;
    }
    /* serve's own defaults: T1 in the T0 format, T2 in the T1 format, no T2 files -- where
     * neither a flag nor the environment (STRATA_<ACTOR>_<OPTION>) says */
    char var[160];
    const char *kv_env = actor_topology_env("worker0", "kv_type", var, sizeof var);
    if (!VAL("t1-type") && !actor_topology_env("kvtier", "t1_fmt", var, sizeof var))
        s_set(s->vals, "t1-type",
              VAL("kv-type") ? VAL("kv-type")
              : kv_env       ? kv_env
                             : actor_opts_find(actor_worker_opts, "kv_type")->def);
    if (!VAL("t2-type") && !actor_topology_env("kvtier", "t2_fmt", var, sizeof var))
        s_set(s->vals, "t2-type",
              VAL("t1-type") ? VAL("t1-type")
                             : actor_topology_env("kvtier", "t1_fmt", var, sizeof var));
    if (!VAL("t2-dir") && !actor_topology_env("kvtier", "t2_dir", var, sizeof var))
        s_set(s->vals, "t2-dir", "none");
    const char *model_env = actor_topology_env("worker0", "model", var, sizeof var);
    if (!VAL("model") && !model_env)
        s_set(s->vals, "model", cli_default_model());
    const char *model = VAL("model") ? VAL("model") : model_env;
    if (access(model, R_OK)) {
        fprintf(stderr, "strata serve: cannot read the model '%s'\n", model);
        return 1;
    }
    if (!VAL("threads") && !actor_topology_env("worker0", "threads", var, sizeof var)) {
        long threads = cli_default_threads() / s->workers;
        char num[32];
        snprintf(num, sizeof num, "%ld", threads < 1 ? 1 : threads);
        s_set(s->vals, "threads", num);
    }
    return -1;
}

/* An actor of the kind flag row x maps to ("worker<N>": worker0), or NULL for rows of every
 * actor or the supervisor. */
static const char *s_row_actor(const s_flag_t *x) {
    if (!x->actor || !strcmp(x->actor, "all") || !strcmp(x->actor, "supervisor"))
        return NULL;
    return !strcmp(x->actor, "worker<N>")   ? "worker0"
           : !strcmp(x->actor, "expert<N>") ? "expert0"
                                            : x->actor;
}

/* The environment's value of flag row x's option (actor_topology_env), or NULL: then the
 * defaults line is left to it (a flag, given, still wins: it goes on that line). */
static const char *s_row_env(const s_flag_t *x) {
    const char *a = s_row_actor(x);
    char var[160];
    return a && x->key ? actor_topology_env(a, x->key, var, sizeof var) : NULL;
}

/* Add actor name at inproc://strata-PID-name to topo. */
static actor_topo_entry_t *s_add(actor_topology_t *topo, const char *name) {
    char ep[128];
    snprintf(ep, sizeof ep, "inproc://strata-%d-%s", (int)getpid(), name);
    return actor_topology_add(topo, name, ep);
}

/* The embedded default's topology: every option a flag maps to on the "defaults"
 * line, given or not (the workers' defaults then hold for every actor that shares a
 * key, as the draft worker), and the actors the flags ask for.  false after a message. */
static bool s_thread_topology(s_serve_t *s, actor_topology_t *topo) {
    actor_topo_entry_t *d = actor_topology_add(topo, "defaults", "-");
    for (int r = 0; r < S_N_FLAGS; r++) {
        const s_flag_t *x = &s_flags[r];
        if (!x->key || !strcmp(x->actor, "supervisor") || !strcmp(x->actor, "metrics") ||
            !strcmp(x->actor, "semcache") || /* their own lines */
            (!s->vals[r][0] && (!strcmp(x->actor, "draft") || !strcmp(x->actor, "http"))))
            continue;
        if (s->vals[r][0]) {
            actor_topology_set(d, x->key, s->vals[r]);
        } else if (!x->value && !s_row_env(x)) {
            actor_opt_t o = s_flag_opt(x);
            if (o.def && !actor_topology_opt(topo, "defaults", x->key, NULL))
                actor_topology_set(d, x->key, o.def); /* the option's own default */
        }
    }
    if (VAL("http")) {
        s_add(topo, "http");
    } else if (VAL("api-key-file") || VAL("cors-origin")) {
        fprintf(stderr, "strata serve: --%s needs --http\n",
                VAL("api-key-file") ? "api-key-file" : "cors-origin");
        return false;
    }
    if (VAL("draft"))
        s_add(topo, "draft");
    if (VAL("metrics")) { /* its options on its line: `listen` is not every actor's */
        actor_topo_entry_t *m = s_add(topo, "metrics");
        for (int r = 0; r < S_N_FLAGS; r++)
            if (s_flags[r].key && !strcmp(s_flags[r].actor, "metrics") && s->vals[r][0])
                actor_topology_set(m, s_flags[r].key, s->vals[r]);
    }
    if (VAL("semcache")) {
        actor_topo_entry_t *m = s_add(topo, "semcache");
        for (int r = 0; r < S_N_FLAGS; r++)
            if (s_flags[r].key && !strcmp(s_flags[r].actor, "semcache") && s->vals[r][0])
                actor_topology_set(m, s_flags[r].key, s->vals[r]);
    } else if (VAL("semcache-delta") || VAL("semcache-path") || VAL("semcache-entries")) {
        fprintf(stderr, "strata serve: --semcache-* options need --semcache MODE\n");
        return false;
    }
    if (s->tiers) {
        s_add(topo, "kvtier");
        s_add(topo, "prefetcher");
    } else if (VAL("kv-events-tiers")) {
        fprintf(stderr, "strata serve: --kv-events-tiers needs the KV tiers (not --no-tiers)\n");
        return false;
    }
    s_add(topo, "frontend");
    s_add(topo, "tokenizer");
    s_add(topo, "router");
    for (int i = 0; i < s->workers + s->experts; i++) {
        char name[32];
        snprintf(name, sizeof name, i < s->workers ? "worker%d" : "expert%d",
                 i < s->workers ? i : i - (int)s->workers);
        s_add(topo, name);
    }
    return true;
}

static int s_print_config(const s_serve_t *s, const actor_topology_t *topo);

/* Process mode (bin/cli_serve_process.c): the supervisor of topo's actors (of host, or
 * all), its control endpoint ctl (NULL: cli_ctl_default; "none": no endpoint), drained
 * on a signal for drain_s seconds.  The exit status. */
int cli_serve_process(actor_topology_t *topo, const char *path, const char *host, int drain_s,
                      const char *ctl);

/* Process mode: the topology file, with --hang-timeout-ms on its supervisor line. */
static int s_run_topology(s_serve_t *s, actor_topology_t *topo) {
    char err[512];
    if (actor_topology_load(topo, s->topo_path, actor_info_check_opt, err, sizeof err)) {
        fprintf(stderr, "strata serve: %s\n", err);
        return 1;
    }
    /* the supervisor's flag is the one a topology file does not replace */
    actor_topo_entry_t *sup = (actor_topo_entry_t *)actor_topology_find(topo, "supervisor");
    if (VAL("hang-timeout-ms") && sup)
        actor_topology_set(sup, "hang_timeout_ms", VAL("hang-timeout-ms"));
    if (s->print_config)
        return s_print_config(s, topo);
    return cli_serve_process(topo, s->topo_path, s->host, (int)s->drain_s, s->ctl);
}

static const s_serve_t *s_printing; /* the flags --print-config names */

/* The flag given on the command line that set option key of actor name, or NULL. */
static const char *s_flag_of(const char *name, const char *key) {
    for (int r = 0; s_printing && r < S_N_FLAGS; r++) {
        const s_flag_t *x = &s_flags[r];
        const char *a = s_row_actor(x);
        if (s_printing->given[r] && x->key && !strcmp(x->key, key) &&
            (!x->actor || !strcmp(x->actor, "all") ||
             (a && actor_info_find(name) && actor_info_find(name) == actor_info_find(a))))
            return x->flag;
    }
    return NULL;
}

/* --print-config: the effective configuration, then exit 0. */
static int s_print_config(const s_serve_t *s, const actor_topology_t *topo) {
    s_printing = s;
    cli_config_print(stdout, topo, s->topo_path, s_flag_of);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    static s_serve_t s; /* vals: too large for the stack */
    memset(&s, 0, sizeof s);
    s.workers = 1;
    s.drain_s = 30;
    s.endpoint = ACTOR_FRONTEND_DEFAULT_ENDPOINT;
    s.tiers = true;
    int rc = s_parse(&s, argc, argv);
    if (rc < 0)
        rc = s_settle(&s);
    if (rc >= 0)
        return rc;
    actor_topology_t *topo = calloc(1, sizeof *topo);
    if (!topo)
        return 1;
    zsys_init();
    cli_config_warn_env(stderr);
    if (s.topo_path)
        rc = s_run_topology(&s, topo);
    else if (!s_thread_topology(&s, topo))
        rc = 2;
    else if (s.print_config)
        rc = s_print_config(&s, topo);
    else
        rc = s_thread_mode(topo, (int)s.workers, s.endpoint, (int)s.drain_s);
    free(topo);
    return rc;
}
#undef VAL
