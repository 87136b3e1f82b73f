/* kv_compress.c - the in-sequence KV policies: parsing, budgets, and the rows each
 * (layer, KV head) keeps (kv_compress.h). */
#include "kv_compress.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_kind_names[] = {"none", "window", "h2o", "snapkv"};

static int s_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* A whole decimal int in [lo, hi] from s[0..n). */
static bool s_int(const char *s, size_t n, int lo, int hi, int *out) {
    if (n == 0 || n > 10)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* BUDGET: "N" rows or "P%" (0 < P < 100, up to 3 decimals). */
static bool s_budget(const char *s, size_t n, kv_compress_t *c) {
    if (n > 1 && s[n - 1] == '%') {
        char buf[16];
        if (n - 1 >= sizeof buf)
            return false;
        memcpy(buf, s, n - 1);
        buf[n - 1] = 0;
        char *end;
        double p = strtod(buf, &end);
        if (*end || !(p > 0 && p < 100) || buf[0] < '0' || buf[0] > '9')
            return false;
        c->frac = (float)(p / 100);
        c->budget = 0;
        return true;
    }
    c->frac = 0;
    return s_int(s, n, 1, 1 << 24, &c->budget);
}

int kv_compress_parse(const char *spec, kv_compress_t *out, char *err, size_t errlen) {
    if (!spec || !out)
        return s_err(err, errlen, "no KV compression spec");
    kv_compress_t c = {0};
    if (!strcmp(spec, "none")) {
        *out = c;
        return 0;
    }
    const char *colon = strchr(spec, ':');
    size_t kn = colon ? (size_t)(colon - spec) : strlen(spec);
    for (int k = KV_COMPRESS_WINDOW; k <= KV_COMPRESS_SNAPKV; k++)
        if (strlen(s_kind_names[k]) == kn && !strncmp(spec, s_kind_names[k], kn))
            c.kind = (kv_compress_kind_t)k;
    if (c.kind == KV_COMPRESS_NONE)
        return s_err(err, errlen,
                     "'%.40s': the KV compression is none, window:BUDGET, h2o:BUDGET or "
                     "snapkv:BUDGET",
                     spec);
    if (!colon)
        return s_err(err, errlen, "'%.40s': give a budget (rows, or a percentage: %s:25%%)", spec,
                     s_kind_names[c.kind]);
    c.n_sink = c.kind == KV_COMPRESS_WINDOW ? 4 : 0;
    c.recent = c.kind == KV_COMPRESS_SNAPKV ? 32 : 0;
    c.pool = c.kind == KV_COMPRESS_SNAPKV ? 7 : 1;
    const char *p = colon + 1;
    for (int field = 0; *p || field == 0; field++) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (field == 0) {
            if (!s_budget(p, n, &c))
                return s_err(err, errlen,
                             "'%.*s': the budget is a number of rows (1 or more) or a "
                             "percentage above 0 and below 100",
                             (int)n, p);
        } else {
            const char *eq = memchr(p, '=', n);
            size_t kl = eq ? (size_t)(eq - p) : n, vl = eq ? n - kl - 1 : 0;
            int *dst = NULL, lo = 0;
            if (eq && kl == 4 && !strncmp(p, "sink", 4) && c.kind != KV_COMPRESS_SNAPKV)
                dst = &c.n_sink;
            else if (eq && kl == 6 && !strncmp(p, "recent", 6) && c.kind != KV_COMPRESS_WINDOW)
                dst = &c.recent, lo = 1;
            else if (eq && kl == 4 && !strncmp(p, "pool", 4) && c.kind == KV_COMPRESS_SNAPKV)
                dst = &c.pool, lo = 1;
            if (!dst)
                return s_err(err, errlen, "'%.*s': %s takes %s", (int)n, p, s_kind_names[c.kind],
                             c.kind == KV_COMPRESS_WINDOW ? "sink=N"
                             : c.kind == KV_COMPRESS_H2O  ? "sink=N and recent=N"
                                                          : "recent=N and pool=N (odd)");
            if (!s_int(eq + 1, vl, lo, 1 << 20, dst) || (dst == &c.pool && c.pool % 2 == 0))
                return s_err(err, errlen, "'%.*s': not a valid value", (int)n, p);
        }
        if (!e)
            break;
        p = e + 1;
    }
    if (c.budget && c.budget <= c.n_sink)
        return s_err(err, errlen, "budget %d does not leave room past %d sinks", c.budget,
                     c.n_sink);
    *out = c;
    return 0;
}

int kv_compress_valid(const char *spec) {
    kv_compress_t c;
    return kv_compress_parse(spec, &c, NULL, 0);
}

void kv_compress_format(const kv_compress_t *c, char *buf, size_t len) {
    if (!c || c->kind == KV_COMPRESS_NONE || c->kind > KV_COMPRESS_SNAPKV) {
        snprintf(buf, len, "none");
        return;
    }
    char b[24];
    if (c->budget)
        snprintf(b, sizeof b, "%d", c->budget);
    else
        snprintf(b, sizeof b, "%g%%", (double)c->frac * 100);
    int n = snprintf(buf, len, "%s:%s", s_kind_names[c->kind], b);
    if (n < 0 || (size_t)n >= len)
        return;
    if (c->kind != KV_COMPRESS_SNAPKV && c->n_sink != (c->kind == KV_COMPRESS_WINDOW ? 4 : 0))
        n += snprintf(buf + n, len - (size_t)n, ",sink=%d", c->n_sink);
    if ((size_t)n < len && c->kind != KV_COMPRESS_WINDOW &&
        c->recent != (c->kind == KV_COMPRESS_SNAPKV ? 32 : 0))
        n += snprintf(buf + n, len - (size_t)n, ",recent=%d", c->recent);
    if ((size_t)n < len && c->kind == KV_COMPRESS_SNAPKV && c->pool != 7)
        snprintf(buf + n, len - (size_t)n, ",pool=%d", c->pool);
}

int kv_compress_budget(const kv_compress_t *c, int n) {
    if (!c || c->kind == KV_COMPRESS_NONE || n <= 0)
        return n > 0 ? n : 0;
    long b = c->budget ? c->budget : (long)ceil((double)c->frac * n);
    return b < n ? (int)b : n;
}

bool kv_compress_wants_weights(const kv_compress_t *c) {
    return c && (c->kind == KV_COMPRESS_H2O || c->kind == KV_COMPRESS_SNAPKV);
}

int kv_compress_cached_max(const kv_compress_t *c, int n_prompt) {
    if (!c || c->kind == KV_COMPRESS_NONE || c->kind == KV_COMPRESS_WINDOW)
        return n_prompt;
    if (c->kind == KV_COMPRESS_H2O)
        return 0;
    return n_prompt > c->recent ? n_prompt - c->recent : 0;
}

int kv_compress_weights_from(const kv_compress_t *c, int n_prompt) {
    if (!kv_compress_wants_weights(c))
        return -1;
    if (c->kind == KV_COMPRESS_H2O)
        return 0;
    return n_prompt > c->recent ? n_prompt - c->recent : 0;
}

int kv_compress_target(const kv_compress_t *c, int rows, int n, int n_prompt, bool prefill_done,
                       int slack) {
    if (!c || c->kind == KV_COMPRESS_NONE)
        return rows;
    if (c->kind == KV_COMPRESS_SNAPKV) {
        int b = kv_compress_budget(c, n_prompt);
        return prefill_done && rows == n_prompt && rows > b ? b : rows;
    }
    int b = kv_compress_budget(c, n);
    if (rows <= b || !prefill_done)
        return rows; /* the prompt runs whole first (as in H2O), whatever its chunks */
    /* hold at most b rows, compacting once per `slack` new rows */
    int t = b - (slack > 1 ? slack - 1 : 0);
    int lo = c->n_sink + 1;
    return t > lo ? t : b > lo ? lo : b;
}

size_t kv_compress_tmp_bytes(int rows) {
    return rows > 0 ? (size_t)rows * (2 * sizeof(float) + sizeof(int32_t) + 1) : 1;
}

typedef struct {
    float w;
    int32_t row;
} s_cand_t;

/* Larger weight first; equal weights: the earlier row. */
static int s_cand_cmp(const void *a, const void *b) {
    const s_cand_t *x = a, *y = b;
    if (x->w != y->w)
        return x->w > y->w ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* Group g: mark the k rows of [lo, hi) with the largest score (w pooled over `pool`). */
static void s_top(const float *w, int lo, int hi, int k, int pool, s_cand_t *cand, float *pooled,
                  unsigned char *mark) {
    if (k <= 0 || hi <= lo)
        return;
    const int half = pool / 2;
    for (int r = lo; r < hi; r++) {
        float m = w[r];
        for (int j = r - half; j <= r + half; j++)
            if (j >= lo && j < hi && w[j] > m)
                m = w[j];
        pooled[r] = m;
    }
    int n = 0;
    for (int r = lo; r < hi; r++)
        cand[n++] = (s_cand_t){pooled[r], r};
    qsort(cand, (size_t)n, sizeof *cand, s_cand_cmp);
    for (int i = 0; i < k && i < n; i++)
        mark[cand[i].row] = 1;
}

int kv_compress_select(const kv_compress_t *c, int n_groups, int rows, int keep,
                       const float *weights, int w_stride, int32_t *keep_rows, void *tmp) {
    if (!c || c->kind == KV_COMPRESS_NONE || n_groups < 1 || rows < 1 || keep < 1 || keep > rows ||
        !keep_rows || !tmp || (kv_compress_wants_weights(c) && (!weights || w_stride < rows)))
        return -EINVAL;
    s_cand_t *cand = tmp;
    float *pooled = (float *)(cand + rows);
    unsigned char *mark = (unsigned char *)(pooled + rows);
    for (int g = 0; g < n_groups; g++) {
        memset(mark, 0, (size_t)rows);
        int sink = c->kind == KV_COMPRESS_SNAPKV ? 0 : c->n_sink;
        if (sink > keep)
            sink = keep;
        int recent; /* rows kept at the end */
        if (c->kind == KV_COMPRESS_WINDOW)
            recent = keep - sink;
        else if (c->kind == KV_COMPRESS_H2O)
            recent = c->recent ? c->recent : keep / 2;
        else
            recent = c->recent;
        if (recent > keep - sink)
            recent = keep - sink;
        for (int r = 0; r < sink; r++)
            mark[r] = 1;
        for (int r = rows - recent; r < rows; r++)
            mark[r] = 1;
        if (c->kind != KV_COMPRESS_WINDOW)
            s_top(weights + (size_t)g * w_stride, sink, rows - recent, keep - sink - recent,
                  c->kind == KV_COMPRESS_SNAPKV ? c->pool : 1, cand, pooled, mark);
        int32_t *out = keep_rows + (size_t)g * keep;
        int n = 0;
        for (int r = 0; r < rows && n < keep; r++)
            if (mark[r])
                out[n++] = r;
        if (n != keep)
            return -EINVAL; /* cannot happen: sink + recent + top == keep */
    }
    return 0;
}

void kv_compress_move_weights(float *weights, int w_stride, int n_groups, int keep,
                              const int32_t *keep_rows, int rows) {
    (void)rows;
    for (int g = 0; g < n_groups; g++) {
        float *w = weights + (size_t)g * w_stride;
        const int32_t *k = keep_rows + (size_t)g * keep;
        for (int i = 0; i < keep; i++)
            w[i] = w[k[i]]; /* k[i] >= i: forward order never reads a moved value */
        memset(w + keep, 0, (size_t)(w_stride - keep) * sizeof *w);
    }
}

/* ---- a sequence under a policy */

int kv_compress_seq_init(kv_compress_seq_t *cs, const kv_compress_t *policy, int n_groups,
                         int max_rows) {
    memset(cs, 0, sizeof *cs);
    cs->policy = *policy;
    cs->n_groups = n_groups;
    cs->w_stride = max_rows;
    if (kv_compress_wants_weights(policy) &&
        !(cs->weights = calloc((size_t)n_groups * (size_t)max_rows, sizeof *cs->weights)))
        return -ENOMEM;
    return 0;
}

void kv_compress_seq_free(kv_compress_seq_t *cs) {
    free(cs->weights);
    memset(cs, 0, sizeof *cs);
}

void kv_compress_seq_reset(kv_compress_seq_t *cs) {
    if (cs->weights)
        memset(cs->weights, 0, (size_t)cs->n_groups * cs->w_stride * sizeof *cs->weights);
    cs->snapped = false;
}

float *kv_compress_seq_weights(const kv_compress_seq_t *cs, int n_prompt, int *from) {
    *from = 0;
    if (!cs->weights || (cs->policy.kind == KV_COMPRESS_SNAPKV && cs->snapped))
        return NULL; /* snapkv ranks the prompt once */
    *from = kv_compress_weights_from(&cs->policy, n_prompt);
    return cs->weights;
}

int kv_compress_run(kv_compress_seq_t *cs, kv_cache_t *kv, kv_seq_t *seq, int rows, int n,
                    int n_prompt, bool prefill_done) {
    if (cs->policy.kind == KV_COMPRESS_SNAPKV && cs->snapped)
        return rows;
    int keep =
        kv_compress_target(&cs->policy, rows, n, n_prompt, prefill_done, kv_cache_block_size(kv));
    if (cs->policy.kind == KV_COMPRESS_SNAPKV && prefill_done)
        cs->snapped = true; /* due now or never */
    if (keep >= rows)
        return rows;
    if (rows > cs->w_stride && cs->weights)
        return -EINVAL;
    int32_t *keep_rows = malloc((size_t)cs->n_groups * keep * sizeof *keep_rows);
    void *tmp = malloc(kv_compress_tmp_bytes(rows));
    int rc = keep_rows && tmp ? 0 : -ENOMEM;
    if (!rc)
        rc = kv_compress_select(&cs->policy, cs->n_groups, rows, keep, cs->weights, cs->w_stride,
                                keep_rows, tmp);
    if (!rc)
        rc = kv_cache_compact(kv, seq, rows, keep, keep_rows);
    if (!rc && cs->weights)
        kv_compress_move_weights(cs->weights, cs->w_stride, cs->n_groups, keep, keep_rows, rows);
    free(keep_rows);
    free(tmp);
    if (rc)
        return rc;
    cs->compactions++;
    cs->dropped += rows - keep;
    return keep;
}
