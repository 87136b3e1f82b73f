/* cmd_grammar.c - `strata grammar`: compile a GBNF grammar, JSON Schema or regex (print the
 * GBNF or the refusal), check a text against it, generate random sentences by walking the
 * token mask (for the schema corpus test), and time the mask (bench).  docs/GRAMMAR.md.
 */
#include "cli.h"
#include "cli_flags.h"
#include "grammar.h"
#include "grammar_mask.h"
#include "model_gguf.h"
#include "model_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- sources */

typedef struct {
    const char *kind; /* "gbnf", "schema", "regex" */
    const char *arg;  /* file or regex */
} s_src_t;

/* The GBNF of a source, malloc'd; NULL with a printed reason. */
static char *s_gbnf(const s_src_t *src) {
    char err[512];
    if (!strcmp(src->kind, "regex")) {
        char *g = grammar_regex_to_gbnf(src->arg, err, sizeof err);
        if (!g)
            fprintf(stderr, "strata grammar: %s\n", err);
        return g;
    }
    size_t len;
    char *text = cli_read_file(src->arg, &len);
    if (!text) {
        fprintf(stderr, "strata grammar: cannot read %s\n", src->arg);
        return NULL;
    }
    if (!strcmp(src->kind, "gbnf"))
        return text;
    char *g = grammar_schema_to_gbnf(text, len, err, sizeof err);
    free(text);
    if (!g)
        fprintf(stderr, "strata grammar: %s: %s\n", src->arg, err);
    return g;
}

static grammar_t *s_grammar(const s_src_t *src) {
    char *text = s_gbnf(src), err[512];
    if (!text)
        return NULL;
    grammar_t *g = grammar_new(text, err, sizeof err);
    if (!g)
        fprintf(stderr, "strata grammar: %s: grammar: %s\n", src->arg, err);
    free(text);
    return g;
}

/* ---- vocabularies */

typedef struct {
    grammar_vocab_t *v;
    int32_t eog; /* one end-of-generation id */
} s_vocab_t;

static uint64_t s_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* 256 single bytes, some multi-byte JSON-ish tokens, one end token. */
static bool s_vocab_bytes(s_vocab_t *out) {
    static const char *multi[] = {"{\"",  "\":", "\": ",  "\", \"", "\",", "true", "false",
                                  "null", "  ",  "\n  ",  "12",     "0.5", "abc",  "\"}",
                                  "],",   "}]",  "[{",    "-1",     "e+",  "\\n",  "\\u00",
                                  "é",    "é\"", "2024-", "-0"};
    int nm = (int)(sizeof multi / sizeof multi[0]), n = 256 + nm + 1;
    const char **p = malloc((size_t)n * sizeof *p);
    uint32_t *len = malloc((size_t)n * sizeof *len);
    static char bytes[256];
    if (!p || !len) {
        free(p);
        free(len);
        return false;
    }
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        p[i] = &bytes[i];
        len[i] = 1;
    }
    for (int i = 0; i < nm; i++) {
        p[256 + i] = multi[i];
        len[256 + i] = (uint32_t)strlen(multi[i]);
    }
    p[n - 1] = "";
    len[n - 1] = 0;
    out->eog = n - 1;
    out->v = grammar_vocab_new(n, p, len, &out->eog, 1);
    free(p);
    free(len);
    return out->v != NULL;
}

/* The model's token pieces, extended to n_total tokens with random byte strings. */
static bool s_vocab_model(s_vocab_t *out, const char *path, int n_total, uint64_t seed) {
    char err[512];
    model_gguf_t *gg = model_gguf_open(path, err, sizeof err);
    if (!gg) {
        fprintf(stderr, "strata grammar: %s\n", err);
        return false;
    }
    model_tokenizer_t *tok = model_tokenizer_new(gg, err, sizeof err);
    model_gguf_destroy(&gg);
    if (!tok) {
        fprintf(stderr, "strata grammar: %s: %s\n", path, err);
        return false;
    }
    int n = model_tokenizer_n_vocab(tok), total = n_total > n ? n_total : n, n_eog = 0;
    const char **p = malloc((size_t)total * sizeof *p);
    uint32_t *len = malloc((size_t)total * sizeof *len);
    char *extra = malloc((size_t)(total - n) * 12 + 1);
    int32_t *eog = model_tokenizer_eog_ids(tok, n, &n_eog);
    bool ok = p && len && extra && eog;
    for (int i = 0; ok && i < n; i++) {
        size_t l = 0;
        const char *s = model_tokenizer_piece(tok, i, false, &l);
        p[i] = s ? s : "";
        len[i] = s && !model_tokenizer_is_eog(tok, i) ? (uint32_t)l : 0;
    }
    for (int i = n; ok && i < total; i++) { /* random printable-ish strings, 2..12 bytes */
        char *s = extra + (size_t)(i - n) * 12;
        int l = 2 + (int)(s_rand(&seed) % 11);
        for (int k = 0; k < l; k++) {
            uint64_t r = s_rand(&seed) % 100;
            s[k] = r < 70   ? (char)('a' + r % 26)
                   : r < 85 ? (char)(' ' + r % 32)
                            : (char)(0x80 + s_rand(&seed) % 128);
        }
        p[i] = s;
        len[i] = (uint32_t)l;
    }
    if (ok) {
        out->eog = n_eog ? eog[0] : -1;
        out->v = grammar_vocab_new(total, p, len, eog, n_eog);
        ok = out->v != NULL;
    }
    free(p);
    free(len);
    free(extra);
    free(eog);
    model_tokenizer_destroy(&tok);
    if (!ok)
        fprintf(stderr, "strata grammar: cannot build the vocabulary\n");
    return ok;
}

/* ---- random walks */

/* CPU time of this thread (the bench machine may be shared: wall time would count others). */
static double s_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

typedef struct {
    double *us; /* mask times */
    int n, cap;
} s_times_t;

/* One random sentence: tokens picked among the allowed ones (closing bytes preferred half
 * the time, so walks end), until an end token.  Its bytes go to text (cap); returns its
 * length, -1 if no end within max_steps, -2 on a mask/state disagreement (a bug). */
static int s_walk(const grammar_t *g, const grammar_index_t *ix, const grammar_vocab_t *v,
                  uint64_t *seed, int max_steps, char *text, size_t cap, s_times_t *times,
                  const char *const *piece, const uint32_t *plen) {
    grammar_state_t *s = grammar_state_new(g);
    int32_t n = grammar_vocab_size(v);
    size_t words = grammar_vocab_mask_words(v), len = 0;
    uint64_t *mask = malloc(words * sizeof *mask);
    int32_t *allowed = malloc((size_t)n * sizeof *allowed), *closing = malloc((size_t)n * 4);
    int rc = -1;
    if (!s || !mask || !allowed || !closing) {
        rc = -3;
        goto done;
    }
    for (int step = 0; step < max_steps; step++) {
        double t0 = s_now_us();
        if (grammar_state_mask(s, ix, mask) < 0) {
            rc = -3;
            break;
        }
        double dt = s_now_us() - t0;
        if (times && times->n < times->cap)
            times->us[times->n++] = dt;
        int na = 0, nc = 0;
        bool eog = false;
        for (size_t w = 0; w < words; w++)
            for (uint64_t m = mask[w]; m; m &= m - 1) {
                int32_t t = (int32_t)(w * 64 + (size_t)__builtin_ctzll(m));
                if (grammar_vocab_is_eog(v, t)) {
                    eog = true;
                    continue;
                }
                allowed[na++] = t;
                if (plen[t] && strchr("\"]},", piece[t][0]))
                    closing[nc++] = t;
            }
        if (eog && (!na || s_rand(seed) % 4 == 0)) {
            rc = (int)len;
            break;
        }
        if (!na) {
            rc = -2; /* a state with nothing allowed and not complete */
            break;
        }
        int32_t t = nc && s_rand(seed) % 2 ? closing[s_rand(seed) % (uint64_t)nc]
                                           : allowed[s_rand(seed) % (uint64_t)na];
        if (grammar_state_accept_token(s, ix, t) < 0) {
            rc = -2;
            break;
        }
        if (len + plen[t] + 1 > cap)
            break;
        memcpy(text + len, piece[t], plen[t]);
        len += plen[t];
    }
done:
    if (rc >= 0)
        text[rc] = 0;
    free(mask);
    free(allowed);
    free(closing);
    grammar_state_destroy(&s);
    return rc;
}

static void s_print_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    printf("\"\n");
}

/* The piece table of a vocabulary (what s_walk appends), rebuilt from the sources. */
typedef struct {
    const char **piece;
    uint32_t *len;
} s_pieces_t;

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- flags */

#define S_MAX_SRC 64

typedef struct {
    s_src_t src[S_MAX_SRC]; /* --gbnf, --schema, --regex in order */
    int n_src;
    const char *model; /* -m (NULL: walk: bytes; bench: the default model) */
    const char *text;  /* check --text */
    bool bytes;
    int n, vocab_n, walks, steps;
    long seed;
} s_opts_t;

/* --gbnf, --schema, --regex: one more source (the flag's name is its kind). */
static bool s_add_src(s_opts_t *o, const char *kind, const char *value, char *why, size_t len) {
    if (o->n_src == S_MAX_SRC) {
        snprintf(why, len, "at most %d sources", S_MAX_SRC);
        return false;
    }
    o->src[o->n_src++] = (s_src_t){kind, value};
    return true;
}
static bool s_set_gbnf(const char *value, void *group, char *why, size_t len) {
    return s_add_src(group, "gbnf", value, why, len);
}
static bool s_set_schema(const char *value, void *group, char *why, size_t len) {
    return s_add_src(group, "schema", value, why, len);
}
static bool s_set_regex(const char *value, void *group, char *why, size_t len) {
    return s_add_src(group, "regex", value, why, len);
}

/* --seed: 0..2^40. */
static bool s_set_seed(const char *value, void *group, char *why, size_t len) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (!*value || *end || errno || v < 0 || v > 1L << 40) {
        snprintf(why, len, "expected an integer in 0..%ld", 1L << 40);
        return false;
    }
    ((s_opts_t *)group)->seed = v;
    return true;
}

#define S_O(member) ACTOR_OPT_FIELD(s_opts_t, member)
static const cli_flag_t s_flags[] = {
    {.name = "gbnf",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH, .help = "SOURCE: a GBNF grammar ('-' reads stdin)"},
     .set = s_set_gbnf},
    {.name = "schema",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH, .help = "SOURCE: a JSON Schema ('-' reads stdin)"},
     .set = s_set_schema},
    {.name = "regex",
     .arg = "RE",
     .opt = {.type = ACTOR_OPT_STRING, .help = "SOURCE: a regular expression"},
     .set = s_set_regex},
    {.name = "text",
     .arg = "T",
     .opt = {.type = ACTOR_OPT_STRING, .help = "check: the text", .field = S_O(text)}},
    {.name = "model",
     .short_name = 'm',
     .arg = "MODEL",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "walk, bench: the vocabulary of this GGUF (bench: default the default "
                     "model)",
             .field = S_O(model)}},
    {.name = "bytes",
     .opt = {.type = ACTOR_OPT_BOOL,
             .help = "walk: a small byte-level vocabulary (the default without -m)",
             .field = S_O(bytes)}},
    {.name = "n",
     .short_name = 'n',
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1000000,
             .help = "walk: sentences",
             .field = S_O(n)}},
    {.name = "vocab",
     .arg = "N",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 0,
             .max = 4000000,
             .help = "bench: extend the model's vocabulary to N tokens with random byte strings",
             .field = S_O(vocab_n)}},
    {.name = "walks",
     .arg = "W",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 100000,
             .help = "bench: random walks per source",
             .field = S_O(walks)}},
    {.name = "steps",
     .arg = "S",
     .opt = {.type = ACTOR_OPT_INT,
             .min = 1,
             .max = 1000000,
             .help = "bench: tokens per walk at most",
             .field = S_O(steps)}},
    {.name = "seed",
     .arg = "S",
     .opt = {.type = ACTOR_OPT_INT, .help = "walk, bench: random seed (0..2^40, default 1)"},
     .set = s_set_seed},
    {NULL},
};
#undef S_O

static const cli_cmd_t s_cmd = {
    "grammar",
    "usage: strata grammar ACTION SOURCE [options]\n"
    "  SOURCE: --gbnf FILE | --schema FILE | --regex RE   (FILE '-' reads stdin)\n"
    "  ACTION:\n"
    "    compile             print the GBNF (exit 1 with the reason if refused)\n"
    "    check --text T      exit 0 if T is a complete sentence, 1 if not\n"
    "    walk [-n N] [--seed S] [-m MODEL | --bytes]\n"
    "                        N random sentences by walking the token mask, one JSON\n"
    "                        string per line (default: a small byte-level vocabulary)\n"
    "    bench [-m MODEL] [--vocab N] [--walks W] [--steps S] [--seed S]\n"
    "                        mask time per token (median, p99) over random walks; with\n"
    "                        --vocab N the model's vocabulary is extended to N tokens\n"
    "                        with random byte strings; SOURCE may be repeated\n",
    NULL,
    {{s_flags, 0}, {NULL}},
};

/* ---- actions */

/* compile: print the GBNF of src.  The exit status. */
static int s_compile(const s_src_t *src) {
    char *g = s_gbnf(src);
    if (!g)
        return 1;
    char err[512];
    grammar_t *gr = grammar_new(g, err, sizeof err);
    if (!gr) {
        fprintf(stderr, "strata grammar: grammar: %s\n", err);
        free(g);
        return 1;
    }
    fputs(g, stdout);
    fprintf(stderr, "strata grammar: %d rules, %d positions\n", grammar_n_rules(gr),
            grammar_n_positions(gr));
    grammar_destroy(&gr);
    free(g);
    return 0;
}

/* check: is text a complete sentence of src?  The exit status. */
static int s_check(const s_src_t *src, const char *text) {
    grammar_t *g = s_grammar(src);
    if (!g || !text) {
        grammar_destroy(&g);
        return g ? 2 : 1;
    }
    grammar_state_t *s = grammar_state_new(g);
    int rc = s ? grammar_state_accept_bytes(s, text, strlen(text)) : -ENOMEM;
    bool ok = rc == 0 && grammar_state_accepting(s);
    printf("%s\n", ok ? "accepted" : rc == 0 ? "incomplete" : "refused");
    grammar_state_destroy(&s);
    grammar_destroy(&g);
    return ok ? 0 : 1;
}

/* What walk and bench share: the vocabulary, its pieces, the random state, the times. */
typedef struct {
    const s_opts_t *o;
    bool bench;
    s_vocab_t voc;
    s_pieces_t pc;
    uint64_t rs;
    s_times_t all; /* bench: every mask time */
    char *out;     /* (1 MiB) one sentence */
} s_walker_t;

/* walk: -n sentences of g as JSON strings.  0 or 1. */
static int s_walk_print(s_walker_t *w, grammar_t *g, grammar_index_t *ix) {
    const long n = w->o->n;
    for (long k = 0, tries = 0; k < n; tries++) {
        int rc =
            s_walk(g, ix, w->voc.v, &w->rs, 20000, w->out, 1 << 20, NULL, w->pc.piece, w->pc.len);
        if (rc == -2) {
            fprintf(stderr, "strata grammar: mask and state disagree (walk %ld)\n", k);
            return 1;
        }
        if (rc >= 0) {
            s_print_json_string(w->out, (size_t)rc);
            k++;
        } else if (tries > 50 * n) {
            fprintf(stderr, "strata grammar: walks do not end\n");
            return 1;
        }
    }
    return 0;
}

/* bench: --walks walks of --steps tokens over g, one line of mask times.  0 or 1. */
static int s_bench_one(s_walker_t *w, const s_src_t *src, grammar_t *g, grammar_index_t *ix) {
    const s_opts_t *o = w->o;
    int status = 0;
    s_times_t t = {w->all.us + w->all.n, 0, o->walks * o->steps};
    for (long k = 0; k < o->walks; k++)
        if (s_walk(g, ix, w->voc.v, &w->rs, o->steps, w->out, 1 << 20, &t, w->pc.piece,
                   w->pc.len) == -2)
            status = 1;
    grammar_index_stats_t st;
    grammar_index_stats(ix, &st);
    qsort(t.us, (size_t)t.n, sizeof *t.us, s_cmp_double);
    const char *name = strrchr(src->arg, '/') ? strrchr(src->arg, '/') + 1 : src->arg;
    printf("%-32.32s %9d %9lld %9.1f %8.1f %9.1f %9.1f %7d\n", name, st.positions,
           (long long)st.uncertain, st.build_ms, st.bytes / 1048576.0, t.n ? t.us[t.n / 2] : 0,
           t.n ? t.us[(int)(t.n * 0.99)] : 0, t.n);
    w->all.n += t.n;
    return status;
}

/* walk or bench over every source.  The exit status. */
static int s_walk_all(const s_opts_t *o, bool bench) {
    s_walker_t w = {.o = o, .bench = bench};
    uint64_t vseed = (uint64_t)o->seed * 2654435761u + 1;
    bool vok =
        !bench && (o->bytes || !o->model)
            ? s_vocab_bytes(&w.voc)
            : s_vocab_model(&w.voc, o->model ? o->model : cli_default_model(), o->vocab_n, vseed);
    if (!vok)
        return 1;
    int32_t nv = grammar_vocab_size(w.voc.v);
    /* the pieces as the vocabulary holds them (the walk prints what it generates) */
    w.pc = (s_pieces_t){malloc((size_t)nv * sizeof *w.pc.piece),
                        malloc((size_t)nv * sizeof *w.pc.len)};
    for (int32_t i = 0; i < nv; i++)
        grammar_vocab_piece(w.voc.v, i, &w.pc.piece[i], &w.pc.len[i]);
    int status = 0;
    w.rs = (uint64_t)o->seed * 0x9E3779B97F4A7C15ull + 7;
    w.all = (s_times_t){malloc(sizeof(double) * ((size_t)o->walks * o->steps * o->n_src + 1)), 0,
                        o->walks * o->steps * o->n_src};
    w.out = malloc(1 << 20);
    if (bench)
        printf("vocabulary: %d tokens\n%-32s %9s %9s %9s %8s %9s %9s %7s\n", nv, "grammar",
               "positions", "uncertain", "build_ms", "index_MB", "median_us", "p99_us", "masks");
    for (int k = 0; k < o->n_src && status == 0 && w.out; k++) {
        grammar_t *g = s_grammar(&o->src[k]);
        char err[256];
        grammar_index_t *ix = g ? grammar_index_new(g, w.voc.v, err, sizeof err) : NULL;
        if (!ix) {
            if (g)
                fprintf(stderr, "strata grammar: %s\n", err);
            status = 1;
        } else {
            status = bench ? s_bench_one(&w, &o->src[k], g, ix) : s_walk_print(&w, g, ix);
        }
        grammar_index_destroy(&ix);
        grammar_destroy(&g);
    }
    if (bench && w.all.n) {
        qsort(w.all.us, (size_t)w.all.n, sizeof *w.all.us, s_cmp_double);
        printf("%-32s %9s %9s %9s %8s %9.1f %9.1f %7d\n", "all", "", "", "", "",
               w.all.us[w.all.n / 2], w.all.us[(int)(w.all.n * 0.99)], w.all.n);
    }
    free(w.out);
    free(w.all.us);
    free(w.pc.piece);
    free(w.pc.len);
    grammar_vocab_destroy(&w.voc.v);
    return status;
}

int cmd_grammar(int argc, char **argv) {
    s_opts_t o = {.n = 10, .walks = 20, .steps = 200, .seed = 1};
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        cli_flags_help(&s_cmd, &o, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *action = argv[1];
    int next, rc = cli_flags_parse(&s_cmd, argc - 1, argv + 1, &o, &next);
    if (rc != CLI_PARSED)
        return rc;
    if (next < argc - 1) {
        fprintf(stderr, "strata grammar: unexpected argument '%s'\n", argv[1 + next]);
        return 2;
    }
    if (!o.n_src) {
        fprintf(stderr, "strata grammar: give --gbnf, --schema or --regex\n");
        return 2;
    }
    if (!strcmp(action, "compile"))
        return s_compile(&o.src[0]);
    if (!strcmp(action, "check"))
        return s_check(&o.src[0], o.text);
    if (strcmp(action, "bench") && strcmp(action, "walk")) {
        fprintf(stderr, "strata grammar: unknown action %s\n", action);
        return 2;
    }
    return s_walk_all(&o, !strcmp(action, "bench"));
}
