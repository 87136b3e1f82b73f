/* serve_semcache_req.c - a request's cache key, and when two answers are the same
 * (serve_semcache_req.h). */
#include "serve_semcache_req.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void s_add(XXH64_state_t *h, const void *p, size_t n) {
    uint64_t len = n; /* each field with its length: no two splits hash alike */
    XXH64_update(h, &len, sizeof len);
    if (n)
        XXH64_update(h, p, n);
}

static void s_add_str(XXH64_state_t *h, const char *s) {
    s_add(h, s, s ? strlen(s) : 0);
}

static void s_add_sampling(XXH64_state_t *h, const msg_sampling_t *s, bool has_seed) {
    const float f[] = {
        s->temperature,      s->top_p, s->min_p, s->repeat_penalty, s->presence_penalty,
        s->frequency_penalty};
    bool seeded = has_seed && s->temperature > 0; /* greedy: the seed changes nothing */
    const int64_t i[] = {s->top_k, s->repeat_last_n, seeded, seeded ? (int64_t)s->seed : 0};
    s_add(h, f, sizeof f);
    s_add(h, i, sizeof i);
}

const char *serve_semcache_req_key(const msg_generate_t *g, serve_semcache_req_t *k) {
    memset(k, 0, sizeof *k);
    if (g->tools)
        return "tools";
    if (g->logprobs || g->top_logprobs)
        return "logprobs";
    if (g->sampling.temperature > 0 && !g->has_seed && !g->cache_sampled)
        return "sampled without a seed";
    XXH64_state_t *h = XXH64_createState();
    if (!h)
        return "out of memory";
    XXH64_reset(h, 0x73656d6361636865ull);
    int last = g->messages ? g->n_messages - 1 : -1;
    for (int i = 0; i < last; i++) {
        s_add_str(h, g->messages[i].role);
        s_add(h, g->messages[i].content, g->messages[i].content_len);
    }
    int64_t v[] = {g->max_tokens, g->fit_context, g->json_object, g->n_stop, g->n_logit_bias};
    s_add(h, v, sizeof v);
    s_add_sampling(h, &g->sampling, g->has_seed);
    for (int i = 0; i < g->n_stop; i++)
        s_add_str(h, g->stop[i]);
    for (int i = 0; i < g->n_logit_bias; i++)
        s_add(h, &g->logit_bias[i], sizeof g->logit_bias[i]);
    s_add(h, g->grammar, g->grammar ? g->grammar_len : 0);
    s_add(h, g->json_schema, g->json_schema ? g->json_schema_len : 0);
    s_add_str(h, g->tool_choice);
    s_add_str(h, g->kv_compress);
    k->context = XXH64_digest(h);
    if (last >= 0) {
        k->text = g->messages[last].content;
        k->text_len = g->messages[last].content_len;
        s_add_str(h, g->messages[last].role);
    } else {
        k->text = g->prompt;
        k->text_len = g->prompt_len;
        s_add_str(h, "\x01prompt");
    }
    s_add(h, k->text, k->text_len);
    k->exact = XXH64_digest(h);
    XXH64_freeState(h);
    if (g->messages && g->n_messages == 1 && !strcmp(g->messages[0].role, "user"))
        k->kb_exact = serve_semcache_question_hash(k->text, k->text_len);
    return NULL;
}

/* s normalised into out (at most n bytes): whitespace runs as one space, none at the
 * ends; fold: ASCII lower case and trailing ?.! dropped.  Its length. */
static size_t s_normalise(const char *s, size_t n, char *out, bool fold) {
    size_t k = 0;
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = k > 0;
            continue;
        }
        if (space)
            out[k++] = ' ';
        space = false;
        out[k++] = fold && c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    while (fold && k &&
           (out[k - 1] == '?' || out[k - 1] == '.' || out[k - 1] == '!' || out[k - 1] == ' '))
        k--;
    return k;
}

static uint64_t s_norm_hash(const char *s, size_t n, bool fold) {
    char *buf = malloc(n ? n : 1);
    uint64_t d = buf ? XXH64(buf, s_normalise(s, n, buf, fold), fold)
                     : XXH64(s, n, 2); /* out of memory: the bytes as they are */
    free(buf);
    return d ? d : 1;
}

uint64_t serve_semcache_answer_hash(const char *s, size_t n) {
    return s_norm_hash(s, n, false);
}

uint64_t serve_semcache_question_hash(const char *s, size_t n) {
    return s_norm_hash(s, n, true);
}
