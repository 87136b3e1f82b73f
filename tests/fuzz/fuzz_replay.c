/* fuzz_replay.c - the main a fuzz target links when libFuzzer is not in use (the CMake
 * build): it runs every file named on the command line, or found in a directory named
 * there (one level), through LLVMFuzzerTestOneInput once, in name order, so that CTest
 * replays the seed corpora (and any crash a fuzzing run saved) in every build.  A target
 * property that breaks aborts, as under libFuzzer.
 *   fuzz_<target>_replay [--min N] PATH...
 * Exits 0 after at least N inputs (default 1: a replay of nothing is a failure, not a
 * pass), 1 when fewer were found or a path cannot be read, 77 (skipped) when a path does
 * not exist: the corpus was not written (its fixture test skipped: a missing tool), except
 * under CI=true, where that is a failure too. */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* libFuzzer's optional set-up hook: called once, before the first input, when defined */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Run one file; 0, or -1 when it cannot be read. */
static int s_run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy, so that ASan catches a read past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int s_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool s_in_ci(void) {
    const char *ci = getenv("CI");
    return ci && (!strcasecmp(ci, "true") || !strcmp(ci, "1") || !strcasecmp(ci, "yes"));
}

/* Run path (a file, or each regular file in a directory); adds the inputs run to *n.
 * Returns 0, -1 on a failure, 77 when path does not exist (outside CI). */
static int s_run_path(const char *path, long *n) {
    struct stat st;
    if (stat(path, &st)) {
        bool ci = s_in_ci();
        printf("%s: no corpus at %s (was it written? its seeds test may have skipped)%s\n",
               ci ? "FAIL" : "SKIP", path, ci ? " (required under CI=true)" : "");
        return ci ? -1 : 77;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*n)++;
        return s_run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "fuzz_replay: cannot list %s\n", path);
        return -1;
    }
    char **names = NULL;
    size_t k = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (e->d_name[0] == '.' || stat(full, &st) || !S_ISREG(st.st_mode))
            continue;
        char **x = realloc(names, (k + 1) * sizeof *names);
        if (!x || !(x[k] = strdup(full))) {
            names = x ? x : names;
            rc = -1;
            break;
        }
        names = x;
        k++;
    }
    closedir(d);
    if (names)
        qsort(names, k, sizeof *names, s_cmp);
    for (size_t i = 0; i < k; i++) {
        if (rc == 0) {
            (*n)++;
            rc = s_run_file(names[i]);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    long min = 1, n = 0;
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--min")) {
        min = strtol(argv[2], NULL, 10);
        first = 3;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [--min N] FILE_OR_DIR...\n", argv[0]);
        return 1;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = first; i < argc; i++) {
        int rc = s_run_path(argv[i], &n);
        if (rc)
            return rc == 77 ? 77 : 1;
    }
    if (n < min) {
        fprintf(stderr, "fuzz_replay: %ld inputs, want at least %ld (an empty corpus?)\n", n, min);
        return 1;
    }
    printf("fuzz_replay: %ld inputs ran, none broke a property\n", n);
    return 0;
}
