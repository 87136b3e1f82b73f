#!/usr/bin/env python3
"""bench_trace.py - what tracing costs (issue 13): one `strata serve` (thread mode, default
model), 16 concurrent streaming clients sending greedy chat requests, with "trace": true
and without, alternated ROUNDS times on the same server (the same prompts on both sides,
so the prefix cache serves both alike).  Prints generated tokens/s per run and the
medians with ranges; raw output to OUT.

  usage: scripts/bench-trace [--rounds 5] [--clients 16] [--max-tokens 64] [--out DIR]
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import msgpack
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_chaos import PROMPTS  # noqa: E402  the same 16 prompts


def one_round(ep, n_clients, max_tokens, trace):
    ctx = zmq.Context.instance()
    toks = [0] * n_clients

    def client(i):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(ep)
        s.send(msgpack.packb({"type": "generate", "v": 1, "id": "c%d" % i, "temperature": 0,
                              "max_tokens": max_tokens, "trace": trace, "messages": [
                                  {"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}))
        while True:
            if not s.poll(120000):
                raise RuntimeError("no answer")
            m = msgpack.unpackb(s.recv(), raw=False)
            if m["type"] == "token":
                toks[i] += 1
            elif m["type"] in ("done", "error"):
                if m["type"] == "error":
                    raise RuntimeError(m)
                break
        s.close()

    t0 = time.time()
    ths = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return sum(toks) / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "strata"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  time.strftime("%Y-%m-%d") + "-trace"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ep = "tcp://127.0.0.1:%d" % port
    log = open(os.path.join(a.out, "serve.log"), "w")
    srv = subprocess.Popen([a.bin, "serve", "--endpoint", ep], stdout=log, stderr=log)
    try:
        for _ in range(300):
            if subprocess.run([a.bin, "client", "-e", ep, "--health", "--timeout", "1"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        one_round(ep, a.clients, a.max_tokens, False)  # warm-up: caches on both sides
        res = {True: [], False: []}
        lines = []
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for tr in order:
                x = one_round(ep, a.clients, a.max_tokens, tr)
                res[tr].append(x)
                lines.append("round %d trace %-3s: %.1f tok/s" % (r + 1, "on" if tr else "off", x))
                print(lines[-1], flush=True)
        on, off = statistics.median(res[True]), statistics.median(res[False])
        summary = ("%d clients, %d tokens, %d rounds: trace on %.1f (%.1f..%.1f), off %.1f "
                   "(%.1f..%.1f) tok/s; on/off %.3f"
                   % (a.clients, a.max_tokens, a.rounds, on, min(res[True]), max(res[True]), off,
                      min(res[False]), max(res[False]), on / off))
        print(summary)
        with open(os.path.join(a.out, "runs.txt"), "w") as f:
            f.write("\n".join(lines + [summary]) + "\n")
        with open(os.path.join(a.out, "cpu.txt"), "w") as f:
            f.write(subprocess.run(["lscpu"], capture_output=True, text=True).stdout)
    finally:
        srv.terminate()
        srv.wait(30)


if __name__ == "__main__":
    main()
