"""Playbooks: which checks run with which parameters, the thresholds judged on the node's values,
which tuners, the benchmark's settings and a time budget, in a YAML file (playbooks/README.md).

Shipped playbooks are package data (`nodeagent.playbooks`, the playbooks/ folder) named by their
file stem; any other is a path. A playbook is resolved once, when loaded: its `include:` files
first (in order, each resolved the same way), then the file itself, merged (see `_merge`), and
everything validated against the registries, so a Playbook is ready to run and `playbooks show`
prints exactly what will run. Every problem is one UsageError line naming the file, the line and
the field (nodeagent.core.yamldoc), in the file where it was written: a bad threshold in an included
file names that file, a missing include names the line of the `include:` entry.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, ValidationError, field_serializer
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent import checks, tuners
from nodeagent.compare.values import Value
from nodeagent.core import document
from nodeagent.core.errors import UsageError
from nodeagent.core.yamldoc import (
    Document,
    Loc,
    Wording,
    did_you_mean,
    parse_document,
    raise_problems,
    read_document,
)
from nodeagent.gate import schema
from nodeagent.gate.thresholds import Threshold, is_glob

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

__all__ = ["BenchSettings", "Playbook", "Threshold", "Value", "list_playbooks", "load_playbook"]

PACKAGE = "nodeagent.playbooks"
SUFFIXES = (".yml", ".yaml")
WORDING = Wording(
    what="playbook",
    example="preflight.yml",
    empty="write at least description: and checks: (`nodeagent playbooks show preflight` is an example)",
    top_level="write description:, checks:, thresholds: ... (see `nodeagent playbooks show preflight`)",
    show_top_level=False,
)


@dataclass(frozen=True)
class BenchSettings:
    # False: a playbook without `bench:` leaves the benchmark's size to the command line.
    quick: bool = False
    repeats: int | None = None
    processes: int | None = None


@pydantic_dataclass(frozen=True, config=document.LATE)
class Playbook(document.InKeyOrder):
    """A playbook resolved over its includes; its document is the playbook in the file's own
    format (each check and tuner with its parameters), after its name, source and includes."""

    document_keys = (
        "name",
        "source",
        "includes",
        "description",
        "budget_s",
        "fail_on",
        "lost_hardware",
        "checks",
        "thresholds",
        "tuners",
        "bench",
    )

    name: str  # file stem
    source: str  # path shown in messages
    description: str
    checks: tuple[str, ...]  # registry order; (): none chosen, the caller runs all
    # check id -> parameter overrides (validated); in the document under the check
    check_params: Annotated[Mapping[str, Mapping[str, Any]], Field(exclude=True)]
    thresholds: tuple[Threshold, ...]
    tuners: tuple[str, ...]  # registry order
    tuner_params: Annotated[Mapping[str, Mapping[str, Any]], Field(exclude=True)]
    bench: BenchSettings
    budget_s: float | None  # time budget of preflight
    fail_on: str  # "warn" | "fail": the status at which preflight refuses the node
    includes: tuple[str, ...]  # the included playbooks, in the order they were merged
    # The level of hardware lost against the baseline or the fleet majority: "fail" (a node short
    # of a GPU, an HCA or an NVLink must not run the job) unless the playbook lowers it to "warn".
    lost_hardware: str = "fail"

    @field_serializer("checks")
    def _checks(self, ids: tuple[str, ...]) -> dict[str, Any]:
        return _entries(ids, self.check_params)

    @field_serializer("tuners")
    def _tuners(self, ids: tuple[str, ...]) -> dict[str, Any]:
        return _entries(ids, self.tuner_params)


def _entries(ids: Sequence[str], params: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each id with its parameters, as the file writes them (`{}`: the defaults)."""
    return {i: {"params": params[i]} if params.get(i) else {} for i in ids}


# --- Finding and reading files --------------------------------------------------------------------


def shipped_names() -> list[str]:
    folder = resources.files(PACKAGE)
    return sorted(p.name[: -len(".yml")] for p in folder.iterdir() if p.name.endswith(".yml"))


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith(SUFFIXES) or "/" in name_or_path or name_or_path.startswith(".")


class _File(Document):
    def problem(self, err: Any, model: type[BaseModel]) -> str:
        return schema.schema_problem(err)


@dataclass(frozen=True)
class _Where:
    """A playbook to read: a shipped one (a package resource) or a file."""

    label: str  # as `includes` and cycle messages name it: "base" or the path as written
    identity: str  # the same file, however it was named
    shipped: Traversable | None = None
    path: Path | None = None

    def read(self) -> _File:
        if self.path is not None:
            return read_document(self.path, WORDING, _File)
        assert self.shipped is not None
        base = self.shipped.parent if isinstance(self.shipped, Path) else None
        return parse_document(
            self.shipped.read_text(encoding="utf-8"), str(self.shipped), base, WORDING, _File
        )

    @property
    def short(self) -> str:
        return self.label if self.path is None else self.path.name


def _shipped(name: str) -> _Where | None:
    if name not in shipped_names():
        return None
    res = resources.files(PACKAGE) / f"{name}.yml"
    return _Where(name, f"shipped:{name}", shipped=res)


def _file(path: Path, label: str) -> _Where:
    try:
        identity = str(path.resolve())
    except OSError:
        identity = str(path.absolute())
    return _Where(label, identity, path=path)


def _unknown_name(name: str) -> str:
    hint = did_you_mean(name, shipped_names(), "playbooks")
    return f"no shipped playbook {name!r}; {hint} (or give the path of a .yml file)"


# --- Resolving ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Placed:
    """A threshold and where it was written (for errors found once the whole chain is merged)."""

    threshold: Threshold
    doc: Document
    loc: Loc


@dataclass
class _Merged:
    description: str | None = None
    budget_s: float | None = None
    fail_on: str | None = None
    checks: dict[str, dict[str, Any]] | None = None  # None: none chosen (all run)
    thresholds: list[_Placed] = field(default_factory=list)
    tuners: dict[str, dict[str, Any]] = field(default_factory=dict)
    bench: dict[str, Any] = field(default_factory=dict)
    includes: list[str] = field(default_factory=list)
    expect_params: dict[str, dict[str, Any]] = field(default_factory=dict)  # from `expect:`
    expect_at: dict[str, tuple[Document, Loc]] = field(default_factory=dict)  # check id -> where
    lost_hardware: str | None = None


_MAX_LISTED_INCLUDES = 256


def _merge(base: _Merged, over: _Merged) -> _Merged:
    """`over` (a later include, or the including file) on top of `base`: scalars replaced, checks
    and tuners merged per id (their params per name), thresholds concatenated except that `over`'s
    thresholds on a value key replace every one of `base`'s on the same key (in the first's place)."""
    checks = base.checks
    if over.checks is not None:
        checks = {k: dict(v) for k, v in (base.checks or {}).items()}
        for cid, params in over.checks.items():
            checks[cid] = {**checks.get(cid, {}), **params}
    tuners = {k: dict(v) for k, v in base.tuners.items()}
    for tid, params in over.tuners.items():
        tuners[tid] = {**tuners.get(tid, {}), **params}
    replacing: dict[str, list[_Placed]] = {}  # value key -> over's thresholds on it (one pass)
    for q in over.thresholds:
        replacing.setdefault(q.threshold.value, []).append(q)
    thresholds: list[_Placed] = []
    for p in base.thresholds:
        if p.threshold.value not in replacing:
            thresholds.append(p)
        elif replacing[p.threshold.value]:
            thresholds += replacing[p.threshold.value]
            replacing[p.threshold.value] = []
    thresholds += [q for q in over.thresholds if replacing.get(q.threshold.value)]
    includes = [*base.includes, *over.includes]  # each merge, in order (a file merged twice: twice)
    if len(includes) > _MAX_LISTED_INCLUDES:
        # Diamonds of includes double the list at each level (30 levels: 2**30 entries); past the
        # bound each file is listed once, where it was first merged.
        includes = list(dict.fromkeys(includes))
    return _Merged(
        description=over.description if over.description is not None else base.description,
        budget_s=over.budget_s if over.budget_s is not None else base.budget_s,
        fail_on=over.fail_on or base.fail_on,
        checks=checks,
        thresholds=thresholds,
        tuners=tuners,
        bench={**base.bench, **over.bench},
        includes=includes,
        expect_params={
            cid: {**base.expect_params.get(cid, {}), **over.expect_params.get(cid, {})}
            for cid in {*base.expect_params, *over.expect_params}
        },
        lost_hardware=over.lost_hardware or base.lost_hardware,
        expect_at={**base.expect_at, **over.expect_at},
    )


def _copy(merged: _Merged) -> _Merged:
    """A copy the caller may change (resolve's callers append to includes and filter checks)."""
    return dataclasses.replace(
        merged,
        checks=None if merged.checks is None else {k: dict(v) for k, v in merged.checks.items()},
        thresholds=list(merged.thresholds),
        tuners={k: dict(v) for k, v in merged.tuners.items()},
        bench=dict(merged.bench),
        includes=list(merged.includes),
        expect_params={k: dict(v) for k, v in merged.expect_params.items()},
        expect_at=dict(merged.expect_at),
    )


class _Resolver:
    def __init__(self) -> None:
        self.docs: dict[str, tuple[_File, schema.PlaybookFile]] = {}
        self.resolved: dict[str, _Merged] = {}  # identity -> the file merged over its includes
        self._checks: list[str] | None = None
        self._tuners: list[str] | None = None
        self.check_objects: dict[str, Any] = {}
        self.tuner_objects: dict[str, Any] = {}

    # Registries load on first use: a playbook without tuners never imports them.
    def check_ids(self) -> list[str]:
        if self._checks is None:
            self.check_objects = {c.id: c for c in checks.all_checks()}
            self._checks = list(self.check_objects)
        return self._checks

    def tuner_ids(self) -> list[str]:
        if self._tuners is None:
            self.tuner_objects = {t.id: t for t in tuners.all_tuners()}
            self._tuners = list(self.tuner_objects)
        return self._tuners

    def load(self, where: _Where) -> tuple[_File, schema.PlaybookFile]:
        if where.identity not in self.docs:
            doc = where.read()
            if not set(doc.data) & set(schema.PlaybookFile.model_fields):
                # Not a playbook at all (an include of the wrong file, /etc/shadow): its keys are
                # not shown, a first line there may be a secret.
                known = ", ".join(schema.PlaybookFile.model_fields)
                raise UsageError(
                    f"{doc.source}: not a playbook (none of its keys is one of {known}); check the path"
                )
            spec = doc.validated(schema.PlaybookFile, doc.data, lambda loc: loc)
            if spec is None:
                spec = _accepted_sections(doc)
            self.docs[where.identity] = (doc, spec)
        return self.docs[where.identity]

    def resolve(self, where: _Where, chain: tuple[_Where, ...] = ()) -> _Merged:
        """`where` merged over its includes. Each file is resolved once (a diamond of includes 30
        deep is 30 files, not 2**30 merges): a file whose resolution finished has no cycle below
        it, so its result holds whatever chain includes it again."""
        done = self.resolved.get(where.identity)
        if done is None:
            done = self._resolve(where, chain)
            self.resolved[where.identity] = done
        return _copy(done)

    def _resolve(self, where: _Where, chain: tuple[_Where, ...]) -> _Merged:
        doc, spec = self.load(where)
        own = self.own(doc, spec)  # this file's errors before those of its includes
        merged = _Merged()
        included: list[str] = []  # the problems the included files reported
        for i, entry in enumerate(spec.include):
            with doc.gathering():
                target = self.locate(doc, entry, ("include", i))
                path = (*chain, where)
                if target.identity in {w.identity for w in path}:
                    start = [w.identity for w in path].index(target.identity)
                    cycle = " -> ".join(w.short for w in (*path[start:], target))
                    doc.fail(("include", i), f"include cycle {cycle}; remove one of these includes")
                try:
                    sub = self.resolve(target, path)
                except UsageError as e:  # another file's problems: told after this file's
                    included.append(str(e))
                    continue
                sub.includes.append(target.label)
                merged = _merge(merged, sub)
        raise_problems([doc], included)
        if spec.skip_checks and merged.checks is None and own.checks is None:
            merged.checks = {cid: {} for cid in self.check_ids()}  # none chosen anywhere: all but these
        skipped = set(spec.skip_checks)
        if merged.checks is not None:
            merged.checks = {k: v for k, v in merged.checks.items() if k not in skipped}
        # Inherited thresholds on a skipped check's values go with it: they could not be judged.
        merged.thresholds = [p for p in merged.thresholds if _check_of(p.threshold.value) not in skipped]
        return _merge(merged, own)

    def locate(self, doc: Document, entry: str, loc: Loc) -> _Where:
        if not _is_path(entry):
            found = _shipped(entry)
            if found is None:
                doc.fail(loc, _unknown_name(entry))
            return found
        path = Path(entry).expanduser()
        if not path.is_absolute() and doc.base is not None:
            path = doc.base / path
        if not path.is_file():
            doc.fail(loc, f"no such playbook file {str(path)!r}; paths are relative to this file's folder")
        return _file(path, entry)

    def own(self, doc: Document, spec: schema.PlaybookFile) -> _Merged:
        """One file's settings, checked against the registries."""
        # Each entry is checked on its own (doc.gathering): every mistake of the file is reported.
        checks: dict[str, dict[str, Any]] | None = None
        if spec.checks:
            checks = {}
            for cid, entry in spec.checks.items():
                with doc.gathering():
                    self.known(doc, ("checks", cid), cid, self.check_ids(), "check", "nodeagent checks")
                    params = entry.params if entry is not None else {}
                    checks[cid] = schema.parameters(
                        doc, ("checks", cid, "params"), self.check_objects[cid], params
                    )
        for i, cid in enumerate(spec.skip_checks):
            with doc.gathering():
                self.known(doc, ("skip_checks", i), cid, self.check_ids(), "check", "nodeagent checks")
                if cid in spec.checks:
                    doc.fail(
                        ("skip_checks", i), f"{cid} is also under checks: in this file; keep one of the two"
                    )
        tuners: dict[str, dict[str, Any]] = {}
        for tid, tentry in spec.tuners.items():
            with doc.gathering():
                self.known(doc, ("tuners", tid), tid, self.tuner_ids(), "tuner", "nodeagent tuners")
                params = tentry.params if tentry is not None else {}
                tuners[tid] = schema.parameters(
                    doc, ("tuners", tid, "params"), self.tuner_objects[tid], params
                )
        ids = frozenset(self.check_ids())
        thresholds = []
        for i, t in enumerate(spec.thresholds):
            with doc.gathering():
                thresholds.append(
                    _Placed(schema.threshold(doc, ("thresholds", i), t, ids), doc, ("thresholds", i))
                )
        expected, expect_params = schema.expectations(spec.expect) if spec.expect else ([], {})
        thresholds += [_Placed(t, doc, ("expect", name)) for name, t in expected]
        bench = spec.bench.model_dump(exclude_none=True) if spec.bench is not None else {}
        return _Merged(
            spec.description,
            spec.budget_s,
            spec.fail_on,
            checks,
            thresholds,
            tuners,
            bench,
            expect_params=expect_params,
            lost_hardware=spec.lost_hardware,
            expect_at={
                cid: (doc, ("expect", field)) for cid, field in _EXPECT_FIELDS.items() if cid in expect_params
            },
        )

    @staticmethod
    def known(doc: Document, loc: Loc, ident: str, known: list[str], what: str, lister: str) -> None:
        if ident not in known:
            hint = did_you_mean(ident, known, f"{what}s")
            doc.fail(loc, f"unknown {what} {ident!r}; {hint} (`{lister}` lists them)")

    def finish(self, where: _Where, merged: _Merged) -> Playbook:
        chosen = merged.checks
        order = self.check_ids()
        checks = tuple(c for c in order if chosen is not None and c in chosen)
        docs: dict[int, Document] = {}  # the files with a rule on a check not run, in order
        for p in merged.thresholds:
            cid = _check_of(p.threshold.value)
            if chosen is not None and cid is not None and cid not in chosen:
                docs.setdefault(id(p.doc), p.doc)
                with p.doc.gathering():
                    p.doc.fail(
                        (*p.loc, "value"),
                        f"reads check {cid!r}, which this playbook does not run; add {cid} under checks: "
                        "or drop this threshold",
                    )
        for cid, (doc, loc) in merged.expect_at.items():
            if chosen is not None and cid not in chosen:
                docs.setdefault(id(doc), doc)
                with doc.gathering():
                    doc.fail(
                        loc,
                        f"is judged by check {cid!r}, which this playbook does not run; "
                        f"add {cid} under checks:",
                    )
        raise_problems(docs.values())
        tuner_order = self.tuner_ids() if merged.tuners else []
        tuners = tuple(t for t in tuner_order if t in merged.tuners)
        name = where.label if where.path is None else where.path.stem
        return Playbook(
            name=name,
            source=str(where.shipped) if where.path is None else str(where.path),
            description=merged.description or "",
            checks=checks,
            check_params=_with_expected(checks, chosen, merged.expect_params),
            thresholds=tuple(p.threshold for p in merged.thresholds),
            tuners=tuners,
            tuner_params={t: dict(merged.tuners[t]) for t in tuners},
            bench=BenchSettings(**merged.bench),
            budget_s=merged.budget_s,
            fail_on=merged.fail_on or "fail",
            includes=tuple(merged.includes),
            lost_hardware=merged.lost_hardware or "fail",
        )


def _accepted_sections(doc: Document) -> schema.PlaybookFile:
    """The file without the top-level sections the schema refused (their problems are in
    doc.problems), so that the rest is still checked against the registries."""
    refused = {p.loc[0] for p in doc.problems if p.loc}
    try:
        return schema.PlaybookFile.model_validate({k: v for k, v in doc.data.items() if k not in refused})
    except ValidationError:  # a problem of the whole file: its own lines say it
        return schema.PlaybookFile()


# The `expect:` fields that set a check's parameter, by check.
_EXPECT_FIELDS = {"nvlink": "nvlinks_per_gpu", "pcie": "gpu_min_pcie_width"}


def _with_expected(
    checks: tuple[str, ...],
    chosen: Mapping[str, Mapping[str, Any]] | None,
    expected: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Each check's parameters, those `expect:` sets on top; with no checks chosen (all run) the
    expected ones alone."""
    ids = checks if chosen is not None else tuple(expected)
    return {c: {**dict((chosen or {}).get(c, {})), **expected.get(c, {})} for c in ids}


def _check_of(key: str) -> str | None:
    """The check whose evidence a value key reads ("check.kernel...." -> "kernel"), None for facts
    and for wildcards in the id."""
    parts = key.split(".", 2)
    if parts[0] != schema.CHECK_SECTION or len(parts) < 2 or is_glob(parts[1]):
        return None
    return parts[1]


# --- Entry points ---------------------------------------------------------------------------------


def load_playbook(name_or_path: str) -> Playbook:
    """A shipped playbook by name ("preflight") or a playbook file (.yml/.yaml, or any path with a
    slash), resolved. Problems are UsageError lines "FILE:LINE: FIELD: problem; what to do"."""
    if _is_path(name_or_path):
        where = _file(Path(name_or_path).expanduser(), name_or_path)
    else:
        found = _shipped(name_or_path)
        if found is None:
            raise UsageError(_unknown_name(name_or_path))
        where = found
    resolver = _Resolver()
    return resolver.finish(where, resolver.resolve(where))


def list_playbooks() -> list[Playbook]:
    """The shipped playbooks, resolved, sorted by name."""
    return [load_playbook(name) for name in shipped_names()]
