/* actor_registry.h - the one table of actors: each one's name (or name pattern
 * such as worker<N>), its function, its option table and a line of purpose.
 * The runtime starts actors from it; the topology parser checks options with
 * it; `strata actor --help` and `--list-options` print it. */
#ifndef ACTOR_REGISTRY_H
#define ACTOR_REGISTRY_H

#include "actor_opts.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct actor_env_t actor_env_t;
typedef int (*actor_fn_t)(actor_env_t *env);

typedef struct {
    const char *name;        /* "frontend", or "worker<N>": "worker" followed by digits */
    actor_fn_t fn;           /* its body */
    const actor_opt_t *opts; /* its options (ends with a NULL key) */
    const char *purpose;     /* one line */
} actor_info_t;

/* Options every actor takes, read by the runtime itself, not by the actor's
 * code (faults: docs/FAULTS.md).  `strata actor --list-options` prints them
 * under the name "all". */
extern const actor_opt_t actor_runtime_opts[];
/* The declaration of key for actor a: its own table, else actor_runtime_opts;
 * NULL when neither declares it. */
const actor_opt_t *actor_info_opt(const actor_info_t *a, const char *key);

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

#endif
