/* cli.c - shared helpers for the strata subcommands. */
#include "cli.h"

#include "base_clock.h"
#include "model_gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *cli_default_model(void) {
    static char buf[4096];
    const char *e = getenv("STRATA_MODEL");
    if (e && *e)
        return e;
    char dir[3072];
    snprintf(buf, sizeof buf, "%s/%s", model_gguf_cache_dir(dir, sizeof dir),
             CLI_DEFAULT_MODEL_FILE);
    return buf;
}

int cli_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

double cli_now(void) {
    return (double)base_now_ns() * 1e-9;
}

bool cli_int(const char *cmd, const char *opt, const char *val, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || errno || end == val || *end || v < lo || v > hi) {
        fprintf(stderr, "strata %s: bad value for %s: '%s' (expected an integer in %ld..%ld)\n",
                cmd, opt, val ? val : "", lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *cmd, const char *opt, const char *val, double lo, double hi,
               double *out) {
    char *end;
    errno = 0;
    double v = val ? strtod(val, &end) : 0;
    if (!val || errno || end == val || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "strata %s: bad value for %s: '%s' (expected a number in %g..%g)\n", cmd,
                opt, val ? val : "", lo, hi);
        return false;
    }
    *out = v;
    return true;
}

int32_t *cli_parse_ids(const char *s, int *n) {
    size_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    const char *p = s;
    while (ids) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t')
            p++;
        if (!*p)
            return ids;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX)
            break;
        if ((size_t)*n == cap) {
            int32_t *g = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!g)
                break;
            ids = g;
        }
        ids[(*n)++] = (int32_t)v;
        p = end;
    }
    free(ids);
    return NULL;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *g = realloc(buf, cap *= 2);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    bool err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!buf || err) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

bool cli_runner_open(cli_runner_t *r, const char *cmd, const char *path) {
    memset(r, 0, sizeof *r);
    char err[512];
    r->model = model_load(path, err, sizeof err);
    if (!r->model) {
        fprintf(stderr, "strata %s: %s\n", cmd, err);
        return false;
    }
    r->tok = model_tokenizer_new(model_file(r->model), err, sizeof err);
    if (!r->tok) {
        fprintf(stderr, "strata %s: %s\n", cmd, err);
        cli_runner_close(r);
        return false;
    }
    return true;
}

static void s_runner_release(cli_runner_t *r) {
    model_ctx_destroy(&r->ctx);
    kern_kv_pool_free(&r->kv);
    free(r->blocks);
    free(r->logits);
    free(r->pos);
    free(r->seq);
    free(r->want);
    r->blocks = NULL;
    r->logits = NULL;
    r->pos = r->seq = NULL;
    r->want = NULL;
}

bool cli_runner_reserve(cli_runner_t *r, const char *cmd, int max_ctx, int ubatch, int threads,
                        kern_type_t kv_type) {
    s_runner_release(r);
    const model_config_t *cfg = model_config(r->model);
    const int bs = 16;
    r->max_ctx = (max_ctx + bs - 1) / bs * bs;
    r->ubatch = ubatch < r->max_ctx ? ubatch : r->max_ctx;
    int nb = r->max_ctx / bs;
    kern_kv_shape_t shape = model_kv_shape(cfg, bs);
    if (kern_kv_pool_init(&r->kv, &shape, kv_type, nb)) {
        fprintf(stderr, "strata %s: cannot allocate KV for %d positions\n", cmd, r->max_ctx);
        goto fail;
    }
    r->blocks = malloc((size_t)nb * sizeof *r->blocks);
    r->logits = malloc((size_t)r->ubatch * cfg->n_vocab * sizeof(float));
    r->ctx = model_ctx_new(r->model, r->ubatch, r->max_ctx, threads, NULL);
    r->pos = malloc((size_t)r->ubatch * sizeof *r->pos);
    r->seq = calloc((size_t)r->ubatch, sizeof *r->seq);
    r->want = malloc((size_t)r->ubatch * sizeof *r->want);
    if (!r->blocks || !r->logits || !r->ctx || !r->pos || !r->seq || !r->want) {
        fprintf(stderr, "strata %s: out of memory\n", cmd);
        goto fail;
    }
    for (int i = 0; i < nb; i++)
        r->blocks[i] = i;
    return true;
fail:
    s_runner_release(r);
    return false;
}

void cli_runner_close(cli_runner_t *r) {
    s_runner_release(r);
    model_tokenizer_destroy(&r->tok);
    model_destroy(&r->model);
    memset(r, 0, sizeof *r);
}

int cli_runner_eval(cli_runner_t *r, const int32_t *tokens, int n, int pos0, bool all_logits,
                    float *out) {
    int nv = model_config(r->model)->n_vocab;
    if (pos0 < 0 || n < 1 || pos0 + n > r->max_ctx)
        return -EINVAL;
    model_seq_view_t sv = {r->blocks, r->kv.n_blocks, NULL, 0, 0};
    for (int i = 0; i < n; i += r->ubatch) {
        int m = n - i < r->ubatch ? n - i : r->ubatch;
        bool last = i + m == n;
        for (int j = 0; j < m; j++) {
            r->pos[j] = pos0 + i + j;
            r->want[j] = all_logits || (last && j == m - 1);
        }
        model_batch_t b = {m, tokens + i, r->pos, r->seq, r->want, 1, &sv, NULL};
        float *dst = all_logits ? out + (size_t)i * nv : (last ? out : r->logits);
        int got = model_ctx_forward(r->ctx, &b, &r->kv, dst);
        if (got < 0)
            return got;
    }
    return 0;
}
