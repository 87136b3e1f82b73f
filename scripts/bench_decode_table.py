"""bench_decode_table.py DIR - the table of a scripts/bench-decode folder: per (shape, type,
depth) and side, the median and range of prompt and generation tokens/s over the alternations,
the ratio strata / llama.cpp, and generation as a fraction of the bandwidth bound (the N-thread
read bandwidth in DIR/machine.txt over the weight bytes strata reports reading per token; the
same bytes for both sides, as both read the same GGUF)."""

import collections
import os
import re
import statistics
import sys


def main(d):
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    mib = {}
    for line in open(os.path.join(d, "rows.tsv")):
        f = line.rstrip("\n").split("\t")
        if len(f) < 8:
            continue
        shape, ty, depth, _rep, side, pp, tg = f[:7]
        key = (shape, ty, int(depth))
        rows[key][side + " pp"].append(float(pp))
        rows[key][side + " tg"].append(float(tg))
        if side == "strata" and len(f) > 8 and f[8]:
            mib[key] = float(f[8])
    machine = open(os.path.join(d, "machine.txt")).read()
    bw = None
    m = re.search(r"bandwidth: 1 thread [0-9.]+ GB/s, \d+ threads ([0-9.]+) GB/s", machine)
    if m:
        bw = float(m.group(1))
    print(machine.strip())
    print()

    def cell(v):
        return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})" if v else "–"

    def med(v):
        return statistics.median(v) if v else float("nan")

    print("| model | depth | runs | strata pp | llama.cpp pp | strata tg | llama.cpp tg | "
          "ratio pp / tg | tg bound | strata / llama.cpp of bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(rows):
        r = rows[key]
        n = min(len(r["strata tg"]), len(r["llama.cpp tg"]))
        ratio = (f"{med(r['strata pp']) / med(r['llama.cpp pp']):.2f}× / "
                 f"{med(r['strata tg']) / med(r['llama.cpp tg']):.2f}×")
        bound = frac = "–"
        if bw and key in mib:
            b = bw * 1e9 / (mib[key] * 1048576)
            bound = f"{b:.1f} tok/s"
            frac = f"{100 * med(r['strata tg']) / b:.0f} % / {100 * med(r['llama.cpp tg']) / b:.0f} %"
        print(f"| {key[0]} {key[1]} | {key[2]} | {n} | {cell(r['strata pp'])} | "
              f"{cell(r['llama.cpp pp'])} | {cell(r['strata tg'])} | {cell(r['llama.cpp tg'])} | "
              f"{ratio} | {bound} | {frac} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
