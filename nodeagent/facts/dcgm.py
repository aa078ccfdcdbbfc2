"""DCGM's level-1 diagnostic, `dcgmi diag -r 1 -j`, and its JSON report.

Level 1 is "quick deployment checks, normally lasting seconds" (dcgmi diag's reference,
https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html):
the software plugin's denylist, NVML and CUDA libraries, permissions, persistence mode, environment
variables, page retirement and row remapping, graphics processes and InfoROM tests. It still starts
the DCGM diagnostic on every GPU, so it runs only when asked for (see checks/__init__.py).

The JSON has two shapes, both read by structure:
- DCGM 3.x: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids" | "gpu_id", "status", "warnings", "info"}]}]}], "version"}}, warnings as
  strings or {"warning", "error_id"} (NVIDIA/DCGM, nvvs JsonOutput.cpp);
- DCGM 4.x: {"DCGM Diagnostic": {"test_categories": [... "results": [{"entity_group",
  "entity_id", "status", "warnings": [{"warning", "error_id", "error_category",
  "error_severity"}]}], "test_summary": {"status"}}], "runtime_error"}, "metadata": {"version",
  "Driver Version Detected"}} (NVIDIA/DCGM, testing/python3/dcgm_diag_schema.json).
A DCGM 3 run may print "Successfully ran diagnostic for group." before the JSON, and dcgmi exits
non-zero when a test fails with the report on stdout: the JSON is read whatever the exit code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.host import CmdResult, Host

COMMAND = ("dcgmi", "diag", "-r", "1", "-j")
SOURCE = "dcgmi diag -r 1 -j"
# The time box: level 1 normally takes seconds, and the engine gives a check 20 s by default
# (nodeagent.engine.DEFAULT_TIMEOUT_S); a run still going after this is reported, not waited for.
TIMEOUT_S = 15.0
ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # DCGM 4.x, DCGM 3.x

# dcgmErrorSeverity_t (dcgm_errors.h): what DCGM says to do about an error it reports.
SEVERITIES = {
    0: "NONE",
    1: "MONITOR",  # can perform workload, but needs to be monitored
    2: "ISOLATE",  # cannot perform workload: isolate the GPU
    3: "UNKNOWN",
    4: "TRIAGE",
    5: "CONFIG",  # can be resolved by configuration
    6: "RESET",  # drain and reset the GPU
}
STATUSES = {"pass", "fail", "warn", "skip", "not run"}


@dataclass(frozen=True)
class DiagWarning:
    text: str
    severity: int | None = None  # dcgmErrorSeverity_t, DCGM 4.x only
    error_id: int | None = None  # dcgmError_t


@dataclass(frozen=True)
class DiagResult:
    """One test's result on one entity (or on all GPUs, for the deployment tests)."""

    category: str
    test: str
    entity: str  # "GPU 0", "GPU 0,1", or "all GPUs" when the report names none
    status: str  # as printed
    warnings: tuple[DiagWarning, ...] = ()
    info: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """The status lower-cased and with "_" as " ": "pass", "fail", "warn", "skip", "not run"."""
        return self.status.strip().lower().replace("_", " ")


@dataclass(frozen=True)
class DiagRun:
    """What one `dcgmi diag -r 1 -j` said, or why it said nothing usable."""

    results: tuple[DiagResult, ...] = ()
    version: str | None = None
    driver: str | None = None
    reason: str | None = None  # not run: DCGM not installed, not recorded, no host engine
    error: str | None = None  # ran, but timed out, failed inside, or printed what is not its JSON
    evidence: Mapping[str, str] = field(default_factory=dict)


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _warning(item: Any) -> DiagWarning:
    if isinstance(item, Mapping):
        return DiagWarning(
            str(item.get("warning", "")).strip(), _int(item.get("error_severity")), _int(item.get("error_id"))
        )
    return DiagWarning(str(item).strip())


def _entity(result: Mapping[str, Any]) -> str:
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if isinstance(ids, (str, int)) and str(ids).strip():
        return f"GPU {ids}"
    entity_id = _int(result.get("entity_id"))
    if entity_id is not None:
        return f"{_text(result.get('entity_group')) or 'GPU'} {entity_id}"
    return "all GPUs"


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    return [value]  # a single warning or info string, as DCGM 3.x prints for one item


def _results(category: str, test: Mapping[str, Any]) -> list[DiagResult]:
    name = _text(test.get("name")) or "?"
    found = []
    for result in _list(test.get("results")):
        if not isinstance(result, Mapping):
            raise ValueError(f"{category}/{name}: a result that is not an object")
        status = result.get("status")
        if not isinstance(status, str):
            raise ValueError(f"{category}/{name}: a result without a status")
        found.append(
            DiagResult(
                category,
                name,
                _entity(result),
                status,
                tuple(_warning(w) for w in _list(result.get("warnings"))),
                tuple(str(i).strip() for i in _list(result.get("info"))),
            )
        )
    summary = test.get("test_summary")
    if not found and isinstance(summary, Mapping) and isinstance(summary.get("status"), str):
        found.append(DiagResult(category, name, "all GPUs", summary["status"]))
    return found


def parse(text: str) -> tuple[tuple[DiagResult, ...], Mapping[str, Any], Mapping[str, Any]]:
    """(results, the diagnostic object, the document) of a `dcgmi diag -j` output; ValueError when
    the text holds no such JSON."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in the output")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise ValueError(f"malformed JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError("the JSON is not an object")
    root = next((doc[k] for k in ROOTS if isinstance(doc.get(k), dict)), None)
    if root is None:
        raise ValueError(f"no {' or '.join(repr(k) for k in ROOTS)} object")
    results: list[DiagResult] = []
    for category in _list(root.get("test_categories")):
        if not isinstance(category, Mapping):
            raise ValueError("a test category that is not an object")
        name = _text(category.get("category")) or "?"
        for test in _list(category.get("tests")):
            if not isinstance(test, Mapping):
                raise ValueError(f"{name}: a test that is not an object")
            results += _results(name, test)
    return tuple(results), root, doc


def _versions(root: Mapping[str, Any], doc: Mapping[str, Any]) -> tuple[str | None, str | None]:
    found = doc.get("metadata")
    meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    version = _text(meta.get("version")) or _text(root.get("version"))
    driver = _text(meta.get("Driver Version Detected")) or _text(root.get("Driver Version Detected"))
    return version, driver


def from_result(result: CmdResult) -> DiagRun:
    """The run's report from the command's result (live or recorded)."""
    evidence = {SOURCE: f"exit code {result.exited}"}
    try:
        results, root, doc = parse(result.stdout)
    except ValueError as e:
        problem = str(e)
    else:
        version, driver = _versions(root, doc)
        runtime_error = _text(root.get("runtime_error"))
        if runtime_error:
            return DiagRun(
                version=version,
                driver=driver,
                error=f"the diagnostic failed to run: {runtime_error}",
                evidence={SOURCE: runtime_error},
            )
        if not results:
            return DiagRun(
                version=version, driver=driver, error="the report lists no test result", evidence=evidence
            )
        return DiagRun(results, version, driver, evidence=evidence)
    why = result.first_line()
    if result.exited == 127:
        return DiagRun(reason=f"DCGM is not installed or was not recorded ({why})", evidence={SOURCE: why})
    if result.exited == 124:
        return DiagRun(error=f"`{SOURCE}` did not finish within its time box ({why})", evidence={SOURCE: why})
    if not result.ok:
        # No report at all: the host engine is not running, or dcgmi cannot reach it.
        return DiagRun(reason=f"`{SOURCE}` did not run ({why})", evidence={SOURCE: why})
    return DiagRun(
        error=f"unparsable `{SOURCE}` output: {problem}", evidence={SOURCE: result.stdout.strip()[:200]}
    )


def collect(host: Host) -> DiagRun:
    return host.memo("facts.dcgm_diag", lambda: from_result(host.run(COMMAND, timeout=TIMEOUT_S)))
