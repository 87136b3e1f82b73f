/* test_serve_semcache_req.c - what the answer cache keys a request by
 * (serve/serve_semcache_req.h): every parameter that changes the answer changes the
 * context, the question alone changes only the exact key, the conversation before the
 * last turn is context (the same question after another conversation is another
 * request), a knowledge-base key only for a single user turn and blind to case, spacing
 * and final punctuation; what is never cached; answers compared after whitespace
 * normalisation. */
#include "serve_semcache_req.h"
#include "test_util.h"

#include <check.h>
#include <string.h>

static msg_chat_t s_pool[16][3]; /* the messages of the last 16 generates made */
static int s_next;

/* A greedy chat generate of question q after n_before earlier turns. */
static msg_generate_t s_gen(const char *q, int n_before) {
    msg_chat_t *s_msgs = s_pool[s_next++ % 16];
    msg_generate_t g;
    msg_generate_init(&g);
    g.stream = false;
    g.sampling.temperature = 0;
    static const char *before[] = {"Hello!", "Hi, how can I help?"};
    for (int i = 0; i < n_before; i++) {
        snprintf(s_msgs[i].role, sizeof s_msgs[i].role, "%s", i % 2 ? "assistant" : "user");
        s_msgs[i].content = (char *)before[i];
        s_msgs[i].content_len = strlen(before[i]);
    }
    snprintf(s_msgs[n_before].role, sizeof s_msgs[0].role, "user");
    s_msgs[n_before].content = (char *)q;
    s_msgs[n_before].content_len = strlen(q);
    g.messages = s_msgs;
    g.n_messages = n_before + 1;
    return g;
}

static serve_semcache_req_t s_key(const msg_generate_t *g) {
    serve_semcache_req_t k;
    ck_assert_ptr_null(serve_semcache_req_key(g, &k));
    return k;
}

START_TEST(test_keys) {
    msg_generate_t g = s_gen("What is the capital of France?", 0);
    serve_semcache_req_t a = s_key(&g);
    ck_assert(a.text_len == strlen("What is the capital of France?"));
    ck_assert(a.kb_exact != 0);
    /* the same request: the same keys */
    serve_semcache_req_t b = s_key(&g);
    ck_assert(a.context == b.context && a.exact == b.exact && a.kb_exact == b.kb_exact);
    /* another question: the same context, another exact key */
    msg_generate_t g2 = s_gen("What is the capital of Spain?", 0);
    serve_semcache_req_t c = s_key(&g2);
    ck_assert(c.context == a.context && c.exact != a.exact && c.kb_exact != a.kb_exact);
    /* every answer-changing parameter changes the context */
    msg_generate_t v;
#define S_CHANGED(stmt)                                                                            \
    do {                                                                                           \
        v = s_gen("What is the capital of France?", 0);                                            \
        stmt;                                                                                      \
        serve_semcache_req_t x = s_key(&v);                                                        \
        ck_assert_msg(x.context != a.context && x.exact != a.exact, "%s", #stmt);                  \
    } while (0)
    S_CHANGED(v.max_tokens = 7);
    S_CHANGED(v.sampling.top_k = 5);
    S_CHANGED(v.sampling.repeat_penalty = 1.3f);
    S_CHANGED((v.sampling.temperature = 0.7f, v.has_seed = true, v.sampling.seed = 3));
    S_CHANGED((v.n_stop = 1, snprintf(v.stop[0], sizeof v.stop[0], "\n")));
    S_CHANGED((v.grammar = "root ::= \"x\"", v.grammar_len = 12));
    S_CHANGED(v.json_object = true);
    S_CHANGED(snprintf(v.kv_compress, sizeof v.kv_compress, "window:64"));
    S_CHANGED(v.fit_context = true);
#undef S_CHANGED
    /* a seed matters only with one: two sampled requests with other seeds differ */
    msg_generate_t s1 = s_gen("x", 0), s2 = s_gen("x", 0);
    s1.sampling.temperature = s2.sampling.temperature = 0.7f;
    s1.has_seed = s2.has_seed = true;
    s1.sampling.seed = 1, s2.sampling.seed = 2;
    ck_assert(s_key(&s1).context != s_key(&s2).context);
    s1.sampling.temperature = s2.sampling.temperature = 0; /* greedy: the seed changes nothing */
    ck_assert(s_key(&s1).context == s_key(&s2).context);
    /* what does not change the answer does not change the key */
    msg_generate_t p = s_gen("What is the capital of France?", 0);
    p.priority = 50;
    snprintf(p.session, sizeof p.session, "chat-7");
    p.trace = true;
    snprintf(p.id, sizeof p.id, "another-id");
    serve_semcache_req_t pk = s_key(&p);
    ck_assert(pk.context == a.context && pk.exact == a.exact);
}
END_TEST

START_TEST(test_context) {
    msg_generate_t one = s_gen("What is the capital of France?", 0);
    msg_generate_t three = s_gen("What is the capital of France?", 2);
    serve_semcache_req_t a = s_key(&one), b = s_key(&three);
    ck_assert(a.context != b.context && a.exact != b.exact);
    ck_assert(b.kb_exact == 0); /* not single-turn: no knowledge-base key */
    ck_assert(b.text_len == a.text_len && !memcmp(b.text, a.text, a.text_len));
    /* a system turn is context too */
    msg_generate_t sys = s_gen("What is the capital of France?", 0);
    msg_chat_t m[2];
    snprintf(m[0].role, sizeof m[0].role, "system");
    m[0].content = "Answer in French.";
    m[0].content_len = strlen(m[0].content);
    m[1] = sys.messages[0];
    sys.messages = m;
    sys.n_messages = 2;
    serve_semcache_req_t c = s_key(&sys);
    ck_assert(c.context != a.context && c.kb_exact == 0);
    /* a raw prompt: its text is the question, no knowledge-base key */
    msg_generate_t pr;
    msg_generate_init(&pr);
    pr.stream = false;
    pr.sampling.temperature = 0;
    pr.prompt = "What is the capital of France?";
    pr.prompt_len = strlen(pr.prompt);
    serve_semcache_req_t d = s_key(&pr);
    ck_assert(d.kb_exact == 0 && d.exact != a.exact && d.text == pr.prompt);
}
END_TEST

START_TEST(test_not_cached) {
    serve_semcache_req_t k;
    msg_generate_t g = s_gen("q", 0);
    g.stream = true; /* streamed or not: the same request, the same keys */
    serve_semcache_req_t ks = s_key(&g);
    msg_generate_t g2 = s_gen("q", 0);
    ck_assert(ks.exact == s_key(&g2).exact);
    g = s_gen("q", 0);
    g.tools = "[]";
    ck_assert_str_eq(serve_semcache_req_key(&g, &k), "tools");
    g = s_gen("q", 0);
    g.top_logprobs = 2;
    ck_assert_str_eq(serve_semcache_req_key(&g, &k), "logprobs");
    g = s_gen("q", 0);
    g.sampling.temperature = 0.8f;
    ck_assert_str_eq(serve_semcache_req_key(&g, &k), "sampled without a seed");
    g.has_seed = true; /* a fixed seed makes it repeatable */
    ck_assert_ptr_null(serve_semcache_req_key(&g, &k));
    g.has_seed = false;
    g.cache_sampled = true; /* or the caller allows it */
    ck_assert_ptr_null(serve_semcache_req_key(&g, &k));
}
END_TEST

START_TEST(test_normalise) {
    const char *a = "Paris is  the capital.\n\nIt is in France. ";
    const char *b = "  Paris is the capital. It is\tin France.";
    ck_assert(serve_semcache_answer_hash(a, strlen(a)) == serve_semcache_answer_hash(b, strlen(b)));
    const char *c = "paris is the capital. It is in France.";
    ck_assert(serve_semcache_answer_hash(a, strlen(a)) != serve_semcache_answer_hash(c, strlen(c)));
    ck_assert(serve_semcache_answer_hash("", 0) != 0);
    const char *q1 = "Who wrote Hamlet?", *q2 = "  who   WROTE hamlet ", *q3 = "Who wrote Macbeth?";
    ck_assert(serve_semcache_question_hash(q1, strlen(q1)) ==
              serve_semcache_question_hash(q2, strlen(q2)));
    ck_assert(serve_semcache_question_hash(q1, strlen(q1)) !=
              serve_semcache_question_hash(q3, strlen(q3)));
    msg_generate_t g1 = s_gen(q1, 0), g2 = s_gen("who wrote hamlet!", 0);
    ck_assert(s_key(&g1).kb_exact == s_key(&g2).kb_exact);
    ck_assert(s_key(&g1).exact != s_key(&g2).exact); /* the exact layer is byte for byte */
}
END_TEST

static Suite *s_suite(void) {
    Suite *s = suite_create("semcache_req");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_keys);
    tcase_add_test(tc, test_context);
    tcase_add_test(tc, test_not_cached);
    tcase_add_test(tc, test_normalise);
    suite_add_tcase(s, tc);
    return s;
}

TEST_MAIN(s_suite)
