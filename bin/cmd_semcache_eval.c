/* cmd_semcache_eval.c - `strata semcache-eval`: the semantic cache's layer measured offline
 * (issue 28).  On a file of labelled question pairs: how well the embedding separates the
 * same request from another (ROC AUC), and whether the error bound's threshold
 * (serve/serve_semcache_bound.h) keeps the wrong-hit rate below delta on pairs it was not
 * calibrated on; and, with --index, what the store's exact search costs a lookup. */
#include "base_clock.h"
#include "base_map.h"
#include "cli.h"
#include "cli_flags.h"
#include "model_embedder.h"
#include "serve_semcache.h"
#include "serve_semcache_bound.h"
#include "serve_semcache_req.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define S_MAX_DELTAS 16
#define S_MAX_INDEX 16
#define S_MAX_KINDS 16
#define S_MAX_TOKENS 512 /* the semcache actor's embed_max_tokens default */
#define S_CI_ALPHA 0.05  /* the measured wrong-hit rate's one-sided 95 % bounds */
#define S_NO_DIM 576     /* --index without a model: SmolLM2-135M's width */

/* -f's default (its address tells whether -f was given) */
static const char s_default_pairs[] = "tests/data/semcache_pairs.jsonl";

typedef struct {
    const char *pairs;  /* -f: the pair file (JSON lines) */
    const char *deltas; /* --deltas "0.01,0.02,0.05" */
    const char *index;  /* --index "10000,100000" */
    const char *ann;    /* --ann "10000,100000": the approximate index measured at these N */
    const char *json;   /* --json FILE */
    const char *csv;    /* --csv-pairs FILE */
    double calib_frac;  /* share of the pairs the bound is calibrated on */
    double alpha;       /* the bound's 1 - confidence */
    int min_obs;        /* the bound's min_obs */
    int splits;         /* random calibration/test splits */
    int seed;           /* of the splits and of --index's vectors */
    int dim;            /* --index's width (0: the model's, else S_NO_DIM) */
    int queries;        /* --index's timed lookups */
    int answers;        /* > 0: "same" is the model's greedy answers (this many tokens at most)
                           being equal after whitespace normalisation, not the labels */
} s_eval_opts_t;

typedef struct {
    cli_model_opts_t m;
    s_eval_opts_t e;
} s_eval_cfg_t;

#define S_E(member) ACTOR_OPT_FIELD(s_eval_opts_t, member)
static const cli_flag_t s_eval_flags[] = {
    {.name = "pairs",
     .short_name = 'f',
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "labelled pairs, one JSON object a line: {\"a\", \"b\", \"same\", \"kind\"}",
             .field = S_E(pairs)}},
    {.name = "answers",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1024,
             .help = "judge a pair as the service verifies a hit: the same when the model's "
                     "greedy answers to both (chat template, at most N tokens) are equal after "
                     "whitespace normalisation, instead of its label (0: the labels)",
             .field = S_E(answers)}},
    {.name = "deltas",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "wrong-hit rates the bound is asked for, comma-separated, each in (0, 1)",
             .field = S_E(deltas)}},
    {.name = "alpha",
     .arg = "X",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 1e-6,
             .max = 0.5,
             .help = "the bound's 1 - confidence",
             .field = S_E(alpha)}},
    {.name = "min-obs",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 24,
             .help = "observations at or above a threshold before it can pass",
             .field = S_E(min_obs)}},
    {.name = "calib-frac",
     .arg = "X",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 0.01,
             .max = 0.99,
             .help = "share of the pairs the bound is calibrated on (the rest is the test part)",
             .field = S_E(calib_frac)}},
    {.name = "splits",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 100000,
             .help = "random calibration/test splits",
             .field = S_E(splits)}},
    {.name = "seed",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 2147483647,
             .help = "seed of the splits and of --index's random vectors",
             .field = S_E(seed)}},
    {.name = "index",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "time the store's exact search over N random entries, for each N of the "
                     "comma-separated list (e.g. 10000,100000,1000000); without -f only this "
                     "runs and no model is loaded",
             .field = S_E(index)}},
    {.name = "ann",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "build the store's approximate (HNSW) index over N random entries, for "
                     "each N of the list, and measure its lookups and its recall@1 against the "
                     "exact search on near-duplicate queries (an entry plus noise)",
             .field = S_E(ann)}},
    {.name = "dim",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 65536,
             .help = "--index's embedding width; 0: the model's when it is loaded, else 576",
             .field = S_E(dim)}},
    {.name = "queries",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 10000000,
             .help = "--index's timed lookups per N",
             .field = S_E(queries)}},
    {.name = "json",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "write every number (per-split rows included) as one JSON document",
             .field = S_E(json)}},
    {.name = "csv-pairs",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "write a CSV row per pair: a, b, kind, same, similarity",
             .field = S_E(csv)}},
    {NULL},
};
#undef S_E

static const cli_cmd_t s_eval_cmd = {
    "semcache-eval",
    "usage: strata semcache-eval [-m MODEL] [-f PAIRS] [--deltas LIST] [--splits N] [options]\n"
    "       strata semcache-eval --index N[,N...] [--ann N[,N...]] [--dim N] [--queries N]\n"
    "\n"
    "Measures the semantic cache's layer offline.  Every question of the pair file is\n"
    "embedded as the service embeds requests (model/model_embedder: the mean of the final\n"
    "hidden state, unit length); a pair's similarity is the dot product of its two.\n"
    "Prints the ROC AUC of similarity against `same` (all pairs, and the positives against\n"
    "each kind of negative), then, over --splits random splits into a calibration and a\n"
    "test part: the error bound's threshold for each delta from the calibration part, and\n"
    "on the test part its hits, wrong hits and their rate with one-sided 95 % Clopper-\n"
    "Pearson bounds (a split is flagged when the lower bound is above delta).\n",
    "With --index: the cost of a lookup of the store's exact search (serve/serve_semcache.c)\n"
    "over N random unit vectors in one context, no threshold passing (every lookup scans\n"
    "every entry): p50/p99 microseconds, lookups/s, and the entry table's bytes (F16 embeddings).",
    {{cli_model_flags, offsetof(s_eval_cfg_t, m)},
     {cli_threads_flags, offsetof(s_eval_cfg_t, m)},
     {s_eval_flags, offsetof(s_eval_cfg_t, e)},
     {NULL}},
};

/* ---- the pairs and their texts */

typedef struct {
    char *a, *b, *kind; /* owned */
    bool same;
    int ta, tb; /* the texts of a and b (s_set_t.text) */
    float sim;  /* a . b */
} s_pair_t;

typedef struct {
    s_pair_t *p; /* (n) in file order */
    int n, n_pos;
    const char **text; /* (n_text) the distinct questions (borrowed from p) */
    int n_text;
    float *emb; /* (n_text, dim) */
    int dim;
    const char *kinds[S_MAX_KINDS]; /* the negatives' kinds, in order of appearance */
    int n_kinds;
    double embed_s; /* seconds spent embedding */
} s_set_t;

static void s_set_free(s_set_t *s) {
    for (int i = 0; i < s->n; i++)
        free(s->p[i].a), free(s->p[i].b), free(s->p[i].kind);
    free(s->p), free(s->text), free(s->emb);
    memset(s, 0, sizeof *s);
}

/* A required string member k of o, or NULL. */
static const char *s_str(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) && x->valuestring ? x->valuestring : NULL;
}

/* One line (len bytes) into p.  NULL, or what is wrong with it. */
static const char *s_parse_pair(const char *line, size_t len, s_pair_t *p) {
    cJSON *o = cJSON_ParseWithLength(line, len);
    const char *why = NULL;
    const cJSON *same = cJSON_GetObjectItemCaseSensitive(o, "same");
    const char *a = s_str(o, "a"), *b = s_str(o, "b"), *kind = s_str(o, "kind");
    if (!cJSON_IsObject(o))
        why = "not a JSON object";
    else if (!a || !b || !*a || !*b)
        why = "\"a\" and \"b\" must be non-empty strings";
    else if (!cJSON_IsBool(same))
        why = "\"same\" must be true or false";
    else if (!kind)
        why = "\"kind\" must be a string";
    if (!why) {
        memset(p, 0, sizeof *p);
        p->a = strdup(a), p->b = strdup(b), p->kind = strdup(kind);
        p->same = cJSON_IsTrue(same);
        if (!p->a || !p->b || !p->kind)
            why = "out of memory";
    }
    cJSON_Delete(o);
    return why;
}

/* The pairs of path into s (blank lines skipped).  false after one line on stderr. */
static bool s_load_pairs(const char *path, s_set_t *s) {
    size_t len = 0;
    char *buf = cli_read_file(path, &len);
    if (!buf) {
        fprintf(stderr, "strata semcache-eval: cannot read '%s'\n", path);
        return false;
    }
    int cap = 0, lineno = 0;
    bool ok = true;
    for (char *line = buf; ok && line < buf + len;) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        size_t n = nl ? (size_t)(nl - line) : (size_t)(buf + len - line);
        lineno++;
        size_t k = strspn(line, " \t\r");
        if (k < n) {
            if (s->n == cap) {
                cap = cap ? 2 * cap : 256;
                s_pair_t *p = realloc(s->p, (size_t)cap * sizeof *p);
                if (!p) {
                    fprintf(stderr, "strata semcache-eval: out of memory\n");
                    ok = false;
                    break;
                }
                s->p = p;
            }
            const char *why = s_parse_pair(line, n, &s->p[s->n]);
            if (why) {
                fprintf(stderr, "strata semcache-eval: %s:%d: %s\n", path, lineno, why);
                ok = false;
            } else {
                s->n_pos += s->p[s->n].same;
                s->n++;
            }
        }
        line += n + 1;
    }
    free(buf);
    if (ok && (s->n_pos == 0 || s->n_pos == s->n)) {
        fprintf(stderr, "strata semcache-eval: %s: needs pairs with \"same\" true and false\n",
                path);
        ok = false;
    }
    return ok;
}

/* The distinct texts of the pairs (ta, tb set), and the negatives' kinds. */
static int s_index_texts(s_set_t *s) {
    base_map_t m = {0};
    s->text = malloc(2 * (size_t)s->n * sizeof *s->text);
    if (!s->text || base_map_init(&m, 2 * (size_t)s->n))
        return free(s->text), s->text = NULL, -ENOMEM;
    for (int i = 0; i < 2 * s->n; i++) {
        s_pair_t *p = &s->p[i / 2];
        const char *t = i % 2 ? p->b : p->a;
        uint64_t h = XXH64(t, strlen(t), 0), v;
        int at = base_map_get(&m, h, &v) && !strcmp(s->text[v], t) ? (int)v : -1;
        if (at < 0) { /* new (or a hash collision: kept apart, embedded twice) */
            at = s->n_text++;
            s->text[at] = t;
            if (!base_map_get(&m, h, NULL))
                base_map_put(&m, h, (uint64_t)at);
        }
        *(i % 2 ? &p->tb : &p->ta) = at;
    }
    base_map_free(&m);
    for (int i = 0; i < s->n; i++) {
        int k = 0;
        while (k < s->n_kinds && strcmp(s->kinds[k], s->p[i].kind))
            k++;
        if (!s->p[i].same && k == s->n_kinds && s->n_kinds < S_MAX_KINDS)
            s->kinds[s->n_kinds++] = s->p[i].kind;
    }
    return 0;
}

/* Every distinct text embedded once, then every pair's similarity.  false after a line. */
static bool s_embed_all(s_set_t *s, model_embedder_t *emb) {
    s->dim = model_embedder_dim(emb);
    s->emb = malloc((size_t)s->n_text * s->dim * sizeof *s->emb);
    if (!s->emb) {
        fprintf(stderr, "strata semcache-eval: out of memory\n");
        return false;
    }
    uint64_t t0 = base_now_us();
    for (int i = 0; i < s->n_text; i++) {
        int rc =
            model_embedder_text(emb, s->text[i], strlen(s->text[i]), s->emb + (size_t)i * s->dim);
        if (rc < 0) {
            fprintf(stderr, "strata semcache-eval: cannot embed '%.60s': %s\n", s->text[i],
                    rc == -E2BIG ? "longer than 512 tokens" : strerror(-rc));
            return false;
        }
    }
    s->embed_s = (double)(base_now_us() - t0) * 1e-6;
    for (int i = 0; i < s->n; i++) {
        const float *x = s->emb + (size_t)s->p[i].ta * s->dim;
        const float *y = s->emb + (size_t)s->p[i].tb * s->dim;
        double d = 0;
        for (int k = 0; k < s->dim; k++)
            d += (double)x[k] * y[k];
        s->p[i].sim = (float)d;
    }
    return true;
}

/* ---- ROC AUC */

typedef struct {
    float s;
    bool pos;
} s_scored_t;

static int s_scored_cmp(const void *x, const void *y) {
    float a = ((const s_scored_t *)x)->s, b = ((const s_scored_t *)y)->s;
    return (a > b) - (a < b);
}

/* The Mann-Whitney AUC of the positives against the negatives of kind (NULL: every
 * negative): P(s_pos > s_neg) + P(s_pos = s_neg) / 2, from the positives' mean ranks
 * (ties share their mean rank).  NaN when either side is empty; *n_neg: the negatives. */
static double s_auc(const s_set_t *s, const char *kind, int *n_neg) {
    s_scored_t *v = malloc((size_t)s->n * sizeof *v);
    if (!v)
        return NAN;
    int n = 0, np = 0;
    for (int i = 0; i < s->n; i++)
        if (s->p[i].same || !kind || !strcmp(s->p[i].kind, kind)) {
            v[n++] = (s_scored_t){s->p[i].sim, s->p[i].same};
            np += s->p[i].same;
        }
    qsort(v, (size_t)n, sizeof *v, s_scored_cmp);
    double rank_sum = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && v[j].s == v[i].s)
            j++;
        double mean_rank = (i + 1 + j) / 2.0; /* ranks i+1 .. j */
        for (int k = i; k < j; k++)
            rank_sum += v[k].pos ? mean_rank : 0;
        i = j;
    }
    free(v);
    *n_neg = n - np;
    if (np == 0 || n == np)
        return NAN;
    return (rank_sum - (double)np * (np + 1) / 2) / ((double)np * (n - np));
}

/* ---- the error bound over random splits */

typedef struct {
    double threshold; /* > 1: none passed */
    int test, test_pos, hits, wrong;
    double hit_rate, recall, wrong_rate, upper, lower; /* wrong_rate..lower NaN: no hits */
    bool above, flagged;                               /* wrong_rate > delta; lower > delta */
} s_row_t;

typedef struct {
    double delta;
    s_row_t *rows; /* (splits) */
} s_delta_t;

static uint64_t s_rand(uint64_t *st) { /* splitmix64 */
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void s_shuffle(int *a, int n, uint64_t *st) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(s_rand(st) % (uint64_t)(i + 1));
        int t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* The one-sided (1 - a) Clopper-Pearson lower bound of k in n: the upper bound of the
 * complement, mirrored (0 when k is 0). */
static double s_cp_lower(int k, int n, double a) {
    return n > 0 && k > 0 ? 1 - serve_semcache_cp_upper(n - k, n, a) : 0;
}

/* The test part's numbers at threshold t for delta into r. */
static void s_test_row(const s_set_t *s, const int *test, int n_test, double t, double delta,
                       s_row_t *r) {
    memset(r, 0, sizeof *r);
    r->threshold = t;
    r->test = n_test;
    for (int i = 0; i < n_test; i++) {
        const s_pair_t *p = &s->p[test[i]];
        r->test_pos += p->same;
        if (t <= 1 && p->sim >= t - 1e-9) { /* as the bound counts a similarity at t */
            r->hits++;
            r->wrong += !p->same;
        }
    }
    r->hit_rate = (double)r->hits / n_test;
    r->recall = r->test_pos ? (double)(r->hits - r->wrong) / r->test_pos : NAN;
    r->wrong_rate = r->upper = r->lower = NAN;
    if (r->hits) {
        r->wrong_rate = (double)r->wrong / r->hits;
        r->upper = serve_semcache_cp_upper(r->wrong, r->hits, S_CI_ALPHA);
        r->lower = s_cp_lower(r->wrong, r->hits, S_CI_ALPHA);
    }
    r->above = r->hits && r->wrong_rate > delta;
    r->flagged = r->hits && r->lower > delta;
}

/* Split sp (the order in perm: the first n_cal calibrate) into row sp of every delta.
 * 0 or -ENOMEM. */
static int s_split(const s_set_t *s, const s_eval_opts_t *o, const int *perm, int n_cal,
                   s_delta_t *d, int nd, int sp) {
    serve_semcache_bound_t *b = serve_semcache_bound_new(n_cal, o->min_obs, o->alpha);
    if (!b)
        return -ENOMEM;
    for (int i = 0; i < n_cal; i++)
        serve_semcache_bound_observe(b, s->p[perm[i]].sim, s->p[perm[i]].same);
    for (int k = 0; k < nd; k++) {
        double t = serve_semcache_bound_threshold(b, d[k].delta);
        s_test_row(s, perm + n_cal, s->n - n_cal, t, d[k].delta, &d[k].rows[sp]);
    }
    serve_semcache_bound_destroy(&b);
    return 0;
}

static int s_dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the n values at v[i].field (stride bytes apart), NaNs left out. */
static double s_median(const void *v, size_t stride, size_t field, int n) {
    double *x = malloc((size_t)n * sizeof *x);
    int m = 0;
    for (int i = 0; x && i < n; i++) {
        double d;
        memcpy(&d, (const char *)v + (size_t)i * stride + field, sizeof d);
        if (!isnan(d))
            x[m++] = d;
    }
    double med = NAN;
    if (m) {
        qsort(x, (size_t)m, sizeof *x, s_dcmp);
        med = m % 2 ? x[m / 2] : (x[m / 2 - 1] + x[m / 2]) / 2;
    }
    free(x);
    return med;
}

/* ---- --index: the exact search's cost */

typedef struct {
    int entries, dim, queries;
    double p50_us, p99_us, mean_us, per_s, build_s;
    double table_bytes;
} s_cost_t;

/* A random unit vector (uniform coordinates, normalised: a direction, not uniform on the
 * sphere, which does not matter to the time a scan takes). */
static void s_rand_unit(float *v, int dim, uint64_t *st) {
    double n = 0;
    for (int k = 0; k < dim; k++) {
        v[k] = (float)((double)(s_rand(st) >> 11) / (double)(1ull << 53) * 2 - 1);
        n += (double)v[k] * v[k];
    }
    for (int k = 0; k < dim; k++)
        v[k] = (float)(v[k] / sqrt(n));
}

/* Time o->queries lookups in a store of n random entries.  0 or -ENOMEM / -EPROTO (a
 * lookup that did not scan). */
static int s_index_cost(int n, int dim, const s_eval_opts_t *o, double delta, s_cost_t *c) {
    uint64_t st = (uint64_t)o->seed * 0x2545f4914f6cdd1dull + (uint64_t)n;
    serve_semcache_config_t sc = {dim, n, 0};
    serve_semcache_bound_t *b = serve_semcache_bound_new(1, o->min_obs, o->alpha);
    serve_semcache_t *cache = b ? serve_semcache_new(&sc, b) : NULL;
    float *v = malloc((size_t)dim * sizeof *v);
    double *us = malloc((size_t)o->queries * sizeof *us);
    int rc = cache && v && us ? 0 : -ENOMEM;
    uint64_t t0 = base_now_us();
    for (int i = 0; !rc && i < n; i++) {
        s_rand_unit(v, dim, &st);
        serve_semcache_key_t key = {1, (uint64_t)i + 1, v};
        rc = serve_semcache_put(cache, &key, "e", NULL, "", 0, 0, 1);
        rc = rc < 0 ? rc : 0;
    }
    *c = (s_cost_t){n, dim, o->queries, .table_bytes = (double)n * dim * sizeof(uint16_t)};
    c->build_s = (double)(base_now_us() - t0) * 1e-6;
    double total = 0;
    for (int q = 0; !rc && q < o->queries; q++) {
        s_rand_unit(v, dim, &st);
        serve_semcache_key_t key = {1, (1ull << 63) | (uint64_t)q, v}; /* no exact hit */
        serve_semcache_hit_t h;
        uint64_t a = base_now_ns();
        int kind = serve_semcache_lookup(cache, &key, delta, 1, &h);
        us[q] = (double)(base_now_ns() - a) * 1e-3;
        total += us[q];
        if (kind != SERVE_SEMCACHE_MISS || h.entry < 0 || h.threshold <= 1)
            rc = -EPROTO;
    }
    if (!rc) {
        qsort(us, (size_t)o->queries, sizeof *us, s_dcmp);
        c->p50_us = s_median(us, sizeof *us, 0, o->queries);
        c->p99_us = us[(int)floor(0.99 * (o->queries - 1))];
        c->mean_us = total / o->queries;
        c->per_s = total > 0 ? o->queries / (total * 1e-6) : 0;
    }
    free(v), free(us);
    serve_semcache_destroy(&cache);
    serve_semcache_bound_destroy(&b);
    return rc;
}

/* A number, or null when it is NaN or infinite. */
static void s_jnum(cJSON *o, const char *k, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

/* --ann: the approximate index over n random entries: its build time, lookup times and
 * recall@1 on o->queries near-duplicate queries (a stored entry plus noise, similarity
 * about 0.9) against a brute-force search of the same float vectors. */
typedef struct {
    int entries, queries, found;
    double build_s, p50_us, p99_us, recall, mean_sim;
} s_ann_cost_t;

/* Brute force: the entry of v (n rows of dim) most similar to q. */
static int s_nearest(const float *v, int n, int dim, const float *q) {
    int best = -1;
    double bs = -3;
    for (int i = 0; i < n; i++) {
        double d = 0;
        for (int k = 0; k < dim; k++)
            d += (double)v[(size_t)i * dim + k] * q[k];
        if (d > bs)
            bs = d, best = i;
    }
    return best;
}

static int s_ann_cost(int n, int dim, const s_eval_opts_t *o, s_ann_cost_t *c) {
    uint64_t st = (uint64_t)o->seed * 0x9e3779b97f4a7c15ull + (uint64_t)n;
    serve_semcache_config_t sc = {dim, n, 1}; /* the index from the first entry on */
    serve_semcache_bound_t *b = serve_semcache_bound_new(1, o->min_obs, o->alpha);
    serve_semcache_t *cache = b ? serve_semcache_new(&sc, b) : NULL;
    float *v = malloc((size_t)n * dim * sizeof *v), *q = malloc((size_t)dim * sizeof *q);
    double *us = malloc((size_t)o->queries * sizeof *us);
    int rc = cache && v && q && us ? 0 : -ENOMEM;
    uint64_t t0 = base_now_us();
    for (int i = 0; !rc && i < n; i++) {
        s_rand_unit(v + (size_t)i * dim, dim, &st);
        serve_semcache_key_t key = {1, (uint64_t)i + 1, v + (size_t)i * dim};
        rc = serve_semcache_put(cache, &key, "e", NULL, "", 0, 0, 1) < 0 ? -ENOMEM : 0;
    }
    *c = (s_ann_cost_t){n, o->queries, 0, (double)(base_now_us() - t0) * 1e-6, 0, 0, 0, 0};
    if (!rc && serve_semcache_indexed(cache) != n)
        rc = -EPROTO;
    double sims = 0;
    for (int t = 0; !rc && t < o->queries; t++) {
        int target = (int)(s_rand(&st) % (uint64_t)n);
        s_rand_unit(q, dim, &st); /* noise, then the entry: similarity about 0.9 */
        double nn = 0;
        for (int k = 0; k < dim; k++) {
            q[k] = v[(size_t)target * dim + k] + 0.5f * q[k];
            nn += (double)q[k] * q[k];
        }
        for (int k = 0; k < dim; k++)
            q[k] = (float)(q[k] / sqrt(nn));
        serve_semcache_key_t key = {1, (1ull << 63) | (uint64_t)t, q};
        serve_semcache_hit_t h;
        uint64_t a = base_now_ns();
        serve_semcache_lookup(cache, &key, 0.05, 1, &h);
        us[t] = (double)(base_now_ns() - a) * 1e-3;
        c->found += h.entry == s_nearest(v, n, dim, q);
        sims += h.similarity;
    }
    if (!rc) {
        qsort(us, (size_t)o->queries, sizeof *us, s_dcmp);
        c->p50_us = s_median(us, sizeof *us, 0, o->queries);
        c->p99_us = us[(int)floor(0.99 * (o->queries - 1))];
        c->recall = (double)c->found / o->queries;
        c->mean_sim = sims / o->queries;
    }
    free(v), free(q), free(us);
    serve_semcache_destroy(&cache);
    serve_semcache_bound_destroy(&b);
    return rc;
}

/* --ann: every N measured, printed, into j.  false after a line. */
static bool s_ann_eval(const s_eval_opts_t *o, const int *ns, int nn, int dim, cJSON *j) {
    printf("approximate index (HNSW, M 16, ef_construction 100, ef 128, 32 candidates): dim %d, "
           "%d near-duplicate queries\n",
           dim, o->queries);
    printf("%10s %10s %10s %10s %10s %10s\n", "entries", "build s", "p50 us", "p99 us", "recall@1",
           "mean sim");
    cJSON *arr = cJSON_AddArrayToObject(j, "ann");
    for (int i = 0; i < nn; i++) {
        s_ann_cost_t c;
        int rc = s_ann_cost(ns[i], dim, o, &c);
        if (rc) {
            fprintf(stderr, "strata semcache-eval: --ann %d: %s\n", ns[i],
                    rc == -ENOMEM ? "out of memory" : "the index was not built");
            return false;
        }
        printf("%10d %10.2f %10.2f %10.2f %10.3f %10.3f\n", c.entries, c.build_s, c.p50_us,
               c.p99_us, c.recall, c.mean_sim);
        fflush(stdout);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "entries", c.entries);
        cJSON_AddNumberToObject(x, "dim", dim);
        cJSON_AddNumberToObject(x, "queries", c.queries);
        s_jnum(x, "build_s", c.build_s);
        s_jnum(x, "p50_us", c.p50_us);
        s_jnum(x, "p99_us", c.p99_us);
        s_jnum(x, "recall_at_1", c.recall);
        s_jnum(x, "mean_similarity", c.mean_sim);
        cJSON_AddItemToArray(arr, x);
    }
    return true;
}

/* ---- output */

/* A CSV field: quoted, quotes doubled. */
static void s_csv_field(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* --csv-pairs: a row per pair.  false after a line. */
static bool s_write_csv(const char *path, const s_set_t *s) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "strata semcache-eval: cannot create '%s': %s\n", path, strerror(errno));
        return false;
    }
    fprintf(f, "a,b,kind,same,similarity\n");
    for (int i = 0; i < s->n; i++) {
        const s_pair_t *p = &s->p[i];
        s_csv_field(f, p->a), fputc(',', f);
        s_csv_field(f, p->b), fputc(',', f);
        s_csv_field(f, p->kind);
        fprintf(f, ",%d,%.9g\n", p->same, p->sim);
    }
    if (fclose(f)) {
        fprintf(stderr, "strata semcache-eval: cannot write '%s'\n", path);
        return false;
    }
    return true;
}

/* The AUCs: printed, and into j. */
static void s_report_auc(const s_set_t *s, cJSON *j) {
    int nn;
    double all = s_auc(s, NULL, &nn);
    printf("ROC AUC of similarity vs same: %.4f (%d positives, %d negatives)\n", all, s->n_pos, nn);
    cJSON *a = cJSON_AddObjectToObject(j, "auc");
    s_jnum(a, "all", all);
    cJSON *by = cJSON_AddObjectToObject(a, "by_kind");
    for (int k = 0; k < s->n_kinds; k++) {
        double v = s_auc(s, s->kinds[k], &nn);
        printf("  positives vs %-22s %.4f (%d negatives)\n", s->kinds[k], v, nn);
        s_jnum(by, s->kinds[k], v);
    }
}

/* One split's row as JSON. */
static cJSON *s_row_json(const s_row_t *r, int split) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "split", split);
    s_jnum(o, "threshold", r->threshold <= 1 ? r->threshold : NAN);
    cJSON_AddNumberToObject(o, "test_pairs", r->test);
    cJSON_AddNumberToObject(o, "test_positive", r->test_pos);
    cJSON_AddNumberToObject(o, "hits", r->hits);
    cJSON_AddNumberToObject(o, "wrong", r->wrong);
    s_jnum(o, "hit_rate", r->hit_rate);
    s_jnum(o, "recall", r->recall);
    s_jnum(o, "wrong_rate", r->wrong_rate);
    s_jnum(o, "wrong_upper", r->upper);
    s_jnum(o, "wrong_lower", r->lower);
    cJSON_AddBoolToObject(o, "above_delta", r->above);
    cJSON_AddBoolToObject(o, "flagged", r->flagged);
    return o;
}

/* One delta's summary over the splits: a table line, and into arr. */
static void s_report_delta(const s_delta_t *d, int splits, cJSON *arr) {
    long hits = 0, wrong = 0;
    int above = 0, flagged = 0, none = 0;
    for (int i = 0; i < splits; i++) {
        hits += d->rows[i].hits, wrong += d->rows[i].wrong;
        above += d->rows[i].above, flagged += d->rows[i].flagged;
        none += d->rows[i].threshold > 1;
    }
    double *t = malloc((size_t)splits * sizeof *t);
    for (int i = 0; t && i < splits; i++) /* the median over splits, "none" counted as 2 */
        t[i] = d->rows[i].threshold;
    double med_t = t ? s_median(t, sizeof *t, 0, splits) : NAN;
    free(t);
    double hr = s_median(d->rows, sizeof *d->rows, offsetof(s_row_t, hit_rate), splits);
    double rc = s_median(d->rows, sizeof *d->rows, offsetof(s_row_t, recall), splits);
    double pw = hits ? (double)wrong / hits : NAN;
    double up = hits ? serve_semcache_cp_upper((int)wrong, (int)hits, S_CI_ALPHA) : NAN;
    char ts[16] = "none";
    if (med_t <= 1)
        snprintf(ts, sizeof ts, "%.2f", med_t);
    printf("%7.3f %8s %9.4f %8.4f %7ld %6ld %9.4f %8.4f %7d %8d %5d\n", d->delta, ts, hr, rc, hits,
           wrong, pw, up, above, flagged, none);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "delta", d->delta);
    s_jnum(o, "median_threshold", med_t <= 1 ? med_t : NAN);
    s_jnum(o, "median_hit_rate", hr);
    s_jnum(o, "median_recall", rc);
    cJSON_AddNumberToObject(o, "hits", (double)hits);
    cJSON_AddNumberToObject(o, "wrong", (double)wrong);
    s_jnum(o, "pooled_wrong_rate", pw);
    s_jnum(o, "pooled_wrong_upper", up);
    cJSON_AddNumberToObject(o, "splits_above_delta", above);
    cJSON_AddNumberToObject(o, "splits_flagged", flagged);
    cJSON_AddNumberToObject(o, "splits_no_threshold", none);
    cJSON *rows = cJSON_AddArrayToObject(o, "rows");
    for (int i = 0; i < splits; i++)
        cJSON_AddItemToArray(rows, s_row_json(&d->rows[i], i));
    cJSON_AddItemToArray(arr, o);
}

/* ---- the steps */

/* The splits for every delta: run, printed, into j.  false after a line. */
static bool s_bound_eval(const s_set_t *s, const s_eval_opts_t *o, const double *deltas, int nd,
                         cJSON *j) {
    int n_cal = (int)lround(o->calib_frac * s->n);
    n_cal = n_cal < 1 ? 1 : n_cal > s->n - 1 ? s->n - 1 : n_cal;
    const int n_test = s->n - n_cal;
    s_delta_t d[S_MAX_DELTAS];
    int *perm = malloc((size_t)s->n * sizeof *perm);
    int *tests = malloc((size_t)o->splits * n_test * sizeof *tests);
    bool ok = perm && tests;
    for (int k = 0; k < nd; k++) {
        d[k] = (s_delta_t){deltas[k], calloc((size_t)o->splits, sizeof(s_row_t))};
        ok = ok && d[k].rows;
    }
    uint64_t st = (uint64_t)o->seed;
    for (int i = 0; ok && i < s->n; i++)
        perm[i] = i;
    for (int sp = 0; ok && sp < o->splits; sp++) {
        s_shuffle(perm, s->n, &st);
        memcpy(tests + (size_t)sp * n_test, perm + n_cal, (size_t)n_test * sizeof *perm);
        ok = !s_split(s, o, perm, n_cal, d, nd, sp);
    }
    if (ok) {
        printf("\nerror bound: %d splits (seed %d): %d calibration / %d test pairs, alpha %g, "
               "min-obs %d\n",
               o->splits, o->seed, n_cal, n_test, o->alpha, o->min_obs);
        printf("%7s %8s %9s %8s %7s %6s %9s %8s %7s %8s %5s\n", "delta", "thresh", "hit rate",
               "recall", "hits", "wrong", "wrong/hit", "upper95", ">delta", "flagged", "none");
        cJSON *b = cJSON_AddObjectToObject(j, "bound");
        cJSON_AddNumberToObject(b, "seed", o->seed);
        cJSON_AddNumberToObject(b, "calib_frac", o->calib_frac);
        cJSON_AddNumberToObject(b, "alpha", o->alpha);
        cJSON_AddNumberToObject(b, "min_obs", o->min_obs);
        cJSON_AddNumberToObject(b, "splits", o->splits);
        cJSON_AddNumberToObject(b, "calib_pairs", n_cal);
        cJSON_AddNumberToObject(b, "test_pairs", n_test);
        cJSON *sets = cJSON_AddArrayToObject(b, "test_sets"); /* per split: its test pairs */
        for (int sp = 0; sp < o->splits; sp++)
            cJSON_AddItemToArray(sets, cJSON_CreateIntArray(tests + (size_t)sp * n_test, n_test));
        cJSON *arr = cJSON_AddArrayToObject(b, "deltas");
        for (int k = 0; k < nd; k++)
            s_report_delta(&d[k], o->splits, arr);
        printf("(medians over splits; hits, wrong and wrong/hit pooled; upper95: one-sided 95 %% "
               "Clopper-Pearson; >delta: splits whose wrong/hit exceeds delta; flagged: whose "
               "lower bound does; none: no threshold passed)\n");
    } else {
        fprintf(stderr, "strata semcache-eval: out of memory\n");
    }
    for (int k = 0; k < nd; k++)
        free(d[k].rows);
    free(perm), free(tests);
    return ok;
}

/* --index: every N timed, printed, into j.  false after a line. */
static bool s_index_eval(const s_eval_opts_t *o, const int *ns, int nn, int dim, double delta,
                         cJSON *j) {
    printf("exact search (serve_semcache_lookup, one context, no threshold passing): dim %d, "
           "%d queries\n",
           dim, o->queries);
    printf("%10s %10s %10s %10s %12s %12s %9s\n", "entries", "p50 us", "p99 us", "mean us",
           "lookups/s", "table MiB", "build s");
    cJSON *arr = cJSON_AddArrayToObject(j, "index");
    for (int i = 0; i < nn; i++) {
        s_cost_t c;
        int rc = s_index_cost(ns[i], dim, o, delta, &c);
        if (rc) {
            fprintf(stderr, "strata semcache-eval: --index %d: %s\n", ns[i],
                    rc == -ENOMEM ? "out of memory" : "a lookup did not scan the entries");
            return false;
        }
        printf("%10d %10.2f %10.2f %10.2f %12.0f %12.1f %9.2f\n", c.entries, c.p50_us, c.p99_us,
               c.mean_us, c.per_s, c.table_bytes / (1 << 20), c.build_s);
        fflush(stdout);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "entries", c.entries);
        cJSON_AddNumberToObject(x, "dim", c.dim);
        cJSON_AddNumberToObject(x, "queries", c.queries);
        cJSON_AddNumberToObject(x, "delta", delta);
        s_jnum(x, "p50_us", c.p50_us);
        s_jnum(x, "p99_us", c.p99_us);
        s_jnum(x, "mean_us", c.mean_us);
        s_jnum(x, "lookups_per_s", c.per_s);
        cJSON_AddNumberToObject(x, "table_bytes", c.table_bytes);
        s_jnum(x, "build_s", c.build_s);
        cJSON_AddItemToArray(arr, x);
    }
    return true;
}

/* Embed the pairs with the model, then the AUCs and the bound.  The model's width in *dim.
 * false after a line. */
/* Text t's greedy answer (the chat template, at most n tokens) as its normalised hash, with
 * r reserved for it; logits: (n_vocab) scratch, ids: (n) scratch.  0, or -1 after a line. */
static int s_answer(cli_runner_t *r, const char *t, int n, float *logits, int32_t *ids,
                    uint64_t *hash) {
    model_chat_msg_t m = {"user", t};
    char *rendered = model_tokenizer_chat(r->tok, &m, 1, true);
    int nv = model_config(r->model)->n_vocab, np = 0, k = 0;
    int32_t *toks = malloc((size_t)r->max_ctx * sizeof *toks);
    if (rendered && toks)
        np = model_tokenizer_encode(r->tok, rendered, strlen(rendered),
                                    model_tokenizer_add_bos(r->tok), true, toks, r->max_ctx);
    int rc = np > 0 && np + n <= r->max_ctx ? cli_runner_eval(r, toks, np, 0, false, logits) : -1;
    for (; !rc && k < n; k++) {
        int32_t best = 0;
        for (int v = 1; v < nv; v++)
            best = logits[v] > logits[best] ? v : best;
        if (model_tokenizer_is_eog(r->tok, best))
            break;
        ids[k] = best;
        rc = k + 1 < n ? cli_runner_eval(r, &ids[k], 1, np + k, false, logits) : 0;
    }
    char *text = rc ? NULL : model_tokenizer_decode(r->tok, ids, k);
    if (text)
        *hash = serve_semcache_answer_hash(text, strlen(text));
    else
        fprintf(stderr, "strata semcache-eval: cannot answer '%.60s'%s\n", t,
                rendered ? "" : ": the model has no chat template strata knows");
    free(text), free(toks), free(rendered);
    return text ? 0 : -1;
}

/* --answers: every pair's "same" from the model's answers; *agree: the pairs where that
 * equals the label.  false after a line. */
static bool s_relabel(cli_runner_t *r, s_set_t *s, int n, int threads, int *agree) {
    int nv = model_config(r->model)->n_vocab;
    float *logits = malloc((size_t)nv * sizeof *logits);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    uint64_t *h = malloc((size_t)s->n_text * sizeof *h);
    bool ok = logits && ids && h &&
              cli_runner_reserve(r, "semcache-eval", 512 + n, 512, threads, KERN_F16);
    for (int i = 0; ok && i < s->n_text; i++)
        ok = !s_answer(r, s->text[i], n, logits, ids, &h[i]);
    *agree = 0;
    for (int i = 0; ok && i < s->n; i++) {
        bool same = h[s->p[i].ta] == h[s->p[i].tb];
        *agree += same == s->p[i].same;
        s->n_pos += (int)same - (int)s->p[i].same;
        s->p[i].same = same;
    }
    free(logits), free(ids), free(h);
    return ok;
}

static bool s_pairs_eval(const s_eval_cfg_t *c, s_set_t *s, const double *deltas, int nd, cJSON *j,
                         int *dim) {
    cli_runner_t r;
    if (s_index_texts(s) || !cli_runner_open(&r, "semcache-eval", c->m.model)) {
        if (!s->text)
            fprintf(stderr, "strata semcache-eval: out of memory\n");
        return false;
    }
    char err[512];
    model_embedder_t *emb =
        model_embedder_new(r.model, r.tok, S_MAX_TOKENS, c->m.threads, err, sizeof err);
    bool ok = emb != NULL;
    if (!ok)
        fprintf(stderr, "strata semcache-eval: %s\n", err);
    ok = ok && s_embed_all(s, emb);
    model_embedder_destroy(&emb);
    int agree = 0;
    uint64_t t0 = base_now_us();
    ok = ok && (!c->e.answers || s_relabel(&r, s, c->e.answers, c->m.threads, &agree));
    cli_runner_close(&r);
    if (!ok)
        return false;
    if (c->e.answers) {
        printf("oracle: the model's greedy answers (at most %d tokens; %.1f s): %d pairs the same "
               "(%d of %d agree with the labels)\n",
               c->e.answers, (double)(base_now_us() - t0) * 1e-6, s->n_pos, agree, s->n);
        cJSON_AddNumberToObject(j, "answers_agree_with_labels", agree);
    }
    cJSON_AddStringToObject(j, "oracle", c->e.answers ? "answers" : "labels");
    *dim = s->dim;
    printf("%d pairs (%d same) from %s; %d texts embedded in %.2f s (%s, width %d)\n", s->n,
           s->n_pos, c->e.pairs, s->n_text, s->embed_s, c->m.model, s->dim);
    cJSON_AddStringToObject(j, "pairs_file", c->e.pairs);
    cJSON_AddStringToObject(j, "model", c->m.model);
    cJSON_AddNumberToObject(j, "pairs", s->n);
    cJSON_AddNumberToObject(j, "positive", s->n_pos);
    cJSON_AddNumberToObject(j, "texts", s->n_text);
    cJSON_AddNumberToObject(j, "dim", s->dim);
    cJSON_AddNumberToObject(j, "embed_s", s->embed_s);
    s_report_auc(s, j);
    if (c->e.csv && !s_write_csv(c->e.csv, s))
        return false;
    return s_bound_eval(s, &c->e, deltas, nd, j);
}

/* "a,b,c" into v (at most max): numbers in (lo, hi), or with integers, whole numbers in
 * [lo, hi].  The count, or -1 after a line. */
static int s_list(const char *flag, const char *text, double lo, double hi, bool integers,
                  double *v, int max) {
    int n = 0;
    for (const char *p = text; n >= 0 && *p;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        bool in = integers ? x >= lo && x <= hi && x == floor(x) : x > lo && x < hi;
        if (end == p || errno || !in || n == max || (*end && *end != ',') ||
            (*end == ',' && !end[1]))
            n = -1;
        else
            v[n++] = x, p = *end ? end + 1 : end;
    }
    if (n <= 0)
        fprintf(
            stderr,
            "strata semcache-eval: bad value for --%s: '%s' (expected up to %d %s %.10g %s %.10g, "
            "separated by commas)\n",
            flag, text, max, integers ? "integers from" : "numbers above", lo,
            integers ? "to" : "and below", hi);
    return n <= 0 ? -1 : n;
}

/* Write j to path.  false after a line. */
static bool s_write_json(const char *path, const cJSON *j) {
    char *text = cJSON_Print(j);
    FILE *f = text ? fopen(path, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f))
        ok = false;
    if (!ok)
        fprintf(stderr, "strata semcache-eval: cannot write '%s'\n", path);
    free(text);
    return ok;
}

int cmd_semcache_eval(int argc, char **argv) {
    s_eval_cfg_t c;
    memset(&c, 0, sizeof c);
    cli_model_opts_default(&c.m);
    c.e = (s_eval_opts_t){.pairs = s_default_pairs,
                          .deltas = "0.01,0.02,0.05",
                          .calib_frac = 0.5,
                          .alpha = 0.05,
                          .min_obs = 30,
                          .splits = 20,
                          .seed = 1,
                          .queries = 200};
    int next, rc = cli_flags_parse(&s_eval_cmd, argc, argv, &c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (next < argc) {
        fprintf(stderr, "strata semcache-eval: unexpected argument '%s' (see --help)\n",
                argv[next]);
        return 2;
    }
    double deltas[S_MAX_DELTAS], idx[S_MAX_INDEX];
    int ns[S_MAX_INDEX], nd = s_list("deltas", c.e.deltas, 0, 1, false, deltas, S_MAX_DELTAS);
    int ni = c.e.index ? s_list("index", c.e.index, 1, 1e8, true, idx, S_MAX_INDEX) : 0;
    double ann[S_MAX_INDEX];
    int na_[S_MAX_INDEX], na = c.e.ann ? s_list("ann", c.e.ann, 1, 1e8, true, ann, S_MAX_INDEX) : 0;
    if (nd < 0 || ni < 0 || na < 0)
        return 2;
    for (int i = 0; i < ni; i++)
        ns[i] = (int)idx[i];
    for (int i = 0; i < na; i++)
        na_[i] = (int)ann[i];
    /* --index / --ann alone (no -f given) measure the store only: no pairs, no model */
    bool pairs = (!c.e.index && !c.e.ann) || c.e.pairs != s_default_pairs;
    s_set_t s = {0};
    cJSON *j = cJSON_CreateObject();
    int model_dim = 0;
    bool ok = j && (!pairs || s_load_pairs(c.e.pairs, &s));
    ok = ok && (!pairs || s_pairs_eval(&c, &s, deltas, nd, j, &model_dim));
    if (ok && ni && pairs)
        printf("\n");
    int dim = c.e.dim ? c.e.dim : model_dim ? model_dim : S_NO_DIM; /* --dim, the model's */
    if (ok && ni)
        ok = s_index_eval(&c.e, ns, ni, dim, deltas[0], j);
    if (ok && na)
        ok = s_ann_eval(&c.e, na_, na, dim, j);
    if (ok && c.e.json)
        ok = s_write_json(c.e.json, j);
    cJSON_Delete(j);
    s_set_free(&s);
    return ok ? 0 : 1;
}
