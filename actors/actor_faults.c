/* actor_faults.c - the fault spec, its seeded decisions (splitmix64 over the
 * seed, the actor, the link and the frame counter) and the links it covers:
 * their frame counters and the frames held back by delay and reorder. */
#include "actor_faults.h"

#include "actor_counters.h"
#include "base_clock.h"
#include "base_log.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "faults"
#define S_NAME 32 /* an actor name, as ACTOR_TOPO_NAME */

/* A frame held back by delay or reorder. */
typedef struct {
    zmq_msg_t parts[2]; /* owned; the first n valid */
    int n;
    uint64_t due_us; /* sent at the first flush after this */
    bool reorder;    /* also sent right after the next frame of its link */
} s_held_t;

/* An outbound socket the faults cover. */
typedef struct {
    zsock_t *sock;     /* borrowed: the actor's PUSH to peer */
    char peer[S_NAME]; /* the link's name in every decision */
    uint64_t frames;   /* frames handed to it so far: the next decision's counter */
    s_held_t *held;    /* (cap_held) first n_held valid, in the order they were held */
    int n_held, cap_held;
} s_link_t;

struct actor_faults_t {
    char actor[S_NAME];        /* whose faults: keys every decision */
    uint64_t seed;             /* seed=N */
    double drop, dup, corrupt; /* probabilities per frame */
    double delay, reorder;     /* probabilities per frame */
    int delay_ms;              /* delay=P:MS */
    double stall;              /* probability per loop wakeup */
    int stall_ms;              /* stall=P:MS */
    long crash_after;          /* crash after this many frames; 0: never */
    char to[S_NAME];           /* to=NAME: only frames to that peer; "": every link */
    char only[S_NAME];         /* actor=NAME: only that actor has faults; "": every one */
    s_link_t *links;           /* (cap_links) first n_links valid */
    int n_links, cap_links;
    uint64_t wakeups; /* loop wakeups so far: the next stall decision's counter */
    uint64_t sent;    /* frames handed to actor_faults_send (crash_after) */
    int64_t dropped, duplicated, delayed, reordered, corrupted, stalled; /* reported counts */
};

/* ---- the spec */

/* Every key, for the error that names an unknown one. */
static const char *s_keys =
    "seed, drop, dup, delay, reorder, corrupt, crash_after, stall, to, actor";

/* A probability in [0, 1].  0 or -EINVAL with why. */
static int s_prob(const char *item, const char *v, double *p, char *why, size_t whylen) {
    char *end = NULL;
    errno = 0;
    double x = *v ? strtod(v, &end) : NAN;
    if (!*v || *end || errno || !isfinite(x)) {
        snprintf(why, whylen, "'%s': not a probability (a number in [0, 1])", item);
        return -EINVAL;
    }
    if (x < 0 || x > 1) {
        snprintf(why, whylen, "'%s': probability out of range [0, 1]", item);
        return -EINVAL;
    }
    *p = x;
    return 0;
}

/* A decimal integer in [lo, hi].  0 or -EINVAL with why. */
static int s_uint(const char *item, const char *v, const char *what, unsigned long long lo,
                  unsigned long long hi, unsigned long long *out, char *why, size_t whylen) {
    char *end = NULL;
    errno = 0;
    unsigned long long x = (*v >= '0' && *v <= '9') ? strtoull(v, &end, 10) : 0;
    if (!(*v >= '0' && *v <= '9') || *end || errno) {
        snprintf(why, whylen, "'%s': %s is not an unsigned integer", item, what);
        return -EINVAL;
    }
    if (x < lo || x > hi) {
        snprintf(why, whylen, "'%s': %s out of range (%llu..%llu)", item, what, lo, hi);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

/* P:MS.  0 or -EINVAL with why. */
static int s_prob_ms(const char *item, char *v, double *p, int *ms, char *why, size_t whylen) {
    char *colon = strchr(v, ':');
    if (!colon) {
        snprintf(why, whylen, "'%s': expected P:MS (a probability and milliseconds)", item);
        return -EINVAL;
    }
    *colon = 0;
    unsigned long long x;
    if (s_prob(item, v, p, why, whylen) ||
        s_uint(item, colon + 1, "milliseconds", 1, ACTOR_FAULTS_MAX_MS, &x, why, whylen))
        return -EINVAL;
    *ms = (int)x;
    return 0;
}

/* A peer or actor name: 1..31 characters of [a-z0-9_-]. */
static int s_name(const char *item, const char *v, char *out, char *why, size_t whylen) {
    size_t n = strlen(v);
    bool ok = n > 0 && n < S_NAME;
    for (size_t i = 0; ok && i < n; i++)
        ok = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '_' ||
             v[i] == '-';
    if (!ok) {
        snprintf(why, whylen, "'%s': expected an actor name (1..%d of a-z 0-9 _ -)", item,
                 S_NAME - 1);
        return -EINVAL;
    }
    memcpy(out, v, n + 1);
    return 0;
}

/* Parse spec into f (zeroed by the caller).  0 or -EINVAL with why. */
static int s_parse(actor_faults_t *f, const char *spec, char *why, size_t whylen) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf) {
        snprintf(why, whylen, "spec longer than %zu characters", sizeof buf - 1);
        return -EINVAL;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    if (!*buf)
        return 0;
    unsigned seen = 0; /* bit k: key k given */
    char *next = NULL;
    for (char *item = buf; item; item = next) { /* not strtok: it skips empty items */
        char *comma = strchr(item, ',');
        next = comma ? comma + 1 : NULL;
        if (comma)
            *comma = 0;
        char text[sizeof buf];
        snprintf(text, sizeof text, "%s", item); /* the item as written, for errors */
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(why, whylen, "'%s': expected key=value (%s)", text, s_keys);
            return -EINVAL;
        }
        *eq = 0;
        const char *key = item;
        char *v = eq + 1;
        static const char *keys[] = {"seed",    "drop",        "dup",   "delay", "reorder",
                                     "corrupt", "crash_after", "stall", "to",    "actor"};
        int k = -1;
        for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
            if (!strcmp(key, keys[i]))
                k = i;
        if (k < 0) {
            snprintf(why, whylen, "'%s': unknown key '%s' (%s)", text, key, s_keys);
            return -EINVAL;
        }
        if (seen & (1u << k)) {
            snprintf(why, whylen, "'%s': %s given twice", text, key);
            return -EINVAL;
        }
        seen |= 1u << k;
        unsigned long long x = 0;
        int rc = 0;
        switch (k) {
        case 0:
            rc = s_uint(text, v, "the seed", 0, UINT64_MAX, &x, why, whylen);
            f->seed = x;
            break;
        case 1:
            rc = s_prob(text, v, &f->drop, why, whylen);
            break;
        case 2:
            rc = s_prob(text, v, &f->dup, why, whylen);
            break;
        case 3:
            rc = s_prob_ms(text, v, &f->delay, &f->delay_ms, why, whylen);
            break;
        case 4:
            rc = s_prob(text, v, &f->reorder, why, whylen);
            break;
        case 5:
            rc = s_prob(text, v, &f->corrupt, why, whylen);
            break;
        case 6:
            rc = s_uint(text, v, "the frame count", 1, 1000000000, &x, why, whylen);
            f->crash_after = (long)x;
            break;
        case 7:
            rc = s_prob_ms(text, v, &f->stall, &f->stall_ms, why, whylen);
            break;
        case 8:
            rc = s_name(text, v, f->to, why, whylen);
            break;
        default:
            rc = s_name(text, v, f->only, why, whylen);
            break;
        }
        if (rc)
            return rc;
    }
    return 0;
}

int actor_faults_check(const char *spec, char *why, size_t whylen) {
    actor_faults_t f;
    memset(&f, 0, sizeof f);
    return s_parse(&f, spec ? spec : "", why, whylen);
}

actor_faults_t *actor_faults_new(const char *spec, const char *actor, char *err, size_t errlen) {
    actor_faults_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(self->actor, sizeof self->actor, "%s", actor);
    if (s_parse(self, spec ? spec : "", err, errlen)) {
        free(self);
        return NULL;
    }
    return self;
}

/* Close the parts of a held frame. */
static void s_held_close(s_held_t *h) {
    for (int i = 0; i < h->n; i++)
        zmq_msg_close(&h->parts[i]);
    h->n = 0;
}

void actor_faults_destroy(actor_faults_t **self_p) {
    if (!self_p || !*self_p)
        return;
    actor_faults_t *self = *self_p;
    for (int i = 0; i < self->n_links; i++) {
        for (int j = 0; j < self->links[i].n_held; j++)
            s_held_close(&self->links[i].held[j]);
        free(self->links[i].held);
    }
    free(self->links);
    free(self);
    *self_p = NULL;
}

bool actor_faults_active(const actor_faults_t *self) {
    if (self->only[0] && strcmp(self->only, self->actor))
        return false;
    return self->drop > 0 || self->dup > 0 || self->corrupt > 0 || self->delay > 0 ||
           self->reorder > 0 || self->stall > 0 || self->crash_after > 0;
}

/* ---- decisions */

/* splitmix64: the next number of the stream whose state is *x. */
static uint64_t s_next(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) from the stream *x (53 bits). */
static double s_unit(uint64_t *x) {
    return (double)(s_next(x) >> 11) * 0x1p-53;
}

/* FNV-1a of a name: folds it into the stream's state. */
static uint64_t s_fnv(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* The stream of decisions for (seed, actor, link, n). */
static uint64_t s_stream(const actor_faults_t *self, const char *link, uint64_t n) {
    uint64_t x = self->seed;
    x = s_next(&x) ^ s_fnv(self->actor);
    x = s_next(&x) ^ s_fnv(link);
    return s_next(&x) ^ n;
}

actor_fault_t actor_faults_decide(const actor_faults_t *self, const char *link, uint64_t n) {
    uint64_t x = s_stream(self, link, n);
    /* always the same draws in the same order, whatever the probabilities */
    double u_drop = s_unit(&x), u_dup = s_unit(&x), u_corrupt = s_unit(&x);
    double u_delay = s_unit(&x), u_reorder = s_unit(&x);
    actor_fault_t d = {.bit = s_next(&x)};
    if (u_drop < self->drop) {
        d.drop = true;
        return d;
    }
    d.dup = u_dup < self->dup;
    d.corrupt = u_corrupt < self->corrupt;
    if (u_delay < self->delay) {
        d.hold_ms = self->delay_ms;
    } else if (u_reorder < self->reorder) {
        d.hold_ms = ACTOR_FAULTS_REORDER_MS;
        d.reorder = true;
    }
    return d;
}

int actor_faults_stall_ms(const actor_faults_t *self, uint64_t n) {
    uint64_t x = s_stream(self, "(stall)", n); /* a name no actor has */
    return s_unit(&x) < self->stall ? self->stall_ms : 0;
}

/* ---- links */

static s_link_t *s_link(const actor_faults_t *self, const zsock_t *sock) {
    for (int i = 0; i < self->n_links; i++)
        if (self->links[i].sock == sock)
            return &self->links[i];
    return NULL;
}

int actor_faults_link(actor_faults_t *self, zsock_t *sock, const char *peer) {
    s_link_t *old = s_link(self, sock);
    if (old) { /* a socket closed earlier had this address */
        for (int j = 0; j < old->n_held; j++)
            s_held_close(&old->held[j]);
        free(old->held);
        *old = self->links[--self->n_links];
    }
    if (self->to[0] && strcmp(self->to, peer))
        return 0;
    if (self->n_links == self->cap_links) {
        int cap = self->cap_links ? 2 * self->cap_links : 8;
        s_link_t *l = realloc(self->links, (size_t)cap * sizeof *l);
        if (!l)
            return -ENOMEM;
        self->links = l;
        self->cap_links = cap;
    }
    s_link_t *l = &self->links[self->n_links++];
    *l = (s_link_t){.sock = sock};
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    return 0;
}

bool actor_faults_covers(const actor_faults_t *self, const zsock_t *sock) {
    return s_link(self, sock) != NULL;
}

/* ---- sending */

/* Send n parts now, without blocking; closes them.  0, -EAGAIN or -EIO. */
static int s_send_now(zsock_t *sock, zmq_msg_t *parts, int n) {
    void *h = zsock_resolve(sock);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!rc && zmq_msg_send(&parts[i], h, ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
            rc = zmq_errno() == EAGAIN ? -EAGAIN : -EIO; /* only the first part can fail:
                                                            the rest are queued with it */
        zmq_msg_close(&parts[i]);
    }
    return rc;
}

/* Copies of n parts into out (sharing their buffers).  0 or -ENOMEM. */
static int s_copy(zmq_msg_t *out, zmq_msg_t *parts, int n) {
    for (int i = 0; i < n; i++) {
        zmq_msg_init(&out[i]);
        if (zmq_msg_copy(&out[i], &parts[i])) {
            for (int j = 0; j <= i; j++)
                zmq_msg_close(&out[j]);
            return -ENOMEM;
        }
    }
    return 0;
}

/* Hold n parts (taken) on l until due; reorder: or until the next frame. */
static void s_hold(s_link_t *l, zmq_msg_t *parts, int n, int ms, bool reorder) {
    if (l->n_held == l->cap_held) {
        int cap = l->cap_held ? 2 * l->cap_held : 8;
        s_held_t *h = realloc(l->held, (size_t)cap * sizeof *h);
        if (!h) { /* cannot hold it: it is lost, like a dropped frame */
            for (int i = 0; i < n; i++)
                zmq_msg_close(&parts[i]);
            return;
        }
        l->held = h;
        l->cap_held = cap;
    }
    s_held_t *h = &l->held[l->n_held++];
    h->n = n;
    h->due_us = base_now_us() + (uint64_t)ms * 1000;
    h->reorder = reorder;
    for (int i = 0; i < n; i++) {
        zmq_msg_init(&h->parts[i]);
        zmq_msg_move(&h->parts[i], &parts[i]);
        zmq_msg_close(&parts[i]);
    }
}

/* Send the held frames of l that are due at now, and the reordered ones when
 * after_next (a frame was just sent).  Returns the ms until the next one is
 * due, or -1 when none is left. */
static int s_release(s_link_t *l, uint64_t now, bool after_next) {
    int k = 0, wait = -1;
    for (int j = 0; j < l->n_held; j++) {
        s_held_t *h = &l->held[j];
        if (h->due_us <= now || (after_next && h->reorder)) {
            if (s_send_now(l->sock, h->parts, h->n))
                LOG_D(TAG, "a held frame to %s is lost (its queue is full)", l->peer);
            continue;
        }
        int ms = (int)((h->due_us - now + 999) / 1000);
        if (wait < 0 || ms < wait)
            wait = ms;
        l->held[k++] = *h;
    }
    l->n_held = k;
    return wait;
}

void actor_faults_flip(zmq_msg_t *parts, int n, uint64_t bit) {
    uint64_t bits = 0;
    for (int i = 0; i < n; i++)
        bits += (uint64_t)zmq_msg_size(&parts[i]) * 8;
    if (!bits)
        return;
    bit %= bits;
    for (int i = 0; i < n; i++) {
        uint64_t b = (uint64_t)zmq_msg_size(&parts[i]) * 8;
        if (bit < b) {
            ((uint8_t *)zmq_msg_data(&parts[i]))[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            return;
        }
        bit -= b;
    }
}

int actor_faults_send(actor_faults_t *self, zsock_t *sock, zmq_msg_t *parts, int n) {
    s_link_t *l = s_link(self, sock);
    assert(l && n >= 1 && n <= 2 && "actor_faults_send on a socket it does not cover");
    actor_fault_t d = actor_faults_decide(self, l->peer, l->frames++);
    self->sent++;
    if (d.drop) {
        self->dropped++;
        for (int i = 0; i < n; i++)
            zmq_msg_close(&parts[i]);
        return 0;
    }
    if (d.corrupt) { /* the parts were made for this send: no one else shares them */
        actor_faults_flip(parts, n, d.bit);
        self->corrupted++;
    }
    zmq_msg_t twin[2];
    bool dup = d.dup && !s_copy(twin, parts, n);
    if (dup)
        self->duplicated++;
    int rc = 0;
    if (d.hold_ms) {
        if (d.reorder)
            self->reordered++;
        else
            self->delayed++;
        s_hold(l, parts, n, d.hold_ms, d.reorder);
        if (dup)
            s_hold(l, twin, n, d.hold_ms, d.reorder);
    } else {
        rc = s_send_now(sock, parts, n);
        if (dup)
            s_send_now(sock, twin, n);
    }
    s_release(l, base_now_us(), !d.hold_ms);
    return rc;
}

int actor_faults_flush(actor_faults_t *self) {
    uint64_t now = base_now_us();
    int wait = -1;
    for (int i = 0; i < self->n_links; i++) {
        if (!self->links[i].n_held)
            continue;
        int ms = s_release(&self->links[i], now, false);
        if (ms >= 0 && (wait < 0 || ms < wait))
            wait = ms;
    }
    return wait;
}

void actor_faults_stall(actor_faults_t *self) {
    int ms = actor_faults_stall_ms(self, self->wakeups++);
    if (ms) {
        self->stalled++;
        zclock_sleep(ms);
    }
}

bool actor_faults_crash_due(const actor_faults_t *self) {
    return self->crash_after > 0 && self->sent >= (uint64_t)self->crash_after;
}

void actor_faults_report(const actor_faults_t *self, actor_counters_t *counters) {
    actor_counters_set(counters, "faults.dropped", self->dropped);
    actor_counters_set(counters, "faults.duplicated", self->duplicated);
    actor_counters_set(counters, "faults.delayed", self->delayed);
    actor_counters_set(counters, "faults.reordered", self->reordered);
    actor_counters_set(counters, "faults.corrupted", self->corrupted);
    actor_counters_set(counters, "faults.stalled", self->stalled);
}
