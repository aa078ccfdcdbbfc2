"""NVLink: the links a GPU is wired for are up, without errors.

A link that trained down or dropped out makes NCCL route that GPU's traffic over fewer links or
over PCIe: all-reduce slows down for the whole job, with no error anywhere. DCGM's diagnostic checks
the same thing against an expected count (`dcgmi diag -r 2 -p pcie.gpu_nvlinks_expected_up=N`).

Not every link a GPU has is wired: an H100 PCIe card has 18 links and a pair of NVLink bridges uses
12 of them (`topo -m` says NV12), and a partitioned NVSwitch system disables some. So an inactive
link is a fault only against an expectation, taken in this order:
  1. the `expected_links` parameter (a playbook's per-platform count, as DCGM's);
  2. `nvidia-smi topo -m`: the NV# cells of the GPU's row. On direct-connect systems (bridges,
     DGX-1's hybrid cube mesh) the links to each peer add up; on NVSwitch systems every peer shows
     all of the GPU's links (NV12 to each of 7 peers on a DGX A100), so the sum exceeds the links
     the GPU has and the largest cell is the count;
  3. the GPUs of the same model on this node: fewer active links than another one has is a link
     down (FAIL) when some of its links are up, and a WARN when none is (a card without a bridge
     looks the same). The fleet comparison adds the same model on other nodes.

Facts: NVML (nvmlDeviceGetNvLinkState, ...RemotePciInfo, ...ErrorCounter) on this machine, a
recorded `nvidia-smi nvlink -s` / `-e` in snapshots (see nodeagent.facts.nvml and nvidia_smi).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.api.check import Area, Check, param
from nodeagent.checks import gpu
from nodeagent.core.finding import Finding, Status
from nodeagent.core.parse import format_cpulist
from nodeagent.facts import gpu_report, gpus, nvidia_smi, nvml
from nodeagent.facts.gpu_report import GpuHealth, GpuReport
from nodeagent.facts.topo_matrix import COMMAND as TOPO_COMMAND
from nodeagent.facts.topo_matrix import TopoMatrix
from nodeagent.host import Host

ID = "nvlink"
TOPO = " ".join(TOPO_COMMAND)
NVLINK_DOCS = "https://docs.nvidia.com/deploy/nvml-api/group__NvLink.html"
DCGM_DIAG_DOCS = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
FABRIC_MANAGER_DOCS = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"


@dataclass(frozen=True)
class Params:
    max_link_errors: int = param(
        0,
        "NVLink replay, recovery and CRC counters stay at 0 on a sound link; any count means a marginal "
        f"link retrying traffic (nvmlDeviceGetNvLinkErrorCounter, {NVLINK_DOCS}).",
    )
    expected_links: int = param(
        0,
        "Active NVLinks each GPU should have (12 on A100 SXM, 18 on H100 SXM, 12 on an H100 PCIe pair "
        f"with bridges); 0 takes the count from `{TOPO}`, else from the node's other GPUs of the same "
        f"model (DCGM's pcie.gpu_nvlinks_expected_up, {DCGM_DIAG_DOCS}).",
    )


@dataclass(frozen=True)
class Facts:
    report: GpuReport  # the same report the gpu check reads (collected once per run)
    matrix: TopoMatrix | None = None  # `nvidia-smi topo -m`: the links each GPU is wired for


def collect(host: Host) -> Facts:
    report = gpu.collect(host).report
    matrix = gpus.topo_matrix(host)[0] if any(g.nvlinks for g in report.gpus) else None
    return Facts(report, matrix)


@dataclass(frozen=True)
class Expected:
    links: int
    source: str  # where the count comes from, for the evidence


def _expected(g: GpuHealth, f: Facts, p: Params) -> Expected | None:
    if p.expected_links:
        return Expected(p.expected_links, "the expected_links parameter")
    name = f"GPU{g.index}"
    if f.matrix is None or name not in f.matrix.gpus:
        return None
    peers = f.matrix.nvlinks(name)
    cells = ", ".join(f"{peer} NV{n}" for peer, n in peers.items()) or "no NV# cell"
    total = sum(peers.values())
    wired = total if total <= len(g.nvlinks) else max(peers.values())
    return Expected(wired, f"{TOPO}: {name} {cells}")


def _key(r: GpuReport, g: GpuHealth, what: str) -> str:
    return f"{r.nvlink_source}: GPU{g.index} {what}"


def _active(g: GpuHealth) -> int:
    return sum(1 for link in g.nvlinks if link.active)


def _state(link: gpu_report.NvLink) -> str:
    if link.active:
        return link.speed or "active"
    return "inactive" if link.active is False else "unknown"


def _unknown(r: GpuReport, g: GpuHealth) -> Finding | None:
    unknown = [link.link for link in g.nvlinks if link.active is None]
    if not unknown:
        return None
    return Finding(
        ID,
        Status.UNKNOWN,
        f"{g.label}: state of NVLink(s) {format_cpulist(unknown)} not understood",
        {_key(r, g, f"link {link.link}"): _state(link) for link in g.nvlinks if not link.active},
        expected="a bandwidth figure (active) or <inactive> per link",
        remediation=f"Look at `nvidia-smi nvlink -s -i {g.index}` on the node.",
        subject=g.subject,
    )


def _short(r: GpuReport, g: GpuHealth, want: Expected, status: Status) -> Finding:
    active = _active(g)
    down = [link.link for link in g.nvlinks if link.active is False]
    evidence = {_key(r, g, f"link {link.link}"): _state(link) for link in g.nvlinks if not link.active}
    evidence[_key(r, g, "active links")] = f"{active} of {len(g.nvlinks)}"
    evidence["expected active links"] = f"{want.links} ({want.source})"
    return Finding(
        ID,
        status,
        f"{g.label}: {active} NVLink(s) active where {want.links} are expected"
        + (f"; inactive: {format_cpulist(down)}" if down else f" (it has {len(g.nvlinks)})"),
        evidence,
        expected=f"{want.links} NVLinks active",
        remediation=f"`nvidia-smi nvlink -s -i {g.index}` shows the links. Reset the GPU "
        f"(`nvidia-smi -r -i {g.index}`) or reboot; on NVSwitch systems check `systemctl status "
        f"nvidia-fabricmanager` ({FABRIC_MANAGER_DOCS}); on PCIe cards reseat the NVLink bridge; then "
        f"`dcgmi diag -r 2 -p pcie.gpu_nvlinks_expected_up={want.links}`. A link that stays down needs a "
        "reseat or RMA.",
        subject=g.subject,
    )


def _link_count(r: GpuReport, g: GpuHealth, linked: list[GpuHealth], f: Facts, p: Params) -> Finding | None:
    """The finding about the GPU's active link count, where it falls short of what it is wired for."""
    active = _active(g)
    want = _expected(g, f, p)
    if want is not None:
        return _short(r, g, want, Status.FAIL) if active < want.links else None
    # Peers: the same model with the same number of links (a mixed node compares like with like).
    best = max(_active(o) for o in linked if (o.name, len(o.nvlinks)) == (g.name, len(g.nvlinks)))
    if active < best:
        peer = Expected(best, f"active on another {g.name or 'GPU'} of this node")
        # Some links up and some down is a fault; none up may be a card without a bridge.
        return _short(r, g, peer, Status.FAIL if active else Status.WARN)
    if any(link.active is False for link in g.nvlinks):
        return _unjudged(r, g)
    return None


def _unjudged(r: GpuReport, g: GpuHealth) -> Finding:
    """Some links inactive and nothing says how many are wired: may be by design, may be a fault."""
    active = _active(g)
    down = [link.link for link in g.nvlinks if link.active is False]
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: {active} of {len(g.nvlinks)} NVLinks active, no expected count to judge the inactive "
        f"{format_cpulist(down)}",
        {_key(r, g, "active links"): f"{active} of {len(g.nvlinks)}", TOPO: "no NV# cells for this GPU"},
        expected="an expected link count: from `nvidia-smi topo -m`, or the expected_links parameter",
        remediation="PCIe cards with NVLink bridges and partitioned NVSwitch systems leave some links "
        f"unconnected by design. Record `{TOPO}` with the snapshot, or set nvlink.expected_links for the "
        "platform in the playbook, so the count can be judged.",
        subject=g.subject,
    )


def _errors(r: GpuReport, g: GpuHealth, p: Params) -> Finding | None:
    bad = {
        (link.link, counter): count
        for link in g.nvlinks
        for counter, count in link.errors.items()
        if count > p.max_link_errors
    }
    if not bad:
        return None
    # In recordings the counters come from their own command.
    source = "nvidia-smi nvlink -e" if r.nvlink_source == nvidia_smi.NVLINK_SOURCE else r.nvlink_source
    shown = ", ".join(f"link {link} {counter} {count}" for (link, counter), count in sorted(bad.items()))
    return Finding(
        ID,
        Status.WARN,
        f"{g.label}: NVLink error counters above {p.max_link_errors}: {shown}",
        {
            f"{source}: GPU{g.index} link {link} {counter} errors": str(count)
            for (link, counter), count in bad.items()
        },
        expected=f"at most {p.max_link_errors} errors per counter",
        remediation=f"Watch whether they grow (`nvidia-smi nvlink -e -i {g.index}`); run `dcgmi diag -r 2`; "
        "growing CRC or recovery counts point at a marginal link (reseat the GPU or baseboard, RMA).",
        subject=g.subject,
    )


def _surplus(r: GpuReport, linked: list[GpuHealth], p: Params) -> Finding | None:
    """More active links than the platform's count: a wrong parameter or a different platform."""
    extra = [g for g in linked if p.expected_links and _active(g) > p.expected_links]
    if not extra:
        return None
    names = ", ".join(f"GPU{g.index} ({_active(g)})" for g in extra)
    return Finding(
        ID,
        Status.WARN,
        f"{len(extra)} GPU(s) with more than {p.expected_links} active NVLinks: {names}",
        {_key(r, g, "active links"): str(_active(g)) for g in linked},
        expected=f"{p.expected_links} active NVLinks per GPU",
        remediation="The playbook's expected_links does not match this platform: compare with its NVLink "
        f"count (`nvidia-smi nvlink -s`) and fix the playbook ({DCGM_DIAG_DOCS}).",
        subject="link-count",
    )


def _none_active(r: GpuReport, linked: list[GpuHealth], f: Facts, p: Params) -> Finding:
    total = sum(len(g.nvlinks) for g in linked)
    evidence = {_key(r, g, "active links"): f"0 of {len(g.nvlinks)}" for g in linked}
    wired = {g.index: w for g in linked if (w := _expected(g, f, p)) is not None}
    if wired and all(w.links == 0 for w in wired.values()) and len(wired) == len(linked):
        evidence[TOPO] = "no NV# cell: no GPU pair is joined by NVLink"
        return Finding(
            ID,
            Status.OK,
            f"no NVLink wired: the {len(linked)} GPU(s) have {total} link(s), none connected (PCIe cards "
            "without bridges)",
            evidence,
            subject="nvlink",
        )
    if any(w.links for w in wired.values()):
        return Finding(
            ID,
            Status.FAIL,
            f"no NVLink is active although {TOPO} shows NVLink connections",
            evidence | {f"expected GPU{i}": f"{w.links} ({w.source})" for i, w in wired.items()},
            expected="the NV# links of topo -m active",
            remediation="On HGX/DGX the fabric manager may not be running: `systemctl enable --now "
            f"nvidia-fabricmanager` ({FABRIC_MANAGER_DOCS}); otherwise reset the GPUs or reboot.",
            subject="nvlink",
        )
    return Finding(
        ID,
        Status.WARN,
        f"no NVLink is active: {total} link(s) on {len(linked)} GPU(s) are all inactive",
        evidence,
        expected="NVLinks active where the GPUs are joined by a bridge or an NVSwitch",
        remediation="PCIe cards without NVLink bridges have none active, by design. On HGX/DGX the fabric "
        f"manager may not be running: `systemctl enable --now nvidia-fabricmanager` ({FABRIC_MANAGER_DOCS}); "
        f"record `{TOPO}` (or set expected_links) so this can be judged.",
        subject="nvlink",
    )


def _clean(r: GpuReport, clean: list[GpuHealth], linked: list[GpuHealth], f: Facts, p: Params) -> Finding:
    evidence = {}
    for g in clean:
        peers = sorted({link.remote_pci for link in g.nvlinks if link.remote_pci})
        versions = sorted({link.version for link in g.nvlinks if link.version is not None})
        speed = sorted({link.speed for link in g.nvlinks if link.speed})
        detail = [f"{_active(g)} of {len(g.nvlinks)} active"]
        detail += [f"at {', '.join(speed)}"] if speed else []
        detail += [f"version {', '.join(map(str, versions))}"] if versions else []
        detail += [f"to {', '.join(peers)}"] if peers else []
        want = _expected(g, f, p)
        detail += [f"as expected ({want.source})"] if want is not None else []
        evidence[_key(r, g, "links")] = " ".join(detail)
    summary = f"{len(clean)} of {len(linked)} NVLink GPU(s) with every link active and no errors"
    if any(_active(g) < len(g.nvlinks) for g in clean):
        summary = (
            f"{len(clean)} of {len(linked)} NVLink GPU(s) with every wired link active and no errors (the "
            "other links are not connected: bridges or a partition use only some)"
        )
    return Finding(ID, Status.OK, summary, evidence, subject="nvlink")


def evaluate(f: Facts, p: Params) -> list[Finding]:
    r = f.report
    if r.failure:
        # The gpu check reports the broken driver stack; NVLink cannot be read through it.
        return [Finding(ID, Status.SKIPPED, f"NVLink not readable: {r.failure}", r.status_evidence())]
    if r.reason:
        return [Finding(ID, Status.SKIPPED, r.reason, r.status_evidence(), subject="nvlink")]
    if r.error:
        return [gpu.unparsable_report(ID, r, "nvlink")]
    linked = [g for g in r.gpus if g.nvlinks]
    if not linked:
        why = r.nvlink_reason or f"none of the {len(r.gpus)} GPU(s) reports an NVLink (PCIe-only GPUs)"
        return [Finding(ID, Status.SKIPPED, why, {r.nvlink_source: why}, subject="nvlink")]
    if not any(link.active for g in linked for link in g.nvlinks):
        return [_none_active(r, linked, f, p)]
    findings: list[Finding] = []
    clean = []
    for g in linked:
        own = [x for x in (_unknown(r, g), _link_count(r, g, linked, f, p), _errors(r, g, p)) if x]
        findings += own
        if not own:
            clean.append(g)
    surplus = _surplus(r, linked, p)
    if surplus:
        findings.append(surplus)
    if clean:
        findings.append(_clean(r, clean, linked, f, p))
    return findings


CHECK = Check(
    id=ID,
    title="NVLink",
    area=Area.GPU,
    tags=("gpu",),
    collect=collect,
    evaluate=evaluate,
    params=Params,
    paths=nvml.PATHS,
    commands=(*gpus.COMMANDS, *nvidia_smi.COMMANDS),
)
