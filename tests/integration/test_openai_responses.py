#!/usr/bin/env python3
"""test_openai_responses.py - OpenAI's Responses API (docs/HTTP.md, "Responses") through the
official `openai` package on the default model: a greedy response's output_text is the text
of `strata generate --greedy` (instructions: its --system), status "incomplete" with
reason max_output_tokens when cut; the stream's events come in the documented order with
sequence numbers 0, 1, 2, ..., their deltas make the non-streamed text, and the SDK's own
stream helper assembles the same response; previous_response_id continues a conversation
as the chat API answers the same turns; a forced tool gives function_call items whose
arguments validate with `jsonschema` (streamed: the same call, as function_call_arguments
events), and a function_call_output sent back is answered; text.format json_schema gives
valid JSON; a kept response is retrieved and deleted, store false keeps none; unknown or
unsupported fields are 400s naming them."""
import json
import os
import subprocess
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "jsonschema")
import jsonschema  # noqa: E402
import openai  # noqa: E402

N = 16
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["C", "F"]}},
           "required": ["city", "unit"]}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather of a city",
          "parameters": WEATHER}]


def gen_text(prompt, n, system=None):
    """The text of `strata generate --chat --greedy` (what the service must reproduce)."""
    cmd = [u.BIN, "generate", "--chat", "-p", prompt, "-n", str(n), "--greedy", "-t", "1"]
    cmd += ["--system", system] if system is not None else []
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120 * u.TIMEOUT_SCALE)
    u.check(out.returncode == 0, "strata generate failed: " + out.stderr)
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


def create(client, **kw):
    args = dict(model=u.MODEL_ID, max_output_tokens=N, temperature=0)
    args.update(kw)
    return client.responses.create(**args)


def test_text(client):
    prompt = u.PROMPTS[0]
    r = create(client, input=prompt)
    want = gen_text(prompt, N)
    u.check(r.output_text == want, "output_text %r != strata generate %r" % (r.output_text, want))
    u.check(r.object == "response" and r.id.startswith("resp_") and r.created_at > 0,
            "head %r" % r)
    u.check(len(r.output) == 1 and r.output[0].type == "message" and
            r.output[0].role == "assistant", "output %r" % r.output)
    u.check(r.status in ("completed", "incomplete"), "status %r" % r.status)
    if r.status == "incomplete":
        u.check(r.incomplete_details.reason == "max_output_tokens", "%r" % r.incomplete_details)
        u.check(r.usage.output_tokens == N, "usage %r" % r.usage)
    u.check(r.usage.input_tokens > 0 and
            r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens,
            "usage %r" % r.usage)
    u.check(r.max_output_tokens == N and r.temperature == 0 and r.tools == [] and
            r.previous_response_id is None, "echoed fields %r" % r)
    # instructions: the system turn
    sysmsg = "Answer in French."
    r = create(client, input=u.PROMPTS[2], instructions=sysmsg)
    want = gen_text(u.PROMPTS[2], N, system=sysmsg)
    u.check(r.output_text == want, "with instructions %r != %r" % (r.output_text, want))
    u.check(r.instructions == sysmsg, "instructions echoed %r" % r.instructions)
    # a short answer that ends by itself: completed
    r = create(client, input="Say yes.", max_output_tokens=64)
    u.check(r.status == "completed" and r.incomplete_details is None, "status %r" % r.status)
    return r


def test_stream(client):
    prompt = u.PROMPTS[1]
    whole = create(client, input=prompt)
    types, seqs, deltas, final = [], [], "", None
    for ev in create(client, input=prompt, stream=True):
        types.append(ev.type)
        seqs.append(ev.sequence_number)
        if ev.type == "response.output_text.delta":
            deltas += ev.delta
        if ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    u.check(seqs == list(range(len(seqs))), "sequence numbers %r" % seqs)
    head = ["response.created", "response.in_progress", "response.output_item.added",
            "response.content_part.added"]
    tail = ["response.output_text.done", "response.content_part.done",
            "response.output_item.done"]
    u.check(types[:4] == head, "stream head %r" % types[:6])
    u.check(types[-4:-1] == tail and types[-1] in ("response.completed", "response.incomplete"),
            "stream tail %r" % types[-5:])
    u.check(set(types[4:-4]) == {"response.output_text.delta"}, "middle %r" % set(types[4:-4]))
    u.check(deltas == whole.output_text, "deltas %r != non-streamed %r" %
            (deltas, whole.output_text))
    u.check(final is not None and final.output_text == whole.output_text and
            final.usage.output_tokens == whole.usage.output_tokens, "final %r" % final)
    # the SDK's stream helper (its own event accumulation) gives the same response (it
    # wants response.completed: an answer that ends by itself)
    done = create(client, input="Say yes.", max_output_tokens=64)
    with client.responses.stream(model=u.MODEL_ID, input="Say yes.", max_output_tokens=64,
                                 temperature=0) as st:
        got = st.get_final_response()
    u.check(done.status == "completed" and got.output_text == done.output_text,
            "stream helper %r vs %r" % (got.output_text, done.output_text))


def test_previous(client):
    q1, q2 = u.PROMPTS[3], "And how many legs does an ant have?"
    r1 = create(client, input=q1)
    r2 = create(client, input=q2, previous_response_id=r1.id)
    msgs = [{"role": "user", "content": q1}, {"role": "assistant", "content": r1.output_text},
            {"role": "user", "content": q2}]
    c = client.chat.completions.create(model=u.MODEL_ID, messages=msgs, max_tokens=N,
                                       temperature=0)
    u.check(r2.output_text == c.choices[0].message.content,
            "continued %r != chat of the same turns %r" % (r2.output_text,
                                                           c.choices[0].message.content))
    u.check(r2.previous_response_id == r1.id, "previous_response_id %r" % r2.previous_response_id)
    u.check(r2.usage.input_tokens > r1.usage.input_tokens, "the history is in the prompt: %r vs %r"
            % (r2.usage, r1.usage))
    # the same turns given as input items (with a developer message as the system turn)
    r3 = create(client, input=[{"role": "developer", "content": "Be brief."},
                               {"role": "user", "content": [{"type": "input_text", "text": q1}]}])
    u.check(r3.output_text == gen_text(q1, N, system="Be brief."), "items %r" % r3.output_text)
    # retrieve and delete; store false keeps nothing
    got = client.responses.retrieve(r1.id)
    u.check(got.id == r1.id and got.output_text == r1.output_text, "retrieved %r" % got)
    client.responses.delete(r1.id)
    for call in (lambda: client.responses.retrieve(r1.id),
                 lambda: create(client, input="hi", previous_response_id=r1.id)):
        try:
            call()
            u.check(False, "a deleted response is still there")
        except (openai.NotFoundError, openai.BadRequestError):
            pass
    r4 = create(client, input="hi", store=False)
    try:
        client.responses.retrieve(r4.id)
        u.check(False, "store false: kept anyway")
    except openai.NotFoundError:
        pass


def test_tools(client):
    r = create(client, input="What is the weather in Paris?", tools=TOOLS, tool_choice="required",
               max_output_tokens=64)
    calls = [o for o in r.output if o.type == "function_call"]
    u.check(calls and len(calls) == len(r.output), "output %r" % r.output)
    for c in calls:
        u.check(c.name == "get_weather" and c.call_id.startswith("call_") and c.id.startswith("fc_"),
                "call %r" % c)
        jsonschema.validate(json.loads(c.arguments), WEATHER)
    # streamed: the same calls, as function_call items and their argument events
    items, args = [], {}
    for ev in create(client, input="What is the weather in Paris?", tools=TOOLS,
                     tool_choice="required", max_output_tokens=64, stream=True):
        if ev.type == "response.output_item.done":
            items.append(ev.item)
        if ev.type == "response.function_call_arguments.done":
            args[ev.output_index] = ev.arguments
    u.check([(i.name, i.arguments) for i in items] == [(c.name, c.arguments) for c in calls],
            "streamed %r vs %r" % (items, calls))
    u.check(all(i.call_id.startswith("call_") and i.status == "completed" for i in items),
            "streamed items %r" % items)
    u.check([args[i] for i in sorted(args)] == [c.arguments for c in calls], "args %r" % args)
    # the tool's answer sent back: a text answer (tools still offered, choice auto)
    r2 = create(client, previous_response_id=r.id, tools=TOOLS, max_output_tokens=24,
                input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                        "output": "sunny, 21 C"}])
    u.check(r2.status in ("completed", "incomplete") and r2.output, "after the call %r" % r2)
    # a named tool_choice
    r3 = create(client, input="Weather?", tools=TOOLS, max_output_tokens=64,
                tool_choice={"type": "function", "name": "get_weather"})
    u.check(r3.output[0].type == "function_call" and r3.output[0].name == "get_weather",
            "named %r" % r3.output)


def test_json_schema(client):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = create(client, input="Invent a person.", max_output_tokens=48,
               text={"format": {"type": "json_schema", "name": "person", "schema": schema}})
    u.check(r.status == "completed", "status %r: %r" % (r.status, r.output_text))
    jsonschema.validate(json.loads(r.output_text), schema)
    u.check(r.text.format.type == "json_schema", "text echoed %r" % r.text)


def test_errors(client):
    cases = [(dict(input="hi", frobnicate=1), "frobnicate"),
             (dict(input="hi", reasoning={"effort": "high"}), "reasoning"),
             (dict(input="hi", truncation="auto"), "truncation"),
             (dict(input=[{"role": "user", "content": [{"type": "input_image",
                                                        "image_url": "http://x/y.png"}]}]),
              "input"),
             (dict(input="hi", tools=[{"type": "web_search"}]), "tools"),
             (dict(input="hi", max_output_tokens=0), "max_output_tokens"),
             (dict(input="hi", previous_response_id="resp_nosuch"), "previous_response_id"),
             (dict(), "input")]
    for kw, param in cases:
        extra = {k: v for k, v in kw.items() if k not in ("input",)}
        try:
            client.responses.create(model=u.MODEL_ID, max_output_tokens=N,
                                    **({"input": kw["input"]} if "input" in kw else {}),
                                    extra_body=extra)
            u.check(False, "%r accepted" % kw)
        except openai.BadRequestError as e:
            u.check((e.body.get("param") or "").startswith(param), "%r: %r" % (kw, e.body))


def main():
    t0 = time.time()
    hport = u.free_port()
    with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]) as s:
        base = "http://127.0.0.1:%d/v1" % hport
        client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
        u.wait_for(lambda: s.read_log().find("ready") >= 0, 30, "ready")
        test_text(client)
        test_stream(client)
        test_previous(client)
        test_tools(client)
        test_json_schema(client)
        test_errors(client)
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
