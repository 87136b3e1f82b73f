#!/usr/bin/env python3
"""KV events in vLLM's format (issue 27, docs/KV_EVENTS.md), checked with a decoder written
from vLLM's published event schema (vllm/distributed/kv_events.py: msgspec Structs,
array_like, tagged), not from strata's encoder.

Thread mode, 2 workers, a small T0 (32 blocks of 16) so blocks are evicted; the test
subscribes to both workers' PUB sockets, sends prompts of which several share a long
prefix, then asks each worker's replay socket for everything from sequence 0 (the PUB
stream starts before the subscriber joins).  Checks: every batch decodes under the
schema (and under the older one without lora_name); sequence numbers run 0..N-1 per
worker and the replayed batches equal the published ones byte for byte; batch 0 starts
with AllBlocksCleared; medium "GPU", block_size 16, lora_id nil; every prompt's full
blocks appear as one chain of BlockStored events whose token ids are the prompt's
(`strata tokenize`) and whose hashes are the documented chained XXH3 (kv_hash.h,
recomputed here with libxxhash); a removed block was stored before and is not removed
twice; the live set never exceeds the pool; the counters agree; a malformed replay
request is ignored and a replay past the end answers only the end marker.  Then the
router's side: with --kv-events it follows the same events, and a conversation's next
turn goes to the worker that holds its first (found in the trace's dispatch line and in
the answer's cached_tokens).  And the KV tier manager's events (--kv-events-tiers): T1 as
"CPU", T2 as "DISK".
"""
import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

try:
    import msgspec
except ImportError:
    testenv.skip("msgspec is not installed (scripts/setup installs it)")

import serve_util as u  # noqa: E402

BLOCK, KV_BLOCKS = 16, 32


# ---- vLLM's schema (vllm/distributed/kv_events.py, the published form: array_like, tagged)

class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


# the older schema (vLLM before lora_name): a decoder of it must accept the batches too
class OldStored(KVCacheEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class OldRemoved(KVCacheEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class OldCleared(KVCacheEvent, tag="AllBlocksCleared"):
    pass


class OldBatch(EventBatch):
    events: list[OldStored | OldRemoved | OldCleared]


DECODE = msgspec.msgpack.Decoder(KVEventBatch)
DECODE_OLD = msgspec.msgpack.Decoder(OldBatch)
END = struct.pack(">q", -1)

_xxh = ctypes.CDLL("libxxhash.so.0").XXH3_64bits_withSeed
_xxh.restype, _xxh.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]


def block_hash(parent, tokens):
    """kv_hash.h: XXH3-64 (seed "STRATAKV") of parent (8 bytes LE), the tokens (4 bytes LE
    each) and their count (4 bytes LE); 0 is never a name (it becomes 1)."""
    b = struct.pack("<Q", parent) + struct.pack("<%di" % len(tokens), *tokens) + \
        struct.pack("<I", len(tokens))
    h = _xxh(b, len(b), 0x5354524154414B56)
    return h or 1


def prompts():
    base = ("The history of the printing press begins in the fifteenth century, when "
            "movable type changed how books were made across Europe and beyond. ")
    out = [base * 3 + "Summarise this in one line.", base * 3 + "Name the inventor.",
           base * 3 + "When did it reach England?"]
    out += [("Document %d: " % i) + u.PROMPTS[i % len(u.PROMPTS)] * 6 for i in range(6)]
    return out


def free_ports(n):
    """A port p with p..p+n-1 all free now (worker i binds the given port + i)."""
    import socket
    for _ in range(200):
        p = u.free_port()
        if p + n > 65535:
            continue
        ok = True
        for q in range(p, p + n):
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
                    break
        if ok:
            return p
    raise AssertionError("no %d consecutive free ports" % n)


def recv_all(sub, until, quiet=0.5):
    """Multipart messages from sub until `until` has passed and none came for `quiet` s."""
    got = []
    last = time.time()
    while time.time() < until or time.time() - last < quiet:
        if sub.poll(100):
            got.append(sub.recv_multipart())
            last = time.time()
        elif time.time() > until + 10:
            break
    return got


def replay(ctx, ep, start, frames=None):
    """[(seq, payload)] from the replay socket at ep, from sequence start."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(ep)
    if frames is not None:  # a malformed request first: it must be ignored
        s.send_multipart(frames)
    s.send_multipart([b"", struct.pack(">Q", start)])
    out = []
    deadline = time.time() + 10 * u.TIMEOUT_SCALE
    while time.time() < deadline:
        if not s.poll(1000):
            continue
        f = s.recv_multipart()
        u.check(len(f) == 3 and f[0] == b"", "replay frames %r" % f[:2])
        if f[1] == END:
            u.check(f[2] == b"", "end marker with a payload")
            s.close(0)
            return out
        out.append((struct.unpack(">q", f[1])[0], f[2]))
    s.close(0)
    raise AssertionError("replay from %s: no end marker" % ep)


def one(ctx, ep, m):
    """Run one request; its done event and the router's dispatch line of its trace."""
    c = u.Client(ctx, ep)
    c.send(dict(m, trace=True))
    line = None
    while True:
        e = c.recv(120 * u.TIMEOUT_SCALE)
        if e["type"] == "trace":
            line = [st for st in e["steps"] if st.get("what") == "dispatch"]
        if e["type"] in ("done", "error"):
            c.close()
            u.check(e["type"] == "done", "%s: %r" % (m["id"], e))
            return e, line


def routing():
    """The router follows the events: a conversation's next turn goes to the worker that
    holds its earlier turns (by load alone, idle workers get every request sent one at a
    time in the same order, worker0 first), and finds them cached."""
    ctx = zmq.Context.instance()
    pub = free_ports(8)  # 4 workers' PUB sockets, then their replay sockets
    rep = pub + 4
    # 4 workers with replay sockets: the router follows 8 sockets besides its inbox
    args = ["--workers", "4", "--threads", "1", "--no-tiers",
            "--kv-events", "tcp://*:%d" % pub, "--kv-events-replay", "tcp://*:%d" % rep]
    convs = [("Conversation %d. " % i) + u.PROMPTS[i] * 5 for i in range(4)]
    with u.Server(args) as s:
        time.sleep(0.3)  # the router's subscriptions reach the workers
        clients = []
        for i, text in enumerate(convs):  # at once: spread over both workers by load
            c = u.Client(ctx, s.endpoint)
            c.send({"type": "generate", "v": 1, "id": "turn1.%d" % i, "max_tokens": 4,
                    "temperature": 0, "prompt": text})
            clients.append(c)
        for i, c in enumerate(clients):
            while True:
                e = c.recv(120 * u.TIMEOUT_SCALE)
                if e["type"] in ("done", "error"):
                    break
            c.close()
            u.check(e["type"] == "done", "turn 1 of %d: %r" % (i, e))
        time.sleep(0.3)  # their BlockStored batches reach the router
        hits = []
        for i, text in enumerate(convs):
            m = {"type": "generate", "v": 1, "id": "turn2.%d" % i, "max_tokens": 4,
                 "temperature": 0, "prompt": text + " And then?"}
            done, line = one(ctx, s.endpoint, m)
            u.check(line and "less its cached prefix" in line[0]["why"],
                    "turn 2 of %d: dispatch %r" % (i, line))
            # the line explains the choice: the worker named has the least load less its
            # cached tokens, with the loads as they were before this request was added
            why = line[0]["why"]
            chosen = int(re.match(r"worker(\d+)", why).group(1))
            loads_s, cached_s = why.split("; prompt tokens cached:")
            load = {int(a): int(b) for a, b in re.findall(r"worker(\d+)=(\d+)", loads_s)}
            cached = {int(a): int(b) for a, b in re.findall(r"worker(\d+)=(\d+)", cached_s)}
            cost = {k: load[k] - cached[k] for k in load}
            u.check(cost[chosen] == min(cost.values()), "turn 2 of %d: %s" % (i, why))
            need = (len(u.tokenize(text)) // BLOCK) * BLOCK
            got = done["usage"]["cached_tokens"]
            u.check(got >= need - BLOCK, "turn 2 of %d: %d cached tokens, its first turn "
                    "had %d in full blocks (dispatch: %s)" % (i, got, need, line[0]["why"]))
            hits.append(got)
        st = u.stats(s.endpoint)
        u.check(st.get("worker0.dispatched", 0) >= 0, "stats")
        per = [st.get("router.dispatched.worker%d" % w, 0) for w in range(4)]
        u.check(sum(1 for p in per if p) >= 2, "the first turns spread: %r" % per)
    print("routing: 4 second turns each sent to the worker holding the first (%s cached "
          "tokens), requests per worker %r" % (hits, per))


def tiers():
    """The KV tier manager's events (--kv-events-tiers): write-through puts every full block
    of a prompt in T1 ("CPU"); a T1 of 8 blocks evicts into T2 ("DISK": BlockRemoved CPU,
    BlockStored DISK).  Each decodes under the schema, its hashes are the chain of its
    tokens, and every prompt's blocks reached T1 once."""
    ctx = zmq.Context.instance()
    pub = free_ports(2)
    d = tempfile.mkdtemp(prefix="strata-kvev-")
    texts = prompts()[:5]
    want = [u.tokenize(t) for t in texts]
    # the workers' events too, on the next port: the tier manager must not take theirs
    args = ["--threads", "1", "--t1-blocks", "8", "--t2-dir", d, "--t2-blocks", "256",
            "--kv-events-tiers", "tcp://127.0.0.1:%d" % pub,
            "--kv-events", "tcp://127.0.0.1:%d" % (pub + 1)]
    try:
        with u.Server(args) as s:
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect("tcp://127.0.0.1:%d" % pub)
            time.sleep(0.3)
            for i, t in enumerate(texts):  # raw prompts: their ids are `strata tokenize`'s
                one(ctx, s.endpoint, {"type": "generate", "v": 1, "id": "t%d" % i,
                                      "prompt": t, "max_tokens": 4, "temperature": 0})
            got = recv_all(sub, time.time() + 1.0)
            sub.close(0)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    by = {"CPU": {}, "DISK": {}}
    removed = {"CPU": 0, "DISK": 0}
    for _, seqb, payload in got:
        for e in DECODE.decode(payload).events:
            if isinstance(e, BlockStored):
                u.check(e.medium in by and e.block_size == BLOCK, "tiers: %r" % e)
                parent = e.parent_block_hash or 0
                for i, h in enumerate(e.block_hashes):
                    toks = e.token_ids[i * BLOCK:(i + 1) * BLOCK]
                    u.check(h == block_hash(parent, toks), "tiers: %x is not its tokens' hash" % h)
                    by[e.medium][h] = toks
                    parent = h
            elif isinstance(e, BlockRemoved):
                u.check(e.medium in by, "tiers: medium %r" % e.medium)
                removed[e.medium] += len(e.block_hashes)
    for i, toks in enumerate(want):
        parent = 0
        for b in range(len(toks) // BLOCK):
            h = block_hash(parent, toks[b * BLOCK:(b + 1) * BLOCK])
            u.check(h in by["CPU"], "tiers: block %d of prompt %d never reached T1" % (b, i))
            parent = h
    u.check(removed["CPU"] > 0 and by["DISK"], "tiers: T1 (8 blocks) never spilled to T2: "
            "%d removed from CPU, %d stored on DISK" % (removed["CPU"], len(by["DISK"])))
    print("tiers: %d blocks stored in T1 (CPU), %d removed from it, %d stored in T2 (DISK)"
          % (len(by["CPU"]), removed["CPU"], len(by["DISK"])))


def bad_endpoint():
    """An endpoint that is not one: strata serve refuses to start, naming it."""
    p = subprocess.run([u.BIN, "serve", "--threads", "1", "--no-tiers", "--kv-events",
                        "nonsense", "--endpoint", "tcp://127.0.0.1:%d" % u.free_port()],
                       capture_output=True, text=True, timeout=120)
    u.check(p.returncode != 0 and "kv_events: 'nonsense'" in p.stderr,
            "--kv-events nonsense: rc %d, %r" % (p.returncode, p.stderr[-300:]))


def main():
    if not os.path.exists(u.MODEL):
        testenv.skip("model not found: " + u.MODEL)
    bad_endpoint()
    tiers()
    routing()
    t0 = time.time()
    ctx = zmq.Context.instance()
    pub = free_ports(4)  # 2 workers' PUB sockets, then their replay sockets
    rep = pub + 2
    args = ["--workers", "2", "--threads", "1", "--kv-blocks", str(KV_BLOCKS), "--no-tiers",
            "--kv-events", "tcp://127.0.0.1:%d" % pub,
            "--kv-events-replay", "tcp://127.0.0.1:%d" % rep,
            "--prefix-weight", "0"]  # dispatch by load: requests spread, the pools evict
    texts = prompts()
    want = [u.tokenize(t) for t in texts]  # as the service tokenizes a prompt
    with u.Server(args) as s:
        subs = []
        for w in range(2):
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect("tcp://127.0.0.1:%d" % (pub + w))
            subs.append(sub)
        time.sleep(0.3)  # the subscriptions reach the publishers
        # one at a time, each twice (the second hits the prefix cache), then all at once
        for i, t in enumerate(texts):
            for k in range(2):
                m = {"type": "generate", "v": 1, "id": "p%d.%d" % (i, k), "prompt": t,
                     "max_tokens": 4, "temperature": 0}
                c = u.Client(ctx, s.endpoint)
                c.send(m)
                while True:
                    e = c.recv(120 * u.TIMEOUT_SCALE)
                    if e["type"] in ("done", "error"):
                        break
                c.close()
                u.check(e["type"] == "done", "request %d: %r" % (i, e))
        u.run_concurrent(s.endpoint, texts, 8)
        live = [recv_all(sub, time.time() + 1.0) for sub in subs]
        st = u.stats(s.endpoint)
        replayed = [replay(ctx, "tcp://127.0.0.1:%d" % (rep + w), 0,
                           frames=[b"", b"short"] if w == 0 else None) for w in range(2)]
        past = replay(ctx, "tcp://127.0.0.1:%d" % rep, 1 << 40)
        u.check(past == [], "a replay past the end answered %d batches" % len(past))
        for sub in subs:
            sub.close(0)

    stored = {}  # hash -> (parent, tokens), from every worker's BlockStored
    n_removed = 0
    for w in range(2):
        seqs = [r[0] for r in replayed[w]]
        u.check(seqs == list(range(len(seqs))) and seqs,
                "worker%d: replayed sequence numbers %r" % (w, seqs[:10]))
        by_seq = dict(replayed[w])
        for topic, seqb, payload in live[w]:
            q = struct.unpack(">q", seqb)[0]
            u.check(topic == b"", "topic %r" % topic)
            u.check(by_seq.get(q) == payload, "worker%d: batch %d replayed differs" % (w, q))
        u.check(len(by_seq) == st.get("worker%d.kv_events.batches" % w),
                "worker%d: %d batches, the counter says %r"
                % (w, len(by_seq), st.get("worker%d.kv_events.batches" % w)))
        present, n_events = set(), 0
        for q in seqs:
            b = DECODE.decode(by_seq[q])
            DECODE_OLD.decode(by_seq[q])
            u.check(b.data_parallel_rank == 0 and b.ts > t0 - 5, "batch %d: %r" % (q, b))
            if q == 0:
                u.check(isinstance(b.events[0], AllBlocksCleared),
                        "worker%d: batch 0 starts with %r" % (w, b.events[0]))
            for e in b.events:
                n_events += 1
                if isinstance(e, BlockStored):
                    u.check(e.block_size == BLOCK and e.medium == "GPU" and e.lora_id is None
                            and len(e.token_ids) == BLOCK * len(e.block_hashes),
                            "worker%d: %r" % (w, e))
                    parent = e.parent_block_hash or 0
                    for i, h in enumerate(e.block_hashes):
                        toks = e.token_ids[i * BLOCK:(i + 1) * BLOCK]
                        u.check(h == block_hash(parent, toks), "worker%d: block %x is not the "
                                "chained hash of its tokens and parent" % (w, h))
                        u.check(h not in present, "worker%d: %x stored twice" % (w, h))
                        present.add(h)
                        stored[h] = (parent, toks)
                        parent = h
                elif isinstance(e, BlockRemoved):
                    u.check(e.medium == "GPU", "medium %r" % e.medium)
                    for h in e.block_hashes:
                        u.check(h in present, "worker%d: %x removed, not stored" % (w, h))
                        present.discard(h)
                        n_removed += 1
                else:
                    present.clear()
                u.check(len(present) <= KV_BLOCKS, "worker%d: %d blocks live in a pool of %d"
                        % (w, len(present), KV_BLOCKS))
        u.check(n_events == st.get("worker%d.kv_events.events" % w),
                "worker%d: %d events, the counter says %r"
                % (w, n_events, st.get("worker%d.kv_events.events" % w)))
    u.check(n_removed > 0, "no BlockRemoved: the pool of %d blocks never evicted" % KV_BLOCKS)
    # every prompt's full blocks, as one chain of stored blocks holding its tokens
    for i, toks in enumerate(want):
        parent = 0
        for b in range(len(toks) // BLOCK):
            h = block_hash(parent, toks[b * BLOCK:(b + 1) * BLOCK])
            u.check(h in stored and stored[h] == (parent, toks[b * BLOCK:(b + 1) * BLOCK]),
                    "prompt %d: block %d of %d was never stored" % (i, b, len(toks) // BLOCK))
            parent = h
    print("kv events: %d batches from 2 workers decoded under vLLM's schema (and the older "
          "one), replay equal to the stream, %d blocks stored, %d removed, every prompt's "
          "blocks chained with its tokens; %.1f s" % (len(replayed[0]) + len(replayed[1]),
                                                      len(stored), n_removed, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
