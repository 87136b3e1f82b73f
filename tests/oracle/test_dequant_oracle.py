"""test_dequant_oracle.py - strata's dequantization of every weight type it writes, against
gguf.dequantize (the `gguf` package, no strata code).

`strata quantize` makes a file of type T from the default model, then `strata quantize
T.gguf T-f32.gguf f32` expands it with strata's reference dequantization
(kern_ops_ref()->dequant_row) to F32, which the gguf package reads as plain floats; each
tensor must equal gguf.dequantize of the T file.  Checked: the tensors outside the blocks
(the first 2048 rows of token_embd, the norms) and every tensor of block 0 (each kind of matrix and row width; all
30 blocks cost minutes of NumPy dequantization per type), for F16, BF16, Q8_0, Q4_0, Q4_1
(the default model itself, expanded directly), Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, and F32 (the
norms, in every file) (STRATA_DEQUANT_TYPES narrows the list).  On the default model the K types apply to ffn_down only (the other rows are 576
wide, not a multiple of 256, and fall back as in llama.cpp: q4_k -> q5_0, q5_k -> q5_1,
q6_k -> q8_0); the fallback is what the file holds, and what is compared.
Block formats are a stored scale times small integers, so both sides should agree bit for
bit, or within a float rounding of the scale products (K-quants: d * sc and dmin * m): the
limit is max |diff| <= 1e-6 * max |w| per tensor.  Measured: every value of every checked
tensor bit-identical, for every type (blocks 0 and 29 too, in an earlier run).
The forward pass on each type: test_forward_types_oracle.py, test_forward_kquant_oracle.py.

Env: STRATA_BIN (set by CTest), STRATA_MODEL (optional).  Exit 0 pass, 1 fail, 77 skip.
"""

import os
import sys
import tempfile
import time

import oracle_util as U

np = U.np
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

TYPES = ["f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"]
DEQUANT_REL = 1e-6
# token_embd (49152 rows) is the largest tensor: its first rows hold every block position of
# a row as any other row does, so 2048 of them are checked (the whole matrix is minutes of
# NumPy per type on 2 cores; STRATA_DEQUANT_EMBD_ROWS=0 checks it all)
EMBD_ROWS = int(os.environ.get("STRATA_DEQUANT_EMBD_ROWS", "2048")) or None


def checked(name):
    """The tensors compared: everything outside the blocks, and block 0."""
    return not name.startswith("blk.") or name.split(".")[1] == "0"


def check_dequant(binp, qfile, ffile):
    """Every tensor of ffile (strata's F32 expansion of qfile) against gguf.dequantize of
    qfile; prints one line per type of tensor; returns ok."""
    rq, rf = GGUFReader(qfile), GGUFReader(ffile)
    fts = {t.name: t for t in rf.tensors}
    worst = {}  # type name -> (rel, name, n tensors)
    ok = True
    for t in rq.tensors:
        if not checked(t.name):
            continue
        rows = EMBD_ROWS if t.name == "token_embd.weight" else None
        want = dequantize(t.data[:rows], t.tensor_type).astype(np.float32).reshape(-1)
        f = fts.get(t.name)
        if f is None or f.tensor_type.name != "F32":
            print(f"    FAIL {t.name}: missing or not F32 in the f32 expansion")
            ok = False
            continue
        got = np.asarray(f.data[:rows], dtype=np.float32).reshape(-1)
        if got.size != want.size:
            print(f"    FAIL {t.name}: {got.size} values, gguf.dequantize gives {want.size}")
            ok = False
            continue
        scale = float(np.abs(want).max()) or 1.0
        rel = float(np.abs(got.astype(np.float64) - want).max()) / scale
        exact = int((got == want).sum())
        w = worst.get(t.tensor_type.name, (0.0, "", 0, 0, 0))
        worst[t.tensor_type.name] = (max(w[0], rel), t.name if rel >= w[0] else w[1], w[2] + 1,
                                     w[3] + exact, w[4] + want.size)
        if rel > DEQUANT_REL:
            print(f"    FAIL {t.name} ({t.tensor_type.name}): max |diff| / max |w| {rel:.3g} "
                  f"(limit {DEQUANT_REL})")
            ok = False
    for ty, (rel, name, n, exact, total) in sorted(worst.items()):
        print(f"    dequant {ty}: {n} tensors, {exact}/{total} values bit-identical, max "
              f"|diff|/max|w| {rel:.3g} (at {name})")
    return ok


def main():
    t0 = time.time()
    model = U.model_path()
    binp = U.strata_bin()
    types = os.environ.get("STRATA_DEQUANT_TYPES", ",".join(TYPES)).split(",")
    ok = True
    with tempfile.TemporaryDirectory(prefix="strata_dqoracle_") as d:
        for ty in types:
            q = os.path.join(d, f"m-{ty}.gguf")
            f = os.path.join(d, f"m-{ty}-f32.gguf")
            t1 = time.time()
            if ty == "q4_1":  # the default model is Q4_1: expand it as it is
                q = model
            else:
                U.run([binp, "quantize", "--threads", "2", "--quiet", model, q, ty])
            U.run([binp, "quantize", "--threads", "2", "--quiet", q, f, "f32"])
            print(f"{ty}: quantized and expanded in {time.time() - t1:.1f}s")
            ok = check_dequant(binp, q, f) and ok
            os.unlink(f)
            if q != model:
                os.unlink(q)
    print(f"{'PASS' if ok else 'FAIL'}: dequant oracle ({', '.join(types)}), "
          f"{time.time() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
