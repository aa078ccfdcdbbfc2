"""`nodeagent snapshot --redact`: no identifier of the node survives, and the redacted recording
reads as the original (same facts, same verdicts), only with placeholders."""

from __future__ import annotations

import ipaddress
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent import checks, engine
from nodeagent.api.check import declared_commands, declared_paths
from nodeagent.facts import node, nvidia_smi
from nodeagent.host import LocalHost, SnapshotHost, recorder, redact
from tests.support import ttar
from tests.support.cli import run_cli
from tests.support.gpu_samples import A100_XML
from tests.support.helpers import ETH, GPU, NIC, make_tree, pci_tree
from tests.support.paths import FIXTURES

PROCFS_TREE = FIXTURES / "corpus" / "sysfs-procfs-fixtures-mixed-hca" / "tree.ttar"

# -- the property: consistent, idempotent, nothing left ------------------------------------------


def _mac(octets: bytes, upper: bool, separator: str) -> str:
    text = separator.join(f"{b:02x}" for b in octets)
    return text.upper() if upper else text


def _ipv6(address: ipaddress.IPv6Address, exploded: bool) -> str:
    # Python 3.13 writes IPv4-mapped addresses with a dotted tail: that is the IPv4 pass's business.
    text = address.compressed
    return address.exploded if exploded or "." in text else text


IDENTIFIERS = st.one_of(
    st.tuples(
        st.just("mac"),
        st.builds(_mac, st.binary(min_size=6, max_size=6), st.booleans(), st.sampled_from([":", "-"])),
    ),
    st.tuples(st.just("ipv4"), st.ip_addresses(v=4).map(str)),
    st.tuples(st.just("ipv6"), st.builds(_ipv6, st.ip_addresses(v=6), st.booleans())),
    st.tuples(
        st.just("uuid"), st.builds(lambda u, up: str(u).upper() if up else str(u), st.uuids(), st.booleans())
    ),
    st.tuples(st.just("gpu_uuid"), st.uuids().map(lambda u: f"GPU-{u}")),
    # Originals that look like placeholders already: left as they are, their numbers not reused.
    st.sampled_from(
        [
            ("mac", "02:00:00:00:00:01"),
            ("mac", "02-00-00-00-00-03"),
            ("ipv4", "192.0.2.1"),
            ("ipv6", "2001:db8::1"),
            ("uuid", "00000000-0000-4000-8000-000000000001"),
            ("gpu_uuid", "GPU-00000000-0000-4000-8000-000000000002"),
        ]
    ),
)
FILLER = st.sampled_from(["mtu", "1500", "eth0", "up", "x", "0:22", "5.15.0-91"])
SEPARATORS = re.compile(r"([ ,\n=])")

_DOCUMENTATION_V4 = [ipaddress.IPv4Network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
_BENCHMARK_V4 = ipaddress.IPv4Network("198.18.0.0/15")
_UUID_PLACEHOLDER = r"00000000-0000-4000-8000-\d{12}"


def normal(kind: str, text: str) -> object:
    """One value whatever its spelling: MACs and UUIDs in any case (MACs with colons or dashes),
    IPv6 compressed or not."""
    if kind == "mac":
        return text.lower().replace("-", ":")
    if kind == "ipv4":
        return ipaddress.IPv4Address(text)
    if kind == "ipv6":
        return ipaddress.IPv6Address(text)
    return text.lower()


def kept(kind: str, text: str) -> bool:
    """What the redaction leaves as it is: values that identify nothing, and placeholders."""
    if kind == "mac":
        octets = text.lower().replace("-", ":").split(":")
        return (len(set(octets)) == 1 and octets[0] in ("00", "ff")) or is_placeholder(kind, text)
    if kind == "ipv4":
        a = ipaddress.IPv4Address(text)
        inverted = ~int(a) & 0xFFFFFFFF
        netmask = inverted & (inverted + 1) == 0  # 255.255.255.0, 0.0.0.0, 255.255.255.255
        return a.is_loopback or netmask or is_placeholder(kind, text)
    if kind == "ipv6":
        a6 = ipaddress.IPv6Address(text)
        empty_gid = a6 == ipaddress.IPv6Address("fe80::")  # an unused RDMA GID table entry
        return a6.is_loopback or a6.is_unspecified or empty_gid or is_placeholder(kind, text)
    return set(text.removeprefix("GPU-")) <= {"0", "-"} or is_placeholder(kind, text)


def is_placeholder(kind: str, text: str) -> bool:
    if kind == "mac":
        colons = text.lower().replace("-", ":")
        return re.fullmatch(r"02(:00)*(:[0-9a-f]{2}){2}", colons) is not None and colons[-5:] != "00:00"
    if kind == "ipv4":
        a = ipaddress.IPv4Address(text)
        return any(a in n for n in _DOCUMENTATION_V4) or a in _BENCHMARK_V4
    if kind == "ipv6":
        return ipaddress.IPv6Address(text) in ipaddress.IPv6Network("2001:db8::/32")
    prefix = "GPU-" if kind == "gpu_uuid" else ""
    return re.fullmatch(prefix + _UUID_PLACEHOLDER, text) is not None


@st.composite
def recordings(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A few text files of identifiers (some repeated, across files too) between filler words:
    {path: tokens}, and each identifier's kind."""
    pool = draw(st.lists(IDENTIFIERS, min_size=1, max_size=8, unique_by=lambda i: i[1]))
    token = st.one_of(st.sampled_from([text for _, text in pool]), FILLER)
    files = draw(
        st.dictionaries(
            st.sampled_from(["/proc/cmdline", "/proc/self/mountinfo", "/commands/ip-addr.txt"]),
            st.lists(st.tuples(token, st.sampled_from([" ", ",", "\n", "="])), min_size=1, max_size=12),
            min_size=1,
        )
    )
    tokens = {path: [t for pair in items for t in pair] for path, items in files.items()}
    return tokens, {text: kind for kind, text in pool}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(recordings())
def test_redaction_is_consistent_idempotent_and_leaves_no_identifier(
    drawn: tuple[dict[str, list[str]], dict[str, str]],
) -> None:
    tokens, kinds = drawn
    files = {path: "".join(ts).encode() for path, ts in tokens.items()}
    out = redact.redact(files)
    assert redact.redact(out.files).files == out.files  # idempotent
    seen: dict[tuple[str, object], object] = {}  # (kind, original) -> placeholder, across files
    for path, data in files.items():
        before = SEPARATORS.split(data.decode())
        after = SEPARATORS.split(out.files[path].decode())
        assert len(after) == len(before), "placeholders keep the shape: no separator added or lost"
        for original, now in zip(before, after, strict=True):
            kind = kinds.get(original)
            if kind is None or kept(kind, original):
                assert now == original
                continue
            assert is_placeholder(kind, now), (original, now)
            # Consistent: one original (however spelt) always gets one placeholder.
            assert seen.setdefault((kind, normal(kind, original)), normal(kind, now)) == normal(kind, now)
    # Injective: two originals never share a placeholder, nor a placeholder an original kept as is.
    placeholders = [(kind, p) for (kind, _), p in seen.items()]
    assert len(set(placeholders)) == len(placeholders)
    present = {t for ts in tokens.values() for t in ts}
    kept_values = {(k, normal(k, t)) for t, k in kinds.items() if t in present and kept(k, t)}
    assert not kept_values & set(placeholders)
    # Nothing left: no original anywhere, in any spelling.
    for path, data in out.files.items():
        for piece in SEPARATORS.split(data.decode()):
            for (kind, original), _ in seen.items():
                assert kinds.get(piece) != kind or normal(kind, piece) != original, (path, piece)


# -- examples: what is kept, and where names are not replaced ------------------------------------


def test_what_identifies_nothing_is_kept() -> None:
    text = (
        "lo 00:00:00:00:00:00 brd ff:ff:ff:ff:ff:ff 127.0.0.1 0.0.0.0/0 255.255.255.0 ::1 :: 0:22\n"
        "ib0 brd 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff\n"
        "gid fe80:0000:0000:0000:0000:0000:0000:0000 pci 0000:3b:00.0 QLogic OFED Release 1.5.4.1\n"
    )
    assert redact.redact({"/proc/net/x": text.encode()}).files["/proc/net/x"] == text.encode()


def test_binary_files_are_left_as_they_are() -> None:
    files = {"/sys/bus/pci/devices/0000:01:00.0/config": b"\x86\x80\0\0 10.1.2.3"}
    assert redact.redact(files).files == files
    environ = b"NCCL_SOCKET_IFNAME=eth0\0MASTER=10.1.2.3\0"
    assert redact.redact({"/proc/7/environ": environ}).files["/proc/7/environ"] == (
        b"NCCL_SOCKET_IFNAME=eth0\0MASTER=192.0.2.1\0"
    )


def test_a_file_that_is_not_utf8_is_redacted_and_its_other_bytes_kept(tmp_path: Path) -> None:
    """One byte that is not UTF-8 (a Latin-1 folder name in a mount or a command line) must not keep
    the host name and addresses of the whole file; every other byte stays as it was."""
    tree = tmp_path / "tree"
    make_tree(
        tree, {"/proc/sys/kernel/hostname": "gpu-node-17\n", "/sys/class/net/eth0/address": f"{MAC_ETH}\n"}
    )
    raw = {
        "proc/self/mountinfo": b"36 25 0:32 / /data/caf\xe9 rw - nfs 10.20.30.40:/export/caf\xe9 "
        b"rw,addr=10.20.30.40\n",
        "proc/4242/cmdline": b"torchrun\0--rdzv-endpoint=gpu-node-17:29500\0/data/caf\xe9/train.py\0",
        "proc/cmdline": b"BOOT_IMAGE=/vmlinuz ip=10.20.30.40:::255.255.255.0:gpu-node-17\xff:eth0:off "
        b"BOOTIF=01-0c-42-a1-12-34-56\n",
    }
    for path, data in raw.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    out = tmp_path / "redacted.tar.gz"
    patterns = [
        "/proc/sys/kernel/hostname",
        "/sys/class/net/*/address",
        "/proc/self/mountinfo",
        "/proc/cmdline",
        "/proc/*/cmdline",
    ]
    recorder.snapshot(SnapshotHost(tree), patterns, [], out, redact=True)
    with tarfile.open(out) as tf:
        got = {m.name: f.read() for m in tf if m.isfile() and (f := tf.extractfile(m)) is not None}
    assert got["proc/self/mountinfo"] == (
        b"36 25 0:32 / /data/caf\xe9 rw - nfs 192.0.2.1:/export/caf\xe9 rw,addr=192.0.2.1\n"
    )
    assert got["proc/4242/cmdline"] == b"torchrun\0--rdzv-endpoint=node-1:29500\0/data/caf\xe9/train.py\0"
    assert got["proc/cmdline"] == (
        b"BOOT_IMAGE=/vmlinuz ip=192.0.2.1:::255.255.255.0:node-1\xff:eth0:off BOOTIF=01-02-00-00-00-00-01\n"
    )
    assert got["sys/class/net/eth0/address"] == b"02:00:00:00:00:01\n"  # the address BOOTIF names
    assert json.loads(got["nodeagent.json"])["redacted"]["ipv4"] == {"values": 1, "occurrences": 3}


def test_macs_written_with_dashes_get_the_placeholder_of_their_colon_spelling() -> None:
    """The kernel's %pMF prints 00-01-02-03-04-05 (Documentation/core-api/printk-formats.rst),
    PXELINUX's IPAPPEND 2 puts BOOTIF=01-<MAC> on /proc/cmdline (01: the ARP type, kept), lspci
    prints a Device Serial Number as eight dashed octets; upper or lower case."""
    files = {
        "/sys/class/net/eth0/address": b"00:1b:21:3a:4f:5c\n",
        "/proc/cmdline": b"BOOT_IMAGE=/vmlinuz BOOTIF=01-00-1b-21-3a-4f-5c\n",
        "/x": b"mac 00-1B-21-3A-4F-5C dsn 00-1b-21-ff-ff-3a-4f-5c none ff-ff-ff-ff-ff-ff 2024-05-12 0x10de\n",
    }
    out = redact.redact(files)
    assert out.files == {
        "/proc/cmdline": b"BOOT_IMAGE=/vmlinuz BOOTIF=01-02-00-00-00-00-01\n",
        "/sys/class/net/eth0/address": b"02:00:00:00:00:01\n",
        "/x": b"mac 02-00-00-00-00-01 dsn 02-00-00-00-00-00-00-02 none ff-ff-ff-ff-ff-ff 2024-05-12 0x10de\n",
    }
    assert out.counts["mac"] == {"values": 2, "occurrences": 4}


IBSTAT = FIXTURES / "corpus" / "ib-gpud-h100-roce-two-cx7-disabled" / "ibstat.txt"


def test_ibstat_guids_in_0x_form_get_the_placeholder_of_their_sysfs_spelling() -> None:
    """ibstat prints the GUIDs /sys/class/infiniband/*/node_guid holds as 0002:c903:00a1:b2c3 as
    0x0002c90300a1b2c3; the unset port GUID 0x0000000000000000 and every other hex value are kept."""
    text = IBSTAT.read_text()
    node_guid = "a088:c203:00ad:eab8"  # mlx5_0's Node GUID (the file's first), as sysfs writes it
    out = redact.redact(
        {
            "/commands/ibstat.txt": text.encode(),
            "/sys/class/infiniband/mlx5_0/node_guid": f"{node_guid}\n".encode(),
        }
    )
    assert out.files["/sys/class/infiniband/mlx5_0/node_guid"] == b"0000:0000:0000:0001\n"
    guid = re.compile(r"(.*GUID: )(0x[0-9a-f]{16})")
    seen: dict[str, str] = {}
    for before, after in zip(
        text.split("\n"), out.files["/commands/ibstat.txt"].decode().split("\n"), strict=True
    ):
        m = guid.fullmatch(before)
        if m is None or m.group(2) == "0x0000000000000000":
            assert after == before
            continue
        label, placeholder = after[: len(m.group(1))], after[len(m.group(1)) :]
        assert label == m.group(1) and re.fullmatch(r"0x00000000\d{8}", placeholder), after
        assert seen.setdefault(m.group(2), placeholder) == placeholder  # System image GUID = Node GUID
    assert seen["0x" + node_guid.replace(":", "")] == "0x0000000000000001"
    # The file's distinct GUIDs: grep -oE "GUID: 0x[0-9a-f]{16}" | grep -v 0x0000000000000000 | sort -u
    assert len(set(seen.values())) == len(seen) == 18


def _lines_with(path: Path, word: str) -> bytes:
    return b"".join(line for line in path.read_bytes().splitlines(keepends=True) if word.encode() in line)


def test_64_bit_hex_numbers_that_name_nothing_are_kept() -> None:
    """Register dumps, page addresses, masks, PCI ids, counters: only a GUID's own label or file
    makes 0x and 16 hex digits an identifier."""
    files = {
        "/commands/dmesg-r.txt": _lines_with(
            FIXTURES / "kmsg" / "xid120-gsp-task-exception-dmesg" / "kernel.log", "0x"
        ),
        "/commands/ibv_devinfo-v.txt": _lines_with(
            FIXTURES / "corpus" / "ib-heioy-cx3-two-hca-port2-polling" / "ibv_devinfo-v.txt", "0x"
        ),
        "/commands/nvidia-smi-q-x.txt": _lines_with(
            FIXTURES / "corpus" / "smi-openpai-v100-sxm3-dbe-retired-pages" / "nvidia-smi-q-x.xml", "0x"
        ),
        "/sys/bus/pci/devices/0000:01:00.0/vendor": b"0x10de\n",
        "/sys/bus/pci/devices/0000:01:00.0/subsystem_vendor": b"0x0000\n",
        "/sys/class/fc_host/host0/fabric_name": b"0x0\n",
        "/sys/class/fc_host/host0/statistics/dumped_frames": b"0xffffffffffffffff\n",
        "/sys/class/drm/card0/device/pp_features": b"Current ppfeatures: 0x0000000019a1ff4f\n"
        b"DPM_PREFETCHER      0x0000000000000001      Y\n",
    }
    assert b"max_mr_size:\t\t\t0xffffffffffffffff" in files["/commands/ibv_devinfo-v.txt"]
    assert b"<retired_page_address>0x000000000044e99d<" in files["/commands/nvidia-smi-q-x.txt"]
    assert b"sscratch:0xffffffffa30134d0" in files["/commands/dmesg-r.txt"]
    assert redact.redact(files).files == files


# A USB stick plugged in (https://www.bigbang.mydns.jp/usbmemory-x.htm, "$ dmesg"), a root hub (its
# serial is its controller's PCI address), the 8250 driver's banner and two of NVIDIA's lines
# (tests/fixtures/kmsg/xid43-xid31-xid94-akash-dmesg-T).
USB_DMESG = """\
[83336.142166] usb 1-8: New USB device found, idVendor=1687, idProduct=3255
[83336.142173] usb 1-8: New USB device strings: Mfr=1, Product=2, SerialNumber=3
[83336.142178] usb 1-8: Product: USB2.0 FlashDisk
[83336.142181] usb 1-8: Manufacturer: Kingmax
[83336.142185] usb 1-8: SerialNumber: B100000000001041
[    1.084017] usb usb1: SerialNumber: 0000:00:14.0
[    0.912345] Serial: 8250/16550 driver, 4 ports, IRQ sharing enabled
[Wed Jul 31 23:14:18 2024] NVRM: GPU Board Serial Number: 1650423013443
[Mon Aug  5 03:54:13 2024] NVRM: GPU Board Serial Number: 1652923017935
"""


def test_serials_in_the_kernel_log_and_sysfs_get_the_placeholder_of_their_fields() -> None:
    """USB's "SerialNumber: %s" (drivers/usb/core/hub.c), NVIDIA's "GPU Board Serial Number: %s",
    and the sysfs attributes holding the same serials: the same placeholder everywhere."""
    files = {
        "/commands/dmesg-r.txt": USB_DMESG.encode(),
        "/sys/bus/usb/devices/1-8/serial": b"B100000000001041\n",
        "/sys/bus/usb/devices/usb1/serial": b"0000:00:14.0\n",
        "/commands/nvidia-smi-q-x.txt": b"<gpu><serial>1650423013443</serial></gpu>",
    }
    out = redact.redact(files)
    assert out.files["/commands/dmesg-r.txt"].decode() == (
        USB_DMESG.replace("B100000000001041", "REDACTED-1")
        .replace("1650423013443", "REDACTED-2")
        .replace("1652923017935", "REDACTED-3")
    )
    assert out.files["/sys/bus/usb/devices/1-8/serial"] == b"REDACTED-1\n"
    assert out.files["/sys/bus/usb/devices/usb1/serial"] == b"0000:00:14.0\n"
    assert out.files["/commands/nvidia-smi-q-x.txt"] == b"<gpu><serial>REDACTED-2</serial></gpu>"
    assert out.counts["serial"] == {"values": 3, "occurrences": 5}
    assert redact.redact(out.files).files == out.files


# What prometheus/procfs's recorded tree holds, by the files' names, and the placeholder each becomes.
SYSFS_IDENTIFIERS = {
    "serial": (r"/(?:\w+_)?serial(?:_number)?$|/wwid$", r"REDACTED-\d+ *\n?"),
    "fc": (r"/fc_host/host0/(?:node|port)_name$", r"0x00000000\d{8}\n?"),
    "sas": (r"/\w*sas_address$|/enclosure_identifier$", r"0x00000000\d{8}\n?"),
    "fc-nvme": (r"/nvme-subsystem/.*/address$", r"nn-0x00000000\d{8}:pn-0x00000000\d{8}\n?"),
    "ib": (r"/infiniband/mlx5_0/node_guid$", r"0000:0000:\d{4}:\d{4}\n?"),
}


def _identifier_kind(path: str) -> str | None:
    return next((k for k, (where, _) in SYSFS_IDENTIFIERS.items() if re.search(where, path)), None)


def test_a_real_sysfs_tree_loses_its_serials_and_world_wide_names(tmp_path: Path) -> None:
    """prometheus/procfs's recorded tree: DMI, NVMe and battery serials, disks' wwid, the FC host's
    WWNN/WWPN, SAS addresses, FC-NVMe addresses (nn-0x...:pn-0x...), an InfiniBand node GUID."""
    files = ttar.regular_files(
        FIXTURES / "corpus" / "sysfs-procfs-fixtures-mixed-hca" / "tree.ttar", tmp_path
    )
    out = redact.redact(files).files
    found: dict[str, int] = {}
    for path, data in files.items():
        kind = _identifier_kind(path)
        value = data.decode().strip()
        # Empty serial_number and enclosure_identifier files, the unset fabric name, a TCP
        # transport's address: nothing to hide.
        if kind is None or value in ("", "0x0") or value.startswith("traddr="):
            continue
        found[kind] = found.get(kind, 0) + 1
        assert re.fullmatch(SYSFS_IDENTIFIERS[kind][1], out[path].decode()), (path, out[path])
        # Nowhere else either, but where the same digits are some other number ("38109").
        other = {q for q, d in files.items() if value.encode() in d and _identifier_kind(q) is None}
        assert not any(value.encode() in d for q, d in out.items() if q not in other), (path, value)
    # Counted in the archive: 8 serials (3 DMI, an NVMe controller's twice, 2 subsystems, a battery)
    # and 5 wwid files (4 disks, a namespace), node and port name, 36 SAS address and enclosure
    # files, 3 nn-/pn- addresses, a GUID.
    assert found == {"serial": 13, "fc": 2, "sas": 36, "fc-nvme": 3, "ib": 1}
    # The SAS host's address and its phys' are one: one placeholder.
    host = "/sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0/host11"
    assert (
        out[f"{host}/scsi_host/host11/host_sas_address"]
        == out[f"{host}/phy-11:7/sas_phy/phy-11:7/sas_address"]
    )
    # Values of the same shape that name nothing are kept.
    for path in (
        "/sys/class/drm/card0/device/pp_features",
        "/sys/class/fc_host/host0/statistics/dumped_frames",
        "/sys/class/fc_host/host0/fabric_name",
        "/sys/devices/pci0000:00/0000:00:02.1/0000:01:00.0/nvme/nvme0/address",
    ):
        assert out[path] == files[path]


def test_a_host_named_like_an_xml_element_keeps_the_xml_intact() -> None:
    files = {
        "/proc/sys/kernel/hostname": b"gpu\n",
        "/commands/nvidia-smi-q-x.txt": b"<gpu id='1'><name>gpu</name></gpu>",
    }
    out = redact.redact(files).files
    assert out["/proc/sys/kernel/hostname"] == b"node-1\n"
    assert out["/commands/nvidia-smi-q-x.txt"] == b"<gpu id='1'><name>node-1</name></gpu>"


def test_paths_and_links_get_the_placeholders_their_contents_get() -> None:
    """A Kubernetes pod's UUID is in /proc/self/cgroup and in its cgroup folder's path: the cgroup
    facts join the two, so both must become the same placeholder."""
    pod = "/kubepods/besteffort/pod3f2a1b4c-5d6e-4f70-8192-a3b4c5d6e7f8"
    out = redact.redact(
        {"/proc/self/cgroup": f"0::{pod}\n".encode(), f"/sys/fs/cgroup{pod}/cpu.max": b"max 100000\n"},
        links={"/sys/fs/cgroup/current": f".{pod}"},
        dirs=[f"/sys/fs/cgroup{pod}"],
    )
    clean = "/kubepods/besteffort/pod00000000-0000-4000-8000-000000000001"
    assert out.files == {
        "/proc/self/cgroup": f"0::{clean}\n".encode(),
        f"/sys/fs/cgroup{clean}/cpu.max": b"max 100000\n",
    }
    assert out.links == {"/sys/fs/cgroup/current": f".{clean}"}
    assert out.dirs == {f"/sys/fs/cgroup{clean}"}
    assert out.counts["uuid"] == {"values": 1, "occurrences": 4}


# -- end to end: a GPU node recorded with --redact -----------------------------------------------

HOST = "gpu-node-17"
FQDN = "gpu-node-17.cluster.example.org"
MAC_ETH, MAC_ETH2 = "0c:42:a1:12:34:56", "0C:42:A1:12:34:57"
MAC_IB = "00:00:10:87:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:a1:b2:c3"
NODE_GUID = "0c42:a103:00a1:b2c3"
GID = "fe80:0000:0000:0000:0c42:a103:00a1:b2c3"
IP_NODE, IP_GATEWAY, IP_NFS, IP6_NFS = "10.20.30.40", "10.20.30.1", "172.16.5.9", "fd00:1234::9"
ROOT_UUID = "3F2A1B4C-5D6E-4F70-8192-A3B4C5D6E7F8"
DMI_SERIAL, DMI_UUID = "CZJ8470ABC", "4c4c4544-0042-3510-8052-b4c04f564d32"
GPU_SERIAL, GPU_UUID = "1650522003820", "GPU-513536b6-7d19-9063-b049-1e69664bb298"
USB_SERIAL = "B100000000001041"
ORIGINALS = [
    HOST,
    FQDN,
    MAC_ETH,
    MAC_ETH2,
    MAC_IB,
    NODE_GUID,
    GID,
    IP_NODE,
    IP_GATEWAY,
    IP_NFS,
    IP6_NFS,
    ROOT_UUID,
    DMI_SERIAL,
    DMI_UUID,
    GPU_SERIAL,
    GPU_UUID,
    USB_SERIAL,
]
# What nodeagent does not record, but a user's own --only patterns or a later check could.
EXTRA_PATTERNS = [
    "/etc/hostname",
    "/sys/class/net/*/address",
    "/sys/class/infiniband/*/node_guid",
    "/sys/class/infiniband/*/ports/*/gids/*",
    "/sys/class/dmi/id/product_serial",
    "/sys/class/dmi/id/product_uuid",
]


def _gpu_node(root: Path) -> SnapshotHost:
    files = {
        "/proc/sys/kernel/hostname": f"{HOST}\n",
        "/etc/hostname": f"{FQDN}\n",
        "/proc/sys/kernel/osrelease": "5.15.0-91-generic\n",
        "/proc/cmdline": f"BOOT_IMAGE=/vmlinuz root=UUID={ROOT_UUID} "
        f"ip={IP_NODE}::{IP_GATEWAY}:255.255.255.0:{HOST}:eth0:off BOOTIF=01-{MAC_ETH.replace(':', '-')}\n",
        "/proc/self/mountinfo": f"36 25 0:32 / /data rw - nfs {IP_NFS}:/export rw,addr={IP_NFS},"
        f"mountaddr={IP6_NFS}\n",
        "/sys/class/net/eth0/address": f"{MAC_ETH}\n",
        "/sys/class/net/eth1/address": f"{MAC_ETH2}\n",
        "/sys/class/net/ib0/address": f"{MAC_IB}\n",
        "/sys/class/net/lo/address": "00:00:00:00:00:00\n",
        "/sys/class/infiniband/mlx5_0/node_guid": f"{NODE_GUID}\n",
        "/sys/class/infiniband/mlx5_0/ports/1/gids/0": f"{GID}\n",
        "/sys/class/dmi/id/product_serial": f"{DMI_SERIAL}\n",
        "/sys/class/dmi/id/product_uuid": f"{DMI_UUID}\n",
        "/sys/class/dmi/id/product_name": "ProLiant XL675d Gen10 Plus\n",
        "/sys/devices/system/node/node0/meminfo": "Node 0 MemTotal: 65536000 kB\n",
        "/sys/devices/system/node/node1/meminfo": "Node 1 MemTotal: 65536000 kB\n",
    }
    xml = A100_XML.replace("1650522003820", GPU_SERIAL).replace(
        "GPU-513536b6-7d19-9063-b049-1e69664bb298", GPU_UUID
    )
    return pci_tree(
        root,
        {
            "pci0000:00/0000:00:01.0/0000:01:00.0": GPU,
            "pci0000:00/0000:00:02.0/0000:02:00.0": NIC,
            "pci0000:00/0000:00:03.0/0000:03:00.0": ETH,
            "pci0000:00/0000:00:03.0/0000:03:00.1": ETH,
        },
        rdma={"mlx5_0": "0000:02:00.0"},
        netdevs={
            "ib0": ("0000:02:00.0", 200000),
            "eth0": ("0000:03:00.0", 25000),
            "eth1": ("0000:03:00.1", 25000),
        },
        nodes={0: "0-1", 1: "2-3"},
        files=files,
        commands={
            "nvidia-smi-q-x": xml,
            "dmesg-r": f"<6>[    3.120185] usb 1-8: SerialNumber: {USB_SERIAL}\n"
            f"<6>[   12.461931] NVRM: GPU Board Serial Number: {GPU_SERIAL}\n",
        },
    )


def _archive_strings(archive: Path, names: bool = True) -> list[str]:
    """Every (text) content in a snapshot archive, and its members' names and link targets."""
    found = []
    with tarfile.open(archive) as tf:
        for member in tf:
            found += [member.name, member.linkname] if names else []
            f = tf.extractfile(member) if member.isfile() else None
            found.append(f.read().decode("utf-8", errors="replace") if f else "")
    return found


def _facts(root: Path) -> dict[str, Any]:
    result = run_cli("facts", "--root", str(root), "--format", "json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    doc: dict[str, Any] = result.json()
    return doc


def test_a_redacted_gpu_node_keeps_its_facts_and_loses_its_identifiers(tmp_path: Path) -> None:
    original = _gpu_node(tmp_path / "tree")
    selected = checks.all_checks()
    patterns = sorted({*declared_paths(selected), *node.PATHS, *EXTRA_PATTERNS})
    commands = sorted({*declared_commands(selected), *node.COMMANDS})
    plain, redacted = tmp_path / "plain.tar.gz", tmp_path / "redacted.tar.gz"
    recorder.snapshot(original, patterns, commands, plain)
    recorder.snapshot(original, patterns, commands, redacted, redact=True)

    def left(archive: Path) -> set[str]:
        texts = _archive_strings(archive)
        return {o for o in ORIGINALS if any(o.lower() in t.lower() for t in texts)}

    assert left(plain) == set(ORIGINALS), "the tree holds every identifier: the test is not vacuous"
    assert left(redacted) == set()

    before, after = _facts(plain), _facts(redacted)
    assert (before["host"], after["host"]) == (HOST, "node-1")
    assert after["kernel"]["cmdline"] == (
        "BOOT_IMAGE=/vmlinuz root=UUID=00000000-0000-4000-8000-000000000001 "
        "ip=192.0.2.1::192.0.2.2:255.255.255.0:node-1:eth0:off BOOTIF=01-02-00-00-00-00-01"
    )
    same = set(before) - {"host", "kernel"}
    assert {k: after[k] for k in same} == {k: before[k] for k in same}
    # What the brief cares for, spelt out: CPUs, NUMA nodes, NIC names and speeds, GPUs.
    assert after["topology"]["cpus_online"] == [0, 1, 2, 3]
    assert [n["id"] for n in after["topology"]["numa_nodes"]] == [0, 1]
    assert {(n["name"], n["speed_mbps"]) for n in after["nics"]} >= {("eth0", 25000), ("ib0", 200000)}
    assert len(after["gpus"]) == 1
    assert before["topology"] == _facts(tmp_path / "tree")["topology"]

    # nvidia-smi's XML still parses, with the GPU's UUID as a placeholder; the checks agree.
    host = SnapshotHost(redacted)
    smi = nvidia_smi.parse_xml(host.run(["nvidia-smi", "-q", "-x"]).stdout)
    assert [g.uuid for g in smi.gpus] == ["GPU-00000000-0000-4000-8000-000000000001"]

    def verdicts(root: Path) -> set[tuple[str, str, str]]:
        report = engine.run_report(SnapshotHost(root), selected)
        return {(f.check_id, f.subject, f.status.value) for f in report.findings}

    assert verdicts(redacted) == verdicts(plain)
    assert host.meta["redacted"] == {
        "hostname": {"values": 1, "occurrences": 4},
        "serial": {"values": 3, "occurrences": 4},
        "gpu_uuid": {"values": 1, "occurrences": 1},
        "uuid": {"values": 2, "occurrences": 2},
        "mac": {"values": 3, "occurrences": 4},
        "guid": {"values": 1, "occurrences": 1},
        "ipv6": {"values": 2, "occurrences": 2},
        "ipv4": {"values": 3, "occurrences": 4},
    }


def test_the_command_line_redacts_this_machine(tmp_path: Path) -> None:
    out = tmp_path / "here.tar.gz"
    proc = run_cli("snapshot", "--redact", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "replaced with placeholders" in proc.stdout
    name = LocalHost().read_value("/proc/sys/kernel/hostname") or ""
    words = re.compile(rf"(?<![\w<]){re.escape(name)}(?!\w)", re.IGNORECASE)
    # Contents only: a host name is never replaced in paths (a host called `vm` keeps /proc/sys/vm).
    assert name and not any(words.search(s) for s in _archive_strings(out, names=False))
    assert SnapshotHost(out).name == "node-1"
