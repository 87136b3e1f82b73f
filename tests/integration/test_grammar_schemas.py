#!/usr/bin/env python3
"""The JSON Schema compiler against an independent validator (Python's jsonschema): for
every schema in tests/data/schemas/, `strata grammar walk` generates random sentences by
walking the token mask (a byte-level vocabulary, and the default model's vocabulary for a
subset when the model is present); each must parse as JSON and validate (formats checked
too).  Every schema in tests/data/schemas/unsupported/ must be refused, naming the JSON
pointer path and keyword it expects.  Needs the strata binary and jsonschema (the venv)."""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from test_schema_soundness import ecma_validator_class  # noqa: E402  (ECMA-262 patterns)

N_WALKS = 6


def walk(strata, path, seed, extra=()):
    p = subprocess.run([strata, "grammar", "walk", "--schema", path, "-n", str(N_WALKS),
                        "--seed", str(seed), *extra], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        testenv.fail(f"{path}: walk failed ({p.returncode}): {p.stderr.strip()}")
    return [json.loads(line) for line in p.stdout.split("\n") if line]


def main():
    testenv.require("jsonschema")
    import jsonschema
    strata = testenv.strata_bin()
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    files = sorted(glob.glob(os.path.join(src, "tests", "data", "schemas", "*.json")))
    if len(files) < 100:
        testenv.fail(f"expected at least 100 schemas, found {len(files)}")
    model = testenv.model_candidate()
    have_model = os.path.isfile(model)
    n_texts = 0
    for i, path in enumerate(files):
        schema = json.load(open(path, encoding="utf-8"))
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        if cls is jsonschema.Draft202012Validator:
            cls = ecma_validator_class()
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        texts = walk(strata, path, i + 1)
        if have_model and i % 10 == 0:  # multi-byte tokens crossing rule boundaries
            texts += walk(strata, path, i + 1, ["-m", model])
        for text in texts:
            try:
                value = json.loads(text)
            except ValueError as e:
                testenv.fail(f"{os.path.basename(path)}: not JSON: {text!r} ({e})")
            errs = list(validator.iter_errors(value))
            if errs:
                testenv.fail(f"{os.path.basename(path)}: {text!r} does not validate: "
                             f"{errs[0].message}")
            n_texts += 1
    refused = sorted(glob.glob(os.path.join(src, "tests", "data", "schemas", "unsupported",
                                            "*.json")))
    for path in refused:
        case = json.load(open(path, encoding="utf-8"))
        tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"strata_schema_{os.getpid()}.json")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(case["schema"], f)
        p = subprocess.run([strata, "grammar", "compile", "--schema", tmp], capture_output=True,
                           text=True, timeout=60)
        os.unlink(tmp)
        if p.returncode == 0:
            testenv.fail(f"{os.path.basename(path)}: accepted, expected refusal {case['expect']}")
        if case["expect"] + ":" not in p.stderr:
            testenv.fail(f"{os.path.basename(path)}: refusal {p.stderr.strip()!r} does not name "
                         f"{case['expect']!r}")
    print(f"{len(files)} schemas, {n_texts} generated texts validate; "
          f"{len(refused)} unsupported schemas refused with path and keyword"
          f"{'' if have_model else ' (no model: byte vocabulary only)'}")


if __name__ == "__main__":
    main()
