"""nodeagent.core.atomic.write_atomic: the file is replaced whole or not at all, with the mode asked,
no temporary file left behind whatever fails, and every step in one folder."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from nodeagent.core import atomic
from nodeagent.core.atomic import write_atomic


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("héllo\n", "héllo\n".encode()),
        (b"\x00\xffbytes", b"\x00\xffbytes"),
        (lambda f: f.write(b"streamed"), b"streamed"),
    ],
    ids=["text", "bytes", "callable"],
)
def test_text_bytes_or_a_writer_replace_the_file(tmp_path: Path, data: Any, expected: bytes) -> None:
    target = tmp_path / "out"
    target.write_text("old")
    written = write_atomic(target, data, mode=0o640)
    assert target.read_bytes() == expected
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert (written.st_ino, written.st_size) == (target.stat().st_ino, len(expected))
    assert names(tmp_path) == ["out"]


def test_the_mode_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "shared", "x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o644


def test_a_reader_of_the_old_file_keeps_reading_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old content")
    with open(target) as reader:
        write_atomic(target, "new content", mode=0o600)
        assert reader.read() == "old content"  # a new inode was renamed over it, never rewritten
    assert target.read_text() == "new content"


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "f").symlink_to(victim)
    write_atomic(tmp_path / "f", "new", mode=0o600)
    assert victim.read_text() == "precious" and not (tmp_path / "f").is_symlink()


def _boom(_f: BinaryIO) -> None:
    raise RuntimeError("renderer bug")


def _refuse() -> None:
    raise ValueError("changed while writing")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"data": _boom}, RuntimeError),
        ({"data": "new", "before_replace": _refuse}, ValueError),
    ],
    ids=["the writer fails", "the last look refuses"],
)
def test_a_failure_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    with pytest.raises(error):
        write_atomic(target, mode=0o600, **kwargs)
    assert target.read_text() == "old" and names(tmp_path) == ["f"]


@pytest.mark.parametrize("failing", ["fsync", "replace", "fchmod"])
def test_a_full_disk_is_an_oserror_and_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    def no_space(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = tmp_path / "f"
    target.write_text("old")
    monkeypatch.setattr(os, failing, no_space)
    with pytest.raises(OSError) as e:
        write_atomic(target, "new", mode=0o600)
    monkeypatch.undo()
    assert e.value.errno == errno.ENOSPC
    assert target.read_text() == "old" and names(tmp_path) == ["f"]


def _failing_folder_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_folder_that_cannot_be_synced_is_an_error_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_folder_fsync(monkeypatch)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "strict", "x", mode=0o600)
    write_atomic(tmp_path / "lenient", "y", mode=0o600, sync_folder=False)
    assert (tmp_path / "lenient").read_text() == "y"


def test_missing_folders_are_made_only_when_asked(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "f"
    with pytest.raises(FileNotFoundError):
        write_atomic(deep, "x", mode=0o600)
    write_atomic(deep, "x", mode=0o600, make_folders=True)
    assert deep.read_text() == "x"


def test_with_a_folder_held_open_every_step_happens_in_it(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        folder.rename(tmp_path / "moved")  # the path now names nothing; the handle still the folder
        write_atomic("r.xml", "<r/>", mode=0o644, folder_fd=fd)
        with pytest.raises(ValueError, match="bare name"):
            write_atomic("sub/r.xml", "<r/>", mode=0o644, folder_fd=fd)
    finally:
        os.close(fd)
    assert names(tmp_path) == ["moved"] and (tmp_path / "moved" / "r.xml").read_text() == "<r/>"


def test_temporary_names_say_whose_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def look() -> None:
        seen.extend(p.name for p in tmp_path.iterdir() if p.name != "default.json")

    write_atomic(tmp_path / "default.json", "{}", mode=0o600, before_replace=look)
    (temp,) = seen
    assert atomic.temp_target(temp) == "default.json"
    assert atomic.temp_target("default.json") is None
    assert atomic.temp_target(".default.json.k2j4h5g6") is None  # tempfile.mkstemp's, not ours
    long_name = "x" * 250
    write_atomic(tmp_path / long_name, "{}", mode=0o600, before_replace=look)
    assert atomic.temp_target(seen[-1]) == "x" * 200  # cut so the name fits NAME_MAX
