"""A writable copy of a node's /sys and /proc for the apply/revert tests: 4 CPUs on 2 NUMA nodes
(intel_pstate, intel_idle, THP, hugetlb, NUMA balancing), as a plain folder (build_node) or as a
host whose writes behave as the kernel's do (SysfsHost).

A plain file is not sysfs: it shows what was written, without the newline sysfs adds and without
re-rendering a selector. Whole-tree comparisons of plain copies therefore go through
`shown_by_kernel`, which applies exactly those two rules of sysfs `show` and nothing else.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from nodeagent.host import LocalHost
from nodeagent.host.tree import FILE, LiveTree
from tests.support.helpers import make_tree

CPU = "/sys/devices/system/cpu"
NODE = "/sys/devices/system/node"
THP = "/sys/kernel/mm/transparent_hugepage"
HUGE = "/sys/kernel/mm/hugepages"


# -- the node: 4 CPUs on 2 NUMA nodes, intel_pstate, intel_idle, THP, hugetlb, NUMA balancing -------


def node_files() -> tuple[dict[str, str], dict[str, str]]:
    files: dict[str, str] = {
        f"{CPU}/online": "0-3\n",
        f"{CPU}/possible": "0-3\n",
        f"{CPU}/present": "0-3\n",
        f"{CPU}/intel_pstate/status": "active\n",
        f"{CPU}/intel_pstate/no_turbo": "1\n",
        f"{CPU}/cpuidle/current_driver": "intel_idle\n",
        f"{CPU}/cpuidle/current_governor": "menu\n",
        f"{NODE}/online": "0-1\n",
        f"{NODE}/possible": "0-1\n",
        f"{HUGE}/hugepages-2048kB/nr_hugepages": "2\n",
        f"{HUGE}/hugepages-2048kB/free_hugepages": "2\n",
        f"{HUGE}/hugepages-2048kB/resv_hugepages": "0\n",
        f"{HUGE}/hugepages-2048kB/surplus_hugepages": "0\n",
        f"{HUGE}/hugepages-1048576kB/nr_hugepages": "0\n",
        f"{HUGE}/hugepages-1048576kB/free_hugepages": "0\n",
        f"{HUGE}/hugepages-1048576kB/resv_hugepages": "0\n",
        f"{HUGE}/hugepages-1048576kB/surplus_hugepages": "0\n",
        f"{THP}/enabled": "always madvise [never]\n",
        f"{THP}/defrag": "[always] defer defer+madvise madvise never\n",
        "/proc/sys/kernel/numa_balancing": "1\n",
        "/proc/sys/vm/zone_reclaim_mode": "0\n",
        "/proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.1.0 root=/dev/sda1 ro quiet\n",
        "/proc/meminfo": (
            "MemTotal:       32768000 kB\nMemFree:        30000000 kB\nMemAvailable:   31000000 kB\n"
        ),
    }
    links: dict[str, str] = {}
    idle = [
        ("POLL", 0, "CPUIDLE CORE POLL IDLE"),
        ("C1", 2, "MWAIT 0x00"),
        ("C1E", 10, "MWAIT 0x01"),
        ("C6", 133, "MWAIT 0x20"),
    ]
    for cpu in range(4):
        files[f"{CPU}/cpu{cpu}/topology/physical_package_id"] = f"{cpu // 2}\n"
        files[f"{CPU}/cpu{cpu}/topology/core_id"] = f"{cpu % 2}\n"
        files[f"{CPU}/cpu{cpu}/topology/thread_siblings_list"] = f"{cpu}\n"
        pol = f"{CPU}/cpufreq/policy{cpu}"
        files.update(
            {
                f"{pol}/scaling_driver": "intel_pstate\n",
                f"{pol}/scaling_governor": "powersave\n",
                f"{pol}/scaling_available_governors": "performance powersave\n",
                f"{pol}/energy_performance_preference": "balance_performance\n",
                f"{pol}/energy_performance_available_preferences": (
                    "default performance balance_performance balance_power power \n"
                ),
                f"{pol}/related_cpus": f"{cpu}\n",
                f"{pol}/affected_cpus": f"{cpu}\n",
            }
        )
        links[f"{CPU}/cpu{cpu}/cpufreq"] = f"../cpufreq/policy{cpu}"
        for index, (name, latency, desc) in enumerate(idle):
            base = f"{CPU}/cpu{cpu}/cpuidle/state{index}"
            files.update(
                {
                    f"{base}/name": f"{name}\n",
                    f"{base}/desc": f"{desc}\n",
                    f"{base}/latency": f"{latency}\n",
                    f"{base}/disable": "0\n",
                }
            )
    for node in range(2):
        files[f"{NODE}/node{node}/cpulist"] = f"{2 * node}-{2 * node + 1}\n"
        files[f"{NODE}/node{node}/meminfo"] = f"Node {node} MemTotal:       16777216 kB\n"
        files[f"{NODE}/node{node}/distance"] = "10 21\n" if node == 0 else "21 10\n"
        for size, count in (("2048kB", 2 if node == 0 else 0), ("1048576kB", 0)):
            base = f"{NODE}/node{node}/hugepages/hugepages-{size}"
            files[f"{base}/nr_hugepages"] = f"{count}\n"
            files[f"{base}/free_hugepages"] = f"{count}\n"
            files[f"{base}/surplus_hugepages"] = "0\n"
        links[f"{CPU}/cpu{2 * node}/node{node}"] = f"../../node/node{node}"
    return files, links


def build_node(root: Path) -> Path:
    files, links = node_files()
    make_tree(root, files, links)
    return root


def contents(root: Path) -> dict[str, bytes]:
    """Every entry below root: file bytes, link targets, and folders."""
    out: dict[str, bytes] = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(folder) / name
            key = "/" + str(path.relative_to(root))
            if path.is_symlink():
                out[key] = b"-> " + os.readlink(path).encode()
            elif path.is_dir():
                out[key] = b"<dir>"
            else:
                out[key] = path.read_bytes()
    return out


def shown_by_kernel(now: dict[str, bytes], original: dict[str, bytes]) -> dict[str, bytes]:
    """`now` as sysfs would show it had the writes gone to the kernel: a value ends with a newline,
    and a selector shows its options with the written word in brackets. Nothing else changes, so
    a wrong value, a missing file or an extra one still differs from the original."""
    out = dict(now)
    for path, data in now.items():
        old = original.get(path)
        if old is None or data.startswith(b"-> ") or data in (b"<dir>", old):
            continue
        text, before = data.decode(), old.decode()
        if "[" in before and "[" not in text:
            word = text.strip()
            options = [w.strip("[]") for w in before.split()]
            text = " ".join(f"[{w}]" if w == word else w for w in options) + "\n"
        elif not text.endswith("\n"):
            text += "\n"
        out[path] = text.encode()
    return out


# -- a copy that behaves as the kernel does --------------------------------------------------------


class SysfsTree(LiveTree):
    """A folder copy of /sys and /proc whose writes follow the kernel's store() rules.

    One bare word per write (sysfs_streq: a trailing newline is fine, anything else is EINVAL),
    shown back with a newline; selector files (THP enabled/defrag) accept one of their options and
    show the line with it in brackets (mm/huge_memory.c); growing a per-node hugetlb pool gives at
    most `limits[node]` pages, as a fragmented node does, and moves the free and global counts
    with it (mm/hugetlb.c, set_max_huge_pages)."""

    def __init__(self, root: str, limits: dict[int, int] | None = None) -> None:
        super().__init__(root)
        self.limits = limits or {}

    def write(self, path: str, value: str) -> None:
        real = self.resolve(path)
        if real is None or self.kind(real) != FILE:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        file = Path(self._outer(real))
        old = file.read_text()
        word = value.strip()
        if len(value.rstrip("\n").split()) != 1 or value.rstrip("\n") != word:
            raise OSError(errno.EINVAL, "Invalid argument", path)
        if "[" in old:
            options = [w.strip("[]") for w in old.split()]
            if word not in options:
                raise OSError(errno.EINVAL, "Invalid argument", path)
            file.write_text(" ".join(f"[{w}]" if w == word else w for w in options) + "\n")
            return
        m = re.search(r"/node(\d+)/hugepages/(hugepages-\d+kB)/nr_hugepages$", real)
        if m:
            self._resize(file, int(m.group(1)), m.group(2), int(word))
            return
        file.write_text(word + "\n")

    def _resize(self, nr_file: Path, node: int, pool: str, want: int) -> None:
        current = int(nr_file.read_text())
        limit = self.limits.get(node)
        new = min(want, limit) if limit is not None and want > current else want
        delta = new - current
        nr_file.write_text(f"{new}\n")
        for counter in (
            nr_file.parent / "free_hugepages",
            Path(self._outer(f"{HUGE}/{pool}/nr_hugepages")),
            Path(self._outer(f"{HUGE}/{pool}/free_hugepages")),
        ):
            if counter.exists():
                counter.write_text(f"{int(counter.read_text()) + delta}\n")


class SysfsHost(LocalHost):
    def __init__(self, root: Path, limits: dict[int, int] | None = None) -> None:
        super().__init__(root=str(root), name="test-node")
        self.tree = SysfsTree(str(root), limits)
