"""`--output FORMAT:PATH`: one run written in several formats, each file replaced atomically.

Every renderer takes the run's JSON document (nodeagent/render/report.schema.json), never the
engine's objects, so a document read back from a file, pulled from a remote agent or gathered
over a fleet renders the same way. A fleet document (`{hosts: {NAME: ...}, drift, outliers}`)
renders as one section (JUnit suite, Prometheus `host` label, Slurm line) per host.

This module also holds what the renderers share: `host_runs` (the document as one view per host),
`attention` (the findings that need someone to act), `xml_safe` (text any XML or HTML parser
accepts). The renderers themselves are imported when used.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nodeagent.errors import UsageError
from nodeagent.finding import Status

FORMATS = ("json", "junit", "prometheus", "markdown", "html", "slurm")
SCHEMA_FILE = "report.schema.json"
# Statuses someone has to act on, worst first (the order of nodeagent.finding.Status's ranks).
ATTENTION = (Status.FAIL, Status.UNKNOWN, Status.WARN)


@dataclass(frozen=True)
class OutputSpec:
    format: str
    path: Path


def parse_output(spec: str) -> OutputSpec:
    """`FORMAT:PATH` (the first colon splits, so PATH may hold colons), checked before any run."""
    fmt, sep, path = spec.partition(":")
    choices = ", ".join(FORMATS)
    if not sep:
        raise UsageError(
            f"--output {spec}: expected FORMAT:PATH, e.g. junit:/var/log/nodeagent.xml ({choices})"
        )
    if fmt not in FORMATS:
        raise UsageError(f"--output {spec}: unknown format {fmt!r}; use one of {choices}")
    if not path:
        raise UsageError(f"--output {spec}: no path after '{fmt}:'; give the file to write")
    target = Path(path).expanduser()
    if target.is_dir():
        raise UsageError(f"--output {spec}: {target} is a directory; give a file name inside it")
    return OutputSpec(fmt, target)


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
    raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")


def write_outputs(specs: Sequence[OutputSpec], doc: Mapping[str, Any]) -> None:
    """Render and write each output. A file is rendered whole before anything is written, then
    written to a temporary file beside it and renamed over it (os.replace, atomic on POSIX): a
    reader such as node_exporter's textfile collector sees the old file or the new one, never half
    of one, and a failure leaves no partial file behind."""
    for spec in specs:
        _write_atomically(spec, render(spec.format, doc))


def _write_atomically(spec: OutputSpec, text: str) -> None:
    target = spec.path
    where = f"--output {spec.format}:{target}"
    if not target.parent.is_dir():
        raise UsageError(f"{where}: the folder {target.parent} does not exist; create it first")
    if target.is_dir():
        raise UsageError(f"{where}: {target} is a directory; give a file name inside it")
    mode = _mode_for(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates the file 0600: node_exporter (another user) could not read it.
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as e:
        _remove_quietly(tmp)
        raise UsageError(f"{where}: cannot write it ({e.strerror or e})") from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def _mode_for(target: Path) -> int:
    """The mode the file keeps (an existing file's), or what open() would give a new one."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of the run document."""
    text = resources.files("nodeagent.render").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


# -- what the renderers share ----------------------------------------------------------------------


@dataclass(frozen=True)
class HostRun:
    """One host's part of a document: its checks and findings, or the error that kept it out."""

    host: str
    status: Status
    started: float | None
    duration_s: float | None
    checks: list[Mapping[str, Any]]
    findings: list[Mapping[str, Any]]
    timed_out: frozenset[str]  # ids of the checks cut at a time limit or the run's budget
    error: Mapping[str, Any] | None  # a fleet host that gave no result: {kind, message}
    doc: Mapping[str, Any]  # the host's own document: playbook, budget_s, verdict, bench, facts

    def findings_of(self, check_id: str) -> list[Mapping[str, Any]]:
        return [f for f in self.findings if f.get("check_id") == check_id]


def is_fleet(doc: Mapping[str, Any]) -> bool:
    """A fleet document (nodeagent.cluster.report) rather than one host's run."""
    return isinstance(doc.get("hosts"), Mapping) and "checks" not in doc


def host_runs(doc: Mapping[str, Any]) -> list[HostRun]:
    """The document as one view per host: itself for a run, each host's entry for a fleet."""
    if is_fleet(doc):
        return [_host_run(entry, str(name)) for name, entry in doc["hosts"].items()]
    return [_host_run(doc, str(doc.get("host", "")))]


def _host_run(doc: Mapping[str, Any], name: str) -> HostRun:
    checks = [c for c in doc.get("checks") or [] if isinstance(c, Mapping)]
    cut = {str(c) for c in doc.get("timed_out") or []}
    cut |= {str(c.get("id")) for c in checks if c.get("timed_out")}
    error = doc.get("error")
    return HostRun(
        host=name,
        status=status_of(doc.get("status")),
        started=number(doc.get("started")),
        duration_s=number(doc.get("duration_s")),
        checks=checks,
        findings=[f for f in doc.get("findings") or [] if isinstance(f, Mapping)],
        timed_out=frozenset(cut),
        error=error if isinstance(error, Mapping) else None,
        doc=doc,
    )


def status_of(value: Any) -> Status:
    """A status word from a document; UNKNOWN for anything else (a newer remote agent's word must
    not crash an output, nor pass for OK)."""
    try:
        return Status(value)
    except ValueError:
        return Status.UNKNOWN


def number(value: Any) -> float | None:
    """A finite number from a document, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def attention(findings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The findings at FAIL, UNKNOWN or WARN, worst first (stable within a status)."""
    keep = [f for f in findings if status_of(f.get("status")) in ATTENTION]
    return sorted(keep, key=lambda f: -status_of(f.get("status")).rank)


def label(finding: Mapping[str, Any]) -> str:
    """`check/subject` (or the check alone), as the terminal table names a finding."""
    subject = str(finding.get("subject") or "")
    check = str(finding.get("check_id") or "")
    return f"{check}/{subject}" if subject else check


def evidence(finding: Mapping[str, Any]) -> list[tuple[str, str]]:
    raw = finding.get("evidence")
    return [(str(k), str(v)) for k, v in raw.items()] if isinstance(raw, Mapping) else []


# XML 1.0's Char production (https://www.w3.org/TR/xml/#charsets): everything else (NUL, most C0
# controls, lone surrogates, U+FFFE/U+FFFF) makes the document unparsable, escaped or not.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """`text` with characters XML 1.0 cannot carry shown as `\\xNN` (`\\uNNNN`), so evidence such as
    a terminal escape stays visible instead of breaking the file."""
    return _NOT_XML_CHAR.sub(_escape_char, text)


def _escape_char(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
