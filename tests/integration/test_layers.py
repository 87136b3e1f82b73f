#!/usr/bin/env python3
"""The layering of the source tree (../shared/DESIGN.md, "Layers"): dependencies point
downwards only.  Every `#include "..."` of every .c/.h/.cu file is resolved to the folder
that holds the header, and that folder must be one the including layer may use.  Above
all: kvstore/ and msgs/ include nothing from model/ (they know KV shapes and wire types,
not models).  Reads the source only; needs no build and no model."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

# layer -> the layers it may include (itself always)
ALLOWED = {
    "base": set(),
    "kernels": {"base"},
    "msgs": {"base"},
    "model": {"kernels", "base"},
    "kvstore": {"kernels", "base"},
    "router": {"base"},
    "sched": {"base"},
    "audit": {"msgs", "base"},
    "grammar": {"base"},
    "clients/c": {"msgs", "base"},
    "actors": {"router", "sched", "kvstore", "model", "kernels", "msgs", "clients/c", "audit",
               "base"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a path relative to the source root, or None (bin/, tests/, ...)."""
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


def main():
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    src = os.path.abspath(src)
    if not os.path.isdir(os.path.join(src, "kvstore")):
        testenv.fail(f"no source tree at {src} (STRATA_SRC)")
    headers = {}  # file name -> paths holding it (the build puts every layer on the path)
    files = []
    for layer in ALLOWED:
        for root, _, names in os.walk(os.path.join(src, layer)):
            for n in names:
                rel = os.path.relpath(os.path.join(root, n), src)
                if n.endswith(".h"):
                    headers.setdefault(n, []).append(rel)
                if n.endswith((".c", ".h", ".cu")):
                    files.append(rel)
    bad = []
    for rel in sorted(files):
        me = layer_of(rel)
        text = open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
        for inc in INCLUDE.findall(text):
            here = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if os.path.exists(os.path.join(src, here)):
                target = here
            elif os.path.exists(os.path.join(src, inc)):
                target = inc
            elif len(headers.get(os.path.basename(inc), [])) == 1:
                target = headers[os.path.basename(inc)][0]
            else:
                bad.append(f"{rel}: #include \"{inc}\" resolves to no single header")
                continue
            them = layer_of(target)
            if them is None or them == me or them in ALLOWED[me]:
                continue
            bad.append(f"{rel}: {me}/ includes {target} ({them}/ is not below {me}/)")
    for b in bad:
        print("FAIL " + b)
    print(f"{len(files)} files checked, {len(bad)} layering violation(s)")
    # the rule this test exists for, stated on its own
    assert ALLOWED["kvstore"].isdisjoint({"model", "msgs"}) and "model" not in ALLOWED["msgs"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
