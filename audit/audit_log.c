/* audit_log.c - the hash-chained audit log: digests, the record encoder, the append-only
 * writer with rotation, fsync policy and head file, and the verifier (format and rules in
 * audit_log.h and docs/AUDIT.md). */
#include "audit_log.h"

#include "base_clock.h"
#include "base_log.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TAG "audit"
#define S_HASH_TAIL ",\"hash\":\"" /* what precedes a record's own hash */
#define S_TAIL_LEN (9 + 64 + 2)    /* ,"hash":"<64 hex>"} */
#define S_GENESIS "0000000000000000000000000000000000000000000000000000000000000000"
#define S_MAX_FILES 999999
#define S_PATH 4096

/* ---- digests */

static void s_hex(const uint8_t *b, size_t n, char *hex) {
    sodium_bin2hex(hex, 2 * n + 1, b, n);
}

static bool s_is_hex64(const char *s) {
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

void audit_digest_init(audit_digest_t *d) {
    crypto_generichash_init(&d->st, NULL, 0, 32);
    d->n_bytes = 0;
}

void audit_digest_update(audit_digest_t *d, const void *p, size_t n) {
    crypto_generichash_update(&d->st, p, n);
    d->n_bytes += n;
}

void audit_digest_hex(const audit_digest_t *d, char hex[AUDIT_HASH_HEX]) {
    crypto_generichash_state st = d->st;
    uint8_t out[32];
    crypto_generichash_final(&st, out, sizeof out);
    s_hex(out, sizeof out, hex);
}

void audit_blake2b_hex(const void *p, size_t n, char hex[AUDIT_HASH_HEX]) {
    uint8_t out[32];
    crypto_generichash(out, sizeof out, p, n, NULL, 0);
    s_hex(out, sizeof out, hex);
}

void audit_prompt_hex(const msg_generate_t *gen, char hex[AUDIT_HASH_HEX]) {
    audit_digest_t d;
    audit_digest_init(&d);
    if (gen->prompt) {
        audit_digest_update(&d, gen->prompt, gen->prompt_len);
    } else {
        for (int i = 0; i < gen->n_messages; i++) {
            const msg_chat_t *m = &gen->messages[i];
            uint8_t len[8];
            uint32_t rl = (uint32_t)strlen(m->role);
            for (int k = 0; k < 4; k++)
                len[k] = (uint8_t)(rl >> (8 * k));
            audit_digest_update(&d, len, 4);
            audit_digest_update(&d, m->role, rl);
            uint64_t cl = m->content_len;
            for (int k = 0; k < 8; k++)
                len[k] = (uint8_t)(cl >> (8 * k));
            audit_digest_update(&d, len, 8);
            audit_digest_update(&d, m->content, m->content_len);
        }
    }
    audit_digest_hex(&d, hex);
}

int audit_sha256_file(const char *path, char hex[AUDIT_HASH_HEX]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    uint8_t *buf = malloc(1 << 16);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        ssize_t n = read(fd, buf, 1 << 16);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = -errno;
            free(buf);
            close(fd);
            return e;
        }
        if (n == 0)
            break;
        crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
    }
    free(buf);
    close(fd);
    uint8_t out[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&st, out);
    s_hex(out, sizeof out, hex);
    return 0;
}

int audit_fsync_parse(const char *name) {
    if (!name)
        return -1;
    if (!strcmp(name, "interval"))
        return AUDIT_FSYNC_INTERVAL;
    if (!strcmp(name, "always"))
        return AUDIT_FSYNC_ALWAYS;
    return -1;
}

/* ---- record lines */

/* The hash of a record line (without its newline) from its bytes: the line with its tail
 * `,"hash":"..."}` replaced by `}`.  The caller has checked len >= S_TAIL_LEN + 1. */
static void s_line_hash(const char *line, size_t len, char hex[AUDIT_HASH_HEX]) {
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, (const uint8_t *)line, len - S_TAIL_LEN);
    crypto_generichash_update(&st, (const uint8_t *)"}", 1);
    uint8_t out[32];
    crypto_generichash_final(&st, out, sizeof out);
    s_hex(out, sizeof out, hex);
}

/* A record line taken apart: its JSON (the caller deletes it), seq, type, prev and hash. */
typedef struct {
    cJSON *json;
    uint64_t seq;
    const char *type;
    char prev[AUDIT_HASH_HEX];
    char hash[AUDIT_HASH_HEX];
} s_rec_t;

/* Take a line apart and check it on its own: AUDIT_OK with r filled (r->json to delete),
 * AUDIT_E_CORRUPT (not a record) or AUDIT_E_EDITED (its bytes do not match its hash), with
 * why filled. */
static int s_parse_line(const char *line, size_t len, s_rec_t *r, char *why, size_t whylen) {
    memset(r, 0, sizeof *r);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(line, len, &end, false);
    if (!j || end != line + len || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(why, whylen, "not a JSON record (damaged or edited)");
        return AUDIT_E_CORRUPT;
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "seq");
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(j, "prev");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsNumber(seq) || seq->valuedouble < 1 || seq->valuedouble > 9007199254740992.0 ||
        seq->valuedouble != floor(seq->valuedouble) || !cJSON_IsString(prev) ||
        !s_is_hex64(prev->valuestring) || !cJSON_IsString(type)) {
        cJSON_Delete(j);
        snprintf(why, whylen, "not a record: no valid seq, type or prev (damaged or edited)");
        return AUDIT_E_CORRUPT;
    }
    if (len < S_TAIL_LEN + 2 || memcmp(line + len - S_TAIL_LEN, S_HASH_TAIL, 9) ||
        memcmp(line + len - 2, "\"}", 2)) {
        cJSON_Delete(j);
        snprintf(why, whylen, "no hash at the end of the record (damaged or edited)");
        return AUDIT_E_CORRUPT;
    }
    memcpy(r->hash, line + len - 66, 64);
    r->hash[64] = 0;
    char want[AUDIT_HASH_HEX];
    s_line_hash(line, len, want);
    if (strcmp(want, r->hash)) {
        cJSON_Delete(j);
        snprintf(why, whylen, "its bytes do not match its hash");
        return AUDIT_E_EDITED;
    }
    r->json = j;
    r->seq = (uint64_t)seq->valuedouble;
    r->type = type->valuestring;
    snprintf(r->prev, sizeof r->prev, "%s", prev->valuestring);
    return AUDIT_OK;
}

bool audit_record_intact(const char *line, size_t len, char *why, size_t whylen) {
    s_rec_t r;
    char w[256];
    int p = s_parse_line(line, len, &r, w, sizeof w);
    cJSON_Delete(r.json);
    if (p != AUDIT_OK && why)
        snprintf(why, whylen, "%s", w);
    return p == AUDIT_OK;
}

/* ---- files */

static int s_cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The numbers of dir's audit-NNNNNN.log files, sorted (malloc'd; *n may be 0). */
static int s_list(const char *dir, uint32_t **nums, int *n) {
    *nums = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int cap = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        if (strlen(s) != 16 || strncmp(s, "audit-", 6) || strcmp(s + 12, ".log"))
            continue;
        uint32_t v = 0;
        bool ok = true;
        for (int i = 6; i < 12; i++) {
            ok = ok && s[i] >= '0' && s[i] <= '9';
            v = v * 10 + (uint32_t)(s[i] - '0');
        }
        if (!ok || v == 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint32_t *x = realloc(*nums, (size_t)cap * sizeof *x);
            if (!x) {
                rc = -ENOMEM;
                break;
            }
            *nums = x;
        }
        (*nums)[(*n)++] = v;
    }
    closedir(d);
    if (rc) {
        free(*nums);
        *nums = NULL;
        *n = 0;
        return rc;
    }
    if (*n)
        qsort(*nums, (size_t)*n, sizeof **nums, s_cmp_u32);
    return 0;
}

static void s_name(uint32_t num, char name[32]) {
    snprintf(name, 32, "audit-%06u.log", num);
}

/* Called for every line of a file: complete = false for a last line without its newline.
 * Nonzero stops the walk and is returned. */
typedef int (*s_line_fn)(void *arg, const char *line, size_t len, uint64_t offset, uint64_t lineno,
                         bool complete);

/* Every line of the file at path, in order.  0, the callback's stop value, or a negative
 * errno. */
static int s_each_line(const char *path, s_line_fn fn, void *arg) {
    FILE *f = fopen(path, "rbe");
    if (!f)
        return -errno;
    char *buf = NULL;
    size_t cap = 0;
    uint64_t off = 0, lineno = 0;
    int rc = 0;
    ssize_t n;
    while ((n = getdelim(&buf, &cap, '\n', f)) > 0) {
        bool complete = buf[n - 1] == '\n';
        rc = fn(arg, buf, (size_t)n - complete, off, ++lineno, complete);
        off += (uint64_t)n;
        if (rc)
            break;
    }
    if (!rc && ferror(f))
        rc = -EIO;
    free(buf);
    fclose(f);
    return rc;
}

/* Read the head file of dir: 0 with seq, hash and file, -ENOENT, or -EBADMSG. */
static int s_read_head(const char *dir, uint64_t *seq, char hash[AUDIT_HASH_HEX], char file[32]) {
    char path[S_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, AUDIT_HEAD_FILE);
    FILE *f = fopen(path, "rbe");
    if (!f)
        return -errno;
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "seq");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "hash");
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "file");
    int rc = -EBADMSG;
    if (cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble == floor(s->valuedouble) &&
        cJSON_IsString(h) && s_is_hex64(h->valuestring) && cJSON_IsString(fl) &&
        strlen(fl->valuestring) < 32) {
        *seq = (uint64_t)s->valuedouble;
        snprintf(hash, AUDIT_HASH_HEX, "%s", h->valuestring);
        snprintf(file, 32, "%s", fl->valuestring);
        rc = 0;
    }
    cJSON_Delete(j);
    return rc;
}

/* ---- the writer */

struct audit_log_t {
    char dir[S_PATH];          /* the log's directory */
    int dirfd;                 /* open on dir (fsync after a create or rename) */
    int fd;                    /* current file, O_APPEND */
    uint32_t num;              /* its number */
    uint64_t size;             /* its size in bytes */
    audit_config_t cfg;        /* with defaults filled */
    uint64_t seq;              /* last record's seq (0: none) */
    char hash[AUDIT_HASH_HEX]; /* last record's hash (genesis zeros: none) */
    uint64_t synced_seq;       /* last seq anchored in the head */
    int pending;               /* records appended since the last sync */
    uint64_t pending_since_us; /* monotonic time of the oldest of them */
    int broken;                /* a failed write or sync: every later call returns it */
};

/* Close what self holds and free it (no sync). */
static void s_free(audit_log_t *self) {
    if (self->fd >= 0)
        close(self->fd);
    if (self->dirfd >= 0)
        close(self->dirfd);
    free(self);
}

/* Open file num of the log for appending (created if missing). */
static int s_open_file(audit_log_t *self, uint32_t num) {
    char path[S_PATH + 32];
    char name[32];
    s_name(num, name);
    snprintf(path, sizeof path, "%s/%s", self->dir, name);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        int e = -errno;
        LOG_E(TAG, "cannot open %s: %s", path, strerror(errno));
        return e;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        int e = -errno;
        close(fd);
        return e;
    }
    if (self->fd >= 0)
        close(self->fd);
    self->fd = fd;
    self->num = num;
    self->size = (uint64_t)st.st_size;
    return 0;
}

static int s_write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Rewrite the head: a temporary file, fsync'd, renamed over the old one, then the
 * directory fsync'd, so the head on disk is always a whole one. */
static int s_write_head(audit_log_t *self) {
    char tmp[S_PATH + 16], path[S_PATH + 16], name[32], buf[256];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", self->dir, AUDIT_HEAD_FILE);
    snprintf(path, sizeof path, "%s/%s", self->dir, AUDIT_HEAD_FILE);
    s_name(self->num, name);
    int n =
        snprintf(buf, sizeof buf, "{\"v\":1,\"seq\":%" PRIu64 ",\"hash\":\"%s\",\"file\":\"%s\"}\n",
                 self->seq, self->hash, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    int rc = s_write_all(fd, buf, (size_t)n);
    if (!rc && fsync(fd))
        rc = -errno;
    close(fd);
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (!rc && fsync(self->dirfd))
        rc = -errno;
    return rc;
}

int audit_log_sync(audit_log_t *self) {
    if (self->broken)
        return self->broken;
    if (!self->pending && self->synced_seq == self->seq)
        return 0;
    int rc = fdatasync(self->fd) ? -errno : 0;
    if (!rc)
        rc = s_write_head(self);
    if (rc) {
        LOG_E(TAG, "sync of %s failed: %s", self->dir, strerror(-rc));
        self->broken = rc;
        return rc;
    }
    self->synced_seq = self->seq;
    self->pending = 0;
    return 0;
}

int audit_log_tick(audit_log_t *self) {
    if (self->broken)
        return self->broken;
    if (self->pending &&
        base_now_us() - self->pending_since_us >= (uint64_t)self->cfg.interval_ms * 1000u)
        return audit_log_sync(self);
    return 0;
}

uint64_t audit_log_seq(const audit_log_t *self) {
    return self->seq;
}

uint64_t audit_log_synced_seq(const audit_log_t *self) {
    return self->synced_seq;
}

/* RFC 3339 UTC with microseconds: 2025-01-02T03:04:05.123456Z */
static void s_time(uint64_t us, char out[40]) {
    time_t t = (time_t)(us / 1000000u);
    struct tm tm;
    gmtime_r(&t, &tm);
    char b[32];
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%s.%06uZ", b, (unsigned)(us % 1000000u));
}

static uint64_t s_wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A float as the shortest decimal that reads back as the same float (0.8f: 0.8, not
 * 0.800000011920929). */
static cJSON *s_float(float x) {
    char b[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, (double)x);
        if (strtof(b, NULL) == x)
            break;
    }
    return cJSON_CreateNumber(strtod(b, NULL));
}

static cJSON *s_str_or_null(const char *s) {
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* A string of n bytes (JSON-escaped by cJSON; it stops at a NUL byte). */
static cJSON *s_strn(const char *p, size_t n) {
    char *c = malloc(n + 1);
    if (!c)
        return NULL;
    memcpy(c, p, n);
    c[n] = 0;
    cJSON *j = cJSON_CreateString(c);
    free(c);
    return j;
}

/* Add the chain's fields to o, encode it as one line with its hash and newline
 * (malloc'd, *len bytes), and return the line's hash in hash. */
static char *s_seal(cJSON *o, const char *prev, size_t *len, char hash[AUDIT_HASH_HEX]) {
    cJSON_AddItemToObject(o, "prev", cJSON_CreateString(prev));
    char *body = cJSON_PrintUnformatted(o);
    if (!body)
        return NULL;
    size_t n = strlen(body); /* ends with '}' */
    audit_blake2b_hex(body, n, hash);
    char *line = malloc(n - 1 + S_TAIL_LEN + 1 + 1);
    if (!line) {
        free(body);
        return NULL;
    }
    memcpy(line, body, n - 1);
    int k = sprintf(line + n - 1, S_HASH_TAIL "%s\"}\n", hash);
    *len = n - 1 + (size_t)k;
    free(body);
    return line;
}

/* Append an encoded line as record self->seq + 1 (rotating first when it does not fit),
 * then sync as the policy says. */
static int s_append_line(audit_log_t *self, const char *line, size_t len,
                         const char hash[AUDIT_HASH_HEX], bool sync_now) {
    int rc;
    if (self->size > 0 && self->size + len > self->cfg.max_file_bytes) {
        if (self->num >= S_MAX_FILES)
            return self->broken = -EFBIG;
        /* the old file is complete: make it durable before the chain moves on */
        if (fdatasync(self->fd))
            return self->broken = -errno;
        if ((rc = s_open_file(self, self->num + 1)))
            return self->broken = rc;
    }
    if ((rc = s_write_all(self->fd, line, len))) {
        LOG_E(TAG, "write to %s failed: %s", self->dir, strerror(-rc));
        return self->broken = rc;
    }
    self->size += len;
    self->seq++;
    memcpy(self->hash, hash, AUDIT_HASH_HEX);
    if (self->pending++ == 0)
        self->pending_since_us = base_now_us();
    if (sync_now || self->cfg.fsync == AUDIT_FSYNC_ALWAYS ||
        self->pending >= self->cfg.interval_records)
        return audit_log_sync(self);
    return audit_log_tick(self);
}

/* The record object of rec (without prev and hash), or NULL when out of memory. */
static cJSON *s_request_json(const audit_log_t *self, const audit_record_t *rec, uint64_t seq) {
    char tbuf[40], hex[AUDIT_HASH_HEX];
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "type", "request");
    cJSON_AddNumberToObject(o, "seq", (double)seq);
    s_time(rec->time_us ? rec->time_us : s_wall_us(), tbuf);
    cJSON_AddStringToObject(o, "time", tbuf);
    const msg_generate_t *g = rec->gen;
    cJSON_AddItemToObject(o, "id", s_str_or_null(g ? g->id : rec->id));
    if (rec->rid) {
        char rid[20];
        snprintf(rid, sizeof rid, "%016" PRIx64, rec->rid);
        cJSON_AddStringToObject(o, "rid", rid);
    } else {
        cJSON_AddNullToObject(o, "rid");
    }
    cJSON_AddItemToObject(o, "session", s_str_or_null(g && g->session[0] ? g->session : NULL));

    cJSON *c = cJSON_AddObjectToObject(o, "client");
    if (c) {
        char *ih = NULL;
        if (rec->client_ident && rec->client_ident_len) {
            ih = malloc(2 * rec->client_ident_len + 1);
            if (ih)
                s_hex(rec->client_ident, rec->client_ident_len, ih);
        }
        cJSON_AddItemToObject(c, "routing_id", s_str_or_null(ih));
        free(ih);
        cJSON_AddItemToObject(c, "curve_key", s_str_or_null(rec->client_key));
    }
    cJSON_AddItemToObject(o, "model_sha256", s_str_or_null(rec->model_sha256));

    if (g) {
        cJSON *p = cJSON_AddObjectToObject(o, "params");
        if (p) {
            cJSON_AddItemToObject(p, "temperature", s_float(g->sampling.temperature));
            cJSON_AddNumberToObject(p, "top_k", g->sampling.top_k);
            cJSON_AddItemToObject(p, "top_p", s_float(g->sampling.top_p));
            cJSON_AddItemToObject(p, "min_p", s_float(g->sampling.min_p));
            cJSON_AddItemToObject(p, "repeat_penalty", s_float(g->sampling.repeat_penalty));
            cJSON_AddNumberToObject(p, "repeat_last_n", g->sampling.repeat_last_n);
            char seed[24]; /* a u64: a string, since a JSON number is exact to 2^53 only */
            snprintf(seed, sizeof seed, "%" PRIu64, g->sampling.seed);
            cJSON_AddStringToObject(p, "seed", seed);
            cJSON_AddBoolToObject(p, "seed_given", g->has_seed);
            cJSON_AddNumberToObject(p, "max_tokens", g->max_tokens);
            cJSON *stop = cJSON_AddArrayToObject(p, "stop");
            for (int i = 0; stop && i < g->n_stop; i++)
                cJSON_AddItemToArray(stop, cJSON_CreateString(g->stop[i]));
            cJSON_AddBoolToObject(p, "stream", g->stream);
        }
        cJSON *pr = cJSON_AddObjectToObject(o, "prompt");
        if (pr) {
            size_t bytes = 0;
            if (g->prompt) {
                bytes = g->prompt_len;
            } else {
                for (int i = 0; i < g->n_messages; i++)
                    bytes += g->messages[i].content_len;
            }
            cJSON_AddStringToObject(pr, "kind", g->prompt ? "text" : "messages");
            if (!g->prompt)
                cJSON_AddNumberToObject(pr, "messages", g->n_messages);
            cJSON_AddNumberToObject(pr, "bytes", (double)bytes);
            audit_prompt_hex(g, hex);
            cJSON_AddStringToObject(pr, "blake2b", hex);
            if (self->cfg.store_text && g->prompt) {
                cJSON_AddItemToObject(pr, "text", s_strn(g->prompt, g->prompt_len));
            } else if (self->cfg.store_text) {
                cJSON *ms = cJSON_AddArrayToObject(pr, "text");
                for (int i = 0; ms && i < g->n_messages; i++) {
                    cJSON *m = cJSON_CreateObject();
                    cJSON_AddStringToObject(m, "role", g->messages[i].role);
                    cJSON_AddItemToObject(
                        m, "content", s_strn(g->messages[i].content, g->messages[i].content_len));
                    cJSON_AddItemToArray(ms, m);
                }
            }
        }
    } else {
        cJSON_AddNullToObject(o, "params");
        cJSON_AddNullToObject(o, "prompt");
    }

    cJSON *out = cJSON_AddObjectToObject(o, "output");
    if (out) {
        uint64_t bytes;
        if (rec->output) {
            audit_digest_hex(rec->output, hex);
            bytes = rec->output->n_bytes;
        } else {
            audit_blake2b_hex(rec->output_text ? rec->output_text : "", rec->output_len, hex);
            bytes = rec->output_len;
        }
        cJSON_AddNumberToObject(out, "bytes", (double)bytes);
        cJSON_AddStringToObject(out, "blake2b", hex);
        if (self->cfg.store_text && !rec->output && rec->output_text)
            cJSON_AddItemToObject(out, "text", s_strn(rec->output_text, rec->output_len));
    }

    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    if (u) {
        cJSON_AddNumberToObject(u, "prompt_tokens", rec->usage.prompt_tokens);
        cJSON_AddNumberToObject(u, "completion_tokens", rec->usage.completion_tokens);
        cJSON_AddNumberToObject(u, "cached_tokens", rec->usage.cached_tokens);
        cJSON_AddNumberToObject(u, "draft_proposed", rec->usage.draft_proposed);
        cJSON_AddNumberToObject(u, "draft_accepted", rec->usage.draft_accepted);
    }
    if (rec->timings) {
        cJSON *t = cJSON_AddObjectToObject(o, "timings_ms");
        if (t) {
            cJSON_AddNumberToObject(t, "queued", round(rec->timings->queued_ms * 1000) / 1000);
            cJSON_AddNumberToObject(t, "prefill", round(rec->timings->prefill_ms * 1000) / 1000);
            cJSON_AddNumberToObject(t, "decode", round(rec->timings->decode_ms * 1000) / 1000);
            cJSON_AddNumberToObject(t, "ttft", round(rec->timings->ttft_ms * 1000) / 1000);
        }
    } else {
        cJSON_AddNullToObject(o, "timings_ms");
    }

    cJSON *e = cJSON_AddObjectToObject(o, "end");
    if (e && !rec->is_error) {
        const char *fin = msg_finish_name(rec->finish);
        cJSON_AddStringToObject(e, "finish", fin && *fin ? fin : "?");
    } else if (e) {
        const char *code = msg_code_name(rec->error_code);
        cJSON_AddStringToObject(e, "error", code ? code : "?");
        cJSON_AddItemToObject(e, "message", s_str_or_null(rec->error_message));
    }

    if (rec->trace) {
        cJSON *t = cJSON_AddObjectToObject(o, "trace");
        if (t) {
            cJSON_AddNumberToObject(t, "bytes", (double)rec->trace_len);
            audit_blake2b_hex(rec->trace, rec->trace_len, hex);
            cJSON_AddStringToObject(t, "blake2b", hex);
            if (!self->cfg.no_trace) {
                size_t cap =
                    sodium_base64_ENCODED_LEN(rec->trace_len, sodium_base64_VARIANT_ORIGINAL);
                char *b64 = malloc(cap);
                if (b64) {
                    sodium_bin2base64(b64, cap, rec->trace, rec->trace_len,
                                      sodium_base64_VARIANT_ORIGINAL);
                    cJSON_AddStringToObject(t, "base64", b64);
                    free(b64);
                }
            }
        }
    } else {
        cJSON_AddNullToObject(o, "trace");
    }
    cJSON_AddNumberToObject(o, "resumes", rec->resumes);
    if (rec->cache_kind) { /* provenance of an answer that was not generated */
        cJSON *c = cJSON_AddObjectToObject(o, "cache");
        cJSON_AddStringToObject(c, "kind", rec->cache_kind);
        cJSON_AddStringToObject(c, "entry", rec->cache_entry ? rec->cache_entry : "");
    }
    return o;
}

int audit_log_append(audit_log_t *self, const audit_record_t *rec) {
    if (self->broken)
        return self->broken;
    if ((rec->model_sha256 && !s_is_hex64(rec->model_sha256)) ||
        (rec->client_key && strlen(rec->client_key) > 64) || rec->client_ident_len > 1024 ||
        (rec->output_text == NULL && rec->output_len && !rec->output))
        return -EINVAL;
    cJSON *o = s_request_json(self, rec, self->seq + 1);
    if (!o)
        return -ENOMEM;
    char hash[AUDIT_HASH_HEX];
    size_t len;
    char *line = s_seal(o, self->hash, &len, hash);
    cJSON_Delete(o);
    if (!line)
        return -ENOMEM;
    int rc = s_append_line(self, line, len, hash, false);
    free(line);
    return rc;
}

/* What audit_log_new learns from the newest file: its last whole record and a torn tail. */
typedef struct {
    uint64_t n_lines; /* whole lines seen */
    const char *last; /* (last_len) the last whole line, copied */
    char *last_buf;
    size_t last_len, last_cap;
    bool torn;                      /* a last line without its newline */
    uint64_t torn_offset, torn_len; /* where and how long */
    char torn_hash[AUDIT_HASH_HEX]; /* BLAKE2b of the torn bytes */
} s_tail_t;

static int s_tail_line(void *arg, const char *line, size_t len, uint64_t offset, uint64_t lineno,
                       bool complete) {
    (void)lineno;
    s_tail_t *t = arg;
    if (!complete) {
        t->torn = true;
        t->torn_offset = offset;
        t->torn_len = len;
        audit_blake2b_hex(line, len, t->torn_hash);
        return 0;
    }
    if (len + 1 > t->last_cap) {
        char *b = realloc(t->last_buf, len + 1);
        if (!b)
            return -ENOMEM;
        t->last_buf = b;
        t->last_cap = len + 1;
    }
    memcpy(t->last_buf, line, len);
    t->last_len = len;
    t->n_lines++;
    return 0;
}

audit_log_t *audit_log_new(const char *dir, const audit_config_t *config) {
    if (sodium_init() < 0) {
        LOG_E(TAG, "libsodium failed to initialise");
        return NULL;
    }
    if (!dir || strlen(dir) >= S_PATH - 64) {
        LOG_E(TAG, "bad audit directory");
        return NULL;
    }
    audit_log_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->fd = self->dirfd = -1;
    snprintf(self->dir, sizeof self->dir, "%s", dir);
    if (config)
        self->cfg = *config;
    if (!self->cfg.max_file_bytes)
        self->cfg.max_file_bytes = AUDIT_DEFAULT_MAX_FILE_BYTES;
    if (self->cfg.interval_ms <= 0)
        self->cfg.interval_ms = AUDIT_DEFAULT_INTERVAL_MS;
    if (self->cfg.interval_records <= 0)
        self->cfg.interval_records = AUDIT_DEFAULT_INTERVAL_RECORDS;
    memcpy(self->hash, S_GENESIS, AUDIT_HASH_HEX);

    uint32_t *nums = NULL;
    int n = 0;
    s_tail_t tail = {0};
    if (mkdir(dir, 0700) && errno != EEXIST) {
        LOG_E(TAG, "cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    self->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (self->dirfd < 0 || s_list(dir, &nums, &n)) {
        LOG_E(TAG, "cannot read %s: %s", dir, strerror(errno));
        goto fail;
    }
    uint64_t head_seq = 0;
    char head_hash[AUDIT_HASH_HEX], head_file[32];
    int hrc = s_read_head(dir, &head_seq, head_hash, head_file);
    if (n == 0) {
        if (hrc != -ENOENT) {
            LOG_E(TAG, "%s has a head file but no log files (deleted?): `strata audit verify %s`",
                  dir, dir);
            goto fail;
        }
        if (s_open_file(self, 1) || s_write_head(self))
            goto fail;
        free(nums);
        return self;
    }
    if (hrc) {
        LOG_E(TAG, "%s: head file %s (deleted or damaged?): `strata audit verify %s`", dir,
              hrc == -ENOENT ? "missing" : "unreadable", dir);
        goto fail;
    }
    /* the newest whole record, walking back over files that hold none (a file created just
     * before a crash, or one holding only torn bytes) */
    char path[S_PATH + 32], name[32];
    bool torn = false;
    uint64_t torn_offset = 0, torn_len = 0;
    char torn_hash[AUDIT_HASH_HEX] = "", torn_file[32] = "";
    for (int i = n - 1; i >= 0; i--) {
        s_name(nums[i], name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        free(tail.last_buf);
        memset(&tail, 0, sizeof tail);
        int rc = s_each_line(path, s_tail_line, &tail);
        if (rc) {
            LOG_E(TAG, "cannot read %s: %s", path, strerror(-rc));
            goto fail;
        }
        if (i == n - 1 && tail.torn) {
            torn = true;
            torn_offset = tail.torn_offset;
            torn_len = tail.torn_len;
            memcpy(torn_hash, tail.torn_hash, AUDIT_HASH_HEX);
            memcpy(torn_file, name, sizeof name);
        } else if (tail.torn) {
            LOG_E(TAG, "%s: torn bytes before the newest file: `strata audit verify %s`", path,
                  dir);
            goto fail;
        }
        if (tail.n_lines)
            break;
    }
    if (tail.n_lines) {
        s_rec_t r;
        char why[256];
        if (s_parse_line(tail.last_buf, tail.last_len, &r, why, sizeof why) != AUDIT_OK) {
            LOG_E(TAG, "%s: the last record of %s is not intact (%s): `strata audit verify %s`",
                  dir, name, why, dir);
            goto fail;
        }
        self->seq = r.seq;
        memcpy(self->hash, r.hash, AUDIT_HASH_HEX);
        cJSON_Delete(r.json);
    }
    if (head_seq > self->seq) {
        LOG_E(TAG,
              "%s ends at seq %" PRIu64 " but its head anchors seq %" PRIu64
              ": records were cut off (`strata audit verify %s`)",
              dir, self->seq, head_seq, dir);
        goto fail;
    }
    if (head_seq == self->seq && strcmp(head_hash, self->hash)) {
        LOG_E(TAG,
              "%s: its last record (seq %" PRIu64 ") is not the one its head anchors: "
              "rewritten (`strata audit verify %s`)",
              dir, self->seq, dir);
        goto fail;
    }
    self->synced_seq = head_seq;
    if (s_open_file(self, nums[n - 1] + (torn ? 1 : 0)))
        goto fail;
    if (torn) {
        LOG_W(TAG,
              "%s: torn record (%" PRIu64 " bytes at offset %" PRIu64 ", after seq %" PRIu64
              "): noted in a torn record; new file %06u",
              torn_file, torn_len, torn_offset, self->seq, self->num);
        cJSON *o = cJSON_CreateObject();
        char tbuf[40];
        s_time(s_wall_us(), tbuf);
        cJSON_AddNumberToObject(o, "v", 1);
        cJSON_AddStringToObject(o, "type", "torn");
        cJSON_AddNumberToObject(o, "seq", (double)(self->seq + 1));
        cJSON_AddStringToObject(o, "time", tbuf);
        cJSON *t = cJSON_AddObjectToObject(o, "torn");
        cJSON_AddStringToObject(t, "file", torn_file);
        cJSON_AddNumberToObject(t, "offset", (double)torn_offset);
        cJSON_AddNumberToObject(t, "bytes", (double)torn_len);
        cJSON_AddStringToObject(t, "blake2b", torn_hash);
        char hash[AUDIT_HASH_HEX];
        size_t len;
        char *line = s_seal(o, self->hash, &len, hash);
        cJSON_Delete(o);
        int rc = line ? s_append_line(self, line, len, hash, true) : -ENOMEM;
        free(line);
        if (rc)
            goto fail;
    } else if (self->synced_seq != self->seq) {
        self->pending = 1; /* anchor what the last run wrote after its last sync */
        self->pending_since_us = base_now_us();
    }
    free(tail.last_buf);
    free(nums);
    return self;
fail:
    free(tail.last_buf);
    free(nums);
    s_free(self);
    return NULL;
}

void audit_log_destroy(audit_log_t **self_p) {
    if (!self_p || !*self_p)
        return;
    audit_log_sync(*self_p);
    s_free(*self_p);
    *self_p = NULL;
}

/* ---- the verifier */

const char *audit_problem_name(int problem) {
    static const char *names[] = {"ok",       "io",    "files", "corrupt",   "edited",
                                  "sequence", "chain", "torn",  "truncated", "head"};
    return problem >= 0 && problem <= AUDIT_E_HEAD ? names[problem] : "?";
}

/* The walk over a log's lines. */
typedef struct {
    audit_report_t *rep;
    const char *file;          /* the current file's name */
    bool single;               /* one file: its first record starts the chain */
    uint64_t want_seq;         /* the next record's seq */
    char prev[AUDIT_HASH_HEX]; /* the hash the next record must chain to */
    bool torn_pending;         /* torn bytes a "torn" record must name next */
    char torn_file[256];
    uint64_t torn_offset, torn_len;
    char torn_hash[AUDIT_HASH_HEX];
    uint64_t torn_line;
    uint64_t head_seq; /* the head's (dir mode) */
    char head_hash[AUDIT_HASH_HEX];
    bool head_hash_seen; /* the record of head_seq was met */
    bool head_hash_ok;   /* ... and had the head's hash */
    uint64_t head_line, head_offset;
    char head_file[256];
    uint64_t end_line, end_offset; /* just after the last intact record */
} s_walk_t;

static int s_bad(s_walk_t *w, int problem, uint64_t line, uint64_t offset, uint64_t seq,
                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int s_bad(s_walk_t *w, int problem, uint64_t line, uint64_t offset, uint64_t seq,
                 const char *fmt, ...) {
    audit_report_t *r = w->rep;
    r->problem = problem;
    snprintf(r->file, sizeof r->file, "%s", w->file ? w->file : "");
    r->line = line;
    r->offset = offset;
    r->seq = seq;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return 1;
}

/* Whether the torn fields of record j name exactly the pending torn bytes. */
static bool s_torn_matches(const s_walk_t *w, const cJSON *j) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "torn");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "file");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "offset");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(t, "bytes");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(t, "blake2b");
    return cJSON_IsString(f) && !strcmp(f->valuestring, w->torn_file) && cJSON_IsNumber(o) &&
           o->valuedouble == (double)w->torn_offset && cJSON_IsNumber(b) &&
           b->valuedouble == (double)w->torn_len && cJSON_IsString(h) &&
           !strcmp(h->valuestring, w->torn_hash);
}

static int s_walk_line(void *arg, const char *line, size_t len, uint64_t offset, uint64_t lineno,
                       bool complete) {
    s_walk_t *w = arg;
    if (!complete) {
        /* a partial last line: a "torn" record at the start of the next file must name it */
        w->torn_pending = true;
        snprintf(w->torn_file, sizeof w->torn_file, "%s", w->file);
        w->torn_offset = offset;
        w->torn_len = len;
        w->torn_line = lineno;
        audit_blake2b_hex(line, len, w->torn_hash);
        return 0;
    }
    s_rec_t r;
    char why[256];
    int p = s_parse_line(line, len, &r, why, sizeof why);
    if (p != AUDIT_OK)
        return s_bad(w, p, lineno, offset, w->want_seq, "%s", why);
    int stop = 0;
    bool first = w->single && w->rep->n_records == 0;
    if (first && r.seq != 1) {
        w->want_seq = r.seq; /* one file: its first record starts the chain */
        memcpy(w->prev, r.prev, AUDIT_HASH_HEX);
    }
    bool is_torn = !strcmp(r.type, "torn");
    if (w->torn_pending && !(is_torn && s_torn_matches(w, r.json))) {
        stop = s_bad(w, AUDIT_E_TORN, w->torn_line, w->torn_offset, w->want_seq,
                     "torn record: %" PRIu64 " bytes at offset %" PRIu64 " of %s that no "
                     "\"torn\" record accounts for",
                     w->torn_len, w->torn_offset, w->torn_file);
        snprintf(w->rep->file, sizeof w->rep->file, "%s", w->torn_file);
    } else if (r.seq != w->want_seq) {
        stop = s_bad(w, AUDIT_E_SEQUENCE, lineno, offset, w->want_seq,
                     r.seq > w->want_seq ? "seq %" PRIu64 " where %" PRIu64
                                           " is due: record %" PRIu64 " deleted or moved"
                                         : "seq %" PRIu64 " where %" PRIu64
                                           " is due: records reordered or "
                                           "repeated (record %" PRIu64 " moved?)",
                     r.seq, w->want_seq, w->want_seq);
    } else if (strcmp(r.prev, w->prev)) {
        stop = s_bad(w, AUDIT_E_CHAIN, lineno, offset, r.seq,
                     "prev does not match the hash of record %" PRIu64
                     ": a record before it was replaced, or this one was moved here",
                     r.seq - 1);
    } else if (is_torn && !w->torn_pending && !first) {
        stop = s_bad(w, AUDIT_E_TORN, lineno, offset, r.seq,
                     "a \"torn\" record names torn bytes that are not there");
    }
    if (!stop) {
        if (is_torn && w->torn_pending)
            w->rep->n_torn_noted++;
        w->torn_pending = false;
        w->rep->n_records++;
        w->rep->last_seq = r.seq;
        memcpy(w->rep->last_hash, r.hash, AUDIT_HASH_HEX);
        memcpy(w->prev, r.hash, AUDIT_HASH_HEX);
        w->want_seq = r.seq + 1;
        w->end_line = lineno + 1;
        w->end_offset = offset + len + 1;
        if (r.seq == w->head_seq) {
            w->head_hash_seen = true;
            w->head_hash_ok = !strcmp(r.hash, w->head_hash);
            w->head_line = lineno;
            w->head_offset = offset;
            snprintf(w->head_file, sizeof w->head_file, "%s", w->file);
        }
    }
    cJSON_Delete(r.json);
    return stop;
}

/* After the last file: torn bytes at the very end, then the head. */
static int s_walk_end(s_walk_t *w, bool dir_mode, bool have_head) {
    audit_report_t *r = w->rep;
    if (w->torn_pending) {
        w->file = w->torn_file;
        return s_bad(w, AUDIT_E_TORN, w->torn_line, w->torn_offset, w->want_seq,
                     "torn record: %" PRIu64 " bytes at offset %" PRIu64 " of %s after seq %" PRIu64
                     " (a write cut short; the writer notes it when it next opens the log)",
                     w->torn_len, w->torn_offset, w->torn_file, r->last_seq);
    }
    if (!dir_mode)
        return 0;
    if (!have_head) {
        w->file = AUDIT_HEAD_FILE;
        return s_bad(w, AUDIT_E_HEAD, 0, 0, w->want_seq,
                     "no head file (%s): deleted? the end of the log cannot be checked",
                     AUDIT_HEAD_FILE);
    }
    r->head_checked = true;
    r->head_seq = w->head_seq;
    if (w->head_seq > r->last_seq)
        return s_bad(w, AUDIT_E_TRUNCATED, w->end_line, w->end_offset, r->last_seq + 1,
                     "the log ends at seq %" PRIu64 " but its head anchors seq %" PRIu64
                     ": records %" PRIu64 "..%" PRIu64 " were cut off",
                     r->last_seq, w->head_seq, r->last_seq + 1, w->head_seq);
    if (w->head_seq > 0 && !w->head_hash_ok) {
        w->file = w->head_file;
        return s_bad(w, AUDIT_E_HEAD, w->head_line, w->head_offset, w->head_seq,
                     "record %" PRIu64 " is not the one the head anchors (another hash): the "
                     "log was rewritten from there, or the head was replaced",
                     w->head_seq);
    }
    r->unanchored = r->last_seq - w->head_seq;
    return 0;
}

int audit_verify(const char *path, audit_report_t *report) {
    memset(report, 0, sizeof *report);
    memcpy(report->last_hash, S_GENESIS, AUDIT_HASH_HEX);
    if (sodium_init() < 0)
        return -EIO;
    struct stat st;
    if (stat(path, &st))
        return -errno;
    s_walk_t w = {.rep = report, .want_seq = 1};
    memcpy(w.prev, S_GENESIS, AUDIT_HASH_HEX);
    int rc = 0;
    if (!S_ISDIR(st.st_mode)) {
        const char *base = strrchr(path, '/');
        w.file = base ? base + 1 : path;
        w.single = true;
        report->n_files = 1;
        rc = s_each_line(path, s_walk_line, &w);
        if (rc < 0)
            return rc;
        if (rc == 0 && s_walk_end(&w, false, false))
            rc = 1;
        return rc ? -EBADMSG : 0;
    }
    uint32_t *nums;
    int n;
    if ((rc = s_list(path, &nums, &n)))
        return rc;
    char head_file[32];
    int hrc = s_read_head(path, &w.head_seq, w.head_hash, head_file);
    if (hrc == -EBADMSG) {
        free(nums);
        w.file = AUDIT_HEAD_FILE;
        s_bad(&w, AUDIT_E_HEAD, 0, 0, 0, "the head file is not a head (damaged or edited)");
        return -EBADMSG;
    }
    if (n == 0) {
        free(nums);
        s_bad(&w, AUDIT_E_FILES, 0, 0, 1, "no audit-NNNNNN.log files in %s", path);
        return -EBADMSG;
    }
    char name[32], fpath[S_PATH + 32];
    for (int i = 0; i < n && !rc; i++) {
        s_name(nums[i], name);
        w.file = name;
        if (nums[i] != (uint32_t)(i == 0 ? 1 : nums[i - 1] + 1)) {
            char want[32];
            s_name(i == 0 ? 1 : nums[i - 1] + 1, want);
            w.file = want;
            rc = s_bad(&w, AUDIT_E_FILES, 0, 0, w.want_seq, "file %s is missing (deleted?)", want);
            break;
        }
        report->n_files++;
        snprintf(fpath, sizeof fpath, "%s/%s", path, name);
        rc = s_each_line(fpath, s_walk_line, &w);
        if (rc < 0) {
            free(nums);
            return rc;
        }
    }
    if (rc == 0)
        rc = s_walk_end(&w, true, hrc == 0);
    free(nums);
    return rc ? -EBADMSG : 0;
}

/* ---- finding a record */

typedef struct {
    const char *id;
    uint64_t seq;
    const char *file;
    audit_found_t *found;
} s_find_t;

static int s_find_line(void *arg, const char *line, size_t len, uint64_t offset, uint64_t lineno,
                       bool complete) {
    s_find_t *f = arg;
    if (!complete)
        return 0;
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j)
        return 0;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "seq");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(j, "rid");
    bool match;
    if (f->seq)
        match = cJSON_IsNumber(seq) && seq->valuedouble == (double)f->seq &&
                (!f->id || (cJSON_IsString(id) && !strcmp(id->valuestring, f->id)));
    else
        match = (cJSON_IsString(id) && !strcmp(id->valuestring, f->id)) ||
                (cJSON_IsString(rid) && !strcmp(rid->valuestring, f->id));
    if (match) {
        audit_found_t *o = f->found;
        char *t = malloc(len + 1);
        if (!t) {
            cJSON_Delete(j);
            return -ENOMEM;
        }
        memcpy(t, line, len);
        t[len] = 0;
        free(o->text);
        o->text = t;
        o->text_len = len;
        o->n_matches++;
        snprintf(o->file, sizeof o->file, "%s", f->file);
        o->line = lineno;
        o->offset = offset;
        o->seq = cJSON_IsNumber(seq) ? (uint64_t)seq->valuedouble : 0;
    }
    cJSON_Delete(j);
    return 0;
}

int audit_find(const char *path, const char *id, uint64_t seq, audit_found_t *found) {
    memset(found, 0, sizeof *found);
    if (!id && !seq)
        return -EINVAL;
    struct stat st;
    if (stat(path, &st))
        return -errno;
    s_find_t f = {.id = id, .seq = seq, .found = found};
    int rc = 0;
    if (!S_ISDIR(st.st_mode)) {
        const char *base = strrchr(path, '/');
        f.file = base ? base + 1 : path;
        rc = s_each_line(path, s_find_line, &f);
    } else {
        uint32_t *nums;
        int n;
        if ((rc = s_list(path, &nums, &n)))
            return rc;
        char name[32], fpath[S_PATH + 32];
        for (int i = 0; i < n && !rc; i++) {
            s_name(nums[i], name);
            f.file = name;
            snprintf(fpath, sizeof fpath, "%s/%s", path, name);
            rc = s_each_line(fpath, s_find_line, &f);
        }
        free(nums);
    }
    if (rc) {
        free(found->text);
        found->text = NULL;
        return rc;
    }
    return found->text ? 0 : -ENOENT;
}
