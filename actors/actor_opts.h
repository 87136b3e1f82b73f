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

/* One option.  A table is an array ended by an entry whose key is NULL.
 *
 * An actor's options load into its config struct (as nginx's ngx_command_t
 * names the conf field): .field = ACTOR_OPT_FIELD(actor_x_cfg_t, threads)
 * says where the value goes, typed by the option's type:
 *   INT -> int, BOOL -> bool, DOUBLE -> double, ENUM -> int (the enum value),
 *   STRING, PATH, FAULTS -> const char * (borrowed from the topology or the
 *   default: it lives as long as the topology; NULL when unset).
 * The runtime loads every option once, checked, before the actor starts
 * (actor_env_cfg).  An ENUM's value is parse(text) when the row names a
 * parser (the library's own, e.g. kv_fmt_parse: one parser for the table,
 * the CLI and the library), else the index of text in values. */
typedef struct {
    const char *key;       /* "threads": the topology's key=value name */
    actor_opt_type_t type; /* how the value is read and checked */
    const char *def;       /* default, as written in a topology; NULL: none (unset) */
    double min, max;       /* INT, DOUBLE: the accepted range */
    const char *values;    /* ENUM: allowed values separated by '|' */
    const char *help;      /* one line for --help and docs/TOPOLOGY.md */
    size_t field;          /* ACTOR_OPT_FIELD: 1 + the offset of its config field; 0: none */
    int (*parse)(const char *value); /* ENUM: text -> enum value (< 0: refused); NULL: index.
                                        STRING: a check (< 0: refused; values describes it) */
} actor_opt_t;

/* Where option values go in an actor's config struct T (1 + offsetof: 0 means none). */
#define ACTOR_OPT_FIELD(T, member) (offsetof(T, member) + 1)

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

/* ---- an actor declared as data: a row of the registry (actor_registry.h).
 * The type lives here, below the runtime, so that the runtime starts an actor
 * from its row without knowing the table of every actor. */

typedef struct actor_env_t actor_env_t;
typedef int (*actor_fn_t)(actor_env_t *env);

typedef struct {
    const char *name;        /* "frontend", or "worker<N>": "worker" followed by digits */
    actor_fn_t fn;           /* its body */
    const actor_opt_t *opts; /* its options (ends with a NULL key) */
    size_t cfg_size;         /* sizeof its config struct, which opts load (0: none) */
    int rank;                /* start order: lower ranks start first and stop last */
    const char *purpose;     /* one line */
} actor_info_t;

/* Options every actor takes, read by the runtime itself, not by the actor's
 * code (faults: docs/FAULTS.md).  `strata actor --list-options` prints them
 * under the name "all". */
extern const actor_opt_t actor_runtime_opts[];
/* The declaration of key for actor a: its own table, else actor_runtime_opts;
 * NULL when neither declares it. */
const actor_opt_t *actor_info_opt(const actor_info_t *a, const char *key);

/* The enum value of value for an ENUM option o: o->parse(value) when it names
 * a parser, else the index of value in o->values; -1 when value is not one of
 * o->values (or the parser refuses it). */
int actor_opt_enum(const actor_opt_t *o, const char *value);
/* Write value (one that passed actor_opt_check, or NULL: unset) at o's field of
 * cfg, typed as ACTOR_OPT_FIELD says; nothing when o has no field. */
void actor_opt_store(const actor_opt_t *o, const char *value, void *cfg);
/* actor_opt_store for every option of table, value(o, ctx) giving its text. */
void actor_opts_load(const actor_opt_t *table,
                     const char *(*value)(const actor_opt_t *o, const void *ctx), const void *ctx,
                     void *cfg);

/* Parsers of values that passed actor_opt_check (anything else: 0 / false). */
long actor_opt_parse_int(const char *value);
bool actor_opt_parse_bool(const char *value);
double actor_opt_parse_double(const char *value);

#endif
