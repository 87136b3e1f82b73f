#!/usr/bin/env python3
"""bench_kv_routing.py - the cross-worker prefix-hit rate of KV-event-fed routing against
least-loaded routing (issue 27, docs/KV_EVENTS.md), on a multi-turn chat trace.

Topology: `strata serve --workers W --threads 1` (default W 4), thread mode: every worker
has its own T0 KV pool and publishes its own events on its own PUB socket (port + i), and
the router follows them over TCP loopback exactly as it would across hosts; process mode
would change where the actors run, not what the router sees, so it is not used.  The KV
tier manager is off (--no-tiers) unless --tiers: with it a worker could promote another
worker's evicted blocks from the shared T1 and count them as cached, which the router
cannot see.  Each worker's pool is --kv-blocks (default 1024 blocks of 16 = 16384
positions), more than the whole trace's distinct blocks (printed), so nothing is evicted:
the summary shows each mode's `worker<i>.kv.t0.evictions`, which should be 0.

The trace: C conversations (default 16) x T turns (default 4).  Every conversation has the
same system prompt, its own first user message (a topic and a paragraph of notes) and
follow-up questions; turn t's `messages` are the system prompt, the earlier user turns and
the answers the server actually gave (greedy, `max_tokens` --max-tokens), then the new
user message.  The order is fixed by --seed: round t sends turn t of every conversation
in a seeded shuffle; requests go out strictly in that order, at most --concurrency
(default 4) in flight, a turn waiting for its conversation's previous turn to end.  The
same trace runs once per mode against a fresh server, every mode with
`--kv-events tcp://127.0.0.1:PORT` (the same events and the same subscriber work):
  w1  --prefix-weight 1   event-fed (the default weight)
  w0  --prefix-weight 0   by load only
  w4  --prefix-weight 4   a cached token worth 4 queued ones

Per mode the summary reports: hit rate = sum of `usage.cached_tokens` / sum of
`usage.prompt_tokens` over every request, and over turns >= 2 only; the oracle; TTFT p50
and p99 (client side: the send to the first `token` event); wall time; requests per worker
(the `dispatch` step of each request's trace, `"trace": true` in every mode); and the
router's and workers' counters (router.prefix.*, worker<i>.kv.t0.hit_tokens, evictions).

The oracle: the prompt tokens an unbounded cache shared by every worker would have held.
For each request, the longest prefix of its prompt, in full blocks of 16, shared with any
earlier request's tokens -- the prompt of a request sent before it, and the prompt and
answer of a request that ended before it was sent (answer: the generated ids but the last,
whose KV is never computed) -- and at most prompt_tokens - 1 (a worker always computes the
last prompt token, kv_cache_attach_prefix).  Token ids exactly as the service has them:
the answer's ids are the `token` events'; the prompt's ids are computed after the mode
ends with the service's own code -- `strata chat-template --bos ROLE TEXT ...` renders the
messages with the chat template the tokenizer actor uses (model_tokenizer_chat, BOS text
when the model adds BOS) and `strata tokenize -f FILE` encodes that with special tokens
parsed, as the tokenizer actor encodes a rendered chat prompt -- and each is checked
against the `done`'s `usage.prompt_tokens` (a mismatch is counted in the summary).  The
trace event carries no token ids and a raw `prompt` would not parse the chat template's
special tokens, so this is the exact way without changing the server.

No --kv-events-replay: in this strata (921615a) a router with kv_events_replay_from and 4
or more workers registers 2 x W KV sockets in its actor loop (8 slots, S_MAX_SOCKS in
actors/actor_loop.c) before its inbox, whose registration then fails unchecked: the router
never answers a ping or dispatches (health: router "starting"; requests end with error
internal after 30 s).  Without replay a batch the router's SUB misses (the workers'
first, AllBlocksCleared, when the SUB joins late) is not asked for again; the summary
lists router.kv_events.gaps.

Chunks: each mode's rows (one JSON line per request, with its token ids) and counters are
written when the mode ends (mode-w1.jsonl, mode-w1.stats.json, serve-w1.log); a rerun with
the same options skips finished modes and only rewrites summary.md.  Output:
bench/results/DATE-kv-routing/ (--out).

  usage: scripts/bench-kv-routing [--quick] [--modes 1,0,4] [--conversations 16] [--turns 4]
                                  [--concurrency 4] [--workers 4] [--max-tokens 48]
                                  [--kv-blocks 1024] [--seed 1] [--tiers] [--out DIR]
  full run: about 1-3 minutes on 2 cores (3 modes of 64 requests, each on a fresh
  server; the default SmolLM2-135M); --quick: about 5 s.
"""
import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_kv_common as kc  # noqa: E402

BLOCK = 16

SYSTEM = ("You are a careful assistant for a small engineering team. Answer in plain "
          "English, in two or three sentences, without lists or code unless asked. If a "
          "question is unclear, answer the most likely reading of it and say so briefly.")

TOPICS = [
    ("a bakery's ordering system", "Orders arrive by phone and web; the oven schedule is "
     "printed each morning; rye bread needs a starter fed twelve hours ahead."),
    ("a bicycle repair shop", "Customers drop bikes off before nine; spare tubes run out "
     "on Mondays; the workshop has two stands and one truing jig."),
    ("a small public library", "Returns pile up after weekends; the catalogue runs on an "
     "old server; children's books are the most borrowed section."),
    ("a community garden", "Forty plots share three water taps; compost is turned on "
     "Saturdays; tomatoes fail when the August heat comes early."),
    ("a city bus timetable", "Buses bunch on the ring road at rush hour; the night line "
     "runs hourly; drivers change shifts at the central depot."),
    ("a weather station network", "Twelve stations report every ten minutes over radio; "
     "two go silent in heavy snow; batteries are swapped each spring."),
    ("a school's exam timetable", "Three halls seat two hundred; mathematics and physics "
     "must not clash; late entries arrive until the last week."),
    ("a hospital's linen supply", "Wards order linen each night; the laundry runs two "
     "shifts; surgical gowns are tracked separately from sheets."),
    ("a ferry booking service", "Cars and foot passengers share one deck; storms cancel "
     "sailings at short notice; refunds take a week to process."),
    ("a museum's lending archive", "Objects leave only with a courier; humidity logs go "
     "with every crate; insurance values are reviewed each year."),
    ("a farm's irrigation plan", "Three fields draw from one well; the pump fails when "
     "the level drops; maize needs water most in July."),
    ("a choir's rehearsal schedule", "Sixty singers in four parts; the hall is free on "
     "Tuesdays only; concerts come in December and June."),
    ("a warehouse's picking routes", "Pickers walk twelve aisles; fast movers sit near "
     "the dock; the scanner batteries last half a shift."),
    ("a radio station's playlist", "Music and talk alternate every twenty minutes; the "
     "news comes on the hour; local bands get the evening slot."),
    ("a ski lift's maintenance", "Six chairlifts and two drag lifts; cables are checked "
     "every morning; wind above sixty kilometres an hour stops them."),
    ("a recycling depot", "Glass, paper and metals are sorted by hand; the baler jams on "
     "wet cardboard; collections run twice a week."),
]

FOLLOW_UPS = [
    "What is the single biggest risk in {t}, and why?",
    "Suggest one cheap change that would make {t} run more smoothly.",
    "How would you explain the main trade-off in {t} to a new employee?",
    "What should be measured first to know whether {t} is improving?",
    "Name one thing that could go wrong next winter with {t}.",
    "Summarise what we discussed about {t} in one sentence.",
]


def conversation_turn(c, t):
    """The user message of conversation c's turn t (1-based)."""
    topic, notes = TOPICS[c % len(TOPICS)]
    name = topic if c < len(TOPICS) else "%s (site %d)" % (topic, c // len(TOPICS) + 1)
    if t == 1:
        return ("I am reviewing %s. My notes so far: %s I would like your help thinking "
                "it through, one question at a time. First: what would you look at first, "
                "and why?" % (name, notes))
    return FOLLOW_UPS[(c + t) % len(FOLLOW_UPS)].format(t=name)


def schedule(n_conv, n_turns, seed):
    """[(conversation, turn)] in send order: round t is turn t of every conversation, in a
    shuffle drawn from seed."""
    rng = random.Random(seed)
    order = []
    for t in range(1, n_turns + 1):
        convs = list(range(n_conv))
        rng.shuffle(convs)
        order += [(c, t) for c in convs]
    return order


def run_mode(bin_path, weight, a, out):
    """Run the trace against a fresh server with --prefix-weight weight; returns (rows,
    counters, wall seconds)."""
    pub = kc.free_port(a.workers)  # worker i publishes on pub + i
    # no --kv-events-replay: with it the router of 4 or more workers never starts (its 2 x 4
    # KV sockets fill the actor loop's 8 slots before its inbox; see the header)
    args = ["--workers", str(a.workers), "--threads", "1", "--kv-blocks", str(a.kv_blocks),
            "--max-batch", str(a.max_batch), "--kv-events", "tcp://127.0.0.1:%d" % pub,
            "--prefix-weight", str(weight)]
    if not a.tiers:
        args.append("--no-tiers")
    order = schedule(a.conversations, a.turns, a.seed)
    history = {c: [{"role": "system", "content": SYSTEM}] for c in range(a.conversations)}
    busy = set()  # conversations with a request in flight
    rows, flight = [], {}
    with kc.Serve(bin_path, args, os.path.join(out, "serve-w%s.log" % weight)) as srv:
        time.sleep(0.5)  # the router's SUB sockets see the workers' first batches
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(srv.endpoint)
        t0 = time.monotonic()
        nxt = 0
        while nxt < len(order) or flight:
            while (nxt < len(order) and len(flight) < a.concurrency
                   and order[nxt][0] not in busy):
                c, t = order[nxt]
                msgs = history[c] + [{"role": "user", "content": conversation_turn(c, t)}]
                rid = "c%dt%d" % (c, t)
                sock.send(msgpack.packb({
                    "type": "generate", "v": 1, "id": rid, "messages": msgs,
                    "max_tokens": a.max_tokens, "temperature": 0, "trace": True},
                    use_bin_type=True))
                flight[rid] = {"conv": c, "turn": t, "seq": nxt, "messages": msgs,
                               "sent": time.monotonic() - t0, "first": None, "ids": [],
                               "text": "", "worker": None}
                busy.add(c)
                nxt += 1
            if not sock.poll(a.request_timeout * 1000):
                sys.exit("mode w%s: no event for %d s (in flight: %s)" % (
                    weight, a.request_timeout, sorted(flight)))
            m = msgpack.unpackb(sock.recv(), raw=False)
            r = flight.get(m.get("id"))
            if r is None:
                continue
            if m["type"] == "token":
                if r["first"] is None:
                    r["first"] = time.monotonic() - t0
                r["ids"].append(m["token"])
                r["text"] += m["text"]
            elif m["type"] == "trace":
                for st in m["steps"]:
                    w = re.match(r"worker(\d+)", st.get("why", ""))
                    if st.get("what") == "dispatch" and w:
                        r["worker"] = int(w.group(1))
                        r["dispatch"] = st["why"]
            elif m["type"] in ("done", "error"):
                if m["type"] == "error":
                    sys.exit("mode w%s: %s failed: %r" % (weight, m["id"], m))
                r["text"] += m.get("text", "")
                r["done"] = time.monotonic() - t0
                r["usage"], r["timings"] = m["usage"], m["timings"]
                r["finish"] = m["finish_reason"]
                del flight[m["id"]]
                busy.discard(r["conv"])
                history[r["conv"]] = r["messages"] + [{"role": "assistant",
                                                       "content": r["text"]}]
                rows.append(r)
        wall = time.monotonic() - t0
        sock.close(0)
        time.sleep(0.3)  # the workers' last counters
        counters = kc.stats(srv.endpoint)
    rows.sort(key=lambda r: r["seq"])
    return rows, counters, wall


_ids_cache = {}


def prompt_ids(bin_path, messages):
    """The prompt's token ids as the service computes them (see the header)."""
    key = json.dumps(messages, sort_keys=True)
    if key in _ids_cache:
        return _ids_cache[key]
    argv = [bin_path, "chat-template", "--bos"]
    for m in messages:
        argv += [m["role"], m["content"]]
    text = subprocess.run(argv, capture_output=True, check=True).stdout
    with tempfile.NamedTemporaryFile(prefix="kvbench-", suffix=".txt") as f:
        f.write(text)
        f.flush()
        out = subprocess.run([bin_path, "tokenize", "-f", f.name], capture_output=True,
                             text=True, check=True).stdout
    ids = [int(x) for x in out.split()]
    _ids_cache[key] = ids
    return ids


def block_keys(ids, n):
    """Keys of the full-block prefixes of ids[:n]: key k names ids[:16(k+1)]."""
    out, h = [], hashlib.blake2b(digest_size=16)
    for k in range(n // BLOCK):
        h.update(json.dumps(ids[k * BLOCK:(k + 1) * BLOCK]).encode())
        out.append(h.copy().digest())
    return out


def oracle(rows):
    """Per row, the tokens an unbounded cache shared by every worker would have served
    (the header's definition); rows in send order, with prompt_ids."""
    res = []
    for i, r in enumerate(rows):
        held = set()
        for e in rows[:i]:
            held.update(block_keys(e["prompt_ids"], len(e["prompt_ids"])))
            if e["done"] <= r["sent"]:
                seq = e["prompt_ids"] + e["ids"][:-1]
                held.update(block_keys(seq, len(seq)))
        n, got = len(r["prompt_ids"]), 0
        for k, key in enumerate(block_keys(r["prompt_ids"], n)):
            if key not in held:
                break
            got = (k + 1) * BLOCK
        res.append(min(got, n - 1) if n > 1 else 0)
    return res


def distinct_blocks(rows):
    keys = set()
    for r in rows:
        seq = r["prompt_ids"] + r["ids"]
        keys.update(block_keys(seq, len(seq)))
    return len(keys)


def summarize(a, modes, results, out, argv):
    lines = ["# KV-event-fed routing vs least-loaded: prefix hits across workers", ""]
    lines += kc.provenance(a.bin, argv)
    lines += ["- trace: %d conversations x %d turns, %d in flight, greedy, max_tokens %d, "
              "order seed %d; thread mode, %d workers x 1 thread, --kv-blocks %d per worker "
              "(block 16), %s; every mode with --kv-events and \"trace\": true" % (
                  a.conversations, a.turns, a.concurrency, a.max_tokens, a.seed, a.workers,
                  a.kv_blocks, "with the KV tier manager" if a.tiers else "--no-tiers"), ""]
    lines += ["| mode | hit rate | hit rate, turns >= 2 | oracle | hit / oracle | TTFT p50 ms "
              "| TTFT p99 ms | wall s | requests per worker | prompt tokens | cached | "
              "router routed cached | evictions | ids = usage |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    base_text = None
    for w in modes:
        if w not in results:
            lines.append("| w%s | (not run) |" % w)
            continue
        rows, cnt, wall = results[w]
        orc = oracle(rows)
        sp = sum(r["usage"]["prompt_tokens"] for r in rows)
        sc = sum(r["usage"]["cached_tokens"] for r in rows)
        later = [r for r in rows if r["turn"] >= 2]
        sp2 = sum(r["usage"]["prompt_tokens"] for r in later)
        sc2 = sum(r["usage"]["cached_tokens"] for r in later)
        so = sum(orc)
        ttft = [(r["first"] - r["sent"]) * 1000 for r in rows if r["first"] is not None]
        per = [sum(1 for r in rows if r["worker"] == i) for i in range(a.workers)]
        ev = sum(cnt.get("worker%d.kv.t0.evictions" % i, 0) for i in range(a.workers))
        ok = sum(1 for r in rows if len(r["prompt_ids"]) == r["usage"]["prompt_tokens"])
        lines.append("| w%s (--prefix-weight %s) | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f | "
                     "%.1f | %s | %d | %d | %d | %d | %d/%d |" % (
                         w, w, sc / max(sp, 1), sc2 / max(sp2, 1), so / max(sp, 1),
                         sc / max(so, 1), kc.pct(ttft, 50), kc.pct(ttft, 99), wall,
                         "/".join(map(str, per)), sp, sc,
                         cnt.get("router.prefix.routed_cached_tokens", 0), ev, ok, len(rows)))
        texts = [r["text"] for r in rows]
        if base_text is None:
            base_text, base_mode = texts, w
        else:
            same = sum(1 for x, y in zip(base_text, texts) if x == y)
            notes.append("- w%s: %d of %d answers identical to w%s's" % (w, same, len(rows),
                                                                         base_mode))
        hits = [cnt.get("worker%d.kv.t0.hit_tokens" % i, 0) for i in range(a.workers)]
        notes.append("- w%s counters: worker<i>.kv.t0.hit_tokens %s; router.prefix.lookups %d; "
                     "router.kv_events.batches %d, gaps %d, replays %d, bad %d; distinct blocks "
                     "in the trace %d (a worker's pool: %d)" % (
                         w, "/".join(map(str, hits)), cnt.get("router.prefix.lookups", 0),
                         cnt.get("router.kv_events.batches", 0),
                         cnt.get("router.kv_events.gaps", 0),
                         cnt.get("router.kv_events.replays", 0),
                         cnt.get("router.kv_events.bad", 0),
                         distinct_blocks(rows), a.kv_blocks))
    lines += ["", "hit rate: sum cached_tokens / sum prompt_tokens (the `done` events' usage); "
              "oracle: what one unbounded cache shared by every worker would have served "
              "(scripts/bench_kv_routing.py, header), over the same sum; TTFT: client side; "
              "requests per worker: from each request's trace (`dispatch`); ids = usage: "
              "requests whose prompt ids computed here have usage.prompt_tokens ids.", ""]
    lines += notes
    text = "\n".join(lines) + "\n"
    kc.write_atomic(os.path.join(out, "summary.md"), text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 6 conversations x 2 turns, 2 in flight, 4 workers, "
                         "8 tokens, modes 1,0 (about 5 s)")
    ap.add_argument("--modes", default=None, help="prefix weights, comma-separated (1,0,4)")
    ap.add_argument("--conversations", type=int, default=None, help="default 16")
    ap.add_argument("--turns", type=int, default=None, help="default 4")
    ap.add_argument("--concurrency", type=int, default=None, help="in flight (default 4)")
    ap.add_argument("--workers", type=int, default=None, help="default 4")
    ap.add_argument("--max-tokens", type=int, default=None, help="per answer (default 48)")
    ap.add_argument("--kv-blocks", type=int, default=1024, help="per worker (default 1024)")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1, help="the order's shuffle")
    ap.add_argument("--tiers", action="store_true", help="keep the KV tier manager")
    ap.add_argument("--request-timeout", type=int, default=120, help="s without an event")
    ap.add_argument("--bin", default=kc.BIN)
    ap.add_argument("--out", default=None, help="default bench/results/DATE-kv-routing "
                    "(DATE-kv-routing-quick with --quick)")
    a = ap.parse_args()
    q = a.quick
    for k, full, quick in (("modes", "1,0,4", "1,0"), ("conversations", 16, 6), ("turns", 4, 2),
                           ("concurrency", 4, 2), ("workers", 4, 4), ("max_tokens", 48, 8)):
        if getattr(a, k) is None:
            setattr(a, k, quick if q else full)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    out = a.out or os.path.join(kc.ROOT, "bench", "results", time.strftime("%Y-%m-%d") +
                                "-kv-routing" + ("-quick" if q else ""))
    os.makedirs(out, exist_ok=True)
    config = {k: getattr(a, k) for k in ("conversations", "turns", "concurrency", "workers",
                                         "max_tokens", "kv_blocks", "max_batch", "seed",
                                         "tiers")}
    kc.check_config(out, config)
    argv = ["scripts/bench-kv-routing"] + sys.argv[1:]
    results = {}
    t_all = time.time()
    for i, w in enumerate(modes):
        rows_p = os.path.join(out, "mode-w%s.jsonl" % w)
        stats_p = os.path.join(out, "mode-w%s.stats.json" % w)
        if os.path.exists(rows_p) and os.path.exists(stats_p):
            with open(stats_p) as f:
                st = json.load(f)
            results[w] = (kc.read_jsonl(rows_p), st["counters"], st["wall_s"])
            print("[%d/%d] w%s: done before, skipped" % (i + 1, len(modes), w), flush=True)
            continue
        t0 = time.time()
        rows, counters, wall = run_mode(a.bin, w, a, out)
        for r in rows:
            r["prompt_ids"] = prompt_ids(a.bin, r["messages"])
        kc.write_atomic(stats_p + ".part", json.dumps({"counters": counters, "wall_s": wall}))
        kc.write_atomic(rows_p, "".join(json.dumps(r) + "\n" for r in rows))
        os.replace(stats_p + ".part", stats_p)
        results[w] = (rows, counters, wall)
        print("[%d/%d] w%s: %d requests in %.1f s (%.0f s with start and tokenizing); "
              "%.0f s so far" % (i + 1, len(modes), w, len(rows), wall, time.time() - t0,
                                 time.time() - t_all), flush=True)
    print(summarize(a, modes, results, out, argv))


if __name__ == "__main__":
    main()
