/* actor_opts.h - an actor's options declared once, as data: name, type,
 * default, range or allowed values, help.  The topology parser, the typed
 * accessors of the runtime, `strata serve`'s flags, the --help texts and the
 * docs check all read these tables.  Plain data and pure functions (no sockets).
 */
#ifndef ACTOR_OPTS_H
#define ACTOR_OPTS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    ACTOR_OPT_INT,    /* decimal integer in [min, max] */
    ACTOR_OPT_BOOL,   /* 0|1|true|false|yes|no|on|off */
    ACTOR_OPT_ENUM,   /* one of values ("f32|f16|int8") */
    ACTOR_OPT_STRING, /* any non-empty text */
    ACTOR_OPT_PATH,   /* a file or directory name (not checked for existence) */
    ACTOR_OPT_DOUBLE, /* decimal number in [min, max] */
    ACTOR_OPT_FAULTS, /* a fault injection spec (actor_faults.h, docs/FAULTS.md) */
} actor_opt_type_t;

/* One option.  A table is an array ended by an entry whose key is NULL. */
typedef struct {
    const char *key;       /* "threads": the topology's key=value name */
    actor_opt_type_t type; /* how the value is read and checked */
    const char *def;       /* default, as written in a topology; NULL: none (unset) */
    double min, max;       /* INT, DOUBLE: the accepted range */
    const char *values;    /* ENUM: allowed values separated by '|' */
    const char *help;      /* one line for --help and docs/TOPOLOGY.md */
} actor_opt_t;

/* The declaration of key in table, or NULL. */
const actor_opt_t *actor_opts_find(const actor_opt_t *table, const char *key);
/* Number of options in table. */
int actor_opts_count(const actor_opt_t *table);

/* Check value against o.  0, or -EINVAL with why ("not an integer (1..256)",
 * "out of range (1..256)", "expected f32|f16|int8", "'drop=2': probability out
 * of range [0, 1]") in why. */
int actor_opt_check(const actor_opt_t *o, const char *value, char *why, size_t whylen);
/* The accepted values of o as text: "1..256", "f32|f16|int8", "0|1", "PATH", "SPEC". */
const char *actor_opt_range(const actor_opt_t *o, char *buf, size_t len);
/* The name of a type: "int", "bool", "enum", "string", "path", "double", "faults". */
const char *actor_opt_type_name(actor_opt_type_t type);

/* Parsers of values that passed actor_opt_check (anything else: 0 / false). */
long actor_opt_parse_int(const char *value);
bool actor_opt_parse_bool(const char *value);
double actor_opt_parse_double(const char *value);

#endif
