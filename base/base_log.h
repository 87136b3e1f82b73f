/* base_log.h - the one logging module: levels, a module tag, stderr.
 * Level from STRATA_LOG=error|warn|info|debug (default warn).
 */
#ifndef BASE_LOG_H
#define BASE_LOG_H

typedef enum {
    BASE_LOG_ERROR = 0,
    BASE_LOG_WARN = 1,
    BASE_LOG_INFO = 2,
    BASE_LOG_DEBUG = 3
} base_log_level_t;

void base_log_set_level(base_log_level_t level);
base_log_level_t base_log_level(void);
void base_log(base_log_level_t level, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_E(tag, ...) base_log(BASE_LOG_ERROR, tag, __VA_ARGS__)
#define LOG_W(tag, ...) base_log(BASE_LOG_WARN, tag, __VA_ARGS__)
#define LOG_I(tag, ...) base_log(BASE_LOG_INFO, tag, __VA_ARGS__)
#define LOG_D(tag, ...) base_log(BASE_LOG_DEBUG, tag, __VA_ARGS__)

#endif
