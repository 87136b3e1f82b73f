/* fuzz_gguf.c - libFuzzer target for the GGUF reader (model/model_gguf.c): every input
 * is a whole file.  It opens, or it is refused with a message that names the file offset
 * of the bad item (within the file).  What opens is walked whole: every metadata getter,
 * every array element, every tensor's data and name lookup, and the llama config reader.
 * Built by scripts/fuzz-gguf (libFuzzer) and by CMake with fuzz_replay.c, which replays the
 * seeds fuzz_gguf_seeds.c writes (CTest fuzz_gguf_replay). */
#include "model.h"
#include "model_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int s_fd = -1;           /* one memfd: the input as a file, without touching the disk */
static char s_path[64];         /* its /proc/self/fd path */
static volatile uint8_t s_sink; /* keeps the byte reads below */

/* A NUL-terminated copy of s, or NULL when s holds a NUL (no C-string lookup can find it). */
static char *s_cstr(model_gguf_str_t s) {
    if (memchr(s.ptr, 0, s.len))
        return NULL;
    char *c = malloc(s.len + 1);
    if (!c)
        abort();
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

static void s_touch(const void *p, uint64_t n) {
    if (n) {
        s_sink ^= ((const uint8_t *)p)[0];
        s_sink ^= ((const uint8_t *)p)[n - 1];
    }
}

static void s_walk_kv(const model_gguf_t *g, const model_gguf_kv_t *kv) {
    s_touch(kv->key.ptr, kv->key.len);
    char *key = s_cstr(kv->key);
    if (!key)
        return;
    if (!model_gguf_find(g, key) || !model_gguf_str_eq(model_gguf_find(g, key)->key, key))
        abort(); /* the first entry with this key */
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    char *s = NULL;
    model_gguf_get_u64(g, key, &u);
    model_gguf_get_i64(g, key, &i);
    model_gguf_get_f64(g, key, &f);
    model_gguf_get_bool(g, key, &b);
    if (model_gguf_get_str(g, key, &s))
        free(s);
    model_gguf_vtype_t et;
    uint64_t len;
    if (model_gguf_find(g, key) == kv && model_gguf_get_arr(g, key, &et, &len) && len) {
        if (et == GGUF_STRING) {
            uint64_t n = len < 4096 ? len : 4096;
            model_gguf_str_t *out = malloc(n * sizeof *out);
            if (!out || !model_gguf_arr_strs(g, key, out, n))
                abort();
            for (uint64_t k = 0; k < n; k++)
                s_touch(out[k].ptr, out[k].len);
            model_gguf_str_t last;
            if (!model_gguf_arr_str(g, key, len - 1, &last))
                abort();
            s_touch(last.ptr, last.len);
            free(out);
        } else if (!model_gguf_arr_num(g, key, 0, &f) || !model_gguf_arr_num(g, key, len - 1, &f)) {
            abort();
        }
    }
    free(key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (s_fd < 0) {
        s_fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
        if (s_fd < 0)
            abort();
        snprintf(s_path, sizeof s_path, "/proc/self/fd/%d", s_fd);
    }
    if (ftruncate(s_fd, 0) || (size && pwrite(s_fd, data, size, 0) != (ssize_t)size))
        abort();
    char err[512] = "";
    model_gguf_t *g = model_gguf_open(s_path, err, sizeof err);
    if (!g) {
        if (!err[0])
            abort();     /* every failure says why */
        if (size >= 4) { /* ... and where: an offset inside the file */
            const char *at = strstr(err, ": at offset ");
            if (!at || strtoull(at + 12, NULL, 10) > size)
                abort();
        }
        return 0;
    }
    for (int64_t i = 0; i < model_gguf_kv_count(g); i++)
        s_walk_kv(g, model_gguf_kv_at(g, i));
    if (model_gguf_tensor_count(g) && model_gguf_data_offset(g) > model_gguf_file_size(g))
        abort();
    for (int64_t i = 0; i < model_gguf_tensor_count(g); i++) {
        const model_gguf_tensor_t *t = model_gguf_tensor_at(g, i);
        s_touch(t->data, t->nbytes);
        char *name = s_cstr(t->name);
        if (name && model_gguf_tensor(g, name) != t)
            abort(); /* names are unique, and the lookup finds each */
        free(name);
    }
    model_config_t c;
    if (model_config_read(g, &c, err, sizeof err) == 0) {
        int q;
        if (__builtin_mul_overflow(c.n_head, c.head_dim, &q) || c.n_head % c.n_head_kv)
            abort();
    }
    model_gguf_destroy(&g);
    return 0;
}
