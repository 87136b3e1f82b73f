/* kv_hash.c - chained XXH3 block hashes. */
#include "kv_hash.h"

#include <string.h>
#include <xxhash.h>

#define S_SEED 0x5354524154414b56ull /* "STRATAKV" */

uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens, int n) {
    uint8_t buf[8 + 4 * KV_MAX_BLOCK_TOKENS + 4];
    if (n < 0)
        n = 0;
    if (n > KV_MAX_BLOCK_TOKENS)
        n = KV_MAX_BLOCK_TOKENS;
    size_t len = 0;
    for (int i = 0; i < 8; i++)
        buf[len++] = (uint8_t)(parent >> (8 * i));
    for (int j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &tokens[j], sizeof u);
        for (int i = 0; i < 4; i++)
            buf[len++] = (uint8_t)(u >> (8 * i));
    }
    uint32_t nn = (uint32_t)n; /* the count is part of the name */
    for (int i = 0; i < 4; i++)
        buf[len++] = (uint8_t)(nn >> (8 * i));
    uint64_t h = XXH3_64bits_withSeed(buf, len, S_SEED);
    return h ? h : 1;
}

int kv_hash_chain(const int32_t *tokens, int n, int block_size, uint64_t *out) {
    if (block_size < 1 || n < 0)
        return 0;
    int nf = n / block_size;
    uint64_t h = 0;
    for (int b = 0; b < nf; b++) {
        h = kv_hash_block(h, tokens + (size_t)b * block_size, block_size);
        out[b] = h;
    }
    return nf;
}
