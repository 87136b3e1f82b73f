/* actor_topology.h - which actors exist, where each one listens, and their
 * options: the topology of a strata deployment (docs/TOPOLOGY.md).  Parsed
 * from a text file (one line per actor: NAME ENDPOINT [key=value...]) or built
 * in memory by `strata serve` for thread mode (inproc:// endpoints).
 * Plain data after parsing; shared read-only by the actors of one process.
 */
#ifndef ACTOR_TOPOLOGY_H
#define ACTOR_TOPOLOGY_H

#include "actor_opts.h"

#include <stdbool.h>
#include <stddef.h>

#define ACTOR_TOPO_MAX_ACTORS 64
#define ACTOR_TOPO_MAX_OPTS 32
#define ACTOR_TOPO_NAME 32
#define ACTOR_TOPO_ENDPOINT 256
#define ACTOR_TOPO_VALUE 256

typedef struct {
    char key[ACTOR_TOPO_NAME];    /* e.g. "threads" */
    char value[ACTOR_TOPO_VALUE]; /* e.g. "1" */
} actor_topo_opt_t;

/* One line: an actor (or the reserved names "supervisor", "defaults" and
 * "security"). */
typedef struct {
    char name[ACTOR_TOPO_NAME];         /* frontend, tokenizer, router, worker0.. */
    char endpoint[ACTOR_TOPO_ENDPOINT]; /* where its inbound socket binds; "-" for none */
    actor_topo_opt_t opts[ACTOR_TOPO_MAX_OPTS];
    int n_opts;
    int line;                   /* its line in the file; 0: built in memory */
    char host[ACTOR_TOPO_NAME]; /* the host it runs on (its host= key); "" when none */
} actor_topo_entry_t;

typedef struct {
    actor_topo_entry_t entries[ACTOR_TOPO_MAX_ACTORS];
    int n;
    bool hosts; /* the actors carry host= (then every one does, on tcp://) */
} actor_topology_t;

/* Options of the reserved line "security -": where the CURVE keys of tcp://
 * endpoints between actors are (docs/SECURITY.md), or that tcp is plain. */
extern const actor_opt_t actor_topology_security_opts[];
/* Options of the reserved line "supervisor ENDPOINT" (process mode). */
extern const actor_opt_t actor_topology_supervisor_opts[];
/* Where clients reach the frontend when its client= option is not set: the
 * default for the frontend and for the actors that connect to it as clients
 * (metrics, http), so that none of them includes another actor's header. */
#define ACTOR_TOPO_CLIENT_ENDPOINT "tcp://127.0.0.1:5555"
/* The supervisor's hang timeout when no line or flag sets it (ms). */
#define ACTOR_TOPO_HANG_TIMEOUT_MS "2000"

/* How the parser checks an actor line: key=value for actor name ("defaults":
 * for every actor that declares key); with key NULL only that name is an
 * actor.  0, or -EINVAL with "name: key=value: why" in err.  The registry's
 * actor_info_check_opt (actor_registry.h) is the one the launchers pass: the
 * topology knows no actor itself. */
typedef int (*actor_topology_check_fn)(const char *name, const char *key, const char *value,
                                       char *err, size_t errlen);

/* Parse the text (NUL-terminated) and check every actor line with check (NULL:
 * actor names and options are not checked).  0, or -EINVAL with "topology
 * line N: why" in err, e.g.
 * "topology line 4: worker0: threads=abc: not an integer (1..256)".  A tcp://
 * endpoint between actors needs "security - keys=DIR" or "insecure_tcp=1".
 * Placement: the key host=NAME of an actor line is not an option but the
 * entry's host; once one actor has it every actor needs it and listens on
 * tcp://, and the supervisor endpoint must be local to each host (ipc://,
 * or tcp:// on a loopback address). */
int actor_topology_parse(actor_topology_t *t, const char *text, actor_topology_check_fn check,
                         char *err, size_t errlen);
/* Read and parse a file.  0, -ENOENT (cannot read it) or -EINVAL, with err. */
int actor_topology_load(actor_topology_t *t, const char *path, actor_topology_check_fn check,
                        char *err, size_t errlen);

/* Add an entry (for in-memory topologies); NULL when full or a name repeats. */
actor_topo_entry_t *actor_topology_add(actor_topology_t *t, const char *name, const char *endpoint);
/* Set key=value on an entry (replacing an earlier value).  0 or -EINVAL/-ENOSPC. */
int actor_topology_set(actor_topo_entry_t *e, const char *key, const char *value);

/* The entry called name, or NULL. */
const actor_topo_entry_t *actor_topology_find(const actor_topology_t *t, const char *name);
/* The endpoint of name, or NULL (no such actor, or "-"). */
const char *actor_topology_endpoint(const actor_topology_t *t, const char *name);
/* Option key of actor name: set on its line, else on the "defaults" line (strata serve's
 * flags go there), else the environment's (actor_topology_env), else def (the raw text;
 * an actor gets its own options typed, with their defaults, from actor_env_cfg). */
const char *actor_topology_opt(const actor_topology_t *t, const char *name, const char *key,
                               const char *def);

/* Where an option's value came from (strata serve --print-config). */
typedef enum {
    ACTOR_OPT_FROM_DEFAULT,  /* the option table's default (def) */
    ACTOR_OPT_FROM_LINE,     /* the actor's line (a topology file, or a strata serve flag) */
    ACTOR_OPT_FROM_ENV,      /* an environment variable (its name in var) */
    ACTOR_OPT_FROM_DEFAULTS, /* the "defaults" line */
} actor_opt_from_t;
/* actor_topology_opt, and where the value came from (*from; var: the variable's name when
 * ACTOR_OPT_FROM_ENV). */
const char *actor_topology_opt_from(const actor_topology_t *t, const char *name, const char *key,
                                    const char *def, actor_opt_from_t *from, char *var,
                                    size_t varlen);
/* The environment's value of option key for actor name (docs/OPERATIONS.md):
 * STRATA_<NAME>_<KEY>, else, for a numbered actor, STRATA_<KIND>_<KEY> (worker3: WORKER), in
 * upper case; NULL when neither is set.  var (varlen bytes) gets the name found. */
const char *actor_topology_env(const char *name, const char *key, char *var, size_t varlen);
/* Number of target workers: entries named worker0, worker1, ... (contiguous). */
int actor_topology_workers(const actor_topology_t *t);
/* True when some actor of t runs on host. */
bool actor_topology_has_host(const actor_topology_t *t, const char *host);
/* True for names that are not actors ("supervisor", "defaults", "security"). */
bool actor_topology_reserved(const char *name);

#endif
