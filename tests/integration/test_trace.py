"""test_trace.py - explainability (issue 13, items 1 and 2): a request with "trace": true
gets a `trace` event before its `done`, naming every decision (docs/PROTOCOL.md, trace).

Scenario: a chat session's second turn after its blocks left the worker's prefix cache
(T0) for the tier manager's DRAM pool (T1), with n-gram speculation on.  Its trace must
hold the tokenizer's template/token count, the router's choice among the loads, the
worker's prefix hit, the promotion from T1, admission, prefill chunks and decode steps
with the drafts verified, the stop reason and the delivery; the steps' durations add up
to total_ms (within 5%), and total_ms lies within the latency the client measured (the
server's span, arrival to delivery, is inside the client's, send to receipt).  The prompt's
token count (the tokenize step, done.usage) equals `strata tokenize` of the chat template
rendered here (serve_util.chatml), and completion_tokens the token events received.
Sources: the spans of the answer copied from the prompt point at the right bytes.
Logprobs: every token event carries the token's log-probability and its top
alternatives; the first tokens' are compared with the NumPy reference forward pass
(tests/oracle/ref_llama.py), an independent oracle."""
import os
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))

SYSTEM = ("You are a careful assistant for a harbour authority. " * 12).strip()
FACT = "The lighthouse keeper counted forty ships in the storm last night."


def call(c, req, timeout=120):
    """Send req; return (events before done, done, client-side seconds)."""
    t0 = time.time()
    c.send(req)
    evs = []
    while True:
        m = c.recv(timeout)
        if m["type"] in ("done", "error"):
            return evs, m, time.time() - t0
        evs.append(m)


def check_trace(tr, took, want_whats):
    steps = tr["steps"]
    whats = [s["what"] for s in steps]
    print("trace: %d steps, total %.1f ms (client %.1f ms):" % (len(steps), tr["total_ms"],
                                                               took * 1000))
    for s in steps[:12] + ([{"actor": "...", "what": "...", "why": "", "t_us": 0, "dur_us": 0}]
                           if len(steps) > 14 else []) + steps[-2:]:
        print("  %-10s %-9s %8.2f ms  %s" % (s["actor"], s["what"], s["dur_us"] / 1000, s["why"]))
    for w in want_whats:
        u.check(w in whats, "the trace has no %r step: %s" % (w, whats))
    # contiguous: each step starts where the previous one ended
    for a, b in zip(steps, steps[1:]):
        u.check(abs(b["t_us"] - (a["t_us"] + a["dur_us"])) <= 1000,
                "steps not contiguous: %r then %r" % (a, b))
    total_us = tr["total_ms"] * 1000
    s = sum(x["dur_us"] for x in steps)
    u.check(abs(s - total_us) <= 0.05 * total_us + 1000,
            "step durations %.1f ms vs total %.1f ms" % (s / 1000, total_us / 1000))
    # the server's span (arrival to delivery) lies inside the client's (send to receipt):
    # an order, not a speed, so a busy machine cannot break it (1 ms: clock rounding)
    u.check(0 < total_us <= took * 1e6 + 1000,
            "total %.1f ms vs the client's %.1f ms" % (total_us / 1000, took * 1000))


def main():
    import numpy as np
    import ref_llama as R
    with u.Server(["--draft", "ngram", "--kv-blocks", "64", "--t1-blocks", "512", "-t", "2"]) as s:
        c = u.Client(zmq.Context.instance(), s.endpoint)
        turn1 = [{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": "Repeat this sentence exactly: " + FACT}]
        evs, done, _ = call(c, {"type": "generate", "v": 1, "id": "t1", "messages": turn1,
                                "max_tokens": 40, "temperature": 0, "session": "harbour"})
        u.check(done["type"] == "done", "turn 1: %r" % done)
        answer = "".join(e["text"] for e in evs if e["type"] == "token") + done.get("text", "")
        # other prompts push the session's blocks out of T0 (kv_blocks 64): they are in T1
        for i in range(4):
            _, d, _ = call(c, {"type": "generate", "v": 1, "id": "f%d" % i, "max_tokens": 8,
                               "temperature": 0, "prompt": ("filler %d " % i) * 150})
            u.check(d["type"] == "done", "filler %r" % d)
        turn2 = turn1 + [{"role": "assistant", "content": answer},
                         {"role": "user", "content": "Say it once more, word for word."}]
        evs, done, took = call(c, {"type": "generate", "v": 1, "id": "t2", "messages": turn2,
                                   "max_tokens": 40, "temperature": 0, "session": "harbour",
                                   "trace": True})
        u.check(done["type"] == "done", "turn 2: %r" % done)
        u.check(evs and evs[-1]["type"] == "trace", "no trace event before done: %r" % evs[-1:])
        tr = evs[-1]
        check_trace(tr, took, ["tokenize", "dispatch", "arrive", "promote", "admit", "prefill",
                               "decode", "finish", "deliver"])
        steps = tr["steps"]
        n_prompt = len(u.tokenize(u.chatml(turn2)))
        tok = [x for x in steps if x["what"] == "tokenize"]
        u.check(len(tok) == 1 and tok[0]["why"].startswith(
            "chat template over 4 messages, then %d tokens " % n_prompt),
            "tokenize step %r: want %d tokens (strata tokenize)" % (tok, n_prompt))
        n_tok = sum(e["type"] == "token" for e in evs)
        u.check((done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"]) ==
                (n_prompt, n_tok), "done.usage %r: want %d prompt tokens (strata tokenize), %d "
                "completion tokens (the events)" % (done["usage"], n_prompt, n_tok))
        prom = [x for x in steps if x["what"] == "promote"][0]
        print("promote:", prom["why"])
        u.check(not prom["why"].startswith("the tier manager sent 0 "),
                "no block came from T1: %r" % prom["why"])
        drafted = [x for x in steps if x["what"] == "decode" and "verified: k" in x["why"]]
        u.check(drafted, "no decode step verified drafts (n-gram speculation)")
        disp = [x for x in steps if x["what"] == "dispatch"][0]
        u.check("worker0" in disp["why"] and "tokens:" in disp["why"], disp["why"])
        # sources: the copied spans are byte-exact copies of the named message
        text = ("".join(e["text"] for e in evs if e["type"] == "token") +
                done.get("text", "")).encode()
        u.check(tr["sources"], "no copied span found in %r" % text)
        for sp in tr["sources"]:
            src = (turn2[sp["msg"]]["content"]).encode()
            u.check(text[sp["out_start"]:sp["out_end"]] == src[sp["in_start"]:sp["in_end"]],
                    "span %r does not match its source" % sp)
        print("sources:", [(sp["msg"], text[sp["out_start"]:sp["out_end"]].decode())
                           for sp in tr["sources"]])

        # logprobs against the NumPy reference, on a raw prompt
        prompt = "The capital of France is"
        evs, done, _ = call(c, {"type": "generate", "v": 1, "id": "lp", "prompt": prompt,
                                "max_tokens": 4, "temperature": 0, "logprobs": True,
                                "top_logprobs": 3})
        u.check(done["type"] == "done", "logprobs: %r" % done)
        toks = [e for e in evs if e["type"] == "token"]
        u.check(len(toks) == 4, "4 token events: %r" % toks)
        for e in toks:
            u.check("logprob" in e and e["logprob"] <= 0, "no logprob: %r" % e)
            top = e.get("top", [])
            u.check(len(top) == 3 and top[0]["token"] == e["token"] and
                    abs(top[0]["logprob"] - e["logprob"]) < 1e-6 and
                    top[0]["logprob"] >= top[1]["logprob"] >= top[2]["logprob"],
                    "top_logprobs: %r" % e)
        # non-stream: the same in done.logprobs
        _, d2, _ = call(c, {"type": "generate", "v": 1, "id": "lp2", "prompt": prompt,
                            "max_tokens": 4, "temperature": 0, "logprobs": True,
                            "top_logprobs": 3, "stream": False})
        u.check([x["token"] for x in d2.get("logprobs", [])] == [e["token"] for e in toks],
                "done.logprobs: %r" % d2)
        c.close()
    m = R.load(u.MODEL)
    ids = u.tokenize(prompt)
    ref_toks, rows = R.greedy(m, ids, 4, return_logits=True)
    worst = 0.0
    for i, e in enumerate(toks):
        row = rows[i].astype(np.float64)
        lsm = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        worst = max(worst, abs(lsm[e["token"]] - e["logprob"]))
        for alt in e["top"]:
            worst = max(worst, abs(lsm[alt["token"]] - alt["logprob"]))
    print("logprobs vs the NumPy reference: worst |difference| %.4f nats; tokens %s vs %s"
          % (worst, [e["token"] for e in toks], ref_toks))
    # the engine's 8-bit activations move logits by a few tenths of a nat at most
    # (tests/oracle/oracle_util.py); a logprob taken after the sampling transforms, or
    # normalised wrongly, is off by far more
    u.check(worst < 0.3, "logprobs differ from the reference by %.3f nats" % worst)
    print("ok")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
