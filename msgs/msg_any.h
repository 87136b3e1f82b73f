/* msg_any.h - every message family in one include, and msg_any_t: a tagged union of
 * all message structs, for receivers that decode whatever arrives:
 *
 *     msg_any_t m;
 *     msg_err_t err;
 *     if (msg_any_decode(buf, len, &m, &err) < 0) { count err.kind; reply err.msg; }
 *     else switch (m.type) { case MSG_GENERATE: use m.u.generate; ... }
 *     msg_any_clear(&m);
 */
#ifndef MSG_ANY_H
#define MSG_ANY_H

#include "msg_cache.h"
#include "msg_client.h"
#include "msg_ctl.h"
#include "msg_embed.h"
#include "msg_internal.h"
#include "msg_kv.h"
#include "msg_moe.h"
#include "msg_spec.h"
#include "msg_types.h"

typedef struct {
    int type; /* msg_type_t; MSG_NONE when empty */
    union {
#define MSG_X_UNION(name, NAME, id, version, family) msg_##name##_t name;
        MSG_TYPES(MSG_X_UNION)
#undef MSG_X_UNION
    } u;
} msg_any_t;

/* Peek the type, then decode into m->u.<name>.  0, or a negative errno with *err set
 * (m->type = MSG_NONE, nothing to free). */
int msg_any_decode(const void *buf, size_t len, msg_any_t *m, msg_err_t *err);
/* Encode m->u.<name> as m->type; same contract as msg_encode. */
int msg_any_encode(const msg_any_t *m, void **buf, size_t *len, msg_err_t *err);
/* Free a decoded message; m->type becomes MSG_NONE.  Safe twice. */
void msg_any_clear(msg_any_t *m);

#endif
