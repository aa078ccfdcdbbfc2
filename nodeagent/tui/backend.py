"""What the TUI drives: the same engine, tuners, benchmark and fleet runner as the CLI, behind one
small interface. Screens hold no engine logic; they call a Backend from workers and render what it
returns. Tests drive the app with a fake Backend (slow, failing, UNKNOWN findings) and with this
one on recorded snapshots.

Every method may block (reads, SSH, the benchmark): call them from worker threads, never from the
event loop. None of them imports TensorFlow, pynvml or paramiko until it is called.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nodeagent.api.check import Check
    from nodeagent.api.tune import Change, Plan
    from nodeagent.bench.run import BenchResult, Progress
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome
    from nodeagent.core.finding import Finding
    from nodeagent.engine import CheckResult
    from nodeagent.gate.playbook import Playbook
    from nodeagent.tuning.apply import ApplyResult
    from nodeagent.tuning.journal import Journal

_ABSENT = object()


@dataclass(frozen=True)
class SavedProfile:
    """The profile `nodeagent exec --profile NAME` applies, as it is on disk (nodeagent.tuning.profile):
    what `tune --apply` (or an apply in the TUI) saved there, read before the plan is shown."""

    name: str
    path: Path
    doc: dict[str, Any]

    def value_at(self, key: str) -> Any:
        """The value under a dotted `profile_key` ("env.OMP_NUM_THREADS"), or _ABSENT."""
        node: Any = self.doc
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return _ABSENT
            node = node[part]
        return node

    def holds(self, change: Change) -> bool:
        """Whether the profile already holds `change`'s value under its `profile_key`: applying it
        again would save what is there. Compared as the JSON the profile stores (profile.merged):
        tuples are lists, keys are strings."""
        if change.profile_key is None:
            return False
        saved = self.value_at(change.profile_key)
        if saved is _ABSENT:
            return False
        try:
            planned = json.loads(json.dumps(change.value))
        except (TypeError, ValueError):  # not JSON: the profile could not hold it
            return False
        return bool(saved == planned)


class Backend(Protocol):
    """The operations of the TUI's screens."""

    @property
    def name(self) -> str:
        """The node (or snapshot) shown in the title."""

    @property
    def tune_read_only(self) -> str | None:
        """Why tuning can only be planned here (a snapshot, not root), or None when it can apply."""

    @property
    def cluster_source(self) -> str | None:
        """The inventory the cluster screen runs on, or None."""

    def facts(self) -> dict[str, Any]: ...

    def checks(self) -> Sequence[Check[Any, Any]]: ...

    def run_checks(self, only: Sequence[str] = ()) -> Iterator[CheckResult]: ...

    def plans(self) -> list[Plan]: ...

    def apply(self, plans: list[Plan]) -> ApplyResult: ...

    def saved_profile(self) -> SavedProfile | None:
        """The profile that apply saves process settings to, as it is now; None when there is no
        such file. A file that is there but not a readable profile raises (UsageError)."""

    def journals(self) -> list[Journal]: ...

    def revert(self, journal_id: str) -> list[Finding]: ...

    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult: ...

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport: ...


@dataclass
class LocalBackend:
    """This machine (root None), a recorded snapshot (`root`), and optionally a fleet."""

    root: str | None = None
    inventory_path: str | None = None
    profile: str = "default"
    timeout_s: float = 20.0
    playbook: Playbook | None = None  # its checks, parameters and thresholds; tuners; bench settings

    def _host(self) -> Any:
        from nodeagent.host import open_host

        return open_host(self.root)

    @property
    def name(self) -> str:
        with self._host() as host:
            return str(host.name)

    @property
    def tune_read_only(self) -> str | None:
        if self.root not in (None, "/"):
            return f"a recorded snapshot ({self.root}) is read-only: the plan is shown, nothing applies"
        if os.geteuid() != 0:
            return "runtime changes need root: the plan is shown; run `sudo nodeagent tui` to apply"
        return None

    @property
    def cluster_source(self) -> str | None:
        return self.inventory_path

    def facts(self) -> dict[str, Any]:
        from nodeagent.facts import node

        with self._host() as host:
            return node.collect(host)

    def checks(self) -> Sequence[Check[Any, Any]]:
        from nodeagent.gate import judge

        return judge.selected_checks(self.playbook, [], [])

    def run_checks(self, only: Sequence[str] = ()) -> Iterator[CheckResult]:
        """The checks as they finish, then the playbook's thresholds (when it has any)."""
        from nodeagent import engine
        from nodeagent.gate import judge

        selected = judge.selected_checks(self.playbook, list(only), [])
        params = judge.check_params(self.playbook, selected)
        with self._host() as host:
            report = engine.Report(host.name)
            for result in engine.run(host, selected, params, timeout_s=self.timeout_s):
                report.results.append(result)
                yield result
            if self.playbook is not None and self.playbook.thresholds and not only:
                yield from judge.extra_results(judge.values_of(host, report), self.playbook, None, host.name)

    def _tuners(self) -> list[Any]:
        from nodeagent import tuners

        return tuners.select(list(self.playbook.tuners) if self.playbook else [], [])

    def plans(self) -> list[Plan]:
        overrides = self.playbook.tuner_params if self.playbook else {}
        with self._host() as host:
            return [t.run_plan(host, t.make_params(dict(overrides.get(t.id, {})))) for t in self._tuners()]

    def apply(self, plans: list[Plan]) -> ApplyResult:
        from nodeagent import tuners
        from nodeagent.tuning import apply

        if self.tune_read_only:
            from nodeagent.core.errors import UsageError

            raise UsageError(self.tune_read_only)
        wanted = {p.tuner for p in plans}
        verifiers = {t.id: t.verify for t in tuners.select([], []) if t.id in wanted and t.verify}
        with self._host() as host:
            return apply.apply(host, plans, self.profile, verifiers=verifiers)

    def saved_profile(self) -> SavedProfile | None:
        from nodeagent.tuning import profile

        doc = profile.load_if_present(self.profile)  # where apply.apply saves (the state folder)
        return None if doc is None else SavedProfile(self.profile, profile.profile_path(self.profile), doc)

    def journals(self) -> list[Journal]:
        from nodeagent.tuning import journal

        return journal.all_journals()

    def revert(self, journal_id: str) -> list[Finding]:
        from nodeagent.tuning import apply, journal

        return apply.revert(journal.find(journal_id))

    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult:
        import importlib.util

        from nodeagent.bench import run
        from nodeagent.core.errors import UsageError

        if self.root not in (None, "/"):
            raise UsageError(
                f"the benchmark measures the machine it runs on, not a recording ({self.root}): "
                "start `nodeagent tui` without --root on the node to benchmark it"
            )
        if importlib.util.find_spec("tensorflow") is None:
            raise UsageError("the benchmark needs TensorFlow: pip install 'nodeagent[tf]'")
        settings = self.playbook.bench if self.playbook else None
        repeats = settings.repeats if settings else None
        processes = settings.processes if settings else None
        return run.run_bench(quick, self.profile, repeats, processes, on_progress=on_progress)

    def inventory(self) -> Inventory:
        from nodeagent.cluster.inventory import load
        from nodeagent.core.errors import UsageError

        if self.inventory_path is None:
            raise UsageError("no inventory: start with `nodeagent tui --cluster hosts.yml`")
        return load.load_inventory(Path(self.inventory_path))

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport:
        import time

        from nodeagent import checks
        from nodeagent.cluster import DEFAULT_PARALLEL
        from nodeagent.cluster.report import FleetReport
        from nodeagent.cluster.runner import CheckJob, run_fleet

        inv = self.inventory()
        start = time.monotonic()
        outcomes = run_fleet(inv, CheckJob(checks.select()), DEFAULT_PARALLEL, on_done=on_done)
        return FleetReport.build(outcomes, time.monotonic() - start)
