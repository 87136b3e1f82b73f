/* audit_log.h - the audit log: one hash-chained record per finished request, appended to
 * size-rotated files in one directory, and the verifier that names the first bad record.
 * It owns the directory's files; the caller owns what a record points to (docs/AUDIT.md).
 *
 * Files.  DIR/audit-000001.log, audit-000002.log, ... hold one record per line; a record
 * goes to the next file when it would take the current one past max_file_bytes (a record is
 * never split).  DIR/audit.head names the last record made durable (its seq, hash and file).
 *
 * A record is one JSON object on one line (cJSON, no spaces), its last two keys "prev" and
 * "hash":
 *     {"v":1,"type":"request","seq":7,...,"prev":"<64 hex>","hash":"<64 hex>"}
 * hash = BLAKE2b-256 of the line's exact bytes with its tail `,"hash":"<64 hex>"}` replaced
 * by `}` (so it covers every byte but itself, prev included); prev = the previous record's
 * hash, or 64 zeros (genesis) for seq 1; seq counts from 1 without gaps across files.  JSON
 * lines rather than MessagePack: an auditor reads and re-hashes them with standard tools
 * (jq, b2sum, Python's hashlib); the hash covers the bytes as written, never a re-encoding.
 *
 * Why a hash in every record as well as prev: with prev alone an edited record k is seen
 * only at record k+1 (and the last record not at all); with its own hash the edit is named
 * at k.  Someone who also rewrites the hash breaks prev of k+1, which is then named.
 *
 * The tail: a chain cannot show that records were cut off its end.  The head file
 * (rewritten by rename, fsync'd with its directory, at every sync point) anchors the last
 * durable record; verify fails when the log ends before it.  Trade-off against periodic
 * checkpoint records inside the log: a checkpoint cannot anchor the records after it (cut
 * the tail back to the last checkpoint and nothing shows), and cut together with its
 * checkpoint nothing is left to compare; the head costs one small rename per sync and
 * anchors everything up to the last sync.  Records written after the last sync are not yet
 * anchored: verify counts them, and cutting those goes unseen (the window the fsync policy
 * sets).  A head under the same account as the log proves nothing against someone who can
 * rewrite both: copy the head's hash elsewhere (`strata audit verify` prints it) to anchor
 * it outside (docs/AUDIT.md).
 *
 * Durability.  A record is one write(2) on an O_APPEND file: a process crash loses nothing
 * written.  fsync decides what survives a power loss:
 *   always    fdatasync the file and rewrite the head after every record: nothing acknowledged
 *             is lost, at the cost of two syncs per request (milliseconds on a disk).
 *   interval  (default) sync when the oldest unsynced record is interval_ms old (1000) or
 *             interval_records are unsynced (100), checked at every append and by
 *             audit_log_tick from the owner's timer: at most a second of records is exposed
 *             to a power loss, and the frontend's loop never waits on a disk per request.
 *
 * Torn records.  A power loss during a write can leave a partial last line.  verify reports
 * such bytes as torn (file and offset), never skips them.  The writer never rewrites or
 * truncates a file: when audit_log_new finds a torn tail it starts a new file whose first
 * record (type "torn") names the torn bytes (file, offset, length, BLAKE2b), chained to the
 * last whole record; verify accepts torn bytes only when that record names them exactly.
 *
 * Not thread-safe: one thread owns a log (the frontend).  Errors are logged (tag "audit").
 */
#ifndef AUDIT_LOG_H
#define AUDIT_LOG_H

#include "msg_client.h"

#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUDIT_HASH_HEX 65 /* 64 hex digits + NUL: a BLAKE2b-256 or SHA-256 in hex */
#define AUDIT_HEAD_FILE "audit.head"
#define AUDIT_DEFAULT_MAX_FILE_BYTES (64ull << 20)
#define AUDIT_DEFAULT_INTERVAL_MS 1000
#define AUDIT_DEFAULT_INTERVAL_RECORDS 100

typedef enum {
    AUDIT_FSYNC_INTERVAL = 0, /* "interval" (default) */
    AUDIT_FSYNC_ALWAYS = 1    /* "always" */
} audit_fsync_t;

/* "always" / "interval" -> audit_fsync_t, or -1. */
int audit_fsync_parse(const char *name);

/* How a log writes.  Zero fields take the defaults in brackets. */
typedef struct {
    uint64_t max_file_bytes; /* rotate before a record takes a file past this [64 MiB] */
    int fsync;               /* audit_fsync_t [interval] */
    int interval_ms;         /* interval: oldest unsynced record's age that syncs [1000] */
    int interval_records;    /* interval: unsynced records that sync [100] */
    bool store_text;         /* keep prompt and completion text in records [false: hashes
                                only; an audit log outlives the data it describes] */
    bool no_trace;           /* leave the trace bytes out (its digest stays) [false: a
                                traced request's trace is kept, base64] */
} audit_config_t;

/* ---- digests */

/* An incremental BLAKE2b-256 of a byte stream (e.g. the completion text as its pieces go
 * to the client), and how many bytes it took.  Plain data: embed it in a request. */
typedef struct {
    crypto_generichash_state st; /* libsodium's BLAKE2b state */
    uint64_t n_bytes;            /* bytes taken so far */
} audit_digest_t;

void audit_digest_init(audit_digest_t *d);
void audit_digest_update(audit_digest_t *d, const void *p, size_t n);
/* The digest of what d took, as hex; d is left unchanged (a copy is finalised). */
void audit_digest_hex(const audit_digest_t *d, char hex[AUDIT_HASH_HEX]);

/* BLAKE2b-256 of n bytes at p, as hex. */
void audit_blake2b_hex(const void *p, size_t n, char hex[AUDIT_HASH_HEX]);

/* The prompt digest of a generate, as hex: for a raw prompt, BLAKE2b-256 of its bytes; for
 * messages, BLAKE2b-256 of each message in order as u32 LE role length, role, u64 LE content
 * length, content (so no two conversations share an encoding).  docs/AUDIT.md has both. */
void audit_prompt_hex(const msg_generate_t *gen, char hex[AUDIT_HASH_HEX]);

/* SHA-256 of the file at path (libsodium's streaming crypto_hash_sha256), as hex: the
 * model's identity, computed once at start.  0, or a negative errno (-ENOENT, -EIO, ...). */
int audit_sha256_file(const char *path, char hex[AUDIT_HASH_HEX]);

/* ---- the writer */

/* One finished request, as the frontend knows it at its final event (done or error).
 * Everything is borrowed for the call. */
typedef struct {
    const msg_generate_t *gen;   /* the client's request (id, sampling, seed, max_tokens, stop,
                                    prompt or messages, session); NULL when it never
                                    decoded (then id and the parameters are null) */
    const char *id;              /* the client's request id when gen is NULL, or NULL */
    uint64_t rid;                /* server-side id of the request's last attempt (0: none) */
    const uint8_t *client_ident; /* the connection's ZeroMQ routing id (hex in the record) */
    size_t client_ident_len;
    const char *client_key;       /* the client's CURVE public key (Z85, 40 chars) when the
                                     endpoint uses CURVE, else NULL */
    const char *model_sha256;     /* hex (audit_sha256_file at start), or NULL */
    const audit_digest_t *output; /* the completion text as sent, or NULL: then output_text */
    const char *output_text;      /* the completion text (when output is NULL), or NULL */
    size_t output_len;
    bool is_error;                   /* false: a done event; true: an error event */
    int finish;                      /* done: msg_finish_t */
    int error_code;                  /* error: msg_code_t */
    const char *error_message;       /* error: its message, or NULL */
    msg_usage_t usage;               /* done: as sent; error: what is known */
    const msg_timings_ms_t *timings; /* done: as sent, or NULL */
    const void *trace;               /* the request's trace event bytes, or NULL (not traced) */
    size_t trace_len;
    int resumes;             /* attempts after the first (resubmissions, client resumes) */
    const char *cache_kind;  /* answered from the answer cache: "exact", "semantic", "kb";
                                NULL: generated (the record has no "cache" key) */
    const char *cache_entry; /* then the entry: the request id or knowledge-base record */
    uint64_t time_us;        /* the final event's wall-clock time (µs since the epoch,
                                CLOCK_REALTIME); 0: now */
} audit_record_t;

typedef struct audit_log_t audit_log_t;

/* Open the log in dir (created 0700 if missing) for appending, with config (NULL: the
 * defaults).  Reads the newest file to continue its chain, starts a new file after a torn
 * tail (writing the "torn" record), and refuses a log that does not match its head (records
 * cut off the end) or whose last record is not intact: NULL, with the reason logged; run
 * `strata audit verify` on it.  NULL also on I/O errors. */
audit_log_t *audit_log_new(const char *dir, const audit_config_t *config);

/* Sync what is pending (as audit_log_sync) and close; nulls *self_p; safe twice. */
void audit_log_destroy(audit_log_t **self_p);

/* Append one record for rec (seq and time assigned here); syncs as the policy says.
 * 0, -EINVAL (rec breaks a limit: a hex field that is not 64 hex digits), -ENOMEM, or
 * -EIO / another negative errno of write(2) or fsync(2): then the log is broken for good
 * (every later call fails) rather than leaving a gap in the chain. */
int audit_log_append(audit_log_t *self, const audit_record_t *rec);

/* Make every record appended so far durable and anchor the last in the head file.  0 or a
 * negative errno. */
int audit_log_sync(audit_log_t *self);

/* interval policy: sync when the oldest unsynced record is interval_ms old.  Call it from a
 * timer (a few times a second) so that a quiet service still syncs.  0 or a negative errno. */
int audit_log_tick(audit_log_t *self);

uint64_t audit_log_seq(const audit_log_t *self);        /* last record's seq (0: none) */
uint64_t audit_log_synced_seq(const audit_log_t *self); /* last seq anchored in the head */

/* ---- the verifier */

typedef enum {
    AUDIT_OK = 0,
    AUDIT_E_IO,        /* a file could not be read */
    AUDIT_E_FILES,     /* no log files, or a file number missing */
    AUDIT_E_CORRUPT,   /* a line that is not a record (not JSON, no seq/prev/hash) */
    AUDIT_E_EDITED,    /* a record's bytes do not match its hash */
    AUDIT_E_SEQUENCE,  /* seq not the next one: a record deleted, moved or duplicated */
    AUDIT_E_CHAIN,     /* prev is not the hash of the record before */
    AUDIT_E_TORN,      /* a partial last line no "torn" record accounts for */
    AUDIT_E_TRUNCATED, /* the log ends before the record its head anchors */
    AUDIT_E_HEAD       /* the head is missing, unreadable, or its hash differs */
} audit_problem_t;

/* "edited", ... ("ok" for AUDIT_OK). */
const char *audit_problem_name(int problem);

/* What audit_verify found. */
typedef struct {
    int problem;                    /* audit_problem_t: AUDIT_OK when intact */
    uint64_t n_records;             /* intact records before the first problem (all when intact) */
    int n_files;                    /* files read */
    uint64_t last_seq;              /* seq of the last intact record (0: none) */
    char last_hash[AUDIT_HASH_HEX]; /* its hash (genesis zeros: none) */
    bool head_checked;              /* a head file was compared (directory mode) */
    uint64_t head_seq;              /* the head's seq */
    uint64_t unanchored; /* intact records after the head's (written since its last sync) */
    int n_torn_noted;    /* torn byte runs accounted for by "torn" records */
    /* the first bad record, when problem != AUDIT_OK */
    char file[256];  /* its file's name (without the directory) */
    uint64_t line;   /* its line in that file, from 1 (0: not in a file, e.g. the head) */
    uint64_t offset; /* its byte offset in that file */
    uint64_t seq;    /* the seq due at that place of the chain: an intact record's own; for a
                        deleted, moved, torn or cut record, the one missing */
    char why[320];   /* one line */
} audit_report_t;

/* Check the log at path: a directory (every file in order, then the head) or one file (its
 * own chain; its first record is taken as the start unless its seq is 1, then it must
 * chain to genesis; no head).  Fills report.  0 when intact, -EBADMSG when a problem was
 * found (report says the first), -ENOENT / -EIO / -ENOMEM when it could not be checked. */
int audit_verify(const char *path, audit_report_t *report);

/* Where a record is: filled by audit_find. */
typedef struct {
    char file[256];  /* its file's name */
    uint64_t line;   /* from 1 */
    uint64_t offset; /* byte offset */
    uint64_t seq;    /* its seq */
    int n_matches;   /* records that matched (the last one is returned, or the one of seq) */
    char *text;      /* the record's line without its newline (malloc'd; the caller frees) */
    size_t text_len;
} audit_found_t;

/* Find the record whose "id" (the client's id) or "rid" is id in the log at path (a
 * directory or one file); with seq > 0 only the record of that seq (id may then be NULL).
 * Several match: the last.  0 with found filled, -ENOENT when none matches, or a negative
 * errno.  Lines that are not JSON are skipped here (audit_verify reports them). */
int audit_find(const char *path, const char *id, uint64_t seq, audit_found_t *found);

/* Whether the line (without its newline) is intact on its own: its hash matches its bytes.
 * True, or false with why filled (at most whylen bytes). */
bool audit_record_intact(const char *line, size_t len, char *why, size_t whylen);

#endif
