"""The inventory file as a YAML document: reading it with line numbers, and one-line errors.

Both inventory forms are read through a Document: PyYAML's composed node tree (for lines) and the
data constructed from that same tree (for values), so a pydantic error location or an Ansible
variable's origin (a Loc, the path of keys and indexes to a value) can be turned back into the line
that wrote it. Every problem is one UsageError line `<file>:<line>: <field path>: <problem>; <what to
do>`. Kept apart from the two forms' schemas because this part knows YAML, not what a host is.
"""

from __future__ import annotations

import datetime
import difflib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from nodeagent.cluster.hostlist import expand_hostlist
from nodeagent.cluster.hostnames import check_host
from nodeagent.errors import UsageError

__all__ = [
    "Document",
    "Loc",
    "did_you_mean",
    "format_loc",
    "line_at",
    "read_document",
    "schema_problem",
    "show_value",
]

Loc = tuple[str | int, ...]

# Ansible's names for passwords (connection, become, and the older ssh/sudo/su spellings); refused
# anywhere in the file, so a password never sits in an inventory that gets copied and committed.
_PASSWORD_KEYS = frozenset(
    {
        "password",
        "ansible_password",
        "ansible_ssh_pass",
        "ansible_ssh_password",
        "ansible_become_password",
        "ansible_become_pass",
        "ansible_sudo_pass",
        "ansible_su_pass",
    }
)
_STR_TAG = "tag:yaml.org,2002:str"
# What YAML 1.1 makes of an unquoted key such as `1`, `yes` or `2024-01-01`.
_YAML_KINDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "timestamp": "a date",
}
_MERGE_TAG = "tag:yaml.org,2002:merge"


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


def _var_text(value: Any) -> str:
    """A variable as HostSpec.vars keeps it: text; lists and mappings (common in Ansible group vars)
    as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return json.dumps(value, default=str, separators=(",", ":"))


# What a field wants, for type and range errors (pydantic's own words name Python types).
_EXPECT = {
    "name": "must be a host name",
    "host": "must be a host name or IP address",
    "port": "must be an integer between 1 and 65535",
    "user": "must be a user name",
    "identity_file": "must be the path of a private key file",
    "known_hosts": "must be the path of a known_hosts file",
    "connect_timeout": "must be a number of seconds greater than 0",
    "command_timeout": "must be a number of seconds greater than 0",
    "jump_host": "must be host, user@host or user@host:port",
    "nodeagent": "must be the remote nodeagent command",
    "python": "must be the remote Python interpreter",
    "vars": "must be a mapping of name: value",
    "defaults": "must be a mapping of setting: value",
    "hosts": "must be a list of host names, hostlist expressions like node[01-04] or mappings with name:",
}


def schema_problem(err: Any, model: type[BaseModel]) -> str:
    """One pydantic error in the words of the inventory's schema."""
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "extra_forbidden":
        return f"unknown key; {did_you_mean(str(loc[-1]), model.model_fields, 'keys')}"
    if kind == "missing":
        return "is required"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if loc[:1] == ("groups",):
        expect = (
            "must be a mapping of group name: list of hosts",
            "must be a list of host names or hostlist expressions",
            "must be a host name or hostlist expression",
        )[min(len(loc), 3) - 1]
    else:
        names = [part for part in loc if isinstance(part, str)]
        expect = _EXPECT.get(names[-1] if names else "", "has the wrong type")
    return f"{expect} (got {show_value(err['input'])})"


_M = TypeVar("_M", bound=BaseModel)


@dataclass
class Document:
    source: str
    root: yaml.Node
    data: Any
    base: Path | None  # the folder relative paths are taken from, None: the current directory

    def fail(self, loc: Loc, problem: str, line: int | None = None) -> NoReturn:
        where = f"{self.source}:{line if line is not None else line_at(self.root, loc)}"
        raise UsageError(f"{where}: {format_loc(loc)}: {problem}" if loc else f"{where}: {problem}")

    def validate(self, model: type[_M], data: Any, to_doc: Callable[[Loc], Loc]) -> _M:
        """`model` checked against `data`; the first error (by line) as one UsageError line, its
        location mapped into the document by `to_doc`."""
        try:
            return model.model_validate(data)
        except ValidationError as e:
            errors = [(to_doc(tuple(err["loc"])), err) for err in e.errors(include_url=False)]
            # The first by line; on one line an unknown key (with its "did you mean") before a
            # missing one, which is often the same key misspelt.
            loc, err = min(
                errors, key=lambda pair: (line_at(self.root, pair[0]), pair[1]["type"] == "missing")
            )
            self.fail(loc, schema_problem(err, model))

    def expand(self, expr: str, loc: Loc) -> list[str]:
        try:
            names = expand_hostlist(expr)
        except UsageError as e:
            self.fail(loc, str(e))
        for name in names:
            try:
                check_host(name)
            except ValueError as e:
                self.fail(loc, str(e))
        return names

    def text(self, value: Any, loc: Loc) -> str:
        try:
            return _var_text(value)
        except ValueError:  # json.dumps of a YAML alias that contains itself
            self.fail(loc, "the value refers to itself (a YAML alias loop); write it out")


def read_document(path: Path) -> Document:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{source}: no such inventory file; check the path") from None
    except IsADirectoryError:
        raise UsageError(f"{source}: is a folder; give the inventory file (e.g. hosts.yml)") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{source}: not UTF-8 text (byte {e.start}); save the inventory as UTF-8") from None
    except OSError as e:
        raise UsageError(f"{source}: cannot read the inventory ({e.strerror or e})") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
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
        raise UsageError(f"{source}: the YAML is nested too deeply to be an inventory") from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"):
        raise UsageError(f"{source}: the inventory is empty; list the nodes under hosts:")
    doc = Document(source, root, None, path.parent)
    _check_tree(doc)
    loader = yaml.SafeLoader("")
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
        doc.fail(
            (),
            f"the top level is {show_value(doc.data)}, not a mapping; write `hosts:` (nodeagent form) "
            "or `all:` (Ansible form)",
        )
    return doc


def _check_tree(doc: Document) -> None:
    """Before the data is built (PyYAML would keep the last of two equal keys and drop the first
    quietly): every key is text and appears once per mapping, and no key is a password."""
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
            if name.lower() in _PASSWORD_KEYS:
                doc.fail(
                    (*loc, name),
                    "no passwords in the inventory: use a key (identity_file) or ssh-agent",
                    line,
                )
            if name in first:
                doc.fail((*loc, name), f"duplicate key (first on line {first[name]}); keep one", line)
            first[name] = line
            walk(value, (*loc, name))

    walk(doc.root, ())
