/* cmd_moefy.c - `strata moefy IN OUT`: MoEfication of a dense model (model/model_moefy.h).
 * Runs the dense model over calibration text with an FFN tap that records every layer's
 * FFN input and activation, fits the experts and routers, optionally measures the routing
 * on held-out text, and writes the MoE GGUF.
 */
#include "base_log.h"
#include "cli.h"
#include "cli_flags.h"
#include "model_moefy.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CALIB "tests/data/alice29_ch1-6.txt"

typedef struct {
    int E;             /* -E */
    int K;             /* -k */
    const char *calib; /* --calib */
    int n_tok;         /* --calib-tokens */
    int ctx;           /* -c */
    const char *heldout;
    bool stats;
    int iters; /* --kmeans-iters */
    double ridge;
    long seed;
    bool quiet;
} s_moefy_opts_t;

typedef struct {
    s_moefy_opts_t o;
    cli_model_opts_t m; /* -t only */
} s_cfg_t;

/* --seed: a long (the k-means++ seed). */
static bool s_set_seed(const char *value, void *group, char *why, size_t whylen) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (!*value || *end || errno || v < 0) {
        snprintf(why, whylen, "expected an integer in 0..%ld", LONG_MAX);
        return false;
    }
    ((s_moefy_opts_t *)group)->seed = v;
    return true;
}

#define S_MO(member) ACTOR_OPT_FIELD(s_moefy_opts_t, member)
static const cli_flag_t s_moefy_flags[] = {
    {.name = "experts",
     .short_name = 'E',
     .arg = "E",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 2,
             .max = MODEL_MOEFY_MAX_EXPERTS,
             .help = "experts per layer; must divide d_ff",
             .field = S_MO(E)}},
    {.name = "top-k",
     .short_name = 'k',
     .arg = "K",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = MODEL_MOEFY_MAX_EXPERTS,
             .help = "experts used per token, at most E",
             .field = S_MO(K)}},
    {.name = "calib",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "calibration text, relative to the current folder",
             .field = S_MO(calib)}},
    {.name = "calib-tokens",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 20,
             .help = "tokens of FILE used, from its start; memory is about N x n_layer x "
                     "(2 d_ff + 4 d_model) bytes",
             .field = S_MO(n_tok)}},
    {.name = "ctx",
     .short_name = 'c',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 16,
             .help = "tokens per calibration sequence",
             .field = S_MO(ctx)}},
    {.name = "heldout",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "after fitting, route the dense model's FFN inputs on the first "
                     "--calib-tokens tokens of FILE and report the same statistics there",
             .field = S_MO(heldout)}},
    {.name = "stats",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "print the per-layer statistics (expert use, router recall, output "
                     "error) as a table on stdout",
             .field = S_MO(stats)}},
    {.name = "kmeans-iters",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 10000,
             .help = "balanced k-means iterations at most",
             .field = S_MO(iters)}},
    {.name = "ridge",
     .arg = "X",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 1e-9,
             .max = 1e3,
             .help = "router ridge, relative to mean diag(H^T H)",
             .field = S_MO(ridge)}},
    {.name = "seed",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT, .help = "k-means++ seed (0..LONG_MAX; default fixed)"},
     .set = s_set_seed},
    {.name = "quiet",
     .short_name = 'q',
     .opt = {.type = ACTOR_OPT_BOOL, .help = "no progress lines", .field = S_MO(quiet)}},
    {NULL},
};
#undef S_MO

static const cli_cmd_t s_cmd = {
    "moefy",
    "usage: strata moefy [options] IN.gguf OUT.gguf\n"
    "\n"
    "MoEfication (Zhang et al. 2022): split every FFN of the dense model IN into E\n"
    "equal experts by clustering its neurons on their activation patterns over\n"
    "calibration text, fit a linear router per layer (least squares from the FFN\n"
    "input to each expert's output norm), and write OUT in the Mixtral layout with\n"
    "unit gating (strata.expert_gating = \"unit\"): with K = E, OUT computes what IN\n"
    "computes.  Progress goes to stderr, one line per layer.\n",
    "Statistics per layer, over the recorded tokens: use = fraction of the routed\n"
    "(token, slot) pairs per expert, max/mean (1 = balanced, E = one expert) and\n"
    "entropy / ln E (1 = balanced); recall = share of the router's top-K that are\n"
    "among the K experts of largest output norm; err = |FFN out - top-K out| / |FFN\n"
    "out|, mean over tokens, with the router's and with those oracle experts.",
    {{s_moefy_flags, offsetof(s_cfg_t, o)}, {cli_threads_flags, offsetof(s_cfg_t, m)}, {NULL}},
};

/* Run the first n_max tokens of text file path through r in sequences of ctx tokens
 * (the tap records them).  Returns the tokens run, or -1 after a message. */
static int s_record(cli_runner_t *r, const char *path, int n_max, int ctx) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "strata moefy: cannot read '%s'\n", path);
        return -1;
    }
    int need = model_tokenizer_encode(r->tok, text, len, false, false, NULL, 0);
    int32_t *ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
    int n =
        ids && need > 0 ? model_tokenizer_encode(r->tok, text, len, false, false, ids, need) : 0;
    free(text);
    if (n < 1) {
        fprintf(stderr, "strata moefy: '%s' has no tokens\n", path);
        free(ids);
        return -1;
    }
    if (n > n_max)
        n = n_max;
    int bos = model_tokenizer_add_bos(r->tok) ? model_tokenizer_bos(r->tok) : -1;
    int done = 0;
    for (int i = 0; i < n; i += ctx) {
        int m = n - i < ctx ? n - i : ctx;
        if (bos >= 0)
            ids[i] = bos; /* each sequence starts as the model expects */
        int rc = cli_runner_eval(r, ids + i, m, 0, false, r->logits);
        if (rc < 0) {
            fprintf(stderr, "strata moefy: forward pass failed on '%s' (%s)\n", path,
                    strerror(-rc));
            free(ids);
            return -1;
        }
        done += m;
    }
    free(ids);
    return done;
}

static void s_print_stats(const model_moefy_t *mf, int n_layer, int E, const char *what) {
    const model_moefy_stats_t *s0 = model_moefy_stats(mf, 0);
    printf("# %s: %d tokens per layer\n", what, s0 ? s0->n_tokens : 0);
    printf("%5s %7s %8s %8s %8s %8s  use per expert\n", "layer", "recall", "err_rt", "err_orc",
           "max/mean", "entropy");
    double sum[5] = {0};
    float worst = 0;
    for (int l = 0; l < n_layer; l++) {
        const model_moefy_stats_t *s = model_moefy_stats(mf, l);
        printf("%5d %7.3f %8.3f %8.3f %8.2f %8.3f ", l, s->recall, s->err_router, s->err_oracle,
               s->use_max_mean, s->use_entropy);
        for (int e = 0; e < E; e++)
            printf(" %.3f", s->use[e]);
        printf("\n");
        sum[0] += s->recall;
        sum[1] += s->err_router;
        sum[2] += s->err_oracle;
        sum[3] += s->use_max_mean;
        sum[4] += s->use_entropy;
        if (s->use_max_mean > worst)
            worst = s->use_max_mean;
    }
    printf(" mean %7.3f %8.3f %8.3f %8.2f %8.3f   (max/mean worst layer %.2f)\n", sum[0] / n_layer,
           sum[1] / n_layer, sum[2] / n_layer, sum[3] / n_layer, sum[4] / n_layer, worst);
}

/* IN is a dense model moefy can split into E experts, OUT is not IN, the calibration
 * text is there.  false after a message. */
static bool s_check_input(const s_moefy_opts_t *o, const char *in, const char *out) {
    char err[1024] = "";
    model_gguf_t *g = model_gguf_open(in, err, sizeof err);
    if (!g) {
        fprintf(stderr, "strata moefy: %s\n", err);
        return false;
    }
    int rc = model_moefy_check(g, o->E, o->K, err, sizeof err);
    model_gguf_destroy(&g);
    if (rc < 0) {
        fprintf(stderr, "strata moefy: %s\n", err);
        return false;
    }
    char rin[PATH_MAX], rout[PATH_MAX];
    if (realpath(in, rin) && realpath(out, rout) && !strcmp(rin, rout)) {
        fprintf(stderr, "strata moefy: OUT is IN (%s): write the MoE model elsewhere\n", in);
        return false;
    }
    FILE *cf = fopen(o->calib, "rb");
    if (!cf) {
        fprintf(stderr, "strata moefy: cannot read the calibration text '%s'%s\n", o->calib,
                !strcmp(o->calib, DEFAULT_CALIB) ? " (run from the source tree or give "
                                                   "--calib FILE)"
                                                 : "");
        return false;
    }
    fclose(cf);
    return true;
}

/* Record the calibration text, fit, write OUT, then the held-out statistics.  0 or 1. */
static int s_moefy(cli_runner_t *r, model_moefy_t *mf, const s_cfg_t *c, const char *out) {
    const s_moefy_opts_t *o = &c->o;
    const model_config_t *cfg = model_config(r->model);
    char err[1024] = "";
    double t0 = cli_now();
    int n = s_record(r, o->calib, o->n_tok, o->ctx);
    if (n < 0)
        return 1;
    if (!o->quiet)
        fprintf(stderr,
                "strata moefy: %s: %d calibration tokens recorded in %.1f s; fitting %d "
                "layers into %d experts of %d\n",
                o->calib, n, cli_now() - t0, cfg->n_layer, o->E, cfg->d_ff / o->E);
    t0 = cli_now();
    if (model_moefy_fit(mf, model_file(r->model), c->m.threads, err, sizeof err) < 0)
        goto fail;
    if (!o->quiet)
        fprintf(stderr, "strata moefy: fitted in %.1f s\n", cli_now() - t0);
    if (o->stats)
        s_print_stats(mf, cfg->n_layer, o->E, "calibration (routing the dense model)");
    /* write before the held-out pass: the file does not depend on it */
    t0 = cli_now();
    if (model_moefy_write(mf, model_file(r->model), out, err, sizeof err) < 0)
        goto fail;
    if (!o->quiet)
        fprintf(stderr, "strata moefy: wrote %s in %.1f s (%d experts, top-%d, unit gating)\n", out,
                cli_now() - t0, o->E, o->K);
    if (!o->heldout)
        return 0;
    model_moefy_reset(mf);
    if (s_record(r, o->heldout, o->n_tok, o->ctx) < 0)
        return 1;
    if (model_moefy_evaluate(mf, model_file(r->model), c->m.threads, err, sizeof err) < 0)
        goto fail;
    s_print_stats(mf, cfg->n_layer, o->E, "held-out (routing the dense model)");
    return 0;
fail:
    fprintf(stderr, "strata moefy: %s\n", err);
    return 1;
}

int cmd_moefy(int argc, char **argv) {
    s_cfg_t c = {.o = {.E = 8,
                       .K = 2,
                       .calib = DEFAULT_CALIB,
                       .n_tok = 4096,
                       .ctx = 512,
                       .iters = 30,
                       .ridge = 1e-3}};
    cli_model_opts_default(&c.m);
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, &c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (argc - next != 2) {
        fprintf(stderr, "strata moefy: need IN.gguf OUT.gguf (see --help)\n");
        return 2;
    }
    const char *in = argv[next], *out = argv[next + 1];
    if (!c.o.quiet && !getenv("STRATA_LOG") && base_log_level() < BASE_LOG_INFO)
        base_log_set_level(BASE_LOG_INFO);
    if (!s_check_input(&c.o, in, out)) /* before loading anything */
        return 1;
    cli_runner_t r;
    if (!cli_runner_open(&r, "moefy", in))
        return 1;
    model_moefy_t *mf = NULL;
    char err[1024] = "";
    rc = 1;
    if (cli_runner_reserve(&r, "moefy", c.o.ctx, c.o.ctx, c.m.threads, KERN_F32)) {
        model_moefy_opts_t mo = {.n_experts = c.o.E,
                                 .top_k = c.o.K,
                                 .max_tokens = c.o.n_tok,
                                 .kmeans_iters = c.o.iters,
                                 .ridge = (float)c.o.ridge,
                                 .seed = (uint64_t)c.o.seed};
        if (!(mf = model_moefy_new(model_config(r.model), &mo, err, sizeof err))) {
            fprintf(stderr, "strata moefy: %s\n", err);
        } else {
            model_ctx_set_ffn_tap(r.ctx, model_moefy_tap, mf);
            rc = s_moefy(&r, mf, &c, out);
        }
    }
    model_moefy_destroy(&mf);
    cli_runner_close(&r);
    return rc;
}
