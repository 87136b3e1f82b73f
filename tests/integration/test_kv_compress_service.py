#!/usr/bin/env python3
"""In-sequence KV compression through the service (docs/KV_COMPRESSION.md): a request's
kv_compress (native protocol and HTTP extension field) and the worker's default.

Oracle: `strata kv-quality --generate` runs the same prompt under the same policy one
token per step through the library alone (its window policy is checked against the NumPy
reference by test_kv_compress_oracle); the service, with its scheduler, chunked prefill,
prefix cache and speculative decoding, must produce the same greedy tokens for every
policy.  Checked:
  1. no policy, and policies whose budget exceeds the context, give the uncompressed
     answer; window / h2o / snapkv at small budgets give kv-quality's answer for them;
  2. the trace names the compaction and the KV rows kept; stats count the compactions and
     the KV bytes compressed requests hold;
  3. compressed blocks are never published: the uncompressed prompt run after them still
     gets the uncompressed answer (with its prompt's blocks from the prefix cache);
  4. the worker's kv_compress option is the default of requests that name none;
  5. with speculative decoding (ngram drafts) every policy's answer is unchanged;
  6. process mode, both workers SIGKILLed after 12 tokens: the frontend resumes the
     request, its new worker recomputes the carried tokens one per step, and the answer is
     still kv-quality's (window and h2o);
  7. bad specs are refused: native error bad_request, HTTP 400 naming kv_compress; a bad
     worker option and compression on a sliding-window model (Gemma 3) are refused too.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as U  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
N_GEN = 40
POLICIES = ["window:96", "h2o:96", "snapkv:96", "window:25%,sink=8", "h2o:20%,recent=16"]


def prompt_text():
    text = open(os.path.join(ROOT, "tests", "data", "alice29_ch1-6.txt"), encoding="utf-8").read()
    return text[2000:4400] + "\n\nIn one sentence, what happened to Alice?"


def library(prompt_file, policies):
    """{policy: tokens} of kv-quality --generate (one token per step), "none" included."""
    out = subprocess.run([U.BIN, "kv-quality", "-f", prompt_file, "--generate", str(N_GEN),
                          "--kv-compress", ";".join(policies), "-t", "1"],
                         capture_output=True, text=True, timeout=300 * U.TIMEOUT_SCALE)
    if out.returncode != 0:
        raise RuntimeError("strata kv-quality failed: " + out.stderr)
    rows = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    return {r["policy"]: r["tokens"] for r in rows}, {r["policy"]: r for r in rows}


def generate(endpoint, rid, prompt, policy=None, trace=False, kill_after=0, kill=None):
    """Token ids and the final event of one greedy request (kill: called once after
    kill_after tokens)."""
    c = U.Client(U.zmq.Context.instance(), endpoint)
    try:
        m = {"type": "generate", "v": 1, "id": rid, "prompt": prompt, "max_tokens": N_GEN,
             "temperature": 0, "trace": trace}
        if policy is not None:
            m["kv_compress"] = policy
        c.send(m)
        toks, steps = [], []
        while True:
            e = c.recv(timeout=300 * U.TIMEOUT_SCALE)
            if e["type"] == "token":
                toks.append(e["token"])
                if kill and len(toks) == kill_after:
                    kill()
            elif e["type"] == "trace":
                steps = e["steps"]
            elif e["type"] in ("done", "error"):
                e["trace"] = steps
                return toks, e
    finally:
        c.close()


def http_post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    prompt = prompt_text()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        pfile = f.name
    try:
        want, rows = library(pfile, POLICIES)
    finally:
        os.unlink(pfile)
    for p in POLICIES:
        U.check(rows[p]["rows"] < rows[p]["positions"],
                "%s dropped no rows in kv-quality (%s): the prompt is too short for the check"
                % (p, rows[p]))
    http_port = U.free_port()
    args = ["--no-tiers", "--threads", "2", "--max-ctx", "2048", "--kv-blocks", "512",
            "--http", "127.0.0.1:%d" % http_port]
    with U.Server(args) as s:
        base, done = generate(s.endpoint, "base", prompt)
        U.check(done["type"] == "done", "no-policy request failed: %s" % done)
        U.check(base == want["none"],
                "the service's uncompressed answer differs from kv-quality's: the prompts were "
                "not tokenized alike\n  service %s\n  library %s" % (base[:12], want["none"][:12]))
        for p in ["none", "h2o:100000", "window:4096", "snapkv:4096"]:
            got, _ = generate(s.endpoint, "big-" + p, prompt, p)
            U.check(got == base, "%s changed the answer of a prompt it cannot compress" % p)
        for p in POLICIES:
            got, done = generate(s.endpoint, "p-" + p, prompt, p, trace=True)
            U.check(done["type"] == "done", "%s: %s" % (p, done))
            U.check(got == want[p], "%s: the service's answer differs from kv-quality's\n"
                    "  service %s\n  library %s" % (p, got[:16], want[p][:16]))
            steps = [st for st in done.get("trace", []) if st.get("what") == "kv_compress"]
            U.check(steps, "%s: no kv_compress step in the trace" % p)
            U.check("KV rows kept" in steps[0]["why"] and "KiB of KV held" in steps[0]["why"],
                    "%s: the trace step does not say what is held: %s" % (p, steps[0]))
        print("every policy's answer equals kv-quality's; traces name the rows kept")
        # compressed requests published nothing compacted: the plain prompt still answers alike
        again, _ = generate(s.endpoint, "again", prompt)
        U.check(again == base, "after compressed runs the uncompressed answer changed")
        st = U.stats(s.endpoint)
        comp = sum(v for k, v in st.items() if k.endswith("kv_compress.compactions"))
        U.check(comp >= len(POLICIES), "stats count %d compactions" % comp)
        U.check(any(k.endswith("kv_compress.bytes_held") for k in st),
                "stats have no kv_compress.bytes_held")
        hits = sum(v for k, v in st.items() if k.endswith("kv.t0.hit_tokens"))
        U.check(hits > 0, "the prefix cache served nothing (expected the repeated prompt)")
        # bad specs
        _, e = generate(s.endpoint, "bad", prompt, "lru:50%")
        U.check(e["type"] == "error" and e.get("code") == "bad_request" and
                "kv_compress" in e.get("message", ""), "a bad spec: %s" % e)
        code, body = http_post(http_port, {"prompt": "Hello", "max_tokens": 4,
                                           "kv_compress": "h2o:150%"})
        U.check(code == 400 and body["error"].get("param") == "kv_compress",
                "HTTP bad kv_compress: %s %s" % (code, body))
        code, body = http_post(http_port, {"prompt": "Hello", "max_tokens": 4, "kv_compress": 5})
        U.check(code == 400, "HTTP kv_compress 5: %s %s" % (code, body))
        code, body = http_post(http_port, {"prompt": prompt, "max_tokens": N_GEN, "temperature": 0,
                                           "kv_compress": "window:96"})
        U.check(code == 200, "HTTP window:96: %s %s" % (code, body))
        print("bad specs refused (native bad_request, HTTP 400); HTTP request served")
    # the worker's default, and speculation under every policy
    with U.Server(args[:-2] + ["--kv-compress", "h2o:96", "--draft", "ngram"]) as s:
        got, _ = generate(s.endpoint, "default", prompt)
        U.check(got == want["h2o:96"], "the worker's default h2o:96 was not applied")
        got, _ = generate(s.endpoint, "none", prompt, "none")
        U.check(got == base, "kv_compress none did not override the worker's default")
        for p in POLICIES:
            got, _ = generate(s.endpoint, "spec-" + p, prompt, p)
            U.check(got == want[p], "%s with speculative decoding: the answer changed" % p)
        st = U.stats(s.endpoint)
        U.check(sum(v for k, v in st.items() if k.endswith("spec.accepted")) > 0,
                "no draft was accepted: speculation was not exercised")
        print("the worker's default applies; speculation leaves every policy's answer unchanged")
    # process mode: both workers SIGKILLed mid-stream; the frontend resumes the request,
    # whose worker recomputes the carried tokens one per step, compacting as the first time
    with tempfile.TemporaryDirectory() as d:
        port = U.free_port()
        topo = U.process_topology(d, port, defaults="threads=1 max_batch=4 kv_blocks=512 "
                                  "kv_compress=window:96")
        s = U.Server(["--topology", topo])
        s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
        with s:
            U.wait_for(lambda: U.health(s.endpoint)["ok"], 30 * U.TIMEOUT_SCALE, "health ok")
            for p in ["window:96", "h2o:96"]:
                got, done = generate(s.endpoint, "kill-" + p, prompt, p, kill_after=12,
                                     kill=lambda: [os.kill(pid, signal.SIGKILL) for pid in
                                                   (U.actor_pids(s.read_log(), w)[-1]
                                                    for w in ("worker0", "worker1"))])
                U.check(done["type"] == "done", "%s after the kill: %s" % (p, done))
                U.check(got == want[p], "%s resumed after a kill: the answer changed\n"
                        "  got  %s\n  want %s" % (p, got, want[p]))
            U.check(U.stats(s.endpoint).get("frontend.resumed", 0) >= 2,
                    "the kills resumed no request")
        print("SIGKILL of the workers mid-stream: the resumed answers are unchanged")
    # refusals at start
    bad = subprocess.run([U.BIN, "serve", "--no-tiers", "--kv-compress", "h2o:0%",
                          "--endpoint", "tcp://127.0.0.1:%d" % U.free_port()],
                         capture_output=True, text=True, timeout=60)
    U.check(bad.returncode != 0 and "kv-compress h2o:0%" in bad.stderr + bad.stdout,
            "a bad --kv-compress was not refused: %s" % bad.stderr[-300:])
    gemma = os.path.join(os.path.dirname(U.MODEL), "gemma-3-270m-q4_k_m.gguf")
    if os.path.exists(gemma):
        bad = subprocess.run([U.BIN, "serve", "--no-tiers", "-m", gemma, "--kv-compress",
                              "window:64", "--endpoint", "tcp://127.0.0.1:%d" % U.free_port()],
                             capture_output=True, text=True, timeout=120)
        U.check(bad.returncode != 0 and "sliding-window" in bad.stderr + bad.stdout,
                "kv_compress on Gemma 3 was not refused: %s" % bad.stderr[-300:])
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
