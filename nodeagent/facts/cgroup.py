"""CPUs a job can actually use on this host: affinity, cgroup cpuset and CFS quota, read through the Host.

Sources:
- cgroup v2: Documentation/admin-guide/cgroup-v2.rst (cpu.max, cpuset.cpus.effective),
  https://docs.kernel.org/admin-guide/cgroup-v2.html
- cgroup v1: Documentation/admin-guide/cgroup-v1/cpusets.rst (cpuset.cpus, cpuset.effective_cpus, the
  "noprefix" mount option), https://docs.kernel.org/admin-guide/cgroup-v1/cpusets.html, and
  Documentation/scheduler/sched-bwc.rst (cpu.cfs_quota_us, cpu.cfs_period_us; a group is also throttled
  by every ancestor's quota), https://docs.kernel.org/scheduler/sched-bwc.html
- proc(5): /proc/self/status (Cpus_allowed_list, Mems_allowed_list), /proc/self/cgroup,
  /proc/self/mountinfo, and the older /proc/self/cpuset.

Everything goes through the Host (no os.sched_getaffinity, no psutil), so the same code answers for
this machine, a recorded snapshot or a remote node.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass, field

from nodeagent.core import parse
from nodeagent.facts import topology
from nodeagent.facts.reader import Reader
from nodeagent.host import Host

STATUS = "/proc/self/status"
CGROUP = "/proc/self/cgroup"
CPUSET = "/proc/self/cpuset"
MOUNTINFO = "/proc/self/mountinfo"
MOUNTS = "/proc/mounts"
CGROUP_ROOT = "/sys/fs/cgroup"
# Old cpuset-only systems (and PBS/Torque nodes) mount the v1 cpuset hierarchy at /dev/cpuset.
DEV_CPUSET = "/dev/cpuset"

V2_FILES = ("cpu.max", "cpuset.cpus.effective", "cgroup.controllers")
V1_CPU_FILES = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
V1_CPUSET_FILES = ("cpuset.effective_cpus", "cpuset.cpus", "effective_cpus", "cpus")
# Deep enough for kubepods.slice/<qos>/<pod>/<container> and Slurm's job_N/step_N/user/task_N.
_MAX_DEPTH = 6
PATHS = (
    STATUS,
    CGROUP,
    CPUSET,
    MOUNTINFO,
    MOUNTS,
    *(f"{CGROUP_ROOT}{'/*' * d}/{f}" for d in range(_MAX_DEPTH + 1) for f in V2_FILES),
    *(
        f"{CGROUP_ROOT}/cpu*{'/*' * d}/{f}"
        for d in range(_MAX_DEPTH + 1)
        for f in (*V1_CPU_FILES, *V1_CPUSET_FILES[:2])
    ),
    *(f"{DEV_CPUSET}{'/*' * d}/{f}" for d in range(_MAX_DEPTH + 1) for f in V1_CPUSET_FILES),
)

_CFS_DEFAULT_PERIOD_US = 100_000  # cgroup-v2.rst, cpu.max: "$MAX $PERIOD", period defaults to 100000


@dataclass(frozen=True)
class Mount:
    """A cgroup hierarchy as mounted: `root` is the cgroup mounted at `point` (not "/" in containers)."""

    point: str
    root: str
    version: int  # 1 or 2
    controllers: frozenset[str]  # v1 controllers of this hierarchy; empty for v2
    noprefix: bool = False  # v1 cpuset mounted with "noprefix" (or as the legacy "cpuset" fs): "cpus"


@dataclass(frozen=True)
class CgroupCpus:
    """What limits the CPUs of a process started here, and where each limit was read."""

    affinity: list[int] | None  # Cpus_allowed_list of /proc/self/status
    mems_allowed: list[int] | None  # Mems_allowed_list
    cpuset: list[int] | None  # the innermost cgroup cpuset that applies
    cpuset_source: str | None  # the file it came from
    quota_cpus: float | None  # tightest CFS quota along the cgroup path, in CPUs; None: unlimited
    quota_source: str | None
    online: list[int]
    cpu_version: int | None  # hierarchy (1 or 2) the cpu controller is on; None: not found
    cpuset_version: int | None
    cgroup_paths: dict[str, str]  # controller ("cpu", "cpuset") -> path in /proc/self/cgroup
    namespace_root: bool  # a group path was not visible under its mount: the mount root was used
    evidence: dict[str, str] = field(default_factory=dict)  # path -> raw value, for findings
    problems: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> list[int] | None:
        """CPUs the scheduler may run a new process on: affinity ∩ cpuset ∩ online (where known)."""
        sets = [set(s) for s in (self.affinity, self.cpuset) if s is not None]
        if self.online:
            sets.append(set(self.online))
        if not sets:
            return None
        return sorted(set.intersection(*sets))

    @property
    def effective_cpus(self) -> int | None:
        """min(|allowed|, ceil(quota)): the most CPUs a job's threads can keep busy at once."""
        allowed = self.allowed
        quota = None if self.quota_cpus is None else max(1, math.ceil(self.quota_cpus))
        if allowed is None:
            return quota
        return len(allowed) if quota is None else min(len(allowed), quota)


def collect(host: Host) -> CgroupCpus:
    return host.memo("facts.cgroup", lambda: _collect(host))


# -- parsing (pure) ------------------------------------------------------------------------------


def _unescape(text: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """cgroup and cgroup2 mounts of /proc/self/mountinfo (proc(5)).

    "36 35 98:0 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct"
    -> Mount(point="/sys/fs/cgroup/cpu,cpuacct", root="/docker/abc", version=1, ...).
    """
    out: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        tail = right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mount = _mount(tail[0], _unescape(fields[4]), _unescape(fields[3]), tail[2])
        if mount:
            out.append(mount)
    return out


def parse_mounts(text: str) -> list[Mount]:
    """cgroup mounts of /proc/mounts (fstab format). It does not say which cgroup is mounted: "/"."""
    out: list[Mount] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mount = _mount(parts[2], _unescape(parts[1]), "/", parts[3])
        if mount:
            out.append(mount)
    return out


def _mount(fstype: str, point: str, root: str, options: str) -> Mount | None:
    opts = set(options.split(","))
    if fstype == "cgroup2":
        return Mount(point, root, 2, frozenset())
    if fstype == "cgroup":
        controllers = frozenset(o for o in opts if o in ("cpu", "cpuacct", "cpuset"))
        return Mount(point, root, 1, controllers, noprefix="noprefix" in opts) if controllers else None
    if fstype == "cpuset":  # the pre-cgroup cpuset file system: files have no "cpuset." prefix
        return Mount(point, root, 1, frozenset({"cpuset"}), noprefix=True)
    return None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup -> {"cpu": path, "cpuset": path, "": v2 path}. Lines: "ID:controllers:path"."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            out[""] = path
            continue
        for c in controllers.split(","):
            out.setdefault(c, path)
    return out


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 cpu.max "$MAX $PERIOD" -> CPUs ("max 100000" -> None, "150000 100000" -> 1.5)."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ValueError(f"not a cpu.max value: {text!r}")
    period = int(parts[1]) if len(parts) == 2 else _CFS_DEFAULT_PERIOD_US
    if period <= 0:
        raise ValueError(f"not a cpu.max value: {text!r}")
    if parts[0] == "max":
        return None
    quota = int(parts[0])
    if quota <= 0:
        raise ValueError(f"not a cpu.max value: {text!r}")
    return quota / period


# -- collection ----------------------------------------------------------------------------------


def _mounts(host: Host) -> tuple[list[Mount], str | None]:
    """Cgroup mounts and the file they came from; the usual layout when neither file is readable."""
    text = host.read(MOUNTINFO)
    if text is not None:
        return parse_mountinfo(text), MOUNTINFO
    text = host.read(MOUNTS)
    if text is not None:
        return parse_mounts(text), MOUNTS
    guessed: list[Mount] = []
    if host.exists(f"{CGROUP_ROOT}/cgroup.controllers"):
        guessed.append(Mount(CGROUP_ROOT, "/", 2, frozenset()))
    for name in ("cpu,cpuacct", "cpuacct,cpu", "cpu", "cpuset"):
        if host.is_dir(f"{CGROUP_ROOT}/{name}"):
            guessed.append(Mount(f"{CGROUP_ROOT}/{name}", "/", 1, frozenset(name.split(","))))
    return guessed, None


def _chain(host: Host, mount: Mount, path: str) -> tuple[list[str], bool]:
    """Folders from the process's group up to the mount point, innermost first, that exist.

    The path in /proc/self/cgroup is relative to the hierarchy's root; a container (without a cgroup
    namespace) sees its own group mounted at the mount point, and mountinfo's root field names that
    group. When the path lies outside the mounted root, or does not exist below it, the namespace
    root is what is mounted, and the mount point itself is the group: the second value says so.
    """
    root = mount.root.rstrip("/") or "/"
    rel = path
    if root != "/":
        rel = path[len(root) :] if path == root or path.startswith(root + "/") else "/"
    target = posixpath.normpath(f"{mount.point}/{rel.lstrip('/')}")
    point = posixpath.normpath(mount.point)
    escaped = target != point and not target.startswith(point + "/")
    if escaped:
        target = point  # "/../.." paths of processes outside a cgroup namespace
    dirs = []
    current = target
    while True:
        if host.is_dir(current):
            dirs.append(current)
        if current == point:
            break
        current = posixpath.dirname(current)
    return dirs, escaped or (bool(dirs) and dirs[0] != target)


def _collect(host: Host) -> CgroupCpus:
    r = Reader(host)
    evidence: dict[str, str] = {}
    affinity, mems = _allowed_lists(host, r, evidence)
    groups = _groups(host, evidence)
    mounts, mounts_source = _mounts(host)
    if mounts_source:
        evidence[mounts_source] = _mounts_text(mounts)

    versions: dict[str, int] = {}
    paths: dict[str, str] = {}
    namespace_root = False
    quota: float | None = None
    quota_source: str | None = None
    found = _hierarchy(mounts, groups, "cpu")
    if found:
        mount, path = found
        versions["cpu"], paths["cpu"] = mount.version, path
        dirs, fallback = _chain(host, mount, path)
        namespace_root |= fallback
        quota, quota_source = _tightest_quota(r, dirs, mount.version, evidence)

    cpuset: list[int] | None = None
    cpuset_source: str | None = None
    found = _hierarchy(mounts, groups, "cpuset")
    if found:
        mount, path = found
        versions["cpuset"], paths["cpuset"] = mount.version, path
        dirs, fallback = _chain(host, mount, path)
        namespace_root |= fallback
        cpuset, cpuset_source = _innermost_cpuset(host, r, dirs, mount, evidence)

    return CgroupCpus(
        affinity=affinity,
        mems_allowed=mems,
        cpuset=cpuset,
        cpuset_source=cpuset_source,
        quota_cpus=quota,
        quota_source=quota_source,
        online=topology.collect(host).cpus_online,
        cpu_version=versions.get("cpu"),
        cpuset_version=versions.get("cpuset"),
        cgroup_paths=paths,
        namespace_root=namespace_root,
        evidence=evidence,
        problems=r.problems,
    )


def _allowed_lists(
    host: Host, r: Reader, evidence: dict[str, str]
) -> tuple[list[int] | None, list[int] | None]:
    """Cpus_allowed_list and Mems_allowed_list of /proc/self/status (None where absent or corrupt)."""
    status = host.read(STATUS)
    if status is None:
        return None, None
    fields = parse.key_values(status)
    lists: dict[str, list[int] | None] = {}
    for key in ("Cpus_allowed_list", "Mems_allowed_list"):
        raw = fields.get(key)
        lists[key] = None
        if raw is None:
            continue
        evidence[f"{STATUS} {key}"] = raw
        try:
            lists[key] = parse.cpulist(raw)
        except ValueError:
            r.problems.append(f"{STATUS}: unparsable {key} {raw[:60]!r}")
    return lists["Cpus_allowed_list"], lists["Mems_allowed_list"]


def _groups(host: Host, evidence: dict[str, str]) -> dict[str, str]:
    """The process's group per controller, from /proc/self/cgroup (or the older /proc/self/cpuset)."""
    groups: dict[str, str] = {}
    cg_text = host.read(CGROUP)
    if cg_text is not None:
        groups = parse_proc_cgroup(cg_text)
        evidence[CGROUP] = "; ".join(line.strip() for line in cg_text.splitlines() if line.strip())[:300]
    if "cpuset" not in groups:
        # Kernels and recordings without /proc/self/cgroup still have the cpuset's own file.
        legacy = host.read_value(CPUSET)
        if legacy and legacy.startswith("/"):
            groups["cpuset"] = legacy
            evidence[CPUSET] = legacy
    return groups


def _mounts_text(mounts: list[Mount]) -> str:
    return (
        ", ".join(
            f"{m.point} (cgroup{'2' if m.version == 2 else ''}"
            + (f" {','.join(sorted(m.controllers))}" if m.controllers else "")
            + (f" root {m.root}" if m.root != "/" else "")
            + ")"
            for m in mounts
        )
        or "no cgroup mounts"
    )


def _hierarchy(mounts: list[Mount], groups: dict[str, str], controller: str) -> tuple[Mount, str] | None:
    """The mount holding `controller` and the process's group in it: a v1 hierarchy, else cgroup2."""
    v1 = [m for m in mounts if m.version == 1 and controller in m.controllers]
    if v1:
        return v1[0], groups.get(controller, "/")
    v2 = [m for m in mounts if m.version == 2]
    if v2:
        # A hybrid host mounts cgroup2 beside v1 (/sys/fs/cgroup/unified); prefer the canonical one.
        v2.sort(key=lambda m: m.point != CGROUP_ROOT)
        return v2[0], groups.get("", "/")
    return None


def _tightest_quota(
    r: Reader, dirs: list[str], version: int, evidence: dict[str, str]
) -> tuple[float | None, str | None]:
    # Every level throttles (sched-bwc.rst: a child cannot run more than its parent's quota):
    # the tightest quota along the path binds.
    quota: float | None = None
    quota_source: str | None = None
    for d in dirs:
        level, source = _quota_at(r, d, version, evidence)
        if level is not None and (quota is None or level < quota):
            quota, quota_source = level, source
    return quota, quota_source


def _innermost_cpuset(
    host: Host, r: Reader, dirs: list[str], mount: Mount, evidence: dict[str, str]
) -> tuple[list[int] | None, str | None]:
    # The innermost group's effective set already folds in every ancestor's (cpusets.rst: a
    # child's cpus are a subset of its parent's), so the first file found walking up wins.
    names = ["cpuset.cpus.effective"] if mount.version == 2 else list(V1_CPUSET_FILES)
    if mount.version == 1:
        names = names[2:] if mount.noprefix else names[:2]
    for d in dirs:
        for name in names:
            file = f"{d}/{name}"
            raw = host.read_value(file)
            if raw is None:
                continue
            cpus = r.cpulist(file)
            if not cpus:  # empty: no cpuset configured at this level; corrupt: recorded by r
                continue
            evidence[file] = raw
            return cpus, file
    return None, None


def _quota_at(
    r: Reader, folder: str, version: int, evidence: dict[str, str]
) -> tuple[float | None, str | None]:
    """The CFS quota set on one group, in CPUs; None when unlimited there or not readable."""
    if version == 2:
        path = f"{folder}/cpu.max"
        raw = r.value(path)
        if raw is None:
            return None, None
        cpus = r.parsed(path, parse_cpu_max)
        if cpus is not None:
            evidence[path] = raw
        return cpus, path
    quota_path, period_path = f"{folder}/cpu.cfs_quota_us", f"{folder}/cpu.cfs_period_us"
    quota = r.int(quota_path)
    if quota is None or quota < 0:  # -1: no limit at this level
        return None, None
    if quota == 0:  # the kernel refuses quotas below 1 ms: a corrupt value
        r.problems.append(f"{quota_path}: invalid CFS quota 0")
        return None, None
    period = r.int(period_path)
    if period is None or period <= 0:
        r.problems.append(f"{period_path}: unusable CFS period {r.value(period_path)!r} for quota {quota}")
        return None, None
    evidence[quota_path] = str(quota)
    evidence[period_path] = str(period)
    return quota / period, quota_path
