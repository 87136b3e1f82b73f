"""oracle_util.py - what the oracle tests share: locating the binary and the model, running
`strata tokenize / logits / generate`, and comparing strata with the NumPy reference.

The comparison, per prompt:
  1. logits at every prompt position: for each position, the max and RMS of |strata - ref|
     relative to the standard deviation of the reference logits at that position must stay
     under the tolerance; the argmax must agree at every position, except where the
     reference's top-2 gap is below tie_abs (a near-tie, reported as such);
  2. the 64-token greedy continuation must be identical.  On a mismatch we print the first
     differing step and the reference's top-2 gap there, so a genuine near-tie is visible.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

testenv.require("numpy", "gguf")  # a skip (a failure under CI=true) without them
import ref_llama as R  # noqa: E402  sets the BLAS thread count before numpy loads
import numpy as np  # noqa: E402

DEFAULT_MODEL = os.path.join(
    os.environ.get("HOME", "/root"), ".cache/strata/models", testenv.DEFAULT_MODEL_FILE
)
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def chat(user):
    return SYSTEM + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"


# The prompts, with the ids the `tokenizers` library gives for them (a BPE built from the
# default model's vocab and merges): a cross-check of `strata tokenize` on the default model.
# They were picked for robust greedy continuations: the reference's top-2 logit gap stays
# above the expected strata-vs-reference drift over all 64 steps (min gaps: count 1.9,
# chat-count 0.69, chat-words 0.77, tens 0.86).  Free-form answers are not used: 8-bit
# activations (as in llama.cpp) move logits by up to ~0.8 std near the system prompt's
# special tokens, and open-ended text has top-2 gaps of 0.01-0.1 within 64 tokens, so
# any two correct engines with different rounding part ways there.  (An earlier
# "first ten primes" prompt had a 0.38 gap at step 44 and flipped when the attention
# kernel changed its summation order.)
PROMPTS = [
    (
        "count",
        "1, 2, 3, 4, 5, 6, 7, 8,",
        "33 28 216 34 28 216 35 28 216 36 28 216 37 28 216 38 28 216 39 28 216 40 28",
    ),
    (
        "chat-count",
        chat("Count from 1 to 40."),
        "1 9690 198 2683 359 253 5356 5646 11173 3365 3511 308 34519 28 7018 411 407 19712 8182 2 "
        "198 1 4093 198 9825 429 216 33 288 216 36 32 30 2 198 1 520 9531 198",
    ),
    (
        "chat-words",
        chat("Count from 1 to 30 in words."),
        "1 9690 198 2683 359 253 5356 5646 11173 3365 3511 308 34519 28 7018 411 407 19712 8182 2 "
        "198 1 4093 198 9825 429 216 33 288 216 35 32 281 1924 30 2 198 1 520 9531 198",
    ),
    (
        "tens",
        "10, 20, 30, 40,",
        "33 32 28 216 34 32 28 216 35 32 28 216 36 32 28",
    ),
]


fail_exit = testenv.fail
model_path = testenv.model_path  # skips (fails under CI=true) without the model
strata_bin = testenv.strata_bin


def run(cmd, timeout=300):
    """Run cmd; return stdout text, or exit with a failure naming the command."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail_exit(f"timed out after {timeout}s: {' '.join(cmd)}")
    if p.returncode != 0:
        fail_exit(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr.strip()}")
    return p.stdout


def tokenize(binp, model, text, known):
    """Ids of text from `strata tokenize`; exits with a failure if that fails.  known: the
    `tokenizers` ids, compared (a note) when model is the default model."""
    fb = [int(x) for x in known.split()]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
        name = f.name
    try:
        p = subprocess.run([binp, "tokenize", "-m", model, "-f", name], capture_output=True,
                           text=True, timeout=60)
    finally:
        os.unlink(name)
    if p.returncode != 0:
        fail_exit(f"strata tokenize failed (exit {p.returncode}): {p.stderr.strip()[:500]}")
    ids = [int(x) for x in p.stdout.split()]
    if ids != fb and os.path.realpath(model) == os.path.realpath(DEFAULT_MODEL):
        print(f"  note: strata tokenize differs from the tokenizers ids ({len(ids)} vs {len(fb)} ids)")
    return ids


def strata_logits(binp, model, ids, threads=2, kv_type="f32"):
    """(n_tokens, n_vocab) float32 from `strata logits`.  KV in float32 as the reference
    keeps it (strata's default is f16; what F16/int8 KV cost is test_kv_quant_ppl's)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "logits.bin")
        run([binp, "logits", "-m", model, "--ids", " ".join(map(str, ids)), "-o", out,
             "--threads", str(threads), "--kv-type", kv_type])
        raw = open(out, "rb").read()
    hdr = np.frombuffer(raw[:8], dtype="<i4")
    n, v = int(hdr[0]), int(hdr[1])
    body = np.frombuffer(raw[8:], dtype="<f4")
    if body.size != n * v:
        fail_exit(f"logits file: header says {n}x{v}, holds {body.size} floats")
    return body.reshape(n, v)


def strata_greedy(binp, model, ids, n, threads=2, kv_type="f32"):
    out = run([binp, "generate", "-m", model, "--ids", " ".join(map(str, ids)), "-n", str(n),
               "--greedy", "--print-ids", "--threads", str(threads), "--kv-type", kv_type])
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    if not lines:
        fail_exit("strata generate --print-ids printed nothing")
    return [int(x) for x in lines[-1].split()]


class Tolerance:
    """Allowed drift of strata's logits from the reference, in units of the reference's
    per-position logit standard deviation (std), plus the near-tie threshold in logits."""

    def __init__(self, name, max_rel, rms_rel, tie_abs):
        self.name = name
        self.max_rel = max_rel  # max |diff| / std, at every position
        self.rms_rel = rms_rel  # sqrt(mean diff^2) / std, at every position
        self.tie_abs = tie_abs  # argmax may differ only where the ref's top-2 gap is below this


# Threads for `strata logits` (2: exercises the split of rows over workers) and for
# `strata generate` (1: on two busy shared cores, per-token thread hand-offs made 64 greedy
# tokens take 16 s instead of 3 s).
LOGITS_THREADS = int(os.environ.get("STRATA_ORACLE_THREADS", "2"))
GEN_THREADS = int(os.environ.get("STRATA_ORACLE_GEN_THREADS", "1"))


def compare_prompt(ref, binp, model, name, ids, tol, n_gen=64, threads=LOGITS_THREADS):
    """Compare logits and greedy output for one prompt; print the numbers; return ok."""
    ok = True
    L_ref = R.forward(ref, ids)
    L = strata_logits(binp, model, ids, threads)
    if L.shape != L_ref.shape:
        print(f"  [{name}] FAIL logits shape {L.shape}, reference {L_ref.shape}")
        return False
    d = np.abs(L.astype(np.float64) - L_ref.astype(np.float64))
    std = L_ref.std(axis=1)
    rel_max = d.max(axis=1) / std
    rel_rms = np.sqrt((d * d).mean(axis=1)) / std
    srt = np.sort(L_ref, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    am, am_ref = L.argmax(axis=1), L_ref.argmax(axis=1)
    mism = np.where(am != am_ref)[0]
    ties = [int(i) for i in mism if gap[i] < tol.tie_abs]
    bad_am = [int(i) for i in mism if gap[i] >= tol.tie_abs]
    print(f"  [{name}] {len(ids)} positions: max|diff| {d.max():.4g} (std {std.mean():.2f}), "
          f"max|diff|/std {rel_max.max():.4g} (limit {tol.max_rel}), "
          f"rms/std {rel_rms.max():.4g} (limit {tol.rms_rel}), "
          f"argmax agrees at {len(ids) - len(mism)}/{len(ids)}")
    if ties:
        print(f"  [{name}] near-ties (ref top-2 gap < {tol.tie_abs}) where argmax differs: "
              + ", ".join(f"pos {i} gap {gap[i]:.3f}" for i in ties))
    if rel_max.max() > tol.max_rel or rel_rms.max() > tol.rms_rel:
        worst = int(np.argmax(rel_max))
        print(f"  [{name}] FAIL logits drift beyond tolerance (worst at position {worst})")
        ok = False
    if bad_am:
        print(f"  [{name}] FAIL argmax differs at positions {bad_am} "
              f"(ref top-2 gaps {[round(float(gap[i]), 3) for i in bad_am]})")
        ok = False
    if n_gen:
        g_ref, gl = R.greedy(ref, ids, n_gen, return_logits=True)
        g = strata_greedy(binp, model, ids, n_gen, GEN_THREADS)
        gs = np.sort(gl, axis=1)
        ggap = gs[:, -1] - gs[:, -2]
        if g == g_ref:
            print(f"  [{name}] greedy {n_gen} tokens identical (ref min top-2 gap "
                  f"{ggap.min():.3f} at step {int(ggap.argmin())})")
        else:
            k = next((i for i in range(min(len(g), len(g_ref))) if g[i] != g_ref[i]),
                     min(len(g), len(g_ref)))
            why = (f"ref top-2 gap there {ggap[k]:.3f}: a near-tie within tolerance, could flip"
                   if k < len(ggap) and ggap[k] < tol.tie_abs else
                   f"ref top-2 gap there {ggap[k]:.3f}: not a near-tie" if k < len(ggap) else
                   "length differs")
            print(f"  [{name}] FAIL greedy differs at step {k} (strata {g[k:k + 5]}, ref "
                  f"{g_ref[k:k + 5]}; got {len(g)} ids); {why}")
            ok = False
    return ok


def run_oracle(ref, binp, model, tol, prompts=PROMPTS, n_gen=64, threads=LOGITS_THREADS):
    """All prompts against one model; returns ok."""
    ok = True
    for name, text, known in prompts:
        ids = tokenize(binp, model, text, known)
        ok = compare_prompt(ref, binp, model, name, ids, tol, n_gen, threads) and ok
    return ok


# ---- llama.cpp's KL-divergence base file (model/model_klbase.h has the layout) -----------


def klbase_row(logits):
    """One row of the file, as llama-perplexity --kl-divergence-base writes it from a logit
    row: float32 scale and min log-prob (4 uint16), then the n_vocab log-probabilities as
    uint16 steps of scale above the minimum (logits more than 16 below the maximum clip to
    0), padded to an even count."""
    lg = np.asarray(logits, dtype=np.float32)
    mx = np.float32(lg.max())
    mn = np.float32(max(lg.min(), mx - 16))
    lse = np.float32(np.log(np.exp((lg - mx).astype(np.float64)).sum()))
    min_lp = np.float32(mn - mx - lse)
    scale = np.float32((mx - mn) / np.float32(65535))
    nv = 2 * ((lg.size + 1) // 2)
    u = np.zeros(nv, dtype="<u2")
    if scale > 0:
        q = np.rint((lg - mn) * np.float32(1 / scale))
        u[: lg.size] = np.where(lg > mn, np.clip(q, 0, 65535), 0).astype("<u2")
    head = np.array([scale, min_lp], dtype="<f4").view("<u2")
    return np.concatenate([head, u])


def write_klbase(path, n_ctx, n_vocab, tokens, rows):
    """Write a --kl-divergence-base file: tokens (n_chunk * n_ctx ids) and rows, the logits
    of each chunk's scored positions n_ctx/2 .. n_ctx-2 in order (n_chunk * (n_ctx-1-n_ctx/2)
    rows of n_vocab)."""
    n_chunk = len(tokens) // n_ctx
    assert len(tokens) == n_chunk * n_ctx and len(rows) == n_chunk * (n_ctx - 1 - n_ctx // 2)
    with open(path, "wb") as f:
        f.write(b"_logits_")
        f.write(np.array([n_ctx], dtype="<u4").tobytes())
        f.write(np.array([n_vocab, n_chunk], dtype="<i4").tobytes())
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        for r in rows:
            f.write(klbase_row(r).tobytes())


def parse_kl_lines(out):
    """{'ppl', 'base_ppl', 'kl_mean', 'kl_median', 'kl_p99', 'kl_max', 'top1'} from the
    output of strata perplexity --kl-base / --kl-ref (top1 in percent)."""
    import re

    def num(pat):
        m = re.search(pat, out, re.M)
        if not m:
            fail_exit(f"strata perplexity output lacks /{pat}/:\n{out}")
        return float(m.group(1))

    return {
        "ppl": num(r"^perplexity ([0-9.]+) over"),
        "base_ppl": num(r"^kl-(?:base|ref) .*: perplexity ([0-9.]+)"),
        "kl_mean": num(r"^kl-divergence mean ([0-9.]+)"),
        "kl_median": num(r"median ([0-9.]+)"),
        "kl_p99": num(r"p99 ([0-9.]+)"),
        "kl_max": num(r"max ([0-9.]+)"),
        "top1": num(r"^same top token ([0-9.]+)"),
    }


def model_add_bos(path):
    """Whether the GGUF asks for a BOS token in front (tokenizer.ggml.add_bos_token), and the
    BOS id (None without one): what a chunk's first token becomes in perplexity runs."""
    from gguf import GGUFReader

    r = GGUFReader(path)
    f = r.fields.get("tokenizer.ggml.add_bos_token")
    b = r.fields.get("tokenizer.ggml.bos_token_id")
    bos = int(b.contents()) if b is not None else None
    return (bool(f.contents()) if f is not None else False) and bos is not None, bos


def quantized_oracle(title, tolerances, prompt_names=("count", "chat-count"), n_gen=32,
                     prompts_for=None):
    """`strata quantize` the default model to each type of tolerances {type: Tolerance}, then
    the forward oracle (run_oracle: the reference reads the new file through gguf.dequantize)
    on the prompts named (prompts_for {type: names} overrides them per type), with n_gen
    greedy tokens.  STRATA_ORACLE_TYPES (comma-separated) narrows the types.  Returns the
    exit code (0 pass, 1 fail)."""
    import time

    t0 = time.time()
    model = model_path()
    binp = strata_bin()
    only = os.environ.get("STRATA_ORACLE_TYPES")
    if only:
        tolerances = {t: v for t, v in tolerances.items() if t in only.split(",")}
    ok = True
    with tempfile.TemporaryDirectory(prefix="strata_qtypes_") as d:
        for qtype, tol in tolerances.items():
            names = (prompts_for or {}).get(qtype, prompt_names)
            prompts = [p for p in PROMPTS if p[0] in names]
            out = os.path.join(d, f"model-{qtype}.gguf")
            t1 = time.time()
            run([binp, "quantize", "--threads", "2", "--quiet", model, out, qtype])
            ref = R.load(out)
            kinds = sorted(set(ref.types.values()))
            print(f"{qtype}: quantized in {time.time() - t1:.1f}s, tensor types {kinds}, "
                  f"limits max/std {tol.max_rel} rms/std {tol.rms_rel} tie {tol.tie_abs}, "
                  f"prompts {', '.join(names)}")
            ok = run_oracle(ref, binp, out, tol, prompts, n_gen) and ok
            del ref
            os.unlink(out)
    print(f"{'PASS' if ok else 'FAIL'}: {title} ({', '.join(tolerances)}), "
          f"{time.time() - t0:.1f}s")
    return 0 if ok else 1
