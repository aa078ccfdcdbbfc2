"""The playbook file's schema: pydantic models of one YAML file, their errors in plain words, and
what is known of the value keys a threshold may name.

Every mapping forbids unknown keys and every field is strictly typed (a string is not a number, a
number is not a boolean), so a misspelt field or a quoted number is an error naming its line
rather than a setting silently ignored. Parameters are checked against the Params dataclass of
their check or tuner (`parameters`), name by name, so an error names the parameter's own line;
nodeagent.gate.playbook finds the check or tuner in its registry.

Value keys are those of nodeagent.compare.values.host_values: the node's facts document
(nodeagent.facts.node) flattened, and "check.<check id>.<subject>.<evidence>". The facts part has a
known shape: its sections (FACT_SECTIONS), and for the lists of devices, the dataclass each entry
comes from. That is enough to refuse a misspelt section or field and a range (min/max) on a value
that is text, when the playbook is loaded rather than on every node it runs on.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nodeagent.api.check import same_kind
from nodeagent.compare import hardware
from nodeagent.core.errors import UsageError
from nodeagent.core.yamldoc import Document, Loc, did_you_mean, show_value
from nodeagent.facts.gpus import Gpu
from nodeagent.facts.memory import HugePagePool, Memory
from nodeagent.facts.network import Nic, RdmaPort
from nodeagent.facts.pci import PciDevice
from nodeagent.facts.system import System
from nodeagent.facts.topology import Topology
from nodeagent.gate.thresholds import Threshold

# --- The file ---------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ThresholdSpec(_Strict):
    value: str = Field(min_length=1)
    min: float | None = Field(default=None, allow_inf_nan=False)
    max: float | None = Field(default=None, allow_inf_nan=False)
    equals: Any = None
    one_of: list[Any] | None = Field(default=None, min_length=1)
    severity: Literal["warn", "fail"] = "fail"
    missing: Literal["fail", "warn", "skip"] | None = None
    why: str = ""

    @field_validator("equals")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        return _condition_value(value, "equals")

    @field_validator("one_of")
    @classmethod
    def _scalars(cls, values: list[Any] | None) -> list[Any] | None:
        for value in values or ():
            _condition_value(value, "one_of")
        return values

    @model_validator(mode="after")
    def _one_kind_of_condition(self) -> ThresholdSpec:
        ranged = self.min is not None or self.max is not None
        listed = self.equals is not None or self.one_of is not None
        if not ranged and not listed:
            raise ValueError("needs a condition: min, max (numbers), equals or one_of; add one of them")
        if ranged and listed:
            raise ValueError(
                "min/max (a range of numbers) and equals/one_of (given values) do not mix; "
                "split it into two thresholds"
            )
        if self.equals is not None and self.one_of is not None:
            raise ValueError("give equals or one_of, not both; put the value in one_of")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}; swap them")
        return self


def _condition_value(value: Any, field: str) -> Any:
    if value is None:
        raise ValueError(
            "null matches nothing (a value a node lacks is SKIPPED); give a value to compare with"
        )
    if not isinstance(value, str | int | float | bool):
        if field == "one_of":
            raise ValueError(f"entries must be text, numbers or true/false, not {show_value(value)}")
        raise ValueError(
            f"must be one value (text, a number or true/false), not {show_value(value)}; "
            "use one_of for several"
        )
    return value


class CheckEntry(_Strict):
    params: dict[str, Any] = Field(default_factory=dict)


class TunerEntry(_Strict):
    params: dict[str, Any] = Field(default_factory=dict)


class BenchSpec(_Strict):
    quick: bool | None = None
    repeats: int | None = Field(default=None, ge=1)
    processes: int | None = Field(default=None, ge=1)


class ExpectSpec(_Strict):
    """The hardware a node must have (nodeagent.compare.hardware's counts, and check parameters)."""

    gpus: int | None = Field(default=None, ge=0)
    gpu_models: dict[str, int] | None = None
    rdma_hcas: int | None = Field(default=None, ge=0)
    rdma_ports_active: int | None = Field(default=None, ge=0)
    rdma_min_rate_gbps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    nvlinks_per_gpu: int | None = Field(default=None, ge=1)
    gpu_min_pcie_width: Literal[1, 2, 4, 8, 16, 32] | None = None
    memory_gib: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class PlaybookFile(_Strict):
    description: str | None = None
    include: list[str] = Field(default_factory=list)
    budget_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    fail_on: Literal["warn", "fail"] | None = None
    checks: dict[str, CheckEntry | None] = Field(default_factory=dict)
    skip_checks: list[str] = Field(default_factory=list)
    thresholds: list[ThresholdSpec] = Field(default_factory=list)
    expect: ExpectSpec | None = None
    lost_hardware: Literal["warn", "fail"] | None = None
    tuners: dict[str, TunerEntry | None] = Field(default_factory=dict)
    bench: BenchSpec | None = None


# What a field wants, for type and range errors (pydantic's own words name Python types).
_EXPECT = {
    "description": "must be text",
    "include": "must be a list of shipped playbook names or .yml paths, e.g. include: [base]",
    "budget_s": "must be a number of seconds greater than 0",
    "fail_on": "must be warn or fail",
    "checks": "must be a mapping of check id: {params: {...}} ({} for the defaults)",
    "skip_checks": "must be a list of check ids, e.g. skip_checks: [gpu]",
    "thresholds": "must be a list of mappings with value: and min, max, equals or one_of",
    "tuners": "must be a mapping of tuner id: {params: {...}} ({} for the defaults)",
    "bench": "must be a mapping with quick:, repeats: and processes:",
    "expect": "must be a mapping of hardware counts, e.g. expect: {gpus: 8, rdma_ports_active: 8}",
    "lost_hardware": "must be warn or fail (the level of hardware lost against the baseline or the fleet)",
    "gpus": "must be a whole number of GPUs (0 or more)",
    "gpu_models": "must be a mapping of model name: number of GPUs, e.g. {NVIDIA H100 80GB HBM3: 8}",
    "rdma_hcas": "must be a whole number of RDMA devices",
    "rdma_ports_active": "must be a whole number of ACTIVE RDMA ports",
    "rdma_min_rate_gbps": "must be a number of Gb/s greater than 0",
    "nvlinks_per_gpu": "must be a whole number of active NVLinks per GPU (1 or more)",
    "gpu_min_pcie_width": "must be a PCIe width: 1, 2, 4, 8, 16 or 32",
    "memory_gib": "must be a number of GiB greater than 0",
    "params": "must be a mapping of parameter: value",
    "value": "must be a value key, e.g. hugepages.thp_enabled",
    "min": "must be a number",
    "max": "must be a number",
    "one_of": "must be a list of values, e.g. one_of: [madvise, always]",
    "severity": "must be warn or fail",
    "missing": "must be fail, warn or skip (what a value the node does not have gives)",
    "why": "must be text",
    "quick": "must be true or false",
    "repeats": "must be a whole number of at least 1",
    "processes": "must be a whole number of at least 1",
}
_ENTRY = "must be a mapping, {} for the defaults or {params: {name: value}}"
_KEYED = ("checks", "tuners")  # mappings whose keys are ids, not fields


def _model_at(loc: Loc) -> type[BaseModel]:
    """The model whose fields are allowed at `loc` (the location of an unknown key's parent)."""
    if loc[:1] == ("thresholds",) and len(loc) == 2:
        return ThresholdSpec
    if loc[:1] in (("checks",), ("tuners",)) and len(loc) == 2:
        return CheckEntry if loc[0] == "checks" else TunerEntry
    if loc == ("bench",):
        return BenchSpec
    if loc == ("expect",):
        return ExpectSpec
    return PlaybookFile


def schema_problem(err: Any) -> str:
    """One pydantic error of PlaybookFile in the words of the playbook format."""
    kind, loc = err["type"], tuple(err["loc"])
    if kind == "extra_forbidden":
        name = str(loc[-1])
        fields = _model_at(loc[:-1]).model_fields
        return f"unknown field {name!r}; {did_you_mean(name, fields, 'fields')}"
    if kind == "missing":
        return "is required: the key of the value to judge, e.g. value: hugepages.thp_enabled"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if len(loc) == 2 and loc[0] in _KEYED:
        return f"{_ENTRY} (got {show_value(err['input'])})"
    names = [p for i, p in enumerate(loc) if isinstance(p, str) and not (i == 1 and loc[0] in _KEYED)]
    wanted = _EXPECT.get(names[-1] if names else "", "has the wrong type")
    return f"{wanted} (got {show_value(err['input'])})"


# --- Value keys -------------------------------------------------------------------------------------

# The sections of nodeagent.facts.node.collect's document, as host_values flattens them (host and
# source are left out there). tests/unit/test_playbook.py holds this list to the real document.
FACT_SECTIONS = (
    "topology",
    "pci",
    "gpus",
    "nvidia_smi_topo",
    "pci_topology",
    "nics",
    "rdma",
    "hugepages",
    "memory",
    "kernel",
    "dmi",
    "problems",
    "notes",
    "unrecorded",
)
# Counts host_values derives from the facts (nodeagent.compare.hardware): all numbers.
HARDWARE_SECTION = "hardware"
CHECK_SECTION = "check"

Kind = Literal["number", "text", "boolean"]


def _entry_classes() -> dict[str, type[Any]]:
    """List sections whose entries are dataclasses, flattened as SECTION[label].FIELD."""
    return {"nics": Nic, "rdma": RdmaPort, "gpus": Gpu, "pci": PciDevice, "hugepages.pools": HugePagePool}


def _scalar_classes() -> dict[str, tuple[type[Any], dict[str, str]]]:
    """Sections of scalars taken from a dataclass: section -> (class, key in section -> field)."""
    # The Topology fields node.collect puts in its "topology" section as scalars.
    topology = ("cpu_model", "packages", "cores", "threads_per_core", "cpus_online", "cpus_offline")
    return {
        "topology": (Topology, {f: f for f in (*topology, "smt_control", "memory_total_mib")}),
        "hugepages": (Memory, {"thp_enabled": "thp_enabled", "thp_defrag": "thp_defrag"}),
        "memory": (Memory, {"total_mib": "total_mib"}),
        "kernel": (System, {"release": "kernel"}),
    }


_ENTRY_KEY = re.compile(r"(nics|rdma|gpus|pci|hugepages\.pools)\[[^\]]*\]\.(.+)")


def _kind_of(hint: Any) -> Kind | None:
    """The kind host_values gives a field of this type (lists of scalars are joined into text)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = {_kind_of(a) for a in args}
        return kinds.pop() if len(kinds) == 1 else None
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return "boolean"
    if origin in (int, float):
        return "number"
    if origin is str or origin in (list, tuple):
        return "text"
    return None


_FIELD_KINDS: dict[type[Any], dict[str, Kind | None]] = {}


def _fields(cls: type[Any]) -> dict[str, Kind | None]:
    if cls not in _FIELD_KINDS:
        hints = typing.get_type_hints(cls)
        _FIELD_KINDS[cls] = {f.name: _kind_of(hints[f.name]) for f in dataclasses.fields(cls)}
    return _FIELD_KINDS[cls]


def key_problem(key: str, checks: frozenset[str]) -> str | None:
    """Why `key` cannot be a value key (an unknown section, check id or device field), or None.
    Parts holding a wildcard are not judged."""
    section = re.split(r"[.\[]", key, maxsplit=1)[0]
    if "*" in section or "?" in section:
        return None
    if section == CHECK_SECTION:
        check_id = key.split(".")[1] if key.count(".") >= 1 else ""
        if "*" in check_id or "?" in check_id or check_id in checks:
            return None
        hint = did_you_mean(check_id, checks, "checks")
        return f"{key!r} names check {check_id!r}, which is not a check ({hint})"
    if section == HARDWARE_SECTION:
        name = key.removeprefix(f"{HARDWARE_SECTION}.").split("[", 1)[0]
        if "*" in name or "?" in name or name in hardware.KEYS:
            return None
        return f"{key!r}: hardware has no count {name!r} ({did_you_mean(name, hardware.KEYS, 'counts')})"
    if section not in FACT_SECTIONS:
        hint = did_you_mean(section, (*FACT_SECTIONS, HARDWARE_SECTION, CHECK_SECTION), "sections")
        return f"{key!r} starts with neither check. nor a facts section ({hint})"
    entry = _ENTRY_KEY.fullmatch(key)
    if entry is not None:
        name = entry.group(2).split(".")[0]
        known = _fields(_entry_classes()[entry.group(1)])
        if "*" not in name and "?" not in name and name not in known:
            return f"{entry.group(1)}[...] has no field {name!r} ({did_you_mean(name, known, 'fields')})"
    return None


def key_kind(key: str) -> Kind | None:
    """What host_values holds at a facts key: a number, text or a boolean; None when not known
    (check evidence, nested facts, wildcards)."""
    if key.startswith(f"{HARDWARE_SECTION}."):
        return "number"
    entry = _ENTRY_KEY.fullmatch(key)
    if entry is not None:
        return _fields(_entry_classes()[entry.group(1)]).get(entry.group(2))
    section, _, rest = key.partition(".")
    scalars = _scalar_classes().get(section)
    if scalars is None or rest not in scalars[1]:
        return None
    return _fields(scalars[0]).get(scalars[1][rest])


def threshold(doc: Document, loc: Loc, spec: ThresholdSpec, checks: frozenset[str]) -> Threshold:
    """A threshold of the file, its value key checked (see key_problem, key_kind)."""
    key = spec.value
    problem = key_problem(key, checks)
    if problem is not None:
        doc.fail((*loc, "value"), f"{problem}; see the value keys in playbooks/README.md")
    kind = key_kind(key)
    if (spec.min is not None or spec.max is not None) and kind in ("text", "boolean"):
        doc.fail(
            (*loc, "min" if spec.min is not None else "max"),
            f"{key} is {kind}, and min/max compare numbers; use equals or one_of",
        )
    return Threshold(
        value=key,
        min=spec.min,
        max=spec.max,
        equals=spec.equals,
        one_of=tuple(spec.one_of) if spec.one_of is not None else None,
        severity=spec.severity,
        why=spec.why,
        missing=spec.missing,
    )


# --- Parameters -------------------------------------------------------------------------------------


def parameters(doc: Document, loc: Loc, owner: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` checked name by name against `owner`'s (a Check's or a Tuner's) Params, so that an
    error names the parameter's line, then together (a Params may check how its fields go
    together). Lists become tuples, as the Params' own defaults are."""
    kind = "check" if loc[0] == "checks" else "tuner"
    lister = "nodeagent checks --params" if kind == "check" else "nodeagent tuners"
    fields = {f.name: f for f in dataclasses.fields(owner.params)}
    out: dict[str, Any] = {}
    for name, raw in given.items():
        with doc.gathering():  # each parameter's mistake is reported, not only the first
            value = tuple(raw) if isinstance(raw, list) else raw
            if name not in fields:
                hint = did_you_mean(name, fields, "parameters")
                doc.fail((*loc, name), f"{kind} {owner.id} has no parameter {name!r}; {hint}")
            default = fields[name].default
            if default is not dataclasses.MISSING and default is not None and not same_kind(default, value):
                doc.fail(
                    (*loc, name),
                    f"must be {_kind_words(default)} like its default {_shown(default)} "
                    f"(got {_shown(value)}); see `{lister}`",
                )
            _made(doc, (*loc, name), owner, {name: value})
            out[name] = value
    if len(out) == len(given):  # together only when each is right alone: no echo of its mistake
        _made(doc, loc, owner, out)
    return out


def _kind_words(default: object) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int | float):
        return "a number"
    if isinstance(default, tuple | list):
        return "a list"
    if isinstance(default, str):
        return "text"
    return f"a {type(default).__name__}"


def _shown(value: Any) -> str:
    return show_value(list(value) if isinstance(value, tuple) else value)


def _made(doc: Document, loc: Loc, owner: Any, overrides: Mapping[str, Any]) -> None:
    """The owner's Params built with `overrides`, which may check more (a __post_init__)."""
    try:
        owner.make_params(overrides)
    except (UsageError, TypeError, ValueError) as e:
        text = str(e)
        doc.fail(loc, text.split(": ", 1)[-1] if text.startswith(("check ", "tuner ")) else text)


# --- Expected hardware ------------------------------------------------------------------------------

_LOST = (
    "A node that lost hardware since it was racked (a GPU fallen off the bus, an HCA whose firmware "
    "or cable failed) passes every check of what is left; only the expected inventory catches it "
    "(NHC's check_hw_*: https://github.com/mej/nhc; DCGM's expected GPU count: "
    "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html). "
    "Drain the node and have the part reseated or replaced; `nodeagent facts` lists what it has."
)
_RATE = (
    "Each GPU's rail must carry its share of all-reduce traffic; a port that trained to a lower rate "
    "(a bad cable or transceiver) slows every job spanning the node "
    "(ports/N/rate: https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband)."
)
_MEMORY = (
    "MemTotal is the installed memory less what firmware and kernel reserve (proc(5)); a lost DIMM "
    "takes a whole DIMM's share. Give the MemTotal of a healthy node of this kind."
)


def expectations(spec: ExpectSpec) -> tuple[list[tuple[str, Threshold]], dict[str, dict[str, Any]]]:
    """What `expect:` means: thresholds on nodeagent.compare.hardware's counts (each with the field it came
    from, for error locations) and parameters of the checks that judge the rest."""
    at_least: list[tuple[str, str, float | None, str]] = [
        ("gpus", f"{hardware.SECTION}.gpus", spec.gpus, _LOST),
        ("rdma_hcas", f"{hardware.SECTION}.rdma_hcas", spec.rdma_hcas, _LOST),
        ("rdma_ports_active", f"{hardware.SECTION}.rdma_ports_active", spec.rdma_ports_active, _LOST),
        ("rdma_min_rate_gbps", "rdma[*].rate_gbps", spec.rdma_min_rate_gbps, _RATE),
        ("memory_gib", "memory.total_mib", spec.memory_gib * 1024 if spec.memory_gib else None, _MEMORY),
    ]
    for model, n in (spec.gpu_models or {}).items():
        at_least.append(("gpu_models", f"{hardware.SECTION}.gpu_models[{model}]", n, _LOST))
    thresholds = [
        (field, Threshold(value=key, min=float(n), severity="fail", why=why))
        for field, key, n, why in at_least
        if n is not None
    ]
    params: dict[str, dict[str, Any]] = {}
    if spec.nvlinks_per_gpu is not None:
        params["nvlink"] = {"expected_links": spec.nvlinks_per_gpu}
    if spec.gpu_min_pcie_width is not None:
        params["pcie"] = {"min_gpu_width": spec.gpu_min_pcie_width}
    return thresholds, params
