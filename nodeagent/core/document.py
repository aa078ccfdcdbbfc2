"""Objects that are their documents: pydantic dataclasses whose declaration is their part of a JSON
document (docs/architecture.md, Documents), and what their declarations use."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from pydantic import ConfigDict, PlainSerializer, SerializerFunctionWrapHandler, TypeAdapter, model_serializer
from pydantic.dataclasses import is_pydantic_dataclass

__all__ = ["EMPTY_AS_NULL", "LATE", "InKeyOrder", "dump", "is_empty", "is_none"]

# The config of these dataclasses: their validators are built when the first object is made, so
# that a command that only imports them (a preflight loading a playbook imports the tuners and
# their plans) does not pay for building them.
LATE = ConfigDict(defer_build=True)


class InKeyOrder:
    """A document that puts derived values between its stored ones (a result's verdict before its
    trials): pydantic writes computed fields after every field, so the class names its document's
    keys in order in `document_keys`. Keys it does not name follow in pydantic's order, so that a
    new field is never left out of the document. `document_inlined` names a field whose own
    document's keys stand in its place (a verify report is the trials' document with the profile's
    keys before them). The nested documents its handler returns have key strings of their own, not
    the shared field names: more memory where many are held or pickled, which is why a node's and a
    fleet's reports keep their to_dict (docs/architecture.md, Documents)."""

    document_keys: ClassVar[tuple[str, ...]] = ()
    document_inlined: ClassVar[str | None] = None

    @model_serializer(mode="wrap")
    def _in_key_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        ordered = {**{k: doc[k] for k in self.document_keys if k in doc}, **doc}
        out: dict[str, Any] = {}
        for key, value in ordered.items():
            out.update(value if key == self.document_inlined else {key: value})
        return out


@functools.cache
def _adapter(kind: type[object]) -> TypeAdapter[Any]:
    """The class's adapter, made once. mypy cannot tell a pydantic dataclass from another object: a
    wrong one fails here, loudly (an exception is not cached), where pydantic would dump a plain
    dataclass's fields as a document nobody declared."""
    if not is_pydantic_dataclass(kind):
        raise TypeError(f"{kind.__name__} is not a pydantic dataclass: it declares no document")
    return TypeAdapter(kind)


def dump(value: object) -> dict[str, Any]:
    """A pydantic dataclass as the document it declares: its fields in order under their
    serialization aliases, its computed fields after them (or in the order an InKeyOrder names),
    without the excluded ones."""
    # A class is hashable; mypy's Hashable protocol does not see it through type[object].
    adapter = _adapter(type(value))  # type: ignore[arg-type]
    dumped: dict[str, Any] = adapter.dump_python(value, mode="json", by_alias=True)
    return dumped


# For `Field(exclude_if=...)`: a document leaves out what an object does not use.
def is_empty(value: object) -> bool:
    return not value


def is_none(value: object) -> bool:
    return value is None


# For `Annotated[T, EMPTY_AS_NULL]`: an empty value is written as null, where an empty one would
# read as a value (a rank with no CPUs is not bound to none: it is not bound).
EMPTY_AS_NULL = PlainSerializer(lambda value: value or None)
