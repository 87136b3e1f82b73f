/* cmd_generate.c - `strata generate`: prompt in, streamed text out, using the
 * library directly (no actors).  This is the reference the service must
 * reproduce token for token under greedy decoding. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_help(FILE *f) {
    fprintf(f,
            "usage: strata generate [-m MODEL] (-p PROMPT | -f FILE | --ids \"1 2 3\") [options]\n"
            "\n"
            "Streams the continuation to stdout; prompt and generation speed go to stderr.\n"
            "\n"
            "  -m, --model PATH        GGUF model, or a name in the model cache (gemma)\n"
            "                          (default: %s)\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  -f, --file PATH         read the prompt from a file ('-' for stdin)\n"
            "      --ids LIST          prompt as token ids (\"1 2 3\"), no tokenization\n"
            "  -n, --n-predict N       tokens to generate at most (default 256)\n"
            "      --chat              wrap the prompt as a user message in the chat template\n"
            "      --system TEXT       system message (with --chat)\n"
            "  -t, --threads N         threads (default: %d, the online CPUs)\n"
            "      --ctx N             context positions (default: prompt + n-predict)\n"
            "      --kv-type TYPE      KV cache element type: f16 (default) or f32\n"
            "      --greedy            argmax decoding (same as --temp 0)\n"
            "      --temp X            temperature (default 0.8; 0 = greedy)\n"
            "      --top-k N           (default 40; 0 = off)\n"
            "      --top-p X           (default 0.95; 1 = off)\n"
            "      --min-p X           (default 0.05; 0 = off)\n"
            "      --repeat-penalty X  (default 1.0 = off)\n"
            "      --repeat-last-n N   tokens the penalty looks back (default 64)\n"
            "      --seed N            sampling seed (default 0)\n"
            "      --stop TEXT         stop when TEXT appears (repeatable, up to 8)\n"
            "      --ignore-eos        never end: end-of-generation tokens are banned from\n"
            "                          sampling (generate exactly -n tokens)\n"
            "      --print-ids         print generated token ids (one line) instead of text\n"
            "  -h, --help              this help\n",
            cli_default_model(), cli_default_threads());
}

int cmd_generate(int argc, char **argv) {
    const char *C = "generate";
    const char *model = NULL, *prompt = NULL, *file = NULL, *ids_s = NULL, *system = NULL;
    const char *stops[MODEL_MAX_STOP];
    int n_stops = 0;
    long n_predict = 256, threads = cli_default_threads(), ctx_n = 0;
    bool chat = false, print_ids = false, ignore_eos = false;
    kern_type_t kv_type = KERN_F16;
    model_sampler_params_t sp = model_sampler_defaults();
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"file", required_argument, 0, 'f'},
                                         {"ids", required_argument, 0, 1},
                                         {"n-predict", required_argument, 0, 'n'},
                                         {"chat", no_argument, 0, 2},
                                         {"system", required_argument, 0, 3},
                                         {"threads", required_argument, 0, 't'},
                                         {"ctx", required_argument, 0, 4},
                                         {"kv-type", required_argument, 0, 5},
                                         {"greedy", no_argument, 0, 6},
                                         {"temp", required_argument, 0, 7},
                                         {"top-k", required_argument, 0, 8},
                                         {"top-p", required_argument, 0, 9},
                                         {"min-p", required_argument, 0, 10},
                                         {"repeat-penalty", required_argument, 0, 11},
                                         {"repeat-last-n", required_argument, 0, 12},
                                         {"seed", required_argument, 0, 13},
                                         {"stop", required_argument, 0, 14},
                                         {"print-ids", no_argument, 0, 15},
                                         {"ignore-eos", no_argument, 0, 16},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    long lv;
    double dv;
    optind = 1;
    while ((o = getopt_long(argc, argv, "m:p:f:n:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            model = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case 1:
            ids_s = optarg;
            break;
        case 'n':
            if (!cli_int(C, "--n-predict", optarg, 0, 1 << 20, &n_predict))
                return 1;
            break;
        case 2:
            chat = true;
            break;
        case 3:
            system = optarg;
            break;
        case 't':
            if (!cli_int(C, "--threads", optarg, 1, 256, &threads))
                return 1;
            break;
        case 4:
            if (!cli_int(C, "--ctx", optarg, 1, 1 << 20, &ctx_n))
                return 1;
            break;
        case 5:
            if (!strcmp(optarg, "f32"))
                kv_type = KERN_F32;
            else if (!strcmp(optarg, "f16"))
                kv_type = KERN_F16;
            else {
                fprintf(stderr, "strata generate: --kv-type must be f32 or f16\n");
                return 1;
            }
            break;
        case 6:
            sp.temperature = 0;
            break;
        case 7:
            if (!cli_float(C, "--temp", optarg, 0, 100, &dv))
                return 1;
            sp.temperature = (float)dv;
            break;
        case 8:
            if (!cli_int(C, "--top-k", optarg, 0, 1 << 30, &lv))
                return 1;
            sp.top_k = (int)lv;
            break;
        case 9:
            if (!cli_float(C, "--top-p", optarg, 1e-6, 1, &dv))
                return 1;
            sp.top_p = (float)dv;
            break;
        case 10:
            if (!cli_float(C, "--min-p", optarg, 0, 1, &dv))
                return 1;
            sp.min_p = (float)dv;
            break;
        case 11:
            if (!cli_float(C, "--repeat-penalty", optarg, 1e-3, 10, &dv))
                return 1;
            sp.repeat_penalty = (float)dv;
            break;
        case 12:
            if (!cli_int(C, "--repeat-last-n", optarg, 0, 1 << 20, &lv))
                return 1;
            sp.repeat_last_n = (int)lv;
            break;
        case 13: {
            char *end;
            sp.seed = strtoull(optarg, &end, 10);
            if (*end || end == optarg) {
                fprintf(stderr, "strata generate: bad --seed '%s'\n", optarg);
                return 1;
            }
            break;
        }
        case 14:
            if (n_stops == MODEL_MAX_STOP || !optarg[0]) {
                fprintf(stderr, "strata generate: at most %d non-empty --stop strings\n",
                        MODEL_MAX_STOP);
                return 1;
            }
            stops[n_stops++] = optarg;
            break;
        case 15:
            print_ids = true;
            break;
        case 16:
            ignore_eos = true;
            break;
        case 'h':
            s_help(stdout);
            return 0;
        default:
            s_help(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strata generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!!prompt + !!file + !!ids_s != 1) {
        fprintf(stderr, "strata generate: give exactly one of -p PROMPT, -f FILE or --ids LIST "
                        "(see --help)\n");
        return 2;
    }
    if (!model)
        model = cli_default_model();

    char *text = NULL;
    if (file) {
        text = cli_read_file(file, NULL);
        if (!text) {
            fprintf(stderr, "strata generate: cannot read prompt file '%s'\n", file);
            return 1;
        }
        prompt = text;
    }
    /* Load with a provisional context; resize once the prompt length is known. */
    cli_runner_t r;
    int rc = 1;
    int32_t *toks = NULL, *hist = NULL, *eog = NULL;
    int n_eog = 0; /* banned ids in eog: the end-of-generation tokens with --ignore-eos */
    model_sampler_t *sampler = NULL;
    model_stopper_t stopper = {0};
    char err[256];
    if (!cli_runner_open(&r, C, model))
        goto out_text;
    int n_prompt = 0;
    if (ids_s) {
        toks = cli_parse_ids(ids_s, &n_prompt);
        if (!toks || n_prompt == 0) {
            fprintf(stderr, "strata generate: --ids must be a non-empty list of token ids\n");
            goto out;
        }
    } else {
        char *rendered = NULL;
        if (chat) {
            model_chat_msg_t msgs[2];
            int nm = 0;
            if (system)
                msgs[nm++] = (model_chat_msg_t){"system", system};
            msgs[nm++] = (model_chat_msg_t){"user", prompt};
            rendered = model_tokenizer_chat(r.tok, msgs, nm, true);
            if (!rendered) {
                fprintf(stderr, "strata generate: this model has no chat template strata knows\n");
                goto out;
            }
        }
        const char *t = rendered ? rendered : prompt;
        bool bos = model_tokenizer_add_bos(r.tok);
        int need = model_tokenizer_encode(r.tok, t, strlen(t), bos, chat, NULL, 0);
        toks = malloc((size_t)(need > 0 ? need : 1) * sizeof *toks);
        if (need > 0 && toks)
            n_prompt = model_tokenizer_encode(r.tok, t, strlen(t), bos, chat, toks, need);
        free(rendered);
        if (n_prompt <= 0) {
            fprintf(stderr, "strata generate: the prompt is empty\n");
            goto out;
        }
    }
    const model_config_t *cfg = model_config(r.model);
    for (int i = 0; i < n_prompt; i++)
        if (toks[i] < 0 || toks[i] >= cfg->n_vocab) {
            fprintf(stderr, "strata generate: token id %d out of range (vocabulary %d)\n", toks[i],
                    cfg->n_vocab);
            goto out;
        }
    int max_ctx = ctx_n ? (int)ctx_n : n_prompt + (int)n_predict;
    if (n_prompt + n_predict > max_ctx) {
        fprintf(stderr, "strata generate: prompt (%d tokens) + n-predict (%ld) exceed --ctx %d\n",
                n_prompt, n_predict, max_ctx);
        goto out;
    }
    if (max_ctx > cfg->n_ctx_train)
        fprintf(stderr,
                "strata generate: warning: %d positions exceed the model's training "
                "context of %d\n",
                max_ctx, cfg->n_ctx_train);
    if (!cli_runner_reserve(&r, C, max_ctx, 512, (int)threads, kv_type))
        goto out;
    if (model_sampler_check(&sp, err, sizeof err)) {
        fprintf(stderr, "strata generate: %s\n", err);
        goto out;
    }
    sampler = model_sampler_new(cfg->n_vocab);
    hist = malloc(((size_t)n_prompt + n_predict + 1) * sizeof *hist);
    if (ignore_eos)
        eog = model_tokenizer_eog_ids(r.tok, cfg->n_vocab, &n_eog);
    if (!sampler || !hist || (ignore_eos && !eog) || model_stopper_init(&stopper, stops, n_stops)) {
        fprintf(stderr, "strata generate: out of memory\n");
        goto out;
    }
    memcpy(hist, toks, (size_t)n_prompt * sizeof *hist);
    int n_hist = n_prompt;
    float *logits = malloc((size_t)cfg->n_vocab * sizeof(float));
    double t0 = cli_now();
    int e = cli_runner_eval(&r, toks, n_prompt, 0, false, logits);
    double t1 = cli_now();
    if (e) {
        fprintf(stderr, "strata generate: forward pass failed (%d)\n", e);
        free(logits);
        goto out;
    }
    model_detok_t dt;
    model_detok_init(&dt, r.tok);
    char piece[1024], outbuf[2048];
    int n_gen = 0;
    const char *stop_reason = "length";
    for (; n_gen < n_predict; n_gen++) {
        int pos = n_prompt + n_gen;
        model_logits_ban(logits, eog, n_eog);
        int32_t next = model_sampler_sample(sampler, &sp, logits, hist, n_hist, pos);
        if (!ignore_eos && model_tokenizer_is_eog(r.tok, next)) {
            stop_reason = "eos";
            break;
        }
        hist[n_hist++] = next;
        if (print_ids) {
            printf(n_gen ? " %d" : "%d", next);
        } else {
            int pl = model_detok_push(&dt, next, piece, sizeof piece);
            size_t ol = model_stopper_push(&stopper, piece, (size_t)pl, outbuf, sizeof outbuf);
            fwrite(outbuf, 1, ol, stdout);
            fflush(stdout);
            if (stopper.stopped) {
                stop_reason = "stop";
                n_gen++;
                break;
            }
        }
        if (n_gen + 1 < n_predict && cli_runner_eval(&r, &next, 1, pos, false, logits)) {
            fprintf(stderr, "strata generate: forward pass failed\n");
            free(logits);
            goto out;
        }
    }
    double t2 = cli_now();
    if (!print_ids) {
        int pl = model_detok_flush(&dt, piece, sizeof piece);
        size_t ol = model_stopper_push(&stopper, piece, (size_t)pl, outbuf, sizeof outbuf);
        fwrite(outbuf, 1, ol, stdout);
        ol = model_stopper_flush(&stopper, outbuf, sizeof outbuf);
        fwrite(outbuf, 1, ol, stdout);
    }
    printf("\n");
    fflush(stdout);
    if (n_gen == 0 && !strcmp(stop_reason, "eos"))
        fprintf(stderr, "strata generate: the model ended the answer at once (0 tokens)%s\n",
                chat || ids_s ? "" : ": for an instruct model use the chat form (--chat)");
    fprintf(stderr,
            "strata generate: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in "
            "%.3f s (%.1f tok/s), stop: %s, threads %ld, kernels %s\n",
            n_prompt, t1 - t0, n_prompt / (t1 - t0), n_gen, t2 - t1, n_gen / (t2 - t1), stop_reason,
            threads, kern_ops_best()->name);
    free(logits);
    rc = 0;
out:
    model_stopper_free(&stopper);
    model_sampler_destroy(&sampler);
    free(hist);
    free(eog);
    free(toks);
    cli_runner_close(&r);
out_text:
    free(text);
    return rc;
}
