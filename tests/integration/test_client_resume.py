"""test_client_resume.py - the clients survive a frontend restart (docs/PROTOCOL.md,
"resume"): in process mode (`strata serve --topology FILE`, two workers), SIGKILL the frontend process
while requests stream; the supervisor restarts it, and the Python client (4 greedy
requests and one seeded sampled request, each on its own thread) and `strata client`
notice the lost connection and resume their requests on the new one.  Every request
completes with `done`, each token index exactly once and in order, with the token ids of
an uninterrupted run.  First, without a kill: a `resume` with have=3 (with and without
the token ids) gets the events from index 3 on, equal to the reference."""
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
import strata_client  # noqa: E402

import zmq  # noqa: E402

MAX_TOKENS = 96
GREEDY_PROMPTS = u.PROMPTS[:4]
SAMPLED_PROMPT = "Write a short poem about the sea."
CLI_PROMPT = "Describe a walk through a forest."
SAMPLED = dict(temperature=0.8, seed=7)
DEADLINE_S = 110 * u.TIMEOUT_SCALE  # under 120 s (the sanitizer builds scale it)


def pid_of(log, name):
    pids = u.actor_pids(log, name)
    return pids[-1] if pids else None


def chat(prompt):
    return [{"role": "user", "content": prompt}]


class PyRequest(threading.Thread):
    """One generate() through the Python client, on its own thread and connection:
    records (time, index, token, text) of every event and the done."""

    def __init__(self, endpoint, prompt, **params):
        super().__init__(daemon=True)
        self.endpoint, self.prompt, self.params = endpoint, prompt, params
        self.events, self.done, self.error, self.resumes = [], None, None, 0

    def run(self):
        try:
            with strata_client.StrataClient(self.endpoint, timeout=30) as c:
                for ev in c.generate(messages=chat(self.prompt), max_tokens=MAX_TOKENS,
                                     **self.params):
                    if ev["type"] == "token":
                        self.events.append((time.time(), ev["index"], ev["token"], ev["text"]))
                    else:
                        self.done = (time.time(), ev)
                self.resumes = c.resumes
        except Exception as e:  # reported by the main thread
            self.error = repr(e)

    def tokens(self):
        return [e[2] for e in self.events]

    def text(self):
        return "".join(e[3] for e in self.events) + (self.done[1].get("text") or "")


class HttpRequest(threading.Thread):
    """A streamed chat completion through the http actor (the OpenAI API), read as SSE; n
    choices: texts and finishes by index."""

    def __init__(self, port, prompt, n=1):
        super().__init__(daemon=True)
        self.port, self.prompt, self.n = port, prompt, n
        self.pieces, self.finish, self.error = [], None, None
        self.texts, self.finishes = {}, {}

    def run(self):
        import http.client
        import json
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            c.request("POST", "/v1/chat/completions", json.dumps({
                "messages": [{"role": "user", "content": self.prompt}], "stream": True,
                "max_tokens": MAX_TOKENS, "temperature": 0, "n": self.n}),
                {"Content-Type": "application/json"})
            resp = c.getresponse()
            if resp.status != 200:
                raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:200]))
            for line in resp:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    raise RuntimeError(ev["error"])
                for ch in ev.get("choices", []):
                    piece = ch.get("delta", {}).get("content") or ""
                    self.pieces.append(piece)
                    self.finish = ch.get("finish_reason") or self.finish
                    i = ch.get("index")
                    self.texts[i] = self.texts.get(i, "") + piece
                    if ch.get("finish_reason"):
                        self.finishes[i] = ch["finish_reason"]
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = repr(e)


class CliRequest(threading.Thread):
    """`strata client --chat --greedy` as a subprocess: stdout (time of the first byte),
    stderr, exit code."""

    def __init__(self, endpoint, prompt):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(
            [u.BIN, "client", "-e", endpoint, "--chat", "--greedy", "-n", str(MAX_TOKENS),
             "--timeout", "30", "-p", prompt],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out, self.first_byte, self.err, self.rc = b"", None, b"", None

    def run(self):
        while True:
            b = os.read(self.proc.stdout.fileno(), 4096)
            if not b:
                break
            if self.first_byte is None:
                self.first_byte = time.time()
            self.out += b
        self.err = self.proc.stderr.read()
        self.rc = self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def check_resume_message(ep, ref):
    """A raw `resume` (no kill): have=3 with the token ids, then without them."""
    ctx = zmq.Context.instance()
    for with_ids in (True, False):
        c = u.Client(ctx, ep)
        req = u.chat_request("res-%d" % with_ids, GREEDY_PROMPTS[0], 24)
        req.update(type="resume", have=3)
        if with_ids:
            req["tokens"] = struct.pack("<3i", *ref[:3])
        c.send(req)
        toks, idx = [], []
        while True:
            m = c.recv(30)
            if m["type"] != "token":
                break
            idx.append(m["index"])
            toks.append(m["token"])
        c.close()
        what = "resume have=3 %s the ids" % ("with" if with_ids else "without")
        u.check(m["type"] == "done", "%s: done, got %r" % (what, m))
        u.check(idx == list(range(3, 3 + len(idx))), "%s: indexes from 3: %s" % (what, idx))
        u.check(toks == ref[3:24], "%s: tokens equal reference[3:]" % what)
        # all 24, or fewer where the reference itself ends (EOS) before 24
        u.check(m["usage"]["completion_tokens"] == len(ref[:24]),
                "%s: usage counts all %d: %r" % (what, len(ref[:24]), m))
        print("%s: events %d..%d equal the reference" % (what, idx[0], idx[-1]))


def main():
    t_start = time.time()
    d = tempfile.mkdtemp(prefix="strata-resume-")
    port, hport = u.free_port(), u.free_port()
    s = u.Server(["--topology", u.process_topology(
        d, port, opts={"http": "listen=127.0.0.1:%d" % hport}, extra=("http",))])
    s.port, s.endpoint = port, "tcp://127.0.0.1:%d" % port
    ep = s.endpoint
    cli, pids = None, set()
    try:
        s.start()
        u.wait_for(lambda: u.health(ep)["ok"], 10 * u.TIMEOUT_SCALE, "health ok")
        log = s.read_log()
        pids = set(u.actor_pids(log))
        front = pid_of(log, "frontend")
        u.check(front and len(pids) == 6, "one process per actor: %s" % log)

        refs = [u.reference(p, MAX_TOKENS) for p in GREEDY_PROMPTS]
        check_resume_message(ep, refs[0][:24])

        # uninterrupted runs: the seeded sampled request, and the text of the CLI's prompt
        base = [PyRequest(ep, SAMPLED_PROMPT, **SAMPLED), PyRequest(ep, CLI_PROMPT, temperature=0)]
        for r in base:
            r.start()
        for r in base:
            r.join(60 * u.TIMEOUT_SCALE)
            u.check(r.done and r.done[1]["type"] == "done", "uninterrupted run: %s" % r.error)
        sampled_ref, cli_text = base[0].tokens(), base[1].text()

        # the interrupted runs
        reqs = [PyRequest(ep, p, temperature=0) for p in GREEDY_PROMPTS]
        reqs.append(PyRequest(ep, SAMPLED_PROMPT, **SAMPLED))
        for r in reqs:
            r.start()
        cli = CliRequest(ep, CLI_PROMPT)
        cli.start()
        web = HttpRequest(hport, CLI_PROMPT)
        web.start()
        web2 = HttpRequest(hport, CLI_PROMPT, n=2)  # two choices: two generates to resume
        web2.start()
        u.wait_for(lambda: all(r.events or r.error for r in reqs) and cli.first_byte and
                   len(web.pieces) > 1 and len(web2.texts) == 2, 30 * u.TIMEOUT_SCALE,
                   "the first tokens of every request")
        t_kill = time.time()
        os.kill(front, signal.SIGKILL)
        print("SIGKILL frontend (pid %d) after %s tokens" % (front, [len(r.events) for r in reqs]))
        for r in reqs:
            r.join(max(1, DEADLINE_S - (time.time() - t_start)))
        cli.join(max(1, DEADLINE_S - (time.time() - t_start)))
        web.join(max(1, DEADLINE_S - (time.time() - t_start)))
        web2.join(max(1, DEADLINE_S - (time.time() - t_start)))
        new_front = pid_of(s.read_log(), "frontend")
        u.check(new_front and new_front != front, "the supervisor restarted the frontend")
        pids.add(new_front)

        after = []  # seconds from the kill to each request's next token
        for i, r in enumerate(reqs):
            what = "request %d (%s)" % (i, "seeded" if i == len(GREEDY_PROMPTS) else "greedy")
            u.check(not r.is_alive() and r.error is None, "%s ended: %s" % (what, r.error))
            u.check(r.done and r.done[1]["type"] == "done", "%s: done" % what)
            idx = [e[1] for e in r.events]
            u.check(idx == list(range(len(idx))), "%s: every index once, in order" % what)
            want = refs[i] if i < len(GREEDY_PROMPTS) else sampled_ref
            u.check(r.tokens() == want, "%s: equals the uninterrupted run" % what)
            u.check(r.done[1]["usage"]["completion_tokens"] == len(idx),
                    "%s: usage counts every token: %r" % (what, r.done[1]))
            if r.done[0] > t_kill:  # it was running at the kill
                u.check(r.resumes >= 1, "%s: resumed" % what)
                nxt = [e[0] for e in r.events if e[0] > t_kill]
                if nxt:
                    after.append(nxt[0] - t_kill)
        u.check(not cli.is_alive() and cli.rc == 0,
                "strata client completed (rc %s): %s" % (cli.rc, cli.err.decode(errors="replace")))
        u.check(cli.out.decode() == cli_text + "\n", "strata client: stdout is the text of "
                "the uninterrupted run:\n%r\n%r" % (cli.out.decode(), cli_text))
        u.check(re.search(rb"strata client: connection lost.* resumed after \d+ tokens", cli.err),
                "strata client said it resumed: %r" % cli.err)
        print("strata client stderr: %s" % cli.err.decode(errors="replace").strip())
        u.check(not web.is_alive() and web.error is None and web.finish,
                "the HTTP stream through the gateway completed: %s" % web.error)
        u.check("".join(web.pieces) == cli_text, "the HTTP stream's text equals the "
                "uninterrupted run:\n%r\n%r" % ("".join(web.pieces), cli_text))
        print("the OpenAI-API stream (http actor) resumed and completed (%d chunks)" %
              len(web.pieces))
        u.check(not web2.is_alive() and web2.error is None and sorted(web2.finishes) == [0, 1],
                "the HTTP stream of n=2 completed: %s %r" % (web2.error, web2.finishes))
        u.check(web2.texts == {0: cli_text, 1: cli_text}, "the n=2 stream's choices equal the "
                "uninterrupted run:\n%r\n%r" % (web2.texts, cli_text))
        print("the OpenAI-API stream of n=2 resumed and completed")
        u.check(after, "a request was running at the kill")
        print("kill -> next token at the client: min %.2f s, max %.2f s (%d requests)"
              % (min(after), max(after), len(after)))
        st = u.stats(ep)
        print("new frontend: resumes %s, tokens %s" % (st.get("frontend.client_resumes"),
                                                        st.get("frontend.tokens")))
        u.check(st.get("frontend.client_resumes", 0) >= len(after), "the new frontend counted resumes")
    finally:
        if cli:
            cli.stop()
        rc = s.stop()
        for p in pids:
            if u.alive(p):
                os.kill(p, signal.SIGKILL)
                u.check(False, "pid %d was still running after the server stopped" % p)
        shutil.rmtree(d, ignore_errors=True)
    u.check(rc == 0, "strata serve exited with %s:\n%s" % (rc, s.read_log()))
    os.unlink(s.log.name)
    print("ok (%.1f s)" % (time.time() - t_start))


if __name__ == "__main__":
    main()
