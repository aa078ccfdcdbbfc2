"""nodeagent's Prometheus output against the real thing: Debian's node_exporter reading the file
`nodeagent check --output prometheus:PATH` writes, Prometheus scraping it, `promtool` linting it,
and the shipped alert rules under `promtool check rules` / `promtool test rules`.

The nodes are recorded machines (tests/fixtures/corpus) checked by the real `nodeagent check`;
every expected value comes from the JSON report of the same run. The stack (tests/support/promstack.py)
is one Prometheus and one node_exporter per node for the module, stopped when it ends.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nodeagent import integrations
from nodeagent.cluster.prometheus import STATUS_VALUE
from nodeagent.core import document
from nodeagent.core.finding import Status
from tests.support import promstack
from tests.support.paths import REPO

REASON = promstack.missing()


def real_stack(test: Any) -> Any:
    """A test on the module's real stack: slow, skipped without the Debian packages, and on the
    xdist worker that holds the stack."""
    for mark in (
        pytest.mark.slow,
        pytest.mark.skipif(REASON is not None, reason=REASON or ""),
        pytest.mark.xdist_group(name="prometheus-real"),
    ):
        test = mark(test)
    return test


needs_promtool = pytest.mark.skipif(
    promstack.PROMTOOL is None, reason="promtool (Debian's prometheus) is missing"
)

NODES = {"ok": promstack.OK_MACHINE, "fail": promstack.FAIL_MACHINE, "flip": promstack.OK_MACHINE}


def code(status: str) -> int:
    return STATUS_VALUE[Status(status)]


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples_of(family: Any) -> set[tuple[tuple[tuple[str, str], ...], float]]:
    return {(tuple(sorted(s.labels.items())), s.value) for s in family.samples}


def findings_count(doc: dict[str, Any], check: str, status: str) -> int:
    return sum(1 for f in doc["findings"] if f["check_id"] == check and f["status"] == status)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[promstack.PromStack, dict[str, Any]]]:
    """The nodes' files written by the real nodeagent, then node_exporters and Prometheus scraping
    them; the JSON report of each node's run beside."""
    workdir = tmp_path_factory.mktemp("promstack")
    docs = {
        node: promstack.nodeagent_check(
            promstack.named_root(machine, node, workdir), promstack.PromStack.textfile(workdir, node)
        )
        for node, machine in NODES.items()
    }
    with promstack.PromStack(workdir, list(NODES)) as s:
        s.wait_scraped(list(NODES))
        yield s, docs


# --- node_exporter and promtool take the file ---------------------------------------------------


@real_stack
@pytest.mark.parametrize("node", ["ok", "fail"])
def test_node_exporter_exposes_every_family_of_the_file(
    stack: tuple[promstack.PromStack, dict[str, Any]], node: str
) -> None:
    s, docs = stack
    exporter = s.exporters[node]
    written = families(exporter.prom.read_text())
    exposed = families(exporter.scrape())
    # The collector read the file without an error (it sets 1 and drops the file's metrics else).
    assert samples_of(exposed["node_textfile_scrape_error"]) == {((), 0.0)}
    mtimes = {dict(labels)["file"] for labels, _ in samples_of(exposed["node_textfile_mtime_seconds"])}
    assert mtimes == {str(exporter.prom)}
    assert {"nodeagent_run_status", "nodeagent_check_status", "nodeagent_findings"} <= set(written)
    for name, family in written.items():
        assert name in exposed, f"{name} not exposed"
        assert exposed[name].type == family.type == "gauge", name
        assert samples_of(exposed[name]) == samples_of(family), name
    assert docs[node]["host"] == node  # named after the --root folder


@real_stack
@pytest.mark.parametrize("node", ["ok", "fail"])
def test_promtool_finds_nothing_to_lint_in_the_file(
    stack: tuple[promstack.PromStack, dict[str, Any]], node: str
) -> None:
    s, _docs = stack
    lint = _promtool_check_metrics(s.exporters[node].prom.read_text())
    assert (lint.returncode, lint.stdout + lint.stderr) == (0, "")


@needs_promtool
def test_promtool_lints_every_family_clean(tmp_path: Path) -> None:
    """A pre-flight with a benchmark and a fleet with an unreachable host: every family of
    nodeagent.render.prometheus, through the real linter."""
    from nodeagent.api.report import HostError
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome
    from nodeagent.cluster.ssh import UNREACHABLE
    from nodeagent.compare.fleet import FleetComparison
    from nodeagent.render import jsonout
    from nodeagent.render.prometheus import prometheus
    from tests.support import tui_fakes

    root = promstack.named_root(promstack.FAIL_MACHINE, "gpu-07", tmp_path)
    out = subprocess.run(
        [*promstack.NODEAGENT, "preflight", "--root", str(root), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    preflight = json.loads(out.stdout) | {"bench": document.dump(tui_fakes.bench_result())}
    outcomes = {
        "gpu-07": HostOutcome("gpu-07", "10.0.0.7", preflight),
        "gpu-08": HostOutcome("gpu-08", "10.0.0.8", error=HostError(UNREACHABLE, "no answer")),
    }
    fleet = jsonout.document(FleetReport(outcomes, FleetComparison(1, [], []), 1.0).to_dict())
    written: set[str] = set()
    for doc in (preflight, fleet):
        text = prometheus(doc)
        written |= set(families(text))
        lint = _promtool_check_metrics(text)
        assert (lint.returncode, lint.stdout + lint.stderr) == (0, "")
    documented = {
        line.split()[0].split("{")[0]
        for line in _module_doc().splitlines()
        if line.startswith("    nodeagent_")
    }
    assert written == documented


@needs_promtool
def test_promtool_does_lint() -> None:
    """The linter complains about a file with a problem (so its silence above means something)."""
    bad = "# HELP jobs_done Jobs done\n# TYPE jobs_done counter\njobs_done 3\n"
    lint = _promtool_check_metrics(bad)
    assert "_total" in lint.stdout + lint.stderr


def _promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    assert promstack.PROMTOOL is not None
    return subprocess.run(
        [promstack.PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )


def _module_doc() -> str:
    from nodeagent.render import prometheus as module

    return module.__doc__ or ""


# --- Prometheus holds what the report says ------------------------------------------------------


@real_stack
@pytest.mark.parametrize("node", ["ok", "fail"])
def test_prometheus_answers_what_the_json_report_says(
    stack: tuple[promstack.PromStack, dict[str, Any]], node: str
) -> None:
    s, docs = stack
    doc = docs[node]
    where = f'node="{node}"'
    assert s.values(f"nodeagent_run_status{{{where}}}", "host") == {node: code(doc["status"])}
    assert s.values(f"nodeagent_run_timestamp_seconds{{{where}}}", "host") == {node: doc["started"]}
    assert s.values(f"nodeagent_run_duration_seconds{{{where}}}", "host") == {node: doc["duration_s"]}
    assert s.values(f"nodeagent_check_status{{{where}}}", "check") == {
        c["id"]: code(c["status"]) for c in doc["checks"]
    }
    assert s.values(f"nodeagent_check_duration_seconds{{{where}}}", "check") == {
        c["id"]: c["duration_s"] for c in doc["checks"]
    }
    for status in Status:
        counts = s.values(f'nodeagent_findings{{{where},status="{status.value}"}}', "check")
        assert counts == {c["id"]: findings_count(doc, c["id"], status.value) for c in doc["checks"]}
    (info,) = s.query(f"nodeagent_info{{{where}}}")
    assert info["metric"]["version"] == doc["nodeagent"] and float(info["value"][1]) == 1
    # The target's own labels ride along: the fleet view joins the two on job and instance.
    assert info["metric"]["job"] == promstack.JOB and info["metric"]["instance"] == s.exporters[node].address


@real_stack
def test_a_check_turning_from_ok_to_fail_shows_within_a_few_scrapes(
    stack: tuple[promstack.PromStack, dict[str, Any]], tmp_path: Path
) -> None:
    s, docs = stack
    before = docs["flip"]
    gpu = {c["id"]: c["status"] for c in before["checks"]}["gpu"]
    assert (before["status"], gpu) == ("OK", "OK")
    assert s.values('nodeagent_check_status{node="flip",check="gpu"}', "check") == {"gpu": code(gpu)}

    # The node's next run finds the other machine's fault: the same name, the FAIL machine's tree.
    after = promstack.nodeagent_check(
        promstack.named_root(promstack.FAIL_MACHINE, "flip", tmp_path), s.exporters["flip"].prom
    )
    written = time.monotonic()
    failed = {c["id"]: c["status"] for c in after["checks"]}["gpu"]
    assert (after["status"], failed) == ("FAIL", "FAIL")
    scrapes = 5
    s.wait_for(
        'nodeagent_check_status{node="flip",check="gpu"}',
        lambda r: float(r[0]["value"][1]) == code(failed),
        timeout=scrapes * promstack.SCRAPE_INTERVAL_S,
    )
    took = time.monotonic() - written
    assert s.values('nodeagent_run_status{node="flip"}', "host") == {"flip": code("FAIL")}
    assert s.values('nodeagent_run_timestamp_seconds{node="flip"}', "host") == {"flip": after["started"]}
    assert took <= scrapes * promstack.SCRAPE_INTERVAL_S


# --- the shipped alert rules --------------------------------------------------------------------

RULES = "prometheus-alerts.yaml"
TARGET = {"job": "gpu-nodes", "instance": "gpu-01:9100", "host": "gpu-01"}


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in ({**TARGET, **labels}).items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def _fresh_runs(minutes: int) -> dict[str, str]:
    """A run every minute, each dated when it ran (promtool's clock starts at 0)."""
    return _series("nodeagent_run_timestamp_seconds", f"0+60x{minutes}")


def _alerts(name: str, at: str, *fired: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(fired)}


def _fired(alert: str, severity: str, summary: str, value: str = "", **labels: str) -> dict[str, Any]:
    """An alert expected to fire: its labels, the summary as written here (the node and check
    named), and the description as the rule's template gives it for these labels."""
    every = {**TARGET, **labels}
    return {
        "exp_labels": {**every, "severity": severity},
        "exp_annotations": {"summary": summary, "description": _rendered(alert, "description", every, value)},
    }


def _rendered(alert: str, annotation: str, labels: dict[str, str], value: str) -> str:
    """The rule's annotation with its `$labels.NAME` and `$value | humanizeDuration` filled in; a
    label the alert does not carry is a KeyError here (Prometheus would print "<no value>")."""
    rules = yaml.safe_load(integrations.path(RULES).read_text())["groups"][0]["rules"]
    (template,) = [r["annotations"][annotation] for r in rules if r["alert"] == alert]
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    text = text.replace("{{ $value | humanizeDuration }}", value)
    assert "{{" not in text, text
    return str(text)


def _rule_tests() -> list[dict[str, Any]]:
    gpu = {"check": "gpu"}
    return [
        {  # FAIL: critical after a minute, and only then; the FAIL of a stale run is not alerted
            "interval": "1m",
            "input_series": [_series("nodeagent_check_status", "0 0 2x30", **gpu), _fresh_runs(32)],
            "alert_rule_test": [
                _alerts("NodeagentCheckFailed", "2m"),
                _alerts(
                    "NodeagentCheckFailed",
                    "4m",
                    _fired("NodeagentCheckFailed", "critical", "nodeagent check gpu FAILs on gpu-01", **gpu),
                ),
                _alerts("NodeagentCheckUnknown", "20m"),
                _alerts("NodeagentCheckWarning", "31m"),
                _alerts("NodeagentRunStale", "30m"),
            ],
        },
        {  # a FAIL whose run stopped being repeated: the status alert stops, the stale one fires
            "interval": "1m",
            "input_series": [
                _series("nodeagent_check_status", "2x40", **gpu),
                _series("nodeagent_run_timestamp_seconds", "0x40"),
            ],
            "alert_rule_test": [
                _alerts(
                    "NodeagentCheckFailed",
                    "5m",
                    _fired("NodeagentCheckFailed", "critical", "nodeagent check gpu FAILs on gpu-01", **gpu),
                ),
                _alerts("NodeagentCheckFailed", "20m"),
                _alerts("NodeagentRunStale", "15m"),
                _alerts(
                    "NodeagentRunStale",
                    "20m",
                    _fired(
                        "NodeagentRunStale",
                        "warning",
                        "nodeagent has not run on gpu-01 for 20m 0s",
                        value="20m 0s",
                    ),
                ),
            ],
        },
        {  # UNKNOWN is a warning after 15 minutes, WARN info after 30
            "interval": "1m",
            "input_series": [
                _series("nodeagent_check_status", "3x40", check="nvlink"),
                _series("nodeagent_check_status", "1x40", check="kernel"),
                _fresh_runs(40),
            ],
            "alert_rule_test": [
                _alerts("NodeagentCheckUnknown", "10m"),
                _alerts(
                    "NodeagentCheckUnknown",
                    "16m",
                    _fired(
                        "NodeagentCheckUnknown",
                        "warning",
                        "nodeagent check nvlink cannot decide on gpu-01",
                        check="nvlink",
                    ),
                ),
                _alerts("NodeagentCheckWarning", "20m"),
                _alerts(
                    "NodeagentCheckWarning",
                    "31m",
                    _fired(
                        "NodeagentCheckWarning",
                        "info",
                        "nodeagent check kernel warns on gpu-01",
                        check="kernel",
                    ),
                ),
                _alerts("NodeagentCheckFailed", "31m"),
            ],
        },
        {  # metrics that vanish: alerted after 10 minutes; a node that keeps reporting is not
            "interval": "1m",
            "input_series": [
                _series("nodeagent_run_status", "0x10 _x30"),
                _series("nodeagent_run_status", "0x40", host="gpu-02", instance="gpu-02:9100"),
            ],
            "alert_rule_test": [
                _alerts("NodeagentMetricsGone", "5m"),
                _alerts("NodeagentMetricsGone", "18m"),
                _alerts(
                    "NodeagentMetricsGone",
                    "30m",
                    _fired("NodeagentMetricsGone", "warning", "nodeagent metrics of gpu-01 are gone"),
                ),
            ],
        },
    ]


@needs_promtool
def test_the_alert_rules_are_valid() -> None:
    assert RULES in integrations.names()
    assert promstack.PROMTOOL is not None
    out = subprocess.run(
        [promstack.PROMTOOL, "check", "rules", str(integrations.path(RULES))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 5 rules found" in out.stdout


@needs_promtool
def test_each_alert_fires_when_it_should_and_not_before(tmp_path: Path) -> None:
    tests = tmp_path / "alerts-test.yml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(integrations.path(RULES))],
                "evaluation_interval": "1m",
                "tests": _rule_tests(),
            },
            sort_keys=False,
        )
    )
    assert promstack.PROMTOOL is not None
    out = subprocess.run(
        [promstack.PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_the_rule_tests_can_fail(tmp_path: Path) -> None:
    """The same tests expecting the FAIL alert a minute early: promtool must say so."""
    broken = _rule_tests()
    broken[0]["alert_rule_test"][0] = broken[0]["alert_rule_test"][1] | {"eval_time": "2m"}
    tests = tmp_path / "alerts-test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(integrations.path(RULES))], "tests": broken}))
    assert promstack.PROMTOOL is not None
    out = subprocess.run(
        [promstack.PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert out.returncode != 0 and "NodeagentCheckFailed" in out.stdout + out.stderr
