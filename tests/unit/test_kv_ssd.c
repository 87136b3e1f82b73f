/* test_kv_ssd.c - the T2 SSD slots: batched write/read round trips, restart
 * survival, a corrupted payload reported -EBADMSG and dropped, a corrupted
 * header ignored at open, the newest copy of a hash winning, reads held
 * behind a write in flight, back-pressure, and a full store evicting by a
 * kv_policy.  Files live in a temporary directory under /var/tmp (not tmpfs,
 * so O_DIRECT is exercised where the filesystem allows it). */
#include "kv_policy.h"
#include "kv_ssd.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_PAYLOAD 10000 /* not a multiple of 4096: the tail is padded */

static char s_root[256]; /* made by main, removed by main (also after a failed test) */
static char s_dir[320];  /* this test's directory */

static int s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void s_rmtree(const char *path) {
    nftw(path, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void s_setup(void) {
    snprintf(s_dir, sizeof s_dir, "%s/t-XXXXXX", s_root);
    ck_assert_ptr_nonnull(mkdtemp(s_dir));
}

static void s_teardown(void) {
    s_rmtree(s_dir);
}

static kv_ssd_t *s_open(int n_slots, int qd, int n_files) {
    kv_ssd_config_t c = {.dir = s_dir,
                         .n_slots = n_slots,
                         .payload_max = S_PAYLOAD,
                         .queue_depth = qd,
                         .n_files = n_files,
                         .cookie = 0x1234};
    char err[256];
    kv_ssd_t *ssd = kv_ssd_new(&c, err, sizeof err);
    ck_assert_msg(ssd != NULL, "kv_ssd_new: %s", err);
    return ssd;
}

/* A block named by i: tokens i.., payload bytes from a seed of i. */
static void s_block(int i, kv_meta_t *m, uint8_t *data, size_t len) {
    memset(m, 0, sizeof *m);
    m->n_tokens = 16;
    m->pin = i % 7;
    for (int t = 0; t < m->n_tokens; t++)
        m->tokens[t] = i * 100 + t;
    m->parent = i > 0 ? kv_hash_block(0, m->tokens, 1) : 0;
    m->hash = kv_hash_block(m->parent, m->tokens, m->n_tokens);
    uint64_t st = 0x9e37u + (uint64_t)i;
    for (size_t k = 0; k < len; k++)
        data[k] = (uint8_t)test_rand_u64(&st);
}

/* Poll until n requests have finished; their entries go to out. */
static int s_wait_n(kv_ssd_t *ssd, kv_ssd_done_t *out, int n) {
    int got = 0;
    for (int spins = 0; got < n && spins < 10000; spins++)
        got += kv_ssd_poll(ssd, out + got, n - got, 100000);
    return got;
}

static void s_write_blocks(kv_ssd_t *ssd, int n, int *slots) {
    static uint8_t data[S_PAYLOAD];
    kv_meta_t m;
    kv_ssd_done_t done[256];
    int got = 0;
    for (int i = 0; i < n; i++) {
        slots[i] = kv_ssd_alloc(ssd);
        ck_assert_int_ge(slots[i], 0);
        s_block(i, &m, data, sizeof data);
        int rc;
        while ((rc = kv_ssd_write(ssd, slots[i], &m, 1, data, sizeof data, (uint64_t)i)) ==
               -EBUSY) /* every request is in use: let some finish */
            got += kv_ssd_poll(ssd, done + got, n - got, 100000);
        ck_assert_int_eq(rc, 0);
    }
    got += s_wait_n(ssd, done + got, n - got);
    ck_assert_int_eq(got, n);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(done[i].op, KV_SSD_WRITE);
        ck_assert_int_eq(done[i].status, 0);
    }
}

/* Read the n blocks (slot i holds block tag i) in one batch and check them;
 * returns how many failed with -EBADMSG (bad_slot's is expected to). */
static int s_read_check(kv_ssd_t *ssd, int n, const int *slots) {
    static uint8_t want[S_PAYLOAD];
    int bad = 0, next = 0, got = 0;
    kv_ssd_done_t done[64];
    while (got < n) {
        /* queue as many reads as there are free requests, then check what came back
         * (the data of a read is valid until the next poll) */
        while (next < n && kv_ssd_free_requests(ssd) > 0) {
            ck_assert_int_eq(kv_ssd_read(ssd, slots[next], (uint64_t)next), 0);
            next++;
        }
        int k_n = kv_ssd_poll(ssd, done, 64, 100000);
        ck_assert_int_ge(k_n, 0);
        got += k_n;
        for (int k = 0; k < k_n; k++) {
            const kv_ssd_done_t *d = &done[k];
            ck_assert_int_eq(d->op, KV_SSD_READ);
            if (d->status == -EBADMSG) {
                bad++;
                continue;
            }
            ck_assert_int_eq(d->status, 0);
            int i = (int)d->tag;
            ck_assert_int_eq(d->slot, slots[i]);
            kv_meta_t m;
            s_block(i, &m, want, sizeof want);
            ck_assert_uint_eq(d->meta->hash, m.hash);
            ck_assert_uint_eq(d->meta->parent, m.parent);
            ck_assert_int_eq(d->meta->n_tokens, m.n_tokens);
            ck_assert_int_eq(d->meta->pin, m.pin);
            ck_assert_mem_eq(d->meta->tokens, m.tokens, sizeof(int32_t) * (size_t)m.n_tokens);
            ck_assert_int_eq(d->fmt, 1);
            ck_assert_uint_eq(d->bytes, sizeof want);
            ck_assert_mem_eq(d->data, want, sizeof want);
        }
    }
    return bad;
}

/* Slot s of a single-file store starts at s * slot_bytes. */
static void s_poke(int slot, size_t slot_bytes, size_t at) {
    char p[512];
    snprintf(p, sizeof p, "%s/kv-ssd-00.dat", s_dir);
    int fd = open(p, O_RDWR);
    ck_assert_int_ge(fd, 0);
    off_t off = (off_t)slot * (off_t)slot_bytes + (off_t)at;
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

START_TEST(round_trip_batch) {
    kv_ssd_t *ssd = s_open(100, 64, 1);
    ck_assert_int_eq(kv_ssd_capacity(ssd), 100);
    ck_assert_uint_eq(kv_ssd_slot_bytes(ssd), 4096 + 12288);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 0);
    fprintf(stderr, "kv_ssd: %s, %s buffers\n", kv_ssd_direct(ssd) ? "O_DIRECT" : "buffered",
            kv_ssd_fixed(ssd) ? "registered" : "plain");
    int slots[64];
    s_write_blocks(ssd, 64, slots); /* 64 writes, one submission */
    ck_assert_int_eq(kv_ssd_used(ssd), 64);
    ck_assert_int_eq(s_read_check(ssd, 64, slots), 0); /* 64 reads, one submission */
    kv_ssd_info_t info;
    ck_assert(kv_ssd_slot_info(ssd, slots[5], &info));
    ck_assert_int_eq(info.n_tokens, 16);
    ck_assert_uint_eq(info.bytes, S_PAYLOAD);
    ck_assert(!kv_ssd_slot_info(ssd, 99, &info));
    ck_assert_int_eq(kv_ssd_pending(ssd), 0);
    kv_ssd_destroy(&ssd);
    kv_ssd_destroy(&ssd);
    ck_assert_ptr_null(ssd);
}
END_TEST

START_TEST(restart_survival) {
    kv_ssd_t *ssd = s_open(80, 16, 3); /* three files */
    int slots[40];
    s_write_blocks(ssd, 40, slots);
    ck_assert_int_eq(kv_ssd_free(ssd, slots[39]), 0); /* freed, not erased: comes back */
    kv_ssd_destroy(&ssd);

    ssd = s_open(80, 16, 3);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 40);
    ck_assert_int_eq(kv_ssd_used(ssd), 40);
    for (int i = 0; i < 40; i++) {
        kv_ssd_info_t info;
        ck_assert(kv_ssd_slot_info(ssd, slots[i], &info));
        kv_meta_t m;
        static uint8_t data[S_PAYLOAD];
        s_block(i, &m, data, sizeof data);
        ck_assert_uint_eq(info.hash, m.hash);
        ck_assert_int_eq(info.pin, m.pin);
    }
    ck_assert_int_eq(s_read_check(ssd, 40, slots), 0); /* 40 reads, queue of 16 */
    kv_ssd_destroy(&ssd);

    /* another cookie (another model or format): nothing is recognised */
    kv_ssd_config_t c = {
        .dir = s_dir, .n_slots = 80, .payload_max = S_PAYLOAD, .n_files = 3, .cookie = 99};
    ssd = kv_ssd_new(&c, NULL, 0);
    ck_assert_ptr_nonnull(ssd);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 0);
    kv_ssd_destroy(&ssd);
}
END_TEST

START_TEST(corrupt_payload) {
    kv_ssd_t *ssd = s_open(8, 8, 1);
    int slots[6];
    s_write_blocks(ssd, 6, slots);
    size_t sb = kv_ssd_slot_bytes(ssd);
    kv_ssd_destroy(&ssd);
    s_poke(slots[2], sb, 4096 + 777); /* one payload byte */

    ssd = s_open(8, 8, 1);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 6);       /* the header is fine */
    ck_assert_int_eq(s_read_check(ssd, 6, slots), 1); /* only block 2 fails */
    ck_assert_int_eq(kv_ssd_used(ssd), 5);            /* and its slot was freed */
    ck_assert(!kv_ssd_slot_info(ssd, slots[2], NULL));
    ck_assert_int_eq(kv_ssd_free(ssd, slots[2]), -EINVAL); /* not the caller's any more */
    ck_assert_int_eq(kv_ssd_read(ssd, slots[2], 0), -EINVAL);
    kv_ssd_destroy(&ssd); /* erases the bad header */

    ssd = s_open(8, 8, 1);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 5);
    int rest[5] = {slots[0], slots[1], slots[3], slots[4], slots[5]};
    for (int i = 0; i < 5; i++)
        ck_assert(kv_ssd_slot_info(ssd, rest[i], NULL));
    kv_ssd_destroy(&ssd);
}
END_TEST

START_TEST(corrupt_header) {
    kv_ssd_t *ssd = s_open(8, 8, 1);
    int slots[4];
    s_write_blocks(ssd, 4, slots);
    size_t sb = kv_ssd_slot_bytes(ssd);
    kv_ssd_destroy(&ssd);
    s_poke(slots[1], sb, 24); /* a byte of the hash field */

    ssd = s_open(8, 8, 1);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 3);
    ck_assert(!kv_ssd_slot_info(ssd, slots[1], NULL));
    ck_assert(kv_ssd_slot_info(ssd, slots[0], NULL));
    ck_assert(kv_ssd_slot_info(ssd, slots[2], NULL));
    /* the ignored slot is free again: 8 - 3 allocations succeed */
    for (int i = 0; i < 5; i++)
        ck_assert_int_ge(kv_ssd_alloc(ssd), 0);
    ck_assert_int_eq(kv_ssd_alloc(ssd), -ENOSPC);
    kv_ssd_destroy(&ssd);
}
END_TEST

START_TEST(newest_copy_wins) {
    kv_ssd_t *ssd = s_open(8, 8, 1);
    static uint8_t a[S_PAYLOAD], b[S_PAYLOAD];
    kv_meta_t m;
    s_block(3, &m, a, sizeof a);
    memset(b, 0xab, sizeof b);
    int s1 = kv_ssd_alloc(ssd), s2 = kv_ssd_alloc(ssd);
    ck_assert_int_eq(kv_ssd_write(ssd, s1, &m, 1, a, sizeof a, 1), 0);
    kv_ssd_done_t d[2];
    ck_assert_int_eq(s_wait_n(ssd, d, 1), 1);
    ck_assert_int_eq(kv_ssd_free(ssd, s1), 0); /* dropped, later written again elsewhere */
    ck_assert_int_eq(kv_ssd_write(ssd, s2, &m, 1, b, sizeof b, 2), 0);
    ck_assert_int_eq(s_wait_n(ssd, d, 1), 1);
    kv_ssd_destroy(&ssd);

    ssd = s_open(8, 8, 1);
    ck_assert_int_eq(kv_ssd_recovered(ssd), 1);
    ck_assert(kv_ssd_slot_info(ssd, s2, NULL));
    ck_assert(!kv_ssd_slot_info(ssd, s1, NULL));
    ck_assert_int_eq(kv_ssd_read(ssd, s2, 7), 0);
    ck_assert_int_eq(s_wait_n(ssd, d, 1), 1);
    ck_assert_int_eq(d[0].status, 0);
    ck_assert_mem_eq(d[0].data, b, sizeof b);
    kv_ssd_destroy(&ssd);
}
END_TEST

START_TEST(read_waits_for_write) {
    kv_ssd_t *ssd = s_open(4, 4, 1);
    static uint8_t data[S_PAYLOAD];
    kv_meta_t m;
    s_block(1, &m, data, sizeof data);
    int s = kv_ssd_alloc(ssd);
    void *p;
    ck_assert_int_eq(kv_ssd_write_prep(ssd, s, &m, 2, 5000, 10, &p), 0); /* zero-copy */
    memcpy(p, data, 5000);
    ck_assert_int_eq(kv_ssd_write(ssd, s, &m, 2, data, 5000, 11), -EBUSY); /* one at a time */
    ck_assert_int_eq(kv_ssd_read(ssd, s, 20), 0); /* queued behind the write */
    kv_ssd_done_t d[2];
    ck_assert_int_eq(s_wait_n(ssd, d, 2), 2);
    ck_assert_int_eq(d[0].op, KV_SSD_WRITE);
    ck_assert_int_eq(d[0].tag, 10);
    ck_assert_int_eq(d[1].op, KV_SSD_READ);
    ck_assert_int_eq(d[1].status, 0);
    ck_assert_int_eq(d[1].fmt, 2);
    ck_assert_uint_eq(d[1].bytes, 5000);
    ck_assert_mem_eq(d[1].data, data, 5000);
    kv_ssd_destroy(&ssd);
}
END_TEST

START_TEST(back_pressure_and_bad_args) {
    kv_ssd_t *ssd = s_open(8, 2, 1);
    static uint8_t data[S_PAYLOAD];
    kv_meta_t m;
    s_block(1, &m, data, sizeof data);
    int s[3] = {kv_ssd_alloc(ssd), kv_ssd_alloc(ssd), kv_ssd_alloc(ssd)};
    ck_assert_int_eq(kv_ssd_write(ssd, s[0], &m, 1, data, 100, 0), 0);
    ck_assert_int_eq(kv_ssd_write(ssd, s[1], &m, 1, data, 100, 1), 0);
    ck_assert_int_eq(kv_ssd_free_requests(ssd), 0);
    ck_assert_int_eq(kv_ssd_write(ssd, s[2], &m, 1, data, 100, 2), -EBUSY);
    ck_assert_int_eq(kv_ssd_write(ssd, s[2], &m, 1, data, S_PAYLOAD + 1, 2), -EINVAL);
    ck_assert_int_eq(kv_ssd_write(ssd, 7, &m, 1, data, 100, 2), -EINVAL); /* not allocated */
    ck_assert_int_eq(kv_ssd_read(ssd, s[2], 0), -EINVAL);                 /* nothing written */
    kv_ssd_done_t d[2];
    ck_assert_int_eq(s_wait_n(ssd, d, 2), 2);
    kv_ssd_poll(ssd, d, 2, 0); /* releases the two requests */
    ck_assert_int_eq(kv_ssd_free_requests(ssd), 2);
    ck_assert_int_eq(kv_ssd_write(ssd, s[2], &m, 1, data, 100, 2), 0);
    kv_ssd_destroy(&ssd);

    kv_ssd_config_t c = {.dir = s_dir, .n_slots = 0, .payload_max = 100};
    char err[128];
    ck_assert_ptr_null(kv_ssd_new(&c, err, sizeof err));
    ck_assert_str_eq(err, "kv_ssd: bad configuration");
}
END_TEST

START_TEST(locked_by_another) {
    kv_ssd_t *a = s_open(4, 4, 1);
    kv_ssd_config_t c = {.dir = s_dir, .n_slots = 4, .payload_max = S_PAYLOAD, .cookie = 0x1234};
    char err[512];
    ck_assert_ptr_null(kv_ssd_new(&c, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "in use"));
    kv_ssd_destroy(&a);
}
END_TEST

START_TEST(buffered_mode) {
    kv_ssd_config_t c = {
        .dir = s_dir, .n_slots = 16, .payload_max = S_PAYLOAD, .cookie = 0x1234, .buffered = true};
    kv_ssd_t *ssd = kv_ssd_new(&c, NULL, 0);
    ck_assert_ptr_nonnull(ssd);
    ck_assert(!kv_ssd_direct(ssd));
    int slots[16];
    s_write_blocks(ssd, 16, slots);
    ck_assert_int_eq(s_read_check(ssd, 16, slots), 0);
    kv_ssd_destroy(&ssd);
    ssd = s_open(16, 8, 1); /* the same files, O_DIRECT where possible */
    ck_assert_int_eq(kv_ssd_recovered(ssd), 16);
    ck_assert_int_eq(s_read_check(ssd, 16, slots), 0);
    kv_ssd_destroy(&ssd);
}
END_TEST

/* Eviction is the caller's: a full store asks for a victim, here by LRU. */
START_TEST(full_evicts_by_policy) {
    enum { N = 6 };
    kv_ssd_t *ssd = s_open(N, 8, 1);
    kv_policy_t *pol = kv_policy_new(KV_POLICY_LRU, N);
    ck_assert_ptr_nonnull(pol);
    static uint8_t data[S_PAYLOAD];
    uint64_t hash_of[N] = {0};
    kv_ssd_done_t d[8];
    uint64_t now = 1;
    for (int i = 0; i < 10; i++) {
        int s = kv_ssd_alloc(ssd);
        if (s == -ENOSPC) {
            int v = kv_policy_victim(pol);
            ck_assert_int_ge(v, 0);
            kv_policy_remove(pol, v);
            ck_assert_int_eq(kv_ssd_free(ssd, v), 0);
            s = kv_ssd_alloc(ssd);
            ck_assert_int_eq(s, v);
        }
        kv_meta_t m;
        s_block(i, &m, data, sizeof data);
        ck_assert_int_eq(kv_ssd_write(ssd, s, &m, 1, data, sizeof data, (uint64_t)i), 0);
        ck_assert_int_eq(s_wait_n(ssd, d, 1), 1);
        hash_of[s] = m.hash;
        kv_policy_insert(pol, s, now++, 0, true);
        if (i == 5) { /* block 0 is used again: block 1 becomes the oldest */
            kv_meta_t m0;
            s_block(0, &m0, data, sizeof data);
            for (int k = 0; k < N; k++)
                if (hash_of[k] == m0.hash)
                    kv_policy_touch(pol, k, now++);
        }
    }
    /* blocks 0 and 6..9 remain, 1..4 were evicted oldest first and 5 survives */
    bool present[10] = {0};
    for (int k = 0; k < N; k++) {
        kv_ssd_info_t info;
        ck_assert(kv_ssd_slot_info(ssd, k, &info));
        for (int i = 0; i < 10; i++) {
            kv_meta_t m;
            s_block(i, &m, data, 1);
            if (m.hash == info.hash)
                present[i] = true;
        }
    }
    bool want[10] = {1, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    for (int i = 0; i < 10; i++)
        ck_assert_msg(present[i] == want[i], "block %d present %d", i, present[i]);
    kv_policy_destroy(&pol);
    kv_ssd_destroy(&ssd);
}
END_TEST

int main(int argc, char **argv) {
    const char *base = getenv("STRATA_TEST_TMP");
    snprintf(s_root, sizeof s_root, "%s/strata-kvssd-XXXXXX", base && *base ? base : "/var/tmp");
    if (!mkdtemp(s_root)) {
        perror(s_root);
        return 1;
    }
    Suite *s = suite_create("kv_ssd");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip_batch);
    tcase_add_test(tc, restart_survival);
    tcase_add_test(tc, corrupt_payload);
    tcase_add_test(tc, corrupt_header);
    tcase_add_test(tc, newest_copy_wins);
    tcase_add_test(tc, read_waits_for_write);
    tcase_add_test(tc, back_pressure_and_bad_args);
    tcase_add_test(tc, locked_by_another);
    tcase_add_test(tc, buffered_mode);
    tcase_add_test(tc, full_evicts_by_policy);
    suite_add_tcase(s, tc);
    int rc = test_run_suite(argc, argv, s, CK_FORK_GETENV);
    s_rmtree(s_root);
    return rc;
}
