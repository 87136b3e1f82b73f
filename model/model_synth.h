/* model_synth.h - random-weight llama GGUFs written from nothing: the small synthetic model
 * the unit suites run on (no download), and real shapes (Llama-3.2-1B's, ...) for speed
 * measurements where no model can be fetched -- a GPU machine lent for minutes.  The
 * weights are noise at a sane scale (the logits are finite and spread; the text is not
 * language), every matrix the chosen type, norms F32; the vocabulary is a minimal
 * SentencePiece one ("<unk>", "<s>", "</s>", then "<tag>3", "<tag>4", ...). */
#ifndef MODEL_SYNTH_H
#define MODEL_SYNTH_H

#include "kern_blocks.h"

#include <stddef.h>
#include <stdint.h>

/* Zero fields take the defaults in brackets. */
typedef struct {
    int n_layer;           /* [2] */
    int d_model;           /* [64] */
    int n_head;            /* [4] */
    int n_head_kv;         /* [2] */
    int d_ff;              /* [128] */
    int n_vocab;           /* [64] */
    uint64_t seed;         /* weights [1] */
    const char *vocab_tag; /* token text prefix ["t"]: another tag, another vocabulary */
    float out_std;         /* std of the output matrix: spread of the logits [0.2] */
    int head_dim;          /* [d_model / n_head] */
    kern_type_t wtype;     /* the matrices' type [KERN_F32]: F32, F16, Q8_0 or Q4_K */
    float rope_base;       /* [10000] */
    const char *name;      /* general.name ["synthetic"] */
} model_synth_t;

/* Write the model to path.  0, or a negative errno with a reason in err. */
int model_synth_write(const char *path, const model_synth_t *cfg, char *err, size_t errlen);
/* The dimensions of a named real shape into *cfg (its other fields kept): "llama-1b"
 * (Llama-3.2-1B: 16 layers, 2048 wide, FFN 8192, 32 heads, 8 KV heads, 128256 tokens),
 * "llama-3b", "llama-8b".  0, or -EINVAL for another name. */
int model_synth_shape(const char *name, model_synth_t *cfg);

#endif
