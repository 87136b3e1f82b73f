/* strata_client.h - a C client for a strata server (docs/PROTOCOL.md): one ZeroMQ
 * DEALER socket to the frontend, blocking calls with a timeout.
 *
 *     strata_client_t *c = strata_client_new("tcp://127.0.0.1:5555", 30000);
 *     strata_gen_params_t p;
 *     strata_gen_params_default(&p);
 *     p.prompt = "Once upon a time";
 *     strata_done_t done;
 *     int rc = strata_client_generate(c, &p, on_token, NULL, &done);
 *     if (rc < 0) fprintf(stderr, "%s\n", strata_client_error(c));
 *     strata_done_free(&done);
 *     strata_client_destroy(&c);
 *
 * A lost connection is survived: the DEALER reconnects by itself, and a generation in
 * progress is continued with a `resume` (docs/PROTOCOL.md) once the new connection is up
 * (the frontend restarted, or the link was cut).  A socket monitor on the DEALER sees the
 * connection drop (ZMQ_EVENT_DISCONNECTED; ZMTP heartbeats every 1 s notice a silent dead
 * link after 3 s) and come back (ZMQ_EVENT_HANDSHAKE_SUCCEEDED); the client then sends
 * the request again with `have` = the token events it has and `tokens` = their ids
 * (have = 0 when stream is false).  The server goes on after them, with the output of an
 * uninterrupted run (greedy or seeded); a token event the client already has is dropped,
 * so on_token sees every index exactly once, in order.  done.resumes counts the resumes.
 * The timeout still bounds every wait: no event of the request for timeout_ms (the
 * server stays away) ends the call with -ETIMEDOUT.
 *
 * A client object is not thread-safe: use it from one thread (ZeroMQ sockets are not
 * thread-safe either).  Every call returns 0 or a negative errno:
 *   -ETIMEDOUT  nothing arrived from the server within the timeout (not running?)
 *   -EREMOTEIO  the server answered with an error message (strata_client_error_code()
 *               says which: "bad_request", "overloaded", "not_found", "internal",
 *               "context_length_exceeded")
 *   -EPROTO     the server sent a frame this client cannot read
 *   -EINVAL     bad arguments (e.g. a too-long stop string); -ENOMEM; -EIO (ZeroMQ)
 * and strata_client_error() holds one readable line about the last failure.
 */
#ifndef STRATA_CLIENT_H
#define STRATA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strata_client_t strata_client_t;

/* One chat message. */
typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} strata_chat_t;

/* What to generate.  Strings are borrowed for the duration of the call. */
typedef struct {
    const char *prompt;            /* raw prompt; or NULL and messages */
    const strata_chat_t *messages; /* chat messages (the server applies the chat template) */
    int n_messages;
    int max_tokens;       /* 1..8192 (default 256) */
    float temperature;    /* 0 = greedy (default 0.8) */
    int top_k;            /* default 40; 0 = off */
    float top_p;          /* default 0.95 */
    float min_p;          /* default 0.05 */
    float repeat_penalty; /* default 1.0 = off */
    int repeat_last_n;    /* tokens the penalty looks back (default 64) */
    uint64_t seed;        /* used when has_seed */
    bool has_seed;
    const char *const *stop; /* stop strings (<= 8, each <= 64 bytes) */
    int n_stop;
    bool stream; /* default true: the callback sees every token */
} strata_gen_params_t;

/* Fill p with the defaults above (no prompt). */
void strata_gen_params_default(strata_gen_params_t *p);

/* The end of a generation. */
typedef struct {
    char id[65];            /* the request id this client used */
    char finish_reason[16]; /* "eos", "length", "stop", "cancelled" */
    char *text;             /* whole completion when stream was false, else NULL (owned) */
    int prompt_tokens;
    int completion_tokens;
    double queued_ms, prefill_ms, decode_ms, ttft_ms; /* of the last attempt, when resumed */
    int resumes;       /* times the connection was lost and the request resumed */
    int resumed_after; /* token events this client had at the last resume */
} strata_done_t;

/* Free done->text (safe twice). */
void strata_done_free(strata_done_t *done);

/* Called for every token event (stream = true): text is the piece (len bytes, NUL-
 * terminated, may be empty while a UTF-8 character is incomplete).  Return 0 to go on,
 * nonzero to cancel the request (the call then ends with finish_reason "cancelled"). */
typedef int (*strata_token_fn)(void *user, int index, int32_t token, const char *text, size_t len);

/* A counter of the server's stats. */
typedef struct {
    char name[97];
    int64_t value;
} strata_counter_t;

/* An actor of the server's health answer. */
typedef struct {
    char name[33];
    char state[16]; /* "ready", "starting", "unhealthy", "restarting" */
    int64_t last_seen_ms;
} strata_actor_t;

/* Connect a DEALER socket to endpoint (NULL: tcp://127.0.0.1:5555).  timeout_ms bounds
 * every wait for the server (<= 0: 30 s).  Connecting does not wait for the server:
 * the first call does.  NULL on failure (bad endpoint, out of memory). */
strata_client_t *strata_client_new(const char *endpoint, int timeout_ms);
/* Like strata_client_new, for a client endpoint that requires CURVE
 * (docs/SECURITY.md): server_key is the server's public zcert file (as
 * `strata keygen` writes it), client_key this client's secret zcert file
 * (NAME.key_secret), whose public key must be on the server's client_allow
 * list.  NULL when a key file cannot be read, libzmq lacks CURVE, or as
 * strata_client_new.  A refused key is not seen here: requests time out. */
strata_client_t *strata_client_new_curve(const char *endpoint, int timeout_ms,
                                         const char *server_key, const char *client_key);
void strata_client_destroy(strata_client_t **self_p);

/* Run one generation, calling on_token (may be NULL) per token event (each index once,
 * in order, across resumes); fills *done (free with strata_done_free) on success.  On a
 * lost connection it resumes the request (above) and goes on waiting. */
int strata_client_generate(strata_client_t *self, const strata_gen_params_t *p,
                           strata_token_fn on_token, void *user, strata_done_t *done);

/* Ask the server to cancel request id (NULL: the generation in progress, for use
 * inside on_token).  Only sends; the generate call then sees done "cancelled". */
int strata_client_cancel(strata_client_t *self, const char *id);

/* The server's counters: *counters is malloc'd (free() it), *n entries. */
int strata_client_stats(strata_client_t *self, strata_counter_t **counters, int *n);

/* The server's health: *ok = every actor ready; *actors malloc'd (free() it). */
int strata_client_health(strata_client_t *self, bool *ok, strata_actor_t **actors, int *n);

/* The last failure, one line ("" if none). */
const char *strata_client_error(const strata_client_t *self);
/* The server's error code of the last -EREMOTEIO ("" otherwise). */
const char *strata_client_error_code(const strata_client_t *self);

#endif
