/* cmd_eval.c - `strata logits` and `strata perplexity`: whole-model evaluation
 * without sampling (bench-model: bin/cmd_bench_model.c). */
#include "cli.h"
#include "cli_flags.h"
#include "kv_codec.h"
#include "model_klbase.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ logits */

typedef struct {
    const char *ids;    /* --ids */
    const char *prompt; /* -p */
    const char *out;    /* -o */
    int ubatch;         /* --ubatch */
} s_logits_opts_t;

typedef struct {
    cli_model_opts_t m;
    s_logits_opts_t l;
    cli_kv_opts_t kv;
} s_logits_cfg_t;

#define S_LOG(member) ACTOR_OPT_FIELD(s_logits_opts_t, member)
static const cli_flag_t s_logits_flags[] = {
    {.name = "ids",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING, .help = "token ids (\"1 2 3\")", .field = S_LOG(ids)}},
    {.name = "prompt",
     .short_name = 'p',
     .arg = "TEXT",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "text, tokenized without BOS unless the model asks for it",
             .field = S_LOG(prompt)}},
    {.name = "out",
     .short_name = 'o',
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH, .help = "output file", .field = S_LOG(out)}},
    {.name = "ubatch",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 8192,
             .help = "tokens per forward pass",
             .field = S_LOG(ubatch)}},
    {NULL},
};
#undef S_LOG

static const cli_cmd_t s_logits_cmd = {
    "logits",
    "usage: strata logits [-m MODEL] (--ids LIST | -p PROMPT) -o OUT [options]\n"
    "\n"
    "Runs the prompt and writes the logits of every position to OUT as\n"
    "little-endian int32 n_tokens, int32 n_vocab, then n_tokens x n_vocab float32.\n",
    NULL,
    {{cli_model_flags, offsetof(s_logits_cfg_t, m)},
     {cli_threads_flags, offsetof(s_logits_cfg_t, m)},
     {s_logits_flags, offsetof(s_logits_cfg_t, l)},
     {cli_kv_flags, offsetof(s_logits_cfg_t, kv)},
     {NULL}},
};

/* The ids of --ids or the tokens of -p, each in the vocabulary.  NULL after a message. */
static int32_t *s_logits_ids(const cli_runner_t *r, const s_logits_opts_t *l, int *n) {
    int32_t *ids = NULL;
    *n = 0;
    if (l->ids) {
        ids = cli_parse_ids(l->ids, n);
    } else {
        const char *p = l->prompt;
        bool bos = model_tokenizer_add_bos(r->tok);
        int need = model_tokenizer_encode(r->tok, p, strlen(p), bos, false, NULL, 0);
        ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
        if (ids && need > 0)
            *n = model_tokenizer_encode(r->tok, p, strlen(p), bos, false, ids, need);
    }
    const model_config_t *cfg = model_config(r->model);
    if (!ids || *n < 1) {
        fprintf(stderr, "strata logits: empty or malformed token list\n");
        free(ids);
        return NULL;
    }
    for (int i = 0; i < *n; i++)
        if (ids[i] >= cfg->n_vocab) {
            fprintf(stderr, "strata logits: token id %d out of range (vocabulary %d)\n", ids[i],
                    cfg->n_vocab);
            free(ids);
            return NULL;
        }
    return ids;
}

/* Write the header and the (n, n_vocab) logits to path.  false after a message. */
static bool s_logits_write(const char *path, const float *logits, int n, int nv) {
    FILE *f = fopen(path, "wb");
    int32_t hdr[2] = {n, nv};
    bool ok = f && fwrite(hdr, sizeof hdr, 1, f) == 1 &&
              fwrite(logits, sizeof(float) * nv, (size_t)n, f) == (size_t)n;
    if (f && fclose(f))
        ok = false;
    if (!ok)
        fprintf(stderr, "strata logits: cannot write '%s'\n", path);
    return ok;
}

int cmd_logits(int argc, char **argv) {
    s_logits_cfg_t c;
    memset(&c, 0, sizeof c);
    cli_model_opts_default(&c.m);
    cli_kv_opts_default(&c.kv);
    c.l.ubatch = 512;
    int next, rc = cli_flags_parse(&s_logits_cmd, argc, argv, &c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (!!c.l.ids + !!c.l.prompt != 1 || !c.l.out) {
        fprintf(stderr, "strata logits: give --ids or -p, and -o (see --help)\n");
        return 2;
    }
    cli_runner_t r;
    if (!cli_runner_open(&r, "logits", c.m.model))
        return 1;
    rc = 1;
    int n = 0;
    float *logits = NULL;
    int32_t *ids = s_logits_ids(&r, &c.l, &n);
    const int nv = model_config(r.model)->n_vocab;
    if (!ids || !cli_runner_reserve(&r, "logits", n, c.l.ubatch, c.m.threads,
                                    (kern_type_t)kv_fmt_pool_type(c.kv.kv_fmt)))
        goto out;
    logits = malloc((size_t)n * nv * sizeof(float));
    if (!logits || cli_runner_eval(&r, ids, n, 0, true, logits)) {
        fprintf(stderr, "strata logits: evaluation failed\n");
        goto out;
    }
    if (s_logits_write(c.l.out, logits, n, nv))
        rc = 0;
out:
    free(ids);
    free(logits);
    cli_runner_close(&r);
    return rc;
}

/* ------------------------------------------------------------------ perplexity */

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
    model_seq_view_t sv = {r->blocks, r->kv.n_blocks, NULL, 0, 0};
    float *dst = logits;
    for (int i = 0; i < n; i += step) {
        int m = n - i < step ? n - i : step;
        for (int j = 0; j < m; j++) {
            r->pos[j] = i + j;
            r->want[j] = i + j >= lo && i + j < hi;
        }
        model_batch_t b = {m, chunk + i, r->pos, r->seq, r->want, 1, &sv, NULL};
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

typedef struct {
    const char *file;    /* -f */
    int ctx;             /* -c (0: not given: 512, or the --kl-base file's) */
    int chunks;          /* --chunks (0: all) */
    int tier;            /* --kv-tier-type: a kv_fmt_t, or -1: none */
    const char *kl_ref;  /* --kl-ref */
    const char *kl_base; /* --kl-base */
} s_ppl_opts_t;

typedef struct {
    cli_model_opts_t m;
    s_ppl_opts_t p;
    cli_kv_opts_t kv;
} s_ppl_cfg_t;

#define S_PPL(member) ACTOR_OPT_FIELD(s_ppl_opts_t, member)
static const cli_flag_t s_ppl_flags[] = {
    {.name = "file",
     .short_name = 'f',
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH, .help = "text file", .field = S_PPL(file)}},
    {.name = "ctx",
     .short_name = 'c',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 8,
             .max = 1 << 16,
             .help = "tokens per chunk",
             .field = S_PPL(ctx)},
     .def_text = "512"},
    {.name = "chunks",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1 << 30,
             .help = "score at most N chunks",
             .field = S_PPL(chunks)},
     .def_text = "all"},
    {.name = "kv-tier-type",
     .arg = "TYPE",
     .opt = {.type = ACTOR_OPT_ENUM,
             .values = "f16|int8|int4",
             .parse = kv_fmt_parse,
             .help = "simulate KV blocks restored from a lower tier stored as TYPE: each block "
                     "of positions, once complete, is converted to TYPE and back in place, so "
                     "later positions attend to the round-tripped values (a chunk's last "
                     "partial block stays exact; chunks then run one block per forward pass)",
             .field = S_PPL(tier)},
     .def_text = "none"},
    {.name = "kl-ref",
     .arg = "MODEL",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "also run MODEL (e.g. an F32 copy made with strata quantize; F32 KV) on "
                     "the same chunks and print the KL divergence KL(ref || this) of the "
                     "next-token distributions over the scored positions (mean, median, p99, "
                     "max) and how often the top token agrees, as llama-perplexity "
                     "--kl-divergence does",
             .field = S_PPL(kl_ref)}},
    {.name = "kl-base",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "compare with the log-probabilities that llama-perplexity "
                     "--kl-divergence-base FILE saved (llama.cpp's own forward pass): evaluate "
                     "the file's tokens and chunking (its n_ctx; -c must match or be left out; "
                     "-f, if given, is only checked against the file's tokens) and print the "
                     "same KL and top-token lines, with KL(base || this) summed over the tokens "
                     "whose base log-probability is above -16, as llama.cpp sums it",
             .field = S_PPL(kl_base)}},
    {NULL},
};
#undef S_PPL

static const cli_cmd_t s_ppl_cmd = {
    "perplexity",
    "usage: strata perplexity [-m MODEL] (-f FILE | --kl-base FILE) [options]\n"
    "\n"
    "Splits the tokenized file into chunks of --ctx tokens and scores the second\n"
    "half of each chunk given the first (as llama.cpp's perplexity does).\n",
    "Prints the perplexity and the KV bytes per token (K and V, all layers) of\n"
    "the T0 format and of the tier format.",
    {{cli_model_flags, offsetof(s_ppl_cfg_t, m)},
     {cli_threads_flags, offsetof(s_ppl_cfg_t, m)},
     {s_ppl_flags, offsetof(s_ppl_cfg_t, p)},
     {cli_kv_flags, offsetof(s_ppl_cfg_t, kv)},
     {NULL}},
};

/* One perplexity run: its inputs, its runners and buffers, its sums. */
typedef struct {
    s_ppl_cfg_t c;
    model_klbase_t *kb; /* --kl-base, or NULL */
    char *text;         /* -f's text, or NULL */
    size_t len;
    cli_runner_t r, rr; /* the model; rr: the --kl-ref model */
    bool r_open, rr_open;
    int32_t *ids; /* (n) the tokens */
    int n, n_chunks;
    int lo, hi;                 /* positions whose next token is scored */
    bool bos;                   /* chunks start with BOS */
    int t0;                     /* the T0 kv_fmt_t */
    float *logits, *ref_logits; /* (hi - lo, n_vocab) */
    float *base_lp;             /* (n_vocab) one --kl-base row */
    int32_t *chunk;             /* (ctx) */
    void *tmp;                  /* one tier block */
    double *kld;                /* (n_chunks * (hi - lo)) KL per scored position */
    long count, same_top;
    double nll, ref_nll;
} s_ppl_t;

/* Parse argv into c.  CLI_PARSED, or the exit status after a message. */
static int s_ppl_parse(int argc, char **argv, s_ppl_cfg_t *c) {
    memset(c, 0, sizeof *c);
    cli_model_opts_default(&c->m);
    cli_kv_opts_default(&c->kv);
    c->p.tier = -1;
    int next, rc = cli_flags_parse(&s_ppl_cmd, argc, argv, c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (!c->p.file && !c->p.kl_base) {
        fprintf(stderr,
                "strata perplexity: -f FILE (or --kl-base FILE) is required (see --help)\n");
        return 2;
    }
    if (c->p.kl_ref && c->p.kl_base) {
        fprintf(stderr, "strata perplexity: give --kl-ref or --kl-base, not both\n");
        return 2;
    }
    if (next < argc) {
        fprintf(stderr, "strata perplexity: unexpected argument '%s' (see --help)\n", argv[next]);
        return 2;
    }
    return CLI_PARSED;
}

/* Open --kl-base (its n_ctx becomes -c), read -f, load the model(s).  false after a message. */
static bool s_ppl_open(s_ppl_t *s) {
    s_ppl_opts_t *p = &s->c.p;
    char err[512];
    if (p->kl_base) {
        if (!(s->kb = model_klbase_open(p->kl_base, err, sizeof err))) {
            fprintf(stderr, "strata perplexity: --kl-base: %s\n", err);
            return false;
        }
        if (p->ctx && p->ctx != model_klbase_n_ctx(s->kb)) {
            fprintf(stderr,
                    "strata perplexity: --kl-base '%s' was computed with n_ctx %d, not --ctx "
                    "%d (leave -c out to use the file's)\n",
                    p->kl_base, model_klbase_n_ctx(s->kb), p->ctx);
            return false;
        }
        p->ctx = model_klbase_n_ctx(s->kb);
    }
    if (!p->ctx)
        p->ctx = 512;
    if (p->file && !(s->text = cli_read_file(p->file, &s->len))) {
        fprintf(stderr, "strata perplexity: cannot read '%s'\n", p->file);
        return false;
    }
    if (!(s->r_open = cli_runner_open(&s->r, "perplexity", s->c.m.model)))
        return false;
    return !p->kl_ref || (s->rr_open = cli_runner_open(&s->rr, "perplexity", p->kl_ref));
}

/* The tokens to score: the --kl-base file's, else -f's.  false after a message. */
static bool s_ppl_tokens(s_ppl_t *s) {
    const model_config_t *cfg = model_config(s->r.model);
    if (s->kb && model_klbase_n_vocab(s->kb) != cfg->n_vocab) {
        fprintf(stderr,
                "strata perplexity: --kl-base '%s' has a vocabulary of %d tokens, the model %d "
                "(computed with another model family)\n",
                s->c.p.kl_base, model_klbase_n_vocab(s->kb), cfg->n_vocab);
        return false;
    }
    if (s->kb)
        return (s->ids = s_klbase_ids(s->kb, s->r.tok, s->c.p.file, s->text, s->len, &s->n));
    int need = model_tokenizer_encode(s->r.tok, s->text, s->len, false, false, NULL, 0);
    s->ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *s->ids);
    s->n = s->ids && need > 0
               ? model_tokenizer_encode(s->r.tok, s->text, s->len, false, false, s->ids, need)
               : 0;
    return true;
}

/* Chunk the tokens, size the runners and the buffers.  false after a message. */
static bool s_ppl_reserve(s_ppl_t *s) {
    const s_ppl_opts_t *p = &s->c.p;
    const model_config_t *cfg = model_config(s->r.model);
    const int ctx = p->ctx, th = s->c.m.threads;
    s->n_chunks = s->n / ctx;
    if (p->chunks && s->n_chunks > p->chunks)
        s->n_chunks = p->chunks;
    if (s->n_chunks < 1) {
        fprintf(stderr, "strata perplexity: '%s' has %d tokens, fewer than one chunk of %d\n",
                p->file, s->n, ctx);
        return false;
    }
    s->bos = model_tokenizer_bos(s->r.tok) >= 0 && model_tokenizer_add_bos(s->r.tok);
    kern_type_t kv_type = (kern_type_t)kv_fmt_pool_type(s->c.kv.kv_fmt);
    if (!cli_runner_reserve(&s->r, "perplexity", ctx, ctx, th, kv_type))
        return false;
    if (p->kl_ref && model_config(s->rr.model)->n_vocab != cfg->n_vocab) {
        fprintf(stderr, "strata perplexity: --kl-ref model has another vocabulary\n");
        return false;
    }
    if (p->kl_ref && !cli_runner_reserve(&s->rr, "perplexity", ctx, ctx, th, KERN_F32))
        return false;
    s->t0 = kv_fmt_of_pool_type(kv_type);
    const kern_kv_shape_t shape = model_kv_shape(cfg, s->r.kv.block_size);
    const size_t rows = (size_t)(ctx - 1 - ctx / 2) * cfg->n_vocab;
    s->lo = ctx / 2;
    s->hi = ctx - 1;
    s->logits = malloc(rows * sizeof(float));
    s->chunk = malloc((size_t)ctx * sizeof *s->chunk);
    s->tmp = p->tier >= 0 ? malloc(kv_fmt_block_bytes(&shape, p->tier)) : NULL;
    s->ref_logits = p->kl_ref ? malloc(rows * sizeof(float)) : NULL;
    s->base_lp = s->kb ? malloc((size_t)cfg->n_vocab * sizeof *s->base_lp) : NULL;
    s->kld =
        p->kl_ref || s->kb ? malloc((size_t)s->n_chunks * (s->hi - s->lo) * sizeof *s->kld) : NULL;
    if (!s->logits || !s->chunk || (p->tier >= 0 && !s->tmp) || (p->kl_ref && !s->ref_logits) ||
        (s->kb && !s->base_lp) || ((p->kl_ref || s->kb) && !s->kld)) {
        fprintf(stderr, "strata perplexity: out of memory\n");
        return false;
    }
    return true;
}

/* Chunk c's KL against the --kl-ref model's logits, or the --kl-base file's rows, into
 * s->kld from s->count.  false after a message. */
static bool s_ppl_kl_chunk(s_ppl_t *s, int c) {
    const int nv = model_config(s->r.model)->n_vocab, ctx = s->c.p.ctx;
    for (int i = s->lo; i < s->hi; i++) {
        const float *q = s->logits + (size_t)(i - s->lo) * nv;
        const int32_t want = s->ids[(size_t)c * ctx + i + 1];
        double kl, lse_p, lse_q;
        int top_p, top_q;
        if (s->ref_logits) {
            const float *p = s->ref_logits + (size_t)(i - s->lo) * nv;
            s_ppl_kl(p, q, nv, &kl, &lse_p, &lse_q, &top_p, &top_q);
            s->ref_nll += lse_p - p[want];
        } else {
            int e = model_klbase_row(s->kb, c, i - s->lo, s->base_lp);
            if (e) {
                fprintf(stderr, "strata perplexity: --kl-base '%s': chunk %d row %d: %s\n",
                        s->c.p.kl_base, c, i - s->lo, e == -EPROTO ? "bad scale" : strerror(-e));
                return false;
            }
            s_klbase_kl(s->base_lp, q, nv, &kl, &top_p, &top_q);
            s->ref_nll -= s->base_lp[want];
        }
        s->kld[s->count + (i - s->lo)] = kl;
        s->same_top += top_p == top_q;
    }
    return true;
}

/* Run and score chunk c.  false after a message. */
static bool s_ppl_score(s_ppl_t *s, int c) {
    const int nv = model_config(s->r.model)->n_vocab, ctx = s->c.p.ctx;
    memcpy(s->chunk, s->ids + (size_t)c * ctx, (size_t)ctx * sizeof *s->chunk);
    if (s->bos)
        s->chunk[0] = model_tokenizer_bos(s->r.tok);
    if (s_ppl_chunk(&s->r, s->chunk, ctx, s->lo, s->hi, s->c.p.tier, s->tmp, s->logits)) {
        fprintf(stderr, "strata perplexity: evaluation failed\n");
        return false;
    }
    if (s->ref_logits &&
        s_ppl_chunk(&s->rr, s->chunk, ctx, s->lo, s->hi, -1, NULL, s->ref_logits)) {
        fprintf(stderr, "strata perplexity: evaluation of the --kl-ref model failed\n");
        return false;
    }
    if ((s->ref_logits || s->kb) && !s_ppl_kl_chunk(s, c))
        return false;
    for (int i = s->lo; i < s->hi; i++) {
        const float *lg = s->logits + (size_t)(i - s->lo) * nv;
        float mx = lg[0];
        for (int v = 1; v < nv; v++)
            mx = lg[v] > mx ? lg[v] : mx;
        double sum = 0; /* terms in (0, 1], rounded to float: 1e-7 relative */
        for (int v = 0; v < nv; v++)
            sum += expf(lg[v] - mx);
        s->nll += log(sum) + mx - lg[s->ids[(size_t)c * ctx + i + 1]];
        s->count++;
    }
    return true;
}

/* The KL lines of --kl-ref / --kl-base (sorts s->kld). */
static void s_ppl_report_kl(s_ppl_t *s) {
    const long count = s->count;
    double sum = 0, sq = 0;
    for (long i = 0; i < count; i++) {
        sum += s->kld[i];
        sq += s->kld[i] * s->kld[i];
    }
    double mean = sum / count, var = count > 1 ? (sq / count - mean * mean) : 0;
    qsort(s->kld, (size_t)count, sizeof *s->kld, s_cmp_double);
    double pt = (double)s->same_top / count;
    if (s->c.p.kl_ref)
        printf("kl-ref %s: perplexity %.4f\n", s->c.p.kl_ref, exp(s->ref_nll / count));
    else
        printf("kl-base %s: perplexity %.4f (n_ctx %d, %d of its %d chunks)\n", s->c.p.kl_base,
               exp(s->ref_nll / count), model_klbase_n_ctx(s->kb), s->n_chunks,
               model_klbase_n_chunks(s->kb));
    printf("kl-divergence mean %.6f +/- %.6f  median %.6f  p99 %.6f  max %.6f\n", mean,
           sqrt((var > 0 ? var : 0) / count), s->kld[count / 2], s->kld[(long)(0.99 * (count - 1))],
           s->kld[count - 1]);
    printf("same top token %.3f +/- %.3f %%\n", 100 * pt, 100 * sqrt(pt * (1 - pt) / count));
}

/* The KV bytes per token, the perplexity and the KL lines on stdout. */
static void s_ppl_report(s_ppl_t *s) {
    const int bs = s->r.kv.block_size, t0 = s->t0, tier = s->c.p.tier;
    const kern_kv_shape_t shape = model_kv_shape(model_config(s->r.model), bs);
    /* bytes per position of K and V over all layers and KV heads */
    printf("kv t0 %s: %.1f bytes/token\n", kv_fmt_name(t0),
           (double)kv_fmt_block_bytes(&shape, t0) / bs);
    if (tier >= 0)
        printf("kv tier %s: %.1f bytes/token (blocks of %d round-tripped %s -> %s -> %s)\n",
               kv_fmt_name(tier), (double)kv_fmt_block_bytes(&shape, tier) / bs, bs,
               kv_fmt_name(t0), kv_fmt_name(tier), kv_fmt_name(t0));
    printf("perplexity %.4f over %ld scored tokens (%d chunks of %d)\n", exp(s->nll / s->count),
           s->count, s->n_chunks, s->c.p.ctx);
    if (s->kld)
        s_ppl_report_kl(s);
}

static void s_ppl_close(s_ppl_t *s) {
    free(s->ref_logits);
    free(s->base_lp);
    model_klbase_destroy(&s->kb);
    free(s->kld);
    if (s->rr_open)
        cli_runner_close(&s->rr);
    free(s->ids);
    free(s->logits);
    free(s->chunk);
    free(s->tmp);
    free(s->text);
    if (s->r_open)
        cli_runner_close(&s->r);
}

int cmd_perplexity(int argc, char **argv) {
    s_ppl_t s;
    memset(&s, 0, sizeof s);
    int rc = s_ppl_parse(argc, argv, &s.c);
    if (rc != CLI_PARSED)
        return rc;
    rc = 1;
    if (!s_ppl_open(&s) || !s_ppl_tokens(&s) || !s_ppl_reserve(&s))
        goto out;
    const int tier = s.c.p.tier;
    fprintf(stderr, "strata perplexity: %d tokens, %d chunks of %d, kv %s%s%s\n", s.n, s.n_chunks,
            s.c.p.ctx, kv_fmt_name(s.t0), tier >= 0 ? ", tier round trip " : "",
            tier >= 0 ? kv_fmt_name(tier) : "");
    double ts = cli_now();
    for (int c = 0; c < s.n_chunks; c++) {
        if (!s_ppl_score(&s, c))
            goto out;
        fprintf(stderr, "[%d/%d] ppl %.4f  (%.1f tok/s)\n", c + 1, s.n_chunks, exp(s.nll / s.count),
                (c + 1) * s.c.p.ctx / (cli_now() - ts));
    }
    s_ppl_report(&s);
    rc = 0;
out:
    s_ppl_close(&s);
    return rc;
}

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
