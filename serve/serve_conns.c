/* serve_conns.c - the gateway's connection deadlines (serve_conns.h): a doubly linked list
 * of connections, each with the deadline of the phase it is in. */
#include "serve_conns.h"

#include <stdbool.h>
#include <stdlib.h>

enum { S_HEADERS, S_BODY, S_ANSWER };

struct serve_conn_t {
    int fd;
    int phase;       /* S_HEADERS, S_BODY, S_ANSWER */
    uint64_t due_us; /* the phase's deadline (0: none) */
    serve_conn_t *prev, *next;
};

struct serve_conns_t {
    uint64_t header_us, body_us;
    serve_conn_t *head;
    int n;
};

serve_conns_t *serve_conns_new(uint64_t header_us, uint64_t body_us) {
    serve_conns_t *s = calloc(1, sizeof *s);
    if (s) {
        s->header_us = header_us;
        s->body_us = body_us;
    }
    return s;
}

void serve_conns_destroy(serve_conns_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_conns_t *s = *self_p;
    while (s->head)
        serve_conns_close(s, s->head);
    free(s);
    *self_p = NULL;
}

static void s_phase(serve_conn_t *c, int phase, uint64_t now_us, uint64_t limit_us) {
    c->phase = phase;
    c->due_us = limit_us ? now_us + limit_us : 0;
}

serve_conn_t *serve_conns_open(serve_conns_t *self, int fd, uint64_t now_us) {
    serve_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    s_phase(c, S_HEADERS, now_us, self->header_us);
    c->next = self->head;
    if (self->head)
        self->head->prev = c;
    self->head = c;
    self->n++;
    return c;
}

void serve_conns_headers(serve_conns_t *self, serve_conn_t *c, uint64_t now_us) {
    if (c && c->phase == S_HEADERS)
        s_phase(c, S_BODY, now_us, self->body_us);
}

void serve_conns_body(serve_conns_t *self, serve_conn_t *c) {
    (void)self;
    if (c)
        s_phase(c, S_ANSWER, 0, 0);
}

void serve_conns_idle(serve_conns_t *self, serve_conn_t *c, uint64_t now_us) {
    if (c)
        s_phase(c, S_HEADERS, now_us, self->header_us);
}

void serve_conns_close(serve_conns_t *self, serve_conn_t *c) {
    if (!c)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        self->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    self->n--;
    free(c);
}

int serve_conns_overdue(serve_conns_t *self, uint64_t now_us, int *fds, int max, int *slow_headers,
                        int *slow_bodies) {
    int n = 0;
    *slow_headers = *slow_bodies = 0;
    for (serve_conn_t *c = self->head; c && n < max; c = c->next) {
        if (!c->due_us || now_us < c->due_us)
            continue;
        fds[n++] = c->fd;
        if (c->phase == S_HEADERS)
            ++*slow_headers;
        else
            ++*slow_bodies;
        c->due_us = 0; /* reported once */
    }
    return n;
}

int serve_conns_count(const serve_conns_t *self) {
    return self->n;
}
