"""`--output FORMAT:PATH` through the real CLI, one test per kind of PATH: a new file or a regular
file is written (atomically, nothing else in the folder touched); a symbolic link (even to a
regular file), a dangling link, a FIFO, a character device, a folder or a socket is refused with
one line and exit 64, and stays exactly as it was; `FORMAT:-` is standard output.

Each test compares the folder's listing (lstat: never following a link) before and after.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import RunCli
from tests.support.helpers import listing
from tests.support.paths import VM

EX_USAGE = 64
# The recorded VM's numa check: two OK findings, exit 0 (quick: one check).
CHECK = ["check", "--root", str(VM), "--only", "numa"]


def is_junit(text: str) -> bool:
    return ET.fromstring(text).tag in ("testsuites", "testsuite")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with a neighbour that no output may touch."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "neighbour.txt").write_text("keep me\n")
    return out


def assert_refused(code: int, stdout: str, stderr: str, path: Path, says: str) -> None:
    assert code == EX_USAGE, (code, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert str(path) in lines[0] and says in lines[0], lines[0]
    assert "Traceback" not in stderr and stdout == ""


# -- written -------------------------------------------------------------------------------------


def test_a_new_file_is_written(run_cli: RunCli, folder: Path) -> None:
    before = listing(folder)
    target = folder / "report.xml"
    code, _, err = run_cli(*CHECK, "--output", f"junit:{target}")
    assert code == 0 and err == "", err
    assert is_junit(target.read_text())
    after = listing(folder)
    assert set(after) == {*before, "report.xml"}  # no temporary file left behind
    assert stat.S_ISREG(after["report.xml"][0])
    assert {k: v for k, v in after.items() if k != "report.xml"} == before


def test_an_existing_regular_file_is_replaced_whole(run_cli: RunCli, folder: Path) -> None:
    target = folder / "report.xml"
    target.write_text("old\n")
    target.chmod(0o640)
    before = listing(folder)
    code, _, err = run_cli(*CHECK, "--output", f"junit:{target}")
    assert code == 0 and err == "", err
    assert is_junit(target.read_text())
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file keeps its mode
    after = listing(folder)
    assert set(after) == set(before)
    assert after["report.xml"][1] != before["report.xml"][1]  # a new file renamed over the old one
    assert {k: v for k, v in after.items() if k != "report.xml"} == {
        k: v for k, v in before.items() if k != "report.xml"
    }


# -- refused -------------------------------------------------------------------------------------


def test_a_symlink_to_a_regular_file_is_refused(run_cli: RunCli, folder: Path) -> None:
    real = folder / "real.xml"
    real.write_text("the real file\n")
    link = folder / "report.xml"
    link.symlink_to(real)
    before = listing(folder)
    code, out, err = run_cli(*CHECK, "--output", f"junit:{link}")
    assert_refused(code, out, err, link, "is a symbolic link")
    assert f"to {real}" in err and "junit:-" in err  # where it points, and what to do instead
    assert listing(folder) == before
    assert os.readlink(link) == str(real) and real.read_text() == "the real file\n"


def test_a_dangling_symlink_is_refused(run_cli: RunCli, folder: Path) -> None:
    missing = folder / "nowhere" / "report.xml"
    link = folder / "report.xml"
    link.symlink_to(missing)
    before = listing(folder)
    code, out, err = run_cli(*CHECK, "--output", f"junit:{link}")
    assert_refused(code, out, err, link, "is a symbolic link")
    assert listing(folder) == before
    assert not missing.parent.exists()  # not followed: nothing created where it points


def test_dev_stdout_is_refused_and_stays_a_link(run_cli: RunCli) -> None:
    """The reported bug: as root, `junit:/dev/stdout` replaced the /dev/stdout link with a file."""
    dev_stdout = Path("/dev/stdout")
    if not dev_stdout.is_symlink():
        pytest.skip("/dev/stdout is not a symbolic link here")
    target = os.readlink(dev_stdout)
    code, out, err = run_cli(*CHECK, "--output", "junit:/dev/stdout")
    assert_refused(code, out, err, dev_stdout, "is a symbolic link")
    assert "junit:-" in err
    assert dev_stdout.is_symlink() and os.readlink(dev_stdout) == target
    assert not [p for p in os.listdir("/dev") if p.startswith(".stdout.")]  # no temporary file


def test_a_fifo_is_refused_and_never_opened(run_cli: RunCli, folder: Path) -> None:
    fifo = folder / "report.xml"
    os.mkfifo(fifo)  # opening it to write would block this test until a reader came
    before = listing(folder)
    code, out, err = run_cli(*CHECK, "--output", f"junit:{fifo}")
    assert_refused(code, out, err, fifo, "is a named pipe (FIFO)")
    assert listing(folder) == before


def test_a_character_device_is_refused(run_cli: RunCli, folder: Path) -> None:
    if os.geteuid() == 0:  # a /dev/null of our own, in the test's folder
        device = folder / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        device = Path("/dev/null")
    before = listing(device.parent) if device.parent == folder else None
    code, out, err = run_cli(*CHECK, "--output", f"junit:{device}")
    assert_refused(code, out, err, device, "is a character device")
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    if before is not None:
        assert listing(folder) == before


def test_dev_null_stays_a_character_device(run_cli: RunCli) -> None:
    code, out, err = run_cli(*CHECK, "--output", "prometheus:/dev/null")
    assert_refused(code, out, err, Path("/dev/null"), "is a character device")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    assert not [p for p in os.listdir("/dev") if p.startswith(".null.")]


def test_a_directory_is_refused(run_cli: RunCli, folder: Path) -> None:
    inner = folder / "reports"
    inner.mkdir()
    before = listing(folder)
    code, out, err = run_cli(*CHECK, "--output", f"junit:{inner}")
    assert_refused(code, out, err, inner, "is a directory")
    assert listing(folder) == before and os.listdir(inner) == []


@contextlib.contextmanager
def unix_socket(path: Path) -> Iterator[None]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        yield
    finally:
        sock.close()


def test_a_socket_is_refused(run_cli: RunCli, folder: Path) -> None:
    path = folder / "report.sock"
    if len(str(path)) >= 108:  # sun_path's size on Linux
        pytest.skip("the temporary folder's path is too long for a Unix socket")
    with unix_socket(path):
        before = listing(folder)
        code, out, err = run_cli(*CHECK, "--output", f"junit:{path}")
        assert_refused(code, out, err, path, "is a socket")
        assert listing(folder) == before


# -- standard output -----------------------------------------------------------------------------


def test_dash_is_standard_output_and_only_that(
    run_cli: RunCli, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder)
    before = listing(folder)
    code, out, err = run_cli(*CHECK, "--output", "junit:-")
    assert code == 0 and err == "", err
    assert is_junit(out)  # the document alone: no table, no problem lines around it
    assert listing(folder) == before  # no file named "-"


def test_dash_with_a_file_output(run_cli: RunCli, folder: Path) -> None:
    code, out, _ = run_cli(*CHECK, "--output", "slurm:-", "--output", f"json:{folder / 'r.json'}")
    assert code == 0 and out == ""  # the Slurm reason of a node that may run the job: none
    assert (folder / "r.json").is_file()


def test_two_outputs_to_standard_output_are_refused(run_cli: RunCli) -> None:
    code, out, err = run_cli(*CHECK, "--output", "junit:-", "--output", "json:-")
    assert code == EX_USAGE and out == "" and "only one output can go to standard output" in err


# -- races ---------------------------------------------------------------------------------------


def test_a_link_put_there_while_writing_is_not_replaced(
    run_cli: RunCli, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone turns the file into a link between the first look and the rename: refused, the link
    kept, the temporary file removed."""
    target = folder / "report.xml"
    target.write_text("old\n")
    victim = folder / "victim.txt"
    victim.write_text("precious\n")
    real_fsync = os.fsync

    def swap_then_fsync(fd: int, *args: Any) -> None:
        if target.exists() and not target.is_symlink():
            target.unlink()
            target.symlink_to(victim)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", swap_then_fsync)
    code, out, err = run_cli(*CHECK, "--output", f"junit:{target}")
    assert_refused(code, out, err, target, "is a symbolic link")
    assert target.is_symlink() and victim.read_text() == "precious\n"
    assert sorted(os.listdir(folder)) == ["neighbour.txt", "report.xml", "victim.txt"]
