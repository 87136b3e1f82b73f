/* test_kv_cache.c - T0 paged KV with prefix sharing, on a small fake model
 * (2 layers, 2 KV heads, head_dim 8, block 4, F32): a published prefix is
 * attached by a later sequence (same blocks, refcount 2); writing into a
 * shared block copies it first and leaves the other sequence's data alone;
 * eviction follows the policy and the callback sees the evicted data; blocks
 * inserted from a lower tier are found by a later attach; truncate; -ENOSPC
 * takes nothing; random operations keep every invariant and every live
 * sequence's KV.  The same cases again with the pool in a backend's memory (the
 * CPU backend, its moves counted: what a GPU worker's T0 does through CUDA's), and
 * a backend whose moves fail: nothing half-moved is handed over or indexed.  Then,
 * on the real model: a sequence that attaches a cached prefix and computes only the
 * rest produces bitwise the logits of computing it from scratch. */
#include "kv_cache.h"
#include "model.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 4
#define ELEMS (2 * 2 * 2 * 8) /* per position: layers * (K, V) * heads * head_dim */

/* 2 layers, 2 KV heads of 8 elements, B positions per block */
static kern_kv_shape_t s_shape(void) {
    return (kern_kv_shape_t){2, 2, 8, B};
}

/* A test clock: tests move it by hand. */
/* The backend the pool lives in (NULL: host memory), the CPU one with its moves counted
 * and, when S_FAIL, failed. */
static kern_backend_t *S_BE;
static int S_OUT, S_IN, S_COPY;
static bool S_FAIL;
static int (*s_cpu_out)(kern_backend_t *, void *, const void *, size_t);
static int (*s_cpu_in)(kern_backend_t *, void *, const void *, size_t);
static int (*s_cpu_copy)(kern_backend_t *, void *, const void *, size_t);

static int s_count_out(kern_backend_t *be, void *host, const void *src, size_t n) {
    S_OUT++;
    return S_FAIL ? -EIO : s_cpu_out(be, host, src, n);
}
static int s_count_in(kern_backend_t *be, void *dst, const void *host, size_t n) {
    S_IN++;
    return S_FAIL ? -EIO : s_cpu_in(be, dst, host, n);
}
static int s_count_copy(kern_backend_t *be, void *dst, const void *src, size_t n) {
    S_COPY++;
    return S_FAIL ? -EIO : s_cpu_copy(be, dst, src, n);
}

static void s_backend_on(void) {
    S_BE = kern_backend_cpu_new(NULL);
    ck_assert_ptr_nonnull(S_BE);
    s_cpu_out = S_BE->block_out;
    s_cpu_in = S_BE->block_in;
    s_cpu_copy = S_BE->copy;
    S_BE->block_out = s_count_out;
    S_BE->block_in = s_count_in;
    S_BE->copy = s_count_copy;
    S_OUT = S_IN = S_COPY = 0;
    S_FAIL = false;
}

static void s_backend_off(void) {
    kern_backend_destroy(&S_BE);
}

static uint64_t s_time;
static uint64_t s_clock(void *arg) {
    (void)arg;
    return s_time;
}

static kv_cache_t *s_new(int n_blocks, kv_policy_kind_t policy, bool sharing) {
    kern_kv_shape_t c = s_shape();
    kv_cache_config_t kc = {KV_FMT_F32, B, n_blocks, policy, sharing, S_BE};
    kv_cache_t *kv = kv_cache_new(&c, &kc);
    ck_assert_ptr_nonnull(kv);
    s_time = 1000000;
    kv_cache_set_clock(kv, s_clock, NULL);
    return kv;
}

static void s_check(const kv_cache_t *kv, const kv_seq_t *const *seqs, int n) {
    char err[256] = "";
    int rc = kv_cache_check(kv, seqs, n, err, sizeof err);
    ck_assert_msg(rc == 0, "invariant: %s", err);
}

/* ---- fake KV: position p's values are a function of tokens[0..p] (as a
 * model's are), so any block holding a prefix must hold exactly these. */

static uint64_t s_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t s_prefix_key(const int32_t *tokens, int p) {
    uint64_t h = 7;
    for (int i = 0; i <= p; i++)
        h = s_mix(h ^ (uint32_t)tokens[i]);
    return h;
}

/* Multiples of 1/1024 below 1024: exact in F32, in F16's range. */
static float s_value(uint64_t key, int e) {
    return (float)(s_mix(key + (uint64_t)e) & 0xfffff) / 1024.0f;
}

/* Element e (layer, K|V, head, dim flattened) of slot `slot` in block id. */
static float *s_elem(const kv_cache_t *kv, int id, int slot, int e) {
    const kern_kv_pool_t *pool = kv_cache_pool(kv);
    float *base = (float *)(pool->base + (size_t)id * pool->block_bytes);
    int slab = e / 8, d = e % 8; /* (layer, K|V, head) slab, then dim */
    return base + ((size_t)slab * B + slot) * 8 + d;
}

static void s_write(kv_cache_t *kv, const kv_seq_t *q, const int32_t *tokens, int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        ck_assert_int_lt(p / B, q->n);
        uint64_t k = s_prefix_key(tokens, p);
        for (int e = 0; e < ELEMS; e++)
            *s_elem(kv, q->blocks[p / B], p % B, e) = s_value(k, e);
    }
}

static bool s_valid(const kv_cache_t *kv, const kv_seq_t *q, const int32_t *tokens, int p0,
                    int p1) {
    for (int p = p0; p < p1; p++) {
        uint64_t k = s_prefix_key(tokens, p);
        for (int e = 0; e < ELEMS; e++)
            if (*s_elem(kv, q->blocks[p / B], p % B, e) != s_value(k, e))
                return false;
    }
    return true;
}

/* Compute tokens[p0..p1) of q: reserve, write. */
static void s_compute(kv_cache_t *kv, kv_seq_t *q, const int32_t *tokens, int p0, int p1) {
    ck_assert_int_eq(kv_cache_reserve(kv, q, p0, p1), 0);
    s_write(kv, q, tokens, p0, p1);
}

static const int32_t T[] = {11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41, 42, 43, 44};

START_TEST(attach_shares_blocks) {
    kv_cache_t *kv = s_new(16, KV_POLICY_LRU, true);
    kv_seq_t a = {0}, b = {0};
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &a, T, 10), 0); /* nothing cached yet */
    s_compute(kv, &a, T, 0, 10);
    ck_assert_int_eq(kv_cache_publish(kv, &a, T, 10, true, 0), 0);
    ck_assert_int_eq(a.n_published, 2);
    ck_assert(a.tail_hash == kv_hash_block(kv_hash_block(0, T, 4), T + 4, 4));
    ck_assert(kv_cache_contains(kv, a.tail_hash));
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 10);
    ck_assert_int_eq(kv_cache_match(kv, T, 9), 8); /* the partial block needs 10 tokens */
    /* b: the same 10 tokens then more: two full blocks and the partial one */
    int32_t tb[12];
    memcpy(tb, T, sizeof tb);
    tb[10] = 99;
    tb[11] = 98;
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &b, tb, 12), 10);
    ck_assert_int_eq(b.n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(b.blocks[i], a.blocks[i]);
        ck_assert_int_eq(kv_cache_refs(kv, b.blocks[i]), 2);
    }
    ck_assert(s_valid(kv, &b, tb, 0, 10));
    const kv_seq_t *all[] = {&a, &b};
    s_check(kv, all, 2);
    kv_cache_stats_t st = kv_cache_stats(kv);
    ck_assert_int_eq(st.lookups, 2);
    ck_assert_int_eq(st.hit_blocks, 3);
    ck_assert_int_eq(st.hit_tokens, 10);
    ck_assert_int_eq(st.miss_blocks, 3);
    ck_assert_int_eq(st.n_used, 3);

    /* b writes positions 10, 11 of the shared partial block: copied first */
    int shared = a.blocks[2];
    float before[ELEMS * B];
    for (int s = 0; s < B; s++)
        for (int e = 0; e < ELEMS; e++)
            before[s * ELEMS + e] = *s_elem(kv, shared, s, e);
    s_compute(kv, &b, tb, 10, 12);
    ck_assert_int_ne(b.blocks[2], shared);
    ck_assert_int_eq(b.blocks[0], a.blocks[0]);
    ck_assert_int_eq(kv_cache_refs(kv, shared), 1);
    ck_assert_int_eq(kv_cache_stats(kv).cow_copies, 1);
    for (int s = 0; s < B; s++)
        for (int e = 0; e < ELEMS; e++)
            ck_assert(*s_elem(kv, shared, s, e) == before[s * ELEMS + e]);
    ck_assert(s_valid(kv, &b, tb, 0, 12)); /* the copy kept positions 8, 9 */
    ck_assert(s_valid(kv, &a, T, 0, 10));
    s_check(kv, all, 2);

    /* a continues into its own published partial block: copied too; the
     * published one stays cached for later prompts */
    s_compute(kv, &a, T, 10, 13);
    ck_assert_int_ne(a.blocks[2], shared);
    ck_assert_int_eq(kv_cache_refs(kv, shared), 0);
    ck_assert_int_eq(kv_cache_stats(kv).n_cached, 1);
    ck_assert(s_valid(kv, &a, T, 0, 13));
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 10);
    s_check(kv, all, 2);
    /* publishing a's now-full third block makes it reachable */
    ck_assert_int_eq(kv_cache_publish(kv, &a, T, 13, false, 0), 0);
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 12);
    s_check(kv, all, 2);
    kv_cache_release(kv, &a);
    kv_cache_release(kv, &b);
    s_check(kv, NULL, 0);
    st = kv_cache_stats(kv);
    ck_assert_int_eq(st.n_used, 0);
    ck_assert_int_eq(st.n_cached, 4); /* 2 full + partial(2) + a's third */
    ck_assert_int_eq(st.n_free + st.n_cached, 16);
    kv_cache_destroy(&kv);
}
END_TEST

/* The whole prompt cached: the last block is attached, and copied when its
 * last position is recomputed. */
START_TEST(fully_cached_prompt_cow) {
    kv_cache_t *kv = s_new(8, KV_POLICY_LRU, true);
    kv_seq_t a = {0}, b = {0};
    s_compute(kv, &a, T, 0, 8);
    ck_assert_int_eq(kv_cache_publish(kv, &a, T, 8, true, 0), 0);
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &b, T, 8), 7);
    ck_assert_int_eq(b.n, 2);
    ck_assert_int_eq(b.n_published, 1);
    ck_assert_int_eq(kv_cache_refs(kv, a.blocks[1]), 2);
    int last = a.blocks[1];
    float keep = *s_elem(kv, last, 3, 5);
    ck_assert_int_eq(kv_cache_reserve(kv, &b, 7, 8), 0);
    ck_assert_int_ne(b.blocks[1], last);
    ck_assert_int_eq(b.blocks[0], a.blocks[0]);
    for (int e = 0; e < ELEMS; e++)
        *s_elem(kv, b.blocks[1], 3, e) = -1.0f; /* b writes its position 7 */
    ck_assert(*s_elem(kv, last, 3, 5) == keep);
    ck_assert(s_valid(kv, &a, T, 0, 8));
    ck_assert(s_valid(kv, &b, T, 0, 7));
    s_write(kv, &b, T, 7, 8);
    /* b's block 1 is a private duplicate of a's published one: it stays private */
    ck_assert_int_eq(kv_cache_publish(kv, &b, T, 8, false, 0), 0);
    ck_assert_int_eq(b.n_published, 2);
    ck_assert(b.tail_hash == a.tail_hash);
    const kv_seq_t *all[] = {&a, &b};
    s_check(kv, all, 2);
    kv_cache_release(kv, &b);
    ck_assert_int_eq(kv_cache_stats(kv).n_free, 6); /* b's private copy came back */
    kv_cache_release(kv, &a);
    s_check(kv, NULL, 0);
    ck_assert_int_eq(kv_cache_stats(kv).n_cached, 2);
    kv_cache_destroy(&kv);
}
END_TEST

typedef struct {
    int n;
    uint64_t hash[8];
    int32_t tok0[8];
    bool in_lower[8];
    float v[8]; /* element 5 of slot 1 */
    int fmt;
    size_t bytes;
} s_evlog_t;

static void s_on_evict(void *arg, const kv_cache_evicted_t *b) {
    s_evlog_t *l = arg;
    ck_assert_int_lt(l->n, 8);
    l->hash[l->n] = b->meta->hash;
    l->tok0[l->n] = b->meta->tokens[0];
    l->in_lower[l->n] = b->in_lower;
    const float *f = b->data;
    l->v[l->n] = f[1 * 8 + 5]; /* slab 0, slot 1, dim 5 */
    l->fmt = b->fmt;
    l->bytes = b->bytes;
    l->n++;
}

/* Publish one full block of tokens {t, t+1, t+2, t+3} from a new sequence and
 * release it at the current test time. */
static uint64_t s_cache_one(kv_cache_t *kv, int32_t t, int pin) {
    int32_t tok[B] = {t, t + 1, t + 2, t + 3};
    kv_seq_t q = {0};
    s_compute(kv, &q, tok, 0, B);
    ck_assert_int_eq(kv_cache_publish(kv, &q, tok, B, false, pin), 0);
    uint64_t h = q.tail_hash;
    kv_cache_release(kv, &q);
    return h;
}

START_TEST(eviction_follows_policy) {
    kv_cache_t *kv = s_new(3, KV_POLICY_LRU, true);
    s_evlog_t log = {0};
    kv_cache_on_evict(kv, s_on_evict, &log);
    s_time = 10;
    uint64_t hx = s_cache_one(kv, 100, 0);
    s_time = 20;
    uint64_t hy = s_cache_one(kv, 200, 0);
    s_time = 30;
    uint64_t hz = s_cache_one(kv, 300, 0);
    ck_assert_int_eq(kv_cache_stats(kv).n_cached, 3);
    ck_assert_int_eq(kv_cache_available(kv), 3);
    /* x is used again at 40: y is now the least recently used */
    s_time = 40;
    int32_t tx[B + 1] = {100, 101, 102, 103, 7};
    kv_seq_t q = {0}, w = {0};
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &q, tx, B + 1), B);
    kv_cache_release(kv, &q);
    kv_cache_mark_lower(kv, hz);
    s_time = 50;
    int32_t tw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ck_assert_int_eq(kv_cache_reserve(kv, &w, 0, 4), 0);
    ck_assert_int_eq(log.n, 1);
    ck_assert(log.hash[0] == hy);
    ck_assert_int_eq(log.tok0[0], 200);
    int32_t ty[B] = {200, 201, 202, 203};
    ck_assert(log.v[0] == s_value(s_prefix_key(ty, 1), 5)); /* y's data, before reuse */
    ck_assert(!log.in_lower[0]);
    ck_assert_int_eq(log.fmt, KV_FMT_F32);
    ck_assert_int_eq(log.bytes, kv_cache_pool(kv)->block_bytes);
    ck_assert(!kv_cache_contains(kv, hy));
    ck_assert(kv_cache_contains(kv, hx) && kv_cache_contains(kv, hz));
    ck_assert_int_eq(kv_cache_reserve(kv, &w, 4, 8), 0);
    ck_assert_int_eq(log.n, 2);
    ck_assert(log.hash[1] == hz);
    ck_assert(log.in_lower[1]);
    ck_assert_int_eq(kv_cache_stats(kv).evictions, 2);
    s_write(kv, &w, tw, 0, 8);
    const kv_seq_t *all[] = {&w};
    s_check(kv, all, 1);
    kv_cache_release(kv, &w);
    kv_cache_destroy(&kv);
}
END_TEST

/* SCORED: a pinned block outlives younger unpinned ones; a frequently used
 * one outlives a slightly younger one used once. */
START_TEST(eviction_scored_pin) {
    kv_cache_t *kv = s_new(3, KV_POLICY_SCORED, true);
    s_evlog_t log = {0};
    kv_cache_on_evict(kv, s_on_evict, &log);
    s_time = 1000000;
    uint64_t hp = s_cache_one(kv, 100, 1); /* pinned, at 1 s */
    s_time = 30000000;
    uint64_t hf = s_cache_one(kv, 200, 0); /* at 30 s, then used 7 times */
    int32_t tf[B + 1] = {200, 201, 202, 203, 0};
    for (int i = 0; i < 7; i++) {
        kv_seq_t q = {0};
        ck_assert_int_eq(kv_cache_attach_prefix(kv, &q, tf, B + 1), B);
        kv_cache_release(kv, &q);
    }
    s_time = 33000000;
    uint64_t hn = s_cache_one(kv, 300, 0); /* at 33 s, used once */
    kv_seq_t w = {0};
    ck_assert_int_eq(kv_cache_reserve(kv, &w, 0, 3 * B), 0);
    ck_assert_int_eq(log.n, 3);
    ck_assert(log.hash[0] == hn && log.hash[1] == hf && log.hash[2] == hp);
    kv_cache_release(kv, &w);
    kv_cache_destroy(&kv);
}
END_TEST

/* Blocks arriving from a lower tier (any order, other formats) are found by
 * a later attach once the chain from the first block is complete. */
START_TEST(insert_then_attach) {
    kv_cache_t *kv = s_new(4, KV_POLICY_LRU, true);
    const kern_kv_shape_t *shape = kv_cache_shape(kv);
    size_t f32 = kv_fmt_block_bytes(shape, KV_FMT_F32), f16 = kv_fmt_block_bytes(shape, KV_FMT_F16);
    ck_assert_int_eq(f32, kv_cache_pool(kv)->block_bytes);
    /* reference data: computed in a scratch cache, block by block */
    kv_cache_t *src = s_new(4, KV_POLICY_LRU, true);
    kv_seq_t s = {0};
    s_compute(src, &s, T, 0, 10);
    kv_meta_t m[3];
    uint64_t parent = 0;
    for (int i = 0; i < 3; i++) {
        memset(&m[i], 0, sizeof m[i]);
        m[i].n_tokens = i < 2 ? B : 2;
        memcpy(m[i].tokens, T + i * B, (size_t)m[i].n_tokens * sizeof(int32_t));
        m[i].parent = parent;
        m[i].hash = parent = kv_hash_block(parent, m[i].tokens, m[i].n_tokens);
    }
    const uint8_t *sb = kv_cache_pool(src)->base;
    uint8_t *half = malloc(f16);
    ck_assert_int_eq(
        kv_codec_convert(shape, KV_FMT_F32, sb + (size_t)s.blocks[1] * f32, KV_FMT_F16, half, B),
        0);
    /* the second block first: contained, but not reachable yet */
    ck_assert_int_eq(kv_cache_insert(kv, &m[1], KV_FMT_F16, half, f16), 0);
    ck_assert(kv_cache_contains(kv, m[1].hash));
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 0);
    ck_assert_int_eq(kv_cache_insert(kv, &m[0], KV_FMT_F32, sb + (size_t)s.blocks[0] * f32, f32),
                     0);
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 8);
    ck_assert_int_eq(kv_cache_insert(kv, &m[2], KV_FMT_F32, sb + (size_t)s.blocks[2] * f32, f32),
                     0);
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 10);
    /* refused: present already, wrong size, a name that does not match */
    ck_assert_int_eq(kv_cache_insert(kv, &m[0], KV_FMT_F32, sb, f32), -EEXIST);
    ck_assert_int_eq(kv_cache_insert(kv, &m[0], KV_FMT_F32, sb, f32 - 4), -EINVAL);
    ck_assert_int_eq(kv_cache_insert(kv, &m[0], 17, sb, f32), -EINVAL);
    kv_meta_t bad = m[2];
    bad.tokens[0]++;
    ck_assert_int_eq(kv_cache_insert(kv, &bad, KV_FMT_F32, sb, f32), -EINVAL);
    kv_cache_stats_t st = kv_cache_stats(kv);
    ck_assert_int_eq(st.inserted, 3);
    ck_assert_int_eq(st.n_cached, 3);
    s_check(kv, NULL, 0);

    kv_seq_t q = {0};
    int32_t tq[11];
    memcpy(tq, T, sizeof tq);
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &q, tq, 11), 10);
    ck_assert(s_valid(kv, &q, T, 0, 4)); /* F32 blocks: exact */
    ck_assert(s_valid(kv, &q, T, 8, 10));
    /* the F16 block: the F32 values rounded to 11 significant bits */
    for (int p = 4; p < 8; p++)
        for (int e = 0; e < ELEMS; e++) {
            float want = s_value(s_prefix_key(T, p), e), got = *s_elem(kv, q.blocks[1], p % B, e);
            ck_assert_msg(got == want || (got - want) * (got - want) <= want * want / (1 << 20),
                          "f16 block: %g vs %g", got, want);
        }
    /* everything referenced: nothing to insert into */
    int32_t other[4] = {5, 6, 7, 8};
    kv_seq_t z = {0};
    s_compute(kv, &z, other, 0, 4);
    kv_meta_t m4 = {0};
    m4.n_tokens = 4;
    memcpy(m4.tokens, other, sizeof other);
    m4.hash = kv_hash_block(0, other, 4);
    ck_assert_int_eq(kv_cache_insert(kv, &m4, KV_FMT_F32, sb, f32), -ENOSPC);
    const kv_seq_t *all[] = {&q, &z};
    s_check(kv, all, 2);
    kv_cache_release(kv, &q);
    kv_cache_release(kv, &z);
    kv_cache_release(src, &s);
    free(half);
    kv_cache_destroy(&kv);
    kv_cache_destroy(&src);
}
END_TEST

START_TEST(truncate_rolls_back) {
    kv_cache_t *kv = s_new(8, KV_POLICY_LRU, true);
    kv_seq_t a = {0};
    s_compute(kv, &a, T, 0, 10);
    ck_assert_int_eq(kv_cache_publish(kv, &a, T, 10, true, 0), 0);
    ck_assert_int_eq(kv_cache_truncate(kv, &a, 13), -EINVAL); /* beyond its table */
    ck_assert_int_eq(kv_cache_truncate(kv, &a, -1), -EINVAL);
    ck_assert_int_eq(kv_cache_truncate(kv, &a, 6), 0);
    ck_assert_int_eq(a.n, 2);
    ck_assert_int_eq(a.n_published, 1); /* block 1 holds positions past 6 */
    ck_assert(a.tail_hash == kv_hash_block(0, T, B));
    kv_cache_stats_t st = kv_cache_stats(kv);
    ck_assert_int_eq(st.n_cached, 1); /* the published partial block */
    ck_assert_int_eq(st.n_used, 2);
    const kv_seq_t *all[] = {&a};
    s_check(kv, all, 1);
    /* different tokens from position 6 on: block 1 is published, so copied */
    int32_t t2[12];
    memcpy(t2, T, sizeof t2);
    t2[6] = 66;
    t2[7] = 77;
    int old = a.blocks[1];
    s_compute(kv, &a, t2, 6, 12);
    ck_assert_int_ne(a.blocks[1], old);
    ck_assert(s_valid(kv, &a, t2, 0, 12));
    ck_assert_int_eq(kv_cache_publish(kv, &a, t2, 12, false, 0), 0);
    ck_assert_int_eq(a.n_published, 3);
    s_check(kv, all, 1);
    ck_assert_int_eq(kv_cache_match(kv, T, 16), 10); /* the old branch is still there */
    ck_assert_int_eq(kv_cache_match(kv, t2, 12), 12);
    /* rewriting a computed position without truncating first: its block is
     * copied and stops counting as published */
    old = a.blocks[1];
    ck_assert_int_eq(kv_cache_reserve(kv, &a, 5, 6), 0);
    ck_assert_int_ne(a.blocks[1], old);
    ck_assert_int_eq(a.n_published, 1);
    ck_assert(a.tail_hash == kv_hash_block(0, T, B));
    s_write(kv, &a, t2, 5, 6);
    s_check(kv, all, 1);
    ck_assert_int_eq(kv_cache_truncate(kv, &a, 0), 0);
    ck_assert_int_eq(a.n, 0);
    ck_assert_int_eq(a.n_published, 0);
    ck_assert(a.tail_hash == 0);
    s_check(kv, all, 1);
    kv_cache_release(kv, &a);
    kv_cache_destroy(&kv);
}
END_TEST

/* -ENOSPC takes nothing; blocks a sequence has attached are not evictable for it. */
START_TEST(enospc_all_or_nothing) {
    kv_cache_t *kv = s_new(4, KV_POLICY_LRU, true);
    kv_seq_t a = {0}, b = {0};
    s_compute(kv, &a, T, 0, 8);
    ck_assert_int_eq(kv_cache_publish(kv, &a, T, 8, false, 0), 0);
    kv_cache_release(kv, &a);
    ck_assert_int_eq(kv_cache_available(kv), 4); /* 2 free + 2 cached */
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &b, T, 8), 7);
    ck_assert_int_eq(kv_cache_available(kv), 2);
    int32_t b0 = b.blocks[0], b1 = b.blocks[1];
    kv_cache_stats_t st0 = kv_cache_stats(kv);
    /* 3 new blocks + 1 copy > 2 available */
    ck_assert_int_eq(kv_cache_reserve(kv, &b, 7, 20), -ENOSPC);
    ck_assert_int_eq(b.n, 2);
    ck_assert_int_eq(b.blocks[0], b0);
    ck_assert_int_eq(b.blocks[1], b1);
    kv_cache_stats_t st1 = kv_cache_stats(kv);
    ck_assert_int_eq(st1.n_free, st0.n_free);
    ck_assert_int_eq(st1.cow_copies, st0.cow_copies);
    ck_assert_int_eq(st1.evictions, 0);
    const kv_seq_t *all[] = {&b};
    s_check(kv, all, 1);
    /* 1 new + 1 copy fits */
    ck_assert_int_eq(kv_cache_reserve(kv, &b, 7, 12), 0);
    ck_assert_int_eq(b.n, 3);
    ck_assert_int_eq(kv_cache_available(kv), 1); /* a's old last block, now cached */
    s_check(kv, all, 1);
    ck_assert_int_eq(kv_cache_reserve(kv, &b, 12, 20), -ENOSPC);
    ck_assert_int_eq(kv_cache_reserve(kv, &b, 0, -1), -EINVAL);
    kv_cache_release(kv, &b);
    kv_cache_release(kv, &b); /* safe twice */
    ck_assert_int_eq(b.n, 0);
    ck_assert_ptr_null(b.blocks);
    s_check(kv, NULL, 0);
    kv_cache_stats_t st = kv_cache_stats(kv);
    ck_assert_int_eq(st.n_used, 0);
    ck_assert_int_eq(st.n_free + st.n_cached, 4);
    kv_cache_destroy(&kv);
    kv_cache_destroy(&kv);
    ck_assert_ptr_null(kv);
}
END_TEST

START_TEST(sharing_off) {
    kv_cache_t *kv = s_new(8, KV_POLICY_LRU, false);
    kv_seq_t a = {0}, b = {0};
    s_compute(kv, &a, T, 0, 8);
    ck_assert_int_eq(kv_cache_publish(kv, &a, T, 8, true, 0), 0);
    ck_assert_int_eq(a.n_published, 0);
    ck_assert(!kv_cache_contains(kv, kv_hash_block(0, T, B)));
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &b, T, 8), 0);
    ck_assert_int_eq(kv_cache_match(kv, T, 8), 0);
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &a, T, 8), -EINVAL); /* not empty */
    kv_cache_release(kv, &a);
    ck_assert_int_eq(kv_cache_stats(kv).n_free, 8);
    ck_assert_int_eq(kv_cache_stats(kv).n_cached, 0);
    kern_kv_shape_t c = s_shape();
    kv_cache_config_t bad = {KV_FMT_I4, B, 8, KV_POLICY_LRU, true, S_BE}; /* not a T0 format */
    ck_assert_ptr_null(kv_cache_new(&c, &bad));
    bad.fmt = KV_FMT_F16;
    bad.block_size = KV_MAX_BLOCK_TOKENS + 1;
    c.block_size = bad.block_size;
    ck_assert_ptr_null(kv_cache_new(&c, &bad));
    bad.block_size = B; /* the shape's block size differs from the config's */
    ck_assert_ptr_null(kv_cache_new(&c, &bad));
    kv_cache_destroy(&kv);
}
END_TEST

/* ---- random operations against a reference: every live sequence keeps the
 * KV of its own tokens (whatever was shared, copied, evicted or inserted),
 * and every invariant holds after every step. */

enum { R_SEQS = 6, R_MAXTOK = 48, R_SAVED = 16 };

typedef struct {
    bool live;
    kv_seq_t q;
    int32_t tok[R_MAXTOK];
    int n; /* positions computed */
} r_seq_t;

typedef struct {
    int n;
    kv_meta_t meta[R_SAVED];
    uint8_t data[R_SAVED][1024];
} r_saved_t;

static void r_on_evict(void *arg, const kv_cache_evicted_t *b) {
    r_saved_t *s = arg;
    ck_assert_int_eq(b->bytes, 1024);
    int i = s->n < R_SAVED ? s->n++ : (int)(b->meta->hash % R_SAVED);
    s->meta[i] = *b->meta;
    memcpy(s->data[i], b->data, b->bytes);
}

START_TEST(random_vs_reference) {
    kv_cache_t *kv = s_new(24, (kv_policy_kind_t)(_i % 3), true);
    r_saved_t saved = {0};
    kv_cache_on_evict(kv, r_on_evict, &saved);
    r_seq_t seqs[R_SEQS];
    memset(seqs, 0, sizeof seqs);
    uint64_t rng = 0xC0FFEE + (uint64_t)_i;
    int64_t attached = 0, enospc = 0, inserted = 0;
    static const int32_t base[2][16] = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                                        {1, 2, 3, 4, 9, 9, 9, 9, 5, 5, 5, 5, 5, 5, 5, 5}};
    for (int step = 0; step < 4000; step++) {
        s_time += 1000 + test_rand_u64(&rng) % 100000;
        int k = (int)(test_rand_u64(&rng) % R_SEQS);
        r_seq_t *r = &seqs[k];
        int op = (int)(test_rand_u64(&rng) % 10);
        if (!r->live) { /* a new prompt: a shared stem, then random tokens */
            int n = 1 + (int)(test_rand_u64(&rng) % 30);
            const int32_t *stem = base[test_rand_u64(&rng) % 2];
            int stem_n = (int)(test_rand_u64(&rng) % 17);
            for (int i = 0; i < n; i++)
                r->tok[i] = i < stem_n ? stem[i] : (int32_t)(test_rand_u64(&rng) % 3);
            int c = kv_cache_attach_prefix(kv, &r->q, r->tok, n);
            ck_assert_int_ge(c, 0);
            ck_assert_int_le(c, n - 1 < 0 ? 0 : n - 1);
            ck_assert(s_valid(kv, &r->q, r->tok, 0, c));
            attached += c;
            int rc = kv_cache_reserve(kv, &r->q, c, n);
            if (rc == -ENOSPC) {
                enospc++;
                ck_assert_int_eq(r->q.n, kv_cache_needed(kv, c));
                kv_cache_release(kv, &r->q);
            } else {
                ck_assert_int_eq(rc, 0);
                s_write(kv, &r->q, r->tok, c, n);
                r->n = n;
                r->live = true;
                ck_assert_int_eq(kv_cache_publish(kv, &r->q, r->tok, n, test_rand_u64(&rng) % 2, 0),
                                 0);
            }
        } else if (op < 5) { /* decode a few tokens */
            int m = 1 + (int)(test_rand_u64(&rng) % 5);
            if (r->n + m > R_MAXTOK)
                m = R_MAXTOK - r->n;
            for (int i = 0; i < m; i++)
                r->tok[r->n + i] = (int32_t)(test_rand_u64(&rng) % 3);
            int32_t before[64];
            int nb = r->q.n;
            memcpy(before, r->q.blocks, (size_t)nb * sizeof *before);
            int rc = kv_cache_reserve(kv, &r->q, r->n, r->n + m);
            if (rc == -ENOSPC) {
                enospc++;
                ck_assert_int_eq(r->q.n, nb);
                ck_assert(!memcmp(before, r->q.blocks, (size_t)nb * sizeof *before));
            } else {
                ck_assert_int_eq(rc, 0);
                s_write(kv, &r->q, r->tok, r->n, r->n + m);
                r->n += m;
                int pin = test_rand_u64(&rng) % 8 == 0 ? 1 : 0;
                ck_assert_int_eq(
                    kv_cache_publish(kv, &r->q, r->tok, r->n, test_rand_u64(&rng) % 4 == 0, pin),
                    0);
            }
        } else if (op < 7) { /* roll back */
            int to = (int)(test_rand_u64(&rng) % (r->n + 1));
            ck_assert_int_eq(kv_cache_truncate(kv, &r->q, to), 0);
            r->n = to;
        } else if (op < 9) {
            kv_cache_release(kv, &r->q);
            r->live = false;
            r->n = 0;
        } else if (saved.n > 0) { /* a block comes back from a lower tier */
            int i = (int)(test_rand_u64(&rng) % saved.n);
            int rc = kv_cache_insert(kv, &saved.meta[i], KV_FMT_F32, saved.data[i], 1024);
            ck_assert_msg(rc == 0 || rc == -EEXIST || rc == -ENOSPC, "insert: %d", rc);
            if (rc == 0) {
                inserted++;
                ck_assert(kv_cache_contains(kv, saved.meta[i].hash));
            }
        }
        const kv_seq_t *all[R_SEQS];
        int nl = 0;
        for (int i = 0; i < R_SEQS; i++)
            all[nl++] = seqs[i].live ? &seqs[i].q : NULL;
        s_check(kv, all, nl);
        for (int i = 0; i < R_SEQS; i++)
            if (seqs[i].live)
                ck_assert_msg(s_valid(kv, &seqs[i].q, seqs[i].tok, 0, seqs[i].n),
                              "step %d: sequence %d lost its KV", step, i);
    }
    kv_cache_stats_t st = kv_cache_stats(kv);
    printf("random %s: attached %lld positions, %lld cow, %lld evictions, %lld inserted, "
           "%lld -ENOSPC\n",
           kv_policy_name(_i % 3), (long long)attached, (long long)st.cow_copies,
           (long long)st.evictions, (long long)inserted, (long long)enospc);
    ck_assert_int_gt(attached, 0);
    ck_assert_int_gt(st.cow_copies, 0);
    ck_assert_int_gt(st.evictions, 0);
    ck_assert_int_gt(inserted, 0);
    for (int i = 0; i < R_SEQS; i++)
        kv_cache_release(kv, &seqs[i].q);
    s_check(kv, NULL, 0);
    ck_assert_int_eq(kv_cache_stats(kv).n_used, 0);
    kv_cache_destroy(&kv);
}
END_TEST

/* ---- the real model */

static model_t *M;

/* Run positions [p0, p1) of tokens for q in one batch; the last token's
 * logits into out. */
static void s_forward(model_ctx_t *ctx, const kv_cache_t *kv, const kv_seq_t *q,
                      const int32_t *tokens, int p0, int p1, float *out) {
    int n = p1 - p0;
    int32_t pos[64], seq[64] = {0};
    bool want[64] = {0};
    for (int i = 0; i < n; i++)
        pos[i] = p0 + i;
    want[n - 1] = true;
    model_seq_view_t sv = {q->blocks, q->n, NULL, 0, 0};
    model_batch_t b = {n, tokens + p0, pos, seq, want, 1, &sv, NULL};
    ck_assert_int_eq(model_ctx_forward(ctx, &b, kv_cache_pool(kv), out), 1);
}

static kv_cache_t *s_model_cache(void) {
    kv_cache_config_t kc = {KV_FMT_F32, 16, 16, KV_POLICY_LRU, true, NULL};
    kern_kv_shape_t shape = model_kv_shape(model_config(M), kc.block_size);
    kv_cache_t *kv = kv_cache_new(&shape, &kc);
    ck_assert_ptr_nonnull(kv);
    return kv;
}

/* Logits of the last of tokens[0..n) computed from scratch in a fresh cache. */
static void s_from_scratch(model_ctx_t *ctx, const int32_t *tokens, int n, float *out) {
    kv_cache_t *kv = s_model_cache();
    kv_seq_t q = {0};
    ck_assert_int_eq(kv_cache_reserve(kv, &q, 0, n), 0);
    s_forward(ctx, kv, &q, tokens, 0, n, out);
    kv_cache_release(kv, &q);
    kv_cache_destroy(&kv);
}

START_TEST(model_prefix_reuse_bitwise) {
    ck_assert_ptr_nonnull(M); /* s_model_load */
    int nv = model_config(M)->n_vocab;
    model_ctx_t *ctx = model_ctx_new(M, 64, 128, 2, NULL);
    ck_assert_ptr_nonnull(ctx);
    int32_t ta[40], tb[42];
    for (int i = 0; i < 40; i++)
        ta[i] = (int32_t)(100 + (i * 7919) % 20000);
    memcpy(tb, ta, 37 * sizeof *tb);
    for (int i = 37; i < 42; i++)
        tb[i] = (int32_t)(30000 + i * 13);
    float *la = malloc(sizeof(float) * nv), *lb = malloc(sizeof(float) * nv);
    float *ref = malloc(sizeof(float) * nv);

    kv_cache_t *kv = s_model_cache();
    /* A: a 37-token prompt (partial last block published), then 3 more tokens
     * (its published partial block is copied before they are written) */
    kv_seq_t a = {0}, b = {0}, c = {0};
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &a, ta, 37), 0);
    ck_assert_int_eq(kv_cache_reserve(kv, &a, 0, 37), 0);
    s_forward(ctx, kv, &a, ta, 0, 37, la);
    ck_assert_int_eq(kv_cache_publish(kv, &a, ta, 37, true, 0), 0);
    ck_assert_int_eq(kv_cache_reserve(kv, &a, 37, 40), 0);
    ck_assert_int_eq(kv_cache_stats(kv).cow_copies, 1);
    s_forward(ctx, kv, &a, ta, 37, 40, la);
    ck_assert_int_eq(kv_cache_publish(kv, &a, ta, 40, true, 0), 0);
    s_from_scratch(ctx, ta, 40, ref);
    ck_assert_msg(!memcmp(la, ref, sizeof(float) * nv), "A after its copy-on-write differs");

    /* B: the first 37 tokens of A and a different tail: 2 full blocks and
     * A's 5-token partial block attached, 5 positions computed */
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &b, tb, 42), 37);
    ck_assert_int_eq(b.n, 3);
    ck_assert_int_eq(b.blocks[0], a.blocks[0]);
    ck_assert_int_eq(kv_cache_refs(kv, b.blocks[0]), 2);
    ck_assert_int_eq(kv_cache_reserve(kv, &b, 37, 42), 0);
    s_forward(ctx, kv, &b, tb, 37, 42, lb);
    s_from_scratch(ctx, tb, 42, ref);
    ck_assert_msg(!memcmp(lb, ref, sizeof(float) * nv), "B with a cached prefix differs");

    /* C: exactly A's 40 tokens: 39 attached, the last recomputed after a copy */
    ck_assert_int_eq(kv_cache_attach_prefix(kv, &c, ta, 40), 39);
    ck_assert_int_eq(kv_cache_reserve(kv, &c, 39, 40), 0);
    ck_assert_int_ne(c.blocks[2], a.blocks[2]);
    s_forward(ctx, kv, &c, ta, 39, 40, lb);
    ck_assert_msg(!memcmp(lb, la, sizeof(float) * nv), "fully cached prompt differs");
    const kv_seq_t *all[] = {&a, &b, &c};
    char err[256] = "";
    ck_assert_msg(kv_cache_check(kv, all, 3, err, sizeof err) == 0, "%s", err);
    kv_cache_release(kv, &a);
    kv_cache_release(kv, &b);
    kv_cache_release(kv, &c);
    kv_cache_destroy(&kv);
    model_ctx_destroy(&ctx);
    free(la);
    free(lb);
    free(ref);
}
END_TEST

/* The default model, loaded once for the "model" tcase (which runs only when it is there). */
static void s_model_load(void) {
    char err[512] = "";
    M = model_load(test_model_path(), err, sizeof err);
    ck_assert_msg(M, "%s", err);
}

static void s_model_free(void) {
    model_destroy(&M);
}

/* After the core cases ran on the backend's pool: every kind of move went through it. */
START_TEST(backend_moves_used) {
    ck_assert_int_gt(S_OUT, 0);  /* evictions (callback), write-through */
    ck_assert_int_gt(S_IN, 0);   /* inserts */
    ck_assert_int_gt(S_COPY, 0); /* copy-on-write */
}
END_TEST

/* Moves that fail: an evicted block is not handed over, a write-through stops (and
 * resumes later), an insert is refused with the block back on the free list. */
START_TEST(backend_moves_fail) {
    kv_cache_t *kv = s_new(2, KV_POLICY_LRU, true);
    s_evlog_t log = {0};
    kv_cache_on_evict(kv, s_on_evict, &log);
    kv_seq_t q = {0};
    s_compute(kv, &q, T, 0, 2 * B);
    ck_assert_int_eq(kv_cache_publish(kv, &q, T, 2 * B, false, 0), 0);
    S_FAIL = true;
    ck_assert_int_eq(kv_cache_write_through(kv, &q, s_on_evict, &log), 0);
    ck_assert_int_eq(log.n, 0);
    ck_assert_int_eq(q.n_written, 0);
    S_FAIL = false;
    ck_assert_int_eq(kv_cache_write_through(kv, &q, s_on_evict, &log), 2);
    ck_assert_int_eq(log.n, 2);
    log.n = 0;
    ck_assert(s_valid(kv, &q, T, 0, 2 * B));
    kv_cache_release(kv, &q);
    /* both cached; a new sequence evicts one while moves fail: no callback */
    S_FAIL = true;
    int32_t other[B] = {5, 6, 7, 8};
    kv_seq_t z = {0};
    ck_assert_int_eq(kv_cache_reserve(kv, &z, 0, B), 0);
    ck_assert_int_eq(log.n, 0);
    kv_cache_stats_t st = kv_cache_stats(kv);
    ck_assert_int_eq(st.evictions, 1);
    ck_assert_int_ge(st.move_errors, 2);
    /* an insert whose block cannot move in: refused, nothing indexed, invariants hold */
    kv_meta_t m = {0};
    m.n_tokens = B;
    memcpy(m.tokens, other, sizeof other);
    m.hash = kv_hash_block(0, other, B);
    size_t f32 = kv_fmt_block_bytes(kv_cache_shape(kv), KV_FMT_F32);
    float *data = calloc(1, f32);
    kv_cache_release(kv, &z);
    ck_assert_int_eq(kv_cache_insert(kv, &m, KV_FMT_F32, data, f32), -EIO);
    ck_assert(!kv_cache_contains(kv, m.hash));
    s_check(kv, NULL, 0);
    S_FAIL = false;
    ck_assert_int_eq(kv_cache_insert(kv, &m, KV_FMT_F32, data, f32), 0);
    s_check(kv, NULL, 0);
    free(data);
    kv_cache_destroy(&kv);
}
END_TEST

/* The index-change callback: full blocks stored when published (a partial one is not
 * reported), removed when evicted, stored again when a lower tier brings them back;
 * each with its chained hash, parent and tokens. */
typedef struct {
    int n;
    kv_cache_change_t what[16];
    uint64_t hash[16], parent[16];
    int32_t tok0[16];
} s_changes_t;

static void s_on_change(void *arg, kv_cache_change_t what, uint64_t hash, uint64_t parent,
                        const int32_t *tokens, int n_tokens) {
    s_changes_t *c = arg;
    ck_assert_int_eq(n_tokens, B);
    ck_assert_int_lt(c->n, 16);
    ck_assert(hash == kv_hash_block(parent, tokens, n_tokens));
    c->what[c->n] = what;
    c->hash[c->n] = hash;
    c->parent[c->n] = parent;
    c->tok0[c->n++] = tokens[0];
}

START_TEST(index_changes_reported) {
    kv_cache_t *kv = s_new(3, KV_POLICY_LRU, true);
    s_changes_t log = {0};
    kv_cache_on_change(kv, s_on_change, &log);
    kv_seq_t q = {0};
    s_compute(kv, &q, T, 0, 2 * B + 2); /* two full blocks and a partial one */
    ck_assert_int_eq(kv_cache_publish(kv, &q, T, 2 * B + 2, true, 0), 0);
    ck_assert_int_eq(log.n, 2);
    ck_assert(log.what[0] == KV_CACHE_STORED && log.parent[0] == 0 && log.tok0[0] == T[0]);
    ck_assert(log.what[1] == KV_CACHE_STORED && log.parent[1] == log.hash[0] &&
              log.tok0[1] == T[B]);
    kv_cache_release(kv, &q);
    /* a new sequence needs all three blocks: the cached ones are evicted (the partial
     * one silently) */
    kv_seq_t w = {0};
    s_time += 10;
    ck_assert_int_eq(kv_cache_reserve(kv, &w, 0, 3 * B), 0);
    ck_assert_int_eq(log.n, 4);
    ck_assert(log.what[2] == KV_CACHE_REMOVED && log.what[3] == KV_CACHE_REMOVED);
    ck_assert((log.hash[2] == log.hash[0] && log.hash[3] == log.hash[1]) ||
              (log.hash[2] == log.hash[1] && log.hash[3] == log.hash[0]));
    kv_cache_release(kv, &w);
    /* back from a lower tier: stored again */
    kv_meta_t m = {.hash = log.hash[0], .parent = 0, .n_tokens = B, .pin = 0};
    memcpy(m.tokens, T, B * sizeof *T);
    size_t bytes = kv_cache_pool(kv)->block_bytes;
    void *data = calloc(1, bytes);
    ck_assert_int_eq(kv_cache_insert(kv, &m, KV_FMT_F32, data, bytes), 0);
    ck_assert_int_eq(log.n, 5);
    ck_assert(log.what[4] == KV_CACHE_STORED && log.hash[4] == log.hash[0]);
    free(data);
    kv_cache_destroy(&kv);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("kv_cache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, attach_shares_blocks);
    tcase_add_test(tc, fully_cached_prompt_cow);
    tcase_add_test(tc, eviction_follows_policy);
    tcase_add_test(tc, eviction_scored_pin);
    tcase_add_test(tc, insert_then_attach);
    tcase_add_test(tc, truncate_rolls_back);
    tcase_add_test(tc, enospc_all_or_nothing);
    tcase_add_test(tc, sharing_off);
    tcase_add_test(tc, index_changes_reported);
    tcase_add_loop_test(tc, random_vs_reference, 0, 6);
    suite_add_tcase(s, tc);
    TCase *tb = tcase_create("backend pool");
    tcase_add_unchecked_fixture(tb, s_backend_on, s_backend_off);
    tcase_add_test(tb, attach_shares_blocks);
    tcase_add_test(tb, fully_cached_prompt_cow);
    tcase_add_test(tb, eviction_follows_policy);
    tcase_add_test(tb, eviction_scored_pin);
    tcase_add_test(tb, insert_then_attach);
    tcase_add_test(tb, truncate_rolls_back);
    tcase_add_test(tb, enospc_all_or_nothing);
    tcase_add_test(tb, sharing_off);
    tcase_add_test(tb, index_changes_reported);
    tcase_add_loop_test(tb, random_vs_reference, 0, 6);
    tcase_add_test(tb, backend_moves_used);
    tcase_add_test(tb, backend_moves_fail);
    suite_add_tcase(s, tb);
    TCase *tm = test_tcase_model(s, "model");
    tcase_add_unchecked_fixture(tm, s_model_load, s_model_free);
    tcase_set_timeout(tm, 300);
    tcase_add_test(tm, model_prefix_reuse_bitwise);
    return test_run_suite(argc, argv, s, CK_NOFORK);
}
