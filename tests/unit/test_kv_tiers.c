/* test_kv_tiers.c - T1 (DRAM) + T2 (SSD) under one index: puts beyond T1
 * demote to T2, gets answer exact bytes from either tier (F16 in, F16 tiers),
 * a block being demoted still answers from memory, lossy tiers (INT8, INT4)
 * stay within tolerance, a full T2 evicts by its policy, warm promotes,
 * counters add up, a corrupted T2 block is reported -EBADMSG and dropped, and
 * a new kv_tiers over the same directory finds the T2 blocks. */
#include "kv_tiers.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_N 12 /* blocks the tests use */

static char s_root[256]; /* made and removed by main */
static char s_dir[320];  /* this test's T2 directory */

static const kern_kv_shape_t s_shape = {
    .n_layer = 2, .n_head_kv = 2, .head_dim = 8, .block_size = 16};

static int s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void s_setup(void) {
    snprintf(s_dir, sizeof s_dir, "%s/t-XXXXXX", s_root);
    ck_assert_ptr_nonnull(mkdtemp(s_dir));
}

static void s_teardown(void) {
    nftw(s_dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- blocks: chained metas and random data, F32 and F16 copies */

static kv_meta_t s_meta[S_N];
static float *s_f32[S_N]; /* (F32 block) values in [-2, 2) */
static void *s_f16[S_N];  /* the same rounded to F16 (what a lossless F16 tier keeps) */

static size_t s_bytes(int fmt) {
    return kv_fmt_block_bytes(&s_shape, fmt);
}

static void s_make_blocks(void) {
    uint64_t st = 42, parent = 0;
    for (int i = 0; i < S_N; i++) {
        kv_meta_t *m = &s_meta[i];
        memset(m, 0, sizeof *m);
        m->n_tokens = i == S_N - 1 ? 5 : s_shape.block_size; /* the last one partial */
        m->pin = i % 3;
        for (int t = 0; t < m->n_tokens; t++)
            m->tokens[t] = (int32_t)(test_rand_u64(&st) % 49152);
        m->parent = parent;
        m->hash = kv_hash_block(parent, m->tokens, m->n_tokens);
        parent = m->hash;
        size_t n = s_bytes(KV_FMT_F32) / sizeof(float);
        s_f32[i] = malloc(s_bytes(KV_FMT_F32));
        s_f16[i] = malloc(s_bytes(KV_FMT_F16));
        for (size_t k = 0; k < n; k++)
            s_f32[i][k] = test_rand_f32(&st, -2.0f, 2.0f);
        /* (called from main, outside any test: no ck_assert here) */
        if (kv_codec_convert(&s_shape, KV_FMT_F32, s_f32[i], KV_FMT_F16, s_f16[i], m->n_tokens) ||
            /* positions past n_tokens are zeros in every format */
            kv_codec_convert(&s_shape, KV_FMT_F16, s_f16[i], KV_FMT_F32, s_f32[i], m->n_tokens))
            abort();
    }
}

static void s_free_blocks(void) {
    for (int i = 0; i < S_N; i++) {
        free(s_f32[i]);
        free(s_f16[i]);
    }
}

static kv_tiers_t *s_open(int t1, int t1_fmt, int t2, int t2_fmt) {
    kv_tiers_config_t c = {.shape = s_shape,
                           .t1_blocks = t1,
                           .t1_fmt = t1_fmt,
                           .t2_dir = t2 ? s_dir : NULL,
                           .t2_blocks = t2,
                           .t2_fmt = t2_fmt,
                           .policy = KV_POLICY_LRU,
                           .queue_depth = 16};
    char err[256];
    kv_tiers_t *kt = kv_tiers_new(&c, err, sizeof err);
    ck_assert_msg(kt != NULL, "kv_tiers_new: %s", err);
    return kt;
}

static int s_put(kv_tiers_t *kt, int i) {
    return kv_tiers_put(kt, &s_meta[i], KV_FMT_F16, s_f16[i], s_bytes(KV_FMT_F16));
}

/* Poll until nothing is pending; answers are dropped. */
static void s_settle(kv_tiers_t *kt) {
    kv_tiers_done_t d[16];
    for (int spins = 0; kv_tiers_pending(kt) > 0 && spins < 10000; spins++)
        kv_tiers_poll(kt, d, 16, 100000);
    ck_assert_int_eq(kv_tiers_pending(kt), 0);
}

/* Ask for block i and return its single answer (valid until the next poll). */
static kv_tiers_done_t s_get1(kv_tiers_t *kt, int i) {
    ck_assert_int_eq(kv_tiers_get(kt, s_meta[i].hash, 1000u + (unsigned)i), 0);
    kv_tiers_done_t d;
    int n = 0;
    for (int spins = 0; n == 0 && spins < 10000; spins++)
        n = kv_tiers_poll(kt, &d, 1, 100000);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(d.tag, 1000u + (unsigned)i);
    ck_assert_uint_eq(d.hash, s_meta[i].hash);
    return d;
}

/* The answer is block i, bit-exact in F16. */
static void s_check_exact(const kv_tiers_done_t *d, int i) {
    ck_assert_int_eq(d->status, 0);
    ck_assert_int_eq(d->fmt, KV_FMT_F16);
    ck_assert_uint_eq(d->bytes, s_bytes(KV_FMT_F16));
    ck_assert_mem_eq(d->data, s_f16[i], s_bytes(KV_FMT_F16));
    ck_assert_uint_eq(d->meta->hash, s_meta[i].hash);
    ck_assert_uint_eq(d->meta->parent, s_meta[i].parent);
    ck_assert_int_eq(d->meta->n_tokens, s_meta[i].n_tokens);
    ck_assert_int_eq(d->meta->pin, s_meta[i].pin);
    ck_assert_mem_eq(d->meta->tokens, s_meta[i].tokens,
                     (size_t)s_meta[i].n_tokens * sizeof(int32_t));
}

/* Largest |answer - original| over block i (the answer in any format). */
static float s_max_err(const kv_tiers_done_t *d, int i) {
    ck_assert_int_eq(d->status, 0);
    float *x = malloc(s_bytes(KV_FMT_F32));
    ck_assert_int_eq(kv_codec_convert(&s_shape, d->fmt, d->data, KV_FMT_F32, x, s_meta[i].n_tokens),
                     0);
    float e = 0;
    size_t n = s_bytes(KV_FMT_F32) / sizeof(float);
    for (size_t k = 0; k < n; k++)
        e = fmaxf(e, fabsf(x[k] - s_f32[i][k]));
    free(x);
    return e;
}

START_TEST(demote_then_get_exact) {
    kv_tiers_t *kt = s_open(4, KV_FMT_F16, 32, KV_FMT_F16);
    /* T1 holds 4 and keeps one slot free ahead: each put past the third
     * starts writing the least recently used block to T2 */
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    s_settle(kt);
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.puts, 10);
    ck_assert_int_eq(st.put_dups, 0);
    ck_assert_int_eq(st.t1_to_t2, 7);
    ck_assert_int_eq(st.t1_used, 3);
    ck_assert_int_eq(st.t2_used, 7);
    ck_assert_int_eq(st.t1_bytes, 3 * (int64_t)s_bytes(KV_FMT_F16));
    ck_assert_int_eq(st.t2_bytes, 7 * (int64_t)s_bytes(KV_FMT_F16));
    ck_assert_int_eq(st.bytes_written, 7 * (int64_t)s_bytes(KV_FMT_F16));
    ck_assert_int_eq(st.t2_dropped, 0);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(kv_tiers_where(kt, s_meta[i].hash), i < 7 ? 2 : 1);

    /* one at a time: each T2 hit is promoted into T1 */
    for (int i = 9; i >= 0; i--) {
        kv_tiers_done_t d = s_get1(kt, i);
        ck_assert_int_eq(d.tier, i < 7 ? 2 : 1);
        s_check_exact(&d, i);
        ck_assert_int_eq(kv_tiers_where(kt, s_meta[i].hash), 1);
    }
    s_settle(kt);
    st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.t1_hits, 3);
    ck_assert_int_eq(st.t1_misses, 7);
    ck_assert_int_eq(st.t2_hits, 7);
    ck_assert_int_eq(st.t2_misses, 0);
    ck_assert_int_eq(st.t2_to_t1, 7);
    ck_assert_int_eq(st.bytes_read, 7 * (int64_t)s_bytes(KV_FMT_F16));
    ck_assert_int_eq(st.checksum_failures, 0);
    ck_assert_int_eq(st.io_errors, 0);
    /* promotions pushed 7, 8 and 9 out to T2; promoted blocks keep their T2
     * copy, so evicting them again writes nothing: each block written once */
    ck_assert_int_eq(st.t1_to_t2, 10);
    ck_assert_int_eq(st.t2_used, 10);
    ck_assert_int_eq(st.bytes_written, 10 * (int64_t)s_bytes(KV_FMT_F16));
    kv_tiers_destroy(&kt);
    kv_tiers_destroy(&kt);
    ck_assert_ptr_null(kt);
}
END_TEST

START_TEST(batch_of_gets) {
    kv_tiers_t *kt = s_open(4, KV_FMT_F16, 32, KV_FMT_F16);
    for (int i = 0; i < S_N; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    s_settle(kt);
    /* all at once, plus a miss: answers hold their T1 slots until the next
     * poll, so T2 hits beyond the free T1 slots answer from copies */
    for (int i = 0; i < S_N; i++)
        ck_assert_int_eq(kv_tiers_get(kt, s_meta[i].hash, (uint64_t)i), 0);
    ck_assert_int_eq(kv_tiers_get(kt, 12345, 99), 0);
    ck_assert_int_eq(kv_tiers_pending(kt), S_N + 1);
    bool seen[S_N + 1] = {0};
    int got = 0;
    kv_tiers_done_t d[32];
    for (int spins = 0; got < S_N + 1 && spins < 10000; spins++) {
        int n = kv_tiers_poll(kt, d, 32, 100000);
        for (int k = 0; k < n; k++) {
            if (d[k].tag == 99) {
                ck_assert_int_eq(d[k].status, -ENOENT);
                seen[S_N] = true;
            } else {
                s_check_exact(&d[k], (int)d[k].tag);
                seen[d[k].tag] = true;
            }
        }
        got += n;
    }
    ck_assert_int_eq(got, S_N + 1);
    for (int i = 0; i <= S_N; i++)
        ck_assert(seen[i]);
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.t1_hits + st.t2_hits, S_N);
    ck_assert_int_eq(st.t1_misses, st.t2_hits + 1);
    ck_assert_int_eq(st.t2_misses, 1);
    s_settle(kt);
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(served_from_memory_during_write) {
    kv_tiers_t *kt = s_open(4, KV_FMT_F16, 8, KV_FMT_F16);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    /* block 0 is being written to T2 (nothing polled yet), still in T1 */
    ck_assert_int_eq(kv_tiers_stats(kt).t1_to_t2, 1);
    ck_assert_int_eq(kv_tiers_pending(kt), 1);
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[0].hash), 1);
    kv_tiers_done_t d = s_get1(kt, 0);
    ck_assert_int_eq(d.tier, 1);
    s_check_exact(&d, 0);
    s_settle(kt);
    /* it was asked for during the write: it stays in T1, and is in T2 too */
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[0].hash), 1);
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.t1_used, 4);
    ck_assert_int_eq(st.t2_used, 1);
    ck_assert_int_eq(st.t1_hits, 1);
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(lossy_tiers_within_tolerance) {
    /* F32 in, F16 T1, INT8 T2: per-token scales over [-2, 2) give a step of
     * 2/127; half a step plus F16 rounding */
    kv_tiers_t *kt = s_open(2, KV_FMT_F16, 16, KV_FMT_I8);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(kv_tiers_put(kt, &s_meta[i], KV_FMT_F32, s_f32[i], s_bytes(KV_FMT_F32)),
                         0);
    s_settle(kt);
    ck_assert_int_eq(kv_tiers_stats(kt).bytes_written, 5 * (int64_t)s_bytes(KV_FMT_I8));
    for (int k = 0; k < 6; k++) {
        int i = (k + 5) % 6; /* 5 first, while it is the one in T1 */
        kv_tiers_done_t d = s_get1(kt, i);
        ck_assert_int_eq(d.tier, i < 5 ? 2 : 1);
        float e = s_max_err(&d, i);
        ck_assert_msg(e <= (i < 5 ? 1.0f / 127 + 2e-3f : 2e-3f), "block %d err %g", i, e);
    }
    kv_tiers_destroy(&kt);

    /* INT8 T1 answers in INT8 */
    kt = s_open(4, KV_FMT_I8, 0, 0);
    ck_assert_int_eq(kv_tiers_put(kt, &s_meta[0], KV_FMT_F32, s_f32[0], s_bytes(KV_FMT_F32)), 0);
    kv_tiers_done_t d = s_get1(kt, 0);
    ck_assert_int_eq(d.fmt, KV_FMT_I8);
    ck_assert_uint_eq(d.bytes, s_bytes(KV_FMT_I8));
    ck_assert_float_le(s_max_err(&d, 0), 1.0f / 127 + 1e-4f);
    kv_tiers_destroy(&kt);

    /* INT4 T2 (KIVI): 15 steps over each group's range (at most 4): half a step */
    kt = s_open(2, KV_FMT_F16, 16, KV_FMT_I4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    s_settle(kt);
    for (int i = 0; i < 3; i++) {
        d = s_get1(kt, i);
        ck_assert_int_eq(d.tier, 2);
        float e = s_max_err(&d, i);
        ck_assert_msg(e <= 4.0f / 15 / 2 + 2e-3f, "int4 block %d err %g", i, e);
    }
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(full_t2_evicts_by_policy) {
    kv_tiers_t *kt = s_open(2, KV_FMT_F16, 4, KV_FMT_F16);
    /* one put at a time: put i demotes block i-1; T2 keeps 4 */
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(s_put(kt, i), 0);
        s_settle(kt);
    }
    /* T2 = {2, 3, 4, 5}, T1 = {6}; using 2 again (a duplicate put touches it)
     * makes 3 the least recently used */
    ck_assert_int_eq(s_put(kt, 2), 0);
    for (int i = 7; i < 10; i++) {
        ck_assert_int_eq(s_put(kt, i), 0);
        s_settle(kt);
    }
    int want[10] = {0, 0, 2, 0, 0, 0, 2, 2, 2, 1};
    for (int i = 0; i < 10; i++)
        ck_assert_msg(kv_tiers_where(kt, s_meta[i].hash) == want[i], "block %d in %d", i,
                      kv_tiers_where(kt, s_meta[i].hash));
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.puts, 11);
    ck_assert_int_eq(st.put_dups, 1);
    ck_assert_int_eq(st.t1_to_t2, 9);
    ck_assert_int_eq(st.t2_dropped, 5);
    ck_assert_int_eq(st.t2_used, 4);
    ck_assert_int_eq(st.t1_used, 1);
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(warm_promotes) {
    kv_tiers_t *kt = s_open(4, KV_FMT_F16, 8, KV_FMT_F16);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    s_settle(kt);
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[0].hash), 2);
    ck_assert_int_eq(kv_tiers_warm(kt, s_meta[0].hash), 0);
    ck_assert_int_eq(kv_tiers_warm(kt, s_meta[4].hash), 0); /* in T1 already */
    ck_assert_int_eq(kv_tiers_warm(kt, 777), -ENOENT);
    kv_tiers_done_t d[4];
    s_settle(kt);
    ck_assert_int_eq(kv_tiers_poll(kt, d, 4, 0), 0); /* a warm answers no one */
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[0].hash), 1);
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.t2_to_t1, 1);
    ck_assert_int_eq(st.t2_hits, 0); /* not a get */
    kv_tiers_done_t g = s_get1(kt, 0);
    ck_assert_int_eq(g.tier, 1);
    s_check_exact(&g, 0);
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(restart_survival) {
    kv_tiers_t *kt = s_open(2, KV_FMT_F16, 16, KV_FMT_F16);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    /* no settle: destroy waits for the writes in flight */
    int in_t2 = kv_tiers_stats(kt).t1_to_t2;
    ck_assert_int_eq(in_t2, 7);
    kv_tiers_destroy(&kt);

    kt = s_open(2, KV_FMT_F16, 16, KV_FMT_F16);
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.t2_recovered, 7);
    ck_assert_int_eq(st.t2_used, 7);
    ck_assert_int_eq(st.t1_used, 0);
    for (int i = 0; i < 7; i++) {
        kv_tiers_done_t d = s_get1(kt, i);
        ck_assert_int_eq(d.tier, 2);
        s_check_exact(&d, i);
    }
    kv_tiers_done_t d = s_get1(kt, 7); /* was only in T1 */
    ck_assert_int_eq(d.status, -ENOENT);
    kv_tiers_destroy(&kt);

    /* another T2 format over the same files finds nothing of this one */
    kt = s_open(2, KV_FMT_F16, 16, KV_FMT_I8);
    ck_assert_int_eq(kv_tiers_stats(kt).t2_recovered, 0);
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(corrupt_block_dropped) {
    kv_tiers_t *kt = s_open(2, KV_FMT_F16, 16, KV_FMT_F16);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    kv_tiers_destroy(&kt);
    /* block 0 went first, into slot 0: flip a payload byte (slot = 4096-byte
     * header + payload) */
    char p[512];
    snprintf(p, sizeof p, "%s/kv-ssd-00.dat", s_dir);
    int fd = open(p, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, 4096 + 100), 1);
    b ^= 1;
    ck_assert_int_eq(pwrite(fd, &b, 1, 4096 + 100), 1);
    close(fd);

    kt = s_open(2, KV_FMT_F16, 16, KV_FMT_F16);
    ck_assert_int_eq(kv_tiers_stats(kt).t2_recovered, 4);
    kv_tiers_done_t d = s_get1(kt, 0);
    ck_assert_int_eq(d.status, -EBADMSG);
    ck_assert_int_eq(d.tier, 2);
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[0].hash), 0);
    for (int i = 1; i < 4; i++) {
        d = s_get1(kt, i);
        s_check_exact(&d, i);
    }
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.checksum_failures, 1);
    ck_assert_int_eq(st.t2_misses, 1);
    ck_assert_int_eq(st.t2_hits, 3);
    ck_assert_int_eq(st.t2_used, 3);
    kv_tiers_destroy(&kt);
}
END_TEST

START_TEST(no_t2_and_bad_args) {
    kv_tiers_t *kt = s_open(3, KV_FMT_F16, 0, 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(s_put(kt, i), 0);
    kv_tiers_stats_t st = kv_tiers_stats(kt);
    ck_assert_int_eq(st.t1_used, 3);
    ck_assert_int_eq(st.t2_dropped, 2); /* nowhere to go */
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[0].hash), 0);
    ck_assert_int_eq(kv_tiers_where(kt, s_meta[4].hash), 1);
    ck_assert_int_eq(kv_tiers_pending(kt), 0);

    ck_assert_int_eq(kv_tiers_put(kt, &s_meta[5], KV_FMT_F16, s_f16[5], 7), -EINVAL);
    ck_assert_int_eq(kv_tiers_put(kt, &s_meta[5], 9, s_f16[5], s_bytes(KV_FMT_F16)), -EINVAL);
    kv_meta_t m = s_meta[5];
    m.hash ^= 1; /* not the hash of its tokens */
    ck_assert_int_eq(kv_tiers_put(kt, &m, KV_FMT_F16, s_f16[5], s_bytes(KV_FMT_F16)), -EINVAL);
    m = s_meta[5];
    m.n_tokens = 0;
    ck_assert_int_eq(kv_tiers_put(kt, &m, KV_FMT_F16, s_f16[5], s_bytes(KV_FMT_F16)), -EINVAL);
    ck_assert_int_eq(kv_tiers_stats(kt).puts, 5);
    kv_tiers_destroy(&kt);

    kv_tiers_config_t c = {.shape = s_shape, .t1_blocks = 0, .t1_fmt = KV_FMT_F16};
    char err[128];
    ck_assert_ptr_null(kv_tiers_new(&c, err, sizeof err));
    ck_assert_str_eq(err, "kv_tiers: t1_blocks must be >= 1");
    c.t1_blocks = 1;
    c.t2_dir = s_dir;
    c.t2_blocks = 4;
    c.t2_fmt = 17;
    ck_assert_ptr_null(kv_tiers_new(&c, err, sizeof err));
}
END_TEST

/* Random puts, gets, warms and polls (a small queue, answers taken a few at a
 * time): every answer is exact or -ENOENT, and the counts stay consistent. */
START_TEST(random_ops_stay_consistent) {
    for (int pol = 0; pol < 3; pol++) {
        kv_tiers_config_t c = {.shape = s_shape,
                               .t1_blocks = 3,
                               .t1_fmt = KV_FMT_F16,
                               .t2_dir = s_dir,
                               .t2_blocks = 5,
                               .t2_fmt = KV_FMT_F16,
                               .policy = (kv_policy_kind_t)pol,
                               .queue_depth = 4};
        kv_tiers_t *kt = kv_tiers_new(&c, NULL, 0);
        ck_assert_ptr_nonnull(kt);
        uint64_t st = 7 + (uint64_t)pol;
        int answers = 0, asked = 0;
        for (int step = 0; step < 3000; step++) {
            int i = (int)(test_rand_u64(&st) % S_N);
            switch (test_rand_u64(&st) % 4) {
            case 0: {
                /* -ENOSPC: every T1 slot holds an answer and T2 is busy */
                int rc = s_put(kt, i);
                ck_assert(rc == 0 || rc == -ENOSPC);
                break;
            }
            case 1:
                ck_assert_int_eq(kv_tiers_get(kt, s_meta[i].hash, (uint64_t)i), 0);
                asked++;
                break;
            case 2: {
                int rc = kv_tiers_warm(kt, s_meta[i].hash);
                ck_assert(rc == 0 || rc == -ENOENT);
                break;
            }
            default: {
                kv_tiers_done_t d[4];
                int max = 1 + (int)(test_rand_u64(&st) % 4);
                int n = kv_tiers_poll(kt, d, max, (int)(test_rand_u64(&st) % 2) * 1000);
                ck_assert_int_ge(n, 0);
                ck_assert_int_le(n, max);
                for (int k = 0; k < n; k++) {
                    if (d[k].status == -ENOENT)
                        continue;
                    s_check_exact(&d[k], (int)d[k].tag);
                    ck_assert(d[k].tier == 1 || d[k].tier == 2);
                }
                answers += n;
                break;
            }
            }
            kv_tiers_stats_t s = kv_tiers_stats(kt);
            ck_assert_int_le(s.t1_used, 3);
            ck_assert_int_le(s.t2_used, 5);
        }
        kv_tiers_done_t d[16];
        for (int spins = 0; kv_tiers_pending(kt) > 0 && spins < 10000; spins++) {
            int n = kv_tiers_poll(kt, d, 16, 100000);
            for (int k = 0; k < n; k++)
                if (d[k].status != -ENOENT)
                    s_check_exact(&d[k], (int)d[k].tag);
            answers += n;
        }
        ck_assert_int_eq(answers, asked);
        kv_tiers_stats_t s = kv_tiers_stats(kt);
        ck_assert_int_eq(s.t1_hits + s.t1_misses, asked);
        ck_assert_int_eq(s.t1_hits + s.t2_hits + s.t2_misses, asked);
        ck_assert_int_eq(s.checksum_failures + s.io_errors, 0);
        int in_t1 = 0, held = 0;
        for (int i = 0; i < S_N; i++) {
            int w = kv_tiers_where(kt, s_meta[i].hash);
            in_t1 += w == 1;
            held += w != 0;
        }
        ck_assert_int_eq(in_t1, s.t1_used);
        ck_assert_int_le(held, s.t1_used + s.t2_used);
        ck_assert_int_ge(held, s.t2_used);
        kv_tiers_destroy(&kt);
        /* what T2 held survives */
        kt = kv_tiers_new(&c, NULL, 0);
        ck_assert_ptr_nonnull(kt);
        ck_assert_int_eq(kv_tiers_stats(kt).t2_recovered, s.t2_used);
        kv_tiers_destroy(&kt);
        nftw(s_dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
        mkdir(s_dir, 0700);
    }
}
END_TEST

int main(int argc, char **argv) {
    const char *base = getenv("STRATA_TEST_TMP");
    snprintf(s_root, sizeof s_root, "%s/strata-kvtiers-XXXXXX", base && *base ? base : "/var/tmp");
    if (!mkdtemp(s_root)) {
        perror(s_root);
        return 1;
    }
    s_make_blocks();
    Suite *s = suite_create("kv_tiers");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, demote_then_get_exact);
    tcase_add_test(tc, batch_of_gets);
    tcase_add_test(tc, served_from_memory_during_write);
    tcase_add_test(tc, lossy_tiers_within_tolerance);
    tcase_add_test(tc, full_t2_evicts_by_policy);
    tcase_add_test(tc, warm_promotes);
    tcase_add_test(tc, restart_survival);
    tcase_add_test(tc, corrupt_block_dropped);
    tcase_add_test(tc, no_t2_and_bad_args);
    tcase_add_test(tc, random_ops_stay_consistent);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(argc, argv, s, CK_FORK_GETENV);
    s_free_blocks();
    nftw(s_root, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
