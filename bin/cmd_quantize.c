/* cmd_quantize.c - `strata quantize IN OUT TYPE`: rewrite a GGUF model with its weight
 * matrices in another type (see model/model_quantize.h for the per-tensor rules).
 */
#include "base_log.h"
#include "cli.h"
#include "kern_ops.h"
#include "model_quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_usage(FILE *f) {
    fprintf(f,
            "usage: strata quantize [--threads N] [--quiet] IN.gguf OUT.gguf TYPE\n"
            "  Rewrite IN with its 2-D weight matrices converted to TYPE; norms stay f32,\n"
            "  token_embd/output become q8_0 under q4_0..q5_1, the output matrix q6_k (q8_0\n"
            "  if its rows are not a multiple of 256) under the k types; metadata is copied.\n"
            "  Rows that are not a multiple of TYPE's block fall back as llama.cpp does:\n"
            "  q4_k -> q5_0, q5_k -> q5_1, q6_k and 32-element types -> q8_0, else f16.\n"
            "  At the end, a summary: tensors per type, and the tensors that fell back.\n"
            "  TYPE: %s\n"
            "  -t, --threads N    threads (default: %d)\n"
            "  -q, --quiet        no per-tensor progress lines\n"
            "  -h, --help         this help\n",
            model_quantize_type_names(), cli_default_threads());
}

/* "blk.12.attn_q.weight" -> "blk.*.attn_q.weight": one line per kind of tensor. */
static void s_pattern(const char *name, char *out, size_t n) {
    const char *p = name;
    if (!strncmp(p, "blk.", 4)) {
        const char *q = p + 4;
        while (*q >= '0' && *q <= '9')
            q++;
        if (q > p + 4 && *q == '.') {
            snprintf(out, n, "blk.*%s", q);
            return;
        }
    }
    snprintf(out, n, "%s", name);
}

/* The summary on stdout: how many tensors of each type, then the fallbacks grouped by
 * tensor kind (same name but the layer number, same types and row length). */
static void s_print_summary(const model_quantize_summary_t *s) {
    printf("%lld tensors:", (long long)s->n_tensors);
    const char *sep = " ";
    for (int t = 0; t < KERN_TYPE_COUNT; t++)
        if (s->count[t]) {
            printf("%s%lld %s", sep, (long long)s->count[t], kern_type_traits(t)->name);
            sep = ", ";
        }
    printf("\n");
    if (!s->n_fallback)
        return;
    printf("%lld fell back (rows not a multiple of the type's block):\n", (long long)s->n_fallback);
    bool *done = calloc((size_t)s->n_fallback, sizeof *done);
    for (int64_t i = 0; done && i < s->n_fallback; i++) {
        if (done[i])
            continue;
        const model_quantize_fallback_t *f = &s->fallback[i];
        char pat[128], other[128];
        s_pattern(f->name, pat, sizeof pat);
        int64_t n = 0;
        for (int64_t j = i; j < s->n_fallback; j++) {
            const model_quantize_fallback_t *g = &s->fallback[j];
            s_pattern(g->name, other, sizeof other);
            if (!done[j] && !strcmp(pat, other) && g->want == f->want && g->got == f->got &&
                g->row == f->row) {
                done[j] = true;
                n++;
            }
        }
        printf("  %-28s x%-4lld %s -> %s (rows of %lld)\n", n > 1 ? pat : f->name, (long long)n,
               kern_type_traits((int)f->want)->name, kern_type_traits((int)f->got)->name,
               (long long)f->row);
    }
    free(done);
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    long threads = cli_default_threads();
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has_val) {
            if (!cli_int("quantize", a, argv[++i], 1, 256, &threads))
                return 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "strata quantize: unknown option or missing value: %s (see --help)\n",
                    a);
            return 1;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "strata quantize: too many arguments: %s (see --help)\n", a);
            return 1;
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, "strata quantize: need IN OUT TYPE (see --help)\n");
        return 1;
    }
    if (!model_quantize_type_from_name(pos[2], NULL)) {
        fprintf(stderr, "strata quantize: unknown type '%s'; valid types: %s\n", pos[2],
                model_quantize_type_names());
        return 1;
    }
    /* progress goes through the log at info level: show it unless asked not to
     * (or unless STRATA_LOG chose a level explicitly) */
    if (!quiet && !getenv("STRATA_LOG") && base_log_level() < BASE_LOG_INFO)
        base_log_set_level(BASE_LOG_INFO);

    char err[1024] = "";
    double t0 = cli_now();
    model_quantize_summary_t sum = {0};
    int rc = model_quantize(pos[0], pos[1], pos[2], (int)threads, &sum, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "strata quantize: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "strata quantize: wrote %s (%s) in %.1f s\n", pos[1], pos[2],
                cli_now() - t0);
    s_print_summary(&sum);
    model_quantize_summary_clear(&sum);
    return 0;
}
