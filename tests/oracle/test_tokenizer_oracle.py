#!/usr/bin/env python3
"""test_tokenizer_oracle.py - strata's tokenizer against an independent one.

Builds a tokenizer with the PyPI `tokenizers` library from the GGUF's own vocabulary,
merges and token types (read with the `gguf` package), encodes a varied corpus (English,
code, CJK, emoji, runs of spaces and newlines, digits, special-token text; each line, the
whole corpus as one string, generated edge cases and seeded random strings) and compares
the ids with `$STRATA_BIN tokenize`.  Also checks `$STRATA_BIN detokenize` gives back
the exact bytes.  Prints a summary; exits 1 on any mismatch or a missing binary, 0 when all
agree, 77 (skipped) without the model or the `gguf` / `tokenizers` packages - a failure
instead under CI=true (tests/testenv.py).

env: STRATA_BIN (set by CTest), STRATA_MODEL (default
~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf), STRATA_SRC (the source tree).
"""
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import testenv  # noqa: E402

testenv.require("gguf", "tokenizers")  # a skip (a failure under CI=true) without them
import gguf  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

SRC = os.environ.get("STRATA_SRC", os.path.dirname(os.path.dirname(HERE)))
MODEL = testenv.model_candidate()  # main() checks that it is there
BIN = os.environ.get("STRATA_BIN") or os.path.join(SRC, "build", "strata")
CORPUS = os.path.join(HERE, "tokenizer_corpus.txt")

GPT2_RE = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def gguf_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def gguf_scalar(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0]


def build_reference(path):
    """Two `tokenizers` objects from the GGUF: with and without special-token parsing."""
    r = gguf.GGUFReader(path)
    model = gguf_scalar(r, "tokenizer.ggml.model")
    if model != "gpt2":
        # another model given by STRATA_MODEL: nothing is missing, the oracle does not apply
        testenv.skip(f"oracle covers byte-level BPE only (model is {model})", ci_fails=False)
    pre = gguf_scalar(r, "tokenizer.ggml.pre") or "gpt2"
    tokens = gguf_strings(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in gguf_strings(r, "tokenizer.ggml.merges")]
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)

    def make(with_control):
        tk = Tokenizer(models.BPE(vocab, merges))
        if pre in ("smollm", "starcoder", "refact"):
            tk.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        elif pre in ("llama-bpe", "llama3", "llama-v3"):
            tk.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tk.decoder = decoders.ByteLevel()
        added = []
        for i, (t, ty) in enumerate(zip(tokens, types)):
            if ty == 3 and with_control:
                added.append(AddedToken(t, special=True, normalized=False))
            elif ty == 4:
                added.append(AddedToken(t, special=False, normalized=False))
        if added:
            tk.add_tokens(added)
        return tk

    return make(True), make(False), pre


def strata_tokenize(text, special):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        name = f.name
    try:
        cmd = [BIN, "tokenize", "-m", MODEL, "-f", name]
        if not special:
            cmd.append("--no-special")
        p = subprocess.run(cmd, capture_output=True, timeout=120)
    finally:
        os.unlink(name)
    if p.returncode != 0:
        raise RuntimeError(f"strata tokenize failed ({p.returncode}): {p.stderr.decode()}")
    return [int(x) for x in p.stdout.split()]


def strata_detokenize(ids, special=False):
    cmd = [BIN, "detokenize", "-m", MODEL] + (["--special"] if special else [])
    p = subprocess.run(cmd, input=" ".join(map(str, ids)).encode(), capture_output=True,
                       timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"strata detokenize failed ({p.returncode}): {p.stderr.decode()}")
    return p.stdout


def edge_cases():
    return [
        "", " ", "  ", "\n", "\n\n\n", "a\n\nb", "  \n  ", "\r\n", "line1\r\nline2\r\n",
        " " * 20, "x" + " " * 7 + "y", "\t\t\n", "a \n b", "end with newline\n",
        "   123", "a1b2c3", "x  1", "12 34  56   78", "3.14", "1,000", "٣٤", "²³",
        "\u00a0non-breaking\u00a0space", "\u2028line sep", "x\u0085y", "\u3000ideographic",
        "'s 's 'S 'll 'LL it's IT'S", "don't won't can't", "''''", "'",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|im_end|><|im_end|>",
        "<|im_start", "<|endoftext|>text<|endoftext|>", "a<repo_name>b",
        "🙂", "🙂🙂🙂", " 🙂", "e\u0301", "👨‍👩‍👧", "\U0001F600x", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "!!!!!!", "....", "?!?!", "=====", "-->", "/* comment */", "// c++", "#!/bin/sh",
        "a" * 500, "ab " * 200, "\n" * 50, " \n" * 30, "1" * 300,
    ]


def random_cases(n, seed=1234):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        "     ", "\n\n\t", ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
        "日本語中文字한국어", "😀👍🎉❤️🙂", "éèêëàçñüöß", "αβγδεζ", "абвгдеж", "<|im_start|>",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(k))
        out.append(s)
    return out


def main():
    testenv.model_path()  # skips (fails under CI=true) without the model
    if not os.access(BIN, os.X_OK):
        testenv.fail(f"strata binary {BIN} not found (set STRATA_BIN)")
    ref_special, ref_plain, pre = build_reference(MODEL)
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read()
    lines = [l for l in corpus.split("\n") if l]

    cases = []  # (name, text, parse_special)
    cases += [(f"line {i + 1}", l, True) for i, l in enumerate(lines)]
    cases.append(("whole corpus", corpus, True))
    cases.append(("whole corpus, --no-special", corpus, False))
    cases.append(("whole corpus x3", corpus * 3, True))
    cases += [(f"edge {i}", s, True) for i, s in enumerate(edge_cases())]
    cases += [(f"edge {i}, --no-special", s, False) for i, s in enumerate(edge_cases())
              if "<" in s]
    cases += [(f"random {i}", s, True) for i, s in enumerate(random_cases(120))]
    cases += [(f"random {i}, --no-special", s, False)
              for i, s in enumerate(random_cases(40, seed=99))]

    n_ok = n_bad = n_rt_ok = n_rt_bad = 0
    for name, text, special in cases:
        ref = (ref_special if special else ref_plain).encode(text, add_special_tokens=False).ids
        got = strata_tokenize(text, special)
        if got == ref:
            n_ok += 1
        else:
            n_bad += 1
            k = next((j for j in range(min(len(got), len(ref))) if got[j] != ref[j]),
                     min(len(got), len(ref)))
            print(f"MISMATCH {name}: {text[:80]!r}\n  first difference at {k}:"
                  f"\n  strata: {got[max(0, k - 3):k + 6]}\n  ref:    {ref[max(0, k - 3):k + 6]}"
                  f"\n  ref tokens: {ref_special.decode(ref[max(0, k - 3):k + 6])!r}")
        # round trip: detokenizing strata's ids gives the exact bytes back (special
        # tokens rendered, since the text contained them literally)
        back = strata_detokenize(got, special=True)
        if back == text.encode("utf-8"):
            n_rt_ok += 1
        else:
            n_rt_bad += 1
            print(f"ROUNDTRIP FAIL {name}: {text[:60]!r} -> {back[:60]!r}")

    # decoding without rendering control tokens drops them, like the reference decoder
    ids = ref_special.encode("<|im_start|>user\nHi 🙂<|im_end|>\n").ids
    plain = strata_detokenize(ids, special=False).decode("utf-8")
    ref_plain_text = ref_special.decode(ids, skip_special_tokens=True)
    if plain == ref_plain_text:
        n_rt_ok += 1
    else:
        n_rt_bad += 1
        print(f"DECODE FAIL (specials skipped): {plain!r} vs {ref_plain_text!r}")

    print(f"tokenizer oracle ({os.path.basename(MODEL)}, pre={pre}): "
          f"{n_ok}/{n_ok + n_bad} encodings match, "
          f"{n_rt_ok}/{n_rt_ok + n_rt_bad} decodes byte-exact "
          f"({len(lines)} corpus lines, corpus {len(corpus.encode())} bytes)")
    return 1 if (n_bad or n_rt_bad) else 0


if __name__ == "__main__":
    sys.exit(main())
