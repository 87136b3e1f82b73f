/* cli_config.h - strata serve's configuration from the environment: warnings for
 * STRATA_<ACTOR>_<OPTION> variables that name no option, and --print-config
 * (docs/OPERATIONS.md, "Configuration"). */
#ifndef CLI_CONFIG_H
#define CLI_CONFIG_H

#include "actor_topology.h"

#include <stdio.h>

/* Warn on f about every STRATA_<KIND>[N]_<KEY> variable whose KEY is no option of that
 * actor kind (a typo would otherwise be ignored).  Returns how many. */
int cli_config_warn_env(FILE *f);
/* Every option of every actor of t (and the supervisor and security lines), its effective
 * value and where it came from, on f; topo_path: the topology file (NULL: thread mode);
 * flag_of: the strata serve flag that set (name, key) on the defaults line, or NULL. */
void cli_config_print(FILE *f, const actor_topology_t *t, const char *topo_path,
                      const char *(*flag_of)(const char *name, const char *key));

#endif
