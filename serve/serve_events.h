/* serve_events.h - the frontend's client events of a request, assembled from the worker's
 * text events (msgs/msg_internal.h text_event) and what the request table keeps
 * (serve_requests): the token event, the done event (text, log-probabilities, usage,
 * timings, tool calls), and the trace (the steps of every attempt and the spans of the
 * completion copied from the input).  Library code: structs in, structs out; the caller
 * sends them. */
#ifndef SERVE_EVENTS_H
#define SERVE_EVENTS_H

#include "msg_client.h"
#include "msg_internal.h"
#include "serve_requests.h"

#include <stdint.h>

/* The token event of te for r's client (te->index >= 0).  t's pointers borrow te's. */
void serve_events_token(const serve_request_t *r, const msg_text_event_t *te, msg_token_t *t);

/* The done event of r, ended by te (te->finish set): the text when not streamed (or the
 * held-back text of a streamed one), the log-probabilities kept, usage and timings, and
 * under tools the calls of the text (d->tool_calls malloc'd: serve_events_done_clear).
 * d's other pointers borrow r's and te's.  0, or -ENOMEM (the calls are then left out). */
int serve_events_done(const serve_request_t *r, const msg_text_event_t *te, msg_done_t *d);
/* Frees what serve_events_done allocated (the calls). */
void serve_events_done_clear(msg_done_t *d);

/* The trace of r, ended by te at now_us: the frontend's own steps (resumes), then the
 * worker's, then a "deliver" step; total_ms since the arrival; the spans of the completion
 * (24 bytes or more) copied from the prompt or a message.  t's steps and sources malloc'd
 * (serve_events_trace_clear).  0, or -ENOMEM. */
int serve_events_trace(const serve_request_t *r, const msg_text_event_t *te, uint64_t now_us,
                       msg_trace_t *t);
void serve_events_trace_clear(msg_trace_t *t);

#endif
