#!/usr/bin/env python3
"""Soundness of the JSON Schema compiler (issue 37: enforced or refused, never silently
ignored).  Every case in tests/data/schemas/soundness/ is {"schema", "valid", "invalid"}:
random walks of the schema's grammar (`strata grammar walk`) must validate under jsonschema's
Draft202012Validator (formats checked), every invalid instance must be refused by `strata
grammar check`, every valid one accepted.  The instances are checked against jsonschema first,
so a wrong corpus entry fails here rather than passing for the wrong reason.  Needs the strata
binary and jsonschema (the venv); skips (77) without them, fails under CI=true."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

N_WALKS = 12

# JSON Schema patterns are ECMA-262; jsonschema runs them with Python's re, whose \s, \d, \w
# and "." differ (Python's \s lacks U+FEFF and has U+001C..U+001F and U+0085, its "."
# matches \r).  The oracle translates those into ECMA-262's sets first.
ECMA_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
ECMA_SETS = {"s": ECMA_SPACE, "d": "0-9", "w": "a-zA-Z0-9_"}


def ecma_to_python(pattern):
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            d = pattern[i + 1]
            if d.lower() in ECMA_SETS:
                body = ECMA_SETS[d.lower()]
                out.append(body if in_class else ("[^" if d.isupper() else "[") + body + "]")
            else:
                out.append(c + d)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == "." and not in_class:
            c = "[^\n\r\u2028\u2029]"
        out.append(c)
        i += 1
    return "".join(out)


def ecma_validator_class():
    """Draft202012Validator with ECMA-262 pattern semantics (for every JSON Schema oracle)."""
    import jsonschema

    def pattern(validator, patrn, instance, schema):
        if validator.is_type(instance, "string") and not re.search(ecma_to_python(patrn),
                                                                      instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": pattern})


def compact(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def main():
    testenv.require("jsonschema")
    import jsonschema
    strata = testenv.strata_bin()
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    files = sorted(glob.glob(os.path.join(src, "tests", "data", "schemas", "soundness",
                                          "*.json")))
    if len(files) < 30:
        testenv.fail(f"expected at least 30 soundness cases, found {len(files)}")
    n_walks = n_refused = n_accepted = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(files):
            name = os.path.basename(path)
            case = json.load(open(path, encoding="utf-8"))
            schema = case["schema"]
            cls = ecma_validator_class()
            validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
            for v in case["valid"]:
                if not validator.is_valid(v):
                    testenv.fail(f"{name}: corpus: {compact(v)} is not valid")
            for v in case["invalid"]:
                if validator.is_valid(v):
                    testenv.fail(f"{name}: corpus: {compact(v)} is valid")
            sfile = os.path.join(tmp, name)
            with open(sfile, "w", encoding="utf-8") as f:
                json.dump(schema, f)
            p = subprocess.run([strata, "grammar", "walk", "--schema", sfile, "-n", str(N_WALKS),
                                "--seed", str(i + 1)], capture_output=True, text=True,
                               timeout=60)
            if p.returncode != 0:
                testenv.fail(f"{name}: walk failed ({p.returncode}): {p.stderr.strip()}")
            # one JSON string per line: the text generated
            for text in [json.loads(t) for t in p.stdout.split("\n") if t]:
                try:
                    value = json.loads(text)
                except ValueError as e:
                    testenv.fail(f"{name}: walk gave non-JSON {text!r} ({e})")
                errs = list(validator.iter_errors(value))
                if errs:
                    testenv.fail(f"{name}: walk gave {text!r}, invalid: {errs[0].message}")
                n_walks += 1
            for want, values in ((0, case["valid"]), (1, case["invalid"])):
                for v in values:
                    p = subprocess.run([strata, "grammar", "check", "--schema", sfile, "--text",
                                        compact(v)], capture_output=True, text=True, timeout=60)
                    if p.returncode != want:
                        testenv.fail(f"{name}: check {compact(v)}: exit {p.returncode}, want "
                                     f"{want} ({'refused' if want else 'accepted'}) "
                                     f"{p.stderr.strip()}")
                    n_refused += want
                    n_accepted += 1 - want
    print(f"{len(files)} schemas: {n_walks} walks validate, {n_accepted} valid instances "
          f"accepted, {n_refused} invalid ones refused")


if __name__ == "__main__":
    main()
