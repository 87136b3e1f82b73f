#!/usr/bin/env python3
"""bench_grammar.py - one chunk of scripts/bench-grammar (see its header): start one server
(`strata serve --http` or llama-server, on one GGUF), measure, append rows to ROWS and the
raw answers to RAW, stop the server by its PID.

  bench_grammar.py decode  --engine strata|llama --model GGUF --key KEY --rows F --raw F ...
  bench_grammar.py compile --engine strata|llama --model GGUF --key KEY --rows F --raw F ...
  bench_grammar.py index   --engine strata --model GGUF --key KEY --rows F --raw F ...
  bench_grammar.py summary DIR

decode: C concurrent streamed chat requests (C of --concurrency, e.g. 1 and 16), the same
prompts and max_tokens N for both modes, each run to exactly N tokens: the end-of-generation
tokens are banned with logit_bias -100 (neither HTTP API has OpenAI's ignore_eos: strata
refuses it, docs/HTTP.md), and the constrained mode's schema (DECODE_SCHEMA, an array of at
least 64 objects) cannot close within N tokens.  Modes alternate (order swapped by --rep).
A row per (mode, C): decode tok/s = the sum over the streams of (tokens - 1) / (last token -
first token); the constrained mode warms its grammar first (compile time is measured
apart).  A stream that does not give N tokens is an error (the comparison would be off).

compile: for each schema of COMPILE_SCHEMAS, on a fresh server: the time to first token of
an unconstrained request (a new prompt of the same length each time), of the schema's first
request (the grammar compiled now) and of its second (cached), max_tokens 1; a row per
schema with first - base (the compile a user waits for) and second - base; strata's worker
counter grammar.compile_us too (its own account of the compile).

index: `strata grammar bench` (no server): the token index's build time per schema.

Rows: KEY (test, engine, model, rep: tab-separated, from the caller) <TAB> what <TAB> value
<TAB> unit <TAB> load average at the end."""
import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SCHEMAS = os.path.join(ROOT, "tests", "data", "schemas")
# compile: from small to nested (rw_openapi_like, ref_tree: the nested kind issue 36 names)
COMPILE_SCHEMAS = ["obj_person", "rw_product", "rw_invoice", "rw_openapi_like", "ref_tree",
                   "pattern_09", "sup_anyof_deep"]
DECODE_SCHEMA = {
    "type": "array", "minItems": 64,
    "items": {"type": "object",
              "properties": {"id": {"type": "integer", "minimum": 0},
                             "name": {"type": "string", "maxLength": 24},
                             "price": {"type": "number"},
                             "tags": {"type": "array", "maxItems": 3,
                                      "items": {"type": "string", "maxLength": 12}}},
              "required": ["id", "name", "price", "tags"]}}
EOG_TEXTS = {"<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>", "</s>", "<|eot_id|>"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def eog_ids(model):
    """End-of-generation token ids of a GGUF (its eos/eot/eom ids and the known end-of-turn
    texts), read with the gguf package."""
    from gguf import GGUFReader
    r = GGUFReader(model)
    ids = set()
    for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
              "tokenizer.ggml.eom_token_id"):
        f = r.fields.get(k)
        if f is not None:
            ids.add(int(f.parts[f.data[0]][0]))
    f = r.fields["tokenizer.ggml.tokens"]
    for i, d in enumerate(f.data):
        if bytes(f.parts[d]).decode(errors="replace") in EOG_TEXTS:
            ids.add(i)
    return sorted(ids)


class Server:
    """strata serve --http or llama-server on a free port, stopped by PID."""

    def __init__(self, a):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="bench-grammar-", suffix=".log",
                                               delete=False)
        self.zmq_port = free_port() if a.engine == "strata" else 0
        if a.engine == "strata":
            cmd = [a.strata, "serve", "-m", a.model, "--endpoint",
                   "tcp://127.0.0.1:%d" % self.zmq_port, "--http", "127.0.0.1:%d" % self.port,
                   "-t", str(a.threads), "--max-batch", str(max(a.concurrency)),
                   "--kv-type", "f16"]
        else:
            c = max(a.concurrency)
            cmd = [os.path.join(a.peer_bin, "llama-server"), "-m", a.model, "--host",
                   "127.0.0.1", "--port", str(self.port), "-t", str(a.threads), "-tb",
                   str(a.threads), "-np", str(c), "-c", str(c * 1024), "-ctk", "f16", "-ctv",
                   "f16"]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited:\n%s" % (cmd[0], self.read_log()[-3000:]))
            try:
                if request(self.port, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("%s not ready" % cmd[0])

    def read_log(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        os.unlink(self.log.name)


def request(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"} if body is not None else {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def stream(port, body):
    """POST a streamed chat request; (times of the chunks that carry content, text, finish,
    t_sent, completion_tokens from the usage chunk or None)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:500]))
    times, text, finish, n = [], [], None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            n = ev["usage"].get("completion_tokens")
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                times.append(time.perf_counter())
                text.append(piece)
            finish = ch.get("finish_reason") or finish
    c.close()
    return times, "".join(text), finish, t0, n


def rf_of(schema, name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def model_name(path):
    return os.path.basename(path)


def stats(srv):
    """strata's counters (docs/PROTOCOL.md `stats`) from its ZeroMQ endpoint; {} for
    llama-server or without the zmq/msgpack packages."""
    if not srv.zmq_port:
        return {}
    try:
        import msgpack
        import zmq
    except ImportError:
        return {}
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect("tcp://127.0.0.1:%d" % srv.zmq_port)
    try:
        s.send(msgpack.packb({"type": "stats"}))
        if not s.poll(5000):
            return {}
        return msgpack.unpackb(s.recv(), raw=False).get("counters", {})
    finally:
        s.close(0)


def decode(a, srv, rows, raw):
    bias = {str(t): -100 for t in eog_ids(a.model)}
    base = {"model": model_name(a.model), "max_tokens": a.n, "temperature": 0,
            "logit_bias": bias}
    prompts = ["Request %d-%d. List many products as JSON, each with id, name, price and tags."
               % (a.rep, i) for i in range(max(a.concurrency))]
    # warm-up: the grammar compiled, the code paths touched
    for mode in ("free", "schema"):
        b = dict(base, max_tokens=4, messages=[{"role": "user", "content": "Warm up."}])
        if mode == "schema":
            b["response_format"] = rf_of(DECODE_SCHEMA, "products")
        stream(srv.port, b)
    modes = ["free", "schema"] if a.rep % 2 else ["schema", "free"]
    for c in a.concurrency:
        for mode in modes:
            out = [None] * c

            def one(i, mode=mode, out=out):
                b = dict(base, messages=[{"role": "user", "content": prompts[i]}])
                if mode == "schema":
                    b["response_format"] = rf_of(DECODE_SCHEMA, "products")
                out[i] = stream(srv.port, b)

            th = [threading.Thread(target=one, args=(i,)) for i in range(c)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            rate, n_tok = 0.0, []
            for times, text, finish, _, n in out:
                # tokens from the usage chunk (a chunk may carry more than one token: a
                # partial UTF-8 character held back), else the chunks
                n = n if n is not None else len(times)
                n_tok.append(n)
                if len(times) > 1:
                    rate += (n - 1) / (times[-1] - times[0])
            raw.write("## decode %s %s c%d: tokens %r\n%s\n" % (a.engine, mode, c, n_tok,
                                                               out[0][1][:400]))
            if min(n_tok) != a.n:
                raise RuntimeError("decode %s c%d: streams of %r tokens, not %d (see %s)"
                                   % (mode, c, n_tok, a.n, a.raw))
            rows.append(("decode", "%s c%d" % (mode, c), "%.2f" % rate, "tok/s"))


def compile_(a, srv, rows, raw):
    base = {"model": model_name(a.model), "max_tokens": 1, "temperature": 0}
    k = [0]

    def ttft(rf=None):
        k[0] += 1
        b = dict(base, messages=[{"role": "user", "content":
                                  "Request %04d. Give an example of JSON data." % k[0]}])
        if rf:
            b["response_format"] = rf
        times, _, _, t0, _ = stream(srv.port, b)
        return (times[0] if times else time.perf_counter()) - t0

    ttft()  # warm-up
    for name in a.schemas.split(","):
        with open(os.path.join(SCHEMAS, name + ".json")) as f:
            schema = json.load(f)
        rf = rf_of(schema, name)
        t_base = statistics.median([ttft() for _ in range(3)])
        us0 = stats(srv).get("worker0.grammar.compile_us")
        first = ttft(rf)
        us1 = stats(srv).get("worker0.grammar.compile_us")
        second = ttft(rf)
        raw.write("## compile %s %s: base %.4f first %.4f second %.4f s\n"
                  % (a.engine, name, t_base, first, second))
        if us1 is not None:
            rows.append(("compile", name + " worker compile_us", "%.1f" % ((us1 - (us0 or 0))
                                                                            / 1000), "ms"))
        rows.append(("compile", name + " first-base", "%.1f" % (1000 * (first - t_base)), "ms"))
        rows.append(("compile", name + " cached-base", "%.1f" % (1000 * (second - t_base)),
                     "ms"))


def index(a, rows, raw):
    """`strata grammar bench`: the token index's build time of each schema at the model's
    vocabulary, without a server (what the worker's compile costs, alone)."""
    cmd = [a.strata, "grammar", "bench", "-m", a.model, "--walks", "1", "--steps", "1"]
    for name in a.schemas.split(","):
        cmd += ["--schema", os.path.join(SCHEMAS, name + ".json")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    raw.write("$ %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    if p.returncode != 0:
        raise RuntimeError("strata grammar bench failed: " + p.stderr)
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0].endswith(".json"):
            rows.append(("index", f[0][:-5] + " build", f[3], "ms"))


def summary(path):
    """Medians (and ranges, counts) of DIR/rows.tsv per test, engine, model and measure;
    decode also as schema / free."""
    v = {}
    with open(os.path.join(path, "rows.tsv")) as f:
        for line in f:
            test, engine, model, _rep, what, value, unit, _load = line.rstrip("\n").split("\t")
            v.setdefault((test, engine, model, what, unit), []).append(float(value))
    print("| test | engine | model | measure | median | range | n |")
    print("|---|---|---|---|---|---|---|")
    med = {}
    for k in sorted(v):
        x = v[k]
        med[k] = statistics.median(x)
        print("| %s | %s | %s | %s | %.1f %s | %.1f..%.1f | %d |" % (k[0], k[1], k[2], k[3],
                                                                  med[k], k[4], min(x), max(x),
                                                                  len(x)))
    print()
    for (test, engine, model, what, unit), m in sorted(med.items()):
        if test == "decode" and what.startswith("schema "):
            free = med.get((test, engine, model, "free " + what.split()[1], unit))
            if free:
                print("decode %s %s %s: constrained / unconstrained = %.3f (%+.1f %%)"
                      % (engine, model, what.split()[1], m / free, 100 * (m / free - 1)))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        return summary(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test", choices=["decode", "compile", "index"])
    ap.add_argument("--engine", choices=["strata", "llama"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--key", required=True, help="the chunk's key, first columns of its rows")
    ap.add_argument("--rows", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--rep", type=int, default=1)
    ap.add_argument("-n", type=int, default=128, help="decode: tokens per request")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--schemas", default=",".join(COMPILE_SCHEMAS),
                    help="compile: names in tests/data/schemas/")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--peer-bin", default="")
    a = ap.parse_args()
    a.concurrency = [int(x) for x in a.concurrency.split(",")]
    rows = []
    if a.test == "index":
        with open(a.raw, "a") as raw:
            raw.write("### %s %s (load %.2f)\n" % (a.key.replace("\t", " "),
                                                   time.strftime("%FT%TZ", time.gmtime()),
                                                   os.getloadavg()[0]))
            index(a, rows, raw)
    else:
        srv = Server(a)
        try:
            with open(a.raw, "a") as raw:
                raw.write("### %s %s (load %.2f)\n$ %s\n" % (
                    a.key.replace("\t", " "), time.strftime("%FT%TZ", time.gmtime()),
                    os.getloadavg()[0], " ".join(srv.cmd)))
                (decode if a.test == "decode" else compile_)(a, srv, rows, raw)
        finally:
            srv.stop()
    load = "%.2f" % os.getloadavg()[0]
    # the chunk's rows go in at once, at its end: a chunk is done or absent
    with open(a.rows, "a") as f:
        for test, what, value, unit in rows:
            f.write("\t".join([a.key, what, value, unit, load]) + "\n")
    for r in rows:
        print("  %s %s: %s %s" % (a.engine, r[1], r[2], r[3]))


if __name__ == "__main__":
    sys.exit(main())
