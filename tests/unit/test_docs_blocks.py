"""The docs runner (tests/support/docs_blocks.py) on pages written for it (tests/fixtures/docs): what it
reads as command blocks and markers, what it runs and where, and what a failure says."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.docs_blocks import Block, environment, failure, read_page, run_block, run_page, venv_bin
from tests.support.paths import FIXTURES

PAGES = FIXTURES / "docs"


def run(name: str, tmp_path: Path) -> tuple[Path, str | None]:
    """The page's blocks run as the docs test runs them; its scratch folder and what failed."""
    page = read_page(PAGES / name, Path(name))
    scratch, work = tmp_path / "page", tmp_path / "runner"
    scratch.mkdir()
    work.mkdir()
    return scratch, failure(page, run_page(page, scratch, work, venv_bin()))


def test_fences_and_markers_are_read_by_structure() -> None:
    page = read_page(PAGES / "passing.md", Path("passing.md"))
    assert [(b.line, b.lang) for b in page.blocks] == [
        (5, "text"),
        (11, "sh"),
        (18, "bash"),
        (25, "shell"),
        (32, "console"),
        (49, "sh"),
        (54, "sh"),
        (61, "markdown"),
        (68, "sh"),
    ]
    listed = page.blocks[5]
    assert listed.source == "grep -q node03 hosts.txt\n"  # the list item's indentation removed
    assert listed.exits == {0, 1} and listed.runs
    marked = page.blocks[6]
    assert marked.not_run is not None and marked.not_run.not_run == "root" and not marked.runs
    assert marked.not_run.reason == "writes /proc/sys/vm/swappiness"
    # Quoted in a code span or inside a fence, a marker is text: nothing dangles.
    assert page.stray == () and page.problems() == []


def test_a_console_block_runs_its_commands_not_its_output() -> None:
    console = read_page(PAGES / "passing.md").blocks[4]
    assert console.script() == [
        (33, "grep node02 hosts.txt"),
        (35, "printf '%s\\n' one \\"),
        (36, "    two > words.txt"),
        (37, "cat > more.txt <<EOF"),
        (38, "three"),
        (39, "EOF"),
        (40, "cat words.txt more.txt"),
    ]


def test_a_passing_page_shares_its_folder_between_blocks(tmp_path: Path) -> None:
    scratch, message = run("passing.md", tmp_path)
    assert message is None
    # Made by the blocks in the page's folder, read by later ones; the marked block never ran.
    assert (scratch / "hosts.txt").read_text() == "node01\nnode02\n"
    assert (scratch / "words.txt").read_text() == "one\ntwo\n"
    assert sorted(p.name for p in scratch.iterdir()) == [
        ".nodeagent-state",
        "hosts.txt",
        "list.txt",
        "more.txt",
        "words.txt",
    ]


def test_a_failure_names_the_block_the_command_its_exit_and_output(tmp_path: Path) -> None:
    scratch, message = run("failing.md", tmp_path)
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == "failing.md:7: the sh block exited 1 (allowed: 0)"
    assert lines[1] == "  stopped at failing.md:10: cat missing.txt"
    assert "    about to fail" in lines and "    cat: missing.txt: No such file or directory" in lines
    assert '    echo "never printed"' in lines  # in the block shown, not in the output
    assert message.count("never printed") == 1
    assert lines[-1] == "(1 later blocks of failing.md not run)"
    assert (scratch / "first.txt").exists()  # the block before it ran


def test_a_traceback_fails_a_block_that_exits_0(tmp_path: Path) -> None:
    _, message = run("traceback.md", tmp_path)
    assert message is not None
    assert (
        message.splitlines()[0]
        == "traceback.md:3: the sh block exited 0 (allowed: 0) but printed a Python traceback"
    )
    assert "ValueError: bad input" in message


def test_a_declared_code_is_the_last_commands_alone(tmp_path: Path) -> None:
    _, message = run("masked.md", tmp_path)
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == (
        "masked.md:4: the sh block exited 1 (allowed: 0,1) at a command before its last, which alone "
        "may end with a declared code"
    )
    assert lines[1] == "  stopped at masked.md:5: grep -q absent /dev/null"


@pytest.mark.parametrize(
    ("source", "last"),
    [
        pytest.param("true\nnodeagent check \\\n  --only gpu\n# done\n\n", 3, id="continued, then a comment"),
        pytest.param("cat > f <<'EOF'\nx\nEOF\n", 2, id="a here-document"),
        pytest.param("grep -q x <<< word\ntrue\n", 3, id="a here-string"),
        pytest.param("true\nfor i in 1 2; do\n  grep -q $i f\ndone | sort\n", 4, id="a loop's body"),
        pytest.param("# only a comment\n", None, id="no command"),
    ],
)
def test_the_last_command_starts_where_bash_says(source: str, last: int | None) -> None:
    assert Block(Path("page.md"), 1, "sh", source).last_command_line() == last


def test_broken_markers_are_named_with_their_lines() -> None:
    problems = read_page(PAGES / "markers.md", Path("markers.md")).problems()
    assert [p.split(": ", 1)[0] for p in problems] == [
        "markers.md:3",
        "markers.md:7",
        "markers.md:12",
        "markers.md:17",
        "markers.md:22",
        "markers.md:24",
        "markers.md:29",
        "markers.md:34",
    ]
    assert "a marker on no fence" in problems[0]
    assert "unknown category 'network'" in problems[1]
    assert "no reason after the category" in problems[2]
    assert "before a text block" in problems[3]
    assert "a marker on no fence: <!-- docs: exits 2 -->" in problems[4]
    assert "neither `not run: CATEGORY: why` nor `exits N[,N...]`" in problems[5]
    assert "not 300" in problems[6]
    assert "no command" in problems[7]
    # The valid marker at the end raises nothing, and its block is not run.
    assert not read_page(PAGES / "markers.md").blocks[-1].runs


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def gone(pid: int) -> bool:
    """Whether the process ended: SIGKILL is delivered, not waited for, so it is given a moment."""
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def started(tmp_path: Path, source: str, time_limit: float) -> tuple[int | None, int]:
    """A block run with `time_limit`: its exit code and the pid of what it left in the background."""
    scratch, work = tmp_path / "page", tmp_path / "runner"
    scratch.mkdir()
    work.mkdir()
    block = Block(Path("page.md"), 1, "sh", source)
    outcome = run_block(block, scratch, work, environment(scratch, venv_bin()), time_limit)
    return outcome.exit_code, int((scratch / "pid").read_text())


@pytest.mark.slow
def test_a_block_is_killed_with_its_process_group_at_the_limit(tmp_path: Path) -> None:
    code, pid = started(tmp_path, "sleep 300 &\necho $! > pid\nwait\n", time_limit=2)
    assert code is None
    assert gone(pid)


def test_what_a_block_leaves_running_is_killed_when_it_ends(tmp_path: Path) -> None:
    code, pid = started(tmp_path, "sleep 300 >/dev/null 2>&1 &\necho $! > pid\n", time_limit=60)
    assert code == 0
    assert gone(pid)


def test_a_block_gets_a_readers_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEAGENT_ROOT", "/somewhere/else")
    env = environment(tmp_path, venv_bin())
    assert "NODEAGENT_ROOT" not in env
    assert env["NODEAGENT_STATE_DIR"] == str(tmp_path / ".nodeagent-state")
    assert env["PATH"].split(os.pathsep)[0] == str(venv_bin())
    assert (venv_bin() / "nodeagent").exists()
