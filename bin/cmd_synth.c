/* cmd_synth.c - `strata synth-model`: a random-weight llama GGUF of a real shape
 * (model/model_synth.h), for speed measurements where no model can be fetched: the
 * device check writes Llama-3.2-1B's shape in Q4_K and Q8_0 on a GPU machine. */
#include "cli.h"
#include "model_synth.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_usage(FILE *f) {
    fprintf(f, "usage: strata synth-model [--shape NAME] [--type TYPE] [--seed N] OUT.gguf\n"
               "  Write a llama model of random weights (noise at a sane scale: finite, spread\n"
               "  logits; the text is not language) and a minimal vocabulary, to measure speed\n"
               "  at a real size without a download.  Every byte is read as a real model's.\n"
               "  --shape NAME  llama-1b (Llama-3.2-1B: 16 x 2048, FFN 8192, 32/8 heads, 128256\n"
               "                tokens), llama-3b, llama-8b, or tiny (the unit suites' model)\n"
               "                (default llama-1b)\n"
               "  --type TYPE   f32, f16, q8_0 or q4_k: every matrix (default q4_k; tiny: f32)\n"
               "  --seed N      weights (default 1)\n"
               "  -h, --help    this help\n");
}

int cmd_synth_model(int argc, char **argv) {
    static const struct option longs[] = {{"shape", required_argument, 0, 's'},
                                          {"type", required_argument, 0, 't'},
                                          {"seed", required_argument, 0, 'S'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    const char *shape = "llama-1b", *type = NULL;
    model_synth_t c = {0};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        if (o == 's') {
            shape = optarg;
        } else if (o == 't') {
            type = optarg;
        } else if (o == 'S') {
            char *end;
            c.seed = strtoull(optarg, &end, 10);
            if (*end || !*optarg) {
                fprintf(stderr, "strata synth-model: --seed %s is not a number\n", optarg);
                return 2;
            }
        } else if (o == 'h') {
            s_usage(stdout);
            return 0;
        } else {
            s_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "strata synth-model: needs one output file (--help)\n");
        return 2;
    }
    if (strcmp(shape, "tiny") && model_synth_shape(shape, &c)) {
        fprintf(stderr, "strata synth-model: no shape '%s' (llama-1b, llama-3b, llama-8b, tiny)\n",
                shape);
        return 2;
    }
    if (!type) /* tiny's 64-wide rows take no k-quant: its default is f32 */
        type = strcmp(shape, "tiny") ? "q4_k" : "f32";
    static const struct {
        const char *name;
        kern_type_t t;
    } types[] = {{"f32", KERN_F32}, {"f16", KERN_F16}, {"q8_0", KERN_Q8_0}, {"q4_k", KERN_Q4_K}};
    int ti = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(type, types[i].name))
            ti = i;
    if (ti < 0) {
        fprintf(stderr, "strata synth-model: no type '%s' (f32, f16, q8_0, q4_k)\n", type);
        return 2;
    }
    c.wtype = types[ti].t;
    char err[256];
    double t0 = cli_now();
    int rc = model_synth_write(argv[optind], &c, err, sizeof err);
    if (rc) {
        fprintf(stderr, "strata synth-model: %s\n", err);
        return 1;
    }
    fprintf(stderr, "strata synth-model: wrote %s (%s, %s) in %.1f s\n", argv[optind], shape, type,
            cli_now() - t0);
    return 0;
}
