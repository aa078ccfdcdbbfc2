"""Hostlist expressions: Slurm's node[01-04,07] (`--hosts`, the native inventory, `--limit`) and
Ansible's node[01:04] (host patterns in an Ansible inventory), expanded into host names.

Apart from the inventory because the expansion is pure text work with its own rules (zero padding,
steps, letters, a size limit), shared by both inventory forms and the command line. Syntax errors
raise ValueError from the bracket readers and UsageError naming the expression from expand_hostlist.
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections.abc import Callable

from nodeagent.core.errors import UsageError

__all__ = [
    "MAX_HOSTS",
    "ansible_bracket",
    "count_brackets",
    "count_hostlist",
    "expand_brackets",
    "expand_hostlist",
    "split_outside_brackets",
]

# python-hostlist's MAX_SIZE (https://www.nsc.liu.se/~kent/python-hostlist/): a typo such as
# node[1-10000000] should be an error, not minutes of work and gigabytes of names.
MAX_HOSTS = 100_000


def split_outside_brackets(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += {"[": 1, "]": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def _slurm_spans(inside: str) -> list[tuple[int, int, int]]:
    spans: list[tuple[int, int, int]] = []
    for part in (p.strip() for p in inside.split(",")):
        match = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
        if not match:
            raise ValueError(f"{part!r} in [{inside}] is not a number or a range like 01-04")
        low, high = int(match[1]), int(match[2] if match[2] is not None else match[1])
        if high < low:
            raise ValueError(f"range {part!r} goes backwards")
        spans.append((low, high, len(match[1])))
    return spans


def _slurm_count(inside: str) -> int:
    """How many values _slurm_bracket(inside) gives, counted without listing them."""
    return sum(high - low + 1 for low, high, _ in _slurm_spans(inside))


def _slurm_bracket(inside: str) -> list[str]:
    """The values of one bracket, '01-04,07': a range keeps the width of its start ('08-10' ->
    08 09 10), as Slurm and python-hostlist do."""
    spans = _slurm_spans(inside)
    if sum(high - low + 1 for low, high, _ in spans) > MAX_HOSTS:
        raise ValueError(f"[{inside}] expands to more than {MAX_HOSTS} names")
    return [str(n).zfill(width) for low, high, width in spans for n in range(low, high + 1)]


def _ansible_count(inside: str) -> int:
    """How many values ansible_bracket(inside) gives, counted without listing them."""
    return len(_ansible_range(inside))


def ansible_bracket(inside: str) -> list[str]:
    """[beg:end] or [beg:end:step], numbers or single letters, as Ansible's expand_hostname_range
    (lib/ansible/plugins/inventory/__init__.py) reads them: beg defaults to 0, and a zero-padded beg
    gives the width and needs an end of the same width."""
    values = _ansible_range(inside)
    if len(values) > MAX_HOSTS:
        raise ValueError(f"[{inside}] expands to more than {MAX_HOSTS} names")
    if isinstance(values, str):
        return list(values)
    width = _ansible_width(inside)
    return [str(n).zfill(width) for n in values]


def _ansible_width(inside: str) -> int:
    beg = inside.split(":", maxsplit=1)[0] or "0"
    return len(beg) if beg.startswith("0") and len(beg) > 1 else 0


def _ansible_range(inside: str) -> str | range:
    """The letters or numbers of an Ansible bracket (a range: its length is known without listing it)."""
    bounds = inside.split(":")
    if len(bounds) not in (2, 3):
        raise ValueError(f"[{inside}] is not an Ansible range; write [01:16] or [01:16:2]")
    beg, end = bounds[0] or "0", bounds[1]
    step = bounds[2] if len(bounds) == 3 else "1"
    if not re.fullmatch(r"[0-9]+", step) or int(step) == 0:
        raise ValueError(f"[{inside}]: the step must be a positive integer")
    if re.fullmatch(r"[A-Za-z]", beg) and re.fullmatch(r"[A-Za-z]", end):
        first, last = string.ascii_letters.index(beg), string.ascii_letters.index(end)
        if first > last:
            raise ValueError(f"[{inside}] goes backwards")
        return string.ascii_letters[first : last + 1 : int(step)]
    if not (re.fullmatch(r"[0-9]+", beg) and re.fullmatch(r"[0-9]+", end)):
        raise ValueError(f"[{inside}]: the bounds must be two numbers or two letters")
    width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
    if width and len(end) != width:
        raise ValueError(f"[{inside}]: a zero-padded start needs an end of the same width")
    if int(end) < int(beg):
        raise ValueError(f"[{inside}] goes backwards")
    return range(int(beg), int(end) + 1, int(step))


def _bracket_insides(name: str) -> list[tuple[str, bool]]:
    """`name` cut into text (False) and bracket contents (True)."""
    parts: list[tuple[str, bool]] = []
    rest = name
    while rest:
        open_at, close_at = rest.find("["), rest.find("]")
        if close_at != -1 and (open_at == -1 or close_at < open_at):
            raise ValueError("']' without a '['")
        if open_at == -1:
            parts.append((rest, False))
            break
        if close_at == -1:
            raise ValueError("'[' is not closed")
        inside = rest[open_at + 1 : close_at]
        if "[" in inside:
            raise ValueError("brackets cannot be nested")
        if not inside.strip():
            raise ValueError("'[]' is empty")
        parts += [(rest[:open_at], False), (inside, True)]
        rest = rest[close_at + 1 :]
    return parts


_COUNTS: dict[Callable[[str], list[str]], Callable[[str], int]] = {}


def count_brackets(name: str, bracket: Callable[[str], list[str]]) -> int:
    """How many names expand_brackets(name, bracket) gives, computed from the ranges' bounds
    (node[1-1000000000] is counted, not listed); ValueError on bad syntax."""
    count = _COUNTS[bracket]
    return math.prod(count(text) if inside else 1 for text, inside in _bracket_insides(name))


def expand_brackets(name: str, bracket: Callable[[str], list[str]], budget: int = MAX_HOSTS) -> list[str]:
    """Every bracket of `name` replaced by each of its values, the leftmost varying slowest; more
    than `budget` names (counted before any is listed) is a ValueError."""
    parts = _bracket_insides(name)
    for text, inside in parts:
        if inside and _COUNTS[bracket](text) > MAX_HOSTS:
            raise ValueError(f"[{text}] expands to more than {MAX_HOSTS} names")
    if count_brackets(name, bracket) > min(budget, MAX_HOSTS):
        if budget < MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} host names with those listed before it")
        raise ValueError(f"expands to more than {MAX_HOSTS} names")
    segments = [bracket(text) if inside else [text] for text, inside in parts]
    return ["".join(parts) for parts in itertools.product(*segments)]


def expand_hostlist(expr: str, budget: int = MAX_HOSTS) -> list[str]:
    """Slurm hostlist expressions: 'node[01-04,07],gpu[1-2]-ib', 'a,b', nested ranges in several
    brackets ('r[1-2]n[01-02]' -> r1n01 r1n02 r2n01 r2n02), zero padding kept. Bad syntax raises
    UsageError naming the expression. At most `budget` names (what is left of an inventory's
    MAX_HOSTS), counted before they are listed."""
    names: list[str] = []
    if not expr.strip():
        raise UsageError("hostlist '': empty; write names like node01,node02 or node[01-04]")
    for item in split_outside_brackets(expr):
        try:
            if not item.strip():
                raise ValueError("an empty name between commas")
            names += expand_brackets(item.strip(), _slurm_bracket, budget - len(names))
        except ValueError as e:
            raise UsageError(
                f"hostlist {expr!r}: {e}; write names like node01,node02 or node[01-04,07]"
            ) from None
    return names


_COUNTS.update({_slurm_bracket: _slurm_count, ansible_bracket: _ansible_count})


def count_hostlist(expr: str) -> int:
    """How many names expand_hostlist(expr) gives (an upper bound: repeats are counted), without
    listing them; UsageError on bad syntax."""
    try:
        return sum(count_brackets(item.strip(), _slurm_bracket) for item in split_outside_brackets(expr))
    except ValueError as e:
        raise UsageError(
            f"hostlist {expr!r}: {e}; write names like node01,node02 or node[01-04,07]"
        ) from None
