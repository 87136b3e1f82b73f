"""bench_kv_common.py - what scripts/bench_kv_routing.py and scripts/bench_kv_events_overhead.py
share (issue 27, docs/KV_EVENTS.md): the provenance lines of a summary (the CPU as lscpu names
it, its AVX2/AVX-512 flags and L3, the strata commit and whether the tree is clean), a
`strata serve` on a free port with its log in the results folder, `stats`, and chunk files
written atomically (a chunk that exists is finished: a rerun skips it)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import msgpack
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "strata")


def free_port(n=1):
    """A port p on 127.0.0.1 such that p .. p+n-1 are free now (a worker i binds p + i)."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p + n > 65535:
            continue
        ok = True
        for q in range(p + 1, p + n):
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", q))
            except OSError:
                ok = False
            t.close()
        if ok:
            return p
    raise RuntimeError("no %d free consecutive ports" % n)


def lscpu_field(text, name):
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return "?"


def provenance(bin_path, argv):
    """Markdown lines: command, commit (dirty or not), binary, CPU, SIMD flags, L3."""
    lc = subprocess.run(["lscpu"], capture_output=True, text=True,
                        env=dict(os.environ, LC_ALL="C")).stdout
    flags = lscpu_field(lc, "Flags").split()
    simd = [f for f in flags if f in ("avx2", "fma", "f16c", "avx_vnni") or f.startswith("avx512")]
    git = lambda *a: subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True,  # noqa
                                    text=True).stdout.strip()
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return [
        "- command: `%s`" % " ".join(argv),
        "- strata: %s (%s), binary %s" % (commit, "dirty: " + " ".join(
            l[3:] for l in dirty.splitlines()) if dirty else "clean", bin_path),
        "- cpu: %s, %d CPUs (lscpu)" % (lscpu_field(lc, "Model name"), os.cpu_count()),
        "- simd: AVX2 %s, AVX-512 %s (%s)" % ("yes" if "avx2" in flags else "no",
                                             "yes" if any(f.startswith("avx512") for f in flags)
                                             else "no", " ".join(simd) or "none"),
        "- l3: %s" % lscpu_field(lc, "L3 cache"),
        "- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    ]


class Serve:
    """`strata serve ARGS --endpoint tcp://127.0.0.1:PORT`, its log at log_path; a context
    manager (stopped with SIGTERM, then SIGKILL after 30 s)."""

    def __init__(self, bin_path, args, log_path, ready_timeout=120):
        self.port = free_port()
        self.endpoint = "tcp://127.0.0.1:%d" % self.port
        self.cmd = [bin_path, "serve"] + list(args) + ["--endpoint", self.endpoint,
                                                       "--drain-timeout", "0"]
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.proc = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=self.log,
                                     env=dict(os.environ, STRATA_LOG="warn"),
                                     start_new_session=True)
        deadline = time.time() + self.ready_timeout
        while True:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
            if "strata serve: ready on" in text:
                break
            if self.proc.poll() is not None or time.time() > deadline:
                self.__exit__()
                sys.exit("strata serve did not start (%s):\n%s" % (" ".join(self.cmd),
                                                                   text[-3000:]))
            time.sleep(0.1)
        # every actor answered once (the router's SUB sockets are connected by then too)
        deadline = time.time() + 20
        while True:
            h = call(self.endpoint, {"type": "health"}, "health_reply")
            if h and h.get("ok"):
                return self
            if time.time() > deadline:
                self.__exit__()
                sys.exit("strata serve (%s): not every actor ready after 20 s: %s" % (
                    " ".join(self.cmd), ", ".join("%s %s" % (x["name"], x["state"])
                                                  for x in (h or {}).get("actors", [])
                                                  if x["state"] != "ready") or "no answer"))
            time.sleep(0.1)

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def call(endpoint, msg, want, timeout=10):
    """One request/reply on a fresh DEALER: the first answer of type want, or None."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    s.send(msgpack.packb(msg, use_bin_type=True))
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            if s.poll(100):
                m = msgpack.unpackb(s.recv(), raw=False)
                if m.get("type") == want:
                    return m
        return None
    finally:
        s.close(0)


def stats(endpoint):
    m = call(endpoint, {"type": "stats"}, "stats_reply")
    if m is None:
        raise RuntimeError("no stats_reply from " + endpoint)
    return m["counters"]


def tokenize(bin_path, text, special=True):
    out = subprocess.run([bin_path, "tokenize", "-p", text] + ([] if special else
                                                                ["--no-special"]),
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("strata tokenize: " + out.stderr)
    return [int(x) for x in out.stdout.split()]


def write_atomic(path, text):
    """A chunk: written to path.tmp and renamed, so that a file that exists is complete."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def check_config(out, config):
    """The folder's config.json must match this run's (a rerun resumes only the same
    benchmark); writes it when new.  Exits with a message otherwise."""
    path = os.path.join(out, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if old != config:
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            sys.exit("%s holds chunks of another configuration (%s differ): use another --out "
                     "or delete it" % (out, ", ".join(diff)))
    else:
        write_atomic(path, json.dumps(config, indent=1, sort_keys=True) + "\n")


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs; nan for none."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]
