/* grammar_regex.c - regular expressions (the subset in docs/GRAMMAR.md) compiled to GBNF
 * expressions: for grammar_regex_to_gbnf (raw bytes, anchored) and for JSON Schema
 * "pattern" (the JSON-encoded text of a matching string, unanchored unless ^...$).
 * Refuses what it cannot enforce: backreferences, lookaround, word boundaries, inline
 * flags, anchors anywhere but the ends.
 */
#include "grammar_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RX_MAX_RANGES 512

typedef struct {
    const char *re; /* the whole expression */
    const char *p;  /* read position */
    bool json;      /* JSON-string mode */
    gbuf_t *out;    /* where the GBNF goes */
    char *err;      /* caller's buffer */
    size_t errlen;  /* its size */
    bool failed;    /* an error was recorded */
    int depth;      /* group nesting */
} s_rx_t;

static void s_fail(s_rx_t *rx, const char *fmt, ...) {
    if (rx->failed)
        return;
    rx->failed = true;
    int k = snprintf(rx->err, rx->errlen, "regex at offset %d: ", (int)(rx->p - rx->re));
    if (k < 0 || (size_t)k >= rx->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rx->err + k, rx->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static int s_range_cmp(const void *a, const void *b) {
    return ((const grange_t *)a)->lo - ((const grange_t *)b)->lo;
}

/* Sort and merge; negate over [0, 0x10FFFF] when asked.  Returns the new count. */
static int s_norm(grange_t *r, int n, bool negate) {
    qsort(r, (size_t)n, sizeof *r, s_range_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else
            r[m++] = r[i];
    }
    if (!negate)
        return m;
    grange_t tmp[RX_MAX_RANGES + 1];
    int k = 0, next = 0;
    for (int i = 0; i < m; i++) {
        if (r[i].lo > next)
            tmp[k++] = (grange_t){next, r[i].lo - 1};
        next = r[i].hi + 1;
    }
    if (next <= 0x10FFFF)
        tmp[k++] = (grange_t){next, 0x10FFFF};
    memcpy(r, tmp, (size_t)k * sizeof *r);
    return k;
}

static void s_cp(gbuf_t *out, int c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        gbuf_printf(out, "%c", c);
    else if (c < 0x100)
        gbuf_printf(out, "\\x%02X", c);
    else if (c < 0x10000)
        gbuf_printf(out, "\\u%04X", c);
    else
        gbuf_printf(out, "\\U%08X", c);
}

static void s_class_text(gbuf_t *out, const grange_t *r, int n) {
    gbuf_add(out, "[");
    for (int i = 0; i < n; i++) {
        s_cp(out, r[i].lo);
        if (r[i].hi != r[i].lo) {
            gbuf_add(out, "-");
            s_cp(out, r[i].hi);
        }
    }
    gbuf_add(out, "]");
}

void grammar_emit_class(gbuf_t *out, const grange_t *r, int n, bool json) {
    if (!json) {
        s_class_text(out, r, n);
        return;
    }
    /* safe: everything but '"', '\\' and the controls, which JSON writes as escapes */
    grange_t safe[RX_MAX_RANGES + 4];
    int k = 0;
    bool special[0x20 + 2] = {0}; /* controls, then '"' (0x20), then '\\' (0x21) */
    for (int i = 0; i < n; i++) {
        for (int c = r[i].lo; c <= r[i].hi && c < 0x20; c++)
            special[c] = true;
        if (r[i].lo <= '"' && r[i].hi >= '"')
            special[0x20] = true;
        if (r[i].lo <= '\\' && r[i].hi >= '\\')
            special[0x21] = true;
        int cuts[][2] = {{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x10FFFF}};
        for (int j = 0; j < 3; j++) {
            int lo = r[i].lo > cuts[j][0] ? r[i].lo : cuts[j][0];
            int hi = r[i].hi < cuts[j][1] ? r[i].hi : cuts[j][1];
            if (lo <= hi)
                safe[k++] = (grange_t){lo, hi};
        }
    }
    gbuf_add(out, "(");
    bool first = true;
    if (k) {
        s_class_text(out, safe, k);
        first = false;
    }
    static const char *shortesc[0x20] = {
        ['\b'] = "b", ['\f'] = "f", ['\n'] = "n", ['\r'] = "r", ['\t'] = "t"};
    for (int c = 0; c < 0x22; c++) {
        if (!special[c])
            continue;
        gbuf_add(out, first ? "" : " | ");
        first = false;
        if (c == 0x20)
            gbuf_add(out, "\"\\\\\\\"\"");
        else if (c == 0x21)
            gbuf_add(out, "\"\\\\\\\\\"");
        else if (shortesc[c])
            gbuf_printf(out, "\"\\\\%s\" | \"\\\\u%04x\"", shortesc[c], c);
        else
            gbuf_printf(out, "\"\\\\u%04x\"", c);
    }
    gbuf_add(out, ")");
}

static int s_hexn(s_rx_t *rx, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        char c = *rx->p;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            s_fail(rx, "bad hex escape");
            return -1;
        }
        v = v * 16 + d;
        rx->p++;
    }
    return v;
}

/* An escape after '\\' (rx->p at the letter): one character (>= 0), or a class added to
 * r (returns -2), or -1 on error. */
static int s_escape(s_rx_t *rx, grange_t *r, int *n, bool in_class) {
    char c = *rx->p++;
    static const grange_t d[] = {{'0', '9'}};
    static const grange_t w[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    /* ECMA-262 white space and line terminators (JSON Schema patterns are ECMA-262) */
    static const grange_t s[] = {
        {'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    const grange_t *set = NULL;
    int k = 0;
    bool neg = false;
    switch (c) {
    case 'd':
    case 'D':
        set = d, k = 1, neg = c == 'D';
        break;
    case 'w':
    case 'W':
        set = w, k = 4, neg = c == 'W';
        break;
    case 's':
    case 'S':
        set = s, k = (int)(sizeof s / sizeof s[0]), neg = c == 'S';
        break;
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    case 'x':
        return s_hexn(rx, 2);
    case 'u':
        return s_hexn(rx, 4);
    case 'b':
        if (in_class)
            return '\b';
        s_fail(rx, "word boundary \\b is not supported");
        return -1;
    case 0:
        s_fail(rx, "trailing backslash");
        return -1;
    default:
        if (c >= '1' && c <= '9') {
            s_fail(rx, "backreference \\%c is not supported", c);
            return -1;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            s_fail(rx, "escape \\%c is not supported", c);
            return -1;
        }
        return (unsigned char)c;
    }
    if (neg && in_class) {
        s_fail(rx, "\\%c inside a class is not supported", c);
        return -1;
    }
    grange_t tmp[16];
    memcpy(tmp, set, (size_t)k * sizeof *tmp);
    if (neg)
        k = s_norm(tmp, k, true);
    for (int i = 0; i < k; i++)
        r[(*n)++] = tmp[i];
    return -2;
}

static void s_alt(s_rx_t *rx);

/* A class after '[' into r; the count, -1 on error. */
static int s_class(s_rx_t *rx, grange_t *r) {
    bool neg = *rx->p == '^';
    if (neg)
        rx->p++;
    int n = 0;
    bool first = true;
    while (*rx->p != ']' || first) {
        first = false;
        if (!*rx->p) {
            s_fail(rx, "unterminated class");
            return -1;
        }
        if (n > RX_MAX_RANGES - 8) {
            s_fail(rx, "class too long");
            return -1;
        }
        if (rx->p[0] == '[' && rx->p[1] == ':') {
            s_fail(rx, "POSIX classes [:name:] are not supported");
            return -1;
        }
        int lo;
        if (*rx->p == '\\') {
            rx->p++;
            lo = s_escape(rx, r, &n, true);
            if (lo == -2)
                continue;
        } else
            lo = grammar_utf8_decode(&rx->p);
        if (lo < 0) {
            s_fail(rx, "invalid character in class");
            return -1;
        }
        int hi = lo;
        if (rx->p[0] == '-' && rx->p[1] && rx->p[1] != ']') {
            rx->p++;
            if (*rx->p == '\\') {
                rx->p++;
                hi = s_escape(rx, r, &n, true);
            } else
                hi = grammar_utf8_decode(&rx->p);
            if (hi < lo) {
                s_fail(rx, "bad range in class");
                return -1;
            }
        }
        r[n++] = (grange_t){lo, hi};
    }
    rx->p++;
    return s_norm(r, n, neg);
}

/* A repetition suffix, copied into the GBNF (which has the same operators). */
static void s_quant(s_rx_t *rx) {
    char c = *rx->p;
    if (c == '*' || c == '+' || c == '?') {
        rx->p++;
        gbuf_printf(rx->out, "%c", c);
    } else if (c == '{') {
        const char *q = rx->p + 1;
        long m = strtol(q, (char **)&q, 10), x = m;
        if (q == rx->p + 1) {
            s_fail(rx, "'{' must start a {m,n} repetition (write \\{)");
            return;
        }
        if (*q == ',') {
            q++;
            x = *q == '}' ? -1 : strtol(q, (char **)&q, 10);
        }
        if (*q != '}' || m > 10000 || x > 10000 || (x >= 0 && x < m)) {
            s_fail(rx, "bad {m,n} repetition");
            return;
        }
        rx->p = q + 1;
        if (x < 0)
            gbuf_printf(rx->out, "{%ld,}", m);
        else
            gbuf_printf(rx->out, "{%ld,%ld}", m, x);
    } else
        return;
    if (*rx->p == '?') /* lazy: the same language */
        rx->p++;
    else if (*rx->p == '+')
        s_fail(rx, "possessive quantifiers are not supported");
    if (*rx->p == '*' || *rx->p == '+' || *rx->p == '?' || *rx->p == '{')
        s_fail(rx, "a quantifier on a quantifier (write a group)");
}

static void s_seq(s_rx_t *rx) {
    gbuf_add(rx->out, "(\"\"");
    while (!rx->failed && *rx->p && *rx->p != '|' && *rx->p != ')') {
        grange_t r[RX_MAX_RANGES];
        int n = 0;
        char c = *rx->p;
        gbuf_add(rx->out, " ");
        if (c == '(') {
            rx->p++;
            if (rx->p[0] == '?') {
                if (rx->p[1] == ':')
                    rx->p += 2;
                else if ((rx->p[1] == '<' && rx->p[2] != '=' && rx->p[2] != '!') ||
                         (rx->p[1] == 'P' && rx->p[2] == '<')) {
                    const char *e = strchr(rx->p, '>');
                    if (!e) {
                        s_fail(rx, "bad group name");
                        return;
                    }
                    rx->p = e + 1;
                } else {
                    s_fail(rx, "lookaround and inline flags (?...) are not supported");
                    return;
                }
            }
            rx->depth++;
            s_alt(rx);
            rx->depth--;
            if (*rx->p != ')') {
                s_fail(rx, "missing )");
                return;
            }
            rx->p++;
        } else if (c == '[') {
            rx->p++;
            n = s_class(rx, r);
            if (n < 0)
                return;
            if (!n) {
                s_fail(rx, "empty class");
                return;
            }
            grammar_emit_class(rx->out, r, n, rx->json);
        } else if (c == '.') {
            rx->p++;
            /* ECMA-262: any character but the line terminators */
            r[0] = (grange_t){'\n', '\n'};
            r[1] = (grange_t){'\r', '\r'};
            r[2] = (grange_t){0x2028, 0x2029};
            n = s_norm(r, 3, true);
            grammar_emit_class(rx->out, r, n, rx->json);
        } else if (c == '^' || c == '$') {
            s_fail(rx, "anchor '%c' is supported only at the start / end", c);
            return;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            s_fail(rx, "'%c' without a symbol before it", c);
            return;
        } else {
            int cp;
            if (c == '\\') {
                rx->p++;
                cp = s_escape(rx, r, &n, false);
            } else
                cp = grammar_utf8_decode(&rx->p);
            if (cp == -1) {
                s_fail(rx, "invalid character");
                return;
            }
            if (cp >= 0)
                r[n++] = (grange_t){cp, cp};
            grammar_emit_class(rx->out, r, s_norm(r, n, false), rx->json);
        }
        s_quant(rx);
    }
    gbuf_add(rx->out, ")");
}

static void s_alt(s_rx_t *rx) {
    gbuf_add(rx->out, "(");
    s_seq(rx);
    while (!rx->failed && *rx->p == '|') {
        rx->p++;
        gbuf_add(rx->out, " | ");
        s_seq(rx);
    }
    gbuf_add(rx->out, ")");
}

/* Whether '|' occurs outside any group or class. */
static bool s_top_alt(const char *p) {
    int depth = 0;
    bool cls = false;
    for (; *p; p++) {
        if (*p == '\\' && p[1])
            p++;
        else if (cls)
            cls = *p != ']';
        else if (*p == '[')
            cls = true;
        else if (*p == '(')
            depth++;
        else if (*p == ')')
            depth--;
        else if (*p == '|' && !depth)
            return true;
    }
    return false;
}

int grammar_regex_emit(const char *re, bool json_string, gbuf_t *out, char *err, size_t errlen) {
    s_rx_t rx = {.re = re, .p = re, .json = json_string, .out = out, .err = err, .errlen = errlen};
    size_t len = strlen(re);
    bool head = re[0] == '^';
    size_t bs = 0; /* backslashes before a final '$' */
    while (len >= 2 + bs && re[len - 2 - bs] == '\\')
        bs++;
    bool tail = len && re[len - 1] == '$' && bs % 2 == 0;
    if ((head || tail) && s_top_alt(re)) {
        s_fail(&rx, "anchors with a top-level '|' (write ^(a|b)$)");
        return -EINVAL;
    }
    char *body = strdup(re + head);
    if (!body) {
        s_fail(&rx, "out of memory");
        return -ENOMEM;
    }
    if (tail)
        body[len - 1 - head] = 0;
    rx.re = rx.p = body;
    grange_t any = {0, 0x10FFFF};
    gbuf_add(out, "(");
    if (json_string && !head) {
        grammar_emit_class(out, &any, 1, true);
        gbuf_add(out, "* ");
    }
    s_alt(&rx);
    if (!rx.failed && *rx.p)
        s_fail(&rx, "unbalanced )");
    if (json_string && !tail) {
        gbuf_add(out, " ");
        grammar_emit_class(out, &any, 1, true);
        gbuf_add(out, "*");
    }
    gbuf_add(out, ")");
    free(body);
    if (!rx.failed && out->oom)
        s_fail(&rx, "out of memory");
    return rx.failed ? -EINVAL : 0;
}

char *grammar_regex_to_gbnf(const char *re, char *err, size_t errlen) {
    gbuf_t b = {0};
    gbuf_add(&b, "root ::= ");
    if (grammar_regex_emit(re, false, &b, err, errlen) < 0) {
        free(b.s);
        return NULL;
    }
    gbuf_add(&b, "\n");
    if (b.oom) {
        snprintf(err, errlen, "out of memory");
        free(b.s);
        return NULL;
    }
    return b.s;
}
