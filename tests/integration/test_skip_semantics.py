#!/usr/bin/env python3
"""test_skip_semantics.py - a test that cannot run is reported as skipped, not passed, and
under CI=true it fails (tests/testenv.py, tests/unit/test_util.h).

Runs model-needing tests with STRATA_MODEL pointing at a file that does not exist:
- test_forward (a C suite whose every case needs the model: skips as a whole),
- test_gguf --model (the model tcases of a mixed C suite),
- tests/oracle/test_forward_oracle.py (a Python oracle test);
without CI each must exit 77 (CTest: skipped) and say that the model is missing; with
CI=true each must exit non-zero and not 77, naming the missing file.  And test_gguf
--no-model (the cases that need no model) must still run and pass (exit 0) either way.

Needs no model itself.  env: STRATA_TEST_FORWARD, STRATA_TEST_GGUF (the unit binaries;
CMakeLists.txt sets them), STRATA_BIN.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import testenv  # noqa: E402

SKIP = testenv.SKIP
failures = []


def run(name, cmd, env, want):
    """Run cmd; want: "skip" (exit 77), "fail" (non-zero, not 77) or "pass" (exit 0)."""
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        print(f"FAIL {name}: timed out")
        failures.append(name)
        return
    out = p.stdout + p.stderr
    ok = {"skip": p.returncode == SKIP,
          "fail": p.returncode not in (0, SKIP),
          "pass": p.returncode == 0}[want]
    if want != "pass" and env["STRATA_MODEL"] not in out:
        ok = False  # the message must name what is missing
    last = (out.strip().splitlines() or [""])[-1]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: want {want}, exit {p.returncode}: {last[:160]}")
    if not ok:
        print(out[-2000:])
        failures.append(name)


def main():
    fwd = os.environ.get("STRATA_TEST_FORWARD")
    gguf = os.environ.get("STRATA_TEST_GGUF")
    for b in (fwd, gguf):
        if not b or not os.access(b, os.X_OK):
            testenv.fail(f"unit binary not found: {b!r} (CTest sets STRATA_TEST_FORWARD/GGUF)")
    oracle = os.path.join(os.path.dirname(HERE), "oracle", "test_forward_oracle.py")
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "no-such-model.gguf")
        base = {k: v for k, v in os.environ.items() if k != "CI"}
        base["STRATA_MODEL"] = missing
        for ci in (False, True):
            env = dict(base, CI="true") if ci else base
            tag = "CI=true" if ci else "CI unset"
            want = "fail" if ci else "skip"
            run(f"test_forward [{tag}]", [fwd], env, want)
            run(f"test_gguf --model [{tag}]", [gguf, "--model"], env, want)
            run(f"test_gguf --no-model [{tag}]", [gguf, "--no-model"], env, "pass")
            run(f"test_forward_oracle.py [{tag}]", [sys.executable, oracle], env, want)
    print(f"{'PASS' if not failures else 'FAIL'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
