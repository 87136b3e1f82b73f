"""test_openai_sampling.py - logit_bias, presence_penalty and frequency_penalty through the
OpenAI HTTP API (the official `openai` package) on the default model, against oracles that
are not the server: the greedy token ids of `strata generate --greedy`, the model's own
alternatives (top_logprobs of an unpenalised run), and OpenAI's formula applied in NumPy to
the logits of `strata logits` (an independent forward pass over the prompt and the
completion): at every position where the choice is clear, the server's penalised greedy token
is the argmax of  logits + bias - frequency_penalty * count - presence_penalty * (count > 0),
count over the completion so far.  Also: -100 bans the greedy first token, +100 forces a
token at every position (greedy and sampled), a frequency penalty of 2 repeats fewer tokens
than none, an id outside the vocabulary is a 400."""
import os
import subprocess
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "numpy")
import numpy as np  # noqa: E402
import openai  # noqa: E402

N = 24
PROMPT = "Repeat the word 'apple' ten times, then count from one to ten."


def chat(client, **kw):
    args = dict(model=u.MODEL_ID, messages=[{"role": "user", "content": PROMPT}], max_tokens=N,
                temperature=0, logprobs=True, top_logprobs=5)
    args.update(kw)
    return client.chat.completions.create(**args)


def pieces(r):
    return [e.token for e in r.choices[0].logprobs.content]


def native_ids(endpoint, **kw):
    """Token ids and text of the same chat request over the native protocol (PROTOCOL.md)."""
    c = u.Client(u.zmq.Context.instance(), endpoint)
    m = dict(u.chat_request("oracle", PROMPT, N), stream=True)
    m.update(kw)
    c.send(m)
    ids, text = [], ""
    while True:
        e = c.recv(60)
        if e["type"] == "token":
            ids.append(e["token"])
            text += e["text"]
        elif e["type"] == "done":
            break
        else:
            u.check(False, "native request failed: %r" % e)
    c.close()
    return ids, text


def logits_of(ids):
    """Logits of every position of ids from `strata logits` ((n, n_vocab) float32)."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        out = subprocess.run([u.BIN, "logits", "--ids", " ".join(map(str, ids)), "-o", f.name,
                              "-t", "1"], capture_output=True, text=True, timeout=120)
        u.check(out.returncode == 0, "strata logits failed: " + out.stderr)
        raw = open(f.name, "rb").read()
    n, nv = np.frombuffer(raw[:8], dtype="<i4")
    return np.frombuffer(raw[8:], dtype="<f4").reshape(n, nv)


def test_ban_and_force(client, ref):
    base = chat(client)
    first = base.choices[0].logprobs.content[0]
    # -100 on the greedy first token (its id from strata generate): the first token changes,
    # to the model's second choice
    r = chat(client, logit_bias={str(ref[0]): -100})
    got = r.choices[0].logprobs.content[0].token
    u.check(got != first.token, "logit_bias -100 on %d left the first token %r" % (ref[0], got))
    u.check(got == first.top_logprobs[1].token,
            "banned first token: got %r, the model's second choice is %r" %
            (got, first.top_logprobs[1].token))
    # +100 on a token: every greedy token is that token, and a sampled run too
    forced = ref[2]
    for kw in ({}, {"temperature": 1.0, "seed": 5}):
        r = chat(client, max_tokens=8, logit_bias={str(forced): 100}, **kw)
        p = pieces(r)
        u.check(len(p) == 8 and len(set(p)) == 1 and r.choices[0].finish_reason == "length",
                "logit_bias +100 on %d (%r): tokens %r" % (forced, kw, p))
    # the same through /v1/completions
    c = client.completions.create(model=u.MODEL_ID, prompt="The capital of France is", max_tokens=6,
                                  temperature=0, logit_bias={str(forced): 100}, logprobs=1)
    u.check(len(set(c.choices[0].logprobs.tokens)) == 1 and c.usage.completion_tokens == 6,
            "completions +100: %r" % c.choices[0].logprobs.tokens)
    print("ban: first token %r -> %r; +100 on %d: forced %r" % (first.token, got, forced, p[0]))


def test_fewer_repeats(client):
    def repeats(p):
        return len(p) - len(set(p))
    plain = pieces(chat(client, max_tokens=48))
    pen = pieces(chat(client, max_tokens=48, frequency_penalty=2))
    u.check(repeats(pen) < repeats(plain),
            "frequency_penalty 2: %d repeated tokens, none: %d" % (repeats(pen), repeats(plain)))
    print("repeated tokens in 48: %d without a penalty, %d with frequency_penalty 2" %
          (repeats(plain), repeats(pen)))


def test_oracle(client, endpoint):
    prompt_ids = u.tokenize(u.chatml([{"role": "user", "content": PROMPT}]))
    ref = u.reference(PROMPT, 4)
    fp, pp = 2.0, 0.5
    bias = {ref[1]: -5.0, ref[3]: 2.5}
    ids, text = native_ids(endpoint, frequency_penalty=fp, presence_penalty=pp,
                           logit_bias=[{"token": t, "bias": b} for t, b in bias.items()])
    r = chat(client, frequency_penalty=fp, presence_penalty=pp,
             logit_bias={str(t): b for t, b in bias.items()})
    u.check(r.choices[0].message.content == text,
            "HTTP %r != native %r" % (r.choices[0].message.content, text))
    u.check(r.usage.prompt_tokens == len(prompt_ids) and r.usage.completion_tokens == len(ids),
            "usage %r for %d + %d tokens" % (r.usage, len(prompt_ids), len(ids)))
    lg = logits_of(prompt_ids + ids).astype(np.float64)
    checked = changed = 0
    for i, tok in enumerate(ids):
        x = lg[len(prompt_ids) - 1 + i].copy()
        for t, b in bias.items():
            x[t] += b
        cnt = np.bincount(np.array(ids[:i], dtype=np.int64), minlength=x.size)
        x -= fp * cnt + pp * (cnt > 0)
        top2 = np.sort(x)[-2:]
        if top2[1] - top2[0] < 0.05:  # too close for two forward passes to agree on
            continue
        checked += 1
        changed += int(np.argmax(lg[len(prompt_ids) - 1 + i]) != tok)
        u.check(int(np.argmax(x)) == tok,
                "position %d: the server chose %d, OpenAI's formula gives %d" %
                (i, tok, int(np.argmax(x))))
    u.check(checked >= len(ids) // 2 and changed >= 1,
            "oracle: %d positions checked of %d, %d where the penalties changed the choice" %
            (checked, len(ids), changed))
    print("oracle: %d of %d positions equal the argmax of OpenAI's formula (%d changed by it)" %
          (checked, len(ids), changed))


def test_errors(client):
    for kw, param in (({"logit_bias": {"99999999": 1}}, None),
                      ({"logit_bias": {"x": 1}}, "logit_bias"),
                      ({"logit_bias": {"5": 101}}, "logit_bias"),
                      ({"frequency_penalty": 2.5}, "frequency_penalty")):
        try:
            chat(client, max_tokens=2, **kw)
            u.check(False, "%r accepted" % kw)
        except openai.BadRequestError as e:
            err = e.body if isinstance(e.body, dict) else {}
            u.check(e.status_code == 400 and (param is None or err.get("param") == param),
                    "%r: %r" % (kw, e.body))
            u.check(param is not None or "vocabulary" in err.get("message", ""),
                    "%r: %r" % (kw, e.body))


def main():
    t0 = time.time()
    hport = u.free_port()
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]) as s:
        base = "http://127.0.0.1:%d/v1" % hport
        client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
        u.wait_for(lambda: s.read_log().find("ready") >= 0, 30, "ready")
        ref = u.reference(PROMPT, 4)
        test_ban_and_force(client, ref)
        test_fewer_repeats(client)
        test_oracle(client, s.endpoint)
        test_errors(client)
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
