"""test_kvstore.py - the KV store through the service.

Greedy output is the same whether a prompt's prefix is recomputed, hit in T0
(the worker's prefix cache), restored from T1 (the tier manager's DRAM pool) or
from T2 (SSD files over io_uring), with F16 storage (the default, as `strata generate`'s)
against the reference `strata generate --greedy` (no cache at all), and with F32 storage
against itself (cold == T0 hit == restored).  The T2 index survives a
restart; a corrupted T2 block fails its checksum and is recomputed with the
same output; with the tier manager in its own process, SIGKILL loses no request
and the supervisor restarts it.

The caps are small on purpose: T0 holds about one long prompt, so every new
system prompt pushes the previous one down a tier."""
import glob
import os
import re
import shutil
import signal
import sys
import tempfile
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq

N = 12  # tokens per completion


def system_prompt(topic, n=18):
    """A long, deterministic system prompt (about 20 tokens per rule)."""
    rules = []
    for i in range(n):
        rules.append("Rule %d about %s: answer with care, cite the %s handbook section %d, "
                     "and never invent facts about item %d." % (i + 1, topic, topic, 3 * i + 1,
                                                                i * 7 % 13))
    return "You are a helpful assistant for %s questions. " % topic + " ".join(rules)


SYS = {k: system_prompt(k) for k in ("astronomy", "gardening", "cooking", "sailing")}
Q = ["What is the capital of France?", "Name three primary colors."]


def request(rid, sys_key, q):
    return {"type": "generate", "v": 1, "id": rid, "max_tokens": N, "temperature": 0,
            "messages": [{"role": "system", "content": SYS[sys_key]},
                         {"role": "user", "content": q}]}


def ask(ep, rid, sys_key, q):
    c = u.Client(zmq.Context.instance(), ep)
    try:
        c.send(request(rid, sys_key, q))
        toks = []
        while True:
            m = c.recv(120)
            if m["type"] == "token":
                toks.append(m["token"])
            elif m["type"] == "done":
                return toks, m
            else:
                raise AssertionError("unexpected answer %r" % m)
    finally:
        c.close()


_refs = {}


def ref(sys_key, q):
    if (sys_key, q) not in _refs:
        out = u.subprocess.run([u.BIN, "generate", "--chat", "--system", SYS[sys_key], "-p", q,
                                "-n", str(N), "--greedy", "--print-ids", "-t", "2"],
                               capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        _refs[(sys_key, q)] = [int(x) for x in out.stdout.split()]
    return _refs[(sys_key, q)]


def counters(ep):
    return u.stats(ep)


def c(st, name):
    return sum(v for k, v in st.items() if k.endswith(name))


def same(ep, rid, sys_key, q, what):
    toks, done = ask(ep, rid, sys_key, q)
    u.check(toks == ref(sys_key, q)[:len(toks)] and len(toks) == len(ref(sys_key, q)),
            "%s: %s/%s gave %s, reference %s" % (what, sys_key, q, toks, ref(sys_key, q)))
    print("  %-28s ok  ttft %6.1f ms" % (what, done.get("timings", {}).get("ttft_ms", 0)))
    return done


def serve_args(t2_dir, kv_type="f16"):
    return ["-t", "2", "--kv-blocks", "48", "--t1-blocks", "40", "--t2-blocks", "512",
            "--t2-dir", t2_dir, "--kv-type", kv_type, "--kv-policy", "lru"]


def phase_tiers(t2_dir):
    print("phase 1: cold, T0, T1, T2 (f16)")
    with u.Server(serve_args(t2_dir)) as s:
        ep = s.endpoint
        same(ep, "a0", "astronomy", Q[0], "cold")
        same(ep, "a1", "astronomy", Q[1], "T0 hit (system prompt)")
        st = counters(ep)
        u.check(c(st, "kv.t0.hit_blocks") >= 20, "no T0 hits: %s" % c(st, "kv.t0.hit_blocks"))
        same(ep, "b0", "gardening", Q[0], "cold (astronomy -> T1)")
        same(ep, "c0", "cooking", Q[0], "cold (gardening -> T1, astronomy -> T2)")
        same(ep, "a2", "astronomy", Q[0], "restored from T1/T2")
        same(ep, "b1", "gardening", Q[1], "restored from T1/T2")
        st = counters(ep)
        for k in ("kvtier.t1.hits", "kvtier.t2.hits", "kvtier.demoted.t1_to_t2",
                  "worker0.kv.promoted.in_time", "worker0.kv.demoted",
                  "kvtier.t2.bytes_written", "kvtier.t2.bytes_read"):
            print("    %-32s %d" % (k, st.get(k, 0)))
        u.check(st.get("kvtier.t1.hits", 0) > 0, "no T1 hits")
        u.check(st.get("kvtier.t2.hits", 0) > 0, "no T2 hits")
        u.check(st.get("worker0.kv.promoted.in_time", 0) > 0, "no promotion arrived in time")
        # push everything down so that the next server finds it in T2
        same(ep, "d0", "sailing", Q[0], "cold (more pressure)")
        same(ep, "c1", "cooking", Q[1], "restored")


def phase_restart(t2_dir):
    print("phase 2: restart finds the T2 blocks")
    with u.Server(serve_args(t2_dir)) as s:
        ep = s.endpoint
        st = counters(ep)
        u.check(st.get("kvtier.t2.recovered", 0) > 0, "restart found no T2 blocks")
        print("    t2.recovered", st["kvtier.t2.recovered"])
        for k in ("astronomy", "gardening", "cooking"):
            same(ep, "r-" + k, k, Q[0], "after restart: " + k)
        st = counters(ep)
        u.check(st.get("kvtier.t2.hits", 0) > 0, "no T2 hits after the restart")
        print("    t2.hits", st["kvtier.t2.hits"])


def corrupt(t2_dir):
    """Flip bytes all over the T2 files (headers are found by the scan; payloads
    must fail their checksums)."""
    files = [f for f in glob.glob(os.path.join(t2_dir, "*")) if os.path.isfile(f)
             and os.path.getsize(f) > 1 << 20]
    u.check(files, "no T2 data files in %s" % t2_dir)
    n = 0
    for f in files:
        size = os.path.getsize(f)
        with open(f, "r+b") as fh:
            for off in range(8192 + 12345, size, 65536):  # inside payloads, never only headers
                fh.seek(off)
                b = fh.read(1)
                if not b:
                    break
                fh.seek(off)
                fh.write(bytes([b[0] ^ 0x5A]))
                n += 1
    return n


def phase_corrupt(t2_dir):
    n = corrupt(t2_dir)
    print("phase 3: %d bytes flipped in the T2 files" % n)
    with u.Server(serve_args(t2_dir)) as s:
        ep = s.endpoint
        for k in ("astronomy", "gardening", "cooking"):
            same(ep, "x-" + k, k, Q[1], "corrupted T2: " + k)
        st = counters(ep)
        print("    checksum failures", st.get("kvtier.t2.checksum_failures", 0))
        u.check(st.get("kvtier.t2.checksum_failures", 0) > 0, "no checksum failure detected")


def phase_f32(t2_dir):
    print("phase 4: f32 storage in every tier")
    with u.Server(serve_args(t2_dir, "f32")) as s:
        ep = s.endpoint
        cold, _ = ask(ep, "f0", "astronomy", Q[0])
        hit, _ = ask(ep, "f1", "astronomy", Q[0])
        u.check(hit == cold, "f32 T0 hit differs: %s vs %s" % (hit, cold))
        ask(ep, "f2", "gardening", Q[0])
        ask(ep, "f3", "cooking", Q[0])
        ask(ep, "f4", "sailing", Q[0])
        back, _ = ask(ep, "f5", "astronomy", Q[0])
        st = counters(ep)
        u.check(back == cold, "f32 restored from T1/T2 differs: %s vs %s" % (back, cold))
        u.check(st.get("kvtier.t1.hits", 0) + st.get("kvtier.t2.hits", 0) > 0,
                "f32: nothing restored from T1/T2")
        print("  f32 cold == T0 == T1/T2:", cold == hit == back)


def phase_kill(d):
    print("phase 5: SIGKILL of the tier manager process")
    port = u.free_port()
    path = os.path.join(d, "topology.txt")
    with open(path, "w") as f:
        f.write("supervisor ipc://%(d)s/supervisor\n"
                "defaults   -  threads=2 kv_blocks=48 t1_blocks=40 t2_dir=none kv_policy=lru "
                "prefetch_wait_ms=150\n"
                "frontend   ipc://%(d)s/frontend   client=tcp://127.0.0.1:%(port)d\n"
                "tokenizer  ipc://%(d)s/tokenizer\n"
                "router     ipc://%(d)s/router\n"
                "kvtier     ipc://%(d)s/kvtier\n"
                "prefetcher ipc://%(d)s/prefetcher\n"
                "worker0    ipc://%(d)s/worker0\n" % {"d": d, "port": port})
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    with s:
        ep = s.endpoint
        try:
            u.wait_for(lambda: u.health(ep)["ok"], 30, "health ok")
        except AssertionError:
            print(u.health(ep), s.read_log()[-3000:])
            raise
        same(ep, "k0", "astronomy", Q[0], "before the kill")
        # bad input to the tier manager's own socket: a block whose hash does not
        # match its tokens, one whose size is not its format's, and garbage
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 1000)
        push.connect("ipc://%s/kvtier" % d)
        blk = {"type": "kv_block", "v": 1, "rid": 0, "worker": 0, "hash": 12345, "parent": 0,
               "tokens": b"\x01\x00\x00\x00" * 16, "fmt": 0}
        push.send_multipart(u.internal(u.pack(blk), b"\0" * 64))               # wrong hash and size
        push.send_multipart(u.internal(u.pack(dict(blk, fmt=9)), b"\0" * 64))  # no such format
        push.send(b"\xc1 not msgpack")
        push.close()
        st = u.wait_for(lambda: (lambda c: c if c.get("kvtier.put.refused", 0) >= 2 and
                                 c.get("kvtier.malformed", 0) >= 1 else None)(counters(ep)),
                        10, "the tier manager to refuse bad blocks")
        print("  bad blocks refused: %d, malformed frames: %d" %
              (st["kvtier.put.refused"], st["kvtier.malformed"]))
        same(ep, "k0b", "astronomy", Q[0], "after bad input")
        same(ep, "k1", "gardening", Q[0], "before the kill (astronomy -> T1)")
        pids = re.findall(r"started kvtier \(pid (\d+)\)", s.read_log())
        u.check(pids, "no kvtier pid in the log")
        ctx = zmq.Context.instance()
        clients = []
        for i, k in enumerate(("astronomy", "cooking", "gardening", "sailing")):
            cl = u.Client(ctx, ep)
            cl.send(request("kill%d" % i, k, Q[0]))
            clients.append((cl, k))
        os.kill(int(pids[-1]), signal.SIGKILL)
        for cl, k in clients:
            toks = []
            while True:
                m = cl.recv(120)
                if m["type"] == "token":
                    toks.append(m["token"])
                else:
                    break
            cl.close()
            u.check(m["type"] == "done", "request lost after the kill: %r" % m)
            u.check(toks == ref(k, Q[0]), "%s after the kill: %s vs %s" % (k, toks, ref(k, Q[0])))
        print("  4 requests in flight during the kill: all done, outputs equal the reference")
        u.wait_for(lambda: len(re.findall(r"started kvtier \(pid", s.read_log())) >= 2, 20,
                   "kvtier restarted")
        u.wait_for(lambda: u.health(ep)["ok"], 20, "health ok after the restart")
        same(ep, "k2", "astronomy", Q[1], "after the restart")
        same(ep, "k3", "gardening", Q[1], "after the restart")
        st = counters(ep)
        print("    kvtier.puts after the restart", st.get("kvtier.puts", 0))


def main():
    d = tempfile.mkdtemp(prefix="strata-kv-", dir=os.environ.get("STRATA_TEST_TMP", "/var/tmp"))
    try:
        t2 = os.path.join(d, "t2")
        phase_tiers(t2)
        phase_restart(t2)
        phase_corrupt(t2)
        phase_f32(os.path.join(d, "t2-f32"))
        phase_kill(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
