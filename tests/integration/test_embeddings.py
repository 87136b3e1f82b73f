"""test_embeddings.py - POST /v1/embeddings, GET /v1/models/{id}, model names and CORS
(docs/HTTP.md) against `strata serve --http` on the default model.

Oracles: llama.cpp's own server (`llama-server --embeddings --pooling mean`, the peer) for
the vectors -- cosine similarity >= 0.99 per input (the numbers differ by quantized-kernel
rounding only) and the same prompt token counts; NumPy for the norms (1 within 1e-4) and
for base64 (decoded as float32 little-endian, it equals the float answer); the official
`openai` SDK for the request and response shapes; raw http.client for CORS (preflight,
the Origin echoed only when allowed).  A batch equals its inputs sent one by one (each
input is its own sequence).  Both servers are stopped by PID; the test is bounded in
time."""
import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("openai", "numpy")
import numpy as np  # noqa: E402
import openai  # noqa: E402

DEADLINE = time.time() + 120  # the whole test, servers included
INPUTS = [
    "The capital of France is Paris.",
    "hello",
    "A longer sentence about embeddings, vectors and the mean pooling of the hidden "
    "states of a small language model, long enough to span several KV blocks of sixteen "
    "positions each, so that pooling crosses block boundaries.",
    "Les chats dorment beaucoup.",
]


def bounded():
    u.check(time.time() < DEADLINE, "the test ran past its time bound")


def raw(port, method, path, body=None, headers=None):
    """(status, headers dict lower-cased, parsed JSON body or None) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    h = {"Content-Type": "application/json"} if data is not None else {}
    h.update(headers or {})
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    try:
        j = json.loads(text) if text else None
    except ValueError:
        j = None
    return r.status, hdrs, j


def start_llama(port):
    """llama-server on the same model with mean pooling, stopped by its PID later."""
    exe = u.testenv.peer_tool("llama-server")
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    p = subprocess.Popen([exe, "-m", u.MODEL, "--embeddings", "--pooling", "mean", "--port",
                          str(port), "--host", "127.0.0.1", "-t", "1", "-c", "2048"],
                         stdout=log, stderr=log)
    while time.time() < DEADLINE:
        u.check(p.poll() is None, "llama-server exited:\n" + open(log.name).read()[-2000:])
        try:
            if raw(port, "GET", "/health")[0] == 200:
                return p, log.name
        except OSError:
            pass
        time.sleep(0.2)
    p.kill()
    u.check(False, "llama-server not ready")


def stop_pid(p):
    if p.poll() is None:
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_vectors(client, lport, model_id):
    r = client.embeddings.create(model=model_id, input=INPUTS)
    u.check(r.object == "list" and len(r.data) == len(INPUTS), "shape %r" % r)
    u.check(r.model == model_id, "model %r" % r.model)
    dim = len(r.data[0].embedding)
    s, _, ref = raw(lport, "POST", "/v1/embeddings", {"input": INPUTS, "model": "x"})
    u.check(s == 200, "llama-server: %s %r" % (s, ref))
    ref_tokens = ref["usage"]["prompt_tokens"]
    u.check(r.usage.prompt_tokens == ref_tokens and r.usage.total_tokens == ref_tokens,
            "usage %r, llama-server counted %d prompt tokens" % (r.usage, ref_tokens))
    for i, d in enumerate(r.data):
        v = np.array(d.embedding)
        w = np.array(ref["data"][i]["embedding"])
        u.check(d.index == i and d.object == "embedding" and len(v) == dim == len(w),
                "data[%d]: %r, dim %d vs %d" % (i, d.index, len(v), len(w)))
        u.check(abs(np.linalg.norm(v) - 1) < 1e-4, "norm of %d: %f" % (i, np.linalg.norm(v)))
        c = cos(v, w)
        print("  input %d: cosine with llama-server %.5f" % (i, c))
        u.check(c >= 0.99, "input %d: cosine %.4f with llama-server's vector" % (i, c))
    # different inputs give different vectors (not one vector for all)
    u.check(cos(r.data[0].embedding, r.data[1].embedding) < 0.99, "inputs 0 and 1 alike")
    return r


def test_batch_equals_single(client, batch, model_id):
    for i, text in enumerate(INPUTS):
        one = client.embeddings.create(model=model_id, input=text)
        c = cos(one.data[0].embedding, batch.data[i].embedding)
        u.check(c > 0.9999, "input %d alone vs in the batch: cosine %.6f" % (i, c))


def test_token_ids_and_base64(client, port, lport, model_id):
    # token ids: llama-server's tokenization of the first input, sent as ids (one input,
    # and an array of arrays); the vector must equal the text's
    s, _, tk = raw(lport, "POST", "/tokenize", {"content": INPUTS[0], "add_special": True})
    u.check(s == 200 and tk["tokens"], "llama-server /tokenize: %s %r" % (s, tk))
    ids = tk["tokens"]
    text = client.embeddings.create(model=model_id, input=INPUTS[0])
    by_ids = client.embeddings.create(model=model_id, input=ids)
    c = cos(text.data[0].embedding, by_ids.data[0].embedding)
    u.check(c > 0.9999 and by_ids.usage.prompt_tokens == len(ids),
            "ids vs text: cosine %.6f, %d tokens for %d ids" % (c, by_ids.usage.prompt_tokens,
                                                               len(ids)))
    two = client.embeddings.create(model=model_id, input=[ids, ids[:3]])
    u.check(len(two.data) == 2 and cos(two.data[0].embedding, text.data[0].embedding) > 0.9999,
            "array of arrays of ids")
    # base64: float32 little-endian of the same vector (raw request: the SDK decodes it)
    s, _, b = raw(port, "POST", "/v1/embeddings",
                  {"model": model_id, "input": INPUTS[0], "encoding_format": "base64"})
    u.check(s == 200 and isinstance(b["data"][0]["embedding"], str), "base64: %s %r" % (s, b))
    v = np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), dtype="<f4")
    f = np.array(text.data[0].embedding, dtype=np.float32)
    u.check(v.shape == f.shape and np.array_equal(v, f), "base64 decodes to other floats")
    # the SDK's own base64 path (its default when numpy is there) gives the same floats
    sdk = client.embeddings.create(model=model_id, input=INPUTS[0], encoding_format="base64")
    u.check(isinstance(sdk.data[0].embedding, str) or
            np.allclose(sdk.data[0].embedding, f), "SDK base64")


def expect_error(fn, status, code, param=None, what=""):
    try:
        fn()
    except openai.APIStatusError as e:
        err = e.body if isinstance(e.body, dict) else {}
        err = err.get("error", err)
        u.check(e.status_code == status and err.get("code") == code and
                (param is None or err.get("param") == param),
                "%s: %s %r (want %d %s %s)" % (what, e.status_code, err, status, code, param))
        return
    u.check(False, "%s: no error" % what)


def test_errors(client, port, model_id, dim):
    e = client.embeddings.create
    expect_error(lambda: e(model=model_id, input=""), 400, "invalid_request", "input", "empty")
    expect_error(lambda: e(model=model_id, input=[]), 400, "invalid_request", "input", "[]")
    expect_error(lambda: e(model=model_id, input=["a", 3]), 400, "invalid_request", "input[1]",
                 "mixed")
    expect_error(lambda: e(model=model_id, input=[[]]), 400, "invalid_request", "input[0]",
                 "empty ids")
    expect_error(lambda: e(model=model_id, input=[-1]), 400, "invalid_request", "input",
                 "negative id")
    expect_error(lambda: e(model=model_id, input=[10 ** 8]), 400, "bad_request", None,
                 "id beyond the vocabulary")
    expect_error(lambda: e(model=model_id, input="x", dimensions=dim // 2), 400,
                 "invalid_request", "dimensions", "dimensions")
    ok = e(model=model_id, input="x", dimensions=dim)
    u.check(len(ok.data[0].embedding) == dim, "dimensions equal to the model's")
    expect_error(lambda: e(model=model_id, input="x", encoding_format="int8"), 400,
                 "invalid_request", "encoding_format", "encoding_format")
    expect_error(lambda: e(model="no-such-model", input="x"), 404, "model_not_found", "model",
                 "unknown model")
    expect_error(lambda: e(model=model_id, input="word " * 3000), 400,
                 "context_length_exceeded", "input", "too long")
    s, _, b = raw(port, "POST", "/v1/embeddings", {"input": "x", "truncate": True})
    u.check(s == 400 and b["error"]["param"] == "truncate", "unknown field: %s %r" % (s, b))
    s, _, b = raw(port, "POST", "/v1/embeddings", b"{not json")
    u.check(s == 400 and b["error"]["type"] == "invalid_request_error", "bad json %s" % s)
    # the server still serves after all that
    u.check(len(e(model=model_id, input="still here").data) == 1, "after errors")


def test_models(client, port, model_id):
    m = client.models.retrieve(model_id)
    u.check(m.id == model_id and m.object == "model" and m.owned_by == "strata", "%r" % m)
    stem = model_id[:-5] if model_id.endswith(".gguf") else model_id
    s, _, b = raw(port, "GET", "/v1/models/" + stem)
    u.check(s == 200 and b["id"] == model_id, "by stem: %s %r" % (s, b))
    expect_error(lambda: client.models.retrieve("gpt-4o"), 404, "model_not_found", "model",
                 "models/gpt-4o")
    expect_error(lambda: client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=1), 404,
        "model_not_found", "model", "chat with an unknown model")
    expect_error(lambda: client.completions.create(model="gpt-4o", prompt="hi", max_tokens=1),
                 404, "model_not_found", "model", "completion with an unknown model")
    r = client.completions.create(model=stem, prompt="The capital of France is", max_tokens=1,
                                  temperature=0)
    u.check(r.choices[0].text is not None and r.model == model_id, "completion by stem")


def test_cors(port, cport):
    origin = "https://app.example.com"
    # off (the default): no CORS headers; OPTIONS is a wrong method
    s, h, _ = raw(port, "OPTIONS", "/v1/embeddings", headers={"Origin": origin})
    u.check(s == 405 and "access-control-allow-origin" not in h, "CORS off: %s %r" % (s, h))
    s, h, _ = raw(port, "GET", "/v1/models", headers={"Origin": origin})
    u.check(s == 200 and "access-control-allow-origin" not in h, "CORS off, GET: %r" % h)
    # on, with an allow-list: a preflight from an allowed origin
    s, h, _ = raw(cport, "OPTIONS", "/v1/embeddings",
                  headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                           "Access-Control-Request-Headers": "authorization, content-type"})
    u.check(s == 204 and h.get("access-control-allow-origin") == origin and
            "POST" in h.get("access-control-allow-methods", "") and
            "authorization" in h.get("access-control-allow-headers", "").lower(),
            "preflight: %s %r" % (s, h))
    # the actual request from it carries the origin back
    s, h, b = raw(cport, "POST", "/v1/embeddings", {"input": "hi"}, headers={"Origin": origin})
    u.check(s == 200 and h.get("access-control-allow-origin") == origin and
            "origin" in h.get("vary", "").lower(), "CORS POST: %s %r" % (s, h))
    # the second allowed origin too; another origin is never echoed
    s, h, _ = raw(cport, "GET", "/v1/models", headers={"Origin": "http://localhost:3000"})
    u.check(h.get("access-control-allow-origin") == "http://localhost:3000", "second origin")
    s, h, _ = raw(cport, "OPTIONS", "/v1/chat/completions",
                  headers={"Origin": "https://evil.example", "Access-Control-Request-Method":
                           "POST"})
    u.check("access-control-allow-origin" not in h, "a disallowed origin echoed: %r" % h)
    s, h, _ = raw(cport, "POST", "/v1/embeddings", {"input": "hi"},
                  headers={"Origin": "https://evil.example"})
    u.check(s == 200 and "access-control-allow-origin" not in h, "disallowed POST: %r" % h)
    s, _, _ = raw(cport, "OPTIONS", "/nope", headers={"Origin": origin})
    u.check(s == 404, "preflight of an unknown path: %s" % s)


def main():
    t0 = time.time()
    hport, cport, lport = u.free_port(), u.free_port(), u.free_port()
    model_id = os.path.basename(u.MODEL)
    llama, llog = start_llama(lport)
    try:
        with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % hport]):
            bounded()
            client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % hport, api_key="none",
                                   max_retries=0, timeout=60)
            batch = test_vectors(client, lport, model_id)
            bounded()
            test_batch_equals_single(client, batch, model_id)
            test_token_ids_and_base64(client, hport, lport, model_id)
            bounded()
            dim = len(batch.data[0].embedding)
            test_errors(client, hport, model_id, dim)
            test_models(client, hport, model_id)
            bounded()
            with u.Server(["--threads", "1", "--http", "127.0.0.1:%d" % cport, "--cors-origin",
                           "https://app.example.com", "--cors-origin", "http://localhost:3000"]):
                test_cors(hport, cport)
    finally:
        stop_pid(llama)
        os.unlink(llog)
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
