"""Xid: what the NVIDIA driver told the kernel log about each GPU since the log began.

An Xid is the driver's error report (https://docs.nvidia.com/deploy/xid-errors/index.html). Some
say the GPU is gone or needs a reset before it can be trusted again (79 fallen off the bus, 48
double-bit ECC, 95 uncontained memory error, 119/120 GSP timeout or error); most say an application
crashed on a healthy GPU (13, 31, 43, 45). NVIDIA's Xid catalogue gives each number a "Resolution
Bucket (Immediate Action)" (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
the Ampere-and-later catalogue; the numbers below are its rows in use), and the verdicts follow it:

- FAIL: the action is on the node (RESET_GPU, RESTART_BM the bare-metal node, RESTART_VM, the DBE
  and NVLink workflows, whose first step is a GPU reset or reboot, CHECK_MECHANICALS): the GPU must
  not take a job until that is done.
- WARN: hardware signals whose immediate action is IGNORE or RESTART_APP but whose investigation is
  the GPU's memory (63 row remap recorded: active at the next reset, 92 high single-bit ECC rate,
  93 InfoROM wear, 94 contained ECC error, 157 retirement failure); NVLink5 errors (144-150) that
  the driver itself calls "Nonfatal" (the "Fatal" ones FAIL); other actions (CONTACT_SUPPORT,
  UPDATE_SWFW, ...); and any number not in the catalogue, which is never a FAIL.
- OK: application-level Xids (RESTART_APP, IGNORE): the catalogue's action is to restart the
  application, nothing on the node. They are listed (a user's illegal memory access is Xid 13/31
  then 43/45 every day on a busy cluster): a WARN for them would mark every node that ever ran a
  crashing job, and gates that refuse WARN would drain healthy GPUs. A hardware fault that surfaces
  as Xid 13 or 31 shows in the ECC, remapping and hardware Xids the other checks and rows judge.

Counts are since the oldest record the kernel still holds (the ring buffer drops the oldest when
full: the evidence says how far back it reaches). A GPU reset does not clear the log: after a reset
and a passing `dcgmi diag -r 2`, list the Xid in `ignore_xids` until the next reboot, or reboot.

The same log says which GPUs the kernel enumerated on the bus ("pci 0000:06:00.0: [10de:2330] type
00 class 0x030200", drivers/pci/probe.c). An NVIDIA GPU enumerated there and gone from
/sys/bus/pci/devices now fell off the bus and was removed: NVML no longer lists it, so only the log
remembers it (FAIL, subject: its address). A log that no longer reaches back to the enumeration
says nothing either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import Area, Check, param
from nodeagent.core.finding import Finding, Status
from nodeagent.facts import kmsg, pci
from nodeagent.facts.kmsg import KernelLog, Record, XidEvent
from nodeagent.host import Host

ID = "xid"
CATALOGUE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
XID_DOCS = "https://docs.nvidia.com/deploy/xid-errors/index.html"
KMSG_DOCS = "https://www.kernel.org/doc/Documentation/ABI/testing/dev-kmsg"

# The catalogue's Xids in use: number -> (description, immediate action). Unused rows are left out:
# a number not here is reported as unknown (WARN).
RESTART_APP, IGNORE, RESET_GPU = "RESTART_APP", "IGNORE", "RESET_GPU"
CATALOGUE_ROWS: dict[int, tuple[str, str]] = {
    8: ("GPU stopped processing", RESTART_APP),
    11: ("Invalid or corrupted push buffer stream", RESTART_APP),
    13: ("Graphics Engine Exception", RESTART_APP),
    25: ("Invalid or illegal push buffer stream", RESTART_APP),
    31: ("GPU memory page fault", RESTART_APP),
    32: ("Invalid or corrupted push buffer stream", RESTART_APP),
    37: ("Driver firmware error", IGNORE),
    38: ("Driver firmware error", IGNORE),
    39: ("Copy Engine Exception", RESTART_APP),
    40: ("Copy Engine Exception", RESTART_APP),
    41: ("Copy Engine Exception", RESTART_APP),
    43: ("GPU stopped processing", IGNORE),
    44: ("Graphics Engine fault during context switch", IGNORE),
    45: ("Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    46: ("GPU stopped processing", RESET_GPU),
    48: ("Double Bit ECC Error", "WORKFLOW_XID_48"),
    54: ("Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    60: ("Video processor exception", RESTART_APP),
    62: ("Internal micro-controller halt", RESET_GPU),
    63: ("GPU memory remapping event", IGNORE),
    64: ("GPU memory remapping failure", RESET_GPU),
    66: ("Illegal access by driver", IGNORE),
    67: ("Illegal access by driver", IGNORE),
    68: ("NVDEC0 Exception", RESTART_APP),
    69: ("Graphics Engine class error", RESTART_APP),
    **{n: (f"CE{n - 67}: Unknown Error", RESTART_APP) for n in (70, 71, 72)},
    74: ("NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    **{n: (f"CE{n - 69}: Unknown Error", RESTART_APP) for n in (75, 76, 77)},
    78: ("vGPU Start Error", "UPDATE_SWFW"),
    79: ("GPU has fallen off the bus", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", RESTART_APP),
    82: ("NVJPG0 Error", RESTART_APP),
    83: ("NVDEC1 Error", RESTART_APP),
    84: ("NVDEC2 Error", RESTART_APP),
    85: ("CE9: Unknown Error", RESTART_APP),
    86: ("OFA Exception", RESTART_APP),
    88: ("NVDEC3 Error", RESTART_APP),
    89: ("NVDEC4 Error", RESTART_APP),
    92: ("High single-bit ECC error rate", IGNORE),
    93: ("Non-fatal violation of provisioned InfoROM wear limit", IGNORE),
    94: ("Contained memory error", RESTART_APP),
    95: ("Uncontained memory error", RESET_GPU),
    **{n: (f"NVDEC{n - 91} Error", RESTART_APP) for n in (96, 97, 98)},
    **{n: (f"NVJPG{n - 98} Error", RESTART_APP) for n in range(99, 106)},
    106: ("SMBPBI Test Message", IGNORE),
    107: ("SMBPBI Test Message Silent", IGNORE),
    109: ("Context Switch Timeout Error", RESET_GPU),
    110: ("Security Fault Error", RESET_GPU),
    119: ("GSP RPC Timeout", RESET_GPU),
    120: ("GSP Error", RESET_GPU),
    121: ("C2C Error", IGNORE),
    **{n: (f"CE{n - 116}: Unknown Error", RESTART_APP) for n in range(126, 136)},
    136: ("Link Training Failed", RESET_GPU),
    137: ("NVLink Privilege Error", IGNORE),
    139: ("OFA1 Error", RESTART_APP),
    140: ("ECC Unrecovered Error", RESET_GPU),
    141: ("CUDA Fast Path Error", IGNORE),
    142: ("NVENC3 Error", "CONTACT_SUPPORT"),
    143: ("GPU Initialization Error", RESET_GPU),
    144: ("NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("Key rotation Error", "RESTART_VM"),
    152: ("DLA SMMU Error", IGNORE),
    153: ("DLA timeout Error", IGNORE),
    154: ("GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK: SW Defined Error", RESET_GPU),
    156: ("Resource Retirement Event", RESET_GPU),
    157: ("Resource Retirement Failure", IGNORE),
    158: ("GPU Fatal Timeout", RESET_GPU),
    159: ("CHI Non-Data Error", "CHECK_UVM"),
    160: ("Channel Retirement Event", IGNORE),
    161: ("Channel Retirement Failure", IGNORE),
    162: ("Power Smoothing HW Circuitry capability reengaged", ""),
    163: ("Power Smoothing HW Circuitry capability disengaged", ""),
    164: ("Power Smoothing HW Circuitry low lifetime reached", ""),
    165: ("Power Smoothing HW Circuitry lifetime exhausted", ""),
    166: ("NVLink encrypted traffic before the link was configured for it", ""),
    167: ("PCIE_FATAL_TIMEOUT", ""),
    168: ("Errors found in WPR (write protected region)", ""),
    169: ("Internal micro-controller halt (SEC2)", ""),
    170: ("Interrupt seen in CC mode", ""),
    171: ("Uncorrectable DRAM error (details of an Xid 48)", ""),
    172: ("Uncorrectable SRAM error (details of an Xid 48)", ""),
}

# Immediate actions on the node: the GPU must be reset, the node rebooted or serviced first.
NODE_ACTIONS = {
    RESET_GPU: "Drain the node; with no process on the GPU reset it (`nvidia-smi -r -i {gpu}`) or "
    "reboot, then run `dcgmi diag -r 2` before returning it to service; contact NVIDIA support if "
    "it recurs",
    "RESTART_BM": "Drain the node and reboot it: a GPU that fell off the bus does not come back "
    "without one; if it recurs, check the slot, risers and power, reseat the GPU or RMA it",
    "RESTART_VM": "Drain the node and restart the virtual machine",
    "WORKFLOW_XID_48": "Drain the node; reset the GPU (`nvidia-smi -r -i {gpu}`) or reboot so the "
    "page retirement or row remapping takes effect, then check `nvidia-smi -q -d "
    "ROW_REMAPPER,PAGE_RETIREMENT -i {gpu}`; a remapping failure meets NVIDIA's RMA criteria",
    "WORKFLOW_NVLINK_ERR": "Drain the node; reset the GPU or reboot to clear the error, check "
    "`nvidia-smi nvlink -e` on this GPU and its peer, reseat the NVLink bridge or baseboard "
    "connectors and run `dcgmi diag -r 2` if it recurs (the catalogue's NVLink workflow decodes "
    "the register values)",
    "CHECK_MECHANICALS": "Power the node off and connect the GPU's auxiliary power cables",
}
APPLICATION_ACTIONS = {RESTART_APP, IGNORE, "WORKFLOW_XID_45"}
# Memory and wear reports that need no immediate action but whose investigation is the hardware.
HARDWARE_SIGNALS = {63, 92, 93, 94, 157}
NVLINK5 = range(144, 151)


@dataclass(frozen=True)
class Params:
    ignore_xids: tuple[int, ...] = param(
        (),
        "Xid numbers reported OK instead of judged, e.g. one already handled by a GPU reset and a "
        f"passing `dcgmi diag -r 2` (the kernel log keeps it until the next boot) ({CATALOGUE}).",
    )


@dataclass(frozen=True)
class Facts:
    log: KernelLog
    # The devices in /sys/bus/pci/devices now; None where the folder is not readable or recorded.
    pci_tree: frozenset[str] | None = None


def collect(host: Host) -> Facts:
    listed = host.listdir(pci.PCI_DIR)
    tree = frozenset(pci.normalize_address(a) for a in listed) if listed else None
    return Facts(log=kmsg.collect(host), pci_tree=tree)


@dataclass(frozen=True)
class Verdict:
    status: Status
    why: str  # the class, in words, for the summary
    action: str  # what to do, for the remediation


def _nvlink5_fatality(events: list[XidEvent]) -> str | None:
    """ "Fatal" or "Nonfatal" as the driver wrote it after the unit ("149, NETIR_LINK_EVT Fatal XC0
    ..."), the severity column of the catalogue's "XID 144-150 Decode" sheet; None when absent."""
    words = {e.detail.split()[1] for e in events if len(e.detail.split()) > 1}
    if "Fatal" in words:
        return "Fatal"
    return "Nonfatal" if "Nonfatal" in words else None


def classify(xid: int, events: list[XidEvent]) -> Verdict:
    """The verdict for one GPU's reports of one Xid, from the catalogue's immediate action."""
    row = CATALOGUE_ROWS.get(xid)
    if row is None:
        return Verdict(
            Status.WARN,
            "not in NVIDIA's Xid catalogue",
            "Look the number up in the catalogue for this driver version and GPU generation",
        )
    _, action = row
    if xid in NVLINK5:
        fatality = _nvlink5_fatality(events)
        if fatality == "Fatal":
            return Verdict(Status.FAIL, "a fatal NVLink error", NODE_ACTIONS[RESET_GPU])
        return Verdict(
            Status.WARN,
            f"an NVLink error the driver calls {fatality or 'neither fatal nor non-fatal'}",
            "Follow the catalogue's NVLink5 workflow (it decodes the register values); reset the GPU "
            "if it repeats on the same link",
        )
    if action in NODE_ACTIONS:
        return Verdict(Status.FAIL, f"the catalogue's action: {action}", NODE_ACTIONS[action])
    if xid in HARDWARE_SIGNALS:
        return Verdict(
            Status.WARN,
            "a memory or wear report: no immediate action, the hardware is what to investigate",
            "Watch `nvidia-smi -q -d ECC,ROW_REMAPPER -i {gpu}`; reset the GPU at the next "
            "opportunity so pending remaps take effect, and contact NVIDIA support if it recurs",
        )
    if action in APPLICATION_ACTIONS:
        return Verdict(
            Status.OK,
            "an application fault, not the GPU's: the catalogue's action is "
            + ("to restart the application" if action != IGNORE else "none"),
            "Nothing on the node; fix or restart the application (compute-sanitizer finds illegal "
            "accesses); run `dcgmi diag -r 2` if it recurs on this GPU only",
        )
    return Verdict(
        Status.WARN,
        f"the catalogue's action: {action or 'not given'}",
        "Follow the catalogue's entry for this Xid",
    )


def _subject_key(log: KernelLog, gpu: str, xid: int, what: str) -> str:
    return f"{log.source}: {gpu} Xid {xid} {what}"


def _processes(events: list[XidEvent]) -> str:
    names = sorted({f"{e.process or '?'} (pid {e.pid})" for e in events if e.pid is not None})
    return ", ".join(names[:5]) + (f", and {len(names) - 5} more" if len(names) > 5 else "")


def _finding(log: KernelLog, gpu: str, xid: int, events: list[XidEvent], p: Params) -> Finding:
    description = CATALOGUE_ROWS.get(xid, ("unknown Xid", ""))[0]
    verdict = classify(xid, events)
    if xid in p.ignore_xids:
        verdict = Verdict(Status.OK, "ignored by the ignore_xids parameter", "None (ignored)")
    evidence = {
        _subject_key(log, gpu, xid, "events"): str(len(events)),
        _subject_key(log, gpu, xid, "first"): events[0].record.line.strip(),
    }
    if len(events) > 1:
        evidence[_subject_key(log, gpu, xid, "last")] = events[-1].record.line.strip()
    processes = _processes(events)
    if processes:
        evidence[_subject_key(log, gpu, xid, "processes")] = processes
    action = CATALOGUE_ROWS.get(xid, ("", "not in the catalogue"))[1] or "not given"
    evidence[f"Xid catalogue: Xid {xid} immediate action"] = action
    evidence[_time_key(log)] = log.span()
    return Finding(
        ID,
        verdict.status,
        f"{gpu}: Xid {xid} ({description}), {len(events)} event(s) in the kernel log: {verdict.why}",
        evidence,
        expected="no Xid whose catalogue action is on the GPU or node",
        remediation=f"{verdict.action.format(gpu=gpu)} ({CATALOGUE}).",
        subject=gpu,
    )


def _unparsable(log: KernelLog, records: tuple[Record, ...]) -> list[Finding]:
    if not records:
        return []
    shown = {f"{log.source}: unparsable Xid line {i + 1}": r.line.strip() for i, r in enumerate(records[:5])}
    return [
        Finding(
            ID,
            Status.UNKNOWN,
            f"{len(records)} NVRM Xid line(s) without the structure "
            "'NVRM: Xid (PCI:DDDD:BB:DD): N, ...': cannot tell which GPU or which error",
            shown,
            expected="NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., message",
            remediation=f"Read the lines in `dmesg` by hand against the catalogue ({CATALOGUE}); report "
            "the format with a snapshot so the parser learns it.",
            subject="kernel log",
        )
    ]


def _time_key(log: KernelLog) -> str:
    # "... time": what the log covers differs on every host and every run, and the fleet comparison
    # leaves "time" keys out (nodeagent.compare.fleet.EXCLUDED_KEYS) rather than report it as drift.
    return f"{log.source}: time"


def _clean(log: KernelLog, not_kernel: tuple[Record, ...]) -> Finding:
    evidence = {log.source: f"no '{kmsg.XID_MARK}' record from the kernel", _time_key(log): log.span()}
    if not_kernel:
        # Facility != LOG_KERN: written to /dev/kmsg by a process, not by the driver (ABI document).
        evidence[f"{log.source}: Xid lines written by user space (ignored)"] = not_kernel[0].line.strip()
    return Finding(
        ID,
        Status.OK,
        "no Xid reported by the NVIDIA driver in the kernel log",
        evidence,
        subject="kernel log",
    )


def evaluate(f: Facts, p: Params) -> list[Finding]:
    log = f.log
    if log.reason:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"Xid events not known: {log.reason}",
                dict(log.evidence) or {log.source: log.reason},
                remediation=f"Run as root, or record the node with `nodeagent snapshot` ({KMSG_DOCS}).",
                subject="kernel log",
            )
        ]
    scan = kmsg.scan_xids(log.records)
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for event in scan.events:
        groups.setdefault((event.gpu, event.xid), []).append(event)
    findings = [_finding(log, gpu, xid, events, p) for (gpu, xid), events in sorted(groups.items())]
    findings += _unparsable(log, scan.unparsable)
    if not findings:
        findings.append(_clean(log, scan.not_kernel))
    return findings + _off_the_bus(log, f.pci_tree)


def _off_the_bus(log: KernelLog, tree: frozenset[str] | None) -> list[Finding]:
    """NVIDIA GPUs the kernel enumerated (at boot, or on a rescan) that the PCI tree no longer
    holds: a GPU that fell off the bus and was removed, which no NVML query can show any more.
    Nothing is said when the log does not reach back to the enumeration of a GPU (the ring buffer
    drops its oldest records); SKIPPED when the PCI tree cannot be read."""
    gpus = [e for e in kmsg.enumerated(log.records).values() if e.nvidia_gpu]
    if not gpus:
        return []
    seen = {f"{log.source}: {e.address}": e.record.line.strip() for e in gpus}
    if tree is None:
        return [
            Finding(
                ID,
                Status.SKIPPED,
                f"{len(gpus)} NVIDIA GPU(s) enumerated in the kernel log; {pci.PCI_DIR} not readable, "
                "so whether they are still on the bus is not known",
                {**seen, pci.PCI_DIR: "(not readable)"},
                subject="bus",
            )
        ]
    gone = [e for e in gpus if e.address not in tree]
    if not gone:
        return [
            Finding(
                ID,
                Status.OK,
                f"the {len(gpus)} NVIDIA GPU(s) the kernel enumerated are all in the PCI tree",
                seen,
                subject="bus",
            )
        ]
    return [_gone(log, e) for e in gone]


def _gone(log: KernelLog, e: kmsg.Enumerated) -> Finding:
    return Finding(
        ID,
        Status.FAIL,
        f"GPU {e.address} [{e.vendor[2:]}:{e.device[2:]}] was enumerated by the kernel and is gone "
        "from the PCI tree: it fell off the bus (or was removed)",
        {f"{log.source}: {e.address}": e.record.line.strip(), f"{pci.PCI_DIR}/{e.address}": "(absent)"},
        expected="every GPU the kernel enumerated still in the PCI tree",
        remediation="Drain the node; look for Xid 79 and PCIe AER errors for the address in `dmesg`, "
        "then power-cycle it (a GPU off the bus does not come back with a reset) and reseat or "
        f"replace the GPU if it recurs ({CATALOGUE}).",
        subject=e.address,
    )


CHECK = Check(
    id=ID,
    title="Xid errors and GPUs lost from the bus (kernel log)",
    area=Area.GPU,
    tags=("preflight", "gpu"),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    commands=(kmsg.COMMAND,),
    # The PCI tree's folders, to compare with the GPUs the kernel enumerated.
    paths=(f"{pci.PCI_DIR}/*/class",),
)
