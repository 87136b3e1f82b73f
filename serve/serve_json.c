/* serve_json.c - the gateway's checks of a JSON body (serve_json.h). */
#include "serve_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A \u0000 escape inside a string of body (escapes are only valid inside strings). */
static bool s_has_nul_escape(const char *s, size_t n) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = s[i] == '"';
            continue;
        }
        if (s[i] == '"') {
            in_str = false;
        } else if (s[i] == '\\' && i + 1 < n) {
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4))
                return true;
            i++; /* the escaped character, \" and \\ included */
        }
    }
    return false;
}

/* The first object under o (path: where o is) with a key twice; its path and key in why. */
static bool s_dup(const cJSON *o, const char *path, char *why, size_t whylen) {
    if (cJSON_IsObject(o))
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) {
                    snprintf(why, whylen, "the key '%.64s' is given twice%s%.128s", a->string,
                             *path ? " in " : "", path);
                    return true;
                }
    int i = 0;
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next, i++) {
        char sub[256];
        if (cJSON_IsObject(o))
            snprintf(sub, sizeof sub, "%s%s%.64s", path, *path ? "." : "", c->string);
        else
            snprintf(sub, sizeof sub, "%.190s[%d]", path, i);
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && s_dup(c, sub, why, whylen))
            return true;
    }
    return false;
}

int serve_json_check(const char *body, size_t len, char *why, size_t whylen) {
    if (!body || !len)
        return 0;
    if (s_has_nul_escape(body, len)) {
        snprintf(why, whylen, "a \\u0000 (NUL) in a string is not accepted");
        return -EINVAL;
    }
    cJSON *j = cJSON_ParseWithLength(body, len);
    bool dup = j && s_dup(j, "", why, whylen);
    cJSON_Delete(j);
    return dup ? -EINVAL : 0;
}
