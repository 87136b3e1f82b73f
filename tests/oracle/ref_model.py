"""ref_model.py - an independent NumPy reference forward pass for GGUF models, generic over
architectures: each architecture is a declaration module (ref_arch_llama.py: its GGUF keys,
tensors and per-layer stages) found in ARCHS by general.architecture, the oracle's mirror of
model/model_arch.c.  ref_llama.py is the older name of this module (kept as an alias).

This is the numerical oracle strata is checked against. It shares no code with strata: weights
are dequantized with the `gguf` package (gguf.quants.dequantize) and the math is written out
plainly, one function per stage in dataflow order. Matrix products run in float32 (BLAS);
norms, softmax and the RoPE angles use float64, where it is cheap.

    model = load(path)                 # read hyper-parameters, dequantize every tensor
    logits = forward(model, ids)       # (n_tokens, n_vocab) float32, one row per position
    cont = greedy(model, ids, 64)      # 64 greedy continuation ids (KV cache, so it is quick)

Conventions that matter:
- A GGUF weight of shape [ne0 = n_in, ne1 = n_out] reads as a (n_out, n_in) array: y = W @ x.
- RoPE kind "norm" rotates interleaved pairs (x[2i], x[2i+1]) (the llama converter stores Q and
  K permuted for it: llama.cpp's rope mode 0 for arch llama); "neox" rotates halves.
- With no output.weight (and a declaration with tied_output) the head is token_embd.weight.
- Mixture of Experts (<arch>.expert_count > 0, Mixtral layout): per token, the router picks the K
  experts with the largest logits (an exact tie goes to the lower expert index), weighted by
  strata.expert_gating: "softmax_topk" (default: softmax over the K chosen logits),
  "softmax_all" (softmax over all E, the chosen keep their probabilities) or "unit" (1.0 each).

Adding an architecture: ref_arch_<name>.py with KEYS, TOP, BLK and STAGES (see ref_arch_llama.py)
and a row in ARCHS.  A stage switch the reference does not run yet (SUPPORTED says which it
runs) is refused at load, as strata refuses it; running it is one branch in _step.
"""

import os
import sys

# One BLAS thread: the matrices here are small, and OpenBLAS's thread hand-offs cost ~100x more
# than the work on a busy machine with few cores (7 ms instead of 0.07 ms per matvec).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

import ref_arch_gemma3  # noqa: E402
import ref_arch_llama  # noqa: E402
import ref_arch_qwen  # noqa: E402

# general.architecture -> declaration module (mirrors model/model_arch.c's table)
ARCHS = {
    "llama": ref_arch_llama,
    "mistral": ref_arch_llama,
    "qwen2": ref_arch_qwen.QWEN2,
    "qwen3": ref_arch_qwen.QWEN3,
    "gemma3": ref_arch_gemma3,
}

# The stage switches (ref_arch_llama.py documents them) and the values the reference runs.
SUPPORTED = {
    "norm": ("rms",),
    "norm_post_attn": (False, True),
    "norm_post_ffn": (False, True),
    "attn": ("full", "sliding"),
    "qkv_bias": (False, True),
    "out_bias": (False, True),
    "qk_norm": (False, True),
    "ffn": ("dense", "moe"),
    "act": ("silu", "gelu"),
    "rope": ("norm", "neox"),
    "embd_scale": (False, True),
    "tied_output": (True, False),
}


class Model:
    """Hyper-parameters plus dequantized float32 weights, indexed by GGUF tensor name."""

    def __init__(self):
        self.path = ""
        self.arch = ""
        self.n_layers = 0
        self.d_model = 0
        self.n_heads = 0
        self.n_kv_heads = 0
        self.head_dim = 0
        self.n_rot = 0  # dims of each head that RoPE rotates (rope.dimension_count)
        self.d_ff = 0
        self.n_vocab = 0
        self.rope_base = 10000.0
        self.rope_base_swa = None  # RoPE base of sliding-window layers (None: rope_base)
        self.window = 0  # positions a sliding-window layer sees, its own included
        self.query_scalar = None  # scores times 1/sqrt(query_scalar) (None: head_dim)
        self.layer_stages = []  # per layer: the stage switches (m.stages and its overrides)
        self.eps = 1e-5
        self.n_expert = 0  # experts per FFN layer (0: dense)
        self.n_expert_used = 0  # K
        self.gating = "softmax_topk"
        self.stages = {}  # the declaration's stage switches, ffn set from n_expert
        self.w = {}  # name -> float32 ndarray ((n_out, n_in) for matrices)
        self.types = {}  # name -> GGML type name as stored in the file
        # When True, round each matmul input to 8 bits per block of 32 first, as llama.cpp-style
        # engines (strata included) do before an integer dot product.  Off for the oracle; used
        # only to estimate how far such an engine may legitimately drift from exact math.
        self.act_q8 = False


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


def _key(r, arch, key, kind, fallback, path):
    v = _field(r, f"{arch}.{key}")
    if v is None:
        if fallback == ref_arch_llama.REQUIRED:
            raise ValueError(f"{path}: missing {arch}.{key}")
        return None if fallback == ref_arch_llama.DERIVED else kind(fallback)
    return kind(v)


def load(path):
    """Read the GGUF at path, find its architecture's declaration, check its tensors and
    dequantize every tensor to float32."""
    r = GGUFReader(path)
    m = Model()
    m.path = path
    m.arch = _field(r, "general.architecture", "llama")
    decl = ARCHS.get(m.arch)
    if decl is None:
        raise ValueError(f"{path}: architecture {m.arch!r}, the reference handles {sorted(ARCHS)}")
    a = m.arch
    for attr, key, kind, fallback in decl.KEYS:
        setattr(m, attr, _key(r, a, key, kind, fallback, path))
    if m.n_kv_heads is None:
        m.n_kv_heads = m.n_heads
    if m.head_dim is None:
        m.head_dim = m.d_model // m.n_heads
    if m.n_rot is None:
        m.n_rot = m.head_dim
    if m.query_scalar is None:
        m.query_scalar = m.head_dim
    if m.rope_base_swa is None:
        m.rope_base_swa = m.rope_base
    m.n_expert = int(_field(r, f"{a}.expert_count", 0))
    m.n_expert_used = int(_field(r, f"{a}.expert_used_count", 0))
    m.gating = str(_field(r, "strata.expert_gating", "softmax_topk"))
    if m.n_expert and not 1 <= m.n_expert_used <= m.n_expert:
        raise ValueError(f"{path}: expert_used_count {m.n_expert_used} of {m.n_expert} experts")
    if m.gating not in ("softmax_topk", "softmax_all", "unit"):
        raise ValueError(f"{path}: unknown strata.expert_gating {m.gating!r}")
    m.stages = dict(decl.STAGES, ffn="moe" if m.n_expert else "dense")
    per_layer = getattr(decl, "LAYER_STAGES", lambda m, L: {})
    m.layer_stages = [dict(m.stages, **per_layer(m, L)) for L in range(m.n_layers)]
    for st in [m.stages] + m.layer_stages:
        for k, v in st.items():
            if v not in SUPPORTED[k]:
                raise ValueError(f"{path}: architecture {m.arch!r} declares {k}={v!r}, "
                                 "which the reference does not run yet")

    for t in r.tensors:
        # t.data is (ne1, ne0) for matrices; dequantize keeps that row layout.
        arr = dequantize(t.data, t.tensor_type)
        ne = [int(x) for x in t.shape]  # GGUF order, ne[0] contiguous
        if len(ne) == 3:  # stacked experts: (E, rows, cols)
            arr = arr.reshape(ne[2], ne[1], ne[0])
        m.w[t.name] = np.ascontiguousarray(arr, dtype=np.float32)
        m.types[t.name] = t.tensor_type.name
    declared = decl.TOP + [(n.format(L=L), req) for L in range(m.n_layers)
                           for n, req in decl.BLK[m.stages["ffn"]]]
    for name, required in declared:
        if required and name not in m.w:
            raise ValueError(f"{path}: missing tensor {name!r} (architecture {m.arch!r})")
    if "output.weight" not in m.w:
        if not m.stages["tied_output"]:
            raise ValueError(f"{path}: missing tensor 'output.weight'")
        m.w["output.weight"] = m.w["token_embd.weight"]  # tied embeddings
    m.n_vocab = m.w["token_embd.weight"].shape[0]
    assert m.w["token_embd.weight"].shape == (m.n_vocab, m.d_model)
    return m


# ---- the stages of one layer, in dataflow order -----------------------------------------


def rmsnorm(x, w, eps):
    """x (n, d) -> x / sqrt(mean(x^2) + eps) * w, computed in float64."""
    x64 = x.astype(np.float64)
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (x64 * inv * w.astype(np.float64)).astype(np.float32)


def rope(x, positions, n_rot, base, freqs=None, neox=False):
    """Rotate pairs of the first n_rot dims of each head: interleaved (x[..., 2i], x[..., 2i+1]),
    or with neox the halves (x[..., i], x[..., i + n_rot/2]).

    x: (n, n_heads, head_dim); positions: (n,). theta_i = pos * base^(-2i / n_rot) / freqs[i].
    """
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)  # (half,)
    if freqs is not None:
        inv_freq = inv_freq / freqs.astype(np.float64)
    ang = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # (n, half)
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    out = x.astype(np.float64).copy()
    i0, i1 = (slice(0, half), slice(half, n_rot)) if neox else (slice(0, n_rot, 2), slice(1, n_rot, 2))
    x0 = out[..., i0].copy()
    x1 = out[..., i1].copy()
    out[..., i0] = x0 * cos - x1 * sin
    out[..., i1] = x0 * sin + x1 * cos
    return out.astype(np.float32)


def softmax(s):
    """Row softmax over the last axis, float64, max subtracted."""
    s = s - np.max(s, axis=-1, keepdims=True)
    e = np.exp(s)
    return e / np.sum(e, axis=-1, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x.astype(np.float64))).astype(np.float32)


def gelu_tanh(x):
    """GELU, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), float64."""
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64**3)))).astype(
        np.float32)


def q8_roundtrip(x):
    """x (n, k) with k % 32 == 0, rounded as Q8_0 would store it: per block d = amax/127."""
    n, k = x.shape
    b = x.reshape(n, k // 32, 32).astype(np.float64)
    d = np.max(np.abs(b), axis=-1, keepdims=True) / 127.0
    d = d.astype(np.float16).astype(np.float64)  # the block scale is stored as f16
    q = np.where(d > 0, np.round(b / np.where(d > 0, d, 1.0)), 0.0)
    return (np.clip(q, -127, 127) * d).reshape(n, k).astype(np.float32)


def matmul(m, x, name, expert=None):
    """x (n, n_in) @ W.T -> (n, n_out) for the weight called name (expert e of a stacked one).
    With act_q8, inputs of quantized weights are rounded first (float weights take floats)."""
    if m.act_q8 and x.shape[1] % 32 == 0 and m.types.get(name) not in ("F32", "F16", "BF16"):
        x = q8_roundtrip(x)
    w = m.w[name] if expert is None else m.w[name][expert]
    return x @ w.T


def route(m, logits):
    """Experts and gate weights of one token from its router logits (E,): the K largest
    logits in descending order (a tie goes to the lower index), weighted per m.gating."""
    lg = logits.astype(np.float64)
    chosen = np.argsort(-lg, kind="stable")[: m.n_expert_used]
    if m.gating == "unit":
        weights = np.ones(len(chosen))
    elif m.gating == "softmax_all":
        weights = softmax(lg)[chosen]
    else:
        weights = softmax(lg[chosen])
    return chosen, weights


def moe_ffn(m, h, p):
    """The MoE feed-forward of layer prefix p for normed inputs h (n, d): sum over each token's
    K experts of weight * down(silu(gate h) * up h)."""
    r = matmul(m, h, p + "ffn_gate_inp.weight")  # (n, E) router logits
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen, weights = route(m, r[t])
        ht = h[t : t + 1]
        for e, wk in zip(chosen, weights):
            g = matmul(m, ht, p + "ffn_gate_exps.weight", e)
            u = matmul(m, ht, p + "ffn_up_exps.weight", e)
            y = matmul(m, silu(g) * u, p + "ffn_down_exps.weight", e)
            out[t] += np.float32(wk) * y[0]
    return out


class Cache:
    """KV cache: per layer, K and V of every position seen so far, (n_ctx, n_kv_heads, head_dim)."""

    def __init__(self, m, max_ctx):
        shape = (m.n_layers, max_ctx, m.n_kv_heads, m.head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros(shape, dtype=np.float32)
        self.n = 0  # positions filled


def _attention(m, q, cache, layer, pos0, n, window=0):
    """Causal GQA attention of n new queries at positions pos0.. over cache positions 0..pos0+n-1;
    with a window, query position p sees only keys p - window + 1 .. p.

    q: (n, n_heads, head_dim) -> (n, n_heads * head_dim).
    """
    group = m.n_heads // m.n_kv_heads
    ctx = pos0 + n
    k = cache.k[layer, :ctx].astype(np.float64)  # (ctx, n_kv, hd)
    v = cache.v[layer, :ctx].astype(np.float64)
    scale = 1.0 / np.sqrt(m.query_scalar)
    out = np.empty((n, m.n_heads, m.head_dim), dtype=np.float64)
    # query i (position pos0+i) sees keys 0..pos0+i
    mask = np.arange(ctx)[None, :] > (pos0 + np.arange(n))[:, None]  # (n, ctx) True = hidden
    if window:
        mask |= np.arange(ctx)[None, :] <= (pos0 + np.arange(n))[:, None] - window
    for h in range(m.n_heads):
        kvh = h // group  # query heads h*group.. share KV head kvh (GQA order)
        s = (q[:, h, :].astype(np.float64) @ k[:, kvh, :].T) * scale  # (n, ctx)
        s[mask] = -np.inf
        out[:, h, :] = softmax(s) @ v[:, kvh, :]
    return out.reshape(n, -1).astype(np.float32)


def _step(m, ids, cache):
    """Run tokens ids (continuing at cache.n) through the model; return logits (n, n_vocab).
    The stages are m.stages (the architecture's declaration), in dataflow order."""
    st = m.stages
    n = len(ids)
    pos0 = cache.n
    positions = np.arange(pos0, pos0 + n)
    freqs = m.w.get("rope_freqs.weight")
    neox = st["rope"] == "neox"
    x = m.w["token_embd.weight"][np.asarray(ids, dtype=np.int64)].copy()  # (n, d)
    if st["embd_scale"]:
        x = x * np.float32(np.sqrt(m.d_model))
    for L in range(m.n_layers):
        p = f"blk.{L}."
        ls = m.layer_stages[L]
        sliding = ls["attn"] == "sliding"
        base = m.rope_base_swa if sliding else m.rope_base
        # attention block: h (n, d); q (n, H, hd); k, v (n, Hkv, hd)
        h = rmsnorm(x, m.w[p + "attn_norm.weight"], m.eps)
        q = matmul(m, h, p + "attn_q.weight")
        k = matmul(m, h, p + "attn_k.weight")
        v = matmul(m, h, p + "attn_v.weight")
        if ls["qkv_bias"]:  # each token's projection plus the layer's bias (Qwen2)
            q = q + m.w[p + "attn_q.bias"]
            k = k + m.w[p + "attn_k.bias"]
            v = v + m.w[p + "attn_v.bias"]
        q = q.reshape(n, m.n_heads, m.head_dim)
        k = k.reshape(n, m.n_kv_heads, m.head_dim)
        v = v.reshape(n, m.n_kv_heads, m.head_dim)
        if ls["qk_norm"]:  # RMSNorm over each head's head_dim values (Qwen3), before RoPE
            q = rmsnorm(q, m.w[p + "attn_q_norm.weight"], m.eps)
            k = rmsnorm(k, m.w[p + "attn_k_norm.weight"], m.eps)
        q = rope(q, positions, m.n_rot, base, freqs, neox)
        k = rope(k, positions, m.n_rot, base, freqs, neox)
        cache.k[L, pos0 : pos0 + n] = k
        cache.v[L, pos0 : pos0 + n] = v
        a = _attention(m, q, cache, L, pos0, n, m.window if sliding else 0)  # (n, H * hd)
        o = matmul(m, a, p + "attn_output.weight")
        if ls["out_bias"]:
            o = o + m.w[p + "attn_output.bias"]
        if ls["norm_post_attn"]:
            o = rmsnorm(o, m.w[p + "post_attention_norm.weight"], m.eps)
        x = x + o
        # feed-forward block (SwiGLU or GeGLU, dense or MoE): h (n, d), through (n, d_ff)
        h = rmsnorm(x, m.w[p + "ffn_norm.weight"], m.eps)
        if ls["ffn"] == "moe":
            x = x + moe_ffn(m, h, p)
            continue
        g = matmul(m, h, p + "ffn_gate.weight")
        u = matmul(m, h, p + "ffn_up.weight")
        act = gelu_tanh if ls["act"] == "gelu" else silu
        f = matmul(m, act(g) * u, p + "ffn_down.weight")
        if ls["norm_post_ffn"]:
            f = rmsnorm(f, m.w[p + "post_ffw_norm.weight"], m.eps)
        x = x + f
    cache.n += n
    x = rmsnorm(x, m.w["output_norm.weight"], m.eps)
    return matmul(m, x, "output.weight").astype(np.float32)


def forward(m, ids):
    """Logits (n_tokens, n_vocab) float32 for token ids, one row per position."""
    cache = Cache(m, len(ids))
    return _step(m, list(ids), cache)


def greedy(m, ids, n, return_logits=False):
    """Greedy continuation of n tokens after prompt ids (argmax, lowest id on exact ties).

    With return_logits, also returns the (n, n_vocab) logits each token was chosen from.
    """
    cache = Cache(m, len(ids) + n)
    logits = _step(m, list(ids), cache)[-1]
    out, rows = [], []
    for i in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        rows.append(logits)
        if i + 1 < n:
            logits = _step(m, [t], cache)[0]
    if return_logits:
        return out, np.stack(rows)
    return out


def detok(m_path, ids):
    """Rough text of ids from the GGUF vocab (GPT-2 byte-level BPE), for eyeballing only."""
    r = GGUFReader(m_path)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    # inverse of GPT-2's bytes_to_unicode
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    u2b = {chr(c): b for b, c in zip(bs, cs)}
    data = bytearray()
    for i in ids:
        for ch in toks[i]:
            data.append(u2b.get(ch, ord("?")) if ord(ch) >= 256 or chr(ord(ch)) in u2b else ord(ch))
    return data.decode("utf-8", errors="replace")


if __name__ == "__main__":
    import time

    path = sys.argv[1] if len(sys.argv) > 1 else "/root/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    t0 = time.time()
    model = load(path)
    print(f"loaded {path} in {time.time() - t0:.1f}s")
    ids = [int(x) for x in sys.argv[2].split()] if len(sys.argv) > 2 else [1, 9690, 198]
    t0 = time.time()
    cont = greedy(model, ids, 32)
    print(f"greedy 32 in {time.time() - t0:.1f}s: {cont}")
    print(repr(detok(path, ids + cont)))
