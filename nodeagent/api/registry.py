"""A registry of plug-ins (checks, tuners): an explicit list of built-in modules, plus third-party ones
from an entry-point group named like the package. Modules are imported when the registry is first
asked for, not on import of its package, so that importing one check never imports them all."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Generic, Protocol, TypeVar

from nodeagent.core.errors import UsageError


class Identified(Protocol):
    """What a registry holds: anything with an id (a Check, a Tuner)."""

    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=Identified)


class Registry(Generic[T]):
    """The `kind` objects named `attr` in the modules `builtin` and `on_demand` of `package`, then
    those of the entry-point group `package`, in that order (the order of reports).

    `on_demand` ones run only when asked for by id: `select()` without `only` leaves them out.
    `noun` ("check", "tuner") names them in errors.
    """

    def __init__(
        self,
        kind: type[T],
        noun: str,
        package: str,
        attr: str,
        builtin: Sequence[str],
        on_demand: Sequence[str] = (),
    ) -> None:
        self.kind = kind
        self.noun = noun
        self.package = package
        self.attr = attr
        self.builtin = tuple(builtin)
        self.on_demand = tuple(on_demand)
        self._lock = threading.Lock()
        self._loaded: tuple[T, ...] | None = None
        self._on_demand_ids: frozenset[str] | None = None

    def all(self) -> tuple[T, ...]:
        """Every registered object, loaded once. A broken plug-in is a UsageError, raised again on the
        next call rather than remembered."""
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load_all()
            return self._loaded

    def select(
        self, only: Sequence[str] = (), skip: Sequence[str] = (), among: Sequence[T] | None = None
    ) -> list[T]:
        """`only` (in registry order) or all but the on-demand ones, less `skip`, from `among` (the
        registry when None). Unknown ids are a UsageError."""
        pool = self.all() if among is None else among
        known = {o.id for o in pool}
        unknown = [i for i in (*only, *skip) if i not in known]
        if unknown:
            raise UsageError(f"unknown {self.noun} id {unknown[0]!r}; known: {', '.join(o.id for o in pool)}")
        wanted = set(only) or known - self.on_demand_ids()
        return [o for o in pool if o.id in wanted and o.id not in set(skip)]

    def on_demand_ids(self) -> frozenset[str]:
        with self._lock:
            if self._on_demand_ids is None:
                self._on_demand_ids = frozenset(self._load(name).id for name in self.on_demand)
            return self._on_demand_ids

    def _load(self, name: str) -> T:
        found: T = getattr(importlib.import_module(f"{self.package}.{name}"), self.attr)
        return found

    def _load_all(self) -> tuple[T, ...]:
        found = [self._load(name) for name in (*self.builtin, *self.on_demand)]
        for ep in entry_points(group=self.package):
            extra = ep.load()
            if not isinstance(extra, self.kind):
                raise UsageError(
                    f"entry point {ep.name} ({ep.value}) is not a nodeagent {self.kind.__name__}"
                )
            found.append(extra)
        ids = [o.id for o in found]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise UsageError(f"two {self.noun}s share the id {dupes[0]!r}; uninstall one of the plug-ins")
        return tuple(found)
