"""The shape of a tuner and the one way changes are applied, verified and reverted.

A tuner is like a check: `collect(host)` gathers (all I/O), `plan(facts, params)` decides (pure) and
returns Changes. Applying is common to all tuners and lives here: runtime changes are file writes
(sysfs, /proc/sys) journaled before the first one happens; process and code changes go into a
named profile that `nodeagent exec` applies to the training job; boot changes are advice. Modelled
on TuneD's save-old-value / apply / verify / unapply cycle (tuned/plugins/base.py), with
verification reported as Findings rather than booleans.

A tuner and the check it corresponds to share one judgement: a change of the node (RUNTIME or
BOOT) is planned only for a value the check does not accept, and names that finding in `answers`
("hugepages/thp-defrag"); a value the check accepts is left alone unless a parameter set
explicitly asks for more, and then the change names the parameter in `asked` and says so in its
`why`. What a tuner leaves of a finding it could answer is in its plan's `declined`, with why.
PROCESS and CODE changes set up jobs started by `nodeagent exec` (a profile, not the node): no
check reads them, so they name a finding only where they answer one (a thread pool the threads
check flags), and otherwise set values the corresponding check accepts.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import posixpath
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.dataclasses import dataclass as pydantic_dataclass

from nodeagent.api.check import make_params
from nodeagent.core import parse
from nodeagent.core.document import LATE, dump, is_empty, is_none
from nodeagent.core.errors import UsageError
from nodeagent.core.finding import Finding, Status
from nodeagent.host import Host

F = TypeVar("F")
P = TypeVar("P")


class Scope(enum.Enum):
    RUNTIME = "runtime"  # sysfs / sysctl: applied now, lost at reboot
    BOOT = "boot"  # kernel command line: advice only, never written
    PROCESS = "process"  # environment and launcher settings of the training job (the profile)
    CODE = "code"  # a snippet for the user's input pipeline (kept in the profile, printed)


# Changes and plans are the tune document's objects: pydantic dataclasses, so that the document is
# their declaration (fields in the order it writes them; what a change does not use is left out).


@pydantic_dataclass(frozen=True, config=LATE)
class Write:
    """One file a runtime change writes, with the value it held before."""

    path: str
    before: str | None  # None: unreadable or absent (then it cannot be restored, and is not written)
    after: str


@pydantic_dataclass(frozen=True, config=LATE)
class Change:
    """One planned change, as a person reads it in the plan.

    `target` names what changes ("kernel.numa_balancing", "scaling_governor of cpu0-63",
    "env OMP_NUM_THREADS"); `before`/`after` are shown as they are. Runtime changes carry their
    `writes`; process and code changes carry `profile_key` and `value`, merged into the profile.
    The document leaves out what a change does not use: empty `writes` and `answers`, and a
    `profile_key`, `value` or `asked` that is None.

    `answers` are the check findings ("check/subject", the subject an fnmatch pattern where it
    varies: "threads/pid *") whose not-accepted value this change corrects; `asked` is the tuner
    parameter ("thp.defrag") set explicitly to ask for more than the check requires.
    """

    tuner: str
    target: str
    before: str
    after: str
    scope: Scope
    why: str
    writes: tuple[Write, ...] = Field(default=(), exclude_if=is_empty)
    profile_key: str | None = Field(default=None, exclude_if=is_none)
    value: Any = Field(default=None, exclude_if=is_none)
    answers: tuple[str, ...] = Field(default=(), exclude_if=is_empty)
    asked: str | None = Field(default=None, exclude_if=is_none)

    @property
    def is_noop(self) -> bool:
        return self.scope is Scope.RUNTIME and all(
            w.before is not None and _same(w.before, w.after) for w in self.writes
        )


@pydantic_dataclass(frozen=True, config=LATE)
class Plan:
    """What one tuner would do. `notes` say why nothing (or less) is planned; `declined` maps each
    check finding ("check/subject", as in Change.answers) the tuner could answer but leaves to why
    (the reason is in `notes` too, for people); `details` carries structured extras, written beside
    the plan's own fields (numa-pinning's `ranks`)."""

    tuner: str
    changes: list[Change] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict, exclude=True)
    declined: dict[str, str] = Field(default_factory=dict, exclude_if=is_empty)

    @model_serializer(mode="wrap")
    def _with_details(self, fields: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = fields(self)
        return out | self.details


def plan_documents(plans: Sequence[Plan]) -> list[dict[str, Any]]:
    """The plans as the tune document holds them."""
    return [dump(p) for p in plans]


def finding_key(check_id: str, subject: str) -> str:
    """How a change or a plan names a check's finding: "hugepages/thp-defrag"."""
    return f"{check_id}/{subject}"


def answered(key: str, patterns: Sequence[str]) -> bool:
    """Whether the finding `key` ("threads/pid 4242") is one of `patterns` ("threads/pid *")."""
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)


def asked_why(param: str, value: object, check_id: str, accepted: str) -> str:
    """The `why` of a change an explicit parameter asked for beyond the check: "defrag=defer+madvise
    asked by the tuner parameter thp.defrag; the hugepages check accepts madvise"."""
    name = param.split(".", 1)[-1]
    return f"{name}={value} asked by the tuner parameter {param}; the {check_id} check accepts {accepted}"


@dataclass(frozen=True)
class Tuner(Generic[F, P]):
    """A tuner: `collect(host) -> F` (I/O), `plan(F, P) -> Plan` (pure)."""

    id: str
    title: str
    collect: Callable[[Host], F]
    plan: Callable[[F, P], Plan]
    params: type[P]
    paths: tuple[str, ...] = ()
    # Read-back after apply; None: verify_writes (each file holds what was written). A tuner whose
    # kernel may legitimately give less (huge pages under fragmentation) brings its own.
    verify: Callable[[Host, list[Change]], list[Finding]] | None = None
    # The files its runtime changes write, as glob patterns of whole path components ("*" never
    # crosses a "/"): `nodeagent revert` writes a journal's path only when the tuner that journaled
    # it owns it here, so an edited journal cannot make it write anywhere else.
    writes: tuple[str, ...] = ()

    def owns(self, path: str) -> bool:
        return owned_by(self.writes, path)

    def make_params(self, overrides: Mapping[str, Any] | None = None) -> P:
        return make_params(f"tuner {self.id}", self.params, overrides)

    def run_plan(self, host: Host, params: P) -> Plan:
        return self.plan(self.collect(host), params)


def owned_by(patterns: Sequence[str], path: str) -> bool:
    """Whether `path` (absolute, normalised: no "..", no "//") matches one of the glob `patterns`,
    component by component."""
    if not path.startswith("/") or posixpath.normpath(path) != path:
        return False
    parts = path.split("/")
    for pattern in patterns:
        pp = pattern.split("/")
        if len(pp) == len(parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pp, strict=True)):
            return True
    return False


# -- one rank layout for every planner --------------------------------------------------------------

# The parameters of the rank layout (nodeagent.facts.ranks.build) that several tuners take: the
# count of local ranks above all, which numa-pinning binds, tf-threads divides the cores by,
# pinned-memory divides host memory by and tf-data sizes its pool for. One node runs one layout, so
# these are one input of the planning, given once: --ranks N, or any tuner's own value (all that
# are given must agree), numa-pinning's (the tuner that binds the ranks) named first.
LAYOUT_PARAMS = ("ranks", "cpu_only", "split_shared_nodes")
LAYOUT_OWNER = "numa-pinning"


def _takes(tuner: Tuner[Any, Any], name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(tuner.params)}


def share_layout(
    tuners: Sequence[Tuner[Any, Any]],
    overrides: Mapping[str, Mapping[str, Any]],
    ranks: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Each tuner's parameter overrides, with the layout parameters made one: `ranks` (--ranks) or
    the value a tuner was given is set for every tuner that takes it and was not given one. Two
    different values are a UsageError: the plans would bind, size and divide for different ranks."""
    out = {t.id: dict(overrides.get(t.id, {})) for t in tuners}
    if ranks is not None and not any(_takes(t, "ranks") for t in tuners):
        raise UsageError(
            f"--ranks {ranks}: none of the selected tuners ({', '.join(t.id for t in tuners) or 'none'}) "
            "plans per rank; select numa-pinning, tf-threads, pinned-memory or tf-data, or leave --ranks out"
        )
    order = sorted(tuners, key=lambda t: t.id != LAYOUT_OWNER)  # numa-pinning's value named first
    for name in LAYOUT_PARAMS:
        given = {t.id: out[t.id][name] for t in order if name in out[t.id]}
        if name == "ranks" and ranks is not None:
            clash = {tid: v for tid, v in given.items() if v != ranks}
            if clash:
                tid, v = next(iter(clash.items()))
                raise UsageError(
                    f"--ranks {ranks} and {tid}.ranks={v} disagree: the node runs one rank layout; "
                    "give the count once, with --ranks"
                )
            given = {"--ranks": ranks}
        if len(set(map(repr, given.values()))) > 1:
            shown = " and ".join(f"{tid}.{name}={v}" for tid, v in given.items())
            raise UsageError(
                f"{shown} disagree: every tuner plans for the node's one rank layout; give it once"
                + (" (--ranks N)" if name == "ranks" else f" (--set {LAYOUT_OWNER}.{name}=...)")
            )
        if not given:
            continue
        value = next(iter(given.values()))
        for t in tuners:
            if _takes(t, name):
                out[t.id].setdefault(name, value)
    return out


# A thread pool larger than the CPUs it runs on only adds context switches; beyond a few threads per
# CPU a count is a typo (or a hostile --set: 10**6 threads exhaust the machine), not a tuning choice.
THREADS_PER_CPU_MAX = 4


def check_thread_count(tuner_id: str, name: str, value: int, cpus: int | None) -> None:
    """A UsageError when a thread-count parameter is beyond THREADS_PER_CPU_MAX x this node's CPUs
    (unknown CPUs: no bound here; nodeagent.core.limits still caps every integer)."""
    if cpus and value > THREADS_PER_CPU_MAX * cpus:
        raise UsageError(
            f"tuner {tuner_id}: {name}={value} is more than {THREADS_PER_CPU_MAX} threads per CPU of the "
            f"{cpus} this node has; give at most {THREADS_PER_CPU_MAX * cpus}, or 0 to derive it"
        )


# -- documentation of parameters ---------------------------------------------------------------------


# What a parameter's reason cites: links, and the kernel's Documentation/ paths named without one.
_CITED = re.compile(r"https?://[^\s)\"']+|Documentation/[\w./-]+\.(?:rst|txt)")


@dataclass(frozen=True)
class ParamDoc:
    name: str
    type: str
    default: Any
    why: str

    @property
    def sources(self) -> list[str]:
        """The documents the reason cites, in its order (the punctuation after one is not part of it)."""
        return [cited.rstrip(".,;:") for cited in _CITED.findall(self.why)]


def param_docs(params: type[Any]) -> list[ParamDoc]:
    """Every field of a Params dataclass: name, type, default and the reason given with `param()`."""
    hints = typing.get_type_hints(params)
    out = []
    for f in dataclasses.fields(params):
        hint = hints.get(f.name, f.type)
        shown = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append(ParamDoc(f.name, shown, default, str(f.metadata.get("why", ""))))
    return out


def _same(read: str, written: str) -> bool:
    """Whether a file read back holds what was written. Selector files ("always [madvise] never")
    show the choice in brackets; multi-value files (sysctl vectors) compare by words."""
    read, written = read.strip(), written.strip()
    if "[" in read:
        return parse.selected(read) == written
    return read.split() == written.split()


def verify_writes(host: Host, changes: list[Change], check_id: str = "tune") -> list[Finding]:
    """Read back every runtime write: one Finding per change, FAIL naming the files that differ."""
    findings = []
    for c in changes:
        if c.scope is not Scope.RUNTIME:
            continue
        wrong = {}
        for w in c.writes:
            now = host.read(w.path)
            if now is None or not _same(now, w.after):
                wrong[w.path] = f"{(now or '(unreadable)').strip()} (wanted {w.after})"
        if wrong:
            findings.append(
                Finding(
                    check_id,
                    Status.FAIL,
                    f"{c.tuner}: {c.target} did not take: {len(wrong)} of {len(c.writes)} file(s) differ",
                    wrong,
                    expected=c.after,
                    remediation="Something else manages this setting (tuned, a BIOS-owned governor, "
                    "a container's read-only /sys): look there, or revert with `nodeagent revert`.",
                    subject=c.target,
                    fix=c.tuner,
                )
            )
        else:
            findings.append(
                Finding(
                    check_id,
                    Status.OK,
                    f"{c.tuner}: {c.target} = {c.after}",
                    {w.path: w.after for w in c.writes[:4]},
                    subject=c.target,
                    fix=c.tuner,
                )
            )
    return findings


def runtime_write(
    tuner: str, target: str, why: str, paths_before: Mapping[str, str | None], after: str
) -> Change:
    """A runtime change writing `after` to every path; `before` summarises the distinct old values."""
    writes = tuple(Write(p, _restorable(b), after) for p, b in sorted(paths_before.items()))
    olds = sorted({_shown(w.before) for w in writes})
    return Change(tuner, target, ", ".join(olds) or "?", after, Scope.RUNTIME, why, writes=writes)


def _restorable(value: str | None) -> str | None:
    """What to write to put a file back: the bracketed choice of a selector file ("always [madvise]
    never" is restored by writing "madvise"), else the value as read."""
    if value is None:
        return None
    value = value.strip()
    return parse.selected(value) or value if "[" in value else value


def _shown(value: str | None) -> str:
    if value is None:
        return "(unreadable)"
    return parse.selected(value) or value if "[" in value else value
