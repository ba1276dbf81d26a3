#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Security end to end (issue #22: the tenant and other local users are untrusted).

The attacks of the security review, on the driver test double: gpuosd runs as root (as in CI),
the attacker as uid 65534 (and a second victim user as another uid), started with subprocess's
user/group (setuid/setgid before exec). Every test cleans up its processes, sockets and /dev/shm
segments. Usage: test_security.py BUILD_DIR [test-name ...]
"""
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e2e  # noqa: E402
from test_e2e import Daemon, bin_path, wait_for  # noqa: E402

ATTACKER = 65534
# A second non-root user (needs no passwd entry); per run, so that concurrent runs do not share the
# /tmp/gpuos-<uid> the first test squats.
VICTIM = 60000 + os.getpid() % 5000

# The attacker's side of the lock-out: opens N connections, asks each for a listing (LIST) and
# reports how many were served (and stay open) and how many were refused, with the reason. Holds
# the open ones until its stdin closes.
HOLDER = r'''
import json, socket, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
LIST = struct.pack("<IHHII", 0x534f5047, 2, 3, 24, 1) + struct.pack("<II", 0, 0)  # ABI v2 (gpuos/abi.h)
held, refused, why = [], 0, ""
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(60)
    s.connect(path)
    try:
        s.send(LIST)
    except OSError:
        pass  # refused and closed already: its reply is still queued
    served = False
    while True:
        try:
            m = s.recv(1024)
        except ConnectionResetError:
            continue  # reported before the refusal still queued; read that next
        if not m:
            break
        t = struct.unpack_from("<H", m, 6)[0]
        if t == 6:  # LIST_END
            served = True
            break
        if t == 8:  # REPLY: a refusal
            status = struct.unpack_from("<i", m, 16)[0]
            why = "status %d: %s" % (status, m[24:].split(b"\0")[0].decode(errors="replace"))
            break
    if served:
        held.append(s)
    else:
        refused += 1
        s.close()
print(json.dumps({"accepted": len(held), "refused": refused, "why": why}), flush=True)
sys.stdin.read()
'''


def as_user(uid):
    # cwd "/": the test's own directory may be closed to that user.
    return {"user": uid, "group": uid, "extra_groups": [], "cwd": "/"}


def exited_unreaped(p, timeout=60.0):
    """Waits until p has exited, leaving it unreaped (a zombie still counts as alive for the double's
    NVML), for at most timeout seconds."""
    wait_for(lambda: os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None,
             timeout=timeout, what="pid %d to exit" % p.pid)


def first_line(p, timeout=60.0):
    """p's first line of output, waiting for it at most timeout seconds ("" if p closed its output)."""
    if not select.select([p.stdout], [], [], timeout)[0]:
        raise AssertionError("no output from pid %d within %d s" % (p.pid, timeout))
    return p.stdout.readline()


def unlink_shm(name):
    try:
        os.unlink("/dev/shm/" + name.lstrip("/"))
    except FileNotFoundError:
        pass


class Security(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root: the attacks come from another uid")
        self.tmp = tempfile.mkdtemp(prefix="gpuos-sec-")
        os.chmod(self.tmp, 0o755)  # the other users reach their directories below it
        self.procs = []
        self.shm = []
        self.paths = []
        self.daemons = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=60)
            for f in (p.stdin, p.stdout, p.stderr):
                if f:
                    f.close()
        for d in self.daemons:
            d.stop()
            unlink_shm(d.env["GPUOS_SIM_SHM"])
        for name in self.shm:
            unlink_shm(name)
        for path in self.paths:
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- helpers ---

    def daemon(self, config=""):
        cfg = os.path.join(self.tmp, "gpuosd-%d.toml" % len(self.daemons))
        with open(cfg, "w") as f:
            f.write(config)
        d = Daemon(["--config", cfg])
        self.daemons.append(d)
        os.chmod(d.dir, 0o755)  # still root's and not writable by others: other users may connect
        return d

    def user_daemon(self, uid, sock):
        """A gpuosd of another user on sock (zero GPUs, no metrics); returns once it listens."""
        cfg = os.path.join(self.tmp, "user-%d.toml" % uid)
        with open(cfg, "w") as f:
            f.write("[daemon]\nlog_level = \"warn\"\n")
        os.chmod(cfg, 0o644)
        env = dict(os.environ, GPUOS_DRIVER_LIBRARY="/nonexistent/libcuda.so.1")
        p = subprocess.Popen([bin_path("gpuosd"), "--socket", sock, "--config", cfg, "--metrics-listen", ""],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **as_user(uid))
        self.procs.append(p)

        def up():
            if p.poll() is not None:
                self.fail("the user's gpuosd exited: " + p.stdout.read().decode())
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(sock)
                return True
            except OSError:
                return False
            finally:
                s.close()
        wait_for(up, what="the user's gpuosd to listen")
        return p

    def user_ps(self, uid, sock):
        """`gpuos ps --json --all` as uid (its own daemon: trusted)."""
        r = subprocess.run([bin_path("gpuos"), "ps", "--json", "--all", "--socket", sock], capture_output=True,
                           text=True, timeout=30, env=dict(os.environ, GPUOS_CONFIG=""), **as_user(uid))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def tenant_env(self, d, socket_path=None, uid=None):
        """Environment of a probe under libgpuos.so (run without `gpuos run`: it is the library that is
        attacked). A non-root probe gets its own simulated GPU segment."""
        env = dict(d.env if d else os.environ)
        double_dir = os.path.join(e2e.BUILD, "lib", "driver_double")
        env.update({"LD_PRELOAD": os.path.join(e2e.BUILD, "lib", "libgpuos.so"),
                    "GPUOS_DRIVER_LIBRARY": os.path.join(double_dir, "libcuda.so.1"),
                    "LD_LIBRARY_PATH": double_dir, "GPUOS_LOG_LEVEL": "warn"})
        env.pop("GPUOS_ON_NO_DAEMON", None)
        if socket_path is None:
            env.pop("GPUOS_SOCKET", None)
        else:
            env["GPUOS_SOCKET"] = socket_path
        if d is None or uid is not None:  # its own simulated GPU, removed at the end
            name = "/gpuos-sec-%d-%d-%d" % (os.getpid(), uid or 0, len(self.shm))
            self.shm.append(name)
            env["GPUOS_SIM_SHM"] = name
        return env

    def probe(self, env, uid=None, *args):
        kw = as_user(uid) if uid is not None else {}
        return subprocess.run([bin_path("gpuos-interpose-probe"), "--launches", "2", "--graph-replays", "1"]
                              + list(args), env=env, capture_output=True, text=True, timeout=60, **kw)

    def assert_ungoverned(self, env, uid, reason):
        """passthrough: runs, one warning giving the reason; refuse: cuInit fails."""
        r = self.probe(env, uid)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("pass-through"), 1, r.stderr)
        self.assertIn(reason, r.stderr)
        env = dict(env, GPUOS_ON_NO_DAEMON="refuse")
        r = self.probe(env, uid)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("CUDA_ERROR_NOT_PERMITTED", r.stderr)
        self.assertIn(reason, r.stderr)

    def hold_connections(self, sock, n, uid=ATTACKER):
        # An interpreter the other user can run (sys.executable may sit under root's 0700 home).
        py = next((x for x in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable)
                   if os.access(x, os.X_OK)), sys.executable)
        p = subprocess.Popen([py, "-c", HOLDER, sock, str(n)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **as_user(uid))
        self.procs.append(p)
        line = first_line(p)
        if not line:
            self.fail("the connection holder failed: " + p.stderr.read())
        return p, json.loads(line)

    def root_tenant(self, d, name):
        p = subprocess.Popen(d.run_cmd(["--name", name, "--", bin_path("gpuos-interpose-probe"), "--launches", "1",
                                        "--hold-ms", "60000"]),
                             env=d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(p)
        return p, wait_for(lambda: d.tenant(p.pid), timeout=30, what="the root tenant to register")

    def gate(self, d, tid, state):
        return subprocess.run([bin_path("gpuos"), "gate", str(tid), state, "--socket", d.socket], env=d.env,
                              capture_output=True, text=True, timeout=30)

    # --- 1. daemon impersonation ---

    def test_no_tmp_fallback_when_xdg_runtime_dir_is_unset(self):
        # The attacker serves a daemon where the victim's tenants used to look without XDG_RUNTIME_DIR.
        squat = "/tmp/gpuos-%d" % VICTIM
        shutil.rmtree(squat, ignore_errors=True)
        os.mkdir(squat, 0o755)
        os.chown(squat, ATTACKER, ATTACKER)
        self.paths.append(squat)
        sock = os.path.join(squat, "gpuosd.sock")
        self.user_daemon(ATTACKER, sock)
        os.chmod(sock, 0o666)  # the attacker opens its socket to the victim
        env = self.tenant_env(None, socket_path=None, uid=VICTIM)
        env.pop("XDG_RUNTIME_DIR", None)
        self.assert_ungoverned(env, VICTIM, "XDG_RUNTIME_DIR is not set; set XDG_RUNTIME_DIR")
        self.assertEqual(self.user_ps(ATTACKER, sock)["tenants"], [], "the victim registered with the attacker")

    def test_tenant_refuses_a_daemon_of_another_user(self):
        theirs = os.path.join(self.tmp, "theirs")
        os.mkdir(theirs)
        os.chown(theirs, ATTACKER, ATTACKER)
        sock = os.path.join(theirs, "gpuosd.sock")
        self.user_daemon(ATTACKER, sock)
        os.chmod(sock, 0o666)  # the attacker opens its socket to the victim
        # The attacker's directory (also when the victim is root).
        for uid in (None, VICTIM):
            self.assert_ungoverned(self.tenant_env(None, sock, uid), uid,
                                   "socket directory %s is owned by uid %d" % (theirs, ATTACKER))
        # Its socket in a directory that passes the check (a stand-in for any way of getting one
        # there): the daemon's uid (SO_PEERCRED) gives it away.
        ours = os.path.join(self.tmp, "ours")
        os.mkdir(ours, 0o755)
        os.rename(sock, os.path.join(ours, "gpuosd.sock"))
        for uid in (None, VICTIM):
            self.assert_ungoverned(self.tenant_env(None, os.path.join(ours, "gpuosd.sock"), uid), uid,
                                   "it runs as uid %d" % ATTACKER)
        os.rename(os.path.join(ours, "gpuosd.sock"), sock)
        self.assertEqual(self.user_ps(ATTACKER, sock)["tenants"], [], "a victim registered with the attacker")

    def test_gpuosd_refuses_a_socket_directory_others_can_write(self):
        for owner, why in ((ATTACKER, "owned by uid %d" % ATTACKER), (0, "writable by others")):
            d = os.path.join(self.tmp, "open-%d" % owner)
            os.mkdir(d)
            os.chown(d, owner, owner)
            os.chmod(d, 0o777)
            r = subprocess.run([bin_path("gpuosd"), "--socket", os.path.join(d, "gpuosd.sock"), "--metrics-listen", ""],
                               env=dict(os.environ, GPUOS_DRIVER_LIBRARY="/nonexistent/libcuda.so.1"),
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("socket directory %s is %s" % (d, why), r.stderr)
            self.assertEqual(os.listdir(d), [])

    # --- 2. lock-out ---

    def test_idle_connections_of_one_user_do_not_lock_out_others(self):
        # No idle timeout here: the test must not depend on how fast it runs.
        d = self.daemon("[daemon]\nidle_timeout_ms = 0\n")
        holder, got = self.hold_connections(d.socket, 400)
        self.assertEqual(got["accepted"], 64, got)  # max_connections_per_uid
        self.assertEqual(got["refused"], 336, got)
        self.assertIn("status 5: too many connections from uid %d" % ATTACKER, got["why"])
        # Root: ps, a governed tenant, gate.
        self.assertIsNotNone(d.ps())
        p, t = self.root_tenant(d, "governed")
        self.assertEqual(self.gate(d, t["id"], "close").returncode, 0)
        wait_for(lambda: d.tenant(p.pid)["state"] == "gated", what="the gate to close")
        self.assertEqual(self.gate(d, t["id"], "open").returncode, 0)
        # The attacker's own tenant is refused with the reason, handled as "no daemon".
        self.assert_ungoverned(self.tenant_env(d, d.socket, ATTACKER), ATTACKER, "limit reached")
        holder.stdin.close()
        holder.wait(timeout=30)

    def test_admins_get_in_when_others_hold_every_ordinary_slot(self):
        d = self.daemon("[daemon]\nidle_timeout_ms = 0\nmax_connections_per_uid = 0\n")
        holder, got = self.hold_connections(d.socket, 400)
        self.assertEqual(got["accepted"], 256 + 64, got)  # every ordinary slot
        self.assertIn("reserved for admins", got["why"])
        self.assertIsNotNone(d.ps())  # root's ps
        p, t = self.root_tenant(d, "governed")  # root's tenants too
        self.assertEqual(self.gate(d, t["id"], "close").returncode, 0)
        self.assertEqual(self.gate(d, t["id"], "open").returncode, 0)
        holder.stdin.close()
        holder.wait(timeout=30)

    def test_a_user_asking_for_guaranteed_is_told_it_got_best_effort(self):
        # Issue #25: gpuosd lowers a non-admin's guaranteed to best-effort; the user hears it, once.
        d = self.daemon()
        env = dict(self.tenant_env(d, d.socket, ATTACKER), GPUOS_TENANT_CLASS="guaranteed")
        r = self.probe(env, ATTACKER)
        self.assertEqual(r.returncode, 0, r.stderr)
        want = "as best-effort (registered; best-effort: guaranteed is for admins and uid %d is not one" % ATTACKER
        self.assertIn("warning: asked for class guaranteed, gpuosd admitted tenant", r.stderr)
        self.assertIn(want, r.stderr)
        self.assertEqual(r.stderr.count("asked for class guaranteed"), 1, r.stderr)
        # Asking for best-effort (the default) says nothing.
        r = self.probe(dict(env, GPUOS_TENANT_CLASS="best-effort"), ATTACKER)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("asked for class", r.stderr)

    def test_silent_connections_are_closed(self):
        d = self.daemon("[daemon]\nidle_timeout_ms = 200\n")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(30)  # generous: only the closing matters
        s.connect(d.socket)
        self.assertEqual(s.recv(1024), b"")
        s.close()
        self.assertIn("nothing received for 200 ms", d.log_text())

    # --- 4. trust but verify: NVML (the double's stand-in) against the grants ---

    def bypass_probe(self, env, mib, *run_args, d=None, probe_args=()):
        cmd = [bin_path("gpuos-bypass-probe"), "--mib", str(mib), "--hold-ms", "60000"] + list(probe_args)
        p = subprocess.Popen(d.run_cmd(list(run_args) + ["--"] + cmd) if d else cmd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        line = first_line(p)
        self.assertIn('"result": 0', line, p.stderr.read() if p.poll() is not None else line)
        return p

    def test_the_usage_check_sees_a_tenant_that_bypasses_the_interposer(self):
        d = self.daemon('[verify]\ninterval_ms = 200\n')
        self.assertIn("usage check on", d.log_text())
        # A tenant with a 64 MiB quota allocates 2 GiB through the driver's real entry points.
        p = self.bypass_probe(d.env, 2048, "--name", "sly", "--mem", "64MiB", d=d)
        t = wait_for(lambda: (lambda t: t if t and t["violations"] > 0 else None)(d.tenant(p.pid)),
                     timeout=60, what="the usage check to find the tenant over its quota")
        self.assertGreaterEqual(t["verified_mem_bytes"], 2 << 30)
        self.assertLess(t["mem_used_bytes"], 64 << 20)  # what it reported: the interposer saw 1 MiB
        self.assertIn("over its 1088 MiB", d.log_text())
        self.assertIsNone(p.poll())  # enforce = "report": it runs on
        # A process on the GPU that never registered (no interposer at all).
        env = dict(d.env)
        env.pop("LD_PRELOAD", None)
        q = self.bypass_probe(env, 512)
        wait_for(lambda: "pid %d uses GPU 0" % q.pid in d.log_text(), timeout=60,
                 what="the usage check to report the unregistered process")
        url = "http://127.0.0.1:%d/metrics" % d.metrics_port()
        metrics = urllib.request.urlopen(url, timeout=30).read().decode()
        self.assertIn("gpuos_daemon_unregistered_gpu_processes 1", metrics)
        self.assertRegex(metrics, r'gpuos_tenant_violations_total\{[^}]*tenant="sly"[^}]*\} [1-9]')

    def test_tenants_are_charged_gpu_time_and_energy(self):
        # Issue #43 item 9: two tenants running kernels on the double get GPU time and a part of the
        # stand-in NVML's energy (100 W), in ps --json and the metrics; the tenants' parts never add
        # up to more than the GPU's energy over the rounds.
        d = self.daemon('[verify]\ninterval_ms = 200\n')
        procs = []
        for name in ("a", "b"):
            procs.append(self.bypass_probe(d.env, 64, "--name", name, d=d,
                                           probe_args=["--spin-s", "120", "--kernel", "gpuos_fixed_work", "--iters",
                                                       "1000000", "--batch", "1"]))
        for p in procs:
            wait_for(lambda: (lambda t: t and t["gpu_seconds"] > 0 and t["energy_joules"] > 0)(d.tenant(p.pid)),
                     timeout=60, what="the usage check to charge the tenant")
        tenants = [t for t in d.ps()["tenants"] if t["name"] in ("a", "b")]
        charged = sum(d.metric("gpuos_tenant_energy_joules_total", tenant=n)[0] for n in ("a", "b"))
        attributed = d.metric("gpuos_gpu_energy_attributed_joules_total", gpu="0")  # scraped later: no less
        gpu = d.metric("gpuos_gpu_energy_joules_total", gpu="0")
        self.assertEqual(len(tenants), 2)
        self.assertGreater(gpu[0], 0)
        self.assertLessEqual(attributed[0], gpu[0])
        self.assertLessEqual(charged, attributed[0] + 0.002)
        self.assertGreater(sum(d.metric("gpuos_tenant_gpu_seconds_total", tenant="a")), 0)

    def test_zeroing_its_report_gets_a_tenant_no_more_memory_and_is_found(self):
        # Issue #42: the quota check read mem_used_bytes back from the control block; a tenant that
        # wrote 0 over it after each allocation got 1024 MiB on a 64 MiB quota, unseen. Now the
        # interposer counts in its own memory, and gpuosd compares the report with NVML.
        d = self.daemon('[verify]\ninterval_ms = 200\n')
        go = os.path.join(d.dir, "zero-go")
        cmd = [bin_path("gpuos-bypass-probe"), "--zero-report", go, "--hold-ms", "60000"]
        p = subprocess.Popen(d.run_cmd(["--name", "zeroer", "--mem", "64MiB", "--"] + cmd), env=d.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        self.assertIn('"ready": true', p.stdout.readline(), p.stderr.read() if p.poll() is not None else "")
        # gpuosd has sized its contexts (the baseline: from the round after one that saw it launch,
        # which it did before "ready") before it starts.
        wait_for(lambda: (d.tenant(p.pid) or {}).get("verified_mem_bytes", 0) > 0, timeout=60,
                 what="a round of the usage check to measure the tenant")
        seen = d.metric("gpuos_daemon_usage_checks_total")[0]
        wait_for(lambda: d.metric("gpuos_daemon_usage_checks_total")[0] >= seen + 2, timeout=60,
                 what="two more rounds of the usage check")
        open(go, "w").close()
        out = json.loads(p.stdout.readline())
        self.assertEqual(out["zeroed_mib"], 48)  # 3 x 16 MiB beside its first 1 MiB: its quota, no more
        wait_for(lambda: "reports less than" in d.log_text(), timeout=60,
                 what="the usage check to find the report below NVML's measure")
        t = d.tenant(p.pid)
        self.assertGreater(t["violations"], 0)
        self.assertLessEqual(t["mem_peak_bytes"], 64 << 20)
        self.assertIsNone(p.poll())  # found, not enforced (enforce = "report" anyway)

    def test_the_usage_check_kills_a_bypassing_tenant_when_told_to(self):
        d = self.daemon('[verify]\ninterval_ms = 200\nenforce = "kill"\ngrace_rounds = 2\n')
        p = self.bypass_probe(d.env, 2048, "--name", "sly", "--mem", "64MiB", d=d)
        self.assertEqual(p.wait(timeout=60), -9)  # `gpuos run` became the probe (exec)
        self.assertIn("enforced: killed (SIGKILL)", d.log_text())

    def test_the_usage_check_adds_up_a_low_duty_bypass(self):
        # Issue #42 item 7: 2 ms of work every 16 ms around a closed gate (12% of the SMs, under the
        # one round's 20%) adds up over the window of 10 rounds, and enforce = "kill" stops it.
        d = self.daemon('[verify]\ninterval_ms = 200\nenforce = "kill"\ngrace_rounds = 2\n')
        p = self.bypass_probe(d.env, 64, "--name", "sly", d=d,
                              probe_args=["--spin-s", "120", "--kernel", "gpuos_fixed_work", "--iters", "2000000",
                                          "--batch", "1", "--sleep-us", "14000"])
        t = wait_for(lambda: d.tenant(p.pid), timeout=30, what="the bypass to register")
        self.assertEqual(self.gate(d, t["id"], "close").returncode, 0)
        self.assertEqual(p.wait(timeout=90), -9, d.log_text())
        self.assertIn("in all in", d.log_text())  # found by the window, not by one round
        self.assertNotIn("SMs while its gate was closed", d.log_text())

    def test_the_usage_check_finds_a_tenant_that_ignores_its_pacing(self):
        # Issue #42 item 7: beside a guaranteed tenant with a latency budget, a best-effort tenant
        # launches around its pacing (the driver's own entry points, 1 ms kernels back to back):
        # NVML's SM use of it over its paced rounds against the share gpuosd granted it.
        d = self.daemon('[scheduler]\npolicy = "budget"\n[verify]\ninterval_ms = 200\n')
        hp = subprocess.Popen(d.run_cmd(["--name", "hp", "--class", "guaranteed", "--max-slowdown", "1.5", "--",
                                         bin_path("gpuos-synth"), "--name", "hp", "--iters", "2000000", "--count",
                                         "10000000", "--warmup", "0"]),
                              env=d.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(hp)
        wait_for(lambda: d.tenant(hp.pid), timeout=30, what="the guaranteed tenant to register")
        # Issue #62 item 8: an honest best-effort tenant beside it, paced the same way, launching
        # through its interposer all along, is never found.
        honest = subprocess.Popen(d.run_cmd(["--name", "honest", "--class", "best-effort", "--",
                                             bin_path("gpuos-synth"), "--name", "honest", "--iters", "1000000",
                                             "--count", "10000000", "--warmup", "0"]),
                                  env=d.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(honest)
        wait_for(lambda: (d.tenant(honest.pid) or {}).get("launches", 0) > 0 or None, timeout=30,
                 what="the honest best-effort tenant to launch")
        p = self.bypass_probe(d.env, 64, "--name", "sly", "--class", "best-effort", d=d,
                              probe_args=["--spin-s", "120", "--kernel", "gpuos_fixed_work", "--iters", "1000000",
                                          "--batch", "1"])
        wait_for(lambda: "ignores its pacing" in d.log_text(), timeout=90,
                 what="the usage check to find the best-effort tenant beyond its pacing")
        self.assertGreater(d.tenant(p.pid)["violations"], 0)
        self.assertEqual(d.tenant(hp.pid)["violations"], 0)
        time.sleep(1.0)  # five more rounds of 200 ms beside the offender
        self.assertEqual(d.tenant(honest.pid)["violations"], 0, d.log_text())
        self.assertGreater(d.tenant(honest.pid)["launches"], 0)
        self.assertNotIn('"honest") used', d.log_text())

    def test_clean_exits_and_daemon_restarts_are_no_violations(self):
        # Issue #43 item 3: 100 tenants exit cleanly and gpuosd restarts 3 times under a surviving
        # tenant; none of it is a process "without being a gpuos tenant". Exited tenants are reaped
        # a few rounds late, so that they are still on the (simulated) GPU after their connection
        # closed; the survivor is on the GPU before it re-registers with each new gpuosd.
        d = self.daemon('[verify]\ninterval_ms = 100\n')
        probe = bin_path("gpuos-interpose-probe")
        survivor = subprocess.Popen(d.run_cmd(["--name", "survivor", "--", probe, "--launches", "1",
                                               "--hold-ms", "600000"]), env=d.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        self.procs.append(survivor)
        wait_for(lambda: d.tenant(survivor.pid), timeout=30, what="the survivor to register")
        violations, exits = 0.0, 0
        for restart in range(4):
            for _ in range(5):
                batch = [subprocess.Popen(d.run_cmd(["--name", "brief", "--", probe, "--launches", "2"]), env=d.env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(5)]
                self.procs.extend(batch)
                for p in batch:  # exited, not reaped yet: still listed a few rounds
                    exited_unreaped(p)
                time.sleep(0.3)
                for p in batch:
                    self.assertEqual(p.wait(timeout=60), 0, p.stderr.read().decode())
                exits += len(batch)
            violations += d.metric("gpuos_daemon_violations_total")[0]
            if restart == 3:
                break
            d.proc.kill()  # the daemon dies without any cleanup; the survivor runs on
            d.proc.wait(timeout=60)
            d.start()
            wait_for(lambda: (d.tenant(survivor.pid) or {}).get("state", "exited") != "exited" or None, timeout=30,
                     what="the survivor to re-register")
        self.assertEqual(exits, 100)
        time.sleep(0.5)
        violations += d.metric("gpuos_daemon_violations_total")[0]
        self.assertEqual(violations, 0, d.log_text())
        self.assertNotIn("without being a gpuos tenant", d.log_text())
        self.assertIsNone(survivor.poll())
        # A process that never registered is still one.
        env = dict(d.env)
        env.pop("LD_PRELOAD", None)
        q = self.bypass_probe(env, 512)
        wait_for(lambda: "pid %d uses GPU 0" % q.pid in d.log_text(), timeout=60,
                 what="the usage check to report the unregistered process")

    # --- 5. the hostile tenant, third pass (issue #62) ---

    def hostile_probe(self, d, go, *run_args, probe_args=()):
        """gpuos-hostile-probe under `gpuos run` (root): registered, one kernel run, waiting for `go`."""
        cmd = [bin_path("gpuos-hostile-probe"), "--go", go] + list(probe_args)
        p = subprocess.Popen(d.run_cmd(list(run_args) + ["--"] + cmd), env=d.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        line = first_line(p)
        self.assertIn('"ready": true', line, p.stderr.read() if p.poll() is not None else line)
        return p

    def no_launch_yet(self, p):
        """Fails at once if p printed a line (a launch it made) since; else True."""
        if select.select([p.stdout], [], [], 0)[0]:
            self.fail("the held tenant ran on: %r" % p.stdout.readline())
        return True

    def hold_and_leave(self, d, name, launches, killed=False):
        """A tenant an admin holds closes its connection to gpuosd for good (GPUOS_SOCKET pointed at
        nothing, its socket shut down) and tries to launch. Returns the probe and its tenant.
        killed: gpuosd may kill it before it says it left."""
        go = os.path.join(d.dir, "go-" + name)
        p = self.hostile_probe(d, go, "--name", name, probe_args=["--escape", "--launches", str(launches)])
        t = wait_for(lambda: d.tenant(p.pid), timeout=30, what="the tenant to register")
        self.assertEqual(self.gate(d, t["id"], "close").returncode, 0)
        wait_for(lambda: d.tenant(p.pid)["state"] == "gated", what="the hold")
        open(go, "w").close()
        if not killed:
            self.assertIn('"escaped": true', first_line(p), p.stderr.read() if p.poll() is not None else "")
        return p, t

    def test_a_held_tenant_that_leaves_its_connection_stays_held(self):
        # Issue #62 item 1: the held tenant's library fell open once re-registration failed (12,504
        # launches in 14 s while held), and gpuosd listed it as exited. Now its process is still the
        # tenant (held, listed, judged), the library keeps the last gate word (gpuosd renews its
        # lease), and leaving while held is reported as an escape. An honest held tenant that exits
        # is no escape.
        d = self.daemon('[verify]\ninterval_ms = 200\n')
        honest, h = self.root_tenant(d, "honest")
        self.assertEqual(self.gate(d, h["id"], "close").returncode, 0)
        honest.terminate()
        honest.wait(timeout=30)
        wait_for(lambda: d.tenant(honest.pid)["state"] == "exited", what="the honest tenant's exit")
        self.assertEqual(d.metric("gpuos_daemon_escapes_total"), [0.0])
        p, t = self.hold_and_leave(d, "leaver", 20)
        wait_for(lambda: self.no_launch_yet(p) and "escaped" in d.log_text(), timeout=30,
                 what="gpuosd to report the escape")
        # Its launch waits at the gate it was held at: gpuosd sees it waiting there.
        wait_for(lambda: self.no_launch_yet(p) and d.tenant(p.pid)["gate_waiting_ms"] > 0, timeout=30,
                 what="the tenant's launch to wait at its closed gate")
        # Past the gate's lease (5 s): gpuosd renews it for a process that runs on, connection or not.
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            self.no_launch_yet(p)
            time.sleep(0.2)
        now = d.tenant(p.pid)
        self.assertEqual((now["state"], now["id"], now["launches"]), ("gated", t["id"], 1), now)
        self.assertEqual(d.metric("gpuos_daemon_escapes_total"), [1.0])
        self.assertIsNone(p.poll())  # enforce = "report": found, not stopped
        # The admin's word still reaches it: opened, it runs its launches and exits.
        self.assertEqual(self.gate(d, t["id"], "open").returncode, 0)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn('{"launched": 20}', out)
        wait_for(lambda: d.tenant(p.pid)["state"] == "exited", what="the tenant's exit")
        self.assertEqual(d.metric("gpuos_daemon_escapes_total"), [1.0])

    def test_a_held_tenant_that_leaves_its_connection_is_killed_when_told_to(self):
        # Issue #62 item 1, under enforce = "kill": leaving while held is enforced at once.
        d = self.daemon('[verify]\ninterval_ms = 200\nenforce = "kill"\n')
        p, t = self.hold_and_leave(d, "leaver", 20, killed=True)
        self.assertEqual(p.wait(timeout=60), -9, d.log_text())  # `gpuos run` became the probe (exec)
        self.assertNotIn('"launched"', p.stdout.read())
        log = d.log_text()
        self.assertIn("escaped", log)
        self.assertIn("enforced: killed (SIGKILL)", log)

    def test_an_unregistered_process_meets_the_enforcement(self):
        # Issue #62 item 1: a process on gpuosd's GPU that never registered was only logged. Under
        # enforce = "kill" it is killed after grace_rounds; a registered tenant beside it runs on.
        d = self.daemon('[verify]\ninterval_ms = 200\nenforce = "kill"\ngrace_rounds = 2\n')
        honest, _ = self.root_tenant(d, "honest")
        env = dict(d.env)
        env.pop("LD_PRELOAD", None)
        q = subprocess.Popen([bin_path("gpuos-bypass-probe"), "--mib", "64", "--hold-ms", "30000"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(q)
        self.assertIn('"result": 0', first_line(q))
        self.assertEqual(q.wait(timeout=60), -9, d.log_text())
        self.assertIn("pid %d uses GPU 0" % q.pid, d.log_text())
        self.assertIn("enforced: killed (SIGKILL)", d.log_text())
        self.assertIsNone(honest.poll())
        self.assertEqual(d.tenant(honest.pid)["violations"], 0)

    def test_a_forged_request_for_room_displaces_nobody(self):
        # Issue #62 item 5: under the default config (no quota), a tenant of uid 65534 that forged a
        # request for 900 MiB of room (its report holding it, the GPU full by its per-device word) got
        # a root tenant swapped out (600 MiB) and gated. gpuosd now reads the GPU's free memory
        # (NVML) before it makes room: the GPU has room for 900 MiB, so no allocation of that size
        # failed for lack of it, and nobody is displaced.
        d = self.daemon('[memory]\nswap_pool = "1GiB"\nswap_quantum_ms = 100\n')
        victim = subprocess.Popen(d.run_cmd(["--name", "victim", "--swap", "--", bin_path("gpuos-synth"), "--name",
                                             "victim", "--iters", "2000000", "--count", "10000000", "--warmup", "0",
                                             "--mem-mib", "600", "--json", "-"]),
                                  env=d.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(victim)
        v = wait_for(lambda: (lambda t: t if t and t["launches"] > 0 and t["mem_used_bytes"] >= 600 << 20 else None)(
            d.tenant(victim.pid)), timeout=60, what="the victim to hold its 600 MiB and run")
        time.sleep(0.2)  # past its quantum (100 ms): a victim the swap policy may choose
        go = os.path.join(self.tmp, "go-forger")
        f = subprocess.Popen([bin_path("gpuos-hostile-probe"), "--go", go, "--forge-room", "900"],
                             env=self.tenant_env(d, d.socket, ATTACKER), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, **as_user(ATTACKER))
        self.procs.append(f)
        self.assertIn('"ready": true', first_line(f), f.stderr.read() if f.poll() is not None else "")
        open(go, "w").close()
        os.chmod(go, 0o644)
        answer = json.loads(first_line(f))["answer"]
        self.assertNotEqual(answer, "none", f.stderr.read())
        v = d.tenant(victim.pid)
        self.assertEqual((v["swap_outs"], v["state"]), (0, "running"), d.log_text())
        self.assertNotIn("tenant %d: swapping out" % v["id"], d.log_text())
        self.assertIsNone(victim.poll())

    # --- 6. each user sees their own (issue #62 item 6) ---

    def user_tenant(self, d, uid, name, hold=True):
        """A probe of uid, registered with d as `name`; holding 60 s once done (hold), else exited.
        Returns it and its record, once it made its last allocation call (its memory no longer moves)."""
        env = dict(self.tenant_env(d, d.socket, uid), GPUOS_TENANT_NAME=name)
        p = subprocess.Popen([bin_path("gpuos-interpose-probe"), "--launches", "1", "--graph-replays", "1",
                              "--hold-ms", "60000" if hold else "0"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, **as_user(uid))
        self.procs.append(p)
        if not hold:
            self.assertEqual(p.wait(timeout=60), 0, p.stderr.read())
        t = wait_for(lambda: (lambda t: t if t and t["alloc_failures"] == 1 else None)(d.tenant(p.pid)), timeout=30,
                     what="uid %d's tenant to register and allocate" % uid)
        return p, t

    def ps_as(self, d, uid):
        r = subprocess.run([bin_path("gpuos"), "ps", "--json", "--all", "--socket", d.socket], capture_output=True,
                           text=True, timeout=30, env=dict(d.env, GPUOS_CONFIG=""), **as_user(uid))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_each_user_sees_their_own_tenants(self):
        # Issue #62 item 6: `gpuos ps` and `gpuos top` showed any local user every tenant: names,
        # pids, memory, pods. gpuosd now lists a user's own tenants (by SO_PEERCRED), live and exited,
        # and the GPUs' memory as those hold it; root sees everything, and so does the scrape.
        d = self.daemon()
        _, mine = self.user_tenant(d, ATTACKER, "attacker-job")
        _, theirs = self.user_tenant(d, VICTIM, "victim-job")
        _, gone = self.user_tenant(d, VICTIM, "victim-done", hold=False)
        wait_for(lambda: d.tenant(gone["pid"])["state"] == "exited", what="the victim's first tenant to exit")

        def seen(listing):
            return sorted(t["id"] for t in listing["tenants"])
        root = self.ps_as(d, 0)
        self.assertEqual(seen(root), sorted([mine["id"], theirs["id"], gone["id"]]))
        live = [t for t in root["tenants"] if t["state"] != "exited"]
        self.assertEqual(root["gpus"][0]["used_mem_bytes"], sum(t["mem_used_bytes"] for t in live))
        own = self.ps_as(d, ATTACKER)
        self.assertEqual(seen(own), [mine["id"]])
        self.assertEqual(own["gpus"][0]["used_mem_bytes"], mine["mem_used_bytes"])
        self.assertEqual(seen(self.ps_as(d, VICTIM)), sorted([theirs["id"], gone["id"]]))
        top = subprocess.run([bin_path("gpuos"), "top", "--once", "--interval", "0.2", "--socket", d.socket],
                             env=dict(d.env, GPUOS_CONFIG=""), capture_output=True, text=True, timeout=30,
                             **as_user(ATTACKER))
        self.assertEqual(top.returncode, 0, top.stderr)
        self.assertIn("attacker-job", top.stdout)
        self.assertNotIn("victim", top.stdout)
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % d.metrics_port(), timeout=30).read().decode()
        for name in ("attacker-job", "victim-job"):
            self.assertIn('tenant="%s"' % name, metrics)

    # --- 7. fail closed where a claim or a class was asked for (issue #62 item 4) ---

    def run_guaranteed(self, socket_path, env, uid=None, tenant_class="guaranteed"):
        """`gpuos run --class tenant_class` of the interpose probe on socket_path, as uid."""
        env = dict(env, GPUOS_CONFIG="")
        env.pop("LD_PRELOAD", None)  # gpuos run sets it
        return subprocess.run([bin_path("gpuos"), "run", "--class", tenant_class, "--socket", socket_path, "--",
                               bin_path("gpuos-interpose-probe"), "--launches", "2", "--graph-replays", "1"],
                              env=env, capture_output=True, text=True, timeout=60,
                              **(as_user(uid) if uid is not None else {}))

    def test_a_claim_or_a_guarantee_that_cannot_register_fails_closed(self):
        # Issue #62 item 4: a claim's container that reached no gpuosd, and `gpuos run --class
        # guaranteed` with none, ran ungoverned (pass-through, one warning). Both now fail closed; a
        # plain process (no claim, no class asked) still passes through.
        nowhere = os.path.join(self.tmp, "none", "gpuosd.sock")
        env = self.tenant_env(None, nowhere)
        r = self.probe(env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("pass-through"), 1, r.stderr)
        claim = "11111111-2222-4333-8444-555555555555"
        r = self.probe(dict(env, GPUOS_CLAIM_UID=claim))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("CUDA_ERROR_NOT_PERMITTED", r.stderr)
        self.assertEqual(r.stderr.count("refusing CUDA: claim %s runs governed or not at all" % claim), 1, r.stderr)
        self.assertNotIn("pass-through", r.stderr)
        # --class guaranteed with no gpuosd: the program is not run at all.
        r = self.run_guaranteed(nowhere, env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertIn("gpuos run: --class guaranteed: socket directory %s:" % os.path.dirname(nowhere), r.stderr)
        self.assertIn("not running %s ungoverned" % bin_path("gpuos-interpose-probe"), r.stderr)
        # A gpuosd that answers but refuses the registration (the user's connections are all taken):
        # CUDA fails; asked for best-effort, the same program passes through.
        d = self.daemon("[daemon]\nidle_timeout_ms = 0\nmax_connections_per_uid = 1\n")
        holder, got = self.hold_connections(d.socket, 1)
        self.assertEqual(got["accepted"], 1, got)
        env = self.tenant_env(d, d.socket, ATTACKER)
        r = self.run_guaranteed(d.socket, env, ATTACKER)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("CUDA_ERROR_NOT_PERMITTED", r.stderr)
        self.assertIn("too many connections from uid %d" % ATTACKER, r.stderr)
        r = self.run_guaranteed(d.socket, env, ATTACKER, tenant_class="best-effort")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("pass-through"), 1, r.stderr)
        holder.stdin.close()
        holder.wait(timeout=30)

    # --- 3. terminal escapes in tenant names ---

    def test_tenant_names_cannot_drive_the_terminal(self):
        d = self.daemon()
        evil = "ev\x1b]0;owned\x07il\x1b[2J\rx"
        p, t = self.root_tenant(d, evil)
        self.assertEqual(t["name"], evil)  # --json: exact
        shown = "ev\\x1b]0;owned\\x07il\\x1b[2J\\x0dx"
        ps = subprocess.run([bin_path("gpuos"), "ps", "--socket", d.socket], env=d.env, capture_output=True,
                            timeout=30)
        self.assertEqual(ps.returncode, 0, ps.stderr)
        for c in (b"\x1b", b"\x07", b"\r"):
            self.assertNotIn(c, ps.stdout)
        self.assertIn(shown.encode(), ps.stdout)
        top = subprocess.run([bin_path("gpuos"), "top", "--once", "--interval", "0.2", "--socket", d.socket],
                             env=d.env, capture_output=True, timeout=30)
        self.assertEqual(top.returncode, 0, top.stderr)
        for c in (b"\x1b", b"\x07", b"\r"):
            self.assertNotIn(c, top.stdout)
        self.assertIn(shown[:11].encode() + b"~", top.stdout)  # NAME: 12 columns


def main():
    e2e.BUILD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
