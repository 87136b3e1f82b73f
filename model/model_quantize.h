/* model_quantize.h - convert a GGUF model's weights to another type (`strata quantize`).
 * 2-D weight matrices go to the requested type; norms and other 1-D tensors stay F32;
 * all metadata is copied and general.file_type updated.
 */
#ifndef MODEL_QUANTIZE_H
#define MODEL_QUANTIZE_H

#include "kern_blocks.h"
#include <stdbool.h>
#include <stddef.h>

/* The type called name ("q8_0", "Q4_K", ... case-insensitive) if it is a valid target
 * of model_quantize; returns false otherwise. */
bool model_quantize_type_from_name(const char *name, kern_type_t *out);
/* The valid target names, space-separated ("f32 f16 bf16 q8_0 ..."). */
const char *model_quantize_type_names(void);

/* A tensor that could not take the type the rules asked for (its rows are not a
 * multiple of that type's block). */
typedef struct {
    char name[96];    /* tensor name */
    kern_type_t want; /* the type the rules asked for */
    kern_type_t got;  /* the type written instead */
    int64_t row;      /* its row length */
} model_quantize_fallback_t;

/* What model_quantize wrote. */
typedef struct {
    int64_t n_tensors;                   /* tensors written */
    int64_t count[KERN_TYPE_COUNT];      /* of them, how many of each type */
    int64_t n_fallback;                  /* tensors that fell back */
    model_quantize_fallback_t *fallback; /* (n_fallback), in file order; owned */
} model_quantize_summary_t;

/* Free what a summary holds and zero it (safe on a zeroed or cleared summary, or NULL). */
void model_quantize_summary_clear(model_quantize_summary_t *s);

/* Read in_path, write out_path with every 2-D weight converted to type_name, using
 * n_threads threads (< 1: one).  Each source row is dequantized with the reference
 * kernels and re-quantized with the best ones; a tensor already of its target type is
 * copied as it is.  Rules per tensor (those of llama.cpp's llama_tensor_get_type that
 * apply to these types):
 *   - 1-D tensors (norms, biases) become F32;
 *   - MoE routers (blk.N.ffn_gate_inp.weight) become F32 (small; they choose the experts);
 *   - under q4_0, q4_1, q5_0, q5_1: token_embd.weight / output.weight become q8_0;
 *   - under q4_k, q5_k, q6_k: the output matrix (output.weight, or token_embd.weight when
 *     the model has no output.weight) becomes q6_k, or q8_0 when its rows are not a
 *     multiple of 256; a separate token_embd.weight takes the target;
 *   - a row length that is not a multiple of the chosen type's block falls back: q4_k to
 *     q5_0, q5_k to q5_1, q6_k to q8_0, the 32-element types to q8_0; and to f16 when
 *     the row is not a multiple of 32 either; with a log line.
 * Progress is logged at info level, one line per tensor.  The output is written to a
 * temporary file and renamed, so out_path is never left half-written.  On success, when
 * summary is not NULL, it receives the types written and the fallbacks (the caller
 * clears it with model_quantize_summary_clear); on failure it is left untouched.
 * Returns 0, or a negative errno with a one-line reason in err[errlen]: -ENOENT/-EPROTO
 * (input unreadable or malformed), -EINVAL (unknown type name: the message lists the
 * valid ones), -EACCES/-EIO/... (output not writable), -ENOMEM. */
int model_quantize(const char *in_path, const char *out_path, const char *type_name, int n_threads,
                   model_quantize_summary_t *summary, char *err, size_t errlen);

#endif
