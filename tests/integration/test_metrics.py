#!/usr/bin/env python3
"""The metrics actor (docs/METRICS.md): `strata serve --metrics HOST:PORT` serves the
stats counters as Prometheus text, which prometheus_client's parser reads (histograms
cumulative, +Inf = count, gauges and counters typed by name); 404 and 405 where they are
due; and the status page renders in headless Chromium with no console error, before any
request (empty charts) and after some (the screenshot is kept as a test artifact:
build/test-artifacts/status.png).

Skips (exit 77; a failure under CI=true) without the model, prometheus_client or
chromium.  Bounded: about 30 s, at most 90 s."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

testenv.require("prometheus_client")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    testenv.skip("chromium not found (Debian package chromium; scripts/setup installs it)")

import serve_util  # noqa: E402  (skips without the model, msgpack or zmq)
from serve_util import check  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

DEADLINE = time.time() + 90 * serve_util.TIMEOUT_SCALE
N_REQUESTS = 4
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(serve_util.BIN)), "test-artifacts")


def left(cap):
    """Seconds to give a step: cap, or what is left of the test's 90 s."""
    return max(1.0, min(cap, DEADLINE - time.time()))


def http(url, method="GET"):
    """(status, headers, body text) of one request."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=left(10)) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def scrape(base):
    """The families of /metrics by name (prometheus_client's parser: a counter's family
    name has no _total), after checking the status and content type."""
    status, headers, text = http(base + "/metrics")
    check(status == 200, "/metrics answers 200 (got %d: %s)" % (status, text[:200]))
    check("version=0.0.4" in headers.get("Content-Type", ""),
          "/metrics is text format 0.0.4 (%s)" % headers.get("Content-Type"))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    check(len(families) > 20, "/metrics parses into families (%d)" % len(families))
    return families, text


def check_histograms(families):
    """Every histogram: per label set, buckets cumulative in le order, +Inf equal to
    _count, _sum >= 0.  Returns {family: {actor: count}}."""
    counts = {}
    for f in families.values():
        if f.type != "histogram":
            continue
        by = {}
        for s in f.samples:
            actor = s.labels.get("actor", "")
            d = by.setdefault(actor, {"buckets": []})
            if s.name.endswith("_bucket"):
                d["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                d["count"] = s.value
            elif s.name.endswith("_sum"):
                d["sum"] = s.value
        for actor, d in by.items():
            b = sorted(d["buckets"])
            values = [v for _, v in b]
            check(len(b) >= 2 and b[-1][0] == float("inf"),
                  "%s{%s} has buckets and a +Inf bucket" % (f.name, actor))
            check(values == sorted(values), "%s{%s}: buckets are cumulative %r"
                  % (f.name, actor, values))
            check(d.get("count") == values[-1], "%s{%s}: +Inf bucket %s = count %s"
                  % (f.name, actor, values[-1], d.get("count")))
            check(d.get("sum", -1) >= 0, "%s{%s}: sum >= 0" % (f.name, actor))
            counts.setdefault(f.name, {})[actor] = d.get("count")
    return counts


def value(families, name, typ, actor):
    f = families.get(name)
    check(f is not None, "/metrics has %s" % name)
    check(f.type == typ, "%s is a %s (%s)" % (name, typ, f.type))
    got = [s.value for s in f.samples if s.labels.get("actor") == actor]
    check(len(got) == 1, "%s has one sample for actor=%s (%r)" % (name, actor, got))
    return got[0]


def chromium(url, d, args):
    """Run headless Chromium on url; (stdout, stderr)."""
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--user-data-dir=" + d,
           "--no-first-run", "--enable-logging=stderr", "--v=0", "--window-size=1280,1100",
           "--virtual-time-budget=6000"] + args + [url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=left(40))
    return p.stdout, p.stderr


def check_page(base, d, what, screenshot=None):
    """The page renders, reads /metrics at least once and reports no error: none in the
    DOM (the page writes its errors and console.error calls into #errors), none in
    Chromium's console log (CONSOLE lines on stderr: the page itself logs nothing)."""
    dom, err = chromium(base + "/?every=1000", d, ["--dump-dom"])
    m = re.search(r'<body[^>]*data-polls="(\d+)"[^>]*data-errors="(\d+)"', dom)
    check(m is not None, "%s: the page rendered (%s)" % (what, dom[:200]))
    errors = re.search(r'<pre id="errors">(.*?)</pre>', dom, re.S)
    check(int(m.group(2)) == 0 and errors and not errors.group(1).strip(),
          "%s: no errors in the page: %r" % (what, errors.group(1) if errors else dom[-500:]))
    check(int(m.group(1)) >= 1, "%s: the page read /metrics (%s polls)" % (what, m.group(1)))
    console = [l for l in err.splitlines() if ":CONSOLE" in l]
    check(not console, "%s: no console messages: %r" % (what, console))
    if screenshot:
        os.makedirs(os.path.dirname(screenshot), exist_ok=True)
        if os.path.exists(screenshot):
            os.unlink(screenshot)
        chromium(base + "/?every=1000", d, ["--screenshot=" + screenshot])
        check(os.path.getsize(screenshot) > 10000 if os.path.exists(screenshot) else False,
              "%s: a screenshot was written to %s" % (what, screenshot))
        print("screenshot: %s" % screenshot)
    print("ok   %s: page rendered, %s polls, no errors" % (what, m.group(1)))


def main():
    port = serve_util.free_port()
    base = "http://127.0.0.1:%d" % port
    args = ["--metrics", "127.0.0.1:%d" % port, "--draft", "ngram", "--max-batch", "4"]
    with tempfile.TemporaryDirectory(prefix="strata-metrics-") as d, \
            serve_util.Server(args, ready_timeout=left(60)) as srv:
        # before any request: the page has empty charts and no error
        check_page(base, d, "page before any request")

        # wrong path, wrong method
        check(http(base + "/nope")[0] == 404, "an unknown path is 404")
        status, headers, _ = http(base + "/metrics", method="POST")
        check(status == 405 and "GET" in headers.get("Allow", ""), "POST /metrics is 405 + Allow")

        prompts = serve_util.PROMPTS[:N_REQUESTS]
        res = serve_util.run_concurrent(srv.endpoint, prompts, 16, timeout=left(60))
        check(all(m["type"] == "done" for _, m in res.values()), "every request is done")
        time.sleep(1.2)  # past the metrics actor's 1 s cache
        scrape(base)     # the metrics actor's own counters reach the frontend on each query
        time.sleep(1.2)
        families, text = scrape(base)
        counts = check_histograms(families)

        # counters and gauges
        check(value(families, "strata_frontend_requests", "counter", "frontend") == N_REQUESTS,
              "strata_frontend_requests_total counts the %d requests" % N_REQUESTS)
        check(value(families, "strata_frontend_tokens", "counter", "frontend") > 0,
              "strata_frontend_tokens_total > 0")
        check(value(families, "strata_frontend_requests_active", "gauge", "frontend") == 0,
              "strata_frontend_requests_active is a gauge, 0 when idle")
        free = value(families, "strata_worker_kv_free_blocks", "gauge", "worker0")
        total = value(families, "strata_worker_kv_total_blocks", "gauge", "worker0")
        check(0 < free <= total, "worker0 KV blocks: %d free of %d" % (free, total))
        value(families, "strata_worker_running", "gauge", "worker0")
        value(families, "strata_router_alive_worker0", "gauge", "router")
        value(families, "strata_kvtier_t1_hits", "counter", "kvtier")       # tier hits
        value(families, "strata_worker_spec_proposed", "counter", "worker0")  # drafts
        value(families, "strata_worker_spec_accepted", "counter", "worker0")
        check(value(families, "strata_metrics_scrapes", "counter", "metrics") >= 2,
              "the metrics actor counts its scrapes")

        # a histogram's count: the frontend observes every finished request's TTFT
        # (actor_metrics_req_observe), once each
        got = counts.get("strata_frontend_ttft_seconds", {}).get("frontend")
        check(got == N_REQUESTS, "strata_frontend_ttft_seconds{actor=frontend} count %s = %d "
              "requests (histograms: %s)" % (got, N_REQUESTS, sorted(counts)))

        # the page with data, and its screenshot
        check_page(base, d, "page after %d requests" % N_REQUESTS,
                   screenshot=os.path.join(ARTIFACTS, "status.png"))
    print("all ok")


if __name__ == "__main__":
    main()
