#!/usr/bin/env python3
"""bench_llamacpp_parallel.py - the llama.cpp peer for `strata bench serve`:
decode P sequences in parallel in one llama.cpp context (llama_decode with a
batch holding one token of every sequence, as llama.cpp's batched-bench and its
server with P slots do), greedy, and report aggregate generated tokens/s.
Each sequence first prefills its own prompt of -p tokens.

Not part of the tests: run it with a python that has llama-cpp-python
(see scripts/bench-vs-llamacpp)."""
import argparse
import random
import time

import llama_cpp as L
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-P", "--parallel", default="1,4,16")
    ap.add_argument("-p", "--n-prompt", type=int, default=48)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    rnd = random.Random(7)

    def argmax(ptr):
        return int(np.ctypeslib.as_array(ptr, shape=(n_vocab,)).argmax())

    print(f"llama.cpp {L.__version__}: {a.threads} threads, prompt {a.n_prompt}, {a.n_gen} tokens per sequence")
    for P in [int(x) for x in a.parallel.split(",")]:
        cp = L.llama_context_default_params()
        cp.n_ctx = P * (a.n_prompt + a.n_gen) + 64
        cp.n_batch = max(512, P * a.n_prompt)
        cp.n_ubatch = 512
        cp.n_seq_max = P
        cp.n_threads = a.threads
        cp.n_threads_batch = a.threads
        ctx = L.llama_init_from_model(model, cp)
        batch = L.llama_batch_init(cp.n_batch, 0, P)
        def add(tok, pos, seq, logits):
            i = batch.n_tokens
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
            batch.n_tokens = i + 1
        t0 = time.perf_counter()
        batch.n_tokens = 0
        for s in range(P):
            for j in range(a.n_prompt):
                add(rnd.randrange(n_vocab), j, s, j == a.n_prompt - 1)
        assert L.llama_decode(ctx, batch) == 0
        nxt = []
        for s in range(P):
            nxt.append(argmax(L.llama_get_logits_ith(ctx, (s + 1) * a.n_prompt - 1)))
        t1 = time.perf_counter()
        for step in range(a.n_gen):
            batch.n_tokens = 0
            for s in range(P):
                add(nxt[s], a.n_prompt + step, s, True)
            assert L.llama_decode(ctx, batch) == 0
            for s in range(P):
                nxt[s] = argmax(L.llama_get_logits_ith(ctx, s))
        t2 = time.perf_counter()
        gen = P * a.n_gen
        print(f"parallel {P:3d}: prefill {P * a.n_prompt / (t1 - t0):8.1f} tok/s, "
              f"decode aggregate {gen / (t2 - t1):8.1f} tok/s, end-to-end {gen / (t2 - t0):8.1f} tok/s")
        L.llama_batch_free(batch)
        L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
