/* cmd_bench_model.c - `strata bench-model`: prompt-processing and generation
 * speed of one sequence (or a batch of them), in tokens/s. */
#include "cli.h"
#include "cli_flags.h"
#include "kv_codec.h"
#include "model_device.h"
#include "serve_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int np;             /* -p: prompt tokens */
    int ng;             /* -n: generated tokens */
    int reps;           /* -r */
    int batch;          /* -b */
    int depth;          /* -d (-1: none) */
    bool bandwidth;     /* --bandwidth */
    const char *device; /* --device: cpu, cpu-seam, cuda:N */
} s_bench_opts_t;

typedef struct {
    cli_model_opts_t m;
    s_bench_opts_t b;
    cli_kv_opts_t kv;
} s_bench_cfg_t;

#define S_B(member) ACTOR_OPT_FIELD(s_bench_opts_t, member)
static const cli_flag_t s_bench_flags[] = {
    {.name = "n-prompt",
     .short_name = 'p',
     .arg = "N",
     .opt =
         {.type = ACTOR_OPT_INT, .min = 1, .max = 8192, .help = "prompt tokens", .field = S_B(np)}},
    {.name = "n-gen",
     .short_name = 'n',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 8192,
             .help = "generated tokens",
             .field = S_B(ng)}},
    {.name = "reps",
     .short_name = 'r',
     .arg = "N",
     .opt =
         {.type = ACTOR_OPT_INT, .min = 1, .max = 1000, .help = "repetitions", .field = S_B(reps)}},
    {.name = "depth",
     .short_name = 'd',
     .arg = "D",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1 << 16,
             .help = "llama-bench's depth: before each run, fill the context with D tokens "
                     "(not timed), then time -p tokens in one batch at positions D.. and, "
                     "separately, -n tokens one at a time at positions D.. (so -d 0 decodes "
                     "from an empty context, like llama-bench -d 0).  Without -d, generation "
                     "runs after the -p prompt tokens.",
             .field = S_B(depth)},
     .def_text = "none"},
    {.name = "batch",
     .short_name = 'b',
     .arg = "B",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 256,
             .help = "decode B sequences at once (continuous batching): each prefills its own "
                     "-p tokens, then -n steps of B tokens; prints the aggregate generation "
                     "tokens/s",
             .field = S_B(batch)}},
    {.name = "bandwidth",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "also measure the read bandwidth (1 GiB summed by 1 and by -t threads, "
                     "best of 3) and print generation as a fraction of its bound: bandwidth / "
                     "weight bytes read per token (every matrix, one embedding row)",
             .field = S_B(bandwidth)}},
    {.name = "device",
     .arg = "DEV",
     .opt = {.type = ACTOR_OPT_STRING,
             .def = "cpu",
             .help = "where the forward pass runs: cpu (threads), cuda:N (the GPU worker's "
                     "forward, weights and KV in device memory; decode as CUDA graphs unless "
                     "STRATA_GRAPHS=0), cpu-seam (that code on the CPU, one thread); a device "
                     "runs the --batch path, B >= 1",
             .field = S_B(device)}},
    {NULL},
};
#undef S_B

static const cli_cmd_t s_bench_cmd = {
    "bench-model",
    "usage: strata bench-model [-m MODEL] [options]\n"
    "\n"
    "Measures prompt processing (one batch of -p tokens) and generation (-n tokens,\n"
    "one at a time after the prompt) and prints the median tokens/s of -r runs.\n"
    "Decoding is greedy with the end-of-generation tokens banned (as generate\n"
    "--ignore-eos), so every run decodes real text for all -n tokens.\n",
    NULL,
    {{cli_model_flags, offsetof(s_bench_cfg_t, m)},
     {cli_threads_flags, offsetof(s_bench_cfg_t, m)},
     {s_bench_flags, offsetof(s_bench_cfg_t, b)},
     {cli_kv_flags, offsetof(s_bench_cfg_t, kv)},
     {NULL}},
};

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Where the batch path's forward runs: the threaded CPU forward, or a device's. */
typedef struct {
    model_ctx_t *ctx;   /* device cpu */
    kern_backend_t *be; /* another device: its backend, */
    model_dev_t *dev;   /* the forward on it, */
    kern_kv_pool_t kv;  /* and the KV pool (in its memory when be) */
} s_fwd_t;

static int s_forward(s_fwd_t *f, const model_batch_t *b, float *logits) {
    return f->dev ? model_dev_forward(f->dev, b, &f->kv, logits)
                  : model_ctx_forward(f->ctx, b, &f->kv, logits);
}

/* The forward for device (NULL: cpu) over B sequences of max_ctx positions in blocks of bs.
 * 0, or 1 with the reason on stderr. */
static int s_fwd_open(s_fwd_t *f, cli_runner_t *r, const char *device, int B, int max_tokens,
                      int max_ctx, int bs, int threads, kern_type_t kv_type) {
    const model_config_t *cfg = model_config(r->model);
    const int nb = (max_ctx + bs - 1) / bs;
    kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    serve_device_t d;
    char err[256] = "";
    memset(f, 0, sizeof *f);
    if (serve_device_parse(device, &d, err, sizeof err))
        goto fail;
    if (d.kind == SERVE_DEVICE_CPU) {
        f->ctx = model_ctx_new(r->model, max_tokens, max_ctx, threads, NULL);
        if (!f->ctx || kern_kv_pool_init(&f->kv, &shape, kv_type, B * nb)) {
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        return 0;
    }
    if (!serve_device_kv_ok(&d, kv_fmt_of_pool_type(kv_type))) {
        snprintf(err, sizeof err, "this device keeps KV as f16");
        goto fail;
    }
    if (!(f->be = serve_device_backend(&d, err, sizeof err)))
        goto fail;
    if (!(f->dev = model_dev_new(r->model, f->be, max_tokens, B, nb, err, sizeof err)))
        goto fail;
    size_t bb = kern_kv_block_bytes(&shape, kv_type);
    f->kv = (kern_kv_pool_t){kv_type, bs, bb, B * nb, NULL};
    if (f->be->alloc(f->be, (void **)&f->kv.base, bb * (size_t)B * nb)) {
        snprintf(err, sizeof err, "no device memory for %d KV blocks", B * nb);
        goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "strata bench-model: --device %s: %s\n", device, err);
    return 1;
}

static void s_fwd_close(s_fwd_t *f) {
    if (f->be) {
        model_dev_graph_stats_t g =
            f->dev ? model_dev_graph_stats(f->dev) : (model_dev_graph_stats_t){0};
        fprintf(stderr, "graphs: %lld recorded, %lld replayed, %lld failed, %lld stale\n",
                (long long)g.recorded, (long long)g.replayed, (long long)g.failed,
                (long long)g.stale);
        f->be->free(f->be, f->kv.base);
    } else {
        kern_kv_pool_free(&f->kv);
    }
    model_dev_destroy(&f->dev);
    kern_backend_destroy(&f->be);
    model_ctx_destroy(&f->ctx);
}

/* bench-model --batch B (or --device): B sequences, each prefilled separately, then decoded
 * together one token each per forward pass.  Returns 0, 1, or 2 when the device could not be
 * set up (said on stderr already). */
static int s_bench_batch(cli_runner_t *r, const char *device, int B, int np, int ng, int reps,
                         int threads, kern_type_t kv_type, double *pp, double *tg) {
    const model_config_t *cfg = model_config(r->model);
    const int bs = 16, nb = (np + ng + bs - 1) / bs;
    int rc = 1;
    s_fwd_t fwd;
    if (s_fwd_open(&fwd, r, device, B, np > B ? np : B, np + ng, bs, threads, kv_type)) {
        s_fwd_close(&fwd);
        return 2; /* said already */
    }
    int32_t *blocks = malloc(sizeof(int32_t) * B * nb);
    model_seq_view_t *sv = malloc(sizeof *sv * B);
    int n = np > B ? np : B;
    int32_t *tok = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
    int32_t *seq = malloc(sizeof(int32_t) * n), *next = malloc(sizeof(int32_t) * B);
    bool *want = malloc(sizeof(bool) * n);
    float *logits = malloc(sizeof(float) * B * cfg->n_vocab);
    int n_eog;
    int32_t *eog = model_tokenizer_eog_ids(r->tok, cfg->n_vocab, &n_eog);
    if (!blocks || !sv || !tok || !pos || !seq || !next || !want || !logits || !eog)
        goto out;
    for (int i = 0; i < B * nb; i++)
        blocks[i] = i;
    for (int s = 0; s < B; s++)
        sv[s] = (model_seq_view_t){blocks + s * nb, nb, NULL, 0, 0};
    for (int k = 0; k < reps; k++) {
        double t0 = cli_now();
        for (int s = 0; s < B; s++) {
            for (int j = 0; j < np; j++) {
                tok[j] = (int32_t)((uint32_t)(j * 2654435761u + s * 97u) % (uint32_t)cfg->n_vocab);
                pos[j] = j;
                seq[j] = s;
                want[j] = j == np - 1;
            }
            model_batch_t b = {np, tok, pos, seq, want, B, sv, NULL};
            if (s_forward(&fwd, &b, logits) < 0)
                goto out;
            model_logits_ban(logits, eog, n_eog);
            next[s] = model_argmax(logits, cfg->n_vocab);
        }
        double t1 = cli_now();
        for (int i = 0; i < ng; i++) {
            for (int s = 0; s < B; s++) {
                tok[s] = next[s];
                pos[s] = np + i;
                seq[s] = s;
                want[s] = true;
            }
            model_batch_t b = {B, tok, pos, seq, want, B, sv, NULL};
            if (s_forward(&fwd, &b, logits) < 0)
                goto out;
            for (int s = 0; s < B; s++) {
                float *row = logits + (size_t)s * cfg->n_vocab;
                model_logits_ban(row, eog, n_eog);
                next[s] = model_argmax(row, cfg->n_vocab);
            }
        }
        double t2 = cli_now();
        pp[k] = (double)B * np / (t1 - t0);
        tg[k] = (double)B * ng / (t2 - t1);
        fprintf(stderr, "run %d/%d: %d x pp%d %.1f tok/s, %d x tg%d %.1f tok/s aggregate\n", k + 1,
                reps, B, np, pp[k], B, ng, tg[k]);
    }
    rc = 0;
out:
    s_fwd_close(&fwd);
    free(blocks);
    free(sv);
    free(tok);
    free(pos);
    free(seq);
    free(next);
    free(want);
    free(logits);
    free(eog);
    return rc;
}

/* One sequence: -r runs of -p prompt tokens in one batch, then -n tokens one at a
 * time (after the prompt, or at positions -d.. with --depth).  0 or 1. */
static int s_bench_one(cli_runner_t *r, const s_bench_cfg_t *c, kern_type_t kv_type, double *pp,
                       double *tg) {
    const model_config_t *cfg = model_config(r->model);
    const s_bench_opts_t *b = &c->b;
    const int d = b->depth > 0 ? b->depth : 0; /* context tokens before each measurement */
    const int np = b->np, ng = b->ng;
    int rc = 1, n_eog;
    int32_t *toks = malloc((size_t)(d + np) * sizeof *toks);
    float *logits = malloc((size_t)cfg->n_vocab * sizeof(float));
    int32_t *eog = model_tokenizer_eog_ids(r->tok, cfg->n_vocab, &n_eog);
    /* with --depth, tg runs at positions d.. (not after the prompt) */
    const int ctx_need = b->depth >= 0 ? d + (np > ng ? np : ng) : np + ng;
    if (!toks || !logits || !eog ||
        !cli_runner_reserve(r, "bench-model", ctx_need, np, c->m.threads, kv_type))
        goto out;
    uint64_t st = 42;
    for (int i = 0; i < d + np; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((st >> 33) % (uint64_t)cfg->n_vocab);
    }
    /* warm-up: touch the weights once (at most the tokens there are: -p 8 -d 0 has 8) */
    cli_runner_eval(r, toks, d + np < 16 ? d + np : 16, 0, false, logits);
    for (int k = 0; k < b->reps; k++) {
        if (d > 0 && cli_runner_eval(r, toks, d, 0, false, logits)) /* the depth, not timed */
            goto out;
        double t0 = cli_now();
        if (cli_runner_eval(r, toks + d, np, d, false, logits))
            goto out;
        double t1 = cli_now();
        model_logits_ban(logits, eog, n_eog);
        int32_t next = model_argmax(logits, cfg->n_vocab);
        /* legacy: after the prompt; --depth: at positions d.., overwriting the
         * prompt's KV (positions < d are untouched and still the depth's) */
        const int g0 = b->depth >= 0 ? d : np;
        for (int i = 0; i < ng; i++) {
            if (cli_runner_eval(r, &next, 1, g0 + i, false, logits))
                goto out;
            model_logits_ban(logits, eog, n_eog);
            next = model_argmax(logits, cfg->n_vocab);
        }
        double t2 = cli_now();
        pp[k] = np / (t1 - t0);
        tg[k] = ng / (t2 - t1);
        fprintf(stderr, "run %d/%d: pp%d %.1f tok/s, tg%d %.1f tok/s\n", k + 1, b->reps, np, pp[k],
                ng, tg[k]);
    }
    rc = 0;
out:
    free(toks);
    free(logits);
    free(eog);
    return rc;
}

/* The medians of pp and tg (sorted here) and what they mean, on stdout. */
static void s_bench_report(const cli_runner_t *r, const s_bench_cfg_t *c, kern_type_t kv_type,
                           double *pp, double *tg) {
    const model_config_t *cfg = model_config(r->model);
    const s_bench_opts_t *b = &c->b;
    const int reps = b->reps, threads = c->m.threads;
    qsort(pp, (size_t)reps, sizeof *pp, s_cmp_double);
    qsort(tg, (size_t)reps, sizeof *tg, s_cmp_double);
    const char *base = strrchr(c->m.model, '/');
    printf("model %s (%s weights, %.1f MiB)  threads %d  kernels %s  kv %s\n",
           base ? base + 1 : c->m.model, kern_type_traits(cfg->ftype)->name,
           model_weight_bytes(r->model) / 1048576.0, threads, kern_ops_best()->name,
           kv_fmt_name(kv_fmt_of_pool_type(kv_type)));
    const char *agg = b->batch > 1 ? " aggregate" : "";
    printf("batch %d  device %s\n", b->batch, b->device ? b->device : "cpu");
    char at[32] = "";
    if (b->depth >= 0)
        snprintf(at, sizeof at, " @ d%d", b->depth);
    printf("pp%d%s: %.1f tok/s%s (median of %d; min %.1f max %.1f)\n", b->np, at, pp[reps / 2], agg,
           reps, pp[0], pp[reps - 1]);
    printf("tg%d%s: %.1f tok/s%s (median of %d; min %.1f max %.1f)\n", b->ng, at, tg[reps / 2], agg,
           reps, tg[0], tg[reps - 1]);
    const double per_tok = (double)model_decode_bytes(r->model);
    if (b->batch == 1)
        printf("decode reads %.1f MiB of weights per token: tg %.1f GB/s\n", per_tok / 1048576.0,
               tg[reps / 2] * per_tok / 1e9);
    if (b->bandwidth) {
        const double bw1 = cli_read_bandwidth(1, (size_t)1 << 30, 3);
        const double bwn = cli_read_bandwidth(threads, (size_t)1 << 30, 3);
        printf("read bandwidth: 1 thread %.1f GB/s, %d threads %.1f GB/s (1 GiB, best of 3)\n", bw1,
               threads, bwn);
        if (b->batch == 1 && bwn > 0)
            printf("decode bound %.1f tok/s: tg at %.0f %% of it\n", bwn * 1e9 / per_tok,
                   100.0 * tg[reps / 2] * per_tok / (bwn * 1e9));
    }
}

int cmd_bench_model(int argc, char **argv) {
    s_bench_cfg_t c;
    memset(&c, 0, sizeof c);
    cli_model_opts_default(&c.m);
    cli_kv_opts_default(&c.kv);
    c.b = (s_bench_opts_t){.np = 512, .ng = 128, .reps = 5, .batch = 1, .depth = -1};
    int next, rc = cli_flags_parse(&s_bench_cmd, argc, argv, &c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (c.b.depth >= 0 && (c.b.batch > 1 || (c.b.device && strcmp(c.b.device, "cpu")))) {
        fprintf(stderr, "strata bench-model: --depth is for one sequence on the CPU, not with "
                        "--batch or --device\n");
        return 2;
    }
    cli_runner_t r;
    if (!cli_runner_open(&r, "bench-model", c.m.model))
        return 1;
    const kern_type_t kv_type = (kern_type_t)kv_fmt_pool_type(c.kv.kv_fmt);
    double *pp = calloc((size_t)c.b.reps, sizeof *pp), *tg = calloc((size_t)c.b.reps, sizeof *tg);
    rc = !pp || !tg;
    const bool on_device = c.b.device && strcmp(c.b.device, "cpu");
    if (!rc && (c.b.batch > 1 || on_device))
        rc = s_bench_batch(&r, c.b.device, c.b.batch, c.b.np, c.b.ng, c.b.reps, c.m.threads,
                           kv_type, pp, tg);
    else if (!rc)
        rc = s_bench_one(&r, &c, kv_type, pp, tg);
    if (rc == 1)
        fprintf(stderr, "strata bench-model: failed\n");
    else if (!rc)
        s_bench_report(&r, &c, kv_type, pp, tg);
    rc = rc ? 1 : 0;
    free(pp);
    free(tg);
    cli_runner_close(&r);
    return rc;
}
