#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests: the real gpuosd, gpuos CLI and libgpuos.so on the driver test double.

Each test starts its own daemon on a private socket and a private simulated GPU, runs tenant
processes under `gpuos run`, and checks what the daemon counted against what the tenants issued.
Usage: test_e2e.py BUILD_DIR [test-name ...]
"""
import glob
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

BUILD = None
HERE = os.path.dirname(os.path.abspath(__file__))
SWAP_SIGNAL_QUANTUM_S = 60  # Swap's signal test: see there
START_TIMEOUT_S = 30  # gpuosd comes up in well under a second; this is for a loaded CI machine
_daemon_serial = itertools.count(1)


def bin_path(name):
    return os.path.join(BUILD, "bin", name)



# Hermetic (#43): no test reads the host's /etc/gpuos/gpuos.toml or talks to a gpuosd at
# /run/gpuos/gpuosd.sock; every process the tests start inherits paths that do not exist instead.
os.environ["GPUOS_SYSTEM_CONFIG"] = "/nonexistent/gpuos-e2e/gpuos.toml"
os.environ["GPUOS_SYSTEM_SOCKET"] = "/nonexistent/gpuos-e2e/gpuosd.sock"

class Daemon:
    """A gpuosd on a private socket and simulated GPU; stop() ends it (and any child of it) and unlinks
    the simulated GPU's /dev/shm segment. stop() may be called any number of times.

    Tests get theirs from start_daemon(), which registers stop() with addCleanup before gpuosd starts,
    so that a setUp or test that fails anywhere still leaves no gpuosd and no segment behind.
    daemon_env: variables for gpuosd alone (e.g. the simulated GPU's size), not for the tenants.
    """

    def __init__(self, extra_args=(), daemon_env=None, start=True):
        self.dir = tempfile.mkdtemp(prefix="gpuos-e2e-")
        self.socket = os.path.join(self.dir, "gpuosd.sock")
        self.env = dict(os.environ)
        double_dir = os.path.join(BUILD, "lib", "driver_double")
        self.env.update({
            "GPUOS_SOCKET": self.socket,
            "GPUOS_DRIVER_LIBRARY": os.path.join(double_dir, "libcuda.so.1"),
            "LD_LIBRARY_PATH": double_dir,
            "GPUOS_SIM_SHM": "/gpuos-e2e-%d-%d" % (os.getpid(), next(_daemon_serial)),
            "GPUOS_LOG_LEVEL": "info",
        })
        self.daemon_env = dict(daemon_env or {})
        self.log = open(os.path.join(self.dir, "gpuosd.log"), "w+")
        self.log_copy = ""  # the log's text once stop() removed the file
        self.proc = None
        self.groups = []  # process groups of every gpuosd started (their MPS control daemons too)
        extra_args = list(extra_args)
        if not any(a.startswith("--metrics-listen") for a in extra_args):
            extra_args += ["--metrics-listen", "127.0.0.1:0"]  # never the shared default port
        self.args = [bin_path("gpuosd"), "--socket", self.socket] + extra_args
        if start:
            self.start()

    def start(self):
        # Its own process group: stop() also ends what it started (a fake MPS control daemon).
        self.proc = subprocess.Popen(self.args, env=dict(self.env, **self.daemon_env), stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.groups.append(self.proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.ps(check=False) is not None:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        text = self.log_text()
        self.stop()
        raise RuntimeError("gpuosd did not come up:\n" + text)

    def log_text(self):
        if self.log.closed:
            return self.log_copy
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def metrics_port(self):
        """The metrics endpoint's port, from the daemon's "metrics on ... (port N)" log line (the
        last one: the log goes on across restarts)."""
        m = re.findall(r"metrics on http://\S+ \(port (\d+)\)", self.log_text())
        return int(m[-1]) if m else None

    def metric(self, name, **labels):
        """The values of one metric's series whose labels include `labels` (a scrape of /metrics)."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port(), timeout=10) as r:
            text = r.read().decode()
        want = ['%s="%s"' % (k, v) for k, v in labels.items()]
        out = []
        for line in text.splitlines():
            m = re.match(r"^%s(\{(.*)\})? (\S+)$" % re.escape(name), line)
            if m and all(w in (m.group(2) or "").split(",") for w in want):
                out.append(float(m.group(3)))
        return out

    def ps(self, all_tenants=True, check=True):
        cmd = [bin_path("gpuos"), "ps", "--json", "--socket", self.socket]
        if all_tenants:
            cmd.append("--all")
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            if check:
                raise AssertionError("gpuos ps failed: " + r.stderr)
            return None
        return json.loads(r.stdout)

    def tenant(self, pid):
        for t in self.ps()["tenants"]:
            if t["pid"] == pid:
                return t
        return None

    def run_cmd(self, args, **kw):
        return [bin_path("gpuos"), "run", "--socket", self.socket] + args

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for group in self.groups:
            kill_group(group)
        self.groups = []
        if not self.log.closed:
            self.log_copy = self.log_text()
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        # The simulated GPU's shared memory (the driver double's): its tenants are gone by now.
        unlink_segments(self.env["GPUOS_SIM_SHM"])


def unlink_segments(name):
    """Unlinks the /dev/shm segment `name` (as in GPUOS_SIM_SHM) and any named after it."""
    for path in glob.glob("/dev/shm" + name + "*"):
        try:
            os.unlink(path)
        except OSError:
            pass


def kill_group(pgid):
    """SIGKILL to a process group that may be gone already."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(p):
    """Ends a process started by spawn(): its whole group (children it forked too), then its pipes."""
    kill_group(p.pid)
    p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            f.close()


def start_daemon(test, extra_args=(), daemon_env=None):
    """A started Daemon whose stop() test.addCleanup registered before it started."""
    d = Daemon(extra_args, daemon_env=daemon_env, start=False)
    test.addCleanup(d.stop)
    if os.environ.get("GPUOS_E2E_VERBOSE"):
        test.addCleanup(lambda: print(d.log_text()))  # runs first (cleanups are last in, first out)
    d.start()
    return d


def spawn(test, cmd, env, text=True, **kw):
    """Popen in a process group of its own, piped, ended (group and all) by a cleanup that
    test.addCleanup registered before anything else can fail."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    p = subprocess.Popen(cmd, env=env, text=text, start_new_session=True, **kw)
    test.addCleanup(reap, p)
    return p


def wait_for(pred, timeout=30.0, what="condition"):
    """Polls pred until it returns something true. The timeout is a ceiling for a loaded machine,
    not a claim about speed: no test asserts how fast something happens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def signal_until_seen(p, seen, timeout=150.0, what="the signal to be seen"):
    """SIGTERM to p, again every 3 s, until seen() or p exits. A signal that lands while p's thread
    is not inside its wait in gpuos (between setting its waiting word and entering the futex wait:
    microseconds, longer on a loaded machine) runs the program's handler but is not seen by gpuos
    (docs/ARCHITECTURE.md, "Swappable memory"); the next one is, as a user presses Ctrl-C again."""
    deadline = time.monotonic() + timeout
    while p.poll() is None and not seen():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        p.send_signal(signal.SIGTERM)
        again = time.monotonic() + 3.0
        while time.monotonic() < again and p.poll() is None and not seen():
            time.sleep(0.05)


class E2E(unittest.TestCase):
    def setUp(self):
        self.d = start_daemon(self)

    def run_probe(self, name, klass, *extra, env_extra=None):
        env = dict(self.d.env)
        env.update(env_extra or {})
        r = subprocess.run(self.d.run_cmd(["--name", name, "--class", klass, "--",
                                           bin_path("gpuos-interpose-probe")] + list(extra)),
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, "probe failed: " + r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1]), r

    def assert_counted(self, issued, name, klass):
        t = wait_for(lambda: (lambda x: x if x and x["state"] == "exited" else None)(self.d.tenant(issued["pid"])),
                     what="tenant %d to be seen exited" % issued["pid"])
        self.assertEqual(t["name"], name)
        self.assertEqual(t["class"], klass)
        for key in ("launches", "graph_launches", "captured_launches", "alloc_calls", "alloc_failures"):
            self.assertEqual(t[key], issued[key], key)
        self.assertEqual(t["mem_used_bytes"], issued["mem_held_bytes"])
        self.assertGreaterEqual(t["mem_peak_bytes"], issued["mem_held_bytes"])
        return t

    def test_every_entry_path_is_counted(self):
        issued, _ = self.run_probe("probe", "guaranteed", "--launches", "7", "--graph-replays", "4")
        self.assertEqual(issued["failures"], 0)
        self.assertEqual(issued["launches"], 28)  # 7 each through 4 paths
        self.assert_counted(issued, "probe", "guaranteed")

    def test_concurrent_tenants_are_counted_apart(self):
        # All four registered and live at once (each waits for the flag before its launches), then
        # they run side by side.
        go = os.path.join(self.d.dir, "go")
        procs = []
        for i in range(4):
            procs.append(spawn(self, self.d.run_cmd(["--name", "t%d" % i, "--class", "best-effort", "--",
                                                     bin_path("gpuos-interpose-probe"), "--launches", str(5 + i),
                                                     "--wait-file", go, "--hold-ms", "700"]), self.d.env))
        wait_for(lambda: len([t for t in self.d.ps(all_tenants=False)["tenants"]
                              if t["state"] != "exited"]) == 4, what="4 live tenants")
        open(go, "w").close()
        for i, p in enumerate(procs):
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            issued = json.loads(out.strip().splitlines()[-1])
            self.assert_counted(issued, "t%d" % i, "best-effort")

    def test_closed_gate_holds_launches_until_opened(self):
        flag = os.path.join(self.d.dir, "go")
        p = spawn(self, self.d.run_cmd(["--name", "gated", "--", bin_path("gpuos-interpose-probe"),
                                        "--launches", "3", "--wait-file", flag]), self.d.env)
        t = wait_for(lambda: self.d.tenant(p.pid), what="registration")
        gate = [bin_path("gpuos"), "gate", str(t["id"]), "close", "--socket", self.d.socket]
        subprocess.run(gate, env=self.d.env, check=True, capture_output=True)
        open(flag, "w").close()
        # Its thread blocked at the gate (gpuosd's gauge), then held there for at least 0.5 s: however
        # slow the machine, the wait gpuosd counts is at least that long.
        wait_for(lambda: self.d.metric("gpuos_tenant_waiting", tenant_id=t["id"]) == [1.0],
                 what="the tenant to block at its closed gate")
        time.sleep(0.5)
        t = self.d.tenant(p.pid)
        self.assertIsNone(p.poll(), "tenant finished although its gate was closed")
        self.assertEqual(t["state"], "gated")
        self.assertEqual(t["launches"], 0)
        gate[-3] = "open"
        subprocess.run(gate, env=self.d.env, check=True, capture_output=True)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        t = self.assert_counted(json.loads(out.strip().splitlines()[-1]), "gated", "best-effort")
        self.assertGreaterEqual(t["gate_waits"], 1)
        self.assertGreaterEqual(t["gate_wait_ns"], 500_000_000)

    def test_without_daemon_passthrough_warns_once_and_refuse_refuses(self):
        env = dict(self.d.env)
        env["GPUOS_SOCKET"] = os.path.join(self.d.dir, "nobody-here.sock")
        env["LD_PRELOAD"] = os.path.join(BUILD, "lib", "libgpuos.so")
        r = subprocess.run([bin_path("gpuos-interpose-probe")], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("pass-through"), 1, r.stderr)
        env["GPUOS_ON_NO_DAEMON"] = "refuse"
        r = subprocess.run([bin_path("gpuos-interpose-probe")], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("CUDA_ERROR_NOT_PERMITTED", r.stderr)
        self.assertIn("refusing", r.stderr)

    def test_memory_quota_holds_on_every_allocation_path(self):
        hold = os.path.join(self.d.dir, "quota-release")
        p = spawn(self, self.d.run_cmd(["--name", "quota", "--mem", "64MiB", "--",
                                        bin_path("gpuos-quota-probe"), "--hold-file", hold]), self.d.env)
        try:
            # While it holds arrays and graph allocations, gpuosd counts exactly what it accounted.
            line = p.stdout.readline()
            if "held" not in line:
                p.kill()
                self.fail("the probe did not reach its hold point: " + line + p.communicate()[1])
            held = json.loads(line)["held"]
            t = self.d.tenant(p.pid)
            self.assertIsNotNone(t)
            self.assertEqual(t["mem_used_bytes"], held)
            self.assertLessEqual(t["mem_peak_bytes"], 64 << 20)
        finally:
            open(hold, "w").close()
        stdout, stderr = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, stderr)
        lines = stdout.strip().splitlines()
        out = json.loads(lines[-1])
        self.assertEqual(out["quota"], 64 << 20)
        self.assertTrue(any(json.loads(x).get("imported") for x in lines[:-1]), stdout)  # the IPC child
        t = wait_for(lambda: (lambda x: x if x and x["state"] == "exited" else None)(self.d.tenant(out["pid"])),
                     what="quota tenant to exit")
        self.assertEqual(t["mem_quota_bytes"], 64 << 20)
        self.assertEqual(t["mem_peak_bytes"], 64 << 20)  # exactly the quota, never more
        self.assertGreaterEqual(out["refused"], 20)
        self.assertEqual(t["alloc_failures"], out["refused"])  # one per refused attempt, nothing else
        self.assertEqual(t["mem_used_bytes"], 0)

    def test_tenant_survives_daemon_restart_and_is_adopted(self):
        # A first tenant takes id 1, so the survivor has id 2 and a new daemon would start at 1.
        # The survivor runs until told to stop (SIGTERM: it finishes its kernel, verifies and
        # reports), so that it cannot end before the new daemon is up, however slow the machine.
        first, _ = self.run_probe("first", "best-effort")
        tenant = spawn(self, self.d.run_cmd(["--name", "survivor", "--class", "guaranteed", "--", bin_path("gpuos-synth"),
                                             "--name", "survivor", "--iters", "100000", "--count", "10000000",
                                             "--gap-us", "1000", "--warmup", "0", "--json", "-"]), self.d.env)
        wait_for(lambda: (self.d.tenant(tenant.pid) or {}).get("launches", 0) > 50, what="tenant to run")
        seen = self.d.tenant(tenant.pid)["launches"]
        old_id = self.d.tenant(tenant.pid)["id"]
        self.assertEqual(old_id, 2)
        self.d.proc.kill()  # the daemon dies without any cleanup
        self.d.proc.wait()
        time.sleep(0.5)
        self.assertIsNone(tenant.poll(), "the tenant must keep running without its daemon")
        self.d.start()  # a new daemon on the same socket
        # Counters are carried over just after re-registration (once no call uses the old block).
        wait_for(lambda: (self.d.tenant(tenant.pid) or {}).get("launches", 0) >= seen,
                 what="the tenant to re-register with its counters carried over")
        tenant.send_signal(signal.SIGTERM)
        out, err = tenant.communicate(timeout=60)
        self.assertEqual(tenant.returncode, 0, err)
        issued = json.loads(out)
        self.assertTrue(issued["verified"])
        t = wait_for(lambda: (lambda x: x if x and x["state"] == "exited" else None)(self.d.tenant(tenant.pid)),
                     what="the adopted tenant to exit")
        self.assertEqual(t["launches"], issued["launches_issued"], "no launch lost across the restart")
        self.assertEqual(t["id"], old_id, "the adopted tenant keeps its id")
        self.assertIn("re-registered with gpuosd", err)

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv")
    def test_ordinary_user_may_list_but_not_administer(self):
        os.chmod(self.d.dir, 0o755)  # let another uid reach the socket (gpuosd as root makes it 0666)
        # The build tree may sit where another uid cannot enter (/root): run a copy of the CLI.
        cli = os.path.join(self.d.dir, "gpuos")
        shutil.copy(bin_path("gpuos"), cli)
        os.chmod(cli, 0o755)
        flag = os.path.join(self.d.dir, "never")
        p = spawn(self, self.d.run_cmd(["--name", "victim", "--", bin_path("gpuos-interpose-probe"),
                                        "--wait-file", flag]), self.d.env)
        t = wait_for(lambda: self.d.tenant(p.pid), what="registration")
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        ps = subprocess.run(as_nobody + [cli, "ps", "--json", "--socket", self.d.socket],
                            env=self.d.env, capture_output=True, text=True, timeout=10)
        self.assertEqual(ps.returncode, 0, ps.stderr)
        # Its own tenants only (issue #62 item 6): root's is not among them.
        self.assertNotIn(p.pid, [x["pid"] for x in json.loads(ps.stdout)["tenants"]])
        gate = subprocess.run(as_nobody + [cli, "gate", str(t["id"]), "close",
                                           "--socket", self.d.socket],
                              env=self.d.env, capture_output=True, text=True, timeout=10)
        self.assertNotEqual(gate.returncode, 0)
        self.assertIn("needs an admin", gate.stderr + gate.stdout)  # refused by gpuosd itself
        self.assertEqual(self.d.tenant(p.pid)["state"], "running", "a non-admin closed a gate")

    def test_a_stop_does_not_report_a_running_tenant_as_exited(self):
        # gpuosd stops (SIGTERM) while a tenant runs on: its log says the tenant runs on and that the
        # next gpuosd adopts it, not that it exited (an operator reads that log at every restart).
        flag = os.path.join(self.d.dir, "never")
        p = spawn(self, self.d.run_cmd(["--name", "stays", "--", bin_path("gpuos-interpose-probe"),
                                        "--wait-file", flag]), self.d.env)
        t = wait_for(lambda: self.d.tenant(p.pid), what="registration")
        self.d.proc.terminate()
        self.d.proc.wait(timeout=30)
        log = self.d.log_text()
        self.assertIsNone(p.poll(), "the tenant must keep running without its daemon")
        self.assertIn("tenant %d runs on without gpuosd (the next one adopts it): pid %d" % (t["id"], p.pid), log)
        self.assertNotIn("tenant %d exited" % t["id"], log)

    def test_killed_tenant_is_reclaimed(self):
        flag = os.path.join(self.d.dir, "never")
        p = spawn(self, self.d.run_cmd(["--name", "victim", "--", bin_path("gpuos-interpose-probe"),
                                        "--wait-file", flag]), self.d.env)
        wait_for(lambda: self.d.tenant(p.pid), what="registration")
        p.kill()
        p.wait()
        # gpuosd learns of the death from the tenant's connection and pidfd, not from a poll: how
        # soon is a latency (a benchmark's business); here, that it is reclaimed at all.
        t = wait_for(lambda: (lambda x: x if x and x["state"] == "exited" else None)(self.d.tenant(p.pid)),
                     what="the daemon to notice the kill")
        self.assertEqual(t["mem_used_bytes"], 0)


class PriorityPolicy(unittest.TestCase):
    """gpuosd --policy priority: a busy guaranteed tenant holds best-effort tenants at the gate."""

    def setUp(self):
        self.d = start_daemon(self, ["--policy", "priority"])

    def synth(self, name, klass, iters, count):
        return spawn(self, self.d.run_cmd(["--name", name, "--class", klass, "--", bin_path("gpuos-synth"),
                                           "--name", name, "--iters", str(iters), "--count", str(count),
                                           "--warmup", "0", "--json", "-"]), self.d.env)

    def launches(self, pid):
        t = self.d.tenant(pid)
        return t["launches"] if t else 0

    def test_best_effort_is_gated_while_guaranteed_is_busy(self):
        be = self.synth("be", "best-effort", 2_000_000, 10_000_000)  # 2 ms kernels, back to back
        wait_for(lambda: self.launches(be.pid) > 20, what="BE to run")
        hp = self.synth("hp", "guaranteed", 6_000_000_000, 1)  # one 6 s kernel: busy without a gap
        wait_for(lambda: self.launches(hp.pid) == 1, what="HP to launch its kernel")
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("state") == "gated", what="BE gated")
        before = self.launches(be.pid)
        time.sleep(0.5)
        during = self.launches(be.pid) - before
        # The window lay inside HP's one kernel if HP is still busy after it (order, not time).
        hp_id = self.d.tenant(hp.pid)["id"]
        self.assertEqual(self.d.metric("gpuos_tenant_busy", tenant_id=hp_id), [1.0],
                         "HP's kernel ended before the window did: nothing was checked")
        self.assertLessEqual(during, 1, "BE kept launching while HP was busy")
        out, err = hp.communicate(timeout=120)
        self.assertEqual(hp.returncode, 0, err)
        after0 = self.launches(be.pid)
        wait_for(lambda: self.launches(be.pid) > after0 + 10, what="BE to resume once HP is idle")
        self.assertGreaterEqual(self.d.tenant(be.pid)["gate_waits"], 1)

    def test_a_signal_lets_a_gated_best_effort_tenant_act_on_it(self):
        # HP busy far longer than the test; BE waits at its closed gate. SIGTERM to BE (gpuos-synth's
        # handler only sets a flag, without SA_RESTART, as Python's do) wakes its thread at the gate:
        # gpuosd opens BE's gate for signal_grace_ms, BE stops its loop and exits with its result
        # while HP still runs. Without the reprieve BE would wait for HP (200 s), past the timeout.
        be = self.synth("be", "best-effort", 2_000_000, 10_000_000)
        wait_for(lambda: self.launches(be.pid) > 20, what="BE to run")
        hp = self.synth("hp", "guaranteed", 400_000_000, 500)  # 0.4 s kernels for 200 s
        wait_for(lambda: self.launches(hp.pid) >= 2, what="HP to start its kernels")
        be_id = self.d.tenant(be.pid)["id"]
        wait_for(lambda: self.d.metric("gpuos_tenant_waiting", tenant_id=be_id) == [1.0],
                 what="BE's thread to block at its closed gate")
        signal_until_seen(be, lambda: "woken by a signal at its closed gate" in self.d.log_text())
        out, err = be.communicate(timeout=90)
        self.assertEqual(be.returncode, 0, err + self.d.log_text())
        self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"])
        self.assertIsNone(hp.poll(), "HP should still be running (the test would prove nothing)")
        self.assertIn("woken by a signal at its closed gate", self.d.log_text())

    def test_a_stopped_daemon_cannot_hold_a_gated_tenant(self):
        # HP busy far longer than the test; BE waits at its closed gate; gpuosd is SIGSTOPped (it
        # keeps its socket open, so BE does not see it gone). The closed gate is a lease of
        # GPUOS_GATE_LEASE_NS (5 s) from gpuosd's last heartbeat: BE goes on and finishes. Without
        # the lease it would wait until the daemon came back.
        be = self.synth("be", "best-effort", 2_000_000, 300)
        wait_for(lambda: self.launches(be.pid) > 5, what="BE to run")
        hp = self.synth("hp", "guaranteed", 400_000_000, 500)  # 0.4 s kernels for 200 s
        wait_for(lambda: self.launches(hp.pid) >= 2, what="HP to start its kernels")
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("state") == "gated", what="BE gated")
        self.addCleanup(self.d.proc.send_signal, signal.SIGCONT)  # before the daemon's stop
        self.d.proc.send_signal(signal.SIGSTOP)
        out, err = be.communicate(timeout=90)
        self.assertEqual(be.returncode, 0, err)
        self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"])
        self.assertIn("has not renewed this tenant's closed gate", err)
        self.assertIsNone(hp.poll(), "HP should still be running (the test would prove nothing)")


class LongLaunchHold(unittest.TestCase):
    """[policy.priority] be_max_kernel_us: in a guaranteed tenant's pause, a best-effort launch
    expected to run longer than the bound waits until the pause has lasted be_idle_hold_ms (once on
    the GPU it would run to its end, holding the guaranteed tenant's next step)."""

    HOLD_S = 10  # the longest hold a config may set: the check below runs well inside it
    CONFIG = '[scheduler]\npolicy = "priority"\n[policy.priority]\nbe_max_kernel_us = 1000\nbe_idle_hold_ms = %d\n'

    def setUp(self):
        cfg_dir = tempfile.mkdtemp(prefix="gpuos-hold-cfg-")
        self.addCleanup(shutil.rmtree, cfg_dir, ignore_errors=True)
        cfg = os.path.join(cfg_dir, "gpuos.toml")
        with open(cfg, "w") as f:
            f.write(self.CONFIG % (self.HOLD_S * 1000))
        self.d = start_daemon(self, ["--config", cfg])

    def synth(self, name, klass, iters, count, *more):
        return spawn(self, self.d.run_cmd(["--name", name, "--class", klass, "--", bin_path("gpuos-synth"),
                                           "--name", name, "--iters", str(iters), "--count", str(count),
                                           "--warmup", "0", "--json", "-"] + list(more)), self.d.env)

    def launches(self, pid):
        t = self.d.tenant(pid)
        return t["launches"] if t else 0

    def test_long_best_effort_launches_wait_out_the_guaranteed_tenants_pause(self):
        # BE: 5 ms kernels back to back, alone long enough to have timed some (one in 8).
        be = self.synth("be", "best-effort", 5_000_000, 10_000_000)
        wait_for(lambda: self.launches(be.pid) > 40, what="BE to run and time its kernels")
        # HP: one 100 ms kernel, then a pause of two minutes (its second kernel comes after it).
        hp = self.synth("hp", "guaranteed", 100_000_000, 2, "--gap-us", "120000000")
        wait_for(lambda: self.launches(hp.pid) == 1, what="HP to launch its kernel")
        hp_id = self.d.tenant(hp.pid)["id"]
        wait_for(lambda: self.d.metric("gpuos_tenant_busy", tenant_id=hp_id) == [0.0], what="HP's pause")
        paused_at = time.monotonic()
        before = self.launches(be.pid)
        time.sleep(1.0)
        during = self.launches(be.pid) - before
        held = self.d.tenant(be.pid)  # as gpuos ps --json shows it: paced at the full share, the bound
        self.assertLess(time.monotonic() - paused_at, self.HOLD_S,
                        "the window outlasted the hold: nothing was checked")
        # One launch may have passed its pacing check before the pacing came.
        self.assertLessEqual(during, 1, "BE's 5 ms kernels ran in HP's pause, within the hold")
        self.assertEqual((held.get("pace_share"), held.get("pace_max_kernel_us")), (1.0, 1000), held)
        # After the hold, BE runs again: HP is still in its pause (its second kernel is minutes away).
        wait_for(lambda: self.launches(be.pid) > before + 20, timeout=self.HOLD_S + 60,
                 what="BE to run once HP had been idle for the hold")
        self.assertEqual(self.launches(hp.pid), 1, "HP ended its pause: the hold's end was not what let BE run")
        self.assertIsNone(hp.poll())
        self.assertNotIn("pace_share", self.d.tenant(be.pid))


class LongLaunchHoldUnderBudget(LongLaunchHold):
    """The same under the budget policy, beside a guaranteed tenant without a budget:
    [policy.budget] pace_max_kernel_us and pace_idle_hold_ms."""

    CONFIG = '[scheduler]\npolicy = "budget"\n[policy.budget]\npace_max_kernel_us = 1000\npace_idle_hold_ms = %d\n'


class BudgetPolicy(unittest.TestCase):
    """gpuosd --policy budget: a guaranteed tenant's latency budget, measured from its timed launches."""

    def setUp(self):
        self.d = start_daemon(self, ["--policy", "budget"])

    def synth(self, name, run_args, iters, count):
        return spawn(self, self.d.run_cmd(["--name", name] + run_args + ["--", bin_path("gpuos-synth"), "--name", name,
                                                                         "--iters", str(iters), "--count", str(count),
                                                                         "--warmup", "0", "--json", "-"]), self.d.env)

    def test_a_budget_is_declared_measured_and_shown(self):
        # HP: 200 us kernels back to back for a few seconds, alone: its slowdown is measured (~1).
        # How close to 1 it reads alone is the slowdown meter's accuracy: its unit tests check that
        # with given timings; the double's timings here carry the host's scheduling noise.
        hp = self.synth("hp", ["--class", "guaranteed", "--max-slowdown", "1.5"], 20_000_000, 10_000_000)
        t = wait_for(lambda: (lambda t: t if t and t.get("slowdown") else None)(self.d.tenant(hp.pid)),
                     timeout=60, what="HP's slowdown to be measured")
        self.assertEqual(t["max_slowdown"], 1.5, t)
        self.assertGreater(t["slowdown"], 0, t)
        table = subprocess.run([bin_path("gpuos"), "ps", "--socket", self.d.socket], env=self.d.env,
                               capture_output=True, text=True, timeout=30).stdout
        self.assertRegex(table, r"\bhp\b.*guaranteed.*\d+\.\d\d/1\.50 be \d+%", table)

    def test_steps_and_admissions_are_measured_apart(self):
        # Every 2nd kernel is an admission (gpuos_kv_report_phase, as a server marks its prefills):
        # the budget measures both kinds, and ps says which is slower. Short kernels, so that the
        # meter's 1 s window holds timings of both kinds even on a loaded machine.
        hp = spawn(self, self.d.run_cmd(["--name", "hp", "--class", "guaranteed", "--max-slowdown", "1.5", "--",
                                         bin_path("gpuos-synth"), "--name", "hp", "--iters", "2000000",
                                         "--count", "1000000", "--warmup", "0", "--admission-every", "2",
                                         "--json", "-"]), self.d.env)
        t = wait_for(lambda: (lambda t: t if t and t.get("slowdown_admission") and t.get("slowdown_step") else None)(
            self.d.tenant(hp.pid)), timeout=120, what="HP's steps and admissions to be measured")
        self.assertIn(t["slowdown_binds"], ("step", "admission"), t)
        table = subprocess.run([bin_path("gpuos"), "ps", "--socket", self.d.socket], env=self.d.env,
                               capture_output=True, text=True, timeout=30).stdout
        self.assertRegex(table, r"\bhp\b.*guaranteed.*\d+\.\d\d/1\.50 be \d+% (step|admission)", table)
        self.assertGreater(self.d.metric("gpuos_tenant_admission_slowdown_ratio", tenant_id=t["id"])[0], 0)

    def test_each_change_of_an_engines_phase_wakes_gpuosd(self):
        # A budget lends nothing while its tenant's engine admits requests, so gpuosd must learn of
        # a prefill when it starts, not at its next tick: every change of phase sends ACTIVITY.
        # 100 admissions (every 2nd of 200 kernels) are 200 changes.
        def activity():
            return sum(self.d.metric("gpuos_daemon_messages_total", type="activity"))
        before = activity()
        r = subprocess.run(self.d.run_cmd(["--name", "hp", "--class", "guaranteed", "--max-slowdown", "1.5", "--",
                                           bin_path("gpuos-synth"), "--name", "hp", "--iters", "1000", "--count", "200",
                                           "--warmup", "0", "--admission-every", "2", "--json", "-"]),
                           env=self.d.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for(lambda: activity() - before >= 200, timeout=30,
                 what="an ACTIVITY for each of 200 phase changes")

    def test_long_launches_are_learned_from_timings(self):
        # No engine hint (#40 item 2): every 10th kernel of one tenant is a shape of its own, 4x as
        # long as the others (500 us on the double), as a prefill among decode steps. Its
        # interposer learns that from its own timings and marks those launches long (its budget
        # lends nothing while one runs); a tenant of one shape has none.
        def run(name, extra):
            p = spawn(self, self.d.run_cmd(["--name", name, "--class", "guaranteed", "--max-slowdown", "1.5", "--",
                                            bin_path("gpuos-synth"), "--name", name, "--iters", "500000",
                                            "--count", "400", "--warmup", "0", "--json", "-"] + extra), self.d.env)
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            return wait_for(lambda: self.d.tenant(p.pid), what=name + " in ps")
        server = run("server", ["--long-every", "10"])
        self.assertGreaterEqual(server["long_launches"], 10, server)  # 40 issued; the first ones untimed
        self.assertLessEqual(server["long_launches"], 40, server)
        steady = run("steady", [])
        self.assertEqual(steady["long_launches"], 0, steady)
        self.assertNotIn("slowdown_admission", steady)
        # Its long launches are timed as admissions (what TTFT from admission waits for), judged
        # apart from its steps: ps shows both slowdowns. Read while it runs (a 1 s window): a
        # tenant that exited keeps only what the last decision saw.
        p = spawn(self, self.d.run_cmd(["--name", "live", "--class", "guaranteed", "--max-slowdown", "1.5", "--",
                                        bin_path("gpuos-synth"), "--name", "live", "--iters", "500000",
                                        "--count", "100000000", "--warmup", "0", "--long-every", "10"]), self.d.env)
        live = wait_for(lambda: (lambda t: t if t and t.get("slowdown_admission") else None)(self.d.tenant(p.pid)),
                        timeout=60, what="live's admissions in ps")
        self.assertIsNotNone(live.get("slowdown_step"), live)

    def test_a_bad_budget_is_refused_by_the_cli(self):
        for bad in ("0.5", "1", "abc", "1000"):
            r = subprocess.run(self.d.run_cmd(["--class", "guaranteed", "--max-slowdown", bad, "--", "true"]),
                               env=self.d.env, capture_output=True, text=True, timeout=20)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn("max-slowdown", r.stderr, bad)
        r = subprocess.run(self.d.run_cmd(["--class", "best-effort", "--max-slowdown", "1.5", "--", "true"]),
                           env=self.d.env, capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        self.assertIn("guaranteed", r.stderr)


class Swap(unittest.TestCase):
    """[memory] swap_pool: two swappable tenants that do not fit together take turns on the GPU.

    The simulated GPU has 1 GiB; each tenant fills 600 MiB on the GPU, runs fixed-work kernels and
    at the end copies its buffer back and checks every word (gpuos-synth --mem-mib). They can only
    both finish if gpuosd swaps one out (to the pool), lets the other run, and brings the first back
    at the same addresses with its data intact.
    """

    def setUp(self):
        self.cfg_dir = tempfile.mkdtemp(prefix="gpuos-swap-cfg-")
        self.addCleanup(shutil.rmtree, self.cfg_dir, ignore_errors=True)
        cfg = os.path.join(self.cfg_dir, "gpuos.toml")
        with open(cfg, "w") as f:
            # Where a signal has to cut a quantum short: a minute, three times what the two swaps
            # take on a loaded machine.
            quantum = SWAP_SIGNAL_QUANTUM_S * 1000 if "signal" in self._testMethodName else 1000
            f.write('[memory]\nswap_pool = "2GiB"\nswap_quantum_ms = %d\nswap_headroom = "64MiB"\n' % quantum)
        self.d = start_daemon(self, ["--config", cfg], daemon_env={"GPUOS_SIM_MEM_MIB": "1024"})

    def synth(self, name, *run_flags, count=800):
        return spawn(self, self.d.run_cmd(["--name", name] + list(run_flags) + ["--", bin_path("gpuos-synth"),
                                           "--name", name, "--iters", "2000000", "--count", str(count),
                                           "--warmup", "0", "--mem-mib", "600", "--json", "-"]), self.d.env)

    def test_two_tenants_that_do_not_fit_take_turns_without_losing_data(self):
        a = self.synth("swap-a", "--swap")
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("launches", 0) > 5, what="tenant a to run")
        b = self.synth("swap-b", "--swap")
        outs = {}
        for name, p in (("a", a), ("b", b)):
            try:
                out, err = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                self.fail("tenants did not finish:\n" + self.d.log_text())
            self.assertEqual(p.returncode, 0, "tenant %s: %s\n%s" % (name, err, self.d.log_text()))
            outs[name] = json.loads(out.strip().splitlines()[-1])
            self.assertTrue(outs[name]["verified"], name)
        ta = wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(a.pid)),
                      what="a exited")
        tb = wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(b.pid)),
                      what="b exited")
        self.assertTrue(ta["swappable"] and tb["swappable"])
        # Each holds the GPU for 1.6 s of kernels, longer than the 1 s quantum: both go out once
        # at least (a for b's allocation, b when a has waited a quantum).
        self.assertGreaterEqual(ta["swap_outs"], 1, self.d.log_text())
        self.assertGreaterEqual(tb["swap_outs"], 1, self.d.log_text())
        for t in (ta, tb):  # every tenant that went out came back (it finished) with every byte
            self.assertEqual(t["swap_ins"], t["swap_outs"])
            self.assertEqual(t["swap_in_bytes"], t["swap_out_bytes"])
        self.assertGreaterEqual(ta["swap_out_bytes"] + tb["swap_out_bytes"], 600 << 20)
        self.assertEqual(ta["alloc_failures"] + tb["alloc_failures"], 0)
        self.assertGreaterEqual(tb["mem_waits"], 1, "b's allocation should have waited for room")

    def test_a_signal_lets_a_swapped_out_tenant_stop_without_waiting_for_a_quantum(self):
        # a is swapped out for b once a's quantum (60 s) is over, and waits at its closed gate; b's
        # quantum then keeps a out for 60 s. SIGTERM to a (gpuos-synth stops its loop on it, its
        # handler installed without SA_RESTART, as Python's are) wakes a's waiting thread: gpuosd
        # swaps a in at once, past b's quantum, and a stops, its data intact, while b still runs.
        # That a did not wait is read from gpuosd's log (order, not time: below).
        # (A borrowing a gives way at once and spares the minute: the next test.)
        a = self.synth("swap-a", "--swap", count=10_000_000)  # 2 ms kernels: both run until stopped
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("launches", 0) > 5, what="tenant a to run")
        b = self.synth("swap-b", "--swap", count=10_000_000)
        a_id = wait_for(lambda: (lambda t: t["id"] if t and t["swap_state"] == "swapped-out" else None)(
            self.d.tenant(a.pid)), timeout=180, what="a to be swapped out")
        out_at = time.monotonic()  # b got its memory before this: its quantum ends 60 s after
        # A signal that comes while a's thread is still in a driver call (its last synchronize) is
        # not seen by gpuos (known limit): signal it once it is blocked at its gate.
        wait_for(lambda: self.d.metric("gpuos_tenant_waiting", tenant_id=a_id) == [1.0],
                 what="a's thread to block at its gate")
        b_id = self.d.tenant(b.pid)["id"]
        early_line = r"tenant %d: swapping out at least \d+ MiB, \d+ ms before its quantum is over" % b_id
        signal_until_seen(a, lambda: re.search(early_line, self.d.log_text()))
        out, err = a.communicate(timeout=180)
        stopped_after = time.monotonic() - out_at
        self.assertEqual(a.returncode, 0, err + self.d.log_text())
        self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"])
        self.assertIsNone(b.poll(), "b should still be running (the test would prove nothing)")
        # a did not wait for b's quantum: gpuosd moved b out before it was over (its own clock and
        # its own word, not this test's stopwatch: on a loaded machine the two swaps alone can
        # take a minute). Then a came in and stopped.
        log = self.d.log_text()
        early = re.search(early_line, log)
        self.assertIsNotNone(early, "a waited for b's quantum (%.1f s):\n%s" % (stopped_after, log))
        self.assertLess(log.index(early.group(0)), log.index("tenant %d: swapping in" % a_id), log)
        b.send_signal(signal.SIGTERM)
        out, err = b.communicate(timeout=180)
        self.assertEqual(b.returncode, 0, err)
        self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"])

    def test_a_signalled_borrower_stops_after_one_swap(self):
        # a borrows (256 MiB its own, 600 MiB held): b's allocation swaps it out at once. SIGTERM
        # to a, blocked at its gate: it comes back past b's quantum (b goes out for it), and is
        # then no victim for b until it acted on the signal, borrower or not (before: the two
        # took turns, a swapped out again as soon as its gate opened). No time is asserted.
        a = self.synth("swap-a", "--swap", "--mem", "256MiB", "--borrow", "1GiB", count=10_000_000)
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("launches", 0) > 5, what="tenant a to run")
        b = self.synth("swap-b", "--swap", count=10_000_000)
        a_id = wait_for(lambda: (lambda t: t["id"] if t and t["swap_state"] == "swapped-out" else None)(
            self.d.tenant(a.pid)), timeout=180, what="a to be swapped out")
        wait_for(lambda: self.d.metric("gpuos_tenant_waiting", tenant_id=a_id) == [1.0],
                 what="a's thread to block at its gate")
        signal_until_seen(a, lambda: "tenant %d: swapping in" % a_id in self.d.log_text())
        out, err = a.communicate(timeout=180)
        self.assertEqual(a.returncode, 0, err + self.d.log_text())
        self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"])
        self.assertIsNone(b.poll(), "b should still be running (the test would prove nothing)")
        ta = self.d.tenant(a.pid)
        self.assertEqual((ta["swap_outs"], ta["swap_ins"]), (1, 1), self.d.log_text())
        b.send_signal(signal.SIGTERM)
        out, err = b.communicate(timeout=180)
        self.assertEqual(b.returncode, 0, err)
        self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"])

    def test_borrowed_memory_is_on_top_of_the_quota(self):
        # 400 MiB: over a 256 MiB quota, within 256 MiB quota + 256 MiB borrowable.
        def run(*flags):
            return subprocess.run(
                self.d.run_cmd(["--name", "borrow"] + list(flags) + ["--", bin_path("gpuos-synth"),
                                "--name", "borrow", "--iters", "1000", "--count", "3", "--warmup", "0",
                                "--mem-mib", "400", "--json", "-"]),
                env=self.d.env, capture_output=True, text=True, timeout=60)
        r = run("--mem", "256MiB")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("OUT_OF_MEMORY", r.stderr)
        r = run("--mem", "256MiB", "--borrow", "256MiB")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(json.loads(r.stdout.strip().splitlines()[-1])["verified"])
        t = [x for x in self.d.ps()["tenants"] if x["name"] == "borrow"][-1]
        self.assertEqual(t["mem_quota_bytes"], 256 << 20)
        self.assertEqual(t["mem_borrow_bytes"], 256 << 20)
        self.assertGreaterEqual(t["mem_peak_bytes"], 400 << 20)
        bad = subprocess.run(self.d.run_cmd(["--borrow", "1GiB", "--", "true"]), env=self.d.env,
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--borrow needs --mem", bad.stderr)

    def test_daemon_death_while_swapped_out_loses_nothing(self):
        # a is swapped out for b when gpuosd is killed: a brings its memory back itself once b is
        # done with the GPU, and both finish with every word verified.
        a = self.synth("swap-a", "--swap", count=1500)
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("launches", 0) > 5, what="tenant a to run")
        b = self.synth("swap-b", "--swap", count=1500)
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("swap_state") == "swapped-out", timeout=120,
                 what="a to be swapped out")
        self.d.proc.kill()
        self.d.proc.wait()
        for name, p in (("a", a), ("b", b)):
            out, err = p.communicate(timeout=180)
            self.assertEqual(p.returncode, 0, "tenant %s: %s" % (name, err))
            self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"], name)

    def test_swapping_works_after_a_daemon_restart(self):
        # a re-registers with a new gpuosd (new control block, new swap pool); b then needs room.
        a = self.synth("swap-a", "--swap", count=1500)
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("launches", 0) > 5, what="tenant a to run")
        self.d.proc.kill()
        self.d.proc.wait()
        self.d.start()
        wait_for(lambda: self.d.tenant(a.pid) is not None, what="a to re-register")
        b = self.synth("swap-b", "--swap", count=300)
        for name, p in (("a", a), ("b", b)):
            out, err = p.communicate(timeout=180)
            self.assertEqual(p.returncode, 0, "tenant %s: %s" % (name, err))
            self.assertTrue(json.loads(out.strip().splitlines()[-1])["verified"], name)
        ta = wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(a.pid)),
                      what="a exited")
        self.assertGreaterEqual(ta["swap_outs"], 1, self.d.log_text())

    def test_without_a_victim_the_allocation_fails_cleanly(self):
        # A non-swappable tenant holds 600 MiB; a second one cannot get room: out of memory, at once.
        a = self.synth("fixed-a", count=10_000_000)  # until the cleanup ends it
        wait_for(lambda: (self.d.tenant(a.pid) or {}).get("launches", 0) > 5, what="tenant a to run")
        b = self.synth("fixed-b", "--swap", count=5)
        out, err = b.communicate(timeout=60)
        self.assertNotEqual(b.returncode, 0)
        self.assertIn("OUT_OF_MEMORY", err)



class VisibleDevices(unittest.TestCase):
    """A tenant that sees the GPUs through CUDA_VISIBLE_DEVICES (its device 0 is gpuosd's GPU 1)
    has its memory accounted on the GPU it really uses: it publishes the UUID of each of its
    device ordinals and gpuosd maps them."""

    def setUp(self):
        self.d = start_daemon(self, daemon_env={"GPUOS_SIM_DEVICES": "2"})

    def test_memory_is_accounted_on_the_gpu_the_tenant_really_uses(self):
        env = dict(self.d.env, GPUOS_SIM_DEVICES="2", CUDA_VISIBLE_DEVICES="1")
        p = spawn(self, self.d.run_cmd(["--name", "vis", "--", bin_path("gpuos-synth"), "--name", "vis",
                                        "--iters", "1000", "--count", "100000", "--gap-us", "2000",
                                        "--mem-mib", "96", "--json", "-"]), env)

        def on_gpu1():
            ps = self.d.ps(all_tenants=False)
            used = {g["index"]: g["used_mem_bytes"] for g in ps["gpus"]}
            return used if used.get(1, 0) >= 96 << 20 else None
        used = wait_for(on_gpu1, what="the tenant's memory on GPU 1")
        self.assertEqual(used.get(0), 0, used)
        tid = self.d.tenant(p.pid)["id"]  # (the same per tenant and GPU in the metrics)
        self.assertGreaterEqual(self.d.metric("gpuos_tenant_gpu_memory_used_bytes", tenant_id=tid, gpu="1")[0], 96 << 20)
        self.assertEqual(self.d.metric("gpuos_tenant_gpu_memory_used_bytes", tenant_id=tid, gpu="0"), [0.0])


class TwoGpusPriority(unittest.TestCase):
    """--policy priority on two (simulated) GPUs: a busy guaranteed tenant gates the best-effort
    tenant of its own GPU, not the one working on the other GPU (issue #27)."""

    def setUp(self):
        self.d = start_daemon(self, ["--policy", "priority"], daemon_env={"GPUOS_SIM_DEVICES": "2"})

    def synth(self, name, klass, gpu, iters, count):
        env = dict(self.d.env, GPUOS_SIM_DEVICES="2", CUDA_VISIBLE_DEVICES=str(gpu))
        return spawn(self, self.d.run_cmd(["--name", name, "--class", klass, "--", bin_path("gpuos-synth"),
                                           "--name", name, "--iters", str(iters), "--count", str(count),
                                           "--warmup", "0", "--mem-mib", "16", "--json", "-"]), env)

    def launches(self, pid):
        t = self.d.tenant(pid)
        return t["launches"] if t else 0

    def test_a_guaranteed_tenant_gates_only_the_best_effort_tenant_of_its_gpu(self):
        be0 = self.synth("be-gpu0", "best-effort", 0, 2_000_000, 10_000_000)  # 2 ms kernels, back to back
        be1 = self.synth("be-gpu1", "best-effort", 1, 2_000_000, 10_000_000)
        for be in (be0, be1):  # (running, so gpuosd knows their GPUs from their memory)
            wait_for(lambda: self.launches(be.pid) > 20, what="BE to run")
        # One 30 s kernel on GPU 0: it outlasts the checks below however loaded the machine is (the
        # guard at the end says so). HP first fills its memory (one short launch), so HP's launch count
        # passes 1 only briefly: the wait is for any launch, not for exactly one.
        hp = self.synth("hp", "guaranteed", 0, 30_000_000_000, 1)
        wait_for(lambda: self.launches(hp.pid) >= 1, what="HP to launch")
        wait_for(lambda: (self.d.tenant(be0.pid) or {}).get("state") == "gated", what="GPU 0's BE gated")
        before = self.launches(be1.pid)
        wait_for(lambda: self.launches(be1.pid) > before + 20, what="GPU 1's BE to go on launching")
        hp_id = self.d.tenant(hp.pid)["id"]
        self.assertEqual(self.d.metric("gpuos_tenant_busy", tenant_id=hp_id), [1.0],
                         "HP's kernel ended before GPU 1's BE was seen running: nothing was checked")
        self.assertEqual(self.d.tenant(be1.pid)["state"], "running")
        self.assertEqual(self.d.tenant(be0.pid)["state"], "gated")


class TwoGpusOneProcess(unittest.TestCase):
    """--policy priority on two (simulated) GPUs, one best-effort process driving both (a thread per
    GPU): a busy guaranteed tenant on GPU 0 closes its gate there only. Its GPU 0 thread waits at the
    gate while its GPU 1 thread goes on launching; `gpuos ps` says "gated:0" (issue #27)."""

    def setUp(self):
        self.d = start_daemon(self, ["--policy", "priority"], daemon_env={"GPUOS_SIM_DEVICES": "2"})
        self.tmp = tempfile.mkdtemp(prefix="gpuos-devices-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.progress = os.path.join(self.tmp, "progress")

    def counts(self):
        try:
            with open(self.progress) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return [0, 0]

    def held_on_gpu0_only(self, visible):
        """The BE process sees both GPUs through CUDA_VISIBLE_DEVICES `visible` (None: unset); its
        device ordinal for gpuosd's GPU 0 is the one that must wait."""
        env = dict(self.d.env, GPUOS_SIM_DEVICES="2")
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        gpu0 = 1 if visible == "1,0" else 0  # its ordinal of gpuosd's GPU 0
        other = 1 - gpu0
        be = spawn(self, self.d.run_cmd(["--name", "be-both", "--class", "best-effort", "--",
                                         bin_path("gpuos-devices-probe"), "--progress", self.progress,
                                         "--iters", "2000000", "--seconds", "300",
                                         "--stop-file", os.path.join(self.tmp, "stop")]), env)
        wait_for(lambda: min(self.counts()) > 20, what="the BE process to launch on both GPUs")
        hp = spawn(self, self.d.run_cmd(["--name", "hp", "--class", "guaranteed", "--", bin_path("gpuos-synth"),
                                         "--name", "hp", "--iters", "30000000000", "--count", "1", "--warmup", "0",
                                         "--mem-mib", "16", "--json", "-"]),
                   dict(env, CUDA_VISIBLE_DEVICES="0"))
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("gated_gpus") == [0], what="BE gated on GPU 0 only")
        t = self.d.tenant(be.pid)
        self.assertEqual((t["state"], t["gated_by"]), ("running", "policy"))
        self.assertEqual([(g["gpu"], g["gated"]) for g in t["on_gpus"]], [(0, True), (1, False)])
        self.assertTrue(all(g["mem_used_bytes"] >= 16 << 20 for g in t["on_gpus"]), t["on_gpus"])
        ps = subprocess.run([bin_path("gpuos"), "ps", "--socket", self.d.socket], env=self.d.env,
                            capture_output=True, text=True, timeout=30)
        self.assertIn("gated:0", ps.stdout)
        be_id = t["id"]
        self.assertEqual(self.d.metric("gpuos_tenant_gated_on_gpu", tenant_id=be_id, gpu="0"), [1.0])
        self.assertEqual(self.d.metric("gpuos_tenant_gated_on_gpu", tenant_id=be_id, gpu="1"), [0.0])
        # Its GPU 0 thread is at the gate (one launch may have passed it just before it closed);
        # its GPU 1 thread is not.
        before = self.counts()
        wait_for(lambda: self.counts()[other] > before[other] + 20, what="the GPU 1 thread to go on launching")
        after = self.counts()
        self.assertLessEqual(after[gpu0], before[gpu0] + 1, "launched on GPU 0 while gated there")
        hp_id = self.d.tenant(hp.pid)["id"]
        self.assertEqual(self.d.metric("gpuos_tenant_busy", tenant_id=hp_id), [1.0],
                         "HP's kernel ended before the check: nothing was checked")
        # HP gone: the gate opens on GPU 0 too.
        hp.kill()
        hp.wait(timeout=30)
        wait_for(lambda: self.counts()[gpu0] > after[gpu0] + 20, what="the GPU 0 thread to launch again")
        self.assertEqual(self.d.tenant(be.pid)["gated_gpus"], [])
        open(os.path.join(self.tmp, "stop"), "w").close()
        out, err = be.communicate(timeout=60)
        self.assertEqual(be.returncode, 0, err + self.d.log_text())

    def test_a_guaranteed_tenant_on_one_gpu_holds_a_process_on_both_there_only(self):
        self.held_on_gpu0_only(None)

    def test_with_the_devices_permuted_the_process_is_held_on_the_same_gpu(self):
        self.held_on_gpu0_only("1,0")


class TwoGpusCollective(unittest.TestCase):
    """A best-effort data-parallel job with one rank per (simulated) GPU under --policy priority (issue
    #27). Its collectives are the double's gpuos_collective: a rank's kernel spins on its GPU until
    every rank of the round has arrived, as an NCCL kernel does. A busy guaranteed tenant on GPU 0 gates
    rank 0 at its next launch; rank 1 (GPU 1) is not gated but waits in the round rank 0 cannot reach,
    until HP goes idle and rank 0's gate reopens. No deadlock, and the stall shows in rank 1's wait.

    HP comes while the job waits between two rounds (--pause-at, like a data loader), so what the test
    sees does not depend on how fast the machine runs the rounds."""

    PAUSE_AT = 10  # rounds the job runs before HP comes
    ROUNDS = 20
    # HP's one kernel: 8 s of simulated work (1 ns per iteration, one wave), which it runs for at least
    # that long. It outlasts the checks below (the guard there says so).
    HP_NS = 8_000_000_000

    def setUp(self):
        self.d = start_daemon(self, ["--policy", "priority"], daemon_env={"GPUOS_SIM_DEVICES": "2"})
        self.tmp = tempfile.mkdtemp(prefix="gpuos-coll-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.go = os.path.join(self.tmp, "go")

    def env(self, gpu):
        return dict(self.d.env, GPUOS_SIM_DEVICES="2", CUDA_VISIBLE_DEVICES=str(gpu))

    def rank(self, gpu):
        return spawn(self, self.d.run_cmd(["--name", "rank%d" % gpu, "--class", "best-effort", "--",
                                           bin_path("gpuos-collective-probe"), "--group", "27", "--ranks", "2",
                                           "--rounds", str(self.ROUNDS), "--pause-at", str(self.PAUSE_AT),
                                           "--wait-file", self.go]), self.env(gpu))

    def launches(self, pid):
        t = self.d.tenant(pid)
        return t["launches"] if t else 0

    def result(self, p):
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err + self.d.log_text())
        return json.loads(out.strip().splitlines()[-1])

    def test_a_gated_rank_stalls_its_peer_until_the_guaranteed_tenant_is_idle(self):
        r0, r1 = self.rank(0), self.rank(1)
        for r in (r0, r1):  # one collective per launch: both ran the first rounds together
            wait_for(lambda: self.launches(r.pid) == self.PAUSE_AT, timeout=120, what="the job's first rounds")
        # One rank per GPU, no guaranteed tenant yet: each rank is alone on its GPU, so neither was
        # ever held for the other's best-effort slice (a node-wide rotation held one of them).
        for r in (r0, r1):
            self.assertEqual(self.d.tenant(r.pid)["gate_waits"], 0, self.d.tenant(r.pid))
        trace = os.path.join(self.tmp, "hp.csv")
        hp = spawn(self, self.d.run_cmd(["--name", "hp", "--class", "guaranteed", "--", bin_path("gpuos-synth"),
                                         "--name", "hp", "--iters", str(self.HP_NS), "--count", "1",
                                         "--warmup", "0", "--mem-mib", "16", "--trace", trace, "--json", "-"]),
                   self.env(0))
        # Its memory fill, then its long kernel: HP stays busy from here until that kernel ends.
        wait_for(lambda: self.launches(hp.pid) >= 2, what="HP's kernel launched")
        hp_id = self.d.tenant(hp.pid)["id"]
        open(self.go, "w").close()
        # Rank 0's next launch waits at its closed gate; rank 1 launches the round, whose kernel spins
        # on GPU 1 for rank 0's.
        wait_for(lambda: self.launches(r1.pid) == self.PAUSE_AT + 1, what="rank 1 in the next round")
        wait_for(lambda: (self.d.tenant(r0.pid) or {}).get("gate_waiting_ms", 0) > 0, what="rank 0 at its gate")
        seen = []
        for _ in range(5):  # neither rank gets past that round while HP is busy
            t0, t1 = self.d.tenant(r0.pid), self.d.tenant(r1.pid)
            seen.append((t0["state"], t0["launches"], t1["state"], t1["launches"]))
        self.assertEqual(self.d.metric("gpuos_tenant_busy", tenant_id=hp_id), [1.0],
                         "HP's kernel ended before the checks: nothing was checked")
        for s in seen:
            self.assertEqual(s, ("gated", self.PAUSE_AT, "running", self.PAUSE_AT + 1), seen)

        # HP's kernel ends, rank 0's gate reopens and the job finishes: no deadlock.
        rh = self.result(hp)
        j0, j1 = self.result(r0), self.result(r1)
        self.assertEqual(rh["kernels"], 1, rh)
        for j in (j0, j1):
            self.assertEqual(j["completed"], self.ROUNDS, j)
        with open(trace) as f:
            hp_start = int(f.read().splitlines()[1].split(",")[0])  # HP's launch call (CLOCK_MONOTONIC)
        hp_end = hp_start + self.HP_NS  # its kernel ended no earlier than this
        self.assertGreaterEqual(rh["max_us"] * 1000, self.HP_NS, rh)
        k = self.PAUSE_AT
        # Rank 1 arrived at round k while HP's kernel ran and left only after it ended: its reported
        # wait holds at least the part of HP's kernel it overlapped. Rank 0 arrived after it ended.
        self.assertGreater(j1["arrive_ns"][k], hp_start, j1)
        self.assertGreaterEqual(j1["release_ns"][k], hp_end, j1)
        self.assertGreaterEqual(j1["wait_ns"][k], hp_end - j1["arrive_ns"][k], j1)
        self.assertGreaterEqual(j1["total_wait_ns"], j1["wait_ns"][k], j1)
        self.assertGreaterEqual(j0["arrive_ns"][k], hp_end, j0)


class Spatial(unittest.TestCase):
    """[spatial]: tenants of one trust domain share the (simulated) GPU in space.

    gpuosd supervises the domain's MPS control daemon (a fake one here), gives each tenant SM groups
    and the interposer places every launch on a green context of exactly those SMs. The double runs
    kernels on disjoint partitions side by side and its gpuos_sm_mask kernel reports the SM slots it
    occupied (16 groups of 8 on 132 SMs; the last group also takes slot 16, the remainder of 4).
    """

    ALL = (1 << 17) - 1           # every slot: an unconfined kernel
    HP_GROUPS = (1 << 14) - 1     # the guaranteed tenant's default: all but 2 groups
    BE_SLOTS = (1 << 14) | (1 << 15) | (1 << 16)  # groups 14, 15 (+ the remainder slot)

    def setUp(self):
        self.cfg_dir = tempfile.mkdtemp(prefix="gsp-")
        self.addCleanup(shutil.rmtree, self.cfg_dir, ignore_errors=True)  # after the daemon's stop
        self.cfg = os.path.join(self.cfg_dir, "gpuos.toml")
        with open(self.cfg, "w") as f:
            # Right-sizing is off except in its own test (it would resize the partitions others check).
            slack = 20 if "right_siz" in self._testMethodName else 0
            # What MPS adds to each kernel: 1 ms in the test of the warning (the double's kernels
            # take about that), else the default (0.32 us, far below the double's kernels).
            mps_cost = "mps_kernel_cost_ns = 1000000\n" if "mps_costs" in self._testMethodName else ""
            # A budgeted tenant runs on the whole GPU by default; one test turns that off.
            whole = "[policy.partition]\nbudget_whole_gpu = false\n" if "partitioned" in self._testMethodName else ""
            f.write('%s[spatial]\nmps_control = "%s"\nmps_dir = "%s"\nright_size_slack_pct = %d\n%s'
                    '[[spatial.domain]]\nname = "serve"\n'
                    % (whole, os.path.join(HERE, "fake_mps_control.sh"), os.path.join(self.cfg_dir, "mps"), slack,
                       mps_cost))
        two_gpus = "two_gpus" in self._testMethodName
        self.d = start_daemon(self, ["--config", self.cfg], daemon_env={"GPUOS_SIM_DEVICES": "2"} if two_gpus else None)
        self.d.env["GPUOS_CONFIG"] = self.cfg
        status = os.path.join(self.cfg_dir, "mps", "serve", "status")
        def available():
            try:
                with open(status) as f:
                    return f.read().strip() == "available"
            except OSError:
                return False
        wait_for(available, what="the domain's MPS control daemon")

    def probe(self, name, cls, ms, *extra):
        return spawn(self, self.d.run_cmd(["--space", "serve", "--class", cls, "--name", name, "--",
                                           bin_path("gpuos-space-probe"), "--ms", str(ms)] + list(extra)),
                     self.d.env)

    def result(self, p, timeout=120):
        out, err = p.communicate(timeout=timeout)
        self.assertEqual(p.returncode, 0, err + self.d.log_text())
        return json.loads(out.strip().splitlines()[-1])

    def test_partitions_confine_each_tenant_and_keep_stream_order(self):
        be = self.probe("be", "best-effort", 4000)
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("launches", 0) > 3, what="BE to run")
        hp = self.probe("hp", "guaranteed", 1500)
        rh, rb = self.result(hp), self.result(be)
        for r in (rh, rb):
            self.assertEqual(r["order_errors"], 0, r)
            self.assertGreater(r["graph_launches"], 0, r)
        # HP ran only on its groups, and on all of them (busy all along: nothing lent away).
        self.assertEqual(rh["union"], self.HP_GROUPS, rh)
        # BE ran alone (everything) before HP came and after it left, and on its own groups beside HP.
        self.assertIn(self.ALL, rb["masks"], rb)
        self.assertIn(self.BE_SLOTS, rb["masks"], rb)
        for m in rb["masks"]:
            self.assertTrue(m == self.ALL or m & self.HP_GROUPS == 0 or m == (1 << 16) | 0xFFFF, rb)
        th = wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(hp.pid)),
                      what="hp exited")
        self.assertEqual(th["space_domain"], "serve")
        self.assertGreater(th["space_launches"], 0)
        self.assertEqual(th["space_failures"], 0)
        self.assertEqual(th["launches"] + th["graph_launches"], rh["launches"] + rh["graph_launches"])

    def test_on_two_gpus_only_tenants_of_the_same_gpu_split_it(self):
        # GPU 1 holds HP and BE: partitions. GPU 0 holds a best-effort tenant alone: it keeps the
        # whole GPU (every slot) while HP is busy on the other one.
        def on_gpu(index, name, cls, ms):
            env = dict(self.d.env, GPUOS_SIM_DEVICES="2", CUDA_VISIBLE_DEVICES=str(index))
            return spawn(self, self.d.run_cmd(["--space", "serve", "--class", cls, "--name", name, "--",
                                               bin_path("gpuos-space-probe"), "--ms", str(ms)]), env)
        # A tenant that has neither memory nor launches anywhere yet counts on every GPU (its first
        # kernels must not run unconfined beside a busy guaranteed one), so be0 comes after HP ran.
        be1 = on_gpu(1, "be1", "best-effort", 4000)
        wait_for(lambda: (self.d.tenant(be1.pid) or {}).get("launches", 0) > 3, what="BE to run")
        hp = on_gpu(1, "hp", "guaranteed", 1500)
        wait_for(lambda: (self.d.tenant(hp.pid) or {}).get("space_launches", 0) > 3, what="HP placed")
        be0 = on_gpu(0, "be0", "best-effort", 1000)
        rh, r1, r0 = self.result(hp), self.result(be1), self.result(be0)
        for r in (rh, r1, r0):
            self.assertEqual(r["order_errors"], 0, r)
        self.assertEqual(rh["union"], self.HP_GROUPS, rh)
        self.assertIn(self.BE_SLOTS, r1["masks"], r1)
        self.assertEqual(set(r0["masks"]), {self.ALL}, r0)

    def test_launches_queued_back_to_back_skip_the_join_but_wait_for_work_between(self):
        # HP's fills, two in a row on its stream: the second goes after the first on the partition
        # stream directly, unless stream work was issued in between (a host function, a memset, a
        # wait for another stream's event), which it must then wait for (pipeline_errors).
        be = self.probe("be", "best-effort", 3000)
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("launches", 0) > 3, what="BE to run")
        hp = self.probe("hp", "guaranteed", 200, "--pipeline", "30")
        rh = self.result(hp)
        self.assertEqual(rh["pipeline_errors"], 0, rh)
        self.assertEqual(rh["order_errors"], 0, rh)
        m = wait_for(lambda: re.search(r'name "hp" .*space_launches (\d+) space_joins_skipped (\d+)', self.d.log_text()),
                     what="hp's exit line")
        # At least the 10 back-to-back pairs with nothing between; not the 20 with work between.
        skipped = int(m.group(2))
        self.assertGreaterEqual(skipped, 10, m.group(0))
        self.assertLess(skipped, int(m.group(1)), m.group(0))
        # GPUOS_SPACE_ALWAYS_JOIN=1 keeps every join.
        self.d.env["GPUOS_SPACE_ALWAYS_JOIN"] = "1"
        try:
            rj = self.result(self.probe("hp-joined", "guaranteed", 200, "--pipeline", "9"))
        finally:
            del self.d.env["GPUOS_SPACE_ALWAYS_JOIN"]
        self.assertEqual(rj["pipeline_errors"], 0, rj)
        m = wait_for(lambda: re.search(r'name "hp-joined" .*space_launches (\d+) space_joins_skipped (\d+)',
                                       self.d.log_text()), what="hp-joined's exit line")
        self.assertEqual(int(m.group(2)), 0, m.group(0))
        self.assertGreater(int(m.group(1)), 0, m.group(0))
        self.result(be)

    def test_an_idle_guaranteed_tenant_lends_its_groups_and_takes_them_back(self):
        go = os.path.join(self.cfg_dir, "go")
        be = self.probe("be", "best-effort", 6000)
        hp = self.probe("hp", "guaranteed", 800, "--wait-file", go)  # registered, then idle
        wait_for(lambda: (self.d.tenant(hp.pid) or {}).get("space_mask") == self.HP_GROUPS, what="HP's groups")
        # While HP has no work, BE may use every group (lent), confined to green contexts.
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("space_mask") == 0xFFFF, what="groups lent to BE")
        self.assertEqual(self.d.tenant(hp.pid)["space_sms"], 112)
        open(go, "w").close()
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("space_mask") == 0xC000,
                 what="HP's groups taken back from BE")
        self.assertEqual(self.d.tenant(be.pid)["space_sms"], 20)
        self.result(hp)
        self.result(be)

    def test_a_guaranteed_tenant_gets_the_sms_it_asks_for(self):
        go = os.path.join(self.cfg_dir, "go")
        be = self.probe("be", "best-effort", 4000)
        hp = spawn(self, self.d.run_cmd(["--space", "serve", "--sms", "60", "--class", "guaranteed", "--name", "hp",
                                         "--", bin_path("gpuos-space-probe"), "--ms", "800", "--wait-file", go]),
                   self.d.env)
        wait_for(lambda: (self.d.tenant(hp.pid) or {}).get("space_mask") == 0xFF, what="8 groups for 60 SMs")
        self.assertEqual(self.d.tenant(hp.pid)["space_sms"], 64)
        open(go, "w").close()
        rh = self.result(hp)
        self.assertEqual(rh["union"], 0xFF, rh)  # ran on exactly its 8 groups
        self.result(be)

    def budgeted_beside_best_effort(self):
        """A best-effort probe, running, then a guaranteed one with a latency budget: (hp, be)."""
        be = self.probe("be", "best-effort", 4000)
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("launches", 0) > 3, what="BE to run")
        hp = spawn(self, self.d.run_cmd(["--space", "serve", "--max-slowdown", "1.25", "--class", "guaranteed",
                                         "--name", "hp", "--", bin_path("gpuos-space-probe"), "--ms", "1500"]),
                   self.d.env)
        return hp, be

    def test_a_budgeted_tenant_is_partitioned_when_budget_whole_gpu_is_off(self):
        hp, be = self.budgeted_beside_best_effort()
        rh = self.result(hp)
        self.assertEqual(rh["union"], self.HP_GROUPS, rh)  # a guaranteed tenant's default partition
        self.result(be)

    def test_a_budgeted_tenant_planned_whole_gpu_runs_on_every_sm_beside_best_effort(self):
        # [policy.partition] budget_whole_gpu (the default): the guaranteed tenant with a latency
        # budget is not placed (every slot), and holds one group; best-effort work is planned on
        # every other one (the budget policy sizes how many it uses: not here, under the default
        # policy).
        hp, be = self.budgeted_beside_best_effort()
        rh, rb = self.result(hp), self.result(be)
        self.assertEqual(rh["order_errors"], 0, rh)
        self.assertEqual(rh["union"], self.ALL, rh)  # partitioned, it would be HP_GROUPS
        beside = self.ALL & ~1  # every group but the one the guaranteed tenant holds
        self.assertIn(beside, rb["masks"], rb)
        for m in rb["masks"]:  # alone or lent (the guaranteed tenant idle): every slot; else beside it
            self.assertIn(m, (self.ALL, beside), rb)
        th = wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(hp.pid)),
                      what="hp exited")
        self.assertEqual(th["max_slowdown"], 1.25, th)
        self.assertEqual(th["space_launches"], 0, th)  # nothing placed
        self.assertEqual(th["space_failures"], 0, th)

    def test_right_sizing_gives_unneeded_sms_to_best_effort(self):
        # HP's kernels have 64 blocks of 1024 threads: one wave on 32 SMs or more. The interposer
        # times them (and HP's graph replays) at each partition size, gpuosd fits the samples and
        # takes away groups HP does not need, which BE gets. Where it settles is checked by the
        # sizer's unit tests: the double's timings carry the host's scheduling noise (tens of
        # percent on a loaded 2-core machine), so here only the mechanism end to end is checked.
        be = self.probe("be", "best-effort", 12000, "--iters", "2000000")  # long kernels: little CPU
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("launches", 0) > 3, what="BE to run")
        hp = self.probe("hp", "guaranteed", 10000, "--blocks", "64", "--iters", "2000000")  # ~2 ms a wave
        wait_for(lambda: 0 < (self.d.tenant(hp.pid) or {}).get("space_sms", 0) < 112, timeout=30,
                 what="HP right-sized below its 112-SM default")
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("space_sms", 0) > 20,
                 what="BE given the SMs HP does not need")
        # The capacity it gave back is reported: `gpuos ps --json` and the table's SMS column.
        t = self.d.tenant(hp.pid)
        self.assertEqual(t["space_default_sms"], 112, t)
        self.assertEqual(t["space_saved_sms"], 112 - t["space_sms"], t)
        table = subprocess.run([bin_path("gpuos"), "ps", "--socket", self.d.socket], env=self.d.env,
                               capture_output=True, text=True, timeout=20).stdout
        self.assertRegex(table, r"\bhp\b.*\b\d+/112\b", table)
        top = subprocess.run([bin_path("gpuos"), "top", "--once", "--interval", "0.2", "--socket", self.d.socket],
                             env=self.d.env, capture_output=True, text=True, timeout=20).stdout
        self.assertIn("SMS", top)
        self.assertRegex(top, r"\bhp\b.*\b\d+/112\b", top)
        self.assertRegex(top, r"\bbe\b.*best-effort.*\s\d+ -\n", top)  # its groups, not right-sized; no budget
        self.assertNotIn("space_default_sms", self.d.tenant(be.pid))  # best-effort: not right-sized
        rh, rb = self.result(hp), self.result(be)
        self.assertEqual(rh["order_errors"], 0, rh)
        self.assertEqual(rb["order_errors"], 0, rb)
        # HP's kernels and graph replays ran on smaller partitions of its groups (a graph's kernel
        # nodes are re-pointed at each partition it is launched in).
        smaller = [m for m in rh["masks"] if m != self.HP_GROUPS and m & ~self.HP_GROUPS == 0]
        self.assertTrue(smaller, rh)
        self.assertRegex(self.d.log_text(), r"right-sized 112 -> 104 SMs of 112 \((down|probe)")
        # Its kernel runs one block per SM from 64 SMs up: gpuosd knows its grid (the interposer
        # reports it with the samples) and never takes it below 64 (where, on a real GPU, two of its
        # blocks would share an SM), however flat its latency above.
        sizes = [int(s) for s in re.findall(r"right-sized \d+ -> (\d+) SMs", self.d.log_text())]
        self.assertGreaterEqual(min(sizes), 64, self.d.log_text())
        self.assertNotIn("MPS client's kernel", self.d.log_text())  # its ms-long kernels do not notice MPS
        th = wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(hp.pid)),
                      what="hp exited")
        self.assertEqual(th["space_failures"], 0, th)

    def test_right_sizing_two_guaranteed_tenants_each_within_its_share(self):
        # Two guaranteed tenants beside a best-effort one: each is sized within its even share of
        # the guaranteed groups (7 of 14: 56 SMs), and what they give up goes to the BE. The first
        # started alone with BE (112-SM default) and starts again from 56 when the second comes.
        be = self.probe("be", "best-effort", 15000, "--iters", "2000000")
        wait_for(lambda: (self.d.tenant(be.pid) or {}).get("launches", 0) > 3, what="BE to run")
        hp1 = self.probe("hp1", "guaranteed", 12000, "--blocks", "16", "--iters", "2000000")
        wait_for(lambda: (self.d.tenant(hp1.pid) or {}).get("space_default_sms") == 112, timeout=30,
                 what="hp1 sized from 112 SMs")
        hp2 = self.probe("hp2", "guaranteed", 10000, "--blocks", "16", "--iters", "2000000")
        both = lambda: all(0 < (self.d.tenant(p.pid) or {}).get("space_sms", 0) < 56 and
                           (self.d.tenant(p.pid) or {}).get("space_default_sms") == 56 for p in (hp1, hp2))
        wait_for(both, timeout=40, what="both guaranteed tenants sized below their 56-SM share")
        # One listing: the sizers keep moving, and separate ones could mix two plans.
        by_pid = {t["pid"]: t for t in self.d.ps()["tenants"]}
        t1, t2, tb = by_pid[hp1.pid], by_pid[hp2.pid], by_pid[be.pid]
        self.assertEqual(t1["space_mask"] & t2["space_mask"], 0, (t1, t2))  # their own groups each
        self.assertEqual((t1["space_mask"] | t2["space_mask"]) & tb["space_mask"], 0, (t1, t2, tb))
        self.assertGreater(tb["space_sms"], 20, tb)  # BE has more than its 2 reserved groups
        log = self.d.log_text()
        self.assertIn("its default partition is now 56 SMs (was 112): right-sizing starts again", log)
        self.assertRegex(log, r"tenant \d+ \(hp2\): right-sizing from its 56-SM default partition")
        for p in (hp1, hp2, be):
            self.assertEqual(self.result(p)["order_errors"], 0)

    def test_a_guaranteed_tenant_whose_slack_mps_costs_is_warned_about(self):
        be = self.probe("be", "best-effort", 3000)
        hp = self.probe("hp", "guaranteed", 3000)
        # Its timed launches (graph replays counted per kernel node) give its mean kernel time.
        t = wait_for(lambda: (lambda t: t if t and t.get("space_kernel_us", 0) > 0 else None)(self.d.tenant(hp.pid)),
                     what="HP's mean kernel time")
        wait_for(lambda: "MPS client's kernel about 1000.00 us more" in self.d.log_text(), timeout=20,
                 what="the warning about HP")
        log = self.d.log_text()
        self.assertRegex(log, r'tenant \d+ \(hp\): its kernels take [0-9.]+ us on average.*outside domain "serve"')
        self.assertEqual(log.count("MPS client's kernel"), 1, log)  # once, and not about best-effort BE
        self.assertGreater(t["space_kernel_us"], 0, t)
        self.result(hp)
        self.result(be)

    def test_a_domain_the_config_does_not_name_is_refused_by_the_cli(self):
        r = subprocess.run(self.d.run_cmd(["--space", "nosuch", "--", "true"]), env=self.d.env,
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        self.assertIn("nosuch", r.stderr)

def main():
    global BUILD
    BUILD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
