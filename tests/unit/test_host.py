"""Hosts read the same through links, in folders and archives, and never escape a recorded tree."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from nodeagent.core.errors import UsageError
from nodeagent.host import LocalHost, SnapshotHost, command_name, open_host
from tests.support.helpers import fixture_host, make_tree


def test_command_name() -> None:
    assert command_name(["nvidia-smi", "topo", "-m"]) == "nvidia-smi-topo-m"
    assert command_name(["nvidia-smi", "-q", "-x"]) == "nvidia-smi-q-x"
    assert command_name(["a b", "--x=1/2"]) == "a_b-x_1_2"


def test_hwloc_archive_with_one_top_folder_opens_directly() -> None:
    host = fixture_host("40intel64-2g2n4c+pcilocality")
    assert host.read_value("/sys/devices/system/cpu/online") == "0-39"
    # bus/pci/devices entries are relative links into /sys/devices
    assert (
        host.realpath("/sys/bus/pci/devices/0000:43:00.0")
        == "/sys/devices/pci0000:40/0000:40:03.0/0000:43:00.0"
    )
    assert host.read_value("/sys/class/net/ib0/device/numa_node") == "2"
    assert host.readlink("/sys/bus/pci/devices/0000:43:00.0/driver") == "../../../../bus/pci/drivers/ib_qib"
    assert host.glob("/sys/devices/system/node/node*") == [
        f"/sys/devices/system/node/node{i}" for i in range(4)
    ]
    assert host.read("/sys/nonexistent") is None
    assert host.listdir("/sys/nonexistent") is None


def test_folder_links_resolve_inside_the_tree(tmp_path: Path) -> None:
    host = make_tree(
        tmp_path,
        {"/sys/devices/x/value": "42\x00\x00", "/etc/passwd": "tree's own"},
        links={
            "/sys/class/thing/x": "../../devices/x",
            "/sys/abs": "/etc",  # absolute: must mean the tree's /etc, not this machine's
            "/sys/escape": "../../../../../../etc",  # climbs above the root: stays at the root
            "/sys/loop": "loop",
        },
    )
    assert host.read("/sys/class/thing/x/value") == "42"  # trailing NULs dropped
    assert host.read("/sys/abs/passwd") == "tree's own"
    assert host.read("/sys/escape/passwd") == "tree's own"
    assert host.read("/sys/loop") is None
    assert host.readlink("/sys/class/thing/x") == "../../devices/x"
    assert host.realpath("/sys/class/thing/x") == "/sys/devices/x"
    assert host.is_dir("/sys/class/thing/x")


def test_archive_links_never_reach_this_machine(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, target in (("node/sys/abs", "/etc"), ("node/sys/up", "../../../../etc")):
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
        info = tarfile.TarInfo("node/proc/meminfo")
        data = b"MemTotal: 1 kB\n"
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    host = SnapshotHost(archive)
    assert host.read("/sys/abs/hostname") is None
    assert host.read("/sys/up/hostname") is None
    assert host.read("/proc/meminfo") == "MemTotal: 1 kB\n"


@pytest.mark.parametrize("content", [b"", b"not an archive at all", b"\x1f\x8b\x08\x00garbage"])
def test_corrupt_archive_is_a_usage_error(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(content)
    with pytest.raises(UsageError, match=r"bad\.tar\.gz"):
        SnapshotHost(bad)


def test_truncated_archive_is_a_usage_error(tmp_path: Path) -> None:
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tf:
        data = os.urandom(50_000)
        info = tarfile.TarInfo("sys/blob")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[:20_000])
    with pytest.raises(UsageError, match=r"cut\.tar\.gz"):
        SnapshotHost(cut)


def test_folder_without_sys_or_proc_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(UsageError, match="no sys/ or proc/"):
        open_host(str(tmp_path))


def test_recorded_commands(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {}, commands={"nvidia-smi-topo-m": "GPU0 ..."})
    (tmp_path / "commands" / "tool-x.txt").write_text("")
    (tmp_path / "commands" / "tool-x.exit").write_text("3\n")
    (tmp_path / "commands" / "tool-x.err").write_text("boom")
    ok = host.run(["nvidia-smi", "topo", "-m"])
    assert ok.ok and ok.stdout == "GPU0 ..."
    failed = host.run(["tool", "-x"])
    assert (failed.exited, failed.stderr) == (3, "boom")
    missing = host.run(["nope"])
    assert missing.exited == 127 and "not recorded" in missing.stderr


def test_local_host_commands_never_raise() -> None:
    host = LocalHost()
    assert host.run(["true"]).ok
    assert host.run(["definitely-not-a-tool-xyz"]).exited == 127
    slow = host.run(["sleep", "5"], timeout=0.2)
    assert slow.exited == 124 and "timed out" in slow.stderr


def test_local_host_reads_this_machine() -> None:
    host = LocalHost()
    assert host.read_value("/proc/sys/kernel/osrelease") == os.uname().release
    assert host.read("/proc/self/definitely-absent") is None


def test_snapshot_is_read_only_unless_writable(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {"/sys/kernel/mm/x": "1"})
    with pytest.raises(PermissionError):
        host.write("/sys/kernel/mm/x", "2")
    writable = SnapshotHost(tmp_path, writable=True)
    writable.write("/sys/kernel/mm/x", "2")
    assert writable.read_value("/sys/kernel/mm/x") == "2"


def test_memo_computes_once_per_run() -> None:
    host = LocalHost()
    calls: list[int] = []

    def value(v: int) -> int:
        calls.append(v)
        return v

    assert host.memo("k", lambda: value(7)) == 7
    assert host.memo("k", lambda: value(8)) == 7
    host.refresh()
    assert host.memo("k", lambda: value(9)) == 9
    assert calls == [7, 9]
