#!/usr/bin/env python3
"""No function of bin/ passes 100 lines (issue 38): a command is its flag table
(bin/cli_flags.h), a parse, and named steps, not one long main.  Reads the source only:
a definition starts at a line in column 0 that names a function and ends with '{' (its
signature may run over several lines) and ends at the next line that is '}' alone (the
layout .clang-format gives); its length counts both.  Needs no build and no model."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

MAX_LINES = 100
# a line that may start a definition: type words then name( in column 0, no '=' before '('
HEAD = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\(")


def functions(text):
    """[(name, first line (1-based), lines)] of the function definitions in C source text."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = HEAD.match(lines[i])
        if not m or lines[i].startswith(("typedef", "return", "else")) or "=" in lines[i][:m.end()]:
            i += 1
            continue
        j = i  # the signature ends at '{' (a definition) or ';' (a declaration)
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j == len(lines) or lines[j].rstrip().endswith(";"):
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != "}":
            k += 1
        out.append((m.group(1), i + 1, k - i + 1))
        i = k + 1
    return out


def self_test():
    """A made-up file: two definitions (one with a two-line signature), a prototype and a
    table, measured as the rule says."""
    src = ("static int s_a(int x);\n"
           "static const int s_t[] = {\n    1,\n};\n"
           "static int s_a(int x,\n                int y) {\n    return x + y;\n}\n"
           "\n"
           "int main(void) {\n    if (1) {\n        return 0;\n    }\n}\n")
    got = functions(src)
    assert got == [("s_a", 5, 4), ("main", 10, 5)], got


def main():
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    bin_dir = os.path.join(os.path.abspath(src), "bin")
    if not os.path.isdir(bin_dir):
        testenv.fail(f"no bin/ at {bin_dir} (STRATA_SRC)")
    self_test()
    found = []
    for name in sorted(os.listdir(bin_dir)):
        if name.endswith(".c"):
            text = open(os.path.join(bin_dir, name), encoding="utf-8").read()
            found += [(n, f"bin/{name}:{line}", size) for n, line, size in functions(text)]
    if len(found) < 50:
        testenv.fail(f"only {len(found)} functions found in bin/: the pattern is broken")
    found.sort(key=lambda f: -f[2])
    bad = [f for f in found if f[2] > MAX_LINES]
    for fn, where, size in bad:
        print(f"FAIL {where}: {fn} is {size} lines, more than {MAX_LINES} (split it into "
              f"named steps)")
    print("longest: " + ", ".join(f"{fn} {size}" for fn, _, size in found[:5]))
    print(f"{len(found)} functions of bin/ checked, {len(bad)} over {MAX_LINES} lines")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
