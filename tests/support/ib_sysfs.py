"""`ibstat` and `ibv_devinfo` outputs -> the sysfs files the kernel shows for the same ports.

The kernel's formats (drivers/infiniband/core/sysfs.c, Documentation/ABI/stable/sysfs-class-infiniband):
- ports/N/state: "4: ACTIVE" (ib_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER);
- ports/N/phys_state: "5: LinkUp" (1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining,
  5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test);
- ports/N/rate: "200 Gb/sec (4X HDR)": the total rate, then the active width and speed name;
- ports/N/link_layer: "InfiniBand" or "Ethernet";
- hca_type: the model, "MT4129" for mlx5 (hca_type_show prints "MT%d" of the PCI device id), which
  ibstat prints as "CA type: MT4129" and ibv_devinfo as "vendor_part_id: 4129".

Only what the output shows is written. `ibstat` prints the rate without the width, so its rate file
holds "200 Gb/sec" alone; `ibv_devinfo` without -v prints neither rate nor physical state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

PORT_STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
PHYS_STATES = {
    "Sleep": 1,
    "Polling": 2,
    "Disabled": 3,
    "PortConfigurationTraining": 4,
    "LinkUp": 5,
    "LinkErrorRecovery": 6,
    "Phy Test": 7,
}
# ibstat's words for the logical state ("Initializing") and ibv_devinfo's phys_state names (LINK_UP).
_STATE_ALIASES = {"INITIALIZING": "INIT", "INITIALIZE": "INIT"}
_PHYS_ALIASES = {
    "LINK_UP": "LinkUp",
    "POLLING": "Polling",
    "DISABLED": "Disabled",
    "SLEEP": "Sleep",
    "PORT_CONFIGURATION_TRAINING": "PortConfigurationTraining",
    "LINK_ERROR_RECOVERY": "LinkErrorRecovery",
    "PHY_TEST": "Phy Test",
}
# Per-lane Gb/s by ibv_devinfo's active_speed figure, and the kernel's name for it.
_SPEEDS = {
    2.5: ("SDR", 2.5),
    5.0: ("DDR", 5),
    10.0: ("QDR", 10),
    14.0: ("FDR", 14),
    25.0: ("EDR", 25),
    50.0: ("HDR", 50),
    100.0: ("NDR", 100),
    200.0: ("XDR", 200),
}


@dataclass
class Port:
    device: str
    port: int
    state: str | None = None
    phys_state: str | None = None
    rate_gbps: float | None = None
    width: str | None = None
    speed_name: str | None = None
    link_layer: str | None = None
    hca_type: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _state(word: str) -> str:
    word = re.sub(r"^PORT_", "", word.strip().upper()).split()[0]
    return _STATE_ALIASES.get(word, word)


def _phys(word: str) -> str:
    word = re.sub(r"\s*\(\d+\)$", "", word.strip())
    return _PHYS_ALIASES.get(word, word)


def parse(text: str, kind: str) -> list[Port]:
    """`kind`: "ibstat", "ibv_devinfo" or "ibv_devinfo -v" (the same format, with more fields)."""
    return _parse_ibstat(text) if kind == "ibstat" else _parse_ibv_devinfo(text)


def _parse_ibstat(text: str) -> list[Port]:
    ports: list[Port] = []
    device = None
    hca_type = None
    current: Port | None = None
    for line in text.splitlines():
        ca = re.match(r"^CA '([^']+)'", line)
        if ca:
            device, current, hca_type = ca.group(1), None, None
            continue
        ca_type = re.match(r"^\s+CA type:\s*(MT\d+)\s*$", line)
        if ca_type:
            hca_type = ca_type.group(1)
            continue
        port = re.match(r"^\s+Port (\d+):\s*$", line)
        if port and device:
            current = Port(device, int(port.group(1)), hca_type=hca_type)
            ports.append(current)
            continue
        kv = re.match(r"^\s+([A-Za-z ]+):\s*(.*?)\s*$", line)
        if not kv or current is None:
            continue
        key, value = kv.group(1).strip(), kv.group(2)
        if key == "State":
            current.state = _state(value)
        elif key == "Physical state":
            current.phys_state = _phys(value)
        elif key == "Rate":
            current.rate_gbps = float(value)
        elif key == "Link layer":
            current.link_layer = value
    return ports


def _parse_ibv_devinfo(text: str) -> list[Port]:
    ports: list[Port] = []
    device = None
    hca_type = None
    current: Port | None = None
    for line in text.splitlines():
        kv = re.match(r"^\s*([a-z_]+):\s*(.*?)\s*$", line)
        if not kv:
            continue
        key, value = kv.groups()
        if key == "hca_id":
            device, current, hca_type = value, None, None
        elif key == "vendor_part_id" and value.isdigit():
            hca_type = f"MT{value}"
        elif key == "port" and device:
            current = Port(device, int(value), hca_type=hca_type)
            ports.append(current)
        elif current is None:
            continue
        elif key == "state":
            current.state = _state(value)
        elif key == "phys_state":
            current.phys_state = _phys(value)
        elif key == "link_layer":
            current.link_layer = value
        elif key == "active_width":
            current.width = value.split()[0]
        elif key == "active_speed":
            m = re.match(r"([\d.]+) Gbps", value)
            if m and float(m.group(1)) in _SPEEDS:
                current.speed_name, lane = _SPEEDS[float(m.group(1))]
                current.extra["lane_gbps"] = str(lane)
    for p in ports:
        if p.width and "lane_gbps" in p.extra:
            p.rate_gbps = float(p.extra["lane_gbps"]) * int(p.width.rstrip("X"))
    return ports


def _rate_text(p: Port) -> str | None:
    if p.rate_gbps is None:
        return None
    total = f"{p.rate_gbps:g}"
    if p.width and p.speed_name:
        name = "" if p.speed_name == "SDR" else f" {p.speed_name}"
        return f"{total} Gb/sec ({p.width}{name})\n"
    return f"{total} Gb/sec\n"


def write(ports: list[Port], dest: Path) -> None:
    for p in ports:
        device = dest / "sys" / "class" / "infiniband" / p.device
        base = device / "ports" / str(p.port)
        base.mkdir(parents=True, exist_ok=True)
        if p.hca_type is not None:
            (device / "hca_type").write_text(p.hca_type + "\n")
        if p.state is not None:
            (base / "state").write_text(f"{PORT_STATES.get(p.state, 0)}: {p.state}\n")
        if p.phys_state is not None:
            (base / "phys_state").write_text(f"{PHYS_STATES.get(p.phys_state, 0)}: {p.phys_state}\n")
        rate = _rate_text(p)
        if rate is not None:
            (base / "rate").write_text(rate)
        if p.link_layer is not None:
            (base / "link_layer").write_text(p.link_layer + "\n")
