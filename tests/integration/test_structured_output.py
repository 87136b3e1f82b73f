"""test_structured_output.py - structured output end to end (docs/HTTP.md "response_format",
docs/PROTOCOL.md generate.json_schema): through the official `openai` package against
`strata serve --http` on the default model, for SCHEMAS from tests/data/schemas/, greedy and
a seeded sampled run each, every answer that ends with finish_reason "stop" parses as JSON
and validates with the `jsonschema` package (an independent validator; formats checked); an
answer cut at max_tokens (a grammar cannot make the 135M model close an unbounded string) is
counted, at most a quarter; json_object answers parse as JSON objects, and the issue-37
request gets a non-empty one; an unsupported schema (tests/data/schemas/unsupported/) is a
400 naming its path and keyword, over HTTP and as a native error event.  (Every schema of
the corpus goes through the model in test_schema_corpus.py.)

Then in process mode (four workers) json_schema requests (native protocol) are interrupted
by SIGKILL of the worker that runs them, mid-stream, 20 times in one server session (six
requests, greedy and sampled, over four schemas, killed at a different token each run, the
worker killed by its PID): every resumed output is byte-identical to its uninterrupted run
and still valid."""
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


def run_one(ep, m, on_token=None, timeout=120):
    """Stream m; on_token(n): called after the n-th token.  (token ids, text, done)."""
    c = u.Client(zmq.Context.instance(), ep)
    c.send(m)
    toks, text = [], []
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        e = c.recv(timeout * SLOW)
        if e["type"] == "token":
            u.check(e["index"] == len(toks), "index %d after %d tokens" % (e["index"], len(toks)))
            toks.append(e["token"])
            text.append(e["text"])
            if on_token:
                on_token(len(toks))
        elif e["type"] in ("done", "error"):
            c.close()
            return toks, "".join(text), e
    c.close()
    u.check(False, "no final event")


# SIGKILL mid-stream: KILL_RUNS runs in one server session, cycling through these requests
# (schema, seed or None for greedy) and killing at a different token each time (KILL_AT,
# taken modulo a third of the uninterrupted answer's length, so the worker is still
# generating).  A run counts when it was resumed (frontend.resumed moved): the kill
# interrupted a running request.  One whose request ended first (the worker is found at
# the first token, by a stats round trip; a ~90-token answer takes ~0.2 s here) is run
# again, at most KILL_RUNS / 4.
# The requests' answers are 40 tokens or more (checked), so a kill lands while they run.
KILL_REQUESTS = [("rw_product", None), ("rw_product", 7), ("rw_entities", None),
                 ("rw_entities", 5), ("arr_of_objects", 6), ("obj_nested", None)]
KILL_AT = [1, 2, 3, 5, 8, 13, 21, 34, 4, 6, 9, 15, 25, 40, 7, 11, 18, 29, 10, 12]
KILL_RUNS = 20
KILL_BUDGET_S = 60  # the kill runs, after the references
# A killed process is restarted after 0.2 s, doubling up to 10 s (docs/TOPOLOGY.md): 20 kills
# of two workers would wait minutes.  Four workers, and a run starts as soon as two of them
# are up (the one the request goes to, and one to resume on), not when the last one is back.
KILL_WORKERS = ["worker0", "worker1", "worker2", "worker3"]


def worker_pids(parent):
    """{worker name: pid} of the worker processes the supervisor (pid parent) runs now,
    from /proc: what runs now (the log's last "started" line may be a process killed since)."""
    out = {}
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != parent:
                    continue
            with open("/proc/%s/cmdline" % d) as f:
                argv = f.read().split("\0")
        except (OSError, ValueError, IndexError):
            continue
        if len(argv) > 2 and argv[1] == "actor" and argv[2] in KILL_WORKERS:
            out[argv[2]] = int(d)
    return out


def holder(ep, parent, what, wait=1.0):
    """(name, pid) of the worker running the request (the only one running now): the one
    whose `running` counter is above 0 among those health reports ready (a killed worker's
    counters are its dead process's, running included, until its new one answers).  Polls
    for up to `wait` s; None when no worker runs anything by then (the worker finished the
    request before it was found: the caller counts the run as late)."""
    deadline = time.time() + wait * SLOW
    while True:
        st, up, pids = u.stats(ep), workers_up(ep), worker_pids(parent)
        running = {w: st.get(w + ".running", 0) for w in KILL_WORKERS}
        took = [w for w in up if running[w] > 0 and w in pids]
        if len(took) == 1:
            return took[0], pids[took[0]]
        if time.time() >= deadline:
            u.check(not took, "%s: which worker runs it? ready %r, running %r"
                    % (what, up, running))
            return None
        time.sleep(0.02)


def workers_up(ep):
    """The names of the workers that health reports ready."""
    return [a["name"] for a in u.health(ep)["actors"]
            if a["name"] in KILL_WORKERS and a["state"] == "ready"]


def test_resume_after_kill():
    t0 = time.time()
    d = tempfile.mkdtemp(prefix="strata-structured-")
    port = u.free_port()
    path = u.process_topology(d, port, defaults="threads=1 max_batch=4 kv_blocks=512",
                              opts={"frontend": "hang_timeout_ms=2000 accept_ms=2000",
                                    "supervisor": "hang_timeout_ms=2000"},
                              extra=KILL_WORKERS[2:])
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    with s:
        ep = s.endpoint
        u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok")
        u.check(sorted(workers_up(ep)) == KILL_WORKERS, "workers: %r" % u.health(ep))
        # the uninterrupted answers, each valid
        reqs = []
        for i, (name, seed) in enumerate(KILL_REQUESTS):
            schema = load(name)
            m = u.chat_request("ref%d" % i, prompt_for(schema), MAX_TOKENS)
            m["json_schema"] = json.dumps(schema)
            if seed is not None:
                m.update(temperature=0.8, top_p=0.95, seed=seed)
            ref = run_one(ep, m)
            what = "%s (%s)" % (name, "seed %d" % seed if seed is not None else "greedy")
            u.check(ref[2]["type"] == "done", "reference %s: %r" % (what, ref[2]))
            u.check(40 <= len(ref[0]) < MAX_TOKENS, "reference %s: %d tokens (40 to kill in, "
                    "and ending before max_tokens)" % (what, len(ref[0])))
            validate("reference " + what, schema, ref[1])
            reqs.append((what, schema, m, ref))
        t_kill = time.time()
        done, late, run = 0, [], 0
        while done < KILL_RUNS:
            what, schema, m, ref = reqs[run % len(reqs)]
            at = 1 + (KILL_AT[run % len(KILL_AT)] - 1) % (len(ref[0]) // 3)
            m = dict(m, id="k%d" % run)
            before = u.stats(ep).get("frontend.resumed", 0)
            killed, found = [], []
            u.wait_for(lambda: len(workers_up(ep)) >= 2, 30 * SLOW, "two workers up")

            def on_token(n):
                """At the first token, find the worker that runs the request (see holder: a
                stats round trip, which a short answer can outrun); at token `at`, SIGKILL it."""
                if n == 1:
                    found.append(holder(ep, s.proc.pid, "run %d" % run))
                if n < at or killed:
                    return
                if found[0] is None:
                    killed.append("nothing (no worker ran it any more)")
                    return
                os.kill(found[0][1], signal.SIGKILL)
                killed.append("%s (pid %d)" % found[0])

            got = run_one(ep, m, on_token)
            u.check(killed, "run %d: no kill" % run)
            tag = "run %d, %s, SIGKILL %s after token %d" % (run, what, killed[0], at)
            u.check(got[2]["type"] == "done", "%s: %r" % (tag, got[2]))
            u.check(got[0] == ref[0], "%s: tokens differ\n  got  %s\n  want %s"
                    % (tag, got[0], ref[0]))
            u.check(got[1] == ref[1], "%s: text %r != %r" % (tag, got[1], ref[1]))
            validate(tag, schema, got[1])
            resumed = u.stats(ep).get("frontend.resumed", 0) - before
            run += 1
            u.check(time.time() - t_kill < KILL_BUDGET_S * SLOW,
                    "%d kill runs took over %d s" % (run, KILL_BUDGET_S))
            if not resumed:  # the worker had finished it when the kill came: not counted
                late.append(run - 1)
                u.check(len(late) <= KILL_RUNS // 4, "%d runs of %d killed too late to "
                        "interrupt the request: %r" % (len(late), run, late))
                print("%s: finished before the kill (not counted)" % tag)
                continue
            done += 1
            print("%s: resumed, %d tokens byte-identical and valid" % (tag, len(got[0])))
        print("%d SIGKILLs mid-stream (%d more came after the end), every output identical to "
              "its uninterrupted run and valid (%.1f s; %.1f s with the references and the "
              "start)" % (done, len(late), time.time() - t_kill, time.time() - t0))
        # (the last killed workers may still wait out their restart backoff, up to 10 s:
        # the server stops cleanly all the same, which Server checks)


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
