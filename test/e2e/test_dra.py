#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of gpuos-dra, the Kubernetes DRA kubelet plugin (issue #26), without a cluster.

The real gpuosd (on the driver test double), the real gpuos-dra, a fake kubelet
(gpuos-fake-kubelet: it watches plugins_registry and registers the plugin, again after the plugin
restarts, then prepares and unprepares claims over the real gRPC sockets and hands each container
the CDI devices of the requests it names) and a fake API server (test/dra/fake_apiserver.py: the claims it serves, the ResourceSlices it is sent). The
container test runs a claim's tenant in a real container (podman + crun, from a local root
filesystem, nothing pulled) with exactly the CDI devices the plugin answered.
Usage: test_dra.py BUILD_DIR [test-name ...]
"""
import glob
import json
import os
import shutil
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.request
import uuid

import test_e2e
from test_e2e import bin_path, spawn, start_daemon, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_APISERVER = os.path.join(HERE, "..", "dra", "fake_apiserver.py")
NODE = "node-a"
DRIVER = "gpuos.io"
TOKEN = "test-token-123"
POD_UID = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
MIB = 1 << 20


def claim(name, uid, device="gpu-0-guaranteed-0", params=None, request="gpu", pool=NODE, pod="llm-0"):
    """A ResourceClaim as the API server holds it once the scheduler allocated it and the pod
    reserved it."""
    config = []
    if params is not None:
        config.append({"source": "FromClaim", "requests": [request],
                       "opaque": {"driver": DRIVER, "parameters": params}})
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "inference", "uid": uid},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {
            "deviceClassName": "gpuos-guaranteed.gpuos.io"}}]}},
        "status": {
            "allocation": {"devices": {
                "results": [{"request": request, "driver": DRIVER, "pool": pool, "device": device}],
                "config": config}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": POD_UID}]},
    }


def tenant_config(**fields):
    return dict({"apiVersion": "gpuos.io/v1", "kind": "TenantConfig"}, **fields)


class Kubelet:
    """gpuos-fake-kubelet's kubelet mode: events (registrations) and replies read from its stdout."""

    def __init__(self, test, registry, args=()):
        self.registry = registry
        self.log = open(os.path.join(registry, "..", "fake-kubelet.%d.log" % id(self)), "w+")
        test.addCleanup(self.log.close)
        self.proc = spawn(test, [bin_path("gpuos-fake-kubelet"), "kubelet", registry] + list(args), os.environ,
                          stdin=subprocess.PIPE, stderr=self.log)
        self.events = []
        self.replies = queue.Queue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        test.addCleanup(self.stop)

    def _read(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "reply" in msg:
                self.replies.put(msg)
            else:
                with self.lock:
                    self.events.append(msg)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def seen(self, event):
        with self.lock:
            return [e for e in self.events if e["event"] == event]

    def wait_event(self, event, count=1, what=""):
        return wait_for(lambda: (lambda es: es if len(es) >= count else None)(self.seen(event)), timeout=60,
                        what="%d fake kubelet event(s) %s %s" % (count, event, what))[count - 1]

    def call(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.replies.get(timeout=120)

    def stderr(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()


class Node:
    """gpuosd + fake API server + fake kubelet + gpuos-dra, all ended by the test's cleanups."""

    def __init__(self, test, cdi_dir=None, kubelet_args=(), with_kubelet=True):
        self.test = test
        self.dir = tempfile.mkdtemp(prefix="gpuos-dra-")
        test.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.d = start_daemon(test)
        self.cdi_dir = cdi_dir or self.path("cdi")
        self.registry = self.path("registry")
        self.plugin_dir = self.path("plugins", DRIVER)
        self.claims_file = self.path("claims.json")
        self.nvidia_config = self.path("nvidia-container-runtime", "config.toml")
        self.set_claims([])
        with open(self.path("token"), "w") as f:
            f.write(TOKEN + "\n")
        self.api = spawn(test, [sys.executable, FAKE_APISERVER, "--port", "0", "--token", TOKEN,
                                "--claims", self.claims_file], os.environ)
        line = self.api.stdout.readline()
        if "listening on" not in line:
            raise AssertionError("the fake API server did not start: " + line + self.api.stderr.read())
        self.api_url = "http://127.0.0.1:%d" % int(line.split()[-1])
        os.makedirs(self.registry)
        self.k = self.start_kubelet(kubelet_args) if with_kubelet else None
        self.plugin = None
        self.start_plugin()

    def start_kubelet(self, args=()):
        self.k = Kubelet(self.test, self.registry, args)
        return self.k

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def start_plugin(self, extra=(), wait_registered=True):
        self.plugin_log = open(self.path("gpuos-dra.log"), "a+")
        self.test.addCleanup(self.plugin_log.close)
        cmd = [bin_path("gpuos-dra"), "--node-name", NODE, "--gpuos-socket", self.d.socket,
               "--plugin-dir", self.plugin_dir, "--registry-dir", self.registry, "--cdi-dir", self.cdi_dir,
               "--interposer", os.path.join(test_e2e.BUILD, "lib", "libgpuos.so"),
               "--kube-api", self.api_url, "--kube-token-file", self.path("token"),
               "--nvidia-runtime-config", self.nvidia_config,  # (not the machine's)
               "--publish-interval-s", "1"] + list(extra)
        registered = len(self.k.seen("registered")) if self.k else 0
        self.plugin = spawn(self.test, cmd, self.d.env, stdout=self.plugin_log, stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(os.path.join(self.registry, DRIVER + "-reg.sock")),
                 what="gpuos-dra's registration socket\n" + self.plugin_text())
        if self.k and wait_registered:  # the kubelet found it in plugins_registry
            self.k.wait_event("registered", registered + 1, "(the plugin registered)\n" + self.plugin_text())

    def plugin_text(self):
        self.plugin_log.flush()
        with open(self.plugin_log.name) as f:
            return f.read()

    def set_claims(self, claims):
        with open(self.claims_file + ".tmp", "w") as f:
            json.dump(claims, f)
        os.replace(self.claims_file + ".tmp", self.claims_file)

    def health(self, port, service):
        r = subprocess.run([bin_path("gpuos-fake-kubelet"), "health", "127.0.0.1:%d" % port, service],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError("fake kubelet health failed (%d): %s\n%s" % (r.returncode, r.stderr,
                                                                             self.plugin_text()))
        return json.loads(r.stdout)["status"]

    def call(self, op, claims, containers=None):
        """The kubelet's NodePrepareResources / NodeUnprepareResources of claims [(name, uid)], on
        the plugin it registered."""
        cmd = {"op": op, "driver": DRIVER,
               "claims": [{"namespace": "inference", "name": n, "uid": u} for n, u in claims]}
        if containers is not None:
            cmd["containers"] = containers
        r = self.k.call(**cmd)
        if "error" in r:
            raise AssertionError("fake kubelet %s: %s\n%s\n%s" % (op, r["error"], self.k.stderr(), self.plugin_text()))
        return r

    def prepare(self, uid, name):
        return self.call("prepare", [(name, uid)])["claims"][uid]

    def unprepare(self, uid, name):
        return self.call("unprepare", [(name, uid)])["claims"][uid]

    def slice(self):
        """This node's ResourceSlice as the API server holds it (None: there is none)."""
        req = urllib.request.Request(self.api_url + "/apis/resource.k8s.io/v1/resourceslices/%s-%s" % (NODE, DRIVER),
                                     headers={"Authorization": "Bearer " + TOKEN})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def claims_of_gpuosd(self):
        path = os.path.join(self.d.dir, "claims.txt")
        if not os.path.exists(path):  # (gpuosd writes it at its first claim)
            return []
        with open(path) as f:
            return [l for l in f.read().splitlines() if l]

    def gpu_uuid(self):
        uuid_ = self.d.ps()["gpus"][0]["uuid"]
        return uuid_ if uuid_.startswith("GPU-") else "GPU-" + uuid_

    def cdi_ids(self, uid):
        """What the plugin answers for a claim on GPU 0: its own CDI device and the GPU's."""
        return ["%s/claim=%s" % (DRIVER, uid), "nvidia.com/gpu=" + self.gpu_uuid()]

    def events(self):
        with urllib.request.urlopen(urllib.request.Request(self.api_url + "/fake/events"), timeout=10) as r:
            return json.loads(r.read())

    def cdi_files(self):
        return sorted(glob.glob(os.path.join(self.cdi_dir, DRIVER + "-claim_*")))


class Plugin(unittest.TestCase):
    def setUp(self):
        self.n = Node(self)

    def test_registers_with_the_kubelet(self):
        # The kubelet found the plugin's socket in plugins_registry (Node waited for that).
        info = self.n.k.seen("registered")[0]
        self.assertEqual(info["socket"], os.path.join(self.n.registry, DRIVER + "-reg.sock"))
        self.assertEqual(info["type"], "DRAPlugin")
        self.assertEqual(info["name"], DRIVER)
        self.assertEqual(info["endpoint"], os.path.join(self.n.plugin_dir, "dra.sock"))
        self.assertIn("v1.DRAPlugin", info["supported_versions"])
        self.assertIn("v1beta1.DRAPlugin", info["supported_versions"])
        self.assertEqual(info["api"], "v1")  # the first the plugin lists that the kubelet serves
        wait_for(lambda: "the kubelet registered gpuos.io" in self.n.plugin_text(), what="the plugin to log it")
        self.assertEqual(self.n.k.call(op="drivers")["drivers"],
                         {DRIVER: {"endpoint": os.path.join(self.n.plugin_dir, "dra.sock"), "api": "v1"}})

    def test_warns_while_pods_can_reach_gpus_without_a_claim(self):
        key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
        wait_for(lambda: "GPU access without a claim: cannot tell (no NVIDIA container runtime config at %s)"
                 % self.n.nvidia_config in self.n.plugin_text(), what="no config found\n" + self.n.plugin_text())
        self.assertEqual(self.n.events(), [])

        def write(text):
            os.makedirs(os.path.dirname(self.n.nvidia_config), exist_ok=True)
            with open(self.n.nvidia_config + ".tmp", "w") as f:
                f.write(text)
            os.replace(self.n.nvidia_config + ".tmp", self.n.nvidia_config)
        # The toolkit's default (the key absent: true): any pod gets GPUs by NVIDIA_VISIBLE_DEVICES.
        write('disable-require = false\n[nvidia-container-runtime]\nmode = "auto"\n')
        ev = wait_for(lambda: self.n.events(), what="the Warning Event\n" + self.n.plugin_text())
        self.assertEqual(len(ev), 1)
        ev = ev[0]
        self.assertEqual((ev["type"], ev["reason"]), ("Warning", "GPUAccessWithoutClaim"))
        self.assertEqual(ev["involvedObject"], {"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, NODE + ".node.fake"))})
        self.assertEqual(ev["metadata"]["namespace"], "default")
        self.assertIn("NVIDIA_VISIBLE_DEVICES", ev["message"])
        self.assertIn(self.n.nvidia_config + ": " + key + " is not set", ev["message"])
        self.assertIn("pods on this node can reach its GPUs without a gpuos claim", self.n.plugin_text())
        # Closed: logged, no new event; open again: a new event.
        write(key + " = false\n")
        wait_for(lambda: "GPU access without a claim: closed" in self.n.plugin_text(), what="closed\n" + self.n.plugin_text())
        self.assertEqual(len(self.n.events()), 1)
        write(key + " = true\n")
        wait_for(lambda: len(self.n.events()) == 2, what="a second event\n" + self.n.plugin_text())
        self.assertIn(key + " = true", self.n.events()[1]["message"])
        text = self.n.plugin_text()
        self.assertEqual(text.count("pods on this node can reach its GPUs"), 2, text)  # once per finding

    def test_a_kubelet_before_1_34_gets_v1beta1(self):
        self.n.k.stop()  # a kubelet that serves v1beta1 only, started after the plugin: it finds the
        k = self.n.start_kubelet(["--serve", "v1beta1"])  # socket already there
        self.assertEqual(k.wait_event("registered")["api"], "v1beta1")
        uid = "22222222-2222-4333-8444-555555555555"
        r = self.prepared(uid, "trainer-gpu", **{"mem": "1Gi", "borrow": "2Gi"})
        self.assertEqual(r["devices"][0]["cdi_device_ids"], self.n.cdi_ids(uid))
        self.assertEqual(self.n.unprepare(uid, "trainer-gpu")["error"], "")
        # A kubelet that serves neither refuses the plugin.
        k.stop()
        k = self.n.start_kubelet(["--serve", "v2"])
        self.assertIn("serves a version", k.wait_event("refused")["error"])

    def test_publishes_the_nodes_shares_and_withdraws_them_while_gpuosd_is_gone(self):
        gpu = self.n.d.ps()["gpus"][0]
        s = wait_for(lambda: (lambda s: s if s and s["spec"].get("devices") else None)(self.n.slice()),
                     what="the ResourceSlice\n" + self.n.plugin_text())
        spec = s["spec"]
        self.assertEqual(spec["driver"], DRIVER)
        self.assertEqual(spec["nodeName"], NODE)
        self.assertEqual(spec["pool"]["name"], NODE)
        # Owned by its Node: Kubernetes deletes it with the node (the fake's node uid: see node()).
        node_uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, NODE + ".node.fake"))
        self.assertEqual(s["metadata"]["ownerReferences"],
                         [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}])
        names = sorted(d["name"] for d in spec["devices"])
        self.assertEqual(names, sorted(["gpu-0-guaranteed-%d" % i for i in range(4)] +
                                       ["gpu-0-best-effort-%d" % i for i in range(8)]))
        dev = next(d for d in spec["devices"] if d["name"] == "gpu-0-guaranteed-0")
        self.assertEqual(dev["attributes"]["class"], {"string": "guaranteed"})
        self.assertEqual(dev["attributes"]["uuid"]["string"].replace("GPU-", ""), gpu["uuid"].replace("GPU-", ""))
        self.assertEqual(dev["attributes"]["sms"], {"int": gpu["sm_count"]})
        generation = spec["pool"]["generation"]

        self.n.d.stop()  # gpuosd gone: nothing new may be scheduled here
        s = wait_for(lambda: (lambda s: s if s and not s["spec"].get("devices") else None)(self.n.slice()),
                     what="the shares withdrawn\n" + self.n.plugin_text())
        self.assertGreater(s["spec"]["pool"]["generation"], generation)

        os.kill(self.n.plugin.pid, signal.SIGTERM)  # the plugin stops: its slice stays (see below)
        self.n.plugin.wait(timeout=60)
        self.assertEqual(self.n.plugin.returncode, 0, self.n.plugin_text())
        self.assertEqual(self.n.slice()["spec"]["pool"]["generation"], s["spec"]["pool"]["generation"])
        self.assertFalse(os.path.exists(os.path.join(self.n.registry, DRIVER + "-reg.sock")))

    def test_a_plugin_restart_keeps_the_slice_and_the_claims(self):
        uid = "3b333333-2222-4333-8444-555555555555"
        first = self.prepared(uid, "llm-gpu", **{"mem": "128Mi"})
        s = wait_for(lambda: (lambda s: s if s and s["spec"].get("devices") else None)(self.n.slice()),
                     what="the ResourceSlice\n" + self.n.plugin_text())
        os.kill(self.n.plugin.pid, signal.SIGTERM)
        self.n.plugin.wait(timeout=60)
        self.assertEqual(self.n.plugin.returncode, 0, self.n.plugin_text())
        # While no plugin runs (an update, a crash): the node still offers its shares, gpuosd still
        # holds the claim and serves its socket.
        self.assertEqual(self.n.slice(), s)
        self.assertEqual(len(self.n.claims_of_gpuosd()), 1)
        self.assertTrue(os.path.exists(os.path.join(self.n.d.dir, "claims", uid, "gpuosd.sock")))
        self.assertIn("received Terminated", self.n.plugin_text())
        self.assertNotIn("DELETE", [e["method"] for e in self.api_log()])
        # The kubelet saw its socket go and has no plugin to call meanwhile.
        self.n.k.wait_event("deregistered")
        r = self.n.k.call(op="prepare", driver=DRIVER, claims=[{"namespace": "inference", "name": "llm-gpu", "uid": uid}])
        self.assertIn("not registered", r["error"])
        # The next plugin: the kubelet registers it again when its socket appears (start_plugin waits
        # for that), it takes the slice over unchanged, and answers the claim as before.
        self.n.start_plugin()
        self.assertEqual(len(self.n.k.seen("registered")), 2)
        self.assertEqual(self.n.prepare(uid, "llm-gpu"), first, self.n.plugin_text())
        wait_for(lambda: len(self.api_log()) > 0 and self.api_log()[-1]["path"].endswith(NODE + "-" + DRIVER),
                 what="the new plugin to look at its slice")
        self.assertEqual(self.n.slice()["spec"]["pool"]["generation"], s["spec"]["pool"]["generation"])
        self.assertEqual(self.n.unprepare(uid, "llm-gpu")["error"], "")

    def api_log(self):
        with urllib.request.urlopen(urllib.request.Request(self.n.api_url + "/fake/log"), timeout=10) as r:
            return json.loads(r.read())

    def health(self, port, service):
        return self.n.health(port, service)

    def test_health_probes_and_a_refused_registration(self):
        self.n.k.stop()  # no kubelet yet
        self.n.plugin.terminate()
        self.n.plugin.wait(timeout=60)
        self.n.start_plugin(["--health-listen", "127.0.0.1:0", "--registration-retry-s", "1"], wait_registered=False)
        line = wait_for(lambda: next((l for l in self.n.plugin_text().splitlines() if "answering health probes" in l),
                                     None), what="the health port\n" + self.n.plugin_text())
        port = int(line.split("(port ")[1].rstrip(")"))
        # Alive (it answers GetInfo and a prepare of nothing on its sockets), not ready before the
        # kubelet registered it.
        self.assertEqual(self.health(port, "liveness"), "SERVING")
        self.assertEqual(self.health(port, ""), "SERVING")
        self.assertEqual(self.health(port, "readiness"), "NOT_SERVING")
        self.n.start_kubelet().wait_event("registered")  # the kubelet starts and finds the socket
        self.assertEqual(self.health(port, "readiness"), "SERVING")
        # A kubelet (restarted) that refuses the plugin: not ready; the plugin makes its registration
        # socket anew, which the kubelet's watcher takes as a new plugin to register, and refuses again.
        self.n.k.stop()
        k = self.n.start_kubelet(["--refuse", "1000"])
        k.wait_event("refused", 2, "(the socket made anew after the first)\n" + self.n.plugin_text())
        # (The plugin logs it once its new socket serves: maybe after the kubelet was already there.)
        wait_for(lambda: "registering with the kubelet again" in self.n.plugin_text(), what="the socket made anew logged")
        self.assertEqual(self.health(port, "readiness"), "NOT_SERVING")
        self.assertEqual(self.health(port, "liveness"), "SERVING")
        # A kubelet that takes it: ready again.
        k.stop()
        self.n.start_kubelet().wait_event("registered")
        wait_for(lambda: self.health(port, "readiness") == "SERVING", what="ready again\n" + self.n.plugin_text())
        # A service the probe may not name; a DRA socket that no longer answers is not alive.
        r = subprocess.run([bin_path("gpuos-fake-kubelet"), "health", "127.0.0.1:%d" % port, "startup"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown service", r.stderr)
        os.unlink(os.path.join(self.n.plugin_dir, "dra.sock"))
        self.assertEqual(self.health(port, "liveness"), "NOT_SERVING")
        self.assertEqual(self.health(port, "readiness"), "NOT_SERVING")
        self.assertIn("liveness: NodePrepareResources", self.n.plugin_text())

    def test_a_failing_api_server_is_logged_once_until_it_answers_again(self):
        def refused():  # the plugin's requests the API server turned away
            req = urllib.request.Request(self.n.api_url + "/fake/log")
            with urllib.request.urlopen(req, timeout=10) as r:
                return sum(1 for e in json.loads(r.read()) if e["status"] == 401)
        with open(self.n.path("token"), "w") as f:  # the plugin reads its token at every request
            f.write("not-the-token\n")
        # Four refused requests are at least two failed publishes (one publish is one or two requests).
        wait_for(lambda: refused() >= 4, what="four refused requests\n" + self.n.plugin_text())
        text = self.n.plugin_text()
        self.assertEqual(text.count("ResourceSlice: "), 1, text)
        with open(self.n.path("token"), "w") as f:
            f.write(TOKEN + "\n")
        wait_for(lambda: "ResourceSlice published again" in self.n.plugin_text(), what="the recovery logged")
        text = self.n.plugin_text()
        self.assertEqual(text.count("ResourceSlice: "), 1, text)
        self.assertRegex(text, r"published again, after [2-9]\d* failed attempts")

    def test_a_gpu_that_goes_away_leaves_the_slice(self):
        self.n.d.stop()
        self.n.d = start_daemon(self, daemon_env={"GPUOS_SIM_DEVICES": "2"})
        self.n.plugin.terminate()
        self.n.plugin.wait(timeout=60)
        self.n.start_plugin()
        devices = lambda: (lambda s: s["spec"].get("devices", []) if s else [])(self.n.slice())
        wait_for(lambda: len(devices()) == 24, what="two GPUs' shares\n" + self.n.plugin_text())
        generation = self.n.slice()["spec"]["pool"]["generation"]
        # gpuosd comes back seeing one GPU only (the other failed, or was taken out).
        self.n.d.proc.terminate()
        self.n.d.proc.wait(timeout=60)
        self.n.d.daemon_env["CUDA_VISIBLE_DEVICES"] = "0"
        self.n.d.start()
        wait_for(lambda: len(devices()) == 12, what="one GPU's shares\n" + self.n.plugin_text())
        self.assertTrue(all(d["name"].startswith("gpu-0-") for d in devices()))
        self.assertGreater(self.n.slice()["spec"]["pool"]["generation"], generation)

    def prepared(self, uid, name, **cfg):
        self.n.set_claims([claim(name, uid, params=tenant_config(**cfg))])
        r = self.n.prepare(uid, name)
        self.assertEqual(r["error"], "", self.n.plugin_text())
        return r

    def test_a_prepared_claims_tenant_runs_with_the_claims_settings_and_pod(self):
        uid = "11111111-2222-4333-8444-555555555555"
        r = self.prepared(uid, "llm-gpu", **{"class": "guaranteed", "mem": "256Mi", "priority": 5,
                                             "maxSlowdown": "1.25"})
        self.assertEqual(len(r["devices"]), 1)
        dev = r["devices"][0]
        self.assertEqual(dev["request_names"], ["gpu"])
        self.assertEqual((dev["pool_name"], dev["device_name"]), (NODE, "gpu-0-guaranteed-0"))
        # gpuos's own CDI device, and the GPU's from the NVIDIA container toolkit's spec (the default).
        self.assertEqual(dev["cdi_device_ids"], ["%s/claim=%s" % (DRIVER, uid), "nvidia.com/gpu=" + self.n.gpu_uuid()])
        # The CDI spec: the interposer, the claim's own socket directory, the GPU.
        files = self.n.cdi_files()
        self.assertEqual([os.path.basename(f) for f in files], ["%s-claim_%s.json" % (DRIVER, uid)])
        with open(files[0]) as f:
            spec = json.load(f)
        self.assertEqual(spec["kind"], DRIVER + "/claim")
        edits = spec["devices"][0]["containerEdits"]
        socket_dir = os.path.join(self.n.d.dir, "claims", uid)
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        self.assertEqual(mounts["/run/gpuos"], socket_dir)
        ro = {m["containerPath"]: "ro" in m["options"] for m in edits["mounts"]}
        self.assertEqual(ro, {"/run/gpuos": True, "/usr/lib/gpuos/libgpuos.so": True})
        self.assertEqual(mounts["/usr/lib/gpuos/libgpuos.so"], os.path.join(test_e2e.BUILD, "lib", "libgpuos.so"))
        for e in ("LD_PRELOAD=/usr/lib/gpuos/libgpuos.so", "GPUOS_SOCKET=/run/gpuos/gpuosd.sock",
                  "GPUOS_TENANT_CLASS=guaranteed", "GPUOS_TENANT_MEM=%d" % (256 * MIB), "GPUOS_TENANT_PRIORITY=5",
                  "GPUOS_TENANT_MAX_SLOWDOWN=1.25", "GPUOS_CLAIM_UID=" + uid):
            self.assertIn(e, edits["env"])
        self.assertTrue(os.path.exists(os.path.join(socket_dir, "gpuosd.sock")))
        # The claim's socket serves its tenants only: root there is no admin, and may not even list.
        for cmd in (["ps"], ["gate", "1", "close"]):
            done = subprocess.run([bin_path("gpuos")] + cmd + ["--socket", os.path.join(socket_dir, "gpuosd.sock")],
                                  env=self.n.d.env, capture_output=True, text=True, timeout=30)
            self.assertNotEqual(done.returncode, 0, done.stdout)
            self.assertIn("claim's socket", done.stderr)
        self.assertEqual(len(self.n.claims_of_gpuosd()), 1)
        # Prepared twice (a kubelet retry): the same answer, nothing more.
        self.assertEqual(self.n.prepare(uid, "llm-gpu"), r)

        # A host process (any host user's, root's too) is refused on the claim's socket (issue #42:
        # it was served, with the claim's settings), with the reason.
        env = dict(self.n.d.env, GPUOS_SOCKET=os.path.join(socket_dir, "gpuosd.sock"),
                   LD_PRELOAD=os.path.join(test_e2e.BUILD, "lib", "libgpuos.so"), GPUOS_TENANT_CLASS="best-effort")
        out = subprocess.run([bin_path("gpuos-claim-probe")], env=dict(env, GPUOS_ON_NO_DAEMON="refuse"),
                             capture_output=True, text=True, timeout=120)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("serves its claim's containers only", out.stderr)
        self.assertIn("host process in no pod", out.stderr)
        self.assertEqual(len(self.n.d.ps()["tenants"]), 0)
        if os.geteuid() != 0:
            self.n.unprepare(uid, "llm-gpu")
            self.skipTest("a container's tenant needs root here (a pid namespace without a user namespace)")
        # So is a process in a pid namespace inside a user namespace of its own (any user can make one).
        out = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", bin_path("gpuos-claim-probe")],
                             env=dict(env, GPUOS_ON_NO_DAEMON="refuse"), capture_output=True, text=True, timeout=120)
        if "Operation not permitted" not in out.stderr:  # (user namespaces may be off here)
            self.assertNotEqual(out.returncode, 0, out.stdout)
            self.assertIn("user namespace of its own", out.stderr)
        # A tenant in a container (a pid namespace of its own, as a privileged runtime makes it; the
        # container itself is test_container's) asks for nothing and gets the claim's class, quota
        # and pod.
        out = subprocess.run(["unshare", "--pid", "--fork", bin_path("gpuos-claim-probe")], env=env,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        probe = json.loads(out.stdout)
        self.assertEqual(probe["allocated"], 256 * MIB)  # exactly its quota ...
        self.assertEqual(probe["error"], 2)  # ... then CUDA_ERROR_OUT_OF_MEMORY
        t = wait_for(lambda: [t for t in self.n.d.ps()["tenants"] if t.get("claim_uid") == uid],
                     what="the tenant in ps")[0]
        self.assertEqual(t["class"], "guaranteed")
        self.assertEqual(t["mem_quota_bytes"], 256 * MIB)
        self.assertEqual(t["priority"], 5)
        self.assertEqual((t["pod_namespace"], t["pod_name"], t["pod_uid"], t["claim_uid"]),
                         ("inference", "llm-0", POD_UID, uid))
        table = subprocess.run([bin_path("gpuos"), "ps", "--all", "--socket", self.n.d.socket], env=self.n.d.env,
                               capture_output=True, text=True, timeout=30).stdout
        self.assertIn("inference/llm-0", table)

        # Unprepared: the spec, the socket and gpuosd's claim are gone; twice is fine.
        self.assertEqual(self.n.unprepare(uid, "llm-gpu")["error"], "")
        self.assertEqual(self.n.cdi_files(), [])
        self.assertFalse(os.path.exists(socket_dir))
        self.assertEqual(self.n.claims_of_gpuosd(), [])
        self.assertEqual(self.n.unprepare(uid, "llm-gpu")["error"], "")

    def test_several_claims_in_one_call(self):
        uids = ["5a555555-2222-4333-8444-5555555555%02d" % i for i in range(3)]
        self.n.set_claims([claim("c-0", uids[0], device="gpu-0-guaranteed-0", params=tenant_config(mem="64Mi")),
                           claim("c-1", uids[1], device="gpu-0-best-effort-1", params=tenant_config(mem="32Mi")),
                           claim("c-2", uids[2], device="gpu-0-best-effort-2", params=tenant_config(memory="1"))])
        refs = [("c-%d" % i, u) for i, u in enumerate(uids)]
        r = self.n.call("prepare", refs)["claims"]
        self.assertEqual(sorted(r), sorted(uids))
        for i in (0, 1):  # each claim its own answer ...
            self.assertEqual(r[uids[i]]["error"], "", self.n.plugin_text())
            self.assertEqual(r[uids[i]]["devices"][0]["cdi_device_ids"], self.n.cdi_ids(uids[i]))
        self.assertIn("memory", r[uids[2]]["error"])  # ... a bad one does not fail the others
        self.assertEqual(len(self.n.claims_of_gpuosd()), 2)
        self.assertEqual(len(self.n.cdi_files()), 2)
        r = self.n.call("unprepare", refs)["claims"]
        self.assertEqual({u: e["error"] for u, e in r.items()}, {u: "" for u in uids})
        self.assertEqual(self.n.claims_of_gpuosd(), [])
        self.assertEqual(self.n.cdi_files(), [])

    def test_a_container_gets_the_cdi_devices_of_the_requests_it_names(self):
        # A firstAvailable request "gpu" whose subrequest "gpu/guaranteed" was allocated. The kubelet
        # hands a container the CDI devices whose request_names hold the request the container names
        # (all of the claim's when it names none).
        uid = "6b666666-2222-4333-8444-555555555555"
        c = claim("llm-gpu", uid, params=tenant_config(mem="64Mi"))
        c["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
            {"name": "guaranteed", "deviceClassName": "gpuos-guaranteed.gpuos.io"},
            {"name": "best-effort", "deviceClassName": "gpuos-best-effort.gpuos.io"}]}]
        c["status"]["allocation"]["devices"]["results"][0]["request"] = "gpu/guaranteed"
        self.n.set_claims([c])
        r = self.n.call("prepare", [("llm-gpu", uid)], containers={
            "server": [{"claim": uid, "request": "gpu"}],
            "sidecar": [{"claim": uid, "request": "other"}],
            "whole-claim": [{"claim": uid}],
            "no-claim": []})
        self.assertEqual(r["claims"][uid]["error"], "", self.n.plugin_text())
        ids = self.n.cdi_ids(uid)
        self.assertEqual(r["containers"], {"server": ids, "sidecar": [], "whole-claim": ids, "no-claim": []})
        # A claim that failed to prepare gives no container anything.
        bad = "6c666666-2222-4333-8444-555555555555"
        self.n.set_claims([c, claim("bad", bad, params=tenant_config(memory="1"))])
        r = self.n.call("prepare", [("llm-gpu", uid), ("bad", bad)],
                        containers={"server": [{"claim": uid, "request": "gpu"}, {"claim": bad, "request": "gpu"}]})
        self.assertEqual(r["containers"], {"server": ids})
        self.assertEqual({u: e["error"] for u, e in self.n.call("unprepare", [("llm-gpu", uid), ("bad", bad)])["claims"].items()},
                         {uid: "", bad: ""})

    def test_a_claim_survives_a_gpuosd_restart(self):
        uid = "33333333-2222-4333-8444-555555555555"
        self.prepared(uid, "llm-gpu", **{"mem": "128Mi"})
        self.n.d.proc.terminate()  # (not stop(): that removes its directory)
        self.n.d.proc.wait(timeout=60)
        self.n.d.start()
        sock = os.path.join(self.n.d.dir, "claims", uid, "gpuosd.sock")
        wait_for(lambda: os.path.exists(sock), what="the claim's socket again")
        if os.geteuid() != 0:
            self.n.unprepare(uid, "llm-gpu")
            self.skipTest("a container's tenant needs root here (a pid namespace without a user namespace)")
        env = dict(self.n.d.env, GPUOS_SOCKET=sock, LD_PRELOAD=os.path.join(test_e2e.BUILD, "lib", "libgpuos.so"))
        # As in a container: only the claim's containers are served on its socket.
        out = subprocess.run(["unshare", "--pid", "--fork", bin_path("gpuos-claim-probe")], env=env,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(json.loads(out.stdout)["allocated"], 128 * MIB, out.stderr)
        self.assertEqual(self.n.unprepare(uid, "llm-gpu")["error"], "")

    def test_a_shared_claim_is_prepared_again_whatever_the_order_of_its_pods(self):
        uid = "3a333333-2222-4333-8444-555555555555"
        first = self.prepared(uid, "shared-gpu", **{"mem": "128Mi"})
        other = {"resource": "pods", "name": "llm-1", "uid": "0a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"}
        c = claim("shared-gpu", uid, params=tenant_config(mem="128Mi"))
        # Another pod first in reservedFor, then the first pod gone; and after a plugin restart.
        c["status"]["reservedFor"].insert(0, other)
        self.n.set_claims([c])
        self.assertEqual(self.n.prepare(uid, "shared-gpu"), first, self.n.plugin_text())
        c["status"]["reservedFor"] = [other]
        self.n.set_claims([c])
        self.n.plugin.terminate()
        self.n.plugin.wait(timeout=60)
        self.n.start_plugin()
        self.assertEqual(self.n.prepare(uid, "shared-gpu"), first, self.n.plugin_text())
        self.assertEqual(len(self.n.claims_of_gpuosd()), 1)
        self.assertEqual(self.n.unprepare(uid, "shared-gpu")["error"], "")
        self.assertEqual(os.listdir(os.path.join(self.n.plugin_dir, "prepared")), [])

    def test_bad_claims_are_refused_with_a_clear_error_and_leave_nothing(self):
        cases = [
            ("unknown field", dict(params=tenant_config(memory="1Gi")), "memory"),
            ("wrong kind", dict(params={"apiVersion": "gpuos.io/v1", "kind": "Tenant"}), "kind"),
            ("unknown class", dict(params=tenant_config(**{"class": "gold"})), "gold"),
            ("malformed", dict(params=["not", "an", "object"]), "object"),
            ("bad size", dict(params=tenant_config(mem="lots")), "mem"),
            ("class against the share", dict(device="gpu-0-best-effort-1", params=tenant_config(**{"class": "guaranteed"})),
             "best-effort"),
            ("over the GPU", dict(params=tenant_config(mem="64Gi")), "more than the GPU has"),
            ("not ours", dict(device="gpu-0-guaranteed-0", pool="node-b", params=tenant_config()), "pool"),
            ("no such GPU", dict(device="gpu-7-guaranteed-0", params=tenant_config()), "GPU 7"),
            ("no such domain", dict(params=tenant_config(space="nowhere")), "nowhere"),
        ]
        for i, (what, kw, text) in enumerate(cases):
            uid = "44444444-2222-4333-8444-5555555555%02d" % i
            self.n.set_claims([claim("bad-%d" % i, uid, **kw)])
            r = self.n.prepare(uid, "bad-%d" % i)
            self.assertNotEqual(r["error"], "", what)
            self.assertIn(text, r["error"], what)
            self.assertEqual(r.get("devices", []), [], what)
        # A claim the API server does not have, and one whose uid is not the claim's.
        r = self.n.prepare("55555555-2222-4333-8444-555555555555", "missing")
        self.assertIn("404", r["error"])
        self.n.set_claims([claim("other", "66666666-2222-4333-8444-555555555555")])
        r = self.n.prepare("77777777-2222-4333-8444-555555555555", "other")
        self.assertIn("uid", r["error"])
        self.assertEqual(self.n.cdi_files(), [])
        self.assertEqual(self.n.claims_of_gpuosd(), [])
        self.assertEqual(os.listdir(os.path.join(self.n.d.dir, "claims")) if os.path.isdir(
            os.path.join(self.n.d.dir, "claims")) else [], [])


def podman_usable():
    """Why podman + crun cannot run a container here ("" = they can)."""
    for tool in ("podman", "crun"):
        if shutil.which(tool) is None:
            return tool + " is not installed"
    if os.geteuid() != 0:
        return "rootful podman needs root"
    return ""


class Container(unittest.TestCase):
    """A claim's tenant in a real container: podman + crun consume the plugin's CDI spec."""

    def setUp(self):
        why = podman_usable()
        if why:
            if os.environ.get("GPUOS_REQUIRE_PODMAN"):
                self.fail("GPUOS_REQUIRE_PODMAN is set but " + why)
            self.skipTest(why)
        # podman 4.3 reads CDI specs from /etc/cdi and /var/run/cdi only: the plugin writes there
        # (files named by the claim's uid, removed by unprepare, and by a cleanup if a test fails).
        os.makedirs("/var/run/cdi", exist_ok=True)
        self.n = Node(self, cdi_dir="/var/run/cdi")
        self.sim_spec = "/var/run/cdi/gpuos-test-simgpu-%d.json" % os.getpid()
        self.addCleanup(lambda: os.path.exists(self.sim_spec) and os.unlink(self.sim_spec))

    def rootfs(self):
        """A root filesystem of the probe and the libraries it, the interposer and the double need."""
        root = self.n.path("rootfs")
        binaries = [bin_path("gpuos-claim-probe"), os.path.join(test_e2e.BUILD, "lib", "libgpuos.so"),
                    os.path.join(test_e2e.BUILD, "lib", "driver_double", "libcuda.so.1")]
        files = set()
        for b in binaries:
            out = subprocess.run(["ldd", b], capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                for p in parts:
                    if p.startswith("/") and os.path.exists(p):
                        files.add(os.path.realpath(p))
                        files.add(p)
        for f in files:
            dst = root + f
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.exists(dst):
                shutil.copy2(os.path.realpath(f), dst)
        os.makedirs(root + "/bin", exist_ok=True)
        shutil.copy2(bin_path("gpuos-claim-probe"), root + "/bin/claim-probe")
        for d in ("/usr/lib/gpuos", "/run/gpuos", "/opt/sim", "/dev/shm", "/proc", "/sys", "/tmp"):
            os.makedirs(root + d, exist_ok=True)
        return root

    def sim_gpu_device(self):
        """The simulated GPU as a CDI device (what the NVIDIA toolkit's spec is for a real one)."""
        double = os.path.join(test_e2e.BUILD, "lib", "driver_double")
        spec = {"cdiVersion": "0.5.0", "kind": "gpuos-test.local/simgpu", "devices": [{
            "name": "0", "containerEdits": {
                "env": ["GPUOS_DRIVER_LIBRARY=/opt/sim/libcuda.so.1", "LD_LIBRARY_PATH=/opt/sim",
                        "GPUOS_SIM_SHM=" + self.n.d.env["GPUOS_SIM_SHM"]],
                "mounts": [{"hostPath": double, "containerPath": "/opt/sim", "options": ["ro", "rbind"]}]}}]}
        with open(self.sim_spec, "w") as f:
            json.dump(spec, f)

    def podman(self, args):
        # This sandbox's kernel mounts a cgroup v2 hierarchy beside v1 ones, which crun refuses
        # ("hybrid mode"): the container runs in a mount namespace without it, and without cgroups
        # of its own. Raising rlimits is not allowed here either: the container keeps the host's.
        inner = ["podman", "--runtime", "crun", "--cgroup-manager", "cgroupfs", "run", "--rm",
                 "--cgroups", "disabled", "--network", "none", "--ipc", "host",
                 "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"] + args
        script = "umount /sys/fs/cgroup/unified 2>/dev/null; exec \"$@\""
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + inner,
                              capture_output=True, text=True, timeout=300)

    def test_a_claims_tenant_in_a_container_registers_under_its_pod_and_keeps_its_quota(self):
        self.n.plugin.terminate()  # again, naming the simulated GPU's CDI device for each claim
        self.n.plugin.wait(timeout=60)
        self.n.start_plugin(["--gpu-cdi-device", "gpuos-test.local/simgpu={index}"])
        self.sim_gpu_device()
        uid = "88888888-2222-4333-8444-%012d" % os.getpid()
        self.n.set_claims([claim("llm-gpu", uid, params=tenant_config(**{"class": "guaranteed", "mem": "192Mi"}))])
        self.addCleanup(self.n.unprepare, uid, "llm-gpu")
        out = self.n.call("prepare", [("llm-gpu", uid)], containers={"tenant": [{"claim": uid, "request": "gpu"}]})
        self.assertEqual(out["claims"][uid]["error"], "", self.n.plugin_text())
        ids = out["containers"]["tenant"]  # what the kubelet hands the runtime for the container
        self.assertEqual(ids, ["%s/claim=%s" % (DRIVER, uid), "gpuos-test.local/simgpu=0"])
        args = []
        for i in ids:
            args += ["--device", i]
        out = self.podman(args + ["--rootfs", self.rootfs(), "/bin/claim-probe"])
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr + self.n.d.log_text())
        probe = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(probe["allocated"], 192 * MIB, out.stdout + out.stderr + self.n.d.log_text())  # the claim's quota, inside the container
        self.assertEqual(probe["error"], 2)
        # gpuosd knew it by its pod, and by its host pid (not the container's).
        t = wait_for(lambda: [t for t in self.n.d.ps()["tenants"] if t.get("claim_uid") == uid],
                     what="the container's tenant in ps")[0]
        self.assertNotEqual(t["pid"], probe["pid"])
        self.assertEqual((t["pod_namespace"], t["pod_name"], t["pod_uid"]), ("inference", "llm-0", POD_UID))
        self.assertEqual((t["class"], t["mem_quota_bytes"], t["mem_peak_bytes"]), ("guaranteed", 192 * MIB, 192 * MIB))
        self.assertEqual(self.n.unprepare(uid, "llm-gpu")["error"], "")
        self.assertEqual(self.n.cdi_files(), [])


if __name__ == "__main__":
    test_e2e.BUILD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
