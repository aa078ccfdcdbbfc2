"""The dcgm-diag check: `dcgmi diag -r 1 -j`, live (SKIPPED here: no DCGM), recorded, and parsed.

The DCGM 3.x report is a published real one (tests/fixtures/dcgm, README.md there). The DCGM 4.x
documents follow NVIDIA's schema (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json): results per
entity, warnings with error_id and error_severity (dcgmErrorSeverity_t: 2 ISOLATE, 5 CONFIG). The
expected verdicts come from the status DCGM wrote and NVIDIA's severity meanings, not from nodeagent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.check import NoParams
from nodeagent.checks import dcgm_diag
from nodeagent.core.finding import Status
from nodeagent.facts import dcgm
from nodeagent.host import CmdResult, LocalHost
from tests.support.helpers import make_tree
from tests.support.paths import FIXTURES

STEM = "dcgmi-diag-r-1-j"  # the snapshot's file stem for `dcgmi diag -r 1 -j`
VIRTUALCLIENT_R1 = FIXTURES / "dcgm" / "virtualclient-r1-pass" / "dcgmi-diag-r1-j.json"


def result(stdout: str, exited: int = 0, stderr: str = "") -> CmdResult:
    return CmdResult(dcgm.COMMAND, stdout, stderr, exited)


def evaluate(stdout: str, exited: int = 0, stderr: str = "") -> list[Any]:
    return dcgm_diag.evaluate(dcgm_diag.Facts(dcgm.from_result(result(stdout, exited, stderr))), NoParams())


def dcgm4(*tests: dict[str, Any], runtime_error: str | None = None) -> str:
    doc: dict[str, Any] = {
        "DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": list(tests)}]},
        "metadata": {"version": "4.2.3", "Driver Version Detected": "570.124.06"},
    }
    if runtime_error:
        doc["DCGM Diagnostic"]["runtime_error"] = runtime_error
    return json.dumps(doc)


def software(*results: dict[str, Any]) -> dict[str, Any]:
    return {"name": "software", "results": list(results), "test_summary": {"status": "Fail"}}


def gpu(entity: int, status: str, *warnings: tuple[str, int]) -> dict[str, Any]:
    return {
        "entity_group": "GPU",
        "entity_group_id": 1,
        "entity_id": entity,
        "status": status,
        "warnings": [
            {"warning": w, "error_id": 29, "error_category": 8, "error_severity": s} for w, s in warnings
        ],
    }


def test_a_real_dcgm3_level1_report_passes() -> None:
    findings = evaluate(VIRTUALCLIENT_R1.read_text())
    assert [(f.status, f.summary) for f in findings] == [(Status.OK, "DCGM level 1: 9 of 9 result(s) pass")]
    assert findings[0].evidence["dcgmi diag -r 1 -j: passed"] == (
        "CUDA Main Library, Denylist, Environment Variables, Graphics Processes, Inforom, NVML Library, "
        "Page Retirement/Row Remap, Permissions and OS Blocks, Persistence Mode"
    )


def test_dcgm3_preamble_and_a_failed_test(tmp_path: Path) -> None:
    # DCGM 3 prints a line before the JSON; dcgmi exits non-zero when a test fails.
    doc = json.loads(VIRTUALCLIENT_R1.read_text())
    tests = doc["DCGM GPU Diagnostic"]["test_categories"][0]["tests"]
    tests[5]["results"] = [
        {"status": "Fail", "warnings": ["Found 1 environment variable(s) that may affect CUDA"]}
    ]
    text = "Successfully ran diagnostic for group.\n" + json.dumps(doc)
    findings = evaluate(text, exited=226)
    assert [(f.status, f.summary) for f in findings] == [
        (
            Status.FAIL,
            "DCGM Environment Variables failed on all GPUs: "
            "Found 1 environment variable(s) that may affect CUDA",
        ),
        (Status.OK, "DCGM level 1: 8 of 9 result(s) pass"),
    ]


def test_dcgm4_isolate_fails_and_config_warns() -> None:
    text = dcgm4(
        software(
            gpu(0, "Fail", ("Inforom: the InfoROM is corrupt", 2)),  # ISOLATE
            gpu(1, "Fail", ("Persistence Mode: Persistence mode for GPU 1 is disabled.", 5)),  # CONFIG
            gpu(2, "Pass"),
        )
    )
    findings = evaluate(text, exited=226)
    assert [(f.status, f.subject) for f in findings] == [
        (Status.FAIL, "GPU 0"),
        (Status.WARN, "GPU 1"),
        (Status.OK, "dcgm"),
    ]
    assert findings[0].evidence["dcgmi diag -r 1 -j: Deployment/software GPU 0 warning 1"] == (
        "Inforom: the InfoROM is corrupt (severity ISOLATE, error 29)"
    )
    assert "failed on configuration" in findings[1].summary
    assert findings[2].evidence["dcgmi diag -r 1 -j: DCGM version"] == "4.2.3"


def test_dcgm4_warn_skip_and_unknown_status() -> None:
    text = dcgm4(
        software(
            gpu(0, "Warn", ("Graphics Processes: 1 process running", 1)), gpu(1, "Skip"), gpu(2, "Broken")
        )
    )
    findings = evaluate(text)
    assert [(f.status, f.subject) for f in findings] == [
        (Status.WARN, "GPU 0"),
        (Status.UNKNOWN, "GPU 2"),
        (Status.OK, "dcgm"),
    ]
    assert findings[-1].evidence["dcgmi diag -r 1 -j: skipped"] == "software (GPU 1)"


@pytest.mark.parametrize(
    ("stdout", "exited", "stderr", "status", "words"),
    [
        ("", 127, "dcgmi: command not found", Status.SKIPPED, "DCGM is not installed"),
        ("", 124, "dcgmi: timed out after 15s", Status.UNKNOWN, "did not finish within its time box"),
        (
            "Error: unable to establish a connection to the specified host: localhost\n",
            255,
            "",
            Status.SKIPPED,
            "did not run (Error: unable to establish a connection",
        ),
        (
            "not json at all\n",
            0,
            "",
            Status.UNKNOWN,
            "unparsable `dcgmi diag -r 1 -j` output: no JSON object",
        ),
        (
            '{"something": "else"}',
            0,
            "",
            Status.UNKNOWN,
            "no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object",
        ),
        (dcgm4(runtime_error="The GPU is in use"), 0, "", Status.UNKNOWN, "failed to run: The GPU is in use"),
        (dcgm4(), 0, "", Status.UNKNOWN, "the report lists no test result"),
    ],
)
def test_no_verdict_without_a_report(
    stdout: str, exited: int, stderr: str, status: Status, words: str
) -> None:
    (f,) = evaluate(stdout, exited, stderr)
    assert f.status is status
    assert words in f.summary


def test_recorded_report_is_read_from_a_snapshot(tmp_path: Path) -> None:
    host = make_tree(tmp_path, {}, commands={STEM: VIRTUALCLIENT_R1.read_text()})
    (f,) = dcgm_diag.CHECK.run(host, NoParams())
    assert f.status is Status.OK


def test_not_recorded_is_skipped(tmp_path: Path) -> None:
    (f,) = dcgm_diag.CHECK.run(make_tree(tmp_path, {}), NoParams())
    assert f.status is Status.SKIPPED and "not recorded" in f.summary


@pytest.mark.skipif(shutil.which("dcgmi") is not None, reason="DCGM is installed here")
def test_live_without_dcgm_is_skipped() -> None:
    (f,) = dcgm_diag.CHECK.run(LocalHost(), NoParams())
    assert (f.status, f.evidence) == (Status.SKIPPED, {"dcgmi diag -r 1 -j": "dcgmi: command not found"})


def test_the_time_box_is_the_host_command_timeout() -> None:
    seen: list[float] = []

    class Recorder(LocalHost):
        def run(self, argv: Any, timeout: float = 10.0) -> CmdResult:
            seen.append(timeout)
            return CmdResult(tuple(argv), "", "dcgmi: command not found", 127)

    dcgm_diag.CHECK.run(Recorder(), NoParams())
    assert seen == [dcgm.TIMEOUT_S]
