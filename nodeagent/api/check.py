"""The shape of a check: declared reads, collect (all I/O, through the Host) and evaluate (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding
from nodeagent.host import Host

F = TypeVar("F")
P = TypeVar("P")


def param(default: Any, why: str) -> Any:
    """A check parameter with its default and a one-line reason (with a link) shown in the docs."""
    return field(default=default, metadata={"why": why})


class Area(str, Enum):
    """The part of the node a check speaks for. The TUI's Overview has a row per area, in this order,
    and its Checks screen filters by them. A fixed vocabulary, so that two checks about the same part
    share a row instead of each naming it in its own words.

    OTHER is where a check that declares no area goes (a plug-in written before areas): it is listed
    and its findings are shown like any other's, never left out.
    """

    CPU = "CPU and power"
    MEMORY = "NUMA and memory"
    PCIE = "PCIe and topology"
    GPU = "GPUs and NVLink"
    NETWORK = "NICs and RDMA"
    KERNEL = "Kernel and threads"
    OTHER = "Other"


@dataclass(frozen=True)
class NoParams:
    """For checks that have no thresholds."""


@dataclass(frozen=True)
class Check(Generic[F, P]):
    """A check: what it reads (`paths` globs, `commands` argv), how it gathers and how it judges.

    `collect(host)` does all the I/O and returns facts; `evaluate(facts, params)` is pure and
    returns findings, so it is tested on hand-built facts and re-run without touching the machine.
    `paths` and `commands` are what `nodeagent snapshot` records for this check. `title` is its
    one-line description and `area` the part of the node it speaks for: every list of checks (the
    TUI's Overview and area filter, `nodeagent checks`) is derived from these, so a check declares
    them here and nowhere else.
    """

    id: str
    title: str
    tags: tuple[str, ...]
    collect: Callable[[Host], F]
    evaluate: Callable[[F, P], list[Finding]]
    params: type[P]
    paths: tuple[str, ...] = ()
    commands: tuple[tuple[str, ...], ...] = ()
    area: Area = Area.OTHER

    def __post_init__(self) -> None:
        # A plug-in may name its area by the text ("GPUs and NVLink"): held as the Area, and a name
        # outside the vocabulary fails when the plug-in loads rather than making a row of its own.
        try:
            area = Area(self.area)
        except ValueError:
            known = ", ".join(repr(a.value) for a in Area)
            raise ValueError(f"check {self.id}: area {self.area!r} is not one of {known}") from None
        object.__setattr__(self, "area", area)

    def make_params(self, overrides: Mapping[str, Any] | None = None) -> P:
        """Default parameters with `overrides` applied; an unknown or ill-typed name is a UsageError."""
        return make_params(f"check {self.id}", self.params, overrides)

    def run(self, host: Host, params: P) -> list[Finding]:
        return self.evaluate(self.collect(host), params)


def make_params(owner: str, params: type[P], overrides: Mapping[str, Any] | None = None) -> P:
    """`params` with its defaults and `overrides`; unknown names and wrong types are UsageErrors
    naming `owner` ("check numa", "tuner hugepages")."""
    overrides = dict(overrides or {})
    fields = {f.name: f for f in dataclasses.fields(params)}  # type: ignore[arg-type]
    for name, value in overrides.items():
        if name not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise UsageError(f"{owner}: unknown parameter {name!r} (known: {known})")
        default = fields[name].default
        if default is not dataclasses.MISSING and default is not None and not same_kind(default, value):
            raise UsageError(f"{owner}: parameter {name!r} wants {type(default).__name__}, got {value!r}")
    return params(**overrides)


def same_kind(default: object, value: object) -> bool:
    """Whether `value` may stand for a parameter whose default is `default`: a bool only for a bool,
    any number for a number, any sequence for a tuple or list (YAML and JSON give lists)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    if isinstance(default, (tuple, list)):
        return isinstance(value, (tuple, list))
    return isinstance(value, type(default))


def declared_paths(checks: Sequence[Check[Any, Any]]) -> list[str]:
    return sorted({p for c in checks for p in c.paths})


def declared_commands(checks: Sequence[Check[Any, Any]]) -> list[tuple[str, ...]]:
    return sorted({cmd for c in checks for cmd in c.commands})
