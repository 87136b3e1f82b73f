"""test_config_env.py - configuration from the environment and --print-config (issue 27,
docs/OPERATIONS.md "Configuration").

- thread mode: STRATA_WORKER_MAX_BATCH=3, STRATA_WORKER_THREADS=1, STRATA_FRONTEND_PROGRESS_MS
  with --max-batch 5: --print-config says worker0 max_batch 5 from --max-batch (a flag beats
  the environment), threads 1 and progress_ms from the environment (named), kv_blocks the
  default;
- process mode: a topology file with a defaults line and STRATA_WORKER1_KV_BLOCKS: worker1's
  kv_blocks from the environment, worker0's from the file's defaults line (a line beats the
  environment);
- a bad value (STRATA_WORKER_THREADS=abc) stops the start naming the variable; a misspelt
  one (STRATA_WORKER_THREDS) is warned about;
- the running service uses an environment value: STRATA_WORKER_MAX_BATCH=2 -> the worker's
  ready line says batch 2.
Exit 0 pass, 1 fail, 77 skip."""
import os
import re
import shutil
import subprocess
import tempfile

import serve_util as u  # first: it skips without the model, zmq or msgpack


def run(args, env, timeout=60):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([u.BIN, "serve"] + args, capture_output=True, text=True, env=e,
                          timeout=timeout)


def row(out, actor, key):
    """(value, source) of actor's key in --print-config's output."""
    block = re.search(r"^%s \S+\n((?:  .*\n)*)" % re.escape(actor), out, re.M)
    u.check(block, "no %s block in:\n%s" % (actor, out[:2000]))
    m = re.search(r"^  %s\s+(\S+)\s+# (.*)$" % re.escape(key), block.group(1), re.M)
    u.check(m, "no %s.%s in:\n%s" % (actor, key, block.group(1)))
    return m.group(1), m.group(2)


def main():
    p = run(["--print-config", "--max-batch", "5"],
            {"STRATA_WORKER_MAX_BATCH": "3", "STRATA_WORKER_THREADS": "1",
             "STRATA_FRONTEND_PROGRESS_MS": "7000"})
    u.check(p.returncode == 0, "--print-config failed: %s" % p.stderr)
    u.check(row(p.stdout, "worker0", "max_batch") == ("5", "--max-batch"),
            "max_batch: %r" % (row(p.stdout, "worker0", "max_batch"),))
    u.check(row(p.stdout, "worker0", "threads") == ("1", "environment STRATA_WORKER_THREADS"),
            "threads: %r" % (row(p.stdout, "worker0", "threads"),))
    u.check(row(p.stdout, "frontend", "progress_ms") ==
            ("7000", "environment STRATA_FRONTEND_PROGRESS_MS"),
            "progress_ms: %r" % (row(p.stdout, "frontend", "progress_ms"),))
    u.check(row(p.stdout, "worker0", "kv_blocks")[0] == "512", "kv_blocks default")
    print("thread mode: a flag beats the environment, the environment fills the rest, named")

    d = tempfile.mkdtemp(prefix="strata-cfg-")
    try:
        path = u.process_topology(d, u.free_port(), defaults="threads=1 kv_blocks=256")
        p = run(["--topology", path, "--print-config"], {"STRATA_WORKER1_KV_BLOCKS": "128",
                                                         "STRATA_WORKER_KV_BLOCKS": "64"})
        u.check(p.returncode == 0, "--print-config (process mode) failed: %s" % p.stderr)
        v0, s0 = row(p.stdout, "worker0", "kv_blocks")
        v1, s1 = row(p.stdout, "worker1", "kv_blocks")
        u.check(v0 == "256" and "defaults line" in s0, "worker0 kv_blocks %s (%s)" % (v0, s0))
        u.check(v1 == "256" and "defaults line" in s1, "worker1 kv_blocks %s (%s)" % (v1, s1))
        u.check(row(p.stdout, "worker1", "max_batch") == ("16", "default"),
                "worker1 max_batch %r" % (row(p.stdout, "worker1", "max_batch"),))
        p = run(["--topology", path, "--print-config"], {"STRATA_WORKER1_STEP_TOKENS": "128",
                                                         "STRATA_WORKER_STEP_TOKENS": "64"})
        v0, s0 = row(p.stdout, "worker0", "step_tokens")
        v1, s1 = row(p.stdout, "worker1", "step_tokens")
        u.check((v0, s0) == ("64", "environment STRATA_WORKER_STEP_TOKENS") and
                (v1, s1) == ("128", "environment STRATA_WORKER1_STEP_TOKENS"),
                "step_tokens: worker0 %s (%s), worker1 %s (%s)" % (v0, s0, v1, s1))
        print("process mode: the file's defaults line beats the environment; "
              "STRATA_WORKER1_* beats STRATA_WORKER_*")
    finally:
        shutil.rmtree(d, ignore_errors=True)

    p = run(["--endpoint", "tcp://127.0.0.1:%d" % u.free_port()], {"STRATA_WORKER_THREADS": "abc"},
            timeout=60)
    u.check(p.returncode != 0 and "STRATA_WORKER_THREADS=abc" in p.stderr,
            "a bad environment value: rc %d, %s" % (p.returncode, p.stderr[-500:]))
    p = run(["--print-config"], {"STRATA_WORKER_THREDS": "2"})
    u.check(p.returncode == 0 and "STRATA_WORKER_THREDS names no option of worker" in p.stderr,
            "a misspelt variable: %s" % p.stderr[-500:])
    print("a bad value stops the start naming the variable; a misspelt one is warned about")

    os.environ["STRATA_WORKER_MAX_BATCH"] = "2"
    try:
        with u.Server(["--threads", "1"]) as s:
            u.check(re.search(r"worker0.*ready: .*batch 2,", s.read_log()),
                    "the worker's ready line: %s" % s.read_log()[-1500:])
    finally:
        del os.environ["STRATA_WORKER_MAX_BATCH"]
    print("the running worker took STRATA_WORKER_MAX_BATCH=2")
    print("ok")


if __name__ == "__main__":
    main()
