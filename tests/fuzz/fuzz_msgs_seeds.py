"""fuzz_msgs_seeds.py - writes the seed corpus of fuzz_msgs (tests/fuzz/fuzz_msgs.c): one
valid frame of every message type and a few near misses, packed with the msgpack package
(an encoder independent of msgs/).  Used by scripts/fuzz-msgs and by CTest (fuzz_msgs_seeds, then the replay).
    python3 tests/fuzz/fuzz_msgs_seeds.py OUT_DIR
Exits 77 (skipped; a failure under CI=true) without the msgpack package."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

testenv.require("msgpack")
import msgpack  # noqa: E402

d = sys.argv[1]
os.makedirs(d, exist_ok=True)
chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
tim_ms = {"queued_ms": 1.0, "prefill_ms": 2.5, "decode_ms": 30.0, "ttft_ms": 3.5}
tim_us = {"queued_us": 1, "prefill_us": 2, "decode_us": 3, "ttft_us": 4}
toks = b"".join(int.to_bytes(t, 4, "little") for t in (1, 15043, 29871))
gen = {"id": "r1", "prompt": "Once upon", "max_tokens": 16, "temperature": 0.7, "top_k": 40,
       "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.1, "repeat_last_n": 64,
       "seed": 42, "stop": ["\n\n", "END"], "stream": True}
msgs = [
    dict(gen, type="generate"),
    {"type": "generate", "id": "r2", "messages": chat, "stream": False},
    {"type": "cancel", "id": "r1"}, {"type": "stats"}, {"type": "health"},
    {"type": "token", "id": "r1", "index": 0, "token": 17, "text": " wor"},
    {"type": "done", "id": "r1", "finish_reason": "stop", "text": "all",
     "usage": {"prompt_tokens": 3, "completion_tokens": 9}, "timings": tim_ms},
    {"type": "error", "id": None, "code": "bad_request", "message": "bad"},
    {"type": "stats_reply", "counters": {"frontend.requests": 5, "a.b": -1}},
    {"type": "health_reply", "ok": True,
     "actors": [{"name": "frontend", "state": "ready", "last_seen_ms": 4}]},
    dict(gen, type="tok_request", rid=7, t_arrival_us=99),
    {"type": "work_request", "rid": 8, "tokens": toks, "max_tokens": 4, "temperature": 0.0,
     "seed": 1, "stop": ["x"], "stream": True, "t_arrival_us": 5},
    {"type": "work_event", "rid": 8, "index": 0, "token": 5, "finish": 1,
     "prompt_tokens": 3, "timings": tim_us},
    {"type": "text_event", "rid": 8, "index": -1, "token": -1, "finish": 2, "text": "",
     "prompt_tokens": 3, "timings": tim_us},
    {"type": "work_cancel", "rid": 8},
    {"type": "load_report", "worker": 0, "queued_tokens": 1, "active_tokens": 2,
     "n_queued": 3, "n_active": 4, "kv_free_blocks": 5},
    {"type": "work_error", "rid": 8, "code": "internal", "message": "oops"},
    {"type": "worker_down", "worker": 1},
    {"type": "ready", "name": "router", "pid": 123}, {"type": "ping", "seq": 1},
    {"type": "pong", "seq": 1, "name": "router"}, {"type": "stop"}, {"type": "stats_query"},
    {"type": "drain", "grace_ms": 30000},
    {"type": "stats_answer", "name": "router", "counters": {"x": 1}},
]
for i, m in enumerate(msgs):
    m["v"] = 1
    with open(os.path.join(d, f"seed-{i:02d}-{m['type']}"), "wb") as f:
        f.write(msgpack.packb(m, use_bin_type=True))
# near misses: what every decoder must refuse with a reason, not crash on
first = msgpack.packb(msgs[0], use_bin_type=True)
near = [first[:len(first) // 2], first[:-1], b"\xc1", b"",
        msgpack.packb([1, 2, 3]), msgpack.packb({"type": "nosuch", "v": 1}),
        msgpack.packb({"type": "generate", "v": 1, "id": 5, "prompt": "x"}),
        msgpack.packb({"type": "generate", "v": 99, "id": "r", "prompt": "x"}),
        msgpack.packb({"type": "token", "v": 1, "id": "r", "index": -1, "token": 2 ** 40,
                       "text": "x"}),
        msgpack.packb(dict(gen, type="generate", v=1, max_tokens=-5, stop=["a"] * 100))]
for i, b in enumerate(near):
    with open(os.path.join(d, f"near-{i:02d}"), "wb") as f:
        f.write(b)
print("fuzz_msgs_seeds: %d frames and %d near misses in %s" % (len(msgs), len(near), d))
