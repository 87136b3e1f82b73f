/* serve_conns.h - deadlines on the HTTP gateway's connections (docs/HTTP.md, "Limits"),
 * which libmicrohttpd's idle timeout alone does not give: a client sending a byte every
 * second is never idle, so a slow header (slowloris) or a slow body would hold its
 * connection for ever.  A connection waiting for a request's headers must have them within
 * header_us (from its opening, or from its previous request's end); once the headers are
 * in, the body must be in within body_us; then no deadline (the answer may stream for
 * minutes).  The gateway shuts down the sockets this says are overdue.  Library code: no
 * sockets here, just the bookkeeping. */
#ifndef SERVE_CONNS_H
#define SERVE_CONNS_H

#include <stdint.h>

typedef struct serve_conns_t serve_conns_t;
typedef struct serve_conn_t serve_conn_t;

/* header_us, body_us: the deadlines (0: none).  NULL when out of memory. */
serve_conns_t *serve_conns_new(uint64_t header_us, uint64_t body_us);
/* Free it and every connection it still tracks; nulls *self_p; safe on NULL. */
void serve_conns_destroy(serve_conns_t **self_p);

/* A connection on fd opened at now_us: waiting for headers.  NULL when out of memory. */
serve_conn_t *serve_conns_open(serve_conns_t *self, int fd, uint64_t now_us);
/* Its request's headers are in: the body's deadline starts. */
void serve_conns_headers(serve_conns_t *self, serve_conn_t *c, uint64_t now_us);
/* Its request's body is in: no deadline while it is answered. */
void serve_conns_body(serve_conns_t *self, serve_conn_t *c);
/* Its request ended (keep-alive): waiting for the next headers from now_us. */
void serve_conns_idle(serve_conns_t *self, serve_conn_t *c, uint64_t now_us);
/* It closed: forgotten (c freed). */
void serve_conns_close(serve_conns_t *self, serve_conn_t *c);

/* The fds of connections past their deadline at now_us, up to max into fds (each reported
 * once: its deadline is cleared); *slow_headers / *slow_bodies count which kind.  Returns
 * how many. */
int serve_conns_overdue(serve_conns_t *self, uint64_t now_us, int *fds, int max, int *slow_headers,
                        int *slow_bodies);
/* Connections tracked. */
int serve_conns_count(const serve_conns_t *self);

#endif
