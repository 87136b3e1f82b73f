/* base_fifo.h - the one intrusive FIFO of strata: a struct that travels
 * through queues embeds a base_fifo_link_t, and BASE_FIFO_ENTRY turns a popped
 * link back into its struct.  No allocation; O(1) push and pop; a link is in
 * at most one queue at a time.  Not thread-safe.
 */
#ifndef BASE_FIFO_H
#define BASE_FIFO_H

#include <stddef.h>

typedef struct base_fifo_link_t {
    struct base_fifo_link_t *next; /* next in the queue, NULL at the tail */
} base_fifo_link_t;

typedef struct {
    base_fifo_link_t *head; /* popped first, NULL when empty */
    base_fifo_link_t *tail; /* pushed last */
} base_fifo_t;

/* The struct of type T whose member `member` is the link l; NULL for NULL.
 * l is evaluated once, so BASE_FIFO_ENTRY(base_fifo_pop(q), T, link) pops one. */
#define BASE_FIFO_ENTRY(l, T, member) ((T *)base_fifo_container_((l), offsetof(T, member)))

static inline void *base_fifo_container_(base_fifo_link_t *l, size_t offset) {
    return l ? (void *)((char *)l - offset) : NULL;
}

static inline void base_fifo_push(base_fifo_t *q, base_fifo_link_t *l) {
    l->next = NULL;
    if (q->tail)
        q->tail->next = l;
    else
        q->head = l;
    q->tail = l;
}

/* The head, unlinked, or NULL when q is empty. */
static inline base_fifo_link_t *base_fifo_pop(base_fifo_t *q) {
    base_fifo_link_t *l = q->head;
    if (l) {
        q->head = l->next;
        if (!q->head)
            q->tail = NULL;
        l->next = NULL;
    }
    return l;
}

static inline int base_fifo_empty(const base_fifo_t *q) {
    return q->head == NULL;
}

#endif
