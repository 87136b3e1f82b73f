/* serve_choices.h - OpenAI's n (docs/HTTP.md, "Choices"): one request of n choices fanned
 * out by the http gateway as n generates that differ only in their id and seed, and their
 * events merged back into one answer.  Choice i is the generate "<id>.<i>" with seed
 * seed + i (so the same request gives the same n answers, and choice 0 is the answer of
 * n = 1 with that seed); the n generates share the prompt's KV through the workers' prefix
 * cache.  The merge: which choice an event belongs to (its index), each choice's own
 * finish_reason, and one usage: the prompt counted once, the completion tokens summed.
 * Library code: no sockets, no HTTP, no JSON. */
#ifndef SERVE_CHOICES_H
#define SERVE_CHOICES_H

#include "msg_client.h"

#include <stdbool.h>

#define SERVE_CHOICES_MAX 16 /* n per request (more: 400) */

typedef struct serve_choices_t serve_choices_t;

/* The choices of the response id (1..MSG_MAX_ID_BYTES - 3 bytes), n of them
 * (1..SERVE_CHOICES_MAX).  NULL when n or id is out of range, or out of memory. */
serve_choices_t *serve_choices_new(const char *id, int n);
/* Frees it, nulls *self_p; safe twice. */
void serve_choices_destroy(serve_choices_t **self_p);

/* n. */
int serve_choices_n(const serve_choices_t *self);

/* The generate of choice i: g (the request's, its seed already chosen) with the id
 * "<id>.<i>" and the seed g's + i (wrapping at 2^64), has_seed set.  out's pointers are
 * g's (borrowed): clear g, never out.  0, or -EINVAL when i is not a choice. */
int serve_choices_generate(const serve_choices_t *self, int i, const msg_generate_t *g,
                           msg_generate_t *out);

/* The choice of an event's id: i for "<id>.<i>", -1 when it is not one of these. */
int serve_choices_index(const serve_choices_t *self, const char *event_id);

/* Choice i ended with finish (msg_finish_t) and usage u.  0; -EINVAL (not a choice, or
 * MSG_FINISH_NONE); -EALREADY (it had ended: the event is dropped). */
int serve_choices_done(serve_choices_t *self, int i, int finish, const msg_usage_t *u);
/* Whether every choice has ended. */
bool serve_choices_all_done(const serve_choices_t *self);
/* Whether choice i has ended. */
bool serve_choices_ended(const serve_choices_t *self, int i);
/* The finish (msg_finish_t) of choice i; MSG_FINISH_NONE while it runs (or not a choice). */
int serve_choices_finish(const serve_choices_t *self, int i);

/* The usage of the whole request, from the choices ended so far: the prompt's tokens once
 * (every choice has the same prompt), the cached ones those of the choice that found the
 * fewest in the cache (the KV the request did not compute for any choice), the completion
 * tokens and the draft counts summed. */
void serve_choices_usage(const serve_choices_t *self, msg_usage_t *out);

#endif
