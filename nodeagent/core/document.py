"""Objects that are their documents: pydantic dataclasses whose declaration is their part of a JSON
document (docs/architecture.md, Documents), and what their declarations use."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import ConfigDict, TypeAdapter

__all__ = ["LATE", "dump", "is_empty", "is_none"]

# The config of these dataclasses: their validators are built when the first object is made, so
# that a command that only imports them (a preflight loading a playbook imports the tuners and
# their plans) does not pay for building them.
LATE = ConfigDict(defer_build=True)


@functools.cache
def _adapter(kind: type[object]) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def dump(value: object) -> dict[str, Any]:
    """A pydantic dataclass as the document it declares: its fields in order under their
    serialization aliases, its computed fields after them, without the excluded ones."""
    # A class is hashable; mypy's Hashable protocol does not see it through type[object].
    adapter = _adapter(type(value))  # type: ignore[arg-type]
    dumped: dict[str, Any] = adapter.dump_python(value, mode="json", by_alias=True)
    return dumped


# For `Field(exclude_if=...)`: a document leaves out what an object does not use.
def is_empty(value: object) -> bool:
    return not value


def is_none(value: object) -> bool:
    return value is None
