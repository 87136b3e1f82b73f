/* test_audit.c - the audit log (audit/audit_log.h): a log of N records verifies; each kind of
 * tampering (an edited byte, an edited record re-hashed, a deleted record, two records
 * swapped, a torn last record, whole records cut off the end, a deleted head or file) fails
 * verify at the right record; rotation keeps the chain across files; a torn tail is noted
 * by the writer when it reopens; the fsync policy decides when the head moves. */
#include "audit_log.h"
#include "test_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers */

/* A fresh empty directory (the caller removes it with s_rmdir). */
static char *s_tmpdir(void) {
    char *d = strdup("/tmp/strata-audit-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void s_rmdir(char *d) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
    free(d);
}

static char *s_path(const char *dir, const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* Append record i: request "req-i" from a fixed connection, done "eos" (every third an
 * error), with a trace on every fifth. */
static int s_append(audit_log_t *log, int i) {
    msg_generate_t g;
    msg_generate_init(&g);
    char prompt[64];
    snprintf(g.id, sizeof g.id, "req-%d", i);
    snprintf(prompt, sizeof prompt, "Question number %d: why is the sky blue?", i);
    g.prompt = prompt;
    g.prompt_len = strlen(prompt);
    g.max_tokens = 32;
    g.sampling = msg_sampling_defaults();
    g.sampling.seed = 1000u + (unsigned)i;
    g.has_seed = true;
    snprintf(g.stop[0], sizeof g.stop[0], "\n\n");
    g.n_stop = 1;
    const uint8_t ident[5] = {0, 0x6b, 0x8b, 0x45, (uint8_t)i};
    const char *out = "Because of Rayleigh scattering.";
    const char *trace = "{\"decisions\":[{\"actor\":\"router\",\"what\":\"worker0\"}]}";
    audit_record_t r = {
        .gen = &g,
        .rid = 0xabc000u + (unsigned)i,
        .client_ident = ident,
        .client_ident_len = sizeof ident,
        .model_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        .output_text = out,
        .output_len = strlen(out),
        .is_error = i % 3 == 0,
        .finish = MSG_FINISH_EOS,
        .error_code = MSG_CODE_INTERNAL,
        .error_message = "worker lost",
        .usage = {.prompt_tokens = 12, .completion_tokens = 7},
        .trace = i % 5 == 0 ? trace : NULL,
        .trace_len = strlen(trace),
        .resumes = i % 4 == 0,
        .time_us = 1700000000000000ull + (uint64_t)i * 1000u,
    };
    return audit_log_append(log, &r);
}

/* A new log in dir with n records, closed (so the head anchors the last). */
static void s_write(const char *dir, int n, const audit_config_t *cfg) {
    audit_log_t *log = audit_log_new(dir, cfg);
    ck_assert_ptr_nonnull(log);
    for (int i = 1; i <= n; i++)
        ck_assert_int_eq(s_append(log, i), 0);
    ck_assert_int_eq(audit_log_seq(log), n);
    audit_log_destroy(&log);
    ck_assert_ptr_null(log);
    audit_log_destroy(&log);
}

/* The whole file (malloc'd, NUL-terminated). */
static char *s_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void s_spit(const char *path, const char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Byte offset of line k (from 1) in b. */
static size_t s_line_at(const char *b, int k) {
    size_t off = 0;
    for (int i = 1; i < k; i++)
        off = (size_t)(strchr(b + off, '\n') - b) + 1;
    return off;
}

/* Rewrite file with lines [a, b] (from 1) removed. */
static void s_drop_lines(const char *path, int a, int b) {
    size_t n;
    char *s = s_slurp(path, &n);
    size_t x = s_line_at(s, a), y = s_line_at(s, b + 1);
    memmove(s + x, s + y, n - y);
    s_spit(path, s, n - (y - x));
    free(s);
}

static void s_expect(const char *path, int problem, uint64_t seq, uint64_t line) {
    audit_report_t r;
    int rc = audit_verify(path, &r);
    if (r.problem != problem || r.seq != seq || r.line != line)
        fprintf(stderr, "verify %s: %s %s:%llu seq %llu: %s\n", path, audit_problem_name(r.problem),
                r.file, (unsigned long long)r.line, (unsigned long long)r.seq, r.why);
    ck_assert_int_eq(rc, problem == AUDIT_OK ? 0 : -EBADMSG);
    ck_assert_str_eq(audit_problem_name(r.problem), audit_problem_name(problem));
    ck_assert_uint_eq(r.seq, seq);
    ck_assert_uint_eq(r.line, line);
}

/* ---- digests */

START_TEST(digests) {
    char hex[AUDIT_HASH_HEX];
    audit_blake2b_hex("abc", 3, hex); /* BLAKE2b-256 test vector */
    ck_assert_str_eq(hex, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
    audit_digest_t d;
    audit_digest_init(&d);
    audit_digest_update(&d, "a", 1);
    audit_digest_update(&d, "bc", 2);
    char inc[AUDIT_HASH_HEX];
    audit_digest_hex(&d, inc);
    ck_assert_str_eq(inc, hex);
    ck_assert_uint_eq(d.n_bytes, 3);
    audit_digest_hex(&d, inc); /* unchanged by reading */
    ck_assert_str_eq(inc, hex);

    char *dir = s_tmpdir();
    s_spit(s_path(dir, "m.gguf"), "abc", 3);
    ck_assert_int_eq(audit_sha256_file(s_path(dir, "m.gguf"), hex), 0);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    ck_assert_int_eq(audit_sha256_file(s_path(dir, "none"), hex), -ENOENT);

    /* prompt digests: a raw prompt hashes its bytes; messages are length-prefixed */
    msg_generate_t g;
    msg_generate_init(&g);
    g.prompt = "abc";
    g.prompt_len = 3;
    audit_prompt_hex(&g, inc);
    ck_assert_str_eq(inc, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
    msg_chat_t m[2] = {{"user", "ab", 2}, {"user", "c", 1}},
               m2[2] = {{"user", "a", 1}, {"user", "bc", 2}};
    g.prompt = NULL;
    g.messages = m;
    g.n_messages = 2;
    char h1[AUDIT_HASH_HEX], h2[AUDIT_HASH_HEX];
    audit_prompt_hex(&g, h1);
    g.messages = m2;
    audit_prompt_hex(&g, h2);
    ck_assert_str_ne(h1, h2);
    ck_assert_int_eq(audit_fsync_parse("always"), AUDIT_FSYNC_ALWAYS);
    ck_assert_int_eq(audit_fsync_parse("interval"), AUDIT_FSYNC_INTERVAL);
    ck_assert_int_eq(audit_fsync_parse("sometimes"), -1);
    s_rmdir(dir);
}
END_TEST

/* ---- an intact log */

START_TEST(append_and_verify) {
    char *dir = s_tmpdir();
    s_write(dir, 20, NULL);
    audit_report_t r;
    ck_assert_int_eq(audit_verify(dir, &r), 0);
    ck_assert_int_eq(r.problem, AUDIT_OK);
    ck_assert_uint_eq(r.n_records, 20);
    ck_assert_uint_eq(r.last_seq, 20);
    ck_assert_int_eq(r.n_files, 1);
    ck_assert(r.head_checked);
    ck_assert_uint_eq(r.head_seq, 20);
    ck_assert_uint_eq(r.unanchored, 0);

    /* the first record chains to genesis, every line is a record with its own hash */
    size_t n;
    char *s = s_slurp(s_path(dir, "audit-000001.log"), &n);
    ck_assert_ptr_nonnull(strstr(s, "\"prev\":\"0000000000000000000000000000000000000000000"
                                    "000000000000000000000\""));
    const char *start =
        "{\"v\":1,\"type\":\"request\",\"seq\":1,\"time\":\"2023-11-14T22:13:20.001000Z\",";
    ck_assert(!strncmp(s, start, strlen(start)));
    ck_assert_ptr_nonnull(strstr(s, "\"temperature\":0.8,"));
    ck_assert_ptr_nonnull(strstr(s, "\"seed\":\"1001\""));
    ck_assert_ptr_nonnull(strstr(s, "\"routing_id\":\"006b8b4501\""));
    ck_assert_ptr_nonnull(
        strstr(s, "\"end\":{\"error\":\"internal\",\"message\":\"worker lost\"}"));
    ck_assert_ptr_nonnull(strstr(s, "\"trace\":{\"bytes\":"));
    ck_assert_ptr_null(strstr(s, "Rayleigh")); /* no text without store_text */
    char *line2 = s + s_line_at(s, 2);
    ck_assert(audit_record_intact(s, (size_t)(line2 - s - 1), NULL, 0));
    free(s);

    /* a single file verifies on its own too (no head then) */
    ck_assert_int_eq(audit_verify(s_path(dir, "audit-000001.log"), &r), 0);
    ck_assert(!r.head_checked);
    ck_assert_uint_eq(r.n_records, 20);

    /* reopening continues the chain */
    audit_log_t *log = audit_log_new(dir, NULL);
    ck_assert_ptr_nonnull(log);
    ck_assert_uint_eq(audit_log_seq(log), 20);
    ck_assert_int_eq(s_append(log, 21), 0);
    audit_log_destroy(&log);
    ck_assert_int_eq(audit_verify(dir, &r), 0);
    ck_assert_uint_eq(r.n_records, 21);
    s_rmdir(dir);
}
END_TEST

START_TEST(store_text_and_find) {
    char *dir = s_tmpdir();
    audit_config_t cfg = {.store_text = true};
    s_write(dir, 6, &cfg);
    audit_found_t f;
    ck_assert_int_eq(audit_find(dir, "req-4", 0, &f), 0);
    ck_assert_uint_eq(f.seq, 4);
    ck_assert_uint_eq(f.line, 4);
    ck_assert_int_eq(f.n_matches, 1);
    ck_assert_ptr_nonnull(strstr(f.text, "Rayleigh"));
    ck_assert_ptr_nonnull(strstr(f.text, "\"text\":\"Question number 4"));
    free(f.text);
    ck_assert_int_eq(audit_find(dir, "0000000000abc005", 0, &f), 0); /* by server rid */
    ck_assert_uint_eq(f.seq, 5);
    free(f.text);
    ck_assert_int_eq(audit_find(dir, NULL, 2, &f), 0); /* by seq */
    ck_assert_ptr_nonnull(strstr(f.text, "\"id\":\"req-2\""));
    free(f.text);
    ck_assert_int_eq(audit_find(dir, "req-99", 0, &f), -ENOENT);
    ck_assert_ptr_null(f.text);
    s_rmdir(dir);
}
END_TEST

/* ---- tampering: verify names the first bad record */

START_TEST(tamper_edit) {
    char *dir = s_tmpdir();
    s_write(dir, 10, NULL);
    char *p = s_path(dir, "audit-000001.log");
    size_t n;
    char *s = s_slurp(p, &n);
    char *id = strstr(s + s_line_at(s, 5), "\"id\":\"req-5\"");
    id[10] = '6'; /* one byte of a field: "req-6" */
    s_spit(p, s, n);
    s_expect(dir, AUDIT_E_EDITED, 5, 5);
    s_expect(p, AUDIT_E_EDITED, 5, 5);
    /* another byte: a digit of the usage */
    id[10] = '5';
    char *u = strstr(s + s_line_at(s, 7), "\"completion_tokens\":7");
    u[20] = '9';
    s_spit(p, s, n);
    s_expect(dir, AUDIT_E_EDITED, 7, 7);
    free(s);
    s_rmdir(dir);
}
END_TEST

/* An editor who also recomputes the edited record's hash breaks the next record's prev. */
START_TEST(tamper_edit_rehashed) {
    char *dir = s_tmpdir();
    s_write(dir, 10, NULL);
    char *p = s_path(dir, "audit-000001.log");
    size_t n;
    char *s = s_slurp(p, &n);
    size_t a = s_line_at(s, 5), b = s_line_at(s, 6);
    char *rec = s + a;
    char *u = strstr(rec, "\"completion_tokens\":7");
    u[20] = '9';
    /* re-hash line 5 as the writer would: BLAKE2b of the line with its hash tail as "}" */
    size_t len = b - a - 1, body = len - 75;
    char *tmp = malloc(body + 1);
    memcpy(tmp, rec, body);
    tmp[body] = '}';
    char hex[AUDIT_HASH_HEX];
    audit_blake2b_hex(tmp, body + 1, hex);
    memcpy(rec + len - 66, hex, 64);
    free(tmp);
    ck_assert(audit_record_intact(rec, len, NULL, 0));
    s_spit(p, s, n);
    s_expect(dir, AUDIT_E_CHAIN, 6, 6);
    free(s);
    s_rmdir(dir);
}
END_TEST

START_TEST(tamper_delete) {
    char *dir = s_tmpdir();
    s_write(dir, 10, NULL);
    s_drop_lines(s_path(dir, "audit-000001.log"), 5, 5);
    s_expect(dir, AUDIT_E_SEQUENCE, 5, 5);
    audit_report_t r;
    audit_verify(dir, &r);
    ck_assert_ptr_nonnull(strstr(r.why, "seq 6 where 5 is due"));
    ck_assert_uint_eq(r.n_records, 4);
    s_rmdir(dir);
}
END_TEST

START_TEST(tamper_swap) {
    char *dir = s_tmpdir();
    s_write(dir, 10, NULL);
    char *p = s_path(dir, "audit-000001.log");
    size_t n;
    char *s = s_slurp(p, &n);
    size_t a = s_line_at(s, 4), b = s_line_at(s, 5), c = s_line_at(s, 6);
    char *t = malloc(n);
    memcpy(t, s, a);
    memcpy(t + a, s + b, c - b);
    memcpy(t + a + (c - b), s + a, b - a);
    memcpy(t + c, s + c, n - c);
    s_spit(p, t, n);
    s_expect(dir, AUDIT_E_SEQUENCE, 4, 4);
    free(t);
    free(s);
    s_rmdir(dir);
}
END_TEST

START_TEST(tamper_torn) {
    char *dir = s_tmpdir();
    s_write(dir, 10, NULL);
    char *p = s_path(dir, "audit-000001.log");
    size_t n;
    char *s = s_slurp(p, &n);
    size_t last = s_line_at(s, 10);
    s_spit(p, s, last + 40); /* record 10 cut after 40 bytes, as a crash mid-write */
    audit_report_t r;
    ck_assert_int_eq(audit_verify(dir, &r), -EBADMSG);
    ck_assert_int_eq(r.problem, AUDIT_E_TORN);
    ck_assert_uint_eq(r.offset, last);
    ck_assert_uint_eq(r.seq, 10);
    ck_assert_uint_eq(r.line, 10);
    ck_assert_str_eq(r.file, "audit-000001.log");
    ck_assert_ptr_nonnull(strstr(r.why, "torn record: 40 bytes"));
    ck_assert_int_eq(audit_verify(p, &r), -EBADMSG); /* the file alone: torn too */
    ck_assert_int_eq(r.problem, AUDIT_E_TORN);
    free(s);
    s_rmdir(dir);
}
END_TEST

START_TEST(tamper_cut_tail) {
    char *dir = s_tmpdir();
    s_write(dir, 10, NULL);
    s_drop_lines(s_path(dir, "audit-000001.log"), 9, 10); /* two whole records */
    s_expect(dir, AUDIT_E_TRUNCATED, 9, 9);
    audit_report_t r;
    audit_verify(dir, &r);
    ck_assert_ptr_nonnull(strstr(r.why, "records 9..10 were cut off"));
    /* the writer refuses to go on from a cut log (it would move the head past the cut) */
    ck_assert_ptr_null(audit_log_new(dir, NULL));
    s_drop_lines(s_path(dir, "audit-000001.log"), 8, 8); /* one more: still named */
    s_expect(dir, AUDIT_E_TRUNCATED, 8, 8);
    s_rmdir(dir);
}
END_TEST

START_TEST(tamper_head) {
    char *dir = s_tmpdir();
    s_write(dir, 4, NULL);
    ck_assert_int_eq(unlink(s_path(dir, AUDIT_HEAD_FILE)), 0);
    s_expect(dir, AUDIT_E_HEAD, 5, 0);
    audit_report_t r;
    audit_verify(dir, &r);
    ck_assert_str_eq(r.file, AUDIT_HEAD_FILE);
    ck_assert_ptr_null(audit_log_new(dir, NULL)); /* refused: the end cannot be checked */
    s_rmdir(dir);
}
END_TEST

/* ---- rotation */

START_TEST(rotation_keeps_chain) {
    char *dir = s_tmpdir();
    audit_config_t cfg = {.max_file_bytes = 4096};
    s_write(dir, 30, &cfg);
    audit_report_t r;
    ck_assert_int_eq(audit_verify(dir, &r), 0);
    ck_assert_int_gt(r.n_files, 3);
    ck_assert_uint_eq(r.n_records, 30);
    int files = r.n_files;
    struct stat st;
    for (int i = 1; i <= files; i++) {
        char name[32];
        snprintf(name, sizeof name, "audit-%06d.log", i);
        ck_assert_int_eq(stat(s_path(dir, name), &st), 0);
        ck_assert_int_le(st.st_size, 4096);
    }
    /* the first record of file 2 chains to the last of file 1 */
    size_t n1, n2;
    char *a = s_slurp(s_path(dir, "audit-000001.log"), &n1);
    char *b = s_slurp(s_path(dir, "audit-000002.log"), &n2);
    char prev[80];
    snprintf(prev, sizeof prev, "\"prev\":\"%.64s\"", a + n1 - 1 - 66);
    char *nl = strchr(b, '\n');
    *nl = 0;
    ck_assert_ptr_nonnull(strstr(b, prev));
    free(a);
    free(b);

    /* the last record of file 1 torn (no "torn" record follows): named there, not at the
     * sequence gap it leaves */
    char *one = strdup(s_path(dir, "audit-000001.log"));
    a = s_slurp(one, &n1);
    s_spit(one, a, n1 - 30);
    audit_verify(dir, &r);
    ck_assert_int_eq(r.problem, AUDIT_E_TORN);
    ck_assert_str_eq(r.file, "audit-000001.log");
    s_spit(one, a, n1);
    ck_assert_int_eq(audit_verify(dir, &r), 0);
    free(a);
    free(one);

    /* a deleted middle file is named; a deleted last file is a cut tail */
    char last[32];
    snprintf(last, sizeof last, "audit-%06d.log", files);
    char *copy = strdup(s_path(dir, last));
    char hidden[512], two[512];
    snprintf(hidden, sizeof hidden, "%s/hidden", dir);
    snprintf(two, sizeof two, "%s/audit-000002.log", dir);
    ck_assert_int_eq(rename(two, hidden), 0);
    audit_verify(dir, &r);
    ck_assert_int_eq(r.problem, AUDIT_E_FILES);
    ck_assert_str_eq(r.file, "audit-000002.log");
    ck_assert_int_eq(rename(hidden, two), 0);
    ck_assert_int_eq(unlink(copy), 0);
    audit_verify(dir, &r);
    ck_assert_int_eq(r.problem, AUDIT_E_TRUNCATED);
    free(copy);
    s_rmdir(dir);
}
END_TEST

/* ---- torn tail after a crash: the writer notes it and goes on in a new file */

START_TEST(torn_noted_on_reopen) {
    char *dir = s_tmpdir();
    s_write(dir, 5, NULL);
    char *p = strdup(s_path(dir, "audit-000001.log"));
    FILE *f = fopen(p, "ab");
    fputs("{\"v\":1,\"type\":\"request\",\"seq\":6,\"ti", f); /* a crash mid-write */
    fclose(f);
    audit_report_t r;
    ck_assert_int_eq(audit_verify(dir, &r), -EBADMSG);
    ck_assert_int_eq(r.problem, AUDIT_E_TORN);

    audit_log_t *log = audit_log_new(dir, NULL);
    ck_assert_ptr_nonnull(log);
    ck_assert_uint_eq(audit_log_seq(log), 6); /* the "torn" record */
    ck_assert_uint_eq(audit_log_synced_seq(log), 6);
    ck_assert_int_eq(s_append(log, 7), 0);
    ck_assert_int_eq(s_append(log, 8), 0);
    audit_log_destroy(&log);
    ck_assert_int_eq(audit_verify(dir, &r), 0);
    ck_assert_uint_eq(r.n_records, 8);
    ck_assert_int_eq(r.n_files, 2);
    ck_assert_int_eq(r.n_torn_noted, 1);
    size_t n;
    char *s = s_slurp(s_path(dir, "audit-000002.log"), &n);
    const char *start = "{\"v\":1,\"type\":\"torn\",\"seq\":6,";
    ck_assert(!strncmp(s, start, strlen(start)));
    ck_assert_ptr_nonnull(strstr(s, "\"file\":\"audit-000001.log\""));
    free(s);

    /* the torn bytes cannot be changed afterwards: the torn record names their digest */
    f = fopen(p, "r+b");
    fseek(f, -3, SEEK_END);
    fputc('X', f);
    fclose(f);
    ck_assert_int_eq(audit_verify(dir, &r), -EBADMSG);
    ck_assert_int_eq(r.problem, AUDIT_E_TORN);
    ck_assert_str_eq(r.file, "audit-000001.log");
    free(p);
    s_rmdir(dir);
}
END_TEST

/* ---- the fsync policy: when the head (the durable anchor) moves */

START_TEST(fsync_policy) {
    char *dir = s_tmpdir();
    audit_config_t always = {.fsync = AUDIT_FSYNC_ALWAYS};
    audit_log_t *log = audit_log_new(dir, &always);
    ck_assert_ptr_nonnull(log);
    for (int i = 1; i <= 3; i++) {
        ck_assert_int_eq(s_append(log, i), 0);
        ck_assert_uint_eq(audit_log_synced_seq(log), (uint64_t)i); /* every record */
        audit_report_t r;
        ck_assert_int_eq(audit_verify(dir, &r), 0); /* the head on disk says so too */
        ck_assert_uint_eq(r.head_seq, (uint64_t)i);
    }
    audit_log_destroy(&log);
    s_rmdir(dir);

    dir = s_tmpdir();
    audit_config_t every5 = {.interval_records = 5, .interval_ms = 60000};
    log = audit_log_new(dir, &every5);
    for (int i = 1; i <= 4; i++)
        ck_assert_int_eq(s_append(log, i), 0);
    ck_assert_uint_eq(audit_log_synced_seq(log), 0);
    audit_report_t r;
    ck_assert_int_eq(audit_verify(dir, &r), 0); /* intact, 4 records not yet anchored */
    ck_assert_uint_eq(r.unanchored, 4);
    ck_assert_int_eq(audit_log_tick(log), 0);
    ck_assert_uint_eq(audit_log_synced_seq(log), 0); /* not yet a minute old */
    ck_assert_int_eq(s_append(log, 5), 0);
    ck_assert_uint_eq(audit_log_synced_seq(log), 5); /* the fifth syncs */
    audit_log_destroy(&log);
    s_rmdir(dir);

    dir = s_tmpdir();
    audit_config_t ms50 = {.interval_ms = 50};
    log = audit_log_new(dir, &ms50);
    ck_assert_int_eq(s_append(log, 1), 0);
    ck_assert_uint_eq(audit_log_synced_seq(log), 0);
    usleep(80 * 1000);
    ck_assert_int_eq(audit_log_tick(log), 0); /* the owner's timer */
    ck_assert_uint_eq(audit_log_synced_seq(log), 1);
    ck_assert_int_eq(audit_log_sync(log), 0);
    audit_log_destroy(&log);
    s_rmdir(dir);
}
END_TEST

START_TEST(bad_input) {
    char *dir = s_tmpdir();
    audit_log_t *log = audit_log_new(dir, NULL);
    audit_record_t r = {.id = "x", .model_sha256 = "not hex"};
    ck_assert_int_eq(audit_log_append(log, &r), -EINVAL);
    audit_record_t none = {.id = NULL, .is_error = true, .error_code = MSG_CODE_BAD_REQUEST};
    ck_assert_int_eq(audit_log_append(log, &none), 0); /* a request that never decoded */
    audit_log_destroy(&log);
    audit_report_t rep;
    ck_assert_int_eq(audit_verify(dir, &rep), 0);
    ck_assert_int_eq(audit_verify(s_path(dir, "nothing"), &rep), -ENOENT);
    /* a line of garbage is corrupt, named at its place */
    FILE *f = fopen(s_path(dir, "audit-000001.log"), "ab");
    fputs("hello\n", f);
    fclose(f);
    s_expect(dir, AUDIT_E_CORRUPT, 2, 2);
    s_rmdir(dir);
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("audit");
    TCase *tc = tcase_create("audit");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, digests);
    tcase_add_test(tc, append_and_verify);
    tcase_add_test(tc, store_text_and_find);
    tcase_add_test(tc, tamper_edit);
    tcase_add_test(tc, tamper_edit_rehashed);
    tcase_add_test(tc, tamper_delete);
    tcase_add_test(tc, tamper_swap);
    tcase_add_test(tc, tamper_torn);
    tcase_add_test(tc, tamper_cut_tail);
    tcase_add_test(tc, tamper_head);
    tcase_add_test(tc, rotation_keeps_chain);
    tcase_add_test(tc, torn_noted_on_reopen);
    tcase_add_test(tc, fsync_policy);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
