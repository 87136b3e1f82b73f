/* actor_counters.c - the named counters an actor reports in stats_answer: a
 * small array searched by name (an actor has tens of them, MSG_MAX_COUNTERS at
 * most). */
#include "actor_counters.h"

#include "msg_types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[MSG_MAX_COUNTER_NAME_BYTES + 1];
    int64_t value;
} s_counter_t;

struct actor_counters_t {
    s_counter_t *items; /* (cap) first n valid */
    int n, cap;
};

actor_counters_t *actor_counters_new(void) {
    return calloc(1, sizeof(actor_counters_t));
}

void actor_counters_destroy(actor_counters_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free((*self_p)->items);
    free(*self_p);
    *self_p = NULL;
}

static s_counter_t *s_counter(actor_counters_t *self, const char *name) {
    for (int i = 0; i < self->n; i++)
        if (!strcmp(self->items[i].name, name))
            return &self->items[i];
    if (self->n == self->cap) {
        int cap = self->cap ? self->cap * 2 : 16;
        if (cap > MSG_MAX_COUNTERS)
            return NULL;
        s_counter_t *it = realloc(self->items, (size_t)cap * sizeof *it);
        if (!it)
            return NULL;
        self->items = it;
        self->cap = cap;
    }
    s_counter_t *c = &self->items[self->n++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = 0;
    return c;
}

void actor_counters_add(actor_counters_t *self, const char *name, int64_t delta) {
    s_counter_t *c = s_counter(self, name);
    if (c)
        c->value += delta;
}

void actor_counters_set(actor_counters_t *self, const char *name, int64_t value) {
    s_counter_t *c = s_counter(self, name);
    if (c)
        c->value = value;
}

int64_t actor_counters_get(const actor_counters_t *self, const char *name) {
    for (int i = 0; i < self->n; i++)
        if (!strcmp(self->items[i].name, name))
            return self->items[i].value;
    return 0;
}

int actor_counters_count(const actor_counters_t *self) {
    return self->n;
}
const char *actor_counters_name_at(const actor_counters_t *self, int i) {
    return self->items[i].name;
}
int64_t actor_counters_value_at(const actor_counters_t *self, int i) {
    return self->items[i].value;
}
