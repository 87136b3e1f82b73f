/* cmd_quantize.c - `strata quantize IN OUT TYPE`: rewrite a GGUF model with its weight
 * matrices in another type (see model/model_quantize.h for the per-tensor rules).
 */
#include "base_log.h"
#include "cli.h"
#include "model_quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_usage(FILE *f) {
    fprintf(f,
            "usage: strata quantize [--threads N] [--quiet] IN.gguf OUT.gguf TYPE\n"
            "  Rewrite IN with its 2-D weight matrices converted to TYPE; norms stay f32,\n"
            "  token_embd/output stay q8_0 under 4- and 5-bit types; metadata is copied.\n"
            "  TYPE: %s\n"
            "  -t, --threads N    threads (default: %d)\n"
            "  -q, --quiet        no per-tensor progress lines\n"
            "  -h, --help         this help\n",
            model_quantize_type_names(), cli_default_threads());
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
    int rc = model_quantize(pos[0], pos[1], pos[2], (int)threads, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "strata quantize: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "strata quantize: wrote %s (%s) in %.1f s\n", pos[1], pos[2],
                cli_now() - t0);
    return 0;
}
