"""test_schema_corpus.py - every supported schema of tests/data/schemas/ (at least 100; the
refused ones of unsupported/ are test_grammar_schemas.py's) through the model: `strata serve
--http` on the default model, POST /v1/chat/completions with response_format json_schema,
greedy and one seeded sampled run per schema, CONCURRENCY requests in flight (two workers of
one thread each batch them and compile the grammars side by side), max_tokens MAX_TOKENS.

Oracle: Python's `jsonschema` (Draft 2020-12 with ECMA-262 patterns and format checks, as
test_grammar_schemas.py builds it).  Every answer with finish_reason "stop" must parse as
JSON and validate.  An answer cut at max_tokens ("length": a grammar cannot make a 135M model
close an unbounded string or stop adding array items) must have used exactly MAX_TOKENS
tokens and be a prefix the grammar accepts (`strata grammar check` says "incomplete", not
"refused"; "accepted", a whole value that could go on, must validate); at most
MAX_CUT_FRACTION of the answers may be cut (see there).  The server is stopped by PID
(serve_util.Server); the test is bounded in time."""
import concurrent.futures
import glob
import http.client
import json
import os
import subprocess
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("jsonschema")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from test_schema_soundness import ecma_validator_class  # noqa: E402  (ECMA-262 patterns)
import jsonschema  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "schemas")
CONCURRENCY = 8
MAX_TOKENS = 64
# Cut answers: on SmolLM2-135M-Instruct Q4_1 at MAX_TOKENS 64, 62 of the 294 answers (21 %)
# run to max_tokens: free strings the model fills with prose (obj_infer_type, pattern "abc"
# until "abc" comes), open objects and arrays it keeps nesting (type_object, any_true,
# ref_tree), blank lines between members (gen_obj_04).  Each is still checked as a prefix the
# grammar accepts.  The bound, 30 %, leaves room for a kernel or sampler change that moves a
# few answers, yet keeps at least 70 % (205) of the answers validated whole, and fails when
# answers stop ending (a grammar that never lets the root close).
MAX_CUT_FRACTION = 0.30
DEADLINE = time.time() + 150 * u.TIMEOUT_SCALE


def validator_of(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if cls is jsonschema.Draft202012Validator:
        cls = ecma_validator_class()
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def prompt_for(schema):
    return "Reply with JSON data that matches this JSON Schema: " + json.dumps(schema)


def ask(port, name, schema, sampled):
    body = {"model": u.MODEL_ID, "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": prompt_for(schema)}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": name[:64], "schema": schema,
                                                "strict": True}}}
    body.update(dict(temperature=0.8, top_p=0.95, seed=17) if sampled else dict(temperature=0))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120 * u.TIMEOUT_SCALE)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read()
    finally:
        c.close()
    if r.status != 200:
        return name, sampled, r.status, text.decode(errors="replace"), None, None
    j = json.loads(text)
    ch = j["choices"][0]
    return name, sampled, 200, ch["message"]["content"], ch["finish_reason"], j["usage"]


def judge(validator, text):
    """None when text is JSON valid under the validator's schema, else what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return "not JSON (%s): %r" % (e, text)
    errs = list(validator.iter_errors(value))
    return "%r does not validate: %s" % (text, errs[0].message) if errs else None


def grammar_check(path, text):
    """'accepted', 'incomplete' (a valid prefix) or 'refused', from `strata grammar check`."""
    p = subprocess.run([u.BIN, "grammar", "check", "--schema", path, "--text", text],
                       capture_output=True, text=True, timeout=60)
    return p.stdout.strip()


def main():
    t0 = time.time()
    files = sorted(glob.glob(os.path.join(DATA, "*.json")))
    u.check(len(files) >= 100, "expected at least 100 schemas, found %d" % len(files))
    schemas = {os.path.basename(f)[:-5]: json.load(open(f, encoding="utf-8")) for f in files}
    validators = {n: validator_of(s) for n, s in schemas.items()}
    hport = u.free_port()
    jobs = [(n, sampled) for n in schemas for sampled in (False, True)]
    failures, cut, n_ok, tok = [], [], 0, []
    with u.Server(["--workers", "2", "--threads", "1", "--max-batch", str(CONCURRENCY), "--http",
                   "127.0.0.1:%d" % hport]) as srv:
        # both runs of a schema go out together: they meet in one worker's grammar cache.
        # 8 in flight, not 16: a worker compiles a new schema's grammar on its loop (up to
        # 0.6 s each at this vocabulary), so a burst of 16 new schemas on a loaded machine
        # kept requests unaccepted past the frontend's 30 s give-up
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            futs = [pool.submit(ask, hport, n, schemas[n], s) for n, s in jobs]
            for f in concurrent.futures.as_completed(futs, timeout=DEADLINE - time.time()):
                name, sampled, status, content, finish, usage = f.result()
                what = "%s (%s)" % (name, "sampled" if sampled else "greedy")
                if status != 200:
                    failures.append("%s: HTTP %d %s" % (what, status, content))
                    continue
                tok.append((usage["prompt_tokens"], (usage.get("prompt_tokens_details") or
                                                     {}).get("cached_tokens", 0),
                            usage["completion_tokens"]))
                if finish == "length":
                    cut.append((what, name, content, usage))
                elif finish != "stop":
                    failures.append("%s: finish_reason %r: %r" % (what, finish, content))
                else:
                    err = judge(validators[name], content)
                    if err:
                        failures.append("%s: %s" % (what, err))
                    else:
                        n_ok += 1
        t_gen = time.time() - t0
        st = u.stats(srv.endpoint)
    for w in ("worker0", "worker1"):
        print("%s: %d grammars compiled in %.1f s, %d cache hits; %d masks, %.1f s in masks"
              % (w, st.get(w + ".grammar.compiled", 0), st.get(w + ".grammar.compile_us", 0) / 1e6,
                 st.get(w + ".grammar.cache_hits", 0), st.get(w + ".grammar.masks", 0),
                 st.get(w + ".grammar.mask_ns", 0) / 1e9))
    print("tokens: %d prompt (%d cached), %d completion" % (
        sum(x[0] for x in tok), sum(x[1] for x in tok), sum(x[2] for x in tok)))
    for what, name, content, usage in cut:
        if usage["completion_tokens"] != MAX_TOKENS:
            failures.append("%s: cut after %d tokens, not %d" % (what, usage["completion_tokens"],
                                                                 MAX_TOKENS))
        verdict = grammar_check(os.path.join(DATA, name + ".json"), content)
        if verdict == "accepted":  # a whole value that could go on (a number): valid then
            err = judge(validators[name], content)
            if err:
                failures.append("%s: cut: %s" % (what, err))
        elif verdict != "incomplete":
            failures.append("%s: cut answer is %r to the grammar: %r" % (what, verdict, content))
    print("%d schemas x greedy + sampled = %d answers in %.1f s: %d complete and valid, %d cut "
          "at max_tokens %d" % (len(schemas), len(jobs), t_gen, n_ok, len(cut), MAX_TOKENS))
    print("cut: " + ", ".join(c[0] for c in sorted(cut)))
    for f in failures:
        print("FAIL:", f)
    u.check(not failures, "%d of %d answers failed" % (len(failures), len(jobs)))
    u.check(len(cut) <= MAX_CUT_FRACTION * len(jobs), "%d of %d answers cut at max_tokens "
            "(at most %d%%)" % (len(cut), len(jobs), 100 * MAX_CUT_FRACTION))
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
