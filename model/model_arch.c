/* model_arch.c - the architecture table: general.architecture -> declaration
 * (model_arch.h), and what the forward pass can run of a declaration.
 */
#include "model_arch.h"

#include <string.h>

/* One row per (general.architecture, dense or MoE).  Adding an architecture: a row here
 * and its model_arch_<name>.c (model_arch.h). */
static const struct {
    const char *name;         /* general.architecture */
    bool moe;                 /* for GGUFs with <name>.expert_count > 0 */
    const model_arch_t *arch; /* the declaration */
} s_table[] = {
    {"llama", false, &model_arch_llama},   {"llama", true, &model_arch_llama_moe},
    {"mistral", false, &model_arch_llama}, {"mistral", true, &model_arch_llama_moe},
    {"qwen2", false, &model_arch_qwen2},   {"qwen3", false, &model_arch_qwen3},
    {"gemma3", false, &model_arch_gemma3},
};
#define S_ROWS (sizeof s_table / sizeof s_table[0])

const model_arch_t *model_arch_find(const char *name, bool moe) {
    for (size_t i = 0; name && i < S_ROWS; i++)
        if (!strcmp(s_table[i].name, name) && s_table[i].moe == moe)
            return s_table[i].arch;
    return NULL;
}

bool model_arch_known(const char *name) {
    return model_arch_find(name, false) || model_arch_find(name, true);
}

const char *model_arch_names(void) {
    static const char names[] =
        "llama, mistral, qwen2, qwen3, gemma3"; /* the distinct names of s_table */
    return names;
}

void model_arch_layer_stages(const model_arch_t *arch, const model_config_t *cfg, int l,
                             model_stages_t *out) {
    *out = arch->stages;
    if (arch->layer_stages)
        arch->layer_stages(arch, cfg, l, out);
}

/* What the forward pass (model_forward.c) runs today: RMSNorm before attention and FFN
 * and, optionally, after them (sandwich), an embedding scale, Q/K/V and output biases, Q/K
 * head norms, full or sliding-window attention, a SiLU- or GELU-gated dense FFN or a
 * SiLU-gated MoE, both RoPE kinds.  Each switch refused here is one stage to write there. */
const char *model_arch_unsupported(const model_arch_t *arch, const model_config_t *cfg) {
    for (int l = 0; l < cfg->n_layer; l++) {
        model_stages_t st;
        model_arch_layer_stages(arch, cfg, l, &st);
        if (st.norm != MODEL_NORM_RMS)
            return "LayerNorm";
        if (st.attn == MODEL_ATTN_SLIDING && st.window < 1)
            return "a sliding window of no positions";
        if (st.act == MODEL_ACT_GELU && st.ffn == MODEL_FFN_MOE)
            return "a GELU Mixture-of-Experts feed-forward";
        if ((st.ffn == MODEL_FFN_MOE) != (cfg->n_expert > 0))
            return "an FFN kind that does not match its expert_count";
    }
    return NULL;
}
