/* fuzz_gguf_seeds.c - writes the seed corpus of fuzz_gguf: small GGUFs made with
 * model_gguf_write (a llama-shaped one with tensors of several types, and one with the
 * real model's metadata, its vocabulary cut to a few tokens), the real model's first
 * bytes, and truncated and version-2 variants.  Used by scripts/fuzz-gguf and by CTest
 * (fuzz_gguf_seeds, then the replay).
 *   fuzz_gguf_seeds OUT_DIR [REAL_MODEL.gguf | --default-model]
 * --default-model: the default model (STRATA_MODEL, else ~/.cache/strata/models/...)
 * when it is there, else the seeds without it. */
#include "model_gguf.h"
#include "model_gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_VOCAB 32 /* tokens kept from the real vocabulary */

static int s_fill(void *arg, int64_t i, void *dst, size_t nbytes) {
    (void)arg;
    for (size_t k = 0; k < nbytes; k++)
        ((uint8_t *)dst)[k] = (uint8_t)(k * 31 + (size_t)i);
    return 0;
}

/* A few tiny tensors with llama names, one per weight type family. */
static int s_add_tensors(model_gguf_write_t *w) {
    struct {
        const char *name;
        kern_type_t type;
        int n_dims;
        int64_t ne[2];
    } ts[] = {
        {"token_embd.weight", KERN_Q4_1, 2, {64, 8}},
        {"output_norm.weight", KERN_F32, 1, {64, 1}},
        {"blk.0.attn_q.weight", KERN_Q8_0, 2, {64, 4}},
        {"blk.0.attn_k.weight", KERN_F16, 2, {64, 2}},
        {"blk.0.ffn_down.weight", KERN_Q4_K, 2, {256, 2}},
        {"blk.0.ffn_up.weight", KERN_Q6_K, 2, {256, 1}},
    };
    char err[256];
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (model_gguf_write_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, NULL,
                                        err, sizeof err) < 0) {
            fprintf(stderr, "fuzz_gguf_seeds: %s\n", err);
            return -1;
        }
    model_gguf_write_set_fill(w, s_fill, NULL);
    return 0;
}

static int s_save(model_gguf_write_t *w, const char *dir, const char *name) {
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (model_gguf_write_save(w, path, err, sizeof err)) {
        fprintf(stderr, "fuzz_gguf_seeds: %s\n", err);
        return -1;
    }
    return 0;
}

/* Copies of path: cut to each length in cuts, and with the version set to 2. */
static int s_variants(const char *dir, const char *name) {
    char path[4096], out[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t cuts[] = {3, 12, 30, n / 3, n / 2, n - 1};
    for (size_t i = 0; i <= sizeof cuts / sizeof cuts[0]; i++) {
        size_t len = i < sizeof cuts / sizeof cuts[0] ? cuts[i] : n;
        if (i == sizeof cuts / sizeof cuts[0])
            buf[4] = 2; /* the same file as GGUF v2 */
        snprintf(out, sizeof out, "%s.%s", path, i < sizeof cuts / sizeof cuts[0] ? "cut" : "v2");
        if (i < sizeof cuts / sizeof cuts[0])
            snprintf(out + strlen(out), sizeof out - strlen(out), "%zu", len);
        FILE *o = fopen(out, "wb");
        if (!o || fwrite(buf, 1, len, o) != len) {
            if (o)
                fclose(o);
            return -1;
        }
        fclose(o);
    }
    return 0;
}

/* The real model's metadata with its vocabulary cut to S_VOCAB tokens, and tiny tensors. */
static int s_from_real(const char *dir, const char *model) {
    char err[512];
    model_gguf_t *g = model_gguf_open(model, err, sizeof err);
    if (!g) {
        fprintf(stderr, "fuzz_gguf_seeds: %s\n", err);
        return -1;
    }
    model_gguf_write_t *w = model_gguf_write_new();
    int rc = w ? model_gguf_write_copy_kvs(w, g) : -1;
    const char *arrays[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    for (size_t a = 0; a < 2 && rc == 0; a++) {
        model_gguf_str_t s[S_VOCAB];
        char *c[S_VOCAB] = {0};
        if (!model_gguf_arr_strs(g, arrays[a], s, S_VOCAB))
            continue;
        for (int i = 0; i < S_VOCAB && rc == 0; i++) {
            c[i] = strndup(s[i].ptr, s[i].len);
            rc = c[i] ? 0 : -1;
        }
        if (rc == 0)
            rc = model_gguf_write_set_arr_str(w, arrays[a], (const char *const *)c, S_VOCAB);
        for (int i = 0; i < S_VOCAB; i++)
            free(c[i]);
    }
    const char *nums[] = {"tokenizer.ggml.token_type", "tokenizer.ggml.scores"};
    for (size_t a = 0; a < 2 && rc == 0; a++) {
        model_gguf_vtype_t et;
        uint64_t n;
        if (!model_gguf_get_arr(g, nums[a], &et, &n) || n < S_VOCAB)
            continue;
        int32_t iv[S_VOCAB];
        float fv[S_VOCAB];
        for (int i = 0; i < S_VOCAB; i++) {
            double d = 0;
            model_gguf_arr_num(g, nums[a], (uint64_t)i, &d);
            iv[i] = (int32_t)d;
            fv[i] = (float)d;
        }
        rc = et == GGUF_FLOAT32 ? model_gguf_write_set_arr(w, nums[a], et, S_VOCAB, fv)
                                : model_gguf_write_set_arr(w, nums[a], GGUF_INT32, S_VOCAB, iv);
    }
    if (rc == 0)
        rc = s_add_tensors(w);
    if (rc == 0)
        rc = s_save(w, dir, "real-metadata.gguf");
    model_gguf_write_destroy(&w);
    model_gguf_destroy(&g);
    if (rc)
        return rc;
    /* the real file's first bytes: header and the start of the vocabulary */
    FILE *f = fopen(model, "rb");
    static uint8_t head[8192];
    size_t n = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    char path[4096];
    snprintf(path, sizeof path, "%s/real-head.gguf", dir);
    FILE *o = fopen(path, "wb");
    if (!o || fwrite(head, 1, n, o) != n)
        rc = -1;
    if (o)
        fclose(o);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: fuzz_gguf_seeds OUT_DIR [REAL_MODEL.gguf]\n");
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "fuzz_gguf_seeds: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    model_gguf_write_t *w = model_gguf_write_new();
    if (!w)
        return 1;
    uint32_t type_ids[4] = {1, 1, 3, 3};
    const char *toks[4] = {"<s>", "</s>", "a", "b"};
    float scores[4] = {0, 0, -1, -2};
    int rc = model_gguf_write_set_str(w, "general.architecture", "llama") ||
             model_gguf_write_set_str(w, "general.name", "fuzz seed") ||
             model_gguf_write_set_u32(w, "general.alignment", 64) ||
             model_gguf_write_set_u32(w, "llama.block_count", 1) ||
             model_gguf_write_set_u32(w, "llama.embedding_length", 64) ||
             model_gguf_write_set_u32(w, "llama.feed_forward_length", 256) ||
             model_gguf_write_set_u32(w, "llama.attention.head_count", 4) ||
             model_gguf_write_set_u32(w, "llama.attention.head_count_kv", 2) ||
             model_gguf_write_set_u64(w, "llama.context_length", 128) ||
             model_gguf_write_set_f32(w, "llama.rope.freq_base", 10000.0f) ||
             model_gguf_write_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f) ||
             model_gguf_write_set_bool(w, "tokenizer.ggml.add_bos_token", true) ||
             model_gguf_write_set_i32(w, "tokenizer.ggml.bos_token_id", 0) ||
             model_gguf_write_set_str(w, "tokenizer.ggml.model", "llama") ||
             model_gguf_write_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4) ||
             model_gguf_write_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, 4, scores) ||
             model_gguf_write_set_arr(w, "tokenizer.ggml.token_type", GGUF_UINT32, 4, type_ids) ||
             s_add_tensors(w) || s_save(w, dir, "tiny-llama.gguf") ||
             s_variants(dir, "tiny-llama.gguf");
    model_gguf_write_destroy(&w);
    const char *real = argc == 3 ? argv[2] : NULL;
    char path[4096];
    if (real && !strcmp(real, "--default-model")) {
        const char *env = getenv("STRATA_MODEL");
        if (env && *env)
            snprintf(path, sizeof path, "%s", env);
        else
            snprintf(path, sizeof path, "%s/.cache/strata/models/%s",
                     getenv("HOME") ? getenv("HOME") : "/root", "SmolLM2-135M-Instruct.Q4_1.gguf");
        real = access(path, R_OK) == 0 ? path : NULL;
        if (!real)
            printf("fuzz_gguf_seeds: %s absent: seeds without the real model's metadata\n", path);
    }
    if (rc == 0 && real)
        rc = s_from_real(dir, real);
    return rc ? 1 : 0;
}
