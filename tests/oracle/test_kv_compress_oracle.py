"""test_kv_compress_oracle.py - in-sequence KV compression against the NumPy reference.

strata's window policy (StreamingLLM: 4 sinks + the most recent rows) compacts the KV rows
it keeps to the front of the sequence's blocks, writes later tokens after them, rotates
keys and queries at their true positions and attends the rows it holds.  The reference
(ref_model.py) keeps every position and instead hides, from each query, the positions
strata would have dropped by then: the same schedule (the prompt in --ubatch chunks, then
--step tokens at a time; after each forward pass from the end of the prompt on, when the
rows pass the budget B, keep the sinks and the last B - (block - 1) - sinks rows), simulated here from the policy's
definition in kvstore/kv_compress.h, not from strata's output.

Checks, on the default model with F32 KV:
  1. strata's logits under window:48 at the 63 scored positions are within the forward
     oracle's tolerance of the masked reference's (max |diff|/std 1.0, rms/std 0.5, argmax
     equal except at near-ties);
  2. the same logits are far from the full-cache reference at some position (more than the
     tolerance), so the check would fail if compression did nothing or dropped other rows;
  3. a budget above the context changes nothing: logits bitwise equal to the full cache's
     (h2o and snapkv collect attention weights on the way, which must not move a bit).

Env: STRATA_BIN, STRATA_MODEL (as the other oracle tests).
"""

import os
import sys
import tempfile

import oracle_util as U
from oracle_util import R, np

CTX, SCORE, UBATCH, STEP, BUDGET, SINK, BLOCK = 192, 64, 32, 16, 48, 4, 16
TOL = U.Tolerance("8-bit activations", max_rel=1.0, rms_rel=0.5, tie_abs=1.0)

TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "alice29_ch1-6.txt")


def strata_kvq(binp, model, ids, policy):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "lg.bin")
        U.run([binp, "kv-quality", "-m", model, "--ids", " ".join(map(str, ids)),
               "--ctx", str(CTX), "--score", str(SCORE), "--ubatch", str(UBATCH),
               "--step", str(STEP), "--kv-type", "f32", "--threads", "2",
               "--kv-compress", policy, "--logits-out", out])
        raw = open(out, "rb").read()
    n, v = (int(x) for x in np.frombuffer(raw[:8], dtype="<i4"))
    return np.frombuffer(raw[8:], dtype="<f4").reshape(n, v)


def window_schedule():
    """For each forward pass: (its positions, the positions each query sees)."""
    P = CTX - SCORE
    batches = [list(range(i, min(i + UBATCH, P))) for i in range(0, P, UBATCH)]
    batches += [list(range(i, min(i + STEP, CTX - 1))) for i in range(P, CTX - 1, STEP)]
    held, out = [], []
    for b in batches:
        out.append((b, [held + [q for q in b if q <= p] for p in b]))
        held = held + b
        n = b[-1] + 1
        budget = min(BUDGET, n)
        if len(held) > budget and n >= P:  # nothing is dropped before the prompt has run
            keep = max(budget - (BLOCK - 1), SINK + 1)
            held = held[:SINK] + held[len(held) - (keep - SINK):]
    return out


def masked_reference(ref, ids):
    """Reference logits (CTX - 1, n_vocab) of positions 0 .. CTX-2 under the schedule."""
    vis = {}

    def attention(m, q, cache, layer, pos0, n, window=0):
        group = m.n_heads // m.n_kv_heads
        ctx = pos0 + n
        k = cache.k[layer, :ctx].astype(np.float64)
        v = cache.v[layer, :ctx].astype(np.float64)
        hidden = np.ones((n, ctx), dtype=bool)
        for i in range(n):
            hidden[i, vis["rows"][i]] = False
        out = np.empty((n, m.n_heads, m.head_dim), dtype=np.float64)
        for h in range(m.n_heads):
            s = (q[:, h, :].astype(np.float64) @ k[:, h // group, :].T) / np.sqrt(m.query_scalar)
            s[hidden] = -np.inf
            out[:, h, :] = R.softmax(s) @ v[:, h // group, :]
        return out.reshape(n, -1).astype(np.float32)

    saved = R._attention
    R._attention = attention
    try:
        cache = R.Cache(ref, CTX)
        rows = []
        for b, seen in window_schedule():
            vis["rows"] = seen
            rows.append(R._step(ref, [ids[p] for p in b], cache))
    finally:
        R._attention = saved
    return np.concatenate(rows)


def drift(a, b):
    """Per position: max |a - b| / std(b), rms / std(b)."""
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    std = b.std(axis=1)
    return d.max(axis=1) / std, np.sqrt((d * d).mean(axis=1)) / std


def main():
    model = U.model_path()
    binp = U.strata_bin()
    text = open(TEXT, encoding="utf-8").read()[:4000]
    out = U.run([binp, "tokenize", "-m", model, "-p", text])
    ids = [int(x) for x in out.split()][:CTX]
    if len(ids) < CTX:
        U.fail_exit(f"the text gave {len(ids)} tokens, fewer than {CTX}")
    ref = R.load(model)
    P = CTX - SCORE
    got = strata_kvq(binp, model, ids, f"window:{BUDGET}")
    want = masked_reference(ref, ids)[P:CTX - 1]
    full = R.forward(ref, ids)[P:CTX - 1]
    ok = True
    mx, rms = drift(got, want)
    srt = np.sort(want, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    bad = [i for i in np.where(got.argmax(1) != want.argmax(1))[0] if gap[i] >= TOL.tie_abs]
    print(f"window:{BUDGET} vs the masked reference, {len(got)} positions: max|diff|/std "
          f"{mx.max():.3f} (limit {TOL.max_rel}), rms/std {rms.max():.3f} (limit {TOL.rms_rel}), "
          f"argmax differs beyond near-ties at {len(bad)}")
    if mx.max() > TOL.max_rel or rms.max() > TOL.rms_rel or bad:
        print("FAIL: strata's compressed cache does not compute what the window policy defines")
        ok = False
    fmx, frms = drift(got, full)
    print(f"window:{BUDGET} vs the full-cache reference: max|diff|/std {fmx.max():.3f}, "
          f"rms/std {frms.max():.3f}")
    if fmx.max() <= 2 * TOL.max_rel:
        print("FAIL: the compressed logits are as close to the full cache's as rounding: "
              "the check could not tell compression from none")
        ok = False
    base = strata_kvq(binp, model, ids, "window:4096")
    for pol in ("h2o:4096", "snapkv:4096"):
        same = np.array_equal(strata_kvq(binp, model, ids, pol), base)
        print(f"{pol} (no row dropped) equals the full cache bit for bit: {same}")
        ok = ok and same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
