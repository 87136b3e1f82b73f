/* serve_emit.h - the target worker's text events (msgs/msg_internal.h text_event): a
 * generated token detokenized here (UTF-8 safe), with the request's stop strings applied
 * (a completed stop string ends it with finish "stop"), its log-probability and most
 * likely alternatives when asked, and on the final event what the detokenizer and the
 * stopper still hold, the timings, the cache and draft counts and the trace chain.  A
 * token then costs one hop (worker -> frontend) instead of two through the tokenizer.
 * Library code: the caller sends the events it fills. */
#ifndef SERVE_EMIT_H
#define SERVE_EMIT_H

#include "model_tokenizer.h"
#include "msg_internal.h"
#include "serve_work.h"

#include <stdint.h>

typedef struct serve_emit_t serve_emit_t;

/* An emitter for worker `index` named `name` (both in every event and trace step) over
 * tok's n_vocab tokens (tok and name borrowed: they outlive it).  NULL when out of
 * memory. */
serve_emit_t *serve_emit_new(const model_tokenizer_t *tok, int n_vocab, int index,
                             const char *name);
void serve_emit_destroy(serve_emit_t **self_p);

/* Keep for the next event of w: token t's log-probability in lsm (its log-softmax row,
 * n_vocab) and w's top_logprobs most likely alternatives (ties: the lower id first), each
 * with its own text (bytes that are not UTF-8 on their own become U+FFFD).  Nothing when
 * w did not ask for log-probabilities. */
void serve_emit_logprobs(serve_emit_t *self, const serve_work_t *w, const float *lsm, int32_t t);

/* The text event of w's token (index, token; -1, -1 for none) at now_us, finish: why the
 * request ends, or MSG_FINISH_NONE.  At the end, what the detokenizer and the stopper
 * still hold is flushed, the "finish" step ends w's trace, and the timings are filled.
 * te's text borrows the emitter's buffer (valid until its next call), its top and steps
 * the emitter's and w's.  Returns te->finish: MSG_FINISH_STOP when a stop string
 * completed. */
int serve_emit_event(serve_emit_t *self, serve_work_t *w, int index, int32_t token, int finish,
                     uint64_t now_us, msg_text_event_t *te);

/* The router's final work_event for te (it forgets the request). */
void serve_emit_work_event(const msg_text_event_t *te, msg_work_event_t *ev);

#endif
