/* cmd_kb.c - `strata kb`: the answer cache's knowledge base on a running server
 * (docs/SEMCACHE.md).  `load FILE.jsonl` sends every record as a cache_put (a question and
 * its answer, optional name, tags and ttl_s): a matching question is then answered
 * without inference; `invalidate` drops entries by name prefix, tag, or all.  One DEALER
 * to the frontend's client endpoint; records go out a window at a time, each answered by
 * its cache_reply (or an error, printed with its line). */
#include "cli.h"
#include "cli_flags.h"

#include "msg_any.h"

#include <cjson/cJSON.h>
#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_WINDOW 32 /* records in flight */

typedef struct {
    const char *endpoint;
    const char *server_key, *client_key; /* CURVE (docs/SECURITY.md) */
    const char *prefix, *tag;            /* invalidate */
    bool all;
    double timeout_s;
} s_kb_opts_t;

#define S_OPT(member) ACTOR_OPT_FIELD(s_kb_opts_t, member)
static const cli_flag_t s_kb_flags[] = {
    {.name = "endpoint",
     .short_name = 'e',
     .arg = "EP",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "the server's client endpoint",
             .field = S_OPT(endpoint)},
     .def_text = "tcp://127.0.0.1:5555"},
    {.name = "server-key",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "CURVE: the server's public key (zcert file)",
             .field = S_OPT(server_key)}},
    {.name = "client-key",
     .arg = "FILE",
     .opt = {.type = ACTOR_OPT_PATH,
             .help = "CURVE: this client's key pair (NAME.key_secret)",
             .field = S_OPT(client_key)}},
    {.name = "prefix",
     .arg = "P",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "invalidate: the entries whose name starts with P",
             .field = S_OPT(prefix)}},
    {.name = "tag",
     .arg = "T",
     .opt = {.type = ACTOR_OPT_STRING,
             .help = "invalidate: the entries tagged T",
             .field = S_OPT(tag)}},
    {.name = "all",
     .opt = {.type = ACTOR_OPT_BOOL, .help = "invalidate: every entry", .field = S_OPT(all)}},
    {.name = "timeout",
     .arg = "S",
     .opt = {.type = ACTOR_OPT_DOUBLE,
             .min = 0.1,
             .max = 3600,
             .help = "give up when the server says nothing for this long",
             .field = S_OPT(timeout_s)}},
    {NULL},
};
#undef S_OPT

static const cli_cmd_t s_cmd = {
    "kb",
    "usage: strata kb [-e EP] load FILE.jsonl\n"
    "       strata kb [-e EP] invalidate --prefix P | --tag T | --all\n"
    "\n"
    "The answer cache's knowledge base on a running `strata serve --semcache MODE`\n"
    "(docs/SEMCACHE.md).  load: one JSON object per line,\n"
    "  {\"question\": \"...\", \"answer\": \"...\", \"name\": \"...\", \"tags\": \"a,b\" | [\"a\", "
    "\"b\"],\n"
    "   \"ttl_s\": N}\n"
    "(name, tags and ttl_s optional; name defaults to kb:FILE:LINE, ttl_s to never\n"
    "expiring).  Every line is checked before anything is sent.  A single-turn chat question\n"
    "equal to a record's (case, spacing and final punctuation aside) is answered from it;\n"
    "with the semantic layer, a similar one within the error bound too.\n",
    "Exit status: 0 every record stored (or the invalidation done), 1 the server refused\n"
    "one or did not answer, 2 bad usage or a bad file.\n",
    {{s_kb_flags, 0}, {NULL}},
};

/* One line of the file as a cache_put (its strings point into the cJSON tree), or -1
 * after a message naming the line. */
static int s_record(cJSON *o, const char *file, int line, msg_cache_put_t *p) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "question");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "answer");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tags");
    const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(o, "ttl_s");
    const char *why = NULL;
    msg_cache_put_init(p);
    if (!cJSON_IsObject(o))
        why = "not a JSON object";
    else if (!cJSON_IsString(q) || !*q->valuestring)
        why = "'question' must be a non-empty string";
    else if (!cJSON_IsString(a) || !*a->valuestring)
        why = "'answer' must be a non-empty string";
    else if (n && (!cJSON_IsString(n) || !*n->valuestring || strlen(n->valuestring) > 64))
        why = "'name' must be a string of 1..64 bytes";
    else if (ttl && (!cJSON_IsNumber(ttl) || ttl->valuedouble < 0 ||
                     ttl->valuedouble > MSG_MAX_CACHE_TTL_S ||
                     ttl->valuedouble != (double)(int64_t)ttl->valuedouble))
        why = "'ttl_s' must be a whole number of seconds, 0..31536000";
    if (!why && t) { /* a string, or an array of strings: joined with commas */
        size_t k = 0;
        const cJSON *e;
        if (cJSON_IsString(t))
            k = (size_t)snprintf(p->tags, sizeof p->tags, "%s", t->valuestring);
        else if (cJSON_IsArray(t))
            cJSON_ArrayForEach(e, t) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, ',')) {
                    why = "'tags' must be a string or an array of strings without commas";
                    break;
                }
                k += (size_t)snprintf(p->tags + (k < sizeof p->tags ? k : sizeof p->tags - 1),
                                      k < sizeof p->tags ? sizeof p->tags - k : 1, "%s%s",
                                      k ? "," : "", e->valuestring);
            }
        else
            why = "'tags' must be a string or an array of strings";
        if (!why && k >= sizeof p->tags)
            why = "'tags' are longer than 128 bytes";
    }
    if (why) {
        fprintf(stderr, "strata kb: %s:%d: %s\n", file, line, why);
        return -1;
    }
    snprintf(p->id, sizeof p->id, "%d", line);
    p->question = q->valuestring;
    p->question_len = strlen(q->valuestring);
    p->answer = a->valuestring;
    p->answer_len = strlen(a->valuestring);
    if (n)
        snprintf(p->name, sizeof p->name, "%s", n->valuestring);
    else {
        const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
        snprintf(p->name, sizeof p->name, "kb:%.48s:%d", base, line);
    }
    p->ttl_s = ttl ? (int64_t)ttl->valuedouble : 0;
    return 0;
}

/* Every line of path parsed (roots[i] for record i, from line (*lines)[i]), or NULL after a
 * message. */
static cJSON **s_read(const char *path, int *n_out, int **lines) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "strata kb: cannot read %s\n", path);
        return NULL;
    }
    int n = 0, cap = 0, line = 0;
    cJSON **roots = NULL;
    int *at = NULL;
    bool ok = true;
    for (char *p = text, *end; ok && p < text + len; p = end + 1) {
        end = memchr(p, '\n', (size_t)(text + len - p));
        if (!end)
            end = text + len;
        *end = 0;
        line++;
        if (strspn(p, " \t\r") == strlen(p))
            continue; /* a blank line */
        cJSON *o = cJSON_Parse(p);
        msg_cache_put_t probe;
        if (!o || s_record(o, path, line, &probe)) {
            if (!o)
                fprintf(stderr, "strata kb: %s:%d: not valid JSON\n", path, line);
            cJSON_Delete(o);
            ok = false;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            cJSON **r = realloc(roots, (size_t)cap * sizeof *r);
            int *l = r ? realloc(at, (size_t)cap * sizeof *l) : NULL;
            roots = r ? r : roots;
            at = l ? l : at;
            if (!r || !l) {
                fprintf(stderr, "strata kb: out of memory\n");
                cJSON_Delete(o);
                ok = false;
                break;
            }
        }
        at[n] = line;
        roots[n++] = o;
    }
    free(text);
    if (ok && !n)
        fprintf(stderr, "strata kb: %s has no records\n", path);
    if (!ok || !n) {
        for (int i = 0; i < n; i++)
            cJSON_Delete(roots[i]);
        free(roots);
        free(at);
        return NULL;
    }
    *n_out = n;
    *lines = at;
    return roots;
}

/* Send m (type) on s.  0, or -1 after a message. */
static int s_send(zsock_t *s, int type, const void *m) {
    void *buf;
    size_t len;
    msg_err_t e;
    if (msg_encode(type, m, &buf, &len, &e)) {
        fprintf(stderr, "strata kb: %s\n", e.msg);
        return -1;
    }
    zframe_t *f = zframe_new(buf, len);
    free(buf);
    return f && zframe_send(&f, s, 0) == 0 ? 0 : (fprintf(stderr, "strata kb: cannot send\n"), -1);
}

/* The next answer: 1 a cache_reply (*count, *entries), 0 an error (printed unless quiet,
 * with the line its id names when lines), -1 silence or garbage (printed). */
static int s_recv(zsock_t *s, zpoller_t *p, const s_kb_opts_t *o, bool lines, bool quiet,
                  int *count, int *entries) {
    if (!zpoller_wait(p, (int)(o->timeout_s * 1000))) {
        fprintf(stderr, "strata kb: no answer from %s within %.1f s (is `strata serve` running?)\n",
                o->endpoint, o->timeout_s);
        return -1;
    }
    zframe_t *in = zframe_recv(s);
    msg_any_t m;
    msg_err_t e;
    int rc = in ? msg_any_decode(zframe_data(in), zframe_size(in), &m, &e) : -EIO;
    zframe_destroy(&in);
    if (rc) {
        fprintf(stderr, "strata kb: a bad answer from %s\n", o->endpoint);
        return -1;
    }
    int out = -1;
    if (m.type == MSG_CACHE_REPLY) {
        *count = m.u.cache_reply.count;
        *entries = m.u.cache_reply.entries;
        out = 1;
    } else if (m.type == MSG_ERROR) {
        if (quiet)
            ;
        else if (lines)
            fprintf(stderr, "strata kb: line %s: %s\n", m.u.error.id, m.u.error.message);
        else
            fprintf(stderr, "strata kb: %s\n", m.u.error.message);
        out = 0;
    } else {
        fprintf(stderr, "strata kb: an unexpected '%s' from %s\n", msg_type_name(m.type),
                o->endpoint);
    }
    msg_any_clear(&m);
    return out;
}

/* load: every record, S_WINDOW in flight.  The exit status. */
static int s_load(zsock_t *s, zpoller_t *p, const s_kb_opts_t *o, const char *path) {
    int n, sent = 0, answered = 0, stored = 0, refused = 0, entries = 0, *lines;
    cJSON **roots = s_read(path, &n, &lines);
    if (!roots)
        return 2;
    int rc = 0;
    while (answered < n && !rc) {
        while (sent < n && sent - answered < S_WINDOW && !rc) {
            msg_cache_put_t put;
            s_record(roots[sent], path, lines[sent], &put); /* checked by s_read */
            sent++;
            rc = s_send(s, MSG_CACHE_PUT, &put) ? 1 : 0;
        }
        int count = 0, r = rc ? -1 : s_recv(s, p, o, true, refused >= 10, &count, &entries);
        if (r < 0) {
            rc = 1;
            break;
        }
        answered++;
        stored += r > 0 ? count : 0;
        refused += r == 0;
        if (answered % 1000 == 0 || answered == n)
            fprintf(stderr, "strata kb: %d/%d records answered\n", answered, n);
    }
    for (int i = 0; i < n; i++)
        cJSON_Delete(roots[i]);
    free(roots);
    free(lines);
    if (refused > 10)
        fprintf(stderr, "strata kb: ... and %d more records refused\n", refused - 10);
    if (!rc)
        printf("stored %d of %d records from %s; the cache holds %d entries\n", stored, n, path,
               entries);
    return rc ? 1 : stored == n ? 0 : 1;
}

/* invalidate --prefix / --tag / --all.  The exit status. */
static int s_invalidate(zsock_t *s, zpoller_t *p, const s_kb_opts_t *o) {
    if (!o->prefix && !o->tag && !o->all) {
        fprintf(stderr, "strata kb: invalidate needs --prefix P, --tag T or --all\n");
        return 2;
    }
    msg_cache_invalidate_t v;
    msg_cache_invalidate_init(&v);
    snprintf(v.id, sizeof v.id, "invalidate");
    if ((o->prefix && strlen(o->prefix) > MSG_MAX_ID_BYTES) ||
        (o->tag && strlen(o->tag) > MSG_MAX_CACHE_TAGS_BYTES)) {
        fprintf(stderr, "strata kb: --prefix is at most 64 bytes, --tag 128\n");
        return 2;
    }
    snprintf(v.prefix, sizeof v.prefix, "%s", o->prefix ? o->prefix : "");
    snprintf(v.tag, sizeof v.tag, "%s", o->tag ? o->tag : "");
    v.all = o->all;
    int count = 0, entries = 0;
    if (s_send(s, MSG_CACHE_INVALIDATE, &v) || s_recv(s, p, o, false, false, &count, &entries) <= 0)
        return 1;
    printf("dropped %d entries; the cache holds %d\n", count, entries);
    return 0;
}

/* The DEALER to o->endpoint, a CURVE client with both keys given.  NULL after a line. */
static zsock_t *s_connect(const s_kb_opts_t *o) {
    if (!o->server_key != !o->client_key) {
        fprintf(stderr, "strata kb: CURVE needs both --server-key and --client-key\n");
        return NULL;
    }
    zsock_t *s = zsock_new(ZMQ_DEALER);
    zcert_t *server = o->server_key ? zcert_load(o->server_key) : NULL;
    zcert_t *mine = o->client_key ? zcert_load(o->client_key) : NULL;
    bool keys = !o->server_key || (server && mine);
    if (s && keys && mine) {
        zcert_apply(mine, s);
        zsock_set_curve_serverkey(s, zcert_public_txt(server));
    }
    bool ok = keys && s;
    if (!keys)
        fprintf(stderr, "strata kb: cannot read the CURVE key %s\n",
                !server ? o->server_key : o->client_key);
    else if (!s || (zsock_set_linger(s, 0), zsock_connect(s, "%s", o->endpoint) < 0))
        ok = false, fprintf(stderr, "strata kb: cannot connect to %s\n", o->endpoint);
    zcert_destroy(&server);
    zcert_destroy(&mine);
    if (!ok)
        zsock_destroy(&s);
    return s;
}

int cmd_kb(int argc, char **argv) {
    s_kb_opts_t o = {.endpoint = "tcp://127.0.0.1:5555", .timeout_s = 30};
    int next, rc = cli_flags_parse(&s_cmd, argc, argv, &o, &next);
    if (rc != CLI_PARSED)
        return rc;
    const char *verb = next < argc ? argv[next] : NULL;
    bool load = verb && !strcmp(verb, "load"), inval = verb && !strcmp(verb, "invalidate");
    if ((!load && !inval) || (load && next + 2 != argc) || (inval && next + 1 != argc)) {
        fprintf(stderr, "strata kb: %s (strata kb --help)\n",
                !verb                     ? "say load FILE.jsonl or invalidate"
                : !load && !inval         ? "unknown command: say load or invalidate"
                : load && next + 2 > argc ? "load needs FILE.jsonl"
                                          : "too many arguments");
        return 2;
    }
    if (load && (o.prefix || o.tag || o.all)) {
        fprintf(stderr, "strata kb: --prefix, --tag and --all are invalidate's\n");
        return 2;
    }
    zsock_t *s = s_connect(&o);
    if (!s)
        return 1;
    zpoller_t *p = zpoller_new(s, NULL);
    rc = load ? s_load(s, p, &o, argv[next + 1]) : s_invalidate(s, p, &o);
    zpoller_destroy(&p);
    zsock_destroy(&s);
    return rc;
}
