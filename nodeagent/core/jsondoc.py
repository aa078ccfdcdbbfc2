"""A JSON file nodeagent wrote (a profile, a journal, a baseline) read back and checked against its
pydantic model, every problem one UsageError line `<file>:<line>: <field path>: <problem>; <what
to do>`, as nodeagent.core.yamldoc gives for the YAML files (inventories, playbooks).

The text is parsed by the standard library (nodeagent.core.limits.loads_json: the nesting capped),
and the model validates the Python values it gives, so what loads is exactly what json.loads reads.
A pydantic error location (or any path of keys and indexes) is turned back into the line that
wrote it by walking the text's structure (`line_at`); the first error by line is reported.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from pydantic import TypeAdapter, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from nodeagent.core import limits
from nodeagent.core.errors import UsageError
from nodeagent.core.yamldoc import Loc, format_loc

__all__ = ["JsonDocument", "Wording", "expect", "line_at", "parse_json", "read_json"]

T = TypeVar("T")


@dataclass(frozen=True)
class Wording:
    """How messages name one kind of file."""

    what: str  # "profile", "nodeagent journal"
    again: str  # what to do with a file that is not one: "recreate it with `nodeagent tune --apply`"


def expect(what: str) -> WrapValidator:
    """A field's validator that reports any failure of its type as one error, "must be `what`",
    at the field itself: a union (a CPU list is text or a list of numbers) otherwise gives one error
    per member, each located inside the field."""

    def validate(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("expected", "must be {what}", {"what": what}) from None

    return WrapValidator(validate)


@dataclass(frozen=True)
class JsonDocument:
    source: str  # the file, as messages name it
    text: str
    data: Any  # what json.loads made of `text`
    wording: Wording

    @functools.cached_property
    def _lines(self) -> _Lines:
        return _Lines(self.text)

    def fail(self, loc: Loc, problem: str) -> NoReturn:
        where = f"{self.source}:{self._lines.at(loc)}"
        field = f" {format_loc(loc)}:" if loc else ""
        raise UsageError(f"{where}:{field} {problem}; {self.wording.again}")

    def validate(self, model: type[T] | TypeAdapter[T]) -> T:
        """The data as `model` (a pydantic model or dataclass, or a TypeAdapter); the first error,
        by line, as one UsageError line."""
        adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
        try:
            return adapter.validate_python(self.data)
        except ValidationError as e:
            errors = [(_doc_loc(err["loc"]), err) for err in e.errors(include_url=False)]
            loc, err = min(errors, key=lambda pair: (self._lines.at(pair[0]), pair[1]["type"] == "missing"))
            self.fail(loc, _problem(err, adapter))


def read_json(path: Path, wording: Wording, capped: bool = True) -> JsonDocument:
    """The file at `path` parsed; with `capped`, only a regular file up to NODEAGENT_MAX_INPUT_MIB is
    read (nodeagent.core.limits). FileNotFoundError is left to the caller, which knows what to say;
    every other problem is a UsageError line."""
    source = str(path)
    try:
        raw = limits.read_input_file(path, wording.what) if capped else path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as e:
        raise UsageError(f"{source}: not UTF-8 text (byte {e.start}); {wording.again}") from None
    except OSError as e:
        raise UsageError(
            f"{source}: cannot read the {wording.what} ({e.strerror or e}); {wording.again}"
        ) from None
    return parse_json(text, source, wording)


def parse_json(text: str, source: str, wording: Wording) -> JsonDocument:
    """`text` (read from `source`) as a JsonDocument whose top level is an object."""
    try:
        data = limits.loads_json(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{source}:{e.lineno}: not a readable {wording.what}: not JSON ({e.msg}, column {e.colno}); "
            f"{wording.again}"
        ) from None
    except ValueError as e:  # nested too deeply
        raise UsageError(
            f"{source}: not a readable {wording.what}: the JSON is {e}; {wording.again}"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(
            f"{source}:1: not a {wording.what}: the top level is {_kind(data)}, not an object; "
            f"{wording.again}"
        )
    return JsonDocument(source, text, data, wording)


# --- Errors in words --------------------------------------------------------------------------------

# What a field of each type must be, in JSON's words rather than Python's.
_WANTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dataclass_type": "an object",
    "dataclass_exact_type": "an object",
    "list_type": "a list",
    "none_required": "null",
}


def _problem(err: Any, model: TypeAdapter[Any]) -> str:
    """One pydantic error in plain words."""
    kind, ctx = err["type"], err.get("ctx") or {}
    loc = tuple(err["loc"])
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        close = difflib.get_close_matches(str(loc[-1]), sorted(_field_names(model)), n=1)
        return f"unknown field (did you mean {close[0]!r}?)" if close else "unknown field"
    if kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        return "is required"
    if kind == "value_error":
        return str(ctx["error"])
    if kind == "expected":
        return f"{err['msg']} (got {_shown(err['input'])})"
    if kind in _WANTED:
        return f"must be {_WANTED[kind]} (got {_shown(err['input'])})"
    if kind == "literal_error":
        return f"must be {ctx['expected']} (got {_shown(err['input'])})"
    if kind == "too_short":
        return "must not be empty"
    return f"{err['msg']} (got {_shown(err['input'])})"


def _doc_loc(loc: tuple[str | int, ...]) -> Loc:
    """A pydantic location as a path into the document: an error about a key of a mapping is
    located at the key ("[key]" is pydantic's marker for it)."""
    return tuple(part for part in loc if part != "[key]")


def _shown(value: Any) -> str:
    """A value as a message shows it: JSON spellings, and short."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    try:
        text = json.dumps(value)
    except ValueError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    """What a JSON value is, without its content (a file given by mistake is not echoed)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    kinds = ((dict, "an object"), (list, "a list"), (str, "a string"), (int | float, "a number"))
    return next(name for kind, name in kinds if isinstance(value, kind))


def _field_names(model: TypeAdapter[Any]) -> set[str]:
    """Every field name of the model and the models inside it, for "did you mean"."""
    names: set[str] = set()
    for node in _walk(model.core_schema):
        fields = node.get("fields")
        if node.get("type") in ("model-fields", "typed-dict") and isinstance(fields, dict):
            names.update(fields)
        elif node.get("type") == "dataclass-args" and isinstance(fields, list):
            names.update(f["name"] for f in fields)
    return names


def _walk(schema: Any) -> Iterator[dict[str, Any]]:
    """Every mapping of a pydantic core schema, depth first (definitions included)."""
    stack = [schema]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)


# --- Lines ------------------------------------------------------------------------------------------

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def line_at(text: str, loc: Loc) -> int:
    """The 1-based line of the value at `loc` in the JSON `text`: an object member is named by its
    key's line (the last of equal keys, the one json.loads keeps), a list item by its own; where
    the path leaves the document (a missing field), the deepest value reached."""
    return _Lines(text).at(loc)


class _Lines:
    """The line of every value of a JSON text, by its path: found in one walk of the text's
    structure, so naming the lines of many errors costs one walk, not one per error."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.newlines = [m.start() for m in re.finditer("\n", text)]
        self.by_loc: dict[Loc, int] = {}
        with contextlib.suppress(ValueError, IndexError):  # not JSON after all: the lines found so far
            self._walk(_skip(text, 0), ())

    def at(self, loc: Loc) -> int:
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.by_loc:
                return self.by_loc[loc[:end]]
        return self.by_loc.get((), 1)

    def _line(self, pos: int) -> int:
        return bisect.bisect_left(self.newlines, pos) + 1

    def _walk(self, pos: int, loc: Loc) -> int:
        """Record the value at `pos` and everything in it; the position after it. The nesting is
        bounded (nodeagent.core.limits.loads_json read the text first)."""
        text = self.text
        self.by_loc.setdefault(loc, self._line(pos))
        if text[pos] not in "{[":
            return _DECODER.raw_decode(text, pos)[1]
        closing = "}" if text[pos] == "{" else "]"
        pos = _skip(text, pos + 1)
        index = 0
        while text[pos] != closing:
            if closing == "}":
                key_line = self._line(pos)
                key, pos = _DECODER.raw_decode(text, pos)
                pos = _skip(text, _skip(text, pos) + 1)  # past the colon
                child: Loc = (*loc, key)
                self.by_loc[child] = key_line  # the last of equal keys wins, as in json.loads
            else:
                child = (*loc, index)
                self.by_loc[child] = self._line(pos)
            pos = _skip(text, self._walk(pos, child))
            index += 1
            if text[pos] == ",":
                pos = _skip(text, pos + 1)
        return pos + 1


def _skip(text: str, pos: int) -> int:
    """Past the whitespace at `pos`."""
    m = _SPACE.match(text, pos)
    return m.end() if m else pos
