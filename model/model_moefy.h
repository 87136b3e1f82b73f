/* model_moefy.h - MoEfication (Zhang et al. 2022, "Transformer Feed-forward Layers are
 * Mixtures of Experts"): turn each dense SwiGLU FFN of a llama model into E equal experts
 * plus a linear router, with the same weights, no training.  Owns the calibration record
 * (every layer's FFN input h and activation a on calibration tokens), the fitted neuron
 * permutation and router of every layer, and writes the Mixtral-layout GGUF.
 *
 * Per layer:
 *   1. clustering: neuron i's pattern over the calibration tokens t marks where it is
 *      strongly active (|a_i(t)| > 2 RMS of a(t)), normalized to unit length; a balanced
 *      spherical k-means (best of MODEL_MOEFY_RESTARTS k-means++ starts, greedy
 *      capacity-bounded assignment) puts the d_ff neurons into E groups of d_ff / E
 *      that tend to fire together;
 *   2. target: group g's contribution at token t is the norm of its FFN output,
 *      y_g(t) = || sum_{i in g} a_i(t) Wdown[:, i] ||;
 *   3. router: ridge least squares W (d_model, E) from h(t) to y(t): top-K of h W picks
 *      the K groups whose outputs are predicted to be the largest.
 * Gating is "unit": a chosen expert's output enters with weight 1, so with K = E the
 * dense layer is reproduced exactly up to summation order.
 */
#ifndef MODEL_MOEFY_H
#define MODEL_MOEFY_H

#include "model.h"
#include "model_gguf.h"
#include <stddef.h>
#include <stdint.h>

#define MODEL_MOEFY_MAX_EXPERTS 256
#define MODEL_MOEFY_RESTARTS 4 /* k-means runs per layer; the best is kept */

typedef struct {
    int n_experts;    /* E: groups per layer; must divide d_ff; 2 .. MODEL_MOEFY_MAX_EXPERTS */
    int top_k;        /* K: experts per token, 1 .. E (for the statistics and the file) */
    int max_tokens;   /* calibration tokens recorded per layer (later ones are ignored) */
    int kmeans_iters; /* balanced k-means iterations at most (<= 0: 30) */
    float ridge;      /* router ridge, relative to the mean diagonal of H^T H (<= 0: 1e-3) */
    uint64_t seed;    /* k-means++ initialisation (0: a fixed default) */
} model_moefy_opts_t;

/* How one layer's routing does on the recorded tokens (after fit or evaluate). */
typedef struct {
    int n_tokens;       /* tokens the numbers are over */
    int iters;          /* k-means iterations run (fit only) */
    float use_max_mean; /* max_e use[e] / mean: 1 balanced .. E all on one expert */
    float use_entropy;  /* -sum use[e] ln use[e] / ln E: 1 balanced .. 0 one expert */
    float recall;       /* mean over tokens of |router top-K & oracle top-K| / K */
    float err_router;   /* mean over tokens of |y - y_S| / |y|: y the dense FFN output, y_S
                           the sum of the outputs of the router's top-K groups S */
    float err_oracle;   /* the same with S the K groups of largest output norm */
    const float *use;   /* (E) fraction of the routed (token, slot) pairs per expert;
                           borrowed from the moefy object */
} model_moefy_stats_t;

typedef struct model_moefy_t model_moefy_t;

/* Whether the model in g can be MoEfied into n_experts experts with top_k each: a dense
 * llama model (no llama.expert_count, no ffn_gate_inp / *_exps tensors) whose d_ff is a
 * multiple of n_experts, 2 <= n_experts <= MODEL_MOEFY_MAX_EXPERTS, 1 <= top_k <=
 * n_experts.  0, or -EINVAL with a one-line reason in err. */
int model_moefy_check(const model_gguf_t *g, int n_experts, int top_k, char *err, size_t errlen);

/* An empty record for a model of configuration cfg (copied): reserves max_tokens tokens
 * of h (F32) and a (F16) for every layer.  NULL with a reason in err on bad options
 * (-EINVAL cases of model_moefy_check) or when out of memory. */
model_moefy_t *model_moefy_new(const model_config_t *cfg, const model_moefy_opts_t *opts, char *err,
                               size_t errlen);
/* Free everything; nulls *self_p; safe on NULL and twice. */
void model_moefy_destroy(model_moefy_t **self_p);

/* The FFN tap (model_ffn_tap_fn of model.h, user = the moefy object): append the
 * n_tokens rows of h (n_tokens, d_model) and act (n_tokens, d_ff) of this layer to the
 * record, up to max_tokens per layer.  Shapes other than the configuration's, or act
 * NULL (an MoE layer), mark the record bad (fit then fails with -EINVAL). */
void model_moefy_tap(void *self, int layer, int n_tokens, const float *h, int d_model,
                     const float *act, int d_ff);
/* Tokens recorded in every layer (the minimum over layers). */
int model_moefy_recorded(const model_moefy_t *self);
/* Forget the recorded tokens (the fitted permutations and routers stay): to record
 * held-out text for model_moefy_evaluate. */
void model_moefy_reset(model_moefy_t *self);

/* Fit every layer on the recorded tokens (layers spread over n_threads threads): the
 * permutation, the router and the statistics.  w: the dense model's GGUF (ffn_down of
 * every layer is read).  Logs one info line per layer.  0, or -EINVAL (nothing or a bad
 * shape recorded, a missing tensor: reason in err), -ENOMEM. */
int model_moefy_fit(model_moefy_t *self, const model_gguf_t *w, int n_threads, char *err,
                    size_t errlen);
/* Recompute the statistics of every layer on the recorded tokens with the fitted
 * routers (e.g. after model_moefy_reset and a held-out recording).  0, -EINVAL (not
 * fitted, nothing recorded; reason in err), -ENOMEM. */
int model_moefy_evaluate(model_moefy_t *self, const model_gguf_t *w, int n_threads, char *err,
                         size_t errlen);
/* The statistics of layer l (NULL when l is out of range or nothing was fitted). */
const model_moefy_stats_t *model_moefy_stats(const model_moefy_t *self, int l);
/* Layer l's permutation: (d_ff) dense neuron index of expert e's j-th neuron at e * d_ff/E
 * + j; NULL before fit.  Within an expert the indices ascend. */
const int32_t *model_moefy_perm(const model_moefy_t *self, int l);
/* Layer l's router: (E, d_model), expert e's weights contiguous (the GGUF's
 * ffn_gate_inp ne = [d_model, E]); NULL before fit. */
const float *model_moefy_router(const model_moefy_t *self, int l);

/* The type ffn_down_exps gets for a dense ffn_down of type t split into experts of
 * width cols: t itself when its block is 1 (float types: the columns are copied exactly)
 * or divides cols (quantized: requantized from dequantized values, since the permuted
 * columns mix the source blocks); else q8_0 when 32 divides cols, else f16. */
kern_type_t model_moefy_down_type(kern_type_t t, int64_t cols);

/* Write the MoE model: src's metadata with llama.expert_count = E, expert_used_count =
 * K, feed_forward_length = d_ff / E, strata.expert_gating = "unit"; per layer
 * ffn_gate_inp (F32 [d_model, E]), ffn_gate_exps / ffn_up_exps ([d_model, d_ff/E, E],
 * src's type, rows copied) and ffn_down_exps ([d_ff/E, d_model, E], type by
 * model_moefy_down_type) in place of ffn_gate / ffn_up / ffn_down; every other tensor
 * copied.  Written to a temporary file and renamed.  0, or a negative errno with a
 * one-line reason in err (-EINVAL: not fitted or src is not the model fitted). */
int model_moefy_write(const model_moefy_t *self, const model_gguf_t *src, const char *out_path,
                      char *err, size_t errlen);

#endif
