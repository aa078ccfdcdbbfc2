"""What `nodeagent exec` does to its own process before the job replaces it (or is forked from it):
bind it to the rank's CPUs and NUMA memory, raise its memlock limit, and hold a CPU wake-up
latency request. All of it survives execve(2) and is inherited through fork(2): sched_setaffinity(2)
and set_mempolicy(2) NOTES ("preserved across an execve"), setrlimit(2), and an inheritable
descriptor on /dev/cpu_dma_latency (Documentation/power/pm_qos_interface.rst: the request lasts
while the file stays open).

Standard library only, besides nodeagent's core: a launch resolved once (nodeagent.tuning.prepared)
is entered by a small program that must start in milliseconds, not load the profile's schema.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import struct
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.core import parse
from nodeagent.core.errors import UsageError

DMA_LATENCY_ENV = "NODEAGENT_CPU_DMA_LATENCY_FD"  # tells the job which fd holds the request
DMA_LATENCY_DEV = "/dev/cpu_dma_latency"

# include/uapi/linux/mempolicy.h
MPOL_BIND = 2
# arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h (arm64)
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}
_ULONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8

# Where a launch says what it could not do as the profile asks (the job still runs).
Warn = Callable[[str], None]


@dataclass(frozen=True)
class Entry:
    """What is done to the launching process for one rank, decided beforehand (nodeagent.tuning.
    launcher.Launch.entry)."""

    rank: int
    binding: str  # "syscalls": bound here; "numactl": numactl in the argv binds; "none"
    cpus: list[int] | None
    mems: list[int] | None
    arch: str
    cpuset_source: str | None  # the cgroup file that limits the CPUs, for the error message
    memlock_soft: int | None  # bytes, or resource.RLIM_INFINITY
    dma_latency_us: int | None


def enter(entry: Entry, env: dict[str, str], warn: Warn) -> dict[str, str]:
    """Bind this process, raise its memlock limit and hold the wake-up latency request. Returns the
    job's environment (`env` and the descriptor holding the request); what could not be done goes
    to `warn`. A binding that cannot be made is a UsageError: the job must not run unbound."""
    if entry.binding == "syscalls":
        _bind_by_syscalls(entry)
    env = dict(env)
    if entry.memlock_soft is not None:
        for warning in raise_memlock(entry.memlock_soft):
            warn(warning)
    if entry.dma_latency_us is not None:
        fd, refused = hold_dma_latency(entry.dma_latency_us)
        if refused is not None:
            warn(refused)
        else:
            env[DMA_LATENCY_ENV] = str(fd)
    return env


def _bind_by_syscalls(entry: Entry) -> None:
    """Bind this process, which the job replaces: the binding survives execve(2)."""
    if entry.cpus is not None:
        bind_cpus(entry.rank, entry.cpus, entry.cpuset_source)
    if entry.mems is not None:
        try:
            set_mempolicy_bind(entry.mems, entry.arch)
        except OSError as e:
            raise UsageError(
                f"local rank {entry.rank}: cannot bind memory to NUMA node(s) "
                f"{parse.format_cpulist(entry.mems)} "
                f"(set_mempolicy: {e.strerror}); check the cgroup's cpuset.mems"
            ) from None


def bind_cpus(rank: int, cpus: list[int], cpuset_source: str | None) -> None:
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        where = cpuset_source or "the online CPUs"
        raise UsageError(
            f"local rank {rank}: cannot run on CPUs {parse.format_cpulist(cpus)} ({e.strerror}); "
            f"check the cgroup cpuset ({where})"
        ) from None
    got = sorted(os.sched_getaffinity(0))
    if got != cpus:
        # The kernel intersects the mask with the cpuset instead of failing (sched_setaffinity(2)).
        raise UsageError(
            f"local rank {rank}: asked for CPUs {parse.format_cpulist(cpus)}, the kernel allowed "
            f"{parse.format_cpulist(got)}: the cgroup cpuset ({cpuset_source or '?'}) "
            "forbids the rest"
        )


def set_mempolicy_bind(nodes: list[int], arch: str) -> None:
    """set_mempolicy(MPOL_BIND, nodes) for this thread; the policy survives execve(2).

    maxnode is the mask's bit count plus one: the kernel decrements it before reading the mask
    (mm/mempolicy.c, get_nodes(): `--maxnode`), so passing exactly the bit count would drop the
    last bit. libnuma passes `size + 1` for the same reason (set_mempolicy(2), and numactl's
    libnuma.c: setpol()).
    """
    words = max(nodes) // _ULONG_BITS + 1
    mask = (ctypes.c_ulong * words)()
    for node in nodes:
        mask[node // _ULONG_BITS] |= 1 << (node % _ULONG_BITS)
    maxnode = words * _ULONG_BITS + 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(
        ctypes.c_long(SYS_SET_MEMPOLICY[arch]), ctypes.c_int(MPOL_BIND), mask, ctypes.c_ulong(maxnode)
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def hold_dma_latency(us: int) -> tuple[int | None, str | None]:
    """Open /dev/cpu_dma_latency and request `us` microseconds; the fd, kept open and inheritable,
    holds the request through the exec for as long as the job runs (pm_qos_interface.rst: "the
    request is removed when the file descriptor is closed"). Returns (fd, None) or (None, warning)."""
    try:
        fd = os.open(DMA_LATENCY_DEV, os.O_WRONLY)
    except OSError as e:
        reason = "absent" if e.errno == errno.ENOENT else e.strerror
        return None, f"{DMA_LATENCY_DEV}: {reason}: the CPU wake-up latency limit of {us} us is not held"
    try:
        # The device takes a binary signed 32-bit value (or an ASCII hex string): pm_qos_interface.rst.
        os.write(fd, struct.pack("=i", us))
    except OSError as e:
        os.close(fd)
        return None, f"{DMA_LATENCY_DEV}: writing {us} failed ({e.strerror}): the limit is not held"
    os.set_inheritable(fd, True)
    return fd, None


def raise_memlock(soft: int) -> list[str]:
    """A process may raise its soft limit up to the hard one (setrlimit(2)); the job inherits it.
    Returns what could not be done."""
    warnings = []
    _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    want = soft
    if hard != resource.RLIM_INFINITY and (want == resource.RLIM_INFINITY or want > hard):
        want = hard
        warnings.append(f"memlock hard limit is {hard} bytes: soft limit raised to it only")
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (want, hard))
    except (OSError, ValueError) as e:
        warnings.append(f"cannot raise the memlock limit ({e})")
    return warnings
