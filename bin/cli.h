/* cli.h - pieces shared by the strata subcommands: model path defaults,
 * option parsing helpers, a simple single-sequence runner over the library. */
#ifndef CLI_H
#define CLI_H

#include "model.h"
#include "model_sampler.h"
#include "model_tokenizer.h"
#include <stdbool.h>
#include <stdint.h>

#define CLI_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

/* The default model path: $STRATA_MODEL, else $STRATA_MODEL_DIR (or
 * ~/.cache/strata/models) / CLI_DEFAULT_MODEL_FILE.  Static buffer. */
const char *cli_default_model(void);
/* Threads to use by default: the online CPUs. */
int cli_default_threads(void);
double cli_now(void); /* monotonic seconds */
/* Read bandwidth in GB/s (1e9 bytes/s) of `threads` threads summing a buffer of `bytes`
 * (each its own contiguous share), the best of `passes`; 0 when out of memory
 * (bin/cli_bandwidth.c). */
double cli_read_bandwidth(int threads, size_t bytes, int passes);

/* Parse helpers: print "strata CMD: bad value for OPT: VAL" and return false. */
bool cli_int(const char *cmd, const char *opt, const char *val, long lo, long hi, long *out);
bool cli_float(const char *cmd, const char *opt, const char *val, double lo, double hi,
               double *out);
/* Parse "1 2 3" or "1,2,3" into a malloc'd array; NULL on a bad list. */
int32_t *cli_parse_ids(const char *s, int *n);
/* Read a whole file (or "-" for stdin) into a malloc'd NUL-terminated buffer. */
char *cli_read_file(const char *path, size_t *len);

/* A loaded model with its tokenizer, one sequence's KV and a context: what
 * generate, perplexity and bench-model share. */
typedef struct {
    model_t *model;
    model_tokenizer_t *tok;
    model_ctx_t *ctx;
    kern_kv_pool_t kv;
    int32_t *blocks; /* (kv.n_blocks) identity block table */
    int max_ctx;     /* positions this runner holds */
    int ubatch;      /* tokens per forward pass in prefill */
    float *logits;   /* (ubatch, n_vocab) */
    int32_t *pos;    /* (ubatch) batch positions */
    int32_t *seq;    /* (ubatch) batch sequence ids (all 0) */
    bool *want;      /* (ubatch) which tokens want logits */
} cli_runner_t;

/* Load model + tokenizer.  Prints one "strata CMD: ..." line and returns
 * false on failure. */
bool cli_runner_open(cli_runner_t *r, const char *cmd, const char *path);
/* Size KV for max_ctx positions, prefill batches of ubatch, and threads
 * (replacing any earlier reservation).  false with a message on failure. */
bool cli_runner_reserve(cli_runner_t *r, const char *cmd, int max_ctx, int ubatch, int threads,
                        kern_type_t kv_type);
void cli_runner_close(cli_runner_t *r);
/* Run tokens[0..n) at positions pos0.. of the single sequence.  If all_logits,
 * logits of every token go to out (n, n_vocab); else only the last token's
 * (n_vocab).  Returns 0 or a negative errno. */
int cli_runner_eval(cli_runner_t *r, const int32_t *tokens, int n, int pos0, bool all_logits,
                    float *out);

int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_kv_quality(int argc, char **argv);
int cmd_bench_model(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_client(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_synth_model(int argc, char **argv);
int cmd_audit(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_actor(int argc, char **argv);
int cmd_bench_serve(int argc, char **argv);
int cmd_grammar(int argc, char **argv);       /* bin/cmd_grammar.c */
int cmd_ctl(int argc, char **argv);           /* bin/cmd_ctl.c */
int cmd_semcache_eval(int argc, char **argv); /* bin/cmd_semcache_eval.c */

/* The default control endpoint of the server whose client endpoint is client_ep (and
 * host, or NULL): ipc://$XDG_RUNTIME_DIR/strata-ctl-PORT[-HOST] (else under /tmp), PORT
 * the client endpoint's port (or its text, made a file name).  Written into buf. */
const char *cli_ctl_default(const char *client_ep, const char *host, char *buf, size_t len);

#endif
