/* cmd_client.c - `strata client`: talk to a running strata server (docs/PROTOCOL.md)
 * through the C client library: stream a generation to stdout, or print the server's
 * stats or health. */
#include "cli.h"
#include "strata_client.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_help(FILE *f) {
    fprintf(f, "usage: strata client [-e ENDPOINT] [-p PROMPT | PROMPT... | < prompt] [options]\n"
               "       strata client [-e ENDPOINT] --stats | --health\n"
               "\n"
               "Send a request to a running `strata serve` and stream the answer to stdout.\n"
               "When the connection is lost (the server restarted) the request is resumed\n"
               "once it is back, each token printed once; a note says so on stderr.\n"
               "\n"
               "  -e, --endpoint EP       server endpoint (default tcp://127.0.0.1:5555)\n"
               "      --server-key FILE   CURVE: the server's public key (zcert file)\n"
               "      --client-key FILE   CURVE: this client's key pair (NAME.key_secret)\n"
               "  -p, --prompt TEXT       prompt (else the remaining arguments, else stdin)\n"
               "      --chat              send the prompt as a user message (chat template)\n"
               "      --system TEXT       system message (with --chat)\n"
               "  -n, --n-predict N       tokens to generate at most (1..8192, default 256)\n"
               "      --greedy            argmax decoding (same as --temp 0)\n"
               "      --temp X            temperature (default 0.8; 0 = greedy)\n"
               "      --top-k N           (default 40; 0 = off)\n"
               "      --top-p X           (default 0.95; 1 = off)\n"
               "      --min-p X           (default 0.05; 0 = off)\n"
               "      --repeat-penalty X  (default 1.0 = off)\n"
               "      --repeat-last-n N   tokens the penalty looks back (default 64)\n"
               "      --seed N            sampling seed\n"
               "      --stop TEXT         stop when TEXT appears (repeatable, up to 8)\n"
               "      --no-stream         wait for the whole answer, then print it\n"
               "      --timings           print usage and timings to stderr at the end\n"
               "      --stats             print the server's counters (name value per line)\n"
               "      --health            print the server's actors; exit 1 unless all ready\n"
               "      --timeout S         seconds to wait for the server (default 30)\n"
               "  -h, --help              this help\n");
}

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

int cmd_client(int argc, char **argv) {
    const char *C = "client";
    const char *endpoint = NULL, *prompt = NULL, *system = NULL;
    const char *stops[8];
    int n_stops = 0;
    bool chat = false, stats = false, health = false, timings = false;
    const char *server_key = NULL, *client_key = NULL; /* CURVE (docs/SECURITY.md) */
    double timeout_s = 30;
    strata_gen_params_t p;
    strata_gen_params_default(&p);
    static const struct option opts[] = {{"endpoint", required_argument, 0, 'e'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"n-predict", required_argument, 0, 'n'},
                                         {"chat", no_argument, 0, 2},
                                         {"system", required_argument, 0, 3},
                                         {"greedy", no_argument, 0, 6},
                                         {"temp", required_argument, 0, 7},
                                         {"top-k", required_argument, 0, 8},
                                         {"top-p", required_argument, 0, 9},
                                         {"min-p", required_argument, 0, 10},
                                         {"repeat-penalty", required_argument, 0, 11},
                                         {"repeat-last-n", required_argument, 0, 12},
                                         {"seed", required_argument, 0, 13},
                                         {"stop", required_argument, 0, 14},
                                         {"no-stream", no_argument, 0, 15},
                                         {"stats", no_argument, 0, 16},
                                         {"health", no_argument, 0, 17},
                                         {"timeout", required_argument, 0, 18},
                                         {"timings", no_argument, 0, 19},
                                         {"server-key", required_argument, 0, 20},
                                         {"client-key", required_argument, 0, 21},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    long lv;
    double dv;
    optind = 1;
    while ((o = getopt_long(argc, argv, "e:p:n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'e':
            endpoint = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            if (!cli_int(C, "--n-predict", optarg, 1, 8192, &lv))
                return 1;
            p.max_tokens = (int)lv;
            break;
        case 2:
            chat = true;
            break;
        case 3:
            system = optarg;
            break;
        case 6:
            p.temperature = 0;
            break;
        case 7:
            if (!cli_float(C, "--temp", optarg, 0, 100, &dv))
                return 1;
            p.temperature = (float)dv;
            break;
        case 8:
            if (!cli_int(C, "--top-k", optarg, 0, 1 << 24, &lv))
                return 1;
            p.top_k = (int)lv;
            break;
        case 9:
            if (!cli_float(C, "--top-p", optarg, 1e-6, 1, &dv))
                return 1;
            p.top_p = (float)dv;
            break;
        case 10:
            if (!cli_float(C, "--min-p", optarg, 0, 1, &dv))
                return 1;
            p.min_p = (float)dv;
            break;
        case 11:
            if (!cli_float(C, "--repeat-penalty", optarg, 1e-3, 10, &dv))
                return 1;
            p.repeat_penalty = (float)dv;
            break;
        case 12:
            if (!cli_int(C, "--repeat-last-n", optarg, 0, 65536, &lv))
                return 1;
            p.repeat_last_n = (int)lv;
            break;
        case 13: {
            char *end;
            errno = 0;
            p.seed = strtoull(optarg, &end, 10);
            if (*end || end == optarg || errno || optarg[0] == '-') {
                fprintf(stderr, "strata client: bad --seed '%s'\n", optarg);
                return 1;
            }
            p.has_seed = true;
            break;
        }
        case 14:
            if (n_stops == 8 || !optarg[0] || strlen(optarg) > 64) {
                fprintf(stderr, "strata client: at most 8 --stop strings of 1..64 bytes\n");
                return 1;
            }
            stops[n_stops++] = optarg;
            break;
        case 15:
            p.stream = false;
            break;
        case 16:
            stats = true;
            break;
        case 17:
            health = true;
            break;
        case 18:
            if (!cli_float(C, "--timeout", optarg, 0.001, 86400, &timeout_s))
                return 1;
            break;
        case 19:
            timings = true;
            break;
        case 20:
            server_key = optarg;
            break;
        case 21:
            client_key = optarg;
            break;
        case 'h':
            s_help(stdout);
            return 0;
        default:
            s_help(stderr);
            return 2;
        }
    }
    p.stop = stops;
    p.n_stop = n_stops;

    char *owned = NULL;
    if (!stats && !health) {
        if (prompt && optind < argc) {
            fprintf(stderr, "strata client: give the prompt with -p or as arguments, not both\n");
            return 2;
        }
        if (!prompt && optind < argc)
            prompt = owned = s_join(argc, argv, optind);
        if (!prompt) {
            if (isatty(STDIN_FILENO))
                fprintf(stderr, "strata client: reading the prompt from stdin (^D to end)\n");
            size_t len;
            prompt = owned = cli_read_file("-", &len);
            if (!prompt) {
                fprintf(stderr, "strata client: cannot read the prompt from stdin\n");
                return 1;
            }
        }
    } else if (optind < argc) {
        fprintf(stderr, "strata client: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }

    if (!server_key != !client_key) {
        fprintf(stderr, "strata client: CURVE needs both --server-key and --client-key\n");
        return 2;
    }
    strata_client_t *c = server_key ? strata_client_new_curve(endpoint, (int)(timeout_s * 1000),
                                                              server_key, client_key)
                                    : strata_client_new(endpoint, (int)(timeout_s * 1000));
    if (!c) {
        fprintf(stderr, "strata client: cannot open endpoint '%s'\n",
                endpoint ? endpoint : "tcp://127.0.0.1:5555");
        free(owned);
        return 1;
    }
    int rc = 0, exit_code = 0;
    if (stats) {
        strata_counter_t *cs;
        int n;
        if ((rc = strata_client_stats(c, &cs, &n)) == 0) {
            for (int i = 0; i < n; i++)
                printf("%s %lld\n", cs[i].name, (long long)cs[i].value);
            free(cs);
        }
    } else if (health) {
        bool ok;
        strata_actor_t *as;
        int n;
        if ((rc = strata_client_health(c, &ok, &as, &n)) == 0) {
            printf("%s\n", ok ? "ok" : "not ok");
            for (int i = 0; i < n; i++)
                printf("%-16s %-10s last seen %lld ms ago\n", as[i].name, as[i].state,
                       (long long)as[i].last_seen_ms);
            free(as);
            exit_code = ok ? 0 : 1;
        }
    } else {
        strata_chat_t msgs[2];
        if (chat) {
            int n = 0;
            if (system)
                msgs[n++] = (strata_chat_t){"system", system};
            msgs[n++] = (strata_chat_t){"user", prompt};
            p.messages = msgs;
            p.n_messages = n;
        } else {
            p.prompt = prompt;
        }
        strata_done_t done;
        rc = strata_client_generate(c, &p, s_on_token, NULL, &done);
        if (rc == 0) {
            if (done.text)
                fputs(done.text, stdout);
            printf("\n");
            if (done.completion_tokens == 0 && !strcmp(done.finish_reason, "eos"))
                fprintf(stderr, "strata client: the model ended the answer at once (0 tokens)%s\n",
                        chat ? "" : ": for an instruct model use the chat form (--chat)");
            if (timings)
                fprintf(stderr,
                        "[%s] prompt %d tokens, completion %d tokens; queued %.1f ms, "
                        "prefill %.1f ms, decode %.1f ms, ttft %.1f ms\n",
                        done.finish_reason, done.prompt_tokens, done.completion_tokens,
                        done.queued_ms, done.prefill_ms, done.decode_ms, done.ttft_ms);
            strata_done_free(&done);
        }
        if (done.resumes) { /* after the text's last line, on stderr */
            fflush(stdout);
            if (done.resumes == 1)
                fprintf(stderr, "strata client: connection lost, resumed after %d tokens\n",
                        done.resumed_after);
            else
                fprintf(stderr,
                        "strata client: connection lost %d times, last resumed after %d "
                        "tokens\n",
                        done.resumes, done.resumed_after);
        }
    }
    if (rc < 0) {
        fflush(stdout);
        fprintf(stderr, "strata client: %s\n", strata_client_error(c));
        exit_code = 1;
    }
    strata_client_destroy(&c);
    free(owned);
    return exit_code;
}
