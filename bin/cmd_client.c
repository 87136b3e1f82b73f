/* cmd_client.c - `strata client`: talk to a running strata server (docs/PROTOCOL.md)
 * through the C client library: stream a generation to stdout, or print the server's
 * stats or health. */
#include "cli.h"
#include "cli_flags.h"
#include "strata_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* client's own flags */
typedef struct {
    const char *endpoint;   /* -e (NULL: the library's default) */
    const char *server_key; /* CURVE (docs/SECURITY.md) */
    const char *client_key;
    const char *prompt; /* -p */
    bool chat;
    const char *system;
    int n_predict; /* max_tokens */
    bool no_stream;
    bool timings;
    bool stats;
    bool health;
    double timeout_s;
} s_client_opts_t;

typedef struct {
    s_client_opts_t o;
    cli_sample_opts_t s;
} s_cfg_t;

#define S_OPT(member) ACTOR_OPT_FIELD(s_client_opts_t, member)
static const cli_flag_t s_client_flags[] = {
    {.name = "endpoint",
     .short_name = 'e',
     .arg = "EP",
     .opt = {.type = ACTOR_OPT_STRING, .help = "server endpoint", .field = S_OPT(endpoint)},
     .def_text = "tcp://127.0.0.1:5555"},
    {.name = "server-key",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "CURVE: the server's public key (zcert file)",
             .field = S_OPT(server_key)}},
    {.name = "client-key",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "CURVE: this client's key pair (NAME.key_secret)",
             .field = S_OPT(client_key)}},
    {.name = "prompt",
     .short_name = 'p',
     .arg = "TEXT",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "prompt (else the remaining arguments, else stdin)",
             .field = S_OPT(prompt)}},
    {.name = "chat",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "send the prompt as a user message (chat template)",
             .field = S_OPT(chat)}},
    {.name = "system",
     .arg = "TEXT",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "system message (with --chat)",
             .field = S_OPT(system)}},
    {.name = "n-predict",
     .short_name = 'n',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = MSG_MAX_TOKENS,
             .help = "tokens to generate at most",
             .field = S_OPT(n_predict)}},
    {.name = "no-stream",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "wait for the whole answer, then print it",
             .field = S_OPT(no_stream)}},
    {.name = "timings",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "print usage and timings to stderr at the end",
             .field = S_OPT(timings)}},
    {.name = "stats",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "print the server's counters (name value per line)",
             .field = S_OPT(stats)}},
    {.name = "health",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "print the server's actors; exit 1 unless all ready",
             .field = S_OPT(health)}},
    {.name = "timeout",
     .arg = "S",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 0.001,
             .max = 86400,
             .help = "seconds to wait for the server",
             .field = S_OPT(timeout_s)}},
    {NULL},
};
#undef S_OPT

static const cli_cmd_t s_cmd = {
    "client",
    "usage: strata client [-e ENDPOINT] [-p PROMPT | PROMPT... | < prompt] [options]\n"
    "       strata client [-e ENDPOINT] --stats | --health\n"
    "\n"
    "Send a request to a running `strata serve` and stream the answer to stdout.\n"
    "When the connection is lost (the server restarted) the request is resumed\n"
    "once it is back, each token printed once; a note says so on stderr.\n",
    NULL,
    {{s_client_flags, offsetof(s_cfg_t, o)}, {cli_sample_flags, offsetof(s_cfg_t, s)}, {NULL}},
};

static int s_on_token(void *user, int index, int32_t token, const char *text, size_t len) {
    (void)user;
    (void)index;
    (void)token;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* the prompt from the remaining arguments (joined by spaces), or NULL */
static char *s_join(int argc, char **argv, int from) {
    size_t n = 0;
    for (int i = from; i < argc; i++)
        n += strlen(argv[i]) + 1;
    if (!n)
        return NULL;
    char *s = malloc(n);
    if (!s)
        return NULL;
    s[0] = 0;
    for (int i = from; i < argc; i++) {
        if (i > from)
            strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

/* The prompt: -p, else the operands argv[next..], else stdin (*owned: what to free).
 * NULL with the exit status in *rc after a message. */
static const char *s_prompt(const s_cfg_t *c, int argc, char **argv, int next, char **owned,
                            int *rc) {
    *owned = NULL;
    if (c->o.prompt && next < argc) {
        fprintf(stderr, "strata client: give the prompt with -p or as arguments, not both\n");
        *rc = 2;
        return NULL;
    }
    if (c->o.prompt)
        return c->o.prompt;
    if (next < argc)
        return *owned = s_join(argc, argv, next);
    if (isatty(STDIN_FILENO))
        fprintf(stderr, "strata client: reading the prompt from stdin (^D to end)\n");
    size_t len;
    if (!(*owned = cli_read_file("-", &len))) {
        fprintf(stderr, "strata client: cannot read the prompt from stdin\n");
        *rc = 1;
    }
    return *owned;
}

/* The request's parameters from the flags (the prompt and messages set later). */
static void s_params(const s_cfg_t *c, strata_gen_params_t *p) {
    strata_gen_params_default(p);
    p->max_tokens = c->o.n_predict;
    p->temperature = (float)c->s.temp;
    p->top_k = c->s.top_k;
    p->top_p = (float)c->s.top_p;
    p->min_p = (float)c->s.min_p;
    p->repeat_penalty = (float)c->s.repeat_penalty;
    p->repeat_last_n = c->s.repeat_last_n;
    p->seed = c->s.seed;
    p->has_seed = c->s.has_seed;
    p->stop = c->s.stop;
    p->n_stop = c->s.n_stop;
    p->stream = !c->o.no_stream;
}

/* --stats: the counters, one per line.  0 or a negative errno. */
static int s_stats(strata_client_t *cl) {
    strata_counter_t *cs;
    int n, rc;
    if ((rc = strata_client_stats(cl, &cs, &n)) == 0) {
        for (int i = 0; i < n; i++)
            printf("%s %lld\n", cs[i].name, (long long)cs[i].value);
        free(cs);
    }
    return rc;
}

/* --health: ok or not, then the actors.  0 or a negative errno; *ok. */
static int s_health(strata_client_t *cl, bool *ok) {
    strata_actor_t *as;
    int n, rc;
    *ok = false;
    if ((rc = strata_client_health(cl, ok, &as, &n)) == 0) {
        printf("%s\n", *ok ? "ok" : "not ok");
        for (int i = 0; i < n; i++)
            printf("%-16s %-10s last seen %lld ms ago\n", as[i].name, as[i].state,
                   (long long)as[i].last_seen_ms);
        free(as);
    }
    return rc;
}

/* What the finished generation says on stderr: a 0-token answer, --timings, resumes. */
static void s_done_notes(const s_cfg_t *c, const strata_done_t *done, bool ok) {
    if (ok && done->completion_tokens == 0 && !strcmp(done->finish_reason, "eos"))
        fprintf(stderr, "strata client: the model ended the answer at once (0 tokens)%s\n",
                c->o.chat ? "" : ": for an instruct model use the chat form (--chat)");
    if (ok && c->o.timings)
        fprintf(stderr,
                "[%s] prompt %d tokens, completion %d tokens; queued %.1f ms, "
                "prefill %.1f ms, decode %.1f ms, ttft %.1f ms\n",
                done->finish_reason, done->prompt_tokens, done->completion_tokens, done->queued_ms,
                done->prefill_ms, done->decode_ms, done->ttft_ms);
    if (!done->resumes) /* after the text's last line, on stderr */
        return;
    fflush(stdout);
    if (done->resumes == 1)
        fprintf(stderr, "strata client: connection lost, resumed after %d tokens\n",
                done->resumed_after);
    else
        fprintf(stderr, "strata client: connection lost %d times, last resumed after %d tokens\n",
                done->resumes, done->resumed_after);
}

/* Generate the answer to prompt, streamed to stdout.  0 or a negative errno. */
static int s_generate(strata_client_t *cl, const s_cfg_t *c, const char *prompt) {
    strata_gen_params_t p;
    s_params(c, &p);
    strata_chat_t msgs[2];
    if (c->o.chat) {
        int n = 0;
        if (c->o.system)
            msgs[n++] = (strata_chat_t){"system", c->o.system};
        msgs[n++] = (strata_chat_t){"user", prompt};
        p.messages = msgs;
        p.n_messages = n;
    } else {
        p.prompt = prompt;
    }
    strata_done_t done;
    int rc = strata_client_generate(cl, &p, s_on_token, NULL, &done);
    if (rc == 0) {
        if (done.text)
            fputs(done.text, stdout);
        printf("\n");
    }
    s_done_notes(c, &done, rc == 0);
    if (rc == 0)
        strata_done_free(&done);
    return rc;
}

int cmd_client(int argc, char **argv) {
    s_cfg_t c;
    memset(&c, 0, sizeof c);
    cli_sample_opts_default(&c.s);
    c.o.n_predict = MSG_DEFAULT_MAX_TOKENS;
    c.o.timeout_s = 30;
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, &c, &next);
    if (rc != CLI_PARSED)
        return rc;
    char *owned = NULL;
    const char *prompt = NULL;
    if (!c.o.stats && !c.o.health) {
        if (!(prompt = s_prompt(&c, argc, argv, next, &owned, &rc)))
            return rc;
    } else if (next < argc) {
        fprintf(stderr, "strata client: unexpected argument '%s'\n", argv[next]);
        return 2;
    }
    if (!c.o.server_key != !c.o.client_key) {
        fprintf(stderr, "strata client: CURVE needs both --server-key and --client-key\n");
        free(owned);
        return 2;
    }
    int ms = (int)(c.o.timeout_s * 1000);
    strata_client_t *cl =
        c.o.server_key ? strata_client_new_curve(c.o.endpoint, ms, c.o.server_key, c.o.client_key)
                       : strata_client_new(c.o.endpoint, ms);
    if (!cl) {
        fprintf(stderr, "strata client: cannot open endpoint '%s'\n",
                c.o.endpoint ? c.o.endpoint : "tcp://127.0.0.1:5555");
        free(owned);
        return 1;
    }
    bool ok = true;
    rc = c.o.stats ? s_stats(cl) : c.o.health ? s_health(cl, &ok) : s_generate(cl, &c, prompt);
    int exit_code = ok ? 0 : 1;
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "strata client: %s\n", strata_client_error(cl));
        exit_code = 1;
    }
    strata_client_destroy(&cl);
    free(owned);
    return exit_code;
}
