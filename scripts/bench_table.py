#!/usr/bin/env python3
"""bench_table.py - the Markdown tables of a comparison with llama.cpp, from its .tsv rows
(scripts/bench-vs-llamacpp, scripts/bench-http).

A row is: section, test, side, run, value (tab-separated).  side is "strata" (or another
strata side, e.g. "http") or "llama:BUILD/OMP" for one configuration of the peer (its build,
native or avx2, and OMP_WAIT_POLICY, unset or passive); a bare "llama" (results written
before the configurations existed) is one configuration.  For every test the peer's figure
is its best configuration: the highest median for a rate, the lowest for a time (a test
whose name has "ms" in it).  Prints two tables: the comparison (each strata side's median
[min-max], the peer's best median [min-max] and which configuration it was, the ratio of
medians with two significant figures), then every configuration of the peer, so that the
choice can be checked.  A value that is not a number (a run that printed nothing) is
counted as failed and left out.
"""
import collections
import math
import statistics
import sys


def sig2(x):
    """x with two significant figures (5.98 -> 6.0, 0.138 -> 0.14, 12.3 -> 12)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    d = max(0, 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{d}f}"


def cell(v):
    if not v:
        return "—"
    return f"{statistics.median(v):.1f} [{min(v):.1f}–{max(v):.1f}]"


def load(path):
    d = collections.defaultdict(list)
    tests, ours, peers = [], [], []
    failed = collections.Counter()
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) != 5:
            continue
        _, test, side, _, v = f
        if side == "llama":
            side = "llama:llama"
        if test not in tests:
            tests.append(test)
        lst = peers if side.startswith("llama:") else ours
        if side not in lst:
            lst.append(side)
        try:
            d[test, side].append(float(v))
        except ValueError:
            failed[test, side] += 1
    return d, tests, ours, peers, failed


def best(d, test, peers):
    """(configuration, values) of the peer's best configuration for this test."""
    cand = [(statistics.median(d[test, p]), p) for p in peers if d[test, p]]
    if not cand:
        return None, []
    lower = "ms" in test.split()
    m, p = (min if lower else max)(cand)
    return p, d[test, p]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench_table.py TSV")
    d, tests, ours, peers, failed = load(sys.argv[1])
    names = {"strata": "strata", "http": "strata HTTP"}
    head = ["test"] + [f"{names.get(s, s)} median [min–max]" for s in ours]
    head += ["llama.cpp best median [min–max]", "best configuration", "runs"]
    head += [f"{names.get(s, s)} / llama.cpp" for s in ours]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for t in tests:
        p, pv = best(d, t, peers)
        row = [t] + [cell(d[t, s]) for s in ours]
        row += [cell(pv), p[len("llama:"):] if p else "—"]
        row.append("/".join(str(len(d[t, s])) for s in ours) + f"/{len(pv)}")
        for s in ours:
            ok = d[t, s] and pv and statistics.median(pv) > 0
            row.append(sig2(statistics.median(d[t, s]) / statistics.median(pv)) + "×" if ok else "—")
        print("| " + " | ".join(row) + " |")
    if peers:
        print()
        print("Every llama.cpp configuration (build/OMP_WAIT_POLICY), median [min–max] (runs):")
        print()
        print("| test | " + " | ".join(p[len("llama:"):] for p in peers) + " |")
        print("|---|" + "---|" * len(peers))
        for t in tests:
            print(f"| {t} | " + " | ".join(f"{cell(d[t, p])} ({len(d[t, p])})" for p in peers) + " |")
    if failed:
        print()
        print("Failed runs (no figure): " +
              ", ".join(f"{t} {s}: {n}" for (t, s), n in sorted(failed.items())))


if __name__ == "__main__":
    main()
