/* serve_parked.h - the requests a target worker holds back while the KV tier manager
 * promotes their prompt's blocks from T1/T2 (serve_work_park_wanted says which): each
 * waits until the tier manager says it is done (serve_parked_take by id) or until its
 * deadline (serve_parked_expired, earliest deadline first), then runs, computing what
 * did not come.  Lookups by id and taking one out are O(1), the next deadline O(1),
 * an expiry O(log n).  The requests are the caller's (borrowed pointers). */
#ifndef SERVE_PARKED_H
#define SERVE_PARKED_H

#include <stdint.h>

typedef struct serve_parked_t serve_parked_t;

/* NULL when out of memory. */
serve_parked_t *serve_parked_new(void);
/* Frees the set (not the requests: take them out first), nulls *self_p; safe twice. */
void serve_parked_destroy(serve_parked_t **self_p);

/* Hold req (not NULL) under rid until deadline_us.  0, -EEXIST (rid is held), -ENOMEM. */
int serve_parked_add(serve_parked_t *self, uint64_t rid, void *req, uint64_t deadline_us);
/* The request held under rid, or NULL. */
void *serve_parked_find(const serve_parked_t *self, uint64_t rid);
/* Take rid's request out (it runs now): the request, or NULL when rid is not held. */
void *serve_parked_take(serve_parked_t *self, uint64_t rid);
/* Take out a request whose deadline is at or before now_us, the earliest first: the
 * request, or NULL when none is due. */
void *serve_parked_expired(serve_parked_t *self, uint64_t now_us);
/* Take out any request (to free them all): NULL when empty. */
void *serve_parked_pop(serve_parked_t *self);
/* Requests held. */
int serve_parked_count(const serve_parked_t *self);

#endif
