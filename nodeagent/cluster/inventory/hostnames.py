"""What the inventory accepts as a host name or address, a user name, a jump host and a group name.

Apart from the inventory's YAML handling because the same rules apply wherever a name comes from (a
YAML file, an Ansible host pattern, `--hosts EXPR`): a name reaches ssh's command line and remote
commands, so anything a shell or ssh could read as more than a name is refused. The checks raise
ValueError with the problem and what to write instead; the caller adds the file, line and field.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["GROUP_NAME", "check_host", "check_jump_host", "check_user", "is_host"]

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
GROUP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def is_host(text: str) -> bool:
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


def check_host(value: str) -> str:
    if not is_host(value):
        raise ValueError(
            f"{value!r} is not a valid host name or address; use letters, digits, '-' and '.' "
            "(RFC 1123), or an IP address"
        )
    return value


def check_user(value: str) -> str:
    if not _USER.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid user name; use letters, digits, '_', '.' and '-', "
            "starting with a letter or '_'"
        )
    return value


def check_jump_host(value: str) -> str:
    """host, user@host, host:port or user@host:port, split the way Fabric's derive_shorthand does
    (fabric/connection.py): the last '@' ends the user, and a single ':' starts the port (more than
    one ':' is an IPv6 address without a port)."""
    user, at, hostport = value.rpartition("@")
    if at:
        try:
            check_user(user)
        except ValueError as e:
            raise ValueError(f"jump host {value!r}: {e}") from None
    host, port = hostport, None
    if hostport.count(":") == 1:
        host, port = hostport.split(":")
    if not is_host(host):
        raise ValueError(
            f"{host!r} is not a valid host name or address; write the jump host as host, "
            "user@host or user@host:port"
        )
    if port is not None and not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
        raise ValueError(f"jump host {value!r}: the port must be an integer between 1 and 65535")
    return value
