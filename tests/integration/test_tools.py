"""test_tools.py - tool calls end to end (docs/HTTP.md "Tool calls") through the official
`openai` package against `strata serve --http` on the default model: tool_choice required
gives message.tool_calls (the SDK's own types) whose arguments validate with `jsonschema`
against the function's parameters, finish_reason "tool_calls"; a named tool_choice picks that
function; the streamed deltas have OpenAI's shape (first chunk: index, id, type, name,
arguments ""; then arguments pieces) and join to the non-streamed arguments; "none" gives
text; a round trip (assistant tool_calls + role tool) is accepted and answered; auto answers
text or calls; an unsupported parameters schema is a 400 naming the keyword."""
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


def valid_call(what, tc):
    u.check(tc.type == "function" and tc.id, "%s: %r" % (what, tc))
    u.check(tc.function.name in PARAMS, "%s: unknown function %r" % (what, tc.function.name))
    jsonschema.validate(json.loads(tc.function.arguments), PARAMS[tc.function.name])


def main():
    hport = u.free_port()
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]):
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % hport, api_key="x")
        kw = dict(model="m", tools=TOOLS, temperature=0, max_tokens=80)
        r = c.chat.completions.create(messages=ASK, tool_choice="required", **kw)
        ch = r.choices[0]
        u.check(ch.finish_reason == "tool_calls", "required: finish %r" % ch.finish_reason)
        u.check(ch.message.content is None and ch.message.tool_calls, "required: %r" % ch)
        for tc in ch.message.tool_calls:
            valid_call("required", tc)
        first = ch.message.tool_calls[0]
        # named: that function, whatever the question
        r = c.chat.completions.create(messages=ASK, tool_choice={
            "type": "function", "function": {"name": "get_time"}}, parallel_tool_calls=False, **kw)
        calls = r.choices[0].message.tool_calls
        u.check(len(calls) == 1 and calls[0].function.name == "get_time", "named: %r" % calls)
        valid_call("named", calls[0])
        # streamed: OpenAI's deltas, joined they equal the non-streamed arguments
        deltas, finish = [], None
        for k in c.chat.completions.create(messages=ASK, tool_choice="required", stream=True,
                                           **kw):
            if k.choices and k.choices[0].delta.tool_calls:
                deltas += k.choices[0].delta.tool_calls
            if k.choices and k.choices[0].finish_reason:
                finish = k.choices[0].finish_reason
        u.check(finish == "tool_calls", "stream: finish %r" % finish)
        d0 = deltas[0]
        u.check(d0.index == 0 and d0.id and d0.type == "function" and
                d0.function.name == first.function.name and d0.function.arguments == "",
                "stream: first chunk %r" % d0)
        later = [d for d in deltas[1:] if d.index == 0]
        u.check(later and all(d.id is None and d.function.name is None for d in later),
                "stream: later chunks carry only arguments: %r" % later[:2])
        args = "".join(d.function.arguments for d in deltas if d.index == 0)
        u.check(args == first.function.arguments, "stream: %r != %r" % (args, first.function.arguments))
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
        # unsupported parameters: 400 naming the keyword
        bad = [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"multipleOf": 2}}}}}]
        try:
            c.chat.completions.create(model="m", messages=ASK, tools=bad, tool_choice="required")
            u.check(False, "an unsupported parameters schema was accepted")
        except openai.BadRequestError as e:
            u.check("multipleOf" in str(e) and "tools[0]" in str(e), "400: %s" % e)
    print("tool calls: required, named, streamed, none, auto, round trip, 400: ok")


if __name__ == "__main__":
    main()
