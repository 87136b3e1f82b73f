/* cmd_bench_kv.c - `strata bench-kv-ssd`: T2 write and read throughput through
 * kv_ssd (io_uring, registered buffers, O_DIRECT where the filesystem allows),
 * with queue_depth requests kept in flight.  scripts/bench-kv-ssd runs it next
 * to fio on the same directory.
 */
#include "base_log.h"
#include "cli.h"
#include "kv_ssd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SmolLM2-135M, F16: 30 layers x (K, V) x 3 KV heads x 16 positions x 64 dims x 2 bytes */
#define S_DEFAULT_BYTES (30 * 2 * 3 * 16 * 64 * 2)

static void s_usage(FILE *f) {
    fprintf(f,
            "usage: strata bench-kv-ssd [options]\n"
            "  Fill a kv_ssd store of N blocks, then overwrite and read them all, each\n"
            "  round in a new random order, keeping --qd requests in flight; prints MB/s\n"
            "  (10^6 bytes of payload) and blocks/s per pass and the medians.\n"
            "  -d, --dir DIR      directory of the data files (default /var/tmp/strata-bench-kv)\n"
            "  -n, --blocks N     blocks written (default 1024)\n"
            "  -R, --rounds N     overwrite + read rounds after the fill (default 3)\n"
            "  -b, --bytes B      payload bytes per block (default %d: a SmolLM2 F16 block)\n"
            "  -q, --qd N         queue depth: requests in flight (default 32)\n"
            "  -f, --files N      data files (default 1)\n"
            "      --buffered     no O_DIRECT\n"
            "      --keep         keep the data files\n"
            "  -h, --help         this help\n",
            S_DEFAULT_BYTES);
}

static uint64_t s_rand(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static void s_shuffle(int *v, long n, uint64_t *x) {
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(s_rand(x) % (uint64_t)(i + 1));
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double s_median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c)
        return v[0];
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, s_cmp_double);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

/* One pass over slots[0..n): write each (a copy of src into the request's
 * registered buffer, as kv_tiers converts into it) or read each, keeping up to
 * qd requests in flight.  Seconds, or -1 on a failure. */
static double s_pass(kv_ssd_t *ssd, const uint8_t *src, long bytes, long qd, const int *slots,
                     long n, bool write, kv_ssd_done_t *d) {
    long submitted = 0, done = 0, bad = 0;
    double t0 = cli_now();
    while (done < n) {
        while (submitted < n && kv_ssd_free_requests(ssd) > 0) {
            int slot = slots[submitted];
            int rc;
            if (write) {
                kv_meta_t m = {.parent = 0, .n_tokens = 1, .pin = 0};
                m.tokens[0] = slot;
                m.hash = kv_hash_block(0, m.tokens, 1);
                void *p;
                rc = kv_ssd_write_prep(ssd, slot, &m, 1, (size_t)bytes, 0, &p);
                if (rc == 0)
                    memcpy(p, src, (size_t)bytes);
            } else {
                rc = kv_ssd_read(ssd, slot, 0);
            }
            if (rc < 0) {
                fprintf(stderr, "strata bench-kv-ssd: cannot queue %s of slot %d: %s\n",
                        write ? "write" : "read", slot, strerror(-rc));
                return -1;
            }
            submitted++;
        }
        int k = kv_ssd_poll(ssd, d, (int)qd, 1000000);
        if (k < 0) {
            fprintf(stderr, "strata bench-kv-ssd: poll: %s\n", strerror(-k));
            return -1;
        }
        for (int i = 0; i < k; i++)
            bad += d[i].status != 0;
        done += k;
    }
    double t = cli_now() - t0;
    if (bad) {
        fprintf(stderr, "strata bench-kv-ssd: %ld %s failed\n", bad, write ? "writes" : "reads");
        return -1;
    }
    return t;
}

int cmd_bench_kv_ssd(int argc, char **argv) {
    const char *dir = "/var/tmp/strata-bench-kv";
    long n_blocks = 1024, rounds = 3, bytes = S_DEFAULT_BYTES, qd = 32, files = 1;
    bool buffered = false, keep = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-d") || !strcmp(a, "--dir")) && v) {
            dir = argv[++i];
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--blocks")) && v) {
            if (!cli_int("bench-kv-ssd", a, argv[++i], 1, 1 << 24, &n_blocks))
                return 1;
        } else if ((!strcmp(a, "-R") || !strcmp(a, "--rounds")) && v) {
            if (!cli_int("bench-kv-ssd", a, argv[++i], 0, 1000, &rounds))
                return 1;
        } else if ((!strcmp(a, "-b") || !strcmp(a, "--bytes")) && v) {
            if (!cli_int("bench-kv-ssd", a, argv[++i], 1, 1 << 30, &bytes))
                return 1;
        } else if ((!strcmp(a, "-q") || !strcmp(a, "--qd")) && v) {
            if (!cli_int("bench-kv-ssd", a, argv[++i], 1, 1024, &qd))
                return 1;
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--files")) && v) {
            if (!cli_int("bench-kv-ssd", a, argv[++i], 1, KV_SSD_MAX_FILES, &files))
                return 1;
        } else if (!strcmp(a, "--buffered")) {
            buffered = true;
        } else if (!strcmp(a, "--keep")) {
            keep = true;
        } else {
            fprintf(stderr, "strata bench-kv-ssd: unknown option or missing value: %s\n", a);
            return 1;
        }
    }

    kv_ssd_config_t c = {.dir = dir,
                         .n_slots = (int)n_blocks,
                         .payload_max = (size_t)bytes,
                         .queue_depth = (int)qd,
                         .n_files = (int)files,
                         .cookie = 0xbe4c4b5353ull,
                         .buffered = buffered};
    char err[512];
    kv_ssd_t *ssd = kv_ssd_new(&c, err, sizeof err);
    if (!ssd) {
        fprintf(stderr, "strata bench-kv-ssd: %s\n", err);
        return 1;
    }
    /* the payload: incompressible bytes, copied into each request's buffer
     * (as kv_tiers converts a block into it) */
    uint8_t *src = malloc((size_t)bytes);
    kv_ssd_done_t *d = malloc((size_t)qd * sizeof *d);
    int *perm = malloc((size_t)n_blocks * sizeof *perm);
    if (!src || !d || !perm) {
        free(perm);
        free(d);
        free(src);
        fprintf(stderr, "strata bench-kv-ssd: out of memory\n");
        kv_ssd_destroy(&ssd);
        return 1;
    }
    uint64_t y = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < bytes; i++)
        src[i] = (uint8_t)s_rand(&y);
    printf("kv_ssd: dir %s, %s, %s buffers, slot %zu bytes (payload %ld), qd %ld, %ld file(s)\n",
           dir, kv_ssd_direct(ssd) ? "O_DIRECT" : "buffered",
           kv_ssd_fixed(ssd) ? "registered" : "plain", kv_ssd_slot_bytes(ssd), bytes, qd, files);

    /* fill: every slot written once (into preallocated, never-written extents
     * on a new store); then rounds of overwrites and reads, each over a random
     * permutation of the slots (every block once, like fio's random map) */
    int rc = 0;
    for (int s = 0; s < n_blocks; s++) /* an existing store: start empty */
        if (kv_ssd_slot_info(ssd, s, NULL))
            kv_ssd_free(ssd, s);
    for (long i = 0; i < n_blocks; i++) {
        perm[i] = kv_ssd_alloc(ssd);
        if (perm[i] < 0) {
            fprintf(stderr, "strata bench-kv-ssd: no free slot\n");
            rc = 1;
            goto out;
        }
    }
    double *tw = calloc((size_t)rounds + 1, sizeof *tw), *tr = calloc((size_t)rounds, sizeof *tr);
    if (!tw || !tr) {
        free(tw);
        free(tr);
        rc = 1;
        goto out;
    }
    uint64_t x = 12345;
    for (int r = 0; r <= rounds && rc == 0; r++) {
        double t = s_pass(ssd, src, bytes, qd, perm, n_blocks, true, d);
        const char *what = r == 0 ? "fill" : "write";
        if (t < 0) {
            rc = 1;
            break;
        }
        tw[r] = t;
        printf("%s: %ld blocks x %ld bytes in %.3f s: %.1f MB/s, %.1f blocks/s\n", what, n_blocks,
               bytes, t, (double)n_blocks * (double)bytes / 1e6 / t, (double)n_blocks / t);
        if (r == 0)
            continue;
        s_shuffle(perm, n_blocks, &x);
        t = s_pass(ssd, src, bytes, qd, perm, n_blocks, false, d);
        if (t < 0) {
            rc = 1;
            break;
        }
        tr[r - 1] = t;
        printf("read: %ld blocks x %ld bytes in %.3f s: %.1f MB/s, %.1f blocks/s "
               "(checksums verified)\n",
               n_blocks, bytes, t, (double)n_blocks * (double)bytes / 1e6 / t,
               (double)n_blocks / t);
        s_shuffle(perm, n_blocks, &x);
    }
    if (rc == 0 && rounds > 0) {
        double mw = s_median(tw + 1, rounds), mr = s_median(tr, rounds);
        double mb = (double)n_blocks * (double)bytes / 1e6;
        printf("median write: %.1f MB/s, %.1f blocks/s\n", mb / mw, (double)n_blocks / mw);
        printf("median read: %.1f MB/s, %.1f blocks/s\n", mb / mr, (double)n_blocks / mr);
    }
    free(tw);
    free(tr);
out:
    free(perm);
    free(d);
    free(src);
    kv_ssd_destroy(&ssd);
    if (!keep) {
        for (int i = 0; i < files; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/kv-ssd-%02d.dat", dir, i);
            unlink(p);
        }
        rmdir(dir); /* only if empty */
    }
    return rc;
}
