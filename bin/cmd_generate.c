/* cmd_generate.c - `strata generate`: prompt in, streamed text out, using the
 * library directly (no actors).  This is the reference the service must
 * reproduce token for token under greedy decoding. */
#include "cli.h"
#include "cli_flags.h"
#include "kv_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* generate's own flags */
typedef struct {
    const char *prompt; /* -p */
    const char *file;   /* -f */
    const char *ids;    /* --ids */
    int n_predict;      /* -n */
    bool chat;          /* --chat */
    const char *system; /* --system */
    int ctx;            /* --ctx (0: prompt + n-predict) */
    bool print_ids;     /* --print-ids */
    bool ignore_eos;    /* --ignore-eos */
} s_gen_opts_t;

typedef struct {
    cli_model_opts_t m;
    s_gen_opts_t g;
    cli_kv_opts_t kv;
    cli_sample_opts_t s;
} s_cfg_t;

#define S_GEN(member) ACTOR_OPT_FIELD(s_gen_opts_t, member)
static const cli_flag_t s_gen_flags[] = {
    {.name = "prompt",
     .short_name = 'p',
     .arg = "TEXT",
     .opt = {.type = ACTOR_OPT_STRING, .help = "prompt text", .field = S_GEN(prompt)}},
    {.name = "file",
     .short_name = 'f',
     .arg = "PATH",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "read the prompt from a file ('-' for stdin)",
             .field = S_GEN(file)}},
    {.name = "ids",
     .arg = "LIST",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "prompt as token ids (\"1 2 3\"), no tokenization",
             .field = S_GEN(ids)}},
    {.name = "n-predict",
     .short_name = 'n',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 1 << 20,
             .help = "tokens to generate at most",
             .field = S_GEN(n_predict)}},
    {.name = "chat",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "wrap the prompt as a user message in the chat template",
             .field = S_GEN(chat)}},
    {.name = "system",
     .arg = "TEXT",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "system message (with --chat)",
             .field = S_GEN(system)}},
    {.name = "ctx",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1 << 20,
             .help = "context positions",
             .field = S_GEN(ctx)},
     .def_text = "prompt + n-predict"},
    {.name = "ignore-eos",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help =
                 "never end: end-of-generation tokens are banned from sampling (generate exactly "
                 "-n tokens)",
             .field = S_GEN(ignore_eos)}},
    {.name = "print-ids",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "print generated token ids (one line) instead of text",
             .field = S_GEN(print_ids)}},
    {NULL},
};
#undef S_GEN

static const cli_cmd_t s_cmd = {
    "generate",
    "usage: strata generate [-m MODEL] (-p PROMPT | -f FILE | --ids \"1 2 3\") [options]\n"
    "\n"
    "Streams the continuation to stdout; prompt and generation speed go to stderr.\n",
    NULL,
    {{cli_model_flags, offsetof(s_cfg_t, m)},
     {cli_threads_flags, offsetof(s_cfg_t, m)},
     {s_gen_flags, offsetof(s_cfg_t, g)},
     {cli_kv_flags, offsetof(s_cfg_t, kv)},
     {cli_sample_flags, offsetof(s_cfg_t, s)},
     {NULL}},
};

/* Parse argv into c.  CLI_PARSED, or the exit status after a message. */
static int s_parse(int argc, char **argv, s_cfg_t *c) {
    memset(c, 0, sizeof *c);
    cli_model_opts_default(&c->m);
    cli_kv_opts_default(&c->kv);
    cli_sample_opts_default(&c->s);
    c->g.n_predict = 256;
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, c, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (next < argc) {
        fprintf(stderr, "strata generate: unexpected argument '%s'\n", argv[next]);
        return 2;
    }
    if (!!c->g.prompt + !!c->g.file + !!c->g.ids != 1) {
        fprintf(stderr, "strata generate: give exactly one of -p PROMPT, -f FILE or --ids LIST "
                        "(see --help)\n");
        return 2;
    }
    return CLI_PARSED;
}

/* The sampler's parameters from the sampling flags. */
static model_sampler_params_t s_sampler_params(const cli_sample_opts_t *s) {
    model_sampler_params_t sp = model_sampler_defaults();
    sp.temperature = (float)s->temp;
    sp.top_k = s->top_k;
    sp.top_p = (float)s->top_p;
    sp.min_p = (float)s->min_p;
    sp.repeat_penalty = (float)s->repeat_penalty;
    sp.repeat_last_n = s->repeat_last_n;
    sp.seed = s->seed;
    return sp;
}

/* The text prompt's tokens: rendered by the chat template with --chat.  NULL after a message. */
static int32_t *s_text_tokens(cli_runner_t *r, const s_gen_opts_t *g, const char *prompt, int *n) {
    char *rendered = NULL;
    if (g->chat) {
        model_chat_msg_t msgs[2];
        int nm = 0;
        if (g->system)
            msgs[nm++] = (model_chat_msg_t){"system", g->system};
        msgs[nm++] = (model_chat_msg_t){"user", prompt};
        rendered = model_tokenizer_chat(r->tok, msgs, nm, true);
        if (!rendered) {
            fprintf(stderr, "strata generate: this model has no chat template strata knows\n");
            return NULL;
        }
    }
    const char *t = rendered ? rendered : prompt;
    bool bos = model_tokenizer_add_bos(r->tok);
    int need = model_tokenizer_encode(r->tok, t, strlen(t), bos, g->chat, NULL, 0);
    int32_t *toks = malloc((size_t)(need > 0 ? need : 1) * sizeof *toks);
    *n = 0;
    if (need > 0 && toks)
        *n = model_tokenizer_encode(r->tok, t, strlen(t), bos, g->chat, toks, need);
    free(rendered);
    if (*n <= 0) {
        fprintf(stderr, "strata generate: the prompt is empty\n");
        free(toks);
        return NULL;
    }
    return toks;
}

/* The prompt's tokens (--ids, or the text of -p / -f), each checked against the
 * vocabulary.  NULL after a message. */
static int32_t *s_prompt_tokens(cli_runner_t *r, const s_gen_opts_t *g, const char *prompt,
                                int *n) {
    int32_t *toks;
    if (g->ids) {
        toks = cli_parse_ids(g->ids, n);
        if (!toks || *n == 0) {
            fprintf(stderr, "strata generate: --ids must be a non-empty list of token ids\n");
            free(toks);
            return NULL;
        }
    } else if (!(toks = s_text_tokens(r, g, prompt, n))) {
        return NULL;
    }
    const model_config_t *cfg = model_config(r->model);
    for (int i = 0; i < *n; i++)
        if (toks[i] < 0 || toks[i] >= cfg->n_vocab) {
            fprintf(stderr, "strata generate: token id %d out of range (vocabulary %d)\n", toks[i],
                    cfg->n_vocab);
            free(toks);
            return NULL;
        }
    return toks;
}

/* Size the runner for the prompt and -n (or --ctx).  false after a message. */
static bool s_reserve(cli_runner_t *r, const s_cfg_t *c, int n_prompt) {
    const model_config_t *cfg = model_config(r->model);
    int max_ctx = c->g.ctx ? c->g.ctx : n_prompt + c->g.n_predict;
    if (n_prompt + c->g.n_predict > max_ctx) {
        fprintf(stderr, "strata generate: prompt (%d tokens) + n-predict (%d) exceed --ctx %d\n",
                n_prompt, c->g.n_predict, max_ctx);
        return false;
    }
    if (max_ctx > cfg->n_ctx_train)
        fprintf(stderr,
                "strata generate: warning: %d positions exceed the model's training "
                "context of %d\n",
                max_ctx, cfg->n_ctx_train);
    return cli_runner_reserve(r, "generate", max_ctx, 512, c->m.threads,
                              (kern_type_t)kv_fmt_pool_type(c->kv.kv_fmt));
}

/* One generation's state beside the runner. */
typedef struct {
    model_sampler_params_t sp;
    model_sampler_t *sampler;
    model_stopper_t stopper;
    int32_t *hist; /* (n_prompt + n_predict + 1) prompt and generated tokens */
    int n_hist;
    int32_t *eog; /* (n_eog) banned ids: the end-of-generation tokens with --ignore-eos */
    int n_eog;
    float *logits; /* (n_vocab) */
    model_detok_t dt;
    int n_gen;
    const char *stop_reason; /* "length", "eos", "stop" */
} s_run_t;

/* Allocate run for the prompt toks[0..n_prompt).  false after a message. */
static bool s_run_open(s_run_t *run, cli_runner_t *r, const s_cfg_t *c, const int32_t *toks,
                       int n_prompt) {
    const model_config_t *cfg = model_config(r->model);
    char err[256];
    memset(run, 0, sizeof *run);
    run->sp = s_sampler_params(&c->s);
    if (model_sampler_check(&run->sp, err, sizeof err)) {
        fprintf(stderr, "strata generate: %s\n", err);
        return false;
    }
    run->sampler = model_sampler_new(cfg->n_vocab);
    run->hist = malloc(((size_t)n_prompt + c->g.n_predict + 1) * sizeof *run->hist);
    run->logits = malloc((size_t)cfg->n_vocab * sizeof(float));
    if (c->g.ignore_eos)
        run->eog = model_tokenizer_eog_ids(r->tok, cfg->n_vocab, &run->n_eog);
    if (!run->sampler || !run->hist || !run->logits || (c->g.ignore_eos && !run->eog) ||
        model_stopper_init(&run->stopper, c->s.stop, c->s.n_stop)) {
        fprintf(stderr, "strata generate: out of memory\n");
        return false;
    }
    memcpy(run->hist, toks, (size_t)n_prompt * sizeof *run->hist);
    run->n_hist = n_prompt;
    model_detok_init(&run->dt, r->tok);
    run->stop_reason = "length";
    return true;
}

static void s_run_close(s_run_t *run) {
    model_stopper_free(&run->stopper);
    model_sampler_destroy(&run->sampler);
    free(run->hist);
    free(run->eog);
    free(run->logits);
}

/* Print one piece of text through the stop strings; true when one of them appeared. */
static bool s_emit(s_run_t *run, const char *piece, int len) {
    char out[2048];
    size_t ol = model_stopper_push(&run->stopper, piece, (size_t)len, out, sizeof out);
    fwrite(out, 1, ol, stdout);
    fflush(stdout);
    return run->stopper.stopped;
}

/* Sample up to -n tokens after the prompt (whose logits are in run->logits),
 * printing each.  0, or -1 after a message. */
static int s_decode(s_run_t *run, cli_runner_t *r, const s_cfg_t *c, int n_prompt) {
    char piece[1024];
    for (; run->n_gen < c->g.n_predict; run->n_gen++) {
        int pos = n_prompt + run->n_gen;
        model_logits_ban(run->logits, run->eog, run->n_eog);
        int32_t next =
            model_sampler_sample(run->sampler, &run->sp, run->logits, run->hist, run->n_hist, pos);
        if (!c->g.ignore_eos && model_tokenizer_is_eog(r->tok, next)) {
            run->stop_reason = "eos";
            break;
        }
        run->hist[run->n_hist++] = next;
        if (c->g.print_ids) {
            printf(run->n_gen ? " %d" : "%d", next);
        } else if (s_emit(run, piece, model_detok_push(&run->dt, next, piece, sizeof piece))) {
            run->stop_reason = "stop";
            run->n_gen++;
            break;
        }
        if (run->n_gen + 1 < c->g.n_predict &&
            cli_runner_eval(r, &next, 1, pos, false, run->logits)) {
            fprintf(stderr, "strata generate: forward pass failed\n");
            return -1;
        }
    }
    if (!c->g.print_ids) {
        s_emit(run, piece, model_detok_flush(&run->dt, piece, sizeof piece));
        char out[2048];
        fwrite(out, 1, model_stopper_flush(&run->stopper, out, sizeof out), stdout);
    }
    printf("\n");
    fflush(stdout);
    return 0;
}

/* Prefill the prompt, decode, and say how fast on stderr.  0, or -1 after a message. */
static int s_generate(cli_runner_t *r, const s_cfg_t *c, const int32_t *toks, int n_prompt) {
    s_run_t run;
    int rc = -1;
    if (!s_run_open(&run, r, c, toks, n_prompt))
        goto out;
    double t0 = cli_now();
    int e = cli_runner_eval(r, toks, n_prompt, 0, false, run.logits);
    double t1 = cli_now();
    if (e) {
        fprintf(stderr, "strata generate: forward pass failed (%d)\n", e);
        goto out;
    }
    if (s_decode(&run, r, c, n_prompt))
        goto out;
    double t2 = cli_now();
    if (run.n_gen == 0 && !strcmp(run.stop_reason, "eos"))
        fprintf(stderr, "strata generate: the model ended the answer at once (0 tokens)%s\n",
                c->g.chat || c->g.ids ? "" : ": for an instruct model use the chat form (--chat)");
    fprintf(stderr,
            "strata generate: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in "
            "%.3f s (%.1f tok/s), stop: %s, threads %d, kernels %s\n",
            n_prompt, t1 - t0, n_prompt / (t1 - t0), run.n_gen, t2 - t1, run.n_gen / (t2 - t1),
            run.stop_reason, c->m.threads, kern_ops_best()->name);
    rc = 0;
out:
    s_run_close(&run);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    s_cfg_t c;
    int rc = s_parse(argc, argv, &c);
    if (rc != CLI_PARSED)
        return rc;
    const char *prompt = c.g.prompt;
    char *text = NULL;
    if (c.g.file && !(prompt = text = cli_read_file(c.g.file, NULL))) {
        fprintf(stderr, "strata generate: cannot read prompt file '%s'\n", c.g.file);
        return 1;
    }
    cli_runner_t r;
    int32_t *toks = NULL;
    int n_prompt = 0;
    rc = 1;
    if (cli_runner_open(&r, "generate", c.m.model)) {
        if ((toks = s_prompt_tokens(&r, &c.g, prompt, &n_prompt)) && s_reserve(&r, &c, n_prompt) &&
            s_generate(&r, &c, toks, n_prompt) == 0)
            rc = 0;
        cli_runner_close(&r);
    }
    free(toks);
    free(text);
    return rc;
}
