#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of what a user does by hand (issue #25), on the driver test double.

- README "Try it without a GPU": its commands, run as written (`--simulate` on daemon and run),
  register two tenants on the simulated device.
- `gpuos run --space D` asks gpuosd, which owns the config, not a config file of the client's.
- An admin's hold (`gpuos gate ID close`) outlives a gpuosd killed with SIGKILL.

Daemons, tenants, sockets and simulated-GPU segments are private to each test and removed after it.
Usage: test_by_hand.py BUILD_DIR [test-name ...]
"""
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import test_e2e
from test_e2e import Daemon, bin_path, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def readme_commands():
    """The commands of README.md's "Try it without a GPU" section (its sh blocks), as argument lists."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text.split("## Try it without a GPU", 1)[1].split("\n## ", 1)[0]
    cmds = []
    for block in section.split("```sh\n")[1:]:
        for line in block.split("```", 1)[0].splitlines():
            for command in line.split("#", 1)[0].split(";"):
                args = shlex.split(command)
                if args and args[-1] == "&":
                    args.pop()
                if args:
                    cmds.append(args)
    return cmds


def in_build(args):
    """A README command (paths relative to the repository root, build/ the build tree) for BUILD."""
    return [os.path.join(test_e2e.BUILD, a[len("build/"):]) if a.startswith("build/") else a for a in args]


def clean_env():
    """The caller's environment without anything that would select the double or a daemon for us."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUOS_", "CUDA_MPS_"))}
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("LD_PRELOAD", None)
    return env


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def unlink_segments(prefix):
    for path in glob.glob("/dev/shm" + prefix + "*"):
        try:
            os.unlink(path)
        except OSError:
            pass


class ReadmeByHand(unittest.TestCase):
    """The README's commands, as a newcomer types them, on the simulated device."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpuos-byhand-")
        self.env = clean_env()
        # Only where the commands meet the machine: a private socket, simulated GPU and no metrics
        # port (the README's daemon would take the default one).
        cfg = os.path.join(self.dir, "gpuos.toml")
        with open(cfg, "w") as f:
            f.write('[metrics]\nlisten = ""\n')
        self.env.update({"GPUOS_SOCKET": os.path.join(self.dir, "gpuosd.sock"), "GPUOS_CONFIG": cfg,
                         "GPUOS_SIM_SHM": "/gpuos-byhand-%d" % os.getpid()})
        self.procs = []

    def tearDown(self):
        for p in self.procs[1:]:
            stop(p, signal.SIGKILL)
        if self.procs:
            stop(self.procs[0])  # gpuosd last
        for p in self.procs:
            if p.stdout:
                p.stdout.close()
        unlink_segments(self.env["GPUOS_SIM_SHM"])
        shutil.rmtree(self.dir, ignore_errors=True)

    def ps_json(self):
        r = subprocess.run([bin_path("gpuos"), "ps", "--json"], env=self.env, capture_output=True, text=True,
                           timeout=20)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def test_the_readme_commands_run_two_tenants_on_the_simulated_device(self):
        cmds = readme_commands()
        daemon = [c for c in cmds if c[:2] == ["build/bin/gpuos", "daemon"]]
        runs = [c for c in cmds if c[:2] == ["build/bin/gpuos", "run"]]
        ps = [c for c in cmds if c[:2] == ["build/bin/gpuos", "ps"]]
        self.assertEqual(len(daemon), 1, cmds)
        self.assertEqual(len(runs), 2, cmds)
        self.assertEqual(len(ps), 1, cmds)
        self.assertIn("--simulate", daemon[0])
        for r in runs:
            self.assertIn("--simulate", r)

        log = open(os.path.join(self.dir, "gpuosd.log"), "w+")
        self.procs.append(subprocess.Popen(in_build(daemon[0]), env=self.env, stdout=log, stderr=subprocess.STDOUT))
        listing = wait_for(lambda: self.procs[0].poll() is None and self.ps_json(), timeout=30,
                           what="gpuosd to answer")
        self.assertEqual(len(listing["gpus"]), 1, listing)  # one simulated GPU, found through the double
        for r in runs:
            self.procs.append(subprocess.Popen(in_build(r), env=self.env, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True))

        def both_registered():
            live = {t["name"]: t for t in (self.ps_json() or {"tenants": []})["tenants"] if t["state"] != "exited"}
            return live if {"hp", "be"} <= set(live) else None
        live = wait_for(both_registered, timeout=60, what="both tenants to register")
        self.assertEqual(live["hp"]["class"], "guaranteed")
        self.assertEqual(live["be"]["class"], "best-effort")
        self.assertEqual({live["hp"]["pid"], live["be"]["pid"]}, {p.pid for p in self.procs[1:]})
        # They run on the simulated GPU: launches counted while they run.
        wait_for(lambda: (lambda live: live and all(t["launches"] > 0 for t in live.values()))(both_registered()),
                 timeout=60, what="both tenants to launch kernels")

        table = subprocess.run(in_build(ps[0]), env=self.env, capture_output=True, text=True, timeout=20)
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertRegex(table.stdout, r"(?m)^GPU 0: ")
        names = [line.split()[2] for line in table.stdout.splitlines() if re.match(r"^\d+ ", line)]
        self.assertEqual(sorted(names), ["be", "hp"], table.stdout)
        log.close()

    def test_simulate_without_the_double_says_what_is_missing(self):
        # An installation without the double: gpuos alone in a bin/ directory.
        bindir = os.path.join(self.dir, "bin")
        os.makedirs(bindir)
        shutil.copy(bin_path("gpuos"), bindir)
        cli = os.path.join(bindir, "gpuos")
        for args in (["daemon", "--simulate", "2"], ["run", "--simulate", "--", "true"]):
            env = dict(self.env, GPUOS_PRELOAD=os.path.join(test_e2e.BUILD, "lib", "libgpuos.so"))
            r = subprocess.run([cli] + args, env=env, capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--simulate: the simulated device (the driver test double ", r.stderr)
            self.assertIn("lib/driver_double/libcuda.so.1) is not there", r.stderr)
        bad = subprocess.run([bin_path("gpuos"), "daemon", "--simulate", "17"], env=self.env, capture_output=True,
                             text=True, timeout=20)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--simulate", bad.stderr)


class SpaceAsksTheDaemon(unittest.TestCase):
    """`gpuos run --space D` with no config of its own: gpuosd, which has the domain, answers."""

    def setUp(self):
        self.cfg_dir = tempfile.mkdtemp(prefix="gsq-")
        self.cfg = os.path.join(self.cfg_dir, "gpuos.toml")
        self.mps = os.path.join(self.cfg_dir, "mps")  # not derivable from the socket: only gpuosd knows it
        with open(self.cfg, "w") as f:
            f.write('[spatial]\nmps_control = "%s"\nmps_dir = "%s"\n[[spatial.domain]]\nname = "serve"\n'
                    % (os.path.join(HERE, "fake_mps_control.sh"), self.mps))
        self.d = Daemon(["--config", self.cfg])
        self.d.env.pop("GPUOS_CONFIG", None)
        status = os.path.join(self.mps, "serve", "status")

        def available():
            try:
                with open(status) as f:
                    return f.read().strip() == "available"
            except OSError:
                return False
        wait_for(available, what="the domain's MPS control daemon")

    def tearDown(self):
        self.d.stop()
        shutil.rmtree(self.cfg_dir, ignore_errors=True)

    def run_env(self, space, env=None):
        return subprocess.run(self.d.run_cmd(["--space", space, "--", "env"]), env=env or self.d.env,
                              capture_output=True, text=True, timeout=20)

    def test_the_client_needs_no_config_of_its_own(self):
        self.assertNotIn("GPUOS_CONFIG", self.d.env)
        r = self.run_env("serve")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")  # known, open to us, its control daemon up: nothing to warn about
        env = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        self.assertEqual(env["CUDA_MPS_PIPE_DIRECTORY"], os.path.join(self.mps, "serve", "pipe"))
        self.assertEqual(env["CUDA_MPS_LOG_DIRECTORY"], os.path.join(self.mps, "serve", "log"))
        self.assertEqual(env["GPUOS_SPACE_DOMAIN"], "serve")

    def test_a_client_config_that_disagrees_does_not_decide(self):
        other = os.path.join(self.cfg_dir, "client.toml")
        with open(other, "w") as f:
            f.write('[[spatial.domain]]\nname = "elsewhere"\n')
        r = self.run_env("serve", dict(self.d.env, GPUOS_CONFIG=other))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("CUDA_MPS_PIPE_DIRECTORY=" + os.path.join(self.mps, "serve", "pipe"), r.stdout)
        bad = self.run_env("elsewhere", dict(self.d.env, GPUOS_CONFIG=other))
        self.assertEqual(bad.returncode, 2)
        self.assertIn("gpuos run: --space elsewhere: no such trust domain in gpuosd's config (known: serve)",
                      bad.stderr)

    def test_a_tenant_placed_through_the_answer_joins_the_domain(self):
        p = subprocess.run(self.d.run_cmd(["--space", "serve", "--class", "guaranteed", "--name", "hp", "--",
                                           bin_path("gpuos-space-probe"), "--ms", "50"]),
                           env=self.d.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr + self.d.log_text())
        t = wait_for(lambda: [x for x in self.d.ps()["tenants"] if x["name"] == "hp" and x["state"] == "exited"],
                     what="the tenant to exit")[0]
        self.assertEqual(t["space_domain"], "serve")  # admitted to the domain (a refused one is "")
        self.assertNotIn("time-shared", self.d.log_text())


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def sample(text, name, tenant_id):
    for line in text.splitlines():
        m = re.match(r'^%s\{([^}]*)\} (\S+)$' % re.escape(name), line)
        if m and ('tenant_id="%d"' % tenant_id) in m.group(1):
            return float(m.group(2))
    return None


class AdminHold(unittest.TestCase):
    """`gpuos gate ID close` is gpuosd's state: it outlives a gpuosd killed with SIGKILL."""

    def setUp(self):
        self.d = Daemon()

    def tearDown(self):
        self.d.stop()

    def port(self):
        ports = re.findall(r"metrics on http://\S+ \(port (\d+)\)", self.d.log_text())
        return int(ports[-1])  # the daemon started last

    def test_an_admin_hold_outlives_the_daemon(self):
        flag = os.path.join(self.d.dir, "go")
        p = subprocess.Popen(self.d.run_cmd(["--name", "held", "--", bin_path("gpuos-interpose-probe"),
                                             "--launches", "3", "--wait-file", flag]),
                             env=self.d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            t = wait_for(lambda: self.d.tenant(p.pid), what="registration")
            self.assertEqual(t["gated_by"], None)
            gate = [bin_path("gpuos"), "gate", str(t["id"]), "close", "--socket", self.d.socket]
            subprocess.run(gate, env=self.d.env, check=True, capture_output=True)
            t = self.d.tenant(p.pid)
            self.assertEqual((t["state"], t["gated_by"]), ("gated", "admin"))
            table = subprocess.run([bin_path("gpuos"), "ps", "--socket", self.d.socket], env=self.d.env,
                                   capture_output=True, text=True, timeout=20).stdout
            self.assertRegex(table, r"(?m)^%d +%d +held +\S+ +held " % (t["id"], p.pid))

            self.d.proc.kill()  # gpuosd dies without any cleanup
            self.d.proc.wait()
            self.d.start()      # a new one on the same socket and directory (its tenant ledger)
            again = wait_for(lambda: (lambda x: x if x and x["gated_by"] == "admin" else None)(self.d.tenant(p.pid)),
                             timeout=20, what="the tenant to re-register, held again")
            self.assertEqual(again["id"], t["id"])
            self.assertEqual(again["state"], "gated")

            open(flag, "w").close()  # the tenant launches now: it waits at the gate the new gpuosd holds
            port = self.port()
            wait_for(lambda: sample(scrape(port), "gpuos_tenant_waiting", t["id"]) == 1.0, timeout=20,
                     what="the tenant to wait at its held gate")
            self.assertEqual(sample(scrape(port), "gpuos_tenant_held", t["id"]), 1.0)
            self.assertIsNone(p.poll(), "the held tenant finished")

            gate[-3] = "open"
            subprocess.run(gate, env=self.d.env, check=True, capture_output=True)
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            issued = json.loads(out.strip().splitlines()[-1])
            done = wait_for(lambda: (lambda x: x if x and x["state"] == "exited" else None)(self.d.tenant(p.pid)),
                            what="the tenant to exit")
            self.assertEqual(done["launches"], issued["launches"])
            self.assertGreaterEqual(done["gate_waits"], 1)
            self.assertEqual(done["gated_by"], None)
        finally:
            stop(p, signal.SIGKILL)


def main():
    test_e2e.BUILD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
