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

from nodeagent.errors import UsageError

__all__ = ["MAX_HOSTS", "ansible_bracket", "expand_brackets", "expand_hostlist", "split_outside_brackets"]

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


def _slurm_bracket(inside: str) -> list[str]:
    """The values of one bracket, '01-04,07': a range keeps the width of its start ('08-10' ->
    08 09 10), as Slurm and python-hostlist do."""
    spans: list[tuple[int, int, int]] = []
    for part in (p.strip() for p in inside.split(",")):
        match = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
        if not match:
            raise ValueError(f"{part!r} in [{inside}] is not a number or a range like 01-04")
        low, high = int(match[1]), int(match[2] if match[2] is not None else match[1])
        if high < low:
            raise ValueError(f"range {part!r} goes backwards")
        spans.append((low, high, len(match[1])))
    if sum(high - low + 1 for low, high, _ in spans) > MAX_HOSTS:
        raise ValueError(f"[{inside}] expands to more than {MAX_HOSTS} names")
    return [str(n).zfill(width) for low, high, width in spans for n in range(low, high + 1)]


def ansible_bracket(inside: str) -> list[str]:
    """[beg:end] or [beg:end:step], numbers or single letters, as Ansible's expand_hostname_range
    (lib/ansible/plugins/inventory/__init__.py) reads them: beg defaults to 0, and a zero-padded beg
    gives the width and needs an end of the same width."""
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
        return list(string.ascii_letters[first : last + 1 : int(step)])
    if not (re.fullmatch(r"[0-9]+", beg) and re.fullmatch(r"[0-9]+", end)):
        raise ValueError(f"[{inside}]: the bounds must be two numbers or two letters")
    width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
    if width and len(end) != width:
        raise ValueError(f"[{inside}]: a zero-padded start needs an end of the same width")
    if int(end) < int(beg):
        raise ValueError(f"[{inside}] goes backwards")
    if (int(end) - int(beg)) // int(step) + 1 > MAX_HOSTS:
        raise ValueError(f"[{inside}] expands to more than {MAX_HOSTS} names")
    return [str(n).zfill(width) for n in range(int(beg), int(end) + 1, int(step))]


def expand_brackets(name: str, bracket: Callable[[str], list[str]]) -> list[str]:
    """Every bracket of `name` replaced by each of its values, the leftmost varying slowest."""
    segments: list[list[str]] = []
    rest = name
    while rest:
        open_at, close_at = rest.find("["), rest.find("]")
        if close_at != -1 and (open_at == -1 or close_at < open_at):
            raise ValueError("']' without a '['")
        if open_at == -1:
            segments.append([rest])
            break
        if close_at == -1:
            raise ValueError("'[' is not closed")
        inside = rest[open_at + 1 : close_at]
        if "[" in inside:
            raise ValueError("brackets cannot be nested")
        if not inside.strip():
            raise ValueError("'[]' is empty")
        segments += [[rest[:open_at]], bracket(inside)]
        rest = rest[close_at + 1 :]
    if math.prod(len(values) for values in segments) > MAX_HOSTS:
        raise ValueError(f"expands to more than {MAX_HOSTS} names")
    return ["".join(parts) for parts in itertools.product(*segments)]


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist expressions: 'node[01-04,07],gpu[1-2]-ib', 'a,b', nested ranges in several
    brackets ('r[1-2]n[01-02]' -> r1n01 r1n02 r2n01 r2n02), zero padding kept. Bad syntax raises
    UsageError naming the expression."""
    names: list[str] = []
    if not expr.strip():
        raise UsageError("hostlist '': empty; write names like node01,node02 or node[01-04]")
    for item in split_outside_brackets(expr):
        try:
            if not item.strip():
                raise ValueError("an empty name between commas")
            names += expand_brackets(item.strip(), _slurm_bracket)
            if len(names) > MAX_HOSTS:
                raise ValueError(f"expands to more than {MAX_HOSTS} names")
        except ValueError as e:
            raise UsageError(
                f"hostlist {expr!r}: {e}; write names like node01,node02 or node[01-04,07]"
            ) from None
    return names
