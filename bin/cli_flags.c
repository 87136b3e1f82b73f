/* cli_flags.c - parsing and --help of the commands' flag tables (cli_flags.h),
 * and the groups of flags the model commands share. */
#include "cli_flags.h"

#include "actor_registry.h"
#include "cli.h"
#include "kv_codec.h"
#include "model_sampler.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_FLAGS 64

/* ------------------------------------------------------------------ rows */

actor_opt_t cli_flag_decl(const cli_flag_t *f) {
    actor_opt_t o = f->opt;
    o.key = f->name;
    if (f->share) {
        char actor[64];
        const char *dot = strchr(f->share, '.');
        snprintf(actor, sizeof actor, "%.*s", (int)(dot - f->share), f->share);
        const actor_opt_t *s = actor_info_opt(actor_info_find(actor), dot + 1);
        o.type = s->type;
        o.min = s->min;
        o.max = s->max;
        o.values = s->values;
        o.parse = s->parse;
    }
    return o;
}

/* The group rows and the flag of getopt value v (256 + its position). */
typedef struct {
    const cli_flag_t *flag;
    size_t at; /* its group's offset in the config */
} s_row_t;

static int s_rows(const cli_cmd_t *c, s_row_t *rows) {
    int n = 0;
    for (const cli_group_t *g = c->groups; g->flags; g++)
        for (const cli_flag_t *f = g->flags; f->name && n < S_MAX_FLAGS; f++)
            rows[n++] = (s_row_t){f, g->at};
    return n;
}

/* The accepted values of f as "expected ..." text. */
static const char *s_expected(const cli_flag_t *f, char *buf, size_t len) {
    actor_opt_t o = cli_flag_decl(f);
    char range[128];
    actor_opt_range(&o, range, sizeof range);
    switch (o.type) {
    case ACTOR_OPT_INT:
        snprintf(buf, len, "expected an integer in %s", range);
        break;
    case ACTOR_OPT_DOUBLE:
        snprintf(buf, len, "expected a number in %s", range);
        break;
    case ACTOR_OPT_ENUM:
        snprintf(buf, len, "expected %s", range);
        break;
    default:
        snprintf(buf, len, "expected a non-empty value");
        break;
    }
    return buf;
}

/* Check and store value of row r into cfg.  false after one line on stderr. */
static bool s_store(const char *cmd, const s_row_t *r, const char *value, void *cfg) {
    const cli_flag_t *f = r->flag;
    void *group = (char *)cfg + r->at;
    char why[256];
    if (f->set) {
        if (f->set(value, group, why, sizeof why))
            return true;
    } else {
        actor_opt_t o = cli_flag_decl(f);
        /* a text may be empty on a command line (--text "", --system "") */
        if (o.type == ACTOR_OPT_STRING || !actor_opt_check(&o, value, why, sizeof why)) {
            actor_opt_store(&o, value, group);
            return true;
        }
        s_expected(f, why, sizeof why);
    }
    fprintf(stderr, "strata %s: bad value for --%s: '%s' (%s)\n", cmd, f->name, value, why);
    return false;
}

int cli_flags_parse(const cli_cmd_t *c, int argc, char **argv, void *cfg, int *next) {
    s_row_t rows[S_MAX_FLAGS];
    struct option opts[S_MAX_FLAGS + 2];
    char shorts[2 * S_MAX_FLAGS + 2] = "h";
    int n = s_rows(c, rows);
    for (int i = 0; i < n; i++) {
        const cli_flag_t *f = rows[i].flag;
        opts[i] = (struct option){f->name, f->arg ? required_argument : no_argument, 0, 256 + i};
        if (f->short_name) {
            size_t k = strlen(shorts);
            shorts[k] = f->short_name;
            shorts[k + 1] = f->arg ? ':' : 0;
            shorts[k + 2] = 0;
        }
    }
    opts[n] = (struct option){"help", no_argument, 0, 'h'};
    opts[n + 1] = (struct option){0, 0, 0, 0};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        int r = o >= 256 ? o - 256 : -1;
        for (int i = 0; i < n && r < 0 && o != 'h'; i++)
            if (rows[i].flag->short_name == o)
                r = i;
        if (o == 'h') {
            cli_flags_help(c, cfg, stdout);
            return 0;
        }
        if (r < 0) {
            cli_flags_help(c, cfg, stderr);
            return 2;
        }
        const cli_flag_t *f = rows[r].flag;
        if (!s_store(c->name, &rows[r], f->arg ? optarg : (f->value ? f->value : "1"), cfg))
            return 1;
    }
    *next = optind;
    return CLI_PARSED;
}

/* ------------------------------------------------------------------ --help */

void cli_help_line(FILE *f, const char *left, const char *help) {
    char text[1024];
    snprintf(text, sizeof text, "%s", help);
    fprintf(f, "  %-22s", left);
    int col = 24;
    if (strlen(left) > 21)
        fprintf(f, "\n%24s", "");
    for (char *w = strtok(text, " "); w; w = strtok(NULL, " ")) {
        int k = (int)strlen(w);
        if (col > 24 && col + 1 + k > 96) {
            fprintf(f, "\n%24s", "");
            col = 24;
        }
        fprintf(f, "%s%s", col > 24 ? " " : "", w);
        col += (col > 24 ? 1 : 0) + k;
    }
    fprintf(f, "\n");
}

/* The value at f's field of group as text ("" for none or a switch). */
static const char *s_value_text(const cli_flag_t *f, const void *group, char *buf, size_t len) {
    actor_opt_t o = cli_flag_decl(f);
    buf[0] = 0;
    if (f->def_text)
        return f->def_text;
    if (!o.field || !f->arg)
        return buf;
    const char *at = (const char *)group + (o.field - 1);
    switch (o.type) {
    case ACTOR_OPT_INT:
        snprintf(buf, len, "%d", *(const int *)at);
        break;
    case ACTOR_OPT_DOUBLE:
        snprintf(buf, len, "%g", *(const double *)at);
        break;
    case ACTOR_OPT_ENUM: { /* the value whose parse is the stored int */
        int v = *(const int *)at, i = 0;
        for (const char *p = o.values; p && *p; i++) {
            const char *bar = strchr(p, '|');
            int k = bar ? (int)(bar - p) : (int)strlen(p);
            char word[64];
            snprintf(word, sizeof word, "%.*s", k, p);
            if ((o.parse ? o.parse(word) : i) == v)
                snprintf(buf, len, "%s", word);
            p = bar ? bar + 1 : NULL;
        }
        break;
    }
    case ACTOR_OPT_BOOL:
        break;
    default:
        snprintf(buf, len, "%s", *(const char *const *)at ? *(const char *const *)at : "");
        break;
    }
    return buf;
}

void cli_flags_help(const cli_cmd_t *c, const void *cfg, FILE *f) {
    fprintf(f, "%s\n", c->usage);
    s_row_t rows[S_MAX_FLAGS];
    int n = s_rows(c, rows);
    for (int i = 0; i < n; i++) {
        const cli_flag_t *x = rows[i].flag;
        actor_opt_t o = cli_flag_decl(x);
        char left[64], help[1024], range[256], def[512], dv[480];
        snprintf(left, sizeof left, "%c%c%c --%s%s%s", x->short_name ? '-' : ' ',
                 x->short_name ? x->short_name : ' ', x->short_name ? ',' : ' ', x->name,
                 x->arg ? " " : "", x->arg ? x->arg : "");
        snprintf(def, sizeof def, "%s",
                 s_value_text(x, (const char *)cfg + rows[i].at, dv, sizeof dv));
        bool ranged =
            x->arg && !x->set &&
            (o.type == ACTOR_OPT_INT || o.type == ACTOR_OPT_DOUBLE || o.type == ACTOR_OPT_ENUM);
        if (ranged || def[0])
            snprintf(help, sizeof help, "%s (%s%s%s%s)", o.help,
                     ranged ? actor_opt_range(&o, range, sizeof range) : "",
                     ranged && def[0] ? ", " : "", def[0] ? "default " : "", def);
        else
            snprintf(help, sizeof help, "%s", o.help);
        cli_help_line(f, left, help);
    }
    cli_help_line(f, "-h, --help", "this help");
    if (c->epilog)
        fprintf(f, "\n%s\n", c->epilog);
}

/* ------------------------------------------------------------------ shared groups */

const cli_flag_t cli_model_flags[] = {
    {.name = "model",
     .short_name = 'm',
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "GGUF model, or a name in the model cache (as -m gemma)",
             .field = ACTOR_OPT_FIELD(cli_model_opts_t, model)}},
    {NULL},
};

const cli_flag_t cli_threads_flags[] = {
    {.name = "threads",
     .short_name = 't',
     .arg = "N",
     .opt = {.help = "threads of the forward pass; the default is the online CPUs",
             .field = ACTOR_OPT_FIELD(cli_model_opts_t, threads)},
     .share = "worker<N>.threads"},
    {NULL},
};

void cli_model_opts_default(cli_model_opts_t *m) {
    m->model = cli_default_model();
    m->threads = cli_default_threads();
}

const cli_flag_t cli_kv_flags[] = {
    {.name = "kv-type",
     .arg = "TYPE",
     .opt = {.help = "KV cache element type", .field = ACTOR_OPT_FIELD(cli_kv_opts_t, kv_fmt)},
     .share = "worker<N>.kv_type"},
    {NULL},
};

void cli_kv_opts_default(cli_kv_opts_t *k) {
    k->kv_fmt = KV_FMT_F16;
}

/* --seed: a 64-bit decimal (the protocol's seed is a u64). */
static bool s_set_seed(const char *value, void *group, char *why, size_t whylen) {
    cli_sample_opts_t *s = group;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (!*value || *end || errno || value[0] == '-' || value[0] == '+') {
        snprintf(why, whylen, "expected an integer in 0..%llu", (unsigned long long)UINT64_MAX);
        return false;
    }
    s->seed = v;
    s->has_seed = true;
    return true;
}

/* --stop, repeatable: as many and as long as a request's stop strings may be. */
static bool s_set_stop(const char *value, void *group, char *why, size_t whylen) {
    cli_sample_opts_t *s = group;
    size_t n = strlen(value);
    if (s->n_stop == MSG_MAX_STOP || n < 1 || n > MSG_MAX_STOP_BYTES) {
        snprintf(why, whylen, "at most %d --stop strings of 1..%d bytes", MSG_MAX_STOP,
                 MSG_MAX_STOP_BYTES);
        return false;
    }
    s->stop[s->n_stop++] = value;
    return true;
}

#define S_SAMPLE(member) ACTOR_OPT_FIELD(cli_sample_opts_t, member)
const cli_flag_t cli_sample_flags[] = {
    {.name = "greedy",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .help = "argmax decoding (same as --temp 0)",
             .field = S_SAMPLE(temp)},
     .value = "0"},
    {.name = "temp",
     .arg = "X",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 0,
             .max = 100,
             .help = "temperature; 0 = greedy",
             .field = S_SAMPLE(temp)}},
    {.name = "top-k",
     .arg = "N",
     .opt = {.help = "keep the K most likely tokens; 0 = off", .field = S_SAMPLE(top_k)},
     .share = "http.top_k"},
    {.name = "top-p",
     .arg = "X",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 1e-6,
             .max = 1,
             .help = "keep the most likely tokens up to this probability mass; 1 = off",
             .field = S_SAMPLE(top_p)}},
    {.name = "min-p",
     .arg = "X",
     .opt = {.help = "drop tokens less likely than this times the top one; 0 = off",
             .field = S_SAMPLE(min_p)},
     .share = "http.min_p"},
    {.name = "repeat-penalty",
     .arg = "X",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 1e-3,
             .max = 10,
             .help = "divide the logits of recent tokens by X; 1 = off",
             .field = S_SAMPLE(repeat_penalty)}},
    {.name = "repeat-last-n",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = MSG_MAX_REPEAT_LAST_N,
             .help = "tokens the penalty looks back",
             .field = S_SAMPLE(repeat_last_n)}},
    {.name = "seed",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT, .help = "sampling seed (0..2^64-1)"},
     .set = s_set_seed},
    {.name = "stop",
     .arg = "TEXT",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "stop when TEXT appears (repeatable, up to 8 of 1..64 bytes)"},
     .set = s_set_stop},
    {NULL},
};
#undef S_SAMPLE

void cli_sample_opts_default(cli_sample_opts_t *s) {
    model_sampler_params_t d = model_sampler_defaults();
    memset(s, 0, sizeof *s);
    s->temp = d.temperature;
    s->top_k = d.top_k;
    s->top_p = d.top_p;
    s->min_p = d.min_p;
    s->repeat_penalty = d.repeat_penalty;
    s->repeat_last_n = d.repeat_last_n;
    s->seed = d.seed;
}
