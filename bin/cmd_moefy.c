/* cmd_moefy.c - `strata moefy IN OUT`: MoEfication of a dense model (model/model_moefy.h).
 * Runs the dense model over calibration text with an FFN tap that records every layer's
 * FFN input and activation, fits the experts and routers, optionally measures the routing
 * on held-out text, and writes the MoE GGUF.
 */
#include "base_log.h"
#include "cli.h"
#include "model_moefy.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CALIB "tests/data/alice29_ch1-6.txt"

static void s_usage(FILE *f) {
    fprintf(f,
            "usage: strata moefy [options] IN.gguf OUT.gguf\n"
            "\n"
            "MoEfication (Zhang et al. 2022): split every FFN of the dense model IN into E\n"
            "equal experts by clustering its neurons on their activation patterns over\n"
            "calibration text, fit a linear router per layer (least squares from the FFN\n"
            "input to each expert's output norm), and write OUT in the Mixtral layout with\n"
            "unit gating (strata.expert_gating = \"unit\"): with K = E, OUT computes what IN\n"
            "computes.  Progress goes to stderr, one line per layer.\n"
            "\n"
            "  -E, --experts E        experts per layer (default 8); must divide d_ff\n"
            "  -k, --top-k K          experts used per token, 1 .. E (default 2)\n"
            "      --calib FILE       calibration text (default " DEFAULT_CALIB ",\n"
            "                         relative to the current folder)\n"
            "      --calib-tokens N   tokens of FILE used, from its start (default 4096); memory\n"
            "                         is about N x n_layer x (2 d_ff + 4 d_model) bytes\n"
            "  -c, --ctx N            tokens per calibration sequence (default 512)\n"
            "      --heldout FILE     after fitting, route the dense model's FFN inputs on the\n"
            "                         first --calib-tokens tokens of FILE and report the same\n"
            "                         statistics there\n"
            "      --stats            print the per-layer statistics (expert use, router\n"
            "                         recall, output error) as a table on stdout\n"
            "      --kmeans-iters N   balanced k-means iterations at most (default 30)\n"
            "      --ridge X          router ridge, relative to mean diag(H^T H) (default 1e-3)\n"
            "      --seed N           k-means++ seed (default fixed)\n"
            "  -t, --threads N        threads (default %d)\n"
            "  -q, --quiet            no progress lines\n"
            "  -h, --help             this help\n"
            "\n"
            "Statistics per layer, over the recorded tokens: use = fraction of the routed\n"
            "(token, slot) pairs per expert, max/mean (1 = balanced, E = one expert) and\n"
            "entropy / ln E (1 = balanced); recall = share of the router's top-K that are\n"
            "among the K experts of largest output norm; err = |FFN out - top-K out| / |FFN\n"
            "out|, mean over tokens, with the router's and with those oracle experts.\n",
            cli_default_threads());
}

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

int cmd_moefy(int argc, char **argv) {
    const char *C = "moefy", *calib = DEFAULT_CALIB, *heldout = NULL;
    long E = 8, K = 2, n_tok = 4096, ctx = 512, iters = 30, threads = cli_default_threads();
    long seed = 0;
    double ridge = 1e-3;
    bool stats = false, quiet = false;
    static const struct option opts[] = {
        {"experts", required_argument, 0, 'E'}, {"top-k", required_argument, 0, 'k'},
        {"calib", required_argument, 0, 1},     {"calib-tokens", required_argument, 0, 2},
        {"ctx", required_argument, 0, 'c'},     {"heldout", required_argument, 0, 3},
        {"stats", no_argument, 0, 4},           {"kmeans-iters", required_argument, 0, 5},
        {"ridge", required_argument, 0, 6},     {"seed", required_argument, 0, 7},
        {"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "E:k:c:t:qh", opts, NULL)) != -1) {
        switch (o) {
        case 'E':
            if (!cli_int(C, "--experts", optarg, 2, MODEL_MOEFY_MAX_EXPERTS, &E))
                return 1;
            break;
        case 'k':
            if (!cli_int(C, "--top-k", optarg, 1, MODEL_MOEFY_MAX_EXPERTS, &K))
                return 1;
            break;
        case 1:
            calib = optarg;
            break;
        case 2:
            if (!cli_int(C, "--calib-tokens", optarg, 1, 1 << 20, &n_tok))
                return 1;
            break;
        case 'c':
            if (!cli_int(C, "--ctx", optarg, 1, 1 << 16, &ctx))
                return 1;
            break;
        case 3:
            heldout = optarg;
            break;
        case 4:
            stats = true;
            break;
        case 5:
            if (!cli_int(C, "--kmeans-iters", optarg, 1, 10000, &iters))
                return 1;
            break;
        case 6:
            if (!cli_float(C, "--ridge", optarg, 1e-9, 1e3, &ridge))
                return 1;
            break;
        case 7:
            if (!cli_int(C, "--seed", optarg, 0, LONG_MAX, &seed))
                return 1;
            break;
        case 't':
            if (!cli_int(C, "--threads", optarg, 1, 256, &threads))
                return 1;
            break;
        case 'q':
            quiet = true;
            break;
        case 'h':
            s_usage(stdout);
            return 0;
        default:
            s_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "strata moefy: need IN.gguf OUT.gguf (see --help)\n");
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1];
    if (!quiet && !getenv("STRATA_LOG") && base_log_level() < BASE_LOG_INFO)
        base_log_set_level(BASE_LOG_INFO);

    /* check the input before loading anything */
    char err[1024] = "";
    model_gguf_t *g = model_gguf_open(in, err, sizeof err);
    if (!g) {
        fprintf(stderr, "strata moefy: %s\n", err);
        return 1;
    }
    int rc = model_moefy_check(g, (int)E, (int)K, err, sizeof err);
    model_gguf_destroy(&g);
    if (rc < 0) {
        fprintf(stderr, "strata moefy: %s\n", err);
        return 1;
    }
    char rin[PATH_MAX], rout[PATH_MAX];
    if (realpath(in, rin) && realpath(out, rout) && !strcmp(rin, rout)) {
        fprintf(stderr, "strata moefy: OUT is IN (%s): write the MoE model elsewhere\n", in);
        return 1;
    }
    FILE *cf = fopen(calib, "rb");
    if (!cf) {
        fprintf(stderr, "strata moefy: cannot read the calibration text '%s'%s\n", calib,
                calib == (const char *)DEFAULT_CALIB ? " (run from the source tree or give "
                                                       "--calib FILE)"
                                                     : "");
        return 1;
    }
    fclose(cf);

    cli_runner_t r;
    if (!cli_runner_open(&r, C, in))
        return 1;
    model_moefy_t *mf = NULL;
    int ret = 1;
    const model_config_t *cfg = model_config(r.model);
    if (!cli_runner_reserve(&r, C, (int)ctx, (int)ctx, (int)threads, KERN_F32))
        goto out;
    model_moefy_opts_t mo = {.n_experts = (int)E,
                             .top_k = (int)K,
                             .max_tokens = (int)n_tok,
                             .kmeans_iters = (int)iters,
                             .ridge = (float)ridge,
                             .seed = (uint64_t)seed};
    mf = model_moefy_new(cfg, &mo, err, sizeof err);
    if (!mf) {
        fprintf(stderr, "strata moefy: %s\n", err);
        goto out;
    }
    model_ctx_set_ffn_tap(r.ctx, model_moefy_tap, mf);
    double t0 = cli_now();
    int n = s_record(&r, calib, (int)n_tok, (int)ctx);
    if (n < 0)
        goto out;
    if (!quiet)
        fprintf(stderr,
                "strata moefy: %s: %d calibration tokens recorded in %.1f s; fitting %d "
                "layers into %ld experts of %d\n",
                calib, n, cli_now() - t0, cfg->n_layer, E, cfg->d_ff / (int)E);
    t0 = cli_now();
    if (model_moefy_fit(mf, model_file(r.model), (int)threads, err, sizeof err) < 0) {
        fprintf(stderr, "strata moefy: %s\n", err);
        goto out;
    }
    if (!quiet)
        fprintf(stderr, "strata moefy: fitted in %.1f s\n", cli_now() - t0);
    if (stats)
        s_print_stats(mf, cfg->n_layer, (int)E, "calibration (routing the dense model)");
    /* write before the held-out pass: the file does not depend on it */
    t0 = cli_now();
    if (model_moefy_write(mf, model_file(r.model), out, err, sizeof err) < 0) {
        fprintf(stderr, "strata moefy: %s\n", err);
        goto out;
    }
    if (!quiet)
        fprintf(stderr, "strata moefy: wrote %s in %.1f s (%ld experts, top-%ld, unit gating)\n",
                out, cli_now() - t0, E, K);
    if (heldout) {
        model_moefy_reset(mf);
        if (s_record(&r, heldout, (int)n_tok, (int)ctx) < 0)
            goto out;
        if (model_moefy_evaluate(mf, model_file(r.model), (int)threads, err, sizeof err) < 0) {
            fprintf(stderr, "strata moefy: %s\n", err);
            goto out;
        }
        s_print_stats(mf, cfg->n_layer, (int)E, "held-out (routing the dense model)");
    }
    ret = 0;
out:
    model_moefy_destroy(&mf);
    cli_runner_close(&r);
    return ret;
}
