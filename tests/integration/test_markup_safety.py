"""Text from machines is data, never markup.

A value recorded on a node (a sysctl, a cpuidle driver, a host name, an evidence key, a summary)
holding rich markup (`[/]`, `[bold red]x[/]`, `[link=file:///etc/shadow]x[/link]`), an emoji code
or terminal control characters is shown literally, with the controls as `\\xNN`, by every output:
`check` (table on a terminal, piped text, -v), `facts`, `report merge` (table, Markdown, HTML,
JUnit), the fleet table and the TUI's Checks screen. Before, `[/]` crashed the table (exit 70).
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from rich.console import Console

from nodeagent.compare.fleet import Drift, FleetComparison, Outlier
from nodeagent.core.finding import Finding, Status, documents
from nodeagent.engine import CheckResult, Report
from nodeagent.render import markdown, table
from nodeagent.render.fleet import render_table
from nodeagent.render.literal import lit, shown
from tests.support.cli import CliRun, run_cli
from tests.support.paths import VM
from tests.support.tui_driver import drive, settle, text_of
from tests.support.tui_fakes import FakeBackend

CLOSE = "x[/]y"
BOLD = "[bold red]B[/]"
LINK = "[link=file:///etc/shadow]L[/link]"
MARKUP = [CLOSE, BOLD, LINK, ":thumbs_up:"]
CONTROLS = "\x1b[31mE\x07\x9b2J\u202e"
HOSTILE = f"{CLOSE} {BOLD} {LINK} :thumbs_up: {CONTROLS}"
HOST = "h[/]ost[bold]"
EXIT_OK = {0, 1, 2, 3}


def assert_safe(out: str, expect: list[str] = MARKUP) -> None:
    """The markup literally, no raw control character from the value (rich's own colours aside)."""
    for piece in expect:
        assert piece in out, f"{piece!r} not shown literally in:\n{out}"
    for c in "\x07\x9b\u202e":
        assert c not in out
    assert "\x1b[31mE" not in out
    assert "Traceback" not in out


def hostile_finding(status: Status = Status.WARN) -> Finding:
    return Finding(
        "kernel",
        status,
        f"summary {HOSTILE}",
        subject=f"subj {BOLD}",
        evidence={f"/proc/{CLOSE}/key {LINK}": f"value {HOSTILE}"},
        expected=f"expected {BOLD}",
        remediation=f"fix {LINK} {CLOSE}",
        fix=f"tuner{CLOSE}",
        host=HOST,
    )


def render(renderable: Any, terminal: bool) -> str:
    buf = io.StringIO()
    Console(file=buf, force_terminal=terminal, width=400, highlight=False, markup=False).print(renderable)
    return buf.getvalue()


def test_shown_makes_controls_visible_and_keeps_newlines() -> None:
    assert shown("a\x1b[1mb\tc\nd\x00\x9b\u202e") == "a\\x1b[1mb\tc\nd\\x00\\x9b\\u202e"
    assert lit(BOLD).plain == BOLD and lit(BOLD).spans == []
    assert shown(3) == "3"


@pytest.mark.parametrize("terminal", [True, False])
def test_report_table_shows_every_field_literally(terminal: bool) -> None:
    findings = [hostile_finding(s) for s in (Status.FAIL, Status.WARN, Status.OK)]
    report = Report(HOST, [CheckResult(f"kernel{CLOSE}", "Kernel", findings, 0.7)], duration_s=0.7)
    out = render(table.report_table(report, durations=True), terminal)
    assert_safe(out, [*MARKUP, HOST, f"tuner{CLOSE}", f"/proc/{CLOSE}/key", "\\x1b[31mE\\x07\\x9b2J\\u202e"])
    out = render(table.findings_lines(findings), terminal)
    assert_safe(out)


def test_fleet_tables_show_names_keys_and_values_literally() -> None:
    cmp = FleetComparison(
        hosts=3,
        drift=[
            Drift(
                key=f"key {BOLD}",
                majority=f"v {CLOSE}",
                majority_hosts=2,
                hosts={HOST: f"odd {LINK} {CONTROLS}"},
            )
        ],
        outliers=[
            Outlier(key=f"k {CLOSE}", host=HOST, value=1.0, median=5.0, mad=1.0, score=-9.0, direction="low")
        ],
    )
    out = render(render_table(cmp), True)
    assert_safe(out, [f"key {BOLD}", f"v {CLOSE}", HOST, f"k {CLOSE}"])


@pytest.fixture(scope="module")
def hostile_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded VM with hostile text in its host name, swappiness, cpuidle driver, os-release
    and kernel release."""
    root = tmp_path_factory.mktemp("hostile") / "vm"
    root.mkdir()
    with tarfile.open(VM) as tar:
        tar.extractall(root, filter="tar")
    meta = root / "nodeagent.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "hostname": HOST}))
    for path in (
        "proc/sys/vm/swappiness",
        "sys/devices/system/cpu/cpuidle/current_driver",
        "proc/sys/kernel/osrelease",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(HOSTILE + "\n")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text(f'PRETTY_NAME="{HOSTILE}"\n')
    return root


def run(*args: str, tty_columns: int = 300) -> CliRun:
    proc = run_cli(*args, env={"COLUMNS": str(tty_columns), "NODEAGENT_DEBUG": "1"}, process=True)
    assert proc.returncode in EXIT_OK, proc.stderr
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr, proc.stderr
    return proc


@pytest.mark.parametrize("verbose", [True, False])
def test_check_piped_and_verbose(hostile_tree: Path, verbose: bool) -> None:
    proc = run("check", "--root", str(hostile_tree), *(["-v"] if verbose else []))
    # vm.swappiness unparsable: 'x[/]y [bold red]B[/] ...' (the summary cuts the value)
    assert_safe(proc.stdout, [CLOSE, BOLD])
    if verbose:
        assert HOST in proc.stdout


def test_check_table_on_a_terminal(hostile_tree: Path) -> None:
    """The table as a person sees it (print_report on a terminal): in-process, stdout a TTY."""
    from nodeagent import checks, engine
    from nodeagent.host import SnapshotHost

    report = engine.run_report(SnapshotHost(hostile_tree), checks.all_checks())
    out = render(table.report_table(report), True)
    assert_safe(out, [CLOSE, BOLD])


def test_facts(hostile_tree: Path) -> None:
    proc = run("facts", "--root", str(hostile_tree))
    assert_safe(proc.stdout, [HOST, CLOSE, BOLD])


def test_report_merge_every_format(hostile_tree: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    doc = json.loads(run("check", "--root", str(hostile_tree), "--format", "json", "--facts").stdout)
    (reports / "a.json").write_text(json.dumps(doc))
    (reports / "b.json").write_text(json.dumps({**doc, "host": f"n2 {LINK}"}))
    md, page, junit = tmp_path / "r.md", tmp_path / "r.html", tmp_path / "r.xml"
    proc = run(
        "report", "merge", str(reports), "--output", f"markdown:{md}", "--output", f"html:{page}",
        "--output", f"junit:{junit}",
    )  # fmt: skip
    assert_safe(proc.stdout, [HOST, f"n2 {LINK}", CLOSE, BOLD])
    # Markdown escapes its punctuation; HTML its own; both and JUnit stay parseable.
    assert "\\[bold red\\]B\\[/\\]" in md.read_text() or f"`{BOLD}" in md.read_text()
    html_text = page.read_text()
    assert "<link" not in html_text.lower().replace("&lt;link", "") and "[bold red]B[/]" in html_text
    ElementTree.parse(junit)
    assert "\x1b" not in md.read_text() + html_text + junit.read_text()


def test_markdown_table_cells_escape_pipes() -> None:
    doc = {
        "schema": 1,
        "nodeagent": "0.1.0",
        "host": f"h|{BOLD}",
        "status": "WARN",
        "started": 1_700_000_000.0,
        "duration_s": 0.1,
        "checks": [{"id": "a|b", "title": f"t|{CLOSE}", "status": "WARN", "duration_s": 0.1}],
        "findings": documents([hostile_finding()]),
    }
    text = markdown.markdown(doc)
    table_rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert table_rows and all(line.count(" | ") - line.count("\\|") <= 4 for line in table_rows)
    page = markdown.html(doc)
    assert "<link" not in page and "\x1b" not in page


class HostileBackend(FakeBackend):
    @property
    def name(self) -> str:
        return HOST

    def run_checks(self, only: Any = ()) -> Any:
        yield CheckResult("kernel", "Kernel", [hostile_finding(Status.FAIL)], 0.0)


def test_tui_checks_screen_shows_a_hostile_finding() -> None:
    from nodeagent.tui.app import make_app

    app = make_app(HostileBackend(delay_s=0), start="checks")

    async def steps(pilot: Any) -> None:
        await settle(pilot)
        from textual.widgets import DataTable

        findings: DataTable[Any] = app.screen.query_one("#findings", DataTable)
        findings.focus()
        await pilot.press("ctrl+home")
        await pilot.pause()
        cells = [str(c) for c in findings.get_row_at(0)]
        assert f"summary {CLOSE} {BOLD} {LINK}" in cells[3]
        detail = text_of(app, "#detail")
        assert BOLD in detail and LINK in detail and "\\x1b" in detail

    drive(app, steps, size=(200, 40))
