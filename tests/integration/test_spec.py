"""test_spec.py - speculative decoding through the service: greedy output with
speculation (n-gram drafter with adaptive and with fixed depth, draft-model
drafter) equals `strata generate --greedy` without it, for concurrent clients
(sequences with and without drafts share steps); the final event reports the
proposed and accepted counts, and they match the worker's stats.  (A draft
model with another vocabulary is refused at start: tests/unit/test_spec.c.)"""
import serve_util as u  # skips without the model, zmq or msgpack

MAX_TOKENS = 40
GROUNDED = [
    "Repeat this sentence exactly: The committee approved the new budget for the public "
    "library on Tuesday, and the library will open longer hours starting next month.",
    "Rewrite in the past tense: I walk to the market, I buy fresh bread, and I talk with "
    "the baker about the weather.",
]
PROMPTS = GROUNDED + u.PROMPTS[:6]


def run(args, what):
    with u.Server(["-t", "2"] + args) as s:
        res = u.run_concurrent(s.endpoint, PROMPTS, MAX_TOKENS)
        st = u.stats(s.endpoint)
    proposed = accepted = 0
    for i, p in enumerate(PROMPTS):
        toks, done = res[i]
        u.check(done["type"] == "done", "%s: %r" % (what, done))
        u.check(toks == REFS[i], "%s: prompt %d differs:\n  %s\n  %s" % (what, i, toks, REFS[i]))
        proposed += done["usage"].get("draft_proposed", 0)
        accepted += done["usage"].get("draft_accepted", 0)
    u.check(proposed > 0 and proposed == st.get("worker0.spec.proposed"),
            "%s: proposed %d in done events, %s in stats" % (what, proposed,
                                                             st.get("worker0.spec.proposed")))
    u.check(accepted == st.get("worker0.spec.accepted"), "%s: accepted counts differ" % what)
    print("%-34s identical on %d prompts; proposed %d, accepted %d (%.0f%%)" %
          (what, len(PROMPTS), proposed, accepted, 100.0 * accepted / max(proposed, 1)))


def main():
    global REFS
    REFS = [u.reference(p, MAX_TOKENS) for p in PROMPTS]
    run(["--draft", "ngram"], "n-gram, adaptive k")
    run(["--draft", "ngram", "--spec-k", "4"], "n-gram, fixed k = 4")
    model = u.MODEL
    # a generous wait: under a sanitizer build the draft model is slow, and a
    # draft that misses the wait is (correctly) not used
    run(["--draft", "model", "--draft-model", model, "--spec-k-max", "6", "--spec-wait-ms", "2000"],
        "draft model, adaptive k")
    print("ok")


if __name__ == "__main__":
    main()
