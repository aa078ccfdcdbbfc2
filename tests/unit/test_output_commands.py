"""Every user-named output path goes through the one safe writer (nodeagent.core.safe_write), not
only `--output`: `baseline save PATH`, `snapshot -o PATH` and `report merge --output FORMAT:PATH`,
through the real CLI. A new file is created and a regular file replaced; a symbolic link (to a
regular file or to /dev/null), a FIFO or a character device at PATH is refused with one line naming
it and exit 64, and stays exactly as it was (lstat before == after, a link's target unchanged), with
no temporary file left beside it.

(`nodeagent history` writes only its own file in the state folder, never a path the user names.)
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.cli.main import main
from nodeagent.core import safe_write
from nodeagent.core.errors import UsageError
from nodeagent.gate import baseline
from nodeagent.host import recorder
from tests.support.cli import RunCli
from tests.support.helpers import listing
from tests.support.paths import VM

EX_USAGE = 64

Args = Callable[[Path], list[str]]


@pytest.fixture(scope="module")
def node_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One node's JSON result, for `report merge` to read (written by `check --output json:`)."""
    path = tmp_path_factory.mktemp("reports") / "vm.json"
    with pytest.raises(SystemExit):
        main(["check", "--root", str(VM), "--only", "numa", "--output", f"json:{path}"])
    assert json.loads(path.read_text())["findings"]
    return path


@pytest.fixture(params=["baseline save", "snapshot -o", "report merge --output"])
def command(request: pytest.FixtureRequest, node_report: Path) -> tuple[Args, int]:
    """The command writing PATH, and the mode it gives a new file."""
    commands: dict[str, tuple[Args, int]] = {
        "baseline save": (lambda p: ["baseline", "save", str(p), "--root", str(VM)], 0o644),
        # The live machine, one check's files: a snapshot is recorded here, never from a recording.
        "snapshot -o": (lambda p: ["snapshot", "--only", "numa", "-o", str(p)], 0o600),
        "report merge --output": (
            lambda p: ["report", "merge", str(node_report), "--output", f"json:{p}"],
            -1,
        ),
    }
    return commands[request.param]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with a neighbour that no output may touch."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "neighbour.txt").write_text("keep me\n")
    return out


def written(path: Path) -> bool:
    """What the commands write: a JSON document (baseline, report) or a gzip archive (snapshot)."""
    data = path.read_bytes()
    return data.startswith(b"\x1f\x8b") or isinstance(json.loads(data), dict)


def run(run_cli: RunCli, command: tuple[Args, int], target: Path) -> tuple[int, str, str]:
    """The command writing `target` (the merged report is one node's two OK findings: exit 0)."""
    args, _ = command
    return run_cli(*args(target))


# -- written -------------------------------------------------------------------------------------


def test_a_new_file_is_created(run_cli: RunCli, command: tuple[Args, int], folder: Path) -> None:
    before = listing(folder)
    target = folder / "new.out"
    code, _, err = run(run_cli, command, target)
    assert code == 0 and "Traceback" not in err, err
    assert written(target)
    after = listing(folder)
    assert set(after) == {*before, "new.out"}  # no temporary file left behind
    assert {k: v for k, v in after.items() if k != "new.out"} == before
    _, mode = command
    if mode >= 0:
        assert stat.S_IMODE(os.lstat(target).st_mode) == mode


def test_a_regular_file_is_replaced(run_cli: RunCli, command: tuple[Args, int], folder: Path) -> None:
    target = folder / "old.out"
    target.write_text("old\n")
    before = listing(folder)
    code, _, err = run(run_cli, command, target)
    assert code == 0 and "Traceback" not in err, err
    assert written(target)
    after = listing(folder)
    assert set(after) == set(before)  # no temporary file left behind
    assert after["old.out"][1] != before["old.out"][1]  # a new file renamed over the old one
    assert after["neighbour.txt"] == before["neighbour.txt"]


# -- refused -------------------------------------------------------------------------------------


def assert_refused(run_cli: RunCli, command: tuple[Args, int], target: Path, says: str) -> None:
    """Refused with one line naming `target`, exit 64; the folder (and `target`) as it was."""
    folder = target.parent
    before = listing(folder)
    code, out, err = run(run_cli, command, target)
    assert code == EX_USAGE, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(target) in lines[0] and says in lines[0], lines[0]
    assert "wrote" not in out
    assert listing(folder) == before  # lstat unchanged, the link's target too; no temporary file


def test_a_symlink_to_a_regular_file_is_refused(
    run_cli: RunCli, command: tuple[Args, int], folder: Path
) -> None:
    real = folder / "real.json"
    real.write_text("the real file\n")
    link = folder / "link.out"
    link.symlink_to(real)
    assert_refused(run_cli, command, link, "is a symbolic link")
    assert os.readlink(link) == str(real) and real.read_text() == "the real file\n"


def test_a_symlink_to_dev_null_is_refused(run_cli: RunCli, command: tuple[Args, int], folder: Path) -> None:
    link = folder / "null.out"
    link.symlink_to("/dev/null")
    null = os.lstat("/dev/null")
    assert_refused(run_cli, command, link, "is a symbolic link")
    assert os.readlink(link) == "/dev/null"
    now = os.lstat("/dev/null")
    assert stat.S_ISCHR(now.st_mode) and (now.st_ino, now.st_rdev) == (null.st_ino, null.st_rdev)


def test_a_fifo_is_refused(run_cli: RunCli, command: tuple[Args, int], folder: Path) -> None:
    fifo = folder / "pipe.out"
    os.mkfifo(fifo)  # opening it to write would block the test until a reader came: never opened
    assert_refused(run_cli, command, fifo, "is a named pipe (FIFO)")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_character_device_is_refused(run_cli: RunCli, command: tuple[Args, int], folder: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a character device (mknod) needs root")
    device = folder / "null.out"  # a /dev/null of our own, in the test's folder
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert_refused(run_cli, command, device, "is a character device")
    assert stat.S_ISCHR(os.lstat(device).st_mode)


# -- the writers themselves ----------------------------------------------------------------------
# The commands refuse a bad PATH before their slow part (reading a fleet, recording a node); the
# writers refuse it again when writing, whatever calls them.

WRITERS: dict[str, Callable[[Path], None]] = {
    "baseline.save": lambda p: baseline.save({"vm": {"memory.total_mib": 2048}}, p, "test"),
    "recorder.write": lambda p: recorder.write(recorder.Recording(), p, {"hostname": "vm"}),
    "safe_write.append_line": lambda p: safe_write.append_line(p, "10.9.0.1 ssh-ed25519 AAAA"),
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_the_writer_refuses_what_is_not_a_regular_file(writer: str, kind: str, folder: Path) -> None:
    target = folder / "target.out"
    if kind == "link":
        target.symlink_to("/dev/null")
    else:
        os.mkfifo(target)
    before = listing(folder)
    with pytest.raises(UsageError) as e:
        WRITERS[writer](target)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{target}: is a ")
    assert listing(folder) == before
