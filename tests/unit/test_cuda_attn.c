/* test_cuda_attn.c - paged attention and the KV pool on the GPU: the CUDA KV
 * store against the CPU backend's (bit-exact F16 pools), CUDA attention
 * against the CPU attention for decode across several position chunks and for
 * a causal prefill chunk, a KV block's round trip device -> pinned host ->
 * device (bit-exact), and the pinned pool over 10k transfers (no leak).
 * Skips (CTest code 77) in a build without CUDA or on a machine without a GPU. */
#include "kern_backend.h"
#include "kern_kv.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STRATA_HAVE_CUDA
#include "cuda/kern_cuda.h"

static int g_pass, g_fail;

static void s_report(bool ok, const char *what, double worst, double tol) {
    printf("%s %-48s worst %.3e (tolerance %.1e)\n", ok ? "ok  " : "FAIL", what, worst, tol);
    if (ok)
        g_pass++;
    else
        g_fail++;
}

static void *s_dev(kern_cuda_ctx_t *c, const void *host, size_t bytes) {
    void *d = NULL;
    if (kern_cuda_malloc(c, &d, bytes) || (host && kern_cuda_upload(c, d, host, bytes))) {
        printf("FAIL: device allocation of %zu bytes: %s\n", bytes, kern_cuda_last_error(c));
        exit(1);
    }
    return d;
}

/* The model shape of this test: 2 layers, 6 query heads over 2 KV heads (GQA
 * 3), D = 64, 16 positions a block; 4 sequences, contexts up to 700 positions
 * (three KERN_CUDA_ATTN_SPLIT chunks), block ids shuffled over the pool. */
enum { L = 2, H = 6, HKV = 2, D = 64, BS = 16, N_SEQ = 4, MAXB = 48, N_BLOCKS = N_SEQ * MAXB };
static const int k_len[N_SEQ] = {1, 300, 700, 300}; /* positions written per sequence */

static void s_attention(kern_cuda_ctx_t *c, kern_backend_t *cpu, uint64_t *st) {
    kern_kv_shape_t shape = {L, HKV, D, BS};
    size_t bb = kern_kv_block_bytes(&shape, KERN_F16), pool_bytes = bb * N_BLOCKS;
    uint8_t *pool = calloc(1, pool_bytes), *back = malloc(pool_bytes);
    int32_t blocks[N_SEQ * MAXB];
    for (int i = 0; i < N_BLOCKS; i++)
        blocks[i] = i;
    for (int i = N_BLOCKS - 1; i > 0; i--) { /* shuffle: tables are not contiguous */
        int j = (int)(test_rand_u64(st) % (uint64_t)(i + 1));
        int32_t t = blocks[i];
        blocks[i] = blocks[j];
        blocks[j] = t;
    }
    /* every written position of every sequence, both layers, in one store call each */
    int n_all = 0;
    for (int s = 0; s < N_SEQ; s++)
        n_all += k_len[s];
    float *k = malloc(sizeof(float) * n_all * HKV * D),
          *v = malloc(sizeof(float) * n_all * HKV * D);
    int32_t *pos = malloc(sizeof(int32_t) * n_all), *seq = malloc(sizeof(int32_t) * n_all);
    for (int s = 0, t = 0; s < N_SEQ; s++)
        for (int p = 0; p < k_len[s]; p++, t++) {
            pos[t] = p;
            seq[t] = s;
        }
    void *dpool = s_dev(c, NULL, pool_bytes);
    kern_cuda_memzero(c, dpool, pool_bytes);
    int32_t *dblocks = s_dev(c, blocks, sizeof blocks), *dpos = s_dev(c, pos, 4 * (size_t)n_all);
    int32_t *dseq = s_dev(c, seq, 4 * (size_t)n_all);
    float *dk = s_dev(c, NULL, sizeof(float) * n_all * HKV * D);
    float *dv = s_dev(c, NULL, sizeof(float) * n_all * HKV * D);
    int rc = 0;
    for (int l = 0; l < L && !rc; l++) {
        for (int i = 0; i < n_all * HKV * D; i++) {
            k[i] = test_rand_f32(st, -1, 1);
            v[i] = test_rand_f32(st, -2, 2);
        }
        kern_backend_kv_t kv = {.pool = pool,
                                .block_bytes = bb,
                                .block_size = BS,
                                .n_head_kv = HKV,
                                .head_dim = D,
                                .layer = l,
                                .kv_type = KERN_F16,
                                .n_tok = n_all,
                                .k = k,
                                .v = v,
                                .pos = pos,
                                .seq = seq,
                                .blocks = blocks,
                                .max_blocks = MAXB};
        rc = cpu->kv_store(cpu, &kv);
        if (!rc)
            rc = kern_cuda_upload(c, dk, k, sizeof(float) * n_all * HKV * D);
        if (!rc)
            rc = kern_cuda_upload(c, dv, v, sizeof(float) * n_all * HKV * D);
        if (!rc)
            rc = kern_cuda_kv_store(c, dpool, bb, BS, HKV, D, l, n_all, dk, dv, dpos, dseq, dblocks,
                                    MAXB);
    }
    if (!rc)
        rc = kern_cuda_sync(c);
    if (!rc)
        rc = kern_cuda_download(c, back, dpool, pool_bytes);
    s_report(!rc && memcmp(pool, back, pool_bytes) == 0, "kv_store: F16 pool equals the CPU's", 0,
             0);

    /* Queries: decode (one token of each sequence at its last position) and a
     * prefill chunk (positions 260 .. 299 of sequence 3, causal), one call
     * each.  The CPU backend over the same pool is the reference.
     * Tolerance: outputs are convex combinations of V rows; the scores differ
     * by the order of a D-term dot (~D * 2^-24 relative of |q||k| <= 8 * 4e-6)
     * and CUDA's expf (2 ulp), so each weight is within ~5e-5 relative and
     * each output within 5e-5 * 2 * max|V|; tolerance 2e-4 * max|V| (= 4e-4). */
    struct {
        const char *what;
        int n_tok;
        int seq0, pos0; /* pos0 < 0: decode, one token per sequence */
    } cases[] = {{"attention decode: 4 seqs, ctx 1..700 (3 chunks)", N_SEQ, 0, -1},
                 {"attention prefill chunk: 40 tokens at 260..299", 40, 3, 260}};
    for (size_t ci = 0; ci < 2 && !rc; ci++) {
        int n = cases[ci].n_tok, max_ctx = 0;
        int32_t *n_ctx = malloc(4 * (size_t)n), *qs = malloc(4 * (size_t)n);
        for (int t = 0; t < n; t++) {
            if (cases[ci].pos0 < 0) {
                qs[t] = t;
                n_ctx[t] = k_len[t];
            } else {
                qs[t] = cases[ci].seq0;
                n_ctx[t] = cases[ci].pos0 + t + 1;
            }
            max_ctx = n_ctx[t] > max_ctx ? n_ctx[t] : max_ctx;
        }
        size_t qb = sizeof(float) * n * H * D;
        float *q = malloc(qb), *want = malloc(qb), *got = malloc(qb);
        for (int i = 0; i < n * H * D; i++)
            q[i] = test_rand_f32(st, -1, 1);
        double worst = 0, tol = 4e-4;
        bool ok = true;
        for (int l = 0; l < L; l++) {
            kern_backend_attn_t a = {.n_head = H,
                                     .n_head_kv = HKV,
                                     .head_dim = D,
                                     .n_tok = n,
                                     .q = q,
                                     .out = want,
                                     .n_ctx = n_ctx,
                                     .seq = qs,
                                     .blocks = blocks,
                                     .max_blocks = MAXB,
                                     .max_ctx = max_ctx,
                                     .pool = pool,
                                     .block_bytes = bb,
                                     .block_size = BS,
                                     .layer = l,
                                     .kv_type = KERN_F16,
                                     .scale = 1.0f / sqrtf((float)D)};
            int r1 = cpu->attention(cpu, &a);
            float *dq = s_dev(c, q, qb), *dout = s_dev(c, NULL, qb);
            int32_t *dn = s_dev(c, n_ctx, 4 * (size_t)n), *dqs = s_dev(c, qs, 4 * (size_t)n);
            kern_cuda_attn_t g = {.n_head = H,
                                  .n_head_kv = HKV,
                                  .head_dim = D,
                                  .n_tok = n,
                                  .q = dq,
                                  .out = dout,
                                  .n_ctx = dn,
                                  .seq = dqs,
                                  .blocks = dblocks,
                                  .max_blocks = MAXB,
                                  .max_ctx = max_ctx,
                                  .pool = dpool,
                                  .block_bytes = bb,
                                  .block_size = BS,
                                  .layer = l,
                                  .scale = 1.0f / sqrtf((float)D)};
            int r2 = kern_cuda_attention(c, &g);
            if (!r2)
                r2 = kern_cuda_sync(c);
            if (!r2)
                r2 = kern_cuda_download(c, got, dout, qb);
            if (r1 || r2) {
                printf("     rc cpu %d cuda %d: %s\n", r1, r2, kern_cuda_last_error(c));
                ok = false;
            } else {
                for (int i = 0; i < n * H * D; i++)
                    worst = fmax(worst, fabs((double)got[i] - want[i]));
            }
            kern_cuda_free(c, dq);
            kern_cuda_free(c, dout);
            kern_cuda_free(c, dn);
            kern_cuda_free(c, dqs);
        }
        s_report(ok && worst <= tol, cases[ci].what, worst, tol);
        free(n_ctx);
        free(qs);
        free(q);
        free(want);
        free(got);
    }
    if (rc)
        printf("     rc %d: %s\n", rc, kern_cuda_last_error(c));
    kern_cuda_free(c, dpool);
    kern_cuda_free(c, dblocks);
    kern_cuda_free(c, dpos);
    kern_cuda_free(c, dseq);
    kern_cuda_free(c, dk);
    kern_cuda_free(c, dv);
    free(pool);
    free(back);
    free(k);
    free(v);
    free(pos);
    free(seq);
}

/* A KV block (the default model's shape: 30 layers x 2 x 3 KV heads x 16 x 64
 * halves = 368 KiB) device -> pinned -> device, compared byte for byte; then
 * 10k such transfers through a pool of 4 pinned buffers: every buffer comes
 * back, and device memory is the same before and after. */
static void s_transfers(kern_cuda_ctx_t *c, uint64_t *st) {
    kern_kv_shape_t shape = {30, 3, 64, 16};
    size_t bb = kern_kv_block_bytes(&shape, KERN_F16);
    uint8_t *src = malloc(bb), *back = malloc(bb);
    for (size_t i = 0; i < bb; i += 8) {
        uint64_t r = test_rand_u64(st);
        memcpy(src + i, &r, bb - i < 8 ? bb - i : 8);
    }
    size_t free0 = 0, free1 = 0, total = 0;
    kern_cuda_mem_info(c, &free0, &total);
    uint8_t *da = s_dev(c, src, bb), *db = s_dev(c, NULL, bb);
    kern_cuda_pinned_t *pool = kern_cuda_pinned_new(c, 4, bb);
    if (!pool) {
        s_report(false, "kern_cuda_pinned_new(4 buffers)", 0, 0);
        return;
    }
    void *h = kern_cuda_pinned_get(pool);
    int rc = kern_cuda_block_d2h(c, h, da, bb);
    if (!rc)
        rc = kern_cuda_block_h2d(c, db, h, bb);
    if (!rc)
        rc = kern_cuda_download(c, back, db, bb);
    kern_cuda_pinned_put(pool, h);
    s_report(!rc && memcmp(src, back, bb) == 0, "block round trip device->pinned->device", 0, 0);

    int errors = 0;
    void *held[4];
    for (int i = 0; i < 10000 && !errors; i++) {
        int n = 1 + i % 4; /* 1..4 buffers out at once */
        for (int j = 0; j < n; j++) {
            held[j] = kern_cuda_pinned_get(pool);
            errors += !held[j];
        }
        if (errors)
            break;
        for (int j = 0; j < n; j++)
            errors += (i % 2 ? kern_cuda_block_h2d(c, j % 2 ? db : da, held[j], bb)
                             : kern_cuda_block_d2h(c, held[j], j % 2 ? db : da, bb)) != 0;
        for (int j = 0; j < n; j++)
            errors += kern_cuda_pinned_put(pool, held[j]) != 0;
    }
    /* a fifth buffer is refused while four are out */
    for (int j = 0; j < 4; j++)
        held[j] = kern_cuda_pinned_get(pool);
    bool exhausted = kern_cuda_pinned_get(pool) == NULL;
    for (int j = 0; j < 4; j++)
        kern_cuda_pinned_put(pool, held[j]);
    bool double_put = kern_cuda_pinned_put(pool, held[0]) == -EINVAL;
    int in_use = kern_cuda_pinned_in_use(pool);
    kern_cuda_pinned_destroy(&pool);
    kern_cuda_pinned_destroy(&pool); /* safe twice */
    kern_cuda_free(c, da);
    kern_cuda_free(c, db);
    kern_cuda_mem_info(c, &free1, &total);
    printf("     10k transfers: %d errors, %d buffers out, device free %zu -> %zu bytes\n", errors,
           in_use, free0, free1);
    /* device memory within 2 MiB of where it started (the driver's page granularity) */
    s_report(errors == 0 && in_use == 0 && exhausted && double_put && free1 + (2u << 20) >= free0,
             "pinned pool: 10k transfers, nothing leaks", 0, 0);
    free(src);
    free(back);
}

int main(void) {
    if (kern_cuda_device_count() < 1)
        test_skip(false, "no CUDA device"); /* CI may lack a GPU: a skip there too */
    kern_cuda_ctx_t *c = kern_cuda_ctx_new(0);
    kern_backend_t *cpu = kern_backend_cpu_new(kern_ops_ref());
    if (!c || !cpu) {
        printf("FAIL: kern_cuda_ctx_new(0) / kern_backend_cpu_new\n");
        return 1;
    }
    uint64_t st = 777;
    s_attention(c, cpu, &st);
    s_transfers(c, &st);
    kern_backend_destroy(&cpu);
    kern_cuda_ctx_destroy(&c);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
#else
int main(void) {
    test_skip(false, "built without CUDA (STRATA_CUDA=OFF or no nvcc)");
}
#endif
