#!/usr/bin/env python3
"""docs/HACKING.md names the files to touch for each kind of change; every path it writes in
backquotes must exist, so the page cannot drift from the tree.  A path with a placeholder
(<name>, <family>_<isa>.c) is checked by its folder; one that starts with ../shared/ is
checked beside the checkout when that folder is there.  Reads the source only."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

PATH = re.compile(r"`([A-Za-z0-9_.<>/-]+)`")
EXT = (".c", ".h", ".cu", ".py", ".md", ".txt", ".json")


def looks_like_path(s):
    return "/" in s and (s.endswith(EXT) or s.startswith("scripts/") or s.endswith("/"))


def main():
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    src = os.path.abspath(src)
    page = os.path.join(src, "docs", "HACKING.md")
    if not os.path.exists(page):
        testenv.fail("docs/HACKING.md is missing")
    text = open(page, encoding="utf-8").read()
    paths = sorted({p for p in PATH.findall(text) if looks_like_path(p)})
    if len(paths) < 30:
        testenv.fail(f"docs/HACKING.md names only {len(paths)} paths: the pattern is broken")
    missing = []
    for p in paths:
        if p.startswith("../"):
            if not os.path.isdir(os.path.join(src, "..", p.split("/")[1])):
                continue  # shared/ is not beside this checkout
            full = os.path.normpath(os.path.join(src, p))
        else:
            full = os.path.join(src, p)
        if "<" in p:  # a placeholder: its folder must exist
            full = os.path.dirname(full.split("<", 1)[0] + "x")
            ok = os.path.isdir(full)
        else:
            ok = os.path.exists(full)
        if not ok:
            missing.append(p)
    if missing:
        print("FAIL: docs/HACKING.md names paths that do not exist:", flush=True)
        for p in missing:
            print("  " + p)
        sys.exit(1)
    print(f"ok: docs/HACKING.md names {len(paths)} paths, all present")


if __name__ == "__main__":
    main()
