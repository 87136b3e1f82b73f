/* msg_any.c - the type id -> schema map, the generic msg_init/clear/encode/decode,
 * the typed msg_<name>_* wrappers (generated from MSG_TYPES) and msg_any_t.
 */
#include "msg_any.h"
#include "msg_codec.h"

#include <errno.h>
#include <string.h>

static const msg_schema_t *const s_schemas[MSG_TYPE_MAX] = {
#define MSG_X_MAP(name, NAME, id, version, family) [id] = &msg_schema_##name,
    MSG_TYPES(MSG_X_MAP)
#undef MSG_X_MAP
};

static const msg_schema_t *s_schema(int type) {
    return type > 0 && type < MSG_TYPE_MAX ? s_schemas[type] : NULL;
}

int msg_init(int type, void *m) {
    const msg_schema_t *s = s_schema(type);
    if (!s || !m)
        return -EINVAL;
    msg_codec_init(s, m);
    return 0;
}

void msg_clear(int type, void *m) {
    const msg_schema_t *s = s_schema(type);
    if (s && m)
        msg_codec_clear(s, m);
}

int msg_encode(int type, const void *m, void **buf, size_t *len, msg_err_t *err) {
    const msg_schema_t *s = s_schema(type);
    if (!s || !m || !buf || !len)
        return msg_err_set(err, -EINVAL, MSG_E_UNKNOWN_TYPE, NULL, "unknown message type %d", type);
    return msg_codec_encode(s, type, m, buf, len, err);
}

int msg_decode(int type, const void *buf, size_t len, void *m, msg_err_t *err) {
    const msg_schema_t *s = s_schema(type);
    if (!s || !m)
        return msg_err_set(err, -EINVAL, MSG_E_UNKNOWN_TYPE, NULL, "unknown message type %d", type);
    return msg_codec_decode(s, type, buf, len, m, err);
}

#define MSG_X_WRAP(name, NAME, id, version, family)                                                \
    void msg_##name##_init(msg_##name##_t *m) {                                                    \
        msg_init(MSG_##NAME, m);                                                                   \
    }                                                                                              \
    void msg_##name##_clear(msg_##name##_t *m) {                                                   \
        msg_clear(MSG_##NAME, m);                                                                  \
    }                                                                                              \
    int msg_##name##_encode(const msg_##name##_t *m, void **buf, size_t *len, msg_err_t *err) {    \
        return msg_encode(MSG_##NAME, m, buf, len, err);                                           \
    }                                                                                              \
    int msg_##name##_decode(const void *buf, size_t len, msg_##name##_t *m, msg_err_t *err) {      \
        return msg_decode(MSG_##NAME, buf, len, m, err);                                           \
    }
MSG_TYPES(MSG_X_WRAP)
#undef MSG_X_WRAP

int msg_any_decode(const void *buf, size_t len, msg_any_t *m, msg_err_t *err) {
    memset(m, 0, sizeof *m);
    int type;
    int rc = msg_peek_type(buf, len, &type, err);
    if (rc < 0)
        return rc;
    if ((rc = msg_decode(type, buf, len, &m->u, err)) < 0)
        return rc;
    m->type = type;
    return 0;
}

int msg_any_encode(const msg_any_t *m, void **buf, size_t *len, msg_err_t *err) {
    return msg_encode(m->type, &m->u, buf, len, err);
}

void msg_any_clear(msg_any_t *m) {
    msg_clear(m->type, &m->u);
    m->type = MSG_NONE;
}
