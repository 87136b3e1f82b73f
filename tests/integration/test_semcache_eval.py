#!/usr/bin/env python3
"""`strata semcache-eval` checked against NumPy (issue 28).  On 60 pairs of the labelled set
(the first 30 paraphrases and the first 30 unrelated pairs, so that a threshold can pass on
so few) with 3 splits: the ROC AUC recomputed from the --csv-pairs similarities by an O(n^2)
comparison of every positive with every negative; each split's hits and wrong hits recounted
from the CSV rows at the threshold the JSON reports, on the test pairs it lists; the
threshold's Clopper-Pearson bound on its calibration pairs recomputed (exact binomial sums)
and at most delta; the rates, bounds and flags consistent with the counts.  Then a tiny
--index run (1000 entries of width 64, no model) whose numbers must parse and agree.
Needs the default model and NumPy; a few seconds on two cores."""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail and not ok else ''}")
    if not ok:
        failures.append(name)


def binom_cdf(k, n, p):
    """P(X <= k), X ~ Binomial(n, p), summed exactly."""
    return sum(math.comb(n, i) * p**i * (1 - p)**(n - i) for i in range(k + 1))


def cp_upper(k, n, alpha):
    """The one-sided (1 - alpha) Clopper-Pearson upper bound: the p with P(X <= k) = alpha."""
    if n == 0 or k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binom_cdf(k, n, mid) > alpha else (lo, mid)
    return hi


def subset(src, path):
    """The first 30 paraphrases and the first 30 unrelated pairs of src, in file order."""
    keep, n = [], {"paraphrase": 0, "unrelated": 0}
    for line in open(src, encoding="utf-8"):
        o = json.loads(line)
        if o["kind"] in n and n[o["kind"]] < 30:
            n[o["kind"]] += 1
            keep.append(o)
    with open(path, "w", encoding="utf-8") as f:
        for o in keep:
            f.write(json.dumps(o) + "\n")
    return keep


def check_auc(np, doc, rows):
    sim = np.array([float(r["similarity"]) for r in rows], dtype=np.float64)
    same = np.array([r["same"] == "1" for r in rows])
    pos, neg = sim[same], sim[~same]
    auc = ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean()
    check("AUC (all) = NumPy's O(n^2) Mann-Whitney", abs(doc["auc"]["all"] - auc) < 1e-12,
          (doc["auc"]["all"], auc))
    kinds = np.array([r["kind"] for r in rows])
    neg_u = sim[~same & (kinds == "unrelated")]
    auc_u = ((pos[:, None] > neg_u[None, :]) + 0.5 * (pos[:, None] == neg_u[None, :])).mean()
    check("AUC (vs unrelated) = NumPy's", abs(doc["auc"]["by_kind"]["unrelated"] - auc_u) < 1e-12,
          (doc["auc"]["by_kind"], auc_u))
    check("similarities are cosines of unit vectors", bool(np.all(np.abs(sim) <= 1 + 1e-5)))
    return sim, same


def check_row(np, sim, same, test, calib, d, r, alpha):
    """One split's row for delta d against the CSV: counts, rates, bounds, flags."""
    t, tag = r["threshold"], f"split {r['split']} delta {d['delta']}"
    hit = sim[test] >= t - 1e-9 if t is not None else np.zeros(len(test), dtype=bool)
    hits, wrong = int(hit.sum()), int((hit & ~same[test]).sum())
    npos = int(same[test].sum())
    ok = (r["hits"] == hits and r["wrong"] == wrong and r["test_pairs"] == len(test)
          and r["test_positive"] == npos and hits >= wrong
          and abs(r["hit_rate"] - hits / len(test)) < 1e-12
          and abs(r["recall"] - (hits - wrong) / npos) < 1e-12)
    check(f"{tag}: hits {hits}, wrong {wrong} recounted from the CSV", ok, r)
    if hits:
        up = cp_upper(wrong, hits, 0.05)
        lo = 1 - cp_upper(hits - wrong, hits, 0.05) if wrong else 0.0
        rate = wrong / hits
        check(f"{tag}: wrong rate and its 95 % bounds", abs(r["wrong_rate"] - rate) < 1e-12
              and abs(r["wrong_upper"] - up) < 1e-6 and abs(r["wrong_lower"] - lo) < 1e-6
              and r["above_delta"] == (rate > d["delta"])
              and r["flagged"] == (r["wrong_lower"] > d["delta"]), (r, up, lo))
    else:
        check(f"{tag}: no hits, no rate", r["wrong_rate"] is None and not r["flagged"], r)
    if t is not None:  # the level passed on the calibration pairs: its bound is <= delta
        at = sim[calib] >= t - 1e-9
        n, k = int(at.sum()), int((at & ~same[calib]).sum())
        check(f"{tag}: threshold {t} passes on its calibration pairs ({k} wrong of {n})",
              n > 0 and cp_upper(k, n, alpha) <= d["delta"] + 1e-9)


def check_bound(np, doc, sim, same, alpha):
    b = doc["bound"]
    n = len(sim)
    check("calibration/test sizes", b["calib_pairs"] == 36 and b["test_pairs"] == 24, b)
    passed = 0
    for sp, test in enumerate(b["test_sets"]):
        test = np.array(test)
        ok = (len(test) == 24 and len(set(test.tolist())) == 24
              and test.min() >= 0 and test.max() < n)
        check(f"split {sp}: its test pairs are 24 distinct pairs", ok)
        calib = np.setdiff1d(np.arange(n), test)
        for d in b["deltas"]:
            check_row(np, sim, same, test, calib, d, d["rows"][sp], alpha)
            passed += d["rows"][sp]["threshold"] is not None
    check("some split's threshold passed (the counts above are not all zero)", passed > 0)
    for d in b["deltas"]:
        hits = sum(r["hits"] for r in d["rows"])
        wrong = sum(r["wrong"] for r in d["rows"])
        ok = d["hits"] == hits and d["wrong"] == wrong and d["splits_flagged"] == sum(
            r["flagged"] for r in d["rows"]) and len(d["rows"]) == 3
        if hits:
            ok = ok and abs(d["pooled_wrong_rate"] - wrong / hits) < 1e-12
        check(f"delta {d['delta']}: pooled counts are the rows' sums", ok, d)


def check_index(bin_, d):
    j = os.path.join(d, "index.json")
    p = subprocess.run([bin_, "semcache-eval", "--index", "1000", "--ann", "2000", "--queries",
                        "20", "--dim", "64", "--json", j], capture_output=True, text=True,
                       timeout=60)
    check("--index run exits 0", p.returncode == 0, p.stderr)
    if p.returncode:
        return
    doc = json.load(open(j))
    x = doc["index"][0] if doc.get("index") else {}
    ok = (x.get("entries") == 1000 and x.get("dim") == 64 and x.get("queries") == 20
          and 0 < x["p50_us"] <= x["p99_us"] and x["lookups_per_s"] > 0
          and x["table_bytes"] == 1000 * 64 * 2 and "auc" not in doc)
    check("--index JSON: entries, width, p50 <= p99, table bytes; no model run", ok, doc)
    line = [l for l in p.stdout.splitlines() if l.split()[:1] == ["1000"]]
    check("--index table has the row", len(line) == 1 and len(line[0].split()) == 7, p.stdout)
    # the approximate index: near-duplicate queries of 64-wide random entries are found
    a = doc["ann"][0] if doc.get("ann") else {}
    check("--ann JSON: entries, recall@1 against the brute force, times",
          a.get("entries") == 2000 and a.get("queries") == 20 and a["recall_at_1"] >= 0.9
          and 0 < a["p50_us"] <= a["p99_us"] and a["build_s"] > 0, doc)


def check_answers(bin_, model, d, keep):
    """--answers: "same" is the model's greedy answers being equal (whitespace aside); the
    oracle is `strata generate --chat --greedy` on the first pairs' two questions."""
    few = os.path.join(d, "few.jsonl")
    with open(few, "w") as f:
        for o in keep[:4] + keep[-2:]:
            f.write(json.dumps(o) + "\n")
    j, c = os.path.join(d, "ans.json"), os.path.join(d, "ans.csv")
    p = subprocess.run([bin_, "semcache-eval", "-m", model, "-t", "2", "-f", few, "--answers",
                        "24", "--splits", "1", "--json", j, "--csv-pairs", c],
                       capture_output=True, text=True, timeout=120)
    check("--answers run exits 0", p.returncode == 0, p.stderr)
    if p.returncode:
        return
    doc = json.load(open(j))
    rows = list(csv.DictReader(open(c, encoding="utf-8")))
    gen = {}

    def answer(q):
        if q not in gen:
            out = subprocess.run([bin_, "generate", "-m", model, "--chat", "--greedy", "-n", "24",
                                  "-t", "2", "-p", q], capture_output=True, text=True, timeout=120)
            gen[q] = " ".join(out.stdout.split())
        return gen[q]
    want = [str(int(answer(r["a"]) == answer(r["b"]))) for r in rows]
    check("--answers: same iff `strata generate` answers both alike",
          [r["same"] for r in rows] == want and doc["oracle"] == "answers"
          and doc["positive"] == want.count("1")
          and doc["answers_agree_with_labels"] == sum(
              w == str(int(o["same"])) for w, o in zip(want, keep[:4] + keep[-2:])),
          (rows, want, doc.get("answers_agree_with_labels")))


def main():
    testenv.require("numpy")
    import numpy as np
    model = testenv.model_path()
    bin_ = testenv.strata_bin()
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    alpha = 0.2
    with tempfile.TemporaryDirectory() as d:
        pairs = os.path.join(d, "pairs.jsonl")
        keep = subset(os.path.join(src, "tests", "data", "semcache_pairs.jsonl"), pairs)
        j, c = os.path.join(d, "out.json"), os.path.join(d, "pairs.csv")
        p = subprocess.run([bin_, "semcache-eval", "-m", model, "-t", "2", "-f", pairs,
                            "--splits", "3", "--deltas", "0.1,0.5", "--alpha", str(alpha),
                            "--min-obs", "5", "--calib-frac", "0.6", "--json", j,
                            "--csv-pairs", c], capture_output=True, text=True, timeout=120)
        print(p.stdout)
        if p.returncode:
            testenv.fail(f"semcache-eval exited {p.returncode}: {p.stderr}")
        doc = json.load(open(j))
        rows = list(csv.DictReader(open(c, encoding="utf-8")))
        check("CSV: a row per pair, in file order", len(rows) == 60 and all(
            r["a"] == o["a"] and r["b"] == o["b"] and r["kind"] == o["kind"]
            and r["same"] == str(int(o["same"])) for r, o in zip(rows, keep)))
        check("JSON: pairs and positives", doc["pairs"] == 60 and doc["positive"] == 30, doc)
        sim, same = check_auc(np, doc, rows)
        check_bound(np, doc, sim, same, alpha)
        check_index(bin_, d)
        check_answers(bin_, model, d, keep)
    print(f"{'PASS' if not failures else 'FAIL'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
