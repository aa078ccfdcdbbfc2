"""What an inventory is made of: HostSpec and Inventory (what loading one gives), the pydantic schema
of a host's connection settings and of the native form (`defaults:`, `hosts:`, `groups:`), and the
step from checked settings to a HostSpec.

Apart from nodeagent.cluster.inventory.load so that both forms, the native loader there and the Ansible
reader (nodeagent.cluster.inventory.ansible), build hosts from the same schema without importing
each other. HostSpec and Inventory are re-exported by nodeagent.cluster.inventory.load, where callers
import them from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from nodeagent.cluster.inventory.hostnames import check_host, check_jump_host, check_user
from nodeagent.core.yamldoc import show_value

__all__ = [
    "Connection",
    "ConnectionSettings",
    "DefaultSettings",
    "HostEntry",
    "HostSpec",
    "Inventory",
    "LoadedInventory",
    "NativeDocument",
    "local_path",
    "make_spec",
]


# How nodeagent reaches a host: "ssh", or "local": the host is this machine, its commands run here
# in a shell of their own (no sshd, no SSH settings), as Ansible's `ansible_connection: local`.
Connection = Literal["ssh", "local"]


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
    connection: Connection = "ssh"
    # hash=False: a dict cannot be hashed, and HostSpec stays usable as a dict key or set member.
    vars: Mapping[str, str] = field(default_factory=dict, hash=False)  # free-form, values as strings
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[HostSpec, ...]
    source: str  # file path, or "--hosts EXPR"
    known_hosts: str | None = None  # defaults.known_hosts: a known_hosts file to verify against


def _check_line(value: str) -> str:
    """Commands and paths are quoted by whoever uses them, but must be one non-empty line."""
    if not value.strip():
        raise ValueError("must not be empty")
    if any(c in value for c in "\0\n\r"):
        raise ValueError(f"must be one line without NUL characters (got {show_value(value)})")
    return value


def local_path(value: str, base: Path | None) -> str:
    """`value` with '~' expanded and, when relative, taken from `base` (None: the current directory)."""
    path = Path(value).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return str(path)


_HostName = Annotated[str, AfterValidator(check_host)]
_UserName = Annotated[str, AfterValidator(check_user)]
_JumpHost = Annotated[str, AfterValidator(check_jump_host)]
_Line = Annotated[str, AfterValidator(_check_line)]
_Port = Annotated[int, Field(ge=1, le=65535)]
_Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ConnectionSettings(BaseModel):
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
    connection: Connection | None = None


_CONNECTION_FIELDS = tuple(ConnectionSettings.model_fields)


class DefaultSettings(ConnectionSettings):
    known_hosts: _Line | None = None


class HostEntry(ConnectionSettings):
    name: _HostName
    host: _HostName | None = None
    vars: dict[str, Any] | None = None


class NativeDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    defaults: dict[str, Any] | None = None
    hosts: list[Any]  # each a hostlist expression or a host mapping, checked one by one
    groups: dict[str, list[str]] | None = None


def make_spec(
    name: str,
    address: str,
    entry: ConnectionSettings,
    defaults: ConnectionSettings,
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
        values["identity_file"] = local_path(values["identity_file"], base)
    return HostSpec(name=name, address=address, vars=variables, groups=tuple(sorted(groups)), **values)


@dataclass
class LoadedInventory:
    """What one form's loader found, before --limit chooses among the hosts."""

    hosts: list[HostSpec]
    members: dict[str, list[str]]  # group -> host names, for limit
    known_hosts: str | None = None
