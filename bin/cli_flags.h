/* cli_flags.h - the flags of the strata commands declared once, as data: a row
 * per flag (name, short name, value name, type, range or values, help, field),
 * with the checks and stores of the actors' option tables (actors/actor_opts.h),
 * so that a flag and the actor option it mirrors cannot accept different values.
 * getopt_long's table, the parse and --help are all made from the rows.
 *
 * A command's flags are groups of rows, each loading one struct inside the
 * command's config: the groups every model command shares (cli_model_flags,
 * cli_kv_flags, cli_sample_flags) and the command's own.  Defaults are the
 * config's values before the parse (the library's own defaults, e.g.
 * model_sampler_defaults), and --help prints them from there. */
#ifndef CLI_FLAGS_H
#define CLI_FLAGS_H

#include "actor_opts.h"
#include "msg_types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One flag.  A group is an array ended by a row whose name is NULL. */
typedef struct cli_flag_t {
    const char *name; /* "top-k": the long flag, without "--" */
    char short_name;  /* 'k', or 0 */
    const char *arg;  /* its value's name in --help ("N", "X", "PATH"); NULL: a switch */
    /* The value: .type, .min/.max or .values/.parse, .help and .field
     * (ACTOR_OPT_FIELD of the group's struct), checked by actor_opt_check and
     * stored by actor_opt_store (INT -> int, DOUBLE -> double, BOOL -> bool,
     * ENUM -> int, PATH/STRING -> const char *); .key and .def are not used. */
    actor_opt_t opt;
    /* "http.top_k": the type, range, values and parser are that actor option's
     * (actor_registry.h names), so the flag and the option are one definition;
     * NULL: opt's own. */
    const char *share;
    const char *value;    /* a switch: the text it stores ("1"; --greedy: "0" in temp) */
    const char *def_text; /* --help's default when the value is not it ("all"); NULL: the value */
    /* A value that is more than one store (--stop repeats; --seed is 64-bit): check
     * value and store it in the group's struct; false with the accepted values in
     * why.  NULL: opt's check and store. */
    bool (*set)(const char *value, void *group, char *why, size_t whylen);
} cli_flag_t;

/* A group of a command: its rows and where their struct sits in the config. */
typedef struct {
    const cli_flag_t *flags; /* ends with a NULL name; NULL ends the command's groups */
    size_t at;               /* offsetof the group's struct in the command's config */
} cli_group_t;

#define CLI_MAX_GROUPS 6

/* A command's flags and the text of its --help. */
typedef struct {
    const char *name;   /* "generate" */
    const char *usage;  /* the usage lines and the paragraph above the flags */
    const char *epilog; /* text after the flags, or NULL */
    cli_group_t groups[CLI_MAX_GROUPS + 1];
} cli_cmd_t;

#define CLI_PARSED (-1) /* cli_flags_parse: go on with the command */

/* Parse argv's flags into cfg (already holding the defaults).  CLI_PARSED with the
 * index of the first operand in *next; else the exit status: 0 after --help
 * (printed to stdout), 1 after "strata CMD: bad value for --FLAG: 'V' (expected
 * ...)", 2 after an unknown flag (help on stderr). */
int cli_flags_parse(const cli_cmd_t *c, int argc, char **argv, void *cfg, int *next);
/* Print c's --help: usage, one line per flag (help, range, default from cfg), epilog. */
void cli_flags_help(const cli_cmd_t *c, const void *cfg, FILE *f);
/* One "  -x, --flag ARG    help" line of --help, help wrapped at 96 columns under
 * column 24 (strata serve's flags use it too). */
void cli_help_line(FILE *f, const char *left, const char *help);
/* The declaration f's value is checked against: f->opt with the shared option's
 * type, range, values and parser (f->share). */
actor_opt_t cli_flag_decl(const cli_flag_t *f);

/* -m, -t: the model a command loads and the threads of its forward pass. */
typedef struct {
    const char *model; /* GGUF path or model-cache name (default cli_default_model()) */
    int threads;       /* 1..256 (the worker's threads option; default: the online CPUs) */
} cli_model_opts_t;
extern const cli_flag_t cli_model_flags[];   /* -m */
extern const cli_flag_t cli_threads_flags[]; /* -t (into the same struct) */
void cli_model_opts_default(cli_model_opts_t *m);

/* --kv-type: the KV cache format (the worker's kv_type option: f32|f16|int8). */
typedef struct {
    int kv_fmt; /* kv_fmt_t (default f16) */
} cli_kv_opts_t;
extern const cli_flag_t cli_kv_flags[];
void cli_kv_opts_default(cli_kv_opts_t *k);

/* The sampling flags of generate and client, in the protocol's ranges
 * (msgs/msg_types.h, msgs/msg_codec.h: what a generate request accepts). */
typedef struct {
    double temp;                    /* --temp, --greedy (0) */
    int top_k;                      /* 0..MSG_MAX_TOP_K, the http actor's top_k range */
    double top_p;                   /* (0, 1] */
    double min_p;                   /* 0..1, the http actor's min_p range */
    double repeat_penalty;          /* (0, 10] */
    int repeat_last_n;              /* 0..MSG_MAX_REPEAT_LAST_N */
    uint64_t seed;                  /* --seed */
    bool has_seed;                  /* --seed given */
    const char *stop[MSG_MAX_STOP]; /* --stop, each 1..MSG_MAX_STOP_BYTES bytes */
    int n_stop;
} cli_sample_opts_t;
extern const cli_flag_t cli_sample_flags[];
/* The sampler's defaults (model_sampler_defaults: the protocol's too). */
void cli_sample_opts_default(cli_sample_opts_t *s);

#endif
