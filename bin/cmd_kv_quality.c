/* cmd_kv_quality.c - `strata kv-quality`: what in-sequence KV compression
 * (kvstore/kv_compress.h) costs in quality.  Each policy runs the same text the way a
 * worker runs a request (the prompt in --ubatch chunks, then --step tokens at a time,
 * compressing whenever the policy says so) and its next-token distributions are compared
 * with those of the full cache: KL(full || policy), perplexity, top-token agreement,
 * and the KV rows it held.  --generate instead continues a prompt greedily under each
 * policy (what the needle test reads). */
#include "cli.h"
#include "cli_flags.h"
#include "kv_cache.h"
#include "kv_compress.h"
#include "kv_kivi.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_POLICIES 16

typedef struct {
    const char *file;     /* -f */
    const char *ids;      /* --ids: token ids instead of -f */
    const char *lg_out;   /* --logits-out */
    const char *policies; /* --kv-compress "A;B;..." */
    int ctx;              /* --ctx: tokens per chunk */
    int score;            /* --score: scored tokens at the end of each chunk */
    int chunks;           /* --chunks */
    int skip;             /* --skip-chunks */
    int ubatch;           /* --ubatch: prompt tokens per forward pass */
    int step;             /* --step: tokens per forward pass after the prompt */
    int generate;         /* --generate N: continue -f's text greedily instead */
    int speed;            /* --speed N: time N decoded tokens after --ctx tokens instead */
    int reps;             /* -r: --speed's runs */
    bool json;            /* --json */
} s_kvq_opts_t;

typedef struct {
    cli_model_opts_t m;
    s_kvq_opts_t q;
    cli_kv_opts_t kv;
} s_kvq_cfg_t;

#define S_Q(member) ACTOR_OPT_FIELD(s_kvq_opts_t, member)
static const cli_flag_t s_kvq_flags[] = {
    {.name = "file",
     .short_name = 'f',
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "text file (with --generate: the prompt)",
             .field = S_Q(file)}},
    {.name = "ids",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "token ids (\"1 2 3\") instead of -f, used as they are (no BOS added)",
             .field = S_Q(ids)}},
    {.name = "logits-out",
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "write the first policy's logits at the first chunk's scored positions "
                     "(ctx - score .. ctx - 2) as strata logits does: int32 rows, int32 "
                     "n_vocab, then rows x n_vocab float32 (for the NumPy oracle)",
             .field = S_Q(lg_out)}},
    {.name = "kv-compress",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "policies to compare with the full cache, separated by ';': "
                     "window:BUDGET, h2o:BUDGET, snapkv:BUDGET (BUDGET: rows, or a "
                     "percentage of the positions seen; options ,sink=N ,recent=N ,pool=N), "
                     "or kivi4 / kivi2 (KIVI's quantization, blocks rounded through it in "
                     "place once older than ,residual=N positions: kvstore/kv_kivi.h; the KV "
                     "type must be f32 or f16)",
             .field = S_Q(policies)}},
    {.name = "ctx",
     .short_name = 'c',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 32,
             .max = 1 << 17,
             .help = "tokens per chunk",
             .field = S_Q(ctx)}},
    {.name = "score",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 2,
             .max = 1 << 16,
             .help = "tokens scored at the end of each chunk (the rest is its prompt)",
             .field = S_Q(score)}},
    {.name = "chunks",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 20,
             .help = "chunks scored (consecutive slices of the text)",
             .field = S_Q(chunks)}},
    {.name = "skip-chunks",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1 << 20,
             .help = "start at the text's chunk N (0-based), so that a long measurement can "
                     "run one chunk per command",
             .field = S_Q(skip)}},
    {.name = "ubatch",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 8192,
             .help = "prompt tokens per forward pass (compression may run between them)",
             .field = S_Q(ubatch)}},
    {.name = "step",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 512,
             .help = "tokens per forward pass after the prompt (1: as decoding does)",
             .field = S_Q(step)}},
    {.name = "generate",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 4096,
             .help = "continue the -f text greedily for N tokens under the full cache and "
                     "each policy, one JSON line each ({\"policy\", \"text\", \"tokens\", "
                     "\"rows\"})",
             .field = S_Q(generate)}},
    {.name = "speed",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1 << 16,
             .help = "time decoding instead: after the first --ctx tokens of the text (not "
                     "timed, compressed as the policy says), N greedy tokens one per forward "
                     "pass, under the full cache and each policy; prints tokens/s (median, "
                     "min, max of -r runs) and the rows held at the end",
             .field = S_Q(speed)}},
    {.name = "reps",
     .short_name = 'r',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1000,
             .help = "with --speed: runs per policy",
             .field = S_Q(reps)}},
    {.name = "json",
     .arg = NULL,
     .value = "1",
     .opt = {.type = ACTOR_OPT_BOOL, .help = "one JSON line per policy", .field = S_Q(json)}},
    {NULL},
};
#undef S_Q

static const cli_cmd_t s_kvq_cmd = {
    "kv-quality",
    "usage: strata kv-quality [-m MODEL] (-f FILE | --ids LIST) --kv-compress LIST [options]\n"
    "\n"
    "Runs --chunks slices of --ctx tokens of the text under the full KV cache and under\n"
    "each policy, as a worker would (the prompt in --ubatch chunks, then --step tokens\n"
    "at a time, compressing whenever the policy says), and compares the next-token\n"
    "distributions of the last --score tokens of each chunk with the full cache's.\n",
    "Prints per policy: KL(full || policy) in nats over the scored positions (mean,\n"
    "p99, max), the perplexity with the full cache and with the policy, how often the\n"
    "top token agrees, and the KV rows held when a token was scored (mean, of --ctx).",
    {{cli_model_flags, offsetof(s_kvq_cfg_t, m)},
     {cli_threads_flags, offsetof(s_kvq_cfg_t, m)},
     {s_kvq_flags, offsetof(s_kvq_cfg_t, q)},
     {cli_kv_flags, offsetof(s_kvq_cfg_t, kv)},
     {NULL}},
};

/* ---- one sequence under one policy */

typedef struct {
    cli_runner_t *r;
    kv_cache_t *kv;
    kv_seq_t seq;
    kv_compress_seq_t cs;
    int rows, n, n_prompt; /* KV rows held, positions run, prompt positions */
    int32_t *slot;         /* (ubatch) */
    const kv_kivi_t *kivi; /* KIVI (with no compression), or NULL */
    int sealed;            /* rows already rounded through it (whole blocks) */
} s_run_t;

static int s_run_start(s_run_t *u, cli_runner_t *r, kv_cache_t *kv, const kv_compress_t *p,
                       const kv_kivi_t *kivi, int n_prompt) {
    memset(u, 0, sizeof *u);
    u->r = r, u->kv = kv, u->n_prompt = n_prompt, u->kivi = kivi;
    const model_config_t *cfg = model_config(r->model);
    u->slot = malloc((size_t)r->ubatch * sizeof *u->slot);
    if (!u->slot)
        return -ENOMEM;
    return kv_compress_seq_init(&u->cs, p, cfg->n_layer * cfg->n_head_kv, r->max_ctx);
}

static void s_run_end(s_run_t *u) {
    kv_cache_release(u->kv, &u->seq);
    kv_compress_seq_free(&u->cs);
    free(u->slot);
}

/* One (layer, K|V, head) slab of block_size rows of the pool as floats (put: back). */
static void s_slab_rows(const kern_kv_pool_t *pool, uint8_t *slab, int D, float *buf, bool put) {
    for (int i = 0; i < pool->block_size * D; i++) {
        if (pool->type == KERN_F32) {
            if (put)
                memcpy(slab + 4 * (size_t)i, &buf[i], 4);
            else
                memcpy(&buf[i], slab + 4 * (size_t)i, 4);
        } else { /* KERN_F16 */
            kern_f16_t h;
            if (put) {
                h = kern_f32_to_f16(buf[i]);
                memcpy(slab + 2 * (size_t)i, &h, 2);
            } else {
                memcpy(&h, slab + 2 * (size_t)i, 2);
                buf[i] = kern_f16_to_f32(h);
            }
        }
    }
}

/* KIVI: every whole block older than the residual window is rounded through the
 * quantizer in place, once (keys per channel over the block, values per row). */
static void s_kivi_seal(s_run_t *u) {
    const kern_kv_pool_t *pool = kv_cache_pool(u->kv);
    const kern_kv_shape_t *sh = kv_cache_shape(u->kv);
    const int B = pool->block_size, D = sh->head_dim, H = sh->n_head_kv;
    const size_t slab = kern_kv_slab_bytes(pool->type, B, D);
    float buf[KV_MAX_BLOCK_TOKENS * 256];
    if ((size_t)B * D > sizeof buf / sizeof *buf)
        return;
    for (; u->sealed + B <= u->rows - u->kivi->residual; u->sealed += B) {
        uint8_t *blk = pool->base + (size_t)u->seq.blocks[u->sealed / B] * pool->block_bytes;
        for (int l = 0; l < sh->n_layer; l++)
            for (int h = 0; h < H; h++) {
                uint8_t *ks = blk + ((size_t)(l * 2 + 0) * H + h) * slab;
                uint8_t *vs = blk + ((size_t)(l * 2 + 1) * H + h) * slab;
                s_slab_rows(pool, ks, D, buf, false);
                kv_kivi_keys(buf, B, D, (size_t)D, u->kivi->bits);
                s_slab_rows(pool, ks, D, buf, true);
                s_slab_rows(pool, vs, D, buf, false);
                for (int r = 0; r < B; r++)
                    kv_kivi_values(buf + (size_t)r * D, D, u->kivi->v_group, u->kivi->bits);
                s_slab_rows(pool, vs, D, buf, true);
            }
    }
}

/* Run tokens[0..m) (m <= ubatch) at the next positions; logits of every one into out
 * (m, n_vocab) when out, else none.  Then compress if due.  0 or -errno. */
static int s_run_step(s_run_t *u, const int32_t *tokens, int m, float *out) {
    cli_runner_t *r = u->r;
    int rc = kv_cache_reserve(u->kv, &u->seq, u->rows, u->rows + m);
    if (rc)
        return rc;
    for (int j = 0; j < m; j++) {
        r->pos[j] = u->n + j;
        u->slot[j] = u->rows + j;
        r->want[j] = out != NULL;
    }
    int from;
    float *w = kv_compress_seq_weights(&u->cs, u->n_prompt, &from);
    model_seq_view_t sv = {u->seq.blocks, u->seq.n, w, u->cs.w_stride, from};
    model_batch_t b = {m, tokens, r->pos, r->seq, r->want, 1, &sv, u->slot};
    rc = model_ctx_forward(r->ctx, &b, &r->kv, out);
    if (rc < 0)
        return rc;
    u->rows += m, u->n += m;
    rc = kv_compress_run(&u->cs, u->kv, &u->seq, u->rows, u->n, u->n_prompt, u->n >= u->n_prompt);
    if (rc < 0)
        return rc;
    u->rows = rc;
    if (u->kivi)
        s_kivi_seal(u);
    return 0;
}

/* The prompt tokens[0..n_prompt), in ubatch chunks; the last one's logits into last (n_vocab)
 * when not NULL. */
static int s_run_prompt(s_run_t *u, const int32_t *tokens, float *last) {
    const int nv = model_config(u->r->model)->n_vocab;
    for (int i = 0; i < u->n_prompt; i += u->r->ubatch) {
        int m = u->n_prompt - i < u->r->ubatch ? u->n_prompt - i : u->r->ubatch;
        bool fin = i + m == u->n_prompt;
        int rc = s_run_step(u, tokens + i, m, fin && last ? u->r->logits : NULL);
        if (rc)
            return rc;
        if (fin && last)
            memcpy(last, u->r->logits + (size_t)(m - 1) * nv, (size_t)nv * sizeof *last);
    }
    return 0;
}

/* ---- the comparison */

typedef struct {
    kv_compress_t p;
    bool has_kivi; /* KIVI instead of a compression policy */
    kv_kivi_t kivi;
    char name[KV_COMPRESS_SPEC_MAX];
    double *kl; /* (n_scored) */
    double nll, rows;
    long same_top, n;
} s_pol_t;

/* log-softmax of x (n) into lp. */
static void s_log_softmax(const float *x, double *lp, int n) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, x[i]);
    for (int i = 0; i < n; i++)
        sum += exp(x[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        lp[i] = x[i] - lse;
}

static int s_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static int s_dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Scored positions of a chunk: P .. ctx-2 predict P+1 .. ctx-1 (P = ctx - score), each
 * computed after the prompt ran and compression had its say. */
static int s_chunk_logits(cli_runner_t *r, kv_cache_t *kv, const kv_compress_t *p,
                          const kv_kivi_t *kivi, const int32_t *chunk, const s_kvq_opts_t *o,
                          float *logits, double *rows_sum) {
    const int nv = model_config(r->model)->n_vocab, P = o->ctx - o->score;
    s_run_t u;
    int rc = s_run_start(&u, r, kv, p, kivi, P);
    if (!rc)
        rc = s_run_prompt(&u, chunk, NULL);
    for (int i = P; !rc && i < o->ctx - 1; i += o->step) {
        int m = o->ctx - 1 - i < o->step ? o->ctx - 1 - i : o->step;
        *rows_sum += (double)u.rows * m; /* rows held before this step's tokens joined */
        rc = s_run_step(&u, chunk + i, m, logits + (size_t)(i - P) * nv);
    }
    s_run_end(&u);
    return rc;
}

/* rows x nv logits to path, as strata logits writes them.  0 or -errno. */
static int s_write_logits(const char *path, const float *lg, int rows, int nv) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -errno;
    int32_t hdr[2] = {rows, nv};
    bool ok = fwrite(hdr, sizeof hdr, 1, f) == 1 &&
              fwrite(lg, sizeof *lg, (size_t)rows * nv, f) == (size_t)rows * nv;
    return fclose(f) == 0 && ok ? 0 : -EIO;
}

static int s_compare(s_kvq_cfg_t *c, cli_runner_t *r, kv_cache_t *kv, s_pol_t *pols, int np,
                     const int32_t *ids, int n_ids) {
    const s_kvq_opts_t *o = &c->q;
    const int nv = model_config(r->model)->n_vocab, ns = o->score - 1;
    int avail = n_ids / o->ctx - o->skip;
    int chunks = avail < o->chunks ? avail : o->chunks;
    if (chunks < 1) {
        fprintf(stderr,
                "strata kv-quality: the text has %d tokens: no chunk of %d after skipping %d\n",
                n_ids, o->ctx, o->skip);
        return 1;
    }
    float *full = malloc((size_t)ns * nv * sizeof *full), *mine = malloc((size_t)ns * nv * 4);
    double *lpf = malloc((size_t)nv * sizeof *lpf), *lpm = malloc((size_t)nv * sizeof *lpm);
    int32_t *chunk = malloc((size_t)o->ctx * sizeof *chunk);
    for (int k = 0; k < np; k++)
        pols[k].kl = malloc((size_t)chunks * ns * sizeof *pols[k].kl);
    bool ok = full && mine && lpf && lpm && chunk;
    for (int k = 0; ok && k < np; k++)
        ok = pols[k].kl != NULL;
    double full_nll = 0, full_rows = 0;
    const bool bos = !o->ids && model_tokenizer_bos(r->tok) >= 0 && model_tokenizer_add_bos(r->tok);
    int rc = ok ? 0 : -ENOMEM;
    for (int ch = 0; !rc && ch < chunks; ch++) {
        memcpy(chunk, ids + (size_t)(o->skip + ch) * o->ctx, (size_t)o->ctx * sizeof *chunk);
        if (bos)
            chunk[0] = model_tokenizer_bos(r->tok);
        kv_compress_t none = {0};
        rc = s_chunk_logits(r, kv, &none, NULL, chunk, o, full, &full_rows);
        for (int i = 0; !rc && i < ns; i++) {
            s_log_softmax(full + (size_t)i * nv, lpf, nv);
            full_nll -= lpf[chunk[o->ctx - o->score + 1 + i]];
        }
        for (int k = 0; !rc && k < np; k++) {
            s_pol_t *q = &pols[k];
            rc = s_chunk_logits(r, kv, &q->p, q->has_kivi ? &q->kivi : NULL, chunk, o, mine,
                                &q->rows);
            if (!rc && ch == 0 && k == 0 && o->lg_out)
                rc = s_write_logits(o->lg_out, mine, ns, nv);
            for (int i = 0; !rc && i < ns; i++) {
                const float *fx = full + (size_t)i * nv, *mx = mine + (size_t)i * nv;
                s_log_softmax(fx, lpf, nv);
                s_log_softmax(mx, lpm, nv);
                double kl = 0;
                for (int t = 0; t < nv; t++)
                    kl += exp(lpf[t]) * (lpf[t] - lpm[t]);
                q->kl[q->n++] = kl > 0 ? kl : 0;
                q->nll -= lpm[chunk[o->ctx - o->score + 1 + i]];
                q->same_top += s_argmax(fx, nv) == s_argmax(mx, nv);
            }
        }
        if (!o->json)
            fprintf(stderr, "strata kv-quality: chunk %d of %d done\n", ch + 1, chunks);
    }
    if (rc) {
        fprintf(stderr, "strata kv-quality: %s\n",
                rc == -ENOMEM ? "out of memory" : strerror(rc < 0 ? -rc : rc));
    } else {
        long n = (long)chunks * ns;
        if (!o->json)
            printf("%-28s %10s %10s %10s %9s %9s %8s %12s\n", "policy", "mean KL", "p99 KL",
                   "max KL", "ppl", "ppl full", "top-1", "rows (of ctx)");
        for (int k = 0; k < np; k++) {
            s_pol_t *q = &pols[k];
            double mean = 0;
            for (long i = 0; i < n; i++)
                mean += q->kl[i];
            mean /= (double)n;
            qsort(q->kl, (size_t)n, sizeof *q->kl, s_dcmp);
            double p99 = q->kl[(long)floor(0.99 * (double)(n - 1))], mx = q->kl[n - 1];
            double ppl = exp(q->nll / (double)n), pplf = exp(full_nll / (double)n);
            double rows = q->rows / (double)n;
            if (o->json)
                printf("{\"policy\":\"%s\",\"ctx\":%d,\"scored\":%ld,\"mean_kl\":%.6g,"
                       "\"p99_kl\":%.6g,\"max_kl\":%.6g,\"ppl\":%.6g,\"ppl_full\":%.6g,"
                       "\"top1\":%.6g,\"rows\":%.6g,\"rows_full\":%.6g}\n",
                       q->name, o->ctx, n, mean, p99, mx, ppl, pplf,
                       (double)q->same_top / (double)n, rows, full_rows / (double)n);
            else
                printf("%-28s %10.5f %10.5f %10.5f %9.4f %9.4f %8.4f %6.0f (%d)\n", q->name, mean,
                       p99, mx, ppl, pplf, (double)q->same_top / (double)n, rows, o->ctx);
        }
    }
    free(full), free(mine), free(lpf), free(lpm), free(chunk);
    for (int k = 0; k < np; k++)
        free(pols[k].kl);
    return rc ? 1 : 0;
}

/* --generate: the prompt, then N greedy tokens, under the full cache and each policy. */
static int s_generate(s_kvq_cfg_t *c, cli_runner_t *r, kv_cache_t *kv, s_pol_t *pols, int np,
                      const int32_t *ids, int n_ids) {
    const int nv = model_config(r->model)->n_vocab, N = c->q.generate;
    float *lg = malloc((size_t)nv * sizeof *lg);
    int32_t *out = malloc((size_t)N * sizeof *out);
    if (!lg || !out) {
        free(lg), free(out);
        fprintf(stderr, "strata kv-quality: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int k = -1; !rc && k < np; k++) {
        kv_compress_t none = {0};
        s_run_t u;
        rc = s_run_start(&u, r, kv, k < 0 ? &none : &pols[k].p,
                         k >= 0 && pols[k].has_kivi ? &pols[k].kivi : NULL, n_ids);
        if (!rc)
            rc = s_run_prompt(&u, ids, lg);
        int n = 0;
        while (!rc && n < N) {
            int32_t t = s_argmax(lg, nv);
            if (model_tokenizer_is_eog(r->tok, t))
                break; /* as the service: the end-of-generation token is not output */
            out[n++] = t;
            if (n == N)
                break;
            rc = s_run_step(&u, &t, 1, lg);
        }
        if (!rc) {
            char *text = model_tokenizer_decode(r->tok, out, n);
            printf("{\"policy\":\"%s\",\"text\":\"", k < 0 ? "none" : pols[k].name);
            for (const char *p = text ? text : ""; *p; p++) {
                unsigned char ch = (unsigned char)*p;
                if (ch == '"' || ch == '\\')
                    printf("\\%c", ch);
                else if (ch < 0x20)
                    printf("\\u%04x", ch);
                else
                    putchar(ch);
            }
            printf("\",\"tokens\":[");
            for (int i = 0; i < n; i++)
                printf(i ? ",%d" : "%d", out[i]);
            printf("],\"rows\":%d,\"positions\":%d}\n", u.rows, u.n);
            free(text);
        }
        s_run_end(&u);
    }
    if (rc)
        fprintf(stderr, "strata kv-quality: %s\n", strerror(-rc));
    free(lg), free(out);
    return rc ? 1 : 0;
}

/* --speed: decode tokens/s after --ctx tokens, under the full cache and each policy. */
static int s_speed(s_kvq_cfg_t *c, cli_runner_t *r, kv_cache_t *kv, s_pol_t *pols, int np,
                   const int32_t *ids, int n_ids) {
    const s_kvq_opts_t *o = &c->q;
    const int nv = model_config(r->model)->n_vocab, N = o->speed;
    if (n_ids < o->ctx) {
        fprintf(stderr, "strata kv-quality: the text has %d tokens, fewer than --ctx %d\n", n_ids,
                o->ctx);
        return 1;
    }
    float *lg = malloc((size_t)nv * sizeof *lg);
    double *tg = malloc((size_t)o->reps * sizeof *tg);
    int rc = lg && tg ? 0 : -ENOMEM;
    if (!o->json && !rc)
        printf("%-28s %8s %10s %10s %10s %12s\n", "policy", "depth", "tok/s", "min", "max",
               "rows held");
    for (int k = -1; !rc && k < np; k++) {
        kv_compress_t none = {0};
        int rows = 0;
        for (int rep = 0; !rc && rep < o->reps; rep++) {
            s_run_t u;
            rc = s_run_start(&u, r, kv, k < 0 ? &none : &pols[k].p,
                             k >= 0 && pols[k].has_kivi ? &pols[k].kivi : NULL, o->ctx);
            if (!rc)
                rc = s_run_prompt(&u, ids, lg);
            double t0 = cli_now();
            for (int i = 0; !rc && i < N; i++) {
                int32_t t = s_argmax(lg, nv);
                rc = s_run_step(&u, &t, 1, lg);
            }
            tg[rep] = N / (cli_now() - t0);
            rows = u.rows;
            s_run_end(&u);
        }
        if (rc)
            break;
        qsort(tg, (size_t)o->reps, sizeof *tg, s_dcmp);
        const char *name = k < 0 ? "none" : pols[k].name;
        double med = o->reps % 2 ? tg[o->reps / 2] : (tg[o->reps / 2 - 1] + tg[o->reps / 2]) / 2;
        if (o->json)
            printf("{\"policy\":\"%s\",\"depth\":%d,\"tokens\":%d,\"runs\":%d,"
                   "\"tg_median\":%.4g,\"tg_min\":%.4g,\"tg_max\":%.4g,\"rows\":%d}\n",
                   name, o->ctx, N, o->reps, med, tg[0], tg[o->reps - 1], rows);
        else
            printf("%-28s %8d %10.2f %10.2f %10.2f %12d\n", name, o->ctx, med, tg[0],
                   tg[o->reps - 1], rows);
        fflush(stdout);
    }
    if (rc)
        fprintf(stderr, "strata kv-quality: %s\n", strerror(-rc));
    free(lg), free(tg);
    return rc ? 1 : 0;
}

/* Parse the ';'-separated list into pols.  The count, or -1 after a message. */
static int s_policies(const char *list, s_pol_t *pols) {
    int np = 0;
    char buf[1024];
    if (!list || strlen(list) >= sizeof buf)
        return list ? (fprintf(stderr, "strata kv-quality: --kv-compress list too long\n"), -1) : 0;
    strcpy(buf, list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
        char err[200];
        while (*t == ' ')
            t++;
        if (!*t)
            continue;
        if (np == S_MAX_POLICIES) {
            fprintf(stderr, "strata kv-quality: at most %d policies\n", S_MAX_POLICIES);
            return -1;
        }
        s_pol_t *q = &pols[np];
        memset(q, 0, sizeof *q);
        if (!strncmp(t, "kivi", 4)) { /* KV quantization in place of a compression policy */
            if (kv_kivi_parse(t, &q->kivi, err, sizeof err)) {
                fprintf(stderr, "strata kv-quality: bad value for --kv-compress: %s\n", err);
                return -1;
            }
            q->has_kivi = true;
            kv_kivi_format(&q->kivi, q->name, sizeof q->name);
            np++;
            continue;
        }
        if (kv_compress_parse(t, &q->p, err, sizeof err)) {
            fprintf(stderr, "strata kv-quality: bad value for --kv-compress: %s\n", err);
            return -1;
        }
        kv_compress_format(&q->p, q->name, sizeof q->name);
        np++;
    }
    return np;
}

/* The token ids to run: --ids as given, or -f's text tokenized (with --generate, with the
 * BOS the model asks for).  NULL after a message. */
static int32_t *s_load_ids(const s_kvq_opts_t *o, cli_runner_t *r, const char *text, size_t len,
                           int *n_out) {
    const int n_vocab = model_config(r->model)->n_vocab;
    int n = 0;
    int32_t *ids = NULL;
    if (o->ids) {
        ids = cli_parse_ids(o->ids, &n);
        for (int i = 0; ids && i < n; i++)
            if (ids[i] < 0 || ids[i] >= n_vocab) {
                free(ids);
                ids = NULL;
            }
        if (!ids || n < 1) {
            free(ids);
            fprintf(stderr, "strata kv-quality: bad value for --ids: token ids below %d\n",
                    n_vocab);
            return NULL;
        }
    } else {
        bool bos =
            o->generate && model_tokenizer_bos(r->tok) >= 0 && model_tokenizer_add_bos(r->tok);
        n = model_tokenizer_encode(r->tok, text, len, bos, false, NULL, 0);
        ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        if (!ids || model_tokenizer_encode(r->tok, text, len, bos, false, ids, n) != n) {
            free(ids);
            fprintf(stderr, "strata kv-quality: cannot tokenize '%s'\n", o->file);
            return NULL;
        }
    }
    *n_out = n;
    return ids;
}

int cmd_kv_quality(int argc, char **argv) {
    s_kvq_cfg_t c;
    memset(&c, 0, sizeof c);
    cli_model_opts_default(&c.m);
    cli_kv_opts_default(&c.kv);
    c.q.ctx = 2048, c.q.score = 256, c.q.chunks = 1, c.q.ubatch = 512, c.q.step = 16;
    c.q.reps = 5;
    int next, rc = cli_flags_parse(&s_kvq_cmd, argc, argv, &c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (next < argc) {
        fprintf(stderr, "strata kv-quality: unexpected argument '%s' (see --help)\n", argv[next]);
        return 2;
    }
    if (!c.q.file == !c.q.ids) {
        fprintf(stderr, "strata kv-quality: give -f FILE or --ids LIST (see --help)\n");
        return 2;
    }
    s_pol_t pols[S_MAX_POLICIES];
    int np = s_policies(c.q.policies, pols);
    if (np < 0)
        return 2;
    if (np == 0 && !c.q.generate && !c.q.speed) {
        fprintf(stderr, "strata kv-quality: --kv-compress names no policy to compare\n");
        return 2;
    }
    if (c.q.score >= c.q.ctx) {
        fprintf(stderr, "strata kv-quality: --score %d leaves no prompt in --ctx %d\n", c.q.score,
                c.q.ctx);
        return 2;
    }
    size_t len = 0;
    char *text = c.q.file ? cli_read_file(c.q.file, &len) : NULL;
    if (c.q.file && !text) {
        fprintf(stderr, "strata kv-quality: cannot read '%s'\n", c.q.file);
        return 1;
    }
    cli_runner_t r;
    if (!cli_runner_open(&r, "kv-quality", c.m.model)) {
        free(text);
        return 1;
    }
    const model_config_t *cfg = model_config(r.model);
    rc = 1;
    int n_ids = 0;
    int32_t *ids = s_load_ids(&c.q, &r, text, len, &n_ids);
    if (!ids)
        goto out;
    if (cfg->swa_window > 0 && np > 0) {
        fprintf(stderr, "strata kv-quality: this model has sliding-window layers; KV "
                        "compression runs on full-attention models only\n");
        goto out;
    }
    int max_ctx = c.q.generate ? n_ids + c.q.generate : c.q.ctx + c.q.speed;
    for (int k = 0; k < np; k++)
        if (pols[k].has_kivi && c.kv.kv_fmt == KV_FMT_I8) {
            fprintf(stderr, "strata kv-quality: %s rounds F32 or F16 KV (--kv-type f32|f16)\n",
                    pols[k].name);
            goto out;
        }
    kern_type_t kv_type = (kern_type_t)kv_fmt_pool_type(c.kv.kv_fmt);
    int ub = c.q.ubatch > c.q.step ? c.q.ubatch : c.q.step;
    if (!cli_runner_reserve(&r, "kv-quality", max_ctx, ub, c.m.threads, kv_type))
        goto out;
    kern_kv_shape_t shape = model_kv_shape(cfg, r.kv.block_size);
    kv_cache_config_t kc = {c.kv.kv_fmt,   r.kv.block_size, r.kv.n_blocks + 1,
                            KV_POLICY_LRU, false,           NULL};
    kv_cache_t *kv = kv_cache_new(&shape, &kc);
    if (!kv) {
        fprintf(stderr, "strata kv-quality: cannot allocate the KV cache\n");
        goto out;
    }
    /* the sequences live in the cache's pool (compaction moves rows there), not in the
     * runner's identity-mapped one */
    kern_kv_pool_free(&r.kv);
    r.kv = *kv_cache_pool(kv);
    rc = c.q.generate ? s_generate(&c, &r, kv, pols, np, ids, n_ids)
         : c.q.speed  ? s_speed(&c, &r, kv, pols, np, ids, n_ids)
                      : s_compare(&c, &r, kv, pols, np, ids, n_ids);
    memset(&r.kv, 0, sizeof r.kv);
    kv_cache_destroy(&kv);
out:
    free(ids);
    free(text);
    cli_runner_close(&r);
    return rc;
}
