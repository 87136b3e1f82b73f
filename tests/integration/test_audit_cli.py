#!/usr/bin/env python3
"""`strata audit verify` and `strata audit show` (docs/AUDIT.md) on logs written through the
library by tests/tools/audit_gen (STRATA_AUDIT_GEN; CTest sets it): an intact rotated log
verifies, and an independent Python reading of the format (hashlib's BLAKE2b) agrees with it;
each tampering (an edited byte, a deleted record, two swapped, a torn last record, records cut
off the end) makes verify exit 1 with one line naming the first bad record; a torn tail is
noted by the writer when it reopens; show renders a record as a summary, JSON, its raw line
and an auditor's report, and says when the record or its chain is broken."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

BIN = testenv.strata_bin()
GEN = os.environ.get("STRATA_AUDIT_GEN")
GENESIS = "0" * 64
TAIL = 75  # ,"hash":"<64 hex>"}
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")
    if not ok:
        failures.append(name)


def run(*args):
    return subprocess.run([BIN, "audit", *args], capture_output=True, text=True, timeout=60)


def gen(d, n, *opts):
    p = subprocess.run([GEN, d, str(n), *opts], capture_output=True, text=True, timeout=60)
    if p.returncode:
        testenv.fail(f"audit_gen {d} {n}: {p.stderr.strip()}")


def files(d):
    return sorted(f for f in os.listdir(d) if f.startswith("audit-") and f.endswith(".log"))


def independent_verify(d):
    """The chain as docs/AUDIT.md states it, read without the C code: every line's hash is
    BLAKE2b-256 of the line with its hash tail replaced by "}", prev is the previous hash,
    seq counts from 1.  Returns the records, in order."""
    prev, seq, records = GENESIS, 0, []
    for name in files(d):
        for line in open(os.path.join(d, name), "rb").read().split(b"\n")[:-1]:
            rec = json.loads(line)
            assert line.endswith(b'"}') and line[-TAIL:].startswith(b',"hash":"'), line[-80:]
            body = line[:-TAIL] + b"}"
            assert hashlib.blake2b(body, digest_size=32).hexdigest() == rec["hash"], rec["seq"]
            seq += 1
            assert rec["seq"] == seq and rec["prev"] == prev, (rec["seq"], seq)
            assert list(rec)[-2:] == ["prev", "hash"]
            prev = rec["hash"]
            records.append(rec)
    head = json.load(open(os.path.join(d, "audit.head")))
    assert head["seq"] <= seq
    return records, head


def broken_line(p):
    """The one line a failing verify prints first."""
    return p.stdout.splitlines()[0] if p.stdout else ""


def tampered(src, name, fn):
    """A copy of log src with fn(dir) applied; verify's result on it."""
    d = os.path.join(os.path.dirname(src), name)
    shutil.copytree(src, d)
    fn(d)
    return d, run("verify", d)


def lines_of(path):
    return open(path, "rb").read().split(b"\n")[:-1]


def write_lines(path, lines, torn=b""):
    open(path, "wb").write(b"".join(x + b"\n" for x in lines) + torn)


def main():
    if not GEN or not os.access(GEN, os.X_OK):
        testenv.fail(f"STRATA_AUDIT_GEN is not the audit_gen tool: {GEN!r} (CTest sets it)")
    p = subprocess.run([BIN, "audit", "--help"], capture_output=True, text=True)
    check("audit --help", p.returncode == 0 and "strata audit verify" in p.stdout)
    p = subprocess.run([BIN, "--help"], capture_output=True, text=True)
    check("listed in strata --help", "  audit " in p.stdout)

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.gguf")
        open(model, "wb").write(os.urandom(300000))
        log = os.path.join(tmp, "log")
        gen(log, 30, "--model", model, "--max-bytes", "8000")
        nfiles = len(files(log))
        check("rotated into several files", nfiles >= 3, f"{nfiles} files")

        p = run("verify", log)
        check("verify intact: exit 0", p.returncode == 0, p.stdout + p.stderr)
        check("verify summary", f"intact: 30 records (seq 1..30) in {nfiles} files" in p.stdout
              and "head anchors seq 30" in p.stdout, p.stdout)
        records, head = independent_verify(log)
        check("an independent reading agrees (30 records, chained across files)",
              len(records) == 30 and head["seq"] == 30 and head["hash"] == records[-1]["hash"])
        check("model sha256 is the file's", records[0]["model_sha256"] ==
              hashlib.sha256(open(model, "rb").read()).hexdigest())
        r9 = records[8]
        check("fields of a record", r9["id"] == "req-9" and r9["rid"] == "%016x" % (0x5000 + 9)
              and r9["client"]["routing_id"] == "0080004109" and r9["params"]["seed"] == "51"
              and r9["params"]["stop"] == ["\n\n", "User:"] and r9["end"] == {"finish": "eos"}
              and r9["trace"]["blake2b"] and r9["time"] == "2026-01-01T00:00:13.500000Z",
              json.dumps(r9))
        prompt9 = "What is 9 times 10?\nAnswer briefly."
        check("prompt hash is BLAKE2b of the prompt bytes", r9["prompt"]["blake2b"] ==
              hashlib.blake2b(prompt9.encode(), digest_size=32).hexdigest())
        r8 = records[7]
        chat = b""
        for role, content in (("system", "You are a calculator."),
                              ("user", "What is 8 times 9?\nAnswer briefly.")):
            chat += len(role).to_bytes(4, "little") + role.encode()
            chat += len(content.encode()).to_bytes(8, "little") + content.encode()
        check("chat hash is BLAKE2b of the length-prefixed messages", r8["prompt"]["blake2b"] ==
              hashlib.blake2b(chat, digest_size=32).hexdigest())
        check("output hash of a streamed answer", r8["output"]["blake2b"] ==
              hashlib.blake2b(b"8 times 9 is 72.", digest_size=32).hexdigest())
        check("a CURVE client is named by its key", records[3]["client"]["curve_key"] ==
              "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7")

        # ---- show
        p = run("show", "req-9", "--dir", log)
        check("show summary", p.returncode == 0 and "Request req-9" in p.stdout
              and "cost:    25 tokens: 19 of prompt (8 of them from the cache) + 6 generated"
              in p.stdout and "ended:   completed" in p.stdout, p.stdout + p.stderr)
        p = run("show", "req-14", "--dir", log)
        check("show summary of an error", p.returncode == 0 and
              "failed: internal (every worker was lost)" in p.stdout, p.stdout)
        p = run("show", "req-9", "--dir", log, "--as", "json")
        check("show json", p.returncode == 0 and json.loads(p.stdout) == r9, p.stdout[:200])
        p = run("show", "req-9", "--dir", log, "--as", "raw")
        raw9 = [x for x in b"".join(open(os.path.join(log, f), "rb").read() for f in
                                    files(log)).split(b"\n") if b'"id":"req-9"' in x][0]
        check("show raw is the exact line", p.stdout.encode() == raw9 + b"\n")
        p = run("show", "%016x" % (0x5000 + 9), "--dir", log, "--as", "audit")
        out = p.stdout
        check("show audit (by rid)", p.returncode == 0 and "AUDIT REPORT: record seq 9" in out
              and "connection routing id 0080004109" in out and r9["model_sha256"] in out
              and "seed          51 (the server's)" in out
              and "trace kept    matches its digest" in out and '"actor":' in out
              and "record        intact" in out and "chain         intact from genesis" in out,
              out)
        p = run("show", "req-12", "--dir", log, "--as", "audit")
        check("show audit: CURVE key, chat", "CURVE public key rq:rM" in p.stdout
              and "prompt        messages" in p.stdout, p.stdout)
        p = run("show", "--seq", "2", "--dir", log)
        check("show --seq", p.returncode == 0 and "Request req-2" in p.stdout, p.stdout)
        p = run("show", "req-99", "--dir", log)
        check("show of an unknown id: exit 1, one line", p.returncode == 1
              and len(p.stderr.strip().splitlines()) == 1 and "no record" in p.stderr, p.stderr)
        p = run("show", "req-9", "--dir", log, "--as", "poster")
        check("show --as bad: exit 2", p.returncode == 2, p.stderr)

        texts = os.path.join(tmp, "texts")
        gen(texts, 4, "--store-text")
        p = run("show", "req-3", "--dir", texts)
        check("show summary with kept text", "What is 3 times 4?" in p.stdout
              and "3 times 4 is 12." in p.stdout, p.stdout)
        p = run("show", "req-2", "--dir", texts)
        check("show summary of a kept chat", "system: You are a calculator." in p.stdout,
              p.stdout)

        # ---- tampering: exit 1 and the first bad record named
        f2 = os.path.join(log, files(log)[1])
        n_first = len(lines_of(os.path.join(log, files(log)[0])))
        s2 = n_first + 1  # seq of the first record of file 2

        def edit(d):
            path = os.path.join(d, files(d)[1])
            b = bytearray(open(path, "rb").read())
            i = b.index(b'"completion_tokens":6')
            b[i + 20] = ord("5")
            open(path, "wb").write(bytes(b))
        d, p = tampered(log, "edit", edit)
        check("edited byte: exit 1, named", p.returncode == 1 and
              f"BROKEN at {files(log)[1]} line 1 " in broken_line(p) and
              f"seq {s2}: edited" in broken_line(p), p.stdout)
        p = run("show", f"req-{s2}", "--dir", d, "--as", "audit")
        check("show of the edited record says so", p.returncode == 1 and
              "record        BROKEN" in p.stdout, p.stdout)
        p = run("show", f"req-{s2 + 2}", "--dir", d)
        check("show of a record after it warns", p.returncode == 1 and
              "chain before this record is broken" in p.stderr, p.stderr)
        p = run("show", "req-1", "--dir", d, "--as", "audit")
        check("show of a record before it: intact up to it", p.returncode == 0 and
              "intact up to this record; broken after it" in p.stdout, p.stdout)

        def delete(d):
            path = os.path.join(d, files(d)[1])
            ls = lines_of(path)
            write_lines(path, ls[:1] + ls[2:])
        _, p = tampered(log, "delete", delete)
        check("deleted record: exit 1, named", p.returncode == 1 and
              f"line 2 " in broken_line(p) and f"seq {s2 + 1}: sequence" in broken_line(p),
              p.stdout)

        def swap(d):
            path = os.path.join(d, files(d)[0])
            ls = lines_of(path)
            ls[2], ls[3] = ls[3], ls[2]
            write_lines(path, ls)
        _, p = tampered(log, "swap", swap)
        check("swapped records: exit 1, named", p.returncode == 1 and
              "audit-000001.log line 3 " in broken_line(p) and "seq 3: sequence" in
              broken_line(p), p.stdout)

        last = os.path.join(log, files(log)[-1])
        n_last = len(lines_of(last))

        def torn(d):
            path = os.path.join(d, files(d)[-1])
            ls = lines_of(path)
            write_lines(path, ls[:-1], torn=ls[-1][:50])
        _, p = tampered(log, "torn", torn)
        check("torn last record: exit 1, named with its offset", p.returncode == 1 and
              f"line {n_last} " in broken_line(p) and "seq 30: torn: torn record: 50 bytes" in
              broken_line(p), p.stdout)

        def cut(d):
            path = os.path.join(d, files(d)[-1])
            write_lines(path, lines_of(path)[:-2])
        _, p = tampered(log, "cut", cut)
        check("records cut off the end: exit 1, named", p.returncode == 1 and
              "seq 29: truncated" in broken_line(p) and "records 29..30 were cut off" in
              broken_line(p), p.stdout)

        # ---- a crash mid-write: verify reports the torn tail; the writer notes it when it
        # reopens (a new file, whose first record names the torn bytes), and the log
        # verifies again
        crash = os.path.join(tmp, "crash")
        gen(crash, 5)
        with open(os.path.join(crash, files(crash)[-1]), "ab") as f:
            f.write(b'{"v":1,"type":"request","seq":6,"time":"2026-01-')
        p = run("verify", crash)
        check("crash mid-write: torn, exit 1", p.returncode == 1 and "seq 6: torn" in
              broken_line(p), p.stdout)
        gen(crash, 3)
        p = run("verify", crash)
        check("torn tail noted on reopen: intact again", p.returncode == 0 and
              "1 torn write" in p.stdout and "intact: 9 records" in p.stdout, p.stdout)
        torn_rec = json.loads(lines_of(os.path.join(crash, files(crash)[-1]))[0])
        check("the torn record names the bytes", torn_rec["type"] == "torn" and
              torn_rec["torn"]["file"] == "audit-000001.log" and torn_rec["torn"]["bytes"] == 48,
              json.dumps(torn_rec))
        p = run("verify", os.path.join(crash, files(crash)[-1]))
        check("verify FILE", p.returncode == 0 and "one file" in p.stdout, p.stdout)

        p = run("verify", os.path.join(tmp, "nothing"))
        check("verify of a missing path: exit 2, one line", p.returncode == 2 and
              len(p.stderr.strip().splitlines()) == 1, p.stderr)

    if failures:
        testenv.fail(f"{len(failures)} check(s) failed: {', '.join(failures)}")
    print("all audit CLI checks passed")


if __name__ == "__main__":
    main()
