#!/usr/bin/env python3
"""bench_llamacpp.py - the llama.cpp peer for `strata bench-model`: the same
measurement (prompt processing of -p random tokens in one batch, then -n
generated tokens one at a time, median of -r runs) through llama-cpp-python.

Not part of the test suite and not installed by scripts/setup: install the peer
yourself, e.g. CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python in a
separate venv, and run this script with that venv's python.
"""
import argparse
import random
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.n_prompt + a.n_gen + 16, n_batch=a.n_prompt,
                          n_ubatch=a.n_prompt, n_threads=a.threads, n_threads_batch=a.threads,
                          verbose=False)
    rnd = random.Random(42)
    toks = [rnd.randrange(llm.n_vocab()) for _ in range(a.n_prompt)]
    llm.reset()
    llm.eval(toks[:16])  # warm-up
    pp, tg = [], []
    for k in range(a.reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks)
        t1 = time.perf_counter()
        for i in range(a.n_gen):
            llm.eval([toks[i % len(toks)]])
        t2 = time.perf_counter()
        pp.append(a.n_prompt / (t1 - t0))
        tg.append(a.n_gen / (t2 - t1))
        print(f"run {k + 1}/{a.reps}: pp{a.n_prompt} {pp[-1]:.1f} tok/s, tg{a.n_gen} {tg[-1]:.1f} tok/s",
              flush=True)
    print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) threads {a.threads}")
    print(f"pp{a.n_prompt}: {statistics.median(pp):.1f} tok/s (median of {a.reps})")
    print(f"tg{a.n_gen}: {statistics.median(tg):.1f} tok/s (median of {a.reps})")


if __name__ == "__main__":
    main()
