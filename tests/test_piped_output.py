"""`check` and `preflight` piped: only the findings that need attention (one line each, the fix on
the next), then the counts; `-v` every finding, with what was seen; a terminal still gets the table.
No line is wrapped, so every URL in a fix comes out whole."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests import corpus

VM = Path(__file__).parent / "data" / "firecracker-vm-2cpu.tar.gz"
# A recorded V100 with uncorrectable ECC errors: FAIL and WARN findings whose fixes carry URLs.
V100 = "smi-openpai-v100-sxm3-dbe-retired-pages"
ATTENTION = ("FAIL", "UNKNOWN", "WARN")
URL = re.compile(r"https?://[^\s)]+")


def nodeagent(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its standard output a pipe, as in a log or `| grep`."""
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def v100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus.build_tree(corpus.load(V100), tmp_path_factory.mktemp("v100") / "tree")


@pytest.fixture(scope="module")
def v100_doc(v100: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(nodeagent("check", "--root", str(v100), "--format", "json").stdout)
    return doc


def problems_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["status"] in ATTENTION]


def urls_of(findings: list[dict[str, Any]]) -> set[str]:
    return {u for f in findings for u in URL.findall(f"{f['summary']} {f['remediation']}")}


def test_piped_check_prints_only_the_problems(v100: Path, v100_doc: dict[str, Any]) -> None:
    proc = nodeagent("check", "--root", str(v100))
    assert proc.returncode == 2 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    problems = problems_of(v100_doc)
    assert {f["status"] for f in problems} == {"FAIL", "WARN"}  # the case this test is about
    findings = [line for line in lines if line.split(" ", 1)[0] in ATTENTION]
    fixes = [line for line in lines if line.lstrip().startswith("fix: ")]
    assert len(findings) == len(problems)
    assert len(fixes) == sum(1 for f in problems if f["remediation"])
    assert len(lines) == len(findings) + len(fixes) + 1  # and one line of counts
    # Worst first; each line status, check/subject and summary; the fix indented below it.
    order = ["FAIL", "UNKNOWN", "WARN"]
    assert [line.split()[0] for line in findings] == sorted((f["status"] for f in problems), key=order.index)
    first = problems[0]
    assert lines[0] == f"{first['status']:<7} {first['check_id']}/{first['subject']}: {first['summary']}"
    assert lines[1] == f"        fix: {first['remediation']}"
    counts = Counter(f["status"] for f in v100_doc["findings"])
    assert lines[-1].startswith(f"{counts['FAIL']} FAIL, {counts['WARN']} WARN, {counts['OK']} OK")
    assert lines[-1].endswith("worst: FAIL")
    assert "OK " not in proc.stdout.split("\n", 1)[0]


def test_piped_urls_are_never_split(v100: Path, v100_doc: dict[str, Any]) -> None:
    want = urls_of(problems_of(v100_doc))
    assert want and max(len(u) for u in want) > 60  # long enough to be wrapped at 80 columns
    for args in ([], ["-v"]):
        out = nodeagent("check", "--root", str(v100), *args).stdout
        assert set(URL.findall(out)) == want, args  # every URL whole, none cut into a shorter one
        assert not [
            line for line in out.splitlines() if line.strip().startswith(("docs.nvidia", "index.html"))
        ]


def test_verbose_prints_every_finding_with_what_was_seen(v100: Path, v100_doc: dict[str, Any]) -> None:
    proc = nodeagent("check", "--root", str(v100), "-v")
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert lines[0] == f"nodeagent check: {v100_doc['host']}"
    rows = [line for line in lines if line.split(" ", 1)[0] in {f["status"] for f in v100_doc["findings"]}]
    assert len(rows) == len(v100_doc["findings"])  # OK and SKIPPED too: a line each
    for f in problems_of(v100_doc):  # what the table shows under it, indented
        for where, value in list(f["evidence"].items())[:6]:
            assert f"        seen: {where} = {value}" in lines
        assert f"        expected: {f['expected']}" in lines
    assert lines[-1].endswith("worst: FAIL")


def test_piped_preflight_prints_the_problems_and_the_verdict() -> None:
    proc = nodeagent("preflight", "--root", str(VM), "--fail-on", "warn")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(
        nodeagent("preflight", "--root", str(VM), "--fail-on", "warn", "--format", "json").stdout
    )
    lines = proc.stdout.splitlines()
    findings = [line for line in lines if line.split(" ", 1)[0] in ATTENTION]
    assert len(findings) == len(problems_of(doc)) > 0
    assert lines[-2].endswith("worst: WARN")
    assert lines[-1].startswith("preflight REFUSED (preflight, fail on warn, budget 1s): ")
    assert "check durations" not in proc.stdout
    verbose = nodeagent("preflight", "--root", str(VM), "--fail-on", "warn", "-v").stdout.splitlines()
    durations = [line for line in verbose if line.startswith("check durations: ")]
    assert len(durations) == 1 and all(c["id"] in durations[0] for c in doc["checks"])
    assert verbose[-1].startswith("preflight REFUSED") and len(verbose) > len(lines)


def test_a_terminal_gets_the_table() -> None:
    """Standard output a pseudo-terminal: the table, without -v."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "nodeagent", "check", "--root", str(VM), "--only", "kernel"],
            stdout=terminal,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
        os.close(terminal)
        terminal = -1
        out = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other end is closed and everything was read
                break
            if not chunk:
                break
            out += chunk
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
    assert proc.returncode == 1, proc.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.decode())
    assert "nodeagent check: vm" in text and "┃ status" in text
    assert " OK " in text  # the OK findings too: the whole table
