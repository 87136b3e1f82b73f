"""test_audit_service.py - `strata serve --audit-dir DIR` (docs/AUDIT.md): every finished
request leaves one record, checked against what the client saw with independent hashes
(Python's hashlib): the prompt's and the completion's BLAKE2b-256, the model file's SHA-256,
the finish reason, usage (done.usage, the record's and the trace's tokenize step against
`strata tokenize` of the prompt and the token events), resumes; a traced request's record
carries the trace's digest; an error leaves a record too; `strata audit verify` accepts the
log the service wrote, and rejects it once a record is edited, naming its file and line."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import serve_util as u  # first: it skips without the model, zmq or msgpack
import zmq


def b2(data):
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def records(d):
    out = []
    for name in sorted(os.listdir(d)):
        if name.startswith("audit-") and name.endswith(".log"):
            with open(os.path.join(d, name), "rb") as f:
                out += [json.loads(line) for line in f if line.strip()]
    return [r for r in out if r.get("type") == "request"]


def check_usage(rid, req, done, n_tok, trace):
    """done.usage against the oracle: prompt_tokens = `strata tokenize` of the prompt,
    completion_tokens = the token events the client got (and, greedy, the ids of
    `strata generate`); a trace's tokenize step names the same prompt count."""
    n_prompt = len(u.tokenize(req["prompt"]))
    got = (done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"])
    u.check(got == (n_prompt, n_tok), "%s: done.usage (prompt, completion) %r, want %r (strata "
            "tokenize, token events)" % (rid, got, (n_prompt, n_tok)))
    if req["temperature"] == 0:
        out = subprocess.run([u.BIN, "generate", "-p", req["prompt"], "-n", str(req["max_tokens"]),
                              "--greedy", "--print-ids", "-t", "1"], capture_output=True,
                             text=True, timeout=120)
        u.check(out.returncode == 0 and len(out.stdout.split()) == n_tok,
                "%s: %d tokens, strata generate %r" % (rid, n_tok, out.stdout))
    if trace is not None:
        tok = [x for x in trace["steps"] if x["what"] == "tokenize"]
        u.check(len(tok) == 1 and tok[0]["why"] == "raw prompt, %d tokens" % n_prompt,
                "%s: the trace's tokenize step %r, want %d tokens" % (rid, tok, n_prompt))


def main():
    d = tempfile.mkdtemp(prefix="strata-audit-")
    try:
        want = {}
        with u.Server(["--audit-dir", d, "--audit-fsync", "always"]) as s:
            c = u.Client(zmq.Context.instance(), s.endpoint)
            for rid, extra in (("plain", {}), ("traced", {"trace": True}),
                               ("sampled", {"temperature": 0.7, "seed": 42})):
                req = dict({"type": "generate", "v": 1, "id": rid, "max_tokens": 12,
                            "prompt": "The three primary colors are", "temperature": 0}, **extra)
                c.send(req)
                text, trace, n_tok = b"", None, 0
                while True:
                    m = c.recv(120)
                    if m["type"] == "token":
                        text += m["text"].encode()
                        n_tok += 1
                    elif m["type"] == "trace":
                        trace = m
                    elif m["type"] in ("done", "error"):
                        break
                u.check(m["type"] == "done", "%s: %r" % (rid, m))
                text += m.get("text", "").encode()
                want[rid] = (req, text, m, trace)
                check_usage(rid, req, m, n_tok, trace)
            # an error that reaches a worker: prompt + max_tokens over the context
            c.send({"type": "generate", "v": 1, "id": "toolong", "max_tokens": 8192,
                    "prompt": "word " * 50})
            m = c.recv(120)
            u.check(m["type"] == "error", "toolong: %r" % m)
            c.close()
        recs = {r["id"]: r for r in records(d)}
        print("records:", sorted(recs))
        u.check(set(recs) == {"plain", "traced", "sampled", "toolong"},
                "one record per finished request: %s" % sorted(recs))
        model_sha = hashlib.sha256(open(u.MODEL, "rb").read()).hexdigest()
        for rid, (req, text, done, trace) in want.items():
            r = recs[rid]
            u.check(r["prompt"]["blake2b"] == b2(req["prompt"].encode()), "%s: prompt hash" % rid)
            u.check(r["output"]["blake2b"] == b2(text) and r["output"]["bytes"] == len(text),
                    "%s: output hash of the %d bytes the client got" % (rid, len(text)))
            u.check(r["model_sha256"] == model_sha, "%s: model sha256" % rid)
            u.check(r["end"].get("finish") == done["finish_reason"], "%s: finish %r" % (rid, r["end"]))
            got = (r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
            want_u = (done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"])
            u.check(got == want_u, "%s: the record's usage %r, the client's %r" % (rid, got, want_u))
            u.check(0 <= r["usage"]["cached_tokens"] <= got[0], "%s: cached tokens %r"
                    % (rid, r["usage"]))
            u.check(r["params"]["temperature"] == req["temperature"], "%s: params" % rid)
            u.check((r["trace"] is not None) == (trace is not None), "%s: trace digest" % rid)
        u.check(recs["sampled"]["params"]["seed"] == "42", "seed kept: %r" % recs["sampled"]["params"])
        u.check(recs["toolong"]["end"].get("error") == "context_length_exceeded", "error record: %r"
                % recs["toolong"]["end"])
        v = subprocess.run([u.BIN, "audit", "verify", d], capture_output=True, text=True,
                           timeout=60)
        print("verify:", v.stdout.strip() or v.stderr.strip())
        u.check(v.returncode == 0, "the service's log verifies")
        # edit one byte of the second record: verify names it
        name = sorted(n for n in os.listdir(d) if n.endswith(".log"))[0]
        path = os.path.join(d, name)
        lines = open(path, "rb").read().split(b"\n")
        lines[1] = lines[1].replace(b'"max_tokens":12', b'"max_tokens":13', 1)
        open(path, "wb").write(b"\n".join(lines))
        v = subprocess.run([u.BIN, "audit", "verify", d], capture_output=True, text=True,
                           timeout=60)
        said = (v.stdout + v.stderr).strip()
        print("after an edit:", said)
        u.check(v.returncode == 1 and re.search(r"BROKEN at \S*%s line 2 \(offset \d+\)"
                                                % re.escape(name), said),
                "the edit is found, at %s line 2: %r" % (name, said))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
