"""How every renderer shows a character it must not emit: as `\\xNN` (`\\uNNNN` above 0xff)."""

from __future__ import annotations

import re

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
