/* test_model_graphs.c - model_dev's decode graphs (CUDA graphs on a GPU) checked without a
 * GPU: a CPU backend that records instead of running between capture_begin and capture_end,
 * as a CUDA stream capture does (every op's arguments kept: pointers, sizes, scalars), and
 * replays the record.  Whatever a forward pass gives an op that is neither in the graph's
 * key (tokens, wanted rows, the context bound's bucket, the pool) nor in backend memory
 * would be replayed stale -- so decode steps through replayed graphs must give the logits
 * of the same steps run op by op, bit for bit: two sequences of the synthetic model, 40
 * decode steps (300) across a context bucket, the batch changing shape (both sequences, then
 * one).
 * Also: a recording that fails leaves its shape running op by op with the right numbers;
 * a stale graph (-ESTALE) is recorded again; graphs off runs nothing recorded. */
#include "model_device.h"
#include "test_util.h"

#include "model.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S_BLOCK 16
#define S_NBLK 24 /* per sequence: 384 positions, two context buckets */

typedef enum {
    OP_MATMUL,
    OP_ATTN,
    OP_KV,
    OP_NORM,
    OP_ROPE,
    OP_ADD,
    OP_SWIGLU,
    OP_GEGLU,
    OP_SCALE,
    OP_EMBED
} s_op_kind_t;

/* One recorded op: its kind and every argument. */
typedef struct {
    s_op_kind_t kind;
    kern_type_t wt;
    int64_t k, n64;
    int a, b, c, d;
    const void *p0, *p1, *p2;
    void *out;
    size_t s0, s1, s2;
    float f;
    bool flag;
    kern_backend_attn_t attn;
    kern_backend_kv_t kv;
} s_rec_t;

typedef struct {
    s_rec_t *ops;
    int n, cap;
} s_graph_t;

static kern_backend_t S_CPU; /* the real CPU backend's table (its functions) */
static s_graph_t *S_REC;     /* recording into this, or NULL: run */
static bool S_FAIL_CAPTURE;  /* capture_end fails */
static bool S_STALE_ONCE;    /* the next replay answers -ESTALE */
static int S_RECORDED_OPS;   /* ops recorded (not run) */

static void s_push(const s_rec_t *r) {
    if (S_REC->n == S_REC->cap) {
        S_REC->cap = S_REC->cap ? 2 * S_REC->cap : 256;
        S_REC->ops = realloc(S_REC->ops, (size_t)S_REC->cap * sizeof *S_REC->ops);
        ck_assert_ptr_nonnull(S_REC->ops);
    }
    S_REC->ops[S_REC->n++] = *r;
    S_RECORDED_OPS++;
}

static int r_matmul(kern_backend_t *be, kern_type_t wt, int64_t k, int nr, int nc, const void *w,
                    size_t ws, const float *x, size_t xs, float *out, size_t os) {
    if (!S_REC)
        return S_CPU.matmul[wt](be, wt, k, nr, nc, w, ws, x, xs, out, os);
    s_push(&(s_rec_t){.kind = OP_MATMUL,
                      .wt = wt,
                      .k = k,
                      .a = nr,
                      .b = nc,
                      .p0 = w,
                      .s0 = ws,
                      .p1 = x,
                      .s1 = xs,
                      .out = out,
                      .s2 = os});
    return 0;
}
static int r_attention(kern_backend_t *be, const kern_backend_attn_t *a) {
    if (!S_REC)
        return S_CPU.attention(be, a);
    s_push(&(s_rec_t){.kind = OP_ATTN, .attn = *a});
    return 0;
}
static int r_kv_store(kern_backend_t *be, const kern_backend_kv_t *a) {
    if (!S_REC)
        return S_CPU.kv_store(be, a);
    s_push(&(s_rec_t){.kind = OP_KV, .kv = *a});
    return 0;
}
static int r_rmsnorm(kern_backend_t *be, float *out, const float *x, const float *w, int n_rows,
                     int n, float eps) {
    if (!S_REC)
        return S_CPU.rmsnorm(be, out, x, w, n_rows, n, eps);
    s_push(
        &(s_rec_t){.kind = OP_NORM, .out = out, .p0 = x, .p1 = w, .a = n_rows, .b = n, .f = eps});
    return 0;
}
static int r_rope(kern_backend_t *be, float *x, int n_tok, int n_heads, int head_dim, int n_rot,
                  const float *cs, bool neox) {
    if (!S_REC)
        return S_CPU.rope(be, x, n_tok, n_heads, head_dim, n_rot, cs, neox);
    s_push(&(s_rec_t){.kind = OP_ROPE,
                      .out = x,
                      .a = n_tok,
                      .b = n_heads,
                      .c = head_dim,
                      .d = n_rot,
                      .p0 = cs,
                      .flag = neox});
    return 0;
}
static int r_add(kern_backend_t *be, float *x, const float *y, int n_rows, int dim, size_t ys) {
    if (!S_REC)
        return S_CPU.add(be, x, y, n_rows, dim, ys);
    s_push(&(s_rec_t){.kind = OP_ADD, .out = x, .p0 = y, .a = n_rows, .b = dim, .s0 = ys});
    return 0;
}
static int r_swiglu(kern_backend_t *be, float *out, const float *g, const float *u, int64_t n) {
    if (!S_REC)
        return S_CPU.swiglu(be, out, g, u, n);
    s_push(&(s_rec_t){.kind = OP_SWIGLU, .out = out, .p0 = g, .p1 = u, .n64 = n});
    return 0;
}
static int r_geglu(kern_backend_t *be, float *out, const float *g, const float *u, int64_t n) {
    if (!S_REC)
        return S_CPU.geglu(be, out, g, u, n);
    s_push(&(s_rec_t){.kind = OP_GEGLU, .out = out, .p0 = g, .p1 = u, .n64 = n});
    return 0;
}
static int r_scale(kern_backend_t *be, float *x, int64_t n, float sc) {
    if (!S_REC)
        return S_CPU.scale(be, x, n, sc);
    s_push(&(s_rec_t){.kind = OP_SCALE, .out = x, .n64 = n, .f = sc});
    return 0;
}
static int r_embed(kern_backend_t *be, kern_type_t wt, const void *table, size_t rb, int n_rows,
                   const int32_t *ids, int n_tok, int dim, float *out) {
    if (!S_REC)
        return S_CPU.embed(be, wt, table, rb, n_rows, ids, n_tok, dim, out);
    s_push(&(s_rec_t){.kind = OP_EMBED,
                      .wt = wt,
                      .p0 = table,
                      .s0 = rb,
                      .a = n_rows,
                      .p1 = ids,
                      .b = n_tok,
                      .c = dim,
                      .out = out});
    return 0;
}

static int r_capture_begin(kern_backend_t *be) {
    (void)be;
    ck_assert_ptr_null(S_REC);
    S_REC = calloc(1, sizeof *S_REC);
    return 0;
}
static int r_capture_end(kern_backend_t *be, void **graph) {
    (void)be;
    s_graph_t *g = S_REC;
    S_REC = NULL;
    if (S_FAIL_CAPTURE) {
        free(g->ops);
        free(g);
        *graph = NULL;
        return -EIO;
    }
    *graph = g;
    return 0;
}
static int r_replay(kern_backend_t *be, void *graph) {
    if (S_STALE_ONCE) {
        S_STALE_ONCE = false;
        return -ESTALE;
    }
    const s_graph_t *g = graph;
    int rc = 0;
    for (int i = 0; !rc && i < g->n; i++) {
        const s_rec_t *r = &g->ops[i];
        switch (r->kind) {
        case OP_MATMUL:
            rc = S_CPU.matmul[r->wt](be, r->wt, r->k, r->a, r->b, r->p0, r->s0, r->p1, r->s1,
                                     r->out, r->s2);
            break;
        case OP_ATTN:
            rc = S_CPU.attention(be, &r->attn);
            break;
        case OP_KV:
            rc = S_CPU.kv_store(be, &r->kv);
            break;
        case OP_NORM:
            rc = S_CPU.rmsnorm(be, r->out, r->p0, r->p1, r->a, r->b, r->f);
            break;
        case OP_ROPE:
            rc = S_CPU.rope(be, r->out, r->a, r->b, r->c, r->d, r->p0, r->flag);
            break;
        case OP_ADD:
            rc = S_CPU.add(be, r->out, r->p0, r->a, r->b, r->s0);
            break;
        case OP_SWIGLU:
            rc = S_CPU.swiglu(be, r->out, r->p0, r->p1, r->n64);
            break;
        case OP_GEGLU:
            rc = S_CPU.geglu(be, r->out, r->p0, r->p1, r->n64);
            break;
        case OP_SCALE:
            rc = S_CPU.scale(be, r->out, r->n64, r->f);
            break;
        case OP_EMBED:
            rc = S_CPU.embed(be, r->wt, r->p0, r->s0, r->a, r->p1, r->b, r->c, r->out);
            break;
        }
    }
    return rc;
}
static void r_graph_free(kern_backend_t *be, void *graph) {
    (void)be;
    s_graph_t *g = graph;
    if (g)
        free(g->ops);
    free(g);
}

/* The CPU backend with every op the forward uses recorded while capturing. */
static kern_backend_t *s_recording_backend(void) {
    kern_backend_t *be = kern_backend_cpu_new(NULL);
    ck_assert_ptr_nonnull(be);
    S_CPU = *be;
    for (int t = 0; t < KERN_TYPE_COUNT; t++)
        if (be->matmul[t])
            be->matmul[t] = r_matmul;
    be->attention = r_attention;
    be->kv_store = r_kv_store;
    be->rmsnorm = r_rmsnorm;
    be->rope = r_rope;
    be->add = r_add;
    be->swiglu = r_swiglu;
    be->geglu = r_geglu;
    be->scale = r_scale;
    be->embed = r_embed;
    be->capture_begin = r_capture_begin;
    be->capture_end = r_capture_end;
    be->replay = r_replay;
    be->graph_free = r_graph_free;
    return be;
}

/* n_steps decode steps of two sequences after a prefill of 5 and 9 tokens (the second stops
 * decoding at step n_steps / 2, so the batch changes shape), every step's logits into out
 * (rows in order), through d over pool. */
static int s_run(model_dev_t *d, const model_t *m, kern_kv_pool_t *pool, int n_steps, float *out) {
    const model_config_t *c = model_config(m);
    int32_t blk0[S_NBLK], blk1[S_NBLK];
    for (int i = 0; i < S_NBLK; i++) {
        blk0[i] = 2 * i;
        blk1[i] = 2 * i + 1;
    }
    model_seq_view_t seqs[2] = {{blk0, S_NBLK, NULL, 0, 0}, {blk1, S_NBLK, NULL, 0, 0}};
    int32_t tok[16], pos[16], seq[16];
    bool want[16];
    uint64_t rng = 11;
    int len[2] = {0, 0}, rows = 0;
    for (int step = 0; step <= n_steps; step++) {
        int n = 0;
        for (int s = 0; s < 2; s++) {
            int k = step == 0 ? (s ? 9 : 5) : (s == 1 && step > n_steps / 2 ? 0 : 1);
            for (int i = 0; i < k; i++, n++) {
                tok[n] = (int32_t)(test_rand_u64(&rng) % (uint64_t)c->n_vocab);
                pos[n] = len[s]++;
                seq[n] = s;
                want[n] = i == k - 1;
            }
        }
        model_batch_t b = {n, tok, pos, seq, want, 2, seqs, NULL};
        int got = model_dev_forward(d, &b, pool, out + (size_t)rows * c->n_vocab);
        ck_assert_int_ge(got, 1);
        rows += got;
    }
    return rows;
}

START_TEST(replayed_equals_op_by_op) {
    test_synth_fixture_t f;
    test_synth_t sc = {.seed = 9, .n_vocab = 80};
    ck_assert_int_eq(test_synth_open(&f, "graphs", &sc), 0);
    const model_config_t *c = model_config(f.model);
    kern_backend_t *be = s_recording_backend();
    char err[256];
    model_dev_t *plain = model_dev_new(f.model, be, 16, 2, S_NBLK, err, sizeof err);
    model_dev_t *graphed = model_dev_new(f.model, be, 16, 2, S_NBLK, err, sizeof err);
    ck_assert(plain && graphed);
    model_dev_use_graphs(plain, false);
    kern_kv_shape_t sh = {c->n_layer, c->n_head_kv, c->head_dim, S_BLOCK};
    kern_kv_pool_t pa, pb;
    ck_assert_int_eq(kern_kv_pool_init(&pa, &sh, KERN_F16, 2 * S_NBLK), 0);
    ck_assert_int_eq(kern_kv_pool_init(&pb, &sh, KERN_F16, 2 * S_NBLK), 0);
    const int steps = 300; /* past position 256: the second context bucket */
    float *la = malloc((size_t)(2 * steps + 4) * c->n_vocab * sizeof(float));
    float *lb = malloc((size_t)(2 * steps + 4) * c->n_vocab * sizeof(float));
    S_RECORDED_OPS = 0;
    int na = s_run(plain, f.model, &pa, steps, la);
    ck_assert_int_eq(S_RECORDED_OPS, 0); /* graphs off: nothing recorded */
    S_STALE_ONCE = false;
    int nb = s_run(graphed, f.model, &pb, steps, lb);
    ck_assert_int_eq(na, nb);
    ck_assert(!memcmp(la, lb, (size_t)na * c->n_vocab * sizeof(float)));
    ck_assert(!memcmp(pa.base, pb.base, pa.block_bytes * pa.n_blocks));
    model_dev_graph_stats_t g = model_dev_graph_stats(graphed);
    /* shapes: (2 tokens, 2 rows) in bucket 256, then (1, 1) in buckets 256 and 512: three
     * graphs; every decode step but each shape's first ran as one */
    ck_assert_int_eq(g.recorded, 3);
    ck_assert_int_eq(g.failed, 0);
    ck_assert_int_eq(g.replayed, steps - 3);
    fprintf(stderr, "graphs: %lld recorded, %lld replayed over %d decode steps\n",
            (long long)g.recorded, (long long)g.replayed, steps);
    free(la);
    free(lb);
    kern_kv_pool_free(&pa);
    kern_kv_pool_free(&pb);
    model_dev_destroy(&plain);
    model_dev_destroy(&graphed);
    kern_backend_destroy(&be);
    test_synth_close(&f);
}
END_TEST

START_TEST(failed_and_stale_recordings) {
    test_synth_fixture_t f;
    test_synth_t sc = {.seed = 9, .n_vocab = 80};
    ck_assert_int_eq(test_synth_open(&f, "graphs-fail", &sc), 0);
    const model_config_t *c = model_config(f.model);
    kern_backend_t *be = s_recording_backend();
    char err[256];
    model_dev_t *plain = model_dev_new(f.model, be, 16, 2, S_NBLK, err, sizeof err);
    model_dev_t *d = model_dev_new(f.model, be, 16, 2, S_NBLK, err, sizeof err);
    model_dev_use_graphs(plain, false);
    kern_kv_shape_t sh = {c->n_layer, c->n_head_kv, c->head_dim, S_BLOCK};
    kern_kv_pool_t pa, pb;
    ck_assert_int_eq(kern_kv_pool_init(&pa, &sh, KERN_F16, 2 * S_NBLK), 0);
    ck_assert_int_eq(kern_kv_pool_init(&pb, &sh, KERN_F16, 2 * S_NBLK), 0);
    float *la = malloc((size_t)64 * c->n_vocab * sizeof(float));
    float *lb = malloc((size_t)64 * c->n_vocab * sizeof(float));
    int na = s_run(plain, f.model, &pa, 20, la);
    S_FAIL_CAPTURE = true; /* every recording fails: op by op, the same numbers */
    int nb = s_run(d, f.model, &pb, 20, lb);
    S_FAIL_CAPTURE = false;
    ck_assert_int_eq(na, nb);
    ck_assert(!memcmp(la, lb, (size_t)na * c->n_vocab * sizeof(float)));
    model_dev_graph_stats_t g = model_dev_graph_stats(d);
    ck_assert_int_eq(g.recorded, 0);
    ck_assert_int_eq(g.replayed, 0);
    ck_assert_int_eq(g.failed, 2); /* each shape tried once, then left op by op */
    /* graphs that work, then one gone stale (the backend's scratch moved): recorded again,
     * the numbers unchanged (the same steps again over the same pool) */
    model_dev_destroy(&d);
    d = model_dev_new(f.model, be, 16, 2, S_NBLK, err, sizeof err);
    ck_assert_int_eq(s_run(d, f.model, &pb, 20, lb), na);
    ck_assert(!memcmp(la, lb, (size_t)na * c->n_vocab * sizeof(float)));
    g = model_dev_graph_stats(d);
    ck_assert_int_eq(g.recorded, 2);
    memset(lb, 0, (size_t)64 * c->n_vocab * sizeof(float));
    S_STALE_ONCE = true;
    ck_assert_int_eq(s_run(d, f.model, &pb, 20, lb), na);
    ck_assert(!memcmp(la, lb, (size_t)na * c->n_vocab * sizeof(float)));
    g = model_dev_graph_stats(d);
    ck_assert_int_eq(g.stale, 1);
    ck_assert_int_eq(g.recorded, 3);
    ck_assert_int_eq(g.failed, 0);
    free(la);
    free(lb);
    kern_kv_pool_free(&pa);
    kern_kv_pool_free(&pb);
    model_dev_destroy(&plain);
    model_dev_destroy(&d);
    kern_backend_destroy(&be);
    test_synth_close(&f);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("model_graphs");
    TCase *tc = tcase_create("graphs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, replayed_equals_op_by_op);
    tcase_add_test(tc, failed_and_stale_recordings);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
