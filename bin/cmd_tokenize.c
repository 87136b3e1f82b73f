/* cmd_tokenize.c - `strata tokenize`, `strata detokenize` and `strata chat-template`: the
 * tokenizer alone, for scripts and the tokenizer and chat-template oracles.  tokenize
 * prints the ids of a file's bytes on one line; detokenize reads ids on stdin and writes
 * the text byte-exact; chat-template writes a conversation as the model's template renders it.
 */
#include "cli.h"
#include "model_gguf.h"
#include "model_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: strata tokenize [-m MODEL] [--no-special] [--bos] (-f FILE | -p TEXT)\n"
            "  Print the token ids of the text as space-separated integers on one line.\n"
            "  -m, --model PATH   GGUF model (default: %s)\n"
            "  -f, --file PATH    read the text from PATH ('-' for stdin), byte-exact\n"
            "  -p, --prompt TEXT  tokenize TEXT\n"
            "  --no-special       treat special-token text like <|im_start|> as plain text\n"
            "  --bos              prepend BOS if the model has one\n"
            "  -h, --help         this help\n",
            cli_default_model());
}

static void s_detokenize_usage(FILE *f) {
    fprintf(f,
            "usage: strata detokenize [-m MODEL] [--special]\n"
            "  Read token ids (space- or comma-separated) on stdin and write their text\n"
            "  byte-exact, with no trailing newline.\n"
            "  -m, --model PATH   GGUF model (default: %s)\n"
            "  --special          render control tokens such as <|im_end|> as text\n"
            "  -h, --help         this help\n",
            cli_default_model());
}

/* Open the model's tokenizer; prints one error line and returns NULL on failure. */
static model_tokenizer_t *s_open(const char *cmd, const char *path) {
    char err[512];
    model_gguf_t *g = model_gguf_open(path, err, sizeof err);
    if (!g) {
        fprintf(stderr, "strata %s: %s\n", cmd, err);
        return NULL;
    }
    model_tokenizer_t *tok = model_tokenizer_new(g, err, sizeof err);
    model_gguf_destroy(&g);
    if (!tok)
        fprintf(stderr, "strata %s: %s: %s\n", cmd, path, err);
    return tok;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *prompt = NULL;
    bool special = true, bos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_tokenize_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) {
            model = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) {
            file = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) {
            prompt = argv[++i];
        } else if (!strcmp(a, "--no-special")) {
            special = false;
        } else if (!strcmp(a, "--bos")) {
            bos = true;
        } else {
            fprintf(stderr, "strata tokenize: unknown option or missing value: %s (see --help)\n",
                    a);
            return 1;
        }
    }
    if (!file == !prompt) {
        fprintf(stderr, "strata tokenize: give exactly one of -f FILE or -p TEXT (see --help)\n");
        return 1;
    }
    if (!model)
        model = cli_default_model();
    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = cli_read_file(file, &len);
        if (!text) {
            fprintf(stderr, "strata tokenize: cannot read %s\n", file);
            return 1;
        }
    } else {
        len = strlen(prompt);
        text = strdup(prompt);
        if (!text) {
            fprintf(stderr, "strata tokenize: out of memory\n");
            return 1;
        }
    }
    model_tokenizer_t *tok = s_open("tokenize", model);
    if (!tok) {
        free(text);
        return 1;
    }
    int rc = 1;
    int cap = (int)(len < (size_t)1 << 28 ? len + 16 : (size_t)1 << 28);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int n = ids ? model_tokenizer_encode(tok, text, len, bos, special, ids, cap) : -12;
    if (n > cap) { /* cannot happen for byte-level BPE (one id per byte at most), but be safe */
        free(ids);
        cap = n;
        ids = malloc(sizeof(int32_t) * (size_t)cap);
        n = ids ? model_tokenizer_encode(tok, text, len, bos, special, ids, cap) : -12;
    }
    if (n < 0) {
        fprintf(stderr, "strata tokenize: encoding failed (%s)\n", strerror(-n));
    } else {
        for (int i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        rc = fflush(stdout) == 0 ? 0 : 1;
    }
    free(ids);
    free(text);
    model_tokenizer_destroy(&tok);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    bool special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_detokenize_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else {
            fprintf(stderr, "strata detokenize: unknown option or missing value: %s (see --help)\n",
                    a);
            return 1;
        }
    }
    if (!model)
        model = cli_default_model();
    size_t len = 0;
    char *in = cli_read_file("-", &len);
    if (!in) {
        fprintf(stderr, "strata detokenize: cannot read stdin\n");
        return 1;
    }
    int n = 0;
    int32_t *ids = cli_parse_ids(in, &n);
    free(in);
    if (!ids) {
        fprintf(stderr, "strata detokenize: stdin is not a list of token ids\n");
        return 1;
    }
    model_tokenizer_t *tok = s_open("detokenize", model);
    if (!tok) {
        free(ids);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        size_t pl = 0;
        const char *p = model_tokenizer_piece(tok, ids[i], special, &pl);
        if (!p) {
            fprintf(stderr, "strata detokenize: token id %d out of range (vocabulary of %d)\n",
                    ids[i], model_tokenizer_n_vocab(tok));
            rc = 1;
            break;
        }
        if (pl && fwrite(p, 1, pl, stdout) != pl) {
            rc = 1;
            break;
        }
    }
    if (fflush(stdout) != 0)
        rc = 1;
    free(ids);
    model_tokenizer_destroy(&tok);
    return rc;
}

static void s_chat_template_usage(FILE *f) {
    fprintf(f,
            "usage: strata chat-template [-m MODEL] [--bos] [--no-generation-prompt] [--which]\n"
            "                            ROLE TEXT [ROLE TEXT ...]\n"
            "       strata chat-template --list\n"
            "  Write the conversation (messages as ROLE TEXT pairs: system, user, assistant)\n"
            "  as the model's chat template renders it, byte-exact, with no trailing newline.\n"
            "  -m, --model PATH          GGUF model (default: %s)\n"
            "  --bos                     begin with the BOS token's text when the model adds\n"
            "                            BOS to a prompt (what the model sees)\n"
            "  --no-generation-prompt    end after the last message (no assistant opener)\n"
            "  --which                   name the template row used on stderr (\"row: chatml\")\n"
            "  --list                    print the names of every template row strata has\n"
            "  -h, --help                this help\n",
            cli_default_model());
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL;
    bool bos = false, gen = true, which = false;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_chat_template_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--bos")) {
            bos = true;
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen = false;
        } else if (!strcmp(a, "--which")) {
            which = true;
        } else if (!strcmp(a, "--list")) {
            for (int k = 0; model_tokenizer_chat_row_name(k); k++)
                printf("%s\n", model_tokenizer_chat_row_name(k));
            return fflush(stdout) == 0 ? 0 : 1;
        } else {
            fprintf(stderr,
                    "strata chat-template: unknown option or missing value: %s (see --help)\n", a);
            return 1;
        }
    }
    if ((argc - i) % 2 != 0) {
        fprintf(stderr, "strata chat-template: messages are ROLE TEXT pairs (see --help)\n");
        return 1;
    }
    int n = (argc - i) / 2;
    model_chat_msg_t *msgs = malloc(sizeof *msgs * (size_t)(n ? n : 1));
    if (!msgs) {
        fprintf(stderr, "strata chat-template: out of memory\n");
        return 1;
    }
    for (int k = 0; k < n; k++)
        msgs[k] = (model_chat_msg_t){argv[i + 2 * k], argv[i + 2 * k + 1]};
    model_tokenizer_t *tok = s_open("chat-template", model ? model : cli_default_model());
    if (!tok) {
        free(msgs);
        return 1;
    }
    int rc = 1;
    if (which)
        fprintf(stderr, "row: %s\n",
                model_tokenizer_chat_name(tok) ? model_tokenizer_chat_name(tok) : "(none)");
    char *text = model_tokenizer_chat(tok, msgs, n, gen);
    if (!text) {
        fprintf(stderr, "strata chat-template: this model has no chat template strata knows\n");
    } else {
        size_t bl = 0;
        int32_t b = model_tokenizer_bos(tok);
        const char *bp = bos && model_tokenizer_add_bos(tok) && b >= 0
                             ? model_tokenizer_piece(tok, b, true, &bl)
                             : NULL;
        size_t tl = strlen(text);
        if ((!bp || fwrite(bp, 1, bl, stdout) == bl) && fwrite(text, 1, tl, stdout) == tl &&
            fflush(stdout) == 0)
            rc = 0;
    }
    free(text);
    free(msgs);
    model_tokenizer_destroy(&tok);
    return rc;
}
