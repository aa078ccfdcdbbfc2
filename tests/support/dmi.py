"""`dmidecode` output -> the /sys/class/dmi/id files the kernel shows for the same SMBIOS fields.

drivers/firmware/dmi-id.c maps SMBIOS type 0 (BIOS Information) Vendor, Version and Release Date to
bios_vendor, bios_version and bios_date; type 1 (System Information) Manufacturer, Product Name,
Version and Serial Number to sys_vendor, product_name, product_version and product_serial; type 2
(Base Board Information) Manufacturer and Product Name to board_vendor and board_name.
"""

from __future__ import annotations

import re
from pathlib import Path

_FIELDS = {
    "BIOS Information": {"Vendor": "bios_vendor", "Version": "bios_version", "Release Date": "bios_date"},
    "System Information": {
        "Manufacturer": "sys_vendor",
        "Product Name": "product_name",
        "Version": "product_version",
        "Serial Number": "product_serial",
    },
    "Base Board Information": {"Manufacturer": "board_vendor", "Product Name": "board_name"},
}


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    section: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line[0].isspace():
            section = _FIELDS.get(line.strip(), {})
            continue
        m = re.match(r"^\t([^:\t]+):\s*(.*?)\s*$", line)
        if m and m.group(1) in section:
            out.setdefault(section[m.group(1)], m.group(2))
    return out


def write(fields: dict[str, str], dest: Path) -> None:
    base = dest / "sys" / "class" / "dmi" / "id"
    base.mkdir(parents=True, exist_ok=True)
    for name, value in fields.items():
        (base / name).write_text(value + "\n")
