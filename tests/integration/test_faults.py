#!/usr/bin/env python3
"""`strata serve --faults SPEC` (docs/FAULTS.md): a bad spec is refused with one line
naming the bad item; a good one starts the service with every actor's links under
faults, and the actors count what they injected (faults.* in stats)."""
import os
import subprocess
import sys

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
    print("all ok")


if __name__ == "__main__":
    main()
