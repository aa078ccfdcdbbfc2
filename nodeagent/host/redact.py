"""`nodeagent snapshot --redact`: identifiers out of a recording, so it can go into a public bug report.

A pure function over the recorded files, links and folders (`redact`): host names, hardware
addresses, IP addresses, UUIDs, GPU UUIDs, InfiniBand GUIDs (and the world-wide names of Fibre
Channel and SAS) and serial numbers are replaced by placeholders that keep each identifier's shape
(a MAC stays six octets with its own separators, an address stays an address), so the parsers read
a redacted tree exactly as the original. The same original always gets the same placeholder within
one recording, whatever its spelling, so cross-references still match: an interface's address in
sysfs and in a command's output, a GUID in sysfs and in ibstat, a pod's UUID in /proc/self/cgroup
and in the cgroup folder's path (paths and link targets are redacted like contents for that reason).
Files are redacted as bytes: one byte that is not UTF-8 (a Latin-1 folder name in
/proc/self/mountinfo or in a command line) must not keep the identifiers of the rest of the file,
and every byte not replaced stays as it was.

Placeholders come from ranges that identify nothing: locally administered MACs (02:00:00:00:00:NN),
the documentation networks 192.0.2.0/24 (RFC 5737) and 2001:db8::/32 (RFC 3849), all-zero UUIDs and
GUIDs but for N. A value already shaped as a placeholder is left as it is and its number is not
handed out again: redacting twice changes nothing, and two originals never share a placeholder.

Standard library only, like the recorder; it runs where `nodeagent snapshot` runs, never on nodes.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from nodeagent.host.base import META_FILE


class Table:
    """The placeholders of one recording: per kind, original (normalised) -> number, 1 upwards in
    order of first sight, skipping the numbers of placeholders already in the input."""

    def __init__(self) -> None:
        self.numbers: dict[str, dict[str, int]] = {}
        self.reserved: dict[str, set[int]] = {}
        self.last: Counter[str] = Counter()
        self.replaced: Counter[str] = Counter()

    def reserve(self, kind: str, n: int) -> None:
        self.reserved.setdefault(kind, set()).add(n)

    def number(self, kind: str, key: str) -> int:
        numbers = self.numbers.setdefault(kind, {})
        if key not in numbers:
            taken = self.reserved.get(kind, set())
            n = self.last[kind] + 1
            while n in taken:
                n += 1
            numbers[key] = self.last[kind] = n
        self.replaced[kind] += 1
        return numbers[key]

    def counts(self, kinds: Iterable[str]) -> dict[str, dict[str, int]]:
        """Per kind: how many distinct values were replaced, and how many occurrences (never which)."""
        return {k: {"values": len(self.numbers.get(k, {})), "occurrences": self.replaced[k]} for k in kinds}


@dataclass(frozen=True)
class Kind:
    """One kind of identifier found by a regular expression: the whole match, or its group `group`
    when the rest is the field that holds it ("<serial>...</serial>"); with `context`, only the
    matches it accepts (the text before says what the value is: "Node GUID: 0x...")."""

    name: str
    pattern: re.Pattern[str]
    key: Callable[[str], str | None]  # the identity of a match; None: it identifies nothing, kept
    number: Callable[[str], int | None]  # N when the match is already placeholder N (kept)
    render: Callable[[int, str], str]  # placeholder N, shaped like the match
    group: int = 0
    context: Callable[[re.Match[str]], bool] | None = None

    def found(self, m: re.Match[str]) -> str | None:
        """The identifier `m` holds, or None when its context says it is none."""
        return m.group(self.group) if self.context is None or self.context(m) else None


def _like(placeholder: str, original: str) -> str:
    """Hex digits in the original's case: "AA:BB:..." stays upper case."""
    upper = any(c.isupper() for c in original) and not any(c.islower() for c in original)
    return placeholder.upper() if upper else placeholder


# -- hardware addresses: 6-octet MACs, 8-octet EUI-64, 20-octet IPoIB ------------------------------

# Colons (sysfs, ip, ethtool) or dashes (the kernel's %pMF, lspci's Device Serial Number, and
# PXELINUX's BOOTIF=01-88-99-aa-bb-cc-dd in /proc/cmdline, whose "01-" is the ARP hardware type: left
# out, so the address gets the placeholder it has in /sys/class/net).
# The first octet comes first and the checks on what precedes it after (lookbehinds reaching past
# it): a pattern that starts with a character set is scanned for three times faster.
_MAC = re.compile(
    r"[0-9A-Fa-f]{2}(?:"
    r"(?<![0-9A-Fa-f:]..)(?::[0-9A-Fa-f]{2}){5,19}(?![0-9A-Fa-f:])"
    r"|(?<![0-9A-Fa-f-]..)(?<!BOOTIF=..)(?:-[0-9A-Fa-f]{2}){5,19}(?![0-9A-Fa-f-])"
    r"|(?<=BOOTIF=[0-9A-Fa-f]{2}-..)(?:-[0-9A-Fa-f]{2}){5,19}(?![0-9A-Fa-f-])"
    r")"
)


def _octets(found: str) -> list[str]:
    return found.lower().replace("-", ":").split(":")


def mac_key(found: str) -> str | None:
    octets = _octets(found)
    if all(o == "00" for o in octets) or all(o == "ff" for o in octets):
        return None  # no device: the all-zero and broadcast addresses
    if len(octets) == 20 and octets[4] == "ff":
        return None  # IPoIB's broadcast (a queue pair and a multicast GID): the same on every fabric
    return ":".join(octets)  # one address, one placeholder, whichever separator it was written with


def mac_number(found: str) -> int | None:
    """02:00:...:00:HH:LL, the locally administered unicast placeholders (N below 65536)."""
    octets = _octets(found)
    if octets[0] != "02" or any(o != "00" for o in octets[1:-2]):
        return None
    n = int(octets[-2] + octets[-1], 16)
    return n or None


def mac_render(n: int, found: str) -> str:
    separator = "-" if "-" in found else ":"
    octets = bytes([0x02]) + n.to_bytes(len(_octets(found)) - 1, "big")
    return _like(separator.join(f"{b:02x}" for b in octets), found)


MAC = Kind("mac", _MAC, mac_key, mac_number, mac_render)


# -- UUIDs, and NVIDIA's GPU-<uuid> --------------------------------------------------------------

_UUID_TEXT = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?![0-9A-Fa-f])"
# No boundary before: Kubernetes' cgroupfs paths glue a pod's UUID to "pod" (pod3f2a...-...).
_UUID = re.compile(r"(?<!GPU-)" + _UUID_TEXT)
_GPU_UUID = re.compile(r"GPU-" + _UUID_TEXT)
_UUID_PLACEHOLDER = re.compile(r"00000000-0000-4000-8000-(\d{12})")


def uuid_key(found: str) -> str | None:
    return None if set(found) <= {"0", "-"} else found.lower()  # the nil UUID names nothing


def uuid_number(found: str) -> int | None:
    m = _UUID_PLACEHOLDER.fullmatch(found)
    return (int(m.group(1)) or None) if m else None


def uuid_render(n: int, found: str) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"  # a version 4, variant 1 UUID: parsers accept it


def gpu_uuid_key(found: str) -> str | None:
    return uuid_key(found[4:])


def gpu_uuid_number(found: str) -> int | None:
    return uuid_number(found[4:])


def gpu_uuid_render(n: int, found: str) -> str:
    return "GPU-" + uuid_render(n, found[4:])


GPU_UUID = Kind("gpu_uuid", _GPU_UUID, gpu_uuid_key, gpu_uuid_number, gpu_uuid_render)
UUID = Kind("uuid", _UUID, uuid_key, uuid_number, uuid_render)


# -- GUIDs: InfiniBand's, and the world-wide names of Fibre Channel and SAS ------------------------

# sysfs and ibv_devinfo: node_guid, sys_image_guid, port GUIDs as "0c42:a103:00a1:b2c3".
_GUID = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){3}(?![0-9A-Fa-f:])")
# ibstat ("Node GUID: 0x0c42a10300a1b2c3"), nvidia-smi's GPU PDI, FC and SAS names in logs and in
# FC-NVMe addresses (nn-0x...:pn-0x...). Only after such a label, on the same line: a bare 64-bit
# hex number is a register, a page address or a mask far more often than an identifier. The number
# is found first and its label looked for after: a pattern starting with the labels is 50x slower.
_GUID_0X = re.compile(r"0[xX](?<![0-9A-Za-z_]..)[0-9A-Fa-f]{16}(?![0-9A-Za-z_])")
_GUID_LABEL = re.compile(r"(?i:guid|pdi|ww[pn]?n|sas_addr(?:ess)?|\b[np]n-)[ \t:=(>]*\Z")
_LABEL_REACH = 64  # nvidia-smi -q aligns its values at column 40: "    GPU PDI      ...      : 0x..."
# sysfs attributes that hold one such name and nothing else.
_GUID_FILE = re.compile(r"/(?:\w*guid|node_name|port_name|fabric_name|\w*sas_address|enclosure_identifier)$")
_GUID_WHOLE = re.compile(r"\A[ \t]*(0[xX][0-9A-Fa-f]{16})\s*\Z")
_GUID_PLACEHOLDER = re.compile(r"0000:0000:(\d{4}):(\d{4})|0[xX]00000000(\d{8})")


def _labelled(m: re.Match[str]) -> bool:
    return _GUID_LABEL.search(m.string, max(0, m.start() - _LABEL_REACH), m.start()) is not None


def _guid_digits(found: str) -> str:
    return found.lower().removeprefix("0x").replace(":", "")


def guid_key(found: str) -> str | None:
    """The 16 digits: one GUID, one placeholder, in sysfs's spelling and in ibstat's."""
    digits = _guid_digits(found)
    return None if set(digits) <= {"0"} or set(digits) <= {"f"} else digits  # unset, or all ones


def guid_number(found: str) -> int | None:
    m = _GUID_PLACEHOLDER.fullmatch(found)
    return (int("".join(g for g in m.groups() if g)) or None) if m else None


def guid_render(n: int, found: str) -> str:
    digits = f"{n:016d}"
    if found[:2].lower() == "0x":
        return found[:2] + digits
    return ":".join(digits[i : i + 4] for i in range(0, 16, 4))


GUID = Kind("guid", _GUID, guid_key, guid_number, guid_render)
GUID_0X = Kind("guid", _GUID_0X, guid_key, guid_number, guid_render, context=_labelled)
GUID_FILE = Kind("guid", _GUID_WHOLE, guid_key, guid_number, guid_render, group=1)


# -- IPv6: port GIDs of RDMA devices, addresses in command lines and mounts ----------------------

# Two colons at least, up to 39 characters, not glued to a word or a dotted quad (::ffff:10.0.0.1 is
# left to the IPv4 pass, so that address gets the same placeholder as elsewhere). Bounded: no
# backtracking blow-up on long runs of hex and colons.
_IPV6 = re.compile(r"(?<![\w:.])(?=[0-9A-Fa-f]*:[0-9A-Fa-f]*:)[0-9A-Fa-f:]{2,39}(?![\w:]|\.\w)")
_DOCUMENTATION_V6 = ipaddress.IPv6Network("2001:db8::/32")
_EMPTY_GID = ipaddress.IPv6Address("fe80::")  # an unused entry of an RDMA port's GID table
_PLACEHOLDERS_V6 = ipaddress.IPv6Network("2001:db8::/96")


def _ipv6(found: str) -> ipaddress.IPv6Address | None:
    if _MAC.fullmatch(found):
        return None  # eight two-digit groups: a hardware address (EUI-64), the MAC pass's
    try:
        return ipaddress.IPv6Address(found)
    except ValueError:
        return None


def ipv6_key(found: str) -> str | None:
    address = _ipv6(found)
    if address is None or address.is_loopback or address.is_unspecified or address == _EMPTY_GID:
        return None
    if address in _DOCUMENTATION_V6:
        return None
    return address.compressed


def ipv6_number(found: str) -> int | None:
    address = _ipv6(found)
    if address is None or address not in _PLACEHOLDERS_V6:
        return None
    return int(address) - int(_PLACEHOLDERS_V6.network_address) or None


def ipv6_render(n: int, found: str) -> str:
    address = _PLACEHOLDERS_V6.network_address + n
    # A GID file holds the full form (fe80:0000:0000:...): keep whichever form the original had.
    text = address.exploded if len(found) == 39 else address.compressed
    return _like(text, found)


IPV6 = Kind("ipv6", _IPV6, ipv6_key, ipv6_number, ipv6_render)


# -- IPv4 -----------------------------------------------------------------------------------------

# Not after "Release " or "version ": four-part version numbers (QLogic's "OFED Release 1.5.4.1").
_IPV4 = re.compile(r"(?<![\w.])(?<![Rr]elease )(?<![Vv]ersion )(?:\d{1,3}\.){3}\d{1,3}(?!\w|\.\d)")
# TEST-NET-1, -2, -3 (RFC 5737), then the benchmarking network (RFC 2544) for very many addresses.
_V4_BLOCKS = (
    (ipaddress.IPv4Network("192.0.2.0/24"), 254),
    (ipaddress.IPv4Network("198.51.100.0/24"), 254),
    (ipaddress.IPv4Network("203.0.113.0/24"), 254),
    (ipaddress.IPv4Network("198.18.0.0/15"), (1 << 17) - 2),
)


def _ipv4(found: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(found)  # refuses 300.1.1.1 and leading zeros (version strings)
    except ValueError:
        return None


def _netmask(address: ipaddress.IPv4Address) -> bool:
    """255.255.255.0 and friends (0.0.0.0 and 255.255.255.255 included): masks, not hosts."""
    inverted = ~int(address) & 0xFFFFFFFF
    return inverted & (inverted + 1) == 0


def ipv4_key(found: str) -> str | None:
    address = _ipv4(found)
    if address is None or address.is_loopback or _netmask(address):
        return None
    if any(address in block for block, _ in _V4_BLOCKS):
        return None  # documentation and benchmarking addresses (the placeholders'): nobody's
    return str(address)


def ipv4_number(found: str) -> int | None:
    address = _ipv4(found)
    if address is None:
        return None
    base = 0
    for block, size in _V4_BLOCKS:
        offset = int(address) - int(block.network_address)
        if address in block and 1 <= offset <= size:
            return base + offset
        base += size
    return None


def ipv4_render(n: int, found: str) -> str:
    for block, size in _V4_BLOCKS:
        if n <= size:
            return str(block.network_address + n)
        n -= size
    raise ValueError("more IPv4 addresses than placeholders")


IPV4 = Kind("ipv4", _IPV4, ipv4_key, ipv4_number, ipv4_render)

# Order matters where shapes overlap: GPU-<uuid> before the bare UUID, hardware addresses (whose
# eight-octet form is also valid IPv6) before IPv6, and IPv6 before the IPv4 tail of ::ffff:a.b.c.d.
PATTERN_KINDS = (GPU_UUID, UUID, MAC, GUID, GUID_0X, IPV6, IPV4)


# -- host names: read where the system keeps them, then replaced wherever they appear -------------

_HOSTNAME_FILES = ("/proc/sys/kernel/hostname", "/etc/hostname")
# The kernel's default before anything set a name, and loopback names: they identify nobody.
_NOT_A_HOSTNAME = {"", "(none)", "localhost", "localhost.localdomain", "localhost6"}
_HOSTNAME_PLACEHOLDER = re.compile(r"node-(\d+)")


def hostnames(texts: Mapping[str, str | None]) -> list[str]:
    """The recording's own names: the kernel's, /etc/hostname's and the snapshot metadata's."""
    found = [(texts.get(p) or "").strip().split("\n")[0].strip() for p in _HOSTNAME_FILES]
    try:
        meta = json.loads(texts.get("/" + META_FILE) or "{}")
    except ValueError:
        meta = {}
    found.append(str(meta.get("hostname") or "") if isinstance(meta, dict) else "")
    return [name for name in found if name.lower() not in _NOT_A_HOSTNAME]


def hostname_key(found: str) -> str | None:
    # gpu01 and gpu01.cluster.example.com are one host: one placeholder (the domain goes too).
    return found.lower().split(".")[0]


def hostname_number(found: str) -> int | None:
    m = _HOSTNAME_PLACEHOLDER.fullmatch(found)
    return (int(m.group(1)) or None) if m else None


def hostname_render(n: int, found: str) -> str:
    return f"node-{n}"


def hostname_kind(names: Iterable[str]) -> Kind | None:
    """The names, as whole words anywhere (the short name of a FQDN too), but never an XML tag's
    name: a host called `gpu` leaves nvidia-smi's <gpu> elements alone."""
    words: set[str] = set()
    for name in names:
        if hostname_number(name) is not None or name.isdigit():
            continue  # a placeholder already; or digits, which as a word would rewrite numbers
        short = name.split(".")[0]
        # The short name of gpu01.example.com; not the "10" of a host named by its address.
        words.update((name, short) if re.search(r"[A-Za-z]", short) else (name,))
    if not words:
        return None
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w)))
    pattern = re.compile(rf"(?<![\w<])(?<!</)(?:{alternatives})(?!\w)", re.IGNORECASE)
    return Kind("hostname", pattern, hostname_key, hostname_number, hostname_render)


# -- serial numbers: the fields that hold them ---------------------------------------------------

# sysfs attributes that hold one serial and nothing else: DMI's product/board/chassis_serial, an
# NVMe controller's or a USB device's `serial`, a battery's or a GPU's `serial_number`, and a disk's
# `wwid` (its world-wide name, "naa.5000c500b32d1a9c", or for NVMe the serial in hex).
_SERIAL_FILE = re.compile(r"/sys/(?:.*/)?(?:(?:\w+_)?serial(?:_number)?|wwid)$")
_SERIAL_WHOLE = re.compile(r"\A(.*)\Z", re.DOTALL)
_XML_SERIAL = re.compile(r"<(\w*serial\w*)>([^<]*)</\1>")  # nvidia-smi -q -x: <serial>
# The kernel's labelled serials, to the end of the line: USB's "SerialNumber: %s" (announce_device,
# drivers/usb/core/hub.c), NVIDIA's "NVRM: GPU Board Serial Number: %s", usb-storage's "Serial
# Number: %s" (/proc/scsi/usb-storage/N); so do dmidecode, smartctl and nvidia-smi -q. Never
# "SerialNumber=3" (the string's index, on the line before) nor "Serial: 8250/16550 driver".
_LABELLED_SERIAL = re.compile(r"[Ss](?:erial|ERIAL) ?[Nn](?:umber|UMBER)[ \t]*:[ \t]*([^\r\n]*)")
_NOT_A_SERIAL = {"", "0", "n/a", "none", "unknown", "not specified", "not applicable", "default string"}
_NOT_A_SERIAL |= {"to be filled by o.e.m.", "system serial number", "chassis serial number"}
# A USB root hub's serial is its host controller's PCI address ("usb usb1: SerialNumber: 0000:00:14.0"):
# a slot, not a device, the same on every machine of a model.
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_SERIAL_PLACEHOLDER = re.compile(r"REDACTED-(\d+)")


def serial_key(found: str) -> str | None:
    value = found.strip()
    if value.lower() in _NOT_A_SERIAL or _PCI_ADDRESS.fullmatch(value) or serial_number(value) is not None:
        return None
    return value


def serial_number(found: str) -> int | None:
    m = _SERIAL_PLACEHOLDER.fullmatch(found.strip())
    return (int(m.group(1)) or None) if m else None


def serial_render(n: int, found: str) -> str:
    """REDACTED-N in place of the value, the blanks around it kept (a sysfs value's newline)."""
    lead = len(found) - len(found.lstrip())
    return found[:lead] + f"REDACTED-{n}" + found[len(found.rstrip()) :]


SERIAL_FILE = Kind("serial", _SERIAL_WHOLE, serial_key, serial_number, serial_render, group=1)
SERIAL_XML = Kind("serial", _XML_SERIAL, serial_key, serial_number, serial_render, group=2)
SERIAL_LABELLED = Kind("serial", _LABELLED_SERIAL, serial_key, serial_number, serial_render, group=1)


def field_kinds(path: str) -> tuple[Kind, ...]:
    """The kinds found only in their own fields, in the file at `path`: a short serial ("1234") or a
    64-bit hex number replaced everywhere would rewrite every such number in /proc and /sys."""
    kinds: tuple[Kind, ...] = (SERIAL_XML, SERIAL_LABELLED)
    if _SERIAL_FILE.search(path):
        kinds = (SERIAL_FILE, *kinds)
    if _GUID_FILE.search(path):
        kinds = (*kinds, GUID_FILE)
    return kinds


# -- the recording --------------------------------------------------------------------------------

KINDS = ("hostname", "serial", *dict.fromkeys(k.name for k in PATTERN_KINDS))
_NUL_SEPARATED = re.compile(r"/proc/(?:self|\d+)/(?:environ|cmdline)")


def as_text(path: str, data: bytes) -> str | None:
    """The file as text, or None when binary (NULs, as in PCI config space) but for the NUL-separated
    environ and cmdline. Bytes that are not UTF-8 become lone surrogates (surrogateescape): no
    pattern matches them, a host name or an address next to one is still found, and `as_bytes`
    gives each back as it was."""
    if b"\0" in data and not _NUL_SEPARATED.fullmatch(path):
        return None
    return data.decode("utf-8", "surrogateescape")


def as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def replace(kind: Kind, text: str, table: Table) -> str:
    """Every identifier of `kind` in `text` by its placeholder."""

    def one(m: re.Match[str]) -> str:
        found = kind.found(m)
        if found is None:
            return m.group()
        key = None if kind.number(found) is not None else kind.key(found)
        if key is None:
            return m.group()
        start, end = (i - m.start() for i in m.span(kind.group))
        whole = m.group()
        return whole[:start] + kind.render(table.number(kind.name, key), found) + whole[end:]

    return kind.pattern.sub(one, text)


def reserve(kind: Kind, text: str, table: Table) -> None:
    """Note the placeholders of `kind` already in `text`, so no original is given their numbers."""
    for m in kind.pattern.finditer(text):
        found = kind.found(m)
        n = None if found is None else kind.number(found)
        if n is not None:
            table.reserve(kind.name, n)


def _reserve_known(
    values: Iterable[str], number: Callable[[str], int | None], kind: str, table: Table
) -> None:
    for value in values:
        n = number(value)
        if n is not None:
            table.reserve(kind, n)


def redact_path(path: str, table: Table) -> str:
    """A path or link target: the pattern kinds only. Never host names: a host called `cpu` must not
    rename /sys/devices/system/cpu (and sysfs and procfs paths hold no host name)."""
    for kind in PATTERN_KINDS:
        path = replace(kind, path, table)
    return path


def redact_text(path: str, text: str, host: Kind | None, table: Table) -> str:
    """A file's text: host names first (a name may hold digits and dots that look like addresses),
    serials and GUIDs in their fields, then the pattern kinds in their order."""
    if host is not None:
        text = replace(host, text, table)
    for kind in (*field_kinds(path), *PATTERN_KINDS):
        text = replace(kind, text, table)
    return text


@dataclass
class Redacted:
    """A redacted recording, and per kind how many distinct values and occurrences were replaced."""

    files: dict[str, bytes]
    links: dict[str, str]
    dirs: set[str]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


def _reserve_all(texts: Mapping[str, str | None], names: list[str], others: list[str], table: Table) -> None:
    """Every placeholder already in the recording (contents, paths, link targets), before any number
    is handed out: that is what keeps a second redaction from changing anything."""
    _reserve_known(names, hostname_number, "hostname", table)
    for path, text in texts.items():
        for kind in field_kinds(path):
            reserve(kind, text or "", table)
    strings = [s for s in texts.values() if s is not None] + others
    for kind in PATTERN_KINDS:
        for s in strings:
            reserve(kind, s, table)


def redact(
    files: Mapping[str, bytes], links: Mapping[str, str] | None = None, dirs: Iterable[str] = ()
) -> Redacted:
    """The recording with its identifiers replaced (see the module's docstring). Binary files are
    left as they are; placeholders are numbered in the order of the sorted paths."""
    links = dict(sorted((links or {}).items()))
    folders = sorted(dirs)
    texts = {path: as_text(path, data) for path, data in sorted(files.items())}
    names = hostnames(texts)
    table = Table()
    _reserve_all(texts, names, [*texts, *links, *links.values(), *folders], table)
    host = hostname_kind(names)
    out = Redacted(files={}, links={}, dirs=set())
    for path, text in texts.items():
        data = files[path] if text is None else as_bytes(redact_text(path, text, host, table))
        out.files[redact_path(path, table)] = data
    out.links = {redact_path(p, table): redact_path(t, table) for p, t in links.items()}
    out.dirs = {redact_path(d, table) for d in folders}
    out.counts = table.counts(KINDS)
    return out
