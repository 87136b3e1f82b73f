/* model_spec.c - speculative decoding rules: n-gram lookup drafts, rejection-
 * sampling verification over the sampler's own distribution, adaptive depth. */
#include "model_spec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ n-gram */

int model_spec_ngram(const int32_t *tokens, int n, int min_ngram, int max_ngram, int k,
                     int32_t *out) {
    if (!tokens || !out || n < 2 || k < 1 || min_ngram < 1 || max_ngram < min_ngram)
        return 0;
    /* Scan candidate ends j (the match is tokens[j-g..j), followed by tokens[j])
     * from the most recent backwards; L = length of the common suffix of
     * tokens[0..j) and tokens[0..n), capped at max_ngram (and at j).  Keep the
     * first j with the largest L: the most recent of the longest. */
    int best_j = -1, best_l = 0;
    const int32_t last = tokens[n - 1];
    for (int j = n - 1; j >= 1; j--) {
        if (tokens[j - 1] != last)
            continue;
        int cap = max_ngram < j ? max_ngram : j;
        int l = 1;
        while (l < cap && tokens[j - 1 - l] == tokens[n - 1 - l])
            l++;
        if (l > best_l) {
            best_l = l;
            best_j = j;
            if (l == max_ngram)
                break;
        }
    }
    if (best_j < 0 || best_l < min_ngram)
        return 0;
    for (int t = 0; t < k; t++) {
        int idx = best_j + t; /* idx - n < t: out[idx - n] is already written */
        out[t] = idx < n ? tokens[idx] : out[idx - n];
    }
    return k;
}

/* ------------------------------------------------------------------ verification */

int model_spec_verify(model_sampler_t *s, const model_sampler_params_t *sp, float *logits,
                      const int32_t *draft, int k, const int32_t *hist, int n_hist, int pos0,
                      int32_t *out) {
    if (!s || !sp || !logits || !out || k < 0 || (k > 0 && !draft) || n_hist < 0 ||
        (n_hist > 0 && !hist) || pos0 < 0)
        return -EINVAL;
    int nv = model_sampler_n_vocab(s);
    /* The penalty reads the last repeat_last_n tokens of hist + draft[0..i):
     * keep that window contiguous (win = tail of hist, then the drafts). */
    bool pen = sp->repeat_penalty != 1.0f && sp->repeat_last_n > 0;
    int32_t *win = NULL;
    int w0 = 0;
    if (pen && k > 0) {
        w0 = n_hist < sp->repeat_last_n ? n_hist : sp->repeat_last_n;
        win = malloc(((size_t)w0 + (size_t)k) * sizeof *win);
        if (!win)
            return -ENOMEM;
        if (w0)
            memcpy(win, hist + (n_hist - w0), (size_t)w0 * sizeof *win);
        memcpy(win + w0, draft, (size_t)k * sizeof *win);
    }
    int e = 0;
    for (int i = 0; i <= k; i++) {
        const int32_t *h = win ? win : hist;
        int nh = win ? w0 + i : n_hist; /* without the penalty the history is not read */
        int32_t t = model_sampler_sample(s, sp, logits + (size_t)i * nv, h, nh, pos0 + i);
        out[e++] = t;
        if (i == k || t != draft[i])
            break;
    }
    free(win);
    return e;
}

/* ------------------------------------------------------------------ adaptive depth */

void model_spec_adapt_init(model_spec_adapt_t *a, int k_fixed, int k_max) {
    memset(a, 0, sizeof *a);
    a->k_fixed = k_fixed > 0 ? (k_fixed < MODEL_SPEC_MAX_K ? k_fixed : MODEL_SPEC_MAX_K) : 0;
    a->k_max = k_max < 1 ? 1 : k_max > MODEL_SPEC_MAX_K ? MODEL_SPEC_MAX_K : k_max;
    a->rate = 0.5f;
    a->alpha = 0.1f;
    a->cost0 = 0.1f;
    a->n_saturate = 32;
    a->draft_cost = 0;
    a->min_obs = 8;
    a->probe_every = 16;
}

/* Tokens per step over cost per step for depth k (k = 0: exactly 1).  The
 * rate is capped at S_RATE_MAX: no draft is ever certain, and an EMA that
 * saturated at 1 would otherwise always ask for the deepest k. */
#define S_RATE_MAX 0.98
static double s_gain(double rate, int k, double c) {
    double a = rate < S_RATE_MAX ? rate : S_RATE_MAX;
    return (1 - pow(a, k + 1)) / (1 - a) / (1 + c * k);
}

int model_spec_adapt_next_k(model_spec_adapt_t *a, int n_running) {
    a->probing = false;
    if (a->k_fixed > 0)
        return a->k_fixed;
    int n = n_running < 1 ? 1 : n_running;
    int sat = a->n_saturate > 1 ? a->n_saturate : 2;
    double f = n >= sat ? 1.0 : (double)(n - 1) / (sat - 1);
    double c = a->cost0 + (1 - a->cost0) * f + a->draft_cost;
    /* the depth limit shrinks with the batch: k_max alone, k_max/2 at 5 running,
     * k_max/4 at 13, ... (verification positions take batch slots from others) */
    int cap = a->k_max * 4 / (n + 3);
    cap = cap < 1 ? 1 : cap;
    int best_k = 0;
    double best = 1.0; /* plain decoding: 1 token per step at cost 1 */
    for (int k = 1; k <= cap; k++) {
        double g = s_gain(a->rate, k, c);
        if (g > best) {
            best = g;
            best_k = k;
        }
    }
    if (best_k > 0 || a->n_obs < a->min_obs) {
        a->idle = 0;
        return best_k > 0 ? best_k : 1;
    }
    /* turned off: re-probe now and then (the load or the text may change) */
    if (++a->idle >= a->probe_every) {
        a->idle = 0;
        a->probing = true;
        return a->k_max < 2 ? a->k_max : 2;
    }
    return 0;
}

void model_spec_adapt_observe(model_spec_adapt_t *a, int k, int n_accepted) {
    if (k <= 0)
        return;
    if (k > MODEL_SPEC_MAX_K)
        k = MODEL_SPEC_MAX_K;
    if (n_accepted < 0)
        n_accepted = 0;
    if (n_accepted > k)
        n_accepted = k;
    float r = a->rate;
    for (int i = 0; i < n_accepted; i++)
        r += a->alpha * (1.0f - r);
    if (n_accepted < k)
        r -= a->alpha * r; /* the first rejection; positions after it were not tried */
    a->rate = r < 0 ? 0 : r > 1 ? 1 : r;
    a->n_obs += n_accepted + (n_accepted < k);
    if (a->probing) {
        /* a probe that was not fully accepted waits longer next time */
        a->probe_every = n_accepted == k ? 16 : (a->probe_every < 128 ? a->probe_every * 2 : 256);
        a->probing = false;
    }
}
