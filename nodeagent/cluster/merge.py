"""`nodeagent report merge`: per-node results gathered from files, as the fleet view.

Nodes that check themselves (a Slurm prolog or health check writing `--output json:DIR/NODE.json`
into a shared folder, a Kubernetes DaemonSet, cron) leave one JSON report each: what
`nodeagent check --format json [--facts]` or `nodeagent preflight --format json` prints,
`{schema, nodeagent, host, status, started, duration_s, checks[], findings[], facts?}`. Merged,
they give what `nodeagent check --cluster` gives over SSH: each node's status and findings, and the
fleet comparison (drift from the majority, outliers) over their facts and findings, built by the
same FleetReport.

The files are data written by many nodes at many moments, so none of them can stop the merge:
- a directory argument means every `*.json` in it (hidden files, such as the temporary files an
  atomic write renames into place, are left out);
- a file that cannot be read, is not JSON, or is not one node's report becomes an error of kind
  "unreadable report" for the host named by the file (its name without ".json": the prolog writes
  NODE.json), which counts as FAIL like an unreachable host: a gate must not pass a node whose
  result it could not read. Not a report: no "schema", "host" or "findings" (foreign JSON),
  another schema version, a merged fleet report, a blank host, or anything the report's model
  (nodeagent.api.report.SavedReport) refuses, named by its line and field (`node7.json:40:
  findings[2].status: must be ...`);
- two reports of the same host: the newest ("started", else the file's modification time) is kept,
  and a note names the others; a readable report beats an unreadable file of the same name.

Each host's document is passed on as the node wrote it, with `report_file` added and `started` as a
number (or left out when the report has none): the model decides what is read, the document stays
the node's (a field of a newer nodeagent, an integer, a file name that is not UTF-8 all pass through
unchanged).

Notes are in the report's JSON as `notes` (FleetReport.extra).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nodeagent.api.report import SCHEMA_VERSION, DocumentError, HostError, SavedReport, parse_saved_report
from nodeagent.cluster.report import FleetReport
from nodeagent.cluster.runner import HostOutcome
from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.core.jsondoc import line_at

UNREADABLE = "unreadable report"
REQUIRED_FIELDS = ("schema", "host", "findings")  # what makes a JSON object a report at all


@dataclass(frozen=True)
class _Read:
    """One file: the report it holds (validated, and as written), or why it holds none."""

    path: Path
    report: SavedReport | None
    written: Mapping[str, Any] | None = None
    problem: str = ""
    mtime: float = 0.0

    @property
    def host(self) -> str:
        if self.report is not None:
            return self.report.host
        return self.path.name.removesuffix(".json")

    @property
    def started(self) -> float:
        """When the run started (seconds since the epoch): the report's own time, else the file's."""
        started = self.report.started if self.report is not None else None
        return started if started is not None and math.isfinite(started) else self.mtime


def merge_reports(paths: Sequence[Path]) -> FleetReport:
    """The fleet view of per-node JSON reports (files, or directories of *.json)."""
    files = _expand(paths)
    chosen, notes = _one_per_host([_read(f) for f in files])
    outcomes = {name: _outcome(chosen[name]) for name in sorted(chosen)}
    report = FleetReport.build(outcomes, duration_s=0.0)
    if notes:
        report.extra = {"notes": notes}
    return report


def _expand(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if not p.name.startswith(".") and p.is_file())
        elif path.exists():
            found = [path]
        else:
            raise UsageError(f"{path}: no such file or directory; give report files or folders of *.json")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                files.append(f)
    if not files:
        given = ", ".join(str(p) for p in paths)
        raise UsageError(
            f"{given}: no *.json report to merge; write them with "
            "`nodeagent check --format json --facts > NODE.json` or `--output json:DIR/NODE.json`"
        )
    return files


def _read(path: Path) -> _Read:
    try:
        mtime = path.stat().st_mtime
        # A node's report: no larger than what a node may send over SSH (NODEAGENT_MAX_STDOUT_MIB).
        text = limits.read_input_file(path, "report", "NODEAGENT_MAX_STDOUT_MIB").decode("utf-8")
    except UsageError as e:
        return _Read(path, None, problem=str(e))
    except OSError as e:
        return _Read(path, None, problem=f"{path}: cannot read it ({e.strerror or e})")
    except UnicodeDecodeError as e:
        return _Read(path, None, problem=f"{path}: byte {e.start}: not UTF-8 text", mtime=mtime)
    try:
        doc = limits.loads_json(text)
    except json.JSONDecodeError as e:
        return _Read(path, None, problem=f"{path}: line {e.lineno}: not JSON ({e.msg})", mtime=mtime)
    except ValueError as e:  # nested too deeply
        return _Read(path, None, problem=f"{path}: not a nodeagent report: the JSON is {e}", mtime=mtime)
    problem = _not_a_report(doc)
    if problem:
        return _Read(path, None, problem=f"{path}: {problem}", mtime=mtime)
    try:
        report = parse_saved_report(doc, str(path))
    except DocumentError as e:  # named by the line that wrote the field, as for any JSON file
        return _Read(path, None, problem=f"{path}:{line_at(text, e.loc)}: {e.field_problem}", mtime=mtime)
    if not report.host.strip():
        return _Read(
            path,
            None,
            problem=f"{path}: field host is {report.host!r}, expected the node's name",
            mtime=mtime,
        )
    return _Read(path, report, doc, mtime=mtime)


def _not_a_report(doc: Any) -> str:
    """Why `doc` is no node's report at all, before its fields are looked at ("" when it may be one):
    foreign JSON, a fleet's report, or another version of the document, whose fields may differ
    anywhere (its version is what to tell, not the first field that differs)."""
    if not isinstance(doc, dict):
        return f"not a nodeagent report (a JSON {type(doc).__name__}, not an object)"
    if "host" not in doc and isinstance(doc.get("hosts"), Mapping):
        return (
            f"a merged fleet report ({len(doc['hosts'])} hosts), not one node's; merge the nodes' "
            "own report files"
        )
    missing = [f for f in REQUIRED_FIELDS if f not in doc]
    if missing:
        return f"not a nodeagent report (no {', '.join(repr(m) for m in missing)})"
    if doc["schema"] != SCHEMA_VERSION:
        return (
            f"field schema is {doc['schema']!r}, this nodeagent reads schema {SCHEMA_VERSION}; "
            "merge with the nodeagent version that wrote it"
        )
    return ""


def _one_per_host(reads: Sequence[_Read]) -> tuple[dict[str, _Read], list[str]]:
    """The report kept for each host, and a note for each file left out."""
    groups: dict[str, list[_Read]] = {}
    for r in reads:
        groups.setdefault(r.host, []).append(r)
    chosen: dict[str, _Read] = {}
    notes: list[str] = []
    for host, group in groups.items():
        readable = sorted((r for r in group if r.report is not None), key=lambda r: r.started, reverse=True)
        kept = readable[0] if readable else group[0]
        chosen[host] = kept
        others = [r for r in group if r is not kept]
        if not others:
            continue
        left = ", ".join(str(r.path) for r in others)
        if kept.report is None:
            notes.append(f"{host}: {len(group)} unreadable files; reported {kept.path}, left out {left}")
        else:
            when = datetime.fromtimestamp(kept.started, timezone.utc).isoformat(timespec="seconds")
            notes.append(
                f"{host}: {len(group)} reports; kept the newest, {kept.path} (started {when}), "
                f"left out {left}"
            )
    return chosen, notes


def _outcome(r: _Read) -> HostOutcome:
    if r.report is None or r.written is None:
        return HostOutcome(r.host, "", error=HostError(UNREADABLE, r.problem))
    doc = {key: value for key, value in r.written.items() if key != "facts"}
    started = r.report.started
    if started is not None:  # written as a number, also when the node wrote a date
        doc["started"] = started
    doc["report_file"] = str(r.path)
    return HostOutcome(r.host, "", doc=doc, facts=r.report.facts, duration_s=r.report.duration_s)
