/* test_serve_semcache.c - the semantic cache's store (serve/serve_semcache.h): the exact
 * layer; the semantic layer answering only at or above the error bound's threshold and
 * only within the request's context (the same question after another conversation is a
 * miss); expiry; the least recently used entry evicted when full; invalidation by name
 * prefix and by tag; the time-sensitive TTL rule; persistence (checksummed, refused whole
 * when damaged). */
#include "serve_semcache.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DIM = 8 };

/* A unit vector at angle a (radians) from e0 in the (e0, e1) plane. */
static void s_vec(float *v, double a) {
    memset(v, 0, sizeof(float) * DIM);
    v[0] = (float)cos(a), v[1] = (float)sin(a);
}

/* A bound that passes thresholds down to about 0.9: every verified pair at s >= 0.9 was
 * right, every one below wrong. */
static serve_semcache_bound_t *s_bound(void) {
    serve_semcache_bound_t *b = serve_semcache_bound_new(4096, 50, 0.05);
    for (int i = 0; i < 3000; i++) {
        float s = 0.5f + 0.5f * (float)i / 3000;
        serve_semcache_bound_observe(b, s, s >= 0.9f);
    }
    return b;
}

START_TEST(test_layers) {
    serve_semcache_bound_t *b = s_bound();
    serve_semcache_config_t cfg = {DIM, 16, 0};
    serve_semcache_t *c = serve_semcache_new(&cfg, b);
    float q0[DIM], near[DIM], far[DIM];
    s_vec(q0, 0), s_vec(near, 0.2), s_vec(far, 0.7); /* cos 0.980, 0.765 */
    serve_semcache_key_t k0 = {.context = 7, .exact = 100, .emb = q0};
    ck_assert_int_ge(serve_semcache_put(c, &k0, "req-1", "geo", "Paris", 5, 0, 1000), 0);
    serve_semcache_hit_t h;
    /* exact */
    ck_assert_int_eq(serve_semcache_lookup(c, &k0, 0, 2000, &h), SERVE_SEMCACHE_EXACT);
    ck_assert(h.answer_len == 5 && !memcmp(h.answer, "Paris", 5));
    ck_assert_str_eq(h.name, "req-1");
    /* semantic: near passes the threshold, far does not */
    serve_semcache_key_t kn = {7, 101, near}, kf = {7, 102, far};
    ck_assert_int_eq(serve_semcache_lookup(c, &kn, 0.05, 3000, &h), SERVE_SEMCACHE_SEMANTIC);
    ck_assert(fabs(h.similarity - cos(0.2)) < 1e-5);
    ck_assert(h.threshold > 0.85 && h.threshold <= 0.98);
    ck_assert_str_eq(h.name, "req-1");
    ck_assert_int_eq(serve_semcache_lookup(c, &kf, 0.05, 3000, &h), SERVE_SEMCACHE_MISS);
    ck_assert_int_eq(h.entry, 0); /* the nearest is still reported, for verification */
    ck_assert(h.answer_len == 5 && !memcmp(h.answer, "Paris", 5)); /* the nearest's */
    /* delta 0: the exact layer only */
    ck_assert_int_eq(serve_semcache_lookup(c, &kn, 0, 3000, &h), SERVE_SEMCACHE_MISS);
    /* another context: a miss, nothing near */
    serve_semcache_key_t ko = {8, 103, q0};
    ck_assert_int_eq(serve_semcache_lookup(c, &ko, 0.05, 3000, &h), SERVE_SEMCACHE_MISS);
    ck_assert(h.entry == -1 && h.similarity == -2);
    /* an exact hash under another context is not an exact hit either */
    serve_semcache_key_t kx = {9, 100, NULL};
    ck_assert_int_eq(serve_semcache_lookup(c, &kx, 0.05, 3000, &h), SERVE_SEMCACHE_MISS);
    /* before any verification no semantic hit at all */
    serve_semcache_bound_t *empty = serve_semcache_bound_new(100, 50, 0.05);
    serve_semcache_t *c2 = serve_semcache_new(&cfg, empty);
    serve_semcache_put(c2, &k0, "req-1", NULL, "Paris", 5, 0, 1000);
    ck_assert_int_eq(serve_semcache_lookup(c2, &kn, 0.05, 3000, &h), SERVE_SEMCACHE_MISS);
    ck_assert(h.threshold > 1);
    serve_semcache_destroy(&c2);
    serve_semcache_bound_destroy(&empty);
    serve_semcache_destroy(&c);
    serve_semcache_bound_destroy(&b);
}
END_TEST

START_TEST(test_expiry_lru_invalidate) {
    serve_semcache_bound_t *b = s_bound();
    serve_semcache_config_t cfg = {DIM, 3, 0};
    serve_semcache_t *c = serve_semcache_new(&cfg, b);
    float v[DIM];
    s_vec(v, 0);
    serve_semcache_key_t k[4];
    for (int i = 0; i < 4; i++)
        k[i] = (serve_semcache_key_t){(uint64_t)i, 200 + (uint64_t)i, v};
    serve_semcache_hit_t h;
    /* expiry: a TTL of 10 us */
    ck_assert_int_ge(serve_semcache_put(c, &k[0], "kb:weather", "volatile", "sunny", 5, 10, 100),
                     0);
    ck_assert_int_eq(serve_semcache_lookup(c, &k[0], 0, 109, &h), SERVE_SEMCACHE_EXACT);
    ck_assert_int_eq(serve_semcache_lookup(c, &k[0], 0, 110, &h), SERVE_SEMCACHE_MISS);
    ck_assert_int_eq(serve_semcache_count(c), 0);
    /* LRU: three entries, the first used again, a fourth evicts the second */
    serve_semcache_put(c, &k[0], "kb:a", "x,geo", "A", 1, 0, 1000);
    serve_semcache_put(c, &k[1], "kb:b", "geo", "B", 1, 0, 1001);
    serve_semcache_put(c, &k[2], "req-9", NULL, "C", 1, 0, 1002);
    ck_assert_int_eq(serve_semcache_lookup(c, &k[0], 0, 1003, &h), SERVE_SEMCACHE_EXACT);
    serve_semcache_put(c, &k[3], "req-10", "geo", "D", 1, 0, 1004);
    ck_assert_int_eq(serve_semcache_count(c), 3);
    ck_assert_int_eq(serve_semcache_lookup(c, &k[1], 0, 1005, &h), SERVE_SEMCACHE_MISS);
    ck_assert_int_eq(serve_semcache_lookup(c, &k[0], 0, 1005, &h), SERVE_SEMCACHE_EXACT);
    /* invalidation: by tag and prefix together, by prefix, everything */
    ck_assert_int_eq(serve_semcache_invalidate(c, "req-", "geo"), 1); /* req-10 */
    ck_assert_int_eq(serve_semcache_invalidate(c, "kb:", NULL), 1);   /* kb:a */
    ck_assert_int_eq(serve_semcache_count(c), 1);
    ck_assert_int_eq(serve_semcache_invalidate(c, NULL, NULL), 1);
    ck_assert_int_eq(serve_semcache_count(c), 0);
    /* a put with the same exact hash replaces */
    serve_semcache_put(c, &k[0], "a", NULL, "old", 3, 0, 2000);
    serve_semcache_put(c, &k[0], "a", NULL, "new", 3, 0, 2001);
    ck_assert_int_eq(serve_semcache_count(c), 1);
    serve_semcache_lookup(c, &k[0], 0, 2002, &h);
    ck_assert(!memcmp(h.answer, "new", 3));
    serve_semcache_destroy(&c);
    serve_semcache_bound_destroy(&b);
}
END_TEST

START_TEST(test_ttl_rule) {
    const char *volatile_q[] = {"What is the weather today?", "Latest news on the election",
                                "price of BTC", "Who won the final in 2024?", "what's up NOW"};
    const char *stable_q[] = {"What is the capital of France?", "Do you know the boiling point?",
                              "Explain photosynthesis.", "How many legs does a spider have?",
                              "Summarise 1984 by Orwell"};
    for (int i = 0; i < 5; i++) {
        ck_assert_msg(serve_semcache_ttl(volatile_q[i], strlen(volatile_q[i]), 1000, 10) == 10,
                      "%s", volatile_q[i]);
        ck_assert_msg(serve_semcache_ttl(stable_q[i], strlen(stable_q[i]), 1000, 10) == 1000, "%s",
                      stable_q[i]);
    }
}
END_TEST

/* Save, load into a new cache: the same answers (exact and semantic: the observations came
 * too), expired entries left out; a flipped byte, a truncated file, another width refused. */
START_TEST(test_persist) {
    char dir[] = "/tmp/strata-semcache-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/cache.smc", dir);
    serve_semcache_bound_t *b = s_bound();
    serve_semcache_config_t cfg = {DIM, 16, 0};
    serve_semcache_t *c = serve_semcache_new(&cfg, b);
    float v[DIM], near[DIM];
    s_vec(v, 0), s_vec(near, 0.2);
    serve_semcache_key_t k0 = {1, 300, v}, k1 = {1, 301, NULL}, k2 = {2, 302, v};
    ck_assert_int_eq(
        serve_semcache_set_meta(
            c, serve_semcache_put(c, &k0, "kb:capital", "geo,kb", "Paris", 5, 0, 100), 200),
        0);
    ck_assert_int_eq(serve_semcache_set_meta(c, 0, 256), -EINVAL);
    ck_assert_int_eq(serve_semcache_set_meta(c, 99, 1), -EINVAL); /* no such entry */
    serve_semcache_put(c, &k1, "req-3", NULL, "", 0, 0, 100);
    serve_semcache_put(c, &k2, "req-4", NULL, "soon gone", 9, 50, 100);
    ck_assert_int_eq(serve_semcache_save(c, path, 120), 0);
    serve_semcache_bound_t *b2 = serve_semcache_bound_new(4096, 50, 0.05);
    serve_semcache_t *d = serve_semcache_new(&cfg, b2);
    ck_assert_int_eq(serve_semcache_load(d, path, 160), 2); /* req-4 expired at 150 */
    ck_assert_int_eq(serve_semcache_bound_count(b2, NULL), 3000);
    serve_semcache_hit_t h;
    serve_semcache_key_t kn = {1, 399, near};
    ck_assert_int_eq(serve_semcache_lookup(d, &kn, 0.05, 170, &h), SERVE_SEMCACHE_SEMANTIC);
    ck_assert(h.answer_len == 5 && !memcmp(h.answer, "Paris", 5));
    ck_assert_str_eq(h.name, "kb:capital");
    ck_assert_int_eq(h.meta, 200); /* the meta came back */
    ck_assert_int_eq(serve_semcache_lookup(d, &k1, 0, 170, &h), SERVE_SEMCACHE_EXACT);
    ck_assert_int_eq(h.answer_len, 0);
    ck_assert_int_eq(h.meta, 0);
    ck_assert_int_eq(serve_semcache_invalidate(d, NULL, "kb"), 1); /* tags came back too */
    /* damage: a flipped byte, a truncation, another width */
    FILE *f = fopen(path, "r+b");
    fseek(f, 40, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 40, SEEK_SET);
    fputc(ch ^ 1, f);
    fclose(f);
    serve_semcache_t *e = serve_semcache_new(&cfg, b2);
    ck_assert_int_eq(serve_semcache_load(e, path, 170), -EBADMSG);
    ck_assert_int_eq(serve_semcache_count(e), 0);
    ck_assert_int_eq(serve_semcache_save(c, path, 120), 0);
    ck_assert_int_eq(truncate(path, 100), 0);
    ck_assert_int_eq(serve_semcache_load(e, path, 170), -EBADMSG);
    ck_assert_int_eq(serve_semcache_save(c, path, 120), 0);
    serve_semcache_config_t other = {DIM * 2, 16, 0};
    serve_semcache_t *w = serve_semcache_new(&other, b2);
    ck_assert_int_eq(serve_semcache_load(w, path, 170), -EINVAL);
    ck_assert_int_eq(serve_semcache_load(w, "/nonexistent/x", 170), -ENOENT);
    serve_semcache_destroy(&w);
    serve_semcache_destroy(&e);
    serve_semcache_destroy(&d);
    serve_semcache_destroy(&c);
    serve_semcache_bound_destroy(&b2);
    serve_semcache_bound_destroy(&b);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* The scan over more rows than one chunk, entries of two contexts interleaved: the nearest
 * of the query's context as a brute-force float search finds it (within F16 rounding). */
START_TEST(test_scan_chunks) {
    enum { N = 2600, W = 64 };
    serve_semcache_bound_t *b = serve_semcache_bound_new(64, 1, 0.05);
    serve_semcache_config_t cfg = {W, N, 0};
    serve_semcache_t *c = serve_semcache_new(&cfg, b);
    float *v = malloc((size_t)N * W * sizeof *v), q[W];
    unsigned seed = 7;
    for (int i = 0; i <= N; i++) {
        float *x = i < N ? v + (size_t)i * W : q, n = 0;
        for (int j = 0; j < W; j++) {
            seed = seed * 1103515245u + 12345u;
            x[j] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
            n += x[j] * x[j];
        }
        for (int j = 0; j < W; j++)
            x[j] /= sqrtf(n);
        if (i < N) {
            serve_semcache_key_t k = {(uint64_t)(i % 3 == 0 ? 2 : 1), (uint64_t)(1000 + i), x};
            ck_assert_int_ge(serve_semcache_put(c, &k, "e", NULL, "a", 1, 0, 10), 0);
        }
    }
    int want = -1;
    float best = -2;
    for (int i = 0; i < N; i++) {
        float d = 0;
        for (int j = 0; j < W; j++)
            d += v[(size_t)i * W + j] * q[j];
        if (i % 3 != 0 && d > best)
            best = d, want = i;
    }
    serve_semcache_key_t kq = {1, 1, q};
    serve_semcache_hit_t h;
    serve_semcache_lookup(c, &kq, 0.05, 20, &h);
    ck_assert(h.entry >= 0 && h.entry % 3 != 0); /* of its own context */
    ck_assert_msg(fabsf(h.similarity - best) < 2e-3, "%f vs %f (entry %d, want %d)", h.similarity,
                  best, h.entry, want);
    free(v);
    serve_semcache_destroy(&c);
    serve_semcache_bound_destroy(&b);
}
END_TEST

/* A random unit vector of w floats (seed advanced). */
static void s_rand_unit(float *x, int w, unsigned *seed) {
    float n = 0;
    for (int j = 0; j < w; j++) {
        *seed = *seed * 1103515245u + 12345u;
        x[j] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
        n += x[j] * x[j];
    }
    for (int j = 0; j < w; j++)
        x[j] /= sqrtf(n);
}

/* Past ann_min embedded entries the semantic layer searches the HNSW index: a query near
 * an entry finds the brute-force nearest of its context (recall over 60 queries), never
 * an entry of another context, never a dropped one, and a reused slot's new vector. */
START_TEST(test_ann) {
    enum { N = 3000, W = 48, Q = 60 };
    serve_semcache_bound_t *b = serve_semcache_bound_new(64, 1, 0.05);
    serve_semcache_config_t cfg = {W, N + 10, 100};
    serve_semcache_t *c = serve_semcache_new(&cfg, b);
    float *v = malloc((size_t)N * W * sizeof *v), q[W], noise[W];
    unsigned seed = 11;
    char name[32];
    for (int i = 0; i < N; i++) {
        s_rand_unit(v + (size_t)i * W, W, &seed);
        serve_semcache_key_t k = {(uint64_t)(i % 2 ? 2 : 1), (uint64_t)(5000 + i),
                                  v + (size_t)i * W};
        snprintf(name, sizeof name, "%s-%d", i % 10 == 0 ? "gone" : "kept", i);
        ck_assert_int_eq(serve_semcache_put(c, &k, name, NULL, "a", 1, 0, 10), i);
    }
    ck_assert_int_eq(serve_semcache_indexed(c), N); /* built at 100, every one since */
    int found = 0;
    for (int t = 0; t < Q; t++) {
        int target = 2 * ((t * 97) % (N / 2)); /* an entry of context 1 */
        s_rand_unit(noise, W, &seed);
        float n = 0;
        for (int j = 0; j < W; j++) {
            q[j] = v[(size_t)target * W + j] + 0.3f * noise[j];
            n += q[j] * q[j];
        }
        for (int j = 0; j < W; j++)
            q[j] /= sqrtf(n);
        int want = -1;
        float best = -2;
        for (int i = 0; i < N; i += 2) {
            float d = 0;
            for (int j = 0; j < W; j++)
                d += v[(size_t)i * W + j] * q[j];
            if (d > best)
                best = d, want = i;
        }
        serve_semcache_key_t kq = {1, 1, q};
        serve_semcache_hit_t h;
        serve_semcache_lookup(c, &kq, 0.05, 20, &h);
        ck_assert(h.entry >= 0 && h.entry % 2 == 0); /* its own context only */
        found += h.entry == want;
    }
    ck_assert_msg(found >= Q * 9 / 10, "recall %d of %d", found, Q);
    /* dropped entries are never found; a reused slot answers with its new vector */
    ck_assert_int_eq(serve_semcache_invalidate(c, "gone-", NULL), N / 10);
    ck_assert_int_eq(serve_semcache_indexed(c), N - N / 10);
    for (int t = 0; t < 20; t++) {
        serve_semcache_key_t kq = {1, 1, v + (size_t)(20 * t) * W}; /* exactly a gone entry */
        serve_semcache_hit_t h;
        serve_semcache_lookup(c, &kq, 0.05, 20, &h);
        ck_assert(h.entry >= 0 && h.entry % 10 != 0 && h.similarity < 0.999f);
    }
    float fresh[W];
    s_rand_unit(fresh, W, &seed);
    serve_semcache_key_t kn = {1, 99999, fresh};
    int slot = serve_semcache_put(c, &kn, "fresh", NULL, "b", 1, 0, 30);
    ck_assert(slot >= 0);
    serve_semcache_key_t kq = {1, 2, fresh};
    serve_semcache_hit_t h;
    serve_semcache_lookup(c, &kq, 0.05, 40, &h);
    ck_assert_int_eq(h.entry, slot);
    ck_assert(h.similarity > 0.999f);
    ck_assert_int_eq(serve_semcache_indexed(c), N - N / 10 + 1);
    free(v);
    serve_semcache_destroy(&c);
    serve_semcache_bound_destroy(&b);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("semcache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_layers);
    tcase_add_test(tc, test_expiry_lru_invalidate);
    tcase_add_test(tc, test_ttl_rule);
    tcase_add_test(tc, test_persist);
    tcase_add_test(tc, test_scan_chunks);
    tcase_add_test(tc, test_ann);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
