/* actor_metrics.c - the metrics actor: a DEALER that asks the frontend for `stats`, and a
 * libmicrohttpd daemon (its own thread) serving them as Prometheus text (rendered by
 * serve/serve_prom.c) with the status page.  (The histograms other actors keep are
 * serve/serve_metrics.c.) */
#include "actor_metrics.h"

#include "actor_curve.h"
#include "base_log.h"
#include "serve_prom.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define TAG "metrics"

/* The status page (actors/actor_metrics_page.html, embedded by scripts/embed.cmake). */
extern const char actor_metrics_page[];
extern const size_t actor_metrics_page_len;

const actor_opt_t actor_metrics_opts[] = {
    {"listen", ACTOR_OPT_STRING, "127.0.0.1:9090", 0, 0, NULL,
     "HTTP address of /metrics and the status page: HOST:PORT ([V6]:PORT)",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, listen)},
    {"frontend", ACTOR_OPT_STRING, NULL, 0, 0, NULL,
     "client endpoint asked for stats (default: the frontend's client option; 0.0.0.0 and * "
     "as 127.0.0.1)",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, frontend)},
    {"client_key", ACTOR_OPT_PATH, NULL, 0, 0, NULL,
     "CURVE key pair (zcert file) this actor connects with when the frontend has "
     "client_secret; its public key must be in client_allow",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, client_key)},
    {"cache_ms", ACTOR_OPT_INT, "1000", 0, 600000, NULL,
     "a scrape within this long of the last stats answer is served from it",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, cache_ms)},
    {"stats_timeout_ms", ACTOR_OPT_INT, "2000", 10, 60000, NULL,
     "a scrape the frontend does not answer within this long gets 503",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, stats_timeout_ms)},
    {"max_conns", ACTOR_OPT_INT, "32", 1, 4096, NULL, "HTTP connections at once",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, max_conns)},
    {"conn_timeout_s", ACTOR_OPT_INT, "10", 1, 3600, NULL,
     "an idle HTTP connection is closed after this long",
     .field = ACTOR_OPT_FIELD(actor_metrics_cfg_t, conn_timeout_s)},
    {NULL},
};

/* base_hist_export into the actor's counters. */
static void s_put(void *user, const char *name, int64_t value) {
    actor_counters_set(user, name, value);
}

/* ---- the HTTP thread (libmicrohttpd's): it owns http_end of the pair and this struct */

typedef struct {
    zsock_t *pair; /* PAIR to the actor's thread */
    uint64_t seq;  /* of the last scrape asked for */
    int wait_ms;   /* longest wait for the actor's answer */
} s_http_t;

static void s_http_count(s_http_t *h, const char *name) {
    zstr_sendx(h->pair, "count", name, NULL); /* sndtimeo: never blocks for long */
}

static enum MHD_Result s_respond(struct MHD_Connection *conn, unsigned status, const char *type,
                                 const char *body, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Ask the actor's thread for the text; *status 200 or 503.  The body is malloc'd. */
static char *s_scrape(s_http_t *h, unsigned *status, size_t *len) {
    char seq[32];
    snprintf(seq, sizeof seq, "%" PRIu64, ++h->seq);
    *status = MHD_HTTP_SERVICE_UNAVAILABLE;
    if (zstr_sendx(h->pair, "scrape", seq, NULL))
        return NULL;
    uint64_t deadline = base_now_us() + (uint64_t)h->wait_ms * 1000;
    for (;;) {
        uint64_t now = base_now_us();
        if (now >= deadline)
            return NULL;
        zsock_set_rcvtimeo(h->pair, (int)((deadline - now) / 1000) + 1);
        zmsg_t *m = zmsg_recv(h->pair);
        if (!m)
            return NULL; /* timed out or interrupted */
        char *s = zmsg_popstr(m), *code = zmsg_popstr(m);
        zframe_t *body = zmsg_pop(m);
        zmsg_destroy(&m);
        bool bye = s && !strcmp(s, "bye"), mine = s && !strcmp(s, seq);
        char *text = NULL;
        if (mine && code && body) {
            *status = !strcmp(code, "200") ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
            *len = zframe_size(body);
            text = malloc(*len + 1);
            if (text) {
                memcpy(text, zframe_data(body), *len);
                text[*len] = 0;
            }
        }
        zstr_free(&s);
        zstr_free(&code);
        zframe_destroy(&body);
        if (mine || bye)
            return text; /* an answer to an earlier scrape that gave up is dropped */
    }
}

static enum MHD_Result s_on_http(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_len, void **con_cls) {
    (void)version;
    (void)upload;
    (void)upload_len;
    (void)con_cls;
    s_http_t *h = cls;
    s_http_count(h, "http.requests");
    bool get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    bool metrics = !strcmp(url, "/metrics"), page = !strcmp(url, "/") || !strcmp(url, "/status");
    if (!metrics && !page) {
        s_http_count(h, "http.status.404");
        static const char msg[] = "not found: try /metrics or /\n";
        return s_respond(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", msg,
                         sizeof msg - 1);
    }
    if (!get) {
        s_http_count(h, "http.status.405");
        static const char msg[] = "method not allowed: GET or HEAD\n";
        return s_respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", msg,
                         sizeof msg - 1);
    }
    if (page) {
        s_http_count(h, "http.status.200");
        return s_respond(conn, MHD_HTTP_OK, "text/html; charset=utf-8", actor_metrics_page,
                         actor_metrics_page_len);
    }
    unsigned status;
    size_t len = 0;
    char *text = s_scrape(h, &status, &len);
    enum MHD_Result rc;
    if (text && status == MHD_HTTP_OK) {
        s_http_count(h, "http.status.200");
        rc = s_respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
    } else {
        s_http_count(h, "http.status.503");
        const char *why = text ? text : "no answer from the metrics actor\n";
        rc = s_respond(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", why,
                       strlen(why));
    }
    free(text);
    return rc;
}

static void s_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = 0;
    LOG_W(TAG, "http: %s", line);
}

/* ---- the actor's thread */

typedef struct {
    actor_env_t *env;
    zsock_t *in;       /* inbound PULL: ping, stats_query, stop */
    zsock_t *to_front; /* PUSH to the frontend: pong, stats_answer */
    zsock_t *dealer;   /* DEALER to the frontend's client endpoint: stats */
    zsock_t *pair;     /* PAIR to the HTTP thread (this thread's end) */
    zsock_t *http_end; /* the HTTP thread's end (owned by it while the daemon runs) */
    s_http_t http;     /* the HTTP thread's state */
    struct MHD_Daemon *mhd;
    actor_loop_t *loop;
    actor_counters_t *counters; /* the loop's */
    char *text;                 /* the last rendered exposition (malloc'd), or NULL */
    size_t text_len;
    uint64_t text_us;  /* when its stats_reply arrived */
    uint64_t asked_us; /* when the outstanding stats was sent; 0: none */
    char waiting[32];  /* the scrape waiting for it ("" none) */
    int cache_ms, timeout_ms;
    base_hist_t *wait; /* stats_wait_us: stats sent -> stats_reply read */
} s_metrics_t;

/* the metrics actor's sockets between actors (its DEALER to the frontend's client endpoint is its
 * own) */
static const actor_sock_decl_t s_socks[] = {
    {ACTOR_SOCK_FIELD(s_metrics_t, in), ACTOR_SOCK_IN, NULL, ACTOR_HWM_CTL, ACTOR_MAX_FRAME, false},
    {ACTOR_SOCK_FIELD(s_metrics_t, to_front), ACTOR_SOCK_OUT, "frontend", ACTOR_HWM_CTL, 0, false},
    {0},
};

static void s_answer(s_metrics_t *m, const char *seq, const char *code, const char *body,
                     size_t len) {
    zmsg_t *z = zmsg_new();
    if (!z)
        return;
    zmsg_addstr(z, seq);
    zmsg_addstr(z, code);
    zmsg_addmem(z, body, len);
    if (zmsg_send(&z, m->pair))
        zmsg_destroy(&z);
}

/* Send `stats` to the frontend. */
static void s_ask(s_metrics_t *m) {
    msg_stats_t q;
    msg_stats_init(&q);
    void *buf;
    size_t len;
    msg_err_t err;
    if (msg_stats_encode(&q, &buf, &len, &err) < 0) {
        actor_counters_add(m->counters, "stats.failed", 1);
        return;
    }
    int rc = zmq_send(zsock_resolve(m->dealer), buf, len, ZMQ_DONTWAIT);
    free(buf);
    if (rc < 0) { /* not connected yet, or its queue is full: the scrape times out */
        actor_counters_add(m->counters, "stats.unsent", 1);
        return;
    }
    actor_counters_add(m->counters, "stats.asked", 1);
    m->asked_us = base_now_us();
}

/* A message of the HTTP thread: "scrape SEQ" or "count NAME". */
static void s_on_pair(void *self, zsock_t *sock) {
    s_metrics_t *m = self;
    char *cmd = NULL, *arg = NULL;
    if (zsock_recv(sock, "ss", &cmd, &arg) || !cmd || !arg) {
        zstr_free(&cmd);
        zstr_free(&arg);
        return;
    }
    if (!strcmp(cmd, "count")) {
        actor_counters_add(m->counters, arg, 1);
    } else if (!strcmp(cmd, "scrape")) {
        actor_counters_add(m->counters, "scrapes", 1);
        uint64_t now = base_now_us();
        if (m->text && now - m->text_us <= (uint64_t)m->cache_ms * 1000) {
            actor_counters_add(m->counters, "scrapes.cached", 1);
            s_answer(m, arg, "200", m->text, m->text_len);
        } else {
            snprintf(m->waiting, sizeof m->waiting, "%s", arg); /* a newer scrape replaces it */
            if (!m->asked_us)
                s_ask(m);
        }
    }
    zstr_free(&cmd);
    zstr_free(&arg);
}

/* A frame from the frontend: the stats_reply. */
static void s_on_dealer(void *self, zsock_t *sock) {
    s_metrics_t *m = self;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, zsock_resolve(sock), ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&frame);
        return;
    }
    bool more = zmq_msg_more(&frame);
    msg_any_t a;
    msg_err_t err;
    int rc = more ? -EPROTO : msg_any_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), &a, &err);
    zmq_msg_close(&frame);
    while (more) { /* not part of the protocol: drop the rest */
        zmq_msg_init(&frame);
        more = zmq_msg_recv(&frame, zsock_resolve(sock), ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&frame);
        zmq_msg_close(&frame);
    }
    if (rc < 0) {
        actor_counters_add(m->counters, "stats.malformed", 1);
        return;
    }
    if (a.type != MSG_STATS_REPLY) {
        actor_counters_add(m->counters, "stats.unexpected", 1);
        msg_any_clear(&a);
        return;
    }
    char *text;
    size_t len;
    uint64_t t0 = base_now_us();
    if (serve_prom_render(a.u.stats_reply.counters, a.u.stats_reply.n_counters, &text, &len) == 0) {
        free(m->text);
        m->text = text;
        m->text_len = len;
        m->text_us = base_now_us();
        actor_counters_add(m->counters, "render_us", (int64_t)(m->text_us - t0));
        actor_counters_set(m->counters, "last.counters", a.u.stats_reply.n_counters);
        if (m->asked_us)
            base_hist_observe(m->wait, (int64_t)(m->text_us - m->asked_us));
        actor_counters_add(m->counters, "stats.answered", 1);
    }
    msg_any_clear(&a);
    m->asked_us = 0;
    if (m->waiting[0]) {
        if (m->text)
            s_answer(m, m->waiting, "200", m->text, m->text_len);
        else
            s_answer(m, m->waiting, "503", "out of memory\n", 14);
        m->waiting[0] = 0;
    }
}

/* Before every stats_answer: the histogram's counters. */
static void s_on_stats(void *self) {
    s_metrics_t *m = self;
    base_hist_export(m->wait, s_put, m->counters);
}

/* Every 50 ms: a stats the frontend has not answered in time fails its scrape. */
static void s_tick(void *self) {
    s_metrics_t *m = self;
    if (!m->asked_us || base_now_us() - m->asked_us < (uint64_t)m->timeout_ms * 1000)
        return;
    actor_counters_add(m->counters, "stats.timeouts", 1);
    m->asked_us = 0; /* a late answer still fills the cache */
    if (m->waiting[0]) {
        static const char why[] = "the frontend did not answer `stats` in time\n";
        s_answer(m, m->waiting, "503", why, sizeof why - 1);
        m->waiting[0] = 0;
    }
}

/* The endpoint to ask: the option, else the frontend's client option; a wildcard
 * address (0.0.0.0, *) becomes 127.0.0.1. */
static void s_client_endpoint(const actor_env_t *env, char *out, size_t len) {
    const char *ep = ((const actor_metrics_cfg_t *)actor_env_cfg(env))->frontend;
    if (!ep)
        ep = actor_topology_opt(actor_env_topology(env), "frontend", "client",
                                ACTOR_TOPO_CLIENT_ENDPOINT);
    const char *host = strstr(ep, "://");
    host = host ? host + 3 : ep;
    if (!strncmp(host, "0.0.0.0:", 8) || !strncmp(host, "*:", 2))
        snprintf(out, len, "%.*s127.0.0.1%s", (int)(host - ep), ep, strchr(host, ':'));
    else
        snprintf(out, len, "%s", ep);
}

/* HOST:PORT or [V6]:PORT -> the address to bind.  0, or -EINVAL with why. */
static int s_listen_addr(const char *listen, struct sockaddr_storage *ss, bool *v6, char *why,
                         size_t whylen) {
    char host[256], port[16];
    const char *colon = strrchr(listen, ':');
    if (!colon || !colon[1] || strlen(colon + 1) >= sizeof port ||
        (size_t)(colon - listen) >= sizeof host) {
        snprintf(why, whylen, "listen=%s: expected HOST:PORT", listen);
        return -EINVAL;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    snprintf(port, sizeof port, "%s", colon + 1);
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc || !res) {
        snprintf(why, whylen, "listen=%s: %s", listen, rc ? gai_strerror(rc) : "no address");
        return -EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

static void s_cleanup(s_metrics_t *m) {
    if (m->mhd) {
        zstr_sendx(m->pair, "bye", NULL); /* a scrape waiting in the HTTP thread ends now */
        MHD_stop_daemon(m->mhd);
        m->mhd = NULL;
    }
    zsock_destroy(&m->http_end);
    zsock_destroy(&m->pair);
    zsock_destroy(&m->dealer);
    actor_socks_close(s_socks, m);
    actor_loop_destroy(&m->loop);
    base_hist_destroy(&m->wait);
    free(m->text);
    m->text = NULL;
}

int actor_metrics_main(actor_env_t *env) {
    const actor_metrics_cfg_t *conf = actor_env_cfg(env);
    const actor_topology_t *topo = actor_env_topology(env);
    const char *me = actor_env_name(env);
    s_metrics_t m = {0};
    m.env = env;
    m.cache_ms = conf->cache_ms;
    m.timeout_ms = conf->stats_timeout_ms;
    const char *listen = conf->listen;
    char why[512], ep[ACTOR_TOPO_VALUE + 16];
    struct sockaddr_storage addr;
    bool v6 = false;
    if (s_listen_addr(listen, &addr, &v6, why, sizeof why)) {
        actor_env_fail(env, "%s: %s", me, why);
        return 1;
    }
    m.loop = actor_loop_new(env, &m);
    m.counters = m.loop ? actor_loop_counters(m.loop) : NULL;
    char serr[128];
    int socks = actor_socks_open(env, s_socks, &m, serr, sizeof serr);
    m.dealer = zsock_new(ZMQ_DEALER);
    char inproc[64];
    snprintf(inproc, sizeof inproc, "inproc://strata-metrics-%p", (void *)&m);
    m.pair = zsock_new(ZMQ_PAIR);
    m.http_end = zsock_new(ZMQ_PAIR);
    m.wait = base_hist_new("stats_wait_us", 100, 10000000); /* 0.1 ms .. 10 s */
    if (socks || !m.wait || !m.loop || !m.dealer || !m.pair || !m.http_end ||
        zsock_bind(m.pair, "%s", inproc) < 0 || zsock_connect(m.http_end, "%s", inproc)) {
        actor_env_fail(env, "%s: cannot set up (%s)", me, socks ? serr : "sockets or memory");
        s_cleanup(&m);
        return 1;
    }
    zsock_set_sndtimeo(m.http_end, 200);
    zsock_set_sndtimeo(m.pair, 200);
    /* the DEALER: CURVE when the client endpoint has it */
    s_client_endpoint(env, ep, sizeof ep);
    if (actor_curve_frontend_client(m.dealer, topo, conf->client_key, "docs/METRICS.md", why,
                                    sizeof why)) {
        actor_env_fail(env, "%s: %s", me, why);
        s_cleanup(&m);
        return 1;
    }
    zsock_set_linger(m.dealer, 0);
    zsock_set_maxmsgsize(m.dealer, (int)MSG_MAX_CLIENT_FRAME);
    zsock_set_sndhwm(m.dealer, 16);
    if (zsock_connect(m.dealer, "%s", ep)) {
        actor_env_fail(env, "%s: cannot connect to the client endpoint %s", me, ep);
        s_cleanup(&m);
        return 1;
    }
    /* the HTTP daemon: its thread owns http_end and m.http from here on */
    m.http.pair = m.http_end;
    m.http.wait_ms = m.timeout_ms + 1000;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    m.mhd = MHD_start_daemon(flags, 0, NULL, NULL, s_on_http, &m.http, MHD_OPTION_EXTERNAL_LOGGER,
                             s_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)conf->max_conns,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)conf->conn_timeout_s,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536, MHD_OPTION_END);
    if (!m.mhd) {
        actor_env_fail(env, "%s: cannot serve HTTP on %s: %s", me, listen, strerror(errno));
        s_cleanup(&m);
        return 1;
    }
    actor_loop_inbox(m.loop, m.in, m.to_front, false, "");
    actor_loop_reader(m.loop, m.pair, s_on_pair);
    actor_loop_reader(m.loop, m.dealer, s_on_dealer);
    actor_loop_timer(m.loop, 50, s_tick);
    actor_loop_on_stats(m.loop, s_on_stats);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m.mhd, MHD_DAEMON_INFO_BIND_PORT);
    LOG_I(TAG, "%s: serving http://%s/metrics (port %u), stats from %s", me, listen,
          info ? (unsigned)info->port : 0u, ep);
    actor_env_ready(env);
    actor_loop_run(m.loop, 500);
    s_cleanup(&m);
    return 0;
}
