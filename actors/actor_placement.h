/* actor_placement.h - the MoE expert placement read from a topology (runtime level, no
 * sockets): which expert actors there are, which experts each one hosts statically, and
 * how many replica slots it offers.  The router, the target workers (through
 * actor_expert_client) and the expert actors all read it here, so that none of them
 * includes another actor's header (tests/integration/test_layers.py). */
#ifndef ACTOR_PLACEMENT_H
#define ACTOR_PLACEMENT_H

#include "actor_topology.h"

#include <stddef.h>
#include <stdint.h>

/* Number of expert actors of t: entries expert0, expert1, ... (contiguous). */
int actor_placement_experts(const actor_topology_t *t);
/* The static placement of t's expert actors for n_expert experts (their
 * experts= options, round-robin where unset): owners (A * n_expert bytes; A =
 * actor_placement_experts).  0, or -EINVAL with why (router_moe_static_owners). */
int actor_placement_owners(const actor_topology_t *t, int n_expert, uint8_t *owners, char *why,
                           size_t whylen);
/* The expert_slots option of expert actor a (its line, else defaults, else the table's). */
int actor_placement_slots(const actor_topology_t *t, int a);

#endif
