"""test_device_worker.py - the GPU worker's code path as a service (issue 25), run on the
seam's CPU backend (`device=cpu-seam`: model_dev_forward, the T0 KV pool in the backend's
memory, blocks to and from T1 through the backend's staging buffer), and -- as the CTest
entry cuda_device_worker (label cuda), STRATA_TEST_DEVICE=cuda:0 -- on a GPU, where it
exits 77 when no CUDA device is visible (or the build has no CUDA).

Process mode, a mixed topology on the default model as F16 (its sibling file, or `strata
quantize` of it): worker0 the CPU worker (device=cpu), worker1 the device worker, the KV
tier manager (T1) with write-through.  6 concurrent greedy chat requests:
1. without a fault, every answer equals `strata generate --chat --greedy` (the CPU forward,
   itself checked against NumPy and llama.cpp), and the device worker served some;
2. SIGKILL of the device worker mid-stream: its requests resume on the CPU worker from the
   tokens delivered, and every answer still equals the reference (each token once, in
   order);
3. SIGKILL of the CPU worker mid-stream: its requests resume on the device worker (which
   promotes their written-through blocks from T1 into its pool, or recomputes them), same
   check;
4. on the default (quantized) model, thread mode, one worker each: the device worker's
   answers against the CPU worker's by the near-tie rule below;
and the device worker moved blocks both ways (kv.t0 counters of its T0: written through
to T1, inserted from it) and picked greedy tokens on the device (sample.device: only the ids
came back).

Why F16 and equality: F16 weights multiply F16-rounded activations on both paths, so the
two forwards differ only in summation order (packed rows on the CPU, plain ones on the
seam) and greedy text is equal (measured: these 8 answers).  On a quantized model the
activations are quantized to 8 bits, where a last-bit difference can move a value across a
rounding step; thirty layers carry that to a mean KL of 0.009 between packed and plain
(test_model_device), so free text parts at near ties: the quantized round (4.) checks that
the device worker's answers agree with the CPU worker's up to the first step where they part,
and part only where the CPU worker's own top-2 log-probabilities are less than TIE apart,
the device worker taking the CPU's second choice (test_gemma_greedy.py's rule); where one
ends and the other goes on, the top-2 of the one that went on must be that close.
On CUDA every comparison takes that rule against the CPU worker's answers (the CUDA
mat-vec multiplies float activations, cuBLAS F16 ones, the CPU F16 ones: a step's numbers
depend on its path and batch, as in any GPU engine), and a resumed answer must keep to it
too (STRATA_TEST_TIE_RULE=1 runs the seam that way, to check the checker).  Every
process is stopped by PID (the serve process group).
Exit 0 pass, 1 fail, 77 skip."""
import os
import shutil
import signal
import subprocess
import tempfile

import serve_util as u  # first: it skips without the model, zmq or msgpack

N, MAX_TOKENS = 6, 24
AGREE = "equal to the reference"
SLOW = u.TIMEOUT_SCALE
TIE = 0.3
DEVICE = os.environ.get("STRATA_TEST_DEVICE", "cpu-seam")
EXACT = DEVICE == "cpu-seam" and not os.environ.get("STRATA_TEST_TIE_RULE")  # see above
if not EXACT:
    AGREE = "within the near-tie rule of the CPU worker's answers"


def parts_at_tie(what, i, ref, toks):
    """Check that toks (token ids) keeps to ref ([(token, top-2)] of the CPU worker) up to
    a near tie; returns True when equal."""
    a = [t for t, _ in ref]
    k = next((j for j in range(min(len(a), len(toks))) if a[j] != toks[j]), None)
    if k is None and len(a) == len(toks):
        return True
    if k is None:  # one ended (an end-of-turn token, not sent) where the other went on
        k = min(len(a), len(toks))
        u.check(len(a) > k, "%s: request %d went on past the CPU's end at token %d (no "
                "log-probabilities to judge it)" % (what, i, k))
        top, took_second = ref[k][1], True
    else:
        top = ref[k][1]
        took_second = toks[k] == top[1][0]
    gap = top[0][1] - top[1][1]
    u.check(gap < TIE and took_second,
            "%s: request %d parts at token %d: it took %s, the CPU's top-2 %s (gap %.3f; a "
            "tie needs < %.1f and the second choice)"
            % (what, i, k, toks[k] if k < len(toks) else "the end", top, gap, TIE))
    print("%s: request %d parts at token %d, a near tie (top-2 gap %.3f)" % (what, i, k, gap))
    return False


def f16_model(d):
    """The default model as F16: the sibling file when there, else `strata quantize`."""
    sib = os.path.join(os.path.dirname(u.MODEL), "SmolLM2-135M-Instruct.F16.gguf")
    if os.path.isfile(sib):
        return sib
    out = os.path.join(d, "f16.gguf")
    subprocess.run([u.BIN, "quantize", "--threads", "2", "--quiet", u.MODEL, out, "f16"],
                   check=True, timeout=300)
    return out


def answers(args, n_tok):
    """{i: [(token, [(top token, logprob), ...])]} of the first N prompts, greedy, one at
    a time, from a `strata serve` with args."""
    out = {}
    with u.Server(args) as srv:
        c = u.Client(u.zmq.Context.instance(), srv.endpoint)
        try:
            for i in range(N):
                m = u.chat_request("q%d" % i, u.PROMPTS[i], n_tok)
                m["top_logprobs"] = 2
                c.send(m)
                got = []
                while True:
                    e = c.recv(120 * SLOW)
                    if e["type"] == "token":
                        got.append((e["token"], [(t["token"], t["logprob"]) for t in e["top"]]))
                    elif e["type"] == "done":
                        break
                    else:
                        raise AssertionError("prompt %d: %r" % (i, e))
                out[i] = got
        finally:
            c.close()
    return out


def quantized_round():
    """The device worker on the default model against the CPU worker: equal, or equal up to
    a step where the CPU's top-2 are less than TIE apart and the device took the second."""
    cpu = answers(["--device", "cpu", "--threads", "1"], 20)
    dev = answers(["--device", DEVICE], 20)
    n_equal = sum(parts_at_tie("quantized", i, cpu[i], [t for t, _ in dev[i]])
                  for i in range(N))
    print("quantized: %d/%d answers equal, the rest part at near ties" % (n_equal, N))


def cuda_or_skip():
    """Skip (77) unless a CUDA worker can start here: a build with CUDA and a visible GPU."""
    if "cuda" not in DEVICE:
        return
    srv = u.Server(["--device", DEVICE, "--no-tiers"], ready_timeout=120 * SLOW)
    try:
        srv.start()
    except RuntimeError as e:
        if "no CUDA device" in str(e) or "has no CUDA" in str(e):
            u.testenv.skip("%s: %s" % (DEVICE, str(e).strip().splitlines()[-1]), ci_fails=False)
        raise
    finally:
        srv.stop()


def main():
    cuda_or_skip()
    d = tempfile.mkdtemp(prefix="strata-device-")
    port = u.free_port()
    f16 = f16_model(d)
    path = u.process_topology(d, port, defaults="threads=1 max_batch=16 kv_blocks=512 "
                              "model=" + f16, opts={
        "supervisor": "hang_timeout_ms=2000",
        "frontend": "hang_timeout_ms=2000 accept_ms=2000",
        "worker0": "device=cpu",
        "worker1": "device=" + DEVICE,
        "kvtier": "t1_blocks=1024 t2_dir=none"}, extra=("kvtier",))
    if EXACT:
        want = {i: u.reference(u.PROMPTS[i], MAX_TOKENS, model=f16) for i in range(N)}
    else:
        ref = answers(["--device", "cpu", "--threads", "1", "-m", f16], MAX_TOKENS)
    s = u.Server(["--topology", path])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    try:
        with s:
            ep = s.endpoint
            u.wait_for(lambda: u.health(ep)["ok"], 30 * SLOW, "health ok")
            log = s.read_log()
            u.check("device %s (%s backend)" % (DEVICE, "cuda" if "cuda" in DEVICE else "cpu")
                    in log,
                          "worker1's ready line does not name its device:\n" + log[-2000:])

            def served(i):
                return u.stats(ep).get("worker%d.tokens.decode" % i, 0)

            def round_(what, fault=None):
                res = u.run_concurrent(ep, u.PROMPTS[:N], MAX_TOKENS, timeout=240 * SLOW,
                                       fault=fault)
                for i in range(N):
                    toks, done = res[i]
                    u.check(done["type"] == "done", "%s: request %d ended %r"
                                  % (what, i, done))
                    if EXACT:
                        u.check(toks == want[i], "%s: request %d differs from the reference"
                                "\n  got  %s\n  want %s" % (what, i, toks, want[i]))
                    else:
                        parts_at_tie(what, i, ref[i], toks)
                return res

            d0 = served(1)
            round_("no fault")
            n_dev = served(1) - d0
            u.check(n_dev > 0, "the device worker decoded no token")
            print("no fault: %d/%d %s; the device worker decoded %d tokens" % (N, N, AGREE, n_dev))

            for victim, other in (("worker1", "worker0"), ("worker0", "worker1")):
                old = u.actor_pids(s.read_log(), victim)[-1]
                r0 = u.stats(ep).get("frontend.resumed", 0)

                def kill(running, pid=old):
                    kill.in_flight = running
                    os.kill(pid, signal.SIGKILL)
                round_("SIGKILL %s" % victim, kill)
                n_resumed = u.stats(ep).get("frontend.resumed", 0) - r0
                u.check(n_resumed >= 1, "SIGKILL %s resumed no request" % victim)
                print("SIGKILL %s (%s): %d in flight, %d resumed on %s, all %s"
                      % (victim, "device" if victim == "worker1" else "cpu",
                         len(kill.in_flight), n_resumed, other, AGREE))
                u.wait_for(lambda: u.actor_pids(s.read_log(), victim)[-1] != old, 15 * SLOW,
                           "%s restarted" % victim)
                u.wait_for(lambda: u.health(ep)["ok"], 60 * SLOW, "health ok")

            st = u.stats(ep)
            moved = {k: v for k, v in st.items()
                     if k.startswith("worker1.kv.") and ("inserted" in k or "written" in k
                                                         or "write" in k)}
            print("device worker's T0 <-> T1 counters:", moved)
            u.check(st.get("worker1.kv.written", 0) > 0, "the device worker wrote no block "
                    "through to T1")
            picked = st.get("worker1.sample.device", 0)
            print("device worker: %d tokens picked on the device (only their ids came back)"
                  % picked)
            u.check(picked > 0, "the device worker picked no token on the device")
        quantized_round()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
