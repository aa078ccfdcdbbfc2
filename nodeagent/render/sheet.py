"""Every command's output, one rule: on a terminal, rich tables sized to it; piped, plain lines.

A command builds its output as parts: `Sheet`s (tables as data), `Text` or `str` lines, and `Both`
where a part's two forms differ in more than layout (a findings table on a terminal, only the
problems in a pipe). `show` prints them:

- standard output a terminal: each sheet as a rich table sized to the terminal, lines as they are;
- piped (a log, a CI job, `| grep`, `| less`): plain lines, never wrapped, padded or cut, whatever
  COLUMNS says, and no blank ones. A sheet is its title on a line of its own, then one line per
  row: the row's first cell (what the row is about), then each other non-empty cell as
  `column: value`, the parts two spaces apart (`0  CPUs: 0-9  memory MiB: 32768`); a sheet
  without column headers (name and value pairs) gives `name: value`. A cell's line breaks become
  spaces and control characters are shown as `\\xNN`, so a row is one line and grep finds it whole.

Lists of findings keep their own piped form (nodeagent.render.text): one line per finding that
needs attention with its fix on the next, then one line of counts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from nodeagent.render.literal import lit, one_line, shown


@dataclass(frozen=True)
class Abridged:
    """A cell a terminal shows shortened (a list of 64 host names as "h01, h02, h03 +61 more") and
    a pipe whole."""

    full: str
    short: str


# A Text cell carries its style (a status in colour); its plain text is the value.
Cell = str | Text | Abridged
Justify = Literal["left", "right"]
SEPARATOR = "  "  # between the cells of a piped row: two spaces, as between words of a sentence


@dataclass(frozen=True)
class Column:
    """A column and how a terminal sizes it (the piped form names it and nothing else)."""

    name: str
    justify: Justify = "left"
    no_wrap: bool = False
    ratio: int | None = None
    style: str = ""


@dataclass(frozen=True)
class Row:
    cells: tuple[Cell, ...]
    style: str = ""
    end_section: bool = False


@dataclass
class Sheet:
    """A table as data: what a terminal shows as a rich table and a pipe as one line per row."""

    title: str
    columns: tuple[Column, ...]
    rows: list[Row] = field(default_factory=list)
    header: bool = True  # False: name/value pairs, `name: value` when piped
    expand: bool = False  # on a terminal: as wide as the terminal
    simple: bool = False  # on a terminal: a rule under the header only (rows of one key together)
    # On a terminal a first cell equal to the row's above is left blank (a key with several values);
    # piped, every line names it.
    group_first: bool = False

    def add(self, *cells: Cell, style: str = "", end_section: bool = False) -> None:
        self.rows.append(Row(tuple(cells), style, end_section))


def sheet(title: str, *names: str) -> Sheet:
    """A sheet whose columns are all plain (left-aligned, folded on a terminal)."""
    return Sheet(title, tuple(Column(n) for n in names))


@dataclass(frozen=True)
class Both:
    """A part whose terminal form and piped lines are built apart."""

    terminal: RenderableType
    piped: Sequence[str]


Part = Sheet | Text | str | Both


def _plain(cell: Cell) -> str:
    if isinstance(cell, Abridged):
        return cell.full
    return cell.plain if isinstance(cell, Text) else cell


def _terminal_cell(cell: Cell) -> Text:
    if isinstance(cell, Abridged):
        return lit(cell.short)
    return cell if isinstance(cell, Text) else lit(cell)


def lines(s: Sheet) -> list[str]:
    """The sheet as piped lines (the module's docstring)."""
    out = [one_line(s.title)] if s.title.strip() else []
    names = [c.name for c in s.columns]
    for row in s.rows:
        cells = [one_line(_plain(c)) for c in row.cells]
        first, rest = (cells[0] or "-"), cells[1:]
        if not s.header:
            value = SEPARATOR.join(c for c in rest if c)
            out.append(f"{first}: {value}" if value else first)
            continue
        named = [f"{name}: {value}" for name, value in zip(names[1:], rest, strict=False) if value]
        out.append(SEPARATOR.join([first, *named]))
    return out


def table(s: Sheet) -> Table:
    """The sheet as a rich table, sized to the console it is printed on."""
    t = Table(
        title=lit(s.title) if s.title else None,
        title_justify="left",
        show_header=s.header,
        expand=s.expand,
        box=box.SIMPLE_HEAD if s.simple else box.HEAVY_HEAD,
    )
    for c in s.columns:
        t.add_column(
            c.name,
            justify=c.justify,
            no_wrap=c.no_wrap,
            ratio=c.ratio,
            overflow="fold",  # a long value on more lines of its cell, never cut
            style=c.style or None,
        )
    previous: Cell | None = None
    for row in s.rows:
        cells = [_terminal_cell(c) for c in row.cells]
        if s.group_first and previous is not None and _plain(row.cells[0]) == _plain(previous):
            cells[0] = Text("")
        previous = row.cells[0] if row.cells else None
        t.add_row(*cells, style=row.style or None, end_section=row.end_section)
    return t


def renderable(part: Part) -> RenderableType:
    """A part as a terminal shows it."""
    if isinstance(part, Sheet):
        return table(part)
    if isinstance(part, Both):
        return part.terminal
    return part if isinstance(part, Text) else lit(part)


def piped(part: Part) -> list[str]:
    """A part as piped lines: unwrapped, no trailing white space, no blank lines."""
    if isinstance(part, Sheet):
        raw: Iterable[str] = lines(part)
    elif isinstance(part, Both):
        raw = part.piped
    else:
        raw = (part.plain if isinstance(part, Text) else shown(part)).split("\n")
    return [line.rstrip() for line in raw if line.strip()]


def console() -> Console:
    return Console(highlight=False, markup=False, emoji=False)


def stdout_is_terminal() -> bool:
    """Whether a person is reading standard output: tables then, plain lines when it is piped."""
    return sys.stdout.isatty()


def show(parts: Iterable[Part]) -> None:
    """Print `parts` on standard output by the module's rule."""
    if stdout_is_terminal():
        out = console()
        for part in parts:
            out.print(renderable(part))
        return
    text = "".join(f"{line}\n" for part in parts for line in piped(part))
    sys.stdout.write(text)
    sys.stdout.flush()
