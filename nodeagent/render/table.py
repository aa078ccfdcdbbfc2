"""Terminal tables (rich): findings grouped by status, worst first, with what to do about them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from nodeagent.core.finding import WORST_FIRST, Finding, Status
from nodeagent.core.parse import format_cpulist
from nodeagent.engine import Report
from nodeagent.render.literal import lit, lits, one_line, shown
from nodeagent.render.sheet import Both, Column, Part, Sheet, sheet

STYLE = {
    Status.FAIL: "bold red",
    Status.UNKNOWN: "bold magenta",
    Status.WARN: "yellow",
    Status.OK: "green",
    Status.SKIPPED: "dim",
}
MAX_EVIDENCE = 6


def _details(f: Finding) -> Text:
    """What was seen, what was expected and what to do, for one finding that is not OK."""
    text = Text()
    text.append(f"{f.status.value} ", style=STYLE[f.status])
    text.append(shown(f"{f.check_id}/{f.subject or '-'}: "), style="bold")
    text.append(shown(f.summary))
    items = list(f.evidence.items())
    for where, value in items[:MAX_EVIDENCE]:
        text.append("\n  seen      ", style="dim")
        text.append(shown(f"{where} = {value}"))
    if len(items) > MAX_EVIDENCE:
        text.append(f"\n            ... {len(items) - MAX_EVIDENCE} more (see --format json)", style="dim")
    if f.expected:
        text.append("\n  expected  ", style="dim")
        text.append(shown(f.expected))
    if f.remediation:
        text.append("\n  fix       ", style="bold")
        text.append(shown(f.remediation))
    if f.fix:
        text.append(shown(f"\n  tuner     {f.fix}"), style="cyan")
    return text


def durations_line(r: Report) -> Text:
    """Each check's time, slowest first, and the ones cut at a time limit (pre-flight's budget)."""
    line = Text("check durations: ", style="dim")
    ordered = sorted(r.results, key=lambda x: -x.duration_s)
    line.append(
        shown(
            ", ".join(f"{x.check_id} {x.duration_s:.2f}s{' (cut)' if x.timed_out else ''}" for x in ordered)
        )
    )
    return line


def report_table(r: Report, durations: bool = False, expand: bool = True) -> Group:
    """One row per finding, worst first; then the details of each finding that needs attention
    (and, with `durations`, every check's time). `expand`: as wide as the console."""
    table = Table(title=lit(f"nodeagent check: {r.host}"), title_justify="left", expand=expand)
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("subject", overflow="fold", max_width=22)
    table.add_column("finding", ratio=1, overflow="fold")
    findings = sorted(r.findings, key=lambda f: WORST_FIRST.index(f.status))
    for f in findings:
        table.add_row(Text(f.status.value, style=STYLE[f.status]), *lits(f.check_id, f.subject, f.summary))
    parts: list[Any] = [table]
    attention = [f for f in findings if f.status in (Status.FAIL, Status.UNKNOWN, Status.WARN)]
    for f in attention:
        parts.append(Text())
        parts.append(_details(f))
    counts = Counter(f.status for f in r.findings)
    summary = Text(", ".join(f"{counts[s]} {s.value}" for s in WORST_FIRST if counts[s]) or "no findings")
    summary.append(f" in {r.duration_s:.2f}s; worst: ")
    summary.append(r.status.value, style=STYLE[r.status])
    slowest = max(r.results, key=lambda x: x.duration_s, default=None)
    if slowest and slowest.duration_s > 0.5:
        summary.append(shown(f" (slowest check: {slowest.check_id} {slowest.duration_s:.2f}s)"), style="dim")
    parts += [Text(), summary]
    if durations:
        parts.append(durations_line(r))
    return Group(*parts)


def facts_tables(doc: dict[str, Any]) -> list[Part]:
    """The facts of one machine: a summary, then one table per kind of device (those it has)."""
    tables = [
        _summary_table(doc),
        _numa_table(doc["topology"]),
        _gpu_table(doc["gpus"]),
        _nic_table(doc["nics"]),
        _rdma_table(doc["rdma"]),
        _pcie_table(doc["pci"]),
    ]
    parts: list[Part] = [t for t in tables if t is not None]
    for problem in doc["problems"]:
        parts.append(lit(f"problem: {problem}", style="yellow"))
    return parts


def _titled(title: str, columns: Sequence[str]) -> Sheet:
    return sheet(title, *columns)


def _summary_table(doc: dict[str, Any]) -> Sheet:
    t = doc["topology"]
    head = Sheet(f"nodeagent facts: {doc['host']}", (Column("", style="bold"), Column("")), header=False)
    _row(head, "CPU", t["cpu_model"])
    _row(
        head,
        "layout",
        f"{_cell(t['packages'])} package(s), {_cell(t['cores'])} cores, {len(t['cpus_online'])} CPUs "
        f"online ({_cell(t['threads_per_core'])} thread(s)/core)",
    )
    if t["cpus_offline"]:
        _row(head, "offline CPUs", format_cpulist(t["cpus_offline"]))
    _row(head, "memory", _with_unit(t["memory_total_mib"], "MiB"))
    _row(head, "kernel", doc["kernel"]["release"])
    dmi = doc["dmi"]
    if dmi:
        _row(head, "system", " ".join(dmi.get(k, "") for k in ("sys_vendor", "product_name")).strip() or "?")
        _row(head, "BIOS", " ".join(dmi.get(k, "") for k in ("bios_vendor", "bios_version", "bios_date")))
    hp = doc["hugepages"]
    pools = ", ".join(
        f"{page_size(p['size_kb'])}: {_cell(p['total'])} pages ({_cell(p['free'])} free)" for p in hp["pools"]
    )
    thp = f"THP {_cell(hp['thp_enabled'])}, defrag {_cell(hp['thp_defrag'])}"
    # A recording that does not hold a place says nothing of it: not "none" (facts.node.SOURCES).
    unrecorded = doc.get("unrecorded", {})
    if "hugepages.pools" in unrecorded:
        pools = f"not recorded ({unrecorded['hugepages.pools']})"
    if "hugepages.thp_" in unrecorded:
        thp = f"THP not recorded ({unrecorded['hugepages.thp_']})"
    _row(head, "huge pages", f"{pools or 'none'}; {thp}")
    return head


def page_size(kib: int) -> str:
    """A huge page size, given in KiB as the kernel names its pools (hugepages-2048kB: "kB" there
    is 1024 bytes, Documentation/admin-guide/mm/hugetlbpage.rst), in the largest whole unit:
    2048 -> "2 MiB", 1048576 -> "1 GiB", 64 -> "64 KiB"."""
    for unit, size in (("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= size and kib % size == 0:
            return f"{kib // size} {unit}"
    return f"{kib} KiB"


def _cell(value: Any) -> Any:
    """A value as a cell shows it: one that is missing (not in the recording, unreadable, or
    unknown to the kernel, as a NIC speed of -1) is a dash, never "None"."""
    return "-" if value is None else value


def _with_unit(value: Any, unit: str) -> Any:
    return "-" if value is None else f"{value} {unit}"


def _numa_table(topology: dict[str, Any]) -> Sheet:
    numa = _titled("NUMA nodes", ("node", "CPUs", "memory MiB", "distances"))
    for n in topology["numa_nodes"]:
        _row(
            numa,
            n["id"],
            format_cpulist(n["cpus"]) or "-",
            n["memory_mib"],
            " ".join(str(v) for v in n["distances"].values()),
        )
    for g in topology["gpu_memory_nodes"]:
        _row(numa, g["id"], "GPU memory", g["memory_mib"], f"GPU {g['gpu']}")
    return numa


def _gpu_table(gpus: list[dict[str, Any]]) -> Sheet | None:
    if not gpus:
        return None
    gt = _titled("GPUs", ("index", "PCI", "vendor", "NUMA", "CPU affinity", "source"))
    for g in gpus:
        _row(
            gt,
            g["index"],
            g["pci_address"],
            g["vendor"],
            g["numa_node"],
            format_cpulist(g["cpu_affinity"] or []),
            g["source"],
        )
    return gt


def _nic_table(nics: list[dict[str, Any]]) -> Sheet | None:
    physical = [n for n in nics if n["pci_address"]]
    if not physical:
        return None
    nt = _titled(
        "Network interfaces (physical)", ("name", "PCI", "state", "speed Mb/s", "MTU", "driver", "NUMA")
    )
    for n in physical:
        _row(
            nt,
            n["name"],
            n["pci_address"],
            n["operstate"],
            n["speed_mbps"],
            n["mtu"],
            n["driver"],
            n["numa_node"],
        )
    return nt


def _rdma_table(ports: list[dict[str, Any]]) -> Sheet | None:
    if not ports:
        return None
    rt = _titled("RDMA ports", ("device", "port", "state", "physical", "rate", "link layer", "NUMA"))
    for p in ports:
        _row(
            rt,
            p["device"],
            p["port"],
            p["state"],
            p["phys_state"],
            p["rate"],
            p["link_layer"],
            p["numa_node"],
        )
    return rt


def _pcie_table(devices: list[dict[str, Any]]) -> Sheet | None:
    links = [d for d in devices if d["kind"] in ("gpu", "nic", "nvme", "accelerator")]
    if not links:
        return None
    pt = _titled("PCIe devices", ("address", "kind", "vendor:device", "NUMA", "link", "max", "driver"))
    for d in links:
        _row(
            pt,
            d["address"],
            d["kind"],
            f"{d['vendor']}:{d['device']}",
            d["numa_node"],
            _link(d["speed_gts"], d["width"]),
            _link(d["max_speed_gts"], d["max_width"]),
            d["driver"],
        )
    return pt


def _row(table: Sheet, *cells: Any) -> None:
    """A row of recorded values, each as text (shown literally on a terminal, one line when piped);
    a missing one a dash."""
    table.add(*(c if isinstance(c, Text) else str(_cell(c)) for c in cells))


def _link(speed: float | None, width: int | None) -> str:
    if speed is None and width is None:
        return "-"
    return f"{speed if speed is not None else '?'} GT/s x{width if width is not None else '?'}"


def report_part(
    r: Report,
    doc: Mapping[str, Any],
    every: bool = False,
    durations: bool = False,
    after: Sequence[Text] = (),
) -> Both:
    """A run's findings (check, preflight): on a terminal report_table and the `after` lines; piped,
    the lines of nodeagent.render.text from the run's document `doc`: the problems with their fixes,
    or with `every` (-v) the table's title and every finding, then the counts."""
    from nodeagent.render import text  # the report's models: only for a run's findings

    piped = text.problems(doc, every=every, durations=durations and every).splitlines()
    if every:  # the whole report, under the table's title
        piped.insert(0, one_line(f"nodeagent check: {r.host}"))
    return Both(Group(report_table(r, durations), *after), piped)


SCOPE_STYLE = {"runtime": "bold", "boot": "yellow", "process": "cyan", "code": "magenta"}


def plan_table(host: str, plans: list[Any]) -> list[Text]:
    """The plan: one block per change (target, scope, before, after, why), then each tuner's notes.
    A block rather than a table: values and reasons with URLs are too long for cells. What was done
    with the plan (dry run, applied, reverted) is the story's (tuning/story.py), printed after."""
    parts = [lit(f"nodeagent tune (plan): {host}", style="bold underline")]
    count = 0
    for p in plans:
        for c in p.changes:
            count += 1
            block = Text.assemble(
                (f"{count:>2} ", "bold"),
                (shown(f"{c.tuner} "), "bold"),
                (f"[{c.scope.value}] ", SCOPE_STYLE.get(c.scope.value, "")),
                one_line(c.target),
            )
            for label, value, style in (
                ("before", c.before, ""),
                ("after", c.after, "green"),
                ("why", c.why, "dim"),
            ):
                block.append(f"\n     {label}: ", style="dim")
                block.append(one_line(value), style=style)
            parts += [Text(), block]
    notes = [(p.tuner, n) for p in plans for n in p.notes]
    if notes:
        parts += [Text(), Text("notes:", style="bold")]
        for tuner, note in notes:
            parts.append(Text.assemble((shown(f"  {tuner}: "), "bold"), one_line(note)))
    return parts


# The style of a story line (tuning/story.py), by the part of the story it starts with.
STORY_STYLE = {
    "applied:": "bold",
    "kept:": "bold green",
    "reverted:": "bold red",
    "read back:": "",
    "use:": "bold cyan",
    "undo:": "cyan",
    "advice": "yellow",
    "not persisted:": "yellow",
    "with --persist, not persisted:": "yellow",
}


def story_lines(lines: list[str]) -> list[Text]:
    """The tune or revert story, one styled line each; a read-back or revert that failed in red."""
    parts: list[Text] = []
    for line in lines:
        head = next((h for h in STORY_STYLE if line.startswith(h)), "")
        style = STORY_STYLE.get(head, "")
        if line.startswith("  ") or "did not take" in line or "not everything is back" in line:
            style = "red" if not line.startswith("      ") else "dim"
        # One story line is one line: a value in it holding a line break does not start another.
        parts.append(lit(line.replace("\r", " ").replace("\n", " "), style=style))
    return parts


def findings_lines(findings: list[Finding]) -> Group:
    """Verification results: one line each, the evidence of anything not OK."""
    parts: list[Any] = []
    for f in findings:
        parts.append(
            _details(f)
            if f.status not in (Status.OK, Status.SKIPPED)
            else Text.assemble((f"{f.status.value} ", STYLE[f.status]), shown(f.summary))
        )
    return Group(*parts)
