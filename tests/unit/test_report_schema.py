"""The report documents' models (nodeagent.api.report) and the JSON Schema generated from them.

The committed nodeagent/render/report.schema.json is what the models generate; every golden document
(real output of `check` and `check --cluster` on recorded machines) validates against the models
and the schema alike, and both refuse the same broken documents. A renderer given a broken document
stops with one line naming the field; `report merge` turns a broken file into that host's error.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import pickle
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from nodeagent import engine
from nodeagent.api import report
from nodeagent.checks import all_checks
from nodeagent.cluster.merge import UNREADABLE, merge_reports
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.render import jsonout, outputs
from nodeagent.render.slurm import slurm_reason
from nodeagent.render.text import problems, verdict_line
from tests.support.golden_docs import VOLATILE
from tests.support.helpers import fixture_host
from tests.support.paths import GOLDEN

SCHEMA_FILE = Path(outputs.__file__).with_name(outputs.SCHEMA_FILE)
GOLDEN_REPORTS = sorted(GOLDEN.glob("check*.json"))
NODE_REPORTS = [p for p in GOLDEN_REPORTS if p.name.startswith("check--")]
FLEET_REPORT = GOLDEN / "check-cluster.json"
# A recorded two-socket Xeon with NICs, an RDMA port and PCIe links (tests/fixtures/hwloc).
MACHINE = "40intel64-2g2n4c+pcilocality"
SECONDS = 0.25  # what stands in for a time the goldens leave out (it differs from run to run)


def golden(path: Path) -> dict[str, Any]:
    """A golden document with a number where the golden test wrote "<volatile>"."""

    def real(doc: Any) -> Any:
        if isinstance(doc, dict):
            return {k: SECONDS if k in VOLATILE and v == "<volatile>" else real(v) for k, v in doc.items()}
        if isinstance(doc, list):
            return [real(v) for v in doc]
        return doc

    loaded: dict[str, Any] = real(json.loads(path.read_text()))
    return loaded


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def schema_errors(doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(doc)]


def refused(doc: Any) -> str:
    """The model's one line about `doc` ("" when it takes it)."""
    try:
        report.parse_document(doc, "doc.json")
    except UsageError as e:
        return str(e)
    return ""


def test_the_committed_schema_is_what_the_models_generate() -> None:
    assert SCHEMA_FILE.read_text() == report.json_schema_text(), (
        "regenerate it: python -m nodeagent.api.report > nodeagent/render/report.schema.json"
    )
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert (
        schema["$id"] == report.SCHEMA_ID
        and schema["properties"]["schema"]["const"] == jsonout.SCHEMA_VERSION
    )


@pytest.mark.parametrize("path", GOLDEN_REPORTS, ids=lambda p: p.stem)
def test_every_golden_document_validates_against_the_model_and_the_schema(path: Path) -> None:
    doc = golden(path)
    model = report.parse_document(doc, str(path))
    assert isinstance(model, report.FleetDocument if path == FLEET_REPORT else report.CheckReport)
    assert schema_errors(doc) == []
    # The model keeps what the document says: dumped again, it is the document.
    assert model.model_dump(mode="json", by_alias=True, exclude_unset=True) == doc


def test_a_fleet_entry_of_each_kind_validates() -> None:
    doc = golden(FLEET_REPORT)
    node = golden(NODE_REPORTS[0])
    doc["hosts"]["node05"] = {
        "address": "10.0.0.5",
        "duration_s": 3.0,
        "status": "FAIL",
        "error": {"kind": "unreachable", "message": "no answer from 10.0.0.5:22"},
    }
    # What a host's own nodeagent printed (--remote-agent): its versions, and the name it gives itself.
    doc["hosts"]["node06"] = {"address": "10.0.0.6", **node, "hostname": node["host"], "host": "node06"}
    doc["bandwidth"] = {
        "links": [
            {"src": "node01", "dst": "node02", "tool": "iperf3", "gbits_per_s": None, "latency_ms": 0.1}
        ],
        "findings": [],
    }
    doc["notes"] = ["node01: 2 reports; kept the newest"]
    model = report.parse_document(doc, "fleet.json")
    assert isinstance(model, report.FleetDocument)
    assert isinstance(model.hosts["node05"], report.HostFailure)
    assert isinstance(model.hosts["node06"], report.HostResult) and model.hosts["node06"].nodeagent
    assert schema_errors(doc) == []


def node_doc() -> dict[str, Any]:
    """A node's report with a pre-flight's fields and a benchmark."""
    doc = golden(NODE_REPORTS[0])
    doc |= {
        "playbook": "preflight",
        "budget_s": 5.0,
        "verdict": {"allowed": False, "fail_on": "fail", "reason": "1 FAIL"},
        "bench": {
            "configs": {
                "naive": {"status": "ok", "images_per_s": {"median": 530.0, "ci95": [510.0, 550.0]}},
                "tuned": {"status": "failed", "images_per_s": None, "reason": "worker exited 1"},
            },
            "verdict": {"tuned_vs_naive": {"verdict": "skipped", "ratio": None}},
        },
        "facts": {"host": doc["host"]},
        "a_field_of_a_newer_nodeagent": {"kept": True},
    }
    return doc


# (where, the value written there, the model's words): the schema refuses each one too.
BROKEN = [
    (("status",), "BAD", """status: must be 'SKIPPED', 'OK', 'WARN', 'UNKNOWN' or 'FAIL' (got "BAD")"""),
    (("schema",), 2, "schema: must be 1 (got 2)"),
    (("schema",), True, "schema: must be an integer (got true)"),
    (("started",), "2024-01-01", 'started: must be a number (got "2024-01-01")'),
    (("duration_s",), -1, "duration_s: must be at least 0 (got -1)"),
    (("checks", 0, "duration_s"), "0.1", 'checks[0].duration_s: must be a number (got "0.1")'),
    (("checks", 0, "timed_out"), 1, "checks[0].timed_out: must be true or false (got 1)"),
    (("findings", 0, "evidence"), {"/proc/x": 3}, "findings[0].evidence./proc/x: must be a string (got 3)"),
    (("findings", 0, "check_id"), "", 'findings[0].check_id: must not be empty (got "")'),
    (("verdict", "fail_on"), "never", """verdict.fail_on: must be 'warn' or 'fail' (got "never")"""),
    (("timed_out",), "nvlink", 'timed_out: must be a list (got "nvlink")'),
    (("playbook",), None, "playbook: is left out when there is none, never null (got null)"),
    (("budget_s",), 0, "budget_s: must be more than 0 (got 0)"),
    (("bench", "configs", "naive", "images_per_s", "ci95"), [1, 2, 3], "ci95: must be a list of 2 numbers"),
    (("bench", "configs", "naive", "status"), "fine", "status: must be 'ok', 'failed' or 'skipped'"),
]


@pytest.mark.parametrize(("path", "value", "says"), BROKEN, ids=[str(b[0]) for b in BROKEN])
def test_the_model_and_the_schema_refuse_a_broken_document(
    path: tuple[str | int, ...], value: Any, says: str
) -> None:
    doc = node_doc()
    assert refused(doc) == "" and schema_errors(doc) == []
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    line = refused(doc)
    assert line.startswith("doc.json: ") and says in line and "\n" not in line, line
    assert schema_errors(doc), path


@pytest.mark.parametrize(
    "missing", ["schema", "nodeagent", "host", "status", "started", "checks", "findings"]
)
def test_a_document_missing_a_field_is_refused(missing: str) -> None:
    doc = node_doc()
    del doc[missing]
    assert refused(doc) == f"doc.json: {missing}: is required"
    assert schema_errors(doc)


def test_a_broken_fleet_entry_is_named_by_its_host() -> None:
    doc = golden(FLEET_REPORT)
    doc["hosts"]["node02"]["findings"][0]["status"] = "BAD"
    assert refused(doc).startswith("doc.json: hosts.node02.findings[0].status: must be 'SKIPPED'")
    doc = golden(FLEET_REPORT)
    doc["hosts"]["node03"] = {
        "status": "FAIL",
        "address": "",
        "duration_s": 0.0,
        "error": {"kind": "timeout"},
    }
    assert refused(doc) == "doc.json: hosts.node03.error.message: is required"
    doc["hosts"]["node03"] = "down"
    assert refused(doc) == 'doc.json: hosts.node03: must be an object (got "down")'
    doc = golden(FLEET_REPORT)
    doc["summary"]["by_status"]["BAD"] = 1
    assert refused(doc).startswith("""doc.json: summary.by_status: key "BAD": must be 'SKIPPED'""")
    for broken in (doc, ["not", "an", "object"]):
        assert refused(broken) and schema_errors(broken)


# Every format but json, which writes the document as it is, reads it through the models.
READING = [fmt for fmt in outputs.FORMATS if fmt != "json"]


@pytest.mark.parametrize("fmt", READING)
def test_a_renderer_given_a_broken_document_stops_with_one_line(fmt: str) -> None:
    doc = node_doc()
    doc["findings"][0]["status"] = "BAD"
    with pytest.raises(UsageError) as e:
        outputs.render(fmt, doc)
    assert str(e.value).startswith("report document: findings[0].status: must be 'SKIPPED'")
    assert "\n" not in str(e.value) and e.value.exit_code == 64


def test_renderers_take_the_model_as_they_take_the_dict() -> None:
    doc = node_doc()
    model = report.parse_document(copy.deepcopy(doc), "doc.json")
    assert isinstance(model, report.CheckReport)
    for render in (*(outputs.renderer(fmt) for fmt in READING), slurm_reason):
        assert render(model) == render(doc)
    assert verdict_line(model, model.verdict or {}) == verdict_line(doc, doc["verdict"])


def test_a_checks_findings_read_back_from_its_report_are_the_same_findings() -> None:
    """A check's Finding is the report's: written by `documents` and read by the model, every
    finding of a recorded machine comes back equal, its fields in the order the report writes."""
    run = engine.run_report(fixture_host(MACHINE), list(all_checks()))
    doc = json.loads(jsonout.report(run))
    model = report.validate(report.CheckReport, doc, "doc.json")
    assert model.findings == run.findings and len(run.findings) > 20
    assert list(doc["findings"][0]) == [f.name for f in dataclasses.fields(Finding)]
    assert list(doc["findings"][0])[:3] == ["check_id", "host", "status"]


def test_a_finding_a_check_cannot_make_is_refused_where_it_is_made() -> None:
    """The report's rules hold for the check too: an empty check id or evidence that is not text
    stops at the Finding (the engine turns that into the check's UNKNOWN), not in a reader."""
    with pytest.raises(ValidationError):
        Finding("", Status.OK, "fine")
    with pytest.raises(ValidationError):
        Finding("numa", Status.OK, "fine", {"/sys/devices/system/node/online": 2})  # type: ignore[dict-item]


def test_merge_reads_each_file_through_the_model(tmp_path: Path) -> None:
    """The golden node reports as the files nodes leave behind: one without a start time, one with
    it written as a date, one broken; the fleet view renders in every format."""
    docs = [golden(p) for p in NODE_REPORTS[:4]]
    names = [doc["host"] for doc in docs]
    del docs[0]["started"]
    docs[1]["started"] = "2024-01-02T03:04:05"
    docs[2]["a_field_of_a_newer_nodeagent"] = [1, 2]
    docs[3]["findings"][0]["evidence"] = {"/proc/x": 3}
    for doc in docs:
        (tmp_path / f"{doc['host']}.json").write_text(json.dumps(doc))
    merged = merge_reports([tmp_path])
    by_name = merged.outcomes
    assert "started" not in (by_name[names[0]].doc or {})
    assert (by_name[names[1]].doc or {})["started"] == 1704164645.0  # UTC, as a number
    assert (by_name[names[2]].doc or {})["a_field_of_a_newer_nodeagent"] == [1, 2]
    error = by_name[names[3]].error
    assert error is not None and error.kind == UNREADABLE
    # Named by the line that wrote the field: the files are written one line each.
    assert (
        error.message
        == f"{tmp_path / names[3]}.json:1: findings[0].evidence./proc/x: must be a string (got 3)"
    )
    fleet = jsonout.document(merged.to_dict())
    assert schema_errors(fleet) == []
    for fmt in outputs.FORMATS:
        assert outputs.render(fmt, fleet).endswith("\n")
    assert f"{names[3]}: FAIL    no result (unreadable report)" in problems(fleet)


def test_merge_names_a_start_time_it_cannot_read_by_its_line(tmp_path: Path) -> None:
    doc = golden(NODE_REPORTS[0]) | {"started": "yesterday"}
    text = json.dumps(doc, indent=2)  # as `check --format json` writes it
    (tmp_path / "n1.json").write_text(text)
    line = 1 + text[: text.index('"started"')].count("\n")
    error = merge_reports([tmp_path]).outcomes["n1"].error  # no report: named by its file
    assert error is not None and line > 1
    assert error.message == (
        f'{tmp_path / "n1.json"}:{line}: started: must be a number or an ISO 8601 time (got "yesterday")'
    )


def test_a_hosts_error_is_raised_pickled_and_reported_as_one_object() -> None:
    """The transports raise report.HostError; a fleet's worker process sends it back pickled; the
    fleet document holds its two fields, which read back as the same error."""
    with pytest.raises(report.HostError) as caught:
        raise report.HostError("timeout", "the command did not finish within 45s")
    error = caught.value
    assert str(error) == "timeout: the command did not finish within 45s"
    assert pickle.loads(pickle.dumps(error)) == error
    dumped = dataclasses.asdict(error)
    assert dumped == {"kind": "timeout", "message": "the command did not finish within 45s"}
    entry = {"status": "FAIL", "address": "10.0.0.1", "duration_s": 45.0, "error": dumped}
    assert report.HostFailure.model_validate(entry).error == error
