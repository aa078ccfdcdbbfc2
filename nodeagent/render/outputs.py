"""`--output FORMAT:PATH`: one run written in several formats, each file replaced atomically.

PATH is `-` (standard output) or a file: a regular file, replaced whole, or a new one. Anything else
found there is refused, never followed or replaced: a symbolic link (even to a regular file: as root,
`junit:/dev/stdout` used to replace the /dev/stdout link itself), a FIFO, a device, a socket or a
folder. The file is written to a temporary file in the same folder and renamed over PATH, the folder
held open so that every step happens in that one folder.

Every renderer takes the run's JSON document (nodeagent/render/report.schema.json), never the
engine's objects, so a document read back from a file, pulled from a remote agent or gathered
over a fleet renders the same way. A fleet document (`{hosts: {NAME: ...}, drift, outliers}`)
renders as one section (JUnit suite, Prometheus `host` label, Slurm line) per host.

The renderers are imported when used; what they share is nodeagent.render.runs (the document as one
view per host) and nodeagent.render.escape (characters a renderer must not emit).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nodeagent.core.atomic import write_atomic
from nodeagent.core.errors import UsageError

FORMATS = ("json", "junit", "prometheus", "markdown", "html", "slurm", "text")
STDOUT = "-"  # FORMAT:- writes to standard output
SCHEMA_FILE = "report.schema.json"
# Statuses someone has to act on, worst first (the order of nodeagent.core.finding.Status's ranks).


@dataclass(frozen=True)
class OutputSpec:
    format: str
    path: Path | None  # None: standard output (FORMAT:-)

    @property
    def where(self) -> str:
        """The option as the user wrote it, for messages."""
        return f"--output {self.format}:{STDOUT if self.path is None else self.path}"


def parse_output(spec: str) -> OutputSpec:
    """`FORMAT:PATH` (the first colon splits, so PATH may hold colons) or `FORMAT:-`; a PATH that
    is there already must be a regular file (module docstring)."""
    fmt, sep, path = spec.partition(":")
    choices = ", ".join(FORMATS)
    if not sep:
        raise UsageError(
            f"--output {spec}: expected FORMAT:PATH, e.g. junit:/var/log/nodeagent.xml ({choices})"
        )
    if fmt not in FORMATS:
        raise UsageError(f"--output {spec}: unknown format {fmt!r}; use one of {choices}")
    if not path:
        raise UsageError(f"--output {spec}: no path after '{fmt}:'; give the file to write, or {fmt}:-")
    if path == STDOUT:
        return OutputSpec(fmt, None)
    target = Path(path).expanduser()
    out = OutputSpec(fmt, target)
    # Refused now, before anything is written (and checked again when writing).
    _regular_or_absent(out, None)
    if not target.parent.is_dir():
        raise UsageError(f"{out.where}: the folder {target.parent} does not exist; create it first")
    return out


def parse_outputs(specs: Sequence[str]) -> list[OutputSpec]:
    """Every `--output`, parsed; at most one of them may take standard output."""
    parsed = [parse_output(s) for s in specs]
    to_stdout = [s.where for s in parsed if s.path is None]
    if len(to_stdout) > 1:
        raise UsageError(f"{' and '.join(to_stdout)}: only one output can go to standard output")
    return parsed


def render(fmt: str, doc: Mapping[str, Any]) -> str:
    """`doc` as text in `fmt` (one of FORMATS), ending with a newline."""
    if fmt == "json":
        from nodeagent.render import jsonout

        return jsonout.dumps(dict(doc)) + "\n"
    if fmt == "junit":
        from nodeagent.render.junit import junit

        return junit(doc)
    if fmt == "prometheus":
        from nodeagent.render.prometheus import prometheus

        return prometheus(doc)
    if fmt == "markdown":
        from nodeagent.render.markdown import markdown

        return markdown(doc)
    if fmt == "html":
        from nodeagent.render.markdown import html

        return html(doc)
    if fmt == "slurm":
        from nodeagent.render.slurm import slurm_lines

        return slurm_lines(doc)
    if fmt == "text":
        from nodeagent.render.text import problems

        return problems(doc)
    raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")


def write_outputs(specs: Sequence[OutputSpec], doc: Mapping[str, Any]) -> bool:
    """Render and write each output; True when one went to standard output (the command then
    prints nothing else there, so `junit:-` gives a document a parser reads).

    A file is rendered whole before anything is written, then written to a temporary file beside
    it and renamed over it (os.replace, atomic on POSIX): a reader such as node_exporter's textfile
    collector sees the old file or the new one, never half of one, and a failure leaves no partial
    file behind."""
    for spec in specs:
        text = render(spec.format, doc)
        if spec.path is None:
            import click

            click.echo(text, nl=False)
        else:
            _write_atomically(spec, text)
    return any(spec.path is None for spec in specs)


def _write_atomically(spec: OutputSpec, text: str) -> None:
    """`text` replaces the file (nodeagent.core.atomic) in the folder held open, with the mode of the
    file it replaces (else what open() would give: node_exporter, another user, reads it); what is
    at the target is looked at before writing and again just before the rename, and the file there
    after it must be the one written."""
    assert spec.path is not None
    data = text.encode("utf-8", errors="backslashreplace")
    folder = _open_folder(spec)
    try:
        before = _regular_or_absent(spec, folder)
        mode = stat.S_IMODE(before.st_mode) if before is not None else _new_file_mode()
        try:
            ours = write_atomic(
                spec.path.name,
                data,
                mode=mode,
                folder_fd=folder,
                before_replace=lambda: _regular_or_absent(spec, folder),
                # The O_PATH handle cannot be synced, and a folder one may write but not read
                # cannot be opened to sync it: the file itself is synced all the same.
                sync_folder=False,
            )
        except OSError as e:
            raise UsageError(f"{spec.where}: cannot write it ({e.strerror or e})") from None
        _check_replaced(spec, folder, ours)
    finally:
        os.close(folder)


def _open_folder(spec: OutputSpec) -> int:
    """The target's folder, open: the temporary file, the checks and the rename all happen in it,
    even if its path is renamed or re-linked meanwhile."""
    assert spec.path is not None
    parent = spec.path.parent
    # O_PATH (Linux): a handle for the *at() calls, so a folder one may write but not list works.
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return os.open(parent, flags)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{spec.where}: the folder {parent} does not exist; create it first") from None
    except OSError as e:
        raise UsageError(f"{spec.where}: cannot open the folder {parent} ({e.strerror or e})") from None


def _regular_or_absent(spec: OutputSpec, folder: int | None) -> os.stat_result | None:
    """What is at the target, never following a link: a regular file's stat, None when nothing is
    there; anything else is refused with what to do instead."""
    assert spec.path is not None
    try:
        st = os.lstat(spec.path.name if folder is not None else spec.path, dir_fd=folder)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise UsageError(
            f"{spec.where}: {spec.path.parent} is not a folder; give a file path in a folder"
        ) from None
    except OSError as e:
        raise UsageError(f"{spec.where}: cannot look at {spec.path} ({e.strerror or e})") from None
    if stat.S_ISREG(st.st_mode):
        return st
    raise UsageError(f"{spec.where}: {spec.path} {_not_a_file(spec, st)}")


def _not_a_file(spec: OutputSpec, st: os.stat_result) -> str:
    """Why a target that is not a regular file is refused, and what to give instead."""
    stdout = f"{spec.format}:{STDOUT} for standard output"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory; give a file name inside it"
    if stat.S_ISLNK(st.st_mode):
        assert spec.path is not None
        with contextlib.suppress(OSError):
            return (
                f"is a symbolic link (to {os.readlink(spec.path)}), which is never followed or "
                f"replaced; give the file's own path, or {stdout}"
            )
        return (
            f"is a symbolic link, which is never followed or replaced; give the file's own path, or {stdout}"
        )
    kinds = (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((k for test, k in kinds if test(st.st_mode)), "not a regular file")
    return f"is {kind}, not a regular file; give a file path, or {stdout}"


def _check_replaced(spec: OutputSpec, folder: int, ours: os.stat_result) -> None:
    """After the rename the target must be the file just written: else something else wrote or
    linked there at the same moment, and the run must not claim it wrote the report."""
    assert spec.path is not None
    try:
        now = os.lstat(spec.path.name, dir_fd=folder)
    except OSError as e:
        raise UsageError(
            f"{spec.where}: {spec.path} changed right after it was written ({e.strerror or e})"
        ) from None
    if (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino):
        raise UsageError(
            f"{spec.where}: {spec.path} was replaced by something else while it was written; "
            "is another program writing the same path?"
        )


def _new_file_mode() -> int:
    """What open() would give a new file: 0666 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of the run document."""
    text = resources.files("nodeagent.render").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded
