"""Test helpers: recorded fixture trees from tests/fixtures, and small hand-built sysfs trees."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from nodeagent.core.finding import Finding
from nodeagent.host import SnapshotHost
from tests.support.paths import FIXTURES

if TYPE_CHECKING:
    import pytest

SYSFS_FIXTURES = FIXTURES / "hwloc"
NVIDIA_SMI_FIXTURES = FIXTURES / "nvidia-smi"
FIXTURE_TREES = sorted(p.name.removesuffix(".tar.bz2") for p in SYSFS_FIXTURES.glob("*.tar.bz2"))

_cache: dict[str, SnapshotHost] = {}


def fixture_host(name: str) -> SnapshotHost:
    """An hwloc fixture tree (read-only, shared between tests: reading it is the slow part)."""
    archive = SYSFS_FIXTURES / f"{name}.tar.bz2"
    if name not in _cache:
        _cache[name] = SnapshotHost(archive)
    host = _cache[name]
    host.refresh()
    return host


def nvidia_smi_text(name: str) -> str:
    return (NVIDIA_SMI_FIXTURES / name).read_text()


def make_tree(
    root: Path,
    files: Mapping[str, str],
    links: Mapping[str, str] | None = None,
    commands: Mapping[str, str] | None = None,
) -> SnapshotHost:
    """A snapshot folder from {"/sys/...": content}, {"/sys/link": "target"} and {"cmd-name": stdout}."""
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    for path, dest in (links or {}).items():
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(dest)
    for name, stdout in (commands or {}).items():
        (root / "commands").mkdir(exist_ok=True)
        (root / "commands" / f"{name}.txt").write_text(stdout)
    for marker in ("sys", "proc"):
        (root / marker).mkdir(exist_ok=True)
    return SnapshotHost(root)


# PCI device attributes for hand-built trees (pci_tree).
GPU = {"class": "0x030200", "vendor": "0x10de", "device": "0x20b0"}
NIC = {"class": "0x020700", "vendor": "0x15b3", "device": "0x101b"}
ETH = {"class": "0x020000", "vendor": "0x8086", "device": "0x1521"}
BRIDGE = {"class": "0x060400", "vendor": "0x1000", "device": "0xc010"}


def pci_tree(
    root: Path,
    devices: Mapping[str, Mapping[str, str]],
    *,
    rdma: Mapping[str, str] | None = None,
    netdevs: Mapping[str, tuple[str, int]] | None = None,
    nodes: Mapping[int, str] | None = None,
    files: Mapping[str, str] | None = None,
    links: Mapping[str, str] | None = None,
    commands: Mapping[str, str] | None = None,
) -> SnapshotHost:
    """A sysfs tree. `devices` maps a path below /sys/devices ("pci0000:00/0000:00:01.0/0000:01:00.0")
    to the device's attributes; bridges on the way get BRIDGE attributes unless listed themselves.
    `rdma` maps an RDMA device name to its PCI address, `netdevs` a netdev to (PCI address, Mb/s),
    `nodes` a NUMA node to its CPU list."""
    all_files: dict[str, str] = dict(files or {})
    all_links: dict[str, str] = dict(links or {})
    paths: dict[str, Mapping[str, str]] = {}
    for path, attrs in devices.items():
        parts = path.split("/")
        for i in range(2, len(parts)):
            paths.setdefault("/".join(parts[:i]), BRIDGE)
        paths[path] = attrs
    where: dict[str, str] = {}
    for path, attrs in paths.items():
        address = path.rsplit("/", 1)[-1]
        where[address] = f"/sys/devices/{path}"
        all_files[f"/sys/devices/{path}/class"] = "0x060400\n"
        for name, value in attrs.items():
            all_files[f"/sys/devices/{path}/{name}"] = value + "\n"
        all_links[f"/sys/bus/pci/devices/{address}"] = f"/sys/devices/{path}"
    for name, address in (rdma or {}).items():
        base = f"/sys/class/infiniband/{name}"
        all_links[f"{base}/device"] = where[address]
        all_files[f"{base}/ports/1/state"] = "4: ACTIVE\n"
        all_files[f"{base}/ports/1/phys_state"] = "5: LinkUp\n"
        all_files[f"{base}/ports/1/rate"] = "200 Gb/sec (4X HDR)\n"
        all_files[f"{base}/ports/1/link_layer"] = "InfiniBand\n"
    for name, (address, mbps) in (netdevs or {}).items():
        all_links[f"/sys/class/net/{name}/device"] = where[address]
        all_files[f"/sys/class/net/{name}/speed"] = f"{mbps}\n"
        all_files[f"/sys/class/net/{name}/type"] = "1\n"
    if nodes:
        cpus = sorted({c for spec in nodes.values() for c in _cpus(spec)})
        all_files["/sys/devices/system/cpu/online"] = f"{cpus[0]}-{cpus[-1]}\n"
        for node, spec in nodes.items():
            all_files[f"/sys/devices/system/node/node{node}/cpulist"] = spec + "\n"
    return make_tree(root, all_files, all_links, commands)


def _cpus(spec: str) -> list[int]:
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def findings_about(findings: list[Finding], subject: str) -> list[Finding]:
    return [f for f in findings if f.subject == subject]


def one_finding(findings: list[Finding], subject: str) -> Finding:
    """The single finding about `subject`; fails showing every finding when there is not exactly one."""
    found = findings_about(findings, subject)
    assert len(found) == 1, [(f.subject, f.status, f.summary) for f in findings]
    return found[0]


def modules_loaded_by(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` a fresh interpreter has imported after running `code`."""
    import json
    import subprocess
    import sys

    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))\n"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`nodeagent ARGS` in this process, as its entry point runs it: exit code, stdout, stderr."""
    from nodeagent.cli.main import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


# One entry of a folder as lstat sees it: mode, inode, device number, size, mtime, a link's target.
Entry = tuple[int, int, int, int, int, str]


def listing(folder: Path) -> dict[str, Entry]:
    """Every entry of `folder` as lstat sees it (never following a link), and a link's target: what
    a refused write must leave exactly as it was."""
    import os
    import stat

    out: dict[str, Entry] = {}
    for name in os.listdir(folder):
        st = os.lstat(folder / name)
        target = os.readlink(folder / name) if stat.S_ISLNK(st.st_mode) else ""
        out[name] = (st.st_mode, st.st_ino, st.st_rdev, st.st_size, st.st_mtime_ns, target)
    return out
