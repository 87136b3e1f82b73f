/* cli_config.c - strata serve's configuration from the environment (docs/OPERATIONS.md):
 * the variables that name no option, warned about; and --print-config, every option of
 * every actor with its value and where it came from. */
#include "cli_config.h"

#include "actor_registry.h"
#include "actor_runtime.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

extern char **environ;

/* The kind of a registry name: "worker<N>" -> "worker". */
static void s_kind(const char *name, char *out, size_t len) {
    snprintf(out, len, "%s", name);
    char *lt = strchr(out, '<');
    if (lt)
        *lt = 0;
}

int cli_config_warn_env(FILE *f) {
    int n = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "STRATA_", 7))
            continue;
        for (int i = 0; actor_info_at(i); i++) {
            const actor_info_t *a = actor_info_at(i);
            char kind[64], pre[80];
            s_kind(a->name, kind, sizeof kind);
            size_t k = 0;
            for (const char *c = kind; *c && k + 1 < sizeof pre; c++)
                pre[k++] = (char)toupper((unsigned char)*c);
            pre[k] = 0;
            const char *rest = *e + 7;
            if (strncmp(rest, pre, k))
                continue;
            rest += k;
            while (isdigit((unsigned char)*rest)) /* STRATA_WORKER3_... */
                rest++;
            if (*rest != '_')
                continue;
            char key[64];
            size_t j = 0;
            for (const char *c = rest + 1; *c && *c != '=' && j + 1 < sizeof key; c++)
                key[j++] = (char)tolower((unsigned char)*c);
            key[j] = 0;
            if (!actor_info_opt(a, key)) {
                fprintf(f,
                        "strata serve: warning: %.*s names no option of %s (strata actor "
                        "--list-options)\n",
                        (int)(strchr(*e, '=') ? strchr(*e, '=') - *e : (long)strlen(*e)), *e, kind);
                n++;
            }
        }
    }
    return n;
}

/* The options of entry name: its actor's table and the runtime's, or a reserved line's. */
static int s_tables(const char *name, const actor_opt_t **t) {
    if (!strcmp(name, "supervisor")) {
        t[0] = actor_topology_supervisor_opts;
        return 1;
    }
    if (!strcmp(name, "security")) {
        t[0] = actor_topology_security_opts;
        return 1;
    }
    const actor_info_t *a = actor_info_find(name);
    if (!a)
        return 0;
    t[0] = a->opts;
    t[1] = actor_runtime_opts;
    return 2;
}

void cli_config_print(FILE *f, const actor_topology_t *t, const char *topo_path,
                      const char *(*flag_of)(const char *name, const char *key)) {
    fprintf(f, "# strata serve --print-config: every option of every actor, its value, and where "
               "it came from\n# (its line, the defaults line, strata serve's flags, the "
               "environment, or the option's default)\n");
    for (int i = 0; i < t->n; i++) {
        const actor_topo_entry_t *e = &t->entries[i];
        const actor_opt_t *tables[2] = {NULL, NULL};
        int nt = strcmp(e->name, "defaults") ? s_tables(e->name, tables) : 0;
        if (!nt)
            continue;
        fprintf(f, "%s %s\n", e->name, e->endpoint);
        for (int k = 0; k < nt; k++)
            for (const actor_opt_t *o = tables[k]; o && o->key; o++) {
                actor_opt_from_t from;
                char var[160], where[200];
                const char *v =
                    actor_topology_opt_from(t, e->name, o->key, o->def, &from, var, sizeof var);
                const char *flag = flag_of ? flag_of(e->name, o->key) : NULL;
                switch (from) {
                case ACTOR_OPT_FROM_LINE:
                    if (topo_path && e->line)
                        snprintf(where, sizeof where, "%s line %d", topo_path, e->line);
                    else
                        snprintf(where, sizeof where, "strata serve");
                    break;
                case ACTOR_OPT_FROM_DEFAULTS:
                    if (flag)
                        snprintf(where, sizeof where, "--%s", flag);
                    else if (topo_path)
                        snprintf(where, sizeof where, "%s, the defaults line", topo_path);
                    else
                        snprintf(where, sizeof where, "strata serve's default");
                    break;
                case ACTOR_OPT_FROM_ENV:
                    snprintf(where, sizeof where, "environment %s", var);
                    break;
                default:
                    snprintf(where, sizeof where, "default");
                }
                fprintf(f, "  %-22s %-34s # %s\n", o->key, v ? v : "-", where);
            }
    }
}
