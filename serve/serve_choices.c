/* serve_choices.c - the fan-out of OpenAI's n and the merge of its choices' ends
 * (serve_choices.h).  Owns the response id and one record per choice. */
#include "serve_choices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bool ended;        /* its done came */
    int finish;        /* msg_finish_t of that done */
    msg_usage_t usage; /* of that done */
} s_choice_t;

struct serve_choices_t {
    char id[MSG_MAX_ID_BYTES + 1]; /* the response id; choice i is "<id>.<i>" */
    size_t id_len;                 /* strlen(id) */
    int n;                         /* 1..SERVE_CHOICES_MAX */
    s_choice_t c[SERVE_CHOICES_MAX];
};

serve_choices_t *serve_choices_new(const char *id, int n) {
    size_t len = id ? strlen(id) : 0;
    if (n < 1 || n > SERVE_CHOICES_MAX || len < 1 || len > MSG_MAX_ID_BYTES - 3)
        return NULL; /* ".15" must fit after it */
    serve_choices_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    memcpy(self->id, id, len + 1);
    self->id_len = len;
    self->n = n;
    return self;
}

void serve_choices_destroy(serve_choices_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

int serve_choices_n(const serve_choices_t *self) {
    return self->n;
}

int serve_choices_generate(const serve_choices_t *self, int i, const msg_generate_t *g,
                           msg_generate_t *out) {
    if (i < 0 || i >= self->n)
        return -EINVAL;
    *out = *g;
    /* id_len <= MSG_MAX_ID_BYTES - 3 and i < 16: it fits */
    memcpy(out->id, self->id, self->id_len);
    snprintf(out->id + self->id_len, sizeof out->id - self->id_len, ".%d", i % 100);
    out->sampling.seed = g->sampling.seed + (uint64_t)i; /* unsigned: wraps at 2^64 */
    out->has_seed = true;
    return 0;
}

int serve_choices_index(const serve_choices_t *self, const char *event_id) {
    if (strncmp(event_id, self->id, self->id_len) || event_id[self->id_len] != '.')
        return -1;
    const char *p = event_id + self->id_len + 1;
    int i = 0, digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 3; p++, digits++)
        i = i * 10 + (*p - '0');
    if (*p || !digits || (digits > 1 && event_id[self->id_len + 1] == '0') || i >= self->n)
        return -1; /* not a number, a leading 0, or past n */
    return i;
}

int serve_choices_done(serve_choices_t *self, int i, int finish, const msg_usage_t *u) {
    if (i < 0 || i >= self->n || finish == MSG_FINISH_NONE)
        return -EINVAL;
    if (self->c[i].ended)
        return -EALREADY;
    self->c[i] = (s_choice_t){true, finish, *u};
    return 0;
}

bool serve_choices_all_done(const serve_choices_t *self) {
    for (int i = 0; i < self->n; i++)
        if (!self->c[i].ended)
            return false;
    return true;
}

bool serve_choices_ended(const serve_choices_t *self, int i) {
    return i >= 0 && i < self->n && self->c[i].ended;
}

int serve_choices_finish(const serve_choices_t *self, int i) {
    return serve_choices_ended(self, i) ? self->c[i].finish : MSG_FINISH_NONE;
}

void serve_choices_usage(const serve_choices_t *self, msg_usage_t *out) {
    memset(out, 0, sizeof *out);
    bool first = true;
    for (int i = 0; i < self->n; i++) {
        const s_choice_t *c = &self->c[i];
        if (!c->ended)
            continue;
        if (first || c->usage.prompt_tokens > out->prompt_tokens)
            out->prompt_tokens = c->usage.prompt_tokens;
        if (first || c->usage.cached_tokens < out->cached_tokens)
            out->cached_tokens = c->usage.cached_tokens;
        first = false;
        out->completion_tokens += c->usage.completion_tokens;
        out->draft_proposed += c->usage.draft_proposed;
        out->draft_accepted += c->usage.draft_accepted;
    }
}
