"""Parsers for the value formats of sysfs and procfs. Strict: malformed input raises ValueError.

Kernel references: CPU lists and masks, Documentation/admin-guide/cputopology.rst
(https://docs.kernel.org/admin-guide/cputopology.html); bitmap formats, lib/bitmap.c
(bitmap_parselist, bitmap_parse).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# CPU ids: the kernel's CONFIG_NR_CPUS tops out at 8192 today (x86 MAXSMP, NR_CPUS_RANGE_END in
# https://github.com/torvalds/linux/blob/master/arch/x86/Kconfig; arm64 and powerpc: 4096 or less).
# An id at or past MAX_CPU (8x that) is corrupt data: the list is unparsable, never expanded.
MAX_CPU = 1 << 16
_MAX_CPU = MAX_CPU  # the name older code imported
# The longest CPU list read: every other CPU up to MAX_CPU in the kernel's format ("0,2,4,...")
# takes under 200 KiB; a longer value is unparsable as it stands, not parsed (1 MiB of "0-65535,"
# would be 130k ranges to merge). cpulist files are a page (drivers/base/cpu.c: PAGE_SIZE).
MAX_CPULIST_CHARS = 1 << 18
# Decimal values of sysfs/procfs: a u64 has at most 20 digits (18446744073709551615). A longer one is
# corrupt, and past 4300 digits int() refuses it (sys.get_int_max_str_digits): unparsable, not an error.
MAX_DIGITS = 20
_DECIMAL = re.compile(r"[0-9]{1,20}")  # MAX_DIGITS
_SIGNED = re.compile(r"[+-]?[0-9]{1,20}")
_HEX = re.compile(r"0[xX][0-9a-fA-F]{1,32}")
_RANGE = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6})(?::([0-9]{1,6})(?:/([0-9]{1,6}))?)?)?")


def is_decimal(text: str) -> bool:
    """ASCII digits only, at most MAX_DIGITS of them (str.isdigit() accepts "²", which int() refuses)."""
    return _DECIMAL.fullmatch(text) is not None


def decimal(text: str) -> int | None:
    """A plain decimal value (ASCII digits, at most MAX_DIGITS), or None."""
    return int(text) if _DECIMAL.fullmatch(text) else None


def cpulist(text: str) -> list[int]:
    """ "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]; "" -> []. Also accepts strides ("0-8:2").

    Linear in the text, whatever it holds: plain ranges are merged before they are expanded (a
    range repeated 100k times costs its merge, not 100k expansions), at most MAX_CPU ids come out,
    and a text longer than MAX_CPULIST_CHARS or an id at or past MAX_CPU raises ValueError."""
    text = text.strip().strip("\x00")
    if not text:
        return []
    if len(text) > MAX_CPULIST_CHARS:
        raise ValueError(f"not a CPU list: {len(text)} characters (more than {MAX_CPULIST_CHARS})")
    spans: list[tuple[int, int]] = []
    strided: set[tuple[int, int, int, int]] = set()
    for part in text.split(","):
        m = _RANGE.fullmatch(part.strip())
        if not m:
            raise ValueError(f"not a CPU list: {text[:60]!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        group = int(m.group(4)) if m.group(4) else 0
        if hi < lo or hi >= MAX_CPU or step < 1:
            raise ValueError(f"not a CPU list: {text[:60]!r}")
        if step == 1 and not group:
            spans.append((lo, hi))
        else:
            strided.add((lo, hi, step, group))  # a set: a stride repeated is expanded once
    out = bytearray(MAX_CPU)  # one flag per possible id: merging costs O(MAX_CPU) at most
    spans.sort()
    end = -1  # ids up to `end` are set
    for lo, hi in spans:
        if hi > end:
            start = max(lo, end + 1)
            out[start : hi + 1] = b"\x01" * (hi + 1 - start)
            end = hi
    if len(strided) > 64:  # the kernel prints none; a command line has a few
        raise ValueError(f"not a CPU list: {len(strided)} different strided ranges")
    for lo, hi, step, group in strided:
        # "used_size/group_size" form of bitmap_parselist: `used` of every `group` starting at lo
        if group:
            for c in range(lo, hi + 1):
                if (c - lo) % group < step:
                    out[c] = 1
        else:
            out[lo : hi + 1 : step] = b"\x01" * len(range(lo, hi + 1, step))
    return [i for i in range(max(end, max((s[1] for s in strided), default=-1)) + 1) if out[i]]


def cpumask(text: str) -> list[int]:
    """ "00000003,ffffffff" (32-bit words, most significant first) -> the set bits, ascending.
    At most MAX_CPU bits; linear in the text."""
    text = text.strip().strip("\x00")
    if not text:
        return []
    words = text.split(",")
    if len(words) > MAX_CPU // 32 or not all(re.fullmatch(r"[0-9a-fA-F]{1,8}", w) for w in words):
        raise ValueError(f"not a CPU mask: {text[:60]!r}")
    out: list[int] = []
    for i, word in enumerate(reversed(words)):
        value = int(word, 16)
        out.extend(32 * i + b for b in range(32) if value >> b & 1)
    return out


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8", the kernel's own format."""
    ids = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(runs)


def integer(text: str) -> int:
    """A decimal or 0x-prefixed integer value of one sysfs attribute."""
    text = text.strip().strip("\x00")
    if _HEX.fullmatch(text):
        return int(text, 16)
    if _SIGNED.fullmatch(text):
        return int(text)
    raise ValueError(f"not an integer: {text[:60]!r}")


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo or node*/meminfo -> {field: value}; kB values stay in kB.

    Node files prefix each line with "Node N "; that prefix is dropped.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(?:Node\s+[0-9]+\s+)?([\w()]+):\s+([0-9]{1,20})\b", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def key_values(text: str, sep: str = ":") -> dict[str, str]:
    """ "Key:   value" lines (as /proc/self/status) -> {key: value}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def selected(text: str) -> str | None:
    """The bracketed choice of a sysfs selector: "always [madvise] never" -> "madvise"."""
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else None


def link_speed_gts(text: str) -> float | None:
    """PCIe link speed attribute -> GT/s: "8.0 GT/s PCIe" -> 8.0, "2.5 GT/s" -> 2.5, "Unknown" -> None.

    Older kernels print "5 GT/s"; see drivers/pci/pci-sysfs.c (current_link_speed_show).
    """
    m = re.match(r"\s*([0-9]{1,6}(?:\.[0-9]{1,6})?)\s*GT/s", text)
    return float(m.group(1)) if m else None


def link_width(text: str) -> int | None:
    """PCIe link width attribute -> lanes: "16" or "x16" -> 16; 0 or garbage -> None."""
    m = re.fullmatch(r"\s*x?([0-9]{1,6})\s*", text)
    return int(m.group(1)) or None if m else None
