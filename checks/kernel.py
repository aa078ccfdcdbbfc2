"""Kernel settings: swappiness, IO schedulers of data disks, net.core buffers, open-file and memlock limits.

Each is a default that suits a desktop and costs a training node: swapped-out input-pipeline
pages, a per-request scheduler in front of NVMe that needs none, socket buffers and backlogs
sized for 1 Gb/s, and resource limits that make RDMA registration or data loaders fail.

Sources: Documentation/admin-guide/sysctl/vm.rst (swappiness), Documentation/block/switching-sched.rst
and blk-mq.rst (schedulers), Documentation/admin-guide/sysctl/net.rst (net.core), getrlimit(2)
and fs/proc/base.c (limits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeagent.api.check import Area, Check, param
from nodeagent.core import parse
from nodeagent.core.finding import Finding, Status, unparsable
from nodeagent.facts import limits as limits_facts
from nodeagent.facts import network, system
from nodeagent.facts.limits import UNLIMITED, Limit
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

ID = "kernel"
SWAPPINESS = "vm.swappiness"
RMEM_MAX = "net.core.rmem_max"
WMEM_MAX = "net.core.wmem_max"
NETDEV_BACKLOG = "net.core.netdev_max_backlog"
NET_SYSCTLS = (RMEM_MAX, WMEM_MAX, NETDEV_BACKLOG)
BLOCK_DIRS = ("/sys/block", "/sys/class/block")
MEMINFO = "/proc/meminfo"
MEMLOCK = "Max locked memory"
NOFILE = "Max open files"

# Devices that hold no training data: loop, RAM disks, zram swap, device-mapper and md stacks
# (their members are checked instead), optical drives, floppies, network block devices.
_NOT_DATA_DISK = re.compile(r"(loop|ram|zram|dm-|md|sr|fd|nbd|nullb)\d")

MELLANOX_SYSCTL = "https://enterprise-support.nvidia.com/s/article/linux-sysctl-tuning"


@dataclass(frozen=True)
class Params:
    max_swappiness: int = param(
        10,
        "Above 10 the kernel swaps out idle input-pipeline and framework pages under page-cache "
        "pressure; tuned's throughput-performance profile sets 10 "
        "(https://docs.kernel.org/admin-guide/sysctl/vm.html#swappiness).",
    )
    min_rmem_max: int = param(
        4194304,
        "NVIDIA/Mellanox's sysctl tuning for ConnectX adapters sets net.core.rmem_max=4194304 "
        f"({MELLANOX_SYSCTL}).",
    )
    min_wmem_max: int = param(
        4194304,
        "NVIDIA/Mellanox's sysctl tuning for ConnectX adapters sets net.core.wmem_max=4194304 "
        f"({MELLANOX_SYSCTL}).",
    )
    min_netdev_max_backlog: int = param(
        250000,
        "The default 1000-packet per-CPU backlog drops packets at 100 Gb/s; NVIDIA/Mellanox set "
        f"250000 ({MELLANOX_SYSCTL}; "
        "https://docs.kernel.org/admin-guide/sysctl/net.html#netdev-max-backlog).",
    )
    fast_nic_mbps: int = param(
        25000,
        "The net.core thresholds apply when a NIC at least this fast (Mb/s, /sys/class/net/*/speed) "
        "is present; below it the kernel defaults keep up (https://docs.kernel.org/networking/scaling.html).",
    )
    nvme_schedulers: tuple[str, ...] = param(
        ("none",),
        "NVMe queues are deep and parallel; an IO scheduler only adds CPU per request "
        "(https://docs.kernel.org/block/blk-mq.html, Red Hat: 'none' for NVMe).",
    )
    ssd_schedulers: tuple[str, ...] = param(
        ("none", "mq-deadline", "kyber", "noop", "deadline"),
        "Non-rotational disks gain nothing from bfq/cfq seek scheduling, which costs CPU per request "
        "(https://docs.kernel.org/block/switching-sched.html).",
    )
    min_nofile: int = param(
        65536,
        "Data loaders, sharded datasets and per-peer sockets exhaust 1024 descriptors; distributed "
        "frameworks document 65536 (https://distributed.dask.org/en/stable/faq.html, "
        "https://docs.ray.io/en/latest/cluster/vms/user-guides/large-cluster-best-practices.html).",
    )
    memlock_unlimited: bool = param(
        True,
        "RDMA (NCCL over InfiniBand/RoCE, GPUDirect) pins registered memory against RLIMIT_MEMLOCK; "
        "NVIDIA containers run with --ulimit memlock=-1 and Red Hat's RDMA guide sets 'memlock "
        "unlimited' (https://docs.redhat.com/en/documentation/red_hat_enterprise_linux/9/html/"
        "configuring_infiniband_and_rdma_networks/increasing-the-amount-of-memory-that-users-are-"
        "allowed-to-pin-in-the-system_configuring-infiniband-and-rdma-networks).",
    )


@dataclass(frozen=True)
class Disk:
    name: str
    path: str  # the folder read: /sys/block/NAME or /sys/class/block/NAME
    scheduler: str | None  # the active one
    raw_scheduler: str
    rotational: bool | None

    @property
    def kind(self) -> str:
        if self.name.startswith("nvme"):
            return "NVMe"
        if self.name.startswith("pmem"):
            return "pmem"  # persistent memory: bio-based, no request queue to schedule
        if self.rotational is None:
            return "disk"
        return "HDD" if self.rotational else "SSD"


@dataclass(frozen=True)
class Facts:
    sysctls: dict[str, str | None]
    swap_total_kb: int | None
    block_dirs_present: bool
    disks: list[Disk]
    limits: dict[str, Limit] | None
    nic_speeds: dict[str, int | None]  # interface -> Mb/s (None: unknown, down or virtual)
    problems: list[str] = field(default_factory=list)
    rdma_ports: int = 0  # ports under /sys/class/infiniband: the memlock limit then caps their jobs


def _active_scheduler(raw: str) -> str | None:
    """ "none [mq-deadline] kyber" -> "mq-deadline"; bio-based devices print a bare "none"."""
    chosen = parse.selected(raw)
    if chosen:
        return chosen
    words = raw.split()
    return words[0] if len(words) == 1 else None


def _collect_disks(r: Reader) -> tuple[bool, list[Disk]]:
    host = r.host
    listed = {d: host.listdir(d) for d in BLOCK_DIRS}
    names = sorted({n for entries in listed.values() for n in entries or []})
    disks: list[Disk] = []
    for name in names:
        if _NOT_DATA_DISK.match(name):
            continue
        # /sys/block holds whole disks only; /sys/class/block adds partitions (no queue/, skipped)
        # and, in some recordings, disks /sys/block lacks.
        for base in BLOCK_DIRS:
            path = f"{base}/{name}"
            raw = r.value(f"{path}/queue/scheduler")
            if raw is None:
                continue
            if not raw:
                break  # an empty scheduler file: a bio-based device (zram, pmem), no request queue
            active = _active_scheduler(raw)
            if active is None:
                r.problems.append(f"{path}/queue/scheduler: unparsable value {raw[:60]!r}")
            rotational = r.int(f"{path}/queue/rotational")
            disks.append(Disk(name, path, active, raw, None if rotational is None else rotational != 0))
            break
    return any(v is not None for v in listed.values()), disks


def collect(host: Host) -> Facts:
    r = Reader(host)
    present, disks = _collect_disks(r)
    meminfo = host.read(MEMINFO)
    return Facts(
        sysctls={name: system.sysctl(host, name) for name in (SWAPPINESS, *NET_SYSCTLS)},
        swap_total_kb=None if meminfo is None else parse.meminfo(meminfo).get("SwapTotal"),
        block_dirs_present=present,
        disks=disks,
        limits=limits_facts.collect_limits(host),
        nic_speeds={n.name: n.speed_mbps for n in network.collect_nics(host)},
        problems=r.problems,
        rdma_ports=len(network.collect_rdma(host)),
    )


# -- evaluation --------------------------------------------------------------------------------


def _int(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return parse.integer(raw)
    except ValueError:
        return None


def _bytes(n: int) -> str:
    if n == UNLIMITED:
        return "unlimited"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _swappiness(f: Facts, p: Params) -> Finding:
    path = system.sysctl_path(SWAPPINESS)
    raw = f.sysctls.get(SWAPPINESS)
    if raw is None:
        return Finding(
            ID, Status.SKIPPED, f"{SWAPPINESS} not readable at {path}", {path: "(absent)"}, subject=SWAPPINESS
        )
    evidence = {path: raw}
    if f.swap_total_kb is not None:
        evidence[f"{MEMINFO} SwapTotal"] = f"{f.swap_total_kb} kB"
    value = _int(raw)
    if value is None:
        return Finding(
            ID,
            Status.WARN,
            f"{SWAPPINESS} unparsable: {raw[:40]!r}",
            evidence,
            expected=f"an integer <= {p.max_swappiness}",
            remediation="A corrupt recording: re-record the snapshot or run `sysctl vm.swappiness` on the "
            "node.",
            subject=SWAPPINESS,
        )
    return _swappiness_judged(value, f.swap_total_kb, evidence, p)


def _swappiness_judged(value: int, swap_total_kb: int | None, evidence: dict[str, str], p: Params) -> Finding:
    """A high swappiness costs only where there is swap to push pages to."""
    if value <= p.max_swappiness:
        return Finding(
            ID,
            Status.OK,
            f"{SWAPPINESS} = {value}",
            evidence,
            expected=f"<= {p.max_swappiness}",
            subject=SWAPPINESS,
        )
    if swap_total_kb == 0:
        return Finding(
            ID,
            Status.OK,
            f"{SWAPPINESS} = {value}, but no swap is configured: nothing to swap to",
            evidence,
            expected=f"<= {p.max_swappiness}",
            subject=SWAPPINESS,
        )
    return Finding(
        ID,
        Status.WARN,
        f"{SWAPPINESS} = {value} with swap configured: idle pages of the input pipeline and framework get "
        "swapped out",
        evidence,
        expected=f"<= {p.max_swappiness}",
        remediation=f"sysctl -w {SWAPPINESS}={p.max_swappiness} (persist it in "
        "/etc/sysctl.d/90-training.conf)",
        subject=SWAPPINESS,
    )


def _net_core(f: Facts, p: Params) -> Finding:
    wanted = {RMEM_MAX: p.min_rmem_max, WMEM_MAX: p.min_wmem_max, NETDEV_BACKLOG: p.min_netdev_max_backlog}
    raw = {name: f.sysctls.get(name) for name in NET_SYSCTLS}
    evidence = {system.sysctl_path(n): v if v is not None else "(absent)" for n, v in raw.items()}
    if all(v is None for v in raw.values()):
        return Finding(
            ID,
            Status.SKIPPED,
            "net.core sysctls not readable under /proc/sys/net/core",
            evidence,
            subject="net.core",
        )
    values = {n: _int(v) for n, v in raw.items() if v is not None}
    bad = [n for n, v in values.items() if v is None]
    expected = ", ".join(f"{n} >= {w}" for n, w in wanted.items())
    if bad:
        return Finding(
            ID,
            Status.WARN,
            f"net.core values unparsable: {', '.join(f'{n} = {raw[n]!r}' for n in bad)}",
            evidence,
            expected=expected,
            remediation="A corrupt recording: re-record the snapshot or run `sysctl net.core` on the node.",
            subject="net.core",
        )
    read = {n: v for n, v in values.items() if v is not None}
    low = [n for n, v in read.items() if v < wanted[n]]
    if not low:
        seen = ", ".join(f"{n.rsplit('.', 1)[-1]} {raw[n]}" for n in values)
        return Finding(
            ID,
            Status.OK,
            f"net.core buffers sized for fast NICs: {seen}",
            evidence,
            expected=expected,
            subject="net.core",
        )
    shortfall = ", ".join(f"{n} {read[n]} < {wanted[n]}" for n in low)
    remediation = (
        " ".join(f"sysctl -w {n}={wanted[n]};" for n in low) + " persist them in /etc/sysctl.d/90-net.conf."
    )
    return _net_core_low(f, p, shortfall, evidence, expected, remediation)


def _net_core_low(
    f: Facts, p: Params, shortfall: str, evidence: dict[str, str], expected: str, remediation: str
) -> Finding:
    """net.core below the 100G-class values: a WARN only where a NIC is fast enough to need them."""
    fast = sorted(
        ((s, n) for n, s in f.nic_speeds.items() if s is not None and s >= p.fast_nic_mbps), reverse=True
    )
    if not fast:
        known = sorted(((s, n) for n, s in f.nic_speeds.items() if s is not None), reverse=True)
        fastest = f"fastest: {known[0][1]} at {known[0][0]} Mb/s" if known else "no NIC speed readable"
        return Finding(
            ID,
            Status.OK,
            f"net.core below 100G-class values ({shortfall}), but no NIC at >= {p.fast_nic_mbps} Mb/s "
            f"({fastest})",
            evidence,
            expected=expected + f" once a NIC at >= {p.fast_nic_mbps} Mb/s is present",
            subject="net.core",
        )
    for speed, name in fast:
        evidence[f"/sys/class/net/{name}/speed"] = str(speed)
    nics = ", ".join(f"{n} at {s} Mb/s" for s, n in fast)
    return Finding(
        ID,
        Status.WARN,
        f"net.core sized for slow links with {nics}: {shortfall}",
        evidence,
        expected=expected,
        remediation=remediation,
        subject="net.core",
    )


def _schedulers(f: Facts, p: Params) -> list[Finding]:
    if not f.block_dirs_present:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                "no block devices listed under /sys/block or /sys/class/block",
                dict.fromkeys(BLOCK_DIRS, "(absent)"),
                subject="io-scheduler",
            )
        ]
    if not f.disks:
        return [
            Finding(
                ID,
                Status.OK,
                "no data disks with a request queue (only loop, RAM, zram or stacked devices)",
                {BLOCK_DIRS[0]: "(no data disks)"},
                subject="io-scheduler",
            )
        ]
    out: list[Finding] = []
    fine: list[Disk] = []
    for d in f.disks:
        finding = _disk_scheduler(d, p)
        if finding is None:
            fine.append(d)
        else:
            out.append(finding)
    if fine:
        out.append(
            Finding(
                ID,
                Status.OK,
                "IO schedulers: " + ", ".join(f"{d.name} {d.scheduler} ({d.kind})" for d in fine),
                {f"{d.path}/queue/scheduler": d.raw_scheduler for d in fine},
                subject="io-scheduler",
            )
        )
    return out


def _disk_scheduler(d: Disk, p: Params) -> Finding | None:
    """A WARN for a disk whose scheduler is unparsable or wrong for its kind; None when it is fine."""
    evidence = {f"{d.path}/queue/scheduler": d.raw_scheduler}
    if d.rotational is not None:
        evidence[f"{d.path}/queue/rotational"] = "1" if d.rotational else "0"
    if d.scheduler is None:
        return Finding(
            ID,
            Status.WARN,
            f"{d.name}: IO scheduler unparsable ({d.raw_scheduler[:40]!r})",
            evidence,
            expected="one scheduler in [brackets]",
            remediation="A corrupt recording: re-record the snapshot or read "
            f"{d.path}/queue/scheduler on the node.",
            subject=d.name,
        )
    if d.kind == "NVMe":
        allowed = p.nvme_schedulers
    elif d.kind == "SSD":
        allowed = p.ssd_schedulers
    else:
        # Rotating or unknown media (the scheduler's seek ordering earns its cost), or pmem.
        return None
    if d.scheduler in allowed:
        return None
    want = allowed[0] if allowed else "none"
    return Finding(
        ID,
        Status.WARN,
        f"{d.name} ({d.kind}) uses the {d.scheduler} IO scheduler; {d.kind} wants {' or '.join(allowed)}",
        evidence,
        expected=" or ".join(allowed),
        remediation=f"echo {want} > /sys/block/{d.name}/queue/scheduler; persist with a udev rule: "
        f'ACTION=="add|change", KERNEL=="{re.sub(r"[0-9]+", "[0-9]*", d.name)}", '
        f'ATTR{{queue/scheduler}}="{want}" in /etc/udev/rules.d/60-io-scheduler.rules',
        subject=d.name,
    )


def _limit_text(lim: Limit) -> str:
    def one(v: int) -> str:
        return _bytes(v) if lim.units == "bytes" else ("unlimited" if v == UNLIMITED else str(v))

    return f"soft {one(lim.soft)}, hard {one(lim.hard)}"


def _limits(f: Facts, p: Params) -> list[Finding]:
    path = limits_facts.LIMITS_PATH
    if f.limits is None:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"resource limits not readable at {path}",
                {path: "(absent)"},
                subject="limits",
            )
        ]
    memlock = f.limits.get(MEMLOCK)
    nofile = f.limits.get(NOFILE)
    return [
        _missing_limit(MEMLOCK, "memlock") if memlock is None else _memlock(memlock, p, f.rdma_ports),
        _missing_limit(NOFILE, "nofile") if nofile is None else _nofile(nofile, p),
    ]


def _limit_values(path: str, name: str, lim: Limit) -> dict[str, str]:
    """The limit as a line for people and its soft and hard values on their own ("8 MiB" or
    "unlimited"), which a playbook's thresholds and a baseline compare."""
    text = _limit_text(lim)
    soft, hard = (part.split(" ", 1)[1] for part in text.split(", "))
    return {path: f"{name}: {text}", f"{path} soft": soft, f"{path} hard": hard}


def _memlock(memlock: Limit, p: Params, rdma_ports: int) -> Finding:
    """The memlock limit, the one finding about it (the rdma check leaves it here). With RDMA ports
    on the node a limit is FAIL: registering buffers (NCCL, MPI, GPUDirect RDMA) fails beyond it
    for processes without CAP_IPC_LOCK; without, WARN (`memlock_unlimited`: a job may still use
    RDMA over a port added later, or pin host memory for CUDA)."""
    path = limits_facts.LIMITS_PATH
    if memlock.soft == UNLIMITED or (not p.memlock_unlimited and not rdma_ports):
        return Finding(
            ID,
            Status.OK,
            f"memlock {_limit_text(memlock)}",
            _limit_values(path, MEMLOCK, memlock),
            subject="memlock",
        )
    raise_now = (
        "the hard limit allows `ulimit -l unlimited` in the job script"
        if memlock.hard == UNLIMITED
        else "the hard limit must be raised first"
    )
    ports = f" on this node's {rdma_ports} RDMA port(s)" if rdma_ports else ""
    return Finding(
        ID,
        Status.FAIL if rdma_ports else Status.WARN,
        f"memlock limited ({_limit_text(memlock)}): RDMA memory registration (NCCL over "
        f"InfiniBand/RoCE, GPUDirect RDMA){ports} fails beyond it with 'Cannot allocate memory'",
        _limit_values(path, MEMLOCK, memlock),
        expected="unlimited",
        remediation=f"Set '* soft memlock unlimited' and '* hard memlock unlimited' in "
        "/etc/security/limits.d/rdma.conf, LimitMEMLOCK=infinity for systemd services that start "
        f"jobs (slurmd), docker run --ulimit memlock=-1; {raise_now}.",
        subject="memlock",
        fix="pinned-memory",
    )


def _nofile(nofile: Limit, p: Params) -> Finding:
    path = limits_facts.LIMITS_PATH
    if nofile.soft == UNLIMITED or nofile.soft >= p.min_nofile:
        return Finding(
            ID,
            Status.OK,
            f"nofile {_limit_text(nofile)}",
            {path: f"{NOFILE}: {_limit_text(nofile)}"},
            expected=f">= {p.min_nofile}",
            subject="nofile",
        )
    hint = (
        f"`ulimit -n {p.min_nofile}` in the job script (the hard limit allows it)"
        if nofile.hard == UNLIMITED or nofile.hard >= p.min_nofile
        else f"raise the hard limit first: '* hard nofile {p.min_nofile}'"
    )
    return Finding(
        ID,
        Status.WARN,
        f"nofile {_limit_text(nofile)}: below {p.min_nofile}; data loader workers and per-peer "
        "sockets run out of descriptors",
        {path: f"{NOFILE}: {_limit_text(nofile)}"},
        expected=f">= {p.min_nofile}",
        remediation=f"Set '* soft nofile {p.min_nofile}' and '* hard nofile {p.min_nofile}' in "
        f"/etc/security/limits.d/90-nofile.conf (LimitNOFILE= for systemd services); now: {hint}.",
        subject="nofile",
    )


def _missing_limit(name: str, subject: str) -> Finding:
    path = limits_facts.LIMITS_PATH
    return Finding(
        ID,
        Status.WARN,
        f"'{name}' missing or unparsable in {path}",
        {path: f"{name}: (missing)"},
        expected=f"a '{name}' line with soft and hard values",
        remediation="A corrupt or truncated recording: re-record the snapshot or run `ulimit -a` on the "
        "node.",
        subject=subject,
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    findings = [_swappiness(f, p), _net_core(f, p)]
    findings += _schedulers(f, p)
    findings += _limits(f, p)
    findings += unparsable(ID, f.problems, "block device file(s)", "`lsblk -t`")
    return findings


CHECK = Check(
    id=ID,
    title="Kernel settings",
    area=Area.KERNEL,
    tags=("preflight", "kernel"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=(
        *(system.sysctl_path(n) for n in (SWAPPINESS, *NET_SYSCTLS)),
        MEMINFO,
        *(f"{d}/*/queue/{a}" for d in BLOCK_DIRS for a in ("scheduler", "rotational")),
        limits_facts.LIMITS_PATH,
        *network.PATHS,
    ),
)
