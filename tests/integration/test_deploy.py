"""test_deploy.py - deploy/ (docs/DEPLOY.md): what can be checked here of the systemd units,
the Kubernetes manifests and the image recipe, and the manifests' topology run for real.

1. systemd: `systemd-analyze verify` of deploy/systemd (in a root of its own: the units
   under etc/, Debian's units beside them, a stand-in for /usr/local/bin/strata) says
   nothing at all; each unit is Type=notify, KillMode=mixed (SIGTERM to strata serve
   alone: it drains), Restart=always, reload is SIGTERM, TimeoutStopSec >= drain + 10.
2. Kubernetes: every manifest of deploy/k8s validates against the API schema
   (kubernetes-validate --strict, offline); every role's StatefulSet is there, its grace
   period is >= its drain + 10, the frontend's three probes and its Prometheus
   annotations match the topology's gateway and metrics listeners, every tcp:// endpoint
   of the topology (the ConfigMap) names a Service or a pod under one.
3. Containerfile: it parses (dockerfile-parse), builds in one stage and runs as a non-root
   user in another, and the runtime stage installs the package of every library the
   strata binary needs.
4. The pods: one network namespace per pod of the manifests (the StatefulSets' replicas),
   joined by a bridge as the cluster network; each namespace's /etc/hosts (`ip netns exec`
   puts /etc/netns/NS/hosts there) maps the Services' DNS names to its pods, as the
   cluster DNS would; each pod runs its container's command (strata on PATH, HOSTNAME
   the pod's name) on the ConfigMap's topology, with CURVE keys from `strata keygen`.
   What differs is only where the volumes are (keys, model, T2: this run's directories)
   and T2's size.  Then: every pod ready, the frontend pod's probes 200, /metrics 200, a
   chat request answered, and SIGTERM to the frontend pod while a streaming request runs:
   the stream ends complete, the pod exits 0, and it told its (fake) systemd READY=1 then
   STOPPING=1, and nothing else (its actors do not speak for it).
   Needs root and `ip`: without them that part is skipped (as test_netns.py), the others
   still run.

A missing tool (systemd-analyze, kubernetes-validate, dockerfile-parse) skips its part,
and is a failure under CI=true; exit 77 only when no part could run.  Every process is
stopped by PID, the namespaces and /etc/netns entries removed even on failure."""
import ctypes
import http.client
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testenv  # noqa: E402

SRC = os.environ.get("STRATA_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
DEPLOY = os.path.join(SRC, "deploy")
TAG = "sd%d" % (os.getpid() % 100000)  # namespace and link names of this run
NET = "10.232.0"  # the pods' network, inside the namespaces only
ROLES = ["kvtier", "worker", "router", "tokenizer", "frontend"]


class Skip(Exception):
    """A part cannot run here: why, and whether CI=true makes that a failure."""

    def __init__(self, why, ci_fails=True):
        super().__init__(why)
        self.ci_fails = ci_fails


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def have(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# ---- 1. systemd

def unit_keys(path):
    """{key: [values]} of a unit file's assignments (every section)."""
    keys = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", ";", "[")) and "=" in line:
                k, v = line.split("=", 1)
                keys.setdefault(k.strip(), []).append(v.strip())
    return keys


def check_systemd():
    tool = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
    if not os.access(tool, os.X_OK):
        raise Skip("no systemd-analyze (Debian's systemd package)")
    units = sorted(f for f in os.listdir(os.path.join(DEPLOY, "systemd"))
                   if f.endswith((".service", ".target")))
    check("strata.service" in units and "strata-host@.service" in units,
          "deploy/systemd has strata.service and strata-host@.service: %s" % units)
    root = tempfile.mkdtemp(prefix="strata-units-")
    try:
        etc = os.path.join(root, "etc", "systemd", "system")
        os.makedirs(etc)
        shutil.copytree("/usr/lib/systemd/system", os.path.join(root, "usr/lib/systemd/system"),
                        symlinks=True)
        for exe in ["usr/local/bin/strata", "bin/kill"]:  # what ExecStart/ExecReload run
            os.makedirs(os.path.dirname(os.path.join(root, exe)), exist_ok=True)
            with open(os.path.join(root, exe), "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(os.path.join(root, exe), 0o755)
        for u in units:
            shutil.copy(os.path.join(DEPLOY, "systemd", u), etc)
        names = [u.replace("@.", "@worker0.") for u in units]  # a template needs an instance
        p = subprocess.run([tool, "verify", "--man=no", "--root=" + root] + names, cwd=etc,
                           capture_output=True, text=True, timeout=60)
        out = (p.stdout + p.stderr).strip()
        check(p.returncode == 0 and not out,
              "systemd-analyze verify %s: rc %d\n%s" % (" ".join(names), p.returncode, out))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for u in units:
        if not u.endswith(".service"):
            continue
        k = unit_keys(os.path.join(DEPLOY, "systemd", u))
        one = lambda key: (k.get(key) or [""])[-1]  # noqa: E731
        check(one("Type") == "notify", "%s: Type=notify" % u)
        check(one("KillMode") == "mixed", "%s: KillMode=mixed (the drain is strata serve's)" % u)
        check(one("Restart") == "always", "%s: Restart=always (reload: drain, then start)" % u)
        check(one("ExecReload") == "/bin/kill -TERM $MAINPID", "%s: ExecReload is SIGTERM" % u)
        m = re.search(r"--drain-timeout (\d+)", one("ExecStart"))
        check(m, "%s: ExecStart gives --drain-timeout" % u)
        check(int(one("TimeoutStopSec")) >= int(m.group(1)) + 10,
              "%s: TimeoutStopSec %s < drain %s + 10" % (u, one("TimeoutStopSec"), m.group(1)))
    return "systemd-analyze verify: %s clean" % ", ".join(units)


# ---- 2. Kubernetes

def manifests():
    """[(file, document)] of every YAML document in deploy/k8s."""
    import yaml
    docs = []
    d = os.path.join(DEPLOY, "k8s")
    for f in sorted(os.listdir(d)):
        if f.endswith(".yaml"):
            with open(os.path.join(d, f)) as fh:
                docs += [(f, doc) for doc in yaml.safe_load_all(fh) if doc]
    return docs


def by_kind(docs, kind):
    return {doc["metadata"]["name"]: doc for _, doc in docs if doc["kind"] == kind}


def topology_text(docs):
    return by_kind(docs, "ConfigMap")["strata-topology"]["data"]["topology.txt"]


def topology_lines(text):
    """{name: (endpoint, {key: value})} of a topology file."""
    out = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            out[words[0]] = (words[1], dict(w.split("=", 1) for w in words[2:]))
    return out


def pods(docs):
    """[(pod name, its StatefulSet)]: what the StatefulSets' replicas make."""
    return [("%s-%d" % (name, i), s) for name, s in by_kind(docs, "StatefulSet").items()
            for i in range(s["spec"].get("replicas", 1))]


def dns_names(docs):
    """{DNS name: [pod]}: each headless Service's name (its pods) and, for a StatefulSet's
    pods, POD.SERVICE (the pod itself), as the cluster DNS answers them."""
    names = {}
    all_pods = pods(docs)
    for name, svc in by_kind(docs, "Service").items():
        sel = svc["spec"].get("selector", {})
        chosen = [p for p, s in all_pods
                  if all(s["spec"]["template"]["metadata"]["labels"].get(k) == v
                         for k, v in sel.items())]
        if svc["spec"].get("clusterIP") == "None":
            names[name] = chosen
            for p, s in all_pods:
                if p in chosen and s["spec"]["serviceName"] == name:
                    names["%s.%s" % (p, name)] = [p]
    return names


def pod_command(sts):
    c = sts["spec"]["template"]["spec"]["containers"][0]
    check(c["command"][:2] == ["/bin/sh", "-c"], "%s: command is sh -c" % sts["metadata"]["name"])
    return c["command"][2]


def pod_args(sts, pod):
    """The strata arguments the pod's command runs (its shell evaluated, HOSTNAME=pod)."""
    cmd = pod_command(sts).replace("exec strata ", "printf '%s\\n' ", 1)
    p = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, HOSTNAME=pod))
    return p.stdout.splitlines()


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def check_k8s():
    for m in ("yaml", "kubernetes_validate"):
        if not have(m):
            raise Skip("Python package missing: %s (scripts/setup)" % m)
    import kubernetes_validate
    docs = manifests()
    version = kubernetes_validate.latest_version()
    for f, doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError("%s: %s/%s does not validate against Kubernetes %s: %s" % (
                f, doc["kind"], doc["metadata"]["name"], version, e.message))
    sets = by_kind(docs, "StatefulSet")
    for r in ROLES:
        check("strata-" + r in sets, "a StatefulSet strata-%s" % r)
    topo = topology_lines(topology_text(docs))
    names = dns_names(docs)
    hosts = {}  # role host name -> pod
    for pod, s in pods(docs):
        args = pod_args(s, pod)
        check(args[:2] == ["serve", "--topology"] and flag(args, "--host"),
              "%s runs strata serve --topology F --host NAME: %s" % (pod, args))
        hosts[flag(args, "--host")] = pod
        drain = int(flag(args, "--drain-timeout") or 0)
        grace = s["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        check(grace >= drain + 10, "%s: grace %d < drain %d + 10" % (pod, grace, drain))
    for name, (ep, opts) in topo.items():
        if ep.startswith("tcp://"):
            host = ep[6:].rsplit(":", 1)[0]
            check(opts.get("host") in hosts, "%s: host=%s is no pod's --host" % (name,
                                                                              opts.get("host")))
            check(names.get(host) == [hosts[opts["host"]]],
                  "%s: %s is not a Service name of pod %s: %s" % (name, host, hosts[opts["host"]],
                                                                  names.get(host)))
    front = sets["strata-frontend"]["spec"]["template"]
    c = front["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports["http"] == int(topo["http"][1]["listen"].rsplit(":", 1)[1]),
          "the http port is the gateway's listen port")
    probes = {k: (c[k]["httpGet"]["path"], c[k]["periodSeconds"], c[k]["failureThreshold"])
              for k in ("startupProbe", "readinessProbe", "livenessProbe")}
    check(probes == {"startupProbe": ("/startupz", 2, 150), "readinessProbe": ("/readyz", 2, 1),
                     "livenessProbe": ("/livez", 10, 6)}, "the probes: %s" % probes)
    ann = front["metadata"]["annotations"]
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
          and ann.get("prometheus.io/port") == topo["metrics"][1]["listen"].rsplit(":", 1)[1],
          "Prometheus annotations name the metrics actor's port: %s" % ann)
    kv = sets["strata-kvtier"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in kv["template"]["spec"]["containers"][0]
              ["volumeMounts"]}
    check([v["metadata"]["name"] for v in kv.get("volumeClaimTemplates", [])] == ["t2"]
          and mounts.get("t2") == topo["kvtier"][1]["t2_dir"], "T2 is the kvtier's own PVC")
    return "%d manifests valid against Kubernetes %s (offline, strict)" % (len(docs), version)


# ---- 3. Containerfile

def check_containerfile():
    if not have("dockerfile_parse"):
        raise Skip("Python package missing: dockerfile_parse (scripts/setup)")
    import io
    from dockerfile_parse import DockerfileParser
    with open(os.path.join(DEPLOY, "Containerfile"), "rb") as f:
        p = DockerfileParser(fileobj=io.BytesIO(f.read()))
    stages, cur = [], None
    for ins in p.structure:
        if ins["instruction"] == "FROM":
            cur = {"from": ins["value"], "run": "", "user": None, "copy": []}
            stages.append(cur)
        elif ins["instruction"] == "RUN":
            cur["run"] += " " + ins["value"]
        elif ins["instruction"] == "USER":
            cur["user"] = ins["value"]
        elif ins["instruction"] == "COPY":
            cur["copy"].append(ins["value"])
    check(len(stages) == 2, "two stages (build, runtime): %d" % len(stages))
    build, run = stages
    check("cmake --build" in build["run"], "the first stage builds strata")
    check(run["user"] and run["user"].split(":")[0] not in ("0", "root"), "runtime user non-root")
    check(not any(".gguf" in c for c in build["copy"] + run["copy"]), "no model in the image")
    # every library strata needs comes from a package the runtime stage installs (or from
    # the base image's essentials)
    strata = testenv.strata_bin()
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                        subprocess.run(["readelf", "-d", strata], capture_output=True,
                                       text=True).stdout)
    ldd = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(
        ["ldd", strata], capture_output=True, text=True).stdout, re.M))
    base = {"libc6", "libgcc-s1", "libstdc++6"}
    for lib in needed:
        if re.match(r"lib(asan|ubsan|tsan|lsan)\.", lib):
            continue  # a sanitizer build's runtime (STRATA_SANITIZE=1): not what the image holds
        path = os.path.realpath(ldd.get(lib, lib))
        q = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        if q.returncode:
            continue  # not from a Debian package (a library of this build)
        pkg = q.stdout.split(":")[0]
        check(pkg in base or re.search(r"\b%s\b" % re.escape(pkg), run["run"]),
              "runtime stage installs %s (for %s)" % (pkg, lib))
    return "Containerfile parses; its runtime stage has the %d libraries strata needs" % len(
        needed)


# ---- 4. the pods, one network namespace each

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000


def ip(*args, check_rc=True):
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=10)
    if check_rc and p.returncode:
        raise RuntimeError("ip %s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def ns(pod):
    return "%s-%s" % (TAG, pod)


def ns_connect(pod, addr, port, timeout):
    """A TCP connection made inside pod's namespace (this thread enters it for the
    connect only; the socket stays in it)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open("/run/netns/" + ns(pod), os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "setns " + ns(pod))
        try:
            return socket.create_connection((addr, port), timeout=timeout)
        finally:
            if libc.setns(own, CLONE_NEWNET):
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)


class PodHTTP(http.client.HTTPConnection):
    """HTTP to addr:port as seen from inside pod (a client of the cluster network)."""

    def __init__(self, pod, addr, port, timeout=10):
        super().__init__(addr, port, timeout=timeout)
        self.pod = pod

    def connect(self):
        self.sock = ns_connect(self.pod, self.host, self.port, self.timeout)


def http(pod, addr, port, method, path, body=None, timeout=10):
    """(status, body bytes); (0, b"") when nothing answers."""
    try:
        c = PodHTTP(pod, addr, port, timeout)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"} if body is not None else {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data
    except OSError:
        return 0, b""


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("timed out (%.0f s): %s" % (timeout, what))


class Pod:
    """One pod: its container's command in its namespace."""

    def __init__(self, d, name, sts, topo_path, notify=None):
        self.name = name
        self.log = os.path.join(d, "pod-%s.log" % name)
        c = sts["spec"]["template"]["spec"]["containers"][0]
        cmd = pod_command(sts).replace("/etc/strata/topology/topology.txt", topo_path)
        env = dict(os.environ, HOSTNAME=name, PATH=os.path.join(d, "bin") + ":" +
                   os.environ["PATH"])
        env.update({e["name"]: e["value"] for e in c.get("env", [])})
        env.pop("NOTIFY_SOCKET", None)
        if notify:
            env["NOTIFY_SOCKET"] = notify
        self.host = flag(pod_args(sts, name), "--host")
        with open(self.log, "w") as f:  # ip execs sh, sh execs strata: proc.pid is strata's
            self.proc = subprocess.Popen(["ip", "netns", "exec", ns(name), "/bin/sh", "-c", cmd],
                                         stdout=f, stderr=f, env=env)

    def read_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("pod %s: strata serve exited (%s):\n%s" % (
                self.name, self.proc.returncode, self.read_log()))
        return "strata serve: ready on host %s" % self.host in self.read_log()

    def actor_pids(self):
        return [int(p) for p in re.findall(r"started \S+ \(pid (\d+)\)", self.read_log())]


def pod_topology(d, docs, keys, model):
    """The ConfigMap's topology with this run's volumes (keys, model, T2) and a small T2."""
    text = topology_text(docs)
    text = text.replace("/etc/strata/keys", keys)
    text = re.sub(r"model=/models/\S+", "model=" + model, text)
    text = text.replace("t2_dir=/var/lib/strata/kv", "t2_dir=" + os.path.join(d, "kv"))
    text = re.sub(r"t2_blocks=\d+", "t2_blocks=256", text)
    os.makedirs(os.path.join(d, "kv"))
    path = os.path.join(d, "topology.txt")
    with open(path, "w") as f:
        f.write(text)
    return path


def stream_chat(pod, addr, port, out):
    """A streaming chat request of 96 tokens (end of turn banned); out gets the content
    chunks, then the finish reason and whether [DONE] came."""
    out.update(chunks=0, finish=None, done=False, error=None)
    try:
        c = PodHTTP(pod, addr, port, 30)
        c.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                  body=json.dumps({"messages": [{"role": "user", "content": "Count to fifty."}],
                                   "max_tokens": 96, "temperature": 0, "stream": True,
                                   "logit_bias": {"0": -100, "2": -100}}))
        r = c.getresponse()
        if r.status != 200:
            out["error"] = "status %d: %s" % (r.status, r.read()[:200])
            return
        for line in r:
            line = line.decode().strip()
            if line == "data: [DONE]":
                out["done"] = True
            elif line.startswith("data: "):
                ev = json.loads(line[6:])
                ch = ev["choices"][0] if ev.get("choices") else {}
                if ch.get("delta", {}).get("content"):
                    out["chunks"] += 1
                if ch.get("finish_reason"):
                    out["finish"] = ch["finish_reason"]
        c.close()
    except OSError as e:
        out["error"] = repr(e)


def check_pods():
    if os.geteuid() != 0:
        raise Skip("network namespaces need root", ci_fails=False)
    if not shutil.which("ip"):
        raise Skip("no `ip` (iproute2)")
    for m in ("yaml", "zmq", "msgpack"):
        if not have(m):
            raise Skip("Python package missing: %s (scripts/setup)" % m)
    model = testenv.model_candidate()
    if not os.access(model, os.R_OK):
        raise Skip("model not found: %s (scripts/fetch-model)" % model)
    import zmq
    if not zmq.has("curve"):
        raise Skip("this pyzmq/libzmq has no CURVE")
    strata = testenv.strata_bin()
    t0 = time.time()
    docs = manifests()
    all_pods = pods(docs)
    addr = {p: "%s.%d" % (NET, i + 1) for i, (p, _) in enumerate(all_pods)}
    names = dns_names(docs)
    d = tempfile.mkdtemp(prefix="strata-deploy-")
    running = []
    made = []
    try:
        # the cluster network: a bridge namespace, one namespace and veth pair per pod, and
        # each pod's /etc/hosts with the Services' names (the cluster DNS)
        try:
            ip("netns", "add", ns("br"))
            made.append("br")
            ip("-n", ns("br"), "link", "add", "br0", "type", "bridge")
            ip("-n", ns("br"), "link", "set", "br0", "up")
            hosts = "127.0.0.1 localhost\n" + "".join(
                "%s %s\n" % (addr[ps[0]], n) for n, ps in sorted(names.items()) if len(ps) == 1)
            for i, (p, _) in enumerate(all_pods):
                ip("netns", "add", ns(p))
                made.append(p)
                outer, inner = "%sb%d" % (TAG, i), "%sh%d" % (TAG, i)
                ip("link", "add", outer, "netns", ns("br"), "type", "veth", "peer", "name",
                   inner, "netns", ns(p))
                ip("-n", ns("br"), "link", "set", outer, "master", "br0", "up")
                ip("-n", ns(p), "addr", "add", addr[p] + "/24", "dev", inner)
                ip("-n", ns(p), "link", "set", inner, "up")
                ip("-n", ns(p), "link", "set", "lo", "up")
                os.makedirs("/etc/netns/" + ns(p))
                with open("/etc/netns/%s/hosts" % ns(p), "w") as f:
                    f.write(hosts)
        except (RuntimeError, OSError) as e:
            raise Skip("cannot make network namespaces: %s" % e)
        os.makedirs(os.path.join(d, "bin"))
        os.symlink(os.path.abspath(strata), os.path.join(d, "bin", "strata"))
        keys = os.path.join(d, "keys")
        topo = topology_lines(topology_text(docs))
        kg = subprocess.run([strata, "keygen", keys, "supervisor"] +
                            [n for n, (ep, _) in topo.items() if ep != "-" and n != "supervisor"],
                            capture_output=True, text=True, timeout=30)
        check(kg.returncode == 0, "strata keygen: %s" % kg.stderr)
        path = pod_topology(d, docs, keys, model)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(os.path.join(d, "notify"))
        front = [p for p, s in all_pods if s["metadata"]["name"] == "strata-frontend"][0]
        for p, s in all_pods:
            running.append(Pod(d, p, s, path, notify.getsockname() if p == front else None))
        pod = {x.name: x for x in running}
        wait_for(lambda: all(x.ready() for x in running), 40, "every pod ready")
        print("%d pods ready after %.1f s" % (len(running), time.time() - t0))

        fa = addr[front]
        hport = int(topo["http"][1]["listen"].rsplit(":", 1)[1])
        mport = int(topo["metrics"][1]["listen"].rsplit(":", 1)[1])
        # a client in the router's pod: another pod of the cluster network
        client = [p for p, s in all_pods if s["metadata"]["name"] == "strata-router"][0]
        probes = ("/livez", "/startupz", "/readyz", "/progressz")
        try:
            wait_for(lambda: all(http(client, fa, hport, "GET", p)[0] == 200 for p in probes),
                     20, "every probe 200")
        except AssertionError:
            raise AssertionError("probes: %s" % [(p, http(client, fa, hport, "GET", p + "?verbose"))
                                                 for p in probes])
        st = http(client, fa, mport, "GET", "/metrics")
        check(st[0] == 200 and b"strata_" in st[1], "/metrics answers 200: %s" % (st[0],))
        st = http(client, fa, hport, "POST", "/v1/chat/completions",
                  {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                   "max_tokens": 16, "temperature": 0}, timeout=30)
        check(st[0] == 200, "chat request: %s" % (st,))
        answer = json.loads(st[1])["choices"][0]["message"]["content"]
        check(answer.strip(), "chat answer is empty")
        print("probes 200, /metrics 200, chat: %r (%.1f s)" % (answer, time.time() - t0))

        # the drain: SIGTERM to the frontend pod while a stream runs
        out = {}
        t = threading.Thread(target=stream_chat, args=(client, fa, hport, out), daemon=True)
        t.start()
        wait_for(lambda: out.get("chunks", 0) >= 2 or out.get("error"), 20, "a stream running")
        check(not out.get("error"), "stream: %s" % out.get("error"))
        pod[front].proc.terminate()
        at_term = dict(out)
        t.join(30)
        check(at_term["finish"] is None, "the stream had ended before SIGTERM: %s" % at_term)
        check(out["error"] is None and out["finish"] == "length" and out["done"],
              "the stream in flight at SIGTERM finished: %s" % out)
        try:
            rc = pod[front].proc.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError("the frontend pod did not end its drain:\n" +
                                 pod[front].read_log())
        check(rc == 0, "the drained frontend pod exits 0, not %s:\n%s" % (rc,
                                                                          pod[front].read_log()))
        notify.settimeout(0.2)
        said = []
        try:
            while True:
                said.append(notify.recv(4096).decode().split("\n")[0])
        except socket.timeout:
            pass
        check(said == ["READY=1", "STOPPING=1"], "systemd was told %s" % said)
        check("strata serve: draining" in pod[front].read_log(), "the frontend pod drained")
        print("drain: SIGTERM at chunk %d, the stream ended complete (%d chunks), exit 0, "
              "notify %s (%.1f s)" % (at_term["chunks"], out["chunks"], said, time.time() - t0))
        return "%d pods (namespaces) served the manifests' topology; drain lost nothing" % len(
            running)
    finally:
        for x in running:
            pids = x.actor_pids()
            if x.proc.poll() is None:
                x.proc.kill()
            x.proc.wait()
            for p in pids:
                try:
                    os.kill(p, 9)
                except OSError:
                    pass
        for p in made:
            ip("netns", "del", ns(p), check_rc=False)
            shutil.rmtree("/etc/netns/" + ns(p), ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def main():
    t0 = time.time()
    ran, failed = 0, False
    for name, part in (("systemd", check_systemd), ("kubernetes", check_k8s),
                       ("containerfile", check_containerfile), ("pods", check_pods)):
        try:
            print("%s: %s" % (name, part()), flush=True)
            ran += 1
        except Skip as e:
            if e.ci_fails and testenv.in_ci():
                print("FAIL: %s: %s (required under CI=true)" % (name, e), flush=True)
                failed = True
            else:
                print("SKIP: %s: %s" % (name, e), flush=True)
        except AssertionError as e:
            print("FAIL: %s: %s" % (name, e), flush=True)
            failed = True
    print("%.1f s in all" % (time.time() - t0))
    if failed:
        sys.exit(1)
    if not ran:
        testenv.skip("no part could run", ci_fails=False)


if __name__ == "__main__":
    main()
