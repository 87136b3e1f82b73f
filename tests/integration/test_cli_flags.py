#!/usr/bin/env python3
"""The commands' flags are one table (bin/cli_flags.h): a flag that generate and client
share (--top-k, --temp, ...) is declared once, in the protocol's range (msgs/msg_types.h),
and where an actor option means the same (the http actor's top_k and min_p, the worker's
threads and kv_type) it takes that option's range and parser.  So a value past the range
is refused the same way by `strata generate`, `strata client` and the actor option in a
topology file, and --help prints the same range for both commands.  Needs no model: every
refusal comes before anything is loaded."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

BIN = os.environ.get("STRATA_BIN", "build/strata")
SRC = os.environ.get("STRATA_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def refusal(args):
    """The one stderr line of a refused command line, or None (accepted, several lines)."""
    p = run(args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    return lines[0] if 0 < p.returncode < 128 and len(lines) == 1 else None


def protocol_limit(name):
    """The value of #define name in msgs/msg_types.h ("(1 << 24)" evaluated)."""
    text = open(os.path.join(SRC, "msgs", "msg_types.h"), encoding="utf-8").read()
    m = re.search(r"^#define %s\s+([^/\n]+)" % name, text, re.M)
    return int(eval(m.group(1).replace("u", "")))  # noqa: S307 (a C integer expression)


def actor_range(actor, key):
    p = run(["actor", "--list-options"])
    for line in p.stdout.splitlines():
        a, k, _typ, _default, rng, _help = line.split("\t")
        if (a, k) == (actor, key):
            return rng
    return None


TOPO = """# one http actor with an option
frontend   ipc://%(d)s/frontend   client=tcp://127.0.0.1:1
tokenizer  ipc://%(d)s/tokenizer
router     ipc://%(d)s/router
worker0    ipc://%(d)s/worker0    %(worker)s
http       ipc://%(d)s/http       %(http)s
"""


def topology_refusal(d, actor, **kw):
    path = os.path.join(d, "topo.txt")
    with open(path, "w") as f:
        f.write(TOPO % dict({"d": d, "worker": "", "http": ""}, **kw))
    return refusal(["actor", actor, "--topology", path])


def test_shared_ranges(d):
    top_k = protocol_limit("MSG_MAX_TOP_K")
    last_n = protocol_limit("MSG_MAX_REPEAT_LAST_N")
    check(actor_range("http", "top_k") == f"0..{top_k}",
          f"the http actor's top_k is 0..MSG_MAX_TOP_K ({actor_range('http', 'top_k')})")
    cases = [  # flag, a refused value, the range every refusal names
        ("--top-k", str(top_k + 1), f"0..{top_k}"),
        ("--top-k", "-1", f"0..{top_k}"),
        ("--repeat-last-n", str(last_n + 1), f"0..{last_n}"),
        ("--min-p", "1.5", "0..1"),
        ("--temp", "-1", "0..100"),
        ("--top-p", "0", "1e-06..1"),
        ("--repeat-penalty", "11", "0.001..10"),
        ("--seed", "-1", "0..18446744073709551615"),
    ]
    for flag, value, rng in cases:
        lines = {}
        for cmd in ("generate", "client"):
            args = [cmd, flag, value, "-p", "x"]
            line = refusal(args)
            lines[cmd] = line
            check(line is not None and line.startswith(f"strata {cmd}: bad value for {flag}: "
                                                       f"'{value}'") and rng in line,
                  f"{cmd} {flag} {value}: refused naming the flag and {rng}: {line!r}")
        same = (lines["generate"] or "").split(": ", 1)[-1] == (lines["client"] or "").split(
            ": ", 1)[-1]
        check(same, f"{flag} {value}: generate and client say the same")
    # the edge of the range is accepted (what follows fails for other reasons)
    line = refusal(["client", "--top-k", str(top_k), "--timeout", "0.2", "-e",
                    "tcp://127.0.0.1:9", "-p", "x"])
    check(line is None or "--top-k" not in line, f"client --top-k {top_k} is accepted: {line!r}")
    line = refusal(["generate", "--top-k", str(top_k), "-m", os.path.join(d, "none.gguf"),
                    "-p", "x"])
    check(line is not None and "--top-k" not in line and "cannot open" in line,
          f"generate --top-k {top_k} is accepted: {line!r}")
    # the actor option refuses the same value with the same range
    line = topology_refusal(d, "http", http=f"top_k={top_k + 1}")
    check(line is not None and f"top_k={top_k + 1}" in line and f"0..{top_k}" in line,
          f"topology http top_k={top_k + 1}: refused with 0..{top_k}: {line!r}")
    line = topology_refusal(d, "http", http="min_p=1.5")
    check(line is not None and "min_p=1.5" in line and "0..1" in line,
          f"topology http min_p=1.5: refused with 0..1: {line!r}")
    # the worker's threads and kv_type are the model commands' -t and --kv-type
    threads = actor_range("worker<N>", "threads")
    kv = actor_range("worker<N>", "kv_type")
    for cmd in ("generate", "perplexity", "bench-model", "logits"):
        line = refusal([cmd, "-t", "100000"])
        check(line is not None and f"bad value for --threads: '100000'" in line and
              threads in line, f"{cmd} -t 100000: refused with the worker's {threads}: {line!r}")
        line = refusal([cmd, "--kv-type", "q3"])
        check(line is not None and "bad value for --kv-type: 'q3'" in line and kv in line,
              f"{cmd} --kv-type q3: refused with the worker's {kv}: {line!r}")
    line = topology_refusal(d, "worker0", worker="threads=100000")
    check(line is not None and threads in line,
          f"topology worker threads=100000: refused with {threads}: {line!r}")


def test_help():
    """--help is made from the rows: the shared flags read the same in both commands."""
    rows = {}
    for cmd in ("generate", "client"):
        p = run([cmd, "--help"])
        check(p.returncode == 0 and p.stdout.startswith(f"usage: strata {cmd}"),
              f"{cmd} --help: usage first, exit 0")
        # a flag's text runs to the next line that starts a flag
        text = re.split(r"\n(?=  (?:-\w,|   ) --)", p.stdout)
        rows[cmd] = {re.search(r"--([\w-]+)", t).group(1): " ".join(t.split())
                     for t in text if re.match(r"  (?:-\w,|   ) --", t)}
    for flag in ("greedy", "temp", "top-k", "top-p", "min-p", "repeat-penalty", "repeat-last-n",
                 "seed", "stop"):
        g, c = rows["generate"].get(flag), rows["client"].get(flag)
        check(g is not None and g == c, f"--{flag}: one help text in generate and client: {g!r}")
    top_k = protocol_limit("MSG_MAX_TOP_K")
    check(f"0..{top_k}" in (rows["generate"].get("top-k") or ""),
          "--help prints --top-k's range from the table")


def main():
    with tempfile.TemporaryDirectory() as d:
        test_shared_ranges(d)
        test_help()
    print(f"{'PASS' if not failures else 'FAIL'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
