/* msg_types.c - the message list as data (names, versions, families), the names of
 * the enums that travel as strings, and the envelope readers msg_peek_type and
 * msg_peek_id that let a receiver dispatch before decoding.
 */
#include "msg_types.h"
#include "msg_codec.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name; /* NULL for an unused id */
    int version;
    int family;
} s_type_info_t;

static const s_type_info_t s_types[MSG_TYPE_MAX] = {
#define MSG_X_INFO(name, NAME, id, version, family) [id] = {#name, version, family},
    MSG_TYPES(MSG_X_INFO)
#undef MSG_X_INFO
};

const char *msg_type_name(int type) {
    return type > 0 && type < MSG_TYPE_MAX ? s_types[type].name : NULL;
}

int msg_type_from_name(const char *name, size_t n) {
    for (int t = 1; t < MSG_TYPE_MAX; t++)
        if (s_types[t].name && strlen(s_types[t].name) == n && !memcmp(s_types[t].name, name, n))
            return t;
    return MSG_NONE;
}

int msg_type_version(int type) {
    return msg_type_name(type) ? s_types[type].version : 0;
}

int msg_type_family(int type) {
    return msg_type_name(type) ? s_types[type].family : 0;
}

size_t msg_type_max_frame(int type) {
    return msg_type_family(type) == MSG_FAMILY_CLIENT ? MSG_MAX_CLIENT_FRAME
                                                      : MSG_MAX_INTERNAL_FRAME;
}

const char *msg_err_kind_name(int kind) {
    static const char *const names[MSG_E_COUNT] = {
        [MSG_E_OK] = "ok",
        [MSG_E_TOO_BIG] = "too_big",
        [MSG_E_MALFORMED] = "malformed",
        [MSG_E_NOT_MAP] = "not_map",
        [MSG_E_UNKNOWN_TYPE] = "unknown_type",
        [MSG_E_WRONG_TYPE] = "wrong_type",
        [MSG_E_VERSION] = "bad_version",
        [MSG_E_MISSING] = "missing_field",
        [MSG_E_BAD_TYPE] = "bad_type",
        [MSG_E_RANGE] = "out_of_range",
        [MSG_E_TOO_LONG] = "too_long",
        [MSG_E_INVALID] = "invalid",
        [MSG_E_NOMEM] = "nomem",
        [MSG_E_UTF8] = "bad_utf8",
        [MSG_E_DUPLICATE] = "duplicate_key",
    };
    return kind >= 0 && kind < MSG_E_COUNT ? names[kind] : "?";
}

bool msg_utf8_valid(const void *buf, size_t n, size_t *bad_at) {
    const uint8_t *p = buf;
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        /* the lead byte fixes the length and the range of the first continuation byte;
         * the narrowed ranges are what rule out overlong forms (E0, F0), surrogates (ED)
         * and code points above U+10FFFF (F4) */
        int len;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            len = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
        } else
            goto bad; /* 80..C1 (continuation or overlong 2-byte lead), F5..FF */
        if (n - i < (size_t)len)
            goto bad; /* truncated */
        if (p[i + 1] < lo || p[i + 1] > hi)
            goto bad;
        for (int k = 2; k < len; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xbf)
                goto bad;
        i += (size_t)len;
    }
    return true;
bad:
    if (bad_at)
        *bad_at = i;
    return false;
}

const char *const msg_finish_names[5] = {NULL, "eos", "length", "stop", "cancelled"};
const char *const msg_code_names[6] = {
    "bad_request", "overloaded", "not_found", "internal", "context_length_exceeded", "draining"};
const char *const msg_state_names[4] = {"ready", "starting", "unhealthy", "restarting"};

const char *msg_finish_name(int finish) {
    if (finish == MSG_FINISH_NONE)
        return "";
    return finish > 0 && finish <= MSG_FINISH_CANCELLED ? msg_finish_names[finish] : NULL;
}

const char *msg_code_name(int code) {
    return code >= 0 && code <= MSG_CODE_DRAINING ? msg_code_names[code] : NULL;
}

const char *msg_state_name(int state) {
    return state >= 0 && state <= MSG_STATE_RESTARTING ? msg_state_names[state] : NULL;
}

/* printable copy of an untrusted string, for error messages */
static void s_shown(char *out, size_t cap, const uint8_t *p, size_t n) {
    size_t k = n < cap - 4 ? n : cap - 4;
    for (size_t i = 0; i < k; i++)
        out[i] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'' ? (char)p[i] : '?';
    strcpy(out + k, n > k ? "..." : "");
}

int msg_peek_type(const void *buf, size_t len, int *type, msg_err_t *err) {
    msg_err_t local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    *type = MSG_NONE;
    if (len > MSG_MAX_INTERNAL_FRAME)
        return msg_err_set(err, -EMSGSIZE, MSG_E_TOO_BIG, NULL,
                           "frame of %zu bytes exceeds the limit of %u bytes", len,
                           MSG_MAX_INTERNAL_FRAME);
    msg_rd_t rd;
    msg_rd_init(&rd, buf, len);
    msg_val_t top;
    int rc = msg_rd_next(&rd, &top, err);
    if (rc < 0)
        return rc;
    if (top.kind != MSG_V_MAP) {
        /* a non-map might still be malformed: report malformed first */
        if ((rc = msg_rd_skip_body(&rd, &top, 1, err)) < 0)
            return rc;
        return msg_err_set(err, -EPROTO, MSG_E_NOT_MAP, NULL,
                           "a message must be a MessagePack map, got %s", msg_vkind_name(top.kind));
    }
    msg_val_t tv = {0}, vv = {0};
    bool have_t = false, have_v = false;
    for (uint32_t i = 0; i < top.n; i++) {
        msg_val_t k, v;
        if ((rc = msg_rd_next(&rd, &k, err)) < 0 || (rc = msg_rd_next(&rd, &v, err)) < 0 ||
            (rc = msg_rd_skip_body(&rd, &v, 1, err)) < 0)
            return rc;
        if (k.kind == MSG_V_STR && k.n == 4 && !memcmp(k.p, "type", 4)) {
            tv = v;
            have_t = true;
        } else if (k.kind == MSG_V_STR && k.n == 1 && k.p[0] == 'v') {
            vv = v;
            have_v = true;
        }
    }
    if (rd.p != rd.end)
        return msg_err_set(err, -EBADMSG, MSG_E_MALFORMED, NULL,
                           "%zu trailing bytes after the message map", (size_t)(rd.end - rd.p));
    if (!have_t)
        return msg_err_set(err, -EPROTO, MSG_E_UNKNOWN_TYPE, "type",
                           "missing required field 'type'");
    if (tv.kind != MSG_V_STR)
        return msg_err_set(err, -EPROTO, MSG_E_UNKNOWN_TYPE, "type",
                           "field 'type': expected str, got %s", msg_vkind_name(tv.kind));
    int t = msg_type_from_name((const char *)tv.p, tv.n);
    if (t == MSG_NONE) {
        char shown[40];
        s_shown(shown, sizeof shown, tv.p, tv.n);
        return msg_err_set(err, -EPROTO, MSG_E_UNKNOWN_TYPE, "type", "unknown message type '%s'",
                           shown);
    }
    if (len > msg_type_max_frame(t))
        return msg_err_set(err, -EMSGSIZE, MSG_E_TOO_BIG, NULL,
                           "frame of %zu bytes exceeds the limit of %zu bytes for '%s'", len,
                           msg_type_max_frame(t), msg_type_name(t));
    if (have_v) {
        if (vv.kind != MSG_V_INT)
            return msg_err_set(err, -EPROTONOSUPPORT, MSG_E_VERSION, "v",
                               "field 'v': expected int, got %s", msg_vkind_name(vv.kind));
        if (vv.neg || vv.u != (uint64_t)msg_type_version(t))
            return msg_err_set(
                err, -EPROTONOSUPPORT, MSG_E_VERSION, "v",
                "unsupported version %s%llu of '%s' (this build speaks %d)", vv.neg ? "-" : "",
                vv.neg ? (unsigned long long)(-(vv.i + 1)) + 1 : (unsigned long long)vv.u,
                msg_type_name(t), msg_type_version(t));
    }
    *type = t;
    return 0;
}

int msg_peek_id(const void *buf, size_t len, char *id, size_t cap) {
    if (cap)
        id[0] = 0;
    if (len > MSG_MAX_INTERNAL_FRAME || cap == 0)
        return -EPROTO;
    msg_rd_t rd;
    msg_rd_init(&rd, buf, len);
    msg_val_t top;
    if (msg_rd_next(&rd, &top, NULL) < 0 || top.kind != MSG_V_MAP)
        return -EPROTO;
    /* every key is read: an "id" given twice is not echoed (which one would it be?) */
    bool found = false;
    for (uint32_t i = 0; i < top.n; i++) {
        msg_val_t k, v;
        if (msg_rd_next(&rd, &k, NULL) < 0 || msg_rd_next(&rd, &v, NULL) < 0)
            goto fail;
        if (k.kind == MSG_V_STR && k.n == 2 && !memcmp(k.p, "id", 2)) {
            /* an id the error event could not carry is no id: the encoder would refuse it */
            if (found || v.kind != MSG_V_STR || v.n == 0 || v.n > MSG_MAX_ID_BYTES || v.n >= cap ||
                memchr(v.p, 0, v.n) || !msg_utf8_valid(v.p, v.n, NULL))
                goto fail;
            memcpy(id, v.p, v.n);
            id[v.n] = 0;
            found = true;
        }
        if (msg_rd_skip_body(&rd, &v, 1, NULL) < 0)
            goto fail;
    }
    if (found)
        return 0;
fail:
    id[0] = 0;
    return -EPROTO;
}

msg_sampling_t msg_sampling_defaults(void) {
    return (msg_sampling_t){.temperature = 0.8f,
                            .top_k = 40,
                            .top_p = 0.95f,
                            .min_p = 0.05f,
                            .repeat_penalty = 1.0f,
                            .repeat_last_n = 64,
                            .seed = 0,
                            .presence_penalty = 0,
                            .frequency_penalty = 0};
}

void msg_trace_step_vfill(msg_trace_step_t *st, const char *actor, const char *what,
                          int64_t start_us, int64_t end_us, const char *fmt, va_list ap) {
    memset(st, 0, sizeof *st);
    snprintf(st->actor, sizeof st->actor, "%s", actor);
    snprintf(st->what, sizeof st->what, "%s", what);
    vsnprintf(st->why, sizeof st->why, fmt, ap);
    st->t_us = start_us > 0 ? start_us : 0;
    st->dur_us = end_us > st->t_us ? end_us - st->t_us : 0;
}

void msg_trace_step_fill(msg_trace_step_t *st, const char *actor, const char *what,
                         int64_t start_us, int64_t end_us, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    msg_trace_step_vfill(st, actor, what, start_us, end_us, fmt, ap);
    va_end(ap);
}
