"""serve_util.py - helpers for the service integration tests: start `strata serve`
(thread or process mode) on a free port, talk to it with raw ZeroMQ + MessagePack
(docs/PROTOCOL.md), and compute the `strata generate --greedy` reference.

Importing it skips the test (exit 77; a failure under CI=true) without the default model
or the msgpack / zmq packages: every service test serves the default model."""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

testenv.require("msgpack", "zmq")
MODEL = testenv.model_path()  # what `strata serve` loads by default (STRATA_MODEL or the cache)
MODEL_ID = os.path.basename(MODEL)  # its id in the HTTP API (`model`; docs/HTTP.md, model names)

import msgpack  # noqa: E402
import zmq  # noqa: E402

# the server's hang and loss timeouts are this many times longer in a sanitizer build
# (base/base_clock.h BASE_TIMEOUT_SCALE; CMake passes it): waits for them scale too
TIMEOUT_SCALE = int(os.environ.get("STRATA_TIMEOUT_SCALE", "1"))

BIN = os.environ.get("STRATA_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "strata")

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn.",
    "Name three primary colors.",
    "How many legs does a spider have?",
    "Explain gravity to a child.",
    "What is 12 times 12?",
    "Give me a synonym for happy.",
    "Describe the smell of rain.",
    "Why do cats purr?",
    "Tell me a joke about computers.",
    "What is the boiling point of water?",
    "Translate 'good morning' into Spanish.",
    "List two planets larger than Earth.",
    "What does a baker do?",
    "Suggest a name for a pet goldfish.",
    "Summarize the story of Cinderella in one sentence.",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """A running `strata serve`; use as a context manager."""

    def __init__(self, args, ready_timeout=120):
        self.port = free_port()
        self.endpoint = "tcp://127.0.0.1:%d" % self.port
        self.args = args
        self.ready_timeout = ready_timeout
        self.log = tempfile.NamedTemporaryFile(prefix="strata-serve-", suffix=".log", delete=False)
        self.proc = None

    def start(self):
        env = dict(os.environ, STRATA_LOG=os.environ.get("STRATA_LOG", "info"))
        cmd = [BIN, "serve"] + [a.replace("@ENDPOINT@", self.endpoint) for a in self.args]
        if "--topology" not in self.args:
            cmd += ["--endpoint", self.endpoint]
        if "--drain-timeout" not in self.args:  # stop() waits 15 s: a drain must end before
            cmd += ["--drain-timeout", "5"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + self.ready_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("strata serve exited (%d):\n%s" % (self.proc.returncode,
                                                                       self.read_log()))
            if "strata serve: ready on" in self.read_log():
                return self
            time.sleep(0.1)
        raise RuntimeError("strata serve not ready:\n" + self.read_log())

    def read_log(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("strata serve did not stop on SIGTERM:\n" + self.read_log())
        return self.proc.returncode if self.proc else 0

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None and rc != 0:
            raise RuntimeError("strata serve exited with %s:\n%s" % (rc, self.read_log()))
        os.unlink(self.log.name)


def process_topology(d, port, defaults="threads=1 max_batch=16 kv_blocks=512", opts=None,
                     extra=()):
    """A process-mode topology over ipc:// in directory d (frontend, tokenizer, router,
    worker0, worker1, then the actors named in extra), the client endpoint on
    tcp://127.0.0.1:port; opts: {actor or "supervisor": "key=value ..."} added to its
    line.  Returns its path."""
    opts = opts or {}
    path = os.path.join(d, "topology.txt")
    lines = ["# strata topology for a process-mode test",
             "supervisor ipc://%s/supervisor %s" % (d, opts.get("supervisor", "")),
             "defaults   -  %s" % defaults,
             "frontend   ipc://%s/frontend client=tcp://127.0.0.1:%d %s"
             % (d, port, opts.get("frontend", ""))]
    for name in ["tokenizer", "router", "worker0", "worker1"] + list(extra):
        lines.append("%-10s ipc://%s/%s %s" % (name, d, name, opts.get(name, "")))
    with open(path, "w") as f:
        f.write("\n".join(l.rstrip() for l in lines) + "\n")
    return path


def actor_pids(log, name=r"\S+"):
    """PIDs of actor name (default: every actor) in a supervisor's log, oldest first."""
    return [int(p) for p in re.findall(r"started %s \(pid (\d+)\)" % name, log)]


def alive(pid):
    """Running or stopped; a zombie (exited, not yet reaped by whoever adopted it) is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pack(m):
    return msgpack.packb(m, use_bin_type=True)


def unpack(b):
    return msgpack.unpackb(b, raw=False)


_xxh = None


def xxh3(b):
    """XXH3-64 of b, from the libxxhash strata links (no Python package needed)."""
    global _xxh
    if _xxh is None:
        import ctypes
        _xxh = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
        _xxh.restype, _xxh.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t]
    return _xxh(b, len(b))


def internal(header, raw=None):
    """The frames of a message between actors (docs/FAULTS.md, "Checksum"): header
    (packed bytes) with its XXH3-64 trailer; with raw, the raw frame's sum before it."""
    if raw is not None:
        header = header + xxh3(raw).to_bytes(8, "little")
    frames = [header + xxh3(header).to_bytes(8, "little")]
    return frames + [raw] if raw is not None else frames


class Client:
    """One DEALER connection."""

    def __init__(self, ctx, endpoint):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, m):
        self.sock.send(pack(m) if isinstance(m, dict) else m)

    def recv(self, timeout=60):
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no answer from the server")
        return unpack(self.sock.recv())

    def call(self, m, timeout=30):
        self.send(m)
        return self.recv(timeout)

    def close(self):
        self.sock.close(0)


def chat_request(rid, prompt, max_tokens):
    return {"type": "generate", "v": 1, "id": rid, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}


def run_concurrent(endpoint, prompts, max_tokens, timeout=180, fault=None):
    """Send every prompt at once from its own client; return {i: (tokens, done)}.  fault:
    called once, when every request has a token or has ended (a kill mid-stream); it gets
    the indexes of the requests still running then."""
    ctx = zmq.Context.instance()
    clients = [Client(ctx, endpoint) for _ in prompts]
    for i, (c, p) in enumerate(zip(clients, prompts)):
        c.send(chat_request("r%d" % i, p, max_tokens))
    poller = zmq.Poller()
    for c in clients:
        poller.register(c.sock, zmq.POLLIN)
    by_sock = {c.sock: i for i, c in enumerate(clients)}
    toks = {i: [] for i in range(len(prompts))}
    result = {}
    deadline = time.time() + timeout
    while len(result) < len(prompts):
        if time.time() > deadline:
            raise TimeoutError("only %d of %d requests finished" % (len(result), len(prompts)))
        if fault and all(toks[i] or i in result for i in toks):
            fault([i for i in toks if i not in result])
            fault = None
        for sock, _ in poller.poll(20 if fault else 1000):
            i = by_sock[sock]
            m = unpack(sock.recv())
            if m["type"] == "token":
                assert m["index"] == len(toks[i]), (m, toks[i])
                toks[i].append(m["token"])
            elif m["type"] in ("done", "error"):
                result[i] = (toks[i], m)
    for c in clients:
        c.close()
    return result


def reference(prompt, max_tokens, model=None, system=None, threads=1):
    """Token ids of `strata generate --chat --greedy` (the service's reference); of model
    (default: the default model), with system as the system turn when given."""
    cmd = [BIN, "generate", "--chat", "-p", prompt, "-n", str(max_tokens), "--greedy",
           "--print-ids", "-t", str(threads)]
    cmd += ["-m", model] if model else []
    cmd += ["--system", system] if system is not None else []
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120 * TIMEOUT_SCALE)
    if out.returncode != 0:
        raise RuntimeError("strata generate failed: " + out.stderr)
    return [int(x) for x in out.stdout.split()]


# The default model's chat template (SmolLM2's ChatML, as its GGUF's tokenizer.chat_template
# writes it): a system turn with this text when the messages do not begin with one.
CHATML_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(messages):
    """The prompt text SmolLM2's chat template makes of messages (with the assistant opener),
    written here from the template, not taken from strata."""
    out = ""
    if not messages or messages[0]["role"] != "system":
        out += "<|im_start|>system\n%s<|im_end|>\n" % CHATML_SYSTEM
    for m in messages:
        out += "<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"])
    return out + "<|im_start|>assistant\n"


def tokenize(text):
    """Token ids of text from `strata tokenize` (special-token text such as <|im_start|>
    parsed as the service's tokenizer actor parses a rendered chat prompt)."""
    out = subprocess.run([BIN, "tokenize", "-p", text], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise RuntimeError("strata tokenize failed: " + out.stderr)
    return [int(x) for x in out.stdout.split()]


def stats(endpoint):
    c = Client(zmq.Context.instance(), endpoint)
    try:
        m = c.call({"type": "stats"})
        assert m["type"] == "stats_reply", m
        return m["counters"]
    finally:
        c.close()


def health(endpoint):
    c = Client(zmq.Context.instance(), endpoint)
    try:
        m = c.call({"type": "health"})
        assert m["type"] == "health_reply", m
        return m
    finally:
        c.close()


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def http_get(port, path, timeout=10):
    """(status, headers lower-cased, parsed JSON body or None) of GET path on 127.0.0.1:port;
    (0, {}, None) when nothing answers (not listening yet, or gone)."""
    import http.client
    import json
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
    except OSError:
        return 0, {}, None
    return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(body or b"null")


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)
