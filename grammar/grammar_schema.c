/* grammar_schema.c - JSON Schema -> GBNF (docs/GRAMMAR.md lists the keywords).  Every
 * subschema gets rules of its own (so the token index sees one caller per rule, see
 * grammar_mask.c); $ref targets get one rule each, which makes recursion work.  Fail-
 * closed: a keyword it cannot enforce is an error "PATH: keyword: why", never ignored.
 * What it generates is a subset of what the schema allows (fixed property order, compact
 * enum values, bounded digits), so every sentence of the grammar validates.
 */
#include "grammar_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS "[ \\t\\n]{0,16}"
/* one character of a JSON string's text: plain, or an escape (no surrogate \u escapes, so
 * one grammar character is one code point of the value) */
#define CHAR                                                                                       \
    "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} "    \
    "| [dD] [0-7] [0-9a-fA-F]{2})))"
#define MAX_DIGITS 16

typedef struct {
    const cJSON *target; /* the schema a $ref resolved to (a node of the document) */
    char name[24];       /* its rule */
} s_ref_t;

typedef struct {
    const cJSON *doc;  /* the whole schema */
    const cJSON *base; /* the current resource: the nearest schema with $id, or doc */
    gbuf_t rules;      /* emitted rules */
    char *err;         /* caller's buffer */
    size_t errlen;     /* its size */
    bool failed;       /* an error was recorded */
    int n;             /* rules made */
    s_ref_t *refs;     /* (n_refs) $ref targets with their rules */
    int n_refs;
    bool any_used; /* the generic JSON value rules are needed */
    int depth;     /* nesting, bounded */
} s_sc_t;

static void s_fail(s_sc_t *sc, const char *path, const char *kw, const char *fmt, ...) {
    if (sc->failed)
        return;
    sc->failed = true;
    int k = snprintf(sc->err, sc->errlen, "%s: %s: ", path, kw);
    if (k < 0 || (size_t)k >= sc->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sc->err + k, sc->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

/* The rule name s_rule returns for a schema that allows no value (false, an empty enum): the
 * places that can drop it (a property, an item, a branch) do; others refuse it. */
static const char s_none[] = "";

static void s_name(s_sc_t *sc, char *name) {
    snprintf(name, 24, "s%d", sc->n++);
}

/* A GBNF literal for len bytes of text. */
static void s_lit(gbuf_t *b, const char *s) {
    gbuf_add(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            gbuf_printf(b, "\\%c", c);
        else if (c < 0x20)
            gbuf_printf(b, "\\x%02X", c);
        else
            gbuf_printf(b, "%c", c);
    }
    gbuf_add(b, "\"");
}

/* The compact JSON text of v into b: numbers as written in the schema (their text is kept
 * in valuestring by s_parse), the byte 0xFF of a string as the NUL it stands for. */
static void s_text(gbuf_t *b, const cJSON *v) {
    if (cJSON_IsNull(v))
        gbuf_add(b, "null");
    else if (cJSON_IsTrue(v))
        gbuf_add(b, "true");
    else if (cJSON_IsFalse(v))
        gbuf_add(b, "false");
    else if (cJSON_IsNumber(v)) {
        if (v->valuestring)
            gbuf_add(b, v->valuestring);
        else
            gbuf_printf(b, "%.17g", v->valuedouble);
    } else if (cJSON_IsString(v)) {
        gbuf_add(b, "\"");
        for (const unsigned char *p = (const unsigned char *)v->valuestring; *p; p++) {
            static const char esc[] = "btn_fr"; /* the short escapes of 8..13 */
            if (*p == '"' || *p == '\\')
                gbuf_printf(b, "\\%c", *p);
            else if (*p == 0xFF)
                gbuf_add(b, "\\u0000");
            else if (*p >= 8 && *p <= 13 && *p != 11)
                gbuf_printf(b, "\\%c", esc[*p - 8]);
            else if (*p < 0x20)
                gbuf_printf(b, "\\u%04x", *p);
            else
                gbuf_printf(b, "%c", *p);
        }
        gbuf_add(b, "\"");
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        gbuf_add(b, obj ? "{" : "[");
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            if (x != v->child)
                gbuf_add(b, ",");
            if (obj) {
                s_text(b, &(cJSON){.type = cJSON_String, .valuestring = x->string});
                gbuf_add(b, ":");
            }
            s_text(b, x);
        }
        gbuf_add(b, obj ? "}" : "]");
    }
}

/* A GBNF literal for a JSON value's compact text. */
static bool s_lit_json(s_sc_t *sc, gbuf_t *b, const cJSON *v) {
    gbuf_t t = {0};
    s_text(&t, v);
    if (t.oom) {
        free(t.s);
        s_fail(sc, "#", "schema", "out of memory");
        return false;
    }
    s_lit(b, t.s);
    free(t.s);
    return true;
}

static const char *s_path(char *out, const char *path, const char *a, const char *b) {
    snprintf(out, 512, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
    return out;
}

static const char *s_rule(s_sc_t *sc, const cJSON *s, const char *path, char *name);

/* The generic JSON value (for true / {} schemas). */
static const char *s_any(s_sc_t *sc) {
    sc->any_used = true;
    return "jv";
}

static void s_emit_any(s_sc_t *sc) {
    gbuf_add(&sc->rules, "jv ::= jobj | jarr | jstr | jnum | \"true\" | \"false\" | \"null\"\n"
                         "jobj ::= \"{\" " WS " (jstr " WS " \":\" " WS " jv (" WS " \",\" " WS
                         " jstr " WS " \":\" " WS " jv)*)? " WS " \"}\"\n"
                         "jarr ::= \"[\" " WS " (jv (" WS " \",\" " WS " jv)*)? " WS " \"]\"\n"
                         "jstr ::= \"\\\"\" " CHAR "* \"\\\"\"\n"
                         "jnum ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? "
                         "([eE] [-+]? [0-9]{1,3})?\n");
}

/* ---- numbers: integers in [lo, hi] as digit patterns; decimals with a fixed number of
 * fraction digits are the same patterns with a "." before the last `dot` digits */

/* n unconstrained digits, the "." before the last dot of them (dot 0: none). */
static void s_free_digits(gbuf_t *b, int n, int dot) {
    if (dot > 0 && dot < n)
        gbuf_printf(b, " [0-9]{%d} \".\" [0-9]{%d}", n - dot, dot);
    else if (dot > 0 && dot == n)
        gbuf_printf(b, " \".\" [0-9]{%d}", n);
    else if (n > 0)
        gbuf_printf(b, " [0-9]{%d}", n);
}

/* Same-length digit strings lo <= hi (leading zeros allowed): the pattern into b. */
static void s_digits(gbuf_t *b, const char *lo, const char *hi, int n, int dot) {
    if (!n)
        return;
    if (n == dot)
        gbuf_add(b, " \".\"");
    if (lo[0] == hi[0]) {
        gbuf_printf(b, " \"%c\"", lo[0]);
        s_digits(b, lo + 1, hi + 1, n - 1, dot);
        return;
    }
    bool lo_zero = strspn(lo + 1, "0") == (size_t)(n - 1);
    bool hi_nine = strspn(hi + 1, "9") == (size_t)(n - 1);
    char nines[MAX_DIGITS + 8], zeros[MAX_DIGITS + 8];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    gbuf_add(b, " (");
    int a = lo[0], z = hi[0];
    bool first = true;
    if (!lo_zero) {
        gbuf_printf(b, "\"%c\"", a);
        s_digits(b, lo + 1, nines, n - 1, dot);
        a++;
        first = false;
    }
    int zz = hi_nine ? z : z - 1;
    if (a <= zz) {
        gbuf_printf(b, "%s[%c-%c]", first ? "" : " | ", a, zz);
        s_free_digits(b, n - 1, dot);
        first = false;
    }
    if (!hi_nine) {
        gbuf_printf(b, "%s\"%c\"", first ? "" : " | ", z);
        s_digits(b, zeros, hi + 1, n - 1, dot);
    }
    gbuf_add(b, ")");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded, up to MAX_DIGITS digits), no
 * leading zeros, as one parenthesised alternation.  dot > 0: the decimals lo/10^dot ..
 * hi/10^dot written with exactly dot fraction digits. */
static void s_uint_range(gbuf_t *b, long long lo, long long hi, int dot) {
    char los[32], his[32];
    int nlo = snprintf(los, sizeof los, "%0*lld", dot + 1, lo);
    int nhi = hi < 0 ? MAX_DIGITS + dot : snprintf(his, sizeof his, "%0*lld", dot + 1, hi);
    gbuf_add(b, "(");
    for (int len = nlo; len <= nhi; len++) {
        char a[32], z[32];
        if (len == nlo)
            strcpy(a, los);
        else {
            memset(a, '0', (size_t)len);
            a[0] = '1';
            a[len] = 0;
        }
        if (hi >= 0 && len == nhi)
            strcpy(z, his);
        else {
            memset(z, '9', (size_t)len);
            z[len] = 0;
        }
        gbuf_add(b, len == nlo ? "(\"\"" : " | (\"\"");
        s_digits(b, a, z, len, dot);
        gbuf_add(b, ")");
    }
    gbuf_add(b, ")");
}

/* Integers in [lo, hi]; has_lo / has_hi say which bounds exist.  dot: as s_uint_range. */
static void s_int_range(gbuf_t *b, bool has_lo, long long lo, bool has_hi, long long hi, int dot) {
    bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
    gbuf_add(b, "(");
    if (neg) { /* -n for n in [max(1, -hi), -lo] */
        long long nlo = has_hi && hi < 0 ? -hi : 1, nhi = has_lo ? -lo : -1;
        gbuf_add(b, "\"-\" ");
        s_uint_range(b, nlo, nhi, dot);
    }
    if (pos) {
        gbuf_add(b, neg ? " | " : "");
        s_uint_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1, dot);
    }
    gbuf_add(b, ")");
}

static bool s_num(const cJSON *o, const char *kw, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, kw);
    if (!x)
        return false;
    *v = x->valuedouble;
    return true;
}

/* A JSON number's text times 10^d, rounded down (up: rounded up), exactly (from the text,
 * not a double).  False if it does not fit. */
static bool s_scale(const cJSON *x, int d, bool up, long long *out) {
    char buf[64];
    const char *p = x->valuestring;
    if (!p) {
        snprintf(buf, sizeof buf, "%.17g", x->valuedouble);
        p = buf;
    }
    bool neg = *p == '-';
    p += neg;
    char dig[40];
    int nd = 0, e = d;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (nd < 38)
            dig[nd++] = *p;
        else
            e++;
    }
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (nd < 38)
                dig[nd++] = *p, e--;
    if (*p == 'e' || *p == 'E') {
        long x10 = strtol(p + 1, NULL, 10);
        if (x10 > 40 || x10 < -400)
            return false;
        e += (int)x10;
    }
    /* value * 10^d = dig * 10^e */
    unsigned long long q = 0;
    bool rest = false;
    for (int i = 0; i < nd; i++) {
        if (i >= nd + e) {
            rest |= dig[i] != '0';
            continue;
        }
        if (q > (ULLONG_MAX - 9) / 10)
            return false;
        q = q * 10 + (unsigned)(dig[i] - '0');
    }
    for (int i = 0; i < e; i++) {
        if (q > ULLONG_MAX / 10)
            return false;
        q *= 10;
    }
    if (q > (unsigned long long)LLONG_MAX / 4)
        return false;
    long long v = neg ? -(long long)q : (long long)q;
    if (rest && up && !neg)
        v++;
    if (rest && !up && neg)
        v--;
    *out = v;
    return true;
}

/* Fraction digits a bound's text needs (0 for integers). */
static int s_frac_digits(const cJSON *x) {
    for (int d = 0; d < 12; d++) {
        long long lo, hi;
        if (!s_scale(x, d, false, &lo) || !s_scale(x, d, true, &hi))
            return d;
        if (lo == hi)
            return d;
    }
    return 12;
}

/* Numbers in the bounds as integers or decimals with dot fraction digits: the least and
 * greatest n with n / 10^dot within them; false if a bound does not fit. */
static bool s_scaled_bounds(const cJSON *s, int dot, bool *has_lo, long long *lo, bool *has_hi,
                            long long *hi) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *emn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *emx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    long long v;
    *has_lo = mn || emn, *has_hi = mx || emx;
    *lo = LLONG_MIN, *hi = LLONG_MAX;
    if (mn) {
        if (!s_scale(mn, dot, true, &v))
            return false;
        *lo = v;
    }
    if (emn) {
        if (!s_scale(emn, dot, false, &v))
            return false;
        *lo = v + 1 > *lo ? v + 1 : *lo;
    }
    if (mx) {
        if (!s_scale(mx, dot, false, &v))
            return false;
        *hi = v;
    }
    if (emx) {
        if (!s_scale(emx, dot, true, &v))
            return false;
        *hi = v - 1 < *hi ? v - 1 : *hi;
    }
    return true;
}

/* integer / number with their bounds into b; false on an unsupported combination. */
static bool s_number(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path, bool integer) {
    double mn = 0, mx = 0, emn = 0, emx = 0;
    bool has_mn = s_num(s, "minimum", &mn), has_mx = s_num(s, "maximum", &mx);
    bool has_emn = s_num(s, "exclusiveMinimum", &emn), has_emx = s_num(s, "exclusiveMaximum", &emx);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    if ((e && !cJSON_IsNumber(e)) || (f && !cJSON_IsNumber(f))) {
        s_fail(sc, path, e && !cJSON_IsNumber(e) ? "exclusiveMinimum" : "exclusiveMaximum",
               "the draft-4 boolean form is not supported (use a number)");
        return false;
    }
    for (const char *const *k = (const char *const[]){"minimum", "maximum", "exclusiveMinimum",
                                                      "exclusiveMaximum", NULL};
         *k; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, *k);
        if (x && (!cJSON_IsNumber(x) || fabs(x->valuedouble) > 1e15)) {
            s_fail(sc, path, *k, "must be a number of magnitude below 1e15");
            return false;
        }
    }
    bool has_lo = has_mn || has_emn, has_hi = has_mx || has_emx;
    if (integer || (!has_lo && !has_hi) || has_emn || has_emx ||
        (has_mn && (mn != floor(mn) || mn < 0)) || (has_mx && mx != floor(mx))) {
        long long lo, hi, flo, fhi;
        bool hl, hh;
        if (!s_scaled_bounds(s, 0, &hl, &lo, &hh, &hi)) {
            s_fail(sc, path, "minimum", "a bound does not fit");
            return false;
        }
        if (!integer && !has_lo && !has_hi) {
            gbuf_add(b, "(\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? "
                        "([eE] [-+]? [0-9]{1,3})?)");
            return true;
        }
        /* integers in the bounds; numbers: also decimals with up to as many fraction digits
         * as the bounds have (at least 1, at most 6) */
        int dot = 0;
        if (!integer) {
            dot = 1;
            for (const char *const *k =
                     (const char *const[]){"minimum", "maximum", "exclusiveMinimum",
                                           "exclusiveMaximum", NULL};
                 *k; k++) {
                const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, *k);
                int fd = x ? s_frac_digits(x) : 0;
                dot = fd > dot ? fd : dot;
            }
            dot = dot > 6 ? 6 : dot;
            while (dot > 1 && !s_scaled_bounds(s, dot, &hl, &flo, &hh, &fhi))
                dot--;
            if (!s_scaled_bounds(s, dot, &hl, &flo, &hh, &fhi)) {
                s_fail(sc, path, "minimum", "a bound does not fit");
                return false;
            }
        }
        /* integers, then decimals with 1..dot fraction digits */
        int n = 0;
        gbuf_add(b, "(");
        for (int k = 0; k <= dot; k++) {
            if (k && !s_scaled_bounds(s, k, &hl, &flo, &hh, &fhi))
                continue;
            if (!k)
                flo = lo, fhi = hi;
            if (hl && hh && flo > fhi)
                continue;
            gbuf_add(b, n++ ? " | " : "");
            s_int_range(b, hl, flo, hh, fhi, k);
        }
        gbuf_add(b, ")");
        if (!n) {
            s_fail(sc, path, has_lo ? (has_mn ? "minimum" : "exclusiveMinimum") : "maximum",
                   "no %s lies within the bounds", integer ? "integer" : "number");
            return false;
        }
        return true;
    }
    /* numbers with integer bounds, the lower one >= 0 or absent: any fraction digits */
    long long lo = has_mn ? (long long)mn : 0, hi = has_mx ? (long long)mx : -1;
    if (has_mx && hi < lo) {
        s_fail(sc, path, "maximum", "below the minimum");
        return false;
    }
    gbuf_add(b, "(");
    if (!has_mn) /* any negative number */
        gbuf_add(
            b, "\"-\" (\"0\" \".\" [0-9]{0,15} [1-9] | [1-9] [0-9]{0,15} (\".\" [0-9]{1,16})?) | ");
    if (has_mx && hi == lo)
        s_uint_range(b, lo, hi, 0);
    else {
        s_uint_range(b, lo, has_mx ? hi - 1 : -1, 0);
        gbuf_add(b, " (\".\" [0-9]{1,16})?");
        if (has_mx) {
            gbuf_add(b, " | ");
            s_uint_range(b, hi, hi, 0);
        }
    }
    if (has_mx)
        gbuf_add(b, " (\".\" \"0\"{1,16})?");
    gbuf_add(b, ")");
    return true;
}

/* ---- strings */

static bool s_string(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path) {
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    if ((mn && (!cJSON_IsNumber(mn) || mn->valuedouble < 0 || mn->valuedouble > 2000)) ||
        (mx && (!cJSON_IsNumber(mx) || mx->valuedouble < 0 || mx->valuedouble > 2000))) {
        s_fail(sc, path,
               mn && (!cJSON_IsNumber(mn) || mn->valuedouble < 0 || mn->valuedouble > 2000)
                   ? "minLength"
                   : "maxLength",
               "must be an integer in 0..2000");
        return false;
    }
    if ((pat || fmt) && (mn || mx)) {
        s_fail(sc, path, mn ? "minLength" : "maxLength",
               "length bounds together with %s are not supported", pat ? "pattern" : "format");
        return false;
    }
    if (pat && fmt) {
        s_fail(sc, path, "format", "format together with pattern is not supported");
        return false;
    }
    gbuf_add(b, "(\"\\\"\" ");
    if (pat) {
        if (!cJSON_IsString(pat)) {
            s_fail(sc, path, "pattern", "must be a string");
            return false;
        }
        /* the byte 0xFF stands for a NUL (s_parse): the regex reads it as \x00 */
        gbuf_t re = {0};
        for (const char *p = pat->valuestring; *p; p++)
            if ((unsigned char)*p == 0xFF)
                gbuf_add(&re, "\\x00");
            else
                gbuf_printf(&re, "%c", *p);
        char e[256];
        int rc = re.oom ? -ENOMEM : grammar_regex_emit(re.s ? re.s : "", true, b, e, sizeof e);
        free(re.s);
        if (rc < 0) {
            s_fail(sc, path, "pattern", "%s", rc == -ENOMEM ? "out of memory" : e);
            return false;
        }
    } else if (fmt) {
        static const char *const fmts[][2] = {
            {"date", "DATE"},
            {"time", "TIME"},
            {"date-time", "DATE \"T\" TIME"},
            {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                     "[0-9a-f]{12}"},
            {"email", "[a-zA-Z0-9_%+-]{1,32} (\".\" [a-zA-Z0-9_%+-]{1,32}){0,3} \"@\" "
                      "[a-zA-Z0-9] [a-zA-Z0-9-]{0,30} (\".\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30}){1,3}"},
            {"ipv4", "IP4 \".\" IP4 \".\" IP4 \".\" IP4"},
        };
        const char *date = "[0-9]{4} \"-\" (\"02\" \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" "
                           "[0-8]) | (\"0\" [13-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] "
                           "[0-9] | \"30\") | (\"0\" [13578] | \"1\" [02]) \"-31\")";
        const char *time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
                           "(\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" "
                           "[0-5] [0-9])";
        const char *ip4 = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9])";
        int k = -1;
        if (cJSON_IsString(fmt))
            for (int i = 0; i < (int)(sizeof fmts / sizeof fmts[0]); i++)
                if (!strcmp(fmt->valuestring, fmts[i][0]))
                    k = i;
        if (k < 0) {
            s_fail(sc, path, "format", "\"%s\" is not supported",
                   cJSON_IsString(fmt) ? fmt->valuestring : "?");
            return false;
        }
        gbuf_add(b, "(");
        for (const char *p = fmts[k][1]; *p;) { /* expand the DATE / TIME / IP4 names */
            if (!strncmp(p, "DATE", 4))
                gbuf_printf(b, "(%s)", date), p += 4;
            else if (!strncmp(p, "TIME", 4))
                gbuf_printf(b, "(%s)", time), p += 4;
            else if (!strncmp(p, "IP4", 3))
                gbuf_printf(b, "%s", ip4), p += 3;
            else
                gbuf_printf(b, "%c", *p++);
        }
        gbuf_add(b, ")");
    } else {
        int lo = mn ? (int)mn->valuedouble : 0, hi = mx ? (int)mx->valuedouble : -1;
        if (hi >= 0 && hi < lo) {
            s_fail(sc, path, "maxLength", "below minLength");
            return false;
        }
        if (hi < 0)
            gbuf_printf(b, CHAR "{%d,}", lo);
        else
            gbuf_printf(b, CHAR "{%d,%d}", lo, hi);
    }
    gbuf_add(b, " \"\\\"\")");
    return true;
}

/* ---- the keyword table: what each keyword applies to */

/* Annotations: no effect on validity (2020-12 leaves content* and unknown vocabularies to
 * applications; "discriminator" is OpenAPI's, written by pydantic beside oneOf). */
static const char *const s_annotations[] = {
    "title",         "description",   "$comment",   "examples",         "default",
    "$schema",       "$id",           "deprecated", "readOnly",         "writeOnly",
    "$defs",         "definitions",   "$anchor",    "contentMediaType", "contentEncoding",
    "contentSchema", "discriminator", NULL};

static const char *const s_known[] = {"type",
                                      "enum",
                                      "const",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "propertyNames",
                                      "minProperties",
                                      "maxProperties",
                                      "items",
                                      "prefixItems",
                                      "minItems",
                                      "maxItems",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "minLength",
                                      "maxLength",
                                      "pattern",
                                      "format",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "uniqueItems",
                                      "additionalItems",
                                      NULL};

static bool s_in(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k))
            return true;
    return false;
}

static bool s_annotation(const char *k) {
    return s_in(s_annotations, k) || !strncmp(k, "x-", 2);
}

/* Every keyword of s is enforced or an annotation; else the error names it. */
static bool s_check_kws(s_sc_t *sc, const cJSON *s, const char *path) {
    const cJSON *kw;
    cJSON_ArrayForEach(kw, s) {
        if (!s_in(s_known, kw->string) && !s_annotation(kw->string)) {
            s_fail(sc, path, kw->string, "not supported");
            return false;
        }
    }
    return true;
}

/* True if s has an assertion keyword other than skip (NULL: none skipped). */
static bool s_asserts_besides(const cJSON *s, const char *const *skip) {
    const cJSON *kw;
    cJSON_ArrayForEach(kw, s) if (!s_annotation(kw->string) &&
                                  !(skip && s_in(skip, kw->string))) return true;
    return false;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64 };
#define T_ALL 127

static const char *const s_type_names[] = {"null",   "boolean", "object", "array",
                                           "string", "number",  "integer"};

static int s_type_bit(const char *t) {
    for (int i = 0; i < 7; i++)
        if (!strcmp(s_type_names[i], t))
            return 1 << i;
    return 0;
}

/* The bits of a "type" value; -1 if it names no known type. */
static int s_type_value(const cJSON *t) {
    int m = 0;
    if (cJSON_IsString(t))
        m = s_type_bit(t->valuestring);
    const cJSON *x;
    if (cJSON_IsArray(t))
        cJSON_ArrayForEach(x, t) m |= cJSON_IsString(x) ? s_type_bit(x->valuestring) : 0;
    return m ? m : -1;
}

/* The types a schema generates (bits), from "type" or its type-specific keywords; 0: any.
 * (A subset of what it allows: {"minimum": 1} allows strings too.) */
static int s_types(const cJSON *s) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int m = 0;
    if (t)
        return s_type_value(t) < 0 ? 0 : s_type_value(t);
    static const struct {
        const char *kw;
        int bits;
    } by_kw[] = {{"properties", T_OBJ},
                 {"required", T_OBJ},
                 {"additionalProperties", T_OBJ},
                 {"propertyNames", T_OBJ},
                 {"minProperties", T_OBJ},
                 {"maxProperties", T_OBJ},
                 {"items", T_ARR},
                 {"prefixItems", T_ARR},
                 {"minItems", T_ARR},
                 {"maxItems", T_ARR},
                 {"uniqueItems", T_ARR},
                 {"additionalItems", T_ARR},
                 {"minLength", T_STR},
                 {"maxLength", T_STR},
                 {"pattern", T_STR},
                 {"format", T_STR},
                 {"minimum", T_NUM},
                 {"maximum", T_NUM},
                 {"exclusiveMinimum", T_NUM},
                 {"exclusiveMaximum", T_NUM}};
    for (size_t i = 0; i < sizeof by_kw / sizeof by_kw[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, by_kw[i].kw))
            m |= by_kw[i].bits;
    return m;
}

/* The JSON type bit of a value. */
static int s_value_type(const cJSON *v) {
    if (cJSON_IsNull(v))
        return T_NULL;
    if (cJSON_IsBool(v))
        return T_BOOL;
    if (cJSON_IsObject(v))
        return T_OBJ;
    if (cJSON_IsArray(v))
        return T_ARR;
    if (cJSON_IsString(v))
        return T_STR;
    return v->valuedouble == floor(v->valuedouble) ? T_INT | T_NUM : T_NUM;
}

/* ---- $ref: JSON pointers and anchors within a resource (a schema with $id) */

/* The JSON pointer p ("/a/b~1c", already percent-decoded) within root; NULL if absent. */
static const cJSON *s_pointer(const cJSON *root, const char *p) {
    const cJSON *cur = root;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            if (n == sizeof tok - 1)
                return NULL;
            if (*p == '~' && (p[1] == '0' || p[1] == '1'))
                tok[n++] = p[1] == '1' ? '/' : '~', p++;
            else
                tok[n++] = *p;
        }
        tok[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = *end || !*tok ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        if (!cur)
            return NULL;
    }
    return *p ? NULL : cur;
}

/* The first schema under node (preorder) whose key equals value (uri: a whole $id, or
 * its last segments after a '/'). */
static const cJSON *s_find(const cJSON *node, const char *key, const char *value, size_t n) {
    if (cJSON_IsObject(node)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, key);
        if (cJSON_IsString(v)) {
            size_t l = strlen(v->valuestring);
            if ((l == n || (l > n && v->valuestring[l - n - 1] == '/')) &&
                !strncmp(v->valuestring + l - n, value, n))
                return node;
        }
    }
    const cJSON *x;
    if (cJSON_IsObject(node) || cJSON_IsArray(node))
        cJSON_ArrayForEach(x, node) {
            const cJSON *r = s_find(x, key, value, n);
            if (r)
                return r;
        }
    return NULL;
}

/* The target of a $ref: "#/pointer" or "#anchor" within the current resource, "URI#..."
 * within the schema whose $id is URI (or ends with "/URI").  The fragment is percent-
 * decoded first.  *res gets the target's resource.  NULL if not found. */
static const cJSON *s_deref(s_sc_t *sc, const char *ref, const cJSON **res) {
    const char *hash = strchr(ref, '#');
    size_t ulen = hash ? (size_t)(hash - ref) : strlen(ref);
    const cJSON *root = sc->base;
    if (ulen && !(root = s_find(sc->doc, "$id", ref, ulen)))
        return NULL;
    *res = root;
    if (!hash || !hash[1])
        return root;
    char frag[512];
    size_t n = 0;
    for (const char *p = hash + 1; *p; p++) {
        if (n == sizeof frag - 1)
            return NULL;
        unsigned hi, lo;
        if (*p == '%') {
            if (sscanf(p + 1, "%1x%1x", &hi, &lo) != 2)
                return NULL;
            frag[n++] = (char)(hi * 16 + lo);
            p += 2;
        } else
            frag[n++] = *p;
    }
    frag[n] = 0;
    if (frag[0] == '/')
        return s_pointer(root, frag);
    return s_find(root, "$anchor", frag, strlen(frag));
}

/* ---- allOf: schemas merged into one (a conjunction) */

static const char *s_rule(s_sc_t *sc, const cJSON *s, const char *path, char *name);

/* The conjunction of two subschemas (NULL: absent, i.e. true), a new node; NULL if both
 * are absent. */
static cJSON *s_and(const cJSON *a, const cJSON *b) {
    if (!a || cJSON_IsTrue(a))
        return b ? cJSON_Duplicate(b, true) : NULL;
    if (!b || cJSON_IsTrue(b))
        return cJSON_Duplicate(a, true);
    if (cJSON_IsFalse(a) || cJSON_IsFalse(b))
        return cJSON_CreateFalse();
    cJSON *r = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(r, "allOf");
    cJSON_AddItemToArray(all, cJSON_Duplicate(a, true));
    cJSON_AddItemToArray(all, cJSON_Duplicate(b, true));
    return r;
}

static void s_put(cJSON *o, const char *k, cJSON *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    if (v)
        cJSON_AddItemToObject(o, k, v);
}

/* The values a schema allows when it has enum / const (a new array), else NULL. */
static cJSON *s_values(const cJSON *s) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (c) {
        cJSON *r = cJSON_CreateArray();
        cJSON_AddItemToArray(r, cJSON_Duplicate(c, true));
        return r;
    }
    return cJSON_IsArray(e) ? cJSON_Duplicate(e, true) : NULL;
}

/* Merge b into a (both flat: no allOf, no $ref; objects or booleans); frees both and
 * returns the conjunction, or NULL (error recorded). */
static cJSON *s_merge(s_sc_t *sc, cJSON *a, cJSON *b, const char *path) {
    if (cJSON_IsFalse(a) || cJSON_IsTrue(b)) {
        cJSON_Delete(b);
        return a;
    }
    if (cJSON_IsFalse(b) || cJSON_IsTrue(a)) {
        cJSON_Delete(a);
        return b;
    }
    static const char *const lower[] = {"minimum",  "exclusiveMinimum", "minLength",
                                        "minItems", "minProperties",    NULL};
    static const char *const upper[] = {"maximum",  "exclusiveMaximum", "maxLength",
                                        "maxItems", "maxProperties",    NULL};
    static const char *const structural[] = {
        "properties", "additionalProperties", "items", "prefixItems", "enum",
        "const",      "propertyNames",        NULL};
    /* object structure: every key's schema is the conjunction of what each side says of it
     * (its property schema, else its additionalProperties) */
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    const cJSON *apa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *apb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    cJSON *props = NULL, *x;
    if (pa || pb) {
        props = cJSON_CreateObject();
        for (int side = 0; side < 2; side++)
            cJSON_ArrayForEach(x, (side ? pb : pa)) {
                if (cJSON_GetObjectItemCaseSensitive(props, x->string))
                    continue;
                const cJSON *ya = cJSON_GetObjectItemCaseSensitive(pa, x->string);
                const cJSON *yb = cJSON_GetObjectItemCaseSensitive(pb, x->string);
                cJSON *y = s_and(ya ? ya : apa, yb ? yb : apb);
                cJSON_AddItemToObject(props, x->string, y ? y : cJSON_CreateTrue());
            }
    }
    cJSON *ap = s_and(apa, apb);
    /* arrays: item j's schema is the conjunction of each side's prefix item j (else items) */
    const cJSON *xa = cJSON_GetObjectItemCaseSensitive(a, "prefixItems");
    const cJSON *xb = cJSON_GetObjectItemCaseSensitive(b, "prefixItems");
    const cJSON *ia = cJSON_GetObjectItemCaseSensitive(a, "items");
    const cJSON *ib = cJSON_GetObjectItemCaseSensitive(b, "items");
    cJSON *prefix = NULL;
    if (xa || xb) {
        prefix = cJSON_CreateArray();
        int na = cJSON_GetArraySize(xa), nb = cJSON_GetArraySize(xb);
        for (int j = 0; j < (na > nb ? na : nb); j++) {
            cJSON *y = s_and(j < na ? cJSON_GetArrayItem(xa, j) : ia,
                             j < nb ? cJSON_GetArrayItem(xb, j) : ib);
            cJSON_AddItemToArray(prefix, y ? y : cJSON_CreateTrue());
        }
    }
    cJSON *items = s_and(ia, ib);
    cJSON *names = s_and(cJSON_GetObjectItemCaseSensitive(a, "propertyNames"),
                         cJSON_GetObjectItemCaseSensitive(b, "propertyNames"));
    /* enum / const: the values both allow */
    cJSON *va = s_values(a), *vb = s_values(b), *vals = NULL;
    if (va && vb) {
        vals = cJSON_CreateArray();
        cJSON_ArrayForEach(x, va) {
            const cJSON *y;
            bool both = false;
            cJSON_ArrayForEach(y, vb) both |= cJSON_Compare(x, y, true);
            if (both)
                cJSON_AddItemToArray(vals, cJSON_Duplicate(x, true));
        }
    } else if (va || vb)
        vals = cJSON_Duplicate(va ? va : vb, true);
    cJSON_Delete(va);
    cJSON_Delete(vb);
    /* the other keywords */
    bool ok = true, empty = false;
    cJSON *kw = b->child;
    for (; kw && ok; kw = kw->next) {
        if (s_in(structural, kw->string) || s_annotation(kw->string))
            continue;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(a, kw->string);
        if (!have) {
            cJSON_AddItemToObject(a, kw->string, cJSON_Duplicate(kw, true));
        } else if (!strcmp(kw->string, "type")) {
            int ta = s_type_value(have), tb = s_type_value(kw);
            if (ta < 0 || tb < 0) {
                s_fail(sc, path, "type", "unknown type");
                ok = false;
                break;
            }
            ta |= ta & T_NUM ? T_INT : 0, tb |= tb & T_NUM ? T_INT : 0;
            int t = ta & tb;
            if ((t & T_NUM) && !((ta & tb & T_NUM)))
                t &= ~T_NUM;
            if ((ta & T_NUM) && (tb & T_NUM))
                t &= ~T_INT;
            empty |= !t;
            cJSON *arr = cJSON_CreateArray();
            for (int i = 0; i < 7; i++)
                if (t & (1 << i))
                    cJSON_AddItemToArray(arr, cJSON_CreateString(s_type_names[i]));
            s_put(a, "type", arr);
        } else if (s_in(lower, kw->string) || s_in(upper, kw->string)) {
            bool up = s_in(upper, kw->string);
            if (up ? kw->valuedouble < have->valuedouble : kw->valuedouble > have->valuedouble)
                s_put(a, kw->string, cJSON_Duplicate(kw, true));
        } else if (!strcmp(kw->string, "required")) {
            const cJSON *r;
            cJSON_ArrayForEach(r, kw) cJSON_AddItemToArray(have, cJSON_Duplicate(r, true));
        } else if (!strcmp(kw->string, "uniqueItems")) {
            if (cJSON_IsTrue(kw))
                s_put(a, kw->string, cJSON_CreateTrue());
        } else if (!strcmp(kw->string, "anyOf") && cJSON_IsArray(have) && cJSON_IsArray(kw) &&
                   cJSON_GetArraySize(have) * cJSON_GetArraySize(kw) <= 64) {
            cJSON *cross = cJSON_CreateArray();
            const cJSON *p, *q;
            cJSON_ArrayForEach(p, have) cJSON_ArrayForEach(q, kw) {
                cJSON *y = s_and(p, q);
                cJSON_AddItemToArray(cross, y ? y : cJSON_CreateTrue());
            }
            s_put(a, "anyOf", cross);
        } else if (!cJSON_Compare(have, kw, true)) {
            s_fail(sc, path, "allOf", "keyword %s in two branches cannot be merged", kw->string);
            ok = false;
        }
    }
    s_put(a, "properties", props);
    s_put(a, "additionalProperties", ap);
    s_put(a, "prefixItems", prefix);
    s_put(a, "items", items);
    s_put(a, "propertyNames", names);
    cJSON_DeleteItemFromObjectCaseSensitive(a, "const");
    s_put(a, "enum", vals);
    empty |= vals && !cJSON_GetArraySize(vals);
    cJSON_Delete(b);
    if (!ok) {
        cJSON_Delete(a);
        return NULL;
    }
    if (empty) {
        cJSON_Delete(a);
        return cJSON_CreateFalse();
    }
    return a;
}

/* s with its $ref and allOf resolved into one schema (a new node: an object without allOf,
 * $ref, $id or $defs, or a boolean); NULL on error.  Refs below the top stay refs. */
static cJSON *s_flat(s_sc_t *sc, const cJSON *s, const char *path, int depth) {
    if (depth > 16) {
        s_fail(sc, path, "allOf", "allOf / $ref nested too deeply (a recursive allOf?)");
        return NULL;
    }
    if (cJSON_IsBool(s))
        return cJSON_Duplicate(s, false);
    if (!cJSON_IsObject(s)) {
        s_fail(sc, path, "schema", "must be an object or a boolean");
        return NULL;
    }
    if (!s_check_kws(sc, s, path))
        return NULL;
    cJSON *c = cJSON_Duplicate(s, true);
    if (!c) {
        s_fail(sc, path, "schema", "out of memory");
        return NULL;
    }
    static const char *const drop[] = {"allOf", "$ref", "$id", "$defs", "definitions", "$anchor"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(c, drop[i]);
    cJSON *items = cJSON_GetObjectItemCaseSensitive(c, "items");
    if (cJSON_IsArray(items) && !cJSON_GetObjectItemCaseSensitive(c, "prefixItems")) {
        /* the older tuple form */
        cJSON_AddItemToObject(c, "prefixItems", cJSON_DetachItemViaPointer(c, items));
        cJSON *more = cJSON_DetachItemFromObjectCaseSensitive(c, "additionalItems");
        if (more)
            cJSON_AddItemToObject(c, "items", more);
    }
    char sub[512];
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        const cJSON *res, *t = cJSON_IsString(ref) ? s_deref(sc, ref->valuestring, &res) : NULL;
        if (!t) {
            s_fail(sc, path, "$ref", "\"%s\" not found",
                   cJSON_IsString(ref) ? ref->valuestring : "?");
            cJSON_Delete(c);
            return NULL;
        }
        const cJSON *saved = sc->base;
        sc->base = res;
        cJSON *f = s_flat(sc, t, ref->valuestring, depth + 1);
        sc->base = saved;
        c = f ? s_merge(sc, c, f, path) : (cJSON_Delete(c), NULL);
    }
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf"), *br;
    if (all && (!cJSON_IsArray(all) || !cJSON_GetArraySize(all))) {
        s_fail(sc, path, "allOf", "must be a non-empty array");
        cJSON_Delete(c);
        return NULL;
    }
    int i = 0;
    cJSON_ArrayForEach(br, all) {
        if (!c)
            break;
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i++);
        s_path(sub, path, "allOf", idx);
        cJSON *f = s_flat(sc, br, sub, depth + 1);
        c = f ? s_merge(sc, c, f, path) : (cJSON_Delete(c), NULL);
    }
    return c;
}

/* ---- objects and arrays */

static bool s_count(s_sc_t *sc, const cJSON *s, const char *kw, const char *path, int *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, kw);
    if (!x)
        return true;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1000 ||
        x->valuedouble != floor(x->valuedouble)) {
        s_fail(sc, path, kw, "must be an integer in 0..1000");
        return false;
    }
    *out = (int)x->valuedouble;
    return true;
}

static bool s_object(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(s, "propertyNames");
    char sub[512], name[24];
    int mn = 0, mx = -1;
    if (!s_count(sc, s, "minProperties", path, &mn) || !s_count(sc, s, "maxProperties", path, &mx))
        return false;
    if (props && !cJSON_IsObject(props)) {
        s_fail(sc, path, "properties", "must be an object");
        return false;
    }
    if (req && !cJSON_IsArray(req)) {
        s_fail(sc, path, "required", "must be an array");
        return false;
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, req) if (!cJSON_IsString(x)) {
        s_fail(sc, path, "required", "must be an array of strings");
        return false;
    }
    if (pn && (cJSON_GetArraySize(props) || cJSON_GetArraySize(req))) {
        s_fail(sc, path, "propertyNames", "together with properties or required is not supported");
        return false;
    }
    /* the declared members: the properties, then required names not among them (their
     * schema is additionalProperties) */
    int n = 0, cap = cJSON_GetArraySize(props) + cJSON_GetArraySize(req);
    if (!cap) { /* any members: keys of propertyNames, values of additionalProperties */
        const char *v =
            ap ? s_rule(sc, ap, s_path(sub, path, "additionalProperties", NULL), name) : s_any(sc);
        char kn[24];
        const char *k = "jstr";
        if (v && *v && pn) {
            cJSON *ks = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(ks, "allOf");
            cJSON_AddItemToArray(all, cJSON_Duplicate(pn, true));
            cJSON *str = cJSON_CreateObject();
            cJSON_AddStringToObject(str, "type", "string");
            cJSON_AddItemToArray(all, str);
            s_path(sub, path, "propertyNames", NULL);
            k = s_rule(sc, ks, sub, kn);
            cJSON_Delete(ks);
        }
        if (!v || !k)
            return false;
        sc->any_used = true;
        if (!*v || !*k || mx == 0) { /* no member allowed */
            if (mn > 0) {
                s_fail(sc, path, "minProperties", "no member is allowed");
                return false;
            }
            gbuf_add(b, "(\"{\" " WS " \"}\")");
            return true;
        }
        if (mn > 1) {
            s_fail(sc, path, "minProperties",
                   "above 1 is not supported without properties (keys may repeat)");
            return false;
        }
        gbuf_printf(b,
                    "(\"{\" " WS " (%s " WS " \":\" " WS " %s (" WS " \",\" " WS " %s " WS
                    " \":\" " WS " %s)",
                    k, v, k, v);
        if (mx < 0)
            gbuf_add(b, "*");
        else
            gbuf_printf(b, "{0,%d}", mx - 1);
        gbuf_printf(b, ")%s " WS " \"}\")", mn ? "" : "?");
        return true;
    }
    /* kv_k: one rule per member; H_k: no member yet, T_k: after a member */
    char(*kv)[24] = malloc((size_t)cap * sizeof *kv);
    bool *required = calloc((size_t)cap, 1);
    if (!kv || !required) {
        free(kv);
        free(required);
        s_fail(sc, path, "properties", "out of memory");
        return false;
    }
    int n_req = 0;
    for (int pass = 0; pass < 2; pass++)
        cJSON_ArrayForEach(x, (pass ? req : props)) {
            const char *key = pass ? x->valuestring : x->string;
            const cJSON *r;
            bool is_req = pass;
            if (pass && cJSON_GetObjectItemCaseSensitive(props, key))
                continue;
            if (!pass)
                cJSON_ArrayForEach(r, req) is_req |= !strcmp(r->valuestring, key);
            bool dup = false;
            cJSON_ArrayForEach(r, req) {
                if (r == x)
                    break;
                dup |= pass && !strcmp(r->valuestring, key);
            }
            if (dup)
                continue;
            char vn[24];
            const char *v;
            if (pass) {
                s_path(sub, path, "additionalProperties", NULL);
                v = ap ? s_rule(sc, ap, sub, vn) : s_any(sc);
            } else
                v = s_rule(sc, x, s_path(sub, path, "properties", key), vn);
            if (!v)
                goto fail;
            if (!*v) { /* a property that allows no value: never generated */
                if (is_req) {
                    s_fail(sc, path, "required", "\"%s\" allows no value", key);
                    goto fail;
                }
                continue;
            }
            n_req += is_req;
            required[n] = is_req;
            s_name(sc, kv[n]);
            gbuf_t t = {0};
            gbuf_printf(&t, "%s ::= ", kv[n]);
            gbuf_t kt = {0};
            s_text(&kt, &(cJSON){.type = cJSON_String, .valuestring = (char *)key});
            s_lit(&t, kt.s ? kt.s : "");
            free(kt.s);
            gbuf_printf(&t, " " WS " \":\" " WS " %s\n", v);
            gbuf_add(&sc->rules, t.s ? t.s : "");
            sc->rules.oom |= t.oom | kt.oom;
            free(t.s);
            n++;
        }
    if (mn > n_req) {
        s_fail(sc, path, "minProperties", "more than the required properties is not supported");
        goto fail;
    }
    if (mx >= 0 && mx < n) {
        s_fail(sc, path, "maxProperties", "fewer than the properties is not supported");
        goto fail;
    }
    int base = sc->n;
    sc->n += 2 * (n + 1);
    /* H_k = s(base + k), T_k = s(base + n + 1 + k); k == n: empty */
    for (int k = 0; k <= n; k++) {
        int h = base + k, t = base + n + 1 + k;
        if (k == n) {
            gbuf_printf(&sc->rules, "s%d ::= \"\"\ns%d ::= \"\"\n", h, t);
            continue;
        }
        if (required[k])
            gbuf_printf(&sc->rules, "s%d ::= %s s%d\ns%d ::= " WS " \",\" " WS " %s s%d\n", h,
                        kv[k], t + 1, t, kv[k], t + 1);
        else
            gbuf_printf(&sc->rules, "s%d ::= %s s%d | s%d\ns%d ::= (" WS " \",\" " WS " %s)? s%d\n",
                        h, kv[k], t + 1, h + 1, t, kv[k], t + 1);
    }
    gbuf_printf(b, "(\"{\" " WS " s%d " WS " \"}\")", base);
    free(kv);
    free(required);
    return true;
fail:
    free(kv);
    free(required);
    return false;
}

static bool s_array(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    char sub[512], name[24];
    int mn = 0, mx = -1;
    if (!s_count(sc, s, "minItems", path, &mn) || !s_count(sc, s, "maxItems", path, &mx))
        return false;
    if (uniq && !cJSON_IsFalse(uniq) && !(mx >= 0 && mx <= 1)) {
        s_fail(sc, path, "uniqueItems",
               "true cannot be enforced by a grammar (only with "
               "maxItems <= 1, or with enum)");
        return false;
    }
    if (cJSON_IsArray(items) && !prefix) { /* the older tuple form */
        prefix = items;
        items = addl;
        addl = NULL;
    }
    if (addl) {
        s_fail(sc, path, "additionalItems", "only beside items as an array");
        return false;
    }
    if (mx >= 0 && mx < mn) {
        s_fail(sc, path, "maxItems", "below minItems");
        return false;
    }
    int np = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (mx >= 0 && np > mx) {
        s_fail(sc, path, "maxItems", "below the number of prefixItems");
        return false;
    }
    gbuf_add(b, "(\"[\" " WS);
    const cJSON *x;
    int i = 0;
    bool none = false; /* no item after the prefix */
    cJSON_ArrayForEach(x, prefix) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        s_path(sub, path, "prefixItems", idx);
        const char *v = s_rule(sc, x, sub, name);
        if (!v)
            return false;
        if (!*v) { /* item i allows no value: the array ends before it */
            np = i, none = true;
            break;
        }
        gbuf_printf(b, "%s %s", i ? " " WS " \",\" " WS : "", v);
        i++;
    }
    /* further items: from "items" (absent: none beyond a prefix, any value without one) */
    none |= (items && cJSON_IsFalse(items)) || (!items && np);
    if (!none) {
        int lo = mn > np ? mn - np : 0, hi = mx >= 0 ? mx - np : -1;
        const char *v;
        if (items) {
            s_path(sub, path, "items", NULL);
            v = s_rule(sc, items, sub, name);
        } else
            v = s_any(sc);
        if (!v)
            return false;
        if (!*v)
            none = true;
        else if (hi != 0) {
            /* first: v; the rest: ("," v){lo-1, hi-1} */
            const char *sep = " " WS " \",\" " WS " ";
            gbuf_add(b, " (");
            if (np)
                gbuf_add(b, sep);
            gbuf_printf(b, "%s (%s%s)", v, sep, v);
            int rlo = lo > 1 ? lo - 1 : 0, rhi = hi < 0 ? -1 : hi - 1;
            if (rhi < 0)
                gbuf_printf(b, "{%d,}", rlo);
            else
                gbuf_printf(b, "{%d,%d}", rlo, rhi);
            gbuf_add(b, lo ? ")" : ")?");
        }
    }
    if (none && mn > np) {
        s_fail(sc, path, "minItems", "more than the items allowed");
        return false;
    }
    gbuf_add(b, " " WS " \"]\")");
    return true;
}

/* ---- combinators */

/* The types a flat schema allows (not just generates): "type", else the values' types. */
static int s_allowed(const cJSON *s) {
    if (cJSON_IsFalse(s))
        return 0;
    int t = T_ALL;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ty && s_type_value(ty) > 0)
        t = s_type_value(ty);
    cJSON *vals = cJSON_IsObject(s) ? s_values(s) : NULL;
    if (vals) {
        int vt = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, vals) vt |= s_value_type(v);
        t &= vt | (vt & T_INT ? T_NUM : 0);
        cJSON_Delete(vals);
    }
    return t & (T_INT | T_NUM) ? t | T_INT | T_NUM : t;
}

/* True if the value sets of a and b (enum / const) are both given and share no value. */
static bool s_values_disjoint(const cJSON *a, const cJSON *b) {
    cJSON *va = cJSON_IsObject(a) ? s_values(a) : NULL,
          *vb = cJSON_IsObject(b) ? s_values(b) : NULL;
    bool r = va && vb;
    const cJSON *x, *y;
    if (r)
        cJSON_ArrayForEach(x, va) cJSON_ArrayForEach(y, vb) r &= !cJSON_Compare(x, y, true);
    cJSON_Delete(va);
    cJSON_Delete(vb);
    return r;
}

/* True if no instance validates against both flat schemas: their types are disjoint, their
 * values are, or both are objects that require a property whose values are (a discriminated
 * union). */
static bool s_disjoint(s_sc_t *sc, const cJSON *a, const cJSON *b) {
    if (!(s_allowed(a) & s_allowed(b)) || s_values_disjoint(a, b))
        return true;
    if (s_allowed(a) != T_OBJ || s_allowed(b) != T_OBJ)
        return false;
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "required"), *x, *y;
    bool r = false;
    cJSON_ArrayForEach(x, ra) cJSON_ArrayForEach(y, rb) {
        if (r || !cJSON_IsString(x) || !cJSON_IsString(y) || strcmp(x->valuestring, y->valuestring))
            continue;
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(a, "properties"), x->valuestring);
        const cJSON *pb = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(b, "properties"), x->valuestring);
        if (!pa || !pb)
            continue;
        cJSON *fa = s_flat(sc, pa, "#", 0), *fb = s_flat(sc, pb, "#", 0);
        r = fa && fb && (!(s_allowed(fa) & s_allowed(fb)) || s_values_disjoint(fa, fb));
        cJSON_Delete(fa);
        cJSON_Delete(fb);
    }
    return r;
}

/* anyOf / oneOf (k) of s: each branch, with the keywords beside it merged in (so
 * {"type": "object", "anyOf": [...]} works); oneOf only when its branches are pairwise
 * disjoint, so that exactly one matches. */
static bool s_alternatives(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *k, const char *path,
                           int *m) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr)) {
        s_fail(sc, path, k, "must be a non-empty array");
        return false;
    }
    static const char *const skip[] = {"anyOf", "oneOf", NULL};
    bool rest = s_asserts_besides(s, skip);
    int n = cJSON_GetArraySize(arr), i = 0;
    cJSON **flat = calloc((size_t)n, sizeof *flat);
    if (!flat) {
        s_fail(sc, path, k, "out of memory");
        return false;
    }
    bool ok = true;
    const cJSON *br;
    char sub[512];
    cJSON_ArrayForEach(br, arr) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        s_path(sub, path, k, idx);
        if (rest || !strcmp(k, "oneOf")) {
            cJSON *r = NULL;
            if (rest) {
                /* the rest of s; its $id / $defs stay with s (sc->base is s already), so
                 * that no $ref resolves into this temporary copy */
                r = cJSON_Duplicate(s, true);
                static const char *const drop[] = {"$id", "$defs", "definitions", "$anchor", NULL};
                cJSON_DeleteItemFromObjectCaseSensitive(r, k);
                for (int d = 0; drop[d]; d++)
                    cJSON_DeleteItemFromObjectCaseSensitive(r, drop[d]);
            }
            cJSON *f = s_flat(sc, br, sub, 0);
            flat[i] = f && r ? s_merge(sc, r, f, sub) : f ? f : (cJSON_Delete(r), NULL);
            if (!flat[i]) {
                ok = false;
                break;
            }
        }
        i++;
    }
    if (ok && !strcmp(k, "oneOf"))
        for (int p = 0; p < n && ok; p++)
            for (int q = p + 1; q < n && ok; q++)
                if (!s_disjoint(sc, flat[p], flat[q])) {
                    s_fail(sc, path, "oneOf",
                           "branches %d and %d may both match (exactly one cannot be enforced; "
                           "make them differ in type or in a required const property)",
                           p, q);
                    ok = false;
                }
    gbuf_add(b, "(");
    *m = 0;
    i = 0;
    cJSON_ArrayForEach(br, (ok ? arr : NULL)) {
        char idx[16], bn[24];
        snprintf(idx, sizeof idx, "%d", i);
        s_path(sub, path, k, idx);
        const char *v = s_rule(sc, rest ? flat[i] : br, sub, bn);
        i++;
        if (!v) {
            ok = false;
            break;
        }
        if (*v)
            gbuf_printf(b, "%s%s", (*m)++ ? " | " : "", v);
    }
    gbuf_add(b, ")");
    for (i = 0; i < n; i++)
        cJSON_Delete(flat[i]);
    free(flat);
    return ok;
}

/* ---- enum / const */

static char *s_gbnf(s_sc_t *sc, const char *root);
static void s_sc_free(s_sc_t *sc);

/* True if arr (an array) has two equal items. */
static bool s_has_dups(const cJSON *arr) {
    for (const cJSON *x = arr->child; x; x = x->next)
        for (const cJSON *y = x->next; y; y = y->next)
            if (cJSON_Compare(x, y, true))
                return true;
    return false;
}

/* enum / const of s into b: the values that also satisfy the keywords beside them (checked
 * with the grammar of s without enum / const: a value its grammar generates validates).
 * *n gets the number of values. */
static bool s_enum(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path, int *n) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (en && !cJSON_IsArray(en)) {
        s_fail(sc, path, "enum", "must be an array");
        return false;
    }
    cJSON *vals = s_values(s);
    if (!vals) {
        s_fail(sc, path, "enum", "out of memory");
        return false;
    }
    static const char *const skip[] = {"enum", "const", "uniqueItems", NULL};
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    grammar_t *g = NULL;
    bool ok = true;
    if (s_asserts_besides(s, skip)) {
        cJSON *rest = cJSON_Duplicate(s, true);
        static const char *const drop[] = {"$id", "$defs", "definitions", "$anchor", NULL};
        for (int i = 0; skip[i]; i++)
            cJSON_DeleteItemFromObjectCaseSensitive(rest, skip[i]);
        for (int i = 0; drop[i]; i++) /* as in s_alternatives */
            cJSON_DeleteItemFromObjectCaseSensitive(rest, drop[i]);
        s_sc_t sub = {.doc = sc->doc,
                      .base = sc->base,
                      .err = sc->err,
                      .errlen = sc->errlen,
                      .depth = sc->depth};
        char name[24];
        const char *r = s_rule(&sub, rest, path, name);
        cJSON_Delete(rest);
        char *gbnf = r && *r ? s_gbnf(&sub, r) : NULL;
        if (gbnf) {
            char e[256];
            g = grammar_new(gbnf, e, sizeof e);
            if (!g)
                s_fail(&sub, path, "enum", "%s", e);
        }
        free(gbnf);
        ok = !sub.failed;
        sc->failed |= sub.failed;
        s_sc_free(&sub);
        if (ok && !g) { /* the keywords beside allow no value */
            cJSON_Delete(vals);
            *n = 0;
            return true;
        }
    }
    *n = 0;
    gbuf_add(b, "(");
    const cJSON *v;
    cJSON_ArrayForEach(v, (ok ? vals : NULL)) {
        if (cJSON_IsTrue(uniq) && cJSON_IsArray(v) && s_has_dups(v))
            continue;
        if (g) {
            gbuf_t t = {0};
            s_text(&t, v);
            grammar_state_t *st = t.oom ? NULL : grammar_state_new(g);
            bool in =
                st && grammar_state_accept_bytes(st, t.s, t.n) == 0 && grammar_state_accepting(st);
            grammar_state_destroy(&st);
            free(t.s);
            if (!in)
                continue;
        }
        gbuf_add(b, (*n)++ ? " | " : "");
        ok = ok && s_lit_json(sc, b, v);
    }
    gbuf_add(b, ")");
    grammar_destroy(&g);
    cJSON_Delete(vals);
    return ok;
}

/* ---- one schema */

/* A $ref with annotations only beside it: the target's rule, made once per target (the ref's
 * rule is named before the target is compiled, which makes recursion work). */
static const char *s_ref(s_sc_t *sc, const cJSON *ref, const char *path, char *name) {
    const cJSON *res = NULL;
    const cJSON *t = cJSON_IsString(ref) ? s_deref(sc, ref->valuestring, &res) : NULL;
    if (!t) {
        s_fail(sc, path, "$ref", "\"%s\" not found (local pointers, anchors and $id only)",
               cJSON_IsString(ref) ? ref->valuestring : "?");
        return NULL;
    }
    for (int i = 0; i < sc->n_refs; i++)
        if (sc->refs[i].target == t)
            return strcpy(name, sc->refs[i].name);
    s_ref_t *v = realloc(sc->refs, (size_t)(sc->n_refs + 1) * sizeof *v);
    if (!v) {
        s_fail(sc, path, "$ref", "out of memory");
        return NULL;
    }
    sc->refs = v;
    s_ref_t *me = &sc->refs[sc->n_refs++];
    me->target = t;
    s_name(sc, me->name);
    char alias[24], tn[24];
    strcpy(alias, me->name);
    const cJSON *saved = sc->base;
    sc->base = res;
    const char *body = s_rule(sc, t, ref->valuestring, tn);
    sc->base = saved;
    if (!body)
        return NULL;
    if (!*body) { /* a target that allows no value: its alias derives none either */
        s_fail(sc, path, "$ref", "\"%s\" allows no value", ref->valuestring);
        return NULL;
    }
    gbuf_printf(&sc->rules, "%s ::= %s\n", alias, body);
    return strcpy(name, alias);
}

/* The rule of a flat schema s (no allOf; a $ref only with annotations beside it). */
static const char *s_body(s_sc_t *sc, const cJSON *s, const char *path, char *name) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref)
        return s_ref(sc, ref, path, name);
    gbuf_t b = {0};
    bool ok = true, none = false;
    bool en =
        cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    int types = s_types(s);
    if (any && one) {
        s_fail(sc, path, "oneOf", "together with anyOf is not supported");
        ok = false;
    } else if (any || one) {
        int n = 0;
        ok = s_alternatives(sc, &b, s, any ? "anyOf" : "oneOf", path, &n);
        none = ok && !n;
    } else if (en) {
        int n = 0;
        ok = s_enum(sc, &b, s, path, &n);
        none = ok && !n;
    } else if (!types) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (t) {
            s_fail(sc, path, "type", "unknown type");
            ok = false;
        } else
            gbuf_add(&b, s_any(sc));
    } else {
        if ((types & T_INT) && (types & T_NUM))
            types &= ~T_INT;
        int n = 0;
        gbuf_add(&b, "(");
        for (int bit = 1; ok && bit <= T_INT; bit <<= 1) {
            if (!(types & bit))
                continue;
            gbuf_add(&b, n++ ? " | " : "");
            switch (bit) {
            case T_NULL:
                gbuf_add(&b, "\"null\"");
                break;
            case T_BOOL:
                gbuf_add(&b, "(\"true\" | \"false\")");
                break;
            case T_OBJ:
                ok = s_object(sc, &b, s, path);
                break;
            case T_ARR:
                ok = s_array(sc, &b, s, path);
                break;
            case T_STR:
                ok = s_string(sc, &b, s, path);
                break;
            default:
                ok = s_number(sc, &b, s, path, bit == T_INT);
            }
        }
        gbuf_add(&b, ")");
    }
    const char *r = NULL;
    if (ok && !sc->failed && none)
        r = s_none;
    else if (ok && !sc->failed) {
        s_name(sc, name);
        gbuf_printf(&sc->rules, "%s ::= ", name);
        gbuf_add(&sc->rules, b.s ? b.s : "");
        gbuf_add(&sc->rules, "\n");
        sc->rules.oom |= b.oom;
        r = name;
    }
    free(b.s);
    return r;
}

/* Emit a rule for schema s (at JSON pointer path); its name goes to name (24 bytes) and is
 * returned; s_none if s allows no value; NULL on error. */
static const char *s_rule(s_sc_t *sc, const cJSON *s, const char *path, char *name) {
    if (sc->failed)
        return NULL;
    if (cJSON_IsTrue(s))
        return s_any(sc);
    if (cJSON_IsFalse(s))
        return s_none;
    if (!cJSON_IsObject(s)) {
        s_fail(sc, path, "schema", "must be an object or a boolean");
        return NULL;
    }
    if (!s_check_kws(sc, s, path))
        return NULL;
    if (sc->depth >= 64) {
        s_fail(sc, path, "schema", "nested too deeply");
        return NULL;
    }
    const cJSON *saved = sc->base;
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(s, "$id")))
        sc->base = s;
    sc->depth++;
    static const char *const ref_only[] = {"$ref", NULL};
    const char *r;
    if (cJSON_GetObjectItemCaseSensitive(s, "allOf") ||
        (cJSON_GetObjectItemCaseSensitive(s, "$ref") && s_asserts_besides(s, ref_only))) {
        /* allOf, or keywords beside $ref (they apply together): one merged schema */
        cJSON *m = s_flat(sc, s, path, 0);
        r = !m                 ? NULL
            : cJSON_IsTrue(m)  ? s_any(sc)
            : cJSON_IsFalse(m) ? s_none
                               : s_body(sc, m, path, name);
        cJSON_Delete(m);
    } else
        r = s_body(sc, s, path, name);
    sc->depth--;
    sc->base = saved;
    return sc->failed ? NULL : r;
}

/* ---- parsing: what cJSON loses */

/* Number nodes in document order get the texts in order (the token list of s_parse). */
static void s_number_texts(cJSON *node, char **texts, int n, int *next) {
    for (; node; node = node->next) {
        if (cJSON_IsNumber(node) && *next < n && !node->valuestring)
            node->valuestring = texts[*next], texts[(*next)++] = NULL;
        s_number_texts(node->child, texts, n, next);
    }
}

/* Parse the schema.  cJSON keeps neither a string's NUL nor a number's text: a \u0000 escape
 * becomes the byte 0xFF (never in UTF-8 text; s_text prints it back as \u0000), and every
 * number node keeps its text in valuestring (s_text prints it as written).  NULL with err. */
static cJSON *s_parse(const char *json, size_t len, char *err, size_t errlen) {
    char *t = malloc(len + 1);
    char **texts = NULL;
    int n_texts = 0;
    cJSON *doc = NULL;
    if (!t)
        goto oom;
    size_t n = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)json[i];
        if (c == 0xFF) {
            snprintf(err, errlen, "#: schema: not valid UTF-8");
            goto fail;
        }
        if (in_str && c == '\\' && i + 1 < len) {
            if (i + 5 < len && !memcmp(json + i + 1, "u0000", 5)) {
                t[n++] = (char)0xFF;
                i += 5;
            } else {
                t[n++] = (char)c;
                t[n++] = json[++i];
            }
            continue;
        }
        if (c == '"')
            in_str = !in_str;
        if (!in_str && (c == '-' || (c >= '0' && c <= '9'))) {
            size_t j = i;
            while (j < len && strchr("0123456789+-.eE", json[j]) && json[j])
                j++;
            char **v = realloc(texts, (size_t)(n_texts + 1) * sizeof *v);
            if (!v || !(v[n_texts] = strndup(json + i, j - i))) {
                texts = v ? v : texts;
                goto oom;
            }
            texts = v;
            n_texts++;
            memcpy(t + n, json + i, j - i);
            n += j - i;
            i = j - 1;
            continue;
        }
        t[n++] = (char)c;
    }
    t[n] = 0;
    doc = cJSON_ParseWithLength(t, n);
    if (!doc) {
        snprintf(err, errlen, "#: schema: not valid JSON");
        goto fail;
    }
    int next = 0;
    s_number_texts(doc, texts, n_texts, &next);
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    cJSON_Delete(doc);
    doc = NULL;
done:
    for (int i = 0; i < n_texts; i++)
        free(texts[i]);
    free(texts);
    free(t);
    return doc;
}

/* The GBNF text of a compiled context whose start rule is root (malloc'd), or NULL. */
static char *s_gbnf(s_sc_t *sc, const char *root) {
    gbuf_t b = {0};
    if (sc->any_used)
        s_emit_any(sc);
    gbuf_printf(&b, "root ::= %s\n", root);
    gbuf_add(&b, sc->rules.s ? sc->rules.s : "");
    if (b.oom || sc->rules.oom) {
        snprintf(sc->err, sc->errlen, "out of memory");
        free(b.s);
        return NULL;
    }
    return b.s;
}

static void s_sc_free(s_sc_t *sc) {
    free(sc->refs);
    free(sc->rules.s);
}

char *grammar_schema_to_gbnf(const char *json, size_t len, char *err, size_t errlen) {
    cJSON *doc = s_parse(json, len, err, errlen);
    if (!doc)
        return NULL;
    s_sc_t sc = {.doc = doc, .base = doc, .err = err, .errlen = errlen};
    char name[24];
    const char *root = s_rule(&sc, doc, "#", name);
    char *out = NULL;
    if (root && !*root)
        s_fail(&sc, "#", "schema", "allows no value");
    else if (root)
        out = s_gbnf(&sc, root);
    s_sc_free(&sc);
    cJSON_Delete(doc);
    return out;
}
