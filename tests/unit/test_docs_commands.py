"""Every command block of README.md and docs/*.md runs as written, as a reader following the page
would, or its marker says why it cannot run here (the convention: tests/support/docs_blocks.py).

The fast case holds each page to the convention (every marker valid, none on no fence); the slow
case runs each page's blocks in order in a scratch folder of its own. The runner itself is tested on
pages of its own in tests/unit/test_docs_blocks.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docs_blocks import TIME_LIMIT_S, failure, read_page, run_page, venv_bin
from tests.support.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def shown(path: Path) -> Path:
    return path.relative_to(REPO)


def page_param(path: Path, slow: bool = False) -> object:
    """A page as a test case named by its path; a running case may take each block's time limit."""
    marks: list[pytest.MarkDecorator] = []
    if slow:
        blocks = sum(1 for b in read_page(path).blocks if b.runs)
        marks = [pytest.mark.slow, pytest.mark.timeout(60 + blocks * TIME_LIMIT_S)]
    return pytest.param(path, id=str(shown(path)), marks=marks)


@pytest.mark.parametrize("path", [page_param(p) for p in PAGES])
def test_every_command_block_runs_or_says_why(path: Path) -> None:
    problems = read_page(path, shown(path)).problems()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.mark.parametrize("path", [page_param(p, slow=True) for p in PAGES])
def test_command_blocks_run_as_written(path: Path, tmp_path: Path) -> None:
    page = read_page(path, shown(path))
    scratch, work = tmp_path / "page", tmp_path / "runner"
    scratch.mkdir()
    work.mkdir()
    message = failure(page, run_page(page, scratch, work, venv_bin()))
    if message is not None:
        pytest.fail(message, pytrace=False)
