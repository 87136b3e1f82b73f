/* strata.c - the command-line entry point: dispatches to the subcommands. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name; /* subcommand */
    int (*fn)(int argc, char **argv);
    const char *help; /* one line */
} s_cmd_t;

int cmd_bench_kv_ssd(int argc, char **argv);  /* bin/cmd_bench_kv.c */
int cmd_moefy(int argc, char **argv);         /* bin/cmd_moefy.c */
int cmd_chat_template(int argc, char **argv); /* bin/cmd_tokenize.c */
int cmd_kb(int argc, char **argv);            /* bin/cmd_kb.c */
static const s_cmd_t s_cmds[] = {
    {"serve", cmd_serve, "run the inference service (ZeroMQ + MessagePack, continuous batching)"},
    {"actor", cmd_actor, "run one actor of a topology as its own process"},
    {"ctl", cmd_ctl, "control a process-mode server: restart an actor (drained), drain, status"},
    {"bench-serve", cmd_bench_serve, "load generator for a running service (also: bench serve)"},
    {"bench-kv-ssd", cmd_bench_kv_ssd, "T2 SSD write/read throughput through kv_ssd (io_uring)"},
    {"generate", cmd_generate, "generate text from a prompt with a GGUF model"},
    {"perplexity", cmd_perplexity, "perplexity of a model over a text file"},
    {"kv-quality", cmd_kv_quality, "what in-sequence KV compression costs in quality"},
    {"semcache-eval", cmd_semcache_eval,
     "the semantic cache offline: AUC, the error bound on held-out pairs, search cost"},
    {"bench-model", cmd_bench_model, "prompt-processing and generation speed (tokens/s)"},
    {"quantize", cmd_quantize, "rewrite a GGUF with another weight type"},
    {"moefy", cmd_moefy, "split a dense model's FFNs into experts + routers (MoEfication)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"detokenize", cmd_detokenize, "print the text of token ids read from stdin"},
    {"chat-template", cmd_chat_template, "print a conversation as the model's template renders it"},
    {"client", cmd_client, "send a request to a running strata server (stream the answer)"},
    {"kb", cmd_kb, "load a knowledge base into a running server's answer cache; invalidate"},
    {"audit", cmd_audit, "verify the audit log's hash chain; show one request's record"},
    {"synth-model", cmd_synth_model,
     "write a random-weight model of a real shape (speed measurements without a download)"},
    {"keygen", cmd_keygen, "write CURVE key pairs for actors and clients (docs/SECURITY.md)"},
    {"grammar", cmd_grammar, "compile/check GBNF, JSON Schema, regex; random walks; mask bench"},
    {"logits", cmd_logits, "dump the logits of every position (for the numerical oracle)"},
};

static void s_usage(FILE *f) {
    fprintf(f, "usage: strata COMMAND [options]    (strata COMMAND --help for its options)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
        fprintf(f, "  %-13s %s\n", s_cmds[i].name, s_cmds[i].help);
    fprintf(f,
            "\nWith no -m, commands use the default model: %s\n"
            "-m takes a GGUF path, or a model name: the start of a file name in the model\n"
            "cache ($STRATA_MODEL_DIR, else ~/.cache/strata/models), as in -m gemma.\n",
            cli_default_model());
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        s_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("strata 0.1.0\n");
        return 0;
    }
    if (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "serve"))
        return cmd_bench_serve(argc - 2, argv + 2);
    for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
        if (!strcmp(argv[1], s_cmds[i].name))
            return s_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "strata: unknown command '%s' (strata --help lists them)\n", argv[1]);
    return 2;
}
