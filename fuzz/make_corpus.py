#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of the fuzz harnesses into fuzz/corpus/<target>/ (checked in).

Re-run after an ABI change: python3 fuzz/make_corpus.py
Formats: see the comments at the top of fuzz/fuzz_core.cc and fuzz/fuzz_validate.cc.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION = 0x534F5047, 1
REGISTER, REGISTER_REPLY, LIST, GPU_INFO, TENANT_INFO, LIST_END, SET_GATE, REPLY, SHUTDOWN, ACTIVITY, SWAP_POOL, SWAP_POOL_REPLY = range(1, 13)
GUARANTEED, BEST_EFFORT = 1, 2


def hdr(typ, size, seq=7, magic=MAGIC, version=VERSION):
    return struct.pack("<IHHII", magic, version, typ, size, seq)


def register(pid, klass=BEST_EFFORT, prio=0, weight=100, name=b"t", mem=0, borrow=0, prev=0, domain=b"", sms=0):
    return (hdr(REGISTER, 160) + struct.pack("<iIiIQ", pid, klass, prio, weight, mem) + name.ljust(64, b"\0")[:64]
            + struct.pack("<QII", borrow, prev, 0) + domain.ljust(32, b"\0")[:32] + struct.pack("<II", sms, 0))


def lst(flags=0):
    return hdr(LIST, 24) + struct.pack("<II", flags, 0)


def set_gate(tid, gate):
    return hdr(SET_GATE, 24) + struct.pack("<II", tid, gate)


def activity(busy, waiting):
    return hdr(ACTIVITY, 24) + struct.pack("<II", busy, waiting)


def shutdown():
    return hdr(SHUTDOWN, 16)


def reply(typ=REPLY):
    return hdr(typ, 184) + struct.pack("<iI", 0, 0) + b"ok".ljust(160, b"\0")


# fuzz_core events. Connections: 0 user (pid 100), 1 pre-registered tenant (pid 200),
# 2 unregistered (pid 300), 3 admin (pid 1).
def msg(conn, payload):
    return bytes([conn & 3]) + struct.pack("<H", len(payload)) + payload


def close(conn):
    return bytes([(4 << 2) | conn])


def tick(ms):
    return bytes([5 << 2, ms])


def recv_error(conn, reset=False):
    return bytes([(6 << 2) | conn | (0x80 if reset else 0)])


def swap_words(conn, flags, mib=0):
    """kind 7 with the swap bits: 4 swappable (+mib), 8 asks for room, 16 completes the command (32 fails it)."""
    return bytes([(7 << 2) | conn, flags]) + (bytes([mib]) if flags & 4 else b"")


def swap_pool():
    return hdr(SWAP_POOL, 16)


def words(conn, busy, waiting):
    return bytes([(7 << 2) | conn, busy | (waiting << 1)])


PRIO, GUAR_T1 = 0x10, 0x20
core = {
    "list_user": bytes([0x0f]) + msg(0, lst()) + msg(0, lst(1)),
    "register_then_list": bytes([0x0f]) + msg(2, register(300, name=b"b")) + msg(0, lst(1)),
    "register_activity": bytes([0x1f]) + msg(2, register(300)) + words(2, 1, 0) + msg(2, activity(1, 0)) + msg(0, lst()),
    "priority_guaranteed_busy": bytes([0x3f]) + msg(2, register(300)) + words(1, 1, 0) + msg(1, activity(1, 0))
    + words(2, 1, 1) + msg(2, activity(1, 1)) + tick(10) + msg(3, lst()) + words(1, 0, 0) + msg(1, activity(0, 0)) + tick(60),
    "priority_be_slices": bytes([0x1f]) + msg(2, register(300, weight=50)) + words(1, 1, 0) + msg(1, activity(1, 0))
    + words(2, 1, 0) + msg(2, activity(1, 0)) + tick(6) + tick(6) + close(2) + tick(1),
    "admin_gate_close_open": bytes([0x1f]) + msg(3, set_gate(1, 1)) + words(1, 1, 1) + msg(1, activity(1, 1))
    + msg(0, lst()) + msg(3, set_gate(1, 0)) + msg(3, set_gate(9, 1)),
    "gate_not_admin": bytes([0x03]) + msg(0, set_gate(1, 1)) + msg(0, shutdown()),
    "admin_shutdown": bytes([0x03]) + msg(2, register(300)) + msg(3, shutdown()) + msg(0, lst()),
    "register_twice_and_full": bytes([0x00]) + msg(1, register(200)) + msg(2, register(300)),
    "register_wrong_pid": bytes([0x03]) + msg(2, register(12345)),
    "register_guaranteed_prio": bytes([0x13]) + msg(2, register(300, GUARANTEED, prio=5, name=b"hp")) + words(2, 1, 0)
    + msg(2, activity(1, 0)) + tick(1),
    "activity_unregistered": bytes([0x03]) + msg(0, activity(1, 0)),
    "activity_bad_values": bytes([0x13]) + msg(1, activity(2, 7)),
    "close_and_reregister": bytes([0x1f]) + close(1) + msg(1, register(200, name=b"again")) + msg(0, lst(1)),
    "reregister_previous_id": bytes([0x1f]) + msg(2, register(300, prev=7)) + close(1)
    + msg(1, register(200, prev=7)) + msg(0, lst(1)),
    "receive_errors": bytes([0x0f]) + recv_error(0) + recv_error(1, True) + msg(0, lst()),
    "reply_to_daemon": bytes([0x0f]) + msg(0, reply()) + msg(3, reply(LIST_END)),
    "garbage": bytes([0x0f]) + msg(0, b"\x00" * 24) + msg(1, b"GPOS" + b"\xff" * 40) + msg(2, b"x"),
    "truncated_header": bytes([0x0f]) + msg(0, lst()[:10]),
    "bad_version": bytes([0x0f]) + msg(0, hdr(LIST, 24, version=2) + b"\0" * 8),
    "bad_flags": bytes([0x0f]) + msg(0, lst(0xfe)),
    "oversized": bytes([0x0f]) + msg(0, lst() + b"\0" * 500),
    "name_no_nul": bytes([0x0f]) + msg(2, register(300, name=b"n" * 64)),
    "space_domain": bytes([0x1f]) + msg(2, register(300, domain=b"serve")) + msg(1, register(200, GUARANTEED, domain=b"serve", sms=40))
    + words(1, 1, 0) + msg(1, activity(1, 0)) + words(1, 0, 0) + msg(1, activity(0, 0)) + msg(0, lst(1)),
    "space_domain_refused": bytes([0x1f]) + msg(2, register(300, domain=b"other")) + msg(3, register(400, domain=b"admins"))
    + msg(0, lst()),
    "space_domain_no_nul": bytes([0x0f]) + msg(2, register(300, domain=b"d" * 32)),
    # Memory oversubscription (setup bit 6): tenant 1 holds 40 MiB, tenant 2 asks for room; 1 is
    # swapped out, 2 gets "retry"; 1 waits, comes back after 2's quantum.
    "swap_turns": bytes([0x5f]) + msg(1, swap_pool()) + msg(2, register(300)) + msg(2, swap_pool())
    + swap_words(1, 1 | 4, 40) + msg(1, activity(1, 0)) + swap_words(2, 1 | 4 | 8, 30) + msg(2, activity(1, 0))
    + swap_words(1, 2 | 16) + msg(1, activity(0, 1)) + tick(3) + swap_words(2, 1 | 16) + tick(3)
    + swap_words(1, 2 | 16) + tick(1) + msg(0, lst(1)),
    "swap_failures": bytes([0x5f]) + msg(1, swap_pool()) + msg(2, register(300)) + swap_words(1, 4, 60)
    + swap_words(2, 4 | 8, 20) + tick(1) + swap_words(1, 16 | 32) + tick(1) + swap_words(2, 8) + close(1) + tick(1),
    "swap_pool_off_and_stranger": bytes([0x1f]) + msg(1, swap_pool()) + msg(0, swap_pool()) + swap_words(1, 4 | 8, 10) + tick(1),
}

validate = {
    "register": b"\xa0" + register(1),
    "list": b"\xa0" + lst(),
    "set_gate": b"\x10" + set_gate(1, 1),
    "activity": b"\x05" + activity(1, 0),
    "shutdown": b"\x00" + shutdown(),
    "swap_pool": b"\x00" + swap_pool(),
    "swap_pool_reply": b"\x20" + hdr(SWAP_POOL_REPLY, 32) + b"\0" * 16,
    "reply": b"\xff" + reply(),
    "list_end": b"\x20" + reply(LIST_END),
    "register_reply": b"\x20" + hdr(REGISTER_REPLY, 192) + b"\0" * 176,
    "tenant_info": b"\x20" + hdr(TENANT_INFO, 392) + b"\0" * 376,
    "gpu_info": b"\x20" + hdr(GPU_INFO, 176) + b"\0" * 160,
    "bad_type": b"\x40" + hdr(0, 16),
    "bad_size": b"\x40" + hdr(LIST, 25) + b"\0" * 9,
    "short": b"\x40" + hdr(LIST, 24)[:8],
}

config = {
    "empty": b"",
    "full": b"""[daemon]
socket = "/run/gpuos/gpuosd.sock"
admin_group = "gpuos"
log_level = "debug"
history = 16
max_tenants = 8
[tenants]
on_no_daemon = "refuse"
default_class = "guaranteed"
[scheduler]
policy = "priority"
be_max_inflight = 4
idle_grace_us = 500
be_slice_ms = 20
""",
    "scheduler_only": b"[scheduler]\npolicy = \"open\"\n",
    "inline_tables": b"daemon = { history = 1, max_tenants = 2 }\ntenants.default_class = \"best-effort\"\n",
    "escapes": b"[daemon]\nadmin_group = \"a\\tb\\u00e9\\\"q\"\nsocket = '/tmp/x y.sock'\n",
    "comments": b"# c\n[daemon] # c\nlog_level = 'warn' # c\n\n[tenants]\n",
    "bad_key": b"[daemon]\nfoo = 1\n",
    "bad_range": b"[scheduler]\nbe_slice_ms = 0\n",
    "bad_type": b"[daemon]\nhistory = 1.5\n",
    "bad_syntax": b"[daemon\nhistory = \n",
    "unknown_table": b"[deamon]\n",
    "array": b"[[daemon]]\nhistory = 1\n",
    "dates": b"[daemon]\nsocket = 1979-05-27T07:32:00Z\n",
    "multiline": b"[daemon]\nadmin_group = \"\"\"\nx\"\"\"\n",
    "spatial": b"""[spatial]
mps_control = "/usr/bin/nvidia-cuda-mps-control"
mps_dir = "/run/gpuos/mps"
lend_after_ms = 5
lend_max_kernel_ms = 2
right_size_below_grid = true
[[spatial.domain]]
name = "team-a"
users = ["alice", 1001]
gpus = [0, 1]
[[spatial.domain]]
name = "b.2"
""",
    "spatial_inline": b"spatial.domain = [{ name = \"x\", gpus = [3] }, { name = \"y\", users = [\"0\"] }]\n",
    "spatial_bad": b"[[spatial.domain]]\nname = \"x\"\n[[spatial.domain]]\nname = \"x\"\ngpus = [0, 0]\n",
}


# fuzz_dra_claim: ResourceClaims (resource.k8s.io/v1, compact JSON under the 1024-byte max_len) whose
# metadata.uid is "fuzz-uid", TenantConfig objects, sizes and device names.
def tenant(**fields):
    d = {"apiVersion": "gpuos.io/v1", "kind": "TenantConfig"}
    d.update(fields)
    return d


def claim(device="gpu-0-guaranteed-1", configs=(), results=None, uid="fuzz-uid", reserved=True):
    results = results if results is not None else [
        {"request": "gpu", "driver": "gpuos.io", "pool": "node-a", "device": device}]
    status = {"allocation": {"devices": {"results": results, "config": list(configs)}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    c = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "c", "namespace": "ns", "uid": uid}, "status": status}
    return json.dumps(c, separators=(",", ":")).encode()


def opaque(source, params, requests=None, driver="gpuos.io"):
    e = {"source": source, "opaque": {"driver": driver, "parameters": params}}
    if requests is not None:
        e["requests"] = requests
    return e


dra_claim = {
    "claim_plain": claim(),
    "claim_best_effort": claim("gpu-3-best-effort-7", reserved=False),
    "claim_full_config": claim(configs=[opaque("FromClass", tenant(priority=5, mem="4Gi")),
                                        opaque("FromClaim", tenant(**{"class": "guaranteed", "mem": "40Gi",
                                                                       "borrow": "8Gi", "space": "inference",
                                                                       "sms": 64, "maxSlowdown": "1.25"}),
                                               ["gpu"])]),
    "claim_numbers": claim(configs=[opaque("FromClaim", tenant(mem=1073741824, maxSlowdown=1.5, weight=10))]),
    "claim_other_driver": claim(configs=[opaque("FromClaim", {"x": 1}, driver="other.io"),
                                         opaque("FromClaim", tenant(weight=3), ["other"])]),
    "claim_wrong_class": claim("gpu-0-best-effort-0", [opaque("FromClaim", tenant(**{"class": "guaranteed"}))]),
    "claim_unknown_field": claim(configs=[opaque("FromClaim", tenant(gpus=2))]),
    "claim_two_results": claim(results=[{"request": "a", "driver": "gpuos.io", "pool": "n", "device": "gpu-0-guaranteed-0"},
                                        {"request": "b", "driver": "gpuos.io", "pool": "n", "device": "gpu-0-guaranteed-1"}]),
    "claim_subrequest": claim(results=[{"request": "gpu/small", "driver": "gpuos.io", "pool": "n",
                                        "device": "gpu-1-guaranteed-0"}],
                              configs=[opaque("FromClaim", tenant(sms=8, space="s"), ["gpu"])]),
    "claim_wrong_uid": claim(uid="other"),
    "tenant_full": json.dumps(tenant(**{"class": "best-effort", "weight": 100, "mem": "512Mi", "borrow": "1G"})).encode(),
    "tenant_bad": json.dumps(tenant(mem="-1", priority=1.5, maxSlowdown="100.5")).encode(),
    "size_quantities": b"1.5Gi",
    "size_exponent": b"1e9",
    "size_milli": b"512m",
    "size_gpuos": b"8 GiB",
    "device_name": b"gpu-12-best-effort-3",
}


# fuzz_claim_sums: byte 0 picks the cap (bit 0 none, bit 1 64 MiB, else bytes 17..24), bytes 1..16 mem
# and borrow (little-endian), then a TenantConfig or a size.
def sums(flags, mem, borrow, cap=0, text=b""):
    return bytes([flags]) + struct.pack("<QQQ", mem, borrow, cap) + text


claim_sums = {
    # #42: 1Gi + a borrow that wraps the sum to 64 MiB, under a 64 MiB cap and without one.
    "regress_wrap_cap": sums(2, 1 << 30, 18446744072635809792,
                             text=json.dumps(tenant(mem="1Gi", borrow="18446744072635809792")).encode()),
    "wrap_no_cap": sums(1, 1 << 30, 18446744072635809792),
    "max_sum": sums(0, 1 << 30, (1 << 64) - 1 - (1 << 30), (1 << 64) - 1),
    "within_cap": sums(0, 8 << 30, 2 << 30, 16 << 30, json.dumps(tenant(mem="8Gi", borrow="2Gi")).encode()),
    "over_cap": sums(2, 32 << 20, 33 << 20),
    "borrow_without_mem": sums(1, 0, 1 << 20),
    "tenant_huge": json.dumps(tenant(mem="16Ei", borrow="15Ei")).encode(),
    "tenant_ints": json.dumps(tenant(mem=1, borrow=18446744073709551615)).encode(),
    "size_fraction": b"0.3K",
    "size_whole_fraction": b"1.5GiB",
    "size_max": b"18446744073709551615",
}


def write(name, files):
    """Rewrites the generated seeds of a corpus; reproducers of bugs found (regress_*) are kept."""
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        if not old.startswith("regress_"):
            os.unlink(os.path.join(d, old))
    for k, v in files.items():
        with open(os.path.join(d, k), "wb") as f:
            f.write(v)


if __name__ == "__main__":
    write("core", core)
    write("validate", validate)
    write("config", config)
    write("dra_claim", dra_claim)
    write("claim_sums", claim_sums)
    print("wrote %d + %d + %d + %d + %d seeds" % (len(core), len(validate), len(config), len(dra_claim),
                                                  len(claim_sums)))
