# SPDX-License-Identifier: Apache-2.0
"""run_matrix.py --fake for the harness tests: the stand-in tenants and nvidia-smi (fake_bin), the
shortest windows, no gpuosd modes; asserts it exited 0."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_MATRIX = os.path.join(HERE, "..", "..", "bench", "colocation", "run_matrix.py")


def run_fake_matrix(test, prefix, args, fake_gpus=1, env=None, drop_env=(), timeout=60):
    """Runs run_matrix.py --fake with `args` (its modes and the like) in a temporary folder the
    test removes; returns (that folder, its out folder). The workdir is <folder>/w."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    test.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    run_env = dict(os.environ, FAKE_GPUS=str(fake_gpus),
                   PATH=os.path.join(HERE, "fake_bin") + os.pathsep + os.environ["PATH"], **(env or {}))
    for name in drop_env:
        run_env.pop(name, None)
    out = os.path.join(tmp, "out")
    r = subprocess.run([sys.executable, RUN_MATRIX, "--fake"] + list(args) +
                       ["--gpuos", "none", "--window", "1", "--be-window", "1", "--calibrate-s", "0.2",
                        "--warmup", "0", "--drain-s", "1", "--min-requests", "1", "--gpu-sample-ms", "0",
                        "--out", out, "--workdir", os.path.join(tmp, "w")],
                       env=run_env, capture_output=True, text=True, timeout=timeout)
    test.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
    return tmp, out
