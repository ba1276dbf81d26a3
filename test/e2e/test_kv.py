#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of KV pools (include/gpuos/kv.h, issue #24) on the driver test double.

gpuos-kv-probe tenants grow pools, fill every page with its number and check it at the end. The
simulated GPU has 1 GiB, so two tenants that want 640 + 512 MiB do not fit: gpuosd sets the one that
borrowed a target (its engine unmaps pages), or swaps its pool out when it ignores the target past
the deadline. No test asserts how fast anything happens; they wait for states, with ceilings for a
loaded machine.
Usage: test_kv.py BUILD_DIR [test-name ...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import test_e2e
from test_e2e import bin_path, spawn, start_daemon, wait_for

MIB = 1 << 20


def events(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class KvPools(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpuos-kv-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        cfg = os.path.join(self.dir, "gpuos.toml")
        with open(cfg, "w") as f:
            f.write('[memory]\nswap_pool = "2GiB"\nswap_quantum_ms = 1000\nswap_headroom = "64MiB"\n')
            # A tenant that frees its blocks gets a minute, so that a loaded machine cannot make it
            # miss the deadline; one that ignores its target is swapped out after 200 ms.
            # One that gives back slower than its deadline (a slow driver, below) gets 400 ms.
            deadline = 200 if "ignores" in self._testMethodName else 400 if "slower" in self._testMethodName else 60000
            f.write('[policy.swap]\nkv_deadline_ms = %d\n' % deadline)
        self.d = start_daemon(self, ["--config", cfg], daemon_env={"GPUOS_SIM_MEM_MIB": "1024"})

    def probe(self, name, run_flags, *args, env=None):
        """A probe whose events go to a file (self.events_of(p) reads them while it runs)."""
        cmd = self.d.run_cmd(["--name", name] + list(run_flags) + ["--", bin_path("gpuos-kv-probe")] + list(args))
        out = open(self.file(name + ".out"), "w")
        self.addCleanup(out.close)
        p = spawn(self, cmd, dict(self.d.env, **(env or {})), stdout=out)
        p.events_path = out.name
        return p

    def events_of(self, p):
        with open(p.events_path) as f:
            return events(f.read())

    def grown(self, p):
        """Waits until the probe mapped and filled its pool (its engine is then serving)."""
        return wait_for(lambda: [e for e in self.events_of(p) if e["event"] == "grown"], timeout=120,
                        what="the probe's pool to be grown and filled")

    def finish(self, p, name):
        try:
            _, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            self.fail("%s did not finish:\n%s" % (name, self.d.log_text()))
        return p.returncode, self.events_of(p), err

    def file(self, name):
        return os.path.join(self.dir, name)

    def touch(self, name):
        open(self.file(name), "w").close()

    def exited(self, pid):
        return wait_for(lambda: (lambda t: t if t and t["state"] == "exited" else None)(self.d.tenant(pid)),
                        what="tenant %d to exit" % pid)

    def test_a_pool_grows_is_shown_and_keeps_its_data(self):
        a = self.probe("kv-a", ["--mem", "512MiB"], "--grow-mib", "256", "--max-mib", "1024",
                       "--hold-until", self.file("stop"))
        t = wait_for(lambda: (lambda t: t if t and t.get("kv_resident_bytes") == 256 * MIB else None)(
            self.d.tenant(a.pid)), what="the pool in ps")
        self.assertEqual(t["kv_reserved_bytes"], 1024 * MIB)
        self.assertIsNone(t["kv_target_bytes"])
        self.assertGreaterEqual(t["mem_used_bytes"], 256 * MIB)  # pool pages count toward the quota
        self.assertEqual(self.d.metric("gpuos_tenant_kv_resident_bytes", tenant_id=t["id"]), [256.0 * MIB])
        self.touch("stop")
        rc, ev, err = self.finish(a, "a")
        self.assertEqual(rc, 0, err)
        self.assertTrue(ev[-1]["verified"])
        self.assertEqual(ev[0]["chunks_created"], 8)  # 256 MiB in chunks of 32 MiB: one batch
        self.assertEqual(ev[-1]["chunks_released"], 0)
        done = self.exited(a.pid)
        self.assertEqual(done["alloc_failures"], 0)

    def test_the_engines_slots_and_queue_are_shown(self):
        a = self.probe("kv-slots", [], "--grow-mib", "64", "--queue", "5", "--slots", "32/32",
                       "--hold-until", self.file("stop"))
        t = wait_for(lambda: (lambda t: t if t and t.get("engine_slots") else None)(self.d.tenant(a.pid)),
                     what="the engine's slots in ps")
        self.assertEqual(t["engine_slots"], {"active": 32, "capacity": 32, "waiting": 5})
        table = subprocess.run([bin_path("gpuos"), "ps", "--socket", self.d.socket], env=self.d.env,
                               capture_output=True, text=True, timeout=30, check=True).stdout
        header = next(line for line in table.splitlines() if line.startswith("ID"))
        row = next(line for line in table.splitlines() if "kv-slots" in line)
        self.assertIn("SLOTS", header)
        self.assertIn("32/32 +5", row)
        self.assertEqual(self.d.metric("gpuos_tenant_engine_slots_active", tenant_id=t["id"]), [32.0])
        self.assertEqual(self.d.metric("gpuos_tenant_engine_slots_capacity", tenant_id=t["id"]), [32.0])
        self.touch("stop")
        rc, _, err = self.finish(a, "a")
        self.assertEqual(rc, 0, err)

    def test_slots_that_cannot_be_are_refused(self):
        a = self.probe("kv-bad-slots", [], "--grow-mib", "64", "--slots", "33/32")
        rc, _, err = self.finish(a, "a")
        self.assertEqual(rc, 1)
        self.assertIn("slots: invalid", err)

    def test_the_quota_bounds_a_pool(self):
        a = self.probe("kv-quota", ["--mem", "128MiB"], "--grow-mib", "256")
        rc, ev, err = self.finish(a, "a")
        self.assertEqual(rc, 1)
        self.assertFalse(ev[0]["ok"])
        self.assertIn("out of memory", ev[0]["result"])
        self.assertEqual(ev[0]["resident_bytes"], 0)  # all or nothing
        self.assertTrue(ev[-1]["verified"])

    def test_outside_gpuos_there_is_no_pool(self):
        env = dict(self.d.env)
        env.pop("LD_PRELOAD", None)
        r = subprocess.run([bin_path("gpuos-kv-probe"), "--grow-mib", "64"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not running under gpuos", r.stderr)

    def test_a_pool_before_cuda_is_initialised_says_so(self):
        # The Python package in a tenant (issue #43): Pool() before cuInit names the cause, not
        # "invalid argument"; after cuInit the same call gets its pool.
        script = """
import ctypes, gpuos.kv as kv
try:
    kv.Pool(64 << 20)
except kv.NotInitialized as e:
    print("before:", e.text)
assert ctypes.CDLL("libcuda.so.1").cuInit(0) == 0
with kv.Pool(64 << 20) as pool:
    pool.map([0])
    print("after:", pool.stats().mapped_pages)
"""
        python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
        env = dict(self.d.env, PYTHONPATH=python_dir, PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run(self.d.run_cmd(["--name", "kv-python", "--", sys.executable, "-c", script]),
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertIn("before: CUDA is not initialised in this process", r.stdout)
        self.assertIn("after: 1", r.stdout)

    def test_misuse_of_the_api_gets_an_error_and_changes_nothing(self):
        r = subprocess.run(self.d.run_cmd(["--name", "kv-misuse", "--", bin_path("gpuos-kv-probe"), "--misuse"]),
                           env=self.d.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = events(r.stdout)[-1]
        invalid, version = "invalid argument", "gpuos in this process does not speak this KV ABI version"
        self.assertEqual(m["wrong_version"], version)
        for k in ("short_options", "page_below_granularity", "chunk_not_whole_pages", "no_such_device",
                  "null_options", "map_beyond_range", "map_null_pages", "unknown_pool", "stats_size_too_small",
                  "destroy_again"):
            self.assertEqual(m[k], invalid, k)
        for k in ("unmap_twice_in_one_batch", "unmap_not_mapped"):
            self.assertEqual(m[k], "page not mapped", k)
        self.assertEqual(m["map"], "ok")
        self.assertEqual(m["destroy"], "ok")
        self.assertEqual(m["mapped_pages_after"], 2)  # the failed calls changed nothing

    def borrower_and_requester(self, on_pressure, borrower_env=None):
        # a borrows (640 MiB on a 128 MiB guarantee) and holds; b's 512 MiB are within its own
        # guarantee but do not fit beside a's pool on the 1 GiB GPU.
        a = self.probe("kv-borrower", ["--mem", "128MiB", "--borrow", "1GiB"], "--grow-mib", "640",
                       "--on-pressure", on_pressure, "--hold-until", self.file("a-stop"), env=borrower_env)
        self.grown(a)
        b = self.probe("kv-requester", ["--mem", "512MiB"], "--grow-mib", "512")
        rc, bev, err = self.finish(b, "b")
        self.assertEqual(rc, 0, err + self.d.log_text())
        self.assertTrue(bev[0]["ok"])
        self.assertGreaterEqual(bev[0]["room_waits"], 1, "b should have waited for room")
        self.touch("a-stop")
        rc, aev, err = self.finish(a, "a")
        self.assertEqual(rc, 0, err + self.d.log_text())
        self.assertTrue(aev[-1]["verified"], "a's remaining pages lost their data")
        return aev, self.exited(a.pid), self.exited(b.pid)

    def test_a_borrower_that_frees_blocks_meets_its_target_without_a_swap(self):
        aev, ta, tb = self.borrower_and_requester("obey")
        targets = [e for e in aev if e["event"] == "target" and e["target_bytes"] >= 0]
        self.assertTrue(targets, "a was never given a target:\n" + self.d.log_text())
        self.assertEqual(targets[0]["deadline_ms"], 60000)
        shrunk = [e for e in aev if e["event"] == "shrunk"]
        self.assertTrue(shrunk and shrunk[0]["resident_bytes"] <= targets[0]["target_bytes"])
        self.assertEqual(ta["swap_outs"], 0, "a met its target: nothing should have been swapped")
        self.assertEqual(ta["alloc_failures"] + tb["alloc_failures"], 0)

    def test_a_borrower_that_gives_back_slower_than_its_deadline_is_not_swapped(self):
        # Each chunk's unmap takes 50 ms (the H200 took 3 ms per chunk beside a full GPU): a's one
        # batched unmap of 16 chunks (0.8 s) outlasts its 400 ms deadline, but gpuosd sees its pool
        # shrink chunk by chunk and waits (up to four deadlines) instead of swapping it out.
        aev, ta, tb = self.borrower_and_requester("obey", {"GPUOS_SIM_UNMAP_DELAY_US": "50000"})
        shrunk = [e for e in aev if e["event"] == "shrunk"]
        self.assertTrue(shrunk, "a did not shrink:\n" + self.d.log_text())
        self.assertGreater(shrunk[0]["ms"], 400, "the unmap was not slower than the deadline: the test shows nothing")
        self.assertEqual(ta["swap_outs"], 0, "a was giving back: nothing should have been swapped\n" + self.d.log_text())
        self.assertEqual(ta["alloc_failures"] + tb["alloc_failures"], 0)

    def test_a_borrower_that_ignores_its_target_loses_the_pages_by_swap(self):
        aev, ta, tb = self.borrower_and_requester("ignore")
        self.assertTrue([e for e in aev if e["event"] == "target"], "a was never given a target")
        self.assertFalse([e for e in aev if e["event"] == "shrunk"])
        self.assertGreaterEqual(ta["swap_outs"], 1, self.d.log_text())
        self.assertEqual(ta["swap_ins"], ta["swap_outs"])  # it came back, every byte (verified above)
        self.assertEqual(aev[-1]["resident_bytes"], 640 * MIB)


def main():
    test_e2e.BUILD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
