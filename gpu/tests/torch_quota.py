# SPDX-License-Identifier: Apache-2.0
"""GPU test: a PyTorch tenant under `gpuos run --mem SIZE` sees its quota and cannot exceed it.

Checks torch.cuda.mem_get_info() (cudaMemGetInfo -> cuMemGetInfo_v2) reports total == quota, that
an allocation inside the quota works and holds data, and that one past it raises
torch.OutOfMemoryError (the allocator's cuMemAlloc / cuMemCreate got CUDA_ERROR_OUT_OF_MEMORY)
while the process and its earlier tensors stay usable. Run it with the default allocator and with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the cuMemCreate/cuMemMap path).
Prints one JSON line; exit 0 on pass.
"""
import json
import os
import sys

import torch

quota = int(os.environ["GPUOS_TENANT_MEM"])
res = {"quota": quota, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
free, total = torch.cuda.mem_get_info()
res.update(view_total=total, view_free=free)
a = torch.arange(1 << 28, dtype=torch.int32, device="cuda")  # 1 GiB, inside the quota
try:
    torch.empty(quota, dtype=torch.uint8, device="cuda")
    res["over_quota_refused"] = False
except torch.OutOfMemoryError as e:
    res["over_quota_refused"] = True
    res["oom_message"] = str(e).splitlines()[0][:200]
torch.cuda.synchronize()
res["earlier_tensor_intact"] = bool((a[-5:] == torch.arange((1 << 28) - 5, 1 << 28, device="cuda", dtype=torch.int32)).all())
b = torch.ones(1 << 20, device="cuda")
res["still_usable"] = float(b.sum()) == float(1 << 20)
res["passed"] = (total == quota and free <= quota and res["over_quota_refused"]
                 and res["earlier_tensor_intact"] and res["still_usable"])
print(json.dumps(res))
sys.exit(0 if res["passed"] else 1)
