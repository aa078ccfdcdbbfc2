"""The cluster inventory: which nodes `nodeagent check --cluster hosts.yml` (or `--hosts EXPR`) visits
and how to reach each one over SSH.

Two YAML forms, told apart by their top level:

- nodeagent's own (`defaults:`, `hosts:`, `groups:`), checked by the pydantic models below;
- an Ansible YAML inventory (`all:`, or top-level groups with `hosts:`/`children:`/`vars:`), read with
  Ansible's rules for ranges, group nesting and variable precedence.

Every problem is one UsageError line `<file>:<line>: <field path>: <problem>; <what to do>`. Lines come
from PyYAML's composed node tree (the data is constructed from that same tree), so a pydantic error
location or an Ansible variable's origin can be turned back into the line that wrote it.

Relative paths (identity_file, known_hosts) in the native form are taken from the inventory's folder,
so the file works whatever the current directory; in the Ansible form they are left as written
(Ansible reads them from the current directory).
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import itertools
import json
import math
import re
import shlex
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from nodeagent.errors import UsageError

__all__ = ["HostSpec", "Inventory", "expand_hostlist", "from_hostlist", "load_inventory"]


@dataclass(frozen=True)
class HostSpec:
    """One node and how to reach it."""

    name: str  # unique inventory name, shown in reports
    address: str  # what to connect to (ansible_host / host: / the name itself)
    port: int | None = None  # None: leave it to ~/.ssh/config (Fabric reads it), else 22
    user: str | None = None
    identity_file: str | None = None  # '~' expanded
    # OpenSSH sets no connect timeout: a dead node waits out the kernel's SYN retries (tcp_syn_retries=6,
    # about 127 s, https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html), holding a worker.
    connect_timeout: float = 10.0  # seconds
    # A check run takes seconds; the limit stops one hung node (e.g. nvidia-smi stuck in D state) from
    # stalling the whole fleet report.
    command_timeout: float = 120.0  # seconds
    jump_host: str | None = None  # "user@host:port" form accepted, passed to Fabric as gateway
    nodeagent: str = "nodeagent"  # remote command used by --remote-agent / tune / bench
    python: str = "python3"  # remote interpreter for the agentless snapshot pull
    # hash=False: a dict cannot be hashed, and HostSpec stays usable as a dict key or set member.
    vars: Mapping[str, str] = field(default_factory=dict, hash=False)  # free-form, values as strings
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[HostSpec, ...]
    source: str  # file path, or "--hosts EXPR"
    known_hosts: str | None = None  # defaults.known_hosts: a known_hosts file to verify against


# ---------------------------------------------------------------------------------------------------
# Names: host names, addresses, user names, one-line strings
# ---------------------------------------------------------------------------------------------------

# RFC 1123 §2.1 (https://www.rfc-editor.org/rfc/rfc1123#section-2.1): labels of letters, digits and
# '-', 1 to 63 characters, not starting or ending with '-'; at most 253 characters in all. The same
# section keeps the last label from being all digits so a name cannot be mistaken for an address: a
# resolver reads "10.0.0.256" or "123" as an (odd) IPv4 address, not as a name.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# An IPv6 zone id ("fe80::1%eth0") is an interface name; ipaddress accepts any text there.
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# useradd(8), CAVEATS (https://man7.org/linux/man-pages/man8/useradd.8.html); re.ASCII keeps
# IGNORECASE from matching look-alikes such as the Kelvin sign for 'k'.
_USER = re.compile(r"[a-z_][a-z0-9_.-]*[$]?", re.IGNORECASE | re.ASCII)
# Group names end up in a comma-separated limit, so no commas, spaces or brackets.
_GROUP = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _is_host(text: str) -> bool:
    """A hostname (RFC 1123), an IPv4 or an IPv6 address: nothing a shell or ssh could read as more."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        zone = getattr(address, "scope_id", None)
        return zone is None or bool(_ZONE.fullmatch(zone))
    labels = text.split(".")
    return len(text) <= 253 and all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


def _check_host(value: str) -> str:
    if not _is_host(value):
        raise ValueError(
            f"{value!r} is not a valid host name or address; use letters, digits, '-' and '.' "
            "(RFC 1123), or an IP address"
        )
    return value


def _check_user(value: str) -> str:
    if not _USER.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid user name; use letters, digits, '_', '.' and '-', "
            "starting with a letter or '_'"
        )
    return value


def _check_jump_host(value: str) -> str:
    """host, user@host, host:port or user@host:port, split the way Fabric's derive_shorthand does
    (fabric/connection.py): the last '@' ends the user, and a single ':' starts the port (more than
    one ':' is an IPv6 address without a port)."""
    user, at, hostport = value.rpartition("@")
    if at:
        try:
            _check_user(user)
        except ValueError as e:
            raise ValueError(f"jump host {value!r}: {e}") from None
    host, port = hostport, None
    if hostport.count(":") == 1:
        host, port = hostport.split(":")
    if not _is_host(host):
        raise ValueError(
            f"{host!r} is not a valid host name or address; write the jump host as host, "
            "user@host or user@host:port"
        )
    if port is not None and not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
        raise ValueError(f"jump host {value!r}: the port must be an integer between 1 and 65535")
    return value


def _check_line(value: str) -> str:
    """Commands and paths are quoted by whoever uses them, but must be one non-empty line."""
    if not value.strip():
        raise ValueError("must not be empty")
    if any(c in value for c in "\0\n\r"):
        raise ValueError(f"must be one line without NUL characters (got {_shown(value)})")
    return value


def _local_path(value: str, base: Path | None) -> str:
    path = Path(value).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return str(path)


# ---------------------------------------------------------------------------------------------------
# Hostlists: Slurm's node[01-04,07] and Ansible's node[01:04]
# ---------------------------------------------------------------------------------------------------

# python-hostlist's MAX_SIZE (https://www.nsc.liu.se/~kent/python-hostlist/): a typo such as
# node[1-10000000] should be an error, not minutes of work and gigabytes of names.
MAX_HOSTS = 100_000


def _split_outside_brackets(text: str) -> list[str]:
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


def _ansible_bracket(inside: str) -> list[str]:
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


def _expand_brackets(name: str, bracket: Callable[[str], list[str]]) -> list[str]:
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
    for item in _split_outside_brackets(expr):
        try:
            if not item.strip():
                raise ValueError("an empty name between commas")
            names += _expand_brackets(item.strip(), _slurm_bracket)
            if len(names) > MAX_HOSTS:
                raise ValueError(f"expands to more than {MAX_HOSTS} names")
        except ValueError as e:
            raise UsageError(
                f"hostlist {expr!r}: {e}; write names like node01,node02 or node[01-04,07]"
            ) from None
    return names


def _ansible_host_pattern(pattern: str) -> tuple[str, int | None]:
    """'node01:2222' -> ('node01', 2222), as Ansible's parse_address reads a host key; a ':' inside a
    range bracket or in an IPv6 address is not a port."""
    if _is_host(pattern):
        return pattern, None
    head, colon, tail = pattern.rpartition(":")
    if colon and tail.isdigit() and tail.isascii() and head.count("[") == head.count("]"):
        outside = re.sub(r"\[[^\]]*\]", "", head)
        if ":" not in outside:
            if head.startswith("[") and head.endswith("]") and _is_host(head[1:-1]):
                head = head[1:-1]  # [fe80::1]:22
            return head, int(tail)
    return pattern, None


# ---------------------------------------------------------------------------------------------------
# The document: YAML nodes for lines, constructed data for values
# ---------------------------------------------------------------------------------------------------

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


def _format_loc(loc: Loc) -> str:
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


def _line_at(root: yaml.Node, loc: Loc) -> int:
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


def _shown(value: Any) -> str:
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


def _did_you_mean(word: str, known: Iterable[str], what: str) -> str:
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


_M = TypeVar("_M", bound=BaseModel)


@dataclass
class _Doc:
    source: str
    root: yaml.Node
    data: Any
    base: Path | None  # the folder relative paths are taken from, None: the current directory

    def fail(self, loc: Loc, problem: str, line: int | None = None) -> NoReturn:
        where = f"{self.source}:{line if line is not None else _line_at(self.root, loc)}"
        raise UsageError(f"{where}: {_format_loc(loc)}: {problem}" if loc else f"{where}: {problem}")

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
                errors, key=lambda pair: (_line_at(self.root, pair[0]), pair[1]["type"] == "missing")
            )
            self.fail(loc, _problem(err, model))

    def expand(self, expr: str, loc: Loc) -> list[str]:
        try:
            names = expand_hostlist(expr)
        except UsageError as e:
            self.fail(loc, str(e))
        for name in names:
            try:
                _check_host(name)
            except ValueError as e:
                self.fail(loc, str(e))
        return names

    def text(self, value: Any, loc: Loc) -> str:
        try:
            return _var_text(value)
        except ValueError:  # json.dumps of a YAML alias that contains itself
            self.fail(loc, "the value refers to itself (a YAML alias loop); write it out")


def _read(path: Path) -> _Doc:
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
    doc = _Doc(source, root, None, path.parent)
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
            f"the top level is {_shown(doc.data)}, not a mapping; write `hosts:` (nodeagent form) "
            "or `all:` (Ansible form)",
        )
    return doc


def _check_tree(doc: _Doc) -> None:
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


# ---------------------------------------------------------------------------------------------------
# The native form's schema
# ---------------------------------------------------------------------------------------------------

_HostName = Annotated[str, AfterValidator(_check_host)]
_UserName = Annotated[str, AfterValidator(_check_user)]
_JumpHost = Annotated[str, AfterValidator(_check_jump_host)]
_Line = Annotated[str, AfterValidator(_check_line)]
_Port = Annotated[int, Field(ge=1, le=65535)]
_Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]

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


class _Connection(BaseModel):
    """The settings `defaults:` and a host mapping share; None: not set here."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    port: _Port | None = None
    user: _UserName | None = None
    identity_file: _Line | None = None
    connect_timeout: _Seconds | None = None
    command_timeout: _Seconds | None = None
    jump_host: _JumpHost | None = None
    nodeagent: _Line | None = None
    python: _Line | None = None


_CONNECTION_FIELDS = tuple(_Connection.model_fields)


class _Defaults(_Connection):
    known_hosts: _Line | None = None


class _HostEntry(_Connection):
    name: _HostName
    host: _HostName | None = None
    vars: dict[str, Any] | None = None


class _NativeDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    defaults: dict[str, Any] | None = None
    hosts: list[Any]  # each a hostlist expression or a host mapping, checked one by one
    groups: dict[str, list[str]] | None = None


def _problem(err: Any, model: type[BaseModel]) -> str:
    """One pydantic error in the words of this file's schema."""
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "extra_forbidden":
        return f"unknown key; {_did_you_mean(str(loc[-1]), model.model_fields, 'keys')}"
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
    return f"{expect} (got {_shown(err['input'])})"


def _spec(
    name: str,
    address: str,
    entry: _Connection,
    defaults: _Connection,
    variables: dict[str, str],
    groups: Iterable[str],
    base: Path | None,
) -> HostSpec:
    """The host's own setting, else the default's, else HostSpec's."""
    values: dict[str, Any] = {}
    for key in _CONNECTION_FIELDS:
        value = getattr(entry, key)
        value = getattr(defaults, key) if value is None else value
        if value is not None:
            values[key] = value
    if "identity_file" in values:
        values["identity_file"] = _local_path(values["identity_file"], base)
    return HostSpec(name=name, address=address, vars=variables, groups=tuple(sorted(groups)), **values)


@dataclass
class _Loaded:
    hosts: list[HostSpec]
    members: dict[str, list[str]]  # group -> host names, for limit
    known_hosts: str | None = None


def _under(prefix: Loc) -> Callable[[Loc], Loc]:
    return lambda loc: (*prefix, *loc)


def _load_native(doc: _Doc) -> _Loaded:
    data: dict[str, Any] = doc.data
    if "hosts" in data and not data["hosts"]:
        doc.fail(("hosts",), "lists no hosts; add names, hostlist expressions like node[01-04] or mappings")
    top = doc.validate(_NativeDoc, data, _under(()))
    defaults = doc.validate(_Defaults, top.defaults or {}, _under(("defaults",)))
    known_hosts = None if defaults.known_hosts is None else _local_path(defaults.known_hosts, doc.base)

    found: dict[str, tuple[str, _Connection, dict[str, str], Loc]] = {}  # name -> address, entry, ...
    for i, item in enumerate(top.hosts):
        loc: Loc = ("hosts", i)
        listed: list[tuple[str, str, _Connection, dict[str, str]]]
        if isinstance(item, str):
            listed = [(name, name, _Connection(), {}) for name in doc.expand(item, loc)]
        elif isinstance(item, dict):
            entry = doc.validate(_HostEntry, item, _under(loc))
            variables = {k: doc.text(v, (*loc, "vars", k)) for k, v in (entry.vars or {}).items()}
            listed = [(entry.name, entry.host or entry.name, entry, variables)]
        else:
            doc.fail(
                loc,
                "must be a host name, a hostlist expression like node[01-04] or a mapping with name: "
                f"(got {_shown(item)})",
            )
        for name, address, entry_, variables in listed:
            if name in found:
                first = found[name][3]
                doc.fail(
                    loc,
                    f"duplicate host {name!r}, first listed on line {_line_at(doc.root, first)} "
                    f"({_format_loc(first)}); list each host once",
                )
            found[name] = (address, entry_, variables, loc)

    members: dict[str, list[str]] = {"all": list(found)}
    host_groups: dict[str, set[str]] = {name: set() for name in found}
    for group, exprs in (top.groups or {}).items():
        if not _GROUP.fullmatch(group):
            doc.fail(("groups", group), "is not a valid group name; use letters, digits, '_', '.' and '-'")
        members.setdefault(group, [])
        for j, expr in enumerate(exprs):
            for name in doc.expand(expr, ("groups", group, j)):
                if name not in found:
                    doc.fail(
                        ("groups", group, j),
                        f"unknown host {name!r}; list it under hosts: first "
                        f"({_did_you_mean(name, found, 'hosts')})",
                    )
                if group not in host_groups[name]:
                    host_groups[name].add(group)
                    members[group].append(name)
    hosts = [
        _spec(name, address, entry, defaults, variables, host_groups[name], doc.base)
        for name, (address, entry, variables, _) in found.items()
    ]
    return _Loaded(hosts, members, known_hosts)


# ---------------------------------------------------------------------------------------------------
# The Ansible form
# ---------------------------------------------------------------------------------------------------

# Ansible variable -> HostSpec field. Where two spellings of one setting are set for a host, the one
# listed first wins (the current name over the pre-2.0 ansible_ssh_* one).
_ANSIBLE_FIELDS = {
    "ansible_host": "host",
    "ansible_ssh_host": "host",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_ssh_private_key_file": "identity_file",
    "ansible_private_key_file": "identity_file",
    "ansible_ssh_timeout": "connect_timeout",
    "ansible_timeout": "connect_timeout",
    "ansible_python_interpreter": "python",
}
# Read for a ProxyJump, and kept in vars too: the rest of what they say is not used.
_SSH_ARGS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
_GROUP_KEYS = ("hosts", "children", "vars")
_UNGROUPED = ("all", "ungrouped")
# ansible_python_interpreter values that ask Ansible to find the interpreter, not name one
# (https://docs.ansible.com/ansible/latest/reference_appendices/interpreter_discovery.html).
_DISCOVERY = frozenset(
    {"auto", "auto_silent", "auto_legacy", "auto_legacy_silent"}
)  # Ansible's implicit groups, not listed in HostSpec.groups


def _is_ansible(data: dict[str, Any]) -> bool:
    if "all" in data:
        return True
    if data.keys() & {"defaults", "hosts", "groups"}:
        return False
    return any(isinstance(v, dict) and v.keys() & set(_GROUP_KEYS) for v in data.values())


def _proxy_jump(args: str) -> str | None:
    """The jump host of `-J X`, `-JX`, `-o ProxyJump=X` or `-o 'ProxyJump X'` in ssh arguments."""
    words = shlex.split(args)
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word.startswith("-J"):
            return word[2:] or following or None
        if word.startswith("-o"):
            option = word[2:] or following
            key, _, value = option.replace("=", " ", 1).partition(" ")
            if key.lower() == "proxyjump" and value.strip().lower() != "none":
                return value.strip() or None
    return None


@dataclass
class _Group:
    name: str
    loc: Loc
    hosts: list[str] = field(default_factory=list)
    children: dict[str, Loc] = field(default_factory=dict)  # child -> where it is named
    parents: set[str] = field(default_factory=set)
    vars: dict[str, tuple[Any, Loc]] = field(default_factory=dict)


class _AnsibleReader:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc
        self.groups: dict[str, _Group] = {}
        self.host_vars: dict[str, dict[str, tuple[Any, Loc]]] = {}  # in order of first appearance
        self.host_loc: dict[str, Loc] = {}

    def load(self) -> _Loaded:
        for name, body in self.doc.data.items():
            self._group(name, body, (name,))
        self.groups.setdefault("all", _Group("all", ()))
        for group in self.groups.values():
            if group.name != "all" and not group.parents:
                group.parents.add("all")
        self._refuse_cycles()
        if not self.host_vars:
            self.doc.fail((), "the Ansible inventory lists no hosts; add them under all: hosts:")
        depth: dict[str, int] = {}
        members: dict[str, list[str]] = {name: [] for name in self.groups}
        hosts = []
        for name in self.host_vars:
            direct = [g.name for g in self.groups.values() if name in g.hosts]
            groups = self._with_ancestors(direct) | {"all"}
            for group_name in sorted(groups, key=lambda g: self._order(g, depth)):
                members[group_name].append(name)
            if not groups - set(_UNGROUPED):
                members.setdefault("ungrouped", []).append(name)
            hosts.append(self._spec(name, groups, depth))
        return _Loaded(hosts, members)

    def _group(self, name: str, body: Any, loc: Loc) -> _Group:
        doc = self.doc
        if not _GROUP.fullmatch(name):
            doc.fail(loc, "is not a valid group name; use letters, digits, '_', '.' and '-'")
        group = self.groups.setdefault(name, _Group(name, loc))
        if body is None:
            return group
        if not isinstance(body, dict):
            doc.fail(loc, f"a group is a mapping with hosts:, children: or vars: (got {_shown(body)})")
        for key in body:
            if key not in _GROUP_KEYS:
                hint = "; put variables under vars:" if key.startswith("ansible_") else ""
                doc.fail((*loc, key), f"unknown key; {_did_you_mean(key, _GROUP_KEYS, 'keys')}{hint}")
        for key, value in self._mapping(body.get("vars"), (*loc, "vars"), "name: value").items():
            group.vars[key] = (value, (*loc, "vars", key))
        for pattern, variables in self._mapping(
            body.get("hosts"), (*loc, "hosts"), "host: variables"
        ).items():
            self._hosts(group, pattern, variables, (*loc, "hosts", pattern))
        for child, child_body in self._mapping(
            body.get("children"), (*loc, "children"), "group: body"
        ).items():
            self._group(child, child_body, (*loc, "children", child)).parents.add(name)
            group.children.setdefault(child, (*loc, "children", child))
        return group

    def _mapping(self, value: Any, loc: Loc, shape: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.doc.fail(loc, f"must be a mapping of {shape} (got {_shown(value)})")
        return value

    def _hosts(self, group: _Group, pattern: str, variables: Any, loc: Loc) -> None:
        doc = self.doc
        if not isinstance(variables, dict | None):
            doc.fail(
                loc, f"must be a mapping of variables, e.g. ansible_host: 10.0.0.1 (got {_shown(variables)})"
            )
        host_pattern, port = _ansible_host_pattern(pattern)
        try:
            names = _expand_brackets(host_pattern, _ansible_bracket)
        except ValueError as e:
            doc.fail(loc, f"bad host range {pattern!r}: {e}")
        for name in names:
            try:
                _check_host(name)
            except ValueError as e:
                doc.fail(loc, str(e))
            if name not in group.hosts:
                group.hosts.append(name)
            self.host_loc.setdefault(name, loc)
            host_vars = self.host_vars.setdefault(name, {})
            if port is not None:  # as Ansible does: the pattern's port first, the mapping's vars after
                host_vars["ansible_port"] = (port, loc)
            for key, value in (variables or {}).items():
                host_vars[key] = (value, (*loc, key))

    def _refuse_cycles(self) -> None:
        state: dict[str, str] = {}  # name -> "open" while its children are walked, then "done"

        def visit(name: str, trail: list[str]) -> None:
            state[name] = "open"
            for child, loc in self.groups[name].children.items():
                if state.get(child) == "open":
                    cycle = " -> ".join([*trail[trail.index(child) :], child])
                    self.doc.fail(loc, f"group {child!r} contains itself ({cycle}); remove one of these")
                if child not in state:
                    visit(child, [*trail, child])
            state[name] = "done"

        for name in self.groups:
            if name not in state:
                visit(name, [name])

    def _with_ancestors(self, names: Iterable[str]) -> set[str]:
        found: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name not in found:
                found.add(name)
                todo += self.groups[name].parents
        return found

    def _depth(self, name: str, depth: dict[str, int]) -> int:
        if name not in depth:
            parents = self.groups[name].parents
            depth[name] = max((self._depth(p, depth) + 1 for p in parents), default=0)
        return depth[name]

    def _order(self, name: str, depth: dict[str, int]) -> tuple[int, int, str]:
        """Ansible's sort_groups (lib/ansible/inventory/helpers.py): depth, ansible_group_priority,
        name; vars of later groups win, so a child's vars beat its parent's."""
        priority, loc = self.groups[name].vars.get("ansible_group_priority", (1, ()))
        if isinstance(priority, str) and priority.isdigit():
            priority = int(priority)
        if not isinstance(priority, int) or isinstance(priority, bool):
            self.doc.fail(loc, f"must be an integer (got {_shown(priority)})")
        return self._depth(name, depth), priority, name

    def _spec(self, name: str, groups: set[str], depth: dict[str, int]) -> HostSpec:
        merged: dict[str, tuple[Any, Loc]] = {}
        for group in sorted(groups, key=lambda g: self._order(g, depth)):
            merged.update(self.groups[group].vars)
        merged.update(self.host_vars[name])  # host vars win over every group's
        fields: dict[str, Any] = {"name": name}
        locs: dict[str, Loc] = {"name": self.host_loc[name]}
        for var, key in _ANSIBLE_FIELDS.items():
            if key not in fields and var in merged:
                value, loc = merged[var]
                if key == "python" and value in _DISCOVERY:
                    continue
                fields[key], locs[key] = self._field_value(key, value, loc), loc
        for var in _SSH_ARGS:
            if "jump_host" not in fields and isinstance(merged.get(var, (None,))[0], str):
                value, loc = merged[var]
                try:
                    jump = _proxy_jump(value)
                except ValueError as e:
                    self.doc.fail(loc, f"cannot read these ssh arguments ({e}); fix the quoting")
                if jump is not None:
                    fields["jump_host"], locs["jump_host"] = self._field_value("jump_host", jump, loc), loc
        entry = self.doc.validate(_HostEntry, fields, lambda loc: (*locs[str(loc[0])], *loc[1:]))
        variables = {
            var: self.doc.text(value, loc)
            for var, (value, loc) in merged.items()
            if var not in _ANSIBLE_FIELDS and var != "ansible_group_priority"
        }
        shown_groups = groups - set(_UNGROUPED)
        return _spec(name, entry.host or name, entry, _Connection(), variables, shown_groups, None)

    def _field_value(self, key: str, value: Any, loc: Loc) -> Any:
        """Ansible values are often text ('2222', '30'): numbers are read here, the rest is left to
        the schema."""
        if isinstance(value, str) and "{{" in value:
            self.doc.fail(loc, "Jinja templates are not expanded by nodeagent; write the value itself")
        if key == "port" and isinstance(value, str) and value.isdigit() and value.isascii():
            return int(value)
        if key == "connect_timeout" and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return value
            return number if math.isfinite(number) else value
        return value


# ---------------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------------


def _limited(loaded: _Loaded, limit: str | None, source: str) -> tuple[HostSpec, ...]:
    """Like ansible --limit: host names, group names or hostlist expressions, comma-separated."""
    if limit is None:
        return tuple(loaded.hosts)
    by_name = {host.name: host for host in loaded.hosts}
    chosen: set[str] = set()
    items = [item.strip() for item in _split_outside_brackets(limit)]
    if not any(items):
        raise UsageError(
            f"{source}: limit {limit!r} names no hosts; give host or group names, separated by ','"
        )
    for item in filter(None, items):
        if item in loaded.members:
            if not loaded.members[item]:
                raise UsageError(f"{source}: limit {item!r}: the group has no hosts")
            chosen.update(loaded.members[item])
            continue
        try:
            names = expand_hostlist(item) if "[" in item else [item]
        except UsageError as e:
            raise UsageError(f"{source}: limit: {e}") from None
        unknown = [name for name in names if name not in by_name]
        if unknown:
            hint = _did_you_mean(unknown[0], [*by_name, *loaded.members], "hosts and groups")
            raise UsageError(f"{source}: limit: unknown host or group {unknown[0]!r}; {hint}")
        chosen.update(names)
    return tuple(host for host in loaded.hosts if host.name in chosen)


def load_inventory(path: Path, limit: str | None = None) -> Inventory:
    """Native or Ansible YAML form (auto-detected). `limit` = comma list of host names or group
    names (like ansible --limit) restricting the result; unknown names are a UsageError."""
    path = Path(path)
    doc = _read(path)
    loaded = _AnsibleReader(doc).load() if _is_ansible(doc.data) else _load_native(doc)
    return Inventory(_limited(loaded, limit, doc.source), doc.source, loaded.known_hosts)


def from_hostlist(expr: str, **defaults: Any) -> Inventory:
    """For `--hosts 'node[01-04]'`: each expanded name is both name and address. `defaults` are
    HostSpec settings (user, port, identity_file, connect_timeout, command_timeout, jump_host,
    nodeagent, python) and known_hosts; None values are left unset."""
    source = f"--hosts {expr}"
    unknown = sorted(set(defaults) - set(_Defaults.model_fields))
    if unknown:
        raise TypeError(f"from_hostlist() got an unexpected keyword argument {unknown[0]!r}")
    try:
        names = expand_hostlist(expr)
    except UsageError as e:
        raise UsageError(f"--hosts: {e}") from None
    for name in names:
        try:
            _check_host(name)
        except ValueError as e:
            raise UsageError(f"--hosts {expr!r}: {e}") from None
    try:
        settings = _Defaults.model_validate({k: v for k, v in defaults.items() if v is not None})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise UsageError(f"--hosts {expr!r}: {err['loc'][0]}: {_problem(err, _Defaults)}") from None
    known_hosts = None if settings.known_hosts is None else _local_path(settings.known_hosts, None)
    hosts = tuple(_spec(name, name, _Connection(), settings, {}, (), None) for name in dict.fromkeys(names))
    return Inventory(hosts, source, known_hosts)
