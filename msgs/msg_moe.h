/* msg_moe.h - the MoE expert family: target workers <-> expert actors (the data
 * path: one expert_request per expert actor per MoE layer per step, answered by
 * one expert_reply), expert actors -> router (expert_load), router -> workers and
 * expert actors (expert_table: the dispatch table), supervisor -> router
 * (expert_down).  Hidden-state rows never travel inside MessagePack: they follow
 * the expert_request / expert_reply header as one raw frame of n_rows * d_model
 * values in the header's dtype (f32, or f16: IEEE half, little-endian).
 */
#ifndef MSG_MOE_H
#define MSG_MOE_H

#include "msg_types.h"

#define MSG_MAX_EXPERTS 256       /* experts per MoE layer */
#define MSG_MAX_EXPERT_ACTORS 64  /* expert actors in a topology */
#define MSG_MAX_EXPERT_ROWS 65536 /* routed rows in one expert_request */
#define MSG_MAX_EXPERT_DMODEL 65536

/* dtype of the raw rows */
typedef enum { MSG_DTYPE_F32 = 0, MSG_DTYPE_F16 = 1 } msg_dtype_t;
extern const char *const msg_dtype_names[2]; /* "f32", "f16" */

/* status of an expert_reply */
typedef enum {
    MSG_EXPERT_OK = 0,         /* "ok": y rows follow */
    MSG_EXPERT_BAD = 1,        /* "bad_request": layer, expert, d_model or payload wrong */
    MSG_EXPERT_NOT_HOSTED = 2, /* "not_hosted": an expert this actor may not serve */
    MSG_EXPERT_FAILED = 3      /* "failed": the computation failed (out of memory) */
} msg_expert_status_t;
extern const char *const msg_expert_status_names[4];

/* 37 expert_request (target worker -> expert actor): the rows of one MoE layer's
 * step routed to experts this actor hosts.  Followed by one raw frame of
 * (n_rows, d_model) h rows in dtype. */
typedef struct {
    uint64_t seq;     /* unique per frame the worker sends; echoed in the reply */
    int worker;       /* reply to this target worker */
    int layer;        /* MoE layer */
    int d_model;      /* values per row */
    int dtype;        /* msg_dtype_t of the raw rows (and of the reply's) */
    int32_t *experts; /* (n_rows) the expert of each row, 0..MSG_MAX_EXPERTS-1 */
    int n_rows;       /* 1..MSG_MAX_EXPERT_ROWS */
    uint64_t table;   /* the dispatch table version the worker chose with (0: static) */
} msg_expert_request_t;

/* 38 expert_reply (expert actor -> target worker).  With status ok followed by one
 * raw frame of (n_rows, d_model) y rows (expert output without the gate weight)
 * in the request's dtype, in the request's row order. */
typedef struct {
    uint64_t seq; /* the request's */
    int expert;   /* the answering expert actor's index */
    int layer;
    int n_rows;      /* the request's */
    int dtype;       /* the request's */
    int status;      /* msg_expert_status_t */
    int64_t busy_us; /* compute time of this request */
} msg_expert_reply_t;

/* 39 expert_load (expert actor -> router), every ~150 ms: what it served since its
 * last report, per expert of the model. */
typedef struct {
    int expert;    /* the expert actor's index */
    int n_expert;  /* experts per layer of its model (E) */
    int32_t *rows; /* (n_rows_n = E) rows served per expert since the last report */
    int n_rows_n;
    int frames;        /* expert_requests served since the last report */
    int queue;         /* requests that waited behind another one (a backlog measure) */
    int64_t busy_us;   /* compute time since the last report */
    int64_t period_us; /* time since the last report */
    uint64_t table;    /* the table version it applies */
} msg_expert_load_t;

/* 47 expert_table (router -> target workers and expert actors): the dispatch table.
 * hosts[a * n_expert + e] != 0: expert actor a serves expert e (its static
 * experts and the replicas given to it).  cap[e]: expert e's capacity factor in
 * thousandths (1250 = 1.25; 0: no limit): in a step of n rows one replica of e
 * takes at most max(cap_min, ceil(cap[e] / 1000 * n / E)) rows.  load[a]: actor
 * a's reported backlog in rows. */
typedef struct {
    uint64_t version; /* increases with every change; workers keep the newest */
    int n_expert;     /* E */
    int n_actors;     /* A */
    bool load_aware;  /* false: moe_dispatch=static (primary owner, no capacity) */
    int32_t *hosts;   /* (n_hosts = A * E) 0/1 */
    int n_hosts;
    int32_t *cap; /* (n_cap = E) capacity factors in thousandths, 0: unlimited */
    int n_cap;
    int32_t *load; /* (n_load = A) backlog of each actor in rows */
    int n_load;
    int32_t *alive; /* (n_alive = A) 0/1 */
    int n_alive;
    int cap_min; /* capacity floor in rows per replica per step */
} msg_expert_table_t;

/* 48 expert_down (supervisor -> router): expert actor N died. */
typedef struct {
    int expert; /* >= 0 */
} msg_expert_down_t;

MSG_DECLARE_CODEC(expert_request)
MSG_DECLARE_CODEC(expert_reply)
MSG_DECLARE_CODEC(expert_load)
MSG_DECLARE_CODEC(expert_table)
MSG_DECLARE_CODEC(expert_down)

#endif
