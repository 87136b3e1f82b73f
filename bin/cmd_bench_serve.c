/* cmd_bench_serve.c - `strata bench serve`: a load generator for a running
 * service.  For each concurrency level C (default 1, 4, 16) it runs C client
 * threads, each with its own connection (clients/c), sending greedy requests
 * from a fixed prompt set back to back, and reports aggregate generated
 * tokens/s, time to first token and time per output token at p50 and p99. */
#include "cli.h"
#include "cli_flags.h"

#include "strata_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_prompts[] = {
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three fruits that are red.",
    "What is the capital of France? Answer briefly.",
    "Describe a cat to someone who has never seen one.",
    "Give me a tip for learning to program.",
    "Why is the sky blue?",
    "Tell me a fun fact about space.",
};
#define N_PROMPTS ((int)(sizeof s_prompts / sizeof s_prompts[0]))

/* One client thread's job and results (owned by the thread while it runs). */
typedef struct {
    const char *endpoint; /* server */
    int index;            /* client number (picks prompts) */
    int requests;         /* to send */
    int max_tokens;       /* per request */
    double *ttft;         /* (requests) seconds */
    double *tpot;         /* (requests) seconds per token after the first; < 0: n/a */
    long tokens;          /* generated, all requests */
    int failed;           /* requests that ended in an error */
    char err[256];        /* last error */
    double t_first;       /* scratch: first token of the current request */
    double t_sent;
} s_job_t;

static int s_on_token(void *user, int index, int32_t token, const char *text, size_t len) {
    (void)token, (void)text, (void)len;
    s_job_t *j = user;
    if (index == 0)
        j->t_first = cli_now();
    return 0;
}

static void *s_client(void *arg) {
    s_job_t *j = arg;
    strata_client_t *c = strata_client_new(j->endpoint, 120000);
    if (!c) {
        snprintf(j->err, sizeof j->err, "cannot connect to %s", j->endpoint);
        j->failed = j->requests;
        return NULL;
    }
    for (int r = 0; r < j->requests; r++) {
        strata_gen_params_t p;
        strata_gen_params_default(&p);
        strata_chat_t msg = {"user", s_prompts[(j->index + r) % N_PROMPTS]};
        p.messages = &msg;
        p.n_messages = 1;
        p.max_tokens = j->max_tokens;
        p.temperature = 0;
        strata_done_t done;
        memset(&done, 0, sizeof done);
        j->t_first = 0;
        j->t_sent = cli_now();
        int rc = strata_client_generate(c, &p, s_on_token, j, &done);
        double t_end = cli_now();
        if (rc < 0) {
            snprintf(j->err, sizeof j->err, "%s", strata_client_error(c));
            j->failed++;
            j->ttft[r] = j->tpot[r] = -1;
            continue;
        }
        int n = done.completion_tokens;
        j->tokens += n;
        j->ttft[r] = j->t_first ? j->t_first - j->t_sent : -1;
        j->tpot[r] = n > 1 && j->t_first ? (t_end - j->t_first) / (n - 1) : -1;
        strata_done_free(&done);
    }
    strata_client_destroy(&c);
    return NULL;
}

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentile q of the n non-negative values of v (sorted in place); -1 if none. */
static double s_pct(double *v, int n, double q) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] >= 0)
            v[k++] = v[i];
    if (!k)
        return -1;
    qsort(v, (size_t)k, sizeof *v, s_cmp);
    int i = (int)(q * (k - 1) + 0.5);
    return v[i];
}

typedef struct {
    const char *endpoint; /* --endpoint */
    const char *clients;  /* -c: concurrency levels */
    int requests;         /* -r: per client per run */
    int max_tokens;       /* -n */
} s_opts_t;

#define S_O(member) ACTOR_OPT_FIELD(s_opts_t, member)
static const cli_flag_t s_flags[] = {
    {.name = "endpoint",
     .arg = "EP",
     .opt = {.type = ACTOR_OPT_STRING, .help = "server", .field = S_O(endpoint)}},
    {.name = "clients",
     .short_name = 'c',
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "concurrency levels (1..1024 each), one run each",
             .field = S_O(clients)}},
    {.name = "requests",
     .short_name = 'r',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 100000,
             .help = "requests per client per run",
             .field = S_O(requests)}},
    {.name = "max-tokens",
     .short_name = 'n',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = MSG_MAX_TOKENS,
             .help = "tokens per request",
             .field = S_O(max_tokens)}},
    {NULL},
};
#undef S_O

static const cli_cmd_t s_cmd = {
    "bench serve",
    "usage: strata bench serve [options]     (also: strata bench-serve)\n"
    "\n"
    "Load generator for a running `strata serve`: for each concurrency level, that many\n"
    "clients send greedy chat requests from a fixed prompt set back to back.\n",
    NULL,
    {{s_flags, 0}, {NULL}},
};

/* One run of nc clients, -r requests each: one line of the table.  0 or 1. */
static int s_level(const s_opts_t *o, int nc) {
    s_job_t *jobs = calloc((size_t)nc, sizeof *jobs);
    pthread_t *th = calloc((size_t)nc, sizeof *th);
    int total = nc * o->requests, rc = 0;
    double *ttft = malloc((size_t)total * sizeof *ttft);
    double *tpot = malloc((size_t)total * sizeof *tpot);
    if (!jobs || !th || !ttft || !tpot) {
        fprintf(stderr, "strata bench serve: out of memory\n");
        free(jobs), free(th), free(ttft), free(tpot);
        return 1;
    }
    double t0 = cli_now();
    for (int i = 0; i < nc; i++) {
        jobs[i] = (s_job_t){.endpoint = o->endpoint,
                            .index = i,
                            .requests = o->requests,
                            .max_tokens = o->max_tokens,
                            .ttft = ttft + i * o->requests,
                            .tpot = tpot + i * o->requests};
        pthread_create(&th[i], NULL, s_client, &jobs[i]);
    }
    long tokens = 0;
    int failed = 0;
    const char *err = NULL;
    for (int i = 0; i < nc; i++) {
        pthread_join(th[i], NULL);
        tokens += jobs[i].tokens;
        failed += jobs[i].failed;
        if (jobs[i].failed && !err)
            err = jobs[i].err;
    }
    double dt = cli_now() - t0;
    double t50 = s_pct(ttft, total, 0.5), t99 = s_pct(ttft, total, 0.99);
    double p50 = s_pct(tpot, total, 0.5), p99 = s_pct(tpot, total, 0.99);
    printf("%8d %10d %12.1f %8.1fms %8.1fms %8.2fms %8.2fms %7d\n", nc, total, tokens / dt,
           t50 * 1e3, t99 * 1e3, p50 * 1e3, p99 * 1e3, failed);
    fflush(stdout);
    if (failed) {
        fprintf(stderr, "strata bench serve: %d requests failed (%s)\n", failed, err ? err : "?");
        rc = 1;
    }
    free(jobs), free(th), free(ttft), free(tpot);
    return rc;
}

int cmd_bench_serve(int argc, char **argv) {
    s_opts_t o = {"tcp://127.0.0.1:5555", "1,4,16", 2, 32};
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, &o, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (next < argc) {
        fprintf(stderr, "strata bench serve: unexpected argument '%s'\n", argv[next]);
        return 2;
    }
    int n_levels = 0;
    int32_t *levels = cli_parse_ids(o.clients, &n_levels);
    if (!levels || n_levels < 1) {
        fprintf(stderr, "strata bench serve: --clients must be a list like 1,4,16\n");
        free(levels);
        return 2;
    }
    for (int i = 0; i < n_levels; i++)
        if (levels[i] < 1 || levels[i] > 1024) {
            fprintf(stderr, "strata bench serve: clients must be in 1..1024\n");
            free(levels);
            return 2;
        }
    printf("strata bench serve: %s, %d requests per client, %d tokens each, greedy\n", o.endpoint,
           o.requests, o.max_tokens);
    printf("%8s %10s %12s %10s %10s %10s %10s %7s\n", "clients", "requests", "gen tok/s",
           "ttft p50", "ttft p99", "tpot p50", "tpot p99", "errors");
    for (int l = 0; l < n_levels; l++)
        rc |= s_level(&o, levels[l]);
    free(levels);
    return rc;
}
