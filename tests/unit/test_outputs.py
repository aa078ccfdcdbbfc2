"""`--output FORMAT:PATH`: every renderer checked by the parser of its format.

JUnit is validated against tests/data/junit.xsd (xmlschema), Prometheus parsed by
prometheus_client's text parser, JSON validated against nodeagent/render/report.schema.json
(jsonschema), Markdown rendered by markdown-it (CommonMark + GFM tables), HTML read by the
stdlib parser; the Slurm reason is held to its character set and length.
"""

from __future__ import annotations

import functools
import json
import os
import string
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from prometheus_client.parser import text_string_to_metric_families

from nodeagent import checks, engine
from nodeagent.api.report import HostError
from nodeagent.cluster.report import FleetReport
from nodeagent.cluster.runner import HostOutcome
from nodeagent.cluster.ssh import UNREACHABLE
from nodeagent.compare.fleet import Drift, FleetComparison, Outlier
from nodeagent.core import document
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.engine import CheckResult, Report
from nodeagent.gate import judge
from nodeagent.host import open_host
from nodeagent.render import jsonout, outputs
from nodeagent.render.junit import junit
from nodeagent.render.markdown import html, markdown
from nodeagent.render.prometheus import prometheus
from nodeagent.render.slurm import ALLOWED, slurm_lines, slurm_reason
from tests.support import tui_fakes
from tests.support.cli import RunCli
from tests.support.paths import DATA

VM = DATA / "firecracker-vm-2cpu.tar.gz"
# Characters that need escaping in XML, HTML, Markdown, Prometheus labels and shells, and control
# characters that XML 1.0 cannot carry at all.
NASTY = (
    "quote \" apostrophe ' <tag> & amp; back\\slash `tick` *star* |pipe| $HOME; rm -rf\nnew\rline"
    "\x00nul\x1b[31m"
)


@functools.cache
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(DATA / "junit.xsd")


@functools.cache
def report_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(outputs.schema())


def as_printed(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document as `--format json` prints it and a reader loads it back."""
    loaded: dict[str, Any] = json.loads(jsonout.dumps(dict(doc)))
    return loaded


@pytest.fixture(scope="module")
def vm_doc() -> dict[str, Any]:
    """A real run: every check on the recorded Firecracker VM (WARN, OK and SKIPPED findings)."""
    with open_host(str(VM)) as host:
        report = engine.run_report(host, list(checks.all_checks()))
    return as_printed(judge.document(report, None, None, None))


def finding(check_id: str, status: Status, summary: str, subject: str = "", **kw: Any) -> Finding:
    return Finding(check_id, status, summary, subject=subject, host="gpu-07", **kw)


def preflight_report() -> Report:
    """A pre-flight run with every outcome: FAIL, WARN, UNKNOWN (crash), SKIPPED, OK and a check
    cut at the budget."""
    thp = finding(
        "hugepages",
        Status.FAIL,
        'transparent huge pages "never" <&>: TF allocations fall back to 4 KiB pages',
        "thp",
        evidence={"/sys/kernel/mm/transparent_hugepage/enabled": "always madvise [never]"},
        expected="madvise or always",
        remediation="echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
        fix="thp",
    )
    memlock = finding(
        "kernel",
        Status.WARN,
        "memlock limited (soft 8 MiB, hard 8 MiB): RDMA registration fails beyond it",
        "memlock",
        evidence={"/proc/self/limits": "Max locked memory: soft 8 MiB, hard 8 MiB"},
        expected="unlimited",
        remediation="raise memlock in /etc/security/limits.d",
    )
    results = [
        CheckResult("numa", "NUMA layout", [finding("numa", Status.OK, "1 node", "layout")], 0.01),
        CheckResult(
            "hugepages", "Huge pages", [thp, finding("hugepages", Status.OK, "no 1G pages", "1G")], 0.02
        ),
        CheckResult("kernel", "Kernel settings", [memlock], 0.03),
        CheckResult(
            "gpu",
            "GPU health",
            [finding("gpu", Status.UNKNOWN, "GPU health: the check failed (RuntimeError: NVML)")],
            0.5,
        ),
        CheckResult(
            "pcie", "PCIe links", [finding("pcie", Status.SKIPPED, "no PCI devices recorded")], 0.001
        ),
        CheckResult(
            "nvlink",
            "NVLink",
            [
                finding(
                    "nvlink",
                    Status.UNKNOWN,
                    "NVLink: cut at the run's budget of 5s",
                    evidence={"budget_s": "5"},
                )
            ],
            5.0,
            timed_out=True,
        ),
    ]
    return Report("gpu-07", results, started=1_700_000_000.0, duration_s=5.2)


def bench_doc() -> dict[str, Any]:
    """A `nodeagent bench --format json` document: three configs measured, one failed, one skipped."""
    doc = document.dump(tui_fakes.bench_result())
    doc["configs"]["tuned"] = {"status": "skipped", "images_per_s": None, "reason": "no profile default"}
    doc["configs"]["compute_only"] = {
        "status": "failed",
        "images_per_s": None,
        "reason": "worker exited 1",
        "stderr_tail": "Traceback ... <OOM>",
    }
    return doc


def preflight_doc(**overrides: Any) -> dict[str, Any]:
    report = preflight_report()
    doc = judge.document(report, None, 5.0, judge.verdict(report, "warn"))
    doc |= {"playbook": "preflight", "bench": bench_doc(), "facts": {"host": "gpu-07", "cpus": 2}}
    return as_printed(doc | overrides)


def one_check_doc(f: Finding, timed_out: bool = False) -> dict[str, Any]:
    report = Report(f.host, [CheckResult(f.check_id, "A check", [f], 0.1, timed_out)], 1_700_000_000.0, 0.1)
    return as_printed(judge.document(report, None, None, None))


def fleet_doc(vm: Mapping[str, Any]) -> dict[str, Any]:
    """Two hosts that ran (the VM's report under two names) and one that could not be reached, with
    a value that drifts and an outlier."""
    outcomes = {
        name: HostOutcome(name, f"10.0.0.{i}", dict(vm) | {"host": name})
        for i, name in enumerate(("n1", "n2"))
    }
    outcomes["n3"] = HostOutcome("n3", "10.0.0.3", error=HostError(UNREACHABLE, "no answer from 10.0.0.3:22"))
    comparison = FleetComparison(
        2,
        [Drift(key="kernel.release", majority="6.1.0", majority_hosts=1, hosts={"n2": "5.15.0"})],
        [
            Outlier(
                key="memory_total_mib",
                host="n2",
                value=1000.0,
                median=2000.0,
                mad=10.0,
                score=-67.4,
                direction="low",
            )
        ],
    )
    return as_printed(FleetReport(outcomes, comparison, 2.0).to_dict())


def bench_run_doc() -> dict[str, Any]:
    """What `nodeagent bench --output` writes: a run without checks, with the benchmark."""
    bench = bench_doc()
    doc = {"host": "gpu-07", "status": "FAIL", "started": 1_700_000_000.0, "duration_s": 12.0}
    return as_printed(doc | {"checks": [], "findings": [], "bench": bench})


# -- JUnit ----------------------------------------------------------------------------------------


def parse_junit(text: str) -> ET.Element:
    junit_schema().validate(text)
    return ET.fromstring(text)


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {c.attrib["name"]: c for c in root.iter("testcase")}


def test_junit_of_a_recorded_node_is_valid_with_one_test_per_check(vm_doc: dict[str, Any]) -> None:
    root = parse_junit(junit(vm_doc))
    (suite,) = root.findall("testsuite")
    by_name = cases(root)
    assert list(by_name) == [c["id"] for c in vm_doc["checks"]]
    assert {c.attrib["classname"] for c in by_name.values()} == {
        f"nodeagent.{c['id']}" for c in vm_doc["checks"]
    }
    skipped = [c["id"] for c in vm_doc["checks"] if c["status"] == "SKIPPED"]
    warned = [c["id"] for c in vm_doc["checks"] if c["status"] == "WARN"]
    assert warned and skipped
    # A WARN is not a pass: skipped (what CI servers show as neither passed nor failed), its
    # message naming it a WARN, its warnings (summary, evidence, remediation) in system-out.
    assert suite.attrib["skipped"] == str(len(skipped) + len(warned)) and suite.attrib["failures"] == "0"
    assert all(by_name[cid].find("skipped") is not None for cid in skipped + warned)
    for cid in warned:
        assert by_name[cid].find("skipped").attrib["message"].startswith(f"WARN {cid}/")  # type: ignore[union-attr]
        out = by_name[cid].findtext("system-out") or ""
        for f in vm_doc["findings"]:
            if f["check_id"] == cid and f["status"] == "WARN":
                assert f["summary"] in out and f["remediation"] in out
    # What passes is what is OK, and nothing else.
    outcomes = ("skipped", "failure", "error")
    passed = [name for name, case in by_name.items() if all(case.find(o) is None for o in outcomes)]
    assert passed == [c["id"] for c in vm_doc["checks"] if c["status"] == "OK"]
    assert suite.attrib["hostname"] == vm_doc["host"]


def test_junit_reports_failures_errors_skips_and_timeouts() -> None:
    doc = preflight_doc()
    root = parse_junit(junit(doc))
    suite = root.find("testsuite")
    assert suite is not None
    by_name = cases(root)
    failure = by_name["hugepages"].find("failure")
    assert failure is not None
    assert failure.attrib["message"].startswith('hugepages/thp: transparent huge pages "never" <&>')
    body = failure.text or ""
    for part in ("always madvise [never]", "madvise or always", "echo madvise >", "tuner     thp"):
        assert part in body
    gpu_error = by_name["gpu"].find("error")
    assert gpu_error is not None and gpu_error.attrib["type"] == "UNKNOWN"
    cut = by_name["nvlink"].find("error")
    assert cut is not None and cut.attrib["type"] == "timeout" and "budget" in cut.attrib["message"]
    skipped = by_name["pcie"].find("skipped")
    assert skipped is not None and skipped.attrib["message"] == "no PCI devices recorded"
    warned = by_name["kernel"].find("skipped")
    assert by_name["kernel"].find("failure") is None and warned is not None
    assert warned.attrib["message"].startswith("WARN kernel/")
    assert "memlock" in (by_name["kernel"].findtext("system-out") or "")
    assert len(by_name["numa"]) == 0
    # the benchmark's configurations are tests too: failed fails, skipped skips
    assert by_name["compute_only"].find("failure") is not None
    assert by_name["tuned"].find("skipped") is not None
    assert "images/s: median 530.0" in (by_name["naive"].findtext("system-out") or "")
    props = {p.attrib["name"]: p.attrib["value"] for p in suite.iter("property")}
    assert props["playbook"] == "preflight" and props["budget_s"] == "5.0"
    assert props["verdict.allowed"] == "false" and props["timed_out"] == "nvlink"
    # 6 checks + 5 bench configs; failures: hugepages, compute_only; errors: gpu, nvlink
    assert (suite.attrib["tests"], suite.attrib["failures"], suite.attrib["errors"]) == ("11", "2", "2")
    # skipped: pcie (SKIPPED), kernel (WARN) and the tuned configuration
    assert suite.attrib["skipped"] == "3" and suite.attrib["timestamp"] == "2023-11-14T22:13:20"
    assert root.attrib["tests"] == "11"


def test_junit_can_fail_warnings() -> None:
    root = parse_junit(junit(preflight_doc(), warn_as_failure=True))
    failure = cases(root)["kernel"].find("failure")
    assert failure is not None and failure.attrib["type"] == "WARN"


def test_junit_escapes_markup_and_shows_control_characters() -> None:
    f = finding("kernel", Status.FAIL, NASTY, "sub<ject>", evidence={"/proc/x\x07": NASTY}, remediation=NASTY)
    root = parse_junit(junit(one_check_doc(f)))
    failure = cases(root)["kernel"].find("failure")
    assert failure is not None
    assert "quote \" apostrophe ' <tag> & amp;" in failure.attrib["message"]
    body = failure.text or ""
    assert "\\x00nul\\x1b[31m" in body and "/proc/x\\x07" in body and "\x1b" not in body


@settings(max_examples=60, deadline=None)
@given(summary=st.text(), subject=st.text(), value=st.text(), status=st.sampled_from(list(Status)))
def test_junit_is_valid_whatever_a_finding_says(
    summary: str, subject: str, value: str, status: Status
) -> None:
    f = finding("kernel", status, summary, subject, evidence={value: value}, remediation=value)
    for timed_out in (False, True):
        parse_junit(junit(one_check_doc(f, timed_out), warn_as_failure=timed_out))


def test_junit_of_a_fleet_has_a_suite_per_host(vm_doc: dict[str, Any]) -> None:
    root = parse_junit(junit(fleet_doc(vm_doc)))
    suites = {s.attrib["hostname"]: s for s in root.findall("testsuite")}
    assert list(suites) == ["n1", "n2", "n3"]
    reach = suites["n3"].find("testcase/error")
    assert reach is not None and reach.attrib["type"] == UNREACHABLE and "10.0.0.3" in reach.attrib["message"]
    assert suites["n1"].attrib["tests"] == str(len(vm_doc["checks"]))


# -- Prometheus -----------------------------------------------------------------------------------


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Family name -> [(labels, value)], after checking each family's type and help."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation, family.name
        assert family.name not in out, f"{family.name} appears twice"
        out[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return out


def test_prometheus_of_a_recorded_node(vm_doc: dict[str, Any]) -> None:
    text = prometheus(vm_doc)
    found = samples(text)
    host = vm_doc["host"]
    code = {"SKIPPED": -1, "OK": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}
    assert found["nodeagent_run_status"] == [({"host": host}, code[vm_doc["status"]])]
    assert found["nodeagent_run_timestamp_seconds"] == [({"host": host}, vm_doc["started"])]
    status = {labels["check"]: value for labels, value in found["nodeagent_check_status"]}
    assert status == {c["id"]: code[c["status"]] for c in vm_doc["checks"]}
    durations = {labels["check"]: value for labels, value in found["nodeagent_check_duration_seconds"]}
    assert durations == {c["id"]: c["duration_s"] for c in vm_doc["checks"]}
    counts = found["nodeagent_findings"]
    assert sum(v for _, v in counts) == len(vm_doc["findings"])
    warn_kernel = [v for labels, v in counts if labels["check"] == "kernel" and labels["status"] == "WARN"]
    assert warn_kernel == [
        sum(1 for f in vm_doc["findings"] if f["check_id"] == "kernel" and f["status"] == "WARN")
    ]
    assert "nodeagent_preflight_allowed" not in found and "nodeagent_bench_images_per_second" not in found
    assert "# TYPE nodeagent_check_status gauge" in text and text.endswith("\n")


def test_prometheus_of_a_preflight_with_a_benchmark() -> None:
    found = samples(prometheus(preflight_doc()))
    assert found["nodeagent_preflight_allowed"] == [({"host": "gpu-07"}, 0)]
    assert found["nodeagent_preflight_budget_seconds"] == [({"host": "gpu-07"}, 5.0)]
    status = {labels["check"]: value for labels, value in found["nodeagent_check_status"]}
    assert status == {"numa": 0, "hugepages": 2, "kernel": 1, "gpu": 3, "pcie": -1, "nvlink": 3}
    cut = {labels["check"]: value for labels, value in found["nodeagent_check_timed_out"]}
    assert cut["nvlink"] == 1 and sum(cut.values()) == 1
    rates = {
        (labels["config"], labels["stat"]): value
        for labels, value in found["nodeagent_bench_images_per_second"]
    }
    assert rates[("naive", "median")] == 530.0
    assert rates[("naive", "ci95_lo")] == pytest.approx(530.0 * 0.96)
    assert rates[("autotune", "ci95_hi")] == pytest.approx(869.0 * 1.04)
    assert {config for config, _ in rates} == {"naive", "autotune", "input_only"}  # failed/skipped: none
    info = found["nodeagent_info"]
    assert info[0][0]["playbook"] == "preflight"


def test_prometheus_escapes_label_values() -> None:
    host = 'gpu "07"\\rack\nb'
    doc = preflight_doc(host=host)
    found = samples(prometheus(doc))
    assert found["nodeagent_run_status"] == [({"host": host}, 2)]  # FAIL


@settings(max_examples=100, deadline=None)
@given(host=st.text(), check=st.text(min_size=1), config=st.text())
def test_prometheus_label_values_survive_any_text(host: str, check: str, config: str) -> None:
    f = Finding(check, Status.WARN, "x", host=host)
    doc = one_check_doc(f) | {
        "host": host,
        "bench": {"configs": {config: {"status": "ok", "images_per_s": {"median": 1.5, "ci95": [1, 2]}}}},
    }
    found = samples(prometheus(doc))
    assert found["nodeagent_check_status"] == [({"host": host, "check": check}, 1)]
    assert ({"host": host, "config": config, "stat": "median"}, 1.5) in found[
        "nodeagent_bench_images_per_second"
    ]


def test_prometheus_of_a_fleet_labels_each_host(vm_doc: dict[str, Any]) -> None:
    found = samples(prometheus(fleet_doc(vm_doc)))
    assert {labels["host"] for labels, _ in found["nodeagent_run_status"]} == {"n1", "n2", "n3"}
    assert found["nodeagent_host_error"] == [({"host": "n3", "kind": UNREACHABLE}, 1)]


# -- JSON Schema ----------------------------------------------------------------------------------


def schema_errors(doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in report_validator().iter_errors(doc)]


def test_the_schema_is_a_versioned_draft_2020_12_schema() -> None:
    schema = outputs.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and schema["$id"]
    assert schema["properties"]["schema"]["const"] == jsonout.SCHEMA_VERSION


def test_real_and_preflight_documents_match_the_schema(vm_doc: dict[str, Any]) -> None:
    assert schema_errors(vm_doc) == []
    doc = preflight_doc()
    assert doc["timed_out"] == ["nvlink"] and doc["verdict"]["allowed"] is False
    assert schema_errors(doc) == []
    assert schema_errors(fleet_doc(vm_doc)) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("status",), "BAD"),
        (("schema",), 2),
        (("checks", 0, "duration_s"), -1),
        (("findings", 0, "evidence"), {"/proc/x": 3}),
        (("verdict", "fail_on"), "never"),
        (("timed_out",), "nvlink"),
        (("bench", "configs", "naive", "images_per_s", "ci95"), [1, 2, 3]),
    ],
)
def test_a_broken_document_is_rejected(path: tuple[str | int, ...], value: Any) -> None:
    doc = preflight_doc()
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert schema_errors(doc), path


@pytest.mark.parametrize("missing", ["checks", "findings", "host", "nodeagent"])
def test_a_document_missing_a_field_is_rejected(missing: str) -> None:
    doc = preflight_doc()
    del doc[missing]
    assert schema_errors(doc)


# -- Markdown and HTML ----------------------------------------------------------------------------


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in ("href", "src")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def read_html(text: str) -> Tags:
    parser = Tags()
    parser.feed(text)
    parser.close()
    return parser


def nasty_doc() -> dict[str, Any]:
    f = finding(
        "kernel",
        Status.FAIL,
        "evil <script>alert(1)</script> *x*",
        "a|b",
        evidence={"`p`|q": NASTY},
        remediation=NASTY,
    )
    return one_check_doc(f)


def test_markdown_has_the_checks_findings_and_benchmark() -> None:
    text = markdown(preflight_doc())
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    page = read_html(rendered)
    seen = "".join(page.text)
    assert "nodeagent preflight (preflight): gpu-07" in seen and "REFUSED" in seen
    assert 'transparent huge pages "never" <&>' in seen  # escaped in Markdown, text again in HTML
    assert "always madvise [never]" in seen and "echo madvise > /sys" in seen
    assert page.tags.count("table") == 2  # the checks and the benchmark
    assert "530.0" in seen and "508.8 - 551.2" in seen and "tuned vs naive: faster" in seen
    assert "nvlink" in seen and "5.000 (cut)" in seen


def test_markdown_escapes_what_the_node_said() -> None:
    rendered = MarkdownIt("commonmark").enable("table").render(markdown(nasty_doc()))
    page = read_html(rendered)
    assert "script" not in page.tags and "em" not in page.tags
    seen = "".join(page.text)
    assert "evil <script>alert(1)</script> *x*" in seen
    assert "`p`|q" in seen and "\\x1b[31m" in seen and "$HOME; rm -rf new line\\x00nul" in seen


def test_html_is_self_contained_and_escaped(vm_doc: dict[str, Any]) -> None:
    page = read_html(html(nasty_doc()))
    assert "script" not in page.tags and page.links == []
    assert {"html", "head", "style", "body", "table", "h1", "ul", "code"} <= set(page.tags)
    seen = "".join(page.text)
    assert "evil <script>alert(1)</script> *x*" in seen and "\\x00nul" in seen
    real = read_html(html(vm_doc))
    warned = [f for f in vm_doc["findings"] if f["status"] == "WARN"]
    assert all(f["summary"] in "".join(real.text) for f in warned)


# -- Slurm ----------------------------------------------------------------------------------------


def assert_one_safe_line(reason: str, max_len: int) -> None:
    """The reason of a refused node: one line, Slurm-safe characters only (or none at all: the node
    may run the job)."""
    if reason == "":
        return
    assert "\n" not in reason and len(reason) <= max_len, reason
    assert set(reason) <= ALLOWED, set(reason) - ALLOWED
    assert reason.startswith("nodeagent")


def test_slurm_reason_when_all_is_well() -> None:
    ok = one_check_doc(finding("numa", Status.OK, "1 node"))
    assert slurm_reason(ok) == ""  # the node may run the job: no reason to drain it
    assert slurm_reason(ok | {"playbook": "preflight"}) == ""


def test_slurm_reason_of_a_recorded_node(vm_doc: dict[str, Any]) -> None:
    # The recorded VM has WARNs only: without a verdict that refuses at WARN, nothing to say.
    assert slurm_reason(vm_doc) == ""
    refused = vm_doc | {"verdict": {"allowed": False, "fail_on": "warn", "reason": "WARN"}}
    reason = slurm_reason(refused)
    assert_one_safe_line(reason, 120)
    # The first subject (sinfo -R shows 20 characters), its status and summary, then the count.
    assert reason.startswith("nodeagent: kernel/memlock WARN: memlock limited (soft 8 MiB, hard 8 MiB)")
    warned = {(f["check_id"], f["subject"]) for f in vm_doc["findings"] if f["status"] == "WARN"}
    assert reason.endswith(f" +{len(warned) - 1} more")


def test_slurm_reason_of_a_refused_preflight() -> None:
    doc = preflight_doc()
    del doc["bench"]  # its failed configuration would come second (see the benchmark's test)
    reason = slurm_reason(doc)
    assert_one_safe_line(reason, 120)
    # The FAIL alone (its quotes and <&> dropped): not the check cut at the budget, UNKNOWN or WARN
    # then the three others that refuse it at --fail-on warn: gpu (UNKNOWN), nvlink (cut), kernel/memlock.
    assert reason == (
        "nodeagent: hugepages/thp FAIL: transparent huge pages never: TF allocations fall back to 4 KiB "
        "pages +3 more"
    )
    for max_len in range(40, 200, 7):
        short = slurm_reason(doc, max_len)
        assert_one_safe_line(short, max_len)
        assert "hugepages/thp" in short


def test_slurm_lines_of_a_fleet(vm_doc: dict[str, Any]) -> None:
    doc = fleet_doc(vm_doc)
    lines = slurm_lines(doc).splitlines()
    # n1 and n2 ran and have only WARNs: no line; n3 gave no result.
    assert [line.split(" ", 1)[0] for line in lines] == ["n3"]
    assert lines[0] == "n3 nodeagent: no result (unreachable) FAIL: no answer from 10.0.0.3:22"
    with pytest.raises(ValueError, match="slurm_lines"):
        slurm_reason(doc)
    with pytest.raises(ValueError, match="at least"):
        slurm_reason(vm_doc, 10)


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(
        st.tuples(st.text(min_size=1), st.text(), st.text(), st.sampled_from(list(Status)), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    playbook=st.text(),
    max_len=st.integers(min_value=40, max_value=300),
)
def test_slurm_reason_is_one_safe_line_whatever_findings_say(
    items: list[tuple[str, str, str, Status, bool]], playbook: str, max_len: int
) -> None:
    results = [
        CheckResult(cid, "t", [finding(cid, status, summary, subject)], 0.1, timed_out)
        for cid, subject, summary, status, timed_out in items
    ]
    report = Report("h", results, 1.0, 1.0)
    doc = as_printed(judge.document(report, None, None, None) | {"playbook": playbook})
    assert_one_safe_line(slurm_reason(doc, max_len), max_len)


# -- parse_output and write_outputs ---------------------------------------------------------------


def test_parse_output(tmp_path: Path) -> None:
    assert outputs.parse_output(f"junit:{tmp_path}/na.xml") == outputs.OutputSpec(
        "junit", tmp_path / "na.xml"
    )
    assert outputs.parse_output("json:a:b.json").path == Path("a:b.json")  # the first colon splits


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("yaml:/tmp/x", "unknown format 'yaml'"),
        ("junit", "expected FORMAT:PATH"),
        ("junit:", "no path"),
        ("/tmp/report.xml", "expected FORMAT:PATH"),
    ],
)
def test_parse_output_refuses_bad_specs(spec: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as e:
        outputs.parse_output(spec)
    assert "\n" not in str(e.value) and spec in str(e.value)


def test_parse_output_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        outputs.parse_output(f"html:{tmp_path}")


def test_write_outputs_writes_every_format(tmp_path: Path) -> None:
    doc = preflight_doc()
    specs = [outputs.parse_output(f"{fmt}:{tmp_path / ('out.' + fmt)}") for fmt in outputs.FORMATS]
    assert outputs.write_outputs(specs, doc) is False  # nothing went to standard output
    paths = [s.path for s in specs if s.path is not None]
    for spec, path in zip(specs, paths, strict=True):
        assert path.read_text(encoding="utf-8") == outputs.render(spec.format, doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temp files
    assert json.loads((tmp_path / "out.json").read_text()) == doc
    umask = os.umask(0)
    os.umask(umask)
    # readable by node_exporter's user as a file open() created would be (mkstemp makes 0600)
    assert (tmp_path / "out.prometheus").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "out.slurm").read_text().count("\n") == 1


def test_the_output_option_offers_every_format(run_cli: RunCli) -> None:
    code, out, _ = run_cli("check", "--help")
    said = " ".join(out.split())  # click wraps the help
    assert code == 0 and f"Also write the result as {outputs.choices_text()} (repeatable)" in said
    assert all(fmt in outputs.choices_text() for fmt in outputs.FORMATS)
    with pytest.raises(UsageError, match=", ".join(outputs.FORMATS)):
        outputs.parse_output("yaml:out.yml")


def test_write_outputs_keeps_an_existing_files_mode(tmp_path: Path) -> None:
    target = tmp_path / "nodeagent.prom"
    target.write_text("old\n")
    target.chmod(0o640)
    outputs.write_outputs([outputs.OutputSpec("prometheus", target)], preflight_doc())
    assert target.stat().st_mode & 0o777 == 0o640 and "nodeagent_run_status" in target.read_text()


def test_write_outputs_needs_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "out.xml"
    with pytest.raises(UsageError, match="does not exist") as e:
        outputs.write_outputs([outputs.OutputSpec("junit", missing)], preflight_doc())
    assert str(missing) in str(e.value)


@pytest.fixture
def old_file(tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "nodeagent.prom"
    target.write_text("old content\n")
    yield target
    assert target.read_text() == "old content\n", "a failed write changed the file"
    assert [p.name for p in tmp_path.iterdir()] == [target.name], "a failed write left a temporary file"


def test_a_render_that_fails_leaves_the_old_file(old_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(doc: Mapping[str, Any]) -> str:
        raise RuntimeError("renderer bug")

    monkeypatch.setattr("nodeagent.render.prometheus.prometheus", broken)
    with pytest.raises(RuntimeError, match="renderer bug"):
        outputs.write_outputs([outputs.OutputSpec("prometheus", old_file)], preflight_doc())


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_write_that_fails_leaves_no_partial_file(
    old_file: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, no_space)  # the module outputs.py writes through
    with pytest.raises(UsageError, match="No space left on device") as e:
        outputs.write_outputs([outputs.OutputSpec("prometheus", old_file)], preflight_doc())
    assert str(old_file) in str(e.value)


def test_render_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        outputs.render("yaml", preflight_doc())


def test_slurm_output_allows_only_safe_characters() -> None:
    assert set(string.ascii_letters) <= ALLOWED and not set("'\"\\$`;&|<>*?!#\n") & ALLOWED


# -- documents of other commands ------------------------------------------------------------------


def test_a_benchmark_document_renders_in_every_format() -> None:
    doc = bench_run_doc()
    assert schema_errors(doc) == []
    by_name = cases(parse_junit(junit(doc)))
    assert list(by_name) == ["naive", "autotune", "tuned", "input_only", "compute_only"]
    found = samples(prometheus(doc))
    assert ({"host": "gpu-07", "config": "input_only", "stat": "median"}, 1553.0) in found[
        "nodeagent_bench_images_per_second"
    ]
    assert slurm_reason(doc) == "nodeagent: bench/compute_only FAIL: failed"
    seen = "".join(read_html(html(doc)).text)
    assert "Benchmark" in seen and "worker exited 1" in seen and "no profile default" in seen


def test_markdown_of_a_fleet_lists_hosts_drift_and_outliers(vm_doc: dict[str, Any]) -> None:
    text = markdown(fleet_doc(vm_doc))
    seen = "".join(read_html(MarkdownIt("commonmark").enable("table").render(text)).text)
    for part in ("nodeagent check: n1", "nodeagent check: n2", "no result (unreachable)", "kernel.release"):
        assert part in seen
    assert "n2 5.15.0" in seen and "n2 1000.0 (low; median 2000.0)" in seen
