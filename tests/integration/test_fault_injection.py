#!/usr/bin/env python3
"""`strata serve --faults SPEC` (docs/FAULTS.md): a bad spec is refused with one line
naming the bad item; a good one starts the service with every actor's links under
faults, and the actors count what they injected (faults.* in stats).  Then the
issue-10 check: with drop, duplicate and delay at 5% on every link between actors
(seeded), 8 concurrent streaming greedy requests all end with `done`, each token
event arrives once and in order, and the tokens equal `strata generate --greedy`."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as u  # first: it skips without the model, zmq or msgpack


def refused(spec, needle):
    p = subprocess.run([u.BIN, "serve", "--faults", spec], capture_output=True, text=True,
                       timeout=60)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    u.check(0 < p.returncode < 128 and len(lines) == 1 and needle in lines[0],
            "--faults %s: rc=%d stderr=%r" % (spec, p.returncode, lines))
    print("ok   --faults %s refused: %s" % (spec, lines[0]))


def main():
    refused("drop=2", "strata serve: --faults drop=2: 'drop=2': probability out of range [0, 1]")
    refused("seed=1,delay=0.5", "'delay=0.5': expected P:MS")
    refused("seed=1,lose=0.1", "'lose=0.1': unknown key 'lose'")
    with u.Server(["--faults", "seed=1,drop=0.05", "--no-tiers"]) as s:
        log = s.read_log()
        u.check("fault injection on: seed=1,drop=0.05" in log, "the actors say faults are on")
        # the frontend's heartbeats (ping + stats query to every peer, each second) cross
        # faulty links: some are dropped, and the actors report their counts
        found = {}

        def counted():
            try:
                c = u.stats(s.endpoint)
            except Exception:  # a stats reply waits for answers that may be lost
                return None
            found.update({k: v for k, v in c.items() if ".faults." in k or
                          k.startswith("faults.")})
            return sum(v for k, v in found.items() if k.endswith("faults.dropped")) > 0

        u.wait_for(counted, 60, "some actor reports faults.dropped > 0")
        print("ok   strata serve --faults seed=1,drop=0.05 runs: %s" %
              ", ".join("%s=%d" % kv for kv in sorted(found.items()) if kv[1]))
    end_to_end()
    print("all ok")


def end_to_end():
    n, max_tokens = 8, 32
    spec = "seed=7,drop=0.05,dup=0.05,delay=0.05:20"
    want = {i: u.reference(u.PROMPTS[i], max_tokens) for i in range(n)}
    # short loss timeouts: a dropped request or final event is found in ~0.5 s
    slow = u.TIMEOUT_SCALE
    with u.Server(["--faults", spec, "--workers", "2", "-t", "1"]) as s:
        t0 = time.time()
        res = u.run_concurrent(s.endpoint, u.PROMPTS[:n], max_tokens, timeout=300 * slow)
        took = time.time() - t0
        c = u.stats(s.endpoint)
    for i in range(n):
        toks, final = res[i]
        u.check(final["type"] == "done", "request %d under faults ended with %r" % (i, final))
        u.check(toks == want[i], "request %d under faults differs from the reference" % i)
    injected = {k: v for k, v in c.items() if ".faults." in k and v}
    resumed = {k: v for k, v in c.items() if k.startswith("frontend.resumed") and v}
    u.check(sum(v for k, v in injected.items() if k.endswith("dropped")) > 0, "nothing dropped")
    print("ok   --faults %s: %d/%d requests done, identical to the reference, in %.1f s;"
          " injected %s; resumed %s" % (spec, n, n, took, injected, resumed))


if __name__ == "__main__":
    main()
