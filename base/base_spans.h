/* base_spans.h - spans of a text copied verbatim from other texts: what an output
 * quotes from its input (the `sources` of a traced request, docs/PROTOCOL.md).
 * Greedy left to right: at each output position the longest match of at least
 * min_len bytes in any source wins (the first source position on ties), and the
 * scan goes on after it.  Expected time linear in the sizes (hashed windows of
 * min_len bytes, each candidate checked byte by byte). */
#ifndef BASE_SPANS_H
#define BASE_SPANS_H

#include <stddef.h>

typedef struct {
    size_t out_start, out_end; /* output bytes [out_start, out_end) */
    int src;                   /* which source */
    size_t src_start;          /* equal to source bytes [src_start, src_start + length) */
} base_span_t;

/* Find the copied spans of out in srcs[0..n_srcs) (src_lens bytes each), in output
 * order, at most max_spans.  min_len >= 4.  Returns the number found, or -EINVAL /
 * -ENOMEM (nothing written). */
int base_spans_find(const char *out, size_t out_len, const char *const *srcs,
                    const size_t *src_lens, int n_srcs, size_t min_len, base_span_t *spans,
                    int max_spans);

#endif
