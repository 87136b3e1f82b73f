/* cmd_eval.c - `strata logits`, `strata perplexity` and `strata bench-model`:
 * whole-model evaluation without sampling. */
#include "cli.h"
#include "kv_codec.h"
#include "model_klbase.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --kv-type: the T0 pool format, f32, f16 or int8.  false with a message. */
static bool s_kv_type(const char *cmd, const char *val, kern_type_t *out) {
    int fmt = kv_fmt_parse(val);
    int t = kv_fmt_pool_type(fmt);
    if (t < 0) {
        fprintf(stderr, "strata %s: --kv-type must be f32, f16 or int8 (not '%s')\n", cmd, val);
        return false;
    }
    *out = (kern_type_t)t;
    return true;
}

/* ------------------------------------------------------------------ logits */

static void s_logits_help(FILE *f) {
    fprintf(f,
            "usage: strata logits [-m MODEL] (--ids LIST | -p PROMPT) -o OUT [options]\n"
            "\n"
            "Runs the prompt and writes the logits of every position to OUT as\n"
            "little-endian int32 n_tokens, int32 n_vocab, then n_tokens x n_vocab float32.\n"
            "\n"
            "  -m, --model PATH    GGUF model (default: %s)\n"
            "      --ids LIST      token ids (\"1 2 3\")\n"
            "  -p, --prompt TEXT   text, tokenized without BOS unless the model asks for it\n"
            "  -o, --out PATH      output file\n"
            "  -t, --threads N     threads (default %d)\n"
            "      --ubatch N      tokens per forward pass (default 512)\n"
            "      --kv-type TYPE  KV cache: f16 (default), f32 or int8\n"
            "  -h, --help\n",
            cli_default_model(), cli_default_threads());
}

int cmd_logits(int argc, char **argv) {
    const char *C = "logits", *model = NULL, *ids_s = NULL, *prompt = NULL, *out = NULL;
    long threads = cli_default_threads(), ubatch = 512;
    kern_type_t kv_type = KERN_F16;
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"ids", required_argument, 0, 1},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"out", required_argument, 0, 'o'},
                                         {"threads", required_argument, 0, 't'},
                                         {"ubatch", required_argument, 0, 2},
                                         {"kv-type", required_argument, 0, 3},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "m:p:o:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            model = optarg;
            break;
        case 1:
            ids_s = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 't':
            if (!cli_int(C, "--threads", optarg, 1, 256, &threads))
                return 1;
            break;
        case 2:
            if (!cli_int(C, "--ubatch", optarg, 1, 8192, &ubatch))
                return 1;
            break;
        case 3:
            if (!s_kv_type(C, optarg, &kv_type))
                return 1;
            break;
        case 'h':
            s_logits_help(stdout);
            return 0;
        default:
            s_logits_help(stderr);
            return 2;
        }
    }
    if (!!ids_s + !!prompt != 1 || !out) {
        fprintf(stderr, "strata logits: give --ids or -p, and -o (see --help)\n");
        return 2;
    }
    cli_runner_t r;
    if (!cli_runner_open(&r, C, model ? model : cli_default_model()))
        return 1;
    int rc = 1, n = 0;
    int32_t *ids = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    if (ids_s) {
        ids = cli_parse_ids(ids_s, &n);
    } else {
        bool bos = model_tokenizer_add_bos(r.tok);
        int need = model_tokenizer_encode(r.tok, prompt, strlen(prompt), bos, false, NULL, 0);
        ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
        if (ids && need > 0)
            n = model_tokenizer_encode(r.tok, prompt, strlen(prompt), bos, false, ids, need);
    }
    const model_config_t *cfg = model_config(r.model);
    if (!ids || n < 1) {
        fprintf(stderr, "strata logits: empty or malformed token list\n");
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] >= cfg->n_vocab) {
            fprintf(stderr, "strata logits: token id %d out of range (vocabulary %d)\n", ids[i],
                    cfg->n_vocab);
            goto out;
        }
    if (!cli_runner_reserve(&r, C, n, (int)ubatch, (int)threads, kv_type))
        goto out;
    logits = malloc((size_t)n * cfg->n_vocab * sizeof(float));
    if (!logits || cli_runner_eval(&r, ids, n, 0, true, logits)) {
        fprintf(stderr, "strata logits: evaluation failed\n");
        goto out;
    }
    f = fopen(out, "wb");
    int32_t hdr[2] = {n, cfg->n_vocab};
    if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1 ||
        fwrite(logits, sizeof(float) * cfg->n_vocab, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "strata logits: cannot write '%s'\n", out);
        goto out;
    }
    rc = 0;
out:
    if (f && fclose(f) && rc == 0) {
        fprintf(stderr, "strata logits: cannot write '%s'\n", out);
        rc = 1;
    }
    free(ids);
    free(logits);
    cli_runner_close(&r);
    return rc;
}

/* ------------------------------------------------------------------ perplexity */

static void s_ppl_help(FILE *f) {
    fprintf(f,
            "usage: strata perplexity [-m MODEL] (-f FILE | --kl-base FILE) [options]\n"
            "\n"
            "Splits the tokenized file into chunks of --ctx tokens and scores the second\n"
            "half of each chunk given the first (as llama.cpp's perplexity does).\n"
            "\n"
            "  -m, --model PATH         GGUF model (default: %s)\n"
            "  -f, --file PATH          text file\n"
            "  -c, --ctx N              tokens per chunk (default 512)\n"
            "      --chunks N           score at most N chunks (default: all)\n"
            "  -t, --threads N          threads (default %d)\n"
            "      --kv-type TYPE       KV cache (T0) format: f16 (default), f32 or int8\n"
            "      --kv-tier-type TYPE  simulate KV blocks restored from a lower tier stored\n"
            "                           as f16, int8 or int4: each block of positions, once\n"
            "                           complete, is converted to TYPE and back in place, so\n"
            "                           later positions attend to the round-tripped values\n"
            "                           (a chunk's last partial block stays exact; chunks\n"
            "                           then run one block per forward pass)\n"
            "      --kl-ref MODEL       also run MODEL (e.g. an F32 copy made with strata\n"
            "                           quantize; F32 KV) on the same chunks and print the\n"
            "                           KL divergence KL(ref || this) of the next-token\n"
            "                           distributions over the scored positions (mean,\n"
            "                           median, p99, max) and how often the top token agrees,\n"
            "                           as llama-perplexity --kl-divergence does\n"
            "      --kl-base FILE       compare with the log-probabilities that\n"
            "                           llama-perplexity --kl-divergence-base FILE saved\n"
            "                           (llama.cpp's own forward pass): evaluate the file's\n"
            "                           tokens and chunking (its n_ctx; -c must match or be\n"
            "                           left out; -f, if given, is only checked against\n"
            "                           the file's tokens) and print the same KL and\n"
            "                           top-token lines, with KL(base || this) summed over\n"
            "                           the tokens whose base log-probability is above -16,\n"
            "                           as llama.cpp sums it\n"
            "  -h, --help\n"
            "\n"
            "Prints the perplexity and the KV bytes per token (K and V, all layers) of\n"
            "the T0 format and of the tier format.\n",
            cli_default_model(), cli_default_threads());
}

/* Run one chunk of n tokens from position 0 and write the logits of
 * positions lo .. hi-1 (the scored ones) into logits (hi - lo, n_vocab); the
 * other positions only fill the KV.  tier < 0: forward passes of up to
 * r->ubatch tokens.  tier >= 0: one block per forward pass, each full block
 * then converted T0 -> tier -> T0 in place (tmp: one tier block), so later
 * positions attend to the round-tripped values.  0 or a negative errno. */
static int s_ppl_chunk(cli_runner_t *r, const int32_t *chunk, int n, int lo, int hi, int tier,
                       void *tmp, float *logits) {
    const model_config_t *cfg = model_config(r->model);
    const int bs = r->kv.block_size, t0 = kv_fmt_of_pool_type(r->kv.type);
    const kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    const int step = tier < 0 ? r->ubatch : bs;
    model_seq_view_t sv = {r->blocks, r->kv.n_blocks};
    float *dst = logits;
    for (int i = 0; i < n; i += step) {
        int m = n - i < step ? n - i : step;
        for (int j = 0; j < m; j++) {
            r->pos[j] = i + j;
            r->want[j] = i + j >= lo && i + j < hi;
        }
        model_batch_t b = {m, chunk + i, r->pos, r->seq, r->want, 1, &sv};
        int got = model_ctx_forward(r->ctx, &b, &r->kv, dst);
        if (got < 0)
            return got;
        dst += (size_t)got * cfg->n_vocab;
        if (tier < 0 || m < bs) /* a partial last block stays in T0 as written */
            continue;
        uint8_t *blk = r->kv.base + (size_t)r->blocks[i / bs] * r->kv.block_bytes;
        int rc = kv_codec_convert(&shape, t0, blk, tier, tmp, bs);
        if (rc || (rc = kv_codec_convert(&shape, tier, tmp, t0, blk, bs)))
            return rc;
    }
    return 0;
}

static int s_cmp_double(const void *a, const void *b);

/* KL(p || q) of the softmaxes of the logit rows p (reference) and q, in nats,
 * with each row's log-sum-exp and argmax. */
static void s_ppl_kl(const float *p, const float *q, int nv, double *kl, double *lse_p,
                     double *lse_q, int *top_p, int *top_q) {
    int ap = 0, aq = 0;
    for (int v = 1; v < nv; v++) {
        ap = p[v] > p[ap] ? v : ap;
        aq = q[v] > q[aq] ? v : aq;
    }
    double sp = 0, sq = 0;
    for (int v = 0; v < nv; v++) {
        sp += exp((double)p[v] - p[ap]);
        sq += exp((double)q[v] - q[aq]);
    }
    double lp = p[ap] + log(sp), lq = q[aq] + log(sq), k = 0;
    for (int v = 0; v < nv; v++) {
        double lpv = p[v] - lp; /* log p_v */
        k += exp(lpv) * (lpv - (q[v] - lq));
    }
    *kl = k > 0 ? k : 0;
    *lse_p = lp;
    *lse_q = lq;
    *top_p = ap;
    *top_q = aq;
}

/* KL(base || q) in nats of a --kl-base row of log-probabilities lp (the file's
 * dequantized values) and the logit row q, summed over the tokens with log p > -16 as
 * llama-perplexity sums it (the file clips logits 16 below the maximum); with the
 * first argmax of each row. */
static void s_klbase_kl(const float *lp, const float *q, int nv, double *kl, int *top_p,
                        int *top_q) {
    int ap = 0, aq = 0;
    for (int v = 1; v < nv; v++) {
        ap = lp[v] > lp[ap] ? v : ap;
        aq = q[v] > q[aq] ? v : aq;
    }
    double sq = 0;
    for (int v = 0; v < nv; v++)
        sq += exp((double)q[v] - q[aq]);
    double lq = q[aq] + log(sq), k = 0;
    for (int v = 0; v < nv; v++)
        if (lp[v] > -16.f)
            k += exp((double)lp[v]) * ((double)lp[v] - (q[v] - lq));
    *kl = k > 0 ? k : 0;
    *top_p = ap;
    *top_q = aq;
}

/* --kl-base: the file's tokens replace the tokenized text (-f, when given, is
 * compared with them: a note, not an error).  Returns the ids (n_chunks * n_ctx,
 * malloc'd) and sets *n, or NULL after a message. */
static int32_t *s_klbase_ids(const model_klbase_t *kb, const model_tokenizer_t *tok,
                             const char *file, const char *text, size_t len, int *n) {
    const int nt = model_klbase_n_ctx(kb) * model_klbase_n_chunks(kb);
    int32_t *ids = malloc((size_t)nt * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "strata perplexity: out of memory\n");
        return NULL;
    }
    memcpy(ids, model_klbase_tokens(kb), (size_t)nt * sizeof *ids);
    *n = nt;
    if (!text)
        return ids;
    /* llama.cpp tokenizes with the model's BOS (if it asks for one) in front */
    bool bos = model_tokenizer_bos(tok) >= 0 && model_tokenizer_add_bos(tok);
    int need = model_tokenizer_encode(tok, text, len, bos, false, NULL, 0);
    int32_t *mine = malloc((size_t)(need > 0 ? need : 1) * sizeof *mine);
    int m = mine && need > 0 ? model_tokenizer_encode(tok, text, len, bos, false, mine, need) : 0;
    int same = 0, k = m < nt ? m : nt;
    while (same < k && mine[same] == ids[same])
        same++;
    fprintf(stderr,
            "strata perplexity: '%s' tokenizes to %d tokens; the first %d of the --kl-base "
            "file's %d %s\n",
            file, m, same, nt, same == nt ? "agree" : "agree (the file's tokens are used)");
    free(mine);
    return ids;
}

int cmd_perplexity(int argc, char **argv) {
    const char *C = "perplexity", *model = NULL, *file = NULL, *kl_ref = NULL, *kl_base = NULL;
    long threads = cli_default_threads(), ctx = 512, max_chunks = 0;
    bool ctx_set = false;
    kern_type_t kv_type = KERN_F16;
    int tier = -1; /* kv_fmt_t of --kv-tier-type, or none */
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"file", required_argument, 0, 'f'},
                                         {"ctx", required_argument, 0, 'c'},
                                         {"chunks", required_argument, 0, 1},
                                         {"threads", required_argument, 0, 't'},
                                         {"kv-type", required_argument, 0, 2},
                                         {"kv-tier-type", required_argument, 0, 3},
                                         {"kl-ref", required_argument, 0, 4},
                                         {"kl-base", required_argument, 0, 5},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "m:f:c:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            model = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case 'c':
            if (!cli_int(C, "--ctx", optarg, 8, 1 << 16, &ctx))
                return 1;
            ctx_set = true;
            break;
        case 1:
            if (!cli_int(C, "--chunks", optarg, 0, 1 << 30, &max_chunks))
                return 1;
            break;
        case 't':
            if (!cli_int(C, "--threads", optarg, 1, 256, &threads))
                return 1;
            break;
        case 2:
            if (!s_kv_type(C, optarg, &kv_type))
                return 1;
            break;
        case 3:
            tier = kv_fmt_parse(optarg);
            if (tier != KV_FMT_F16 && tier != KV_FMT_I8 && tier != KV_FMT_I4) {
                fprintf(stderr,
                        "strata perplexity: --kv-tier-type must be f16, int8 or int4 "
                        "(not '%s')\n",
                        optarg);
                return 1;
            }
            break;
        case 4:
            kl_ref = optarg;
            break;
        case 5:
            kl_base = optarg;
            break;
        case 'h':
            s_ppl_help(stdout);
            return 0;
        default:
            s_ppl_help(stderr);
            return 2;
        }
    }
    if (!file && !kl_base) {
        fprintf(stderr,
                "strata perplexity: -f FILE (or --kl-base FILE) is required (see --help)\n");
        return 2;
    }
    if (kl_ref && kl_base) {
        fprintf(stderr, "strata perplexity: give --kl-ref or --kl-base, not both\n");
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "strata perplexity: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    model_klbase_t *kb = NULL;
    if (kl_base) {
        char err[512];
        if (!(kb = model_klbase_open(kl_base, err, sizeof err))) {
            fprintf(stderr, "strata perplexity: --kl-base: %s\n", err);
            return 1;
        }
        if (ctx_set && ctx != model_klbase_n_ctx(kb)) {
            fprintf(stderr,
                    "strata perplexity: --kl-base '%s' was computed with n_ctx %d, not --ctx "
                    "%ld (leave -c out to use the file's)\n",
                    kl_base, model_klbase_n_ctx(kb), ctx);
            model_klbase_destroy(&kb);
            return 1;
        }
        ctx = model_klbase_n_ctx(kb);
    }
    size_t len = 0;
    char *text = file ? cli_read_file(file, &len) : NULL;
    if (file && !text) {
        fprintf(stderr, "strata perplexity: cannot read '%s'\n", file);
        model_klbase_destroy(&kb);
        return 1;
    }
    cli_runner_t r, rr; /* rr: the --kl-ref model */
    if (!cli_runner_open(&r, C, model ? model : cli_default_model())) {
        free(text);
        model_klbase_destroy(&kb);
        return 1;
    }
    if (kl_ref && !cli_runner_open(&rr, C, kl_ref)) {
        cli_runner_close(&r);
        free(text);
        return 1;
    }
    int rc = 1;
    float *logits = NULL, *ref_logits = NULL;
    double *kld = NULL;
    long same_top = 0;
    double ref_nll = 0;
    int32_t *chunk = NULL, *ids = NULL;
    float *base_lp = NULL; /* (n_vocab) one --kl-base row */
    void *tmp = NULL;
    int n = 0;
    const model_config_t *cfg = model_config(r.model);
    if (kb && model_klbase_n_vocab(kb) != cfg->n_vocab) {
        fprintf(stderr,
                "strata perplexity: --kl-base '%s' has a vocabulary of %d tokens, the model %d "
                "(computed with another model family)\n",
                kl_base, model_klbase_n_vocab(kb), cfg->n_vocab);
        goto out;
    }
    if (kb) {
        if (!(ids = s_klbase_ids(kb, r.tok, file, text, len, &n)))
            goto out;
    } else {
        int need = model_tokenizer_encode(r.tok, text, len, false, false, NULL, 0);
        ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
        n = ids && need > 0 ? model_tokenizer_encode(r.tok, text, len, false, false, ids, need) : 0;
    }
    int n_chunks = n / (int)ctx;
    if (max_chunks && n_chunks > max_chunks)
        n_chunks = (int)max_chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "strata perplexity: '%s' has %d tokens, fewer than one chunk of %ld\n",
                file, n, ctx);
        goto out;
    }
    bool bos = model_tokenizer_bos(r.tok) >= 0 && model_tokenizer_add_bos(r.tok);
    if (!cli_runner_reserve(&r, C, (int)ctx, (int)ctx, (int)threads, kv_type))
        goto out;
    if (kl_ref) {
        if (model_config(rr.model)->n_vocab != cfg->n_vocab) {
            fprintf(stderr, "strata perplexity: --kl-ref model has another vocabulary\n");
            goto out;
        }
        if (!cli_runner_reserve(&rr, C, (int)ctx, (int)ctx, (int)threads, KERN_F32))
            goto out;
    }
    const int bs = r.kv.block_size, t0 = kv_fmt_of_pool_type(kv_type);
    const kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    const int lo = (int)ctx / 2, hi = (int)ctx - 1; /* positions whose next token is scored */
    logits = malloc((size_t)(hi - lo) * cfg->n_vocab * sizeof(float));
    chunk = malloc((size_t)ctx * sizeof *chunk);
    tmp = tier >= 0 ? malloc(kv_fmt_block_bytes(&shape, tier)) : NULL;
    if (kl_ref)
        ref_logits = malloc((size_t)(hi - lo) * cfg->n_vocab * sizeof(float));
    if (kb)
        base_lp = malloc((size_t)cfg->n_vocab * sizeof *base_lp);
    if (kl_ref || kb)
        kld = malloc((size_t)n_chunks * (hi - lo) * sizeof *kld);
    if (!logits || !chunk || (tier >= 0 && !tmp) || (kl_ref && !ref_logits) || (kb && !base_lp) ||
        ((kl_ref || kb) && !kld)) {
        fprintf(stderr, "strata perplexity: out of memory\n");
        goto out;
    }
    fprintf(stderr, "strata perplexity: %d tokens, %d chunks of %ld, kv %s%s%s\n", n, n_chunks, ctx,
            kv_fmt_name(t0), tier >= 0 ? ", tier round trip " : "",
            tier >= 0 ? kv_fmt_name(tier) : "");
    double nll = 0;
    long count = 0;
    double ts = cli_now();
    for (int c = 0; c < n_chunks; c++) {
        memcpy(chunk, ids + (size_t)c * ctx, (size_t)ctx * sizeof *chunk);
        if (bos)
            chunk[0] = model_tokenizer_bos(r.tok);
        if (s_ppl_chunk(&r, chunk, (int)ctx, lo, hi, tier, tmp, logits)) {
            fprintf(stderr, "strata perplexity: evaluation failed\n");
            goto out;
        }
        if (kl_ref && s_ppl_chunk(&rr, chunk, (int)ctx, lo, hi, -1, NULL, ref_logits)) {
            fprintf(stderr, "strata perplexity: evaluation of the --kl-ref model failed\n");
            goto out;
        }
        for (int i = lo; kl_ref && i < hi; i++) {
            const float *q = logits + (size_t)(i - lo) * cfg->n_vocab;
            const float *p = ref_logits + (size_t)(i - lo) * cfg->n_vocab;
            double kl, lse_p, lse_q;
            int top_p, top_q;
            s_ppl_kl(p, q, cfg->n_vocab, &kl, &lse_p, &lse_q, &top_p, &top_q);
            kld[count + (i - lo)] = kl;
            same_top += top_p == top_q;
            ref_nll += lse_p - p[ids[(size_t)c * ctx + i + 1]];
        }
        for (int i = lo; kb && i < hi; i++) {
            int e = model_klbase_row(kb, c, i - lo, base_lp);
            if (e) {
                fprintf(stderr, "strata perplexity: --kl-base '%s': chunk %d row %d: %s\n", kl_base,
                        c, i - lo, e == -EPROTO ? "bad scale" : strerror(-e));
                goto out;
            }
            double kl;
            int top_p, top_q;
            s_klbase_kl(base_lp, logits + (size_t)(i - lo) * cfg->n_vocab, cfg->n_vocab, &kl,
                        &top_p, &top_q);
            kld[count + (i - lo)] = kl;
            same_top += top_p == top_q;
            ref_nll -= base_lp[ids[(size_t)c * ctx + i + 1]];
        }
        for (int i = lo; i < hi; i++) {
            const float *lg = logits + (size_t)(i - lo) * cfg->n_vocab;
            float mx = lg[0];
            for (int v = 1; v < cfg->n_vocab; v++)
                mx = lg[v] > mx ? lg[v] : mx;
            double s = 0; /* terms in (0, 1], rounded to float: 1e-7 relative */
            for (int v = 0; v < cfg->n_vocab; v++)
                s += expf(lg[v] - mx);
            nll += log(s) + mx - lg[ids[(size_t)c * ctx + i + 1]];
            count++;
        }
        fprintf(stderr, "[%d/%d] ppl %.4f  (%.1f tok/s)\n", c + 1, n_chunks, exp(nll / count),
                (c + 1) * ctx / (cli_now() - ts));
    }
    /* bytes per position of K and V over all layers and KV heads */
    printf("kv t0 %s: %.1f bytes/token\n", kv_fmt_name(t0),
           (double)kv_fmt_block_bytes(&shape, t0) / bs);
    if (tier >= 0)
        printf("kv tier %s: %.1f bytes/token (blocks of %d round-tripped %s -> %s -> %s)\n",
               kv_fmt_name(tier), (double)kv_fmt_block_bytes(&shape, tier) / bs, bs,
               kv_fmt_name(t0), kv_fmt_name(tier), kv_fmt_name(t0));
    printf("perplexity %.4f over %ld scored tokens (%d chunks of %ld)\n", exp(nll / count), count,
           n_chunks, ctx);
    if (kl_ref || kb) {
        double sum = 0, sq = 0;
        for (long i = 0; i < count; i++) {
            sum += kld[i];
            sq += kld[i] * kld[i];
        }
        double mean = sum / count, var = count > 1 ? (sq / count - mean * mean) : 0;
        qsort(kld, (size_t)count, sizeof *kld, s_cmp_double);
        double pt = (double)same_top / count;
        if (kl_ref)
            printf("kl-ref %s: perplexity %.4f\n", kl_ref, exp(ref_nll / count));
        else
            printf("kl-base %s: perplexity %.4f (n_ctx %d, %d of its %d chunks)\n", kl_base,
                   exp(ref_nll / count), model_klbase_n_ctx(kb), n_chunks,
                   model_klbase_n_chunks(kb));
        printf("kl-divergence mean %.6f +/- %.6f  median %.6f  p99 %.6f  max %.6f\n", mean,
               sqrt((var > 0 ? var : 0) / count), kld[count / 2], kld[(long)(0.99 * (count - 1))],
               kld[count - 1]);
        printf("same top token %.3f +/- %.3f %%\n", 100 * pt, 100 * sqrt(pt * (1 - pt) / count));
    }
    rc = 0;
out:
    free(ref_logits);
    free(base_lp);
    model_klbase_destroy(&kb);
    free(kld);
    if (kl_ref)
        cli_runner_close(&rr);
    free(ids);
    free(logits);
    free(chunk);
    free(tmp);
    free(text);
    cli_runner_close(&r);
    return rc;
}

/* ------------------------------------------------------------------ bench-model */

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void s_bench_help(FILE *f) {
    fprintf(f,
            "usage: strata bench-model [-m MODEL] [options]\n"
            "\n"
            "Measures prompt processing (one batch of -p tokens) and generation (-n tokens,\n"
            "one at a time after the prompt) and prints the median tokens/s of -r runs.\n"
            "Decoding is greedy with the end-of-generation tokens banned (as generate\n"
            "--ignore-eos), so every run decodes real text for all -n tokens.\n"
            "\n"
            "  -m, --model PATH    GGUF model (default: %s)\n"
            "  -p, --n-prompt N    prompt tokens (default 512)\n"
            "  -n, --n-gen N       generated tokens (default 128)\n"
            "  -r, --reps N        repetitions (default 5)\n"
            "  -t, --threads N     threads (default %d)\n"
            "      --kv-type TYPE  KV cache: f16 (default), f32 or int8\n"
            "  -d, --depth D       llama-bench's depth: before each run, fill the context\n"
            "                      with D tokens (not timed), then time -p tokens in one\n"
            "                      batch at positions D.. and, separately, -n tokens one\n"
            "                      at a time at positions D.. (so -d 0 decodes from an\n"
            "                      empty context, like llama-bench -d 0).  Without -d,\n"
            "                      generation runs after the -p prompt tokens.\n"
            "  -b, --batch B       decode B sequences at once (continuous batching): each\n"
            "                      prefills its own -p tokens, then -n steps of B tokens;\n"
            "                      prints the aggregate generation tokens/s (default 1)\n"
            "      --bandwidth     also measure the read bandwidth (1 GiB summed by 1 and\n"
            "                      by -t threads, best of 3) and print generation as a\n"
            "                      fraction of its bound: bandwidth / weight bytes read\n"
            "                      per token (every matrix, one embedding row)\n"
            "  -h, --help\n",
            cli_default_model(), cli_default_threads());
}

/* bench-model --batch B: B sequences, each prefilled separately, then decoded
 * together one token each per forward pass.  Returns 0 or 1. */
static int s_bench_batch(cli_runner_t *r, int B, int np, int ng, int reps, int threads,
                         kern_type_t kv_type, double *pp, double *tg) {
    const model_config_t *cfg = model_config(r->model);
    const int bs = 16, nb = (np + ng + bs - 1) / bs;
    int rc = 1;
    kern_kv_pool_t kv;
    kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    if (kern_kv_pool_init(&kv, &shape, kv_type, B * nb))
        return 1;
    model_ctx_t *ctx = model_ctx_new(r->model, np > B ? np : B, np + ng, threads, NULL);
    int32_t *blocks = malloc(sizeof(int32_t) * B * nb);
    model_seq_view_t *sv = malloc(sizeof *sv * B);
    int n = np > B ? np : B;
    int32_t *tok = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
    int32_t *seq = malloc(sizeof(int32_t) * n), *next = malloc(sizeof(int32_t) * B);
    bool *want = malloc(sizeof(bool) * n);
    float *logits = malloc(sizeof(float) * B * cfg->n_vocab);
    int n_eog;
    int32_t *eog = model_tokenizer_eog_ids(r->tok, cfg->n_vocab, &n_eog);
    if (!ctx || !blocks || !sv || !tok || !pos || !seq || !next || !want || !logits || !eog)
        goto out;
    for (int i = 0; i < B * nb; i++)
        blocks[i] = i;
    for (int s = 0; s < B; s++)
        sv[s] = (model_seq_view_t){blocks + s * nb, nb};
    for (int k = 0; k < reps; k++) {
        double t0 = cli_now();
        for (int s = 0; s < B; s++) {
            for (int j = 0; j < np; j++) {
                tok[j] = (int32_t)((uint32_t)(j * 2654435761u + s * 97u) % (uint32_t)cfg->n_vocab);
                pos[j] = j;
                seq[j] = s;
                want[j] = j == np - 1;
            }
            model_batch_t b = {np, tok, pos, seq, want, B, sv};
            if (model_ctx_forward(ctx, &b, &kv, logits) < 0)
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
            model_batch_t b = {B, tok, pos, seq, want, B, sv};
            if (model_ctx_forward(ctx, &b, &kv, logits) < 0)
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
    model_ctx_destroy(&ctx);
    kern_kv_pool_free(&kv);
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

int cmd_bench_model(int argc, char **argv) {
    const char *C = "bench-model", *model = NULL;
    long threads = cli_default_threads(), np = 512, ng = 128, reps = 5, batch = 1, depth = -1;
    bool bandwidth = false;
    kern_type_t kv_type = KERN_F16;
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"n-prompt", required_argument, 0, 'p'},
                                         {"n-gen", required_argument, 0, 'n'},
                                         {"reps", required_argument, 0, 'r'},
                                         {"threads", required_argument, 0, 't'},
                                         {"kv-type", required_argument, 0, 1},
                                         {"batch", required_argument, 0, 'b'},
                                         {"depth", required_argument, 0, 'd'},
                                         {"bandwidth", no_argument, 0, 2},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "m:p:n:r:t:b:d:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            model = optarg;
            break;
        case 'b':
            if (!cli_int(C, "--batch", optarg, 1, 256, &batch))
                return 1;
            break;
        case 'd':
            if (!cli_int(C, "--depth", optarg, 0, 1 << 16, &depth))
                return 1;
            break;
        case 'p':
            if (!cli_int(C, "--n-prompt", optarg, 1, 8192, &np))
                return 1;
            break;
        case 'n':
            if (!cli_int(C, "--n-gen", optarg, 1, 8192, &ng))
                return 1;
            break;
        case 'r':
            if (!cli_int(C, "--reps", optarg, 1, 1000, &reps))
                return 1;
            break;
        case 't':
            if (!cli_int(C, "--threads", optarg, 1, 256, &threads))
                return 1;
            break;
        case 1:
            if (!s_kv_type(C, optarg, &kv_type))
                return 1;
            break;
        case 2:
            bandwidth = true;
            break;
        case 'h':
            s_bench_help(stdout);
            return 0;
        default:
            s_bench_help(stderr);
            return 2;
        }
    }
    if (depth >= 0 && batch > 1) {
        fprintf(stderr, "strata bench-model: --depth is for one sequence, not with --batch\n");
        return 2;
    }
    model = model ? model : cli_default_model();
    cli_runner_t r;
    if (!cli_runner_open(&r, C, model))
        return 1;
    const model_config_t *cfg = model_config(r.model);
    int rc = 1;
    const int d = depth > 0 ? (int)depth : 0; /* context tokens before each measurement */
    int32_t *toks = malloc((size_t)(d + np) * sizeof *toks);
    float *logits = malloc((size_t)cfg->n_vocab * sizeof(float));
    double *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    int n_eog;
    int32_t *eog = model_tokenizer_eog_ids(r.tok, cfg->n_vocab, &n_eog);
    if (!toks || !logits || !pp || !tg || !eog)
        goto out;
    if (batch > 1) {
        if (s_bench_batch(&r, (int)batch, (int)np, (int)ng, (int)reps, (int)threads, kv_type, pp,
                          tg))
            goto out;
        goto report;
    }
    /* with --depth, tg runs at positions d.. (not after the prompt) */
    const int ctx_need = depth >= 0 ? d + (int)(np > ng ? np : ng) : (int)(np + ng);
    if (!cli_runner_reserve(&r, C, ctx_need, (int)np, (int)threads, kv_type))
        goto out;
    uint64_t st = 42;
    for (int i = 0; i < d + np; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((st >> 33) % (uint64_t)cfg->n_vocab);
    }
    /* warm-up: touch the weights once (at most the tokens there are: -p 8 -d 0 has 8) */
    cli_runner_eval(&r, toks, d + np < 16 ? d + (int)np : 16, 0, false, logits);
    for (int k = 0; k < reps; k++) {
        if (d > 0 && cli_runner_eval(&r, toks, d, 0, false, logits)) /* the depth, not timed */
            goto out;
        double t0 = cli_now();
        if (cli_runner_eval(&r, toks + d, (int)np, d, false, logits))
            goto out;
        double t1 = cli_now();
        model_logits_ban(logits, eog, n_eog);
        int32_t next = model_argmax(logits, cfg->n_vocab);
        /* legacy: after the prompt; --depth: at positions d.., overwriting the
         * prompt's KV (positions < d are untouched and still the depth's) */
        const int g0 = depth >= 0 ? d : (int)np;
        for (int i = 0; i < ng; i++) {
            if (cli_runner_eval(&r, &next, 1, g0 + i, false, logits))
                goto out;
            model_logits_ban(logits, eog, n_eog);
            next = model_argmax(logits, cfg->n_vocab);
        }
        double t2 = cli_now();
        pp[k] = np / (t1 - t0);
        tg[k] = ng / (t2 - t1);
        fprintf(stderr, "run %d/%ld: pp%ld %.1f tok/s, tg%ld %.1f tok/s\n", k + 1, reps, np, pp[k],
                ng, tg[k]);
    }
report:
    qsort(pp, (size_t)reps, sizeof *pp, s_cmp_double);
    qsort(tg, (size_t)reps, sizeof *tg, s_cmp_double);
    const char *base = strrchr(model, '/');
    printf("model %s (%s weights, %.1f MiB)  threads %ld  kernels %s  kv %s\n",
           base ? base + 1 : model, kern_type_traits(cfg->ftype)->name,
           model_weight_bytes(r.model) / 1048576.0, threads, kern_ops_best()->name,
           kv_fmt_name(kv_fmt_of_pool_type(kv_type)));
    const char *agg = batch > 1 ? " aggregate" : "";
    printf("batch %ld\n", batch);
    char at[32] = "";
    if (depth >= 0)
        snprintf(at, sizeof at, " @ d%ld", depth);
    printf("pp%ld%s: %.1f tok/s%s (median of %ld; min %.1f max %.1f)\n", np, at, pp[reps / 2], agg,
           reps, pp[0], pp[reps - 1]);
    printf("tg%ld%s: %.1f tok/s%s (median of %ld; min %.1f max %.1f)\n", ng, at, tg[reps / 2], agg,
           reps, tg[0], tg[reps - 1]);
    const double per_tok = (double)model_decode_bytes(r.model);
    if (batch == 1)
        printf("decode reads %.1f MiB of weights per token: tg %.1f GB/s\n", per_tok / 1048576.0,
               tg[reps / 2] * per_tok / 1e9);
    if (bandwidth) {
        const double bw1 = cli_read_bandwidth(1, (size_t)1 << 30, 3);
        const double bwn = cli_read_bandwidth((int)threads, (size_t)1 << 30, 3);
        printf("read bandwidth: 1 thread %.1f GB/s, %ld threads %.1f GB/s (1 GiB, best of 3)\n",
               bw1, threads, bwn);
        if (batch == 1 && bwn > 0)
            printf("decode bound %.1f tok/s: tg at %.0f %% of it\n", bwn * 1e9 / per_tok,
                   100.0 * tg[reps / 2] * per_tok / (bwn * 1e9));
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "strata bench-model: failed\n");
    free(toks);
    free(logits);
    free(pp);
    free(tg);
    free(eog);
    cli_runner_close(&r);
    return rc;
}
