"""pinned-memory: TensorFlow's GPU host-memory settings per rank, and the locked-memory limit.

- TF_GPU_HOST_MEM_LIMIT_IN_MB caps TensorFlow's pinned (page-locked) host allocator, the staging
  area of host<->GPU copies; its default is 64 GiB per process (ReadInt64FromEnvVar(
  "TF_GPU_HOST_MEM_LIMIT_IN_MB", 1LL << 16) in tensorflow/core/common_runtime/gpu/
  gpu_process_state.cc). Pinned pages cannot be swapped or reclaimed, and CUDA warns that
  "allocating excessive amounts of pinned memory may degrade system performance"
  (cudaMallocHost, https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html): eight
  ranks at the default may lock 512 GiB. The limit here is a share of the memory of the rank's
  NUMA node (where --membind puts it), divided among the ranks on that node.
- TF_GPU_THREAD_MODE=gpu_private gives each GPU its own threads to launch kernels and copies, so
  they do not queue behind the CPU ops of the inter-op pool ("GPU host thread contention",
  https://www.tensorflow.org/guide/gpu_performance_analysis); NVIDIA's TensorFlow containers and
  DeepLearningExamples run with it (https://docs.nvidia.com/deeplearning/frameworks/
  tensorflow-user-guide/index.html). TF_GPU_THREAD_COUNT=2 is TF's own count for that mode, "one for
  device compute and another for memory copies" (tensorflow/core/common_runtime/gpu/gpu_device.cc).
- RLIMIT_MEMLOCK: RDMA registration (NCCL over InfiniBand/RoCE, GPUDirect RDMA) pins memory against
  it, and fails with "Cannot allocate memory" past it. A process may raise its soft limit up to
  its hard limit (setrlimit(2), https://man7.org/linux/man-pages/man2/setrlimit.2.html): that is a
  PROCESS change `nodeagent exec` makes. Raising the hard limit is configuration of the login
  path (limits.conf, systemd LimitMEMLOCK=, docker --ulimit): neither a kernel command-line (BOOT)
  nor a file nodeagent could write and restore (RUNTIME), so it is advice in the notes. This is
  what the `kernel` check's `memlock` finding flags, on any node (RDMA needs it without GPUs too),
  so it is planned, or declined with why, whether or not the node has GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import param
from nodeagent.api.tune import Change, Plan, Scope, Tuner, check_thread_count, finding_key
from nodeagent.checks import kernel as kernel_check
from nodeagent.facts import limits, ranks
from nodeagent.facts.limits import UNLIMITED, Limit
from nodeagent.facts.ranks import RankFacts
from nodeagent.host import Host

ID = "pinned-memory"
HOST_MEM = "TF_GPU_HOST_MEM_LIMIT_IN_MB"
THREAD_MODE = "TF_GPU_THREAD_MODE"
THREAD_COUNT = "TF_GPU_THREAD_COUNT"
VARS = (HOST_MEM, THREAD_MODE, THREAD_COUNT)
MEMLOCK = "Max locked memory"
MEMLOCK_FINDING = finding_key(kernel_check.ID, "memlock")
TF_DEFAULT_HOST_MEM_MB = 1 << 16  # gpu_process_state.cc: "64GB max by default"
GPU_PROCESS_STATE = "https://github.com/tensorflow/tensorflow/blob/master/tensorflow/core/common_runtime/gpu/gpu_process_state.cc"
GPU_DEVICE = (
    "https://github.com/tensorflow/tensorflow/blob/master/tensorflow/core/common_runtime/gpu/gpu_device.cc"
)
CUDA_PINNED_DOC = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html"
TF_GPU_GUIDE = "https://www.tensorflow.org/guide/gpu_performance_analysis"
NVIDIA_TF_GUIDE = "https://docs.nvidia.com/deeplearning/frameworks/tensorflow-user-guide/index.html"
SETRLIMIT_DOC = "https://man7.org/linux/man-pages/man2/setrlimit.2.html"
NGC_ULIMIT_DOC = "https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html"


@dataclass(frozen=True)
class Params:
    ranks: int = param(0, "Local GPU ranks, as for numa-pinning (0 = one per GPU); they divide host memory.")
    host_mem_fraction: float = param(
        0.5,
        "Share of a NUMA node's memory the ranks on it may pin together; the rest stays pageable for "
        f"the page cache and the input pipeline (pinned memory is not reclaimable: {CUDA_PINNED_DOC}).",
    )
    thread_mode: str = param(
        "gpu_private",
        f"Dedicated kernel-launch threads per GPU instead of the shared inter-op pool ({TF_GPU_GUIDE}, "
        f"{NVIDIA_TF_GUIDE}).",
    )
    thread_count: int = param(
        2, f"Threads per GPU in gpu_private mode: one for compute, one for memory copies ({GPU_DEVICE})."
    )
    raise_memlock: bool = param(
        True,
        "Have `nodeagent exec` raise RLIMIT_MEMLOCK's soft limit to the hard limit for RDMA registration "
        f"(an unprivileged process may: {SETRLIMIT_DOC}).",
    )


@dataclass(frozen=True)
class Facts:
    ranks: RankFacts
    environ: dict[str, str] | None  # the variables of VARS set in /proc/self/environ; None: unreadable
    memlock: Limit | None  # "Max locked memory" of /proc/self/limits; None: unreadable or absent
    limits_readable: bool


def collect(host: Host) -> Facts:
    env = limits.collect_environ(host)
    lim = limits.collect_limits(host)
    return Facts(
        ranks=ranks.collect(host),
        environ=None if env is None else {k: v for k, v in env.items() if k in VARS},
        memlock=None if lim is None else lim.get(MEMLOCK),
        limits_readable=lim is not None,
    )


def _before(f: Facts, var: str) -> str:
    if f.environ is None:
        return f"(unknown: {limits.ENVIRON_PATH} unreadable)"
    return f.environ.get(var, "(unset)")


def _env(f: Facts, var: str, value: str, why: str) -> Change:
    return Change(
        ID, f"env {var}", _before(f, var), value, Scope.PROCESS, why, profile_key=f"env.{var}", value=value
    )


def _bytes(n: int) -> str:
    if n == UNLIMITED:
        return "unlimited"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def host_mem_limit_mb(f: Facts, p: Params, layout: ranks.RankLayout) -> tuple[int | None, str]:
    """The per-rank limit in MiB (TF's "MB" is 2^20 bytes: it shifts by 20) and how it was derived;
    None with the reason when no memory size is known."""
    topo = f.ranks.topology
    node_mem = {n.id: n.memory_mib for n in topo.numa_nodes if n.memory_mib}
    per_node: dict[int | None, int] = {}
    for s in layout.slots:
        key = s.numa_node if s.numa_node in node_mem else None
        per_node[key] = per_node.get(key, 0) + 1
    shares: list[tuple[int, str]] = []
    for key, count in per_node.items():
        if key is not None:
            mem = node_mem[key]
            shares.append(
                (int(mem * p.host_mem_fraction / count), f"node {key}: {mem} MiB / {count} rank(s)")
            )
        elif topo.memory_total_mib:
            mem, total = topo.memory_total_mib, len(layout.slots)
            shares.append((int(mem * p.host_mem_fraction / total), f"MemTotal {mem} MiB / {total} rank(s)"))
        else:
            return None, "no node memory size is known (no node*/meminfo or /proc/meminfo)"
    if not shares:
        return None, "no rank"
    # One value for every rank: the smallest share, so that no node is over-committed.
    value, how = min(shares)
    # Whole 256 MiB steps: the BFC allocator grows in power-of-two regions anyway.
    value = max(256, value // 256 * 256)
    return value, f"{p.host_mem_fraction:g} x {how}"


def plan(f: Facts, p: Params) -> Plan:
    check_thread_count(ID, "thread_count", p.thread_count, len(f.ranks.topology.cpus_online))
    memlock_change, memlock_notes, declined = _memlock(f, p)
    if not f.ranks.gpus:
        smi = f.ranks.smi_missing or "no GPU listed"
        why = (
            f"no GPU on this node (none in sysfs PCI; `nvidia-smi topo -m`: {smi}): TF_GPU_* settings and "
            "pinned staging memory only matter to GPU jobs"
        )
        return _memlock_only(memlock_change, memlock_notes, declined, why)
    layout = ranks.build(f.ranks, p.ranks)
    if layout.error:
        return _memlock_only(memlock_change, memlock_notes, declined, layout.error)
    notes: list[str] = []
    changes = _host_mem(f, p, layout, notes)
    changes.append(
        _env(
            f,
            THREAD_MODE,
            p.thread_mode,
            f"each GPU launches kernels from its own threads, not behind the inter-op pool ({TF_GPU_GUIDE})",
        )
    )
    changes.append(
        _env(
            f,
            THREAD_COUNT,
            str(p.thread_count),
            f"threads per GPU in gpu_private mode: one for compute, one for copies ({GPU_DEVICE})",
        )
    )
    changes += memlock_change
    notes += memlock_notes
    notes.append("set in each job's environment and limits by `nodeagent exec`")
    return Plan(ID, changes, notes, declined=declined)


def _memlock_only(changes: list[Change], notes: list[str], declined: dict[str, str], why: str) -> Plan:
    """No GPU settings (no GPU, or no layout): the memlock limit alone, which RDMA needs anyway."""
    if not changes:
        return Plan(ID, notes=[f"nothing planned: {why}", *notes], declined=declined)
    return Plan(
        ID,
        changes,
        [f"no GPU settings: {why}", *notes, "set in each job's limits by `nodeagent exec`"],
        declined=declined,
    )


def _host_mem(f: Facts, p: Params, layout: ranks.RankLayout, notes: list[str]) -> list[Change]:
    """The per-rank pinned host memory cap, or a note saying why none is planned."""
    limit, how = host_mem_limit_mb(f, p, layout)
    if limit is None:
        notes.append(
            f"{HOST_MEM} not planned: {how}; TF keeps its default of {TF_DEFAULT_HOST_MEM_MB} MiB per rank"
        )
        return []
    return [
        _env(
            f,
            HOST_MEM,
            str(limit),
            f"cap each rank's pinned host memory at its share of its node ({how}); TF's default is "
            f"{TF_DEFAULT_HOST_MEM_MB} MiB per process ({GPU_PROCESS_STATE})",
        )
    ]


def _memlock(f: Facts, p: Params) -> tuple[list[Change], list[str], dict[str, str]]:
    """The soft limit raised to the hard one where the kernel check flags it; the notes; and, where
    the check flags it but nothing can be raised, why (declined)."""
    if not f.limits_readable:
        return [], [f"memlock not judged: {limits.LIMITS_PATH} unreadable"], {}
    lim = f.memlock
    if lim is None:
        return [], [f"memlock not judged: no '{MEMLOCK}' line in {limits.LIMITS_PATH}"], {}
    if lim.soft == UNLIMITED:
        return [], ["memlock is unlimited: RDMA registration is not limited"], {}
    seen = f"soft {_bytes(lim.soft)}, hard {_bytes(lim.hard)}"
    persistent = (
        "for a lasting fix set '* soft memlock unlimited' and '* hard memlock unlimited' in "
        "/etc/security/limits.d/, LimitMEMLOCK=infinity in the unit that starts jobs (slurmd, docker), or "
        f"run containers with --ulimit memlock=-1 ({NGC_ULIMIT_DOC}); advice only: it is login and "
        "service configuration, not a kernel command-line (boot) or a runtime setting nodeagent writes"
    )
    if lim.hard != UNLIMITED and lim.soft >= lim.hard:
        why = f"memlock is limited ({seen}) and a process cannot raise it: {persistent}"
        return [], [why], {MEMLOCK_FINDING: why}
    if not p.raise_memlock:
        why = f"memlock is limited ({seen}); raise_memlock=false: left as it is; {persistent}"
        return [], [why], {MEMLOCK_FINDING: why}
    after = "unlimited" if lim.hard == UNLIMITED else lim.hard
    change = Change(
        ID,
        "launcher: RLIMIT_MEMLOCK soft limit",
        seen,
        f"soft {_bytes(lim.hard)} (the hard limit)",
        Scope.PROCESS,
        "RDMA registration (NCCL over IB/RoCE, GPUDirect) pins memory against RLIMIT_MEMLOCK; a process may "
        f"raise its soft limit to the hard one ({SETRLIMIT_DOC})",
        profile_key="launcher.memlock_soft",
        value=after,
        answers=(MEMLOCK_FINDING,),
    )
    notes = [] if lim.hard == UNLIMITED else [f"memlock hard limit is {_bytes(lim.hard)}: {persistent}"]
    return [change], notes, {}


TUNER = Tuner(
    id=ID,
    title="TensorFlow GPU host memory and threads, memlock limit",
    collect=collect,
    plan=plan,
    params=Params,
    paths=(*ranks.PATHS, *limits.PATHS),
)
