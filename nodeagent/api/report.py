"""The report documents nodeagent publishes, as pydantic models: the contract other tools read.

- CheckReport: one node's run, what `nodeagent check|preflight --format json` prints and
  `--output json:PATH` writes (`bench --output` writes one too: no checks, and a `bench` section).
- FleetDocument: a fleet's, what `check --cluster|--hosts` and `report merge` give: each host's run
  or the error that kept it out, and the fleet comparison (drift, outliers).

The models describe the documents that nodeagent.engine.Report, nodeagent.gate.judge.document,
nodeagent.cluster.runner.HostOutcome and nodeagent.cluster.report.FleetReport produce. Finding
(nodeagent.core.finding's: what every check makes), Verdict, Drift, Outlier, HostError, Bandwidth
with its links and FleetSummary are made as these types, by the checks, nodeagent.gate.judge,
nodeagent.compare.fleet and nodeagent.cluster.

Every object is open: `schema` is bumped on an incompatible change only, fields may be added
without a bump, so a reader must ignore the fields it does not know (and keeps them: `report merge`
passes a node's document on whole). An optional field is left out when there is nothing to say,
never written as null (`Omitted`). Numbers are JSON numbers, never quoted; a status is one of
Status's words.

The published JSON Schema, nodeagent/render/report.schema.json, is generated from these models:

    python -m nodeagent.api.report > nodeagent/render/report.schema.json

and a test holds the committed file equal to what the models generate.

`parse_document` validates a document once, where a renderer takes it; `parse_saved_report` one
node's report read from a file (`report merge`). Either raises a DocumentError (a UsageError), one
line naming the source and the field: `SOURCE: findings[3].status: must be 'SKIPPED', ... or 'FAIL'
(got "BAD")`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    Tag,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, SkipJsonSchema, models_json_schema
from pydantic_core import ErrorDetails, core_schema

from nodeagent.api.schema import SCHEMA_VERSION
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status, worst
from nodeagent.core.yamldoc import Loc, format_loc

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "Bandwidth",
    "BandwidthLink",
    "Bench",
    "BenchComparison",
    "BenchConfig",
    "CheckReport",
    "CheckRun",
    "Document",
    "DocumentError",
    "Drift",
    "Finding",
    "FleetDocument",
    "FleetSummary",
    "HostEntry",
    "HostError",
    "HostFailure",
    "HostResult",
    "Outlier",
    "RunResult",
    "SavedReport",
    "Throughput",
    "Verdict",
    "describe",
    "is_fleet",
    "json_schema",
    "json_schema_text",
    "link_label",
    "parse_document",
    "parse_saved_report",
    "validate",
]

SCHEMA_ID = f"urn:nodeagent:schema:report:{SCHEMA_VERSION}"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

T = TypeVar("T")


def _not_null(value: Any) -> Any:
    # Called only for a value that was written: a default is not validated.
    if value is None:
        raise ValueError("is left out when there is none, never null")
    return value


# A field that may be left out, but is never null.
Omitted = Annotated[T | SkipJsonSchema[None], BeforeValidator(_not_null)]
# Numbers: StrictFloat takes a JSON integer too, never text or a boolean.
Seconds = Annotated[StrictFloat, Field(ge=0)]
Count = Annotated[StrictInt, Field(ge=0)]


def _scalar(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    raise ValueError("must be text, a number, true, false or null")


# One comparable value of a host (nodeagent.compare.values.Value).
Scalar = Annotated[
    str | int | float | bool | None,
    PlainValidator(_scalar),
    WithJsonSchema({"type": ["string", "number", "boolean", "null"]}),
]


def _integer(value: Any) -> Any:
    # A Literal[1] alone would take true and 1.0 for 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


# The version of this contract, `schema`: SCHEMA_VERSION (a Literal needs the number itself).
Version = Annotated[Literal[1], BeforeValidator(_integer)]


class _Open(BaseModel):
    """An object of the document: fields it does not declare are kept (module docstring)."""

    model_config = ConfigDict(extra="allow", frozen=True)


# -- one node's run -------------------------------------------------------------------------------


class CheckRun(_Open):
    """One check of the run: its worst finding's status and how long it took."""

    id: str = Field(min_length=1)
    title: str
    status: Status
    duration_s: Seconds
    timed_out: StrictBool = Field(False, description="Cut at its time limit or at the run's budget.")


class Verdict(_Open):
    """A pre-flight's decision, as nodeagent.gate.judge.verdict makes it."""

    allowed: StrictBool
    fail_on: Literal["warn", "fail"]
    reason: str


class Throughput(_Open):
    """A benchmark configuration's images per second."""

    median: Annotated[StrictFloat, Field(ge=0)]
    ci95: tuple[StrictFloat, StrictFloat] = Field(
        description="The bootstrap 95% confidence interval of the median, [low, high]."
    )


class BenchConfig(_Open):
    """One configuration of the benchmark (naive, autotune, tuned, input_only, compute_only)."""

    status: Literal["ok", "failed", "skipped"]
    images_per_s: Throughput | None = Field(description="null when it failed or was skipped.")
    fraction_of_bound: StrictFloat | None = None
    input_wait_fraction: StrictFloat | None = None
    diagnosis: str | None = None
    reason: Omitted[str] = Field(None, description="Why it failed or was skipped.")
    stderr_tail: Omitted[str] = Field(None, description="The end of a failed worker's error output.")


class BenchComparison(_Open):
    """One configuration against another: the ratio of their medians and what it means."""

    verdict: str
    ratio: StrictFloat | None = None


class Bench(_Open):
    """A `nodeagent bench --format json` document."""

    configs: dict[str, BenchConfig]
    bound: Omitted[dict[str, Any]] = None
    verdict: Omitted[dict[str, BenchComparison]] = None


class RunResult(_Open):
    """One host's checks and findings, with a pre-flight's playbook, budget and verdict, the node's
    facts or a benchmark when there are."""

    schema_version: Omitted[Version] = Field(None, alias="schema")
    nodeagent: Omitted[str] = None
    host: str
    status: Status = Field(description="The worst status of the findings.")
    started: Omitted[StrictFloat] = Field(
        None, description="Unix time the run started (left out by a merged report that did not say)."
    )
    duration_s: Seconds
    checks: list[CheckRun]
    findings: list[Finding]
    playbook: Omitted[str] = Field(None, description="The playbook that chose the checks and thresholds.")
    budget_s: Omitted[Annotated[StrictFloat, Field(gt=0)]] = Field(
        None, description="The pre-flight's time budget."
    )
    timed_out: Annotated[list[str], BeforeValidator(_not_null)] = Field(
        default_factory=list, description="Ids of the checks cut at a time limit or at the budget."
    )
    verdict: Omitted[Verdict] = None
    facts: Omitted[dict[str, Any]] = Field(
        None, description="What the node is (`nodeagent facts --format json`)."
    )
    bench: Omitted[Bench] = None


class CheckReport(RunResult):
    """One node's run: `nodeagent check|preflight --format json`, `--output json:PATH`."""

    schema_version: Version = Field(alias="schema", description="Version of this document's schema.")
    nodeagent: str = Field(min_length=1, description="Version of nodeagent that wrote it.")
    started: StrictFloat = Field(description="Unix time the run started.")


# -- a fleet --------------------------------------------------------------------------------------


class HostResult(RunResult):
    """A fleet host that gave its result (`schema` and `nodeagent` when its own nodeagent wrote it,
    with --remote-agent)."""

    address: str = Field(description="Where it was reached (empty for a merged report).")
    hostname: Omitted[str] = Field(None, description="The name the node gives itself (--remote-agent).")
    report_file: Omitted[str] = Field(None, description="The file `report merge` read it from.")


# An exception too: a fleet's transports (nodeagent.cluster) raise it where a host fails, and the
# report carries it as it was raised. A dataclass, open like every object of the document.
@pydantic_dataclass(frozen=True, config=ConfigDict(extra="allow"))
class HostError(Exception):
    """Why a host gave no result: its kind (nodeagent.cluster.ssh names them) and one line saying
    what to do."""

    kind: Annotated[
        str, Field(description='"unreachable", "auth failed", "timeout", "unreadable report", ...')
    ]
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    def __reduce__(self) -> tuple[type[HostError], tuple[str, str]]:
        # Pickled from a fleet's worker process: rebuilt from its fields (an exception's default
        # pickling sets attributes one by one, which a frozen dataclass refuses).
        return (HostError, (self.kind, self.message))


class HostFailure(_Open):
    """A fleet host that gave no result: it counts as FAIL."""

    status: Literal["FAIL"]
    address: str
    duration_s: Seconds
    error: HostError


_HOST_KINDS = ("result", "failure")


def _host_kind(entry: Any) -> str | None:
    """A fleet host's entry is a failure when it holds an error."""
    if isinstance(entry, Mapping):
        return "failure" if "error" in entry else "result"
    if isinstance(entry, HostFailure):
        return "failure"
    return "result" if isinstance(entry, HostResult) else None


HostEntry = Annotated[
    Annotated[HostResult, Tag(_HOST_KINDS[0])] | Annotated[HostFailure, Tag(_HOST_KINDS[1])],
    Discriminator(_host_kind, custom_error_type="host_entry_type", custom_error_message="must be an object"),
]


class FleetSummary(_Open):
    hosts: Count
    unreachable: Count = Field(description="Hosts that gave no result.")
    by_status: dict[Status, Count] = Field(description="Hosts per status.")
    status: Status
    duration_s: Seconds


class Drift(_Open):
    """Hosts whose value of `key` differs from the majority's (nodeagent.compare.fleet finds them).
    `majority_hosts` 0: no value has a strict majority, and `hosts` lists every host (a host
    without the key shows as null)."""

    key: str
    majority: Scalar
    majority_hosts: Count
    hosts: dict[str, Scalar]


class Outlier(_Open):
    """A host whose number is far from the fleet's median, in MADs (nodeagent.compare.fleet)."""

    key: str
    host: str
    value: StrictFloat
    median: StrictFloat
    mad: StrictFloat = Field(description="Median absolute deviation, unscaled.")
    score: StrictFloat = Field(description="Modified z-score 0.6745 * (value - median) / mad.")
    direction: Literal["high", "low"]


def link_label(src: str, dst: str) -> str:
    """How a link is named in findings and tables."""
    return f"{src} -> {dst}"


# A dataclass, not a model: the bandwidth measurement makes one per direction as it measures
# (nodeagent.cluster.bandwidth), positionally; it is open like every object of the document.
@pydantic_dataclass(frozen=True, config=ConfigDict(extra="allow"))
class BandwidthLink:
    """One measured direction between two hosts; a value is null when it was not measured."""

    src: str
    dst: str
    tool: Annotated[str, Field(description='"iperf3" or "ib_write_bw".')]
    gbits_per_s: StrictFloat | None
    latency_ms: Annotated[
        StrictFloat | None, Field(description="The average ping round trip from src to dst.")
    ]
    error: Annotated[str | None, Field(description="One line when (part of) the measurement failed.")] = None

    @property
    def label(self) -> str:
        return link_label(self.src, self.dst)


# A dataclass, like its links: the measurement makes it (nodeagent.cluster.bandwidth), the fleet
# document holds it as `bandwidth`, and its table (nodeagent.render.bandwidth) reads it.
@pydantic_dataclass(frozen=True, config=ConfigDict(extra="allow"))
class Bandwidth:
    """The inter-node measurement of `check --cluster --bandwidth`: each direction measured, and
    the findings about them."""

    links: list[BandwidthLink]
    findings: list[Finding]

    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    def section(self) -> dict[str, Any]:
        """What the fleet document holds: `{"bandwidth": {"links": [...], "findings": [...]}}`."""
        dumped: dict[str, Any] = _BANDWIDTH.dump_python(self, mode="json")
        return {"bandwidth": dumped}


_BANDWIDTH = TypeAdapter(Bandwidth)


class FleetDocument(_Open):
    """Every host of an inventory (or every merged report): each one's result, or the error that
    kept it out, and how they compare."""

    schema_version: Version = Field(alias="schema", description="Version of this document's schema.")
    nodeagent: str = Field(min_length=1, description="Version of nodeagent that wrote it.")
    status: Status = Field(description="The worst over the hosts, a host without result counting as FAIL.")
    summary: FleetSummary
    hosts: dict[str, HostEntry]
    drift: list[Drift]
    outliers: list[Outlier]
    bandwidth: Omitted[Bandwidth] = None
    notes: Omitted[list[str]] = Field(None, description="What `report merge` left out, and why.")


Document = CheckReport | FleetDocument


class SavedReport(RunResult):
    """One node's report as `report merge` reads it from a file: a CheckReport whose start may be
    missing (the file's time stands in) or written as ISO 8601 text (UTC when it has no zone)."""

    schema_version: Version = Field(alias="schema")
    nodeagent: str = Field(min_length=1)

    @field_validator("started", mode="before")
    @classmethod
    def _iso_time(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("must be a number or an ISO 8601 time") from None
        return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


# -- reading a document ---------------------------------------------------------------------------


def is_fleet(data: Mapping[str, Any]) -> bool:
    """A fleet document rather than one node's run: hosts, and no checks of its own."""
    return isinstance(data.get("hosts"), Mapping) and "checks" not in data


def parse_document(data: Any, source: str) -> Document:
    """`data` (read from `source`) as the document it is; DocumentError naming the field otherwise."""
    if not isinstance(data, Mapping):
        raise DocumentError(
            source, (), f"not a report document: the top level is {_shown(data)}, not an object"
        )
    if is_fleet(data):
        return validate(FleetDocument, data, source)
    return validate(CheckReport, data, source)


def parse_saved_report(data: Mapping[str, Any], source: str) -> SavedReport:
    """One node's report read from `source`; DocumentError naming the field otherwise."""
    return validate(SavedReport, data, source)


_M = TypeVar("_M", bound=BaseModel)


class DocumentError(UsageError):
    """A document that is not what its model says: one line `SOURCE: FIELD: what is wrong (got
    VALUE)`, worded as nodeagent.core.jsondoc words a JSON file's errors. `loc` is the field's
    place in the document, for a reader that knows the text and can name its line."""

    def __init__(self, source: str, loc: Loc, problem: str) -> None:
        self.source, self.loc, self.problem = source, loc, problem
        super().__init__(f"{source}: {self.field_problem}")

    @property
    def field_problem(self) -> str:
        """`FIELD: what is wrong (got VALUE)`, without the source."""
        return f"{format_loc(self.loc)}: {self.problem}" if self.loc else self.problem


def validate(model: type[_M], data: Mapping[str, Any], source: str) -> _M:
    """`data` as a `model` (a document or a part of one); DocumentError naming the field otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        # The first error, in the order the fields are written (the models declare them so).
        loc, problem = describe(e.errors(include_url=False)[0], data)
        raise DocumentError(source, loc, problem) from None


# What a field of each type must be, in JSON's words (those of nodeagent.core.jsondoc).
_WANTED = {
    "string_type": "must be a string",
    "float_type": "must be a number",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dataclass_type": "must be an object",
}


def describe(err: ErrorDetails, data: Any) -> tuple[Loc, str]:
    """One pydantic error: where it is in `data` (without the names pydantic gives the members of
    a union), and what is wrong, `must be ... (got VALUE)`."""
    loc, is_key = _written_loc(tuple(err["loc"]), data)
    kind = err["type"]
    if is_key:  # the key itself is wrong: named apart from the object holding it
        return loc[:-1], f"key {_shown(loc[-1])}: {_wanted(err)}"
    if kind == "missing":
        return loc, "is required"
    if kind == "value_error":
        return loc, f"{err.get('ctx', {}).get('error', err['msg'])} (got {_shown(err['input'])})"
    return loc, f"{_wanted(err)} (got {_shown(err['input'])})"


def _wanted(err: ErrorDetails) -> str:
    ctx = err.get("ctx", {})
    kind = err["type"]
    if kind in ("enum", "literal_error"):
        return f"must be {ctx['expected']}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return f"must be {'at least' if kind == 'greater_than_equal' else 'more than'} {bound:g}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("too_short", "too_long") and ctx.get("field_type") == "Tuple":
        return "must be a list of 2 numbers"
    return _WANTED.get(kind, str(err["msg"]).lower())


def _written_loc(loc: tuple[int | str, ...], data: Any) -> tuple[tuple[int | str, ...], bool]:
    """`loc` without what is not a key or index of `data`: the names pydantic gives the members of
    a union (`budget_s.constrained-float`, `hosts.n1.result.findings`). Only the last part may be
    missing from `data`, as a field that is required. True when the error is about a key itself
    (pydantic's trailing "[key]")."""
    is_key = bool(loc) and loc[-1] == "[key]"
    parts = loc[:-1] if is_key else loc
    out: list[int | str] = []
    node: Any = data
    for i, part in enumerate(parts):
        if _holds(node, part):
            node = node[part]
        elif i < len(parts) - 1 or not isinstance(node, Mapping) or part in _HOST_KINDS:
            continue
        out.append(part)
    return tuple(out), is_key


def _holds(node: Any, part: int | str) -> bool:
    if isinstance(node, Mapping):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _shown(value: Any) -> str:
    """A value as a message shows it: JSON's spellings, and short."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the published JSON Schema --------------------------------------------------------------------


class _Published(GenerateJsonSchema):
    """pydantic's JSON Schema, without a title on every field (the field's name says it) and without
    `"default": null` for a field that is left out rather than null."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if out.get("default", ...) is None:
            del out["default"]
        return out


def json_schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12): CheckReport or FleetDocument, which both start
    with the version fields."""
    _, top = models_json_schema(
        [(CheckReport, "validation"), (FleetDocument, "validation")],
        ref_template="#/$defs/{model}",
        schema_generator=_Published,
    )
    defs: dict[str, Any] = top["$defs"]
    versioned = defs["CheckReport"]["properties"]
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        "title": "nodeagent report document",
        "description": (
            "What `nodeagent check|preflight --format json` and `--output json:PATH` write: one node's "
            "run (CheckReport), or with --cluster/--hosts and `report merge` a fleet's (FleetDocument). "
            "`schema` is the version of this document: it is bumped on any incompatible change; fields "
            "may be added without a bump, so readers must ignore fields they do not know. Generated from "
            "the models in nodeagent/api/report.py."
        ),
        "type": "object",
        "required": ["schema", "nodeagent"],
        "properties": {"schema": versioned["schema"], "nodeagent": versioned["nodeagent"]},
        "oneOf": [{"$ref": "#/$defs/CheckReport"}, {"$ref": "#/$defs/FleetDocument"}],
        "$defs": defs,
    }


def json_schema_text() -> str:
    """The JSON Schema as the committed file holds it."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(json_schema_text(), end="")
