/* actor_supervisor_int.h - what actor_supervisor.c (processes, heartbeats, restarts)
 * and actor_supervisor_ctl.c (the control endpoint, planned restarts) share: the
 * supervisor's state.  Not for use outside these two files. */
#ifndef ACTOR_SUPERVISOR_INT_H
#define ACTOR_SUPERVISOR_INT_H

#include "actor_supervisor.h"

#include "actor_curve.h"
#include "actor_runtime.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ACTOR_SUP_IDENT 256 /* bytes of a ctl client's ROUTER identity */

typedef struct {
    char name[ACTOR_TOPO_NAME]; /* the actor */
    pid_t pid;                  /* its process; 0 when not running */
    bool ready;                 /* reported ready since its last start */
    bool hung;                  /* killed for a missed heartbeat, not reaped yet */
    bool planned;               /* stopped for a planned restart: restart at once, no backoff */
    uint64_t started_us;        /* last start */
    uint64_t beat_us;           /* its last heartbeat (or its ready report) */
    uint64_t restart_at_us;     /* when to restart it (0: not scheduled) */
    uint64_t backoff_us;        /* next delay */
    int restarts;               /* restarts of this actor, planned ones too */
} actor_sup_child_t;

/* The phases of one actor's planned restart (`strata ctl restart`). */
typedef enum {
    ACTOR_SUP_IDLE = 0, /* no restart under way */
    ACTOR_SUP_DRAIN,    /* a worker: the router sends it nothing new; wait for worker_idle */
    ACTOR_SUP_STOP,     /* SIGTERM sent; SIGKILL at kill_at_us */
    ACTOR_SUP_START,    /* exited; wait for the new process's ready report */
} actor_sup_phase_t;

/* The planned restart under way: one actor, or every actor in turn, for one client. */
typedef struct {
    actor_sup_phase_t phase;
    uint8_t ident[ACTOR_SUP_IDENT]; /* the client's ROUTER identity */
    size_t ident_len;
    bool req;                         /* a REQ client (an empty delimiter frame): one answer only */
    int order[ACTOR_TOPO_MAX_ACTORS]; /* kids to restart, in turn */
    int n, at;                        /* how many, and the one under way */
    int64_t grace_ms;                 /* a worker's drain */
    uint64_t op_us;                   /* the command's start */
    uint64_t actor_us;                /* this actor's start */
    uint64_t phase_us;                /* this phase's start */
    uint64_t kill_at_us;              /* STOP: SIGKILL then */
    uint64_t said_us;                 /* the last reply sent (a keep-alive each second) */
    bool idle;                        /* DRAIN: the router said worker_idle */
    pid_t old_pid;                    /* the process being replaced */
} actor_sup_op_t;

struct actor_supervisor_t {
    const actor_topology_t *topo; /* borrowed */
    char path[1024];              /* topology file for the children */
    char exe[1024];               /* the strata binary */
    actor_curve_t *curve;         /* this process's ZAP handler (CURVE on tcp://) */
    zsock_t *ctl;                 /* PULL: ready reports, heartbeats, worker_idle */
    zsock_t *to_router;           /* PUSH: worker_down, worker_drain */
    zsock_t *to_front;            /* PUSH: worker_down (health says "restarting") */
    zsock_t *cmd;                 /* ROUTER: `strata ctl` (NULL until actor_supervisor_ctl) */
    char cmd_file[1024];          /* its ipc:// socket file, removed at the end; or "" */
    actor_sup_child_t *kids;      /* (n) the actors of this host */
    int n;
    int restarts;
    int hangs;           /* actors killed for a missed heartbeat */
    int hang_timeout_ms; /* 0: no hang detection */
    bool draining;       /* actor_supervisor_drain: the frontend is not restarted */
    int64_t drain_ms;    /* serve's --drain-timeout: a planned worker drain's default grace */
    int64_t stop_ms;     /* `strata ctl drain` asked to drain with this grace; -1: not asked */
    actor_sup_op_t op;   /* the planned restart under way */
};

/* The control endpoint's part of one supervision round: read the commands waiting,
 * advance the planned restart (actor_supervisor_ctl.c). */
void actor_sup_ctl_poll(actor_supervisor_t *self);
/* The router says worker w holds no request any more. */
void actor_sup_ctl_idle(actor_supervisor_t *self, int w);

#endif
