/* actor_runtime_int.h - what the runtime's files share (not an actor's header: only
 * actor_runtime.c, actor_frames.c and actor_loop.c include it): the environment an actor
 * runs in, and the per-thread fault state the framing and the loop consult. */
#ifndef ACTOR_RUNTIME_INT_H
#define ACTOR_RUNTIME_INT_H

#include "actor_faults.h"
#include "actor_runtime.h"

#include <stdbool.h>

#define ACTOR_RT_TAG "actor"

/* The faults of the actor running in this thread (its "faults" option), or NULL: none.
 * Sockets belong to the thread that made them, so the state of the links they cover is per
 * thread too, and nothing here is shared.  Set by the thread shim (actor_runtime.c). */
extern _Thread_local actor_faults_t *actor_rt_faults;
/* The actor of this thread reached crash_after (thread mode): it sends nothing more and its
 * loop ends. */
extern _Thread_local bool actor_rt_crashed;
/* This process is one actor's (actor_process_run): a crash kills it. */
extern bool actor_rt_process_mode;

struct actor_env_t {
    char name[ACTOR_TOPO_NAME];   /* the actor's name */
    const actor_topology_t *topo; /* borrowed from the parent */
    const actor_info_t *info;     /* its registry entry: body and options */
    void *cfg;                    /* owned: its options, loaded (info->cfg_size bytes) */
    zsock_t *pipe;                /* the actor's end of the zactor pipe */
    bool answered;                /* READY or FAIL sent */
    bool beat;                    /* process mode: its loop heartbeats to the supervisor */
};

#endif
