/* model_moefy.c - MoEfication of a dense llama model (see model_moefy.h): the calibration
 * record, balanced spherical k-means over the neurons' activation patterns, the
 * least-squares router, the routing statistics, and the Mixtral-layout GGUF writer.
 * The heavy products (similarities, group outputs, H^T H) go through the kernels' F32
 * gemm; layers are fitted in parallel, one layer per thread at a time.
 */
#include "model_moefy.h"
#include "base_log.h"
#include "kern_ops.h"
#include "model_err.h"
#include "model_gguf_write.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "moefy"
#define MAX_THREADS 256
#define TILE 64 /* tokens per tile of group outputs */

struct model_moefy_t {
    model_config_t cfg;      /* the dense model's configuration */
    model_moefy_opts_t o;    /* options, defaults filled in */
    int m;                   /* d_ff / E: one expert's width */
    float *h;                /* (n_layer, max_tokens, d_model) recorded FFN inputs */
    kern_f16_t *act;         /* (n_layer, max_tokens, d_ff) recorded activations, as F16 */
    int *n_rec;              /* (n_layer) tokens recorded per layer */
    bool bad;                /* a tap came with a shape other than the configuration's */
    bool fitted;             /* perm and router hold a fit */
    int32_t *perm;           /* (n_layer, d_ff) expert-major neuron order */
    float *router;           /* (n_layer, E, d_model) */
    float *use;              /* (n_layer, E) routed-slot fractions */
    model_moefy_stats_t *st; /* (n_layer) */
};

/* ---- checks, lifetime, recording ------------------------------------------------------ */

static bool s_has_tensor(const model_gguf_t *g, const char *name) {
    return model_gguf_tensor(g, name) != NULL;
}

int model_moefy_check(const model_gguf_t *g, int n_experts, int top_k, char *err, size_t errlen) {
    char *arch = NULL;
    if (!model_gguf_get_str(g, "general.architecture", &arch))
        return model_err_set(err, errlen, -EINVAL, "%s: no general.architecture",
                             model_gguf_path(g));
    char key[160];
    snprintf(key, sizeof key, "%s.expert_count", arch);
    free(arch);
    uint64_t n_exp = 0;
    if ((model_gguf_get_u64(g, key, &n_exp) && n_exp > 0) ||
        s_has_tensor(g, "blk.0.ffn_gate_inp.weight") ||
        s_has_tensor(g, "blk.0.ffn_gate_exps.weight"))
        return model_err_set(err, errlen, -EINVAL, "%s is already a MoE model (%llu experts)",
                             model_gguf_path(g), (unsigned long long)n_exp);
    model_config_t cfg;
    int rc = model_config_read(g, &cfg, err, errlen);
    if (rc < 0)
        return rc;
    if (n_experts < 2 || n_experts > MODEL_MOEFY_MAX_EXPERTS)
        return model_err_set(err, errlen, -EINVAL, "--experts must be 2 .. %d (not %d)",
                             MODEL_MOEFY_MAX_EXPERTS, n_experts);
    if (cfg.d_ff % n_experts != 0)
        return model_err_set(err, errlen, -EINVAL,
                             "%d experts do not divide the FFN width %d into equal groups",
                             n_experts, cfg.d_ff);
    if (top_k < 1 || top_k > n_experts)
        return model_err_set(err, errlen, -EINVAL,
                             "--top-k must be 1 .. %d (the expert count), not %d", n_experts,
                             top_k);
    return 0;
}

model_moefy_t *model_moefy_new(const model_config_t *cfg, const model_moefy_opts_t *opts, char *err,
                               size_t errlen) {
    const model_moefy_opts_t *o = opts;
    int E = o->n_experts;
    if (E < 2 || E > MODEL_MOEFY_MAX_EXPERTS || cfg->d_ff % E != 0 || o->top_k < 1 ||
        o->top_k > E || o->max_tokens < 1 || cfg->n_layer < 1) {
        model_err_set(err, errlen, -EINVAL,
                      "bad MoEfication options (%d experts, top-%d, %d tokens)", E, o->top_k,
                      o->max_tokens);
        return NULL;
    }
    model_moefy_t *self = calloc(1, sizeof *self);
    if (!self)
        goto oom;
    self->cfg = *cfg;
    self->o = *o;
    if (self->o.kmeans_iters <= 0)
        self->o.kmeans_iters = 30;
    if (self->o.ridge <= 0)
        self->o.ridge = 1e-3f;
    if (self->o.seed == 0)
        self->o.seed = 0x5eed5eedULL;
    self->m = cfg->d_ff / E;
    size_t L = (size_t)cfg->n_layer, N = (size_t)o->max_tokens;
    self->h = malloc(L * N * (size_t)cfg->d_model * sizeof(float));
    self->act = malloc(L * N * (size_t)cfg->d_ff * sizeof(kern_f16_t));
    self->n_rec = calloc(L, sizeof(int));
    self->perm = calloc(L * (size_t)cfg->d_ff, sizeof(int32_t));
    self->router = calloc(L * (size_t)E * (size_t)cfg->d_model, sizeof(float));
    self->use = calloc(L * (size_t)E, sizeof(float));
    self->st = calloc(L, sizeof *self->st);
    if (!self->h || !self->act || !self->n_rec || !self->perm || !self->router || !self->use ||
        !self->st)
        goto oom;
    for (size_t l = 0; l < L; l++)
        self->st[l].use = self->use + l * (size_t)E;
    return self;
oom:
    model_moefy_destroy(&self);
    model_err_set(err, errlen, -ENOMEM, "out of memory for %d calibration tokens x %d layers",
                  o->max_tokens, cfg->n_layer);
    return NULL;
}

void model_moefy_destroy(model_moefy_t **self_p) {
    if (!self_p || !*self_p)
        return;
    model_moefy_t *self = *self_p;
    free(self->h);
    free(self->act);
    free(self->n_rec);
    free(self->perm);
    free(self->router);
    free(self->use);
    free(self->st);
    free(self);
    *self_p = NULL;
}

void model_moefy_tap(void *arg, int layer, int n_tokens, const float *h, int d_model,
                     const float *act, int d_ff) {
    model_moefy_t *self = arg;
    const model_config_t *c = &self->cfg;
    if (layer < 0 || layer >= c->n_layer || d_model != c->d_model || d_ff != c->d_ff ||
        n_tokens < 0 || !act) { /* act NULL: a MoE layer, no dense activations */
        self->bad = true;
        return;
    }
    int have = self->n_rec[layer];
    int take = self->o.max_tokens - have;
    if (take > n_tokens)
        take = n_tokens;
    if (take <= 0)
        return;
    size_t N = (size_t)self->o.max_tokens;
    memcpy(self->h + ((size_t)layer * N + (size_t)have) * (size_t)d_model, h,
           (size_t)take * (size_t)d_model * sizeof(float));
    kern_f16_t *dst = self->act + ((size_t)layer * N + (size_t)have) * (size_t)d_ff;
    const kern_ops_t *k = kern_ops_best();
    for (int t = 0; t < take; t++)
        k->quant_row(KERN_F16, act + (size_t)t * (size_t)d_ff, dst + (size_t)t * (size_t)d_ff,
                     d_ff);
    self->n_rec[layer] = have + take;
}

int model_moefy_recorded(const model_moefy_t *self) {
    int n = self->n_rec[0];
    for (int l = 1; l < self->cfg.n_layer; l++)
        if (self->n_rec[l] < n)
            n = self->n_rec[l];
    return n;
}

void model_moefy_reset(model_moefy_t *self) {
    memset(self->n_rec, 0, (size_t)self->cfg.n_layer * sizeof(int));
    self->bad = false;
}

const model_moefy_stats_t *model_moefy_stats(const model_moefy_t *self, int l) {
    if (!self->fitted || l < 0 || l >= self->cfg.n_layer)
        return NULL;
    return &self->st[l];
}

const int32_t *model_moefy_perm(const model_moefy_t *self, int l) {
    if (!self->fitted || l < 0 || l >= self->cfg.n_layer)
        return NULL;
    return self->perm + (size_t)l * (size_t)self->cfg.d_ff;
}

const float *model_moefy_router(const model_moefy_t *self, int l) {
    if (!self->fitted || l < 0 || l >= self->cfg.n_layer)
        return NULL;
    return self->router + (size_t)l * (size_t)self->o.n_experts * (size_t)self->cfg.d_model;
}

/* ---- one layer's scratch ---------------------------------------------------------------- */

/* What a thread needs to fit or evaluate one layer at a time (N = recorded tokens). */
typedef struct {
    float *a;        /* (N, d_ff) activations, dense order */
    float *ap;       /* (N, d_ff) activations, expert-major order */
    float *f;        /* (d_ff, N) neuron patterns (fit only) */
    float *cent;     /* (E, N) centroids (fit only) */
    float *sim;      /* (E, d_ff) pattern . centroid (fit only) */
    float *wd;       /* (d_model, d_ff) ffn_down, dense order */
    float *wp;       /* (d_model, d_ff) ffn_down, expert-major columns */
    float *ht;       /* (d_model, N) h transposed (fit only) */
    float *y;        /* (E, N) group output norms (fit only) */
    float *out;      /* (E, TILE, d_model) group outputs of a tile */
    float *gtmp;     /* (d_model + E, d_model) H^T H and H^T y as the gemm leaves them (fit only) */
    double *gram;    /* (d_model, d_model) H^T H + ridge, factored in place (fit only) */
    double *rhs;     /* (E, d_model) H^T y, solved in place (fit only) */
    int32_t *assign; /* (d_ff) group of each neuron (fit only) */
} s_scratch_t;

static void s_scratch_free(s_scratch_t *s) {
    free(s->a);
    free(s->ap);
    free(s->f);
    free(s->cent);
    free(s->sim);
    free(s->wd);
    free(s->wp);
    free(s->ht);
    free(s->y);
    free(s->out);
    free(s->gtmp);
    free(s->gram);
    free(s->rhs);
    free(s->assign);
    memset(s, 0, sizeof *s);
}

static int s_scratch_alloc(s_scratch_t *s, const model_moefy_t *self, int N, bool fit) {
    size_t ff = (size_t)self->cfg.d_ff, d = (size_t)self->cfg.d_model,
           E = (size_t)self->o.n_experts, n = (size_t)N;
    memset(s, 0, sizeof *s);
    s->a = malloc(n * ff * sizeof(float));
    s->ap = malloc(n * ff * sizeof(float));
    s->wd = malloc(d * ff * sizeof(float));
    s->wp = malloc(d * ff * sizeof(float));
    s->out = malloc(E * TILE * d * sizeof(float));
    bool ok = s->a && s->ap && s->wd && s->wp && s->out;
    if (fit) {
        s->f = malloc(ff * n * sizeof(float));
        s->cent = malloc(E * n * sizeof(float));
        s->sim = malloc(E * ff * sizeof(float));
        s->ht = malloc(d * n * sizeof(float));
        s->y = malloc(E * n * sizeof(float));
        s->gtmp = malloc((d + E) * d * sizeof(float));
        s->gram = malloc(d * d * sizeof(double));
        s->rhs = malloc(E * d * sizeof(double));
        s->assign = malloc(ff * sizeof(int32_t));
        ok = ok && s->f && s->cent && s->sim && s->ht && s->y && s->gtmp && s->gram && s->rhs &&
             s->assign;
    }
    if (!ok) {
        s_scratch_free(s);
        return -ENOMEM;
    }
    return 0;
}

/* Layer l's ffn_down, dequantized into wd (d_model, d_ff).  -EINVAL when missing or of
 * another shape. */
static int s_load_down(const model_moefy_t *self, const model_gguf_t *w, int l, float *wd) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
    const model_gguf_tensor_t *t = model_gguf_tensor(w, name);
    const int64_t ff = self->cfg.d_ff, d = self->cfg.d_model;
    if (!t || t->n_dims != 2 || t->ne[0] != ff || t->ne[1] != d)
        return -EINVAL;
    size_t rb = kern_row_size(t->type, ff);
    const kern_ops_t *k = kern_ops_ref();
    for (int64_t r = 0; r < d; r++)
        k->dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, wd + r * ff, ff);
    return 0;
}

/* The recorded activations of layer l as floats: a (N, d_ff). */
static void s_load_act(const model_moefy_t *self, int l, int N, float *a) {
    size_t ff = (size_t)self->cfg.d_ff, cap = (size_t)self->o.max_tokens;
    const kern_ops_t *k = kern_ops_best();
    for (int t = 0; t < N; t++)
        k->dequant_row(KERN_F16, self->act + ((size_t)l * cap + (size_t)t) * ff, a + t * ff,
                       (int64_t)ff);
}

/* Apply layer l's permutation: ap[t][k] = a[t][perm[k]], wp[r][k] = wd[r][perm[k]]. */
static void s_permute(const model_moefy_t *self, int l, int N, s_scratch_t *s) {
    const int ff = self->cfg.d_ff, d = self->cfg.d_model;
    const int32_t *p = self->perm + (size_t)l * (size_t)ff;
    for (int t = 0; t < N; t++) {
        const float *src = s->a + (size_t)t * ff;
        float *dst = s->ap + (size_t)t * ff;
        for (int k = 0; k < ff; k++)
            dst[k] = src[p[k]];
    }
    for (int r = 0; r < d; r++) {
        const float *src = s->wd + (size_t)r * ff;
        float *dst = s->wp + (size_t)r * ff;
        for (int k = 0; k < ff; k++)
            dst[k] = src[p[k]];
    }
}

/* Outputs of every group for tokens t0 .. t0+nt-1 (nt <= TILE) into s->out:
 * out[(g * TILE + c) * d_model + r] = sum_j ap[t0 + c][g*m + j] * wp[r][g*m + j]. */
static void s_group_outputs(const model_moefy_t *self, const s_scratch_t *s, int t0, int nt) {
    const int ff = self->cfg.d_ff, d = self->cfg.d_model, m = self->m, E = self->o.n_experts;
    const kern_ops_t *k = kern_ops_best();
    for (int g = 0; g < E; g++)
        k->gemm(KERN_F32, m, d, nt, s->wp + (size_t)g * m, (size_t)ff * sizeof(float),
                s->ap + (size_t)t0 * ff + (size_t)g * m, (size_t)ff * sizeof(float),
                s->out + (size_t)g * TILE * d, (size_t)d);
}

static double s_dot(const float *a, const float *b, int n) {
    double acc = 0;
    for (int i = 0; i < n; i++)
        acc += (double)a[i] * b[i];
    return acc;
}

/* The k largest of v[0..n) (ties: the lower index), in sel[0..k); sets chosen[i]. */
static void s_topk(const float *v, int n, int k, int *sel, bool *chosen) {
    memset(chosen, 0, (size_t)n * sizeof(bool));
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!chosen[i] && (best < 0 || v[i] > v[best]))
                best = i;
        chosen[best] = true;
        sel[j] = best;
    }
}

/* ---- statistics of a layer's routing on the recorded tokens ----------------------------- */

static void s_layer_stats(model_moefy_t *self, int l, int N, s_scratch_t *s) {
    const int d = self->cfg.d_model, E = self->o.n_experts, K = self->o.top_k;
    const float *W = self->router + (size_t)l * E * d;
    const float *H = self->h + (size_t)l * self->o.max_tokens * d;
    double count[MODEL_MOEFY_MAX_EXPERTS] = {0};
    double tot = 0, er = 0, eo = 0, hits = 0; /* tokens with output, summed errors */
    float score[MODEL_MOEFY_MAX_EXPERTS], norm[MODEL_MOEFY_MAX_EXPERTS];
    int sel_r[MODEL_MOEFY_MAX_EXPERTS], sel_o[MODEL_MOEFY_MAX_EXPERTS];
    bool in_r[MODEL_MOEFY_MAX_EXPERTS], in_o[MODEL_MOEFY_MAX_EXPERTS];
    for (int t0 = 0; t0 < N; t0 += TILE) {
        int nt = N - t0 < TILE ? N - t0 : TILE;
        s_group_outputs(self, s, t0, nt);
        for (int c = 0; c < nt; c++) {
            const float *h = H + (size_t)(t0 + c) * d;
            for (int g = 0; g < E; g++) {
                const float *o = s->out + ((size_t)g * TILE + c) * d;
                score[g] = (float)s_dot(h, W + (size_t)g * d, d);
                norm[g] = (float)sqrt(s_dot(o, o, d));
            }
            s_topk(score, E, K, sel_r, in_r);
            s_topk(norm, E, K, sel_o, in_o);
            for (int j = 0; j < K; j++) {
                count[sel_r[j]] += 1;
                hits += in_o[sel_r[j]];
            }
            /* |y|^2 and the squared norms of what each selection leaves out */
            double yy = 0, mr = 0, mo = 0;
            for (int r = 0; r < d; r++) {
                double y = 0, miss_r = 0, miss_o = 0;
                for (int g = 0; g < E; g++) {
                    double v = s->out[((size_t)g * TILE + c) * d + r];
                    y += v;
                    if (!in_r[g])
                        miss_r += v;
                    if (!in_o[g])
                        miss_o += v;
                }
                yy += y * y;
                mr += miss_r * miss_r;
                mo += miss_o * miss_o;
            }
            if (yy > 0) {
                tot += 1;
                er += sqrt(mr / yy);
                eo += sqrt(mo / yy);
            }
        }
    }
    model_moefy_stats_t *st = &self->st[l];
    float *use = self->use + (size_t)l * E;
    double mx = 0, ent = 0;
    for (int g = 0; g < E; g++) {
        use[g] = N > 0 ? (float)(count[g] / ((double)N * K)) : 0.0f;
        if (use[g] > mx)
            mx = use[g];
        if (use[g] > 0)
            ent -= use[g] * log(use[g]);
    }
    st->n_tokens = N;
    st->use_max_mean = (float)(mx * E);
    st->use_entropy = (float)(ent / log((double)E));
    st->recall = N > 0 ? (float)(hits / ((double)N * K)) : 0.0f;
    st->err_router = tot > 0 ? (float)(er / tot) : 0.0f;
    st->err_oracle = tot > 0 ? (float)(eo / tot) : 0.0f;
}

/* ---- clustering: balanced spherical k-means --------------------------------------------- */

static uint64_t s_rand(uint64_t *st) { /* xorshift64* */
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double s_rand01(uint64_t *st) {
    return (double)(s_rand(st) >> 11) / 9007199254740992.0;
}

/* Neuron patterns f (d_ff, N): f[i][t] = 1 when |a_i(t)| > ACTIVE_RMS * rms(a(t)) (neuron
 * i is strongly active at token t), else 0; each row then to unit length, so that the
 * dot product of two patterns is their normalized co-activation.  MoEfication's
 * co-activation graph used ReLU's active/inactive; SwiGLU has no exact zeros, so
 * "active" is a large activation relative to the token's.  On SmolLM2-135M (E = 8,
 * K = 2, 2048 tokens) the oracle top-K output error was 0.612 with these patterns,
 * 0.654 with |a| / rms, 0.644 with its square, 0.698 with signed a, 0.749 for a random
 * split, and the threshold 2 did better than 1, 1.5, 3 and 4. */
#define ACTIVE_RMS 2.0f

static void s_patterns(const model_moefy_t *self, int N, s_scratch_t *s) {
    const int ff = self->cfg.d_ff;
    for (int t = 0; t < N; t++) {
        const float *a = s->a + (size_t)t * ff;
        double ss = s_dot(a, a, ff);
        float thr = (float)(ACTIVE_RMS * sqrt(ss / ff));
        for (int i = 0; i < ff; i++)
            s->f[(size_t)i * N + t] = ss > 0 && fabsf(a[i]) > thr ? 1.0f : 0.0f;
    }
    for (int i = 0; i < ff; i++) {
        float *f = s->f + (size_t)i * N;
        double nn = s_dot(f, f, N);
        if (nn > 0) {
            float inv = (float)(1.0 / sqrt(nn));
            for (int t = 0; t < N; t++)
                f[t] *= inv;
        }
    }
}

static void s_normalize(float *v, int n) {
    double nn = s_dot(v, v, n);
    if (nn > 0) {
        float inv = (float)(1.0 / sqrt(nn));
        for (int i = 0; i < n; i++)
            v[i] *= inv;
    }
}

typedef struct {
    float sim; /* pattern . centroid */
    int32_t i; /* neuron */
    int32_t g; /* group */
} s_pair_t;

static int s_pair_cmp(const void *pa, const void *pb) {
    const s_pair_t *a = pa, *b = pb;
    if (a->sim != b->sim)
        return a->sim > b->sim ? -1 : 1;
    if (a->i != b->i)
        return a->i < b->i ? -1 : 1;
    return a->g < b->g ? -1 : (a->g > b->g);
}

/* Balanced assignment by similarity: take (neuron, group) pairs best first, each neuron
 * once, each group up to m neurons.  Returns how many neurons changed group. */
static int s_assign(const model_moefy_t *self, const float *sim, int32_t *assign, s_pair_t *pairs) {
    const int ff = self->cfg.d_ff, E = self->o.n_experts, m = self->m;
    size_t np = 0;
    for (int g = 0; g < E; g++)
        for (int i = 0; i < ff; i++)
            pairs[np++] = (s_pair_t){sim[(size_t)g * ff + i], i, g};
    qsort(pairs, np, sizeof *pairs, s_pair_cmp);
    int fill[MODEL_MOEFY_MAX_EXPERTS] = {0}, changed = 0;
    bool *done = calloc((size_t)ff, sizeof(bool));
    if (!done)
        return -ENOMEM;
    for (size_t p = 0; p < np; p++) {
        const s_pair_t *q = &pairs[p];
        if (done[q->i] || fill[q->g] >= m)
            continue;
        done[q->i] = true;
        fill[q->g]++;
        changed += assign[q->i] != q->g;
        assign[q->i] = q->g;
    }
    free(done);
    return changed;
}

/* One balanced k-means run from a k-means++ start drawn from *rng: leaves the groups in
 * s->assign, the sum over neurons of pattern . own centroid in *objective, and whether
 * the last iteration changed nothing in *converged.  Returns the iterations run, or
 * -ENOMEM. */
static int s_kmeans(const model_moefy_t *self, int N, s_scratch_t *s, uint64_t *rng,
                    s_pair_t *pairs, float *best, bool *converged, double *objective) {
    const int ff = self->cfg.d_ff, E = self->o.n_experts;
    const kern_ops_t *k = kern_ops_best();
    /* k-means++: first centre uniform, then each with probability ~ (1 - max cos)^2 */
    for (int g = 0; g < E; g++) {
        int pick = 0;
        if (g == 0) {
            pick = (int)(s_rand(rng) % (uint64_t)ff);
        } else {
            double tot = 0;
            for (int i = 0; i < ff; i++) {
                double dd = 1.0 - best[i];
                tot += dd * dd;
            }
            double u = s_rand01(rng) * tot, acc = 0;
            pick = ff - 1;
            for (int i = 0; i < ff; i++) {
                double dd = 1.0 - best[i];
                acc += dd * dd;
                if (acc >= u && dd > 0) {
                    pick = i;
                    break;
                }
            }
        }
        memcpy(s->cent + (size_t)g * N, s->f + (size_t)pick * N, (size_t)N * sizeof(float));
        /* similarities to the new centre update best[] */
        k->gemm(KERN_F32, N, ff, 1, s->f, (size_t)N * sizeof(float), s->cent + (size_t)g * N,
                (size_t)N * sizeof(float), s->sim + (size_t)g * ff, (size_t)ff);
        for (int i = 0; i < ff; i++) {
            float v = s->sim[(size_t)g * ff + i];
            if (g == 0 || v > best[i])
                best[i] = v;
        }
    }
    for (int i = 0; i < ff; i++)
        s->assign[i] = -1;
    int it = 0;
    *converged = false;
    for (; it < self->o.kmeans_iters; it++) {
        if (it > 0)
            k->gemm(KERN_F32, N, ff, E, s->f, (size_t)N * sizeof(float), s->cent,
                    (size_t)N * sizeof(float), s->sim, (size_t)ff);
        int changed = s_assign(self, s->sim, s->assign, pairs);
        if (changed < 0)
            return changed;
        if (changed == 0) {
            *converged = true;
            it++;
            break;
        }
        memset(s->cent, 0, (size_t)E * N * sizeof(float));
        for (int i = 0; i < ff; i++) {
            float *c = s->cent + (size_t)s->assign[i] * N;
            const float *f = s->f + (size_t)i * N;
            for (int t = 0; t < N; t++)
                c[t] += f[t];
        }
        for (int g = 0; g < E; g++)
            s_normalize(s->cent + (size_t)g * N, N);
    }
    double obj = 0;
    for (int i = 0; i < ff; i++)
        obj += s->sim[(size_t)s->assign[i] * ff + i];
    *objective = obj;
    return it;
}

/* Cluster layer l's neurons (patterns in s->f) into E groups of m: the best of
 * MODEL_MOEFY_RESTARTS k-means runs (balanced k-means has local optima, e.g. two seeds
 * in one true group share it and the groups left unseeded); writes the layer's
 * permutation.  Returns the best run's iterations (*converged: whether it converged),
 * or -ENOMEM. */
static int s_cluster(model_moefy_t *self, int l, int N, s_scratch_t *s, bool *converged) {
    const int ff = self->cfg.d_ff, m = self->m;
    uint64_t rng = self->o.seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(l + 1));
    s_pair_t *pairs = malloc((size_t)ff * self->o.n_experts * sizeof *pairs);
    float *best = malloc((size_t)ff * sizeof(float));     /* max cos to a chosen centre */
    int32_t *keep = malloc((size_t)ff * sizeof(int32_t)); /* the best run's groups */
    int rc = -ENOMEM, best_it = 0;
    double best_obj = -1;
    if (!pairs || !best || !keep)
        goto out;
    for (int r = 0; r < MODEL_MOEFY_RESTARTS; r++) {
        bool conv = false;
        double obj = 0;
        int it = s_kmeans(self, N, s, &rng, pairs, best, &conv, &obj);
        if (it < 0)
            goto out;
        if (obj > best_obj) {
            best_obj = obj;
            best_it = it;
            *converged = conv;
            memcpy(keep, s->assign, (size_t)ff * sizeof(int32_t));
        }
    }
    /* permutation: group by group, ascending neuron index within a group */
    int32_t *p = self->perm + (size_t)l * ff;
    int fill[MODEL_MOEFY_MAX_EXPERTS] = {0};
    for (int i = 0; i < ff; i++) {
        int g = keep[i];
        p[(size_t)g * m + fill[g]++] = i;
    }
    rc = best_it;
out:
    free(pairs);
    free(best);
    free(keep);
    return rc;
}

/* ---- router: ridge least squares, Cholesky ---------------------------------------------- */

/* Solve (A) X = B for X in place of B; A (n, n) symmetric positive definite, factored in
 * place into its Cholesky factor L (lower); B has nrhs right-hand sides of n each.
 * Returns 0, or -EDOM when A is not positive definite. */
static int s_cholesky_solve(double *A, int n, double *B, int nrhs) {
    for (int j = 0; j < n; j++) {
        double *Aj = A + (size_t)j * n;
        double dsum = Aj[j];
        for (int k = 0; k < j; k++)
            dsum -= Aj[k] * Aj[k];
        if (!(dsum > 0))
            return -EDOM;
        double ljj = sqrt(dsum);
        Aj[j] = ljj;
        for (int i = j + 1; i < n; i++) {
            double *Ai = A + (size_t)i * n;
            double v = Ai[j];
            for (int k = 0; k < j; k++)
                v -= Ai[k] * Aj[k];
            Ai[j] = v / ljj;
        }
    }
    for (int r = 0; r < nrhs; r++) {
        double *b = B + (size_t)r * n;
        for (int i = 0; i < n; i++) { /* L z = b */
            const double *Ai = A + (size_t)i * n;
            double v = b[i];
            for (int k = 0; k < i; k++)
                v -= Ai[k] * b[k];
            b[i] = v / Ai[i];
        }
        for (int i = n - 1; i >= 0; i--) { /* L^T x = z */
            double v = b[i];
            for (int k = i + 1; k < n; k++)
                v -= A[(size_t)k * n + i] * b[k];
            b[i] = v / A[(size_t)i * n + i];
        }
    }
    return 0;
}

/* Targets y[g][t] = |group g's output at token t|, then the router of layer l. */
static int s_fit_router(model_moefy_t *self, int l, int N, s_scratch_t *s) {
    const int d = self->cfg.d_model, E = self->o.n_experts;
    const kern_ops_t *k = kern_ops_best();
    for (int t0 = 0; t0 < N; t0 += TILE) {
        int nt = N - t0 < TILE ? N - t0 : TILE;
        s_group_outputs(self, s, t0, nt);
        for (int g = 0; g < E; g++)
            for (int c = 0; c < nt; c++) {
                const float *o = s->out + ((size_t)g * TILE + c) * d;
                s->y[(size_t)g * N + t0 + c] = (float)sqrt(s_dot(o, o, d));
            }
    }
    const float *H = self->h + (size_t)l * self->o.max_tokens * d;
    for (int t = 0; t < N; t++)
        for (int r = 0; r < d; r++)
            s->ht[(size_t)r * N + t] = H[(size_t)t * d + r];
    /* H^T H and H^T y with the F32 gemm (rows of ht: one feature over the tokens),
     * then widened to double for the solve */
    float *tmp = s->gtmp;
    k->gemm(KERN_F32, N, d, d, s->ht, (size_t)N * sizeof(float), s->ht, (size_t)N * sizeof(float),
            tmp, (size_t)d);
    k->gemm(KERN_F32, N, d, E, s->ht, (size_t)N * sizeof(float), s->y, (size_t)N * sizeof(float),
            tmp + (size_t)d * d, (size_t)d);
    double diag = 0;
    for (int i = 0; i < d; i++)
        diag += tmp[(size_t)i * d + i];
    double lambda = self->o.ridge * (diag / d) + 1e-12;
    for (size_t i = 0; i < (size_t)d * d; i++)
        s->gram[i] = tmp[i];
    for (int i = 0; i < d; i++)
        s->gram[(size_t)i * d + i] += lambda;
    for (size_t i = 0; i < (size_t)E * d; i++)
        s->rhs[i] = tmp[(size_t)d * d + i];
    int rc = s_cholesky_solve(s->gram, d, s->rhs, E);
    if (rc < 0)
        return rc;
    float *W = self->router + (size_t)l * E * d;
    for (size_t i = 0; i < (size_t)E * d; i++)
        W[i] = (float)s->rhs[i];
    return 0;
}

/* ---- fitting / evaluating all layers over threads --------------------------------------- */

typedef struct {
    model_moefy_t *self;
    const model_gguf_t *w;
    int N;           /* recorded tokens used */
    bool fit;        /* fit (else evaluate) */
    atomic_int next; /* next layer to take */
    atomic_int done; /* layers finished */
    atomic_int rc;   /* first error */
} s_job_t;

static void *s_worker(void *arg) {
    s_job_t *job = arg;
    model_moefy_t *self = job->self;
    s_scratch_t s;
    int rc = s_scratch_alloc(&s, self, job->N, job->fit);
    if (rc < 0) {
        atomic_store(&job->rc, rc);
        return NULL;
    }
    int l;
    while (atomic_load(&job->rc) == 0 &&
           (l = atomic_fetch_add(&job->next, 1)) < self->cfg.n_layer) {
        if ((rc = s_load_down(self, job->w, l, s.wd)) < 0)
            break;
        s_load_act(self, l, job->N, s.a);
        int iters = 0;
        bool conv = true;
        if (job->fit) {
            s_patterns(self, job->N, &s);
            if ((iters = s_cluster(self, l, job->N, &s, &conv)) < 0) {
                rc = iters;
                break;
            }
        }
        s_permute(self, l, job->N, &s);
        if (job->fit && (rc = s_fit_router(self, l, job->N, &s)) < 0)
            break;
        s_layer_stats(self, l, job->N, &s);
        const model_moefy_stats_t *st = &self->st[l];
        if (job->fit)
            self->st[l].iters = iters;
        int n_done = atomic_fetch_add(&job->done, 1) + 1;
        LOG_I(TAG,
              "[%d/%d] layer %2d: %s%s recall %.3f, output error router %.3f oracle %.3f, "
              "use max/mean %.2f entropy %.3f",
              n_done, self->cfg.n_layer, l, job->fit ? "fitted" : "evaluated",
              conv ? "," : " (k-means not converged),", st->recall, st->err_router, st->err_oracle,
              st->use_max_mean, st->use_entropy);
    }
    if (rc < 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&job->rc, &zero, rc);
    }
    s_scratch_free(&s);
    return NULL;
}

static int s_run(model_moefy_t *self, const model_gguf_t *w, int n_threads, bool fit, char *err,
                 size_t errlen) {
    if (self->bad)
        return model_err_set(err, errlen, -EINVAL,
                             "the calibration forward reported a shape other "
                             "than the model's");
    int N = model_moefy_recorded(self);
    const int d = self->cfg.d_model;
    if (N < 1)
        return model_err_set(err, errlen, -EINVAL, "no calibration tokens recorded");
    if (!fit && !self->fitted)
        return model_err_set(err, errlen, -EINVAL, "nothing fitted to evaluate");
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > MAX_THREADS)
        n_threads = MAX_THREADS;
    if (n_threads > self->cfg.n_layer)
        n_threads = self->cfg.n_layer;
    s_job_t job = {.self = self, .w = w, .N = N, .fit = fit};
    atomic_init(&job.next, 0);
    atomic_init(&job.done, 0);
    atomic_init(&job.rc, 0);
    pthread_t th[MAX_THREADS];
    bool spawned[MAX_THREADS] = {false};
    for (int i = 1; i < n_threads; i++)
        spawned[i] = pthread_create(&th[i], NULL, s_worker, &job) == 0;
    s_worker(&job);
    for (int i = 1; i < n_threads; i++)
        if (spawned[i])
            pthread_join(th[i], NULL);
    int rc = atomic_load(&job.rc);
    if (rc == -ENOMEM)
        return model_err_set(err, errlen, rc, "out of memory fitting a layer on %d tokens", N);
    if (rc == -EDOM)
        return model_err_set(err, errlen, rc, "router least squares: H^T H not positive definite");
    if (rc < 0)
        return model_err_set(err, errlen, rc, "%s: ffn_down missing or not [%d, %d] in some layer",
                             model_gguf_path(w), self->cfg.d_ff, d);
    if (fit)
        self->fitted = true;
    return 0;
}

int model_moefy_fit(model_moefy_t *self, const model_gguf_t *w, int n_threads, char *err,
                    size_t errlen) {
    return s_run(self, w, n_threads, true, err, errlen);
}

int model_moefy_evaluate(model_moefy_t *self, const model_gguf_t *w, int n_threads, char *err,
                         size_t errlen) {
    return s_run(self, w, n_threads, false, err, errlen);
}

/* ---- writing the MoE GGUF ---------------------------------------------------------------- */

kern_type_t model_moefy_down_type(kern_type_t t, int64_t cols) {
    int bs = kern_type_traits((int)t)->block_size;
    if (bs == 1 || cols % bs == 0)
        return t;
    return cols % KERN_QK == 0 ? KERN_Q8_0 : KERN_F16;
}

typedef enum { S_COPY, S_ROUTER, S_GATE, S_UP, S_DOWN } s_kind_t;

/* One output tensor: what it is made from. */
typedef struct {
    s_kind_t kind;                /* how its data is produced */
    int layer;                    /* for the expert tensors and the router */
    const model_gguf_tensor_t *t; /* source tensor (not for the router) */
    kern_type_t type;             /* output type */
} s_out_t;

typedef struct {
    const model_moefy_t *self;
    const s_out_t *outs; /* (n_out) */
    int64_t n_out;
} s_write_t;

/* ffn_down_exps: expert e's row r = the dense row r's columns perm[e*m .. e*m+m). */
static int s_fill_down(const model_moefy_t *self, const s_out_t *o, void *dst) {
    const int ff = self->cfg.d_ff, d = self->cfg.d_model, m = self->m, E = self->o.n_experts;
    const int32_t *p = self->perm + (size_t)o->layer * ff;
    const model_gguf_tensor_t *t = o->t;
    const kern_type_traits_t *st = kern_type_traits((int)t->type);
    size_t src_rb = kern_row_size(t->type, ff), dst_rb = kern_row_size(o->type, m);
    if (st->block_size == 1 && o->type == t->type) { /* float types: copy the elements */
        size_t es = st->type_size;
        for (int e = 0; e < E; e++)
            for (int r = 0; r < d; r++) {
                const uint8_t *src = (const uint8_t *)t->data + (size_t)r * src_rb;
                uint8_t *out = (uint8_t *)dst + ((size_t)e * d + r) * dst_rb;
                for (int j = 0; j < m; j++)
                    memcpy(out + (size_t)j * es, src + (size_t)p[e * m + j] * es, es);
            }
        return 0;
    }
    float *row = malloc((size_t)ff * sizeof(float)), *g = malloc((size_t)m * sizeof(float));
    if (!row || !g) {
        free(row);
        free(g);
        return -ENOMEM;
    }
    const kern_ops_t *ref = kern_ops_ref(), *best = kern_ops_best();
    for (int r = 0; r < d; r++) {
        ref->dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * src_rb, row, ff);
        for (int e = 0; e < E; e++) {
            for (int j = 0; j < m; j++)
                g[j] = row[p[e * m + j]];
            best->quant_row(o->type, g, (uint8_t *)dst + ((size_t)e * d + r) * dst_rb, m);
        }
    }
    free(row);
    free(g);
    return 0;
}

static int s_fill(void *arg, int64_t i, void *dst, size_t nbytes) {
    const s_write_t *wj = arg;
    const model_moefy_t *self = wj->self;
    const s_out_t *o = &wj->outs[i];
    const int ff = self->cfg.d_ff, d = self->cfg.d_model, E = self->o.n_experts;
    switch (o->kind) {
    case S_COPY:
        if (nbytes != o->t->nbytes)
            return -EPROTO;
        memcpy(dst, o->t->data, nbytes);
        return 0;
    case S_ROUTER:
        if (nbytes != (size_t)E * d * sizeof(float))
            return -EPROTO;
        memcpy(dst, self->router + (size_t)o->layer * E * d, nbytes);
        return 0;
    case S_GATE:
    case S_UP: { /* whole rows, in expert-major order */
        const int32_t *p = self->perm + (size_t)o->layer * ff;
        size_t rb = kern_row_size(o->t->type, d);
        if (nbytes != rb * (size_t)ff)
            return -EPROTO;
        for (int k = 0; k < ff; k++)
            memcpy((uint8_t *)dst + (size_t)k * rb, (const uint8_t *)o->t->data + (size_t)p[k] * rb,
                   rb);
        return 0;
    }
    case S_DOWN:
        return s_fill_down(self, o, dst);
    }
    return -EINVAL;
}

/* Which FFN tensor of which layer name is ("blk.N.ffn_gate.weight" ...); S_COPY if none. */
static s_kind_t s_classify(model_gguf_str_t name, int n_layer, int *layer) {
    char buf[128];
    if (name.len >= sizeof buf)
        return S_COPY;
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = '\0';
    int l, end = 0;
    char what[32];
    if (sscanf(buf, "blk.%d.%31[a-z_].weight%n", &l, what, &end) != 2 || buf[end] != '\0' ||
        l < 0 || l >= n_layer)
        return S_COPY;
    *layer = l;
    if (!strcmp(what, "ffn_gate"))
        return S_GATE;
    if (!strcmp(what, "ffn_up"))
        return S_UP;
    if (!strcmp(what, "ffn_down"))
        return S_DOWN;
    return S_COPY;
}

int model_moefy_write(const model_moefy_t *self, const model_gguf_t *src, const char *out_path,
                      char *err, size_t errlen) {
    if (err && errlen)
        err[0] = '\0';
    if (!self->fitted)
        return model_err_set(err, errlen, -EINVAL, "nothing fitted to write");
    const model_config_t *c = &self->cfg;
    const int E = self->o.n_experts, m = self->m, d = c->d_model, ff = c->d_ff;
    int64_t n_in = model_gguf_tensor_count(src);
    s_out_t *outs = calloc((size_t)(n_in + c->n_layer), sizeof *outs);
    int *seen = calloc((size_t)c->n_layer, sizeof(int));
    model_gguf_write_t *w = model_gguf_write_new();
    int rc = 0;
    if (!outs || !seen || !w) {
        rc = model_err_set(err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = model_gguf_write_copy_kvs(w, src)) < 0) {
        model_err_set(err, errlen, rc, "%s: cannot copy its metadata: %s", model_gguf_path(src),
                      strerror(-rc));
        goto fail;
    }
    char key[160];
    const char *a = c->arch;
    snprintf(key, sizeof key, "%s.expert_count", a);
    rc = model_gguf_write_set_u32(w, key, (uint32_t)E);
    snprintf(key, sizeof key, "%s.expert_used_count", a);
    if (rc == 0)
        rc = model_gguf_write_set_u32(w, key, (uint32_t)self->o.top_k);
    snprintf(key, sizeof key, "%s.feed_forward_length", a);
    if (rc == 0)
        rc = model_gguf_write_set_u32(w, key, (uint32_t)m);
    if (rc == 0)
        rc = model_gguf_write_set_str(w, "strata.expert_gating", "unit");
    if (rc < 0) {
        model_err_set(err, errlen, rc, "out of memory");
        goto fail;
    }

    int64_t n_out = 0;
    bool logged_down = false;
    for (int64_t i = 0; i < n_in; i++) {
        const model_gguf_tensor_t *t = model_gguf_tensor_at(src, i);
        int l = -1;
        s_kind_t kind = s_classify(t->name, c->n_layer, &l);
        char name[160];
        int64_t ne[3];
        int nd = t->n_dims;
        s_out_t o = {.kind = kind, .layer = l, .t = t, .type = t->type};
        if (kind == S_COPY) {
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            memcpy(ne, t->ne, sizeof ne);
        } else {
            bool down = kind == S_DOWN;
            if (t->n_dims != 2 || t->ne[0] != (down ? ff : d) || t->ne[1] != (down ? d : ff)) {
                rc = model_err_set(err, errlen, -EINVAL, "%s: %.*s is not the fitted model's shape",
                                   model_gguf_path(src), (int)t->name.len, t->name.ptr);
                goto fail;
            }
            seen[l]++;
            nd = 3;
            ne[0] = down ? m : d;
            ne[1] = down ? d : m;
            ne[2] = E;
            if (kind == S_GATE) { /* the router goes just before the layer's experts */
                snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
                int64_t rne[2] = {d, E};
                char e2[256] = "";
                int64_t idx =
                    model_gguf_write_add_tensor(w, name, KERN_F32, 2, rne, NULL, e2, sizeof e2);
                if (idx < 0) {
                    rc = model_err_set(err, errlen, (int)idx, "%s",
                                       e2[0] ? e2 : strerror((int)-idx));
                    goto fail;
                }
                outs[n_out++] = (s_out_t){.kind = S_ROUTER, .layer = l, .type = KERN_F32};
            }
            snprintf(name, sizeof name, "blk.%d.%s.weight", l,
                     kind == S_GATE ? "ffn_gate_exps"
                     : kind == S_UP ? "ffn_up_exps"
                                    : "ffn_down_exps");
            if (down) {
                o.type = model_moefy_down_type(t->type, m);
                if (!logged_down && kern_type_traits((int)t->type)->block_size > 1) {
                    logged_down = true;
                    if (o.type == t->type)
                        LOG_I(TAG,
                              "ffn_down is %s: its permuted columns mix the source blocks, so "
                              "ffn_down_exps is requantized to %s from dequantized values",
                              kern_type_traits((int)t->type)->name,
                              kern_type_traits((int)o.type)->name);
                    else
                        LOG_I(TAG,
                              "ffn_down is %s, whose block of %d does not divide the expert "
                              "width %d: ffn_down_exps is written as %s",
                              kern_type_traits((int)t->type)->name,
                              kern_type_traits((int)t->type)->block_size, m,
                              kern_type_traits((int)o.type)->name);
                }
            }
        }
        char e2[256] = "";
        int64_t idx = model_gguf_write_add_tensor(w, name, o.type, nd, ne, NULL, e2, sizeof e2);
        if (idx < 0) {
            rc = model_err_set(err, errlen, (int)idx, "%s", e2[0] ? e2 : strerror((int)-idx));
            goto fail;
        }
        outs[n_out++] = o;
    }
    for (int l = 0; l < c->n_layer; l++)
        if (seen[l] != 3) {
            rc = model_err_set(err, errlen, -EINVAL, "%s: layer %d lacks ffn_gate/ffn_up/ffn_down",
                               model_gguf_path(src), l);
            goto fail;
        }
    s_write_t wj = {.self = self, .outs = outs, .n_out = n_out};
    model_gguf_write_set_fill(w, s_fill, &wj);
    rc = model_gguf_write_save(w, out_path, err, errlen);
    if (rc == 0)
        LOG_I(TAG, "wrote %s: %d layers x %d experts of %d, top-%d, unit gating", out_path,
              c->n_layer, E, m, self->o.top_k);
fail:
    model_gguf_write_destroy(&w);
    free(outs);
    free(seen);
    return rc;
}
