"""A YAML file read with its line numbers, and one-line errors that name file, line and field.

Used by the inventory (nodeagent.cluster) and the playbooks (nodeagent.gate.playbook). A file is read
once into a Document: PyYAML's composed node tree (for lines) and the data constructed from that
same tree (for values), so a pydantic error location or any path of keys and indexes to a value (a
Loc) can be turned back into the line that wrote it. Every problem is one line
`<file>:<line>: <field path>: <problem>; <what to do>`, and a file's problems are reported
together, one line each by line (a UsageError whose message has a line per problem): a reader
fixes them all in one go, not one per run. Nothing here knows what a host or a check is: the kind
of file is named by a Wording, and subclasses of Document add the checks of their own.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from nodeagent.core import limits
from nodeagent.core.errors import UsageError

__all__ = [
    "Document",
    "DocumentError",
    "Loc",
    "SettingLoader",
    "Wording",
    "did_you_mean",
    "format_loc",
    "line_at",
    "parse_document",
    "raise_problems",
    "read_document",
    "schema_problem",
    "show_value",
]

Loc = tuple[str | int, ...]

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# What YAML 1.1 makes of an unquoted key such as `1`, `yes` or `2024-01-01`.
_YAML_KINDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "timestamp": "a date",
}


def format_loc(loc: Loc) -> str:
    """('hosts', 2, 'port') -> 'hosts[2].port'; a key with a newline or other control character
    in quotes, so the message stays one line."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            shown = part if part.isprintable() else repr(part)
            text += f".{shown}" if text else shown
    return text


def line_at(root: yaml.Node, loc: Loc) -> int:
    """The 1-based line of the value at `loc` (a pydantic error location or a path into the data):
    a mapping entry is found by its key (the last match, which is the one that wins after a `<<`
    merge) and named by the key's line; where the path leaves the tree (a missing field), the
    deepest node reached."""
    node = root
    for i, part in enumerate(loc):
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in reversed(node.value):
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    if i == len(loc) - 1:
                        return int(key.start_mark.line) + 1
                    child = value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def show_value(value: Any) -> str:
    """A value as the error message shows it: YAML spellings, and short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(word: str, known: Iterable[str], what: str) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(word, known, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"known {what}: {', '.join(known)}" if len(known) <= 12 else f"see the {what} in the file"


def schema_problem(err: Any, model: type[BaseModel], expect: Callable[[Loc], str] | None = None) -> str:
    """One pydantic error in plain words; `expect(loc)` says what a field wants ("must be a host
    name") for type and range errors, where pydantic's own words would name Python types."""
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "extra_forbidden":
        return f"unknown key; {did_you_mean(str(loc[-1]), model.model_fields, 'keys')}"
    if kind == "missing":
        return "is required"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    wanted = expect(loc) if expect is not None else "has the wrong type"
    return f"{wanted} (got {show_value(err['input'])})"


@dataclass(frozen=True)
class Wording:
    """How messages name one kind of file."""

    what: str  # "inventory", "playbook"
    example: str  # a file name to give: "hosts.yml"
    empty: str  # what to do with an empty file: "list the nodes under hosts:"
    top_level: str  # what the top level should hold: "write `hosts:` ..."
    # A problem with a key name anywhere in the file (passwords in an inventory), or None.
    refuse_key: Callable[[str], str | None] = field(default=lambda _name: None)
    # False: a top level that is not a mapping is never echoed (nor is "not a <what>" left unsaid).
    show_top_level: bool = True

    @property
    def a_what(self) -> str:
        return f"{'an' if self.what[:1] in 'aeiou' else 'a'} {self.what}"


_M = TypeVar("_M", bound=BaseModel)


class DocumentError(UsageError):
    """One problem of a document, "FILE:LINE: FIELD: problem", with where it is."""

    def __init__(self, message: str, line: int, loc: Loc) -> None:
        super().__init__(message)
        self.line = line
        self.loc = loc


@dataclass
class Document:
    source: str
    root: yaml.Node
    data: Any
    base: Path | None  # the folder relative paths are taken from, None: the current directory
    # Problems gathered (see `gathering`) to be reported together by raise_problems.
    problems: list[DocumentError] = field(default_factory=list)

    def error(self, loc: Loc, problem: str, line: int | None = None) -> DocumentError:
        at = line if line is not None else line_at(self.root, loc)
        where = f"{self.source}:{at}"
        return DocumentError(
            f"{where}: {format_loc(loc)}: {problem}" if loc else f"{where}: {problem}", at, loc
        )

    def fail(self, loc: Loc, problem: str, line: int | None = None) -> NoReturn:
        raise self.error(loc, problem, line)

    @contextlib.contextmanager
    def gathering(self) -> Iterator[None]:
        """A `fail` inside is kept in `problems` and the reading goes on after the block, so that
        raise_problems reports every problem of the file at once."""
        try:
            yield
        except DocumentError as e:
            self.problems.append(e)

    def problem(self, err: Any, model: type[BaseModel]) -> str:
        """One pydantic error in the words of this kind of file (subclasses say more)."""
        return schema_problem(err, model)

    def validated(self, model: type[_M], data: Any, to_doc: Callable[[Loc], Loc]) -> _M | None:
        """`model` checked against `data`, or None with each error kept in `problems` (its
        location mapped into the document by `to_doc`)."""
        try:
            return model.model_validate(data)
        except ValidationError as e:
            found = e.errors(include_url=False)
            errors = [(to_doc(tuple(err["loc"])), err) for err in found if not _misspelt(err, found)]
            errors.sort(key=lambda pair: line_at(self.root, pair[0]))
            self.problems += [self.error(loc, self.problem(err, model)) for loc, err in errors]
            return None

    def validate(self, model: type[_M], data: Any, to_doc: Callable[[Loc], Loc]) -> _M:
        """`model` checked against `data`; every error a line of one UsageError (see raise_problems)."""
        checked = self.validated(model, data, to_doc)
        raise_problems([self])
        assert checked is not None  # no problem: validated returned the model
        return checked


def _misspelt(err: Any, errors: list[Any]) -> bool:
    """Whether `err` is a required key missing beside an unknown key of the same mapping that is
    close to it: one mistake, a misspelt key, which the unknown key's "did you mean" already names
    (`hosts:` written `host:`)."""
    if err["type"] != "missing":
        return False
    *parent, name = err["loc"]
    unknown = [
        str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden" and list(e["loc"][:-1]) == parent
    ]
    return any(difflib.get_close_matches(key, [str(name)], n=1) for key in unknown)


def raise_problems(docs: Iterable[Document], more: Iterable[str] = ()) -> None:
    """One UsageError with a line per problem gathered in `docs` (each document's by line, the
    documents in the order given) and per line of `more` (what other files reported), when there
    is any. A problem found twice (a file included twice) is one line."""
    lines: list[str] = []
    for doc in docs:
        lines += [str(p) for p in sorted(doc.problems, key=lambda p: p.line)]
    for text in more:
        lines += text.splitlines()
    unique = list(dict.fromkeys(lines))
    if unique:
        raise UsageError("\n".join(unique))


_D = TypeVar("_D", bound=Document)


def read_document(path: Path, wording: Wording, kind: type[_D]) -> _D:
    """The file at `path` as a `kind` of Document; unreadable files and bad YAML are UsageErrors.
    Only a regular file up to NODEAGENT_MAX_INPUT_MIB is read (nodeagent.core.limits)."""
    source = str(path)
    try:
        text = limits.read_input_file(path, wording.what).decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{source}: no such {wording.what} file; check the path") from None
    except IsADirectoryError:
        raise UsageError(
            f"{source}: is a folder; give the {wording.what} file (e.g. {wording.example})"
        ) from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{source}: not UTF-8 text (byte {e.start}); save the {wording.what} as UTF-8"
        ) from None
    except OSError as e:
        raise UsageError(f"{source}: cannot read the {wording.what} ({e.strerror or e})") from None
    return parse_document(text, source, path.parent, wording, kind)


def parse_document(text: str, source: str, base: Path | None, wording: Wording, kind: type[_D]) -> _D:
    """YAML `text` (read from `source`) as a `kind` of Document whose top level is a mapping."""
    try:
        root = _compose(text)
    except _TooDeep:  # as a RecursionError was reported (the limit is in docs/limits.md)
        raise UsageError(f"{source}: the YAML is nested too deeply to be {wording.a_what}") from None
    except _Refused as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else 1
        raise UsageError(f"{source}:{line}: {e.problem}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = " ".join(str(e.problem or e.context).split())
        if e.context and e.context_mark is not None and e.problem_mark is not None:
            problem += f" ({e.context} from line {e.context_mark.line + 1})"
        raise UsageError(f"{where}: YAML syntax error: {problem}; fix the YAML") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{source}: YAML syntax error: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise UsageError(f"{source}: the YAML is nested too deeply to be {wording.a_what}") from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"):
        raise UsageError(f"{source}: the {wording.what} is empty; {wording.empty}")
    doc = kind(source, root, None, base)
    _check_tree(doc, wording)
    loader = _Loader("")
    try:
        doc.data = loader.construct_document(root)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(str(e.problem or e.context).split())
        raise UsageError(f"{source}:{line}: {problem}; write plain YAML values") from None
    finally:
        loader.dispose()
    if not isinstance(doc.data, dict):
        doc.fail((), _not_a_mapping(doc.data, wording))
    return doc


class _Refused(yaml.MarkedYAMLError):
    """A YAML document refused for its shape (too deep, aliases expanding too far), not its syntax."""


class _TooDeep(_Refused):
    """More than NODEAGENT_MAX_DEPTH lists and mappings inside each other."""


class _Loader(yaml.SafeLoader):
    """PyYAML's SafeLoader with the nesting capped while composing (before any recursion can run
    out of stack) and values that Python refuses to build (an integer of more than 4,300 digits,
    the date 2024-13-45) reported at their line instead of escaping as ValueError."""

    max_depth = 64
    _depth = 0

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.aliases: list[tuple[Any, Any]] = []  # (where *name is written, the anchor's name)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            self.aliases.append((event.start_mark, event.anchor))
        elif self.check_event(yaml.events.CollectionStartEvent):
            if self._depth >= self.max_depth:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _TooDeep(
                    problem=f"nested deeper than {self.max_depth} levels (limit NODEAGENT_MAX_DEPTH); "
                    "flatten it",
                    problem_mark=event.start_mark,
                )
            self._depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def _built(self, node: Any, build: Callable[[Any], Any], what: str) -> Any:
        try:
            return build(node)
        except ValueError as e:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{show_value(_short(node.value))} is not a valid {what} ({_first_line(e)})",
                node.start_mark,
            ) from None

    def construct_yaml_int(self, node: Any) -> Any:
        return self._built(node, super().construct_yaml_int, "integer")

    def construct_yaml_float(self, node: Any) -> Any:
        return self._built(node, super().construct_yaml_float, "number")

    def construct_yaml_timestamp(self, node: Any) -> Any:
        return self._built(node, super().construct_yaml_timestamp, "date")


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_timestamp)


class SettingLoader(_Loader):
    """For one value given on the command line (`--set ID.NAME=VALUE`): yamldoc's checks, which
    turn an impossible integer or date into a YAMLError rather than a ValueError."""


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first if len(first) <= 80 else first[:77] + "..."


def _compose(text: str) -> yaml.Node | None:
    """The node tree of `text`, refused (_Refused, with a line) when it nests deeper than
    NODEAGENT_MAX_DEPTH or its aliases (*name) would add more than NODEAGENT_MAX_ALIAS_VALUES
    values once expanded (a "billion laughs": a few hundred bytes that expand to gigabytes in
    whatever walks the data) or refer to themselves."""
    loader = _Loader(text)
    loader.max_depth = limits.limit("NODEAGENT_MAX_DEPTH")
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    if root is not None and loader.aliases:
        _check_aliases(root, loader.aliases)
    return root


def _check_aliases(root: yaml.Node, aliases: list[tuple[Any, Any]]) -> None:
    """Count the values of the tree with every alias expanded (each shared node's count computed
    once), against the values really written; depth is bounded by the composer, except through
    aliases, so expanded depth is capped here too (which also stops an alias inside itself)."""
    cap = limits.limit("NODEAGENT_MAX_ALIAS_VALUES")
    max_depth = limits.limit("NODEAGENT_MAX_DEPTH")
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise _Refused(
                problem="an alias (*name) refers to the value that contains it; write the value out",
                problem_mark=node.start_mark,
            )
        if depth > max_depth:
            raise _Refused(
                problem=f"aliases (*name) nest deeper than {max_depth} levels (limit NODEAGENT_MAX_DEPTH); "
                "write the values out",
                problem_mark=node.start_mark,
            )
        total = 1
        on_path.add(key)
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item, depth + 1) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        on_path.discard(key)
        sizes[key] = total
        return total

    expanded = size(root, 0)
    if expanded - len(sizes) > cap:
        mark, name = aliases[-1]
        raise _Refused(
            problem=f"the aliases (*{name} and others) expand to {expanded:,} values, more than {cap:,} "
            "beyond what is written (limit NODEAGENT_MAX_ALIAS_VALUES); write the values out",
            problem_mark=mark,
        )


def _not_a_mapping(data: Any, wording: Wording) -> str:
    """Why a file whose top level is not a mapping is not this kind of file. The value itself is
    shown only when it is one short word (`node01`) and the Wording allows it: a file given by
    mistake (`include: /etc/shadow`) must not have its first line copied into logs."""
    shown = show_value(data) if isinstance(data, list | dict) else None
    if isinstance(data, str):
        word = wording.show_top_level and re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", data) is not None
        shown = show_value(data) if word else "text"
    elif shown is None:
        shown = "a number, a date or a boolean" if data is not None else "null"
    if wording.show_top_level:
        return f"the top level is {shown}, not a mapping; {wording.top_level}"
    return f"not {wording.a_what}: the top level is {shown}, not a mapping; {wording.top_level}"


def _check_tree(doc: Document, wording: Wording) -> None:
    """Before the data is built (PyYAML would keep the last of two equal keys and drop the first
    quietly): every key is text and appears once per mapping, and no key is refused."""
    seen: set[int] = set()

    def walk(node: yaml.Node, loc: Loc) -> None:
        if id(node) in seen:  # an alias: checked where its anchor is
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))
        if not isinstance(node, yaml.MappingNode):
            return
        first: dict[str, int] = {}
        for key, value in node.value:
            line = int(key.start_mark.line) + 1
            if key.tag == _MERGE_TAG:
                walk(value, loc)
                continue
            if not isinstance(key, yaml.ScalarNode):
                doc.fail(loc, "a key must be text, not a list or a mapping", line)
            if key.tag != _STR_TAG:
                kind = _YAML_KINDS.get(str(key.tag).rsplit(":", 1)[-1], "something else")
                doc.fail(
                    loc, f"the key {key.value} is read as {kind}, not text; quote it: '{key.value}'", line
                )
            name = str(key.value)
            refused = wording.refuse_key(name)
            if refused is not None:
                doc.fail((*loc, name), refused, line)
            if name in first:
                doc.fail((*loc, name), f"duplicate key (first on line {first[name]}); keep one", line)
            first[name] = line
            walk(value, (*loc, name))

    walk(doc.root, ())
