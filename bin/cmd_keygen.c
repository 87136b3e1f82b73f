/* cmd_keygen.c - `strata keygen`: CURVE key pairs for the actors and clients of
 * a deployment (docs/SECURITY.md), written as zcert files: DIR/NAME.key (the
 * public key, safe to copy) and DIR/NAME.key_secret (the pair, mode 0600). */
#include "cli.h"

#include <czmq.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void s_usage(FILE *f) {
    fprintf(f, "usage: strata keygen [--force] DIR NAME...\n"
               "  Write a CURVE key pair per NAME: DIR/NAME.key (public) and DIR/NAME.key_secret\n"
               "  (secret, mode 0600), in zcert format.  Actors use DIR as the topology's\n"
               "  'security - keys=DIR' (one pair per actor name and 'supervisor'); a client\n"
               "  endpoint uses a pair as client_secret= and a directory of client public keys\n"
               "  as client_allow= (docs/SECURITY.md).\n"
               "  --force      overwrite existing key files (refused otherwise)\n"
               "  -h, --help   this help\n");
}

/* A name is a file name: letters, digits, '_', '-', '.' (not leading). */
static bool s_valid(const char *name) {
    if (!name[0] || name[0] == '.' || strlen(name) > 64)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return false;
    return true;
}

int cmd_keygen(int argc, char **argv) {
    bool force = false;
    static const struct option longs[] = {
        {"force", no_argument, 0, 'f'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "fh", longs, NULL)) != -1) {
        if (o == 'f') {
            force = true;
        } else if (o == 'h') {
            s_usage(stdout);
            return 0;
        } else {
            s_usage(stderr);
            return 2;
        }
    }
    if (argc - optind < 2) {
        fprintf(stderr, "strata keygen: needs a directory and at least one name (--help)\n");
        return 2;
    }
    const char *dir = argv[optind];
    if (!zmq_has("curve")) {
        fprintf(stderr, "strata keygen: this libzmq was built without CURVE\n");
        return 1;
    }
    if (mkdir(dir, 0700) && errno != EEXIST) {
        fprintf(stderr, "strata keygen: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char pub[1024], sec[1100];
    /* check every name first: nothing is written when one is refused */
    for (int i = optind + 1; i < argc; i++) {
        if (!s_valid(argv[i])) {
            fprintf(stderr, "strata keygen: bad name '%s' (letters, digits, _ - .)\n", argv[i]);
            return 2;
        }
        snprintf(pub, sizeof pub, "%s/%s.key", dir, argv[i]);
        snprintf(sec, sizeof sec, "%s_secret", pub);
        if (!force && (!access(pub, F_OK) || !access(sec, F_OK))) {
            fprintf(stderr, "strata keygen: %s exists (--force overwrites it)\n", pub);
            return 1;
        }
    }
    for (int i = optind + 1; i < argc; i++) {
        snprintf(pub, sizeof pub, "%s/%s.key", dir, argv[i]);
        snprintf(sec, sizeof sec, "%s_secret", pub);
        zcert_t *c = zcert_new();
        if (c)
            zcert_set_meta(c, "name", "%s", argv[i]);
        /* zcert_save_secret creates the file 0600 (zsys_file_mode_private) */
        int rc = c ? zcert_save(c, pub) : -1;
        zcert_destroy(&c);
        if (rc) {
            fprintf(stderr, "strata keygen: cannot write %s: %s\n", pub, strerror(errno));
            return 1;
        }
        printf("%s %s\n", pub, sec);
    }
    return 0;
}
