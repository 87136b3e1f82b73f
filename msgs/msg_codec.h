/* msg_codec.h - the machinery under every message type (used by the msgs sources only):
 *   - msg_rd_t: a bounded, allocation-free MessagePack pull reader;
 *   - msg_schema_t: a message described as a table of fields (key, kind, offset,
 *     limits), from which one generic engine decodes with full validation, encodes
 *     (with msgpack-c's packer), and frees.
 * A family source declares one schema per type; msg_any.c maps type ids to schemas.
 */
#ifndef MSG_CODEC_H
#define MSG_CODEC_H

#include "msg_types.h"

#include <stddef.h>
#include <stdint.h>

/* ---- pull reader */

typedef enum {
    MSG_V_NIL,
    MSG_V_BOOL,
    MSG_V_INT,
    MSG_V_FLOAT,
    MSG_V_STR,
    MSG_V_BIN,
    MSG_V_ARRAY,
    MSG_V_MAP,
    MSG_V_EXT
} msg_vkind_t;

/* one MessagePack value header (for str/bin/ext also its payload) */
typedef struct {
    int kind;         /* msg_vkind_t */
    bool b;           /* BOOL */
    bool neg;         /* INT: negative (then i is the value), else u is */
    int64_t i;        /* INT when neg */
    uint64_t u;       /* INT when !neg */
    double f;         /* FLOAT (float32 widened) */
    const uint8_t *p; /* STR/BIN/EXT payload */
    uint32_t n;       /* STR/BIN/EXT bytes, ARRAY elements, MAP pairs */
} msg_val_t;

typedef struct {
    const uint8_t *start; /* the frame */
    const uint8_t *p;     /* next byte */
    const uint8_t *end;   /* one past the frame */
} msg_rd_t;

void msg_rd_init(msg_rd_t *rd, const void *buf, size_t len);
/* Read the next value header into *v.  For ARRAY/MAP the elements follow (and are
 * checked to fit: n elements need >= n bytes).  0, or -EBADMSG with *err set. */
int msg_rd_next(msg_rd_t *rd, msg_val_t *v, msg_err_t *err);
/* Skip the elements of a container whose header v was just read (depth = its depth). */
int msg_rd_skip_body(msg_rd_t *rd, const msg_val_t *v, int depth, msg_err_t *err);
/* "nil", "bool", "int", "float", "str", "bin", "array", "map", "ext" */
const char *msg_vkind_name(int kind);

/* Fill *err (when not NULL) and return code. field may be NULL. */
int msg_err_set(msg_err_t *err, int code, int kind, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- schemas */

typedef enum {
    MSG_F_U64,      /* uint64_t; any int >= 0 */
    MSG_F_I64,      /* int64_t in [lo, hi] */
    MSG_F_INT,      /* int in [lo, hi] */
    MSG_F_I32,      /* int32_t in [lo, hi] */
    MSG_F_FLOAT,    /* float in [flo, fhi] (int accepted); MSG_FF_LO_OPEN: (flo, fhi] */
    MSG_F_DOUBLE,   /* double in [flo, fhi] (int accepted) */
    MSG_F_BOOL,     /* bool */
    MSG_F_STR_FIX,  /* char[max + 1] at off; min..max bytes; no NUL inside */
    MSG_F_STR_HEAP, /* char * at off, size_t length at off2; min..max bytes */
    MSG_F_STRS_FIX, /* array of str into char[max_count][max + 1] at off, int count at off2 */
    MSG_F_BIN_I32,  /* bin of int32 LE into int32_t * at off, int count at off2; each in [lo, hi] */
    MSG_F_BIN_F32,  /* bin of float32 LE into float * at off, int count at off2; each finite */
    MSG_F_ENUM,     /* str, one of names[0..n_names) (NULL holes not accepted) -> int at off */
    MSG_F_COUNTERS, /* map str -> int64 into msg_counter_t * at off, int count at off2 */
    MSG_F_STRUCT,   /* nested map described by sub, stored at off */
    MSG_F_ARRAY,    /* array of maps (sub) into a malloc'd array at off, int count at off2 */
    MSG_F_INLINE    /* sub's fields live in this same map; stored at off */
} msg_fkind_t;

enum {
    MSG_FF_REQUIRED = 1,   /* missing -> error */
    MSG_FF_NIL_OK = 2,     /* nil accepted (leaves the default); encoder writes nil for "" */
    MSG_FF_OMIT_EMPTY = 4, /* encoder omits the key when NULL / zero entries / false */
    MSG_FF_LO_OPEN = 8,    /* float range is (flo, fhi] */
    MSG_FF_HAS = 16        /* scalar kinds: bool at off2 says the key was present; the
                              encoder writes the key only when that bool is true */
};

typedef struct msg_schema_s msg_schema_t;

typedef struct {
    const char *key;
    int kind;                 /* msg_fkind_t */
    int flags;                /* MSG_FF_* */
    size_t off;               /* offset of the value in the struct */
    size_t off2;              /* offset of the length / count, where the kind has one */
    int64_t lo, hi;           /* integer range (element range for BIN_I32) */
    double flo, fhi;          /* float range */
    size_t min, max;          /* bytes of a string, or entries of an array/bin/map */
    size_t max_count;         /* STRS_FIX: entries */
    const char *const *names; /* ENUM */
    int n_names;
    const msg_schema_t *sub; /* STRUCT / ARRAY / INLINE */
} msg_field_t;

struct msg_schema_s {
    const char *name; /* for messages; "" for nested maps */
    size_t size;      /* sizeof the struct */
    const msg_field_t *fields;
    int n_fields;
    void (*init)(void *m); /* defaults after zeroing; may be NULL */
    /* cross-field rules, after every field decoded; 0 or msg_err_set(...); may be NULL */
    int (*check)(const void *m, msg_err_t *err);
};

#define MSG_NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Zero m and apply the schema's defaults (recursively for STRUCT / INLINE). */
void msg_codec_init(const msg_schema_t *s, void *m);
/* Free everything a decode allocated, then init.  Safe twice. */
void msg_codec_clear(const msg_schema_t *s, void *m);
/* Decode a whole frame of message type `type` (checks "type", "v", the frame limit). */
int msg_codec_decode(const msg_schema_t *s, int type, const void *buf, size_t len, void *m,
                     msg_err_t *err);
/* Encode m; validates first by decoding the result (so an encoder never writes what a
 * decoder rejects): -EINVAL with *err on a violation. */
int msg_codec_encode(const msg_schema_t *s, int type, const void *m, void **buf, size_t *len,
                     msg_err_t *err);

/* the names of the enums on the wire, indexed by value (msg_finish_names[0] is NULL:
 * "running" never travels as a string) */
extern const char *const msg_finish_names[5];
extern const char *const msg_code_names[6];
extern const char *const msg_state_names[4];

/* a logit_bias entry {token, bias}, and the rule across entries (each token once) */
extern const msg_schema_t msg_schema_logit_bias;
int msg_logit_bias_check(const msg_logit_bias_t *b, int n, msg_err_t *err);

/* the sampling keys, shared by generate and work_request (struct T, members sampling,
 * logit_bias, n_logit_bias, stop, n_stop, stream, max_tokens) */
#define MSG_SAMPLING_FIELDS(T)                                                                     \
    {.key = "temperature",                                                                         \
     .kind = MSG_F_FLOAT,                                                                          \
     .off = offsetof(T, sampling.temperature),                                                     \
     .flo = 0,                                                                                     \
     .fhi = 100},                                                                                  \
        {.key = "top_k",                                                                           \
         .kind = MSG_F_INT,                                                                        \
         .off = offsetof(T, sampling.top_k),                                                       \
         .lo = 0,                                                                                  \
         .hi = MSG_MAX_TOP_K},                                                                     \
        {.key = "top_p",                                                                           \
         .kind = MSG_F_FLOAT,                                                                      \
         .flags = MSG_FF_LO_OPEN,                                                                  \
         .off = offsetof(T, sampling.top_p),                                                       \
         .flo = 0,                                                                                 \
         .fhi = 1},                                                                                \
        {.key = "min_p",                                                                           \
         .kind = MSG_F_FLOAT,                                                                      \
         .off = offsetof(T, sampling.min_p),                                                       \
         .flo = 0,                                                                                 \
         .fhi = 1},                                                                                \
        {.key = "repeat_penalty",                                                                  \
         .kind = MSG_F_FLOAT,                                                                      \
         .flags = MSG_FF_LO_OPEN,                                                                  \
         .off = offsetof(T, sampling.repeat_penalty),                                              \
         .flo = 0,                                                                                 \
         .fhi = 10},                                                                               \
        {.key = "repeat_last_n",                                                                   \
         .kind = MSG_F_INT,                                                                        \
         .off = offsetof(T, sampling.repeat_last_n),                                               \
         .lo = 0,                                                                                  \
         .hi = MSG_MAX_REPEAT_LAST_N},                                                             \
        {.key = "presence_penalty",                                                                \
         .kind = MSG_F_FLOAT,                                                                      \
         .off = offsetof(T, sampling.presence_penalty),                                            \
         .flo = -2,                                                                                \
         .fhi = 2},                                                                                \
        {.key = "frequency_penalty",                                                               \
         .kind = MSG_F_FLOAT,                                                                      \
         .off = offsetof(T, sampling.frequency_penalty),                                           \
         .flo = -2,                                                                                \
         .fhi = 2},                                                                                \
        {.key = "logit_bias",                                                                      \
         .kind = MSG_F_ARRAY,                                                                      \
         .flags = MSG_FF_OMIT_EMPTY,                                                               \
         .off = offsetof(T, logit_bias),                                                           \
         .off2 = offsetof(T, n_logit_bias),                                                        \
         .max = MSG_MAX_LOGIT_BIAS,                                                                \
         .sub = &msg_schema_logit_bias},                                                           \
        {.key = "stop",                                                                            \
         .kind = MSG_F_STRS_FIX,                                                                   \
         .flags = MSG_FF_OMIT_EMPTY,                                                               \
         .off = offsetof(T, stop),                                                                 \
         .off2 = offsetof(T, n_stop),                                                              \
         .min = 1,                                                                                 \
         .max = MSG_MAX_STOP_BYTES,                                                                \
         .max_count = MSG_MAX_STOP},                                                               \
        {.key = "stream", .kind = MSG_F_BOOL, .off = offsetof(T, stream)}, {                       \
        .key = "max_tokens", .kind = MSG_F_INT, .off = offsetof(T, max_tokens), .lo = 1,           \
        .hi = MSG_MAX_TOKENS                                                                       \
    }

/* one schema per message type, defined in the family sources */
#define MSG_X_SCHEMA(name, NAME, id, version, family) extern const msg_schema_t msg_schema_##name;
MSG_TYPES(MSG_X_SCHEMA)
#undef MSG_X_SCHEMA

#endif
