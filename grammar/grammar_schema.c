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
    char *ptr;     /* JSON pointer of the target ("#/$defs/x") */
    char name[24]; /* its rule */
} s_ref_t;

typedef struct {
    const cJSON *doc; /* the whole schema */
    gbuf_t rules;     /* emitted rules */
    char *err;        /* caller's buffer */
    size_t errlen;    /* its size */
    bool failed;      /* an error was recorded */
    int n;            /* rules made */
    s_ref_t *refs;    /* (n_refs) $ref targets with their rules */
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

/* A GBNF literal for a JSON value's compact text. */
static bool s_lit_json(s_sc_t *sc, gbuf_t *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        sc->failed = true;
        snprintf(sc->err, sc->errlen, "out of memory");
        return false;
    }
    s_lit(b, t);
    free(t);
    return true;
}

static void s_path(char *out, const char *path, const char *a, const char *b) {
    snprintf(out, 512, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
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

/* ---- numbers: integers in [lo, hi] as digit patterns */

/* Same-length digit strings lo <= hi (leading zeros allowed): the pattern into b. */
static void s_digits(gbuf_t *b, const char *lo, const char *hi, int n) {
    if (!n)
        return;
    if (lo[0] == hi[0]) {
        gbuf_printf(b, " \"%c\"", lo[0]);
        s_digits(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_zero = strspn(lo + 1, "0") == (size_t)(n - 1);
    bool hi_nine = strspn(hi + 1, "9") == (size_t)(n - 1);
    char nines[MAX_DIGITS + 2], zeros[MAX_DIGITS + 2];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    gbuf_add(b, " (");
    int a = lo[0], z = hi[0];
    bool first = true;
    if (!lo_zero) {
        gbuf_printf(b, "\"%c\"", a);
        s_digits(b, lo + 1, nines, n - 1);
        a++;
        first = false;
    }
    int zz = hi_nine ? z : z - 1;
    if (a <= zz) {
        gbuf_printf(b, "%s[%c-%c]", first ? "" : " | ", a, zz);
        if (n > 1)
            gbuf_printf(b, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!hi_nine) {
        gbuf_printf(b, "%s\"%c\"", first ? "" : " | ", z);
        s_digits(b, zeros, hi + 1, n - 1);
    }
    gbuf_add(b, ")");
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded, up to MAX_DIGITS digits), no
 * leading zeros, as one parenthesised alternation. */
static void s_uint_range(gbuf_t *b, long long lo, long long hi) {
    char los[32], his[32];
    int nlo = snprintf(los, sizeof los, "%lld", lo);
    int nhi = hi < 0 ? MAX_DIGITS : snprintf(his, sizeof his, "%lld", hi);
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
        s_digits(b, a, z, len);
        gbuf_add(b, ")");
    }
    gbuf_add(b, ")");
}

/* Integers in [lo, hi]; has_lo / has_hi say which bounds exist. */
static void s_int_range(gbuf_t *b, bool has_lo, long long lo, bool has_hi, long long hi) {
    bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
    gbuf_add(b, "(");
    if (neg) { /* -n for n in [max(1, -hi), -lo] */
        long long nlo = has_hi && hi < 0 ? -hi : 1, nhi = has_lo ? -lo : -1;
        gbuf_add(b, "\"-\" ");
        s_uint_range(b, nlo, nhi);
    }
    if (pos) {
        gbuf_add(b, neg ? " | " : "");
        s_uint_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
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
    if (integer) {
        long long lo = LLONG_MIN, hi = LLONG_MAX;
        if (has_mn)
            lo = (long long)ceil(mn);
        if (has_emn && (long long)floor(emn) + 1 > lo)
            lo = (long long)floor(emn) + 1;
        if (has_mx)
            hi = (long long)floor(mx);
        if (has_emx && (long long)ceil(emx) - 1 < hi)
            hi = (long long)ceil(emx) - 1;
        if (has_lo && has_hi && lo > hi) {
            s_fail(sc, path, "minimum", "no integer lies within the bounds");
            return false;
        }
        s_int_range(b, has_lo, lo, has_hi, hi);
        return true;
    }
    if (!has_lo && !has_hi) {
        gbuf_add(b, "(\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? "
                    "([eE] [-+]? [0-9]{1,3})?)");
        return true;
    }
    /* numbers: integer bounds, lower bound >= 0 or absent; no exponent */
    if (has_emn || has_emx) {
        s_fail(sc, path, has_emn ? "exclusiveMinimum" : "exclusiveMaximum",
               "exclusive bounds are supported on integers only");
        return false;
    }
    if ((has_mn && (mn != floor(mn) || mn < 0)) || (has_mx && mx != floor(mx))) {
        s_fail(sc, path, has_mn && (mn != floor(mn) || mn < 0) ? "minimum" : "maximum",
               "number bounds must be integers, the minimum non-negative");
        return false;
    }
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
        s_uint_range(b, lo, hi);
    else {
        s_uint_range(b, lo, has_mx ? hi - 1 : -1);
        gbuf_add(b, " (\".\" [0-9]{1,16})?");
        if (has_mx) {
            gbuf_add(b, " | ");
            s_uint_range(b, hi, hi);
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
        char e[256];
        if (grammar_regex_emit(pat->valuestring, true, b, e, sizeof e) < 0) {
            s_fail(sc, path, "pattern", "%s", e);
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

static const char *const s_known[] = {
    /* annotations (no effect on validity) */
    "title", "description", "$comment", "examples", "default", "$schema", "$id", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "$anchor",
    /* enforced */
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "uniqueItems", "additionalItems", NULL};

static bool s_known_kw(const char *k) {
    for (int i = 0; s_known[i]; i++)
        if (!strcmp(s_known[i], k))
            return true;
    return false;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64 };

static int s_type_bit(const char *t) {
    static const char *const names[] = {"null",   "boolean", "object", "array",
                                        "string", "number",  "integer"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(names[i], t))
            return 1 << i;
    return 0;
}

/* The types a schema allows (bits), from "type" or its type-specific keywords; 0: any. */
static int s_types(const cJSON *s) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int m = 0;
    if (cJSON_IsString(t))
        return s_type_bit(t->valuestring);
    if (cJSON_IsArray(t)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, t) if (cJSON_IsString(x)) m |= s_type_bit(x->valuestring);
        return m;
    }
    static const struct {
        const char *kw;
        int bits;
    } by_kw[] = {
        {"properties", T_OBJ}, {"required", T_OBJ},         {"additionalProperties", T_OBJ},
        {"items", T_ARR},      {"prefixItems", T_ARR},      {"minItems", T_ARR},
        {"maxItems", T_ARR},   {"minLength", T_STR},        {"maxLength", T_STR},
        {"pattern", T_STR},    {"format", T_STR},           {"minimum", T_NUM},
        {"maximum", T_NUM},    {"exclusiveMinimum", T_NUM}, {"exclusiveMaximum", T_NUM}};
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

/* Resolve a local JSON pointer ("#", "#/$defs/a~1b"); NULL if absent. */
static const cJSON *s_resolve(const cJSON *doc, const char *ref) {
    if (ref[0] != '#')
        return NULL;
    const cJSON *cur = doc;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/' && n < sizeof tok - 1; p++) {
            if (*p == '~' && p[1] == '1')
                tok[n++] = '/', p++;
            else if (*p == '~' && p[1] == '0')
                tok[n++] = '~', p++;
            else
                tok[n++] = *p;
        }
        tok[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = *end ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        if (!cur)
            return NULL;
    }
    return *p ? NULL : cur;
}

/* ---- objects and arrays */

static bool s_object(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    char sub[512], name[24];
    if (props && !cJSON_IsObject(props)) {
        s_fail(sc, path, "properties", "must be an object");
        return false;
    }
    if (req && !cJSON_IsArray(req)) {
        s_fail(sc, path, "required", "must be an array");
        return false;
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, req) {
        if (!cJSON_IsString(x) || !cJSON_GetObjectItemCaseSensitive(props, x->valuestring)) {
            s_fail(sc, path, "required", "\"%s\" is not in properties",
                   cJSON_IsString(x) ? x->valuestring : "?");
            return false;
        }
    }
    int n = cJSON_GetArraySize(props);
    bool map = ap && !cJSON_IsBool(ap);
    if (map && n) {
        s_fail(sc, path, "additionalProperties",
               "a schema for additional properties together with properties is not supported");
        return false;
    }
    if (map) { /* a map: any keys, values of one schema */
        s_path(sub, path, "additionalProperties", NULL);
        const char *v = s_rule(sc, ap, sub, name);
        if (!v)
            return false;
        gbuf_printf(b,
                    "(\"{\" " WS " (jstr " WS " \":\" " WS " %s (" WS " \",\" " WS " jstr " WS
                    " \":\" " WS " %s)*)? " WS " \"}\")",
                    v, v);
        sc->any_used = true;
        return true;
    }
    if (!n) {
        gbuf_add(b, "(\"{\" " WS " \"}\")");
        return true;
    }
    /* kv_k: one rule per property; H_k: no member yet, T_k: after a member */
    char(*kv)[24] = malloc((size_t)n * sizeof *kv);
    bool *required = calloc((size_t)n, 1);
    if (!kv || !required) {
        free(kv);
        free(required);
        s_fail(sc, path, "properties", "out of memory");
        return false;
    }
    int k = 0;
    cJSON_ArrayForEach(x, props) {
        const cJSON *r;
        cJSON_ArrayForEach(r, req) if (!strcmp(r->valuestring, x->string)) required[k] = true;
        s_path(sub, path, "properties", x->string);
        char vn[24];
        const char *v = s_rule(sc, x, sub, vn);
        if (!v)
            goto fail;
        s_name(sc, kv[k]);
        gbuf_t t = {0};
        gbuf_printf(&t, "%s ::= ", kv[k]);
        char *key =
            cJSON_PrintUnformatted(&(cJSON){.type = cJSON_String, .valuestring = x->string});
        if (!key)
            goto fail;
        s_lit(&t, key);
        free(key);
        gbuf_printf(&t, " " WS " \":\" " WS " %s\n", v);
        gbuf_add(&sc->rules, t.s ? t.s : "");
        sc->rules.oom |= t.oom;
        free(t.s);
        k++;
    }
    int base = sc->n;
    sc->n += 2 * (n + 1);
    /* H_k = s(base + k), T_k = s(base + n + 1 + k); k == n: empty */
    for (k = 0; k <= n; k++) {
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

static bool s_array(s_sc_t *sc, gbuf_t *b, const cJSON *s, const char *path) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    char sub[512], name[24];
    int mn = 0, mx = -1;
    if (!s_count(sc, s, "minItems", path, &mn) || !s_count(sc, s, "maxItems", path, &mx))
        return false;
    if (uniq && !cJSON_IsFalse(uniq)) {
        s_fail(sc, path, "uniqueItems", "cannot be enforced by a grammar");
        return false;
    }
    if (addl && !cJSON_IsFalse(addl)) {
        s_fail(sc, path, "additionalItems", "only false is supported");
        return false;
    }
    if (cJSON_IsArray(items) && !prefix) { /* the older tuple form */
        prefix = items;
        items = NULL;
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
    cJSON_ArrayForEach(x, prefix) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        s_path(sub, path, "prefixItems", idx);
        const char *v = s_rule(sc, x, sub, name);
        if (!v)
            return false;
        gbuf_printf(b, "%s %s", i ? " " WS " \",\" " WS : "", v);
        i++;
    }
    /* further items: from "items" (absent: none beyond a prefix, any value without one) */
    const cJSON *more = items;
    bool none = (items && cJSON_IsFalse(items)) || (!items && np);
    if (!none) {
        int lo = mn > np ? mn - np : 0, hi = mx >= 0 ? mx - np : -1;
        const char *v;
        if (more) {
            s_path(sub, path, "items", NULL);
            v = s_rule(sc, more, sub, name);
        } else
            v = s_any(sc);
        if (!v)
            return false;
        if (hi != 0) {
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
    } else if (mn > np) {
        s_fail(sc, path, "minItems", "more than the items allowed");
        return false;
    }
    gbuf_add(b, " " WS " \"]\")");
    return true;
}

/* ---- combinators */

/* A copy of s with allOf's branches merged in (shallow: properties and required unite,
 * any other keyword in two places is an error).  NULL on error. */
static cJSON *s_merge_all(s_sc_t *sc, const cJSON *s, const char *path) {
    cJSON *m = cJSON_Duplicate(s, true);
    cJSON_DeleteItemFromObjectCaseSensitive(m, "allOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf"), *br;
    int i = 0;
    cJSON_ArrayForEach(br, all) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(br, "$ref");
        if (ref && cJSON_IsString(ref))
            br = s_resolve(sc->doc, ref->valuestring);
        if (!cJSON_IsObject(br) || cJSON_GetObjectItemCaseSensitive(br, "allOf")) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            char sub[512];
            s_path(sub, path, "allOf", idx);
            s_fail(sc, sub, "allOf", "each branch must be an object schema without allOf");
            cJSON_Delete(m);
            return NULL;
        }
        const cJSON *kw;
        cJSON_ArrayForEach(kw, br) {
            cJSON *have = cJSON_GetObjectItemCaseSensitive(m, kw->string);
            if (!strcmp(kw->string, "properties") && have) {
                const cJSON *p;
                cJSON_ArrayForEach(p, kw) {
                    if (cJSON_GetObjectItemCaseSensitive(have, p->string)) {
                        s_fail(sc, path, "allOf", "property \"%s\" in two branches", p->string);
                        cJSON_Delete(m);
                        return NULL;
                    }
                    cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, true));
                }
            } else if (!strcmp(kw->string, "required") && have) {
                const cJSON *p;
                cJSON_ArrayForEach(p, kw) cJSON_AddItemToArray(have, cJSON_Duplicate(p, true));
            } else if (have && !cJSON_Compare(have, kw, true)) {
                s_fail(sc, path, "allOf", "keyword %s in two branches cannot be merged",
                       kw->string);
                cJSON_Delete(m);
                return NULL;
            } else if (!have)
                cJSON_AddItemToObject(m, kw->string, cJSON_Duplicate(kw, true));
        }
        i++;
    }
    return m;
}

/* The types each branch of a oneOf may have; false if two overlap (then oneOf's "exactly
 * one" cannot be promised). */
static bool s_one_disjoint(s_sc_t *sc, const cJSON *arr) {
    int seen = 0;
    const cJSON *br;
    cJSON_ArrayForEach(br, arr) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(br, "$ref");
        if (ref && cJSON_IsString(ref))
            br = s_resolve(sc->doc, ref->valuestring);
        if (!br)
            return false;
        int t = s_types(br);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(br, "const");
        if (c)
            t = s_value_type(c);
        if (!t)
            return false;
        if (t & (T_INT | T_NUM))
            t |= T_INT | T_NUM;
        if (t & seen)
            return false;
        seen |= t;
    }
    return true;
}

/* ---- one schema */

/* Emit a rule for schema s (at JSON pointer path); its name goes to name (24 bytes) and is
 * returned, or NULL on error. */
static const char *s_rule(s_sc_t *sc, const cJSON *s, const char *path, char *name) {
    if (sc->failed)
        return NULL;
    if (cJSON_IsTrue(s))
        return s_any(sc);
    if (cJSON_IsFalse(s)) {
        s_fail(sc, path, "false", "a false schema allows no value");
        return NULL;
    }
    if (!cJSON_IsObject(s)) {
        s_fail(sc, path, "schema", "must be an object or a boolean");
        return NULL;
    }
    if (++sc->depth > 64) {
        s_fail(sc, path, "schema", "nested too deeply");
        return NULL;
    }
    const cJSON *kw;
    cJSON_ArrayForEach(kw, s) {
        if (!s_known_kw(kw->string)) {
            s_fail(sc, path, kw->string, "not supported");
            return NULL;
        }
    }
    char sub[512];
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        cJSON_ArrayForEach(kw, s) {
            if (strcmp(kw->string, "$ref") && strcmp(kw->string, "$defs") &&
                strcmp(kw->string, "definitions") && strcmp(kw->string, "title") &&
                strcmp(kw->string, "description") && strcmp(kw->string, "$comment") &&
                strcmp(kw->string, "$schema") && strcmp(kw->string, "default")) {
                s_fail(sc, path, kw->string, "keywords beside $ref are not supported");
                return NULL;
            }
        }
        if (!cJSON_IsString(ref) || ref->valuestring[0] != '#') {
            s_fail(sc, path, "$ref", "only local references (#...) are supported");
            return NULL;
        }
        for (int i = 0; i < sc->n_refs; i++)
            if (!strcmp(sc->refs[i].ptr, ref->valuestring)) {
                sc->depth--;
                return strcpy(name, sc->refs[i].name);
            }
        const cJSON *t = s_resolve(sc->doc, ref->valuestring);
        if (!t) {
            s_fail(sc, path, "$ref", "\"%s\" not found", ref->valuestring);
            return NULL;
        }
        s_ref_t *v = realloc(sc->refs, (size_t)(sc->n_refs + 1) * sizeof *v);
        if (!v || !(v[sc->n_refs].ptr = strdup(ref->valuestring))) {
            s_fail(sc, path, "$ref", "out of memory");
            return NULL;
        }
        sc->refs = v;
        s_ref_t *me = &sc->refs[sc->n_refs++];
        s_name(sc, me->name);
        strcpy(name, me->name);
        char tn[24];
        /* the target's own rule; the ref's rule is an alias made before it (recursion) */
        char alias[24];
        strcpy(alias, name);
        const char *body = s_rule(sc, t, ref->valuestring, tn);
        if (!body)
            return NULL;
        gbuf_printf(&sc->rules, "%s ::= %s\n", alias, body);
        sc->depth--;
        return name;
    }
    cJSON *merged = NULL;
    if (cJSON_GetObjectItemCaseSensitive(s, "allOf")) {
        merged = s_merge_all(sc, s, path);
        if (!merged)
            return NULL;
        s = merged;
    }
    gbuf_t b = {0};
    bool ok = true;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    int types = s_types(s);
    if (en || cn) {
        /* values, filtered by "type"; other keywords beside them are refused */
        static const char *const with[] = {"properties", "items",  "minLength",   "maxLength",
                                           "pattern",    "format", "minimum",     "maximum",
                                           "anyOf",      "oneOf",  "prefixItems", NULL};
        for (int i = 0; with[i]; i++)
            if (cJSON_GetObjectItemCaseSensitive(s, with[i])) {
                s_fail(sc, path, with[i], "together with enum/const is not supported");
                ok = false;
                break;
            }
        if (en && !cJSON_IsArray(en)) {
            s_fail(sc, path, "enum", "must be an array");
            ok = false;
        }
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
        int n = 0;
        gbuf_add(&b, "(");
        const cJSON *v;
        if (ok && cn) {
            if (!t || (s_value_type(cn) & types)) {
                ok = s_lit_json(sc, &b, cn);
                n++;
            }
        } else if (ok)
            cJSON_ArrayForEach(v, en) {
                if (t && !(s_value_type(v) & types))
                    continue;
                if (en && cn)
                    continue;
                gbuf_add(&b, n ? " | " : "");
                ok = ok && s_lit_json(sc, &b, v);
                n++;
            }
        gbuf_add(&b, ")");
        if (ok && !n) {
            s_fail(sc, path, cn ? "const" : "enum", "no value of the allowed type");
            ok = false;
        }
    } else if (any || one) {
        const char *k = any ? "anyOf" : "oneOf";
        const cJSON *arr = any ? any : one;
        if (any && one) {
            s_fail(sc, path, "oneOf", "together with anyOf is not supported");
            ok = false;
        } else if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr)) {
            s_fail(sc, path, k, "must be a non-empty array");
            ok = false;
        } else if (cJSON_GetObjectItemCaseSensitive(s, "type") || s_types(s)) {
            s_fail(sc, path, k, "together with type or type keywords is not supported");
            ok = false;
        } else if (one && !s_one_disjoint(sc, one)) {
            s_fail(sc, path, "oneOf",
                   "branches whose types overlap (exactly one match cannot be enforced)");
            ok = false;
        }
        int i = 0;
        const cJSON *br;
        gbuf_add(&b, "(");
        const cJSON *list = ok ? arr : NULL;
        cJSON_ArrayForEach(br, list) {
            char idx[16], bn[24];
            snprintf(idx, sizeof idx, "%d", i);
            s_path(sub, path, k, idx);
            const char *v = s_rule(sc, br, sub, bn);
            if (!v) {
                ok = false;
                break;
            }
            gbuf_printf(&b, "%s%s", i++ ? " | " : "", v);
        }
        gbuf_add(&b, ")");
    } else if (!types) {
        gbuf_add(&b, s_any(sc));
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (t && !types) {
            s_fail(sc, path, "type", "unknown type");
            ok = false;
        }
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
    cJSON_Delete(merged);
    if (ok && !sc->failed) {
        s_name(sc, name);
        gbuf_printf(&sc->rules, "%s ::= ", name);
        gbuf_add(&sc->rules, b.s ? b.s : "");
        gbuf_add(&sc->rules, "\n");
        sc->rules.oom |= b.oom;
    }
    free(b.s);
    sc->depth--;
    return ok && !sc->failed ? name : NULL;
}

char *grammar_schema_to_gbnf(const char *json, size_t len, char *err, size_t errlen) {
    cJSON *doc = cJSON_ParseWithLength(json, len);
    if (!doc) {
        snprintf(err, errlen, "#: schema: not valid JSON");
        return NULL;
    }
    s_sc_t sc = {.doc = doc, .err = err, .errlen = errlen};
    char name[24];
    const char *root = s_rule(&sc, doc, "#", name);
    char *out = NULL;
    if (root) {
        gbuf_t b = {0};
        if (sc.any_used)
            s_emit_any(&sc);
        gbuf_printf(&b, "root ::= %s\n", root);
        gbuf_add(&b, sc.rules.s ? sc.rules.s : "");
        if (b.oom || sc.rules.oom)
            snprintf(err, errlen, "out of memory");
        else
            out = b.s;
        if (!out)
            free(b.s);
    }
    for (int i = 0; i < sc.n_refs; i++)
        free(sc.refs[i].ptr);
    free(sc.refs);
    free(sc.rules.s);
    cJSON_Delete(doc);
    return out;
}
