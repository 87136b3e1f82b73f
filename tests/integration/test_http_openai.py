"""test_http_openai.py - the OpenAI-compatible HTTP API (`strata serve --http`, the http
actor, docs/HTTP.md) through the official `openai` Python package: chat and completions,
streamed and not, give the text of `strata generate --greedy` at temperature 0, with the
right usage; logprobs (chat, streamed, legacy) consistent; stop strings end the text; bad JSON,
wrong types, n=17, top_logprobs without logprobs, fields that would change the answer
(response_format, tools, a bad logit_bias, an unknown field: 400 naming the field, never
ignored) while fields that cannot (user, metadata) are accepted, a huge body,
a missing or wrong API key, an unknown path and a wrong method get OpenAI-shaped errors
with the right status; a full queue is 429 with Retry-After; a client that disconnects
mid-stream gets its request cancelled (stats); 1000 malformed requests leave the server
serving with a stable RSS."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "httpx2")
import httpx2 as httpx  # noqa: E402  (the HTTP client the openai package brings)
import openai  # noqa: E402

KEY = "sk-test-strata-0123456789"
N = 24


def gen_text(prompt, n, chat=True, stop=None):
    """The text of `strata generate --greedy` (what the service must reproduce)."""
    cmd = [u.BIN, "generate", "-p", prompt, "-n", str(n), "--greedy", "-t", "1"]
    if chat:
        cmd.append("--chat")
    if stop:
        cmd += ["--stop", stop]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    u.check(out.returncode == 0, "strata generate failed: " + out.stderr)
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_chat(client):
    prompt = u.PROMPTS[0]
    ref, ref_ids = gen_text(prompt, N), u.reference(prompt, N)
    r = client.chat.completions.create(model=u.MODEL_ID, messages=[{"role": "user", "content": prompt}],
                                       max_tokens=N, temperature=0)
    c = r.choices[0]
    u.check(c.message.content == ref, "chat text %r != strata generate %r" % (c.message.content, ref))
    u.check(c.message.role == "assistant" and c.index == 0, "chat choice %r" % c)
    u.check(r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.created > 0,
            "chat head %r" % r)
    # OpenAI's shape: "fp_" and hex; the same for every answer of this server (and its chunks)
    fp = r.system_fingerprint
    u.check(fp is not None and fp.startswith("fp_") and len(fp) == 19 and
            all(x in "0123456789abcdef" for x in fp[3:]), "system_fingerprint %r" % fp)
    u.check(r.usage.completion_tokens == len(ref_ids) and r.usage.prompt_tokens > 5 and
            r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
            "chat usage %r (generate: %d tokens)" % (r.usage, len(ref_ids)))
    u.check(c.finish_reason == ("length" if len(ref_ids) == N else "stop"),
            "finish_reason %r" % c.finish_reason)
    # streamed, with usage at the end
    pieces, finish, usage, roles = [], None, None, 0
    for ch in client.chat.completions.create(
            model=u.MODEL_ID, messages=[{"role": "user", "content": prompt}], max_tokens=N,
            temperature=0, stream=True, stream_options={"include_usage": True}):
        u.check(ch.object == "chat.completion.chunk" and ch.id.startswith("chatcmpl-") and
                ch.system_fingerprint == fp, "chunk %r" % ch)
        if ch.usage:
            usage = ch.usage
        for cc in ch.choices:
            roles += cc.delta.role == "assistant"
            pieces.append(cc.delta.content or "")
            finish = cc.finish_reason or finish
    u.check("".join(pieces) == ref, "streamed chat %r != %r" % ("".join(pieces), ref))
    u.check(roles == 1 and finish == c.finish_reason, "roles %d finish %r" % (roles, finish))
    u.check(usage is not None and usage.completion_tokens == len(ref_ids), "stream usage %r" % usage)
    print("chat: %r (%d tokens), streamed in %d chunks" % (ref, len(ref_ids), len(pieces)))


def test_completions(client):
    prompt = "The capital of France is"
    ref = gen_text(prompt, N, chat=False)
    r = client.completions.create(model=u.MODEL_ID, prompt=prompt, max_tokens=N, temperature=0)
    u.check(r.choices[0].text == ref, "completion %r != %r" % (r.choices[0].text, ref))
    u.check(r.object == "text_completion" and r.id.startswith("cmpl-"), "head %r" % r)
    u.check(r.usage.completion_tokens > 0 and r.usage.total_tokens ==
            r.usage.prompt_tokens + r.usage.completion_tokens, "usage %r" % r.usage)
    text = "".join(ch.choices[0].text for ch in client.completions.create(
        model=u.MODEL_ID, prompt=[prompt], max_tokens=N, temperature=0, stream=True) if ch.choices)
    u.check(text == ref, "streamed completion %r != %r" % (text, ref))
    print("completions: %r" % ref)


def test_logprobs(client):
    """logprobs through the API: one entry per completion token, the greedy token first
    among its alternatives, the pieces joining to the text (chat, streamed and not), and the
    legacy completions shape."""
    prompt = u.PROMPTS[2]
    ref_ids = u.reference(prompt, N)
    r = client.chat.completions.create(model=u.MODEL_ID, messages=[{"role": "user", "content": prompt}],
                                       max_tokens=N, temperature=0, logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    u.check(len(lp) == len(ref_ids), "chat logprobs: %d entries for %d tokens" % (len(lp), len(ref_ids)))
    for e in lp:
        u.check(e.logprob <= 0 and len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token
                and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and
                e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, "chat logprob entry %r" % e)
        u.check(bytes(e.bytes) == e.token.encode(), "bytes of %r" % e)
    u.check("".join(e.token for e in lp).strip() == r.choices[0].message.content.strip(),
            "pieces %r vs text %r" % ("".join(e.token for e in lp), r.choices[0].message.content))
    streamed = []
    for ch in client.chat.completions.create(
            model=u.MODEL_ID, messages=[{"role": "user", "content": prompt}], max_tokens=N,
            temperature=0, logprobs=True, stream=True):
        for cc in ch.choices:
            if cc.logprobs and cc.logprobs.content:
                streamed += cc.logprobs.content
    u.check([e.token for e in streamed] == [e.token for e in lp] and
            all(abs(a.logprob - b.logprob) < 1e-5 for a, b in zip(streamed, lp)),
            "streamed logprobs differ from the non-streamed ones")
    c = client.completions.create(model=u.MODEL_ID, prompt="The capital of France is", max_tokens=4,
                                  temperature=0, logprobs=2)
    l2 = c.choices[0].logprobs
    u.check(len(l2.tokens) == len(l2.token_logprobs) == len(l2.top_logprobs) ==
            len(l2.text_offset) == c.usage.completion_tokens and
            all(len(t) <= 2 for t in l2.top_logprobs), "legacy logprobs %r" % l2)
    print("logprobs: %d chat entries (top 2), streamed the same; legacy %r" %
          (len(lp), list(zip(l2.tokens, [round(x, 3) for x in l2.token_logprobs]))))


def test_stop(client):
    prompt, stop = "Explain gravity to a child.", "."
    ref = gen_text(prompt, 40, stop=stop)
    r = client.chat.completions.create(model=u.MODEL_ID, messages=[{"role": "user", "content": prompt}],
                                       max_tokens=40, temperature=0, stop=[stop])
    u.check(r.choices[0].message.content == ref and r.choices[0].finish_reason == "stop",
            "stop: %r %r != %r" % (r.choices[0].finish_reason, r.choices[0].message.content, ref))
    text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model=u.MODEL_ID, messages=[{"role": "user", "content": prompt}], max_tokens=40,
        temperature=0, stop=stop, stream=True) if ch.choices)
    u.check(text == ref, "streamed stop %r != %r" % (text, ref))
    print("stop string: %r" % ref)


def raw_ids(prompt, n):
    """Token ids `strata generate --greedy` gives for a raw (non-chat) prompt."""
    out = subprocess.run([u.BIN, "generate", "-p", prompt, "-n", str(n), "--greedy",
                          "--print-ids", "-t", "1"], capture_output=True, text=True, timeout=120)
    u.check(out.returncode == 0, "strata generate failed: " + out.stderr)
    return [int(x) for x in out.stdout.split()]


def check_usage(what, usage, prompt_ids, completion_ids):
    """usage (an openai usage object) against the oracle: the prompt's ids from `strata
    tokenize`, the completion's from `strata generate --greedy`."""
    want = (len(prompt_ids), len(completion_ids), len(prompt_ids) + len(completion_ids))
    got = (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) if usage else None
    u.check(got == want, "%s usage (prompt, completion, total) %r, want %r from strata tokenize "
            "and strata generate" % (what, got, want))


def test_usage_oracle(client):
    """usage.prompt_tokens / completion_tokens / total_tokens equal independent counts: the
    chat prompt rendered with SmolLM2's template (written in the test, serve_util.chatml)
    and tokenized by `strata tokenize`, the raw prompt tokenized the same way, and the
    greedy completion of `strata generate`; streamed and not."""
    msgs = [{"role": "user", "content": u.PROMPTS[3]}]
    prompt_ids = u.tokenize(u.chatml(msgs))
    ref_ids = u.reference(u.PROMPTS[3], N)
    r = client.chat.completions.create(model=u.MODEL_ID, messages=msgs, max_tokens=N, temperature=0)
    check_usage("chat", r.usage, prompt_ids, ref_ids)
    usage = None
    for ch in client.chat.completions.create(model=u.MODEL_ID, messages=msgs, max_tokens=N,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        usage = ch.usage or usage
    check_usage("streamed chat", usage, prompt_ids, ref_ids)
    prompt = "The capital of France is"
    prompt_ids, ref_ids = u.tokenize(prompt), raw_ids(prompt, N)
    r = client.completions.create(model=u.MODEL_ID, prompt=prompt, max_tokens=N, temperature=0)
    check_usage("completion", r.usage, prompt_ids, ref_ids)
    print("usage: chat and completion (prompt %d + %d tokens) as strata tokenize and "
          "strata generate count them" % (len(prompt_ids), len(ref_ids)))


def expect(resp, status, param=None, what=""):
    try:
        body = resp.json()
    except ValueError:
        body = None
    ok = (resp.status_code == status and isinstance(body, dict) and "error" in body and
          set(body["error"]) >= {"message", "type", "param", "code"} and
          (param is None or body["error"]["param"] == param))
    u.check(ok, "%s: expected %d (param %r), got %d %r" % (what, status, param, resp.status_code,
                                                          resp.text[:300]))
    return body


def test_errors(base, client):
    h = {"Authorization": "Bearer " + KEY}
    chat = base + "/chat/completions"
    good = {"model": u.MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with httpx.Client(timeout=30) as x:
        expect(x.post(chat, headers=h, content=b"{not json"), 400, what="bad JSON")
        expect(x.post(chat, headers=h, json=dict(good, temperature="hot")), 400, "temperature",
               "temperature as a string")
        expect(x.post(chat, headers=h, json=dict(good, max_tokens=1.5)), 400, "max_tokens",
               "max_tokens 1.5")
        expect(x.post(chat, headers=h, json=dict(good, messages="hi")), 400, "messages",
               "messages as a string")
        expect(x.post(chat, headers=h, json=dict(good, stop=5)), 400, "stop", "stop as a number")
        b = expect(x.post(chat, headers=h, json=dict(good, n=17)), 400, "n", "n=17")
        print("n=17:", b["error"]["message"])
        b = expect(x.post(chat, headers=h, json=dict(good, top_logprobs=2)), 400,
                   "top_logprobs", "top_logprobs without logprobs")
        print("top_logprobs alone:", b["error"]["message"])
        expect(x.post(base + "/completions", headers=h,
                      json={"model": u.MODEL_ID, "prompt": ["a", "b"]}), 400, "prompt", "two prompts")
        # the field rule (docs/HTTP.md): what would change the answer is refused, naming it
        unenforceable = {"type": "json_schema",
                         "json_schema": {"name": "n", "schema": {"type": "integer", "multipleOf": 3}}}
        for field, value in [("response_format", unenforceable),
                             ("tools", [{"type": "function", "function": {
                                 "name": "f", "parameters": {"type": "object", "properties": {
                                     "a": {"not": {}}}}}}]),
                             ("logit_bias", {"not-a-token": -100}),
                             ("presence_penalty", 2.5),
                             ("ignore_eos", True)]:
            b = expect(x.post(chat, headers=h, json=dict(good, **{field: value})), 400, field,
                       "%s=%r" % (field, value))
            print("%s refused: %s" % (field, b["error"]["message"]))
        expect(x.post(base + "/completions", headers=h,
                      json={"prompt": "a", "echo": True}), 400, "echo", "echo true")
        # ... and what cannot change it is accepted, at its default too
        r = x.post(chat, headers=h, json=dict(good, user="u-1", metadata={"k": "v"}, n=1,
                                              response_format={"type": "text"}, tools=[],
                                              temperature=0))
        u.check(r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None,
                "harmless fields: %d %r" % (r.status_code, r.text[:300]))
        expect(x.post(chat, headers=h, content=b"{" + b" " * (2 << 20) + b"}"), 413,
               what="a 2 MiB body")
        expect(x.post(chat, json=good), 401, what="no API key")
        expect(x.post(chat, headers={"Authorization": "Bearer sk-wrong"}, json=good), 401,
               what="a wrong API key")
        expect(x.get(base + "/nope", headers=h), 404, what="unknown path")
        r = x.get(chat, headers=h)
        expect(r, 405, what="GET of chat")
        u.check(r.headers.get("allow") == "POST", "405 Allow: %r" % r.headers)
        m = x.get(base + "/models", headers=h).json()
        u.check(m["data"][0]["id"] == os.path.basename(u.MODEL), "models %r" % m)
        u.check(x.get(base.rsplit("/", 1)[0] + "/health").status_code == 200, "health")
    # the openai package's own error classes
    for kwargs, exc in [({"n": 17}, openai.BadRequestError),
                        ({"temperature": 5}, openai.BadRequestError),
                        ({"response_format": {"type": "json_schema", "json_schema": {
                            "name": "n", "schema": {"not": {}}}}}, openai.BadRequestError)]:
        try:
            client.chat.completions.create(model=u.MODEL_ID, messages=good["messages"], max_tokens=2,
                                           **kwargs)
            u.check(False, "%r accepted" % kwargs)
        except exc:
            pass
    try:
        openai.OpenAI(base_url=base, api_key="sk-wrong", max_retries=0).models.list()
        u.check(False, "a wrong key was accepted")
    except openai.AuthenticationError:
        pass
    print("errors: 400 bad JSON / types / n / top_logprobs / prompts / refused fields, 413, 401, "
          "404, 405 ok")


def test_overloaded(base):
    """--max-batch 1 --queue 1: of 6 long streams at once at least one is refused, 429."""
    h = {"Authorization": "Bearer " + KEY}
    res = []

    def one(i):
        with httpx.Client(timeout=60) as x:
            r = x.post(base + "/completions", headers=h, json={
                "model": u.MODEL_ID, "prompt": u.PROMPTS[i], "max_tokens": 48, "temperature": 0})
            res.append(r)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    codes = sorted(r.status_code for r in res)
    busy = [r for r in res if r.status_code == 429]
    u.check(busy and all(r.headers.get("retry-after") for r in busy) and 200 in codes,
            "overload: statuses %r" % codes)
    expect(busy[0], 429, what="overloaded")
    print("overload: statuses %r (429 with Retry-After)" % codes)


def test_disconnect(base, ep):
    before = u.stats(ep).get("frontend.cancelled.client", 0)
    h = {"Authorization": "Bearer " + KEY}
    body = {"model": u.MODEL_ID, "messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": 2000, "temperature": 0, "stream": True}
    with httpx.Client(timeout=30) as x:
        with x.stream("POST", base + "/chat/completions", headers=h, json=body) as r:
            u.check(r.status_code == 200, "stream status %d" % r.status_code)
            n = 0
            for line in r.iter_lines():
                n += line.startswith("data: ")
                if n >= 5:
                    break
        # leaving the block closes the connection mid-stream
    t0 = time.time()

    def freed():
        st = u.stats(ep)
        return (st.get("frontend.requests.active") == 0 and
                st.get("frontend.cancelled.client", 0) > before and
                st.get("worker0.running") == 0 and st)
    st = u.wait_for(freed, 10, "the dropped stream to be cancelled")
    print("disconnect mid-stream: cancelled in %.2f s (frontend.cancelled.client %d -> %d, "
          "http.cancelled %s)" % (time.time() - t0, before, st["frontend.cancelled.client"],
                                  st.get("http.cancelled")))


def raw(port, data):
    """One request over a raw socket (some malformed beyond what httpx sends)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    out = b""
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:  # the server answered and closed before reading it all
        pass
    finally:
        s.close()
    return out


def test_malformed(base, port, pid):
    h = {"Authorization": "Bearer " + KEY}
    chat = base + "/chat/completions"
    bodies = [b"", b"{", b"[1,2]", b"null", b'{"messages": 5}', b'{"messages": []}',
              b'{"messages": [{"role": "tool", "content": "x"}]}',
              b'{"messages": [{"role": "user"}]}', b'{"prompt": "x"}' * 3,
              b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
              b'{"messages": [{"role": "user", "content": "x"}], "top_p": 7}',
              b"\xff\xfe\x00garbage", b'{"a": ' * 2000]
    rawreqs = [b"GARBAGE\r\n\r\n", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n",
               b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999\r\n\r\n",
               b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\n\r\n"]

    def burst(n):
        with httpx.Client(timeout=30) as x:
            for i in range(n):
                if i % 50 == 49:
                    raw(port, rawreqs[(i // 50) % len(rawreqs)])
                    continue
                r = x.post(chat, headers=h, content=bodies[i % len(bodies)])
                u.check(400 <= r.status_code < 500, "malformed %d: %d %r" % (i, r.status_code,
                                                                            r.text[:200]))
    burst(200)  # warm up allocators
    rss0 = rss_kb(pid)
    t0 = time.time()
    burst(1000)
    rss1 = rss_kb(pid)
    print("1000 malformed requests in %.1f s: RSS %d -> %d KiB" % (time.time() - t0, rss0, rss1))
    if u.TIMEOUT_SCALE == 1:
        u.check(rss1 - rss0 < 8192, "RSS grew by %d KiB over 1000 malformed requests"
                % (rss1 - rss0))
    else:  # ASan keeps freed memory in its quarantine: RSS says nothing there; LeakSanitizer
        print("  (sanitizer build: the RSS bound is not checked; leaks are, at exit)")
    c = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
    r = c.chat.completions.create(model=u.MODEL_ID, messages=[{"role": "user", "content": "hi"}],
                                  max_tokens=4, temperature=0)
    u.check(r.choices[0].message.content and r.usage.completion_tokens > 0, "after: %r" % r)


def main():
    t_start = time.time()
    hport = u.free_port()
    d = tempfile.mkdtemp(prefix="strata-http-")
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("# keys\n\nsk-other-key\n%s\n" % KEY)
    base = "http://127.0.0.1:%d/v1" % hport
    with u.Server(["--threads", "1", "--max-batch", "1", "--queue", "1",
                   "--http", "127.0.0.1:%d" % hport, "--api-key-file", keys]) as s:
        u.wait_for(lambda: httpx.get(base.rsplit("/", 1)[0] + "/health").status_code == 200,
                   30, "/health 200")
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=60)
        test_chat(client)
        test_completions(client)
        test_usage_oracle(client)
        test_logprobs(client)
        test_stop(client)
        test_errors(base, client)
        test_overloaded(base)
        test_disconnect(base, s.endpoint)
        test_malformed(base, hport, s.proc.pid)
        st = u.stats(s.endpoint)
        print("http counters:", {k: v for k, v in st.items() if k.startswith("http.")})
    os.unlink(keys)
    os.rmdir(d)
    print("ok (%.1f s)" % (time.time() - t_start))


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
