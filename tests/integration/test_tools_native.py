#!/usr/bin/env python3
"""test_tools_native.py - tool calls on the native ZeroMQ protocol (docs/PROTOCOL.md, "Tool
calls"), with raw MessagePack frames and no HTTP: a generate with `tools` (OpenAI's function
tools as JSON text) and tool_choice "required" ends with done.tool_calls whose arguments
validate with `jsonschema` against the function's parameters, streamed or not, the streamed
tokens spelling the call array; a named tool_choice calls that function; parallel_tool_calls
false gives one call where the question asks for three; "none" gives text and no calls; the
calls are those the HTTP gateway answers for the same request (its own translation); bad
tools are error events naming what is wrong."""
import json
import os
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "jsonschema")
import jsonschema  # noqa: E402
import openai  # noqa: E402
import zmq  # noqa: E402

from test_tools import PARAMS, TOOLS  # noqa: E402  the same tools as over HTTP

ASK = "What is the weather in Paris?"
ASK3 = "Get the weather for three cities: Paris, Rome, Berlin."


def request(rid, prompt, stream=False, **kw):
    m = u.chat_request(rid, prompt, 120)
    m.update(tools=json.dumps(TOOLS), stream=stream, **kw)
    return m


def run(c, m):
    """Send m; the tokens' text (streamed) and the done event."""
    c.send(m)
    text = ""
    while True:
        e = c.recv(120 * u.TIMEOUT_SCALE)
        if e["type"] == "token":
            text += e["text"]
        elif e["type"] in ("done", "error"):
            return text, e


def calls(d):
    out = d.get("tool_calls") or []
    for i, tc in enumerate(out):
        u.check(tc["name"] in PARAMS, "unknown function %r" % tc)
        jsonschema.validate(json.loads(tc["arguments"]), PARAMS[tc["name"]])
        u.check(tc["id"].startswith("call_") and tc["id"].endswith("_%d" % i), "id %r" % tc["id"])
    return [(tc["name"], tc["arguments"]) for tc in out]


def main():
    t0 = time.time()
    hport = u.free_port()
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]) as s:
        c = u.Client(zmq.Context.instance(), s.endpoint)
        _, d = run(c, request("t1", ASK, tool_choice="required"))
        u.check(d["type"] == "done", "required: %r" % d)
        got = calls(d)
        u.check(got, "required: no calls in %r" % d)
        # streamed: the same calls, the tokens spelling the array
        text, ds = run(c, request("t2", ASK, stream=True, tool_choice="required"))
        u.check(calls(ds) == got, "streamed calls %r vs %r" % (calls(ds), got))
        u.check(text.lstrip().startswith("[{") and "get_weather" in text, "tokens %r" % text)
        # the HTTP gateway's own translation of the same request gives the same calls
        oc = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % hport, api_key="x", max_retries=0)
        r = oc.chat.completions.create(model=u.MODEL_ID, messages=[{"role": "user",
                                                                    "content": ASK}],
                                       tools=TOOLS, tool_choice="required", temperature=0,
                                       max_tokens=120)
        http = [(tc.function.name, tc.function.arguments)
                for tc in r.choices[0].message.tool_calls]
        u.check(http == got, "native %r vs http %r" % (got, http))
        # named
        _, d = run(c, request("t3", ASK, tool_choice="get_time"))
        u.check([n for n, _ in calls(d)] == ["get_time"], "named: %r" % d)
        # parallel_tool_calls false: one call
        _, many = run(c, request("t4", ASK3, tool_choice="required"))
        _, one = run(c, request("t5", ASK3, tool_choice="required", parallel_tool_calls=False))
        u.check(len(calls(many)) > 1 and len(calls(one)) == 1,
                "parallel: %d calls, false: %d" % (len(calls(many)), len(calls(one))))
        # none: text, no calls
        _, d = run(c, request("t6", ASK, tool_choice="none"))
        u.check(d["type"] == "done" and not d.get("tool_calls") and d.get("text"), "none: %r" % d)
        # errors: error events naming what is wrong
        bad = [(dict(tools="[{"), "not JSON"),
               (dict(tools=json.dumps([{"type": "function", "function": {"name": "f g"}}])),
                "name"),
               (dict(tool_choice="nosuch"), "nosuch"),
               (dict(json_object=True), "together")]
        for extra, want in bad:
            m = request("bad", ASK)
            m.update(extra)
            e = c.call(m)
            u.check(e["type"] == "error" and want in e["message"], "%r: %r" % (extra, e))
        m = {"type": "generate", "v": 1, "id": "p", "prompt": "x", "tools": json.dumps(TOOLS)}
        e = c.call(m)
        u.check(e["type"] == "error" and "messages" in e["message"], "prompt + tools: %r" % e)
        c.close()
    print("native tool calls: required (streamed too), = http, named, parallel false, none, "
          "errors: ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
