/* actor_topology.c - the topology text format: '#' comments, blank lines, and
 * lines "NAME ENDPOINT [key=value...]" separated by spaces or tabs; every
 * option is checked against the table of the actor its line names (the
 * reserved "security" line: against actor_topology_security_opts). */
#include "actor_topology.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const actor_opt_t actor_topology_security_opts[] = {
    {"keys", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "CURVE key pairs: NAME.key and NAME.key_secret per actor (strata keygen); every "
     "public key in it may connect to an actor",
     .field = 0},
    {"insecure_tcp", ACTOR_OPT_BOOL, "0", 0, 0, NULL,
     "1: plain tcp:// between actors (no CURVE; a trusted network only)", .field = 0},
    {NULL},
};

const actor_opt_t actor_topology_supervisor_opts[] = {
    {"hang_timeout_ms", ACTOR_OPT_INT, ACTOR_TOPO_HANG_TIMEOUT_MS, 0, 3600000, NULL,
     "an actor process that sent no heartbeat for this long after it was ready is killed and "
     "restarted; 0: never",
     .field = 0},
    {NULL},
};

/* Check key=value of reserved line name ("security", "supervisor") against
 * its table.  0 or -EINVAL with "name: key=value: why" in err. */
static int s_check_reserved(const char *name, const char *key, const char *value, char *err,
                            size_t errlen) {
    const actor_opt_t *table =
        !strcmp(name, "security") ? actor_topology_security_opts : actor_topology_supervisor_opts;
    const actor_opt_t *o = actor_opts_find(table, key);
    char why[128], known[128] = "";
    if (!o) {
        for (int i = 0; table[i].key; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     table[i].key);
        snprintf(err, errlen, "%s: %s=%s: unknown option (%s)", name, key, value, known);
        return -EINVAL;
    }
    if (actor_opt_check(o, value, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s=%s: %s", name, key, value, why);
        return -EINVAL;
    }
    return 0;
}

/* With hosts: every actor has one and listens on tcp://; the supervisor
 * endpoint is one each host binds for itself.  0 or -EINVAL with err. */
static int s_check_hosts(actor_topology_t *t, char *err, size_t errlen) {
    for (int i = 0; i < t->n; i++)
        t->hosts |= t->entries[i].host[0] != 0;
    if (!t->hosts)
        return 0;
    for (int i = 0; i < t->n; i++) {
        const actor_topo_entry_t *e = &t->entries[i];
        if (actor_topology_reserved(e->name))
            continue;
        if (!e->host[0]) {
            snprintf(err, errlen,
                     "topology line %d: %s has no host= (once one actor has a host, every "
                     "actor needs one)",
                     e->line, e->name);
            return -EINVAL;
        }
        if (strncmp(e->endpoint, "tcp://", 6)) {
            snprintf(err, errlen,
                     "topology line %d: %s listens on %s: with hosts every actor listens on "
                     "tcp:// (the others connect to it from their hosts)",
                     e->line, e->name, e->endpoint);
            return -EINVAL;
        }
    }
    const actor_topo_entry_t *sup = actor_topology_find(t, "supervisor");
    if (sup && strncmp(sup->endpoint, "ipc://", 6) && strncmp(sup->endpoint, "tcp://127.", 10) &&
        strncmp(sup->endpoint, "tcp://localhost:", 16)) {
        snprintf(err, errlen,
                 "topology line %d: supervisor %s: with hosts each host's supervisor binds it "
                 "for the actors of its host: ipc:// or tcp://127.0.0.1:PORT",
                 sup->line, sup->endpoint);
        return -EINVAL;
    }
    return 0;
}

/* Every tcp:// endpoint between actors has CURVE keys, or tcp is plain on
 * purpose.  0 or -EINVAL with err. */
static int s_check_tcp(const actor_topology_t *t, char *err, size_t errlen) {
    const char *insecure = actor_topology_opt(t, "security", "insecure_tcp", "0");
    if (actor_topology_opt(t, "security", "keys", NULL) || actor_opt_parse_bool(insecure))
        return 0;
    for (int i = 0; i < t->n; i++)
        if (!strncmp(t->entries[i].endpoint, "tcp://", 6)) {
            snprintf(err, errlen,
                     "topology line %d: %s listens on %s: tcp:// between actors needs CURVE "
                     "keys ('security - keys=DIR', made by strata keygen) or "
                     "'security - insecure_tcp=1' (docs/SECURITY.md)",
                     t->entries[i].line, t->entries[i].name, t->entries[i].endpoint);
            return -EINVAL;
        }
    return 0;
}

static bool s_valid_name(const char *s, size_t n) {
    if (n == 0 || n >= ACTOR_TOPO_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

actor_topo_entry_t *actor_topology_add(actor_topology_t *t, const char *name,
                                       const char *endpoint) {
    if (t->n >= ACTOR_TOPO_MAX_ACTORS || actor_topology_find(t, name) ||
        strlen(name) >= ACTOR_TOPO_NAME || strlen(endpoint) >= ACTOR_TOPO_ENDPOINT)
        return NULL;
    actor_topo_entry_t *e = &t->entries[t->n++];
    memset(e, 0, sizeof *e);
    strcpy(e->name, name);
    strcpy(e->endpoint, endpoint);
    return e;
}

int actor_topology_set(actor_topo_entry_t *e, const char *key, const char *value) {
    if (strlen(key) >= ACTOR_TOPO_NAME || strlen(value) >= ACTOR_TOPO_VALUE || !key[0])
        return -EINVAL;
    for (int i = 0; i < e->n_opts; i++)
        if (!strcmp(e->opts[i].key, key)) {
            strcpy(e->opts[i].value, value);
            return 0;
        }
    if (e->n_opts >= ACTOR_TOPO_MAX_OPTS)
        return -ENOSPC;
    strcpy(e->opts[e->n_opts].key, key);
    strcpy(e->opts[e->n_opts].value, value);
    e->n_opts++;
    return 0;
}

/* Next whitespace-separated word of line [*p, end): its start and length. */
static bool s_word(const char **p, const char *end, const char **w, size_t *n) {
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r'))
        (*p)++;
    if (*p >= end)
        return false;
    *w = *p;
    while (*p < end && **p != ' ' && **p != '\t' && **p != '\r')
        (*p)++;
    *n = (size_t)(*p - *w);
    return true;
}

int actor_topology_parse(actor_topology_t *t, const char *text, actor_topology_check_fn check,
                         char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    int line = 0;
    const char *p = text;
    while (*p) {
        line++;
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        const char *hash = memchr(p, '#', (size_t)(eol - p));
        const char *end = hash ? hash : eol;
        const char *w, *q = p;
        size_t n;
        if (s_word(&q, end, &w, &n)) {
            char name[ACTOR_TOPO_NAME], ep[ACTOR_TOPO_ENDPOINT];
            if (!s_valid_name(w, n)) {
                snprintf(err, errlen, "topology line %d: bad actor name '%.*s'", line, (int)n, w);
                return -EINVAL;
            }
            memcpy(name, w, n);
            name[n] = 0;
            if (!s_word(&q, end, &w, &n) || n >= ACTOR_TOPO_ENDPOINT) {
                snprintf(err, errlen, "topology line %d: '%s' needs an endpoint", line, name);
                return -EINVAL;
            }
            memcpy(ep, w, n);
            ep[n] = 0;
            if (strcmp(ep, "-") && !strstr(ep, "://")) {
                snprintf(err, errlen,
                         "topology line %d: endpoint '%s' is not ipc://, tcp:// or inproc://", line,
                         ep);
                return -EINVAL;
            }
            actor_topo_entry_t *e = actor_topology_add(t, name, ep);
            if (!e) {
                snprintf(err, errlen, "topology line %d: '%s' repeats or too many actors", line,
                         name);
                return -EINVAL;
            }
            e->line = line;
            char why[512];
            if (!strcmp(name, "security") && strcmp(ep, "-")) {
                snprintf(err, errlen, "topology line %d: security takes '-' as its endpoint", line);
                return -EINVAL;
            }
            if (!actor_topology_reserved(name) && check &&
                check(name, NULL, NULL, why, sizeof why)) {
                snprintf(err, errlen, "topology line %d: %s", line, why);
                return -EINVAL;
            }
            while (s_word(&q, end, &w, &n)) {
                const char *eq = memchr(w, '=', n);
                char key[ACTOR_TOPO_NAME], val[ACTOR_TOPO_VALUE];
                size_t kn = eq ? (size_t)(eq - w) : 0, vn = eq ? n - kn - 1 : 0;
                if (!eq || kn == 0 || kn >= sizeof key || vn >= sizeof val) {
                    snprintf(err, errlen, "topology line %d: expected key=value, got '%.*s'", line,
                             (int)n, w);
                    return -EINVAL;
                }
                memcpy(key, w, kn);
                key[kn] = 0;
                memcpy(val, eq + 1, vn);
                val[vn] = 0;
                if (!strcmp(key, "host") && !actor_topology_reserved(name)) {
                    if (!s_valid_name(val, strlen(val))) {
                        snprintf(err, errlen,
                                 "topology line %d: %s: host=%s: not a name "
                                 "(letters, digits, _ -)",
                                 line, name, val);
                        return -EINVAL;
                    }
                    strcpy(e->host, val); /* placement, not an option of the actor */
                    continue;
                }
                if (!strcmp(name, "supervisor") || !strcmp(name, "security")
                        ? s_check_reserved(name, key, val, why, sizeof why)
                        : check && check(name, key, val, why, sizeof why)) {
                    snprintf(err, errlen, "topology line %d: %s", line, why);
                    return -EINVAL;
                }
                if (actor_topology_set(e, key, val)) {
                    snprintf(err, errlen, "topology line %d: too many options", line);
                    return -EINVAL;
                }
            }
        }
        p = *eol ? eol + 1 : eol;
    }
    if (!actor_topology_endpoint(t, "frontend") || !actor_topology_endpoint(t, "tokenizer") ||
        !actor_topology_endpoint(t, "router") || actor_topology_workers(t) < 1) {
        snprintf(err, errlen, "the topology needs frontend, tokenizer, router and worker0 lines");
        return -EINVAL;
    }
    if (s_check_hosts(t, err, errlen))
        return -EINVAL;
    return s_check_tcp(t, err, errlen);
}

int actor_topology_load(actor_topology_t *t, const char *path, actor_topology_check_fn check,
                        char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read topology file '%s'", path);
        return -ENOENT;
    }
    char *buf = malloc(1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    buf[n] = 0;
    int rc = actor_topology_parse(t, buf, check, err, errlen);
    free(buf);
    return rc;
}

const actor_topo_entry_t *actor_topology_find(const actor_topology_t *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->entries[i].name, name))
            return &t->entries[i];
    return NULL;
}

const char *actor_topology_endpoint(const actor_topology_t *t, const char *name) {
    const actor_topo_entry_t *e = actor_topology_find(t, name);
    return e && strcmp(e->endpoint, "-") ? e->endpoint : NULL;
}

static const char *s_opt(const actor_topo_entry_t *e, const char *key) {
    if (e)
        for (int i = 0; i < e->n_opts; i++)
            if (!strcmp(e->opts[i].key, key))
                return e->opts[i].value;
    return NULL;
}

/* STRATA_ then prefix (n bytes of it) then _KEY, upper case, into var. */
static void s_env_name(char *var, size_t len, const char *prefix, size_t n, const char *key) {
    snprintf(var, len, "STRATA_%.*s_%s", (int)n, prefix, key);
    for (char *c = var; *c; c++)
        *c = (char)toupper((unsigned char)*c);
}

const char *actor_topology_env(const char *name, const char *key, char *var, size_t varlen) {
    s_env_name(var, varlen, name, strlen(name), key);
    const char *v = getenv(var);
    size_t kind = strlen(name);
    while (kind > 0 && isdigit((unsigned char)name[kind - 1]))
        kind--;
    if (!v && kind > 0 && kind < strlen(name)) {
        s_env_name(var, varlen, name, kind, key);
        v = getenv(var);
    }
    return v;
}

const char *actor_topology_opt_from(const actor_topology_t *t, const char *name, const char *key,
                                    const char *def, actor_opt_from_t *from, char *var,
                                    size_t varlen) {
    const char *v = s_opt(actor_topology_find(t, name), key);
    *from = ACTOR_OPT_FROM_LINE;
    if (!v && (v = s_opt(actor_topology_find(t, "defaults"), key)))
        *from = ACTOR_OPT_FROM_DEFAULTS;
    if (!v && !actor_topology_reserved(name) && (v = actor_topology_env(name, key, var, varlen)))
        *from = ACTOR_OPT_FROM_ENV;
    if (!v)
        *from = ACTOR_OPT_FROM_DEFAULT;
    return v ? v : def;
}

const char *actor_topology_opt(const actor_topology_t *t, const char *name, const char *key,
                               const char *def) {
    actor_opt_from_t from;
    char var[160];
    return actor_topology_opt_from(t, name, key, def, &from, var, sizeof var);
}

int actor_topology_workers(const actor_topology_t *t) {
    int n = 0;
    char name[ACTOR_TOPO_NAME];
    for (;;) {
        snprintf(name, sizeof name, "worker%d", n);
        if (!actor_topology_endpoint(t, name))
            return n;
        n++;
    }
}

bool actor_topology_has_host(const actor_topology_t *t, const char *host) {
    for (int i = 0; i < t->n; i++)
        if (!actor_topology_reserved(t->entries[i].name) && !strcmp(t->entries[i].host, host))
            return true;
    return false;
}

bool actor_topology_reserved(const char *name) {
    return !strcmp(name, "supervisor") || !strcmp(name, "defaults") || !strcmp(name, "security");
}
