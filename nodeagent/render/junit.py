"""JUnit XML: the run as a test report, for CI servers and schedulers that read one (Jenkins,
GitLab, GitHub test reporters).

The format is the de-facto one Apache Ant's XMLJUnitResultFormatter introduced and Jenkins
documents as junit-10.xsd; tests/data/junit.xsd is our schema of it, and the output is validated
against it. Mapping:

- `<testsuites>` holds one `<testsuite>` per host (a fleet document gives several), named after
  the host, with its time, start (`timestamp`, UTC, Ant's format without a zone) and properties:
  nodeagent's version, the run's status, and the playbook, budget and verdict when there are.
- One `<testcase classname="nodeagent.CHECK" name="CHECK" time=...>` per check, in run order:
  - FAIL: `<failure>`, its message the first finding, its body every finding of the check that
    needs attention (what was seen, the expected value, what to do, the tuner);
  - UNKNOWN (the check crashed or could not decide): `<error>`, the same body;
  - cut at a time limit or the run's budget: `<error type="timeout">`;
  - SKIPPED: `<skipped message=...>`, why;
  - WARN: `<skipped message="WARN CHECK/SUBJECT: ...">`, its warnings in `<system-out>`. A warning
    is not a pass, and must not fail a CI pipeline that gates on FAIL: a skipped test is what
    Jenkins's JUnit plugin, GitLab's test report and the GitHub test reporters show as neither
    passed nor failed (their only such outcome), and the suite's `skipped` counts it;
    `warn_as_failure=True` reports it as `<failure type="WARN">` instead;
  - OK: passes (the only status that does).
- A fleet host that gave no result (unreachable, auth failed) is one `<error>` test `reach`.
- A benchmark in the document adds one test per configuration (classname `nodeagent.bench`):
  `failed` is a failure, `skipped` skipped, with the throughput in `<system-out>`.

Text that XML 1.0 cannot carry (control characters in recorded evidence) is shown as `\\xNN`.
"""

from __future__ import annotations

import math
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from nodeagent import __version__
from nodeagent.api.report import Bench, CheckRun, Document, Finding, HostError
from nodeagent.core.finding import Status
from nodeagent.render.escape import xml_safe
from nodeagent.render.runs import HostRun, attention, document, finite, host_runs, label

MAX_MESSAGE = 300  # a `message` attribute is a one-line headline; the body has everything


def junit(doc: Mapping[str, Any] | Document, warn_as_failure: bool = False) -> str:
    """The document as a JUnit XML report (see the module docstring)."""
    root = ET.Element("testsuites", name="nodeagent")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    time_s = 0.0
    for run in host_runs(document(doc)):
        suite = _suite(run, warn_as_failure)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        time_s += run.duration_s or 0.0
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(time_s))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _suite(run: HostRun, warn_as_failure: bool) -> ET.Element:
    suite = ET.Element("testsuite", name=_text(f"nodeagent {run.host}"))
    suite.set("hostname", _text(run.host))
    suite.set("package", "nodeagent")
    if run.started is not None:
        suite.set("timestamp", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(run.started)))
    suite.set("time", _seconds(run.duration_s or 0.0))
    _properties(suite, run)
    cases = [_case(run, check, warn_as_failure) for check in run.checks]
    if run.error is not None:
        cases.append(_unreachable(run.error))
    if run.bench is not None:
        cases += _bench_cases(run.bench)
    suite.extend(cases)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    return suite


def _properties(suite: ET.Element, run: HostRun) -> None:
    props: list[tuple[str, Any]] = [
        ("nodeagent.version", run.nodeagent or __version__),
        ("status", run.status.value),
        ("playbook", run.playbook),
        ("budget_s", run.budget_s),
        ("timed_out", ", ".join(sorted(run.timed_out)) or None),
    ]
    if run.verdict is not None:
        props += [
            ("verdict.allowed", str(run.verdict.allowed).lower()),
            ("verdict.fail_on", run.verdict.fail_on),
            ("verdict.reason", run.verdict.reason),
        ]
    if run.error is not None:
        props.append(("address", run.address))
    element = ET.SubElement(suite, "properties")
    for name, value in props:
        if value is not None:
            ET.SubElement(element, "property", name=name, value=_text(str(value)))


def _case(run: HostRun, check: CheckRun, warn_as_failure: bool) -> ET.Element:
    cid = check.id
    case = ET.Element("testcase", name=_text(cid), classname=_text(f"nodeagent.{cid}"))
    case.set("time", _seconds(finite(check.duration_s) or 0.0))
    status = check.status
    findings = run.findings_of(cid)
    needing = attention(findings)
    body = "\n\n".join(_details(f) for f in needing)
    if cid in run.timed_out:
        cut = needing[0].summary if needing else f"{cid} was cut at a time limit"
        _child(case, "error", "timeout", cut, body)
    elif status is Status.FAIL or (status is Status.WARN and warn_as_failure):
        _child(case, "failure", status.value, _headline(needing), body)
    elif status is Status.UNKNOWN:
        _child(case, "error", status.value, _headline(needing), body)
    elif status is Status.SKIPPED:
        why = "; ".join(f.summary for f in findings) or "skipped"
        skipped = ET.SubElement(case, "skipped", message=_text(_clip(why)))
        skipped.text = _text(why) if len(why) > MAX_MESSAGE else None
    elif status is Status.WARN:
        ET.SubElement(case, "skipped", message=_text(_clip(f"WARN {_headline(needing)}")))
        ET.SubElement(case, "system-out").text = _text(body)
    return case


def _headline(needing: list[Finding]) -> str:
    if not needing:
        return "no finding says why"
    first = needing[0]
    more = f" (+{len(needing) - 1} more)" if len(needing) > 1 else ""
    return f"{label(first)}: {first.summary}{more}"


def _details(f: Finding) -> str:
    """One finding as the terminal table's details: status, what, seen, expected, fix, tuner."""
    lines = [f"{f.status.value} {label(f)}: {f.summary}"]
    lines += [f"  seen      {where} = {value}" for where, value in f.evidence.items()]
    if f.expected:
        lines.append(f"  expected  {f.expected}")
    if f.remediation:
        lines.append(f"  fix       {f.remediation}")
    if f.fix:
        lines.append(f"  tuner     {f.fix}")
    return "\n".join(lines)


def _unreachable(error: HostError) -> ET.Element:
    case = ET.Element("testcase", name="reach", classname="nodeagent.reach", time="0")
    _child(case, "error", error.kind, error.message, error.message)
    return case


def _bench_cases(bench: Bench) -> list[ET.Element]:
    cases = []
    for name, config in bench.configs.items():
        case = ET.Element("testcase", name=_text(name), classname="nodeagent.bench", time="0")
        reason = config.reason or config.diagnosis or ""
        if config.status == "failed":
            _child(case, "failure", "failed", reason or "the configuration failed", config.stderr_tail or "")
        elif config.status == "skipped":
            ET.SubElement(case, "skipped", message=_text(_clip(reason or "skipped")))
        rate = config.images_per_s
        if rate is not None and finite(rate.median) is not None:
            low, high = rate.ci95
            ET.SubElement(case, "system-out").text = _text(
                f"images/s: median {rate.median}, 95% interval {low} - {high}"
            )
        cases.append(case)
    return cases


def _child(case: ET.Element, tag: str, kind: str, message: str, body: str) -> None:
    element = ET.SubElement(case, tag, message=_text(_clip(message)), type=_text(kind))
    element.text = _text(body) if body else None


def _clip(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= MAX_MESSAGE else one_line[: MAX_MESSAGE - 3] + "..."


def _text(text: str) -> str:
    return xml_safe(text)


def _seconds(value: float) -> str:
    """xs:decimal (no exponent, unlike repr(1e-05)); negative or non-finite times read as 0."""
    return f"{value:.6f}" if math.isfinite(value) and value > 0 else "0"
