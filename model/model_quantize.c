/* model_quantize.c - `strata quantize`: read a GGUF, pick a target type per tensor,
 * and stream the converted tensors into a new GGUF through model_gguf_write's fill
 * callback (one tensor in memory at a time; rows split over threads).
 */
#include "model_quantize.h"
#include "base_log.h"
#include "kern_ops.h"
#include "model_err.h"
#include "model_gguf.h"
#include "model_gguf_write.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define TAG "quantize"
#define MAX_THREADS 256

/* A valid target: our name, its kernel type, and llama.cpp's general.file_type value. */
typedef struct {
    const char *name; /* as the user types it */
    kern_type_t type; /* tensor type for 2-D weights */
    uint32_t ftype;   /* general.file_type (llama_ftype) */
} s_target_t;

static const s_target_t s_targets[] = {
    {"f32", KERN_F32, 0},    {"f16", KERN_F16, 1},
    {"bf16", KERN_BF16, 32}, {"q8_0", KERN_Q8_0, 7},
    {"q4_0", KERN_Q4_0, 2},  {"q4_1", KERN_Q4_1, 3},
    {"q5_0", KERN_Q5_0, 8},  {"q5_1", KERN_Q5_1, 9},
    {"q4_k", KERN_Q4_K, 14}, /* Q4_K_S */
    {"q5_k", KERN_Q5_K, 16}, /* Q5_K_S */ {"q6_k", KERN_Q6_K, 18},
};
#define N_TARGETS (sizeof s_targets / sizeof s_targets[0])

static const s_target_t *s_target(const char *name) {
    for (size_t i = 0; i < N_TARGETS; i++)
        if (name && !strcasecmp(name, s_targets[i].name))
            return &s_targets[i];
    return NULL;
}

bool model_quantize_type_from_name(const char *name, kern_type_t *out) {
    const s_target_t *t = s_target(name);
    if (t && out)
        *out = t->type;
    return t != NULL;
}

const char *model_quantize_type_names(void) {
    return "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k";
}

static bool s_is_4_or_5_bit(kern_type_t t) {
    return t == KERN_Q4_0 || t == KERN_Q4_1 || t == KERN_Q5_0 || t == KERN_Q5_1 || t == KERN_Q4_K ||
           t == KERN_Q5_K;
}

static bool s_is_k(kern_type_t t) {
    return t == KERN_Q4_K || t == KERN_Q5_K || t == KERN_Q6_K;
}

/* What a K-quant falls back to when a row cannot hold its 256-element super-blocks
 * (llama.cpp's choice in llama_tensor_get_type: the 32-element type of about the same
 * quality). */
static kern_type_t s_k_fallback(kern_type_t t) {
    return t == KERN_Q4_K ? KERN_Q5_0 : t == KERN_Q5_K ? KERN_Q5_1 : KERN_Q8_0;
}

/* The type tensor t gets when the model goes to target (*want: the type the rules ask
 * for before the row-length check; the result differs from it when t fell back).
 * has_output: the model has its own output.weight (else token_embd is also the output). */
static kern_type_t s_pick_type(const model_gguf_tensor_t *t, kern_type_t target, bool has_output,
                               kern_type_t *want_out) {
    kern_type_t want = target;
    const bool embd = model_gguf_str_eq(t->name, "token_embd.weight");
    const bool out = model_gguf_str_eq(t->name, "output.weight") || (embd && !has_output);
    static const char router[] = "ffn_gate_inp.weight"; /* MoE router: small, picks experts */
    if (t->n_dims < 2)
        want = KERN_F32; /* norms, biases: small and sensitive */
    else if (t->name.len >= sizeof router - 1 &&
             !memcmp(t->name.ptr + t->name.len - (sizeof router - 1), router, sizeof router - 1))
        want = KERN_F32; /* as llama.cpp: routing in full float */
    else if (s_is_k(target) && out)
        /* as llama.cpp: the output matrix takes Q6_K, or Q8_0 when its rows cannot hold
         * super-blocks; a separate token_embd keeps the target */
        want = t->ne[0] % KERN_QK_K == 0 ? KERN_Q6_K : KERN_Q8_0;
    else if (!s_is_k(target) && (embd || out) && s_is_4_or_5_bit(target))
        want = KERN_Q8_0;
    *want_out = want;
    int bs = kern_type_traits((int)want)->block_size;
    if (t->ne[0] % bs == 0)
        return want;
    kern_type_t fb = s_is_k(want) ? s_k_fallback(want) : KERN_Q8_0;
    if (t->ne[0] % kern_type_traits((int)fb)->block_size)
        fb = KERN_F16;
    LOG_I(TAG, "%.*s: row of %lld is not a multiple of %s's block of %d: using %s",
          (int)t->name.len, t->name.ptr, (long long)t->ne[0], kern_type_traits((int)want)->name, bs,
          kern_type_traits((int)fb)->name);
    return fb;
}

void model_quantize_summary_clear(model_quantize_summary_t *s) {
    if (!s)
        return;
    free(s->fallback);
    memset(s, 0, sizeof *s);
}

/* Count tensor t (written as got, asked for as want) into s. */
static int s_summary_add(model_quantize_summary_t *s, const model_gguf_tensor_t *t,
                         kern_type_t want, kern_type_t got) {
    s->n_tensors++;
    s->count[got]++;
    if (want == got)
        return 0;
    model_quantize_fallback_t *f = realloc(s->fallback, (size_t)(s->n_fallback + 1) * sizeof *f);
    if (!f)
        return -ENOMEM;
    s->fallback = f;
    f += s->n_fallback++;
    snprintf(f->name, sizeof f->name, "%.*s", (int)t->name.len, t->name.ptr);
    f->want = want;
    f->got = got;
    f->row = t->ne[0];
    return 0;
}

/* ---- converting one tensor, rows split over threads --------------------------------- */

typedef struct {
    const model_gguf_t *src;  /* input model */
    const kern_type_t *types; /* (n_tensors) chosen output type per tensor */
    int n_threads;            /* workers per tensor */
    int64_t n_tensors;        /* tensor count */
} s_job_t;

/* One worker's share of a tensor. */
typedef struct {
    const model_gguf_tensor_t *t; /* source tensor */
    kern_type_t dst_type;         /* output type */
    void *dst;                    /* output data (whole tensor) */
    int64_t r0, r1;               /* rows [r0, r1) */
    int rc;                       /* 0 or -ENOMEM */
} s_part_t;

static void *s_convert_rows(void *arg) {
    s_part_t *p = arg;
    const model_gguf_tensor_t *t = p->t;
    int64_t n = t->ne[0];
    size_t src_row = kern_row_size(t->type, n);
    size_t dst_row = kern_row_size(p->dst_type, n);
    float *tmp = malloc((size_t)n * sizeof(float));
    if (!tmp) {
        p->rc = -ENOMEM;
        return NULL;
    }
    const kern_ops_t *ref = kern_ops_ref();
    const kern_ops_t *best = kern_ops_best();
    for (int64_t r = p->r0; r < p->r1; r++) {
        ref->dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * src_row, tmp, n);
        best->quant_row(p->dst_type, tmp, (uint8_t *)p->dst + (size_t)r * dst_row, n);
    }
    free(tmp);
    return NULL;
}

static int s_fill(void *arg, int64_t i, void *dst, size_t nbytes) {
    s_job_t *job = arg;
    const model_gguf_tensor_t *t = model_gguf_tensor_at(job->src, i);
    kern_type_t dt = job->types[i];
    LOG_I(TAG, "[%lld/%lld] %-28.*s %-5s -> %-5s %lld x %lld", (long long)(i + 1),
          (long long)job->n_tensors, (int)t->name.len, t->name.ptr,
          kern_type_traits((int)t->type)->name, kern_type_traits((int)dt)->name,
          (long long)t->ne[0], (long long)(t->ne[1] * t->ne[2] * t->ne[3]));
    if (dt == t->type) {
        /* nothing to convert: the same bytes (the writer computed the same size) */
        if (nbytes != t->nbytes)
            return -EPROTO;
        memcpy(dst, t->data, nbytes);
        return 0;
    }
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    int nt = job->n_threads;
    if (rows < 64 * (int64_t)nt)
        nt = 1; /* too little work to be worth a thread */
    s_part_t parts[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    for (int k = 0; k < nt; k++) {
        parts[k] = (s_part_t){
            .t = t, .dst_type = dt, .dst = dst, .r0 = rows * k / nt, .r1 = rows * (k + 1) / nt};
    }
    /* run parts 1.. on threads, part 0 here; a thread that fails to start runs here too */
    bool spawned[MAX_THREADS] = {false};
    for (int k = 1; k < nt; k++) {
        spawned[k] = pthread_create(&th[k], NULL, s_convert_rows, &parts[k]) == 0;
    }
    s_convert_rows(&parts[0]);
    int rc = parts[0].rc;
    for (int k = 1; k < nt; k++) {
        if (spawned[k])
            pthread_join(th[k], NULL);
        else
            s_convert_rows(&parts[k]);
        if (parts[k].rc < 0)
            rc = parts[k].rc;
    }
    return rc;
}

/* ---- the whole model ---------------------------------------------------------------- */

int model_quantize(const char *in_path, const char *out_path, const char *type_name, int n_threads,
                   model_quantize_summary_t *summary, char *err, size_t errlen) {
    if (err && errlen)
        err[0] = '\0';
    model_quantize_summary_t sum = {0};
    const s_target_t *target = s_target(type_name);
    if (!target) {
        model_err_set(err, errlen, -EINVAL, "unknown type '%s'; valid types: %s",
                      type_name ? type_name : "", model_quantize_type_names());
        return -EINVAL;
    }
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > MAX_THREADS)
        n_threads = MAX_THREADS;

    int rc = 0;
    model_gguf_write_t *w = NULL;
    kern_type_t *types = NULL;
    model_gguf_t *src = model_gguf_open(in_path, err, errlen);
    if (!src)
        return access(in_path, R_OK) != 0 ? -errno : -EPROTO;

    int64_t n = model_gguf_tensor_count(src);
    types = calloc(n > 0 ? (size_t)n : 1, sizeof *types);
    w = model_gguf_write_new();
    if (!types || !w) {
        rc = -ENOMEM;
        model_err_set(err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }
    rc = model_gguf_write_copy_kvs(w, src);
    if (rc < 0) {
        model_err_set(err, errlen, rc, "%s: cannot copy its metadata: %s", in_path, strerror(-rc));
        goto fail;
    }
    if ((rc = model_gguf_write_set_u32(w, "general.file_type", target->ftype)) < 0) {
        model_err_set(err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }

    size_t in_bytes = 0, out_bytes = 0;
    const bool has_output = model_gguf_tensor(src, "output.weight") != NULL;
    for (int64_t i = 0; i < n; i++) {
        const model_gguf_tensor_t *t = model_gguf_tensor_at(src, i);
        kern_type_t want;
        types[i] = s_pick_type(t, target->type, has_output, &want);
        if (s_summary_add(&sum, t, want, types[i]) < 0) {
            rc = -ENOMEM;
            model_err_set(err, errlen, -ENOMEM, "out of memory");
            goto fail;
        }
        char name[512];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        char e2[256] = "";
        int64_t idx =
            model_gguf_write_add_tensor(w, name, types[i], t->n_dims, t->ne, NULL, e2, sizeof e2);
        if (idx < 0) {
            rc = (int)idx;
            model_err_set(err, errlen, rc, "%s: %s", in_path, e2[0] ? e2 : strerror(-rc));
            goto fail;
        }
        in_bytes += t->nbytes;
        out_bytes += kern_row_size(types[i], t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    LOG_I(TAG, "%s -> %s: %lld tensors to %s, %.1f MiB -> %.1f MiB, %d threads", in_path, out_path,
          (long long)n, target->name, in_bytes / 1048576.0, out_bytes / 1048576.0, n_threads);

    s_job_t job = {.src = src, .types = types, .n_threads = n_threads, .n_tensors = n};
    model_gguf_write_set_fill(w, s_fill, &job);
    rc = model_gguf_write_save(w, out_path, err, errlen);
    if (rc == 0)
        LOG_I(TAG, "wrote %s", out_path);

fail:
    if (rc == 0 && summary)
        *summary = sum;
    else
        model_quantize_summary_clear(&sum);
    model_gguf_write_destroy(&w);
    free(types);
    model_gguf_destroy(&src);
    return rc;
}
