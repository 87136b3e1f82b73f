"""testenv.py - what every Python test shares about its environment: skipping a test that
cannot run, finding the default model and the strata binary, importing optional packages.
The C suites follow the same rules (tests/unit/test_util.h).

A test that cannot run exits 77, which CTest reports as skipped (SKIP_RETURN_CODE 77),
never 0.  With CI=true in the environment a missing model or test tool (a Python package)
is a failure instead (exit 1, saying what is missing): CI must have them.  What CI may lack
(a GPU, network namespaces) passes ci_fails=False and skips there too.

The tests import it with the tests/ folder on sys.path:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import testenv
"""

import importlib.util
import os
import subprocess
import sys

SKIP = 77
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def in_ci():
    """True when the environment says CI (CI=true, 1 or yes, in any case)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip(reason, ci_fails=True):
    """Stop the test as skipped (exit 77), or, when ci_fails and CI=true, as failed (exit 1)."""
    sys.stdout.flush()
    if ci_fails and in_ci():
        print(f"FAIL: {reason} (required under CI=true)", flush=True)
        sys.exit(1)
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


def fail(msg):
    """Stop the test as failed (exit 1)."""
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def model_candidate():
    """Where the default model should be: STRATA_MODEL, else STRATA_MODEL_DIR/<file>, else
    ~/.cache/strata/models/<file> (as the strata binary and the C tests look)."""
    if os.environ.get("STRATA_MODEL"):
        return os.environ["STRATA_MODEL"]
    d = os.environ.get("STRATA_MODEL_DIR") or os.path.join(
        os.environ.get("HOME", "/root"), ".cache", "strata", "models")
    return os.path.join(d, DEFAULT_MODEL_FILE)


def model_path():
    """The default model's path; skips (or fails under CI=true) when it is not there."""
    p = model_candidate()
    if not os.path.isfile(p) or not os.access(p, os.R_OK):
        skip(f"model not found: {p} (set STRATA_MODEL, or run scripts/fetch-model)")
    return p


def strata_bin():
    """STRATA_BIN, the binary under test (CTest sets it).  Missing is a failure, not a skip:
    without it the test is being run wrongly, not on a machine that lacks something."""
    b = os.environ.get("STRATA_BIN")
    if not b or not os.access(b, os.X_OK):
        fail(f"STRATA_BIN is not an executable strata binary: {b!r} (CTest sets it)")
    return b


def require(*modules):
    """Check that the named modules (a test tool each) are installed, without importing them
    (an import can have to wait for settings, e.g. ref_llama's BLAS thread count before
    numpy loads); skip (fail under CI=true) naming the first one missing."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            skip(f"Python package missing: {name} (run with the project's venv: scripts/setup)")


def peer_tool(name, cpu="native"):
    """The path of llama.cpp tool `name` (llama-perplexity, llama-tokenize, ...) as
    scripts/peer-bin finds it: $STRATA_PEER_BIN, else the prebuilt peer in
    ../shared/peer/llama.cpp-*/bin, else the scripts/peer-llamacpp cache.  Skips without
    it; under CI=true a missing peer is a failure, like a missing model."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([os.path.join(root, "scripts/peer-bin"), "--cpu", cpu, "--tool", name],
                       capture_output=True, text=True)
    if p.returncode == 0 and p.stdout.strip():
        return os.path.join(p.stdout.strip(), name)
    skip(f"llama.cpp peer not found: {p.stderr.strip()}")
