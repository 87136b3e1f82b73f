#!/usr/bin/env python3
"""Actor options are declared once: the registry lists every actor
(`strata actor --help`), every option of docs/TOPOLOGY.md matches the actors'
tables (`strata actor --list-options`) both ways, and a malformed, out-of-range
or unknown option is refused with one line that names the actor, the key, the
value and what is allowed: in a topology file and as a `strata serve` flag."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

BIN = os.environ.get("STRATA_BIN", "build/strata")
SRC = os.environ.get("STRATA_SRC", ".")
MODEL = testenv.model_candidate()
ACTORS = ["frontend", "tokenizer", "router", "worker<N>", "draft", "kvtier", "prefetcher",
          "semcache", "metrics", "http", "expert<N>"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=60)


def expect_error(name, args, needles):
    """One line on stderr, a non-zero status, every needle in that line."""
    p = run(args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = 0 < p.returncode < 128 and len(lines) == 1 and all(n in lines[0] for n in needles)
    check(ok, "%s: rc=%d stderr=%r" % (name, p.returncode, lines))


def test_registry():
    p = run(["actor", "--help"])
    check(p.returncode == 0, "strata actor --help exits 0")
    listed = re.findall(r"^  (\S+) +\S", p.stdout, re.M)
    for a in ACTORS:
        check(a in listed, "strata actor --help lists %s with its purpose" % a)


def options_dump():
    p = run(["actor", "--list-options"])
    check(p.returncode == 0, "strata actor --list-options exits 0")
    rows = {}
    for line in p.stdout.splitlines():
        actor, key, typ, default, rng, helptext = line.split("\t")
        # "all": an option every actor takes (the runtime reads it)
        check(actor in ACTORS + ["all"] and helptext.strip() != "",
              "dump row %s.%s is complete" % (actor, key))
        rows[(actor, key)] = (typ, default, rng)
    return rows


def docs_table():
    text = open(os.path.join(SRC, "docs", "TOPOLOGY.md")).read()
    section = text[text.index("## Options"):]
    section = section[:section.index("\n## ", 4)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([a-z0-9_]+)` \| `([a-z<>N]+)` \| (\w+) \| (.+?) \| (.+?) \| .+ \|$",
                     line)
        if not m:
            continue
        key, actor, typ, default, rng = m.groups()
        default = "-" if default == "—" else default.strip("`")
        rows[(actor, key)] = (typ, default, rng.replace("\\|", "|"))
    return rows


def test_docs():
    dump, docs = options_dump(), docs_table()
    check(len(docs) > 20, "docs/TOPOLOGY.md has an options table (%d rows)" % len(docs))
    for k in sorted(set(dump) | set(docs)):
        if k not in docs:
            check(False, "docs/TOPOLOGY.md lacks %s.%s %r" % (k[0], k[1], dump[k]))
        elif k not in dump:
            check(False, "docs/TOPOLOGY.md has %s.%s, which no table declares" % k)
        elif dump[k] != docs[k]:
            check(False, "docs/TOPOLOGY.md says %s.%s is %r, the table %r" % (k + (docs[k], dump[k])))
    check(set(dump) == set(docs), "docs and tables have the same %d options" % len(dump))


TOPO = """# test topology
supervisor ipc://%(d)s/supervisor
defaults   -   threads=1 %(defaults)s
frontend   ipc://%(d)s/frontend   client=tcp://127.0.0.1:1
tokenizer  ipc://%(d)s/tokenizer
router     ipc://%(d)s/router     %(router)s
worker0    ipc://%(d)s/worker0    %(worker)s
kvtier     ipc://%(d)s/kvtier     %(kvtier)s
%(extra)s
"""


def topology(d, worker="", defaults="", kvtier="", router="", extra=""):
    path = os.path.join(d, "topo.txt")
    with open(path, "w") as f:
        f.write(TOPO % {"d": d, "worker": worker, "defaults": defaults, "kvtier": kvtier,
                        "router": router, "extra": extra})
    return path


def test_topology(d):
    # a good file parses: the only complaint is about the actor asked for
    path = topology(d, worker="threads=2 max_batch=8 kv_type=f16 prefix_cache=0 spec_k=4",
                    defaults="kv_blocks=64 policy=lru", kvtier="t1_fmt=int4 t2_dir=none")
    expect_error("a valid topology parses", ["actor", "nosuch", "--topology", path],
                 ["no actor 'nosuch'"])
    cases = [
        ("malformed int", dict(worker="threads=abc"),
         ["topology line 7: worker0: threads=abc: not an integer (1..256)"]),
        ("int out of range", dict(worker="max_batch=0"),
         ["line 7", "worker0", "max_batch=0", "out of range (1..4096)"]),
        ("unknown key", dict(worker="thread=2"),
         ["line 7", "worker0", "thread=2", "unknown option", "threads"]),
        ("bad enum", dict(kvtier="t1_fmt=q3"),
         ["line 8", "kvtier", "t1_fmt=q3", "f32|f16|int8|int4"]),
        ("bad bool", dict(worker="prefix_cache=maybe"),
         ["worker0", "prefix_cache=maybe", "not a boolean"]),
        ("key of another actor", dict(kvtier="max_batch=4"),
         ["kvtier", "max_batch=4", "unknown option"]),
        ("a key the router does not take", dict(router="threads=2"),
         ["router", "threads=2", "unknown option", "moe_dispatch"]),
        ("defaults: bad value for an actor declaring it", dict(defaults="kv_type=int4"),
         ["line 3", "defaults", "kv_type=int4", "f32|f16|int8", "worker<N>"]),
        ("defaults: key nobody declares", dict(defaults="bogus=1"),
         ["line 3", "defaults", "bogus=1", "no actor"]),
        ("unknown actor", dict(extra="planner ipc://%s/planner" % d),
         ["line 9", "no actor called 'planner'", "prefetcher"]),
    ]
    for name, kw, needles in cases:
        path = topology(d, **kw)
        expect_error("topology: " + name, ["actor", "worker0", "--topology", path], needles)
    if os.path.exists(MODEL):
        path = topology(d, worker="spec_wait_us=-1")
        expect_error("serve --topology: out of range", ["serve", "--topology", path],
                     ["strata serve", "line 7", "worker0", "spec_wait_us=-1", "0..60000000"])
    else:
        if testenv.in_ci():
            testenv.fail("model not found: %s (required under CI=true)" % MODEL)
        print("skip serve --topology (no model at %s)" % MODEL)


def test_serve_flags():
    cases = [
        (["--threads", "abc"], ["--threads abc", "not an integer (1..256)"]),
        (["--max-batch", "0"], ["--max-batch 0", "out of range (1..4096)"]),
        (["--kv-policy", "fifo"], ["--kv-policy fifo", "lru|lfu|scored"]),
        (["--spec-wait-ms", "70000"], ["--spec-wait-ms 70000", "out of range (0..60000)"]),
        (["--t2-blocks", "x"], ["--t2-blocks x", "not an integer"]),
        (["--t1-type", "f8"], ["--t1-type f8", "f32|f16|int8|int4"]),
    ]
    for args, needles in cases:
        expect_error("serve " + " ".join(args), ["serve"] + args, needles)
    p = run(["serve", "--help"])
    # the help of a mapped flag comes from the option table
    check(p.returncode == 0 and "requests running at once (1..4096, default 16)" in p.stdout,
          "serve --help shows --max-batch from the worker's table")


def main():
    testenv.strata_bin()
    if not os.path.exists(os.path.join(SRC, "docs", "TOPOLOGY.md")):
        print("skip: no docs/TOPOLOGY.md under STRATA_SRC=%s" % SRC)
        sys.exit(77)
    test_registry()
    test_docs()
    with tempfile.TemporaryDirectory(prefix="strata-topo-opts-") as d:
        test_topology(d)
    test_serve_flags()
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("all ok")


if __name__ == "__main__":
    main()
