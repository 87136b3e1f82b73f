/* audit_gen.c - writes an audit log through audit/audit_log.h for the CLI tests
 * (tests/integration/test_audit_cli.py): N requests as a frontend would record them, with
 * raw prompts and chats, done and error endings, traces, plain and CURVE clients.
 *
 *   audit_gen DIR N [--model FILE] [--max-bytes B] [--store-text] [--fsync always|interval]
 *
 * Request i has id "req-i" and server rid 0x5000 + i; every 3rd is traced, every 4th comes
 * from a CURVE client, every 7th ends in an error; the text is kept with --store-text.
 * Exit 0, or 1 with a line on stderr. */
#include "audit_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: audit_gen DIR N [--model FILE] [--max-bytes B] [--store-text] "
                        "[--fsync always|interval]\n");
        return 2;
    }
    const char *dir = argv[1];
    int n = atoi(argv[2]);
    audit_config_t cfg = {0};
    char model[AUDIT_HASH_HEX] = "";
    for (int a = 3; a < argc; a++) {
        if (!strcmp(argv[a], "--model") && a + 1 < argc) {
            int rc = audit_sha256_file(argv[++a], model);
            if (rc) {
                fprintf(stderr, "audit_gen: cannot hash %s: %s\n", argv[a], strerror(-rc));
                return 1;
            }
        } else if (!strcmp(argv[a], "--max-bytes") && a + 1 < argc) {
            cfg.max_file_bytes = strtoull(argv[++a], NULL, 10);
        } else if (!strcmp(argv[a], "--store-text")) {
            cfg.store_text = true;
        } else if (!strcmp(argv[a], "--fsync") && a + 1 < argc) {
            cfg.fsync = audit_fsync_parse(argv[++a]);
            if (cfg.fsync < 0) {
                fprintf(stderr, "audit_gen: --fsync is always or interval\n");
                return 2;
            }
        } else {
            fprintf(stderr, "audit_gen: bad argument %s\n", argv[a]);
            return 2;
        }
    }
    audit_log_t *log = audit_log_new(dir, &cfg);
    if (!log) {
        fprintf(stderr, "audit_gen: cannot open the log in %s\n", dir);
        return 1;
    }
    uint64_t first = audit_log_seq(log) + 1;
    for (int i = (int)first; i < (int)first + n; i++) {
        msg_generate_t g;
        msg_generate_init(&g);
        snprintf(g.id, sizeof g.id, "req-%d", i);
        char prompt[96], answer[96];
        snprintf(prompt, sizeof prompt, "What is %d times %d?\nAnswer briefly.", i, i + 1);
        snprintf(answer, sizeof answer, "%d times %d is %d.", i, i + 1, i * (i + 1));
        msg_chat_t chat[2] = {{"system", "You are a calculator.", 21},
                              {"user", prompt, strlen(prompt)}};
        if (i % 2) {
            g.prompt = prompt;
            g.prompt_len = strlen(prompt);
        } else {
            g.messages = chat;
            g.n_messages = 2;
            snprintf(g.session, sizeof g.session, "session-%d", i % 5);
        }
        g.max_tokens = 64;
        g.sampling = msg_sampling_defaults();
        g.sampling.temperature = 0.25f * (float)(i % 4);
        g.sampling.seed = 42u + (unsigned)i;
        g.has_seed = i % 2 == 0;
        snprintf(g.stop[0], sizeof g.stop[0], "\n\n");
        snprintf(g.stop[1], sizeof g.stop[1], "User:");
        g.n_stop = 2;
        uint8_t ident[5] = {0, 0x80, 0x00, 0x41, (uint8_t)i};
        audit_digest_t out; /* as a frontend hashes a streamed answer, piece by piece */
        audit_digest_init(&out);
        for (const char *p = answer; *p; p += 4)
            audit_digest_update(&out, p, strnlen(p, 4));
        char trace[256];
        snprintf(trace, sizeof trace,
                 "{\"decisions\":[{\"actor\":\"router\",\"what\":\"worker0\",\"why\":"
                 "{\"loads\":[%d,3]},\"us\":120},{\"actor\":\"worker0\",\"what\":\"stop\","
                 "\"why\":\"eos\",\"us\":%d}]}",
                 i % 3, 1000 + i);
        msg_timings_ms_t tm = {
            .queued_ms = 1.5, .prefill_ms = 20.25, .decode_ms = 80 + i, .ttft_ms = 22};
        bool err = i % 7 == 0;
        audit_record_t r = {
            .gen = &g,
            .rid = 0x5000u + (unsigned)i,
            .client_ident = ident,
            .client_ident_len = sizeof ident,
            .client_key = i % 4 == 0 ? "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7" : NULL,
            .model_sha256 = model[0] ? model : NULL,
            .output = g.stream && !cfg.store_text ? &out : NULL,
            .output_text = answer,
            .output_len = strlen(answer),
            .is_error = err,
            .finish = i % 5 == 0 ? MSG_FINISH_LENGTH : MSG_FINISH_EOS,
            .error_code = MSG_CODE_INTERNAL,
            .error_message = "every worker was lost",
            .usage = {.prompt_tokens = 10 + i, .completion_tokens = 6, .cached_tokens = i % 2 * 8},
            .timings = err ? NULL : &tm,
            .trace = i % 3 == 0 ? trace : NULL,
            .trace_len = strlen(trace),
            .resumes = i % 7 == 0 ? 2 : 0,
            .time_us = 1767225600000000ull + (uint64_t)i * 1500000u, /* 2026-01-01 */
        };
        int rc = audit_log_append(log, &r);
        if (rc) {
            fprintf(stderr, "audit_gen: append %d: %s\n", i, strerror(-rc));
            audit_log_destroy(&log);
            return 1;
        }
    }
    audit_log_destroy(&log);
    return 0;
}
