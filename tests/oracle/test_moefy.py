"""test_moefy.py - `strata moefy` on the default model (as F16): the written GGUF's keys and
tensors read with the `gguf` package, the expert slabs a permutation of the dense FFN's
neurons, and with K = E (unit gating) the logits of the dense model.

The oracle for K = E is the dense model itself: unit gating with every expert chosen sums
the same neuron terms as the dense FFN, in another order.  F16 weights keep the columns of
ffn_down exact (a quantized ffn_down is requantized, since the permuted columns mix its
blocks), and F16 matrices multiply float activations, so only summation order differs.
Measured: max |diff| 4e-5, max |diff| / std of the position's logits 1e-5; limit 1e-3
(100x headroom, far below what a wrong slab or a dropped expert does: O(1)), and the argmax
must agree at every position.

Also: the one-line refusals (E not dividing d_ff, K > E, an MoE input, a missing file).

Env: STRATA_BIN (set by CTest), STRATA_SRC (the calibration text), STRATA_MODEL
(optional).  Exit 0 on success, 1 on failure, 77 when the model or numpy/gguf is missing.
"""

import os
import subprocess
import sys
import tempfile
import time

import oracle_util as U
import numpy as np
import gguf

E = 8
MAX_REL = 1e-3
PROMPT = U.chat("Count from 1 to 40.")


def f16_model(binp, d):
    """The default model as F16: the sibling file when there, else `strata quantize`."""
    model = U.model_path()
    sib = os.path.join(os.path.dirname(model), "SmolLM2-135M-Instruct.F16.gguf")
    if os.path.isfile(sib):
        return sib
    out = os.path.join(d, "dense-f16.gguf")
    U.run([binp, "quantize", "--threads", "2", "--quiet", model, out, "f16"])
    return out


def tensors(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


def field(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return int(v[0]) if np.issubdtype(v.dtype, np.integer) else float(v[0])


def check_file(dense, moe, k):
    """Keys, tensor shapes and types, and the slabs of layer 0 against the dense tensors."""
    ok = True
    rd, td = tensors(dense)
    rm, tm = tensors(moe)
    n_layer = field(rd, "llama.block_count")
    d_ff = field(rd, "llama.feed_forward_length")
    d_model = field(rd, "llama.embedding_length")
    m = d_ff // E
    want = {"llama.expert_count": E, "llama.expert_used_count": k,
            "llama.feed_forward_length": m, "strata.expert_gating": "unit",
            "llama.block_count": n_layer, "general.architecture": "llama"}
    for key, v in want.items():
        got = field(rm, key)
        if got != v:
            print(f"  FAIL key {key}: {got!r}, expected {v!r}")
            ok = False
    names_in = set(rd.fields) - {"llama.feed_forward_length"}
    missing = [n for n in names_in if n not in rm.fields and not n.startswith("GGUF.")]
    if missing:
        print(f"  FAIL keys not copied: {missing[:5]}")
        ok = False
    for l in range(n_layer):
        for dense_name in ("ffn_gate", "ffn_up", "ffn_down"):
            if f"blk.{l}.{dense_name}.weight" in tm:
                print(f"  FAIL blk.{l}.{dense_name}.weight still present")
                ok = False
        shapes = {  # gguf reports shape as ne[0], ne[1], ...
            "ffn_gate_inp": ([d_model, E], "F32"),
            "ffn_gate_exps": ([d_model, m, E], "F16"),
            "ffn_up_exps": ([d_model, m, E], "F16"),
            "ffn_down_exps": ([m, d_model, E], "F16"),
        }
        for suffix, (shape, ty) in shapes.items():
            t = tm.get(f"blk.{l}.{suffix}.weight")
            if t is None:
                print(f"  FAIL blk.{l}.{suffix}.weight missing")
                ok = False
                continue
            if [int(x) for x in t.shape] != shape or t.tensor_type.name != ty:
                print(f"  FAIL blk.{l}.{suffix}.weight: {list(t.shape)} {t.tensor_type.name}, "
                      f"expected {shape} {ty}")
                ok = False
    others = [n for n in td if ".ffn_gate." not in n and ".ffn_up." not in n
              and ".ffn_down." not in n]
    for n in others:
        if n not in tm or not np.array_equal(np.asarray(tm[n].data), np.asarray(td[n].data)):
            print(f"  FAIL {n} not copied as it is")
            ok = False
            break
    if len(tm) != len(td) + n_layer:
        print(f"  FAIL {len(tm)} tensors, expected {len(td) + n_layer}")
        ok = False
    # layer 0: gate rows of expert slabs = dense rows in some order; the same order for up
    # and for the columns of down; every neuron exactly once
    for l in (0, n_layer - 1):
        g = np.asarray(td[f"blk.{l}.ffn_gate.weight"].data).reshape(d_ff, d_model)
        u = np.asarray(td[f"blk.{l}.ffn_up.weight"].data).reshape(d_ff, d_model)
        dn = np.asarray(td[f"blk.{l}.ffn_down.weight"].data).reshape(d_model, d_ff)
        ge = np.asarray(tm[f"blk.{l}.ffn_gate_exps.weight"].data).reshape(E * m, d_model)
        ue = np.asarray(tm[f"blk.{l}.ffn_up_exps.weight"].data).reshape(E * m, d_model)
        de = np.asarray(tm[f"blk.{l}.ffn_down_exps.weight"].data).reshape(E, d_model, m)
        index = {g[i].tobytes() + u[i].tobytes(): i for i in range(d_ff)}
        perm = [index.get(ge[k].tobytes() + ue[k].tobytes(), -1) for k in range(E * m)]
        if sorted(perm) != list(range(d_ff)):
            print(f"  FAIL layer {l}: gate/up slab rows are not a permutation of the dense rows")
            ok = False
            continue
        perm = np.array(perm).reshape(E, m)
        if any(list(p) != sorted(p) for p in perm):
            print(f"  FAIL layer {l}: neurons not ascending within an expert")
            ok = False
        for e in range(E):
            if not np.array_equal(de[e], dn[:, perm[e]]):
                print(f"  FAIL layer {l} expert {e}: down slab is not the dense columns")
                ok = False
                break
    return ok


def check_logits(binp, dense, moe):
    ids = [int(x) for x in U.run([binp, "tokenize", "-m", dense, "-p", PROMPT]).split()]
    a = U.strata_logits(binp, dense, ids)
    b = U.strata_logits(binp, moe, ids)
    diff = np.abs(a.astype(np.float64) - b)
    rel = (diff / a.std(axis=1, keepdims=True)).max()
    same = bool((a.argmax(1) == b.argmax(1)).all())
    print(f"  K = E logits vs dense over {len(ids)} positions: max |diff| {diff.max():.2e}, "
          f"max |diff|/std {rel:.2e} (limit {MAX_REL}), argmax equal {same}")
    return rel <= MAX_REL and same


def refused(binp, args, needle):
    """`strata moefy args` must fail with one line on stderr that contains needle."""
    p = subprocess.run([binp, "moefy", "-q"] + args, capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    if p.returncode == 0 or len(lines) != 1 or needle not in lines[0]:
        print(f"  FAIL moefy {' '.join(args)}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        return False
    print(f"  refused: {lines[0]}")
    return True


def main():
    t0 = time.time()
    binp = U.strata_bin()
    src = os.environ.get("STRATA_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
    calib = os.path.join(src, "tests", "data", "alice29_ch1-6.txt")
    ok = True
    with tempfile.TemporaryDirectory(prefix="strata_moefy_") as d:
        dense = f16_model(binp, d)
        moe = os.path.join(d, "moe.gguf")
        t1 = time.time()
        U.run([binp, "moefy", "-q", "-t", "2", "--experts", str(E), "--top-k", str(E),
               "--calib", calib, "--calib-tokens", "512", dense, moe])
        print(f"moefy E={E} K={E}: {time.time() - t1:.1f}s, {os.path.getsize(moe) / 2**20:.1f} MiB")
        ok = check_file(dense, moe, E) and ok
        ok = check_logits(binp, dense, moe) and ok
        bad = os.path.join(d, "bad.gguf")
        ok = refused(binp, ["-E", "7", "--calib", calib, dense, bad], "do not divide") and ok
        ok = refused(binp, ["-E", "4", "-k", "5", "--calib", calib, dense, bad], "--top-k") and ok
        ok = refused(binp, ["--calib", calib, moe, bad], "already a MoE model") and ok
        ok = refused(binp, ["--calib", calib, os.path.join(d, "none.gguf"), bad], "none.gguf") and ok
        ok = refused(binp, ["--calib", os.path.join(d, "none.txt"), dense, bad], "none.txt") and ok
        if os.path.exists(bad):
            print("  FAIL a refused run left an output file")
            ok = False
    print(f"{'PASS' if ok else 'FAIL'} ({time.time() - t0:.1f}s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
