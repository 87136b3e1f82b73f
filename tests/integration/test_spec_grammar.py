"""test_spec_grammar.py - speculative decoding under a grammar (docs/HTTP.md "response_format"):
json_schema requests through the official `openai` package against `strata serve --http`, once
without drafts and once with the n-gram drafter (`--draft ngram --spec-k 4`).  The drafts are cut
where the grammar refuses them and every verified row is masked as plain decoding masks it, so
the answers must be the same text, greedy and seeded-sampled, and valid under `jsonschema` (an
independent validator); the drafted server's stats must show drafts proposed and accepted for
these constrained requests (before, a constrained request was never drafted for).  The prompts
ask the model to copy a JSON document, which gives the n-gram drafter something to find.

Skips (77) without the default model, zmq, msgpack, openai or jsonschema; under CI=true those
are failures.  Env: STRATA_BIN (set by CTest), STRATA_MODEL."""
import json

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "jsonschema")
import jsonschema  # noqa: E402
import openai  # noqa: E402

MAX_TOKENS = 120
SCHEMA = {"type": "object", "properties": {
    "items": {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"}, "price": {"type": "number"}},
        "required": ["id", "name", "price"]}}},
    "required": ["items"]}
DOCS = [
    {"items": [{"id": 1, "name": "apple", "price": 1.5}, {"id": 2, "name": "bread", "price": 2.25},
               {"id": 3, "name": "cheese", "price": 7.0}]},
    {"items": [{"id": 10, "name": "red pen", "price": 0.99},
               {"id": 11, "name": "blue pen", "price": 0.99}]},
]


def answers(port):
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="none",
                           max_retries=0, timeout=120 * u.TIMEOUT_SCALE)
    rf = {"type": "json_schema", "json_schema": {"name": "items", "schema": SCHEMA}}
    out = []
    for doc in DOCS:
        msg = "Copy this JSON exactly, nothing else: " + json.dumps(doc)
        for kw in (dict(temperature=0), dict(temperature=0.7, seed=5)):
            r = client.chat.completions.create(
                model=u.MODEL_ID, messages=[{"role": "user", "content": msg}], max_tokens=MAX_TOKENS,
                response_format=rf, **kw)
            out.append((r.choices[0].finish_reason, r.choices[0].message.content))
    return out


def serve(extra):
    port = u.free_port()
    with u.Server(["-t", "2", "--http", "127.0.0.1:%d" % port] + extra) as s:
        res = answers(port)
        st = u.stats(s.endpoint)
    return res, st


def main():
    plain, _ = serve([])
    drafted, st = serve(["--draft", "ngram", "--spec-k", "4"])
    cls = jsonschema.validators.validator_for(SCHEMA)
    for i, ((f0, t0), (f1, t1)) in enumerate(zip(plain, drafted)):
        u.check((f0, t0) == (f1, t1), "answer %d differs with drafts:\n  %r %r\n  %r %r"
                % (i, f0, t0, f1, t1))
        if f0 == "stop":
            errs = list(cls(SCHEMA).iter_errors(json.loads(t0)))
            u.check(not errs, "answer %d %r does not validate: %s" % (i, t0, errs[:1]))
    proposed = st.get("worker0.spec.proposed", 0)
    accepted = st.get("worker0.spec.accepted", 0)
    u.check(proposed > 0 and accepted > 0,
            "no drafts verified for constrained requests: proposed %s, accepted %s"
            % (proposed, accepted))
    print("%d constrained answers identical with and without drafts (%d stopped, all valid); "
          "drafts proposed %d, accepted %d, cut by the grammar %d"
          % (len(plain), sum(f == "stop" for f, _ in plain), proposed, accepted,
             st.get("worker0.grammar.drafts_cut", 0)))
    print("ok")


if __name__ == "__main__":
    main()
