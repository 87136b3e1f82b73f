/* serve_prom.c - see serve_prom.h.  A counter's name is "<actor>.<rest>": the actor (its
 * digits dropped) and the rest make the family, the actor a label; "_us" / "_ms" become
 * seconds; the counters that go up and down are gauges by the patterns of s_gauges; a
 * triple <base>.count, <base>.sum, <base>.bucket.le_<B> is a histogram. */
#include "serve_prom.h"

#include "base_buf.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The exposition so far; out of memory once: everything after is dropped. */
typedef struct {
    base_buf_t buf;
    bool failed;
} s_buf_t;

static void __attribute__((format(printf, 2, 3))) s_printf(s_buf_t *b, const char *fmt, ...) {
    if (b->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    b->failed = base_buf_vprintf(&b->buf, fmt, ap) != 0;
    va_end(ap);
}

enum { S_COUNTER, S_GAUGE, S_HISTOGRAM };
static const char *const s_type_name[] = {"counter", "gauge", "histogram"};
enum { S_PLAIN, S_BUCKET, S_COUNT, S_SUM }; /* sample order inside a histogram */

/* Counters that go up and down, by the name after the actor ("worker0." stripped):
 * fnmatch patterns, '*' matching dots too. */
static const char *const s_gauges[] = {
    "running",
    "waiting",
    "*.running",
    "*.waiting",
    "*.active",
    "load.*",
    "alive.*",
    "*free_blocks",
    "*total_blocks",
    "*blocks_used",
    "*blocks_cached",
    "*blocks_free",
    "t[0-9].blocks",
    "t[0-9].bytes",
    "*.t[0-9].bytes",
    "*.t[0-9].blocks",
    "last.*",
    /* MoE (docs/MOE.md): the expert actors' and the router's dispatch table */
    "hosted",
    "table.version",
    "moe.table.version",
    "moe.alive.*",
    "moe.hosted.*",
    "moe.backlog.*",
    "moe.replicas.*",
    "moe.capacity_permille.*",
    "moe.load_rows_per_s.*",
    /* the answer cache (docs/SEMCACHE.md) */
    "entries",
    "ann.entries",
    "loaded",
    "observations",
    "observations.different",
    "threshold.milli",
};

/* One sample to write. */
typedef struct {
    char family[160];  /* "strata_worker_kv_free_blocks" */
    char help[128];    /* "worker<N>.kv.free_blocks": what it came from */
    const char *actor; /* the label (borrowed from the counter's name); "" for none */
    int actor_len;     /* bytes of actor */
    int type, part;    /* S_COUNTER..., S_PLAIN... */
    int64_t le;        /* S_BUCKET: the bound, in the counter's unit */
    int scale;         /* the unit: value / 10^scale is the exported value */
    int64_t value;
} s_rec_t;

static int s_cmp_name(const void *a, const void *b) {
    return strcmp((*(const msg_counter_t *const *)a)->name,
                  (*(const msg_counter_t *const *)b)->name);
}

/* Is there a counter called name (exact), or starting with name (prefix)? */
static bool s_has(const msg_counter_t **sorted, int n, const char *name, bool prefix) {
    size_t len = strlen(name);
    int lo = 0, hi = n; /* the first name >= name */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(sorted[mid]->name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n)
        return false;
    return prefix ? !strncmp(sorted[lo]->name, name, len) : !strcmp(sorted[lo]->name, name);
}

/* base.count, base.sum and one base.bucket.le_B are all there. */
static bool s_is_hist(const msg_counter_t **sorted, int n, const char *base, size_t base_len) {
    char key[MSG_MAX_COUNTER_NAME_BYTES + 16];
    if (base_len + 13 >= sizeof key)
        return false;
    memcpy(key, base, base_len);
    strcpy(key + base_len, ".count");
    if (!s_has(sorted, n, key, false))
        return false;
    strcpy(key + base_len, ".sum");
    if (!s_has(sorted, n, key, false))
        return false;
    strcpy(key + base_len, ".bucket.le_");
    return s_has(sorted, n, key, true);
}

/* Append src[0..len) to dst (capacity cap, NUL-terminated) with every character that is
 * not [a-zA-Z0-9_] as '_'. */
static void s_sanitize_cat(char *dst, size_t cap, const char *src, size_t len) {
    size_t k = strlen(dst);
    for (size_t i = 0; i < len && k + 1 < cap; i++) {
        char c = src[i];
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        dst[k++] = ok ? c : '_';
    }
    dst[k] = 0;
}

static bool s_ends(const char *s, size_t len, const char *suffix) {
    size_t n = strlen(suffix);
    return len >= n && !memcmp(s + len - n, suffix, n);
}

/* Fill r from counter c, of which the first base_len bytes name a histogram (part
 * S_BUCKET/S_SUM/S_COUNT) or the whole name a plain counter (base_len = its length). */
static void s_rec(s_rec_t *r, const msg_counter_t *c, size_t base_len, int part, int64_t le) {
    const char *name = c->name, *dot = memchr(name, '.', base_len);
    memset(r, 0, sizeof *r);
    r->part = part;
    r->le = le;
    r->value = c->value;
    const char *rest = name;
    size_t kind_len = 0;
    if (dot) { /* "worker0.kv.free_blocks": actor worker0, kind worker, rest kv.free_blocks */
        r->actor = name;
        r->actor_len = (int)(dot - name);
        kind_len = (size_t)r->actor_len;
        while (kind_len > 1 && name[kind_len - 1] >= '0' && name[kind_len - 1] <= '9')
            kind_len--;
        rest = dot + 1;
    } else {
        r->actor = "";
    }
    size_t rest_len = base_len - (size_t)(rest - name);
    /* the unit: _us and _ms become seconds */
    const char *unit = "";
    if (s_ends(rest, rest_len, "_us")) {
        r->scale = 6;
        rest_len -= 3;
        unit = "_seconds";
    } else if (s_ends(rest, rest_len, "_ms")) {
        r->scale = 3;
        rest_len -= 3;
        unit = "_seconds";
    }
    char plain[MSG_MAX_COUNTER_NAME_BYTES + 1];
    snprintf(plain, sizeof plain, "%.*s", (int)(base_len - (size_t)(rest - name)), rest);
    if (part != S_PLAIN) {
        r->type = S_HISTOGRAM;
    } else {
        r->type = S_COUNTER;
        for (size_t i = 0; i < sizeof s_gauges / sizeof s_gauges[0]; i++)
            if (!fnmatch(s_gauges[i], plain, 0))
                r->type = S_GAUGE;
    }
    snprintf(r->family, sizeof r->family, "strata_");
    if (kind_len) {
        s_sanitize_cat(r->family, sizeof r->family, name, kind_len);
        s_sanitize_cat(r->family, sizeof r->family, "_", 1);
    }
    s_sanitize_cat(r->family, sizeof r->family, rest, rest_len);
    s_sanitize_cat(r->family, sizeof r->family, unit, strlen(unit));
    if (r->type == S_COUNTER && !s_ends(r->family, strlen(r->family), "_total"))
        s_sanitize_cat(r->family, sizeof r->family, "_total", 6);
    bool numbered = kind_len && kind_len < (size_t)r->actor_len;
    snprintf(r->help, sizeof r->help, "%.*s%s%s%s", (int)kind_len, name, numbered ? "<N>" : "",
             kind_len ? "." : "", plain);
}

static int s_cmp_rec(const void *a, const void *b) {
    const s_rec_t *x = a, *y = b;
    int c = strcmp(x->family, y->family);
    if (c)
        return c;
    int n = x->actor_len < y->actor_len ? x->actor_len : y->actor_len;
    c = memcmp(x->actor, y->actor, (size_t)n);
    if (c || x->actor_len != y->actor_len)
        return c ? c : x->actor_len - y->actor_len;
    if (x->part != y->part)
        return x->part - y->part;
    return x->le < y->le ? -1 : x->le > y->le;
}

/* v / 10^scale in decimal, exactly (no floating point): 1500 scale 3 -> "1.5". */
static void s_scaled(char *out, size_t cap, int64_t v, int scale) {
    uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, p = 1;
    for (int i = 0; i < scale; i++)
        p *= 10;
    uint64_t ip = a / p, fp = a % p;
    int n = snprintf(out, cap, "%s%" PRIu64, v < 0 ? "-" : "", ip);
    if (fp && n > 0 && (size_t)n < cap) {
        char frac[32];
        snprintf(frac, sizeof frac, "%0*" PRIu64, scale, fp);
        for (int k = (int)strlen(frac) - 1; k > 0 && frac[k] == '0'; k--)
            frac[k] = 0;
        snprintf(out + n, cap - (size_t)n, ".%s", frac);
    }
}

/* `{actor="worker0"}`, `{actor="worker0",le="0.5"}`, or "" / `{le="0.5"}`. */
static void s_labels(s_buf_t *b, const s_rec_t *r, const char *le) {
    if (!r->actor_len && !le)
        return;
    s_printf(b, "{");
    if (r->actor_len)
        s_printf(b, "actor=\"%.*s\"%s", r->actor_len, r->actor, le ? "," : "");
    if (le)
        s_printf(b, "le=\"%s\"", le);
    s_printf(b, "}");
}

int serve_prom_render(const msg_counter_t *counters, int n, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    const msg_counter_t **sorted = malloc((n ? (size_t)n : 1) * sizeof *sorted);
    s_rec_t *recs = malloc((n ? (size_t)n : 1) * sizeof *recs);
    s_buf_t b = {0};
    if (!sorted || !recs)
        goto fail;
    for (int i = 0; i < n; i++)
        sorted[i] = &counters[i];
    qsort(sorted, (size_t)n, sizeof *sorted, s_cmp_name);
    int nr = 0;
    for (int i = 0; i < n; i++) {
        const msg_counter_t *c = &counters[i];
        size_t len_c = strlen(c->name);
        const char *bk = strstr(c->name, ".bucket.le_");
        if (bk && bk[11] >= '0' && bk[11] <= '9' &&
            strspn(bk + 11, "0123456789") == strlen(bk + 11) &&
            s_is_hist(sorted, n, c->name, (size_t)(bk - c->name))) {
            s_rec(&recs[nr++], c, (size_t)(bk - c->name), S_BUCKET, strtoll(bk + 11, NULL, 10));
        } else if (s_ends(c->name, len_c, ".sum") && s_is_hist(sorted, n, c->name, len_c - 4)) {
            s_rec(&recs[nr++], c, len_c - 4, S_SUM, 0);
        } else if (s_ends(c->name, len_c, ".count") && s_is_hist(sorted, n, c->name, len_c - 6)) {
            s_rec(&recs[nr++], c, len_c - 6, S_COUNT, 0);
        } else {
            s_rec(&recs[nr++], c, len_c, S_PLAIN, 0);
        }
    }
    qsort(recs, (size_t)nr, sizeof *recs, s_cmp_rec);
    /* one family at a time: its HELP and TYPE once; a sample whose type differs from
     * the family's first, or that repeats one (two names that sanitise alike), is left
     * out: the exposition must stay parseable */
    char num[64], le[64];
    for (int i = 0; i < nr;) {
        const s_rec_t *f = &recs[i];
        s_printf(&b, "# HELP %s from the stats counter %s\n# TYPE %s %s\n", f->family, f->help,
                 f->family, s_type_name[f->type]);
        int j = i;
        for (; j < nr && !strcmp(recs[j].family, f->family); j++) {
            const s_rec_t *r = &recs[j];
            if (r->type != f->type || (j > i && !s_cmp_rec(r, &recs[j - 1])))
                continue;
            /* values in the unit's scale: plain counters and sums; buckets and count
             * are numbers of observations */
            bool scaled = r->part == S_PLAIN || r->part == S_SUM;
            s_scaled(num, sizeof num, r->value, scaled ? r->scale : 0);
            switch (r->part) {
            case S_PLAIN:
                s_printf(&b, "%s", r->family);
                s_labels(&b, r, NULL);
                s_printf(&b, " %s\n", num);
                break;
            case S_BUCKET:
                s_scaled(le, sizeof le, r->le, r->scale);
                s_printf(&b, "%s_bucket", r->family);
                s_labels(&b, r, le);
                s_printf(&b, " %s\n", num);
                break;
            case S_COUNT: /* the +Inf bucket is the count */
                s_printf(&b, "%s_bucket", r->family);
                s_labels(&b, r, "+Inf");
                s_printf(&b, " %s\n%s_count", num, r->family);
                s_labels(&b, r, NULL);
                s_printf(&b, " %s\n", num);
                break;
            case S_SUM:
                s_printf(&b, "%s_sum", r->family);
                s_labels(&b, r, NULL);
                s_printf(&b, " %s\n", num);
                break;
            }
        }
        i = j;
    }
    s_printf(&b, "%s", ""); /* an empty exposition is a valid one: "" */
    if (b.failed)
        goto fail;
    free(sorted);
    free(recs);
    *len = b.buf.len;
    *out = base_buf_take(&b.buf);
    return 0;
fail:
    free(sorted);
    free(recs);
    base_buf_free(&b.buf);
    return -ENOMEM;
}
