"""What nodeagent's SSH connections need of paramiko itself: the policies for a host key that is not
in known_hosts, and a faster MAC comparison. paramiko loads here, with the first connection
(nodeagent.cluster.ssh imports this module then), never with `nodeagent check` on one node."""

from __future__ import annotations

import hmac
import threading
from pathlib import Path

import paramiko

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


class AcceptNew(paramiko.MissingHostKeyPolicy):
    """Record a host's first key in `path` (a changed key still fails: paramiko raises
    BadHostKeyException before any policy is asked)."""

    _lock = threading.Lock()  # hosts connect in parallel; appends to one file must not interleave

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(line)
