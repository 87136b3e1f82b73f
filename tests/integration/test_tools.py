"""test_tools.py - tool calls end to end (docs/HTTP.md "Tool calls") through the official
`openai` package against `strata serve --http` on the default model: tool_choice required
gives message.tool_calls (the SDK's own types) whose arguments validate with `jsonschema`
against the function's parameters, finish_reason "tool_calls"; a named tool_choice picks that
function; parallel_tool_calls false gives exactly one call where the question asks for
several; the streamed deltas have OpenAI's shape (first chunk: index, id, type, name,
arguments ""; then the arguments), every index reassembled, and say what the non-streamed
answer says (same ids' rule, names, arguments); a call array cut at max_tokens gives the
calls completed before the cut and "length", streamed or not, and never the raw array as
content; "none" gives text; a round trip (assistant tool_calls + role tool) is accepted and
answered, and so is a returned assistant message replayed as the SDK dumps it; auto answers
text or calls; the deprecated functions / function_call give message.function_call (streamed:
delta.function_call) and finish_reason "function_call"; logprobs with tools cover every token;
an unsupported parameters schema is a 400 naming the keyword."""
import json

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "jsonschema")
import jsonschema  # noqa: E402
import openai  # noqa: E402

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["C", "F"]}},
           "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 10}},
        "required": ["tz"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "The weather of a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
PARAMS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ASK3 = [{"role": "user", "content": "Get the weather for three cities: Paris, Rome, Berlin."}]


def valid_call(what, tc):
    u.check(tc.type == "function" and tc.id, "%s: %r" % (what, tc))
    u.check(tc.function.name in PARAMS, "%s: unknown function %r" % (what, tc.function.name))
    jsonschema.validate(json.loads(tc.function.arguments), PARAMS[tc.function.name])


def call_id(resp_id, i):
    """The id of call i of a response (docs/HTTP.md): call_<the response id's tail>_<i>."""
    return "call_%s_%d" % (resp_id.split("-", 1)[1], i)


def calls_of(r):
    """A non-streamed answer's calls as [(id, name, arguments)], checking each id's rule."""
    out = []
    for i, tc in enumerate(r.choices[0].message.tool_calls or []):
        u.check(tc.id == call_id(r.id, i), "call %d: id %r of %r" % (i, tc.id, r.id))
        out.append((tc.id, tc.function.name, tc.function.arguments))
    return out


def stream_calls(c, **kw):
    """Stream a request; reassemble its tool_calls deltas at every index.  Returns the calls
    as calls_of does, the finish_reason and the content streamed."""
    by, order, finish, content, rid = {}, [], None, "", None
    for k in c.chat.completions.create(stream=True, **kw):
        rid = k.id
        if not k.choices:
            continue
        d = k.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            if t.index not in by:  # a call's first chunk: id, type, name, arguments ""
                u.check(t.id and t.type == "function" and t.function.name and
                        t.function.arguments == "", "stream: first chunk %r" % t)
                by[t.index] = [t.id, t.function.name, ""]
                order.append(t.index)
            else:  # then its arguments only
                u.check(t.id is None and t.function.name is None,
                        "stream: a later chunk carries more than arguments: %r" % t)
                by[t.index][2] += t.function.arguments or ""
        if k.choices[0].finish_reason:
            finish = k.choices[0].finish_reason
    u.check(order == list(range(len(order))), "stream: indexes %r, expected 0..n-1" % order)
    for i in order:
        u.check(by[i][0] == call_id(rid, i), "stream: call %d id %r of %r" % (i, by[i][0], rid))
    return [tuple(by[i]) for i in order], finish, content


def same_calls(what, a, b):
    """Two answers' calls agree: names and arguments equal, each id by the rule of its own
    response (the ids differ only by the response id)."""
    u.check([x[1:] for x in a] == [x[1:] for x in b], "%s: %r != %r" % (what, a, b))


def main():
    hport = u.free_port()
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]):
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % hport, api_key="x")
        kw = dict(model=u.MODEL_ID, tools=TOOLS, temperature=0, max_tokens=80)
        r = c.chat.completions.create(messages=ASK, tool_choice="required", **kw)
        ch = r.choices[0]
        u.check(ch.finish_reason == "tool_calls", "required: finish %r" % ch.finish_reason)
        u.check(ch.message.content is None and ch.message.tool_calls, "required: %r" % ch)
        for tc in ch.message.tool_calls:
            valid_call("required", tc)
        first, called = ch.message.tool_calls[0], ch.message
        # named: that function, whatever the question
        r = c.chat.completions.create(messages=ASK, tool_choice={
            "type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=False, **kw)
        calls = r.choices[0].message.tool_calls
        u.check(len(calls) == 1 and calls[0].function.name == "get_time", "named: %r" % calls)
        valid_call("named", calls[0])
        # parallel_tool_calls false: one call, though the question asks for three (and with
        # the default, the same question gets more than one: the grammar is what limits it)
        kw1 = dict(kw, tools=TOOLS[:1], max_tokens=200)  # one tool, as the issue had it
        many = c.chat.completions.create(messages=ASK3, tool_choice="required", **kw1)
        u.check(len(calls_of(many)) > 1, "parallel: %r" % many.choices[0].message)
        one = c.chat.completions.create(messages=ASK3, tool_choice="required",
                                        parallel_tool_calls=False, **kw1)
        u.check(len(calls_of(one)) == 1 and one.choices[0].finish_reason == "tool_calls",
                "parallel_tool_calls false: %r" % one.choices[0])
        valid_call("parallel_tool_calls false", one.choices[0].message.tool_calls[0])
        # streamed: OpenAI's deltas, every index reassembled, the same calls as not streamed
        for what, msgs, k in [("stream", ASK, kw), ("stream of several", ASK3, kw1)]:
            ref = c.chat.completions.create(messages=msgs, tool_choice="required", **k)
            got, finish, content = stream_calls(c, messages=msgs, tool_choice="required", **k)
            u.check(finish == "tool_calls" and not content, "%s: finish %r, content %r" %
                    (what, finish, content))
            same_calls(what, got, calls_of(ref))
        # cut at max_tokens: the calls completed before the cut, "length", both shapes alike
        full = many.choices[0].message.tool_calls
        n_tok = many.usage.completion_tokens
        cuts = sorted({n_tok - 1, n_tok // 2, n_tok // 3, 8})
        seen = set()
        for m in cuts:
            q = dict(kw1, messages=ASK3, tool_choice="required", max_tokens=m)
            r = c.chat.completions.create(**q)
            ch = r.choices[0]
            u.check(ch.finish_reason == "length" and ch.message.content is None,
                    "cut at %d: %r" % (m, ch))
            cut = calls_of(r)
            u.check(len(cut) < len(full) or m == n_tok - 1, "cut at %d: %r" % (m, cut))
            same_calls("cut at %d: a prefix of the whole answer" % m, cut,
                       [(x.id, x.function.name, x.function.arguments) for x in full[:len(cut)]])
            for tc in ch.message.tool_calls or []:
                valid_call("cut at %d" % m, tc)
            got, finish, content = stream_calls(c, **q)
            u.check(finish == "length" and not content, "cut at %d, streamed: finish %r, "
                    "content %r" % (m, finish, content))
            same_calls("cut at %d, streamed" % m, got, cut)
            seen.add(len(cut))
        u.check(len(seen) > 1, "cuts %r all gave %r calls" % (cuts, seen))
        # none: text
        r = c.chat.completions.create(messages=ASK, tool_choice="none", **kw)
        u.check(not r.choices[0].message.tool_calls and r.choices[0].message.content,
                "none: %r" % r.choices[0])
        # auto: text or calls, both well formed
        r = c.chat.completions.create(messages=ASK, **kw)
        m = r.choices[0].message
        for tc in m.tool_calls or []:
            valid_call("auto", tc)
        u.check(m.tool_calls or m.content, "auto: neither text nor calls")
        # round trip: the call and its result in the history, then an answer
        hist = ASK + [{"role": "assistant", "content": None, "tool_calls": [first.model_dump()]},
                      {"role": "tool", "tool_call_id": first.id, "content": "sunny, 21 C"}]
        r = c.chat.completions.create(messages=hist, tool_choice="none", **kw)
        u.check(r.choices[0].message.content, "round trip: no answer")
        print("round trip answer: %r" % r.choices[0].message.content)
        # a returned assistant message replayed as history, as the SDK dumps it (refusal,
        # annotations, audio, function_call, tool_calls: null or []), and a participant name
        said = c.chat.completions.create(messages=ASK, tool_choice="none", **kw)
        dump = said.choices[0].message.model_dump()
        dump.update(annotations=[], tool_calls=[])  # as OpenAI's own answers carry them
        hist = [dict(ASK[0], name="alice"), dump, {"role": "user", "content": "And tomorrow?"}]
        r = c.chat.completions.create(messages=hist, tool_choice="none", **dict(kw, max_tokens=8))
        u.check(r.choices[0].message.content is not None, "replay: %r" % r.choices[0])
        hist = ASK + [called.model_dump(), {"role": "tool", "tool_call_id": first.id,
                                            "content": "sunny, 21 C"}]
        r = c.chat.completions.create(messages=hist, tool_choice="none", **kw)
        u.check(r.choices[0].message.content, "replay of a call: %r" % r.choices[0])
        # the deprecated functions / function_call: message.function_call, one call
        fns = [t["function"] for t in TOOLS]
        r = c.chat.completions.create(model=u.MODEL_ID, messages=ASK3, functions=fns,
                                      function_call={"name": "get_weather"}, temperature=0,
                                      max_tokens=80)
        ch = r.choices[0]
        u.check(ch.finish_reason == "function_call" and ch.message.function_call and
                not ch.message.tool_calls and ch.message.content is None, "functions: %r" % ch)
        u.check(ch.message.function_call.name == "get_weather", "functions: %r" % ch)
        jsonschema.validate(json.loads(ch.message.function_call.arguments), WEATHER)
        name, args, finish = "", "", None
        for k in c.chat.completions.create(model=u.MODEL_ID, messages=ASK3, functions=fns,
                                           function_call={"name": "get_weather"}, temperature=0,
                                           max_tokens=80, stream=True):
            d = k.choices[0].delta
            if d.function_call:
                name += d.function_call.name or ""
                args += d.function_call.arguments or ""
            finish = k.choices[0].finish_reason or finish
        u.check((name, args, finish) == ("get_weather", ch.message.function_call.arguments,
                                         "function_call"), "functions streamed: %r" %
                ((name, args, finish),))
        # tools with logprobs: every token's log-probability, the call array's included
        r = c.chat.completions.create(messages=ASK, tool_choice="required", logprobs=True,
                                      top_logprobs=2, **kw)
        lp = r.choices[0].logprobs.content
        u.check(r.choices[0].message.tool_calls and len(lp) == r.usage.completion_tokens and
                all(x.logprob <= 0 and len(x.top_logprobs) == 2 for x in lp),
                "tools + logprobs: %d of %d tokens" % (len(lp or []), r.usage.completion_tokens))
        u.check("".join(x.token for x in lp).strip().startswith("[{"),
                "logprobs of the call array: %r" % "".join(x.token for x in lp)[:40])
        # unsupported parameters: 400 naming the keyword
        bad = [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"multipleOf": 2}}}}}]
        try:
            c.chat.completions.create(model=u.MODEL_ID, messages=ASK, tools=bad, tool_choice="required")
            u.check(False, "an unsupported parameters schema was accepted")
        except openai.BadRequestError as e:
            u.check("multipleOf" in str(e) and "tools[0]" in str(e), "400: %s" % e)
    print("tool calls: required, named, parallel false, streamed, cut, none, auto, round trip, "
          "replay, functions, logprobs, 400: ok")


if __name__ == "__main__":
    main()
