"""The inventory file as a YAML document: the inventory's words for nodeagent.yamldoc's errors.

Both inventory forms are read through an InventoryDocument (nodeagent.yamldoc: the node tree for
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

from nodeagent import yamldoc
from nodeagent.cluster.hostlist import expand_hostlist
from nodeagent.cluster.hostnames import check_host
from nodeagent.errors import UsageError
from nodeagent.yamldoc import Loc

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


class InventoryDocument(yamldoc.Document):
    def problem(self, err: Any, model: type[BaseModel]) -> str:
        return schema_problem(err, model)

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


def read_document(path: Path) -> InventoryDocument:
    return yamldoc.read_document(path, WORDING, InventoryDocument)
