/* model_sampler.c - logit bias, penalties, temperature, top-k, top-p, min-p, seeded draws;
 * and stop-string detection with hold-back for streaming. */
#include "model_sampler.h"
#include "model_err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float logit; /* value, then probability */
    int32_t id;  /* token */
} s_cand_t;

struct model_sampler_t {
    int n_vocab;    /* logits per call */
    s_cand_t *cand; /* (n_vocab) candidates */
    int32_t *count; /* (n_vocab) occurrences in the completion; all 0 between calls */
};

model_sampler_params_t model_sampler_defaults(void) {
    return (model_sampler_params_t){.temperature = 0.8f,
                                    .top_k = 40,
                                    .top_p = 0.95f,
                                    .min_p = 0.05f,
                                    .repeat_penalty = 1.0f,
                                    .repeat_last_n = 64};
}

int model_sampler_check(const model_sampler_params_t *p, char *err, size_t errlen) {
    const char *why = NULL;
    if (!(p->temperature >= 0 && p->temperature <= 100))
        why = "temperature must be in [0, 100]";
    else if (!(p->top_p > 0 && p->top_p <= 1))
        why = "top_p must be in (0, 1]";
    else if (!(p->min_p >= 0 && p->min_p <= 1))
        why = "min_p must be in [0, 1]";
    else if (!(p->repeat_penalty > 0 && p->repeat_penalty <= 10))
        why = "repeat_penalty must be in (0, 10]";
    else if (p->repeat_last_n < 0)
        why = "repeat_last_n must be >= 0";
    else if (p->top_k < 0)
        why = "top_k must be >= 0";
    else if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        why = "presence_penalty must be in [-2, 2]";
    else if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        why = "frequency_penalty must be in [-2, 2]";
    else if (p->n_bias < 0 || p->n_bias > MODEL_MAX_LOGIT_BIAS || (p->n_bias && !p->bias))
        why = "logit_bias must have at most 1024 entries";
    for (int i = 0; !why && i < p->n_bias; i++) {
        if (!(p->bias[i].bias >= -100 && p->bias[i].bias <= 100))
            why = "logit_bias values must be in [-100, 100]";
        else if (p->bias[i].token < 0)
            why = "logit_bias token ids must be >= 0";
    }
    if (!why)
        return 0;
    return model_err_set(err, errlen, -EINVAL, "%s", why);
}

model_sampler_t *model_sampler_new(int n_vocab) {
    model_sampler_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->cand || !s->count)
        model_sampler_destroy(&s);
    return s;
}

void model_sampler_destroy(model_sampler_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->cand);
    free((*self_p)->count);
    free(*self_p);
    *self_p = NULL;
}

/* Two passes that the compiler keeps branch-free: the maximum with 8
 * independent running maxima (vectorisable), then the first index holding it.
 * Same result as the obvious loop (first index on ties; NaN never wins). */
int32_t model_argmax(const float *x, int n) {
    float m[8];
    for (int j = 0; j < 8; j++)
        m[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float best = -INFINITY;
    for (int j = 0; j < 8; j++)
        best = m[j] > best ? m[j] : best;
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best)
            return i;
    return 0; /* every value NaN or -inf */
}

void model_logits_ban(float *logits, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++)
        logits[ids[i]] = -INFINITY;
}

/* splitmix64: a well-mixed 64-bit value from (seed, pos). */
static uint64_t s_mix(uint64_t seed, uint64_t pos) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (pos + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int s_cmp_desc(const void *a, const void *b) {
    float x = ((const s_cand_t *)a)->logit, y = ((const s_cand_t *)b)->logit;
    if (x != y)
        return x < y ? 1 : -1;
    return ((const s_cand_t *)a)->id - ((const s_cand_t *)b)->id;
}

/* Move the k largest candidates to the front, sorted (k small: selection). */
static void s_top_k(s_cand_t *c, int n, int k) {
    /* A bounded insertion into a sorted prefix: O(n k) worst, O(n) typical. */
    int m = 0;
    for (int i = 0; i < n; i++) {
        s_cand_t x = c[i];
        if (m == k && s_cmp_desc(&x, &c[k - 1]) >= 0)
            continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && s_cmp_desc(&x, &c[j - 1]) < 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/* CTRL-style repetition penalty on the distinct tokens of the last
 * repeat_last_n of history, in place. */
static void s_penalize(int n, const model_sampler_params_t *p, float *logits,
                       const int32_t *history, int n_history) {
    if (p->repeat_penalty == 1.0f || p->repeat_last_n <= 0)
        return;
    int from = n_history > p->repeat_last_n ? n_history - p->repeat_last_n : 0;
    /* Penalise each distinct token once: mark by negating a copy is not
     * possible in place, so dedupe by checking earlier occurrences. */
    for (int i = from; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= n)
            continue;
        bool seen = false;
        for (int j = from; j < i && !seen; j++)
            seen = history[j] == t;
        if (seen)
            continue;
        logits[t] = logits[t] > 0 ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
    }
}

/* OpenAI's presence and frequency penalties over history[gen_start .. n_history),
 * in place: count each token, subtract once per distinct token, reset the counts.
 * The adjustment is one float product and sum, then one subtraction (the CUDA
 * sampler does the same operations, rounded the same). */
static void s_penalize_openai(model_sampler_t *s, const model_sampler_params_t *p, float *logits,
                              const int32_t *history, int n_history) {
    if (p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    int n = s->n_vocab, from = p->gen_start > 0 ? p->gen_start : 0;
    for (int i = from; i < n_history; i++)
        if (history[i] >= 0 && history[i] < n)
            s->count[history[i]]++;
    for (int i = from; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= n || s->count[t] == 0)
            continue;                                        /* out of range, or already done */
        float f = p->frequency_penalty * (float)s->count[t]; /* two statements: no FMA */
        float adj = f + p->presence_penalty;
        logits[t] = logits[t] - adj;
        s->count[t] = 0;
    }
}

/* Everything before the choice: logit bias, repetition penalty, OpenAI penalties. */
static void s_adjust(model_sampler_t *s, const model_sampler_params_t *p, float *logits,
                     const int32_t *history, int n_history) {
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].token >= 0 && p->bias[i].token < s->n_vocab)
            logits[p->bias[i].token] += p->bias[i].bias;
    s_penalize(s->n_vocab, p, logits, history, n_history);
    s_penalize_openai(s, p, logits, history, n_history);
}

/* Temperature, top-k, softmax, top-p, min-p (temperature > 0): leaves the m
 * survivors in s->cand[0..m), most likely first, each with its (not yet
 * renormalised) probability; *total gets their sum.  The draw picks candidate
 * i with probability cand[i].logit / total.  Returns m >= 1. */
static int s_candidates(model_sampler_t *s, const model_sampler_params_t *p, const float *logits,
                        double *total) {
    int n = s->n_vocab;
    s_cand_t *c = s->cand;
    for (int i = 0; i < n; i++)
        c[i] = (s_cand_t){logits[i] / p->temperature, i};
    int m = n;
    if (p->top_k > 0 && p->top_k < n) {
        s_top_k(c, n, p->top_k);
        m = p->top_k;
    } else {
        qsort(c, (size_t)n, sizeof *c, s_cmp_desc);
    }
    /* softmax over the survivors (sorted descending) */
    float mx = c[0].logit;
    double sum = 0;
    for (int i = 0; i < m; i++) {
        c[i].logit = expf(c[i].logit - mx);
        sum += c[i].logit;
    }
    for (int i = 0; i < m; i++)
        c[i].logit = (float)(c[i].logit / sum);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = m;
        for (int i = 0; i < m; i++) {
            cum += c[i].logit;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    if (p->min_p > 0) {
        float thr = p->min_p * c[0].logit;
        int keep = 1;
        while (keep < m && c[keep].logit >= thr)
            keep++;
        m = keep;
    }
    double t = 0;
    for (int i = 0; i < m; i++)
        t += c[i].logit;
    *total = t;
    return m;
}

int32_t model_sampler_sample(model_sampler_t *s, const model_sampler_params_t *p, float *logits,
                             const int32_t *history, int n_history, int pos) {
    s_adjust(s, p, logits, history, n_history);
    if (p->temperature <= 0)
        return model_argmax(logits, s->n_vocab);
    double total;
    int m = s_candidates(s, p, logits, &total);
    const s_cand_t *c = s->cand;
    double u = (double)(s_mix(p->seed, (uint64_t)pos) >> 11) * (1.0 / 9007199254740992.0) * total;
    double cum = 0;
    for (int i = 0; i < m; i++) {
        cum += c[i].logit;
        if (u < cum)
            return c[i].id;
    }
    return c[m - 1].id;
}

int model_sampler_dist(model_sampler_t *s, const model_sampler_params_t *p, float *logits,
                       const int32_t *history, int n_history, int32_t *ids, float *probs) {
    s_adjust(s, p, logits, history, n_history);
    if (p->temperature <= 0) {
        ids[0] = model_argmax(logits, s->n_vocab);
        probs[0] = 1.0f;
        return 1;
    }
    double total;
    int m = s_candidates(s, p, logits, &total);
    for (int i = 0; i < m; i++) {
        ids[i] = s->cand[i].id;
        probs[i] = (float)(s->cand[i].logit / total);
    }
    return m;
}

int model_sampler_n_vocab(const model_sampler_t *s) {
    return s->n_vocab;
}

/* ------------------------------------------------------------------ stops */

int model_stopper_init(model_stopper_t *s, const char *const *stops, int n) {
    memset(s, 0, sizeof *s);
    if (n < 0 || n > MODEL_MAX_STOP)
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            model_stopper_free(s);
            return -EINVAL;
        }
        s->stops[i] = strdup(stops[i]);
        if (!s->stops[i]) {
            model_stopper_free(s);
            return -ENOMEM;
        }
        s->n_stops = i + 1;
    }
    return 0;
}

void model_stopper_free(model_stopper_t *s) {
    for (int i = 0; i < s->n_stops; i++)
        free(s->stops[i]);
    free(s->held);
    memset(s, 0, sizeof *s);
}

/* Length of the longest suffix of buf[0..n) that is a proper prefix of a stop string. */
static size_t s_partial(const model_stopper_t *s, const char *buf, size_t n) {
    size_t best = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t L = strlen(s->stops[i]);
        for (size_t k = L - 1; k > best; k--)
            if (k <= n && !memcmp(buf + n - k, s->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

size_t model_stopper_push(model_stopper_t *s, const char *piece, size_t n_piece, char *out,
                          size_t cap) {
    if (cap)
        out[0] = 0;
    if (s->stopped)
        return 0;
    if (s->n_stops == 0) {
        size_t n = n_piece < cap - 1 ? n_piece : cap - 1;
        memcpy(out, piece, n);
        out[n] = 0;
        return n;
    }
    if (s->n_held + n_piece + 1 > s->cap_held) {
        size_t nc = (s->n_held + n_piece + 1) * 2;
        char *h = realloc(s->held, nc);
        if (!h)
            return 0;
        s->held = h;
        s->cap_held = nc;
    }
    memcpy(s->held + s->n_held, piece, n_piece);
    s->n_held += n_piece;
    s->held[s->n_held] = 0;
    /* earliest complete stop string */
    size_t cut = s->n_held;
    for (int i = 0; i < s->n_stops; i++) {
        const char *f = memmem(s->held, s->n_held, s->stops[i], strlen(s->stops[i]));
        if (f && (size_t)(f - s->held) < cut) {
            cut = (size_t)(f - s->held);
            s->stopped = true;
        }
    }
    size_t emit = s->stopped ? cut : s->n_held - s_partial(s, s->held, s->n_held);
    if (emit > cap - 1)
        emit = cap - 1;
    memcpy(out, s->held, emit);
    out[emit] = 0;
    memmove(s->held, s->held + emit, s->n_held - emit);
    s->n_held -= emit;
    if (s->stopped)
        s->n_held = 0;
    return emit;
}

size_t model_stopper_flush(model_stopper_t *s, char *out, size_t cap) {
    size_t n = s->stopped ? 0 : s->n_held;
    if (n > cap - 1)
        n = cap - 1;
    memcpy(out, s->held ? s->held : "", n);
    out[n] = 0;
    s->n_held = 0;
    return n;
}
