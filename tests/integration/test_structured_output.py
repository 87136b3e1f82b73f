"""test_structured_output.py - structured output end to end (docs/HTTP.md "response_format",
docs/PROTOCOL.md generate.json_schema): through the official `openai` package against
`strata serve --http` on the default model, for SCHEMAS from tests/data/schemas/, greedy and
a seeded sampled run each, every answer that ends with finish_reason "stop" parses as JSON and
validates with the `jsonschema` package (an independent validator; formats checked); an answer cut at max_tokens
(a grammar cannot make the 135M model close an unbounded string) is counted, at most a quarter;
json_object answers parse as JSON objects, and the issue-37 request gets a non-empty one; an
unsupported schema
(tests/data/schemas/unsupported/) is a 400 naming its path and keyword, over HTTP and as a
native error event.  Then in process mode (two workers) a json_schema request (greedy and
sampled, native protocol) is interrupted by SIGKILL of a worker mid-stream: the resumed
output is byte-identical to the uninterrupted one and still valid."""
import json
import os
import signal
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "jsonschema")
import jsonschema  # noqa: E402
import openai  # noqa: E402
import zmq  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "schemas")
SCHEMAS = ["obj_person", "obj_address", "obj_nested", "obj_all_optional", "obj_map_int",
           "rw_product", "rw_weather", "obj_mixed_required", "rw_classification", "rw_user_signup",
           "rw_geojson_point", "enum_strings", "integer_18_120", "number_0_100",
           "string_len_3_8", "arr_of_objects", "arr_strings", "ref_linked_list",
           "anyof_objects", "format_date", "format_uuid", "type_boolean", "pattern_00",
           "const_obj"]
UNSUPPORTED = ["multipleOf", "not", "pattern_properties"]
MAX_TOKENS = 200
SLOW = u.TIMEOUT_SCALE


def load(name, sub=""):
    with open(os.path.join(DATA, sub, name + ".json")) as f:
        return json.load(f)


def prompt_for(schema):
    return "Reply with JSON data that matches this JSON Schema: " + json.dumps(schema)


def validate(what, schema, text):
    try:
        value = json.loads(text)
    except ValueError as e:
        u.check(False, "%s: not JSON (%s): %r" % (what, e, text))
    cls = jsonschema.validators.validator_for(schema)
    errs = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    u.check(not errs, "%s: %r does not validate: %s" % (what, text, errs[:1]))
    return value


def test_schemas(client):
    n, cut = 0, []
    for name in SCHEMAS:
        schema = load(name)
        rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                     "strict": True}}
        for sampled in (False, True):
            kw = dict(temperature=0.8, top_p=0.95, seed=7) if sampled else dict(temperature=0)
            r = client.chat.completions.create(
                model=u.MODEL_ID, messages=[{"role": "user", "content": prompt_for(schema)}],
                max_tokens=MAX_TOKENS, response_format=rf, **kw)
            c = r.choices[0]
            what = "%s (%s)" % (name, "sampled" if sampled else "greedy")
            if c.finish_reason == "length":  # a grammar cannot force a small model to end
                cut.append(what)
                u.check(r.usage.completion_tokens == MAX_TOKENS, "%s: cut early" % what)
                continue
            u.check(c.finish_reason == "stop", "%s: finish_reason %r" % (what, c.finish_reason))
            validate(what, schema, c.message.content)
            n += 1
    print("%d json_schema answers over %d schemas: all JSON, all valid; %d cut at max_tokens "
          "(%s)" % (n, len(SCHEMAS), len(cut), ", ".join(cut)))
    u.check(len(cut) <= len(SCHEMAS) // 4, "too many answers cut at max_tokens: %s" % cut)
    # streamed: the same text as the non-streamed greedy answer
    schema = load("obj_person")
    rf = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    msgs = [{"role": "user", "content": prompt_for(schema)}]
    whole = client.chat.completions.create(model=u.MODEL_ID, messages=msgs, max_tokens=MAX_TOKENS,
                                           temperature=0, response_format=rf)
    pieces = [ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model=u.MODEL_ID, messages=msgs, max_tokens=MAX_TOKENS, temperature=0, response_format=rf,
        stream=True) if ch.choices]
    u.check("".join(pieces) == whole.choices[0].message.content,
            "streamed %r != %r" % ("".join(pieces), whole.choices[0].message.content))


def test_json_object(client):
    cut = []
    for i, p in enumerate(["Describe a cat as JSON.", "Give me a JSON object about Paris."]):
        for kw in (dict(temperature=0), dict(temperature=0.8, seed=11 + i)):
            r = client.chat.completions.create(
                model=u.MODEL_ID, messages=[{"role": "user", "content": p}], max_tokens=MAX_TOKENS,
                response_format={"type": "json_object"}, **kw)
            c = r.choices[0]
            if c.finish_reason == "length":  # any members now: the model may go on (a loop)
                cut.append("%d %r" % (i, kw))
                continue
            u.check(c.finish_reason == "stop", "json_object %r: %r" % (kw, c))
            v = validate("json_object", {"type": "object"}, c.message.content)
            u.check(isinstance(v, dict), "json_object: %r" % v)
    print("json_object: 4 answers, all JSON objects; %d cut at max_tokens %s" % (len(cut), cut))
    u.check(len(cut) <= 3, "json_object: every answer cut at max_tokens: %s" % cut)


def test_json_object_not_empty(base):
    """Issue 37: {"type": "object"} admits any members, so json_object is not only {}.  The
    issue's request, as raw HTTP."""
    import urllib.request
    body = {"messages": [{"role": "system", "content": "Reply in JSON."},
                         {"role": "user", "content": "Give me a JSON object with keys name and "
                                                     "age."}],
            "max_tokens": 60, "temperature": 0, "response_format": {"type": "json_object"}}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120 * SLOW) as r:
        c = json.loads(r.read())["choices"][0]
    u.check(c["finish_reason"] == "stop", "json_object (issue 37): cut: %r" % c)
    v = validate("json_object (issue 37)", {"type": "object"}, c["message"]["content"])
    u.check(isinstance(v, dict) and len(v) >= 1, "json_object (issue 37): %r" % v)
    print("json_object (issue 37): %s" % c["message"]["content"])


def test_unsupported(client, endpoint):
    for name in UNSUPPORTED:
        case = load(name, "unsupported")
        path, keyword = case["expect"].split(": ")
        rf = {"type": "json_schema", "json_schema": {"name": name, "schema": case["schema"]}}
        try:
            client.chat.completions.create(model=u.MODEL_ID, messages=[{"role": "user", "content": "x"}],
                                           max_tokens=4, response_format=rf)
            u.check(False, "%s: an unenforceable schema was accepted" % name)
        except openai.BadRequestError as e:
            u.check(e.status_code == 400, "%s: status %d" % (name, e.status_code))
            msg = json.dumps(e.body) + " " + str(e)
            u.check(path in msg and keyword in msg, "%s: %r does not name %s and %s"
                    % (name, msg, path, keyword))
            print("%s: 400 %s" % (name, msg))
    # the native protocol refuses it too (error event), and a bad GBNF grammar
    c = u.Client(zmq.Context.instance(), endpoint)
    case = load("multipleOf", "unsupported")
    for extra, want in [({"json_schema": json.dumps(case["schema"])}, case["expect"]),
                        ({"grammar": "root ::= undefined"}, "line"),
                        ({"json_object": True, "grammar": "root ::= \"a\""}, "at most one")]:
        m = u.chat_request("bad", "x", 4)
        m.update(extra)
        e = c.call(m)
        u.check(e["type"] == "error" and want.split(": ")[-1] in e["message"],
                "native %r: %r" % (list(extra), e))
    # and a GBNF grammar is followed
    m = u.chat_request("g", "Say yes or no.", 16)
    m.update(grammar='root ::= ("yes" | "no") "."', stream=False)
    d = c.call(m, timeout=60 * SLOW)
    u.check(d["type"] == "done" and d["text"] in ("yes.", "no."), "grammar answer %r" % d)
    c.close()


def run_one(ep, m, kill=None, timeout=120):
    """Stream m; kill(): called once after the third token.  (token ids, text, done)."""
    c = u.Client(zmq.Context.instance(), ep)
    c.send(m)
    toks, text, fired = [], [], kill is None
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        e = c.recv(timeout * SLOW)
        if e["type"] == "token":
            u.check(e["index"] == len(toks), "index %d after %d tokens" % (e["index"], len(toks)))
            toks.append(e["token"])
            text.append(e["text"])
            if not fired and len(toks) >= 3:
                kill()
                fired = True
        elif e["type"] in ("done", "error"):
            c.close()
            return toks, "".join(text), e
    c.close()
    u.check(False, "no final event")


def test_resume_after_kill():
    d = tempfile.mkdtemp(prefix="strata-structured-")
    port = u.free_port()
    path = u.process_topology(d, port, defaults="threads=1 max_batch=4 kv_blocks=512",
                              opts={"frontend": "hang_timeout_ms=2000 accept_ms=2000",
                                    "supervisor": "hang_timeout_ms=2000"})
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    schema = load("rw_product")
    with s:
        ep = s.endpoint
        u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok")
        for sampled in (False, True):
            m = u.chat_request("k%d" % sampled, prompt_for(schema), MAX_TOKENS)
            m["json_schema"] = json.dumps(schema)
            if sampled:
                m.update(temperature=0.8, top_p=0.95, seed=5)
            ref = run_one(ep, m)
            u.check(ref[2]["type"] == "done", "reference: %r" % ref[2])
            validate("reference", schema, ref[1])
            before = u.stats(ep).get("frontend.resumed", 0)
            killed = []
            held0 = {w: u.stats(ep).get(w + ".requests.constrained", 0)
                     for w in ("worker0", "worker1")}

            def kill():  # the worker that took it: its constrained-request count moved
                st = u.stats(ep)
                name = [w for w in held0 if st.get(w + ".requests.constrained", 0) > held0[w]][0]
                os.kill(u.actor_pids(s.read_log(), name)[-1], signal.SIGKILL)
                killed.append(name)

            got = run_one(ep, m, kill)
            u.check(got[2]["type"] == "done", "after the kill: %r" % got[2])
            u.check(got[0] == ref[0], "kill of %s: tokens differ\n  got  %s\n  want %s"
                    % (killed, got[0], ref[0]))
            u.check(got[1] == ref[1], "kill of %s: text %r != %r" % (killed, got[1], ref[1]))
            validate("resumed", schema, got[1])
            resumed = u.stats(ep).get("frontend.resumed", 0) - before
            print("SIGKILL %s mid-stream (%s): resumed %d, %d tokens byte-identical and valid"
                  % (killed[0], "sampled" if sampled else "greedy", resumed, len(got[0])))
            u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok after the restart")


def main():
    t0 = time.time()
    hport = u.free_port()
    base = "http://127.0.0.1:%d/v1" % hport
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]) as s:
        client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120 * SLOW)
        u.wait_for(lambda: u.health(s.endpoint)["ok"], 30 * SLOW, "health ok")
        test_schemas(client)
        test_json_object(client)
        test_json_object_not_empty(base)
        test_unsupported(client, s.endpoint)
        st = u.stats(s.endpoint)
        masks = st.get("worker0.grammar.masks", 0)
        if masks:
            print("worker0: %d masks, %.1f us a mask; %d grammars compiled, %d cache hits"
                  % (masks, st.get("worker0.grammar.mask_ns", 0) / masks / 1000,
                     st.get("worker0.grammar.compiled", 0), st.get("worker0.grammar.cache_hits", 0)))
    test_resume_after_kill()
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
