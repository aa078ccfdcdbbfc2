"""Text read from a machine, made safe to show: data, never markup, never terminal control.

Every value nodeagent shows came from somewhere it does not control: a sysctl, an os-release, a
driver's name, a host name in an inventory, a command's output. Given to rich or Textual as a
`str`, `[/]` in such a value is parsed as markup (a MarkupError: the whole report lost) and
`[link=...]` makes a link; given to a terminal, an escape sequence moves the cursor or retitles
the window. So values go to rich as `Text` (never parsed), built by `lit`, with control
characters shown as `\\xNN` (`shown`): C0 and C1 controls, DEL, lone surrogates and the
bidirectional overrides that reorder what the reader sees. Newlines and tabs are kept (a
multi-line remediation stays multi-line).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from nodeagent.render.escape import UNSAFE as _UNSAFE
from nodeagent.render.escape import escape_char


def shown(value: Any) -> str:
    """`value` as text with control characters made visible (`\\x1b`, `\\u202e`)."""
    return _UNSAFE.sub(escape_char, value if isinstance(value, str) else str(value))


def one_line(text: str) -> str:
    """`text` on one line (line breaks and tabs become spaces), control characters shown as in
    `shown`: what a piped line holds of a value."""
    return shown(" ".join(text.split("\n")).replace("\r", " ").replace("\t", " ")).strip()


def lit(value: Any, style: str = "", **options: Any) -> Text:
    """`value` as a rich Text, literally: markup is not parsed, control characters are shown.
    `options`: Text's own (no_wrap, overflow, justify)."""
    return Text(shown(value), style=style, **options)


def lits(*values: Any) -> tuple[Text, ...]:
    """Each value through `lit`: the cells of a table row."""
    return tuple(v if isinstance(v, Text) else lit(v) for v in values)
