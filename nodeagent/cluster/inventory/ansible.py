"""An Ansible YAML inventory (`all:`, or top-level groups with `hosts:`/`children:`/`vars:`), read
with Ansible's rules for host patterns and ranges, group nesting and variable precedence, into the
same HostSpecs as nodeagent's own form.

Apart from nodeagent.cluster.inventory.load because Ansible's form has its own model (groups with
parents, variables merged by depth and priority, ansible_* variables mapped onto HostSpec fields);
the settings end up checked by the same schema (nodeagent.cluster.inventory.schema.HostEntry), with
errors pointing at the line that set the variable. Relative paths are left as written, as Ansible
reads them from the current directory.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nodeagent.cluster.inventory.hostlist import ansible_bracket, count_brackets, expand_brackets
from nodeagent.cluster.inventory.hostnames import GROUP_NAME, check_host, is_host
from nodeagent.cluster.inventory.native import InventoryDocument
from nodeagent.cluster.inventory.schema import (
    ConnectionSettings,
    HostEntry,
    HostSpec,
    LoadedInventory,
    make_spec,
)
from nodeagent.core.yamldoc import Loc, did_you_mean, show_value

__all__ = ["AnsibleReader", "is_ansible"]


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
    "ansible_connection": "connection",
}
# Read for a ProxyJump, and kept in vars too: the rest of what they say is not used.
_SSH_ARGS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
_GROUP_KEYS = ("hosts", "children", "vars")
_UNGROUPED = ("all", "ungrouped")  # Ansible's implicit groups, not listed in HostSpec.groups
# ansible_python_interpreter values that ask Ansible to find the interpreter, not name one
# (https://docs.ansible.com/ansible/latest/reference_appendices/interpreter_discovery.html).
_DISCOVERY = frozenset({"auto", "auto_silent", "auto_legacy", "auto_legacy_silent"})
# ansible_connection: the connection plugins nodeagent can stand in for, by their names and fully
# qualified names (https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html
# #connecting-to-hosts-behavioral-inventory-parameters: "smart, ssh or paramiko" are SSH). Any other
# plugin (docker, winrm, community.*) reaches a host in a way nodeagent does not.
_CONNECTIONS = {
    "ssh": "ssh",
    "smart": "ssh",
    "paramiko": "ssh",
    "paramiko_ssh": "ssh",
    "ansible.builtin.ssh": "ssh",
    "ansible.builtin.paramiko_ssh": "ssh",
    "local": "local",
    "ansible.builtin.local": "local",
}


def is_ansible(data: dict[str, Any]) -> bool:
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


def _ansible_host_pattern(pattern: str) -> tuple[str, int | None]:
    """'node01:2222' -> ('node01', 2222), as Ansible's parse_address reads a host key; a ':' inside a
    range bracket or in an IPv6 address is not a port."""
    if is_host(pattern):
        return pattern, None
    head, colon, tail = pattern.rpartition(":")
    if colon and tail.isdigit() and tail.isascii() and head.count("[") == head.count("]"):
        outside = re.sub(r"\[[^\]]*\]", "", head)
        if ":" not in outside:
            if head.startswith("[") and head.endswith("]") and is_host(head[1:-1]):
                head = head[1:-1]  # [fe80::1]:22
            return head, int(tail)
    return pattern, None


@dataclass
class _Group:
    name: str
    loc: Loc
    hosts: list[str] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # `hosts` as a set: membership in O(1)
    children: dict[str, Loc] = field(default_factory=dict)  # child -> where it is named
    parents: set[str] = field(default_factory=set)
    vars: dict[str, tuple[Any, Loc]] = field(default_factory=dict)


class AnsibleReader:
    """One Document in Ansible's form; `load()` gives its hosts and group members."""

    def __init__(self, doc: InventoryDocument) -> None:
        self.doc = doc
        self.groups: dict[str, _Group] = {}
        self.host_vars: dict[str, dict[str, tuple[Any, Loc]]] = {}  # in order of first appearance
        self.host_loc: dict[str, Loc] = {}

    def load(self) -> LoadedInventory:
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
        direct_groups: dict[str, list[str]] = {}  # host -> the groups listing it (one pass, not one per host)
        for g in self.groups.values():
            for host in g.hosts:
                direct_groups.setdefault(host, []).append(g.name)
        for name in self.host_vars:
            direct = direct_groups.get(name, [])
            groups = self._with_ancestors(direct) | {"all"}
            for group_name in sorted(groups, key=lambda g: self._order(g, depth)):
                members[group_name].append(name)
            if not groups - set(_UNGROUPED):
                members.setdefault("ungrouped", []).append(name)
            hosts.append(self._spec(name, groups, depth))
        return LoadedInventory(hosts, members)

    def _group(self, name: str, body: Any, loc: Loc) -> _Group:
        doc = self.doc
        if not GROUP_NAME.fullmatch(name):
            doc.fail(loc, "is not a valid group name; use letters, digits, '_', '.' and '-'")
        group = self.groups.setdefault(name, _Group(name, loc))
        if body is None:
            return group
        if not isinstance(body, dict):
            doc.fail(loc, f"a group is a mapping with hosts:, children: or vars: (got {show_value(body)})")
        for key in body:
            if key not in _GROUP_KEYS:
                hint = "; put variables under vars:" if key.startswith("ansible_") else ""
                doc.fail((*loc, key), f"unknown key; {did_you_mean(key, _GROUP_KEYS, 'keys')}{hint}")
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
            self.doc.fail(loc, f"must be a mapping of {shape} (got {show_value(value)})")
        return value

    def _hosts(self, group: _Group, pattern: str, variables: Any, loc: Loc) -> None:
        doc = self.doc
        if not isinstance(variables, dict | None):
            doc.fail(
                loc,
                f"must be a mapping of variables, e.g. ansible_host: 10.0.0.1 (got {show_value(variables)})",
            )
        host_pattern, port = _ansible_host_pattern(pattern)
        try:
            count = count_brackets(host_pattern, ansible_bracket)
        except ValueError as e:
            doc.fail(loc, f"bad host range {pattern!r}: {e}")
        doc.spend(count, loc)  # the file's hosts in all, counted before they are listed
        try:
            names = expand_brackets(host_pattern, ansible_bracket)
        except ValueError as e:
            doc.fail(loc, f"bad host range {pattern!r}: {e}")
        for name in names:
            try:
                check_host(name)
            except ValueError as e:
                doc.fail(loc, str(e))
            if name not in group.listed:
                group.listed.add(name)
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
            self.doc.fail(loc, f"must be an integer (got {show_value(priority)})")
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
        entry = self.doc.validate(HostEntry, fields, lambda loc: (*locs[str(loc[0])], *loc[1:]))
        variables = {
            var: self.doc.text(value, loc)
            for var, (value, loc) in merged.items()
            if var not in _ANSIBLE_FIELDS and var != "ansible_group_priority"
        }
        shown_groups = groups - set(_UNGROUPED)
        return make_spec(name, entry.host or name, entry, ConnectionSettings(), variables, shown_groups, None)

    def _field_value(self, key: str, value: Any, loc: Loc) -> Any:
        """Ansible values are often text ('2222', '30'): numbers are read here, the rest is left to
        the schema."""
        if isinstance(value, str) and "{{" in value:
            self.doc.fail(loc, "Jinja templates are not expanded by nodeagent; write the value itself")
        if key == "connection":
            return self._connection(value, loc)
        if key == "port" and isinstance(value, str) and value.isdigit() and value.isascii():
            return int(value)
        if key == "connect_timeout" and isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return value
            return number if math.isfinite(number) else value
        return value

    def _connection(self, value: Any, loc: Loc) -> str:
        """ansible_connection as HostSpec.connection: ssh or local, else the one-line error."""
        if not isinstance(value, str) or value.strip() not in _CONNECTIONS:
            self.doc.fail(
                loc,
                f"connection {show_value(value)} is not supported; nodeagent reaches a host over SSH "
                "(ssh, paramiko, smart) or runs on this machine (local): use one of those, or take "
                "the host out of this inventory",
            )
        return _CONNECTIONS[value.strip()]
