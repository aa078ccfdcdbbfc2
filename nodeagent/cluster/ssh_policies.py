"""What nodeagent's SSH connections need of paramiko itself: the policies for a host key that is not
in known_hosts, and a faster MAC comparison. paramiko loads here, with the first connection
(nodeagent.cluster.ssh imports this module then), never with `nodeagent check` on one node."""

from __future__ import annotations

import hmac
from pathlib import Path

import paramiko

from nodeagent.core import safe_write
from nodeagent.core.errors import UsageError

# paramiko compares each received packet's MAC in a Python loop over its bytes
# (paramiko.util.constant_time_bytes_eq, called as util.constant_time_bytes_eq by paramiko.packet):
# a tenth of the controller's SSH CPU per host here. hmac.compare_digest is the standard library's
# constant-time comparison, in C (https://docs.python.org/3/library/hmac.html#hmac.compare_digest).
paramiko.util.constant_time_bytes_eq = hmac.compare_digest  # type: ignore[assignment]  # an overload


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, host: str, key: paramiko.PKey) -> None:
        super().__init__(host)
        self.host = host
        self.key = key


class RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key)


class HostKeyNotRecorded(paramiko.SSHException):
    """A new host key that could not be added to known_hosts: the host is not trusted unrecorded."""


class AcceptNew(paramiko.MissingHostKeyPolicy):
    """Record a host's first key in `path` (a changed key still fails: paramiko raises
    BadHostKeyException before any policy is asked). The file is written by the safe writer: a
    link or anything else than a regular file is refused, and the host with it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}"
        try:
            # ~/.ssh as ssh makes it: private to its user.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            safe_write.append_line(self.path, line)
        except (OSError, UsageError) as e:
            raise HostKeyNotRecorded(f"{hostname}'s new {key.get_name()} key was not recorded: {e}") from None
        client.get_host_keys().add(hostname, key.get_name(), key)
