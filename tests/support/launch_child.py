"""What the launcher tests share: the child that reports, from inside the process the launcher
exec'd, what it was given; writing a profile into a state folder; the two-CPU mark."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

# The child: everything it reports is read from inside the process the launcher exec'd.
CHILD = r"""
import ctypes, json, os, platform, sys

def mempolicy():
    # get_mempolicy(2): arch/x86/entry/syscalls/syscall_64.tbl 239; asm-generic/unistd.h 236 (arm64)
    nr = {"x86_64": 239, "aarch64": 236}.get(platform.machine())
    if nr is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        mode = ctypes.c_int(-1)
        mask = (ctypes.c_ulong * 16)()  # 1024 nodes: at least nr_node_ids, as the kernel requires
        if libc.syscall(ctypes.c_long(nr), ctypes.byref(mode), mask, ctypes.c_ulong(1024), None,
                        ctypes.c_ulong(0)) == 0:
            bits = ctypes.sizeof(ctypes.c_ulong) * 8
            nodes = [i for i in range(1024) if mask[i // bits] >> (i % bits) & 1]
            # The mode's high bits are flags (MPOL_F_STATIC_NODES...): include/uapi/linux/mempolicy.h
            return {"mode": {0: "default", 1: "preferred", 2: "bind", 3: "interleave"}.get(
                mode.value & 0xFF, str(mode.value)), "nodes": nodes, "source": "get_mempolicy"}
    # Elsewhere: numa_maps shows the task policy for mappings without their own ("bind:0").
    with open("/proc/self/numa_maps") as f:
        policy = f.readline().split()[1]
    kind, _, nodes = policy.partition(":")
    return {"mode": kind, "nodes": [int(n) for n in nodes.split(",") if n], "source": "numa_maps"}

fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
latency = None
if os.environ.get("NODEAGENT_CPU_DMA_LATENCY_FD"):
    # Reading the device gives the current aggregate request in us (pm_qos_interface.rst).
    with open("/dev/cpu_dma_latency", "rb") as f:
        latency = int.from_bytes(f.read(4), sys.byteorder, signed=True)
with open("/proc/self/status") as f:
    status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
print(json.dumps({
    "pid": os.getpid(),
    "affinity": sorted(os.sched_getaffinity(0)),
    "mempolicy": mempolicy(),
    "mems_allowed": status.get("Mems_allowed_list"),
    "env": dict(os.environ),
    "fds": fds,
    "latency": latency,
}))
code = int(os.environ.get("CHILD_EXIT", "0"))
if os.environ.get("CHILD_SIGNAL"):
    sys.stdout.flush()
    os.kill(os.getpid(), int(os.environ["CHILD_SIGNAL"]))
sys.exit(code)
"""


def _cpus_here() -> set[int]:
    return set(os.sched_getaffinity(0))


needs_two_cpus = pytest.mark.skipif(
    not {0, 1} <= _cpus_here(), reason="this test binds to CPUs 0 and 1, and this process may not use both"
)


def write_profile(state: Path, doc: Any, name: str = "default") -> Path:
    path = state / "profiles" / f"{name}.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path
