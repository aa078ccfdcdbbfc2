"""One fact, one finding: a playbook's threshold or a baseline's difference on a value that a check
reported re-judges that check's finding, instead of standing beside it under an internal key. Pure.

The thresholds (nodeagent.gate.thresholds) and the baseline (nodeagent.gate.baseline) judge value
keys and say so as findings of their own, whose subject is the key. `fold` moves each of those onto
the finding that carries the value:

- `check.<check>.<subject>.<where>`: the finding of that check with that subject (the worst one,
  as host_values keeps it), so `check.kernel.memlock./proc/self/limits` re-judges `kernel/memlock`;
- a device's fact, `rdma[mlx5_0].state`, `nics[eth0].mtu`, `gpus[GPU0].pci_address`: the finding
  of the check that judges that list (SECTION_CHECKS) about that device (its subject is the
  device's label, its PCI address for a GPU, DEVICE/PORT for an RDMA port).

The re-judged finding keeps its check, subject and evidence, takes the worse status, says what the
rule found in words (`where` instead of the key: "playbook gpu-training: /proc/self/limits = ...,
expected ...", "baseline intact.json: state is DOWN; the baseline has ACTIVE"), and adds the
baseline's value to its evidence and the rule's condition and reason to `expected` and
`remediation`. A rule that passes, or had nothing to judge, changes nothing there.

What no finding carries (a hardware count, the kernel release, a GPU gone since the baseline) stays
a finding of the rule; a baseline's differences on one device are one finding (`nics[eth0]`: its
speed and its MTU), as two ports down are two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from nodeagent.compare.values import Value
from nodeagent.core.finding import Finding, Status, worst

# The device lists of the facts and the check that judges each one's devices.
SECTION_CHECKS = {"rdma": "rdma", "nics": "nic", "gpus": "gpu"}
_DEVICE_KEY = re.compile(r"^(\w+)\[([^\]*?]*)\]\.(.+)$")
_QUIET = (Status.OK, Status.SKIPPED)


@dataclass(frozen=True)
class Rule:
    """The findings of one rule (a playbook's thresholds, a baseline) and how its words name it."""

    check_id: str  # "playbook" | "baseline"
    label: str  # "playbook gpu-training", "baseline intact.json"
    findings: Sequence[Finding]


@dataclass(frozen=True)
class Folded:
    """The checks' findings, re-judged, and what stays with each rule (by its check id)."""

    checks: dict[tuple[int, int], Finding]  # (result, finding) position -> the re-judged finding
    rules: dict[str, list[Finding]]


def fold(checks: Sequence[Sequence[Finding]], rules: Sequence[Rule], values: Mapping[str, Value]) -> Folded:
    """Each rule's findings moved onto the check findings that carry their values (module
    docstring). `checks` is each check's findings in the report's order."""
    index = _Index(checks, values)
    onto: dict[tuple[int, int], list[tuple[Rule, Finding, str]]] = {}
    kept: dict[str, list[Finding]] = {}
    for rule in rules:
        own: list[Finding] = []
        for f in rule.findings:
            target = index.target(f.subject)
            if target is None:
                own.append(f)
            elif f.status not in _QUIET:
                onto.setdefault(target[0], []).append((rule, f, target[1]))
        kept[rule.check_id] = _one_per_device(own) if rule.check_id != "playbook" else _without_check_oks(own)
    rejudged = {pos: _rejudge(index.finding(pos), _once(judged)) for pos, judged in onto.items()}
    return Folded(rejudged, kept)


class _Index:
    """The check findings a value key can name."""

    def __init__(self, checks: Sequence[Sequence[Finding]], values: Mapping[str, Value]) -> None:
        self.checks = checks
        self.values = values
        self.by_check: dict[str, list[tuple[tuple[int, int], Finding]]] = {}
        for i, findings in enumerate(checks):
            for j, f in enumerate(findings):
                self.by_check.setdefault(f.check_id, []).append(((i, j), f))

    def finding(self, pos: tuple[int, int]) -> Finding:
        return self.checks[pos[0]][pos[1]]

    def target(self, key: str) -> tuple[tuple[int, int], str] | None:
        """The finding carrying `key`'s value, and what the key names within it ("where")."""
        if key.startswith("check."):
            return self._check_target(key)
        m = _DEVICE_KEY.match(key)
        if m is None or m.group(1) not in SECTION_CHECKS:
            return None
        section, label, field = m.groups()
        names = {label, *self._aliases(section, label)}
        found = [(pos, f) for pos, f in self.by_check.get(SECTION_CHECKS[section], []) if f.subject in names]
        return (_worst(found), field) if found else None

    def _aliases(self, section: str, label: str) -> set[str]:
        """Other names a check gives the device: a GPU's PCI address, an RDMA port as DEVICE/PORT
        (the facts label a device with one port by the device alone)."""
        out = set()
        address = self.values.get(f"{section}[{label}].pci_address")
        if address:
            out.add(str(address))
        port = self.values.get(f"{section}[{label}].port")
        if isinstance(port, int | float) and not isinstance(port, bool):
            out.add(f"{label}/{port:g}")
        return out

    def _check_target(self, key: str) -> tuple[tuple[int, int], str] | None:
        check, _, rest = key[len("check.") :].partition(".")
        best: list[tuple[tuple[int, int], Finding]] = []
        length = -1
        for pos, f in self.by_check.get(check, []):
            subject = f.subject or "-"
            if rest.startswith(f"{subject}.") and len(subject) >= length:
                best = (best if len(subject) == length else []) + [(pos, f)]
                length = len(subject)
        return (_worst(best), rest[length + 1 :]) if best else None


def _worst(found: list[tuple[tuple[int, int], Finding]]) -> tuple[int, int]:
    """Of findings sharing a check and subject, the worst: the one whose values host_values kept."""
    return max(found, key=lambda item: item[1].status.rank)[0]


def _rejudge(target: Finding, judged: list[tuple[Rule, Finding, str]]) -> Finding:
    clauses = [f"{rule.label}: {_words(f, where)}" for rule, f, where in judged]
    status = worst([target.status, *(f.status for _, f, _ in judged)])
    if target.status in _QUIET and status not in _QUIET:
        summary = "; ".join([*clauses, target.summary])  # the check saw nothing wrong: the rule did
    else:
        summary = "; ".join([target.summary, *clauses])  # the check's own words about the problem
    evidence = dict(target.evidence)
    for _, f, where in judged:
        for key, value in f.evidence.items():
            named = key.replace(f.subject, where, 1) if where else key
            if named not in evidence:
                evidence[named] = value
    expected = [target.expected] if target.expected else []
    expected += [f"{where}: {f.expected} ({rule.label})" for rule, f, where in judged if f.expected]
    remediation = [target.remediation] if target.remediation else []
    remediation += [f.remediation for _, f, _ in judged if f.remediation]
    return replace(
        target,
        status=status,
        summary=summary,
        evidence=evidence,
        expected="; ".join(dict.fromkeys(expected)),
        remediation=" ".join(dict.fromkeys(remediation)),
    )


def _once(judged: list[tuple[Rule, Finding, str]]) -> list[tuple[Rule, Finding, str]]:
    """One verdict of a rule per value: a device's fact (`rdma[mlx5_0].state`: where is "state") is
    the file the check quotes (`/sys/class/infiniband/mlx5_0/ports/1/state`), so a rule's verdict on
    the fact goes where it has one on the file."""
    files = {(rule.check_id, where.rsplit("/", 1)[-1]) for rule, f, where in judged if "/" in where}
    return [
        (rule, f, where)
        for rule, f, where in judged
        if "/" in where or not _DEVICE_KEY.match(f.subject) or (rule.check_id, where) not in files
    ]


def _words(f: Finding, where: str) -> str:
    """A rule's finding in the words of the finding it joins: the key replaced by what it names."""
    return f.summary.replace(f.subject, where, 1) if where else f.summary


def _without_check_oks(findings: list[Finding]) -> list[Finding]:
    """A threshold's OK summary over check values ("12 of 12 values matching check.threads.*.status
    are OK"): the checks' own findings say it, each about its own subject."""
    return [f for f in findings if not (f.status is Status.OK and f.subject.startswith("check."))]


def _one_per_device(findings: list[Finding]) -> list[Finding]:
    """A baseline's differences on one device's facts as one finding (`nics[eth0]`: speed and MTU)."""
    out: list[Finding] = []
    by_device: dict[str, int] = {}
    for f in findings:
        m = _DEVICE_KEY.match(f.subject)
        if m is None:
            out.append(f)
            continue
        device = f"{m.group(1)}[{m.group(2)}]"
        field = m.group(3)
        if device not in by_device:
            by_device[device] = len(out)
            summary = f"{device}: {_words(f, field)}"
            out.append(replace(f, subject=device, summary=summary, evidence=_renamed(f, field)))
            continue
        first = out[by_device[device]]
        out[by_device[device]] = replace(
            first,
            status=worst([first.status, f.status]),
            summary=f"{first.summary}; {_words(f, field)}",
            evidence={**first.evidence, **_renamed(f, field)},
            expected=f"{first.expected}; {field}: {f.expected}",
        )
    return out


def _renamed(f: Finding, where: str) -> dict[str, str]:
    return {key.replace(f.subject, where, 1): value for key, value in f.evidence.items()}
