# SPDX-License-Identifier: Apache-2.0
"""gpuos: Python access to gpuos, the GPU multitasking layer.

gpuos.kv: KV pools, elastic GPU memory for LLM engines (libgpuos_kv.so through ctypes).
"""

__version__ = "0.2.0"
