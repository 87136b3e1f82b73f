/* base_spans.c - copied spans by hashed windows: every min_len-byte window of every
 * source goes into a map (window hash -> first source position); each output
 * position's window is looked up, the candidate is checked and extended byte by
 * byte. */
#include "base_spans.h"

#include "base_map.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

int base_spans_find(const char *out, size_t out_len, const char *const *srcs,
                    const size_t *src_lens, int n_srcs, size_t min_len, base_span_t *spans,
                    int max_spans) {
    if ((!out && out_len) || n_srcs < 0 || (n_srcs && (!srcs || !src_lens)) || min_len < 4 ||
        max_spans < 0 || (max_spans && !spans))
        return -EINVAL;
    size_t windows = 0;
    for (int s = 0; s < n_srcs; s++) {
        if (!srcs[s] && src_lens[s])
            return -EINVAL;
        if (src_lens[s] >= min_len)
            windows += src_lens[s] - min_len + 1;
    }
    if (!windows || out_len < min_len || !max_spans)
        return 0;
    base_map_t map;
    if (base_map_init(&map, windows))
        return -ENOMEM;
    /* value: source index in the high 24 bits, position in the low 40 */
    for (int s = 0; s < n_srcs; s++)
        for (size_t i = 0; src_lens[s] >= min_len && i + min_len <= src_lens[s]; i++) {
            uint64_t h = XXH3_64bits(srcs[s] + i, min_len);
            if (!base_map_get(&map, h, NULL))
                base_map_put(&map, h, (uint64_t)s << 40 | i);
        }
    int n = 0;
    for (size_t o = 0; o + min_len <= out_len && n < max_spans;) {
        uint64_t v;
        if (!base_map_get(&map, XXH3_64bits(out + o, min_len), &v)) {
            o++;
            continue;
        }
        int s = (int)(v >> 40);
        size_t p = (size_t)(v & ((UINT64_C(1) << 40) - 1)), len = 0;
        while (o + len < out_len && p + len < src_lens[s] && out[o + len] == srcs[s][p + len])
            len++;
        if (len < min_len) { /* a hash collision */
            o++;
            continue;
        }
        spans[n++] = (base_span_t){o, o + len, s, p};
        o += len;
    }
    base_map_free(&map);
    return n;
}
