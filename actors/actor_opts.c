/* actor_opts.c - checking and reading option values against their declaration
 * (actor_opts.h): the one place that knows what a valid int, bool or enum is. */
#include "actor_opts.h"

#include "actor_faults.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const actor_opt_t *actor_opts_find(const actor_opt_t *table, const char *key) {
    for (const actor_opt_t *o = table; o && o->key; o++)
        if (!strcmp(o->key, key))
            return o;
    return NULL;
}

int actor_opts_count(const actor_opt_t *table) {
    int n = 0;
    while (table && table[n].key)
        n++;
    return n;
}

const char *actor_opt_type_name(actor_opt_type_t type) {
    static const char *names[] = {"int", "bool", "enum", "string", "path", "double", "faults"};
    return (unsigned)type < sizeof names / sizeof names[0] ? names[type] : "?";
}

const char *actor_opt_range(const actor_opt_t *o, char *buf, size_t len) {
    switch (o->type) {
    case ACTOR_OPT_INT:
        snprintf(buf, len, "%.0f..%.0f", o->min, o->max);
        break;
    case ACTOR_OPT_DOUBLE:
        snprintf(buf, len, "%g..%g", o->min, o->max);
        break;
    case ACTOR_OPT_BOOL:
        snprintf(buf, len, "0|1");
        break;
    case ACTOR_OPT_ENUM:
        snprintf(buf, len, "%s", o->values);
        break;
    case ACTOR_OPT_PATH:
        snprintf(buf, len, "PATH");
        break;
    case ACTOR_OPT_FAULTS:
        snprintf(buf, len, "SPEC");
        break;
    default:
        snprintf(buf, len, "TEXT");
        break;
    }
    return buf;
}

/* The index of value among the '|'-separated words of list, or -1. */
static int s_in_list(const char *list, const char *value) {
    size_t n = strlen(value);
    int i = 0;
    for (const char *p = list; p && *p; i++) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && !memcmp(p, value, n))
            return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

int actor_opt_enum(const actor_opt_t *o, const char *value) {
    if (!value || s_in_list(o->values, value) < 0)
        return -1;
    return o->parse ? o->parse(value) : s_in_list(o->values, value);
}

static int s_bool(const char *v) {
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i]))
            return 1;
        if (!strcasecmp(v, no[i]))
            return 0;
    }
    return -1;
}

int actor_opt_check(const actor_opt_t *o, const char *value, char *why, size_t whylen) {
    char range[256];
    actor_opt_range(o, range, sizeof range);
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case ACTOR_OPT_INT: {
        long long x = *value ? strtoll(value, &end, 10) : 0;
        if (!*value || *end || errno) {
            snprintf(why, whylen, "not an integer (%s)", range);
            return -EINVAL;
        }
        if ((double)x < o->min || (double)x > o->max) {
            snprintf(why, whylen, "out of range (%s)", range);
            return -EINVAL;
        }
        return 0;
    }
    case ACTOR_OPT_DOUBLE: {
        double x = *value ? strtod(value, &end) : 0;
        if (!*value || *end || errno || !isfinite(x)) {
            snprintf(why, whylen, "not a number (%s)", range);
            return -EINVAL;
        }
        if (x < o->min || x > o->max) {
            snprintf(why, whylen, "out of range (%s)", range);
            return -EINVAL;
        }
        return 0;
    }
    case ACTOR_OPT_BOOL:
        if (s_bool(value) < 0) {
            snprintf(why, whylen, "not a boolean (0|1)");
            return -EINVAL;
        }
        return 0;
    case ACTOR_OPT_ENUM:
        if (actor_opt_enum(o, value) < 0) {
            snprintf(why, whylen, "expected %s", range);
            return -EINVAL;
        }
        return 0;
    case ACTOR_OPT_FAULTS:
        return actor_faults_check(value, why, whylen);
    default:
        if (!*value) {
            snprintf(why, whylen, "empty value");
            return -EINVAL;
        }
        if (o->parse && o->parse(value) < 0) { /* a string with a syntax of its own */
            snprintf(why, whylen, "expected %s", o->values ? o->values : "a valid value");
            return -EINVAL;
        }
        return 0;
    }
}

long actor_opt_parse_int(const char *value) {
    return value ? strtol(value, NULL, 10) : 0;
}

bool actor_opt_parse_bool(const char *value) {
    return value && s_bool(value) == 1;
}

double actor_opt_parse_double(const char *value) {
    return value ? strtod(value, NULL) : 0;
}

const actor_opt_t actor_runtime_opts[] = {
    {"faults", ACTOR_OPT_FAULTS, NULL, 0, 0, NULL,
     "fault injection on the links to other actors: drop, dup, delay, reorder, corrupt, "
     "crash_after, stall (docs/FAULTS.md)",
     .field = 0},
    {NULL},
};

const actor_opt_t *actor_info_opt(const actor_info_t *a, const char *key) {
    const actor_opt_t *o = actor_opts_find(a->opts, key);
    return o ? o : actor_opts_find(actor_runtime_opts, key);
}

void actor_opt_store(const actor_opt_t *o, const char *value, void *cfg) {
    if (!o->field)
        return;
    char *at = (char *)cfg + (o->field - 1);
    switch (o->type) {
    case ACTOR_OPT_INT:
        *(int *)at = (int)actor_opt_parse_int(value);
        break;
    case ACTOR_OPT_BOOL:
        *(bool *)at = actor_opt_parse_bool(value);
        break;
    case ACTOR_OPT_DOUBLE:
        *(double *)at = actor_opt_parse_double(value);
        break;
    case ACTOR_OPT_ENUM:
        *(int *)at = actor_opt_enum(o, value);
        break;
    default:
        *(const char **)at = value;
        break;
    }
}

void actor_opts_load(const actor_opt_t *table,
                     const char *(*value)(const actor_opt_t *o, const void *ctx), const void *ctx,
                     void *cfg) {
    for (const actor_opt_t *o = table; o && o->key; o++)
        actor_opt_store(o, value(o, ctx), cfg);
}
