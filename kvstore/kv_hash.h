/* kv_hash.h - block identity.  A KV block is named by a 64-bit hash chained
 * over its parent block's hash and its own token ids, so a prefix has the same
 * name in every tier, worker and process (and across restarts: the hash is
 * XXH3-64 over little-endian bytes with a fixed seed, never a pointer or an
 * address).  A partial block (fewer than block_size tokens) hashes the same
 * way over the tokens it has; its token count is part of its name.
 */
#ifndef KV_HASH_H
#define KV_HASH_H

#include <stdint.h>

#define KV_MAX_BLOCK_TOKENS 256 /* largest block size accepted anywhere */

/* What travels with a block through the tiers besides its data. */
typedef struct {
    uint64_t hash;                       /* kv_hash_block(parent, tokens, n_tokens) */
    uint64_t parent;                     /* hash of the block before it; 0 for the first */
    int n_tokens;                        /* 1..block size (== block size: a full block) */
    int pin;                             /* importance 0..255 (eviction keeps it longer) */
    int32_t tokens[KV_MAX_BLOCK_TOKENS]; /* (n_tokens) */
} kv_meta_t;

/* The hash of a block of n tokens whose parent block hashes to parent (0 for
 * the first block of a sequence).  Never returns 0. */
uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens, int n);
/* The chained hashes of the first n_full = n / block_size full blocks of
 * tokens[0..n) into out (cap >= n_full).  Returns n_full. */
int kv_hash_chain(const int32_t *tokens, int n, int block_size, uint64_t *out);

#endif
