#!/usr/bin/env python3
"""bench_peer_serve.py - load generator for the service comparison of
BENCHMARKS.md: the same chat requests to `strata serve` (ZeroMQ + MessagePack,
docs/PROTOCOL.md), to strata's OpenAI API (`strata serve --http`, docs/HTTP.md) or to
llama-server (HTTP /v1/chat/completions, streamed; the same client code for both HTTP
servers).

C clients (threads, one connection each) send requests back to back; every
request is a distinct chat prompt (no prefix-cache hits beyond the chat
template's system prompt), greedy (temperature 0), max_tokens N.  Prints one
line per concurrency level:

  clients C requests R tokens T wall W s agg X tok/s ttft_p50 A ms ttft_p99 B ms mean_tokens M

aggregate = completion tokens of all requests / wall time of the level
(prefill included); TTFT = client send -> first streamed token.  Prompts are
derived from --seed, so two runs with the same --seed send the same prompts
(give each pass its own seed so a pass never meets an earlier pass's prompts
in a cache).  Run by scripts/bench-vs-llamacpp service and scripts/bench-http, once
per side: strata, strata's --http and every configuration of the llama.cpp peer.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SUBJECTS = ["a lighthouse keeper", "a retired pilot", "a young baker", "a street musician",
            "a marine biologist", "a village doctor", "a chess champion", "a beekeeper",
            "a train conductor", "a museum guard", "a mountain guide", "a clockmaker",
            "a night nurse", "a ferry captain", "a librarian", "a glassblower"]
TASKS = ["Write a long story about {s} who finds {o} in {p}. Describe every scene in detail.",
         "Write a detailed diary entry of {s} on the day they found {o} in {p}.",
         "Explain step by step how {s} could use {o} found in {p}, with many details.",
         "Write a long letter from {s} to a friend about {o} they discovered in {p}."]
OBJECTS = ["an old map", "a silver key", "a broken radio", "a sealed letter", "a tiny robot",
           "a strange seed", "a golden compass", "a lost diary"]
PLACES = ["an abandoned station", "a flooded cellar", "a desert town", "a snowy forest",
          "a busy harbour", "a quiet island", "a city rooftop", "an old theatre"]


def prompts(seed, n):
    """n distinct prompts for this seed (the request number is in the text)."""
    out = []
    for i in range(n):
        k = seed * 7919 + i * 104729
        t = TASKS[k % len(TASKS)].format(s=SUBJECTS[(k // 4) % len(SUBJECTS)],
                                          o=OBJECTS[(k // 64) % len(OBJECTS)],
                                          p=PLACES[(k // 512) % len(PLACES)])
        out.append(f"Request {seed}-{i}. {t}")
    return out


def one_http(host, port, prompt, max_tokens):
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "stream": True,
                       "max_tokens": max_tokens, "temperature": 0, "top_k": 1,
                       "stream_options": {"include_usage": True}, "cache_prompt": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{host}:{port}: HTTP {r.status} {r.read()[:200]!r}")
    ttft, n_chunks, usage = None, 0, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            if (ch.get("delta") or {}).get("content"):
                n_chunks += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    c.close()
    n = usage["completion_tokens"] if usage else n_chunks
    return ttft, n


class StrataConn:
    def __init__(self, endpoint):
        sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
        import strata_client
        self.c = strata_client.StrataClient(endpoint, timeout=600)

    def one(self, prompt, max_tokens):
        t0 = time.perf_counter()
        ttft, n = None, 0
        for ev in self.c.generate(messages=[{"role": "user", "content": prompt}],
                                  max_tokens=max_tokens, temperature=0):
            if ev["type"] == "token" and ttft is None:
                ttft = time.perf_counter() - t0
            elif ev["type"] == "done":
                n = ev["usage"]["completion_tokens"]
        return ttft, n


def level(a, clients, seed):
    per = max(a.requests_per_client, -(-a.min_requests // clients))
    ps = prompts(seed, clients * per)
    res, errs = [], []
    lock = threading.Lock()

    def worker(ci):
        try:
            conn = StrataConn(a.endpoint) if a.engine == "strata" else None
            for j in range(per):
                p = ps[ci * per + j]
                if conn:
                    r = conn.one(p, a.max_tokens)
                else:
                    host, port = a.endpoint.split(":")
                    r = one_http(host, int(port), p, a.max_tokens)
                with lock:
                    res.append(r)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(repr(e))

    th = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    if errs:
        raise SystemExit(f"{a.engine}: {errs[0]}")
    toks = sum(n for _, n in res)
    tt = sorted(t for t, _ in res if t is not None)
    p99 = tt[min(len(tt) - 1, int(round(0.99 * (len(tt) - 1))))]
    print(f"clients {clients} requests {len(res)} tokens {toks} wall {wall:.2f} s "
          f"agg {toks / wall:.1f} tok/s ttft_p50 {statistics.median(tt) * 1000:.1f} ms "
          f"ttft_p99 {p99 * 1000:.1f} ms mean_tokens {toks / len(res):.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--engine", choices=["strata", "http", "llama"], required=True,
                    help="strata: the ZeroMQ protocol; http, llama: /v1/chat/completions")
    ap.add_argument("--endpoint", required=True,
                    help="strata: tcp://127.0.0.1:PORT; http, llama: 127.0.0.1:PORT")
    ap.add_argument("-c", "--clients", default="1,4,16")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--min-requests", type=int, default=8,
                    help="at least this many requests per level (default 8)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for k, c in enumerate(int(x) for x in a.clients.split(",")):
        level(a, c, a.seed * 100 + k)


if __name__ == "__main__":
    main()
