/* actor_faults.h - deterministic fault injection on the links between actors
 * (docs/FAULTS.md).  Parses a spec ("seed=7,drop=0.05,delay=0.1:20,to=router")
 * and decides, per frame, whether it is dropped, duplicated, delayed, reordered
 * or corrupted, and per loop wakeup whether the actor stalls.  A decision is a
 * pure function of (seed, actor name, link, the link's frame counter), so a run
 * replays.  The object also keeps the state of the links it covers (their
 * frame counters and held frames) and sends through them; the runtime
 * (actor_runtime.c) owns one per actor thread, registers the outbound sockets
 * and calls it from actor_send / actor_send_raw and from the actor loop.
 *
 *   actor_faults_t *f = actor_faults_new("seed=1,drop=0.1", "router", err, sizeof err);
 *   actor_faults_link(f, sock, "worker0");               // an outbound PUSH
 *   actor_faults_send(f, sock, parts, 1);                // instead of zmq_msg_send
 *   int wait = actor_faults_flush(f);                    // in the loop: held frames due
 *   actor_faults_destroy(&f);
 */
#ifndef ACTOR_FAULTS_H
#define ACTOR_FAULTS_H

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How long a reordered frame waits for the next frame on its link. */
#define ACTOR_FAULTS_REORDER_MS 10
/* The longest delay or stall a spec may ask for. */
#define ACTOR_FAULTS_MAX_MS 60000

/* What happens to one frame (a message: one part, or a header and its raw part). */
typedef struct {
    bool drop;    /* not sent at all */
    bool dup;     /* sent twice */
    bool corrupt; /* one bit flipped after the checksum was computed */
    uint64_t bit; /* corrupt: the bit is bit % (the frame's size in bits) */
    int hold_ms;  /* > 0: held that long before it is sent (delay or reorder) */
    bool reorder; /* held until the next frame of the link is sent (at most hold_ms) */
} actor_fault_t;

typedef struct actor_faults_t actor_faults_t;
typedef struct actor_counters_t actor_counters_t;

/* Check spec without keeping it.  0, or -EINVAL with one line in why that names
 * the bad item: "'drop=1.5': probability out of range [0, 1]".  The empty spec
 * is valid (no faults). */
int actor_faults_check(const char *spec, char *why, size_t whylen);

/* The faults of actor (its name keys every decision) from spec.  NULL with
 * the reason in err when spec is bad (as actor_faults_check) or memory ran out. */
actor_faults_t *actor_faults_new(const char *spec, const char *actor, char *err, size_t errlen);
/* Frees the held frames (never sent) and the links; nulls *self_p; safe twice. */
void actor_faults_destroy(actor_faults_t **self_p);

/* False when the spec names another actor (actor=NAME) or injects nothing:
 * then the runtime keeps no faults for this actor at all. */
bool actor_faults_active(const actor_faults_t *self);

/* The decision for frame n (0, 1, ...) of link (the peer's name).  Pure. */
actor_fault_t actor_faults_decide(const actor_faults_t *self, const char *link, uint64_t n);
/* How long wakeup n of the actor loop sleeps (0: it does not).  Pure. */
int actor_faults_stall_ms(const actor_faults_t *self, uint64_t n);

/* Cover sock, an outbound socket to actor peer (borrowed: it must stay open
 * while frames are held for it), if the spec's to=NAME lets it.  A socket
 * registered before under the same address is forgotten first.  0 or -ENOMEM. */
int actor_faults_link(actor_faults_t *self, zsock_t *sock, const char *peer);
/* True when frames sent on sock go through actor_faults_send. */
bool actor_faults_covers(const actor_faults_t *self, const zsock_t *sock);

/* Send one frame of n parts (1 or 2; taken: closed on return whatever
 * happens) on a covered sock, with the faults decided for it, without
 * blocking.  Frames held earlier on sock that are due (or waiting for this
 * one: reorder) follow it.  0 (also when the frame was dropped or held),
 * -EAGAIN when the peer's queue is full, -EIO. */
int actor_faults_send(actor_faults_t *self, zsock_t *sock, zmq_msg_t *parts, int n);
/* Send every held frame that is due.  Returns the ms until the next one is
 * due, or -1 when none is held.  A held frame the peer's queue refuses is lost. */
int actor_faults_flush(actor_faults_t *self);
/* The actor loop's wakeup: sleeps when the spec's stall says so. */
void actor_faults_stall(actor_faults_t *self);
/* True once the actor sent its crash_after-th frame on covered links. */
bool actor_faults_crash_due(const actor_faults_t *self);

/* Report the counts as counters: faults.dropped, .duplicated, .delayed,
 * .reordered, .corrupted, .stalled. */
void actor_faults_report(const actor_faults_t *self, actor_counters_t *counters);

/* Flip bit (mod the size in bits) of the n parts.  What the corrupt fault does. */
void actor_faults_flip(zmq_msg_t *parts, int n, uint64_t bit);

#endif
