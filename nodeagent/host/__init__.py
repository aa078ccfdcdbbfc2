"""Hosts: the only way nodeagent code touches a machine (local, a recorded snapshot, or SSH)."""

from nodeagent.host.base import CmdResult, Host, command_name, hostname_problem
from nodeagent.host.local import LocalHost
from nodeagent.host.snapshot import SnapshotHost, open_host

__all__ = ["CmdResult", "Host", "LocalHost", "SnapshotHost", "command_name", "hostname_problem", "open_host"]
