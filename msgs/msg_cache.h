/* msg_cache.h - the answer cache family (docs/SEMCACHE.md): a client's knowledge-base
 * record (`cache_put`) and invalidation (`cache_invalidate`), answered by `cache_reply`;
 * and the internal messages between the frontend and the semcache actor: the lookup of a
 * request before it is routed (cache_lookup -> cache_answer), a finished answer or a
 * knowledge-base record to keep (cache_store), an invalidation (cache_drop), and the
 * answer to a client's record or invalidation (cache_done).  Plain structs; the same
 * ownership rules as msg_client.h. */
#ifndef MSG_CACHE_H
#define MSG_CACHE_H

#include "msg_types.h"

#define MSG_MAX_CACHE_TAGS_BYTES 128 /* comma-separated tags of an entry */
#define MSG_MAX_CACHE_TTL_S 31536000 /* a year */
#define MSG_MAX_CLIENT_HEX 512       /* a client's ROUTER identity, in hex */

/* what answered (cache_answer.kind, done.cache) */
typedef enum {
    MSG_CACHE_MISS = 0,
    MSG_CACHE_EXACT = 1,    /* the same request, in the same context */
    MSG_CACHE_SEMANTIC = 2, /* a similar one within the error bound */
    MSG_CACHE_KB = 3,       /* a knowledge-base record */
} msg_cache_kind_t;
extern const char *const msg_cache_kind_names[4]; /* "miss", "exact", "semantic", "kb" */

/* a generate's cache mode (generate.cache) */
typedef enum {
    MSG_CACHE_DEFAULT = 0, /* the server's (the semcache actor's `mode`) */
    MSG_CACHE_OFF = 1,
    MSG_CACHE_ONLY_EXACT = 2,
    MSG_CACHE_ON_SEMANTIC = 3,
} msg_cache_mode_t;
extern const char *const msg_cache_mode_names[4]; /* "default", "off", "exact", "semantic" */

/* 14 cache_put (client -> server): a knowledge-base record */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1]; /* required: the client's id of this operation */
    char *question;                /* required, 1..MSG_MAX_PROMPT_BYTES */
    size_t question_len;
    char *answer; /* required, 1..MSG_MAX_TEXT_BYTES */
    size_t answer_len;
    char name[MSG_MAX_ID_BYTES + 1];         /* the record's name ("": id): what traces cite */
    char tags[MSG_MAX_CACHE_TAGS_BYTES + 1]; /* comma-separated, or "" */
    int64_t ttl_s;                           /* 0: never expires */
} msg_cache_put_t;

/* 15 cache_invalidate (client -> server): drop the entries whose name starts with prefix
 * and that carry tag; at least one of prefix, tag, all */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1];
    char prefix[MSG_MAX_ID_BYTES + 1];
    char tag[MSG_MAX_CACHE_TAGS_BYTES + 1];
    bool all; /* every entry */
} msg_cache_invalidate_t;

/* 16 cache_reply (server -> client): the answer to a cache_put or cache_invalidate */
typedef struct {
    char id[MSG_MAX_ID_BYTES + 1];
    int count;   /* entries stored (1) or dropped */
    int entries; /* entries held now */
} msg_cache_reply_t;

/* 56 cache_lookup (frontend -> semcache): may request rid be answered from the cache? */
typedef struct {
    uint64_t rid;
    uint64_t context;  /* serve_semcache_req.h: what changes the answer besides the question */
    uint64_t exact;    /* the whole request */
    uint64_t kb_exact; /* the normalised question, for a single-turn request (else 0) */
    char *text;        /* the question: what the semantic layer embeds */
    size_t text_len;
    double delta; /* the wrong-hit rate allowed (0: the server's) */
    int mode;     /* msg_cache_mode_t: the request's (default: the server's) */
} msg_cache_lookup_t;

/* 57 cache_answer (semcache -> frontend) */
typedef struct {
    uint64_t rid;
    int kind;     /* msg_cache_kind_t */
    char *answer; /* a hit's answer */
    size_t answer_len;
    char name[MSG_MAX_ID_BYTES + 1]; /* the entry answered from */
    float similarity;                /* to the nearest entry of the context (-2: none) */
    double threshold;                /* the semantic layer's threshold (> 1: none yet) */
    bool verify;                     /* a sampled hit: generate anyway and store the answer */
    bool store;                      /* keep the answer once generated (cache_store) */
    int finish;                      /* a hit: how the answer ended (msg_finish_t; 0: eos) */
    uint64_t nearest_hash;           /* the nearest entry's normalised answer (0: none) */
    int64_t lookup_us;               /* the lookup's time */
} msg_cache_answer_t;

/* 58 cache_store (frontend -> semcache): a finished answer (rid != 0) or a knowledge-base
 * record (kb); client and id: where cache_done goes ("": nowhere) */
typedef struct {
    char client[MSG_MAX_CLIENT_HEX + 1];
    char id[MSG_MAX_ID_BYTES + 1];
    uint64_t rid;
    uint64_t context, exact; /* of the request; a record: context unused, exact = kb_exact */
    bool kb;
    char *text; /* the question (embedded for the semantic layer) */
    size_t text_len;
    char *answer;
    size_t answer_len;
    char name[MSG_MAX_ID_BYTES + 1];
    char tags[MSG_MAX_CACHE_TAGS_BYTES + 1];
    int64_t ttl_s;        /* -1: the server's rule; 0: never expires */
    int finish;           /* how the answer ended (msg_finish_t: eos, length, stop; 0: eos) */
    int mode;             /* the request's cache mode (msg_cache_mode_t): embedded only when
                             it resolves to semantic (a record: always) */
    uint64_t verify_hash; /* the lookup's nearest_hash: the answer is compared with it */
    float verify_sim;     /* the lookup's similarity */
} msg_cache_store_t;

/* 59 cache_drop (frontend -> semcache): a client's cache_invalidate */
typedef struct {
    char client[MSG_MAX_CLIENT_HEX + 1];
    char id[MSG_MAX_ID_BYTES + 1];
    char prefix[MSG_MAX_ID_BYTES + 1];
    char tag[MSG_MAX_CACHE_TAGS_BYTES + 1];
    bool all;
} msg_cache_drop_t;

/* 60 cache_done (semcache -> frontend): the answer to a cache_store with a client, or a
 * cache_drop; code != 0 (msg_code_t): refused, with message */
typedef struct {
    char client[MSG_MAX_CLIENT_HEX + 1];
    char id[MSG_MAX_ID_BYTES + 1];
    int count, entries;
    int code;
    char message[MSG_MAX_ERRMSG_BYTES + 1];
} msg_cache_done_t;

MSG_DECLARE_CODEC(cache_put)
MSG_DECLARE_CODEC(cache_invalidate)
MSG_DECLARE_CODEC(cache_reply)
MSG_DECLARE_CODEC(cache_lookup)
MSG_DECLARE_CODEC(cache_answer)
MSG_DECLARE_CODEC(cache_store)
MSG_DECLARE_CODEC(cache_drop)
MSG_DECLARE_CODEC(cache_done)

#endif
