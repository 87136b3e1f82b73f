/* base_log.c - leveled logging to stderr, one line per call, thread-safe
 * (a single fprintf per line; stdio locks the stream). */
#include "base_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int s_level = -1;

static int s_level_from_env(void) {
    const char *e = getenv("STRATA_LOG");
    if (!e)
        return BASE_LOG_WARN;
    if (!strcmp(e, "error"))
        return BASE_LOG_ERROR;
    if (!strcmp(e, "info"))
        return BASE_LOG_INFO;
    if (!strcmp(e, "debug"))
        return BASE_LOG_DEBUG;
    return BASE_LOG_WARN;
}

void base_log_set_level(base_log_level_t level) {
    atomic_store(&s_level, (int)level);
}

base_log_level_t base_log_level(void) {
    int l = atomic_load(&s_level);
    if (l < 0) {
        l = s_level_from_env();
        atomic_store(&s_level, l);
    }
    return (base_log_level_t)l;
}

void base_log(base_log_level_t level, const char *tag, const char *fmt, ...) {
    if ((int)level > (int)base_log_level())
        return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "strata %s [%s] %s\n", names[level], tag, line);
}
