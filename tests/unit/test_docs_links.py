"""Every relative link in README.md, CONTRIBUTING.md and docs/*.md resolves: the file exists in the
repository, and a `#anchor` names a heading of the target page (GitHub's anchor for it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~)")
# [text](target) and [text](target "title"); an image's ![alt](src) is a link too.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced blocks, numbered from 1."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _number, line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """One line per relative link of `page` that does not resolve: PAGE:LINE: target, and why."""
    problems: list[str] = []
    for number, line in prose_lines(page.read_text()):
        # A link written inside backticks is an example, not a link.
        for target in LINK.findall(INLINE_CODE.sub("``", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            where = f"{page.relative_to(root)}:{number}: {target}"
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                problems.append(f"{where}: no such file")
                continue
            if root.resolve() not in dest.parents and dest != root.resolve():
                problems.append(f"{where}: outside the repository")
                continue
            if anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
                problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    problems = broken_links(page, REPO)
    assert not problems, "\n".join(problems)


def test_the_docs_folder_has_its_pages() -> None:
    names = {p.name for p in (REPO / "docs").glob("*.md")}
    assert {"checks.md", "fleets.md", "architecture.md", "performance.md", "completion.md"} <= names


def test_a_missing_file_and_a_missing_anchor_are_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Page A\n\n## Shell `completion`: bash\n\n## Notes\n\n## Notes\n"
    )
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\nSee [a](docs/a.md), [b](docs/b.md), [c](docs/a.md#shell-completion-bash),\n"
        "[d](docs/a.md#nowhere), [e](#top), [f](#gone), [g](docs/a.md#notes-1), [h](https://x.org/#y).\n"
        "```sh\n[not a link](missing.md)\n```\n`[code](missing.md)`\n"
    )
    assert broken_links(page, tmp_path) == [
        "README.md:3: docs/b.md: no such file",
        "README.md:4: docs/a.md#nowhere: no heading with anchor #nowhere",
        "README.md:4: #gone: no heading with anchor #gone",
    ]


def test_github_anchors() -> None:
    assert slug("One file: nodeagent.pyz, for nodes where nothing is installed") == (
        "one-file-nodeagentpyz-for-nodes-where-nothing-is-installed"
    )
    assert slug("What `tune` prints") == "what-tune-prints"
    assert slug("Slurm, Prometheus, Kubernetes") == "slurm-prometheus-kubernetes"
