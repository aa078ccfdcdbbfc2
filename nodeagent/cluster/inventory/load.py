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

This module loads the native form and holds the entry points (load_inventory, from_hostlist, the
limit); the parts live beside it: nodeagent.cluster.inventory.schema (HostSpec, Inventory and the
pydantic models), .inventory_yaml (the document, on nodeagent.core.yamldoc's lines and error messages),
.ansible_inventory (the Ansible form), .hostlist (node[01-04] expressions) and .hostnames (valid
names and addresses).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nodeagent.cluster.inventory.ansible import AnsibleReader, is_ansible
from nodeagent.cluster.inventory.hostlist import expand_hostlist, split_outside_brackets
from nodeagent.cluster.inventory.hostnames import GROUP_NAME, check_host
from nodeagent.cluster.inventory.native import InventoryDocument, read_document, schema_problem
from nodeagent.cluster.inventory.schema import (
    ConnectionSettings,
    DefaultSettings,
    HostEntry,
    HostSpec,
    Inventory,
    LoadedInventory,
    NativeDocument,
    local_path,
    make_spec,
)
from nodeagent.core.errors import UsageError
from nodeagent.core.yamldoc import Loc, did_you_mean, format_loc, line_at, show_value

# HostSpec, Inventory and expand_hostlist are defined beside this module and re-exported here, where
# the rest of nodeagent imports them from.
__all__ = ["HostSpec", "Inventory", "expand_hostlist", "from_hostlist", "load_inventory"]


# ---------------------------------------------------------------------------------------------------
# The native form
# ---------------------------------------------------------------------------------------------------


def _under(prefix: Loc) -> Callable[[Loc], Loc]:
    return lambda loc: (*prefix, *loc)


def _load_native(doc: InventoryDocument) -> LoadedInventory:
    data: dict[str, Any] = doc.data
    if "hosts" in data and not data["hosts"]:
        doc.fail(("hosts",), "lists no hosts; add names, hostlist expressions like node[01-04] or mappings")
    top = doc.validate(NativeDocument, data, _under(()))
    defaults = doc.validate(DefaultSettings, top.defaults or {}, _under(("defaults",)))
    known_hosts = None if defaults.known_hosts is None else local_path(defaults.known_hosts, doc.base)

    found: dict[str, tuple[str, ConnectionSettings, dict[str, str], Loc]] = {}  # name -> address, entry, ...
    for i, item in enumerate(top.hosts):
        loc: Loc = ("hosts", i)
        listed: list[tuple[str, str, ConnectionSettings, dict[str, str]]]
        if isinstance(item, str):
            listed = [(name, name, ConnectionSettings(), {}) for name in doc.expand(item, loc)]
        elif isinstance(item, dict):
            doc.spend(1, loc)
            entry = doc.validate(HostEntry, item, _under(loc))
            variables = {k: doc.text(v, (*loc, "vars", k)) for k, v in (entry.vars or {}).items()}
            listed = [(entry.name, entry.host or entry.name, entry, variables)]
        else:
            doc.fail(
                loc,
                "must be a host name, a hostlist expression like node[01-04] or a mapping with name: "
                f"(got {show_value(item)})",
            )
        for name, address, entry_, variables in listed:
            if name in found:
                first = found[name][3]
                doc.fail(
                    loc,
                    f"duplicate host {name!r}, first listed on line {line_at(doc.root, first)} "
                    f"({format_loc(first)}); list each host once",
                )
            found[name] = (address, entry_, variables, loc)

    members: dict[str, list[str]] = {"all": list(found)}
    host_groups: dict[str, set[str]] = {name: set() for name in found}
    for group, exprs in (top.groups or {}).items():
        if not GROUP_NAME.fullmatch(group):
            doc.fail(("groups", group), "is not a valid group name; use letters, digits, '_', '.' and '-'")
        members.setdefault(group, [])
        for j, expr in enumerate(exprs):
            for name in doc.expand(expr, ("groups", group, j), count=False):
                if name not in found:
                    doc.fail(
                        ("groups", group, j),
                        f"unknown host {name!r}; list it under hosts: first "
                        f"({did_you_mean(name, found, 'hosts')})",
                    )
                if group not in host_groups[name]:
                    host_groups[name].add(group)
                    members[group].append(name)
    hosts = [
        make_spec(name, address, entry, defaults, variables, host_groups[name], doc.base)
        for name, (address, entry, variables, _) in found.items()
    ]
    return LoadedInventory(hosts, members, known_hosts)


# ---------------------------------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------------------------------


def _limited(loaded: LoadedInventory, limit: str | None, source: str) -> tuple[HostSpec, ...]:
    """Like ansible --limit: host names, group names or hostlist expressions, comma-separated."""
    if limit is None:
        return tuple(loaded.hosts)
    by_name = {host.name: host for host in loaded.hosts}
    chosen: set[str] = set()
    items = [item.strip() for item in split_outside_brackets(limit)]
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
            hint = did_you_mean(unknown[0], [*by_name, *loaded.members], "hosts and groups")
            raise UsageError(f"{source}: limit: unknown host or group {unknown[0]!r}; {hint}")
        chosen.update(names)
    return tuple(host for host in loaded.hosts if host.name in chosen)


def load_inventory(path: Path, limit: str | None = None) -> Inventory:
    """Native or Ansible YAML form (auto-detected). `limit` = comma list of host names or group
    names (like ansible --limit) restricting the result; unknown names are a UsageError."""
    path = Path(path)
    doc = read_document(path)
    loaded = AnsibleReader(doc).load() if is_ansible(doc.data) else _load_native(doc)
    return Inventory(_limited(loaded, limit, doc.source), doc.source, loaded.known_hosts)


def from_hostlist(expr: str, **defaults: Any) -> Inventory:
    """For `--hosts 'node[01-04]'`: each expanded name is both name and address. `defaults` are
    HostSpec settings (user, port, identity_file, connect_timeout, command_timeout, jump_host,
    nodeagent, python) and known_hosts; None values are left unset."""
    source = f"--hosts {expr}"
    unknown = sorted(set(defaults) - set(DefaultSettings.model_fields))
    if unknown:
        raise TypeError(f"from_hostlist() got an unexpected keyword argument {unknown[0]!r}")
    try:
        names = expand_hostlist(expr)
    except UsageError as e:
        raise UsageError(f"--hosts: {e}") from None
    for name in names:
        try:
            check_host(name)
        except ValueError as e:
            raise UsageError(f"--hosts {expr!r}: {e}") from None
    try:
        settings = DefaultSettings.model_validate({k: v for k, v in defaults.items() if v is not None})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise UsageError(
            f"--hosts {expr!r}: {err['loc'][0]}: {schema_problem(err, DefaultSettings)}"
        ) from None
    known_hosts = None if settings.known_hosts is None else local_path(settings.known_hosts, None)
    hosts = tuple(
        make_spec(name, name, ConnectionSettings(), settings, {}, (), None) for name in dict.fromkeys(names)
    )
    return Inventory(hosts, source, known_hosts)
