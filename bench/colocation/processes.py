# SPDX-License-Identifier: Apache-2.0
"""run_matrix.py's processes: a tenant, a wrapper or gpuosd in its own process group (Proc), and a
private MPS control daemon (Mps). Each stops what it started, and only that."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Dict, List, Optional

from planning import REPO, ModeError, mps_env_for


class Proc:
    """A child in its own process group (so a wrapper and its child stop together), logging to a file."""

    def __init__(self, name: str, cmd: List[str], env: Dict[str, str], log_path: str) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.p = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        self.pid = self.p.pid

    def poll(self) -> Optional[int]:
        return self.p.poll()

    def wait(self, timeout: float) -> Optional[int]:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def stop(self, grace_s: float = 20.0) -> Optional[int]:
        """SIGTERM the group, wait grace_s, then SIGKILL the group. Returns the exit code."""
        if self.p.poll() is None:
            self._signal_group(signal.SIGTERM)
            if self.wait(grace_s) is None:
                self._signal_group(signal.SIGKILL)
                self.wait(10)
        # A wrapper that forked may have exited before its child: give the group the same grace,
        # then anything left in it goes too.
        end = time.monotonic() + min(grace_s, 10.0)
        while time.monotonic() < end and self._group_alive():
            time.sleep(0.05)
        self._signal_group(signal.SIGKILL)
        self._log.close()
        return self.p.returncode

    def tail(self, n: int = 2500) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class Mps:
    """An MPS control daemon with private pipe/log dirs; stop() always quits it."""

    def __init__(self, workdir: str, mode: str) -> None:
        self.env = self.env_for(workdir, mode)
        self.pipe = self.env["CUDA_MPS_PIPE_DIRECTORY"]
        self.log = self.env["CUDA_MPS_LOG_DIRECTORY"]
        self.started = False

    @staticmethod
    def env_for(workdir: str, mode: str) -> Dict[str, str]:
        return mps_env_for(workdir, mode)

    def _ctl(self, text: str, timeout: float = 15.0) -> str:
        env = dict(os.environ, **self.env)
        r = subprocess.run(["nvidia-cuda-mps-control"], input=text + "\n", env=env, timeout=timeout,
                           capture_output=True, text=True)
        return (r.stdout + r.stderr).strip()

    def start(self) -> None:
        if not shutil.which("nvidia-cuda-mps-control"):
            raise ModeError("nvidia-cuda-mps-control not found")
        os.makedirs(self.pipe, exist_ok=True)
        os.makedirs(self.log, exist_ok=True)
        env = dict(os.environ, **self.env)
        # Output to a file, not a pipe: the daemonized child would hold a pipe open.
        with open(os.path.join(self.log, "start.out"), "w") as out:
            r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, timeout=20,
                               stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started = True
        if r.returncode != 0:
            raise ModeError(f"MPS control daemon failed to start: rc={r.returncode}")
        end = time.monotonic() + 10
        while time.monotonic() < end and not self.pids():
            time.sleep(0.05)
        if not self.pids():
            raise ModeError("MPS control daemon not running after start")

    def pids(self) -> List[int]:
        """PIDs of the MPS control daemon / server using our pipe directory (found via /proc)."""
        want = f"CUDA_MPS_PIPE_DIRECTORY={self.pipe}".encode()
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/comm", "rb") as f:
                    if not f.read().startswith(b"nvidia-cuda-mps"):
                        continue
                with open(f"/proc/{d}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        out.append(int(d))
            except OSError:
                continue
        return out

    def server_list(self) -> str:
        try:
            return self._ctl("get_server_list", 10)
        except (subprocess.SubprocessError, OSError) as e:
            return f"error: {e}"

    def stop(self) -> Optional[str]:
        """Quit the daemon (and its server); SIGKILL our own MPS processes if they outlive it."""
        if not self.started:
            return None
        self.started = False
        note = None
        try:
            self._ctl("quit", 30)
        except (subprocess.SubprocessError, OSError) as e:
            note = f"MPS quit failed: {e}"
        end = time.monotonic() + 15
        while time.monotonic() < end and self.pids():
            time.sleep(0.1)
        left = self.pids()
        if left:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            note = f"MPS processes {left} still alive 15 s after quit: killed"
        time.sleep(0.5)   # let the server release the GPU
        return note

    def log_tail(self) -> str:
        p = os.path.join(self.log, "control.log")
        try:
            with open(p) as f:
                return f.read()[-2000:]
        except OSError:
            return ""
