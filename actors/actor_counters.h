/* actor_counters.h - named counters (short dotted words to int64), what an
 * actor reports in stats_answer.  Owned by one actor's thread; not
 * thread-safe.  Below the runtime: the loop and the fault injection both
 * write them. */
#ifndef ACTOR_COUNTERS_H
#define ACTOR_COUNTERS_H

#include <stdint.h>

typedef struct actor_counters_t actor_counters_t;

actor_counters_t *actor_counters_new(void);
void actor_counters_destroy(actor_counters_t **self_p);
/* counter name += delta (created at 0).  Names are short dotted words. */
void actor_counters_add(actor_counters_t *self, const char *name, int64_t delta);
void actor_counters_set(actor_counters_t *self, const char *name, int64_t value);
int64_t actor_counters_get(const actor_counters_t *self, const char *name);
int actor_counters_count(const actor_counters_t *self);
const char *actor_counters_name_at(const actor_counters_t *self, int i);
int64_t actor_counters_value_at(const actor_counters_t *self, int i);

#endif
