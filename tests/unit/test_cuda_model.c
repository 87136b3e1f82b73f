/* test_cuda_model.c - the GPU worker's two halves on a GPU (label cuda; skips, code 77, in a
 * build without CUDA or on a machine without one):
 * 1. the forward pass on the seam (model/model_device.c) over the CUDA backend against the
 *    same code over the CPU backend, on the synthetic model (F32 weights; no download, so it
 *    runs on a bare GPU machine): two sequences on scattered blocks of an F16 pool in device
 *    memory, a prefill of 21 + 13 tokens (34 columns: the cuBLAS path) then 3 decode steps of
 *    both (2 columns: the mat-vec), every token's logits and final hidden state.  Tolerance
 *    2e-2 of a row's largest |value| and mean KL <= 1e-3: the cuBLAS path rounds activations
 *    to F16 (relative 2^-11 each, ~1e-3 of sum |w x| over a row of 64..128), the attention
 *    reads F16 K/V on both sides (2e-4 of max |V|, test_cuda_attn), and two layers with
 *    their norms carry that to well under 1e-2; a wrong op (a stage skipped, the wrong block
 *    read) is off by the row's whole scale.
 * 2. CUDA graphs: decode steps replayed from recorded graphs equal the same steps launched
 *    op by op, bit for bit.
 * 3. T0 in device memory (kvstore/kv_cache with the CUDA backend, F16): blocks inserted
 *    from host bytes (staged in pinned memory, moved in on the copy stream) come back out
 *    through the evict callback byte for byte; a copy-on-write copy on the device equals its
 *    source; 2000 insert / evict round trips leave device memory where it was. */
#include "kern_backend.h"
#include "kv_cache.h"
#include "model.h"
#include "model_device.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STRATA_HAVE_CUDA
#include "cuda/kern_cuda.h"

#define S_BLOCK 16
#define S_NBLK 8

static int g_pass, g_fail;

static void s_report(bool ok, const char *what, double worst, double tol) {
    printf("%s %-52s %.3e (limit %.1e)\n", ok ? "ok  " : "FAIL", what, worst, tol);
    ok ? g_pass++ : g_fail++;
}

/* One side: the model on backend be, an F16 pool of 2 * S_NBLK + 4 blocks in its memory. */
typedef struct {
    kern_backend_t *be;
    model_dev_t *d;
    kern_kv_pool_t pool;
} s_side_t;

static void s_side(s_side_t *s, const model_t *m, kern_backend_t *be) {
    const model_config_t *c = model_config(m);
    kern_kv_shape_t sh = {c->n_layer, c->n_head_kv, c->head_dim, S_BLOCK};
    char err[256] = "";
    s->be = be;
    s->d = model_dev_new(m, be, 40, 2, S_NBLK, err, sizeof err);
    s->pool = (kern_kv_pool_t){KERN_F16, S_BLOCK, kern_kv_block_bytes(&sh, KERN_F16),
                               2 * S_NBLK + 4, NULL};
    if (!s->d || be->alloc(be, (void **)&s->pool.base, s->pool.block_bytes * s->pool.n_blocks)) {
        printf("FAIL: %s: model_dev_new / pool: %s\n", be->name, err);
        exit(1);
    }
}

static void s_forward_case(const model_t *m, kern_backend_t *gpu, kern_backend_t *cpu) {
    const model_config_t *c = model_config(m);
    s_side_t a, b;
    s_side(&a, m, cpu);
    s_side(&b, m, gpu);
    int32_t blk0[S_NBLK], blk1[S_NBLK];
    for (int i = 0; i < S_NBLK; i++) {
        blk0[i] = 2 * i + 1;
        blk1[i] = 2 * (S_NBLK - 1 - i);
    }
    model_seq_view_t seqs[2] = {{blk0, S_NBLK, NULL, 0, 0}, {blk1, S_NBLK, NULL, 0, 0}};
    int32_t tok[40], pos[40], seq[40];
    bool want[40], hid[40];
    size_t nv = (size_t)c->n_vocab, dm = (size_t)c->d_model;
    float *la = malloc(40 * nv * 4), *lb = malloc(40 * nv * 4);
    float *ha = calloc(40 * dm, 4), *hb = calloc(40 * dm, 4);
    uint64_t rng = 7;
    int len[2] = {0, 0}, rows = 0;
    double worst = 0, hworst = 0, kl = 0;
    bool ok = true;
    for (int step = 0; step < 4; step++) {
        int n = 0;
        for (int s = 0; s < 2; s++)
            for (int i = 0, k = step ? 1 : (s ? 13 : 21); i < k; i++, n++) {
                tok[n] = (int32_t)(test_rand_u64(&rng) % nv);
                pos[n] = len[s]++;
                seq[n] = s;
                want[n] = hid[n] = true;
            }
        model_batch_t bt = {n, tok, pos, seq, want, 2, seqs, NULL};
        int na = model_dev_forward_hidden(a.d, &bt, &a.pool, la, hid, ha);
        int nb = model_dev_forward_hidden(b.d, &bt, &b.pool, lb, hid, hb);
        if (na != n || nb != n) {
            printf("FAIL: step %d: cpu %d, cuda %d rows (want %d)%s%s\n", step, na, nb, n,
                   nb < 0 ? ": " : "", nb < 0 ? kern_cuda_last_error(gpu->impl) : "");
            ok = false;
            break;
        }
        for (int r = 0; r < n; r++, rows++) {
            const float *x = la + r * nv, *y = lb + r * nv;
            double sc = 1e-6, df = 0;
            for (size_t i = 0; i < nv; i++) {
                sc = fmax(sc, fabs(x[i]));
                df = fmax(df, fabs((double)x[i] - y[i]));
            }
            worst = fmax(worst, df / sc);
            kl += test_kl(x, y, (int)nv);
            const float *p = ha + r * dm, *q = hb + r * dm;
            sc = 1e-6, df = 0;
            for (size_t i = 0; i < dm; i++) {
                sc = fmax(sc, fabs(p[i]));
                df = fmax(df, fabs((double)p[i] - q[i]));
            }
            hworst = fmax(hworst, df / sc);
        }
    }
    if (ok) {
        s_report(worst <= 2e-2, "forward: logits vs the CPU backend, worst / row scale", worst,
                 2e-2);
        s_report(hworst <= 2e-2, "forward: final hidden states, worst / row scale", hworst, 2e-2);
        s_report(kl / rows <= 1e-3, "forward: mean KL(cpu || cuda), nats", kl / rows, 1e-3);
    } else {
        g_fail++;
    }
    free(la), free(lb), free(ha), free(hb);
    s_side_t *sides[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        sides[i]->be->free(sides[i]->be, sides[i]->pool.base);
        model_dev_destroy(&sides[i]->d);
    }
}

/* CUDA graphs: 60 decode steps of one sequence (after a 5-token prefill) replayed from
 * recorded graphs give the logits of the same steps launched op by op, bit for bit (the same
 * kernels on the same data: a difference means a graph replays a stale argument). */
static void s_graph_case(const model_t *m, kern_backend_t *gpu) {
    const model_config_t *c = model_config(m);
    s_side_t a, b;
    s_side(&a, m, gpu);
    s_side(&b, m, gpu);
    model_dev_use_graphs(a.d, false);
    model_dev_use_graphs(b.d, true);
    int32_t blk[S_NBLK];
    for (int i = 0; i < S_NBLK; i++)
        blk[i] = i;
    model_seq_view_t sv = {blk, S_NBLK, NULL, 0, 0};
    size_t nv = (size_t)c->n_vocab;
    float *la = malloc(nv * 4), *lb = malloc(nv * 4);
    int same = 0, steps = 60;
    for (int side = 0; side < 2; side++) {
        s_side_t *x = side ? &b : &a;
        uint64_t rng = 13;
        int32_t tok[5], pos[5], zero[5] = {0};
        bool want[5];
        for (int i = 0; i < 5; i++) {
            tok[i] = (int32_t)(test_rand_u64(&rng) % nv);
            pos[i] = i;
            want[i] = i == 4;
        }
        model_batch_t pre = {5, tok, pos, zero, want, 1, &sv, NULL};
        model_dev_forward(x->d, &pre, &x->pool, side ? lb : la);
    }
    for (int t = 0; t < steps; t++) {
        int32_t tok = (int32_t)((t * 7 + 3) % (int)nv), pos = 5 + t, zero = 0;
        bool want = true;
        model_batch_t bt = {1, &tok, &pos, &zero, &want, 1, &sv, NULL};
        int ra = model_dev_forward(a.d, &bt, &a.pool, la);
        int rb = model_dev_forward(b.d, &bt, &b.pool, lb);
        same += ra == 1 && rb == 1 && !memcmp(la, lb, nv * 4);
    }
    model_dev_graph_stats_t g = model_dev_graph_stats(b.d);
    s_report(same == steps, "graphs: decode steps bit-equal to op by op", steps - same, 0);
    s_report(g.recorded >= 1 && g.replayed >= steps - 2 && g.failed == 0,
             "graphs: recorded once, replayed every later step", (double)g.replayed, steps - 2);
    free(la), free(lb);
    s_side_t *sides[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        sides[i]->be->free(sides[i]->be, sides[i]->pool.base);
        model_dev_destroy(&sides[i]->d);
    }
}

/* The write-through callback: the block's bytes, for comparison. */
typedef struct {
    uint8_t *got;
    size_t n;
    int calls;
} s_sink_t;

static void s_take_block(void *arg, const kv_cache_evicted_t *b) {
    s_sink_t *s = arg;
    if (b->bytes == s->n)
        memcpy(s->got, b->data, s->n);
    s->calls++;
}

static void s_tier_case(kern_backend_t *gpu) {
    kern_kv_shape_t sh = {2, 2, 64, S_BLOCK};
    kv_cache_config_t kc = {KV_FMT_F16, S_BLOCK, 8, KV_POLICY_LRU, true, gpu};
    kv_cache_t *kv = kv_cache_new(&sh, &kc);
    size_t bytes = kv_fmt_block_bytes(&sh, KV_FMT_F16);
    uint8_t *in = malloc(bytes), *out = malloc(bytes), *dev = malloc(bytes);
    if (!kv || !in || !out || !dev) {
        printf("FAIL: kv_cache_new on the CUDA backend\n");
        exit(1);
    }
    uint64_t rng = 3;
    for (size_t i = 0; i < bytes / 2; i++) /* finite halves: 0x3c00-ish, any sign */
        ((uint16_t *)in)[i] = (uint16_t)(0x3000 + test_rand_u64(&rng) % 0x1000) |
                              (uint16_t)((test_rand_u64(&rng) & 1) << 15);
    kv_meta_t m = {0};
    m.n_tokens = S_BLOCK;
    for (int i = 0; i < S_BLOCK; i++)
        m.tokens[i] = 100 + i;
    m.hash = kv_hash_block(0, m.tokens, S_BLOCK);
    int rc = kv_cache_insert(kv, &m, KV_FMT_F16, in, bytes);
    /* attach it, then write position 3: the shared block is copied on the device first */
    kv_seq_t q = {0};
    int32_t toks[S_BLOCK + 1];
    memcpy(toks, m.tokens, sizeof m.tokens[0] * S_BLOCK);
    toks[S_BLOCK] = 7;
    int got = kv_cache_attach_prefix(kv, &q, toks, S_BLOCK + 1);
    rc = rc ? rc : kv_cache_reserve(kv, &q, 3, S_BLOCK + 1);
    const kern_kv_pool_t *p = kv_cache_pool(kv);
    int copy = q.n ? q.blocks[0] : -1;
    bool cow = !rc && got == S_BLOCK && copy >= 0 && gpu->sync(gpu) == 0 &&
               gpu->download(gpu, dev, p->base + (size_t)copy * p->block_bytes, bytes) == 0 &&
               !memcmp(dev, in, bytes);
    s_report(cow, "T0 on CUDA: copy-on-write copy equals its source", !cow, 0);
    kv_cache_release(kv, &q);
    /* the inserted block, cached and unreferenced, is evicted for a sequence that needs
     * every block: the callback sees its bytes, moved out of device memory */
    s_sink_t sink = {out, bytes, 0};
    kv_cache_on_evict(kv, s_take_block, &sink);
    kv_seq_t big = {0};
    rc = kv_cache_reserve(kv, &big, 0, 8 * S_BLOCK); /* every block: the cached one evicted */
    bool round = !rc && sink.calls == 1 && !memcmp(out, in, bytes);
    s_report(round, "T0 on CUDA: host -> device -> host, byte for byte", !round, 0);
    kv_cache_release(kv, &big);
    kv_cache_on_evict(kv, NULL, NULL);
    /* 2000 round trips: nothing grows on the device */
    size_t free0 = 0, free1 = 0, total = 0;
    kern_cuda_mem_info(gpu->impl, &free0, &total);
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        m.tokens[0] = 1000 + i;
        m.hash = kv_hash_block(0, m.tokens, S_BLOCK);
        bad += kv_cache_insert(kv, &m, KV_FMT_F16, in, bytes) != 0;
    }
    kern_cuda_mem_info(gpu->impl, &free1, &total);
    kv_cache_stats_t st = kv_cache_stats(kv);
    bool steady = bad == 0 && st.move_errors == 0 && free1 + (1 << 20) >= free0;
    s_report(steady, "T0 on CUDA: 2000 inserts, no error, device memory steady",
             (double)free0 - (double)free1, 1 << 20);
    kv_cache_destroy(&kv);
    free(in), free(out), free(dev);
}

int main(void) {
    if (kern_cuda_device_count() < 1)
        test_skip(false, "no CUDA device"); /* CI may lack a GPU: a skip there too */
    kern_backend_t *gpu = kern_backend_cuda_new(0), *cpu = kern_backend_cpu_new(NULL);
    test_synth_fixture_t f;
    test_synth_t sc = {.seed = 5, .n_vocab = 96};
    if (!gpu || !cpu || test_synth_open(&f, "cuda-model", &sc)) {
        printf("FAIL: backends or the synthetic model\n");
        return 1;
    }
    s_forward_case(f.model, gpu, cpu);
    s_graph_case(f.model, gpu);
    s_tier_case(gpu);
    test_synth_close(&f);
    kern_backend_destroy(&gpu);
    kern_backend_destroy(&cpu);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
#else
int main(void) {
    test_skip(false, "built without CUDA (STRATA_CUDA=OFF or no nvcc)");
}
#endif
