/* test_msgs.c - every message type round-trips; every kind of bad input (random bytes,
 * truncation, not a map, wrong field types, missing fields, oversize strings and
 * arrays, out-of-range numbers, unknown types, wrong versions, in client frames also
 * str that are not UTF-8 and keys given twice) is rejected with the right code, kind
 * and message, and never crashes.
 *
 * Bad frames are made by re-packing a valid encoding with one change (msgpack-c's
 * object API), so every field of every message type is covered by the same loop.
 */
#include "msg_any.h"
#include "test_util.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a filled example of every type */

static void fill(int type, msg_any_t *a) {
    memset(a, 0, sizeof *a);
    a->type = type;
    msg_init(type, &a->u);
    static msg_chat_t chat[2] = {{"system", "be brief", 8}, {"user", "hello", 5}};
    static int32_t toks[5] = {1, 15043, 29871, 0, 2147483647};
    static msg_counter_t counters[3] = {
        {"frontend.requests", 7}, {"frontend.malformed.bad_type", 0}, {"x.neg", -5}};
    static msg_actor_health_t actors[2] = {{"frontend", MSG_STATE_READY, 3},
                                           {"worker0", MSG_STATE_RESTARTING, 1200}};
    switch (type) {
    case MSG_GENERATE: {
        msg_generate_t *g = &a->u.generate;
        strcpy(g->id, "req-1");
        g->prompt = "Once upon a time";
        g->prompt_len = strlen(g->prompt);
        g->max_tokens = 32;
        g->sampling.temperature = 0.5f;
        g->sampling.top_k = 10;
        g->sampling.seed = 0xfedcba9876543210ull;
        g->has_seed = true;
        strcpy(g->stop[0], "\n\n");
        strcpy(g->stop[1], "END");
        g->n_stop = 2;
        g->stream = false;
        break;
    }
    case MSG_CANCEL:
        strcpy(a->u.cancel.id, "req-1");
        break;
    case MSG_RESUME: {
        msg_resume_t *r = &a->u.resume;
        strcpy(r->gen.id, "req-2");
        r->gen.prompt = "Once upon a time";
        r->gen.prompt_len = strlen(r->gen.prompt);
        r->gen.max_tokens = 32;
        r->have = 4;
        r->tokens = toks;
        r->n_tokens = 4;
        break;
    }
    case MSG_TRACE: {
        static msg_trace_step_t steps[2] = {
            {"tokenizer", "tokenize", "chat template, 12 tokens", 0, 120},
            {"worker0", "decode", "token 3 in a step of 4 requests", 120, 2500}};
        static msg_source_t src[1] = {{4, 40, 1, 10, 46}};
        strcpy(a->u.trace.id, "req-3");
        a->u.trace.steps = steps;
        a->u.trace.n_steps = 2;
        a->u.trace.total_ms = 2.62;
        a->u.trace.sources = src;
        a->u.trace.n_sources = 1;
        break;
    }
    case MSG_WORK_STATUS:
        a->u.work_status = (msg_work_status_t){82, 1, true};
        break;
    case MSG_WORK_PROBE:
        a->u.work_probe.rid = 83;
        break;
    case MSG_TOKEN:
        strcpy(a->u.token.id, "r");
        a->u.token.index = 3;
        a->u.token.token = 1234;
        a->u.token.text = " wor";
        a->u.token.text_len = 4;
        a->u.token.logprob = -0.25f;
        a->u.token.has_logprob = true;
        {
            static msg_top_t top[2] = {{1234, -0.25f, " wor"}, {99, -2.5f, " word"}};
            a->u.token.top = top;
            a->u.token.n_top = 2;
        }
        break;
    case MSG_DONE:
        strcpy(a->u.done.id, "r");
        a->u.done.finish_reason = MSG_FINISH_LENGTH;
        a->u.done.text = "full text";
        a->u.done.text_len = 9;
        a->u.done.usage = (msg_usage_t){12, 32, 8, 5, 3};
        a->u.done.timings = (msg_timings_ms_t){1.5, 20.25, 300, 21.75};
        break;
    case MSG_ERROR:
        strcpy(a->u.error.id, "r");
        a->u.error.code = MSG_CODE_OVERLOADED;
        strcpy(a->u.error.message, "queue full");
        break;
    case MSG_STATS_REPLY:
        a->u.stats_reply.counters = counters;
        a->u.stats_reply.n_counters = 3;
        break;
    case MSG_HEALTH_REPLY:
        a->u.health_reply.ok = false;
        a->u.health_reply.actors = actors;
        a->u.health_reply.n_actors = 2;
        a->u.health_reply.started = true;
        a->u.health_reply.progress = true;
        a->u.health_reply.in_flight = 3;
        break;
    case MSG_TOK_REQUEST:
        a->u.tok_request.rid = 77;
        strcpy(a->u.tok_request.gen.id, "chat-9");
        a->u.tok_request.gen.messages = chat;
        a->u.tok_request.gen.n_messages = 2;
        a->u.tok_request.t_arrival_us = 123456789;
        break;
    case MSG_WORK_REQUEST: {
        msg_work_request_t *w = &a->u.work_request;
        w->rid = 78;
        w->tokens = toks;
        w->n_tokens = 5;
        w->max_tokens = 8192;
        w->sampling.temperature = 0;
        w->sampling.seed = 42;
        strcpy(w->stop[0], "###");
        w->n_stop = 1;
        w->t_arrival_us = 5;
        break;
    }
    case MSG_WORK_EVENT:
        a->u.work_event = (msg_work_event_t){79, 0, 17, MSG_FINISH_EOS, 12, {1, 2, 3, 4}};
        break;
    case MSG_TEXT_EVENT:
        a->u.text_event.rid = 80;
        a->u.text_event.index = -1;
        a->u.text_event.token = -1;
        a->u.text_event.text = "";
        a->u.text_event.finish = MSG_FINISH_STOP;
        a->u.text_event.timings = (msg_timings_us_t){9, 8, 7, 6};
        break;
    case MSG_WORK_CANCEL:
        a->u.work_cancel.rid = UINT64_MAX;
        break;
    case MSG_LOAD_REPORT:
        a->u.load_report = (msg_load_report_t){3, 100, 2000, 1, 4, 512};
        break;
    case MSG_WORK_ERROR:
        a->u.work_error.rid = 81;
        a->u.work_error.code = MSG_CODE_INTERNAL;
        strcpy(a->u.work_error.message, "worker died");
        break;
    case MSG_WORKER_DOWN:
        a->u.worker_down.worker = 2;
        break;
    case MSG_KV_HINT:
        a->u.kv_hint = (msg_kv_hint_t){.rid = 5, .worker = 1, .tokens = toks, .n_tokens = 5};
        strcpy(a->u.kv_hint.session, "chat-42");
        break;
    case MSG_KV_PROMOTE:
        a->u.kv_promote = (msg_kv_promote_t){6, 0, toks, 5, true};
        break;
    case MSG_KV_BLOCK:
        a->u.kv_block = (msg_kv_block_t){7, 2, UINT64_MAX, 12345, toks, 4, 1, 200};
        break;
    case MSG_KV_PROMOTE_DONE:
        a->u.kv_promote_done = (msg_kv_promote_done_t){8, 12, 3};
        break;
    case MSG_DRAFT_REQUEST:
        a->u.draft_request = (msg_draft_request_t){9, 1, 77, toks, 5, 8};
        break;
    case MSG_DRAFT_REPLY:
        a->u.draft_reply = (msg_draft_reply_t){9, 77, 5, toks, 3};
        break;
    case MSG_DRAFT_END:
        a->u.draft_end = (msg_draft_end_t){9, 1};
        break;
    case MSG_EXPERT_REQUEST: {
        static int32_t ex[3] = {0, 2, 255};
        a->u.expert_request = (msg_expert_request_t){77, 1, 3, 576, MSG_DTYPE_F16, ex, 3, 9};
        break;
    }
    case MSG_EXPERT_REPLY:
        a->u.expert_reply = (msg_expert_reply_t){77, 2, 3, 3, MSG_DTYPE_F16, MSG_EXPERT_OK, 1500};
        break;
    case MSG_EXPERT_LOAD: {
        static int32_t rows[4] = {10, 0, 3, 2147483647};
        a->u.expert_load = (msg_expert_load_t){1, 4, rows, 4, 12, 2, 4000, 150000, 9};
        break;
    }
    case MSG_EXPERT_TABLE: {
        static int32_t hosts[4] = {1, 0, 1, 1}, cap[2] = {1250, 4000}, load[2] = {0, 17},
                       alive[2] = {1, 0};
        a->u.expert_table =
            (msg_expert_table_t){9, 2, 2, true, hosts, 4, cap, 2, load, 2, alive, 2, 4};
        break;
    }
    case MSG_EXPERT_DOWN:
        a->u.expert_down.expert = 3;
        break;
    case MSG_READY:
        strcpy(a->u.ready.name, "tokenizer");
        a->u.ready.pid = 4242;
        break;
    case MSG_HEARTBEAT:
        strcpy(a->u.heartbeat.name, "worker1");
        a->u.heartbeat.pid = 4243;
        break;
    case MSG_PING:
        a->u.ping.seq = 9;
        break;
    case MSG_DRAIN:
        a->u.drain.grace_ms = 30000;
        break;
    case MSG_CTL: /* restart's name: ctl_rules (without it, restart is invalid) */
        a->u.ctl.cmd = MSG_CTL_DRAIN;
        a->u.ctl.grace_ms = 5000;
        break;
    case MSG_CTL_REPLY: {
        static msg_ctl_actor_t actors[2] = {{"worker0", MSG_CTL_DRAINING, 4242, 1, 9000},
                                            {"router", MSG_CTL_RESTARTING, 0, 3, 0}};
        a->u.ctl_reply.ok = true;
        strcpy(a->u.ctl_reply.message, "worker0: drained in 120 ms");
        strcpy(a->u.ctl_reply.actor, "worker0");
        strcpy(a->u.ctl_reply.phase, "drain");
        a->u.ctl_reply.ms = 120;
        a->u.ctl_reply.actors = actors;
        a->u.ctl_reply.n_actors = 2;
        break;
    }
    case MSG_WORKER_DRAIN:
        a->u.worker_drain = (msg_worker_drain_t){1, true};
        break;
    case MSG_WORKER_IDLE:
        a->u.worker_idle.worker = 1;
        break;
    case MSG_PONG:
        a->u.pong.seq = 9;
        strcpy(a->u.pong.name, "router");
        break;
    case MSG_STATS_ANSWER:
        strcpy(a->u.stats_answer.name, "router");
        a->u.stats_answer.counters = counters;
        a->u.stats_answer.n_counters = 3;
        break;
    case MSG_EMBED:
        strcpy(a->u.embed.id, "emb-1");
        a->u.embed.prompt = "The quick brown fox";
        a->u.embed.prompt_len = strlen(a->u.embed.prompt);
        break;
    case MSG_EMBEDDING: {
        static float vec[3] = {0.6f, -0.8f, 0.0f};
        strcpy(a->u.embedding.id, "emb-1");
        a->u.embedding.embedding = vec;
        a->u.embedding.dim = 3;
        a->u.embedding.prompt_tokens = 5;
        break;
    }
    case MSG_EMBED_REQUEST:
        a->u.embed_request.rid = 77;
        a->u.embed_request.tokens = toks;
        a->u.embed_request.n_tokens = 5;
        a->u.embed_request.t_arrival_us = 123456;
        break;
    case MSG_WORK_EMBEDDING: {
        static float vec[2] = {1.0f, -0.0f};
        a->u.work_embedding.rid = 77;
        a->u.work_embedding.worker = 1;
        a->u.work_embedding.embedding = vec;
        a->u.work_embedding.dim = 2;
        a->u.work_embedding.prompt_tokens = 2;
        break;
    }
    case MSG_CACHE_PUT:
        strcpy(a->u.cache_put.id, "kb-1");
        a->u.cache_put.question = "Who wrote Hamlet?";
        a->u.cache_put.question_len = strlen(a->u.cache_put.question);
        a->u.cache_put.answer = "Shakespeare";
        a->u.cache_put.answer_len = strlen(a->u.cache_put.answer);
        strcpy(a->u.cache_put.tags, "plays,authors");
        a->u.cache_put.ttl_s = 3600;
        break;
    case MSG_CACHE_INVALIDATE:
        strcpy(a->u.cache_invalidate.id, "inv-1");
        strcpy(a->u.cache_invalidate.tag, "plays");
        break;
    case MSG_CACHE_REPLY:
        strcpy(a->u.cache_reply.id, "kb-1");
        a->u.cache_reply.count = 1;
        a->u.cache_reply.entries = 12;
        break;
    case MSG_CACHE_LOOKUP:
        a->u.cache_lookup.rid = 77;
        a->u.cache_lookup.context = 1;
        a->u.cache_lookup.exact = 2;
        a->u.cache_lookup.text = "Who wrote Hamlet?";
        a->u.cache_lookup.text_len = strlen(a->u.cache_lookup.text);
        a->u.cache_lookup.delta = 0.05;
        a->u.cache_lookup.mode = MSG_CACHE_ON_SEMANTIC;
        break;
    case MSG_CACHE_ANSWER:
        a->u.cache_answer.rid = 77;
        a->u.cache_answer.kind = MSG_CACHE_SEMANTIC;
        a->u.cache_answer.answer = "Shakespeare";
        a->u.cache_answer.answer_len = strlen(a->u.cache_answer.answer);
        strcpy(a->u.cache_answer.name, "req-1");
        a->u.cache_answer.similarity = 0.97f;
        a->u.cache_answer.threshold = 0.95;
        a->u.cache_answer.lookup_us = 900;
        break;
    case MSG_CACHE_STORE:
        a->u.cache_store.rid = 77;
        a->u.cache_store.exact = 2;
        a->u.cache_store.text = "Who wrote Hamlet?";
        a->u.cache_store.text_len = strlen(a->u.cache_store.text);
        a->u.cache_store.answer = "Shakespeare";
        a->u.cache_store.answer_len = strlen(a->u.cache_store.answer);
        strcpy(a->u.cache_store.name, "req-1");
        a->u.cache_store.ttl_s = -1;
        break;
    case MSG_CACHE_DROP:
        strcpy(a->u.cache_drop.client, "00ab");
        strcpy(a->u.cache_drop.id, "inv-1");
        a->u.cache_drop.all = true;
        break;
    case MSG_CACHE_DONE:
        strcpy(a->u.cache_done.client, "00ab");
        strcpy(a->u.cache_done.id, "inv-1");
        a->u.cache_done.count = 3;
        break;
    default: /* stats, health, stop, stats_query: no fields */
        break;
    }
}

static const int s_all_types[] = {
#define X(name, NAME, id, version, family) MSG_##NAME,
    MSG_TYPES(X)
#undef X
};
#define N_TYPES ((int)(sizeof s_all_types / sizeof s_all_types[0]))

static void encode_ok(int type, void **buf, size_t *len) {
    msg_any_t a;
    fill(type, &a);
    msg_err_t err;
    int rc = msg_any_encode(&a, buf, len, &err);
    ck_assert_msg(rc == 0, "encode %s: %d %s", msg_type_name(type), rc, err.msg);
}

/* ---- round trips */

START_TEST(roundtrip_every_type) {
    for (int i = 0; i < N_TYPES; i++) {
        int type = s_all_types[i];
        void *buf, *buf2;
        size_t len, len2;
        encode_ok(type, &buf, &len);
        int peeked;
        msg_err_t err;
        ck_assert_int_eq(msg_peek_type(buf, len, &peeked, &err), 0);
        ck_assert_int_eq(peeked, type);
        msg_any_t d;
        int rc = msg_any_decode(buf, len, &d, &err);
        ck_assert_msg(rc == 0, "decode %s: %s", msg_type_name(type), err.msg);
        ck_assert_int_eq(d.type, type);
        /* encoding is deterministic: same struct, same bytes */
        ck_assert_int_eq(msg_any_encode(&d, &buf2, &len2, &err), 0);
        ck_assert_uint_eq(len, len2);
        ck_assert_msg(!memcmp(buf, buf2, len), "%s re-encodes differently", msg_type_name(type));
        msg_any_clear(&d);
        msg_any_clear(&d); /* safe twice */
        free(buf);
        free(buf2);
    }
}
END_TEST

START_TEST(roundtrip_values) {
    void *buf;
    size_t len;
    encode_ok(MSG_GENERATE, &buf, &len);
    msg_generate_t g;
    ck_assert_int_eq(msg_generate_decode(buf, len, &g, NULL), 0);
    ck_assert_str_eq(g.id, "req-1");
    ck_assert_str_eq(g.prompt, "Once upon a time");
    ck_assert_ptr_null(g.messages);
    ck_assert_int_eq(g.max_tokens, 32);
    ck_assert_float_eq(g.sampling.temperature, 0.5f);
    ck_assert_int_eq(g.sampling.top_k, 10);
    ck_assert_float_eq(g.sampling.top_p, 0.95f); /* default */
    ck_assert(g.has_seed && g.sampling.seed == 0xfedcba9876543210ull);
    ck_assert_int_eq(g.n_stop, 2);
    ck_assert_str_eq(g.stop[0], "\n\n");
    ck_assert(!g.stream);
    msg_generate_clear(&g);
    ck_assert_ptr_null(g.prompt);
    free(buf);

    encode_ok(MSG_WORK_REQUEST, &buf, &len);
    msg_work_request_t w;
    ck_assert_int_eq(msg_work_request_decode(buf, len, &w, NULL), 0);
    ck_assert_int_eq(w.n_tokens, 5);
    ck_assert_int_eq(w.tokens[1], 15043);
    ck_assert_int_eq(w.tokens[4], 2147483647);
    ck_assert_int_eq(w.max_tokens, 8192);
    msg_work_request_clear(&w);
    free(buf);

    encode_ok(MSG_TOK_REQUEST, &buf, &len);
    msg_tok_request_t t;
    ck_assert_int_eq(msg_tok_request_decode(buf, len, &t, NULL), 0);
    ck_assert_int_eq(t.rid, 77);
    ck_assert_str_eq(t.gen.id, "chat-9");
    ck_assert_int_eq(t.gen.n_messages, 2);
    ck_assert_str_eq(t.gen.messages[1].role, "user");
    ck_assert_str_eq(t.gen.messages[1].content, "hello");
    ck_assert_int_eq(t.gen.max_tokens, MSG_DEFAULT_MAX_TOKENS);
    ck_assert(t.gen.stream && !t.gen.has_seed);
    msg_tok_request_clear(&t);
    free(buf);

    encode_ok(MSG_HEALTH_REPLY, &buf, &len);
    msg_health_reply_t h;
    ck_assert_int_eq(msg_health_reply_decode(buf, len, &h, NULL), 0);
    ck_assert_int_eq(h.n_actors, 2);
    ck_assert_int_eq(h.actors[1].state, MSG_STATE_RESTARTING);
    ck_assert_int_eq(h.actors[1].last_seen_ms, 1200);
    msg_health_reply_clear(&h);
    free(buf);

    /* error with no id travels as nil and comes back as "" */
    msg_error_t e;
    msg_error_init(&e);
    e.code = MSG_CODE_BAD_REQUEST;
    strcpy(e.message, "bad");
    ck_assert_int_eq(msg_error_encode(&e, &buf, &len, NULL), 0);
    msg_error_t e2;
    ck_assert_int_eq(msg_error_decode(buf, len, &e2, NULL), 0);
    ck_assert_str_eq(e2.id, "");
    ck_assert_str_eq(e2.message, "bad");
    free(buf);
}
END_TEST

/* ---- re-packing helpers: a valid frame with one key removed or replaced */

typedef enum { EDIT_REMOVE, EDIT_REPLACE, EDIT_ADD } edit_t;

/* pack obj (a map) with key changed: removed, or its value replaced by the
 * output of put(); EDIT_ADD appends key -> put() */
static void *repack(const msgpack_object *obj, const char *key, edit_t edit,
                    void (*put)(msgpack_packer *), size_t *len) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    const msgpack_object_map *m = &obj->via.map;
    uint32_t n = m->size + (edit == EDIT_ADD) - (edit == EDIT_REMOVE);
    msgpack_pack_map(&pk, n);
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object_kv *kv = &m->ptr[i];
        bool hit = kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
                   !memcmp(kv->key.via.str.ptr, key, strlen(key));
        if (hit && edit == EDIT_REMOVE)
            continue;
        msgpack_pack_object(&pk, kv->key);
        if (hit && edit == EDIT_REPLACE)
            put(&pk);
        else
            msgpack_pack_object(&pk, kv->val);
    }
    if (edit == EDIT_ADD) {
        msgpack_pack_str(&pk, strlen(key));
        msgpack_pack_str_body(&pk, key, strlen(key));
        put(&pk);
    }
    *len = sb.size;
    return msgpack_sbuffer_release(&sb);
}

static void put_int(msgpack_packer *pk) {
    msgpack_pack_int(pk, 7);
}
static void put_str(msgpack_packer *pk) {
    msgpack_pack_str(pk, 1);
    msgpack_pack_str_body(pk, "x", 1);
}
static void put_bool(msgpack_packer *pk) {
    msgpack_pack_true(pk);
}

START_TEST(missing_and_wrong_type_every_field) {
    for (int i = 0; i < N_TYPES; i++) {
        int type = s_all_types[i];
        void *buf;
        size_t len;
        encode_ok(type, &buf, &len);
        msgpack_zone zone;
        msgpack_zone_init(&zone, 4096);
        msgpack_object obj;
        ck_assert_int_eq(msgpack_unpack(buf, len, NULL, &zone, &obj), MSGPACK_UNPACK_SUCCESS);
        ck_assert_int_eq(obj.type, MSGPACK_OBJECT_MAP);
        for (uint32_t k = 0; k < obj.via.map.size; k++) {
            const msgpack_object_kv *kv = &obj.via.map.ptr[k];
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)kv->key.via.str.size, kv->key.via.str.ptr);
            if (!strcmp(key, "type") || !strcmp(key, "v"))
                continue;
            msg_any_t d;
            msg_err_t err;
            size_t n2;
            /* removed: either optional (decodes) or a clear missing-field error */
            void *b2 = repack(&obj, key, EDIT_REMOVE, NULL, &n2);
            int rc = msg_any_decode(b2, n2, &d, &err);
            if (rc == 0) {
                msg_any_clear(&d);
            } else {
                ck_assert_msg(rc == -EPROTO && err.kind == MSG_E_MISSING, "%s without %s: %d %s",
                              msg_type_name(type), key, rc, err.msg);
                ck_assert_msg(strstr(err.msg, "missing required field"), "%s", err.msg);
            }
            free(b2);
            /* a value of the wrong MessagePack type */
            int vt = kv->val.type;
            void (*put)(msgpack_packer *) =
                vt == MSGPACK_OBJECT_STR       ? put_int
                : vt == MSGPACK_OBJECT_BOOLEAN ? put_int
                : vt == MSGPACK_OBJECT_POSITIVE_INTEGER || vt == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
                        vt == MSGPACK_OBJECT_FLOAT32 || vt == MSGPACK_OBJECT_FLOAT64
                    ? put_str
                    : put_bool;
            b2 = repack(&obj, key, EDIT_REPLACE, put, &n2);
            rc = msg_any_decode(b2, n2, &d, &err);
            ck_assert_msg(rc == -EPROTO && err.kind == MSG_E_BAD_TYPE, "%s.%s wrong type: %d %s",
                          msg_type_name(type), key, rc, err.msg);
            char want[96];
            snprintf(want, sizeof want, "field '%s': expected ", key);
            ck_assert_msg(!strncmp(err.msg, want, strlen(want)), "%s", err.msg);
            ck_assert_str_eq(err.field, key);
            free(b2);
        }
        /* unknown keys are ignored, even nested ones */
        size_t n2;
        void *b2 = repack(&obj, "zz_future_field", EDIT_ADD, put_str, &n2);
        msg_any_t d;
        ck_assert_int_eq(msg_any_decode(b2, n2, &d, NULL), 0);
        msg_any_clear(&d);
        free(b2);
        msgpack_zone_destroy(&zone);
        free(buf);
    }
}
END_TEST

START_TEST(required_fields_named) {
    /* a few required fields checked by name */
    struct {
        int type;
        const char *key;
    } cases[] = {{MSG_GENERATE, "id"},       {MSG_GENERATE, "prompt"}, {MSG_TOKEN, "text"},
                 {MSG_DONE, "usage"},        {MSG_ERROR, "code"},      {MSG_WORK_REQUEST, "tokens"},
                 {MSG_WORK_EVENT, "finish"}, {MSG_PONG, "name"},       {MSG_TOK_REQUEST, "id"},
                 {MSG_TOK_REQUEST, "rid"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *buf;
        size_t len, n2;
        encode_ok(cases[i].type, &buf, &len);
        msgpack_zone zone;
        msgpack_zone_init(&zone, 4096);
        msgpack_object obj;
        msgpack_unpack(buf, len, NULL, &zone, &obj);
        const char *key = cases[i].key;
        if (cases[i].type == MSG_TOK_REQUEST && !strcmp(key, "id"))
            key = "id";
        void *b2 = repack(&obj, key, EDIT_REMOVE, NULL, &n2);
        msg_any_t d;
        msg_err_t err;
        ck_assert_int_eq(msg_any_decode(b2, n2, &d, &err), -EPROTO);
        ck_assert_int_eq(err.kind, MSG_E_MISSING);
        ck_assert_str_eq(err.field, key);
        free(b2);
        msgpack_zone_destroy(&zone);
        free(buf);
    }
}
END_TEST

/* ---- hand-made frames */

typedef struct {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} frame_t;

static void fr_begin(frame_t *f, const char *type, int n_more) {
    msgpack_sbuffer_init(&f->sb);
    msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&f->pk, (size_t)n_more + (type ? 1 : 0));
    if (type) {
        msgpack_pack_str_with_body(&f->pk, "type", 4);
        msgpack_pack_str_with_body(&f->pk, type, strlen(type));
    }
}
static void fr_key(frame_t *f, const char *k) {
    msgpack_pack_str_with_body(&f->pk, k, strlen(k));
}
static void fr_str(frame_t *f, const char *k, const char *v) {
    fr_key(f, k);
    msgpack_pack_str_with_body(&f->pk, v, strlen(v));
}
static void fr_int(frame_t *f, const char *k, int64_t v) {
    fr_key(f, k);
    msgpack_pack_int64(&f->pk, v);
}
static void fr_dbl(frame_t *f, const char *k, double v) {
    fr_key(f, k);
    msgpack_pack_double(&f->pk, v);
}

/* decode a generate frame; returns rc and fills err */
static int dec_gen(frame_t *f, msg_err_t *err) {
    msg_generate_t g;
    int rc = msg_generate_decode(f->sb.data, f->sb.size, &g, err);
    msg_generate_clear(&g);
    msgpack_sbuffer_destroy(&f->sb);
    return rc;
}

/* The structured-output fields of generate and work_request survive a round trip; at
 * most one of grammar / json_schema / json_object. */
START_TEST(generate_grammar_fields) {
    msg_generate_t g, d;
    msg_err_t err;
    void *buf = NULL;
    size_t len = 0;
    msg_generate_init(&g);
    msg_set_str(g.id, sizeof g.id, "s");
    g.prompt = "hi";
    g.prompt_len = 2;
    g.json_schema = "{\"type\":\"integer\"}";
    g.json_schema_len = strlen(g.json_schema);
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_generate_decode(buf, len, &d, &err), 0);
    ck_assert_str_eq(d.json_schema, "{\"type\":\"integer\"}");
    ck_assert_uint_eq(d.json_schema_len, g.json_schema_len);
    ck_assert_ptr_null(d.grammar);
    ck_assert(!d.json_object);
    msg_generate_clear(&d);
    ck_assert_ptr_null(d.json_schema);
    free(buf);
    /* none given: no keys on the wire, all unset after decoding */
    g.json_schema = NULL;
    g.json_schema_len = 0;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_generate_decode(buf, len, &d, &err), 0);
    ck_assert(!d.grammar && !d.json_schema && !d.json_object);
    msg_generate_clear(&d);
    free(buf);
    /* two of them: refused, naming the rule */
    g.json_object = true;
    g.grammar = "root ::= \"a\"";
    g.grammar_len = strlen(g.grammar);
    ck_assert_int_ne(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "at most one"));
    /* work_request carries the compiled grammar */
    msg_work_request_t w, wd;
    msg_work_request_init(&w);
    int32_t toks[2] = {1, 2};
    w.rid = 9;
    w.tokens = toks;
    w.n_tokens = 2;
    w.t_arrival_us = 1;
    w.grammar = "root ::= \"a\"";
    w.grammar_len = strlen(w.grammar);
    ck_assert_int_eq(msg_work_request_encode(&w, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_work_request_decode(buf, len, &wd, &err), 0);
    ck_assert_str_eq(wd.grammar, "root ::= \"a\"");
    msg_work_request_clear(&wd);
    free(buf);
}
END_TEST

/* Tool calls: tools, tool_choice and parallel_tool_calls in generate (with messages only,
 * not with a grammar); done.tool_calls back. */
START_TEST(generate_and_done_tool_fields) {
    msg_generate_t g, d;
    msg_err_t err;
    void *buf = NULL;
    size_t len = 0;
    msg_generate_init(&g);
    ck_assert(g.parallel_tool_calls); /* the default */
    msg_set_str(g.id, sizeof g.id, "t");
    msg_chat_t m = {.role = "user", .content = "hi", .content_len = 2};
    g.messages = &m;
    g.n_messages = 1;
    g.tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    g.tools_len = strlen(g.tools);
    msg_set_str(g.tool_choice, sizeof g.tool_choice, "f");
    g.parallel_tool_calls = false;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_generate_decode(buf, len, &d, &err), 0);
    ck_assert_str_eq(d.tools, g.tools);
    ck_assert_str_eq(d.tool_choice, "f");
    ck_assert(!d.parallel_tool_calls);
    msg_generate_clear(&d);
    free(buf);
    g.json_object = true; /* tools with a grammar of its own */
    ck_assert_int_ne(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_str_eq(err.field, "tools");
    g.json_object = false;
    g.tools = NULL; /* a named tool_choice without tools */
    g.tools_len = 0;
    ck_assert_int_ne(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_str_eq(err.field, "tool_choice");
    msg_done_t dn, dd;
    msg_done_init(&dn);
    msg_set_str(dn.id, sizeof dn.id, "t");
    msg_tool_call_t calls[2] = {{.id = "call_t_0", .name = "f", .arguments = "{}"},
                                {.id = "call_t_1", .name = "g", .arguments = "{\"a\":1}"}};
    calls[0].arguments_len = 2;
    calls[1].arguments_len = strlen(calls[1].arguments);
    dn.tool_calls = calls;
    dn.n_tool_calls = 2;
    ck_assert_int_eq(msg_done_encode(&dn, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_done_decode(buf, len, &dd, &err), 0);
    ck_assert_int_eq(dd.n_tool_calls, 2);
    ck_assert_str_eq(dd.tool_calls[1].id, "call_t_1");
    ck_assert_str_eq(dd.tool_calls[1].name, "g");
    ck_assert_str_eq(dd.tool_calls[1].arguments, "{\"a\":1}");
    msg_done_clear(&dd);
    free(buf);
}
END_TEST

/* logit_bias {token, bias} entries and the two penalties travel in generate and
 * work_request; out-of-range values and a token given twice are refused. */
START_TEST(generate_logit_bias_and_penalties) {
    msg_generate_t g, d;
    msg_err_t err;
    void *buf = NULL;
    size_t len = 0;
    msg_generate_init(&g);
    ck_assert_float_eq(g.sampling.presence_penalty, 0);
    ck_assert_float_eq(g.sampling.frequency_penalty, 0);
    msg_set_str(g.id, sizeof g.id, "b");
    g.prompt = "hi";
    g.prompt_len = 2;
    msg_logit_bias_t b[] = {{15, -100}, {7, 2.5f}, {49151, 100}};
    g.logit_bias = b;
    g.n_logit_bias = 3;
    g.sampling.presence_penalty = -1.5f;
    g.sampling.frequency_penalty = 2;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_generate_decode(buf, len, &d, &err), 0);
    ck_assert_int_eq(d.n_logit_bias, 3);
    ck_assert_mem_eq(d.logit_bias, b, sizeof b);
    ck_assert_float_eq(d.sampling.presence_penalty, -1.5f);
    ck_assert_float_eq(d.sampling.frequency_penalty, 2);
    msg_generate_clear(&d);
    ck_assert_ptr_null(d.logit_bias);
    free(buf);
    /* a token twice: refused, naming it */
    b[2].token = 15;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "token 15 appears twice"));
    b[2].token = 3;
    /* work_request carries them to the worker */
    msg_work_request_t w, wd;
    msg_work_request_init(&w);
    int32_t toks[2] = {1, 2};
    w.rid = 9;
    w.tokens = toks;
    w.n_tokens = 2;
    w.t_arrival_us = 1;
    w.logit_bias = b;
    w.n_logit_bias = 3;
    w.sampling.frequency_penalty = 0.25f;
    ck_assert_int_eq(msg_work_request_encode(&w, &buf, &len, &err), 0);
    ck_assert_int_eq(msg_work_request_decode(buf, len, &wd, &err), 0);
    ck_assert_int_eq(wd.n_logit_bias, 3);
    ck_assert_mem_eq(wd.logit_bias, b, sizeof b);
    ck_assert_float_eq(wd.sampling.frequency_penalty, 0.25f);
    msg_work_request_clear(&wd);
    free(buf);
    /* more than MSG_MAX_LOGIT_BIAS entries */
    msg_logit_bias_t *many = calloc(MSG_MAX_LOGIT_BIAS + 1, sizeof *many);
    for (int i = 0; i <= MSG_MAX_LOGIT_BIAS; i++)
        many[i].token = i;
    g.logit_bias = many;
    g.n_logit_bias = MSG_MAX_LOGIT_BIAS;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), 0);
    free(buf);
    g.n_logit_bias = MSG_MAX_LOGIT_BIAS + 1;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), -EINVAL);
    free(many);
    /* hand-made frames: a bias out of [-100, 100], a negative token, a penalty out of
     * [-2, 2] */
    const struct {
        int64_t token;
        double bias;
        const char *field;
    } bad[] = {{4, 100.5, "logit_bias[0].bias"}, {-1, 1, "logit_bias[0].token"}};
    for (int i = 0; i < 2; i++) {
        frame_t f;
        fr_begin(&f, "generate", 3);
        fr_str(&f, "id", "a");
        fr_str(&f, "prompt", "hi");
        fr_key(&f, "logit_bias");
        msgpack_pack_array(&f.pk, 1);
        msgpack_pack_map(&f.pk, 2);
        fr_int(&f, "token", bad[i].token);
        fr_dbl(&f, "bias", bad[i].bias);
        ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
        ck_assert_str_eq(err.field, bad[i].field);
    }
    frame_t f;
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_dbl(&f, "presence_penalty", 2.5);
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    ck_assert_str_eq(err.field, "presence_penalty");
}
END_TEST

START_TEST(generate_errors) {
    frame_t f;
    msg_err_t err;

    /* the message of the brief, verbatim */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_str(&f, "max_tokens", "many");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_BAD_TYPE);
    ck_assert_str_eq(err.msg, "field 'max_tokens': expected int, got str");
    ck_assert_str_eq(msg_err_kind_name(err.kind), "bad_type");

    /* ranges */
    struct {
        const char *key;
        double v;
        bool is_int;
    } ranges[] = {{"max_tokens", 0, true},
                  {"max_tokens", MSG_MAX_TOKENS + 1, true},
                  {"temperature", -0.1, false},
                  {"temperature", NAN, false},
                  {"top_p", 0, false},
                  {"top_p", 1.01, false},
                  {"min_p", -1, false},
                  {"repeat_penalty", 0, false},
                  {"top_k", -5, true},
                  {"repeat_last_n", -1, true},
                  {"seed", -1, true}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        fr_begin(&f, "generate", 3);
        fr_str(&f, "id", "a");
        fr_str(&f, "prompt", "hi");
        if (ranges[i].is_int)
            fr_int(&f, ranges[i].key, (int64_t)ranges[i].v);
        else
            fr_dbl(&f, ranges[i].key, ranges[i].v);
        ck_assert_msg(dec_gen(&f, &err) == -ERANGE, "%s: %s", ranges[i].key, err.msg);
        ck_assert_int_eq(err.kind, MSG_E_RANGE);
        ck_assert_str_eq(err.field, ranges[i].key);
    }
    /* a double that rounds to 0 as a float is checked as 0; a huge one is out of range */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_dbl(&f, "repeat_penalty", 1e-60);
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_dbl(&f, "temperature", 1e300);
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    /* ints are accepted for float fields */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_int(&f, "temperature", 1);
    ck_assert_int_eq(dec_gen(&f, &err), 0);

    /* prompt and messages together; neither */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_key(&f, "messages");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_map(&f.pk, 2);
    fr_str(&f, "role", "user");
    fr_str(&f, "content", "x");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_INVALID);
    fr_begin(&f, "generate", 1);
    fr_str(&f, "id", "a");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_MISSING);

    /* a chat message with a wrong field names its path */
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_key(&f, "messages");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_map(&f.pk, 2);
    fr_str(&f, "role", "user");
    fr_str(&f, "content", "x");
    msgpack_pack_map(&f.pk, 2);
    fr_str(&f, "role", "user");
    fr_int(&f, "content", 3);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "messages[1].content");
    ck_assert_str_eq(err.msg, "field 'messages[1].content': expected str, got int");
    /* empty messages array */
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_key(&f, "messages");
    msgpack_pack_array(&f.pk, 0);
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);

    /* oversize: id, stop strings (count and length), prompt, messages */
    char big[MSG_MAX_ID_BYTES + 2];
    memset(big, 'i', sizeof big - 1);
    big[sizeof big - 1] = 0;
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", big);
    fr_str(&f, "prompt", "hi");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_TOO_LONG);
    ck_assert_str_eq(err.msg, "field 'id': 65 bytes, limit 64");
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "");
    fr_str(&f, "prompt", "hi");
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    ck_assert_str_eq(err.msg, "field 'id': must not be empty");

    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_key(&f, "stop");
    msgpack_pack_array(&f.pk, MSG_MAX_STOP + 1);
    for (int i = 0; i <= MSG_MAX_STOP; i++)
        msgpack_pack_str_with_body(&f.pk, "s", 1);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_TOO_LONG);
    ck_assert_str_eq(err.msg, "field 'stop': 9 entries, limit 8");
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_key(&f, "stop");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_str_with_body(&f.pk, "s", 1);
    char lstop[MSG_MAX_STOP_BYTES + 1];
    memset(lstop, 's', sizeof lstop);
    msgpack_pack_str_with_body(&f.pk, lstop, sizeof lstop);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "stop[1]");

    char *prompt = malloc(MSG_MAX_PROMPT_BYTES + 2);
    memset(prompt, 'p', MSG_MAX_PROMPT_BYTES + 1);
    prompt[MSG_MAX_PROMPT_BYTES + 1] = 0;
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", prompt);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_TOO_LONG);
    prompt[MSG_MAX_PROMPT_BYTES] = 0; /* exactly at the limit is fine */
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", prompt);
    ck_assert_int_eq(dec_gen(&f, &err), 0);
    /* two halves in messages are fine alone, but not above the total limit */
    prompt[MSG_MAX_PROMPT_BYTES / 2 + 1] = 0;
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_key(&f, "messages");
    msgpack_pack_array(&f.pk, 2);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map(&f.pk, 2);
        fr_str(&f, "role", "user");
        fr_str(&f, "content", prompt);
    }
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_TOO_LONG);
    free(prompt);

    /* a frame over the client limit, whatever it holds */
    char *huge = calloc(1, MSG_MAX_CLIENT_FRAME + 1);
    memset(huge, 'u', MSG_MAX_CLIENT_FRAME);
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_str(&f, "unknown", huge);
    ck_assert_int_eq(dec_gen(&f, &err), -EMSGSIZE);
    ck_assert_int_eq(err.kind, MSG_E_TOO_BIG);
    free(huge);

    /* duplicate key */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_str(&f, "id", "b");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.msg, "field 'id' appears twice");

    /* a NUL inside a fixed string */
    fr_begin(&f, "generate", 2);
    fr_key(&f, "id");
    msgpack_pack_str_with_body(&f.pk, "a\0b", 3);
    fr_str(&f, "prompt", "hi");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_INVALID);

    /* a non-str key */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    msgpack_pack_int(&f.pk, 5);
    msgpack_pack_int(&f.pk, 5);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_BAD_TYPE);
}
END_TEST

/* resume's own rules (have against max_tokens and stream, tokens against have) and
 * the explainability fields of generate, each refused naming its field */
static int dec_resume(frame_t *f, msg_err_t *err, msg_resume_t *out) {
    msg_resume_t r;
    int rc = msg_resume_decode(f->sb.data, f->sb.size, &r, err);
    if (out && !rc)
        *out = r;
    else
        msg_resume_clear(&r);
    msgpack_sbuffer_destroy(&f->sb);
    return rc;
}

static void fr_tokens(frame_t *f, int n) {
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    fr_key(f, "tokens");
    msgpack_pack_bin_with_body(&f->pk, t, (size_t)n * sizeof *t);
}

START_TEST(resume_and_explain_errors) {
    frame_t f;
    msg_err_t err;
    msg_resume_t r;
    fr_begin(&f, "resume", 4); /* good: have 2 with their ids */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_int(&f, "have", 2);
    fr_tokens(&f, 2);
    ck_assert_int_eq(dec_resume(&f, &err, &r), 0);
    ck_assert_int_eq(r.have, 2);
    ck_assert_int_eq(r.n_tokens, 2);
    ck_assert_int_eq(r.tokens[1], 2);
    msg_resume_clear(&r);
    fr_begin(&f, "resume", 2); /* no have */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    ck_assert_int_eq(dec_resume(&f, &err, NULL), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_MISSING);
    ck_assert_str_eq(err.field, "have");
    fr_begin(&f, "resume", 4); /* more events than max_tokens */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_int(&f, "max_tokens", 4);
    fr_int(&f, "have", 5);
    ck_assert_int_eq(dec_resume(&f, &err, NULL), -EPROTO);
    ck_assert_str_eq(err.field, "have");
    fr_begin(&f, "resume", 4); /* token events of a request that streams none */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_key(&f, "stream");
    msgpack_pack_false(&f.pk);
    fr_int(&f, "have", 2);
    ck_assert_int_eq(dec_resume(&f, &err, NULL), -EPROTO);
    ck_assert_str_eq(err.field, "have");
    fr_begin(&f, "resume", 4); /* 3 ids for 2 events */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_int(&f, "have", 2);
    fr_tokens(&f, 3);
    ck_assert_int_eq(dec_resume(&f, &err, NULL), -EPROTO);
    ck_assert_str_eq(err.field, "tokens");
    fr_begin(&f, "generate", 3); /* top_logprobs past 20 */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_int(&f, "top_logprobs", MSG_MAX_TOP_LOGPROBS + 1);
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    ck_assert_str_eq(err.field, "top_logprobs");
    fr_begin(&f, "generate", 3); /* trace is a bool */
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_str(&f, "trace", "yes");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_BAD_TYPE);
    ck_assert_str_eq(err.field, "trace");
}
END_TEST

static int dec_ctl(frame_t *f, msg_err_t *err, msg_ctl_t *out) {
    msg_ctl_t c;
    int rc = msg_ctl_decode(f->sb.data, f->sb.size, &c, err);
    if (out && !rc)
        *out = c;
    msgpack_sbuffer_destroy(&f->sb);
    return rc;
}

/* `strata ctl`'s command: restart names one actor or says all; the others name none */
START_TEST(ctl_rules) {
    frame_t f;
    msg_err_t err;
    msg_ctl_t c;
    fr_begin(&f, "ctl", 2);
    fr_str(&f, "cmd", "restart");
    fr_str(&f, "name", "worker1");
    ck_assert_int_eq(dec_ctl(&f, &err, &c), 0);
    ck_assert_int_eq(c.cmd, MSG_CTL_RESTART);
    ck_assert_str_eq(c.name, "worker1");
    ck_assert_int_eq(c.grace_ms, -1); /* serve's --drain-timeout */
    fr_begin(&f, "ctl", 1);           /* restart of nothing */
    fr_str(&f, "cmd", "restart");
    ck_assert_int_eq(dec_ctl(&f, &err, NULL), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_INVALID);
    fr_begin(&f, "ctl", 2); /* status of one actor: not a thing */
    fr_str(&f, "cmd", "status");
    fr_str(&f, "name", "router");
    ck_assert_int_eq(dec_ctl(&f, &err, NULL), -EPROTO);
    fr_begin(&f, "ctl", 1);
    fr_str(&f, "cmd", "reboot"); /* not one of the commands */
    ck_assert_int_eq(dec_ctl(&f, &err, NULL), -ERANGE);
    ck_assert_str_eq(err.field, "cmd");
    fr_begin(&f, "ctl", 2);
    fr_str(&f, "cmd", "drain");
    fr_int(&f, "grace_ms", -2);
    ck_assert_int_eq(dec_ctl(&f, &err, NULL), -ERANGE);
    ck_assert_str_eq(msg_ctl_state_name(MSG_CTL_DRAINING), "draining");
    ck_assert_ptr_null(msg_ctl_state_name(6));
}
END_TEST

START_TEST(envelope_errors) {
    frame_t f;
    msg_err_t err;
    int type;
    /* unknown type, type not a str, type missing */
    fr_begin(&f, "fly_to_moon", 0);
    ck_assert_int_eq(msg_peek_type(f.sb.data, f.sb.size, &type, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_UNKNOWN_TYPE);
    ck_assert_str_eq(err.msg, "unknown message type 'fly_to_moon'");
    ck_assert_int_eq(type, MSG_NONE);
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, NULL, 1);
    fr_int(&f, "type", 1);
    ck_assert_int_eq(msg_peek_type(f.sb.data, f.sb.size, &type, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_UNKNOWN_TYPE);
    ck_assert_str_eq(err.msg, "field 'type': expected str, got int");
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, NULL, 1);
    fr_str(&f, "id", "x");
    ck_assert_int_eq(msg_peek_type(f.sb.data, f.sb.size, &type, &err), -EPROTO);
    ck_assert_str_eq(err.msg, "missing required field 'type'");
    msgpack_sbuffer_destroy(&f.sb);

    /* versions */
    fr_begin(&f, "cancel", 2);
    fr_str(&f, "id", "x");
    fr_int(&f, "v", 2);
    ck_assert_int_eq(msg_peek_type(f.sb.data, f.sb.size, &type, &err), -EPROTONOSUPPORT);
    ck_assert_int_eq(err.kind, MSG_E_VERSION);
    ck_assert_str_eq(err.msg, "unsupported version 2 of 'cancel' (this build speaks 1)");
    msg_cancel_t c;
    ck_assert_int_eq(msg_cancel_decode(f.sb.data, f.sb.size, &c, &err), -EPROTONOSUPPORT);
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "cancel", 2);
    fr_str(&f, "id", "x");
    fr_str(&f, "v", "1");
    ck_assert_int_eq(msg_peek_type(f.sb.data, f.sb.size, &type, &err), -EPROTONOSUPPORT);
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "cancel", 2); /* v 1 explicitly: fine */
    fr_str(&f, "id", "x");
    fr_int(&f, "v", 1);
    ck_assert_int_eq(msg_cancel_decode(f.sb.data, f.sb.size, &c, &err), 0);
    /* the wrong decoder for a valid frame */
    msg_generate_t g;
    ck_assert_int_eq(msg_generate_decode(f.sb.data, f.sb.size, &g, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_WRONG_TYPE);
    ck_assert_str_eq(err.msg, "expected message type 'generate', got 'cancel'");
    msgpack_sbuffer_destroy(&f.sb);

    /* not a map */
    const uint8_t arr[] = {0x92, 0x01, 0x02};
    ck_assert_int_eq(msg_peek_type(arr, sizeof arr, &type, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_NOT_MAP);
    ck_assert_str_eq(err.msg, "a message must be a MessagePack map, got array");
    const uint8_t one[] = {0x05};
    ck_assert_int_eq(msg_peek_type(one, 1, &type, &err), -EPROTO);
    /* empty, bad byte, trailing bytes, a huge count that is a lie, deep nesting */
    ck_assert_int_eq(msg_peek_type(NULL, 0, &type, &err), -EBADMSG);
    ck_assert_int_eq(err.kind, MSG_E_MALFORMED);
    const uint8_t c1[] = {0xc1};
    ck_assert_int_eq(msg_peek_type(c1, 1, &type, &err), -EBADMSG);
    ck_assert_str_eq(err.msg, "invalid MessagePack byte 0xc1 at offset 0");
    const uint8_t lie[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'x'};
    ck_assert_int_eq(msg_peek_type(lie, sizeof lie, &type, &err), -EBADMSG);
    const uint8_t lie_arr[] = {0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(msg_peek_type(lie_arr, sizeof lie_arr, &type, &err), -EBADMSG);
    uint8_t deep[64];
    deep[0] = 0x81;
    deep[1] = 0xa1;
    deep[2] = 'x';
    for (int i = 3; i < 63; i++)
        deep[i] = 0x91; /* [[[[...]]]] */
    deep[63] = 0x00;
    ck_assert_int_eq(msg_peek_type(deep, sizeof deep, &type, &err), -EBADMSG);
    ck_assert_msg(strstr(err.msg, "nested deeper"), "%s", err.msg);

    void *buf;
    size_t len;
    encode_ok(MSG_CANCEL, &buf, &len);
    uint8_t *tr = malloc(len + 1);
    memcpy(tr, buf, len);
    tr[len] = 0xc0;
    ck_assert_int_eq(msg_peek_type(tr, len + 1, &type, &err), -EBADMSG);
    ck_assert_msg(strstr(err.msg, "trailing"), "%s", err.msg);
    free(tr);
    free(buf);

    /* msg_peek_id, for answering a bad request with its id */
    char id[MSG_MAX_ID_BYTES + 1];
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "abc");
    fr_str(&f, "max_tokens", "bad");
    ck_assert_int_eq(msg_peek_id(f.sb.data, f.sb.size, id, sizeof id), 0);
    ck_assert_str_eq(id, "abc");
    msgpack_sbuffer_destroy(&f.sb);
    ck_assert_int_eq(msg_peek_id(arr, sizeof arr, id, sizeof id), -EPROTO);
    ck_assert_str_eq(id, "");
}
END_TEST

START_TEST(truncated_every_prefix) {
    for (int i = 0; i < N_TYPES; i++) {
        void *buf;
        size_t len;
        encode_ok(s_all_types[i], &buf, &len);
        for (size_t n = 0; n < len; n++) {
            uint8_t *cut = malloc(n ? n : 1); /* exact size: ASan sees any over-read */
            memcpy(cut, buf, n);
            msg_any_t d;
            msg_err_t err;
            int rc = msg_any_decode(cut, n, &d, &err);
            ck_assert_msg(rc == -EBADMSG, "%s cut at %zu: %d %s", msg_type_name(s_all_types[i]), n,
                          rc, err.msg);
            ck_assert_int_eq(err.kind, MSG_E_MALFORMED);
            free(cut);
        }
        free(buf);
    }
}
END_TEST

START_TEST(random_bytes_and_mutations) {
    uint64_t st = 12345;
    int ok = 0;
    for (int it = 0; it < 20000; it++) {
        uint8_t b[96];
        size_t n = test_rand_u64(&st) % sizeof b;
        if (it % 2) { /* mutate a valid frame */
            void *buf;
            size_t len;
            encode_ok(s_all_types[it / 2 % N_TYPES], &buf, &len);
            n = len < sizeof b ? len : sizeof b;
            memcpy(b, buf, n);
            free(buf);
            for (int k = 0; k < 3; k++)
                b[test_rand_u64(&st) % (n ? n : 1)] ^= (uint8_t)test_rand_u64(&st);
        } else {
            for (size_t i = 0; i < n; i++)
                b[i] = (uint8_t)test_rand_u64(&st);
        }
        uint8_t *exact = malloc(n ? n : 1);
        memcpy(exact, b, n);
        msg_any_t d;
        msg_err_t err;
        int rc = msg_any_decode(exact, n, &d, &err);
        if (rc == 0) {
            ok++;
            msg_any_clear(&d);
        } else {
            ck_assert(rc == -EBADMSG || rc == -EPROTO || rc == -ERANGE || rc == -EPROTONOSUPPORT ||
                      rc == -EMSGSIZE);
            ck_assert(err.code == rc && err.msg[0]);
        }
        /* every typed decoder on the same bytes */
        for (int t = 0; t < N_TYPES; t++) {
            msg_any_t m;
            rc = msg_decode(s_all_types[t], exact, n, &m.u, NULL);
            if (rc == 0)
                msg_clear(s_all_types[t], &m.u);
        }
        free(exact);
    }
    ck_assert_int_gt(ok, 0); /* some mutations stay valid */
}
END_TEST

START_TEST(other_limits) {
    frame_t f;
    msg_err_t err;
    /* tokens: not a multiple of 4, negative id, too many */
    msg_work_request_t w;
    fr_begin(&f, "work_request", 3);
    fr_int(&f, "rid", 1);
    fr_int(&f, "t_arrival_us", 1);
    fr_key(&f, "tokens");
    msgpack_pack_bin_with_body(&f.pk, "\1\0\0", 3);
    ck_assert_int_eq(msg_work_request_decode(f.sb.data, f.sb.size, &w, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_INVALID);
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "work_request", 3);
    fr_int(&f, "rid", 1);
    fr_int(&f, "t_arrival_us", 1);
    fr_key(&f, "tokens");
    msgpack_pack_bin_with_body(&f.pk, "\1\0\0\0\xff\xff\xff\xff", 8);
    ck_assert_int_eq(msg_work_request_decode(f.sb.data, f.sb.size, &w, &err), -ERANGE);
    ck_assert_str_eq(err.msg, "field 'tokens': entry 1 = -1 is out of range [0, 2147483647]");
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "work_request", 3);
    fr_int(&f, "rid", 1);
    fr_int(&f, "t_arrival_us", 1);
    fr_key(&f, "tokens");
    msgpack_pack_bin(&f.pk, 4 * (MSG_MAX_SEQ_TOKENS + 1));
    char *zeros = calloc(4, MSG_MAX_SEQ_TOKENS + 1);
    msgpack_pack_bin_body(&f.pk, zeros, 4 * (MSG_MAX_SEQ_TOKENS + 1));
    free(zeros);
    ck_assert_int_eq(msg_work_request_decode(f.sb.data, f.sb.size, &w, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_TOO_LONG);
    msgpack_sbuffer_destroy(&f.sb);

    /* counters: too many; a non-int value */
    msg_stats_reply_t s;
    fr_begin(&f, "stats_reply", 1);
    fr_key(&f, "counters");
    msgpack_pack_map(&f.pk, MSG_MAX_COUNTERS + 1);
    for (int i = 0; i <= MSG_MAX_COUNTERS; i++) {
        char k[16];
        snprintf(k, sizeof k, "c%d", i);
        fr_int(&f, k, i);
    }
    ck_assert_int_eq(msg_stats_reply_decode(f.sb.data, f.sb.size, &s, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_TOO_LONG);
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "stats_reply", 1);
    fr_key(&f, "counters");
    msgpack_pack_map(&f.pk, 1);
    fr_str(&f, "a.b", "1");
    ck_assert_int_eq(msg_stats_reply_decode(f.sb.data, f.sb.size, &s, &err), -EPROTO);
    ck_assert_str_eq(err.field, "counters[0]");
    msgpack_sbuffer_destroy(&f.sb);

    /* enums */
    msg_done_t d;
    fr_begin(&f, "done", 2);
    fr_str(&f, "id", "a");
    fr_str(&f, "finish_reason", "bored");
    ck_assert_int_eq(msg_done_decode(f.sb.data, f.sb.size, &d, &err), -ERANGE);
    ck_assert_str_eq(err.msg, "field 'finish_reason': 'bored' is not one of the allowed values");
    msgpack_sbuffer_destroy(&f.sb);

    /* events: index/token consistency */
    msg_work_event_t e;
    fr_begin(&f, "work_event", 4);
    fr_int(&f, "rid", 1);
    fr_int(&f, "index", -1);
    fr_int(&f, "token", -1);
    fr_int(&f, "finish", 0);
    ck_assert_int_eq(msg_work_event_decode(f.sb.data, f.sb.size, &e, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_INVALID);
    msgpack_sbuffer_destroy(&f.sb);

    /* nested struct field error names its path */
    fr_begin(&f, "done", 4);
    fr_str(&f, "id", "a");
    fr_str(&f, "finish_reason", "eos");
    fr_key(&f, "usage");
    msgpack_pack_map(&f.pk, 2);
    fr_int(&f, "prompt_tokens", 1);
    fr_int(&f, "completion_tokens", -3);
    fr_key(&f, "timings");
    msgpack_pack_map(&f.pk, 0);
    ck_assert_int_eq(msg_done_decode(f.sb.data, f.sb.size, &d, &err), -ERANGE);
    ck_assert_str_eq(err.field, "usage.completion_tokens");
    msgpack_sbuffer_destroy(&f.sb);
}
END_TEST

START_TEST(encoder_refuses_invalid) {
    void *buf = (void *)1;
    size_t len = 1;
    msg_err_t err;
    msg_generate_t g;
    msg_generate_init(&g);
    g.prompt = "hi";
    g.prompt_len = 2;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), -EINVAL); /* no id */
    ck_assert_ptr_null(buf);
    ck_assert_int_eq(err.kind, MSG_E_RANGE);
    strcpy(g.id, "x");
    g.max_tokens = 0;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), -EINVAL);
    ck_assert_str_eq(err.field, "max_tokens");
    g.max_tokens = 5;
    g.n_stop = MSG_MAX_STOP + 3;
    memset(g.stop, 's', sizeof g.stop); /* not even NUL-terminated */
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), -EINVAL);
    g.n_stop = 0;
    g.sampling.temperature = NAN;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), -EINVAL);
    g.sampling.temperature = 0;
    ck_assert_int_eq(msg_generate_encode(&g, &buf, &len, &err), 0);
    free(buf);
    msg_token_t t;
    msg_token_init(&t);
    strcpy(t.id, "x");
    t.token = -4;
    t.text = "";
    ck_assert_int_eq(msg_token_encode(&t, &buf, &len, &err), -EINVAL);

    /* names */
    ck_assert_str_eq(msg_type_name(MSG_WORK_EVENT), "work_event");
    ck_assert_int_eq(msg_type_from_name("health_reply", 12), MSG_HEALTH_REPLY);
    ck_assert_int_eq(msg_type_from_name("nope", 4), MSG_NONE);
    ck_assert_ptr_null(msg_type_name(19));
    ck_assert_int_eq(msg_type_family(MSG_PONG), MSG_FAMILY_CTL);
    ck_assert_str_eq(msg_finish_name(MSG_FINISH_CANCELLED), "cancelled");
    ck_assert_str_eq(msg_code_name(MSG_CODE_NOT_FOUND), "not_found");
    ck_assert_str_eq(msg_state_name(MSG_STATE_UNHEALTHY), "unhealthy");

    msg_counter_t *c = NULL;
    int n = 0;
    ck_assert_int_eq(msg_counters_add(&c, &n, "a.b", 3), 0);
    ck_assert_int_eq(msg_counters_add(&c, &n, "", 3), -EINVAL);
    ck_assert_int_eq(n, 1);
    free(c);
}
END_TEST

/* ---- strict client frames: UTF-8 and duplicate keys */

START_TEST(utf8_validator) {
    static const struct {
        const char *bytes;
        size_t n;
        bool ok;
        size_t bad_at; /* when !ok */
    } cases[] = {
        {"", 0, true, 0},
        {"plain ascii", 11, true, 0},
        {"\xc3\xa9t\xc3\xa9", 5, true, 0}, /* "été": 2-byte */
        {"\xe2\x82\xac", 3, true, 0},      /* U+20AC: 3-byte */
        {"\xf0\x9f\x98\x80", 4, true, 0},  /* U+1F600: 4-byte */
        {"\xed\x9f\xbf", 3, true, 0},      /* U+D7FF: last before the surrogates */
        {"\xee\x80\x80", 3, true, 0},      /* U+E000: first after them */
        {"\xf4\x8f\xbf\xbf", 4, true, 0},  /* U+10FFFF: the last code point */
        {"\xef\xbf\xbd", 3, true, 0},      /* U+FFFD */
        {"a\0b", 3, true, 0},              /* NUL is UTF-8 (fields refuse it apart) */
        {"\xc0\xaf", 2, false, 0},         /* overlong '/' */
        {"\xc1\xbf", 2, false, 0},         /* overlong 2-byte */
        {"\xe0\x80\xaf", 3, false, 0},     /* overlong 3-byte */
        {"\xe0\x9f\xbf", 3, false, 0},     /* overlong U+07FF */
        {"\xf0\x8f\xbf\xbf", 4, false, 0}, /* overlong U+FFFF */
        {"ab\xed\xa0\x80", 5, false, 2},   /* U+D800: a surrogate */
        {"\xed\xbf\xbf", 3, false, 0},     /* U+DFFF */
        {"\xf4\x90\x80\x80", 4, false, 0}, /* U+110000 */
        {"\xf5\x80\x80\x80", 4, false, 0}, /* lead byte F5 */
        {"\xff", 1, false, 0},
        {"x\x80", 2, false, 1},            /* a lone continuation byte */
        {"\xc3", 1, false, 0},             /* truncated 2-byte */
        {"ok\xe2\x82", 4, false, 2},       /* truncated 3-byte */
        {"\xf0\x9f\x98", 3, false, 0},     /* truncated 4-byte */
        {"\xe2\x28\xa1", 3, false, 0},     /* bad second byte */
        {"\xf0\x9f\x28\x80", 4, false, 0}, /* bad third byte */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t at = 999;
        bool ok = msg_utf8_valid(cases[i].bytes, cases[i].n, &at);
        ck_assert_msg(ok == cases[i].ok, "case %zu: valid=%d", i, ok);
        if (!ok)
            ck_assert_msg(at == cases[i].bad_at, "case %zu: bad at %zu", i, at);
    }
    ck_assert(msg_utf8_valid(NULL, 0, NULL));
}
END_TEST

START_TEST(strict_client_frames) {
    frame_t f;
    msg_err_t err;

    /* an id, a prompt, a stop string, a chat role that are not UTF-8: refused, named */
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a\xed\xa0\x80");
    fr_str(&f, "prompt", "hi");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_UTF8);
    ck_assert_str_eq(err.field, "id");
    ck_assert_str_eq(err.msg, "field 'id': invalid UTF-8 at byte 1");

    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "caf\xc3");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "prompt");

    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_key(&f, "stop");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_str_with_body(&f.pk, "ok", 2);
    msgpack_pack_str_with_body(&f.pk, "\xc0\xaf", 2);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "stop[1]");

    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_key(&f, "messages");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_map(&f.pk, 2);
    fr_str(&f, "role", "us\xf4\x90\x80\x80");
    fr_str(&f, "content", "hello");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "messages[0].role");

    /* unknown keys are ignored, but held to the same rules */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_str(&f, "x_note", "\xff");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "x_note");

    /* a valid multi-byte id and prompt decode */
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "\xc3\xa9t\xc3\xa9-\xf0\x9f\x98\x80");
    fr_str(&f, "prompt", "\xe2\x82\xac 5");
    ck_assert_int_eq(dec_gen(&f, &err), 0);

    /* a key twice, in any map: the envelope's "type", an unknown key, a nested map */
    fr_begin(&f, "generate", 3);
    fr_str(&f, "type", "generate");
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_DUPLICATE);
    ck_assert_str_eq(err.msg, "field 'type' appears twice");

    fr_begin(&f, "generate", 4);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_int(&f, "x_extra", 1);
    fr_int(&f, "x_extra", 2);
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_DUPLICATE);
    ck_assert_str_eq(err.field, "x_extra");

    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_key(&f, "messages");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_map(&f.pk, 3);
    fr_str(&f, "role", "user");
    fr_str(&f, "content", "hello");
    fr_str(&f, "role", "system");
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_DUPLICATE);
    ck_assert_str_eq(err.field, "messages[0].role");

    /* a map of many keys (sorted, not compared pairwise), one of them twice */
    fr_begin(&f, "generate", 42);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    for (int i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof k, "x%d", i == 39 ? 7 : i);
        fr_int(&f, k, i);
    }
    ck_assert_int_eq(dec_gen(&f, &err), -EPROTO);
    ck_assert_str_eq(err.field, "x7");

    /* inside a nested unknown value, a non-str key is refused too */
    fr_begin(&f, "stats", 1);
    fr_key(&f, "x_meta");
    msgpack_pack_map(&f.pk, 1);
    msgpack_pack_int(&f.pk, 1);
    msgpack_pack_int(&f.pk, 2);
    msg_stats_t st;
    ck_assert_int_eq(msg_stats_decode(f.sb.data, f.sb.size, &st, &err), -EPROTO);
    ck_assert_int_eq(err.kind, MSG_E_BAD_TYPE);
    ck_assert_str_eq(err.field, "x_meta");
    msgpack_sbuffer_destroy(&f.sb);

    /* an empty prompt and an empty session are refused */
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "");
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    ck_assert_str_eq(err.field, "prompt");
    fr_begin(&f, "generate", 3);
    fr_str(&f, "id", "a");
    fr_str(&f, "prompt", "hi");
    fr_str(&f, "session", "");
    ck_assert_int_eq(dec_gen(&f, &err), -ERANGE);
    ck_assert_str_eq(err.field, "session");

    /* msg_peek_id echoes only an id an error event can carry */
    char id[MSG_MAX_ID_BYTES + 1];
    fr_begin(&f, "generate", 1);
    fr_str(&f, "id", "ok-\xc3\xa9");
    ck_assert_int_eq(msg_peek_id(f.sb.data, f.sb.size, id, sizeof id), 0);
    ck_assert_str_eq(id, "ok-\xc3\xa9");
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "generate", 1);
    fr_str(&f, "id", "bad\xc3");
    ck_assert_int_eq(msg_peek_id(f.sb.data, f.sb.size, id, sizeof id), -EPROTO);
    ck_assert_str_eq(id, "");
    msgpack_sbuffer_destroy(&f.sb);
    fr_begin(&f, "generate", 2);
    fr_str(&f, "id", "one");
    fr_str(&f, "id", "two");
    ck_assert_int_eq(msg_peek_id(f.sb.data, f.sb.size, id, sizeof id), -EPROTO);
    msgpack_sbuffer_destroy(&f.sb);

    /* the encoder never writes what the strict decoder refuses */
    msg_token_t t;
    msg_token_init(&t);
    strcpy(t.id, "r");
    t.text = "\xe2\x82";
    t.text_len = 2;
    void *buf;
    size_t len;
    ck_assert_int_eq(msg_token_encode(&t, &buf, &len, &err), -EINVAL);
    ck_assert_int_eq(err.kind, MSG_E_UTF8);
    ck_assert_str_eq(msg_err_kind_name(MSG_E_UTF8), "bad_utf8");
    ck_assert_str_eq(msg_err_kind_name(MSG_E_DUPLICATE), "duplicate_key");
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("msgs");
    TCase *tc = tcase_create("msgs");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, roundtrip_every_type);
    tcase_add_test(tc, roundtrip_values);
    tcase_add_test(tc, generate_logit_bias_and_penalties);
    tcase_add_test(tc, missing_and_wrong_type_every_field);
    tcase_add_test(tc, required_fields_named);
    tcase_add_test(tc, generate_grammar_fields);
    tcase_add_test(tc, generate_and_done_tool_fields);
    tcase_add_test(tc, generate_errors);
    tcase_add_test(tc, resume_and_explain_errors);
    tcase_add_test(tc, envelope_errors);
    tcase_add_test(tc, ctl_rules);
    tcase_add_test(tc, truncated_every_prefix);
    tcase_add_test(tc, random_bytes_and_mutations);
    tcase_add_test(tc, other_limits);
    tcase_add_test(tc, encoder_refuses_invalid);
    tcase_add_test(tc, utf8_validator);
    tcase_add_test(tc, strict_client_frames);
    suite_add_tcase(s, tc);
    return test_run_suite(argc, argv, s, CK_FORK_GETENV);
}
