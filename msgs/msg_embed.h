/* msg_embed.h - the embeddings family: a client's `embed` (one input: text, or token
 * ids) answered by `embedding` (the vector), and the two internal messages that carry it
 * frontend -> tokenizer (embed_request; the tokenizer turns it into a work_request with
 * `embed` set, which the router dispatches like any other) and worker -> frontend
 * (work_embedding).  Plain structs; same ownership rules as msg_client.h.  The vector
 * is the mean over the input's positions of the final hidden state (after the final
 * norm), L2-normalised; it travels as a bin of float32 little-endian. */
#ifndef MSG_EMBED_H
#define MSG_EMBED_H

#include "msg_types.h"

/* 12 embed (client -> server): exactly one of prompt / tokens */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1]; /* required, 1..64 bytes: the client's request id */
    char *prompt;                  /* text, tokenized as is (with the model's BOS), or NULL */
    size_t prompt_len;             /* 1..MSG_MAX_PROMPT_BYTES when given */
    int32_t *tokens;               /* (n_tokens) token ids instead of text, or NULL */
    int n_tokens;                  /* 0 (none), or 1..MSG_MAX_EMBED_TOKENS */
} msg_embed_t;

/* 13 embedding (server -> client): the answer to an embed */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1];
    float *embedding;  /* (dim) unit length */
    int dim;           /* the model's width, 1..MSG_MAX_EMBED_DIM */
    int prompt_tokens; /* positions pooled */
} msg_embedding_t;

/* 49 embed_request (frontend -> tokenizer): an embed under a server-side rid */
typedef struct {
    uint64_t rid;
    char *prompt; /* as in embed */
    size_t prompt_len;
    int32_t *tokens;
    int n_tokens;
    uint64_t t_arrival_us;
} msg_embed_request_t;

/* 50 work_embedding (worker -> frontend): the vector of request rid */
typedef struct {
    uint64_t rid;
    int worker; /* the sending worker's index */
    float *embedding;
    int dim;
    int prompt_tokens;
} msg_work_embedding_t;

MSG_DECLARE_CODEC(embed)
MSG_DECLARE_CODEC(embedding)
MSG_DECLARE_CODEC(embed_request)
MSG_DECLARE_CODEC(work_embedding)

#endif
