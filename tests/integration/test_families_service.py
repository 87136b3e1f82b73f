"""test_families_service.py - every service feature on every model family strata loads: for
llama (the default model), qwen2 and qwen3 (random-weight GGUFs of the Qwen2.5-0.5B and
Qwen3-0.6B widths, 2 layers, written by scripts/make_shape_gguf.py and quantized to Q8_0 by
`strata quantize` into a temporary folder) and gemma3 (the cached gemma-3-270m GGUF, once
`strata generate` loads it; until then it is reported as skipped), `strata serve -m MODEL`
is checked, greedy, against the model's own `strata generate --chat --greedy` tokens:
  - continuous batching: 4 concurrent requests each equal their solo reference;
  - prefix cache: a second request sharing a long system prompt reports cached_tokens > 0
    and equals its reference (computed without any cache);
  - HTTP: `--http` /v1/chat/completions through the openai SDK answers, with the reference's
    token count;
  - speculative decoding, `--draft ngram`: 4 concurrent requests equal their references;
  - KV quantization, `--kv-type int8`: 2 concurrent requests end with `done` and some text
    (int8 KV may change the tokens);
  - resume after a kill: process mode (--topology, two workers), worker0 SIGKILLed once every
    request has a token; all 4 complete, each index once, equal to the references.
Bounded: every wait has a deadline; the servers are stopped by PID.  Under a sanitizer build
(STRATA_TIMEOUT_SCALE > 1) the families other than llama run the first three checks only.

Skips (77) without the default model, msgpack, zmq, numpy, gguf or openai; under CI=true
those are failures.  Env: STRATA_BIN (set by CTest), STRATA_MODEL.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

u.testenv.require("numpy", "gguf", "openai")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
import make_shape_gguf  # noqa: E402

import openai  # noqa: E402
import zmq  # noqa: E402

N = 24  # tokens per completion
KILL_N = 48  # tokens per completion in the kill phase (long enough to be killed mid-stream)
PROMPTS = u.PROMPTS[:4]
QWEN = {"qwen2": "qwen2-0.5b", "qwen3": "qwen3-0.6b"}  # family -> make_shape_gguf shape
LAYERS = 2
GEMMA = "gemma-3-270m-q4_k_m.gguf"  # beside the default model
SYSTEM = "You are a terse assistant for questions about a library. " + " ".join(
    "Rule %d: cite shelf %d of the catalogue and never guess about book %d." % (i, 3 * i, 7 * i)
    for i in range(1, 25))
QUESTIONS = ("Where are the atlases?", "Who may borrow rare books?")


def families(d):
    """[(family, GGUF path)] of what this machine can serve, making the Qwen files in d."""
    out = [("llama", u.MODEL)]
    for fam, shape in QWEN.items():
        f16 = make_shape_gguf.write(os.path.join(d, fam + "-f16.gguf"), shape, u.MODEL,
                                    layers=LAYERS)
        g = os.path.join(d, fam + "-q8_0.gguf")
        q = subprocess.run([u.BIN, "quantize", "--threads", "2", "--quiet", f16, g, "q8_0"],
                           capture_output=True, text=True, timeout=120)
        u.check(q.returncode == 0, "strata quantize %s: %s" % (fam, q.stderr))
        os.unlink(f16)
        out.append((fam, g))
    gemma = os.path.join(os.path.dirname(u.MODEL), GEMMA)
    if not os.path.isfile(gemma):
        print("gemma3: %s not found, skipped" % gemma)
        return out
    p = subprocess.run([u.BIN, "generate", "-m", gemma, "-p", "Hi", "-n", "1", "--greedy"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0:
        out.append(("gemma3", gemma))
    else:
        print("gemma3: not loadable yet, skipped\n  (%s)" % p.stderr.strip())
    return out


def ask(ep, rid, prompt, system=None):
    """One greedy request of N tokens; returns (token ids, done)."""
    c = u.Client(zmq.Context.instance(), ep)
    try:
        m = u.chat_request(rid, prompt, N)
        if system is not None:
            m["messages"].insert(0, {"role": "system", "content": system})
        c.send(m)
        toks = []
        while True:
            m = c.recv(60 * u.TIMEOUT_SCALE)
            if m["type"] != "token":
                return toks, m
            toks.append(m["token"])
    finally:
        c.close()


def check_batch(fam, what, res, refs):
    for i, ref in enumerate(refs):
        toks, done = res[i]
        u.check(done["type"] == "done", "%s %s: request %d ended with %r" % (fam, what, i, done))
        u.check(toks == ref, "%s %s: request %d differs from its solo reference\n  got  %s\n"
                "  want %s" % (fam, what, i, toks, ref))


def phase_threads(fam, model, refs):
    """Batching, the prefix cache and the HTTP API on one thread-mode server."""
    hport = u.free_port()
    with u.Server(["-m", model, "-t", "2", "--http", "127.0.0.1:%d" % hport]) as s:
        check_batch(fam, "batching", u.run_concurrent(s.endpoint, PROMPTS, N), refs)
        sys_refs = [u.reference(q, N, model, SYSTEM, threads=2) for q in QUESTIONS]
        cached = []
        for i, q in enumerate(QUESTIONS):
            toks, done = ask(s.endpoint, "p%d" % i, q, SYSTEM)
            u.check(done["type"] == "done" and toks == sys_refs[i],
                    "%s prefix cache: request %d gave %s (%r), reference %s"
                    % (fam, i, toks, done, sys_refs[i]))
            cached.append(done["usage"]["cached_tokens"])
        u.check(cached[1] > 0, "%s prefix cache: the second request reused nothing (usage "
                "cached_tokens %s)" % (fam, cached))
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % hport, api_key="none",
                               max_retries=0, timeout=60)
        r = client.chat.completions.create(
            model=os.path.basename(model), messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=N,
            temperature=0)
        text = r.choices[0].message.content
        u.check(text and r.usage.completion_tokens == len(refs[0]),
                "%s http: %r, usage %r (reference: %d tokens)" % (fam, text, r.usage,
                                                                 len(refs[0])))
    print("%-6s batching: 4/4 equal; prefix cache: cached_tokens %s, equal; http: %d tokens"
          % (fam, cached, r.usage.completion_tokens))


def phase_spec(fam, model, refs):
    with u.Server(["-m", model, "-t", "2", "--draft", "ngram"]) as s:
        res = u.run_concurrent(s.endpoint, PROMPTS, N)
    check_batch(fam, "--draft ngram", res, refs)
    proposed = sum(res[i][1]["usage"]["draft_proposed"] for i in res)
    accepted = sum(res[i][1]["usage"]["draft_accepted"] for i in res)
    print("%-6s --draft ngram: 4/4 equal; proposed %d, accepted %d" % (fam, proposed, accepted))


def phase_kv_int8(fam, model):
    with u.Server(["-m", model, "-t", "2", "--kv-type", "int8"]) as s:
        res = u.run_concurrent(s.endpoint, PROMPTS[:2], N)
    for i, (toks, done) in res.items():
        u.check(done["type"] == "done" and toks, "%s --kv-type int8: request %d: %d tokens, %r"
                % (fam, i, len(toks), done))
    print("%-6s --kv-type int8: 2/2 done (%s tokens)" % (fam, [len(res[i][0]) for i in res]))


def phase_kill(fam, model, refs):
    """Process mode: SIGKILL worker0 mid-stream; every request resumes and completes."""
    d = tempfile.mkdtemp(prefix="strata-fam-")
    port = u.free_port()
    s = u.Server(["--topology", u.process_topology(
        d, port, defaults="threads=1 max_batch=16 kv_blocks=512 model=" + model)])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    killed, pids = [], []
    try:
        with s:
            u.wait_for(lambda: u.health(s.endpoint)["ok"], 30 * u.TIMEOUT_SCALE, "health ok")
            pids = u.actor_pids(s.read_log())
            worker0 = u.actor_pids(s.read_log(), "worker0")[-1]

            def kill(running):
                os.kill(worker0, signal.SIGKILL)
                killed.append(running)

            res = u.run_concurrent(s.endpoint, PROMPTS, KILL_N, timeout=60 * u.TIMEOUT_SCALE,
                                   fault=kill)
            resumed = u.stats(s.endpoint).get("frontend.resumed", 0)
            pids += u.actor_pids(s.read_log())
    finally:
        for p in set(pids):  # what the supervisor left behind: a failure, stopped here
            if u.alive(p):
                os.kill(p, signal.SIGKILL)
                u.check(False, "%s: pid %d still ran after the server stopped" % (fam, p))
        shutil.rmtree(d, ignore_errors=True)
    check_batch(fam, "SIGKILL worker0", res, refs)
    u.check(killed and killed[0], "%s: no request was running at the kill" % fam)
    u.check(resumed >= 1, "%s: the kill resumed no request (frontend.resumed %d)"
            % (fam, resumed))
    print("%-6s SIGKILL worker0 with %d running: 4/4 complete and equal, resumed %d"
          % (fam, len(killed[0]), resumed))


def main():
    t0 = time.time()
    d = tempfile.mkdtemp(prefix="strata-families-")
    try:
        for fam, model in families(d):
            t = time.time()
            brief = u.TIMEOUT_SCALE > 1 and fam != "llama"
            refs = [u.reference(p, N if brief else KILL_N, model, threads=2) for p in PROMPTS]
            short = [r[:N] for r in refs]
            phase_threads(fam, model, short)
            if brief:
                # a sanitizer build runs the model 5-10x slower: the family's own code (its
                # forward pass, batching, the prefix cache, HTTP) is above; the phases below
                # exercise no family-specific code and run for llama
                print("%-6s ok, threads phase only under STRATA_TIMEOUT_SCALE=%d (%.1f s)"
                      % (fam, u.TIMEOUT_SCALE, time.time() - t))
                continue
            phase_spec(fam, model, short)
            phase_kv_int8(fam, model)
            phase_kill(fam, model, refs)
            print("%-6s ok (%.1f s)" % (fam, time.time() - t))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("ok (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
