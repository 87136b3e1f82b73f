"""test_semcache_http.py - the answer cache through the OpenAI HTTP API (`strata serve --http
--semcache exact`, docs/HTTP.md "The answer cache"): the same non-streamed greedy chat request
sent twice with "cache": "exact" is generated the first time (no strata_cache, header
X-Strata-Cache: miss) and answered from the cache the second (strata_cache.hit "exact", the
first answer's id as its entry, header exact, the same message); a request with the cache off
is generated again (no header); POST /v1/cache/invalidate drops the entry by its name's prefix
and by its tags (the next request is generated again); a bad cache value is a 400 naming the field."""
import json
import sys
import time
import urllib.error
import urllib.request

import serve_util as u  # first: it skips without the model, zmq or msgpack

# answered in far fewer than 200 tokens, so that the answer ends by itself; the default model
# loops on "the capital of France"
QUESTION = "What is 12 times 12?"


def post(base, body, path="/chat/completions", timeout=120):
    """POST body (a dict) to base + path: (status, headers, JSON answer)."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


TAGS = ["semcache-http", "arith"]  # the entries' tags (an array: joined with a comma)


def chat(extra=None):
    body = {"model": u.MODEL_ID, "messages": [{"role": "user", "content": QUESTION}],
            "temperature": 0, "max_tokens": 200, "cache_tags": TAGS}
    body.update(extra or {})
    return body


def test_exact_hit(base):
    st, h1, a1 = post(base, chat({"cache": "exact"}))
    u.check(st == 200, "first request: %d %r" % (st, a1))
    u.check("strata_cache" not in a1, "a generated answer says strata_cache: %r" % a1)
    u.check(h1.get("X-Strata-Cache") == "miss", "first header %r" % h1.get("X-Strata-Cache"))
    c1 = a1["choices"][0]
    u.check(c1["finish_reason"] == "stop", "the answer did not end by itself (%r): it is not "
            "kept; pick a shorter question" % c1["finish_reason"])
    text = c1["message"]["content"]
    # the answer is stored after its done went out: give the semcache actor a moment
    deadline, a2, h2 = time.time() + 10, None, None
    while time.time() < deadline:
        st, h2, a2 = post(base, chat({"cache": "exact"}))
        u.check(st == 200, "second request: %d %r" % (st, a2))
        if "strata_cache" in a2:
            break
        time.sleep(0.2)
    sc = a2.get("strata_cache")
    u.check(sc is not None, "the second request was not answered from the cache: %r" % a2)
    u.check(sc["hit"] == "exact" and sc["entry"] == a1["id"] and sc["similarity"] == 1,
            "strata_cache %r (first id %s)" % (sc, a1["id"]))
    u.check(h2.get("X-Strata-Cache") == "exact", "second header %r" % h2.get("X-Strata-Cache"))
    c2 = a2["choices"][0]
    u.check(c2["message"]["content"] == text and c2["finish_reason"] == "stop",
            "cached %r != generated %r" % (c2["message"], text))
    u.check(a2["id"] != a1["id"] and a2["object"] == "chat.completion", "head %r" % a2)
    # off: generated again, no header
    st, h3, a3 = post(base, chat({"cache": "off"}))
    u.check(st == 200 and "strata_cache" not in a3 and h3.get("X-Strata-Cache") is None,
            "cache off: %d %r %r" % (st, h3.get("X-Strata-Cache"), a3))
    u.check(a3["choices"][0]["message"]["content"] == text, "greedy again: %r" % a3)
    print("exact hit: %r from %s" % (text, sc["entry"]))
    return a1["id"]


def test_invalidate(base, entry):
    """POST /v1/cache/invalidate: the entry dropped by its name's prefix, then generated
    again; a body with nothing to drop is a 400."""
    st, _, a = post(base, {"prefix": entry, "tag": TAGS[0]}, path="/cache/invalidate")
    u.check(st == 200 and a["dropped"] == 1, "invalidate %s: %d %r" % (entry, st, a))
    # a retry of test_exact_hit may have kept the answer twice: the tag drops every copy
    st, _, a = post(base, {"tag": TAGS[1]}, path="/cache/invalidate")
    u.check(st == 200 and a["entries"] == 0, "invalidate by tag: %d %r" % (st, a))
    st, h, a = post(base, chat({"cache": "exact"}))
    u.check(st == 200 and "strata_cache" not in a and h.get("X-Strata-Cache") == "miss",
            "after the invalidation: %d %r %r" % (st, h.get("X-Strata-Cache"), a))
    st, _, a = post(base, {"all": True}, path="/cache/invalidate")
    u.check(st == 200 and a["entries"] == 0, "invalidate all: %d %r" % (st, a))
    st, _, a = post(base, {}, path="/cache/invalidate")
    u.check(st == 400, "an empty invalidation: %d %r" % (st, a))
    print("invalidate: dropped %s, generated again" % entry)


def test_bad_values(base):
    for extra, param in [({"cache": "bogus"}, "cache"), ({"cache_delta": 0}, "cache_delta"),
                         ({"cache_ttl": -1}, "cache_ttl"), ({"cache_tags": ["a,b"]}, "cache_tags")]:
        st, _, a = post(base, chat(extra))
        u.check(st == 400 and a["error"]["param"] == param and param in a["error"]["message"],
                "%r: %d %r" % (extra, st, a))
    print("bad values: 400 naming the field")


def stream(base, q):
    """A streamed chat request: (the content deltas, the finish reason)."""
    body = {"model": u.MODEL_ID, "messages": [{"role": "user", "content": q}], "temperature": 0,
            "max_tokens": 200, "stream": True, "cache": "exact"}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    deltas, finish = [], None
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: {"):
                ch = json.loads(line[6:])["choices"][0]
                if ch["delta"].get("content"):
                    deltas.append(ch["delta"]["content"])
                finish = ch.get("finish_reason") or finish
    return deltas, finish


def test_stream_hit(base):
    """A streamed request is cached too: the first streams token by token, the second is the
    kept answer in one chunk, the same text."""
    q = "What is 7 times 8?"
    d1, f1 = stream(base, q)
    deadline = time.time() + 10
    while True:
        d2, f2 = stream(base, q)
        if len(d2) == 1 or time.time() > deadline:
            break
        time.sleep(0.2)
    u.check(len(d1) > 1 and len(d2) == 1 and "".join(d1) == d2[0] and f1 == f2,
            "a streamed hit is the kept text in one chunk: %r vs %r" % (d1, d2))
    print("streamed: the hit is one chunk with the first answer's text")


def main():
    t_start = time.time()
    hport = u.free_port()
    base = "http://127.0.0.1:%d/v1" % hport
    with u.Server(["--threads", "1", "--max-batch", "2", "--http", "127.0.0.1:%d" % hport,
                   "--semcache", "exact"]):
        u.wait_for(lambda: post_health(base), 30, "/health 200")
        test_bad_values(base)
        test_invalidate(base, test_exact_hit(base))
        test_stream_hit(base)
    print("ok (%.1f s)" % (time.time() - t_start))


def post_health(base):
    try:
        with urllib.request.urlopen(base.rsplit("/", 1)[0] + "/health", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
