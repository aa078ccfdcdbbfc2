"""The xid check: kernel log records by structure, Xid reports by structure, verdicts from NVIDIA's
Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).

The kernel logs are real, or NVIDIA's own examples (tests/fixtures/kmsg, README.md there names each
source). Every expected verdict below comes from the catalogue's "Resolution Bucket (Immediate
Action)" for the Xid the log text shows, never from nodeagent: RESET_GPU, RESTART_BM and the
DBE/NVLink workflows are the node's to act on (FAIL); RESTART_APP and IGNORE are the application's
(OK), except the memory reports whose investigation is the hardware (63, 92, 94: WARN).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from nodeagent import checks
from nodeagent.api.check import declared_commands, declared_paths
from nodeagent.checks import xid
from nodeagent.core.finding import Finding, Status, documents
from nodeagent.facts import dcgm, kmsg
from nodeagent.host import LocalHost, SnapshotHost, recorder
from tests.support.cli import RunCli
from tests.support.helpers import make_tree
from tests.support.paths import FIXTURES

KMSG_FIXTURES = FIXTURES / "kmsg"
DEFAULT = xid.Params()
DMESG = "dmesg-r"  # the snapshot's file stem for `dmesg -r` (host.base.command_name)

# (folder, [(GPU, Xid, events, status)]), read off each log by eye.
REAL_LOGS = [
    # "79, GPU has fallen off the bus." Catalogue: RESTART_BM.
    ("xid79-rtx5080-journalctl", [("0000:2b:00.0", 79, 1, Status.FAIL)]),
    # A DBE (catalogue: WORKFLOW_XID_48) then a page that could not be retired (64: RESET_GPU).
    (
        "xid48-xid64-gpu-operator-syslog",
        [("0000:07:00.0", 48, 1, Status.FAIL), ("0000:07:00.0", 64, 1, Status.FAIL)],
    ),
    # Three 13s (RESTART_APP), one 31 (RESTART_APP), two context-switch timeouts (109: RESET_GPU).
    (
        "xid13-xid31-xid109-gpud-dmesg-ctime",
        [
            ("0000:cb:00.0", 13, 3, Status.OK),
            ("0000:cb:00.0", 31, 1, Status.OK),
            ("0000:cb:00.0", 109, 2, Status.FAIL),
        ],
    ),
    # 43 (IGNORE) twice, 31 (RESTART_APP), a contained memory error 94 (RESTART_APP, a hardware report).
    (
        "xid43-xid31-xid94-akash-dmesg-T",
        [
            ("0000:00:05.0", 43, 2, Status.OK),
            ("0000:00:07.0", 31, 1, Status.OK),
            ("0000:00:08.0", 94, 1, Status.WARN),
        ],
    ),
    # Preemptive cleanup (45: WORKFLOW_XID_45, "not solo: follow other Xid") on four GPUs.
    (
        "xid45-nvlink5-b200-journalctl",
        [
            ("0000:97:00.0", 45, 1, Status.OK),
            ("0000:ba:00.0", 45, 2, Status.OK),
            ("0000:dc:00.0", 45, 2, Status.OK),
            ("0000:ed:00.0", 45, 2, Status.OK),
        ],
    ),
    # Five GSP RPC timeouts (119: RESET_GPU).
    ("xid119-gsp-timeout-gpud-scan", [("0000:9b:00.0", 119, 5, Status.FAIL)]),
    # A GSP task exception (120: RESET_GPU).
    ("xid120-gsp-task-exception-dmesg", [("0000:06:00.0", 120, 1, Status.FAIL)]),
    # "Row Remapper: New row marked for remapping, reset gpu to activate." (63: IGNORE, memory report).
    ("xid63-row-remap-ml-engineering", [("0000:10:1c.0", 63, 1, Status.WARN)]),
    # NVIDIA's own example of a contained error on a MIG instance (94).
    ("xid94-mig-nvidia-docs", [("0000:01:00.0", 94, 1, Status.WARN)]),
    # NVIDIA's driver source: "Uncontained: LTC TAG ... RST: Yes" (95: RESET_GPU).
    ("xid95-uncontained-nvidia-driver-source", [("0000:01:00.0", 95, 1, Status.FAIL)]),
    # NVIDIA's NVSentinel design: "NVLink: fatal error detected on link 14" (74: WORKFLOW_NVLINK_ERR,
    # whose first step is a reset or a reboot).
    ("xid74-nvlink-nvsentinel-design", [("0003:00:00.0", 74, 1, Status.FAIL)]),
]


def recorded(tmp_path: Path, log: str, exit_code: int = 0, err: str = "") -> SnapshotHost:
    """A snapshot whose recorded `dmesg -r` printed `log` (and exited `exit_code`)."""
    files = {}
    if exit_code:
        files = {f"/commands/{DMESG}.exit": f"{exit_code}\n", f"/commands/{DMESG}.err": err}
    return make_tree(tmp_path, files, commands={DMESG: log})


def judged(findings: list[Finding]) -> list[tuple[str, int, int, Status]]:
    out = []
    for f in findings:
        if f.subject == "kernel log":
            continue
        number = int(f.summary.split("Xid ", 1)[1].split(" ", 1)[0])
        count = int(f.evidence[f"dmesg -r: {f.subject} Xid {number} events"])
        out.append((f.subject, number, count, f.status))
    return out


@pytest.mark.parametrize(("folder", "expected"), REAL_LOGS, ids=[name for name, _ in REAL_LOGS])
def test_real_kernel_logs(tmp_path: Path, folder: str, expected: list[tuple[str, int, int, Status]]) -> None:
    text = (KMSG_FIXTURES / folder / "kernel.log").read_text()
    findings = xid.CHECK.run(recorded(tmp_path, text), DEFAULT)
    assert judged(findings) == expected
    assert not [f for f in findings if f.status is Status.UNKNOWN]
    for f in findings:
        assert xid.CATALOGUE in f.remediation
        assert f.evidence[f"dmesg -r: {f.subject} Xid {judged([f])[0][1]} first"] in text


def test_every_fixture_is_tested() -> None:
    folders = {p.name for p in KMSG_FIXTURES.iterdir() if p.is_dir()}
    # Without Xids: the /dev/kmsg capture (tested below) and a boot log's PCI enumeration
    # (test_gpu_off_the_bus.py).
    without_xid = {"kmsg-gpud-nvswitch-node", "pci-enumeration-dgx-h100-guest-lkml"}
    assert folders == {name for name, _ in REAL_LOGS} | without_xid
    readme = (KMSG_FIXTURES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in folders)


def test_fallen_off_the_bus_names_the_action_and_the_first_line(tmp_path: Path) -> None:
    text = (KMSG_FIXTURES / "xid79-rtx5080-journalctl" / "kernel.log").read_text()
    (f,) = xid.CHECK.run(recorded(tmp_path, text), DEFAULT)
    assert f.summary == (
        "0000:2b:00.0: Xid 79 (GPU has fallen off the bus), 1 event(s) in the kernel log: "
        "the catalogue's action: RESTART_BM"
    )
    assert f.evidence["dmesg -r: 0000:2b:00.0 Xid 79 first"] == (
        "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    )
    assert f.evidence["Xid catalogue: Xid 79 immediate action"] == "RESTART_BM"
    assert "reboot" in f.remediation


def test_first_and_last_and_processes_are_evidence(tmp_path: Path) -> None:
    text = (KMSG_FIXTURES / "xid119-gsp-timeout-gpud-scan" / "kernel.log").read_text()
    (f,) = xid.CHECK.run(recorded(tmp_path, text), DEFAULT)
    lines = text.splitlines()
    assert f.evidence["dmesg -r: 0000:9b:00.0 Xid 119 first"] == lines[0]
    assert f.evidence["dmesg -r: 0000:9b:00.0 Xid 119 last"] == lines[-1]
    assert f.evidence["dmesg -r: 0000:9b:00.0 Xid 119 processes"] == (
        "cache_mgr_main (pid 28232), gpu-feature-dis (pid 28098), python (pid 4071838)"
    )


def test_the_kmsg_capture_without_xid_is_ok(tmp_path: Path) -> None:
    text = (KMSG_FIXTURES / "kmsg-gpud-nvswitch-node" / "kmsg.log").read_text()
    (f,) = xid.CHECK.run(recorded(tmp_path, text), DEFAULT)
    assert (f.status, f.summary) == (Status.OK, "no Xid reported by the NVIDIA driver in the kernel log")
    assert f.evidence["dmesg -r"] == "no 'NVRM: Xid' record from the kernel"
    # seq 3964 is not the first record of the boot: the log starts 206.76 s in.
    assert (
        f.evidence["dmesg -r: time"]
        == "206.76 s to 57631.40 s after boot (earlier messages were overwritten)"
    )


# -- classes without a fixture: single lines ---------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "status"),
    [
        # Constructed in the format of the real reports (no public line found): 92 (IGNORE,
        # investigate: CONTACT_SUPPORT), a memory report.
        ("NVRM: Xid (PCI:0000:3b:00): 92, High single-bit ECC error rate", Status.WARN),
        # From https://github.com/leptonai/gpud/pull/1174: the driver calls it Fatal / Nonfatal.
        (
            "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 "
            "0x00000000 0x00000000 0x00000000)",
            Status.FAIL,
        ),
        (
            "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 "
            "0x00000001 0x00000000 0x00100000 0x00000004)",
            Status.WARN,
        ),
        # Not in the catalogue: never a FAIL.
        ("NVRM: Xid (PCI:0000:3b:00): 201, something new", Status.WARN),
        # An unused row of the catalogue (14, "Unused"): not in use, so unknown.
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001", Status.WARN),
    ],
)
def test_classes(tmp_path: Path, line: str, status: Status) -> None:
    (f,) = xid.CHECK.run(recorded(tmp_path, f"[ 12.000000] {line}\n"), DEFAULT)
    assert f.status is status, f.summary


def test_unknown_xid_names_the_number(tmp_path: Path) -> None:
    (f,) = xid.CHECK.run(recorded(tmp_path, "NVRM: Xid (PCI:0000:3b:00): 201, x\n"), DEFAULT)
    assert "Xid 201" in f.summary and "not in NVIDIA's Xid catalogue" in f.summary


def test_ignored_xids_are_ok(tmp_path: Path) -> None:
    text = (KMSG_FIXTURES / "xid120-gsp-task-exception-dmesg" / "kernel.log").read_text()
    (f,) = xid.CHECK.run(recorded(tmp_path, text), xid.Params(ignore_xids=(120,)))
    assert f.status is Status.OK and "ignore_xids" in f.summary


def test_xid_lines_without_the_structure_are_unknown(tmp_path: Path) -> None:
    log = "[ 1.000000] NVRM: Xid (PCI:zz): 79, GPU has fallen off the bus.\n[ 2.0] NVRM: Xid 79\n"
    (f,) = xid.CHECK.run(recorded(tmp_path, log), DEFAULT)
    assert f.status is Status.UNKNOWN
    assert "2 NVRM Xid line(s) without the structure" in f.summary
    assert f.evidence["dmesg -r: unparsable Xid line 2"] == "[ 2.0] NVRM: Xid 79"


def test_xid_lines_written_by_user_space_are_not_the_drivers(tmp_path: Path) -> None:
    # <12>: facility 1 (LOG_USER), level 4. User space cannot write facility 0 to /dev/kmsg (ABI).
    log = (
        "<6>[ 1.000000] Linux version 6.8\n"
        "<12>[ 2.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    )
    (f,) = xid.CHECK.run(recorded(tmp_path, log), DEFAULT)
    assert f.status is Status.OK
    assert "NVRM: Xid" in f.evidence["dmesg -r: Xid lines written by user space (ignored)"]


# -- no log: never "no Xid" ---------------------------------------------------------------------------


def test_not_recorded_is_skipped(tmp_path: Path) -> None:
    (f,) = xid.CHECK.run(make_tree(tmp_path, {"/proc/version": "Linux\n"}), DEFAULT)
    assert f.status is Status.SKIPPED
    assert "`dmesg -r` not available" in f.summary and "not recorded" in f.summary


def test_restricted_log_is_skipped(tmp_path: Path) -> None:
    host = recorded(tmp_path, "", 1, "dmesg: read kernel buffer failed: Operation not permitted\n")
    (f,) = xid.CHECK.run(host, DEFAULT)
    assert f.status is Status.SKIPPED
    assert "Operation not permitted" in f.summary and "dmesg_restrict" in f.summary
    assert f.evidence == {"dmesg -r": "dmesg: read kernel buffer failed: Operation not permitted"}


def test_empty_log_is_skipped(tmp_path: Path) -> None:
    (f,) = xid.CHECK.run(recorded(tmp_path, ""), DEFAULT)
    assert (f.status, f.summary) == (Status.SKIPPED, "Xid events not known: `dmesg -r` printed no record")


# -- record formats ---------------------------------------------------------------------------------

# The example of Documentation/ABI/testing/dev-kmsg (https://www.kernel.org/doc/Documentation/ABI/testing/dev-kmsg):
# "prio,seq,timestamp,flags;message", continuation lines " KEY=VALUE" carrying the record's dictionary.
ABI_EXAMPLE = """7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)
 SUBSYSTEM=acpi
 DEVICE=+acpi:PNP0A03:00
6,339,5140900,-;NET: Registered protocol family 10
30,340,5690716,-;udevd[80]: starting version 181
"""


def test_kmsg_records_as_the_abi_documents_them() -> None:
    records = kmsg.parse(ABI_EXAMPLE)
    assert [(r.facility, r.level, r.seq, r.usec, r.message) for r in records] == [
        (0, 7, 160, 424069, "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)"),
        (0, 6, 339, 5140900, "NET: Registered protocol family 10"),
        (3, 6, 340, 5690716, "udevd[80]: starting version 181"),  # 30 = facility 3 (daemon) * 8 + 6
    ]
    assert [r.from_kernel for r in records] == [True, True, False]
    # Later kernels add fields before ';' (caller=T1 with CONFIG_PRINTK_CALLER).
    (r,) = kmsg.parse("6,1,2,-,caller=T1;hello\n")
    assert (r.seq, r.usec, r.message) == (1, 2, "hello")


def test_the_kmsg_fixture_is_parsed_record_by_record() -> None:
    records = kmsg.parse((KMSG_FIXTURES / "kmsg-gpud-nvswitch-node" / "kmsg.log").read_text())
    assert len(records) == 47
    assert (records[0].seq, records[0].usec, records[0].message) == (
        3964,
        206764307,
        "nvidia-nvswitch2: open (major=510)",
    )
    assert [r.seq for r in records] == list(range(3964, 4011))
    assert all(r.from_kernel for r in records)


@pytest.mark.parametrize(
    ("line", "level", "usec", "message"),
    [
        ("<4>[ 2367.980660] NVRM: x", 4, 2367980660, "NVRM: x"),  # dmesg -r
        ("<6>NVRM: x", 6, None, "NVRM: x"),  # dmesg -r without printk times (busybox)
        ("[    0.000000] Linux version", None, 0, "Linux version"),  # dmesg
        ("Mar  5 10:00:00 host kernel: NVRM: x", None, None, "Mar  5 10:00:00 host kernel: NVRM: x"),
    ],
)
def test_dmesg_and_other_lines(line: str, level: int | None, usec: int | None, message: str) -> None:
    (r,) = kmsg.parse(line)
    assert (r.level, r.usec, r.message) == (level, usec, message)


@pytest.mark.parametrize(
    ("line", "gpu", "xid", "pid", "process", "detail"),
    [
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
            "0000:3b:00.0",
            79,
            "1234",
            "python",
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00.0): 79, GPU has fallen off the bus.",
            "0000:3b:00.0",
            79,
            None,
            None,
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:00000000:3B:00): 48, pid='<unknown>', name=<unknown>, DBE",
            "0000:3b:00.0",
            48,
            None,
            None,
            "DBE",
        ),
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001", "0000:03:00.0", 14, None, None, "Channel 00000001"),
        ("NVRM: Xid (09:00): 53, CMDre 00000000", "0000:09:00.0", 53, None, None, "CMDre 00000000"),
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE",
            "0000:01:00.0",
            94,
            "7194",
            None,
            "Contained: CE",
        ),
    ],
)
def test_xid_structure(
    line: str, gpu: str, xid: int, pid: str | None, process: str | None, detail: str
) -> None:
    event = kmsg.parse_xid(kmsg.Record(line, line))
    assert event is not None
    assert (event.gpu, event.xid, event.pid, event.process, event.detail) == (gpu, xid, pid, process, detail)


def test_mig_instance_is_kept() -> None:
    line = (KMSG_FIXTURES / "xid94-mig-nvidia-docs" / "kernel.log").read_text().strip()
    event = kmsg.parse_xid(kmsg.Record(line, line))
    assert event is not None and event.gpu_instance == 5


# -- this machine: dmesg reads /dev/kmsg, and a snapshot records it ---------------------------------


def _read_dev_kmsg() -> list[bytes]:
    """/dev/kmsg as the ABI document says to read it: non-blocking, one record per read, until EAGAIN."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    records = []
    try:
        while True:
            try:
                records.append(os.read(fd, 1 << 16))
            except BlockingIOError:
                return records
            except OSError as e:  # EPIPE: the record was overwritten while reading; go on
                if e.errno != errno.EPIPE:
                    raise
    finally:
        os.close(fd)


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK) or not shutil.which("dmesg"), reason="no /dev/kmsg")
def test_live_dmesg_reads_the_records_of_dev_kmsg() -> None:
    raw = _read_dev_kmsg()
    log = kmsg.collect(LocalHost())
    assert log.reason is None, log.reason
    assert raw and log.records
    direct = {r.usec: r.message for r in kmsg.parse(b"".join(raw).decode("utf-8", "replace"))}
    via_dmesg = {r.usec: r.message for r in log.records}
    assert all(r.level is not None and r.usec is not None for r in log.records)  # `-r`: every prefix
    both = set(direct) & set(via_dmesg)
    assert both, "the two reads share records (the buffer cannot have turned over entirely)"
    plain = [u for u in both if "\\x" not in direct[u]]  # /dev/kmsg escapes what dmesg prints as is
    assert all(direct[u] == via_dmesg[u] for u in plain)


def test_snapshot_records_the_kernel_log(tmp_path: Path) -> None:
    out = tmp_path / "xid.tar.gz"
    selected = [xid.CHECK]
    recorder.snapshot(LocalHost(), declared_paths(selected), declared_commands(selected), out)
    live, host = LocalHost(), SnapshotHost(out)
    replay = host.run(kmsg.COMMAND)
    assert replay.ok == live.run(kmsg.COMMAND).ok
    if replay.ok:
        assert kmsg.parse(replay.stdout)
    assert [(f.status, f.summary) for f in xid.CHECK.run(host, DEFAULT)] == [
        (f.status, f.summary) for f in xid.CHECK.run(live, DEFAULT)
    ]


def test_fleet_comparison_leaves_out_what_the_log_covers() -> None:
    from nodeagent.compare import fleet

    finding = xid.evaluate(xid.Facts(kmsg.KernelLog("dmesg -r", kmsg.parse("[ 5.000000] hello\n"))), DEFAULT)[
        0
    ]
    values = fleet.host_values(None, documents([finding]))
    assert values == {
        "check.xid.kernel log.dmesg -r": "no 'NVRM: Xid' record from the kernel",
        "check.xid.kernel log.status": "OK",
    }


def test_cli_snapshot_records_dmesg_and_never_the_dcgm_diagnostic(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "node.tar.gz"
    result = run_cli("snapshot", "-o", str(out), "--only", "xid")
    assert result.returncode == 0, result.stderr
    recorded_commands = SnapshotHost(out).meta["commands"]
    assert list(kmsg.COMMAND) in recorded_commands  # type: ignore[operator]
    assert list(dcgm.COMMAND) not in recorded_commands  # type: ignore[operator]


def test_the_default_selection_has_xid_and_leaves_dcgm_on_demand() -> None:
    default = checks.select()
    assert "xid" in [c.id for c in default]
    assert kmsg.COMMAND in declared_commands(default)
    assert dcgm.COMMAND not in declared_commands(default)
    assert [c.id for c in checks.select(["dcgm-diag"])] == ["dcgm-diag"]
    ids = [c.id for c in checks.all_checks()]
    assert ids.index("xid") == ids.index("gpu") + 1
