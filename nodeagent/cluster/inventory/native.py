"""The inventory file as a YAML document: the inventory's words for nodeagent.core.yamldoc's errors.

Both inventory forms are read through an InventoryDocument (nodeagent.core.yamldoc: the node tree for
lines, the data for values, one-line errors `<file>:<line>: <field path>: <problem>; <what to do>`),
which adds what only an inventory needs: passwords refused anywhere in the file, hostlist
expressions expanded and checked, and variables kept as text. Kept apart from the two forms'
schemas because this part knows YAML, not what a host is.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from nodeagent.cluster.inventory.hostlist import MAX_HOSTS, count_hostlist, expand_hostlist
from nodeagent.cluster.inventory.hostnames import check_host, is_host
from nodeagent.core import yamldoc
from nodeagent.core.errors import UsageError
from nodeagent.core.yamldoc import Loc, show_value

__all__ = ["InventoryDocument", "read_document", "schema_problem"]

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


def _refuse_password(name: str) -> str | None:
    if name.lower() in _PASSWORD_KEYS:
        return "no passwords in the inventory: use a key (identity_file) or ssh-agent"
    return None


WORDING = yamldoc.Wording(
    what="inventory",
    example="hosts.yml",
    empty="list the nodes under hosts:",
    top_level="write `hosts:` (nodeagent form) or `all:` (Ansible form)",
    refuse_key=_refuse_password,
)


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
    "connection": "must be ssh (the default) or local (the host is this machine: no SSH)",
    "vars": "must be a mapping of name: value",
    "defaults": "must be a mapping of setting: value",
    "hosts": "must be a list of host names, hostlist expressions like node[01-04] or mappings with name:",
}


def _expect(loc: Loc) -> str:
    if loc[:1] == ("groups",):
        return (
            "must be a mapping of group name: list of hosts",
            "must be a list of host names or hostlist expressions",
            "must be a host name or hostlist expression",
        )[min(len(loc), 3) - 1]
    names = [part for part in loc if isinstance(part, str)]
    return _EXPECT.get(names[-1] if names else "", "has the wrong type")


def schema_problem(err: Any, model: type[BaseModel]) -> str:
    """One pydantic error in the words of the inventory's schema."""
    return yamldoc.schema_problem(err, model, _expect)


def _data_address(text: str) -> str | None:
    """vars.data_address (nodeagent.cluster.bandwidth.measure: the address the bandwidth test connects to,
    which reaches a remote command line): empty (the SSH address), a host name or an IP address."""
    if text.strip() and not is_host(text.strip()):
        return (
            f"{show_value(text)} is not a host name or IP address; give the address of the host's "
            "data-network interface"
        )
    return None


# Variables nodeagent reads, checked as the inventory loads: name -> problem with the text, or None.
CHECKED_VARS = {"data_address": _data_address}


class InventoryDocument(yamldoc.Document):
    # Host names the file may still list (hostlist.MAX_HOSTS in all, not per expression: sixty
    # lines of node[1-99999] are six million names), counted before each expression is expanded.
    budget: int = MAX_HOSTS

    def problem(self, err: Any, model: type[BaseModel]) -> str:
        return schema_problem(err, model)

    def spend(self, count: int, loc: Loc) -> None:
        """`count` more host names listed; past MAX_HOSTS in the file, the one-line error."""
        if count > self.budget:
            self.fail(
                loc,
                f"the inventory lists more than {MAX_HOSTS:,} host names in all; split it into several "
                "inventories (or use --limit)",
            )
        self.budget -= count

    def expand(self, expr: str, loc: Loc, count: bool = True) -> list[str]:
        """The names of a hostlist expression; `count`: they are hosts listed (not group members),
        spent from the file's budget before they are listed."""
        try:
            total = count_hostlist(expr) if count else 0
            names = [] if total > self.budget else expand_hostlist(expr)
        except UsageError as e:
            self.fail(loc, str(e))
        self.spend(total, loc)
        for name in names:
            try:
                check_host(name)
            except ValueError as e:
                self.fail(loc, str(e))
        return names

    def text(self, value: Any, loc: Loc) -> str:
        """A host or group variable as text; the variables nodeagent itself reads (CHECKED_VARS)
        are checked here, when the inventory loads, rather than once the fleet has run."""
        try:
            text = _var_text(value)
        except ValueError:  # json.dumps of a YAML alias that contains itself
            self.fail(loc, "the value refers to itself (a YAML alias loop); write it out")
        check = CHECKED_VARS.get(str(loc[-1])) if loc else None
        if check is not None:
            problem = check(text)
            if problem:
                self.fail(loc, problem)
        return text


def read_document(path: Path) -> InventoryDocument:
    return yamldoc.read_document(path, WORDING, InventoryDocument)
