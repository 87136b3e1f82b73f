"""test_gemma_greedy.py - Gemma 3 270M greedy text against llama.cpp's: `strata generate
--greedy` and llama-server's /completion (temperature 0, top-k 1) continue the same plain
prompts for 32 tokens from the same ids (BOS included: both are handed the ids that
`strata tokenize --bos` gives, which must equal llama.cpp's own /tokenize with its special
tokens), F16 KV on both sides, 2 threads.

Measured: the three short prompts agree on all 32 tokens; the long one (738 tokens) on 20,
then parts where llama.cpp's top-2 gap is 0.028 (AMD Zen 2), or on 8, gap 0.245 (AMD Zen 4).

Pass: the continuations are equal, or they agree for at least MIN_EQUAL tokens and part at a
near tie, where llama.cpp's own top-2 log-probabilities (n_probs) are less than TIE apart and
strata's token is llama.cpp's second choice.  Where the tie falls depends on the CPU: on an AMD
Zen 4 (both engines' AVX-512 kernels) the long prompt parts at token 8 (gap 0.245), on a Zen 2
(AVX2) at token 20.
Two engines that round differently (8-bit activations in both, but llama.cpp rounds Q and
the attention output through f16 and looks GELU up in an f16 table) move log-probabilities by
~0.1-0.3 at some steps (mean KL 0.006, test_llamacpp_kl.py), so free text parts at near ties;
a wrong stage (a missing norm, the wrong RoPE base or scale) parts at once, with a wide gap.

Needs ~/.cache/strata/models/gemma-3-270m-q4_k_m.gguf (scripts/fetch-model gemma3) and the
llama.cpp peer's llama-server (scripts/peer-bin): without either the test skips (77); under
CI=true a missing one fails.  Env: STRATA_BIN (set by CTest), STRATA_MODEL_DIR, STRATA_PEER_BIN.
Exit 0 pass, 1 fail, 77 skip.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

N_GEN, MIN_EQUAL, TIE = 32, 4, 0.3
# Plain prompts whose continuations keep clear of near ties (measured: all 32 tokens equal).
# "The capital of France is" parts at step 12, where llama.cpp's top-2 gap is 0.21 (strata's
# 0.03, the other way); "Once upon a time, there was a little girl who" had a 0.05 gap at
# step 14 against the NumPy reference.
PROMPTS = [
    "def fibonacci(n):",
    "The first ten prime numbers are",
    "1, 2, 3, 4, 5, 6, 7, 8,",
]
# And one prompt longer than the 512-position window (the opening of tests/data/
# alice29_ch1-6.txt, about 700 tokens): every generated token is decoded by the sliding-window
# layers over the last 512 positions of a paged KV, after a prefill that slid already.
LONG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "alice29_ch1-6.txt")
LONG_CHARS = 3000


def gemma_path():
    d = os.environ.get("STRATA_MODEL_DIR") or os.path.join(
        os.environ.get("HOME", "/root"), ".cache", "strata", "models")
    p = os.path.join(d, "gemma-3-270m-q4_k_m.gguf")
    if not os.path.isfile(p):
        testenv.skip(f"Gemma 3 270M not found: {p} (scripts/fetch-model gemma3)")
    return p


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        testenv.fail(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr.strip()[-800:]}")
    return p.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def start_server(server, model):
    """llama-server on a free port; (process, port) once /health answers."""
    port = free_port()
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gemma_greedy_{port}.log"), "w")
    proc = subprocess.Popen([server, "-m", model, "-t", "2", "-c", "1024", "-np", "1", "--port",
                             str(port), "--host", "127.0.0.1", "-ctk", "f16", "-ctv", "f16"],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if proc.poll() is not None:
            testenv.skip(f"llama-server exited ({proc.returncode}) before serving: the peer "
                         f"cannot run here (log: {log.name})", ci_fails=False)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    testenv.fail("llama-server did not answer /health within 60 s")


def main():
    t0 = time.time()
    binp = testenv.strata_bin()
    model = gemma_path()
    server = testenv.peer_tool("llama-server")
    proc, port = start_server(server, model)
    ok = True
    try:
        with open(LONG, encoding="utf-8") as f:
            long_prompt = f.read()[:LONG_CHARS]
        for prompt in PROMPTS + [long_prompt]:
            ids = [int(x) for x in run([binp, "tokenize", "-m", model, "--bos", "-p",
                                        prompt]).split()]
            theirs = post(port, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
            if ids != theirs:
                testenv.fail(f"{prompt!r}: strata tokenize --bos {ids}, llama.cpp {theirs}")
            r = post(port, "/completion", {"prompt": ids, "n_predict": N_GEN, "temperature": 0,
                                           "top_k": 1, "cache_prompt": False, "n_probs": 2,
                                           "post_sampling_probs": False})
            ll = [s["id"] for s in r["completion_probabilities"]]
            gaps = [s["top_logprobs"][0]["logprob"] - s["top_logprobs"][1]["logprob"]
                    if len(s["top_logprobs"]) > 1 else float("inf")
                    for s in r["completion_probabilities"]]
            top2 = [[t["id"] for t in s["top_logprobs"][:2]] for s in r["completion_probabilities"]]
            out = run([binp, "generate", "-m", model, "--ids", " ".join(map(str, ids)), "-n",
                       str(N_GEN), "--greedy", "--print-ids", "--threads", "2", "--kv-type",
                       "f16"])
            st = [int(x) for x in out.split()]
            same = 0
            while same < min(len(st), len(ll)) and st[same] == ll[same]:
                same += 1
            text = r["content"].replace("\n", "\\n")[:70]
            if prompt == long_prompt:
                prompt = f"<{len(ids)} tokens of {os.path.basename(LONG)}>"
            if st == ll:
                print(f"  {prompt!r}: {len(st)} tokens equal: {text!r}")
                continue
            gap = gaps[same] if same < len(gaps) else float("inf")
            second = same < len(st) and same < len(top2) and st[same] in top2[same]
            good = same >= MIN_EQUAL and gap < TIE and second
            print(f"  {prompt!r}: equal for {same} of {len(ll)} tokens, then strata "
                  f"{st[same] if same < len(st) else 'stops'} vs llama.cpp "
                  f"{ll[same] if same < len(ll) else 'stops'}, llama.cpp's top-2 gap there "
                  f"{gap:.3f} (a near tie below {TIE}; at least {MIN_EQUAL} equal needed; "
                  f"strata's token {'is' if second else 'is not'} llama.cpp's second choice)"
                  f"{'' if good else '  FAIL'}")
            ok = ok and good
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"{'PASS' if ok else 'FAIL'}: Gemma 3 greedy text vs llama.cpp, {time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
