"""docs/checks.md's table of checks is the registry's (`nodeagent checks --format markdown`, which
`make docs` writes between the page's checks-table markers), and that table says of each check what
its module declares."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from nodeagent import checks
from nodeagent.api.check import Check, param
from nodeagent.render.listings import checks_markdown
from tests.support import docs_table
from tests.support.docs_table import (
    CHECKS_PAGE,
    END,
    START,
    RegionError,
    framed,
    generated,
    region,
    with_table,
)


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of a GFM table as a reader sees them: escapes resolved, code spans as their text."""
    rows: list[list[str]] = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline" and rows:
            rows[-1].append(cell_text(token))
    return rows


def cell_text(token: Token) -> str:
    return "".join(child.content for child in token.children or ())


@pytest.fixture(scope="module")
def registry_table() -> str:
    """`nodeagent checks --format markdown`, run once for the module (a process of its own)."""
    return generated()


def test_the_checks_page_holds_the_registrys_table(registry_table: str) -> None:
    written = region(CHECKS_PAGE.read_text(encoding="utf-8"))
    wanted = framed(registry_table)
    if written != wanted:
        diff = "".join(
            difflib.unified_diff(
                written.splitlines(True), wanted.splitlines(True), "docs/checks.md", "registry"
            )
        )
        pytest.fail(
            f"docs/checks.md: the table of checks is not the registry's; run `{docs_table.FIX}` "
            f"to rewrite it\n{diff}",
            pytrace=False,
        )


def test_the_table_says_what_each_checks_module_declares(registry_table: str) -> None:
    """Each module of checks/__init__.py's lists, in their order: id, title, each Params field with
    its default, and whether a plain `check` runs it."""
    expected = [["check", "what it checks", "parameters (defaults)", "runs"]]
    for name, on_demand in [*((n, False) for n in checks.BUILTIN), *((n, True) for n in checks.ON_DEMAND)]:
        check = importlib.import_module(f"nodeagent.checks.{name}").CHECK
        fields = dataclasses.fields(check.params)
        params = ", ".join(f"{f.name} = {f.default!r}" for f in fields) or "none"
        runs = f"on demand (--only {check.id})" if on_demand else "by default"
        expected.append([check.id, check.title, params, runs])
    assert table_rows(registry_table) == expected


@dataclass(frozen=True)
class Awkward:
    pattern: str = param("a|b`c", "a default holding a table's bar and a backtick")


def test_markdown_punctuation_stays_in_its_cell() -> None:
    odd = Check(
        id="odd_one",
        title="pipes | *stars* _under_ <b>tags</b> [links](x)",
        tags=(),
        collect=lambda host: None,
        evaluate=lambda facts, params: [],
        params=Awkward,
    )
    rows = table_rows(checks_markdown([odd], frozenset({"odd_one"})))
    assert rows[1] == ["odd_one", odd.title, "pattern = 'a|b`c'", "on demand (--only odd_one)"]


PAGE = f"# Checks\n\nBefore.\n\n{START}\nan old table\n{END}\n\nAfter.\n"


def test_only_the_region_is_rewritten() -> None:
    page = with_table(PAGE, "| a |\n|---|\n| 1 |\n")
    assert page == f"# Checks\n\nBefore.\n\n{START}\n\n| a |\n|---|\n| 1 |\n\n{END}\n\nAfter.\n"
    assert region(page) == framed("| a |\n|---|\n| 1 |\n")
    assert with_table(page, "| a |\n|---|\n| 1 |\n") == page


@pytest.mark.parametrize(
    "page",
    [
        pytest.param("# Checks\n", id="no markers"),
        pytest.param(f"{START}\n{END}\n{START}\n{END}\n", id="two regions"),
        pytest.param(f"{END}\n{START}\n", id="end before start"),
    ],
)
def test_a_page_without_one_region_is_named(page: str) -> None:
    with pytest.raises(RegionError, match=r"^docs/checks.md: needs one line <!-- checks-table:start -->"):
        with_table(page, "| a |\n")


def test_make_docs_rewrites_the_page_and_names_a_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], registry_table: str
) -> None:
    page = tmp_path / "checks.md"
    page.write_text(PAGE)
    assert docs_table.main([str(page)]) == 0
    assert region(page.read_text()) == framed(registry_table)
    assert page.read_text().endswith(f"{END}\n\nAfter.\n")
    assert docs_table.main([str(tmp_path / "gone.md")]) == 64
    assert capsys.readouterr().err == f"docs: {tmp_path / 'gone.md'}: No such file or directory\n"
