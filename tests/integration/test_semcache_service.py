#!/usr/bin/env python3
"""test_semcache_service.py - the answer cache in the service (issue 28, docs/SEMCACHE.md):
`strata serve --semcache exact` on the default model, over the native protocol.

Checked, each against something the cache does not compute itself:
  1. exact layer: the same non-streamed greedy chat request twice -- the second is
     answered from the cache (done.cache "exact", its entry the first request's id) with
     the first's text, which equals `strata generate --greedy` (the library reference);
  2. context-awareness and parameters: the same question after another conversation, or
     with another max_tokens, is generated, not served from the cache; cache "off" and a
     sampled request without a seed are never cached; a streamed request is (its hit: one
     done carrying the text);
  3. knowledge base: `strata kb load FILE.jsonl` (a bad file refused with its line, nothing
     sent), then the record's question in other case and punctuation is answered with the
     record's answer; the trace names the record; the audit record carries the cache
     provenance; `strata kb invalidate --tag` drops it and the question is generated;
  4. the semantic layer's similarity is the cosine of the service's own embeddings (the
     `embed` path, checked against llama.cpp in test_embeddings): the trace of a
     cache "semantic" miss reports the nearest entry's similarity, compared with NumPy;
  5. persistence: after a restart on the same --semcache-path the exact hit is still there;
  6. faults (process mode): the semcache actor SIGKILLed -- a cacheable request is still
     answered (generated, after the frontend's cache_wait_ms), and once the supervisor has
     restarted it (it reloads the saved cache) the hit is back.
Servers are stopped by PID; the whole test is bounded in time."""
import json
import os
import signal
import subprocess
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("numpy")
import numpy as np  # noqa: E402
import zmq  # noqa: E402

DEADLINE = time.time() + 240
Q = "Name three primary colors."
MAX_TOKENS = 120


def bounded():
    u.check(time.time() < DEADLINE, "the test ran past its time bound")


def chat(c, rid, messages, **kw):
    m = {"type": "generate", "v": 1, "id": rid, "max_tokens": MAX_TOKENS, "temperature": 0,
         "stream": False, "messages": messages}
    m.update(kw)
    c.send(m)
    trace = None
    while True:
        r = c.recv(timeout=60)
        if r["type"] == "trace":
            trace = r
            continue
        u.check(r["type"] == "done", "%s: done, got %r" % (rid, r))
        return r, trace


def user(q):
    return [{"role": "user", "content": q}]


def kb(endpoint, *args):
    return subprocess.run([u.BIN, "kb", "-e", endpoint, "--timeout", "20"] + list(args),
                          capture_output=True, text=True, timeout=60)


def stats(c):
    return c.call({"type": "stats", "v": 1})["counters"]


def exact_and_context(c):
    a, _ = chat(c, "first", user(Q))
    u.check("cache" not in a, "the first request is generated: %r" % a)
    b, _ = chat(c, "second", user(Q))
    u.check(b.get("cache") == "exact" and b.get("cache_entry") == "first",
            "the same request is an exact hit of the first: %r" % b)
    u.check(b["text"] == a["text"], "the hit answers the first's text")
    # an answer cut by max_tokens is kept too, and its hit says so (the limit is context)
    cut1, _ = chat(c, "cut-1", user(Q), max_tokens=5)
    cut2, _ = chat(c, "cut-2", user(Q), max_tokens=5)
    u.check(cut1["finish_reason"] == "length" and cut2.get("cache") == "exact" and
            cut2["finish_reason"] == "length" and cut2["text"] == cut1["text"],
            "a cut answer is kept and its hit says length: %r %r" % (cut1, cut2))
    u.check(a["text"].startswith(cut1["text"]), "the cut answer is the whole one's start")
    other = [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi."}] + user(Q)
    d, _ = chat(c, "other-context", other)
    u.check("cache" not in d, "the same question after another conversation is generated")
    d, _ = chat(c, "other-params", user(Q), max_tokens=MAX_TOKENS - 1)
    u.check("cache" not in d, "another max_tokens is another context")
    d, _ = chat(c, "off", user(Q), cache="off")
    u.check("cache" not in d, "cache off is generated")
    d, _ = chat(c, "sampled", user(Q), temperature=0.8)
    u.check("cache" not in d, "a sampled request without a seed is not cached")
    def stream(rid, q, **kw):
        m = {"type": "generate", "v": 1, "id": rid, "max_tokens": MAX_TOKENS,
             "temperature": 0, "messages": user(q)}
        m.update(kw)
        c.send(m)
        ids, text = [], ""
        while True:
            e = c.recv()
            if e["type"] == "done":
                return ids, text, e
            ids.append(e["token"])
            text += e["text"]
    ids, text, e = stream("streamed-off", Q, cache="off")
    u.check(ids == u.reference(Q, MAX_TOKENS), "the streamed answer is the library's greedy one")
    u.check(text == a["text"], "and the cached text is that answer's: %r vs %r" % (text, a["text"]))
    # a streamed request is answered from the cache too: no token event, the whole text in
    # done.text (the protocol's "append it")
    ids, text, e = stream("streamed-hit", Q)
    u.check(not ids and e.get("cache") == "exact" and e.get("text") == a["text"],
            "a streamed hit is one done with the text: %r" % e)
    # and a streamed answer is kept: a new question streamed, then asked again unstreamed
    ids, text, e = stream("streamed-new", "Name a primary color.")
    r, _ = chat(c, "after-stream", user("Name a primary color."))
    u.check(ids and r.get("cache") == "exact" and r["text"] == text + e.get("text", ""),
            "a streamed answer is kept whole: %r vs %r" % (r, text))
    s = stats(c)
    u.check(s.get("frontend.cache.skipped.sampled_without_a_seed") == 1,
            "the skips are counted by reason: %r" % {k: v for k, v in s.items() if "skipped" in k})
    print("exact layer, context-awareness and the skip rules hold")
    return a["text"]


def knowledge_base(c, endpoint, d):
    bad = os.path.join(d, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"question": "a?", "answer": "b"}\n{"question": "", "answer": "x"}\n')
    p = kb(endpoint, "load", bad)
    u.check(p.returncode == 2 and "bad.jsonl:2" in p.stderr,
            "a bad record is refused with its line: %r" % p.stderr)
    good = os.path.join(d, "facts.jsonl")
    with open(good, "w") as f:
        for q, a, tags in [("Who wrote Hamlet?", "William Shakespeare wrote Hamlet.", ["plays"]),
                           ("What is the boiling point of water at sea level?",
                            "100 degrees Celsius.", "physics"),
                           ("How many legs does a spider have?", "Eight.", ["animals", "kb"])]:
            f.write(json.dumps({"question": q, "answer": a, "tags": tags}) + "\n")
    p = kb(endpoint, "load", good)
    u.check(p.returncode == 0 and "stored 3 of 3" in p.stdout, "kb load: %r %r" % (p.stdout, p.stderr))
    r, trace = chat(c, "hamlet", user("who wrote hamlet"), trace=True)
    u.check(r.get("cache") == "kb" and r["text"] == "William Shakespeare wrote Hamlet.",
            "the record answers its question: %r" % r)
    u.check(r.get("cache_entry") == "kb:facts.jsonl:1", "the entry is the record: %r" % r)
    steps = [(s["actor"], s["what"], s["why"]) for s in trace["steps"]]
    u.check(any(a == "semcache" and w == "cache_hit" and "kb:facts.jsonl:1" in y
                for a, w, y in steps), "the trace names the record: %r" % steps)
    p = kb(endpoint, "invalidate", "--tag", "plays")
    u.check(p.returncode == 0 and "dropped 1 entries" in p.stdout, "invalidate: %r" % p.stdout)
    r, _ = chat(c, "hamlet-again", user("Who wrote Hamlet?"))
    u.check("cache" not in r, "after the invalidation the question is generated: %r" % r)
    print("knowledge base: loaded, answered, traced, invalidated")


def audit_has_cache(d):
    recs = []
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name)) as f:
            recs += [json.loads(l) for l in f if l.strip().startswith("{")]
    hits = [r for r in recs if r.get("cache")]
    u.check(any(r["cache"] == {"kind": "kb", "entry": "kb:facts.jsonl:1"} for r in hits) and
            any(r["cache"]["kind"] == "exact" for r in hits),
            "the audit records carry the provenance: %r" % [r.get("cache") for r in recs])
    u.check(subprocess.run([u.BIN, "audit", "verify", d], capture_output=True).returncode == 0,
            "the audit chain verifies with the cache records in it")


def embedding(c, text):
    r = c.call({"type": "embed", "v": 1, "id": "e-" + text[:20], "prompt": text})
    u.check(r["type"] == "embedding", "embed: %r" % r)
    return np.frombuffer(r["embedding"], dtype="<f4")


def semantic_similarity(c):
    # an entry the semantic layer may find: the answer of a request that asked for it (an
    # exact request's answer is not embedded)
    q1, q2 = "Which three colors are primary?", "What are the three primary colors?"
    first, trace = chat(c, "semantic-1", user(q1), cache="semantic", trace=True)
    u.check(not first.get("cache"), "the first semantic request is generated: %r" % first)
    answer = first["text"]
    before = stats(c)
    r, trace = chat(c, "semantic", user(q2), cache="semantic", trace=True)
    step = [s for s in trace["steps"] if s["actor"] == "semcache"]
    u.check(len(step) == 1 and step[0]["what"] == "cache_miss",
            "with no verified outcomes yet no threshold passes: a miss: %r" % step)
    why = step[0]["why"]
    sim = float(why.split("similarity ")[1].split(",")[0])
    # the cache embeds the question alone (the last user turn), as an `embed` of its text
    ea, eb = embedding(c, q1), embedding(c, q2)
    cos = float(np.dot(ea, eb) / np.linalg.norm(ea) / np.linalg.norm(eb))
    u.check(abs(sim - cos) < 2e-3, "the similarity is the embeddings' cosine: %.4f vs %.4f"
            % (sim, cos))
    # the miss had a neighbour: its fresh answer was compared with the neighbour's (after
    # whitespace normalisation) and the outcome recorded for the error bound
    same = " ".join(r["text"].split()) == " ".join(answer.split())
    after = stats(c)
    key = "semcache.verified." + ("same" if same else "different")
    u.check(after.get("semcache.observations", 0) == before.get("semcache.observations", 0) + 1
            and after.get(key, 0) == before.get(key, 0) + 1,
            "one verified outcome, %s: %r" % (key, after))
    print("semantic layer: nearest similarity %.3f = the service's embeddings' cosine %.3f"
          % (sim, cos))


PARIS = ["What is the capital of France?", "Which city is France's capital?",
         "Name the capital city of France.", "France's capital is which city?",
         "Tell me the capital of France.", "What's the capital city of France?"]


def semantic_hits(verify):
    """The semantic layer end to end, made deterministic: a grammar makes every answer
    "Paris." (the same context for all), so every verified outcome is "same"; with alpha
    0.5, delta 0.5 and min_obs 1 a threshold passes after 3 of them (Clopper-Pearson: 3
    of 3 correct bound the wrong rate by 1 - 0.5^(1/3) = 0.21 <= 0.5).  The first request
    misses with nothing near, the next three miss with a neighbour (each a verification),
    then the rest are semantic hits -- or, with verify=1, are generated anyway and
    verified (more observations)."""
    os.environ.update(STRATA_SEMCACHE_ALPHA="0.5", STRATA_SEMCACHE_MIN_OBS="1",
                      STRATA_SEMCACHE_VERIFY=str(verify))
    try:
        with u.Server(["--semcache", "semantic", "--semcache-delta", "0.5", "--threads", "1",
                       "--no-tiers"]) as s:
            c = u.Client(zmq.Context.instance(), s.endpoint)
            kinds = []
            for i, q in enumerate(PARIS):
                r, trace = chat(c, "p%d" % i, user(q), max_tokens=16, grammar='root ::= "Paris."',
                                trace=True)
                u.check(r["text"] == "Paris." and r["finish_reason"] == "eos", "%r" % r)
                step = [x for x in trace["steps"] if x["actor"] == "semcache"][0]
                kinds.append(r.get("cache", step["what"]))
                if r.get("cache") == "semantic":
                    th = float(step["why"].split("threshold ")[1].split()[0])
                    u.check(r["cache_similarity"] >= th, "a hit is at or above the threshold")
            want = ["cache_miss"] * 4 + (["cache_verify"] * 2 if verify else ["semantic"] * 2)
            u.check(kinds == want, "verify=%d: %r, want %r" % (verify, kinds, want))
            st = stats(c)
            n_obs = 3 + (2 if verify else 0)
            u.check(st.get("semcache.observations") == n_obs and
                    st.get("semcache.verified.same") == n_obs and
                    not st.get("semcache.observations.different"),
                    "every verification counted as the same answer: %r" % st)
            c.close()
    finally:
        for k in ("ALPHA", "MIN_OBS", "VERIFY"):
            os.environ.pop("STRATA_SEMCACHE_" + k, None)
    print("semantic layer, verify=%d: %s" % (verify, kinds))


def process_mode_kill(d, answer):
    port = u.free_port()
    path = os.path.join(d, "cache.bin")
    topo = u.process_topology(d, port, extra=["semcache"],
                              opts={"semcache": "mode=exact save_s=1 path=%s" % path,
                                    "frontend": "cache_wait_ms=300"})
    with u.Server(["--topology", topo], ready_timeout=90) as s:
        ep = "tcp://127.0.0.1:%d" % port
        c = u.Client(zmq.Context.instance(), ep)
        r, _ = chat(c, "p-hit", user(Q))
        u.check(r.get("cache") == "exact" and r["text"] == answer,
                "process mode: the saved cache answers after the restart: %r" % r)
        pid = u.actor_pids(s.read_log(), "semcache")[-1]
        os.kill(pid, signal.SIGKILL)
        r, trace = chat(c, "p-during", user(Q), trace=True)
        u.check(r["text"] == answer and not r.get("cache"),
                "with the semcache dead the request is generated: %r" % r)
        whats = [x["what"] for x in trace["steps"]]
        u.check("cache_timeout" in whats, "the trace says the lookup timed out: %r" % whats)
        u.wait_for(lambda: len(u.actor_pids(s.read_log(), "semcache")) > 1, 30,
                   "the supervisor restarts the semcache")
        u.wait_for(lambda: chat(c, "p-after-%f" % time.time(), user(Q))[0].get("cache") == "exact",
                   30, "after its restart the hit is back")
        c.close()
    print("process mode: semcache SIGKILLed, requests still answered, the hit back after restart")


def kb_usage():
    for args, needle in [([], "say load FILE.jsonl or invalidate"),
                         (["frob"], "unknown command"),
                         (["load"], "load needs FILE.jsonl"),
                         (["invalidate"], "needs --prefix P, --tag T or --all"),
                         (["load", "x.jsonl", "--all"], "invalidate's"),
                         (["load", "/nonexistent.jsonl"], "cannot read /nonexistent.jsonl")]:
        p = subprocess.run([u.BIN, "kb"] + args, capture_output=True, text=True, timeout=30)
        lines = p.stderr.strip().splitlines()
        u.check(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
                "strata kb %s: one line naming the problem: %r" % (" ".join(args), p.stderr))
    p = subprocess.run([u.BIN, "kb", "--help"], capture_output=True, text=True, timeout=30)
    u.check(p.returncode == 0 and "load FILE.jsonl" in p.stdout, "strata kb --help")


def main():
    kb_usage()
    with tempfile.TemporaryDirectory(prefix="strata-semcache-") as d:
        path = os.path.join(d, "cache.bin")
        audit = os.path.join(d, "audit")
        os.mkdir(audit)
        args = ["--semcache", "exact", "--semcache-path", path, "--threads", "1", "--no-tiers",
                "--audit-dir", audit]
        with u.Server(args) as s:
            c = u.Client(zmq.Context.instance(), s.endpoint)
            answer = exact_and_context(c)
            bounded()
            knowledge_base(c, s.endpoint, d)
            semantic_similarity(c)
            c.close()
        audit_has_cache(audit)
        bounded()
        with u.Server(["--semcache", "off", "--semcache-path", path, "--threads", "1",
                       "--no-tiers"]) as s:
            c = u.Client(zmq.Context.instance(), s.endpoint)
            r, _ = chat(c, "after-restart", user(Q), cache="exact")
            u.check(r.get("cache") == "exact" and r["text"] == answer,
                    "the cache persists across a restart: %r" % r)
            r, _ = chat(c, "default-off", user(Q))
            u.check("cache" not in r, "the server's default mode off: generated")
            c.close()
        print("persistence: the exact hit survives a restart")
        with u.Server(["--threads", "1", "--no-tiers"]) as s:  # no semcache actor
            good = os.path.join(d, "facts.jsonl")
            p = kb(s.endpoint, "load", good)
            u.check(p.returncode == 1 and "runs no semcache actor" in p.stderr and
                    "stored 0 of 3" in p.stdout, "kb load without a semcache: %r" % p.stderr)
        bounded()
        semantic_hits(0)
        semantic_hits(1)
        bounded()
        process_mode_kill(d, answer)
    print("ok")


if __name__ == "__main__":
    main()
