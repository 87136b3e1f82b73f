/* serve_requests.c - the frontend's request table: slots, the rid index, and the rules
 * of attempts and events (serve_requests.h).  A slot is found by rid through one hash
 * map sized for every slot, so it never grows and never fails after new. */
#include "serve_requests.h"

#include "grammar.h"

#include "base_map.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct serve_requests_t {
    serve_requests_cfg_t cfg;
    serve_request_t *reqs; /* (cfg.max_requests) slots */
    int n_reqs;            /* slots in use */
    base_map_t by_rid;     /* rid -> slot: every event is looked up by its rid */
    uint64_t next_rid;     /* the next attempt's rid */
};

serve_requests_t *serve_requests_new(const serve_requests_cfg_t *cfg, uint64_t first_rid) {
    serve_requests_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->next_rid = first_rid;
    self->reqs = calloc((size_t)cfg->max_requests, sizeof *self->reqs);
    if (!self->reqs || base_map_init(&self->by_rid, (size_t)cfg->max_requests)) {
        free(self->reqs);
        free(self);
        return NULL;
    }
    return self;
}

void serve_requests_destroy(serve_requests_t **self_p) {
    if (!self_p || !*self_p)
        return;
    serve_requests_t *self = *self_p;
    for (int i = 0; i < self->cfg.max_requests; i++)
        if (self->reqs[i].rid)
            serve_requests_remove(self, &self->reqs[i]);
    free(self->reqs);
    base_map_free(&self->by_rid);
    free(self);
    *self_p = NULL;
}

int serve_requests_slots(const serve_requests_t *self) {
    return self->cfg.max_requests;
}

int serve_requests_count(const serve_requests_t *self) {
    return self->n_reqs;
}

serve_request_t *serve_requests_at(serve_requests_t *self, int i) {
    return &self->reqs[i];
}

serve_request_t *serve_requests_find_rid(serve_requests_t *self, uint64_t rid) {
    uint64_t slot;
    return rid && base_map_get(&self->by_rid, rid, &slot) ? &self->reqs[slot] : NULL;
}

serve_request_t *serve_requests_find_client(serve_requests_t *self, const uint8_t *ident,
                                            size_t ident_len, const char *id) {
    for (int i = 0; i < self->cfg.max_requests; i++) {
        serve_request_t *r = &self->reqs[i];
        if (r->rid && !r->gone && r->ident_len == ident_len &&
            !memcmp(r->ident, ident, ident_len) && !strcmp(r->id, id))
            return r;
    }
    return NULL;
}

/* Give r (a new request, or a new attempt of it) a fresh rid, indexed. */
static void s_new_rid(serve_requests_t *self, serve_request_t *r) {
    if (r->rid)
        base_map_del(&self->by_rid, r->rid);
    r->rid = self->next_rid++;
    if (!r->rid)
        r->rid = self->next_rid++;
    /* sized for max_requests: never grows, so this cannot fail */
    base_map_put(&self->by_rid, r->rid, (uint64_t)(r - self->reqs));
}

serve_request_t *serve_requests_add(serve_requests_t *self, const uint8_t *ident, size_t ident_len,
                                    msg_generate_t *g, int have, const int32_t *tokens,
                                    uint64_t now_us, int *err) {
    if (serve_requests_find_client(self, ident, ident_len, g->id)) {
        *err = -EEXIST;
        return NULL;
    }
    serve_request_t *r = NULL;
    if (self->n_reqs < self->cfg.max_requests)
        for (int i = 0; i < self->cfg.max_requests && !r; i++)
            if (!self->reqs[i].rid)
                r = &self->reqs[i];
    if (!r || ident_len > SERVE_MAX_IDENT) {
        *err = -ENOSPC;
        return NULL;
    }
    memset(r, 0, sizeof *r);
    r->toks = malloc((size_t)g->max_tokens * sizeof *r->toks);
    if (!r->toks) {
        *err = -ENOMEM;
        return NULL;
    }
    s_new_rid(self, r);
    memcpy(r->ident, ident, ident_len);
    r->ident_len = ident_len;
    r->fd = -1;
    snprintf(r->id, sizeof r->id, "%s", g->id);
    r->stream = g->stream;
    self->n_reqs++;
    r->gen = *g; /* take the prompt / messages over: the caller clears g */
    g->prompt = NULL;
    g->prompt_len = 0;
    g->messages = NULL;
    g->n_messages = 0;
    g->grammar = g->json_schema = NULL; /* the grammar too: a resume re-sends it */
    g->grammar_len = g->json_schema_len = 0;
    g->logit_bias = NULL; /* and the biases */
    g->n_logit_bias = 0;
    if (tokens) {
        memcpy(r->toks, tokens, (size_t)have * sizeof *r->toks);
        r->n_tokens = have;
    } else {
        r->skip = have;
    }
    r->t_arrival_us = now_us;
    r->attempts = 1;
    r->worker = -1;
    audit_digest_init(&r->out);
    r->retry_wait_us = SERVE_RETRY0_US;
    r->give_up_us = now_us + self->cfg.give_up_us;
    return r;
}

void serve_requests_remove(serve_requests_t *self, serve_request_t *r) {
    free(r->trace);
    free(r->text);
    free(r->toks);
    free(r->steps);
    free(r->embed_ids);
    for (int i = 0; r->lps && i < r->n_tokens; i++)
        free(r->lps[i].top);
    free(r->lps);
    msg_generate_clear(&r->gen);
    base_map_del(&self->by_rid, r->rid);
    memset(r, 0, sizeof *r);
    self->n_reqs--;
}

/* ---- attempts */

static uint64_t s_double(uint64_t wait) {
    return wait * 2 < SERVE_RETRY_MAX_US ? wait * 2 : SERVE_RETRY_MAX_US;
}

void serve_requests_sent(serve_requests_t *self, serve_request_t *r, bool queued, uint64_t now_us) {
    (void)self;
    r->worker = -1;
    r->probes = 0;
    r->t_sent_us = r->t_heard_us = now_us;
    r->retry_at_us = 0;
    if (!queued) {
        r->retry_at_us = now_us + r->retry_wait_us;
        r->retry_wait_us = s_double(r->retry_wait_us);
    }
}

int serve_requests_next_attempt(serve_requests_t *self, serve_request_t *r, uint64_t delay_us,
                                uint64_t now_us, bool *submit_now) {
    if (now_us > r->give_up_us)
        return -ETIMEDOUT;
    s_new_rid(self, r);
    r->attempts++;
    r->worker = -1;
    *submit_now = delay_us == 0;
    if (delay_us) {
        r->retry_at_us = now_us + delay_us;
        r->t_sent_us = r->t_heard_us = now_us;
    }
    return 0;
}

bool serve_requests_retry_error(serve_request_t *r, int code, uint64_t *wait_us) {
    bool started = r->attempts > 1 || r->n_tokens > 0;
    if ((code == MSG_CODE_OVERLOADED && started) || code == MSG_CODE_INTERNAL) {
        *wait_us = r->retry_wait_us;
        r->retry_wait_us = s_double(r->retry_wait_us);
        return true;
    }
    return false;
}

void serve_requests_held(serve_requests_t *self, serve_request_t *r, int worker, uint64_t now_us) {
    r->worker = worker;
    r->t_heard_us = now_us;
    r->probes = 0;
    r->give_up_us = now_us + self->cfg.give_up_us;
}

/* ---- events */

serve_event_t serve_requests_event(serve_requests_t *self, serve_request_t *r, int worker,
                                   int index, int32_t token, int finish, int count,
                                   uint64_t now_us) {
    r->worker = worker;
    r->t_heard_us = now_us;
    r->probes = 0;
    if (index >= 0 && index < r->n_tokens)
        return SERVE_EVENT_DUPLICATE;
    if (index >= r->gen.max_tokens)
        return SERVE_EVENT_INVALID;
    /* the last event counts the tokens: one missing before it is a gap too */
    if (index > r->n_tokens || (finish && count != r->n_tokens + (index >= 0)))
        return SERVE_EVENT_GAP;
    if (index >= 0) {
        r->toks[r->n_tokens++] = token;
        r->give_up_us = now_us + self->cfg.give_up_us;
    }
    return SERVE_EVENT_ACCEPT;
}

bool serve_requests_to_client(const serve_request_t *r, int index) {
    return r->stream && index >= r->skip;
}

int serve_requests_keep_text(serve_request_t *r, const char *text, size_t len) {
    if (r->text_len + len + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + len + 1)
            cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t)
            return -ENOMEM;
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    r->text[r->text_len] = 0;
    return 0;
}

void serve_requests_keep_logprob(serve_request_t *r, float logprob, const char *piece,
                                 const msg_top_t *top, int n_top) {
    if (!r->lps)
        r->lps = calloc((size_t)r->gen.max_tokens, sizeof *r->lps);
    if (!r->lps || r->n_tokens < 1)
        return;
    msg_logprob_t *lp = &r->lps[r->n_tokens - 1];
    lp->token = r->toks[r->n_tokens - 1];
    lp->logprob = logprob;
    memcpy(lp->piece, piece, sizeof lp->piece);
    lp->top = n_top ? malloc((size_t)n_top * sizeof *lp->top) : NULL;
    if (lp->top) {
        memcpy(lp->top, top, (size_t)n_top * sizeof *lp->top);
        lp->n_top = n_top;
    }
}

/* ---- the watch */

serve_due_t serve_requests_due(serve_requests_t *self, serve_request_t *r, uint64_t now_us) {
    if (r->final_due_us)
        return SERVE_DUE_FINAL;
    if (r->retry_at_us)
        return now_us >= r->retry_at_us ? SERVE_DUE_SUBMIT : SERVE_DUE_NOTHING;
    if (r->worker < 0)
        return now_us - r->t_sent_us > self->cfg.accept_us ? SERVE_DUE_UNACCEPTED
                                                           : SERVE_DUE_NOTHING;
    if (now_us - r->t_heard_us < self->cfg.probe_us)
        return SERVE_DUE_NOTHING;
    if (r->probes >= SERVE_MAX_PROBES)
        return SERVE_DUE_SILENT;
    r->probes++;
    r->t_heard_us = now_us;
    return SERVE_DUE_PROBE;
}

int serve_requests_grammar(msg_generate_t *g, char *err, size_t errlen) {
    static const char object[] = "{\"type\":\"object\"}";
    if (g->json_schema || g->json_object) {
        char *gbnf = g->json_schema
                         ? grammar_schema_to_gbnf(g->json_schema, g->json_schema_len, err, errlen)
                         : grammar_schema_to_gbnf(object, sizeof object - 1, err, errlen);
        if (!gbnf)
            return -EINVAL;
        free(g->grammar);
        free(g->json_schema);
        g->json_schema = NULL;
        g->json_schema_len = 0;
        g->json_object = false;
        g->grammar = gbnf;
        g->grammar_len = strlen(gbnf);
    }
    if (!g->grammar)
        return 0;
    grammar_t *gr = grammar_new(g->grammar, err, errlen);
    if (!gr)
        return -EINVAL;
    grammar_destroy(&gr);
    return 0;
}

int serve_requests_tools(msg_generate_t *g, serve_openai_tools_t *mode, char *err, size_t errlen) {
    *mode = SERVE_OPENAI_TOOLS_NONE;
    if (!g->tools) {
        g->tool_choice[0] = 0; /* none or auto without tools: text (msg check) */
        return 0;
    }
    cJSON *tools = cJSON_ParseWithLength(g->tools, g->tools_len), *choice = NULL;
    cJSON *par = cJSON_CreateBool(g->parallel_tool_calls);
    const char *c = g->tool_choice; /* "": not given */
    if (!strcmp(c, "none") || !strcmp(c, "auto") || !strcmp(c, "required")) {
        choice = cJSON_CreateString(c);
    } else if (*c && (choice = cJSON_CreateObject())) { /* a function's name */
        cJSON_AddStringToObject(choice, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(choice, "function"), "name", c);
    }
    serve_openai_bad_t b = {{0}, {0}};
    char *gb = NULL, *turn = NULL;
    int rc = -ENOMEM;
    if (!tools)
        snprintf(err, errlen, "'tools' is not JSON");
    if (tools && par && (!*c || choice))
        rc = serve_openai_tools_compile(tools, choice, par, mode, &gb, &turn, &b);
    cJSON_Delete(tools);
    cJSON_Delete(choice);
    cJSON_Delete(par);
    if (rc == -EINVAL || !tools) {
        if (tools)
            snprintf(err, errlen, "%s", b.msg);
        return -EINVAL;
    }
    if (rc)
        return rc;
    free(g->tools);
    g->tools = NULL;
    g->tools_len = 0;
    g->tool_choice[0] = 0;
    if (*mode == SERVE_OPENAI_TOOLS_NONE)
        return 0;
    size_t tl = strlen(turn), total = tl + 2;
    for (int i = 0; i < g->n_messages; i++)
        total += g->messages[i].content_len;
    if (total > MSG_MAX_PROMPT_BYTES) {
        snprintf(err, errlen, "the messages and the tools' description pass %u bytes",
                 MSG_MAX_PROMPT_BYTES);
        rc = -EINVAL;
        goto fail;
    }
    msg_chat_t *m0 = g->n_messages ? &g->messages[0] : NULL;
    if (m0 && !strcmp(m0->role, "system")) { /* the description, a blank line, the system turn */
        char *o = malloc(tl + 2 + m0->content_len + 1);
        if (!o)
            goto fail;
        memcpy(o, turn, tl);
        memcpy(o + tl, "\n\n", 2);
        memcpy(o + tl + 2, m0->content, m0->content_len + 1);
        free(m0->content);
        m0->content = o;
        m0->content_len += tl + 2;
        free(turn);
    } else {
        if (g->n_messages >= MSG_MAX_MESSAGES) {
            snprintf(err, errlen, "%d messages and the tools' system turn pass %d", g->n_messages,
                     MSG_MAX_MESSAGES);
            rc = -EINVAL;
            goto fail;
        }
        msg_chat_t *x = realloc(g->messages, (size_t)(g->n_messages + 1) * sizeof *x);
        if (!x)
            goto fail;
        g->messages = x;
        memmove(x + 1, x, (size_t)g->n_messages * sizeof *x);
        memset(&x[0], 0, sizeof x[0]);
        snprintf(x[0].role, sizeof x[0].role, "system");
        x[0].content = turn;
        x[0].content_len = tl;
        g->n_messages++;
    }
    free(g->grammar);
    g->grammar = gb;
    g->grammar_len = strlen(gb);
    return 0;
fail:
    free(gb);
    free(turn);
    *mode = SERVE_OPENAI_TOOLS_NONE;
    return rc;
}

int serve_requests_tool_calls(const char *text, size_t len, const char *id, msg_tool_call_t **calls,
                              int *n) {
    *calls = NULL;
    *n = 0;
    bool complete;
    cJSON *arr = serve_openai_tool_calls(text ? text : "", len, id, &complete);
    int k = cJSON_GetArraySize(arr);
    if (!arr || !k) {
        cJSON_Delete(arr);
        return 0;
    }
    msg_tool_call_t *out = calloc((size_t)k, sizeof *out);
    if (!out) {
        cJSON_Delete(arr);
        return -ENOMEM;
    }
    int i = 0;
    for (const cJSON *c = arr->child; c && i < MSG_MAX_TOOL_CALLS; c = c->next, i++) {
        const cJSON *fn = cJSON_GetObjectItem(c, "function");
        snprintf(out[i].id, sizeof out[i].id, "%s", cJSON_GetObjectItem(c, "id")->valuestring);
        snprintf(out[i].name, sizeof out[i].name, "%s",
                 cJSON_GetObjectItem(fn, "name")->valuestring);
        out[i].arguments = strdup(cJSON_GetObjectItem(fn, "arguments")->valuestring);
        if (!out[i].arguments) {
            serve_requests_tool_calls_free(out, i);
            cJSON_Delete(arr);
            return -ENOMEM;
        }
        out[i].arguments_len = strlen(out[i].arguments);
    }
    cJSON_Delete(arr);
    *calls = out;
    *n = i;
    return 0;
}

void serve_requests_tool_calls_free(msg_tool_call_t *calls, int n) {
    for (int i = 0; calls && i < n; i++)
        free(calls[i].arguments);
    free(calls);
}
