/* cmd_bench_kv.c - `strata bench-kv-ssd`: T2 write and read throughput through
 * kv_ssd (io_uring, registered buffers, O_DIRECT where the filesystem allows),
 * with queue_depth requests kept in flight.  scripts/bench-kv-ssd runs it next
 * to fio on the same directory.
 */
#include "base_log.h"
#include "cli.h"
#include "cli_flags.h"
#include "kv_ssd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SmolLM2-135M, F16: 30 layers x (K, V) x 3 KV heads x 16 positions x 64 dims x 2 bytes */
#define S_DEFAULT_BYTES (30 * 2 * 3 * 16 * 64 * 2)

typedef struct {
    const char *dir; /* -d */
    int n_blocks;    /* -n */
    int rounds;      /* -R */
    int bytes;       /* -b: payload per block */
    int qd;          /* -q */
    int files;       /* -f */
    bool buffered;
    bool keep;
} s_opts_t;

#define S_O(member) ACTOR_OPT_FIELD(s_opts_t, member)
static const cli_flag_t s_flags[] = {
    {.name = "dir",
     .short_name = 'd',
     .arg = "DIR",
     .opt = {.type = ACTOR_OPT_PATH, .help = "directory of the data files", .field = S_O(dir)}},
    {.name = "blocks",
     .short_name = 'n',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 24,
             .help = "blocks written",
             .field = S_O(n_blocks)}},
    {.name = "rounds",
     .short_name = 'R',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1000,
             .help = "overwrite + read rounds after the fill",
             .field = S_O(rounds)}},
    {.name = "bytes",
     .short_name = 'b',
     .arg = "B",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 30,
             .help = "payload bytes per block (the default: a SmolLM2 F16 block)",
             .field = S_O(bytes)}},
    {.name = "qd",
     .short_name = 'q',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1024,
             .help = "queue depth: requests in flight",
             .field = S_O(qd)}},
    {.name = "files",
     .short_name = 'f',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = KV_SSD_MAX_FILES,
             .help = "data files",
             .field = S_O(files)}},
    {.name = "buffered",
     .opt = {.type = ACTOR_OPT_BOOL, .help = "no O_DIRECT", .field = S_O(buffered)}},
    {.name = "keep",
     .opt = {.type = ACTOR_OPT_BOOL, .help = "keep the data files", .field = S_O(keep)}},
    {NULL},
};
#undef S_O

static const cli_cmd_t s_cmd = {
    "bench-kv-ssd",
    "usage: strata bench-kv-ssd [options]\n"
    "  Fill a kv_ssd store of N blocks, then overwrite and read them all, each\n"
    "  round in a new random order, keeping --qd requests in flight; prints MB/s\n"
    "  (10^6 bytes of payload) and blocks/s per pass and the medians.\n",
    NULL,
    {{s_flags, 0}, {NULL}},
};

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

/* The fill, then --rounds of overwrites and reads, each over a random permutation of
 * the slots (every block once, like fio's random map), one line per pass and the
 * medians.  0 or 1. */
static int s_rounds(kv_ssd_t *ssd, const s_opts_t *o, const uint8_t *src, int *perm,
                    kv_ssd_done_t *d) {
    const long n = o->n_blocks, bytes = o->bytes;
    double *tw = calloc((size_t)o->rounds + 1, sizeof *tw);
    double *tr = calloc((size_t)o->rounds + 1, sizeof *tr);
    int rc = !tw || !tr;
    uint64_t x = 12345;
    for (int r = 0; r <= o->rounds && rc == 0; r++) {
        double t = s_pass(ssd, src, bytes, o->qd, perm, (int)n, true, d);
        if (t < 0) {
            rc = 1;
            break;
        }
        tw[r] = t;
        printf("%s: %ld blocks x %ld bytes in %.3f s: %.1f MB/s, %.1f blocks/s\n",
               r == 0 ? "fill" : "write", n, bytes, t, (double)n * (double)bytes / 1e6 / t,
               (double)n / t);
        if (r == 0)
            continue;
        s_shuffle(perm, (int)n, &x);
        if ((t = s_pass(ssd, src, bytes, o->qd, perm, (int)n, false, d)) < 0) {
            rc = 1;
            break;
        }
        tr[r - 1] = t;
        printf("read: %ld blocks x %ld bytes in %.3f s: %.1f MB/s, %.1f blocks/s "
               "(checksums verified)\n",
               n, bytes, t, (double)n * (double)bytes / 1e6 / t, (double)n / t);
        s_shuffle(perm, (int)n, &x);
    }
    if (rc == 0 && o->rounds > 0) {
        double mw = s_median(tw + 1, o->rounds), mr = s_median(tr, o->rounds);
        double mb = (double)n * (double)bytes / 1e6;
        printf("median write: %.1f MB/s, %.1f blocks/s\n", mb / mw, (double)n / mw);
        printf("median read: %.1f MB/s, %.1f blocks/s\n", mb / mr, (double)n / mr);
    }
    free(tw);
    free(tr);
    return rc;
}

/* Every slot allocated, in perm (an existing store is emptied first).  0 or 1. */
static int s_alloc_all(kv_ssd_t *ssd, int n, int *perm) {
    for (int s = 0; s < n; s++)
        if (kv_ssd_slot_info(ssd, s, NULL))
            kv_ssd_free(ssd, s);
    for (int i = 0; i < n; i++)
        if ((perm[i] = kv_ssd_alloc(ssd)) < 0) {
            fprintf(stderr, "strata bench-kv-ssd: no free slot\n");
            return 1;
        }
    return 0;
}

/* Without --keep: the data files and the directory (if empty) go. */
static void s_remove(const s_opts_t *o) {
    if (o->keep)
        return;
    for (int i = 0; i < o->files; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/kv-ssd-%02d.dat", o->dir, i);
        unlink(p);
    }
    rmdir(o->dir); /* only if empty */
}

int cmd_bench_kv_ssd(int argc, char **argv) {
    s_opts_t o = {.dir = "/var/tmp/strata-bench-kv",
                  .n_blocks = 1024,
                  .rounds = 3,
                  .bytes = S_DEFAULT_BYTES,
                  .qd = 32,
                  .files = 1};
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, &o, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (next < argc) {
        fprintf(stderr, "strata bench-kv-ssd: unexpected argument '%s'\n", argv[next]);
        return 2;
    }
    kv_ssd_config_t c = {.dir = o.dir,
                         .n_slots = o.n_blocks,
                         .payload_max = (size_t)o.bytes,
                         .queue_depth = o.qd,
                         .n_files = o.files,
                         .cookie = 0xbe4c4b5353ull,
                         .buffered = o.buffered};
    char err[512];
    kv_ssd_t *ssd = kv_ssd_new(&c, err, sizeof err);
    if (!ssd) {
        fprintf(stderr, "strata bench-kv-ssd: %s\n", err);
        return 1;
    }
    /* the payload: incompressible bytes, copied into each request's buffer
     * (as kv_tiers converts a block into it) */
    uint8_t *src = malloc((size_t)o.bytes);
    kv_ssd_done_t *d = malloc((size_t)o.qd * sizeof *d);
    int *perm = malloc((size_t)o.n_blocks * sizeof *perm);
    rc = 1;
    if (!src || !d || !perm) {
        fprintf(stderr, "strata bench-kv-ssd: out of memory\n");
        goto out;
    }
    uint64_t y = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < o.bytes; i++)
        src[i] = (uint8_t)s_rand(&y);
    printf("kv_ssd: dir %s, %s, %s buffers, slot %zu bytes (payload %d), qd %d, %d file(s)\n",
           o.dir, kv_ssd_direct(ssd) ? "O_DIRECT" : "buffered",
           kv_ssd_fixed(ssd) ? "registered" : "plain", kv_ssd_slot_bytes(ssd), o.bytes, o.qd,
           o.files);
    rc = s_alloc_all(ssd, o.n_blocks, perm) || s_rounds(ssd, &o, src, perm, d);
out:
    free(perm);
    free(d);
    free(src);
    kv_ssd_destroy(&ssd);
    s_remove(&o);
    return rc;
}
