/* cmd_audit.c - `strata audit`: check an audit log's chain (verify) and render one record
 * (show) for an end user, a developer or an auditor (docs/AUDIT.md). */
#include "cli.h"

#include "audit_log.h"

#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void s_help(FILE *f) {
    fprintf(f,
            "usage: strata audit verify [DIR|FILE]\n"
            "       strata audit show ID [--dir DIR] [--seq N] [--as summary|json|raw|audit]\n"
            "\n"
            "The audit log of `strata serve` (docs/AUDIT.md): one hash-chained record per\n"
            "finished request in DIR/audit-NNNNNN.log, anchored by DIR/audit.head.  DIR\n"
            "defaults to $STRATA_AUDIT_DIR, else ./audit.\n"
            "\n"
            "verify  check every record, the chain across files and the head.  Exit 0 with a\n"
            "        summary when intact; exit 1 with one line naming the first bad record\n"
            "        (file, line, offset, seq) and why: edited, deleted, moved, torn (a partial\n"
            "        last write), cut off the end.  A FILE is checked on its own (no head).\n"
            "show    find the record of request ID (the client's id, or the server's rid; the\n"
            "        last one when several match) and render it:\n"
            "          summary  (default) for the end user: what was asked, when, what it cost\n"
            "                   in tokens, how it ended\n"
            "          json     the whole record, indented, for a developer\n"
            "          raw      the record's exact line (the bytes its hash covers)\n"
            "          audit    an auditor's report: who, when, which model, which parameters,\n"
            "                   what was decided (the trace), and the integrity of the record\n"
            "                   and of the chain up to it\n"
            "        Exit 0; 1 when no record matches or the record or its chain is broken.\n"
            "  --dir DIR      the log (a directory or one file)\n"
            "  --seq N        the record of seq N (with ID: it must also be ID's)\n"
            "  --as VIEW      summary, json, raw or audit\n"
            "  -h, --help     this help\n");
}

static const char *s_default_dir(void) {
    const char *d = getenv("STRATA_AUDIT_DIR");
    return d && *d ? d : "audit";
}

/* ---- verify */

static int s_verify(const char *path) {
    audit_report_t r;
    int rc = audit_verify(path, &r);
    if (rc && rc != -EBADMSG) {
        fprintf(stderr, "strata audit: cannot check %s: %s\n", path, strerror(-rc));
        return 2;
    }
    if (rc == -EBADMSG) {
        if (r.line)
            printf("strata audit: %s: BROKEN at %s line %llu (offset %llu), seq %llu: %s: %s\n",
                   path, r.file, (unsigned long long)r.line, (unsigned long long)r.offset,
                   (unsigned long long)r.seq, audit_problem_name(r.problem), r.why);
        else
            printf("strata audit: %s: BROKEN%s%s, seq %llu: %s: %s\n", path,
                   r.file[0] ? " at " : "", r.file, (unsigned long long)r.seq,
                   audit_problem_name(r.problem), r.why);
        printf("  %llu records before it are intact (last seq %llu, hash %s)\n",
               (unsigned long long)r.n_records, (unsigned long long)r.last_seq, r.last_hash);
        return 1;
    }
    printf("strata audit: %s: intact: %llu record%s", path, (unsigned long long)r.n_records,
           r.n_records == 1 ? "" : "s");
    if (r.n_records)
        printf(" (seq %llu..%llu)", (unsigned long long)(r.last_seq - r.n_records + 1),
               (unsigned long long)r.last_seq);
    printf(" in %d file%s\n", r.n_files, r.n_files == 1 ? "" : "s");
    if (r.head_checked)
        printf("  head anchors seq %llu; %llu record%s written after its last sync\n",
               (unsigned long long)r.head_seq, (unsigned long long)r.unanchored,
               r.unanchored == 1 ? "" : "s");
    else
        printf("  one file: its head (the end of the log) not checked\n");
    if (r.n_torn_noted)
        printf("  %d torn write%s (a crash mid-record) noted by the writer\n", r.n_torn_noted,
               r.n_torn_noted == 1 ? "" : "s");
    printf("  last hash %s (keep it elsewhere to anchor the log)\n", r.last_hash);
    return 0;
}

/* ---- show */

static const cJSON *s_get(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *s_str(const cJSON *o, const char *k, const char *dflt) {
    const cJSON *x = s_get(o, k);
    return cJSON_IsString(x) ? x->valuestring : dflt;
}

static double s_num(const cJSON *o, const char *k) {
    const cJSON *x = s_get(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : 0;
}

/* A JSON value on one line (for stop strings and texts with control characters). */
static void s_print_json(const cJSON *x) {
    char *s = x ? cJSON_PrintUnformatted(x) : NULL;
    printf("%s", s ? s : "null");
    free(s);
}

/* Text indented by ind spaces after its first line, at most max bytes. */
static void s_print_text(const char *t, size_t max, int ind) {
    size_t n = strlen(t);
    for (size_t i = 0; i < n && i < max; i++) {
        putchar(t[i]);
        if (t[i] == '\n' && i + 1 < n)
            printf("%*s", ind, "");
    }
    if (n > max)
        printf("... (%zu more bytes)", n - max);
}

static const char *s_finish_words(const char *f) {
    return !strcmp(f, "eos")         ? "completed (the model ended its answer)"
           : !strcmp(f, "length")    ? "cut at the token limit (max_tokens, or the context)"
           : !strcmp(f, "stop")      ? "stopped at a stop string"
           : !strcmp(f, "cancelled") ? "cancelled"
                                     : f;
}

/* Where the record stands in the chain. */
typedef struct {
    bool record_ok; /* its own hash matches its bytes */
    char record_why[256];
    int verify_rc;      /* audit_verify's */
    audit_report_t rep; /* its report */
    bool chain_ok;      /* the chain is intact up to and including the record */
    bool broken_later;  /* ... and broken after it */
} s_integrity_t;

static void s_integrity(const char *path, const audit_found_t *f, s_integrity_t *in) {
    memset(in, 0, sizeof *in);
    in->record_ok =
        audit_record_intact(f->text, f->text_len, in->record_why, sizeof in->record_why);
    in->verify_rc = audit_verify(path, &in->rep);
    if (in->verify_rc == 0)
        in->chain_ok = in->record_ok;
    else if (in->verify_rc == -EBADMSG && in->record_ok && in->rep.seq > f->seq)
        in->chain_ok = in->broken_later = true;
}

static void s_print_problem(const audit_report_t *r) {
    printf("%s at %s", audit_problem_name(r->problem), r->file[0] ? r->file : "?");
    if (r->line)
        printf(" line %llu (offset %llu)", (unsigned long long)r->line,
               (unsigned long long)r->offset);
    printf(", seq %llu: %s", (unsigned long long)r->seq, r->why);
}

static void s_show_summary(const cJSON *j) {
    const cJSON *prompt = s_get(j, "prompt"), *out = s_get(j, "output");
    const cJSON *u = s_get(j, "usage"), *end = s_get(j, "end"), *t = s_get(j, "timings_ms");
    printf("Request %s, finished %s\n", s_str(j, "id", "(no id)"), s_str(j, "time", "?"));
    printf("  asked:   ");
    if (!cJSON_IsObject(prompt)) {
        printf("(the request could not be read)\n");
    } else {
        const cJSON *text = s_get(prompt, "text");
        if (cJSON_IsString(text)) {
            s_print_text(text->valuestring, 400, 11);
            printf("\n");
        } else if (cJSON_IsArray(text)) {
            const cJSON *m;
            bool first = true;
            cJSON_ArrayForEach(m, text) {
                printf("%s%s: ", first ? "" : "           ", s_str(m, "role", "?"));
                s_print_text(s_str(m, "content", ""), 400, 11);
                printf("\n");
                first = false;
            }
        } else {
            printf("a %s of %.0f bytes (the text is not kept; its BLAKE2b is %.16s...)\n",
                   !strcmp(s_str(prompt, "kind", ""), "messages") ? "conversation" : "prompt",
                   s_num(prompt, "bytes"), s_str(prompt, "blake2b", "?"));
        }
    }
    printf("  answer:  ");
    const cJSON *otext = s_get(out, "text");
    if (cJSON_IsString(otext)) {
        s_print_text(otext->valuestring, 400, 11);
        printf("\n");
    } else {
        printf("%.0f bytes (the text is not kept; its BLAKE2b is %.16s...)\n", s_num(out, "bytes"),
               s_str(out, "blake2b", "?"));
    }
    double pt = s_num(u, "prompt_tokens"), ct = s_num(u, "completion_tokens");
    printf("  cost:    %.0f tokens: %.0f of prompt (%.0f of them from the cache) + %.0f "
           "generated\n",
           pt + ct, pt, s_num(u, "cached_tokens"), ct);
    printf("  ended:   ");
    if (cJSON_IsString(s_get(end, "finish")))
        printf("%s", s_finish_words(s_str(end, "finish", "?")));
    else
        printf("failed: %s (%s)", s_str(end, "error", "?"), s_str(end, "message", "no message"));
    if (cJSON_IsObject(t))
        printf("; first token after %.0f ms, %.0f ms in all", s_num(t, "ttft"),
               s_num(t, "queued") + s_num(t, "prefill") + s_num(t, "decode"));
    printf("\n");
}

/* Print the trace's bytes: JSON indented, MessagePack as msgpack-c prints it, else a note. */
static void s_print_trace(const unsigned char *b, size_t n) {
    cJSON *j = cJSON_ParseWithLength((const char *)b, n);
    if (j) {
        char *s = cJSON_Print(j);
        printf("              ");
        s_print_text(s ? s : "", 1 << 20, 14);
        printf("\n");
        free(s);
        cJSON_Delete(j);
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)b, n, &off) == MSGPACK_UNPACK_SUCCESS && off == n) {
        printf("              (MessagePack) ");
        msgpack_object_print(stdout, u.data);
        printf("\n");
    } else {
        printf("              (%zu bytes, neither JSON nor MessagePack)\n", n);
    }
    msgpack_unpacked_destroy(&u);
}

/* The trace line of a record: its digest and, when kept, the trace itself. */
static void s_show_trace(const cJSON *tr) {
    if (!cJSON_IsObject(tr)) {
        printf("  trace         none (the request did not ask for one)\n");
    } else {
        printf("  trace         %.0f bytes, BLAKE2b %s\n", s_num(tr, "bytes"),
               s_str(tr, "blake2b", "?"));
        const char *b64 = s_str(tr, "base64", NULL);
        if (b64) {
            size_t cap = strlen(b64), n = 0;
            unsigned char *bin = malloc(cap + 1);
            if (bin && !sodium_base642bin(bin, cap, b64, strlen(b64), NULL, &n, NULL,
                                          sodium_base64_VARIANT_ORIGINAL)) {
                char hex[AUDIT_HASH_HEX];
                audit_blake2b_hex(bin, n, hex);
                printf("  trace kept    %s its digest\n",
                       !strcmp(hex, s_str(tr, "blake2b", "")) ? "matches" : "DOES NOT match");
                s_print_trace(bin, n);
            } else {
                printf("  trace kept    not valid base64\n");
            }
            free(bin);
        } else {
            printf("  trace kept    no (only its digest)\n");
        }
    }
}

/* The record's and the chain's integrity lines. */
static void s_show_integrity(const cJSON *j, const s_integrity_t *in) {
    printf("\nIntegrity\n  record        ");
    if (in->record_ok)
        printf("intact: its hash %s matches its bytes\n", s_str(j, "hash", "?"));
    else
        printf("BROKEN: %s\n", in->record_why);
    printf("  chain         ");
    if (in->verify_rc && in->verify_rc != -EBADMSG) {
        printf("not checked: %s\n", strerror(-in->verify_rc));
    } else if (in->verify_rc == 0) {
        printf("intact from %s to the end of the log (seq %llu",
               in->rep.head_checked ? "genesis" : "the start of this file",
               (unsigned long long)in->rep.last_seq);
        if (in->rep.head_checked)
            printf(", head at seq %llu", (unsigned long long)in->rep.head_seq);
        printf(")\n");
    } else if (in->chain_ok) {
        printf("intact up to this record; broken after it: ");
        s_print_problem(&in->rep);
        printf("\n");
    } else {
        printf("BROKEN at or before this record: ");
        s_print_problem(&in->rep);
        printf("\n");
    }
}

static void s_show_audit(const cJSON *j, const audit_found_t *f, const s_integrity_t *in,
                         const char *path) {
    const cJSON *c = s_get(j, "client"), *p = s_get(j, "params"), *pr = s_get(j, "prompt");
    const cJSON *out = s_get(j, "output"), *u = s_get(j, "usage"), *end = s_get(j, "end");
    const cJSON *tm = s_get(j, "timings_ms"), *tr = s_get(j, "trace");
    printf("AUDIT REPORT: record seq %llu of %s (%s line %llu, offset %llu)\n",
           (unsigned long long)f->seq, path, f->file, (unsigned long long)f->line,
           (unsigned long long)f->offset);
    if (f->n_matches > 1)
        printf("  note: %d records match; this is the last (--seq picks another)\n", f->n_matches);
    printf("\nWho\n");
    const char *key = s_str(c, "curve_key", NULL);
    if (key)
        printf("  client        CURVE public key %s (authenticated by the endpoint)\n", key);
    else
        printf("  client        connection routing id %s (no CURVE: the connection, not a "
               "key, identifies it)\n",
               s_str(c, "routing_id", "unknown"));
    printf("  request       id %s, server rid %s, session %s\n", s_str(j, "id", "(none)"),
           s_str(j, "rid", "(none)"), s_str(j, "session", "(none)"));
    printf("\nWhen\n  finished      %s (UTC)\n", s_str(j, "time", "?"));
    if (cJSON_IsObject(tm))
        printf("  timings       queued %.3f ms, prefill %.3f ms, decode %.3f ms, first token "
               "%.3f ms\n",
               s_num(tm, "queued"), s_num(tm, "prefill"), s_num(tm, "decode"), s_num(tm, "ttft"));
    printf("\nWhich model\n  sha256        %s\n", s_str(j, "model_sha256", "(not recorded)"));
    printf("\nWhich parameters\n");
    if (cJSON_IsObject(p)) {
        printf("  sampling      temperature %g, top_k %.0f, top_p %g, min_p %g, repeat_penalty "
               "%g, repeat_last_n %.0f\n",
               s_num(p, "temperature"), s_num(p, "top_k"), s_num(p, "top_p"), s_num(p, "min_p"),
               s_num(p, "repeat_penalty"), s_num(p, "repeat_last_n"));
        printf("  seed          %s (%s)\n", s_str(p, "seed", "?"),
               cJSON_IsTrue(s_get(p, "seed_given")) ? "given by the client" : "the server's");
        printf("  limits        max_tokens %.0f, stop ", s_num(p, "max_tokens"));
        s_print_json(s_get(p, "stop"));
        printf(", stream %s\n", cJSON_IsTrue(s_get(p, "stream")) ? "yes" : "no");
    } else {
        printf("  (none: the request could not be read)\n");
    }
    printf("\nInput and output\n");
    if (cJSON_IsObject(pr))
        printf("  prompt        %s, %.0f bytes, BLAKE2b %s%s\n", s_str(pr, "kind", "?"),
               s_num(pr, "bytes"), s_str(pr, "blake2b", "?"),
               s_get(pr, "text") ? " (text kept)" : "");
    printf("  output        %.0f bytes, BLAKE2b %s%s\n", s_num(out, "bytes"),
           s_str(out, "blake2b", "?"), s_get(out, "text") ? " (text kept)" : "");
    printf("  usage         prompt %.0f tokens (%.0f cached), completion %.0f; draft proposed "
           "%.0f, accepted %.0f\n",
           s_num(u, "prompt_tokens"), s_num(u, "cached_tokens"), s_num(u, "completion_tokens"),
           s_num(u, "draft_proposed"), s_num(u, "draft_accepted"));
    printf("\nWhat was decided\n  outcome       ");
    if (cJSON_IsString(s_get(end, "finish")))
        printf("done: %s\n", s_str(end, "finish", "?"));
    else
        printf("error: %s: %s\n", s_str(end, "error", "?"), s_str(end, "message", ""));
    printf("  resumes       %.0f\n", s_num(j, "resumes"));
    s_show_trace(tr);
    s_show_integrity(j, in);
}

static int s_show(int argc, char **argv) {
    const char *dir = NULL, *as = "summary";
    long seq = 0;
    static const struct option longs[] = {{"dir", required_argument, 0, 'd'},
                                          {"seq", required_argument, 0, 's'},
                                          {"as", required_argument, 0, 'a'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        if (o == 'd') {
            dir = optarg;
        } else if (o == 's') {
            if (!cli_int("audit show", "--seq", optarg, 1, (1L << 53), &seq))
                return 2;
        } else if (o == 'a') {
            as = optarg;
        } else if (o == 'h') {
            s_help(stdout);
            return 0;
        } else {
            fprintf(stderr, "strata audit show: bad option (--help)\n");
            return 2;
        }
    }
    if (strcmp(as, "summary") && strcmp(as, "json") && strcmp(as, "raw") && strcmp(as, "audit")) {
        fprintf(stderr, "strata audit show: --as is summary, json, raw or audit, not '%s'\n", as);
        return 2;
    }
    const char *id = optind < argc ? argv[optind] : NULL;
    if ((!id && !seq) || argc - optind > 1) {
        fprintf(stderr, "strata audit show: needs one request ID (or --seq N) (--help)\n");
        return 2;
    }
    if (!dir)
        dir = s_default_dir();
    struct stat st;
    if (stat(dir, &st)) {
        fprintf(stderr, "strata audit show: cannot read %s: %s\n", dir, strerror(errno));
        return 2;
    }
    audit_found_t f;
    int rc = audit_find(dir, id, (uint64_t)seq, &f);
    if (rc == -ENOENT) {
        if (id)
            fprintf(stderr, "strata audit show: no record of request %s in %s\n", id, dir);
        else
            fprintf(stderr, "strata audit show: no record of seq %ld in %s\n", seq, dir);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "strata audit show: cannot read %s: %s\n", dir, strerror(-rc));
        return 2;
    }
    cJSON *j = cJSON_ParseWithLength(f.text, f.text_len);
    s_integrity_t in;
    s_integrity(dir, &f, &in);
    bool ok = in.record_ok && in.chain_ok;
    if (!strcmp(as, "raw")) {
        fwrite(f.text, 1, f.text_len, stdout);
        printf("\n");
    } else if (!strcmp(as, "json")) {
        char *s = cJSON_Print(j);
        printf("%s\n", s ? s : "null");
        free(s);
    } else if (!strcmp(as, "audit")) {
        s_show_audit(j, &f, &in, dir);
    } else {
        s_show_summary(j);
    }
    if (!ok && strcmp(as, "audit"))
        fprintf(stderr, "strata audit show: warning: %s (`strata audit show --as audit`)\n",
                !in.record_ok ? "this record was altered"
                              : "the chain before this record is broken");
    cJSON_Delete(j);
    free(f.text);
    return ok ? 0 : 1;
}

int cmd_audit(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        s_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "verify")) {
        if (argc > 2 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
            s_help(stdout);
            return 0;
        }
        if (argc > 3 || (argc == 3 && argv[2][0] == '-')) {
            fprintf(stderr, "strata audit verify: takes one DIR or FILE (--help)\n");
            return 2;
        }
        return s_verify(argc == 3 ? argv[2] : s_default_dir());
    }
    if (!strcmp(argv[1], "show"))
        return s_show(argc - 1, argv + 1);
    fprintf(stderr, "strata audit: unknown subcommand '%s' (verify or show; --help)\n", argv[1]);
    return 2;
}
