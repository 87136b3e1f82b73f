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

/* Read in_path, write out_path with every 2-D weight converted to type_name, using
 * n_threads threads (< 1: one).  Each source row is dequantized with the reference
 * kernels and re-quantized with the best ones; a tensor already of its target type is
 * copied as it is.  Rules per tensor:
 *   - 1-D tensors (norms, biases) become F32;
 *   - MoE routers (blk.N.ffn_gate_inp.weight) become F32 (small; they choose the experts);
 *   - token_embd.weight / output.weight become q8_0 when the target has 4 or 5 bits;
 *   - a row length that is not a multiple of the target's block falls back to q8_0
 *     (when a multiple of 32) or else f16, with a log line.
 * Progress is logged at info level, one line per tensor.  The output is written to a
 * temporary file and renamed, so out_path is never left half-written.
 * Returns 0, or a negative errno with a one-line reason in err[errlen]: -ENOENT/-EPROTO
 * (input unreadable or malformed), -EINVAL (unknown type name: the message lists the
 * valid ones), -EACCES/-EIO/... (output not writable), -ENOMEM. */
int model_quantize(const char *in_path, const char *out_path, const char *type_name, int n_threads,
                   char *err, size_t errlen);

#endif
