"""test_serve_threads.py - `strata serve` in thread mode (every actor a thread):
greedy outputs of 16 requests sent at once by 16 clients equal `strata generate
--greedy` token for token; malformed frames are answered with errors, counted by
reason, and the server keeps serving; a client cancel and a client that
disconnects mid-stream free their requests (stats), counted once as a disconnect;
a full queue answers "overloaded"; the C client (strata client) and the Python client
stream a request and get the text of `strata generate`; SIGTERM stops the server
cleanly."""
import os
import subprocess
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

MAX_TOKENS = 24


def test_greedy_equals_generate(ep):
    t0 = time.time()
    res = u.run_concurrent(ep, u.PROMPTS, MAX_TOKENS)
    print("16 concurrent requests: %.1f s" % (time.time() - t0))
    bad = []
    for i, p in enumerate(u.PROMPTS):
        toks, done = res[i]
        u.check(done["type"] == "done", "request %d failed: %r" % (i, done))
        u.check(done["usage"]["completion_tokens"] == len(toks), "completion_tokens %r" % done)
        ref = u.reference(p, MAX_TOKENS)
        if toks != ref:
            alone = u.run_concurrent(ep, [p], MAX_TOKENS)[0][0]
            bad.append(i)
            print("request %d differs from strata generate:\n  batched %s\n  alone   %s\n  ref     %s"
                  % (i, toks, alone, ref))
            if alone == ref:
                print("  -> alone it matches: the difference comes from batch composition "
                      "(the forward pass is not batch-invariant)")
    return bad


def test_malformed(ep):
    ctx = zmq.Context.instance()
    c = u.Client(ctx, ep)
    cases = [
        ("random bytes", b"\xc1\xff\x00garbage\x93"),
        ("not a map", u.pack([1, 2, 3])),
        ("unknown type", u.pack({"type": "frobnicate", "v": 1})),
        ("missing field", u.pack({"type": "generate", "v": 1, "prompt": "hi"})),
        ("wrong type", u.pack({"type": "generate", "v": 1, "id": "w", "prompt": 5})),
        ("out of range", u.pack({"type": "generate", "v": 1, "id": "r", "prompt": "hi",
                                 "max_tokens": 0})),
        ("prompt and messages", u.pack({"type": "generate", "v": 1, "id": "x", "prompt": "a",
                                        "messages": [{"role": "user", "content": "b"}]})),
        ("oversize", u.pack({"type": "generate", "v": 1, "id": "big",
                             "prompt": "a" * (2 << 20)})),
        ("server-side type", u.pack({"type": "token", "v": 1, "id": "t", "index": 0,
                                     "token": 1, "text": ""})),
        ("bad version", u.pack({"type": "stats", "v": 99})),
        ("empty frame", b""),
    ]
    before = u.stats(ep).get("frontend.malformed", 0)
    for what, frame in cases:
        c.send(frame)
        m = c.recv(10)
        u.check(m["type"] == "error" and m["code"] == "bad_request", "%s: got %r" % (what, m))
        print("%-20s -> error: %s" % (what, m["message"]))
    # a multi-part message is an envelope error
    c.sock.send_multipart([b"a", b"b"])
    m = c.recv(10)
    u.check(m["type"] == "error", "multi-part: %r" % m)
    # the server still serves
    c.send(u.chat_request("after", "Say hello.", 4))
    while True:
        m = c.recv(60)
        if m["type"] != "token":
            break
    u.check(m["type"] == "done", "request after malformed frames: %r" % m)
    st = u.stats(ep)
    n = st.get("frontend.malformed", 0) - before
    u.check(n == len(cases) + 1, "frontend.malformed grew by %d, expected %d" % (n, len(cases) + 1))
    reasons = {k: v for k, v in st.items() if k.startswith("frontend.malformed.")}
    print("malformed counters:", reasons)
    u.check(len(reasons) >= 5, "malformed frames are counted by reason")
    c.close()


def test_stop_and_text(ep):
    # stop strings and stream=false: the text equals strata generate --stop
    import subprocess
    prompt, stop = "Explain gravity to a child.", "."
    ref = subprocess.run([u.BIN, "generate", "--chat", "-p", prompt, "-n", "40", "--greedy",
                          "--stop", stop, "-t", "1"], capture_output=True, text=True,
                         timeout=120).stdout
    ref = ref[:-1] if ref.endswith("\n") else ref
    c = u.Client(zmq.Context.instance(), ep)
    req = u.chat_request("s", prompt, 40)
    req.update(stream=False, stop=[stop])
    m = c.call(req, 60)
    c.close()
    u.check(m["type"] == "done" and m["finish_reason"] == "stop", "stop: %r" % m)
    u.check(m["text"] == ref, "text %r != strata generate %r" % (m["text"], ref))
    print("stop string: %r" % m["text"])


def _idle(ep):
    st = u.stats(ep)
    free = st.get("worker0.kv.free_blocks"), st.get("worker1.kv.free_blocks")
    total = st.get("worker0.kv.total_blocks"), st.get("worker1.kv.total_blocks")
    return (st.get("frontend.requests.active") == 0 and st.get("worker0.running") == 0 and
            st.get("worker1.running") == 0 and free == total and st)


def test_cancel_and_disconnect(ep):
    ctx = zmq.Context.instance()
    # client cancel: answered by done "cancelled"
    c = u.Client(ctx, ep)
    c.send(u.chat_request("long", "Write a very long story about a dragon.", 2000))
    m = c.recv(60)
    u.check(m["type"] == "token", "first event %r" % m)
    c.send({"type": "cancel", "v": 1, "id": "long"})
    while m["type"] == "token":
        m = c.recv(30)
    u.check(m["type"] == "done" and m["finish_reason"] == "cancelled", "cancel: %r" % m)
    m = c.call({"type": "cancel", "v": 1, "id": "nope"})
    u.check(m["type"] == "error" and m["code"] == "not_found", "cancel unknown: %r" % m)
    c.close()
    u.wait_for(lambda: _idle(ep), 5, "the cancelled request to be freed")

    # disconnect mid-stream: the request and its KV are freed within a second
    c = u.Client(ctx, ep)
    c.send(u.chat_request("gone", "Write a very long story about a dragon.", 2000))
    for _ in range(3):
        m = c.recv(60)
        u.check(m["type"] == "token", "event %r" % m)
    st = u.stats(ep)
    u.check(st.get("frontend.requests.active") == 1, "one active request: %r" % st)
    before = st.get("frontend.cancelled.disconnect", 0)
    t0 = time.time()
    c.close()
    # the wait bounds liveness only (a busy machine is slow, not wrong): no speed asserted
    st = u.wait_for(lambda: _idle(ep), 30, "the disconnected client's request to be freed")
    dt = time.time() - t0
    print("disconnect freed the request in %.2f s (stats: cancelled.disconnect=%s)"
          % (dt, st.get("frontend.cancelled.disconnect")))
    u.check(st.get("frontend.cancelled.disconnect", 0) == before + 1,
            "counted once as a disconnect: %r -> %r" % (before,
                                                        st.get("frontend.cancelled.disconnect")))


def test_health(ep):
    h = u.wait_for(lambda: (lambda h: h if h["ok"] else None)(u.health(ep)), 5, "health ok")
    names = [a["name"] for a in h["actors"]]
    u.check(h["ok"], "health not ok: %r" % h)
    for n in ("frontend", "tokenizer", "router", "worker0", "worker1"):
        u.check(n in names, "health lists %s" % n)


def test_overloaded():
    # one request running and one waiting per worker: the rest are "overloaded"
    with u.Server(["--threads", "1", "--max-batch", "1", "--queue", "1"]) as s:
        res = u.run_concurrent(s.endpoint, u.PROMPTS[:6], 8)
        kinds = [r[1]["type"] for r in res.values()]
        codes = [r[1].get("code") for r in res.values()]
        print("max-batch 1, queue 1, 6 requests:", kinds, codes)
        u.check(kinds.count("done") >= 2, "some requests complete")
        u.check("overloaded" in codes, "a full queue answers overloaded")
        u.check(all(k == "done" or c == "overloaded" for k, c in zip(kinds, codes)),
                "only overloaded errors")
        st = u.wait_for(lambda: _idle1(s.endpoint), 5, "idle")
        u.check(st.get("worker0.rejected.overloaded", 0) >= 1, "counted: %r" % st)


def _idle1(ep):
    st = u.stats(ep)
    return st.get("frontend.requests.active") == 0 and st.get("worker0.running") == 0 and st


def _generate_text(prompt, n):
    out = subprocess.run([u.BIN, "generate", "--chat", "-p", prompt, "-n", str(n), "--greedy",
                          "-t", "1"], capture_output=True, text=True, timeout=120)
    u.check(out.returncode == 0, "strata generate failed: " + out.stderr)
    return out.stdout.rstrip("\n")


def test_clients(ep):
    """The C client (through `strata client`) and the Python client stream a
    chat request and get exactly the text of `strata generate --greedy`."""
    prompt = "Name three primary colors."
    ref = _generate_text(prompt, 24)
    c = subprocess.run([u.BIN, "client", "-e", ep, "--chat", "-p", prompt, "-n", "24", "--greedy",
                        "--timings"], capture_output=True, text=True, timeout=60)
    u.check(c.returncode == 0, "strata client failed: " + c.stderr)
    u.check(c.stdout.rstrip("\n") == ref, "C client text %r != generate %r" % (c.stdout, ref))
    print("C client (strata client) streamed: %r" % c.stdout.rstrip("\n"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "clients", "python"))
    import strata_client
    with strata_client.StrataClient(ep, timeout=60) as py:
        pieces, done = [], None
        for ev in py.generate(messages=[{"role": "user", "content": prompt}], max_tokens=24,
                              temperature=0):
            if ev["type"] == "token":
                pieces.append(ev["text"])
            else:
                done = ev
        text = "".join(pieces) + (done.get("text") or "")
        u.check(len(pieces) > 1 and done is not None, "python client: no stream")
        u.check(text == ref, "python client text %r != generate %r" % (text, ref))
        ok, actors = py.health()
        u.check(ok is True and len(actors) >= 4, "python client: health %r %r" % (ok, actors))
        counters = dict(py.stats())
        u.check(len(counters) > 10, "python client: stats %r" % counters)
    print("Python client streamed %d token events: %r" % (len(pieces), text))


def main():
    with u.Server(["--workers", "2", "--threads", "1"]) as s:
        test_health(s.endpoint)
        test_clients(s.endpoint)
        test_malformed(s.endpoint)
        test_cancel_and_disconnect(s.endpoint)
        test_stop_and_text(s.endpoint)
        bad = test_greedy_equals_generate(s.endpoint)
    test_overloaded()
    u.check(not bad, "greedy mismatches for requests %s" % bad)
    print("ok")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
