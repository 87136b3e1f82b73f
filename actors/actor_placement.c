/* actor_placement.c - the static MoE expert placement, as the topology declares it: the
 * expert actors expert0, expert1, ... and their experts= and expert_slots= options. */
#include "actor_placement.h"

#include "msg_moe.h"
#include "router_moe.h"

#include <errno.h>
#include <stdio.h>

int actor_placement_experts(const actor_topology_t *t) {
    int n = 0;
    char name[32];
    for (;; n++) {
        snprintf(name, sizeof name, "expert%d", n);
        if (!actor_topology_find(t, name))
            return n;
    }
}

int actor_placement_owners(const actor_topology_t *t, int n_expert, uint8_t *owners, char *why,
                           size_t whylen) {
    int A = actor_placement_experts(t);
    const char *specs[MSG_MAX_EXPERT_ACTORS];
    if (A < 1 || A > MSG_MAX_EXPERT_ACTORS) {
        snprintf(why, whylen, "%d expert actors (1..%d)", A, MSG_MAX_EXPERT_ACTORS);
        return -EINVAL;
    }
    for (int a = 0; a < A; a++) {
        char name[32];
        snprintf(name, sizeof name, "expert%d", a);
        specs[a] = actor_topology_opt(t, name, "experts", NULL);
    }
    return router_moe_static_owners(n_expert, A, specs, owners, why, whylen);
}

int actor_placement_slots(const actor_topology_t *t, int a) {
    char name[32];
    snprintf(name, sizeof name, "expert%d", a);
    return (int)actor_opt_parse_int(actor_topology_opt(t, name, "expert_slots", "0"));
}
