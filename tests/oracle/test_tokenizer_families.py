#!/usr/bin/env python3
"""test_tokenizer_families.py - strata's token ids equal llama.cpp's llama-tokenize (the
oracle, the prebuilt peer) on the tricky-string corpus
(tests/oracle/tokenizer_corpus.txt: spaces, tabs, digits, CJK, emoji, code, accents, bytes
that need byte fallback) and on texts holding special-token text, for each tokenizer family
cached here: the default model (byte-level BPE, pre-tokenizer "smollm") and Gemma 3 270M
(SentencePiece-style with a 262k vocabulary, add_space_prefix false, user-defined tokens).
Both sides tokenize the same bytes from a file, special-token text parsed, no BOS (and
llama-tokenize with --no-escape: by default it turns "\\\\" into "\\" before tokenizing).

Needs the peer's llama-tokenize as scripts/peer-bin finds it (STRATA_PEER_BIN, the prebuilt
../shared/peer, the scripts/peer-llamacpp cache): without it the test skips (77), and fails
under CI=true, like a missing model.  A missing
model is a skip here and a failure under CI=true (scripts/fetch-model fetches both).
Exit 0 pass, 1 fail, 77 skip.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "tokenizer_corpus.txt")
MODELS = os.environ.get("STRATA_MODEL_DIR") or os.path.join(
    os.environ.get("HOME", "/root"), ".cache", "strata", "models")
GEMMA = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")

# texts beside the corpus, per model: special-token text, leading spaces, a lone newline
EXTRA = {
    "smollm2": ["<|im_start|>user\n  Hi there<|im_end|>\n<|im_start|>assistant\n",
                " leading space", "\n", "a\u00a0b \u200b c"],
    "gemma3": ["<start_of_turn>user\n  Hi there<end_of_turn>\n<start_of_turn>model\n",
               " leading space", "\n", "a\u00a0b \u200b c", "\t\t\tindent\n\n\n\nx",
               "<unused0> <start_of_image>"],
}


def strata_ids(binp, model, path):
    r = subprocess.run([binp, "tokenize", "-m", model, "-f", path],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        testenv.fail(f"strata tokenize failed on {model}: {r.stderr.strip()}")
    return [int(x) for x in r.stdout.split()]


def peer_ids(lt, model, path):
    r = subprocess.run([lt, "-m", model, "-f", path, "--ids", "--no-bos", "--no-escape",
                        "--log-disable"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        testenv.fail(f"llama-tokenize failed on {model}: {r.stderr.strip()[-400:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    if not line:
        testenv.fail(f"llama-tokenize printed no id list: {r.stdout[-400:]!r}")
    body = line[-1].strip("[] \n")
    return [int(x) for x in body.split(",")] if body else []


def main():
    binp = testenv.strata_bin()
    lt = testenv.peer_tool("llama-tokenize")
    models = {"smollm2": testenv.model_path()}
    if not os.path.isfile(GEMMA):
        testenv.skip(f"Gemma 3 270M not found: {GEMMA} (scripts/fetch-model gemma3)")
    models["gemma3"] = GEMMA
    texts = [("corpus", open(CORPUS, "rb").read())]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="strata_tokfam_") as d:
        for name, model in models.items():
            for label, data in texts + [(f"extra {i}", t.encode())
                                        for i, t in enumerate(EXTRA[name])]:
                p = os.path.join(d, "text")
                with open(p, "wb") as f:
                    f.write(data)
                a, b = strata_ids(binp, model, p), peer_ids(lt, model, p)
                if a == b:
                    print(f"ok   {name} {label}: {len(a)} ids equal")
                    continue
                bad += 1
                i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]),
                         min(len(a), len(b)))
                print(f"FAIL {name} {label}: {len(a)} vs {len(b)} ids, first difference at "
                      f"{i}: strata {a[max(0, i - 3):i + 4]} llama.cpp {b[max(0, i - 3):i + 4]}")
    if bad:
        testenv.fail(f"{bad} text(s) tokenized differently from llama-tokenize")
    print("PASS")


if __name__ == "__main__":
    main()
