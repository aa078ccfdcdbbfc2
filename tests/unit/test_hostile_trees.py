"""Hostile recordings: each limit of the host side hit by a small input. nodeagent runs in
a subprocess with a timeout, so a regression hangs nothing; exit codes are ours (never 70), no
traceback, and the bounds on wall time are generous (the old behaviour took minutes)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from nodeagent.core import parse
from nodeagent.facts.reader import Reader
from nodeagent.host.snapshot import SnapshotHost
from tests.support.cli import CliRun, RunCli

OURS = {0, 1, 2, 3, 64}
CPU = "sys/devices/system/cpu"


def nodeagent(run_cli: RunCli, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CliRun:
    """nodeagent as a process of its own, which the timeout ends if a hostile tree makes it hang
    (minutes, where a sane tree takes seconds); never a traceback."""
    proc = run_cli(*args, env=env, timeout=timeout, process=True)
    assert "Traceback" not in proc.stderr
    return proc


def tar_bytes(members: dict[str, bytes | str], compress: bool = True) -> bytes:
    """bytes: a file; str: a symbolic link to it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if compress else "w", format=tarfile.GNU_FORMAT) as tf:
        for name, value in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value
                tf.addfile(info)
            else:
                info.size = len(value)
                tf.addfile(info, io.BytesIO(value))
    return buf.getvalue()


def small_tree(root: Path, online: bytes = b"0-3\n") -> Path:
    cpu = root / CPU
    cpu.mkdir(parents=True)
    (cpu / "online").write_bytes(online)
    (root / "proc").mkdir()
    return root


def test_dot_slash_link_resolves_fast(run_cli: RunCli, tmp_path: Path) -> None:
    # 400k "./" in a link target: an 18 KB archive that took 11 s per path resolution.
    target = "./" * 400_000 + "online"
    data = tar_bytes(
        {f"{CPU}/online": b"0-3\n", f"{CPU}/loop": target, f"{CPU}/chain": "./" * 2000 + "online"}
    )
    archive = tmp_path / "dots.tar.gz"
    archive.write_bytes(data)
    start = time.monotonic()
    host = SnapshotHost(archive)
    assert host.read(f"/{CPU}/loop") is None  # a target longer than PATH_MAX: not found
    assert host.read(f"/{CPU}/chain") == "0-3\n"  # 4000 characters: within PATH_MAX, resolves
    assert host.realpath("/" + "/".join(["sys"] + [".."] * 3000)) is None  # a path past PATH_MAX
    assert time.monotonic() - start < 20
    code, _, _ = nodeagent(run_cli, "check", "--root", str(archive), "--format", "json")
    assert code in OURS


def test_link_loop_capped(tmp_path: Path) -> None:
    links = {f"{CPU}/l{i}": f"l{i + 1}" for i in range(60)}
    host = SnapshotHost("loop.tar", data=tar_bytes({f"{CPU}/l60": b"x", **links}))
    assert host.read(f"/{CPU}/l30") == "x"  # 30 hops
    assert host.read(f"/{CPU}/l0") is None  # 60 hops: past MAXSYMLINKS


def test_huge_cpu_online_is_unparsable_fast(run_cli: RunCli, tmp_path: Path) -> None:
    online = b"0-65535," * ((1 << 20) // 8)  # 1 MiB: took minutes to parse
    with pytest.raises(ValueError):
        parse.cpulist(online.decode())
    # Within the length limit, repeated overlapping ranges are merged, not expanded again each time.
    assert parse.cpulist("0-65535," * 30_000 + "0") == list(range(65536))
    with pytest.raises(ValueError):
        parse.cpulist("0-65536")  # past MAX_CPU
    root = small_tree(tmp_path / "node", online)
    code, _, _ = nodeagent(run_cli, "check", "--root", str(root), "--format", "json", timeout=20)
    assert code in OURS


def test_value_over_read_limit_is_unreadable_with_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODEAGENT_MAX_READ_BYTES", "4096")
    root = small_tree(tmp_path / "node", b"0," * 4000)
    host = SnapshotHost(root)
    r = Reader(host)
    assert r.cpulist(f"/{CPU}/online") is None
    assert r.problems == [
        f"/{CPU}/online: unreadable: larger than 4096 bytes (limit NODEAGENT_MAX_READ_BYTES)"
    ]
    archived = SnapshotHost("n.tar", data=tar_bytes({f"{CPU}/online": b"0," * 4000}))
    assert archived.read(f"/{CPU}/online") is None
    assert archived.unreadable(f"/{CPU}/online") is not None


def test_fifo_in_root_folder_never_blocks(run_cli: RunCli, tmp_path: Path) -> None:
    root = small_tree(tmp_path / "node")
    os.unlink(root / CPU / "online")
    os.mkfifo(root / CPU / "online")
    os.mkfifo(root / "proc" / "meminfo")
    host = SnapshotHost(root)
    assert host.read(f"/{CPU}/online") is None
    assert "FIFO" in (host.unreadable(f"/{CPU}/online") or "")
    code, _, _ = nodeagent(run_cli, "check", "--root", str(root), "--format", "json", timeout=60)
    assert code in OURS
    code, _, _ = nodeagent(run_cli, "facts", "--root", str(root), "--format", "json", timeout=60)
    assert code in OURS


def test_gz_bomb_stops_at_the_limit(run_cli: RunCli, tmp_path: Path) -> None:
    zeros = b"\0" * (3 << 20)
    raw = tar_bytes({f"{CPU}/online": b"0-3\n", "proc/zeros": zeros}, compress=False)
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(gzip.compress(raw))
    code, _, err = nodeagent(run_cli, "check", "--root", str(archive), env={"NODEAGENT_MAX_ARCHIVE_MIB": "2"})
    assert code == 64
    line = err.strip()
    assert "\n" not in line
    assert "larger than 2 MiB decompressed (limit NODEAGENT_MAX_ARCHIVE_MIB)" in line


def test_member_count_limit(run_cli: RunCli, tmp_path: Path) -> None:
    archive = tmp_path / "many.tar.gz"
    archive.write_bytes(tar_bytes({f"proc/f{i}": b"1" for i in range(50)}))
    code, _, err = nodeagent(
        run_cli, "facts", "--root", str(archive), env={"NODEAGENT_MAX_ARCHIVE_MEMBERS": "20"}
    )
    assert code == 64
    assert "more than 20 members (limit NODEAGENT_MAX_ARCHIVE_MEMBERS)" in err


def test_corrupt_header_after_first_member_is_an_error(run_cli: RunCli, tmp_path: Path) -> None:
    raw = bytearray(
        tar_bytes({f"{CPU}/online": b"0-3\n", "proc/meminfo": b"MemTotal: 1 kB\n"}, compress=False)
    )
    raw[1024 + 148 : 1024 + 156] = b"garbage!"  # the second header's checksum
    archive = tmp_path / "corrupt.tar"
    archive.write_bytes(bytes(raw))
    code, _, err = nodeagent(run_cli, "check", "--root", str(archive))
    assert code == 64
    assert "corrupt or truncated tar header" in err


def test_huge_numbers_are_unparsable_not_a_crash(run_cli: RunCli, tmp_path: Path) -> None:
    big = "9" * 5000
    root = small_tree(tmp_path / "node", f"0-{big}\n".encode())
    node0 = root / "sys/devices/system/node/node0"
    node0.mkdir(parents=True)
    (node0 / "cpulist").write_text(big)
    (node0 / "distance").write_text(big)
    (root / "proc/meminfo").write_text(f"MemTotal: {big} kB\n")
    (root / "proc/cpuinfo").write_text(f"processor\t: {big}\n")
    (root / "commands").mkdir()
    (root / "commands/nvidia-smi-topo-m.txt").write_text("x")
    (root / "commands/nvidia-smi-topo-m.exit").write_text("-" + big)
    with pytest.raises(ValueError):
        parse.integer(big)
    assert parse.meminfo(f"MemTotal: {big} kB") == {}
    code, _, _ = nodeagent(run_cli, "check", "--root", str(root), "--format", "json")
    assert code in OURS
    code, _, _ = nodeagent(run_cli, "facts", "--root", str(root), "--format", "json")
    assert code in OURS


def test_facts_has_a_time_limit(tmp_path: Path) -> None:
    from nodeagent import engine
    from nodeagent.host import LocalHost

    class Slow(LocalHost):
        def read(self, path: str) -> str | None:
            time.sleep(0.5)
            return super().read(path)

    root = small_tree(tmp_path / "node")
    start = time.monotonic()
    result = engine.collect_facts(Slow(str(root), name="slow"), timeout_s=1.0)
    assert time.monotonic() - start < 20
    assert result.doc is None
    assert "not collected: did not finish within 1s" in (result.reason or "")
    assert engine.collect_facts(SnapshotHost(root), timeout_s=30).doc is not None
