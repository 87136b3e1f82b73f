#!/usr/bin/env python3
"""One format, enforced: every C, header and CUDA source of the tree is as the project's
.clang-format writes it (clang-format --dry-run --Werror).  Fix a failure with
`clang-format -i FILE` (scripts/setup installs clang-format from Debian).  Reads the
source only; needs no build and no model.  Without clang-format it skips (77), and
under CI=true it fails: CI must check the format."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

EXTS = (".c", ".h", ".cu", ".cc")
SKIP_DIRS = {".git", "build", "build-asan"}


def sources(src):
    """Every tracked source (git ls-files), or every source under src outside build trees."""
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode()
        files = [f for f in out.split("\0") if f.endswith(EXTS)]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for n in names:
            if n.endswith(EXTS):
                files.append(os.path.relpath(os.path.join(root, n), src))
    return sorted(files)


def main():
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    src = os.path.abspath(src)
    exe = shutil.which("clang-format")
    if not exe:
        testenv.skip("clang-format is not installed (scripts/setup installs it)")
    files = sources(src)
    if len(files) < 50:
        testenv.fail(f"found only {len(files)} sources under {src}")
    bad = []
    for i in range(0, len(files), 64):
        chunk = files[i:i + 64]
        r = subprocess.run([exe, "--dry-run", "--Werror", "--style=file"] + chunk, cwd=src,
                           capture_output=True, text=True)
        if r.returncode != 0:
            for line in r.stderr.splitlines():
                if ": error:" in line:
                    bad.append(line.split(":", 1)[0])
            if not bad:
                testenv.fail(f"clang-format failed: {r.stderr.strip()[:400]}")
    bad = sorted(set(bad))
    if bad:
        print(f"FAIL: {len(bad)} file(s) not formatted (clang-format -i FILE):", flush=True)
        for f in bad:
            print("  " + f)
        sys.exit(1)
    print(f"ok: {len(files)} sources formatted as .clang-format says")


if __name__ == "__main__":
    main()
