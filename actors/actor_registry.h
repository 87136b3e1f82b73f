/* actor_registry.h - the one table of actors: each one's name (or name pattern
 * such as worker<N>), its function, its option table, its start rank and a
 * line of purpose (rows of actor_info_t, actor_opts.h).  The registry sits
 * above every actor and the runtime: the launchers (bin/, the supervisor) look
 * an actor up here and hand its row to the runtime (actor_new), and give
 * actor_info_check_opt to the topology parser.  `strata actor --help` and
 * `--list-options` print it. */
#ifndef ACTOR_REGISTRY_H
#define ACTOR_REGISTRY_H

#include "actor_opts.h"
#include "actor_topology.h"

#include <stdbool.h>
#include <stddef.h>

/* The entry of actor name (worker3 matches worker<N>, as does "worker<N>"
 * itself), or NULL. */
const actor_info_t *actor_info_find(const char *name);
/* The i-th entry, or NULL past the last. */
const actor_info_t *actor_info_at(int i);
/* "frontend, tokenizer, ...": every name of the table, for error messages. */
const char *actor_info_names(char *buf, size_t len);

/* Check key=value for actor name ("defaults": for every actor that declares
 * key, and at least one must; options of actor_runtime_opts are every actor's).  0, or -EINVAL with
 * "name: key=value: why" in err (an unknown actor, an unknown key with the known ones, or the
 * value's fault with the allowed range or values). */
int actor_info_check_opt(const char *name, const char *key, const char *value, char *err,
                         size_t errlen);
/* (It is the topology parser's check, actor_topology_check_fn: with key NULL
 * it checks only that name is an actor.) */

/* The one start order: the actors of topo (those with host=host; host NULL:
 * all), the reserved lines left out, sorted by rank (ties: their order in
 * topo) into names (max entries; they point into topo).  Stop in the reverse
 * order.  The count, or -EINVAL (an unknown actor) / -ENOSPC with err. */
int actor_info_start_order(const actor_topology_t *topo, const char *host, const char **names,
                           int max, char *err, size_t errlen);

#endif
