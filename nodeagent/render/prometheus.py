"""Prometheus text exposition format, for node_exporter's textfile collector.

Point `--output prometheus:PATH` at a `*.prom` file in the collector's directory
(`--collector.textfile.directory`); the file is replaced atomically (nodeagent.render.outputs), as
the collector's documentation asks (https://github.com/prometheus/node_exporter#textfile-collector).
Format: https://prometheus.io/docs/instrumenting/exposition_formats/ — each family once, with its
HELP and TYPE, all of its samples together; no timestamps (the collector rejects them).

Statuses are numbers, the same as `nodeagent check`'s exit codes, so `> 0` means "look at it":

    -1 SKIPPED   0 OK   1 WARN   2 FAIL   3 UNKNOWN (could not decide, or cut at a time limit)

Families (all gauges; labels `host`, plus those shown):

    nodeagent_info{version, playbook}                   1, the run's nodeagent and playbook
    nodeagent_run_status                                the worst status of the run
    nodeagent_run_duration_seconds                      the run's wall time
    nodeagent_run_timestamp_seconds                     when the run started (Unix time)
    nodeagent_check_status{check}                       each check's worst status
    nodeagent_check_duration_seconds{check}             each check's wall time
    nodeagent_check_timed_out{check}                    1 when cut at a time limit or the budget
    nodeagent_findings{check, status}                   findings per check and status (0 included)
    nodeagent_preflight_allowed                         1 allowed, 0 refused (when there is a verdict)
    nodeagent_preflight_budget_seconds                  the gate's time budget (when there is one)
    nodeagent_bench_images_per_second{config, stat}     stat median, ci95_lo, ci95_hi (with a bench)
    nodeagent_host_error{kind}                          1 for a fleet host that gave no result

Alert on `nodeagent_run_status > 0`, and on `time() - nodeagent_run_timestamp_seconds` for a
pre-flight that stopped running.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent import __version__
from nodeagent.api.report import Bench, Document
from nodeagent.cluster.prometheus import STATUS_VALUE  # one mapping for writing and reading back
from nodeagent.render.runs import HostRun, document, finite, host_runs

__all__ = ["STATUS_HELP", "STATUS_VALUE", "prometheus"]

STATUS_HELP = "-1 skipped, 0 ok, 1 warn, 2 fail, 3 unknown"


@dataclass
class _Family:
    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((labels, value))


def prometheus(doc: Mapping[str, Any] | Document) -> str:
    """The document as a textfile-collector file (see the module docstring)."""
    families = {
        f.name: f
        for f in (
            _Family("nodeagent_info", "nodeagent's version and playbook of the last run (always 1)"),
            _Family("nodeagent_run_status", f"Worst status of the run: {STATUS_HELP}"),
            _Family("nodeagent_run_duration_seconds", "Wall time of the run"),
            _Family("nodeagent_run_timestamp_seconds", "When the run started, in Unix time"),
            _Family("nodeagent_check_status", f"Worst status of each check: {STATUS_HELP}"),
            _Family("nodeagent_check_duration_seconds", "Wall time of each check"),
            _Family("nodeagent_check_timed_out", "1 when the check was cut at its time limit or the budget"),
            _Family("nodeagent_findings", "Findings of each check, by status"),
            _Family(
                "nodeagent_preflight_allowed", "Pre-flight verdict: 1 the node may run the job, 0 refused"
            ),
            _Family("nodeagent_preflight_budget_seconds", "Time budget of the pre-flight gate"),
            _Family("nodeagent_bench_images_per_second", "Benchmark throughput: median and its 95% interval"),
            _Family("nodeagent_host_error", "1 when a host of the fleet gave no result, by kind of error"),
        )
    }
    for run in host_runs(document(doc)):
        _add_run(families, run)
    return "".join(_family_text(f) for f in families.values() if f.samples)


def _add_run(fam: Mapping[str, _Family], run: HostRun) -> None:
    host = run.host
    fam["nodeagent_info"].add(1, host=host, version=run.nodeagent or __version__, playbook=run.playbook or "")
    fam["nodeagent_run_status"].add(STATUS_VALUE[run.status], host=host)
    if run.duration_s is not None:
        fam["nodeagent_run_duration_seconds"].add(run.duration_s, host=host)
    if run.started is not None:
        fam["nodeagent_run_timestamp_seconds"].add(run.started, host=host)
    for check in run.checks:
        cid = check.id
        fam["nodeagent_check_status"].add(STATUS_VALUE[check.status], host=host, check=cid)
        duration = finite(check.duration_s)
        if duration is not None:
            fam["nodeagent_check_duration_seconds"].add(duration, host=host, check=cid)
        fam["nodeagent_check_timed_out"].add(int(cid in run.timed_out), host=host, check=cid)
        statuses = [f.status for f in run.findings_of(cid)]
        for status in STATUS_VALUE:
            fam["nodeagent_findings"].add(statuses.count(status), host=host, check=cid, status=status.value)
    if run.verdict is not None:
        fam["nodeagent_preflight_allowed"].add(int(run.verdict.allowed), host=host)
    budget = finite(run.budget_s)
    if budget is not None:
        fam["nodeagent_preflight_budget_seconds"].add(budget, host=host)
    if run.error is not None:
        fam["nodeagent_host_error"].add(1, host=host, kind=run.error.kind)
    if run.bench is not None:
        _add_bench(fam["nodeagent_bench_images_per_second"], host, run.bench)


def _add_bench(family: _Family, host: str, bench: Bench) -> None:
    for name, config in bench.configs.items():
        rate = config.images_per_s
        if rate is None:
            continue  # failed or skipped: no throughput to report
        low, high = rate.ci95
        for stat, value in (("median", rate.median), ("ci95_lo", low), ("ci95_hi", high)):
            known = finite(value)
            if known is not None:
                family.add(known, host=host, config=name, stat=stat)


def _family_text(f: _Family) -> str:
    lines = [f"# HELP {f.name} {_escape_help(f.help)}", f"# TYPE {f.name} gauge"]
    for labels, value in f.samples:
        inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
        lines.append(f"{f.name}{{{inner}}} {_value(value)}")
    return "\n".join(lines) + "\n"


def _escape_label(value: str) -> str:
    """Label values: backslash, double quote and line feed escaped, as the format requires."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    """HELP text: backslash and line feed escaped (quotes are literal there)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    """Go's ParseFloat syntax: integers plain, floats by repr, NaN and +Inf/-Inf spelt so."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))
