#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Operations tests: gpuosd's Prometheus endpoint (also scraped by a real Prometheus), `gpuos top`
in a terminal (tmux), the packaged config and systemd unit, and `cmake --install`.

Uses the e2e harness (test_e2e.Daemon: gpuosd on the driver test double). Stdlib only.
Usage: test_ops.py BUILD_DIR [test-name ...]   ($CMAKE_COMMAND: cmake for the install test)
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e2e  # noqa: E402
from test_e2e import bin_path, spawn, start_daemon, wait_for  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def http(port, request, read_timeout=5.0):
    """Sends raw request bytes; returns (status, headers dict, body bytes); status None if no reply."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        if request:
            s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    if not data:
        return None, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


def scrape(port):
    status, headers, body = http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200, status
    return headers, body.decode()


def parse_metrics(text):
    """{(name, frozenset(labels.items())): float}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "bad sample line: " + line
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(4))
    return out


def series(metrics, name, **labels):
    return [v for (n, ls), v in metrics.items() if n == name and all((k, str(x)) in ls for k, x in labels.items())]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class HoldingTenant:
    """gpuos-interpose-probe under `gpuos run`: issues its launches, then stays alive (--hold-ms)."""

    def __init__(self, test, d, name="held", hold_ms=120000):
        self.d = d
        self.p = spawn(test, d.run_cmd(["--name", name, "--class", "guaranteed", "--",
                                        bin_path("gpuos-interpose-probe"), "--launches", "3",
                                        "--graph-replays", "2", "--hold-ms", str(hold_ms)]), d.env, text=False)
        # Live, and its counters settled (the probe prints its JSON line before holding).
        self.t = wait_for(lambda: (lambda t: t if t and t["launches"] >= 12 and t["graph_launches"] >= 2 else None)(
            d.tenant(self.p.pid)), what="the probe's launches")
        time.sleep(0.2)
        self.t = d.tenant(self.p.pid)

    def stop(self):
        self.p.kill()
        self.p.communicate()


class MetricsEndpoint(unittest.TestCase):
    def setUp(self):
        self.d = start_daemon(self)
        self.port = self.d.metrics_port()
        self.assertIsNotNone(self.port, self.d.log_text())

    def test_series_of_a_live_tenant_match_ps(self):
        h = HoldingTenant(self, self.d)
        try:
            headers, text = scrape(self.port)
            self.assertEqual(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8")
            self.assertEqual(int(headers["content-length"]), len(text.encode()))
            m = parse_metrics(text)
            t = self.d.tenant(h.p.pid)
            lab = {"tenant_id": t["id"], "tenant": "held", "class": "guaranteed", "pid": t["pid"]}
            for name, key in [("gpuos_tenant_launches_total", "launches"),
                              ("gpuos_tenant_graph_launches_total", "graph_launches"),
                              ("gpuos_tenant_captured_launches_total", "captured_launches"),
                              ("gpuos_tenant_gate_waits_total", "gate_waits"),
                              ("gpuos_tenant_memory_used_bytes", "mem_used_bytes"),
                              ("gpuos_tenant_memory_peak_bytes", "mem_peak_bytes"),
                              ("gpuos_tenant_memory_quota_bytes", "mem_quota_bytes"),
                              ("gpuos_tenant_alloc_calls_total", "alloc_calls")]:
                self.assertEqual(series(m, name, **lab), [float(t[key])], name)
            self.assertEqual(series(m, "gpuos_tenant_gate_wait_seconds_total", **lab), [t["gate_wait_ns"] / 1e9])
            self.assertEqual(series(m, "gpuos_tenant_info", **lab), [1.0])
            self.assertEqual(series(m, "gpuos_tenant_gated", **lab), [0.0])
            self.assertEqual(len(series(m, "gpuos_tenant_busy", **lab)), 1)
            self.assertEqual(len(series(m, "gpuos_tenant_busy_seconds_total", **lab)), 1)
            self.assertEqual(len(series(m, "gpuos_tenant_gate_wait_duration_seconds_bucket", **lab)), 6)
            self.assertEqual(series(m, "gpuos_daemon_up"), [1.0])
            self.assertEqual(series(m, "gpuos_daemon_tenants"), [1.0])
            self.assertGreaterEqual(series(m, "gpuos_daemon_messages_total", type="register")[0], 1)
            ps = self.d.ps()
            g = ps["gpus"][0]
            self.assertEqual(series(m, "gpuos_gpu_memory_total_bytes", gpu=0), [float(g["total_mem_bytes"])])
            self.assertEqual(series(m, "gpuos_gpu_memory_used_bytes", gpu=0), [float(g["used_mem_bytes"])])
            self.assertEqual(series(m, "gpuos_gpu_streaming_multiprocessors", gpu=0), [float(g["sm_count"])])
            self.assertEqual(series(m, "gpuos_gpu_sm_count", gpu=0), [])  # removed in 0.2.0
            for fam in set(n for n, _ in m):
                base = re.sub(r"_(bucket|sum|count)$", "", fam)
                self.assertIn("# TYPE %s " % (fam if "# TYPE %s " % fam in text else base), text)
            promtool = shutil.which("promtool")
            if promtool:
                r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
                problems = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
                self.assertEqual(problems, [], r.stdout + r.stderr)
        finally:
            h.stop()
        wait_for(lambda: series(parse_metrics(scrape(self.port)[1]), "gpuos_daemon_tenants_exited_total") == [1.0],
                 what="the exit to be counted")
        self.assertEqual(series(parse_metrics(scrape(self.port)[1]), "gpuos_tenant_info"), [])

    def test_busy_time_of_a_working_tenant_is_counted(self):
        # Busy time is sampled (activity events and 100 ms ticks): a tenant whose work all falls
        # between two looks shows none, so this one keeps the GPU busy until it is killed.
        p = spawn(self, self.d.run_cmd(["--name", "worker", "--", bin_path("gpuos-synth"), "--name", "worker",
                                        "--iters", "2000000", "--count", "100000000", "--warmup", "0"]),
                  self.d.env)
        t = wait_for(lambda: self.d.tenant(p.pid), what="registration")
        busy = lambda: series(parse_metrics(scrape(self.port)[1]), "gpuos_tenant_busy_seconds_total", tenant_id=t["id"])
        wait_for(lambda: busy() and busy()[0] > 0, what="busy time to be counted")

    def test_gate_wait_histogram_and_gauges_follow_a_closed_gate(self):
        flag = os.path.join(self.d.dir, "go")
        p = spawn(self, self.d.run_cmd(["--name", "gated", "--", bin_path("gpuos-interpose-probe"),
                                        "--launches", "2", "--wait-file", flag, "--hold-ms", "120000"]),
                  self.d.env, text=False)
        try:
            t = wait_for(lambda: self.d.tenant(p.pid), what="registration")
            gate = [bin_path("gpuos"), "gate", str(t["id"]), "close", "--socket", self.d.socket]
            subprocess.run(gate, env=self.d.env, check=True, capture_output=True)
            open(flag, "w").close()
            lab = {"tenant_id": t["id"]}
            m = wait_for(lambda: (lambda m: m if series(m, "gpuos_tenant_waiting", **lab) == [1.0] else None)(
                parse_metrics(scrape(self.port)[1])), what="the tenant to wait at the gate")
            self.assertEqual(series(m, "gpuos_tenant_gated", **lab), [1.0])
            time.sleep(0.3)
            # Blocked the whole time: no wait has ended, but the one in progress shows (issue #25),
            # at least as long as the sleep since gpuosd saw it begin.
            m = parse_metrics(scrape(self.port)[1])
            self.assertEqual(series(m, "gpuos_tenant_gate_wait_seconds_total", **lab), [0.0])
            self.assertGreaterEqual(series(m, "gpuos_tenant_gate_waiting_seconds", **lab)[0], 0.3)
            self.assertGreaterEqual(self.d.tenant(p.pid)["gate_waiting_ms"], 300)
            gate[3] = "open"
            subprocess.run(gate, env=self.d.env, check=True, capture_output=True)
            m = wait_for(lambda: (lambda m: m if series(m, "gpuos_tenant_launches_total", **lab) == [8.0] else None)(
                parse_metrics(scrape(self.port)[1])), what="the launches after the gate opened")
            self.assertEqual(series(m, "gpuos_tenant_gated", **lab), [0.0])
            self.assertEqual(series(m, "gpuos_tenant_waiting", **lab), [0.0])
            self.assertEqual(series(m, "gpuos_tenant_gate_waiting_seconds", **lab), [0.0])
            self.assertEqual(series(m, "gpuos_tenant_gate_waits_total", **lab), [1.0])
            waited = series(m, "gpuos_tenant_gate_wait_seconds_total", **lab)[0]
            self.assertGreaterEqual(waited, 0.3)
            b = lambda le: series(m, "gpuos_tenant_gate_wait_duration_seconds_bucket", le=le, **lab)
            self.assertEqual(b("0.1"), [0.0])
            self.assertEqual(b("1" if waited <= 1 else "+Inf"), [1.0])
            self.assertEqual(series(m, "gpuos_tenant_gate_wait_duration_seconds_count", **lab), [1.0])
            self.assertEqual(series(m, "gpuos_tenant_gate_wait_duration_seconds_sum", **lab), [waited])
            self.assertEqual(series(m, "gpuos_daemon_messages_total", type="set_gate"), [2.0])
        finally:
            p.kill()
            p.communicate()

    def test_http_edge_cases_never_block_or_crash_the_daemon(self):
        p = self.port
        self.assertEqual(http(p, b"GET /nope HTTP/1.1\r\n\r\n")[0], 404)
        self.assertEqual(http(p, b"GET / HTTP/1.0\r\n\r\n")[0], 404)
        self.assertEqual(http(p, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")[0], 405)
        st, hd, body = http(p, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        self.assertEqual((st, body), (200, b""))
        self.assertEqual(http(p, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")[0], 200)
        self.assertEqual(http(p, b"garbage\r\n\r\n")[0], 400)
        self.assertEqual(http(p, b"\x00\xff\x01binary\n\n")[0], 400)
        self.assertEqual(http(p, b"GET /metrics HTTP/2.0\r\n\r\n")[0], 400)
        self.assertEqual(http(p, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000)[0], 431)
        # A whole head over 8 KiB is refused too (it was served when it arrived in one go), one
        # just under is served (issue #43).
        self.assertEqual(http(p, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 12000 + b"\r\n\r\n")[0], 431)
        self.assertEqual(http(p, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 8000 + b"\r\n\r\n")[0], 200)
        # Slow and silent clients: many idle connections, one that sent half a request, one that
        # sends a request but never reads; the daemon keeps serving the control socket and metrics.
        idle = [socket.create_connection(("127.0.0.1", p)) for _ in range(40)]  # > the 32 allowed
        half = socket.create_connection(("127.0.0.1", p))
        half.sendall(b"GET /metr")
        noread = socket.create_connection(("127.0.0.1", p))
        noread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(3):
            noread.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        # Order, not speed: the control socket answers while the half-request client is still open,
        # i.e. before gpuosd's 5 s deadline for it (a daemon blocked on that client would answer
        # only once it had dropped it).
        self.assertIsNotNone(self.d.ps())
        self.assertFalse(self._closed(half), "gpuosd answered only after dropping the silent client")
        self.assertTrue(self._scrape_ok())  # over the limit, the oldest connections are dropped
        # Every silent client is closed by the daemon within its 5 s deadline.
        wait_for(lambda: self._closed(half), what="the half-request client to be closed")
        for s in idle + [half, noread]:
            s.close()
        self.assertIsNone(self.d.proc.poll(), "gpuosd died")
        m = parse_metrics(scrape(p)[1])
        self.assertGreaterEqual(series(m, "gpuos_daemon_metrics_scrapes_total")[0], 2)

    @staticmethod
    def _closed(s):
        import select
        if not select.select([s], [], [], 0)[0]:
            return False
        try:
            return s.recv(1, socket.MSG_PEEK) == b""
        except ConnectionResetError:  # closed with our unread bytes pending: a reset
            return True

    def _scrape_ok(self):
        try:
            return http(self.port, b"GET /metrics HTTP/1.0\r\n\r\n", read_timeout=10)[0] == 200
        except OSError:
            return False

    def test_disabled_and_bad_address(self):
        d = start_daemon(self, ["--metrics-listen", ""])
        self.assertIsNone(d.metrics_port())
        self.assertNotIn("metrics", d.log_text())
        d.stop()
        r = subprocess.run([bin_path("gpuosd"), "--socket", "/tmp/unused.sock", "--metrics-listen", "nowhere:1"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a numeric IPv4 address", r.stderr)
        # Port taken: logged, and the daemon runs on without metrics.
        d = start_daemon(self, ["--metrics-listen", "127.0.0.1:%d" % self.port])
        self.assertIsNone(d.metrics_port())
        self.assertIn("cannot listen on", d.log_text())
        self.assertIsNotNone(d.ps())


class PrometheusScrape(unittest.TestCase):
    """A real Prometheus scrapes gpuosd; its query API reports what `gpuos ps` reports."""

    def test_prometheus_sees_the_tenant(self):
        prom = "/usr/bin/prometheus"
        if not os.access(prom, os.X_OK):
            self.skipTest("/usr/bin/prometheus is absent (Debian package `prometheus`; .ci/run installs it)")
        d = start_daemon(self)
        tmp = tempfile.mkdtemp(prefix="gpuos-prom-")
        proc = None
        h = None
        try:
            h = HoldingTenant(self, d, name="prom-tenant")
            web = free_port()
            cfg = os.path.join(tmp, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        "scrape_configs:\n  - job_name: gpuos\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % d.metrics_port())
            log = open(os.path.join(tmp, "prometheus.log"), "w+")
            proc = subprocess.Popen([prom, "--config.file", cfg, "--storage.tsdb.path", os.path.join(tmp, "data"),
                                     "--web.listen-address", "127.0.0.1:%d" % web],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=tmp)

            def query(q):
                url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (web, urllib.parse.quote(q))
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        j = json.load(r)
                except OSError:
                    return None
                return j["data"]["result"] if j.get("status") == "success" else None

            def tenant_series():
                res = query("gpuos_tenant_launches_total")
                return [s for s in res or [] if s["metric"].get("pid") == str(h.p.pid)]

            def fail(what):
                log.seek(0)
                return what + "\nprometheus log:\n" + log.read()[-3000:]

            try:
                got = wait_for(tenant_series, timeout=60, what="Prometheus to scrape the tenant's series")
            except AssertionError:
                raise AssertionError(fail("no series"))
            t = d.tenant(h.p.pid)
            self.assertEqual(len(got), 1, got)
            s = got[0]
            self.assertEqual(s["metric"]["tenant_id"], str(t["id"]))
            self.assertEqual(s["metric"]["tenant"], t["name"])
            self.assertEqual(s["metric"]["class"], t["class"])
            self.assertEqual(s["metric"]["job"], "gpuos")
            self.assertEqual(float(s["value"][1]), float(t["launches"]))
            up = query('up{job="gpuos"}')
            self.assertEqual(float(up[0]["value"][1]), 1.0, fail("target not up"))
            mem = query('gpuos_tenant_memory_peak_bytes{pid="%d"}' % h.p.pid)
            self.assertEqual(float(mem[0]["value"][1]), float(t["mem_peak_bytes"]))
            hist = query('gpuos_tenant_gate_wait_duration_seconds_bucket{pid="%d"}' % h.p.pid)
            self.assertEqual(len(hist), 6)
        finally:
            if h:
                h.stop()
            if proc:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                log.close()
            d.stop()
            shutil.rmtree(tmp, ignore_errors=True)


class TopInTmux(unittest.TestCase):
    """`gpuos top` in a real terminal: draws, refreshes, quits on q and on Ctrl-C, restores the tty."""

    def setUp(self):
        self.tmux = shutil.which("tmux")
        if not self.tmux:
            self.skipTest("tmux is absent (Debian package `tmux`; .ci/run installs it)")
        self.d = start_daemon(self)
        self.sock_name = "gpuos-top-test-%d" % os.getpid()
        # Last: the server's socket file, which kill-server leaves behind.
        sock_path = os.path.join(os.environ.get("TMUX_TMPDIR") or "/tmp", "tmux-%d" % os.getuid(), self.sock_name)
        self.addCleanup(lambda: os.path.exists(sock_path) and os.unlink(sock_path))
        self.addCleanup(subprocess.run, [self.tmux, "-L", self.sock_name, "kill-server"], capture_output=True)
        self.synth = spawn(self, self.d.run_cmd(["--name", "topsynth", "--", bin_path("gpuos-synth"), "--name",
                                                 "topsynth", "--iters", "2000000", "--count", "10000000",
                                                 "--warmup", "0"]),
                           self.d.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: (self.d.tenant(self.synth.pid) or {}).get("launches", 0) > 5, what="synth to run")

    def t(self, *args):
        r = subprocess.run([self.tmux, "-L", self.sock_name] + list(args), capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def screen(self):
        return self.t("capture-pane", "-p", "-t", "ops")

    def flags(self):
        alt, cursor = self.t("display-message", "-p", "-t", "ops", "#{alternate_on} #{cursor_flag}").split()
        return alt == "1", cursor == "1"

    def test_top_draws_refreshes_and_restores_the_terminal(self):
        top = "%s top --interval 0.5 --socket %s" % (bin_path("gpuos"), self.d.socket)
        stty = "stty -a | tr ' ;' '\\n\\n' | grep -x -E -- '-?(icanon|echo)' | tr '\\n' ' '"
        # Between the runs the shell waits for a line (typed below): the terminal must be usable again.
        script = ("trap : INT; echo BEFORE-TOP; {top}; echo TOP1-EXIT=$?; {stty}; echo; read -r line; "
                  "echo GOT-$line; {top}; echo TOP2-EXIT=$?; {stty}; echo; sleep 60").format(top=top, stty=stty)
        self.t("-f", "/dev/null", "new-session", "-d", "-s", "ops", "-x", "160", "-y", "40", "bash", "-c", script)
        # ID PID NAME CLASS STATE GPU% MEM LAUNCH/s: the launch rate is the group.
        row = re.compile(r"^\s*\d+\s+%d\s+topsynth\s+best-effort\s+running\s+\S+\s+\S+ \S+\s+(\S+)" % self.synth.pid,
                         re.M)

        def frame_with_rate():
            s = self.screen()
            m = row.search(s)
            return s if m and m.group(1) not in ("-", "0.0") and "LAUNCH/s" in s else None

        s1 = wait_for(frame_with_rate, what="top to show the tenant with a launch rate")
        self.assertIn("WAIT%", s1)
        self.assertIn("GPU 0", s1)
        self.assertNotIn("BEFORE-TOP", s1)  # alternate screen
        self.assertEqual(self.flags(), (True, False))  # alternate screen on, cursor hidden
        clock1 = re.search(r"gpuos top - (\d\d:\d\d:\d\d)", s1).group(1)
        wait_for(lambda: re.search(r"gpuos top - (\d\d:\d\d:\d\d)", self.screen()).group(1) != clock1,
                 what="the frame to refresh")
        self.t("send-keys", "-t", "ops", "q")
        after = lambda tag: lambda: re.search(tag + r"=(\d+)\n(.*icanon.*)\n", self.screen())
        try:
            m = wait_for(after("TOP1-EXIT"), what="top to exit on q")
        except AssertionError:
            raise AssertionError("top did not exit on q; screen:\n" + self.screen())
        self.assertEqual(m.group(1), "0")
        self.assertEqual(sorted(m.group(2).split()), ["echo", "icanon"])  # the tty modes are back
        self.assertIn("BEFORE-TOP", self.screen())  # the main screen is back
        # Second run: Ctrl-C.
        self.t("send-keys", "-t", "ops", "again", "Enter")
        wait_for(lambda: row.search(self.screen()), what="top again")
        self.assertEqual(self.flags(), (True, False))
        self.t("send-keys", "-t", "ops", "C-c")
        m = wait_for(after("TOP2-EXIT"), what="top to exit on Ctrl-C")
        self.assertEqual(m.group(1), "0")
        self.assertEqual(sorted(m.group(2).split()), ["echo", "icanon"])
        self.assertEqual(self.flags(), (False, True))  # main screen, cursor visible
        self.assertIn("GOT-again", self.screen())  # the line typed between the runs was read (and echoed)

    def test_once_prints_one_plain_frame(self):
        r = subprocess.run([bin_path("gpuos"), "top", "--once", "--interval", "0.3", "--socket", self.d.socket],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\x1b", r.stdout)
        self.assertRegex(r.stdout, r"\n\s*\d+\s+%d\s+topsynth\s+best-effort\s+running\s+\S+\s+\d" % self.synth.pid)
        r = subprocess.run([bin_path("gpuos"), "top", "--once", "--socket", self.d.socket + ".none"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no gpuosd answering", r.stderr)

    def test_top_fits_100_columns_with_gpu_use_and_memory_per_tenant(self):
        """Issue #57: in a 100x30 terminal, with two tenants, every column shows (the header's last,
        BUDGET, too) and each tenant has its GPU use (the usage check's, through the NVML stand-in)
        and its memory; the plain frame (--once, not clipped by a terminal) fits too."""
        guard = spawn(self, self.d.run_cmd(["--name", "topguard", "--class", "guaranteed", "--",
                                            bin_path("gpuos-synth"), "--name", "topguard", "--mem-mib", "64",
                                            "--count", "10000000", "--gap-us", "2000", "--warmup", "0"]),
                      self.d.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tenants = ((self.synth.pid, "topsynth", "best-effort"), (guard.pid, "topguard", "guaranteed"))
        # Both measured by the usage check before top looks (no claim on how soon).
        wait_for(lambda: all((self.d.tenant(pid) or {}).get("gpu_seconds", 0) > 0 for pid, _, _ in tenants)
                 and (self.d.tenant(guard.pid) or {}).get("mem_used_bytes", 0) >= 64 << 20,
                 what="both tenants' GPU time (NVML stand-in) and topguard's 64 MiB")
        self.t("-f", "/dev/null", "new-session", "-d", "-s", "ops", "-x", "100", "-y", "30", "bash", "-c",
               "%s top --interval 0.3 --socket %s; sleep 60" % (bin_path("gpuos"), self.d.socket))
        self.assertEqual(self.t("display-message", "-p", "-t", "ops", "#{pane_width}x#{pane_height}").strip(),
                         "100x30")
        header = re.compile(r"^\s*ID\s+PID\s+NAME\s+CLASS\s+STATE\s+GPU%\s+MEM\s+LAUNCH/s\s+WAIT%\s+SMS\s+BUDGET$",
                            re.M)
        # ID PID NAME CLASS STATE GPU% MEM (a number and a unit) LAUNCH/s WAIT% SMS BUDGET
        rows = [re.compile(r"^\s*\d+\s+%d\s+%s\s+%s\s+\S+\s+(\S+)\s+([\d.]+ \S*B)\s+\S+\s+\S+\s+\S+\s+\S+$"
                           % (pid, name, cls), re.M) for pid, name, cls in tenants]

        def frame():
            s = self.screen()
            found = [r.search(s) for r in rows]
            return (s, found) if header.search(s) and all(m and m.group(1) != "-" for m in found) else None

        screen, (synth_row, guard_row) = wait_for(frame, what="top to show both tenants with GPU% and MEM")
        for line in screen.splitlines():
            self.assertLessEqual(len(line), 100, line)
        self.assertRegex(synth_row.group(1), r"^\d+$")
        self.assertRegex(guard_row.group(1), r"^\d+$")
        self.assertTrue(guard_row.group(2).endswith("MiB"), guard_row.group(2))
        self.assertGreaterEqual(float(guard_row.group(2).split()[0]), 64.0)
        self.t("send-keys", "-t", "ops", "q")
        # The plain frame is not clipped by any terminal: it fits by itself.
        r = subprocess.run([bin_path("gpuos"), "top", "--once", "--interval", "0.3", "--socket", self.d.socket],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        for line in r.stdout.splitlines():
            self.assertLessEqual(len(line), 100, line)
        self.assertRegex(r.stdout, header)


def install_table_paths():
    """The paths of docs/OPERATIONS.md's table of what `cmake --install` puts (first cells)."""
    paths, inside = [], False
    for line in open(os.path.join(SOURCE, "docs", "OPERATIONS.md")):
        if line.startswith("`cmake --install` puts"):
            inside = True
        elif inside and line.startswith("| `"):
            paths += re.findall(r"`([^`]+)`", line.split("|")[1])
        elif inside and paths and not line.startswith("|"):
            break
    return paths


class Packaging(unittest.TestCase):
    def test_packaged_config_is_valid_and_documents_the_defaults(self):
        cfg = os.path.join(SOURCE, "packaging", "gpuos.toml")
        r = subprocess.run([bin_path("gpuos"), "config", "check", cfg], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        empty = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        empty.close()
        try:
            d = subprocess.run([bin_path("gpuos"), "config", "check", empty.name], capture_output=True, text=True)
        finally:
            os.unlink(empty.name)
        strip = lambda out: [l for l in out.splitlines() if not l.startswith("# source")]
        self.assertEqual(strip(r.stdout), strip(d.stdout), "packaging/gpuos.toml differs from the built-in defaults")
        # It is `gpuos config defaults` (issue #57; also the ctest cli.packaged_config_is_generated):
        # every table and key, each commented out at its default under its line from the code.
        g = subprocess.run([bin_path("gpuos"), "config", "defaults"], capture_output=True, text=True)
        self.assertEqual(g.returncode, 0, g.stderr)
        with open(cfg) as f:
            text = f.read()
        self.assertEqual(text, g.stdout, "regenerate it: build/bin/gpuos config defaults > packaging/gpuos.toml")
        for table in ("[daemon]", "[tenants]", "[scheduler]", "[policy.budget]", "[metrics]"):
            self.assertIn(table, text)
        # Each key uncommented (but the [[spatial.domain]] example) is still the defaults.
        active, example = [], False
        for line in text.splitlines():
            example = line == "#[[spatial.domain]]" or (example and not line.startswith("["))
            active.append(line[1:] if not example and re.match(r"#[a-z_]+ = ", line) else line)
        self.assertGreater(sum(1 for a, b in zip(active, text.splitlines()) if a != b), 50)
        uncommented = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        uncommented.write("\n".join(active) + "\n")
        uncommented.close()
        try:
            u = subprocess.run([bin_path("gpuos"), "config", "check", uncommented.name], capture_output=True, text=True)
        finally:
            os.unlink(uncommented.name)
        self.assertEqual(u.returncode, 0, u.stderr)
        self.assertEqual(strip(u.stdout), strip(d.stdout), "a key's commented-out value is not its default")

    def test_unit_file(self):
        unit = open(os.path.join(SOURCE, "packaging", "gpuosd.service")).read()
        keys = {}
        for line in unit.splitlines():
            if "=" in line and not line.startswith("#"):
                k, _, v = line.partition("=")
                keys.setdefault(k.strip(), v.strip())
        self.assertEqual(keys["Type"], "simple")
        self.assertEqual(keys["ExecStart"], "/usr/local/bin/gpuosd --config /etc/gpuos/gpuos.toml")
        self.assertEqual(keys["RuntimeDirectory"], "gpuos")
        self.assertEqual(keys["Restart"], "on-failure")
        self.assertEqual(keys["StandardError"], "journal")
        self.assertEqual(keys["NoNewPrivileges"], "yes")
        for forbidden in ("PrivateDevices", "DevicePolicy", "ProtectProc"):
            self.assertNotIn(forbidden, keys)
        # What the enforcer needs of the unit (#57 item 4): `enforce = "freeze"` writes tenants'
        # cgroup.freeze under the cgroup v2 root, which the hardening must leave writable.
        enforcer = open(os.path.join(SOURCE, "src", "daemon", "core", "enforcer.cc")).read()
        if "cgroup.freeze" in enforcer:
            self.assertNotEqual(keys.get("ProtectControlGroups", "no"), "yes", "freeze could not write cgroup.freeze")
            if keys.get("ProtectKernelTunables") == "yes" or keys.get("ProtectSystem") == "strict":
                self.assertIn("/sys/fs/cgroup", keys.get("ReadWritePaths", "").split(),
                              "/sys is read-only under the unit's hardening: freeze needs /sys/fs/cgroup writable")

    def test_cmake_install(self):
        cmake = os.environ.get("CMAKE_COMMAND") or shutil.which("cmake")
        if not cmake:
            self.skipTest("cmake not found")
        prefix = tempfile.mkdtemp(prefix="gpuos-install-")
        try:
            r = subprocess.run([cmake, "--install", e2e.BUILD, "--prefix", prefix], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for f in ("bin/gpuos", "bin/gpuosd", "lib/libgpuos.so", "share/gpuos/gpuos.toml",
                      "share/gpuos/gpuosd.service", "share/doc/gpuos/OPERATIONS.md",
                      "lib/systemd/system/gpuosd.service"):
                self.assertTrue(os.path.exists(os.path.join(prefix, f)), f)
            # docs/OPERATIONS.md's install table names every installed file (a path ending in / a
            # folder of them) and nothing that is not installed (issue #43).
            documented = install_table_paths()
            self.assertGreater(len(documented), 5)
            for p in documented:
                self.assertTrue(os.path.exists(os.path.join(prefix, p)), "in the install table, not installed: " + p)
            for dirpath, _, names in os.walk(prefix):
                for n in names:
                    rel = os.path.relpath(os.path.join(dirpath, n), prefix)
                    covered = [p for p in documented if rel == p or (p.endswith("/") and rel.startswith(p))]
                    self.assertTrue(covered, "installed, not in docs/OPERATIONS.md's install table: " + rel)
            unit = os.path.join(prefix, "lib/systemd/system/gpuosd.service")
            self.assertIn("ExecStart=%s/bin/gpuosd --config /etc/gpuos/gpuos.toml" % prefix, open(unit).read())
            gpuos = os.path.join(prefix, "bin/gpuos")
            r = subprocess.run([gpuos, "config", "check", os.path.join(prefix, "share/gpuos/gpuos.toml")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            # The installed CLI finds the installed interposer (../lib/libgpuos.so).
            env = dict(os.environ, GPUOS_SOCKET=os.path.join(prefix, "none.sock"))
            env.pop("GPUOS_PRELOAD", None)
            r = subprocess.run([gpuos, "run", "--", "sh", "-c", "echo $LD_PRELOAD"], capture_output=True, text=True,
                               env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.path.realpath(r.stdout.strip().split(":")[0]),
                             os.path.realpath(os.path.join(prefix, "lib/libgpuos.so")))
            analyze = shutil.which("systemd-analyze")
            if analyze:
                # Documentation=man:gpuosd(8): systemd-analyze asks man for it, found in the prefix.
                r = subprocess.run([analyze, "verify", unit], capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, MANPATH=os.path.join(prefix, "share", "man")))
                about_unit = [l for l in (r.stdout + r.stderr).splitlines() if "gpuosd.service" in l]
                self.assertEqual(about_unit, [], r.stdout + r.stderr)
        finally:
            shutil.rmtree(prefix, ignore_errors=True)


def main():
    e2e.BUILD = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
