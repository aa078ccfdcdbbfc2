"""GPU health from recorded or remote `nvidia-smi` output, for hosts where NVML cannot be called.

`nvidia-smi -q -x` prints every GPU as XML (schema: the nvsmi_device_vN.dtd shipped with the
driver; field meanings: `man nvidia-smi`, https://docs.nvidia.com/deploy/nvidia-smi/index.html).
The XML changed over the years and this parser reads all the forms met in public recordings:
- ECC counts as <single_bit>/<double_bit> per location (R375) or as sram_/dram_ counters (R470+);
- clock reasons under <clocks_throttle_reasons> (before R535) or <clocks_event_reasons>;
- power under <power_readings> (power_limit, enforced_power_limit) or <gpu_power_readings>
  (requested_power_limit, current_power_limit);
- the slowdown temperature as an absolute <gpu_temp_slow_threshold> or, since R550 on some GPUs,
  relative to T.Limit (<gpu_temp_tlimit> is the margin to T.Limit; slowdown starts when it falls to
  <gpu_temp_slow_tlimit_threshold>).
- MIG: <mig_mode><current_mig>/<pending_mig> (R450+) and, per MIG device, <mig_devices><mig_device>
  with <gpu_instance_id>, <compute_instance_id>, <ecc_error_count><volatile_count> and
  <fb_memory_usage>; <mig_devices> reads "None" when the GPU has no MIG device;
- recovery: <gpu_reset_status><reset_required>/<drain_and_reset_recommended> (R525-R570; "Requested
  functionality has been deprecated" since R575) and <gpu_recovery_action> (R575+: None, Reset,
  Reboot, Drain P2P, Drain and Reset, ...);
- PCIe: <pci><pci_gpu_link_info><pcie_gen><max_link_gen>/<current_link_gen> and, since R510,
  <max_device_link_gen>/<max_host_link_gen> (the GPU's and the host's own maxima); widths "16x".
NVLink state is not in that XML: it comes from `nvidia-smi nvlink -s` ("Link 0: 25 GB/s" or
"Link 0: <inactive>") and the error counters from `nvidia-smi nvlink -e`.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from nodeagent.facts import gpu_report
from nodeagent.facts.gpu_report import SMI_COMMAND, SMI_SOURCE, GpuHealth, GpuReport, NvLink
from nodeagent.host import CmdResult, Host

COMMAND = SMI_COMMAND  # ("nvidia-smi", "-q", "-x"), declared in facts.gpu_report
NVLINK_STATUS = ("nvidia-smi", "nvlink", "-s")
NVLINK_ERRORS = ("nvidia-smi", "nvlink", "-e")
COMMANDS = (COMMAND, NVLINK_STATUS, NVLINK_ERRORS)
SOURCE = SMI_SOURCE
NVLINK_SOURCE = "nvidia-smi nvlink -s"

# Words nvidia-smi prints instead of a value the GPU or driver does not provide.
_UNAVAILABLE = {
    "n/a",
    "not supported",
    "unknown error",
    "insufficient permissions",
    "requested functionality has been deprecated",
    "not available",
    "",
}
_NUMBER = re.compile(r"^(-?\d{1,20}(?:\.\d{1,20})?)\s*([A-Za-z%/]*)$")
_PSTATE = re.compile(r"^P(\d{1,2})$")

# Where each link and load value is in a <gpu> element: parsed from there, and named in evidence.
_LINK = "pci/pci_gpu_link_info"
PCIE_PATHS = {
    "gen_current": f"{_LINK}/pcie_gen/current_link_gen",
    "gen_max": f"{_LINK}/pcie_gen/max_link_gen",
    "gen_device_max": f"{_LINK}/pcie_gen/max_device_link_gen",
    "gen_host_max": f"{_LINK}/pcie_gen/max_host_link_gen",
    "width_current": f"{_LINK}/link_widths/current_link_width",
    "width_max": f"{_LINK}/link_widths/max_link_width",
}
LOAD_PATHS = {"utilization_pct": "utilization/gpu_util", "performance_state": "performance_state"}
RESET_REQUIRED = "gpu_reset_status/reset_required"
DRAIN_AND_RESET = "gpu_reset_status/drain_and_reset_recommended"
RECOVERY_ACTION = "gpu_recovery_action"
MIG_MODE_PATHS = ("mig_mode/current_mig", "mig_mode/pending_mig")
MIG_DEVICES = "mig_devices"


@dataclass
class _Values:
    """Typed reads of one GPU's XML element; unparsable values are recorded, not raised."""

    gpu: ET.Element
    where: str
    problems: list[str] = field(default_factory=list)
    by_path: dict[str, str] = field(default_factory=dict)  # path below <gpu> -> what was wrong
    prefix: str = ""  # path of `gpu` below the <gpu> element, for an element inside it

    def problem(self, path: str, what: str) -> None:
        self.problems.append(f"{self.where} {self.prefix}{path}: {what}")
        self.by_path[f"{self.prefix}{path}"] = what

    def inside(self, node: ET.Element, prefix: str) -> _Values:
        """The same reader on an element below the GPU (a <mig_device>): problems go to the GPU."""
        return dataclasses.replace(self, gpu=node, prefix=f"{self.prefix}{prefix}/")

    def text(self, path: str) -> str | None:
        node = self.gpu.find(path)
        if node is None or node.text is None:
            return None
        value = node.text.strip()
        return None if value.strip("[]").lower() in _UNAVAILABLE else value

    def number(self, path: str) -> float | None:
        value = self.text(path)
        if value is None:
            return None
        m = _NUMBER.match(value)
        if not m:
            self.problem(path, f"unparsable value {value[:60]!r}")
            return None
        return float(m.group(1))

    def pstate(self, path: str) -> int | None:
        """ "P0".."P15" -> 0..15; "Unknown" (NVML_PSTATE_UNKNOWN) -> None."""
        value = self.text(path)
        if value is None or value.lower() == "unknown":
            return None
        m = _PSTATE.match(value)
        if not m:
            self.problem(path, f"unparsable value {value[:60]!r}")
            return None
        return int(m.group(1))

    def integer(self, path: str) -> int | None:
        value = self.number(path)
        return None if value is None else int(value)

    def flag(self, path: str) -> bool | None:
        value = self.text(path)
        if value is None:
            return None
        word = value.lower()
        if word in ("enabled", "yes", "active", "on"):
            return True
        if word in ("disabled", "no", "not active", "off"):
            return False
        self.problem(path, f"unexpected value {value[:60]!r}")
        return None

    def recovery_action(self, path: str) -> str | None:
        """<gpu_recovery_action> as a facts.gpu_report.RECOVERY_ACTIONS name; an unknown word is a problem."""
        value = self.text(path)
        if value is None:
            return None
        action = gpu_report.RECOVERY_WORDS.get(" ".join(value.lower().split()))
        if action is None:
            self.problem(path, f"unknown recovery action {value[:60]!r}")
        return action

    def first(self, *paths: str) -> float | None:
        for path in paths:
            value = self.number(path)
            if value is not None:
                return value
        return None

    def uncorrectable(self, path: str) -> int | None:
        """Uncorrectable ECC errors under volatile/ or aggregate/, in any of the XML generations."""
        node = self.gpu.find(path)
        if node is None:
            return None
        if node.find("double_bit/total") is not None:  # before R470: per-location, with a total
            return self.integer(f"{path}/double_bit/total")
        counts = [
            self.integer(f"{path}/{child.tag}")
            for child in node
            if "uncorrectable" in child.tag and "threshold" not in child.tag
        ]
        known = [c for c in counts if c is not None]
        return sum(known) if known else None


@dataclass(frozen=True)
class SmiLog:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuHealth, ...]
    problems: tuple[str, ...] = ()


def parse_xml(text: str) -> SmiLog:
    """`nvidia-smi -q -x` output -> GPUs (without NVLink state). ValueError when it is not that XML."""
    start = text.find("<nvidia_smi_log")
    end = text.rfind("</nvidia_smi_log>")
    if start < 0 or end < start:
        raise ValueError("no <nvidia_smi_log> element")
    # Imported here: only snapshots and remote hosts parse XML, `nodeagent check` here never does.

    try:
        # The DOCTYPE before the element names a DTD that is not needed (and never fetched).
        root = ET.fromstring(text[start : end + len("</nvidia_smi_log>")])
    except ET.ParseError as e:
        raise ValueError(f"malformed XML: {e}") from None
    driver = _plain(root.findtext("driver_version"))
    cuda = _plain(root.findtext("cuda_version"))
    problems: list[str] = []
    gpus = []
    for index, node in enumerate(root.findall("gpu")):
        gpu, found = _parse_gpu(index, node)
        gpus.append(gpu)
        problems += found
    return SmiLog(driver, cuda, tuple(gpus), tuple(problems))


def _plain(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value.strip("[]").lower() in _UNAVAILABLE else value


def _parse_gpu(index: int, node: ET.Element) -> tuple[GpuHealth, list[str]]:
    bus = _plain(node.get("id")) or _plain(node.findtext("pci/pci_bus_id"))
    v = _Values(node, f"GPU {bus or index}")
    power = "gpu_power_readings" if node.find("gpu_power_readings") is not None else "power_readings"
    reasons = _clock_reasons(node, v)
    temp, slowdown, margin = _temperatures(v)
    mig_instances, mig_listed = _mig_instances(v)
    gpu = GpuHealth(
        index=index,
        name=v.text("product_name"),
        pci_address=gpu_report.normalize_bus_id(bus) if bus else None,
        uuid=v.text("uuid"),
        persistence_mode=v.flag("persistence_mode"),
        ecc_enabled=v.flag("ecc_mode/current_ecc"),
        volatile_uncorrectable=v.uncorrectable("ecc_errors/volatile"),
        aggregate_uncorrectable=v.uncorrectable("ecc_errors/aggregate"),
        retired_pages_sbe=v.integer("retired_pages/multiple_single_bit_retirement/retired_count"),
        retired_pages_dbe=v.integer("retired_pages/double_bit_retirement/retired_count"),
        retirement_pending=v.flag("retired_pages/pending_retirement"),
        remapped_correctable=v.integer("remapped_rows/remapped_row_corr"),
        remapped_uncorrectable=v.integer("remapped_rows/remapped_row_unc"),
        remap_pending=v.flag("remapped_rows/remapped_row_pending"),
        remap_failure=v.flag("remapped_rows/remapped_row_failure"),
        reset_required=v.flag(RESET_REQUIRED),
        drain_and_reset=v.flag(DRAIN_AND_RESET),
        recovery_action=v.recovery_action(RECOVERY_ACTION),
        clock_reasons=reasons,
        power_limit_w=v.first(f"{power}/requested_power_limit", f"{power}/power_limit"),
        enforced_power_limit_w=v.first(f"{power}/current_power_limit", f"{power}/enforced_power_limit"),
        default_power_limit_w=v.number(f"{power}/default_power_limit"),
        max_power_limit_w=v.number(f"{power}/max_power_limit"),
        temperature_c=temp,
        slowdown_temp_c=slowdown,
        slowdown_margin_c=margin,
        mig_current=v.flag(MIG_MODE_PATHS[0]),
        mig_pending=v.flag(MIG_MODE_PATHS[1]),
        mig_instances=mig_instances,
        mig_listed=mig_listed,
        pcie=_pcie(v),
        utilization_pct=v.number(LOAD_PATHS["utilization_pct"]),
        performance_state=v.pstate(LOAD_PATHS["performance_state"]),
        unparsable=dict(v.by_path),
    )
    return gpu, v.problems


def _clock_reasons(node: ET.Element, v: _Values) -> tuple[str, ...] | None:
    """The active clock event reasons (<clocks_event_reasons>, before R535 <clocks_throttle_reasons>),
    named as NVML names them; None when the output has neither."""
    reasons_node = node.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons_node is None:
        reasons_node = node.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if reasons_node is None or not len(reasons_node):
        return None
    active = [
        child.tag.removeprefix(prefix) for child in reasons_node if v.flag(f"{reasons_node.tag}/{child.tag}")
    ]
    return tuple("display_clocks_setting" if r == "display_clock_setting" else r for r in active)


def _temperatures(v: _Values) -> tuple[float | None, float | None, float | None]:
    """GPU temperature, its slowdown threshold, and the margin between them (from the T.Limit
    readings where the absolute ones are not printed)."""
    temp = v.number("temperature/gpu_temp")
    slowdown = v.number("temperature/gpu_temp_slow_threshold")
    margin = None if temp is None or slowdown is None else slowdown - temp
    if margin is None:
        tlimit = v.number("temperature/gpu_temp_tlimit")
        slow_tlimit = v.number("temperature/gpu_temp_slow_tlimit_threshold")
        if tlimit is not None and slow_tlimit is not None:
            margin = tlimit - slow_tlimit
    return temp, slowdown, margin


def _pcie(v: _Values) -> gpu_report.PcieLink | None:
    values = {name: v.integer(path) for name, path in PCIE_PATHS.items()}
    return gpu_report.PcieLink(**values) if any(x is not None for x in values.values()) else None


def _mig_instances(v: _Values) -> tuple[tuple[gpu_report.MigInstance, ...], bool]:
    """<mig_devices>: its <mig_device>s, and whether it lists any ("None": listed, empty)."""
    node = v.gpu.find(MIG_DEVICES)
    if node is None:
        return (), False
    devices = node.findall("mig_device")
    if not devices and (node.text or "").strip().lower() not in ("", "none"):
        return (), False  # "N/A" or another word: not listed
    where = [v.inside(d, f"{MIG_DEVICES}/mig_device[{i + 1}]") for i, d in enumerate(devices)]
    return tuple(_mig_instance(w, i) for i, w in enumerate(where)), True


def _mig_instance(v: _Values, position: int) -> gpu_report.MigInstance:
    index = v.integer("index")
    return gpu_report.MigInstance(
        index=position if index is None else index,
        gpu_instance_id=v.integer("gpu_instance_id"),
        compute_instance_id=v.integer("compute_instance_id"),
        multiprocessors=v.integer("device_attributes/shared/multiprocessor_count"),
        memory_mib=v.number("fb_memory_usage/total"),
        volatile_uncorrectable=v.uncorrectable("ecc_error_count/volatile_count"),
    )


@dataclass(frozen=True)
class LinkBlock:
    """One "GPU n: NAME (UUID: ...)" block of `nvidia-smi nvlink` output."""

    index: int
    uuid: str | None
    links: Mapping[int, str]  # link -> the text after "Link n:"
    name: str | None = None  # "NVIDIA H100 PCIe"


_GPU_HEADER = re.compile(r"^GPU\s+(\d{1,20}):\s*(.*?)\s*(?:\(UUID:\s*(\S+?)\))?\s*$")
_LINK_LINE = re.compile(r"^\s*Link\s+(\d{1,20}):\s*(.*?)\s*$")


def parse_nvlink_blocks(text: str) -> list[LinkBlock]:
    """Split `nvidia-smi nvlink -s|-e` output per GPU; repeated "Link n:" lines are joined with "; "."""
    blocks: list[LinkBlock] = []
    current: dict[int, str] | None = None
    for line in text.splitlines():
        header = _GPU_HEADER.match(line.strip())
        if header:
            current = {}
            name = header.group(2) or None
            blocks.append(LinkBlock(int(header.group(1)), header.group(3), current, name))
            continue
        m = _LINK_LINE.match(line)
        if m and current is not None:
            link = int(m.group(1))
            current[link] = f"{current[link]}; {m.group(2)}" if link in current else m.group(2)
    return blocks


_SPEED = re.compile(r"^\d+(?:\.\d+)?\s*[GM]B/s$")


def link_state(text: str) -> tuple[bool | None, str | None]:
    """ "25 GB/s" -> (True, "25 GB/s"); "<inactive>" -> (False, None); anything else -> (None, None).

    Only a bandwidth figure counts as up: an unknown word must not pass for a working link.
    """
    if _SPEED.match(text):
        return True, text
    if "inactive" in text.lower():
        return False, None
    return None, None


_ERROR_ITEM = re.compile(r"([A-Za-z][A-Za-z ]*?)\s+Errors?:\s*(\d{1,20})(?!\d)")


def parse_link_errors(text: str) -> dict[str, int]:
    """ "Replay Errors: 0; Recovery Errors: 0; CRC Errors: 3" -> {"replay": 0, "recovery": 0, "crc": 3}."""
    return {m.group(1).strip().lower().replace(" ", "_"): int(m.group(2)) for m in _ERROR_ITEM.finditer(text)}


def _match(blocks: list[LinkBlock], gpu: GpuHealth) -> LinkBlock | None:
    """The block of this GPU: by UUID where both name one, else by nvidia-smi's index."""
    for block in blocks:
        if block.uuid and gpu.uuid and block.uuid == gpu.uuid:
            return block
    return next((b for b in blocks if b.index == gpu.index), None)


def with_nvlinks(gpus: tuple[GpuHealth, ...], status: str, errors: str | None) -> tuple[GpuHealth, ...]:
    status_blocks = parse_nvlink_blocks(status)
    error_blocks = parse_nvlink_blocks(errors or "")
    out = []
    for gpu in gpus:
        block = _match(status_blocks, gpu)
        if block is None:
            out.append(gpu)
            continue
        counters = _match(error_blocks, gpu)
        links = []
        for link, text in sorted(block.links.items()):
            active, speed = link_state(text)
            counts = parse_link_errors(counters.links.get(link, "")) if counters else {}
            links.append(NvLink(link=link, active=active, speed=speed, errors=counts))
        out.append(dataclasses.replace(gpu, nvlinks=tuple(links)))
    return tuple(out)


@dataclass(frozen=True)
class SmiRun:
    """One run (or recording) of `nvidia-smi -q -x`: its output parsed, or why it could not be."""

    result: CmdResult
    log: SmiLog | None = None  # None: the command failed, or its output did not parse
    error: str | None = None  # why the output did not parse


def run_log(host: Host) -> SmiRun:
    """`nvidia-smi -q -x` on this host, run and parsed once per run (the gpu check and facts share it)."""

    def load() -> SmiRun:
        result = host.run(COMMAND, timeout=15)
        if not result.ok:
            return SmiRun(result)
        try:
            return SmiRun(result, log=parse_xml(result.stdout))
        except ValueError as e:
            return SmiRun(result, error=str(e))

    return host.memo("facts.nvidia_smi_log", load)


def _gpus_from_nvlink(host: Host) -> tuple[GpuHealth, ...]:
    status = host.run(NVLINK_STATUS, timeout=15)
    if not status.ok:
        return ()
    blocks = parse_nvlink_blocks(status.stdout)
    gpus = tuple(GpuHealth(index=b.index, name=b.name, uuid=b.uuid) for b in blocks)
    errors = host.run(NVLINK_ERRORS, timeout=15)
    return with_nvlinks(gpus, status.stdout, errors.stdout if errors.ok else None)


def collect_report(
    host: Host, module_version: str | None = None, present: Callable[[], list[str]] = list
) -> GpuReport:
    """The GPU report from `nvidia-smi -q -x` and `nvidia-smi nvlink -s/-e` (recorded or remote).
    `present` lists the NVIDIA GPUs the host shows without the driver (PCI, /proc), asked only when
    nvidia-smi gave nothing, to say whether GPUs are there without a report."""
    run = run_log(host)
    result = run.result
    base = GpuReport(SOURCE, kernel_module_version=module_version, nvlink_source=NVLINK_SOURCE)
    if not result.ok:
        why = result.first_line()
        evidence = {shlex.join(COMMAND): why}
        if module_version:
            evidence[f"{gpu_report.MODULE_VERSION} or {gpu_report.PROC_VERSION}"] = module_version
        if "version mismatch" in why.lower():  # "Failed to initialize NVML: Driver/library version mismatch"
            return dataclasses.replace(base, failure=f"`nvidia-smi -q -x` failed: {why}", evidence=evidence)
        linked = _gpus_from_nvlink(host)
        if linked:
            # Only `nvidia-smi nvlink -s` was recorded: its "GPU n: NAME (UUID: ...)" headers name
            # the GPUs, enough to judge their links (health values stay unknown).
            return dataclasses.replace(base, source=NVLINK_SOURCE, gpus=linked)
        devices = present()
        if devices:
            shown = ", ".join(devices[:4]) + (", ..." if len(devices) > 4 else "")
            reason = f"{len(devices)} NVIDIA GPU(s) ({shown}) but no `nvidia-smi -q -x` data: {why}"
            evidence["NVIDIA GPUs (PCI, /proc/driver/nvidia/gpus)"] = ", ".join(devices)
        else:
            reason = (
                f"no NVIDIA GPU: none on the PCI bus, no {gpu_report.NVIDIA_PROC_GPUS}, "
                f"and no `nvidia-smi -q -x` data ({why})"
            )
        return dataclasses.replace(base, reason=reason, evidence=evidence)
    log = run.log
    if log is None:
        return dataclasses.replace(base, error=f"unparsable `nvidia-smi -q -x` output: {run.error}")
    base = dataclasses.replace(
        base, driver_version=log.driver_version, cuda_version=log.cuda_version, problems=log.problems
    )
    if not log.gpus:
        return dataclasses.replace(
            base, reason=f"`nvidia-smi -q -x` lists no GPU (driver {log.driver_version or '?'})"
        )
    status = host.run(NVLINK_STATUS, timeout=15)
    if not status.ok:
        return dataclasses.replace(
            base, gpus=log.gpus, nvlink_reason=f"no `nvidia-smi nvlink -s` data: {status.first_line()}"
        )
    errors = host.run(NVLINK_ERRORS, timeout=15)
    gpus = with_nvlinks(log.gpus, status.stdout, errors.stdout if errors.ok else None)
    return dataclasses.replace(base, gpus=gpus)
