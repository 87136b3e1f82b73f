"""test_openai_context.py - OpenAI's default max_tokens through the HTTP API (the official
`openai` package) on the default model, served with a small context (--max-ctx 128) so that
running to its end is quick: a request that gives no max_tokens may generate until the context
ends (with the end-of-text tokens banned it does: finish_reason "length" and exactly
context - prompt completion tokens), streamed or not; one that ends earlier has a real
finish_reason and completion_tokens <= context - prompt; a prompt longer than the context is
400 context_length_exceeded (openai.BadRequestError, e.code) in OpenAI's words, and so is a
max_tokens that does not fit after the prompt."""
import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai")
import openai  # noqa: E402

CTX = 128
# SmolLM2's special tokens (<|endoftext|>, <|im_start|>, <|im_end|>, ...) are ids 0..16
NO_END = {str(i): -100 for i in range(17)}


def check_400(e, what, starts):
    u.check(e.status_code == 400 and e.code == "context_length_exceeded",
            "%s: %r %r" % (what, e.status_code, e.code))
    msg = e.body["message"] if isinstance(e.body, dict) else str(e)
    u.check(msg.startswith(starts), "%s: message %r" % (what, msg))
    return msg


def main():
    hport = u.free_port()
    args = ["--threads", "1", "--max-ctx", str(CTX), "--http", "127.0.0.1:%d" % hport]
    with u.Server(args):
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % hport, api_key="none",
                          max_retries=0, timeout=60)
        msgs = [{"role": "user", "content": "Tell me a long story about a dragon."}]
        # no max_tokens, nothing can end the text: it runs to the end of the context
        r = c.chat.completions.create(model=u.MODEL_ID, messages=msgs, temperature=0, logit_bias=NO_END)
        us = r.usage
        print("to the end: prompt %d, completion %d, %s" % (us.prompt_tokens,
              us.completion_tokens, r.choices[0].finish_reason))
        u.check(r.choices[0].finish_reason == "length", "finish %r" % r.choices[0].finish_reason)
        u.check(us.prompt_tokens > 10 and us.completion_tokens == CTX - us.prompt_tokens,
                "completion_tokens %d, want %d - %d" % (us.completion_tokens, CTX,
                                                        us.prompt_tokens))
        # the same streamed: the chunks add up to the same text, the usage says the same
        text, finish, usage = "", None, None
        for ch in c.chat.completions.create(model=u.MODEL_ID, messages=msgs, temperature=0,
                                            logit_bias=NO_END, stream=True,
                                            stream_options={"include_usage": True}):
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
            if ch.usage:
                usage = ch.usage
        u.check(finish == "length" and text == r.choices[0].message.content,
                "streamed: %r, %d vs %d bytes" % (finish, len(text),
                                                   len(r.choices[0].message.content)))
        u.check(usage.completion_tokens == CTX - usage.prompt_tokens, "streamed usage %r" % usage)
        # a plain request (the model may end it): a real finish_reason, within the context
        for prompt in ["Hi!", "Write a poem about the sea."]:
            r = c.chat.completions.create(model=u.MODEL_ID, temperature=0,
                                          messages=[{"role": "user", "content": prompt}])
            us, fin = r.usage, r.choices[0].finish_reason
            print("%r: %s, prompt %d, completion %d" % (prompt, fin, us.prompt_tokens,
                                                        us.completion_tokens))
            u.check(fin in ("stop", "length"), "%r: finish %r" % (prompt, fin))
            u.check(1 <= us.completion_tokens <= CTX - us.prompt_tokens, "%r: usage" % prompt)
            u.check(fin == "stop" or us.completion_tokens == CTX - us.prompt_tokens,
                    "%r: length before the end of the context" % prompt)
        r = c.completions.create(model=u.MODEL_ID, prompt="Once upon a time", temperature=0,
                                 logit_bias=NO_END)
        u.check(r.choices[0].finish_reason == "length" and
                r.usage.completion_tokens == CTX - r.usage.prompt_tokens,
                "completions: %r %r" % (r.choices[0].finish_reason, r.usage))
        # a prompt longer than the context: 400 context_length_exceeded, OpenAI's message
        long_msgs = [{"role": "user", "content": "one two three four five " * 60}]
        try:
            c.chat.completions.create(model=u.MODEL_ID, messages=long_msgs)
            u.check(False, "a prompt longer than the context was accepted")
        except openai.BadRequestError as e:
            msg = check_400(e, "long prompt", "This model's maximum context length is %d tokens. "
                            "However, your messages resulted in " % CTX)
            n = int(msg.split("resulted in ")[1].split()[0])
            u.check(n > CTX, "the prompt's tokens %d" % n)
            u.check(e.body.get("param") == "messages", "param %r" % e.body)
        try:  # streamed: the same 400, before any chunk
            for _ in c.chat.completions.create(model=u.MODEL_ID, messages=long_msgs, stream=True):
                u.check(False, "a chunk of a refused request")
        except openai.BadRequestError as e:
            check_400(e, "long prompt, streamed", "This model's maximum context length")
        try:  # a max_tokens that does not fit after the prompt
            c.completions.create(model=u.MODEL_ID, prompt="Once upon a time", max_tokens=CTX)
            u.check(False, "max_tokens beyond the context was accepted")
        except openai.BadRequestError as e:
            msg = check_400(e, "max_tokens", "This model's maximum context length is %d tokens. "
                            "However, you requested " % CTX)
            u.check("%d in the completion" % CTX in msg, msg)
            u.check(e.body.get("param") == "prompt", "param %r" % e.body)
    print("ok")


if __name__ == "__main__":
    main()
