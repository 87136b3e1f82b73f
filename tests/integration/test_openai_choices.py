"""test_openai_choices.py - OpenAI's n (docs/HTTP.md, "Choices") through the official `openai`
package on the default model: n greedy choices are n identical answers with index 0..n-1;
n sampled choices with a seed are the same n answers every time, choice 0 is the n = 1 answer
of that seed (choice i: of seed + i), and they are not all equal; a streamed n = 2 carries both indexes and
reassembles to the non-streamed answers; the usage counts the prompt once and sums the
completions; n = 17 is a 400."""
import os
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai")
import openai  # noqa: E402

N = 12
PROMPT = "Write one short sentence about the sea."


def chat(client, **kw):
    args = dict(model=u.MODEL_ID, messages=[{"role": "user", "content": PROMPT}], max_tokens=N)
    args.update(kw)
    return client.chat.completions.create(**args)


def texts(r):
    u.check([c.index for c in r.choices] == list(range(len(r.choices))),
            "indexes %r" % [c.index for c in r.choices])
    return [c.message.content for c in r.choices]


def test_greedy(client):
    r = chat(client, n=2, temperature=0)
    t = texts(r)
    u.check(len(t) == 2 and t[0] == t[1] and t[0], "greedy n=2: %r" % t)
    one = chat(client, temperature=0)
    u.check(one.choices[0].message.content == t[0], "greedy n=1 %r vs n=2 %r" %
            (one.choices[0].message.content, t))
    u.check(r.usage.prompt_tokens == one.usage.prompt_tokens,
            "prompt counted once: %r vs %r" % (r.usage, one.usage))
    u.check(r.usage.completion_tokens == 2 * one.usage.completion_tokens,
            "completions summed: %r vs %r" % (r.usage, one.usage))
    return t


def test_sampled(client):
    a = chat(client, n=3, temperature=1, seed=7)
    b = chat(client, n=3, temperature=1, seed=7)
    ta, tb = texts(a), texts(b)
    u.check(ta == tb, "seeded n=3 differs across calls: %r vs %r" % (ta, tb))
    u.check(len(set(ta)) > 1, "three sampled choices are all equal: %r" % ta)
    # choice i is the n = 1 answer of seed + i (choice 0: of the seed itself)
    ones = [chat(client, temperature=1, seed=7 + i) for i in range(3)]
    u.check(ta == [o.choices[0].message.content for o in ones],
            "choices %r vs n=1 answers of seeds 7, 8, 9 %r" %
            (ta, [o.choices[0].message.content for o in ones]))
    u.check(a.usage.prompt_tokens == ones[0].usage.prompt_tokens, "usage %r" % a.usage)
    u.check(a.usage.completion_tokens == sum(o.usage.completion_tokens for o in ones),
            "completion tokens %r, not the sum of %r" % (a.usage, [o.usage for o in ones]))
    return ta


def test_stream(client, want):
    got = {0: "", 1: ""}
    finish, usage = {}, None
    for ch in chat(client, n=2, temperature=1, seed=7, stream=True,
                   stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            u.check(c.index in got, "chunk index %r" % c.index)
            got[c.index] += c.delta.content or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    u.check([got[0], got[1]] == want[:2], "streamed %r vs %r" % (got, want[:2]))
    u.check(sorted(finish) == [0, 1], "finish_reason per choice: %r" % finish)
    u.check(usage is not None and usage.completion_tokens > 0, "stream usage %r" % usage)


def test_too_many(client):
    try:
        chat(client, n=17)
        u.check(False, "n=17 accepted")
    except openai.BadRequestError as e:
        u.check(e.body.get("param") == "n", "n=17: %r" % e.body)
        print("n=17:", e.body.get("message"))


def main():
    t0 = time.time()
    hport = u.free_port()
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]) as s:
        base = "http://127.0.0.1:%d/v1" % hport
        client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
        u.wait_for(lambda: s.read_log().find("ready") >= 0, 30, "ready")
        test_greedy(client)
        want = test_sampled(client)
        test_stream(client, want)
        test_too_many(client)
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
