"""docs/checks.md's table of checks, generated from the registry: the output of `nodeagent checks
--format markdown`, between the lines START and END of the page. `make docs` (`python -m
tests.support.docs_table`) rewrites it; tests/unit/test_docs_checks_table.py fails when the page's
table is not the registry's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.paths import REPO

CHECKS_PAGE = REPO / "docs" / "checks.md"
START = "<!-- checks-table:start -->"
END = "<!-- checks-table:end -->"
FIX = "make docs"


class RegionError(ValueError):
    """A page without exactly one START line followed by one END line."""


def generated() -> str:
    """The table as this tree's `nodeagent checks --format markdown` prints it."""
    proc = subprocess.run(
        [sys.executable, "-m", "nodeagent", "checks", "--format", "markdown"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    if proc.returncode != 0 or "Traceback" in proc.stderr:
        raise RuntimeError(f"nodeagent checks --format markdown: exit {proc.returncode}: {proc.stderr}")
    return proc.stdout


def _bounds(lines: list[str], name: str) -> tuple[int, int]:
    """The indexes of the START and END lines (each alone on its line)."""
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise RegionError(
            f"{name}: needs one line {START} and, below it, one line {END} around the table of checks "
            f"(found {len(starts)} and {len(ends)})"
        )
    return starts[0], ends[0]


def region(text: str, name: str = "docs/checks.md") -> str:
    """What stands between the START and END lines."""
    lines = text.splitlines(keepends=True)
    start, end = _bounds(lines, name)
    return "".join(lines[start + 1 : end])


def framed(table: str) -> str:
    """The table as the region holds it: a blank line on each side, so that no renderer reads a
    marker as a row of the table or the table as part of a marker's HTML block."""
    return f"\n{table}\n"


def with_table(text: str, table: str, name: str = "docs/checks.md") -> str:
    """The page with `table` between its START and END lines, and the rest of it as it was."""
    lines = text.splitlines(keepends=True)
    start, end = _bounds(lines, name)
    return "".join([*lines[: start + 1], framed(table), *lines[end:]])


def main(argv: Sequence[str]) -> int:
    page = Path(argv[0]) if argv else CHECKS_PAGE
    try:
        text = page.read_text(encoding="utf-8")
        updated = with_table(text, generated(), str(page))
    except OSError as e:
        print(f"docs: {page}: {e.strerror}", file=sys.stderr)
        return 64
    except RegionError as e:
        print(f"docs: {e}", file=sys.stderr)
        return 64
    if updated == text:
        print(f"{page}: the table of checks is up to date")
        return 0
    page.write_text(updated, encoding="utf-8")
    print(f"{page}: the table of checks rewritten from the registry")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
