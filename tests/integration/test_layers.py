#!/usr/bin/env python3
"""The layering of the source tree (../shared/DESIGN.md, "Layers"): dependencies point
downwards only.  Every `#include "..."` of every .c/.h/.cu file is resolved to the folder
that holds the header, and that folder must be one the including layer may use.  Above
all: kvstore/ and msgs/ include nothing from model/ (they know KV shapes and wire types,
not models).  And inside actors/: an actor is a thin shell (DESIGN.md, "Actors"), so no
actor includes another actor's header; what two actors share is library code (serve/, the
serving policy: no sockets) or one of the runtime-level headers of RUNTIME below.  And
library code is testable without ZeroMQ: no layer but actors/ and clients/c includes a
messaging or HTTP header (SOCKETS).  And no file of actors/ passes 700 lines (those still over
it may only shrink).  Reads the source only; needs no build and no model."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

# layer -> the layers it may include (itself always)
ALLOWED = {
    "base": set(),
    "kernels": {"base"},
    "msgs": {"base"},
    "model": {"kernels", "base"},
    "kvstore": {"kernels", "base"},
    "router": {"base"},
    "sched": {"base"},
    "audit": {"msgs", "base"},
    "grammar": {"base"},
    "clients/c": {"msgs", "base"},
    # the serving policy the actors call (request table, OpenAI schema, HTTP routes, ...):
    # library code, testable without ZeroMQ, so never actors/
    "serve": {"grammar", "model", "kvstore", "sched", "router", "msgs", "kernels", "base", "audit"},
    "actors": {"serve", "grammar", "router", "sched", "kvstore", "model", "kernels", "msgs", "clients/c",
               "audit", "base"},
}

# The headers of actors/ that any file of actors/ may include: the runtime every actor runs
# on, not an actor.  Why each one:
RUNTIME = {
    "actor_runtime.h": "the loop, mailbox, counters, env: what every actor is built on",
    "actor_opts.h": "option tables as data (every actor declares its options with it)",
    "actor_registry.h": "the table of actors by name (the runtime spawns from it)",
    "actor_topology.h": "which actors exist and where (included by actor_runtime.h)",
    "actor_faults.h": "fault injection on every link (the runtime applies it)",
    "actor_curve.h": "CURVE keys of tcp links (every actor that binds or connects)",
    "actor_supervisor.h": "process mode: spawns and restarts actors (bin/ uses it)",
    "actor_placement.h": "the MoE expert placement read from the topology (router, workers "
                         "and expert actors agree on it)",
    "actor_expert_client.h": "the target worker's messaging side of the expert actors (the "
                             "MoE exec hook): socket code, so not library, and no actor",
}
# The one file that names every actor: the registry's table of main functions.
REGISTRY = "actors/actor_registry.c"
ACTOR_MAIN = re.compile(r"^\s*int\s+(actor_\w+)_main\s*\(", re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)
# The headers of sockets and HTTP, and the layers that may use them (the others are library
# code: DESIGN.md, "Library code ... is testable without ZeroMQ").
SOCKETS = {"zmq.h", "czmq.h", "microhttpd.h"}
SOCKET_LAYERS = {"actors", "clients/c"}


def layer_of(path):
    """The layer of a path relative to the source root, or None (bin/, tests/, ...)."""
    for layer in sorted(ALLOWED, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


# An actor is a thin shell (DESIGN.md, "Actors"; issue 38): no file of actors/ passes this many
# lines.  A file found over it during a split may be listed here with its size, so that it can
# only shrink until it is split; none is now.
MAX_ACTOR_LINES = 700
STILL_OVER = {}


def actor_sizes(texts):
    """texts: {relative path: source} of actors/.  One line per file over its limit."""
    bad = []
    for rel, text in sorted(texts.items()):
        n = text.count("\n")
        limit = STILL_OVER.get(rel, MAX_ACTOR_LINES)
        if n > limit:
            bad.append(f"{rel}: {n} lines, more than {limit} (split it: policy into serve/, "
                       f"or the actor into files by concern)")
    return bad


def lateral_includes(texts):
    """texts: {relative path: source} of actors/.  The actors are the headers that declare
    an actor_<name>_main; a file of actors/ may include its own header and those of RUNTIME,
    never another actor's (the registry excepted).  Returns one line per violation."""
    actors = {os.path.basename(p) for p, t in texts.items()
              if p.endswith(".h") and ACTOR_MAIN.search(t)}
    bad = []
    for rel, text in sorted(texts.items()):
        if rel == REGISTRY:
            continue
        own = os.path.splitext(os.path.basename(rel))[0] + ".h"
        for inc in INCLUDE.findall(text):
            name = os.path.basename(inc)
            if name in actors and name != own and name not in RUNTIME:
                bad.append(f"{rel}: includes {name}, another actor's header (share library "
                           f"code in serve/ or a runtime-level header instead)")
    return bad


def socket_includes(texts):
    """texts: {relative path: source}.  One line per library file that includes a header of
    SOCKETS."""
    bad = []
    for rel, text in sorted(texts.items()):
        layer = layer_of(rel)
        if layer is None or layer in SOCKET_LAYERS:
            continue
        for inc in SYSTEM_INCLUDE.findall(text):
            if os.path.basename(inc) in SOCKETS:
                bad.append(f"{rel}: includes <{inc}> ({layer}/ is library code: no sockets)")
    return bad


def self_test():
    """The lateral rule flags what it must and nothing else, on a made-up tree."""
    tree = {
        "actors/actor_a.h": "int actor_a_main(actor_env_t *env);\n",
        "actors/actor_b.h": "int actor_b_main(actor_env_t *env);\n",
        "actors/actor_a.c": '#include "actor_a.h"\n#include "actor_runtime.h"\n',
        "actors/actor_b.c": '#include "actor_b.h"\n#include "actor_a.h"\n',
        REGISTRY: '#include "actor_a.h"\n#include "actor_b.h"\n',
    }
    got = lateral_includes(tree)
    assert len(got) == 1 and got[0].startswith("actors/actor_b.c: includes actor_a.h"), got
    got = socket_includes({"serve/serve_x.c": "#include <czmq.h>\n#include <stdio.h>\n",
                           "actors/actor_a.c": "#include <czmq.h>\n"})
    assert len(got) == 1 and got[0].startswith("serve/serve_x.c: includes <czmq.h>"), got


def main():
    src = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    src = os.path.abspath(src)
    if not os.path.isdir(os.path.join(src, "kvstore")):
        testenv.fail(f"no source tree at {src} (STRATA_SRC)")
    headers = {}  # file name -> paths holding it (the build puts every layer on the path)
    files = []
    for layer in ALLOWED:
        for root, _, names in os.walk(os.path.join(src, layer)):
            for n in names:
                rel = os.path.relpath(os.path.join(root, n), src)
                if n.endswith(".h"):
                    headers.setdefault(n, []).append(rel)
                if n.endswith((".c", ".h", ".cu")):
                    files.append(rel)
    bad = []
    for rel in sorted(files):
        me = layer_of(rel)
        text = open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
        for inc in INCLUDE.findall(text):
            here = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if os.path.exists(os.path.join(src, here)):
                target = here
            elif os.path.exists(os.path.join(src, inc)):
                target = inc
            elif len(headers.get(os.path.basename(inc), [])) == 1:
                target = headers[os.path.basename(inc)][0]
            else:
                bad.append(f"{rel}: #include \"{inc}\" resolves to no single header")
                continue
            them = layer_of(target)
            if them is None or them == me or them in ALLOWED[me]:
                continue
            bad.append(f"{rel}: {me}/ includes {target} ({them}/ is not below {me}/)")
    self_test()
    texts = {rel: open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
             for rel in files if rel.startswith("actors/")}
    bad += lateral_includes(texts)
    bad += actor_sizes(texts)
    bad += socket_includes({rel: open(os.path.join(src, rel), encoding="utf-8",
                                      errors="replace").read() for rel in files})
    for b in bad:
        print("FAIL " + b)
    print(f"{len(files)} files checked, {len(bad)} layering violation(s)")
    # the rule this test exists for, stated on its own
    assert ALLOWED["kvstore"].isdisjoint({"model", "msgs"}) and "model" not in ALLOWED["msgs"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
