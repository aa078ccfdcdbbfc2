"""DCGM's level-1 diagnostic: what `dcgmi diag -r 1` finds wrong with the node's GPU deployment.

NVIDIA puts level 1 first among its diagnostic run levels as "a readiness metric" before a workload
(https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html). It starts the
diagnostic on every GPU, so this check runs only when asked for by id (`--only dcgm-diag`, or a
playbook that lists it), never in the default run or in a plain `nodeagent snapshot`; the run is
time-boxed (nodeagent.facts.dcgm.TIMEOUT_S). Where DCGM is not installed, or the host engine is
not running, the finding is SKIPPED with dcgmi's own words.

Verdicts: a failed test FAILs, unless every error it reports carries DCGM's severity MONITOR ("can
perform workload, but needs to be monitored") or CONFIG ("can be resolved by configuration", e.g.
persistence mode off, which the gpu check reports on its own): those WARN, as NVIDIA's guide on
automating responses to diagnostic failures sorts them
(https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html#automating-responses-to-dcgm-diagnostic-failures).
A warning WARNs; skipped tests are listed; a status DCGM has not documented is UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import Area, Check, NoParams
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import dcgm
from nodeagent.facts.dcgm import DiagResult, DiagRun
from nodeagent.host import Host

ID = "dcgm-diag"
DOCS = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
ERROR_DOCS = f"{DOCS}#automating-responses-to-dcgm-diagnostic-failures"
WARN_SEVERITIES = {1, 5}  # DCGM_ERROR_MONITOR, DCGM_ERROR_CONFIG


@dataclass(frozen=True)
class Facts:
    run: DiagRun


def collect(host: Host) -> Facts:
    return Facts(run=dcgm.collect(host))


def _key(r: DiagResult, what: str) -> str:
    return f"{dcgm.SOURCE}: {r.category}/{r.test} {r.entity} {what}"


def _evidence(r: DiagResult) -> dict[str, str]:
    evidence = {_key(r, "status"): r.status}
    for i, w in enumerate(r.warnings[:5]):
        tags = []
        if w.severity is not None:
            tags.append(f"severity {dcgm.SEVERITIES.get(w.severity, w.severity)}")
        if w.error_id is not None:
            tags.append(f"error {w.error_id}")
        evidence[_key(r, f"warning {i + 1}")] = w.text + (f" ({', '.join(tags)})" if tags else "")
    for i, info in enumerate(r.info[:3]):
        evidence[_key(r, f"info {i + 1}")] = info
    return evidence


def _only_config(r: DiagResult) -> bool:
    """Every error of the result says MONITOR or CONFIG: the node can run work once it is set right."""
    return bool(r.warnings) and all(w.severity in WARN_SEVERITIES for w in r.warnings)


def _finding(r: DiagResult) -> Finding | None:
    state = r.state
    first = r.warnings[0].text if r.warnings else "no detail given"
    if state == "fail" and not _only_config(r):
        status, what = Status.FAIL, "failed"
        remediation = (
            f"Drain the node and follow DCGM's message; run `dcgmi diag -r 2` (or -r 3 before an RMA) "
            f"once the cause is fixed ({ERROR_DOCS})."
        )
    elif state in ("fail", "warn"):
        status, what = Status.WARN, "failed on configuration" if state == "fail" else "warned"
        remediation = f"Fix what the message names (a setting, a process) and run it again ({ERROR_DOCS})."
    elif state in ("pass", "skip", "not run"):
        return None
    else:
        return Finding(
            ID,
            Status.UNKNOWN,
            f"DCGM {r.test} on {r.entity}: status {r.status!r} is not one DCGM documents",
            _evidence(r),
            expected=", ".join(sorted(dcgm.STATUSES)),
            remediation=f"Run `{dcgm.SOURCE}` by hand and compare with DCGM's documentation ({DOCS}).",
            subject=r.entity,
        )
    return Finding(
        ID,
        status,
        f"DCGM {r.test} {what} on {r.entity}: {first}",
        _evidence(r),
        expected="every level-1 test passes",
        remediation=remediation,
        subject=r.entity,
    )


def _summary(run: DiagRun) -> Finding:
    passed = [r for r in run.results if r.state == "pass"]
    skipped = [r for r in run.results if r.state in ("skip", "not run")]
    evidence = {f"{dcgm.SOURCE}: passed": ", ".join(sorted({r.test for r in passed})) or "none"}
    if skipped:
        evidence[f"{dcgm.SOURCE}: skipped"] = ", ".join(sorted({f"{r.test} ({r.entity})" for r in skipped}))
    evidence[f"{dcgm.SOURCE}: DCGM version"] = run.version or "?"
    evidence[f"{dcgm.SOURCE}: driver"] = run.driver or "?"
    return Finding(
        ID,
        Status.OK,
        f"DCGM level 1: {len(passed)} of {len(run.results)} result(s) pass"
        + (f", {len(skipped)} skipped" if skipped else ""),
        evidence,
        subject="dcgm",
    )


def evaluate(f: Facts, _: NoParams) -> list[Finding]:
    run = f.run
    if run.reason:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"DCGM diagnostic not run: {run.reason}",
                dict(run.evidence),
                remediation="Install DCGM and start its host engine (`systemctl start nvidia-dcgm`), "
                f"{DOCS}.",
                subject="dcgm",
            )
        ]
    if run.error:
        return [
            Finding(
                ID,
                Status.UNKNOWN,
                f"DCGM diagnostic without a verdict: {run.error}",
                dict(run.evidence),
                expected=f"the JSON report of `{dcgm.SOURCE}`",
                remediation=f"Run `{dcgm.SOURCE}` by hand; check the host engine (nv-hostengine) and "
                f"its log, {DOCS}.",
                subject="dcgm",
            )
        ]
    judged = [f for f in (_finding(r) for r in run.results) if f is not None]
    return [*judged, _summary(run)]


CHECK = Check(
    id=ID,
    title="DCGM level-1 diagnostic",
    area=Area.GPU,
    tags=("gpu", "diagnostic"),
    collect=collect,
    evaluate=evaluate,
    params=NoParams,
    commands=(dcgm.COMMAND,),
)
