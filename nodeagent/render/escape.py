"""How every renderer shows a character it must not emit: as `\\xNN` (`\\uNNNN` above 0xff)."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL and the C1 controls (a terminal takes 0x9b as CSI), lone
# surrogates, the bidirectional embeddings/overrides/isolates, and the two XML non-characters: what
# no terminal is given as it is (nodeagent.render.literal).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069\ufffe\uffff]")

# XML 1.0's Char production (https://www.w3.org/TR/xml/#charsets): everything else (NUL, most C0
# controls, lone surrogates, U+FFFE/U+FFFF) makes the document unparsable, escaped or not.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """`text` with characters XML 1.0 cannot carry shown as `\\xNN` (`\\uNNNN`), so evidence such as
    a terminal escape stays visible instead of breaking the file."""
    return _NOT_XML_CHAR.sub(escape_char, text)


def escape_char(m: re.Match[str]) -> str:
    """One matched character as `\\xNN` (`\\uNNNN` above 0xff): how every renderer shows a
    character it must not emit."""
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain_line(text: str) -> str:
    """`text` as one line of a log: line breaks and tabs become spaces, control characters are shown
    as `\\xNN`. For what is written without rich (a progress line on a piped stderr)."""
    flat = " ".join(text.replace("\r", " ").replace("\t", " ").split("\n"))
    return UNSAFE.sub(escape_char, flat).strip()
