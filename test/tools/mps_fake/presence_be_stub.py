#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stands in for gpu/tests/presence_be.cu (no GPU): `presence_be_stub.py --mode M --json OUT
--ready-file R`. Creates R at once (never, with FAKE_COMPANION_NEVER_READY=1), then waits for
SIGTERM and writes OUT as the real one does, with the MPS variables it was given."""
import argparse
import json
import os
import signal
import time

ap = argparse.ArgumentParser()
ap.add_argument("--mode", required=True)
ap.add_argument("--json", required=True)
ap.add_argument("--ready-file", default="")
a = ap.parse_args()
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
t0 = time.time()
if a.ready_file and os.environ.get("FAKE_COMPANION_NEVER_READY") != "1":
    open(a.ready_file, "w").close()
while not stop:
    time.sleep(0.02)
with open(a.json, "w") as f:
    json.dump({"mode": a.mode, "kernels": 40, "seconds": time.time() - t0, "kernels_per_s": 40 / (time.time() - t0),
               "sms": 13, "priority": os.environ.get("CUDA_MPS_CLIENT_PRIORITY"),
               "threads": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}, f)
