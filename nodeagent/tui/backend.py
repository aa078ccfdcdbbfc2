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
    from nodeagent.app.check import CheckRequest
    from nodeagent.app.fleet import FleetRequest
    from nodeagent.app.tune import TuneRequest
    from nodeagent.bench.ab import Block
    from nodeagent.bench.paired import Estimate
    from nodeagent.bench.run import BenchResult, Progress
    from nodeagent.bench.verify import ProfileVerdict
    from nodeagent.cluster.inventory.load import Inventory
    from nodeagent.cluster.report import FleetReport
    from nodeagent.cluster.runner import HostOutcome
    from nodeagent.core.finding import Finding
    from nodeagent.engine import CheckResult
    from nodeagent.gate.baseline import Baseline
    from nodeagent.gate.playbook import Playbook
    from nodeagent.tuning.apply import ApplyResult
    from nodeagent.tuning.history import Record
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

    def verify(self, quick: bool, on_block: Callable[[Block, Estimate | None], None]) -> ProfileVerdict:
        """A/B trials of the built-in workload without and with the profile (`nodeagent verify`);
        `on_block` is called as each block of trials ends, with the estimate so far."""

    def history(self) -> list[Record]:
        """The verify decisions recorded on this machine, oldest first (`nodeagent history`)."""

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport: ...


@dataclass
class LocalBackend:
    """This machine (root None), a recorded snapshot (`root`), and optionally a fleet: every
    operation is the application layer's flow (nodeagent.app), as the CLI runs it."""

    root: str | None = None
    inventory_path: str | None = None
    profile: str = "default"
    timeout_s: float = 20.0
    playbook: Playbook | None = None  # its checks, parameters and thresholds; tuners; bench settings
    baseline: Baseline | None = None

    @property
    def name(self) -> str:
        from nodeagent.app.check import node_name

        return node_name(self.root)

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
        from nodeagent.host import open_host

        with open_host(self.root) as host:
            return node.collect(host)

    def _check_request(self, only: Sequence[str] = ()) -> CheckRequest:
        from nodeagent.app.check import CheckRequest

        return CheckRequest(
            self.root, tuple(only), (), self.timeout_s, playbook=self.playbook, baseline=self.baseline
        )

    def checks(self) -> Sequence[Check[Any, Any]]:
        return self._check_request().checks()

    def run_checks(self, only: Sequence[str] = ()) -> Iterator[CheckResult]:
        """The checks as they finish, then the playbook's thresholds and the baseline's comparison."""
        from nodeagent.app import check
        from nodeagent.host import open_host

        with open_host(self.root) as host:
            yield from check.stream(self._check_request(only), host)

    def _tune_request(self) -> TuneRequest:
        from nodeagent.app.tune import TuneRequest

        return TuneRequest(self.root, playbook=self.playbook, profile=self.profile)

    def plans(self) -> list[Plan]:
        from nodeagent.app import tune

        return tune.plans(self._tune_request())

    def apply(self, plans: list[Plan]) -> ApplyResult:
        from nodeagent.app import tune

        if self.tune_read_only:
            from nodeagent.core.errors import UsageError

            raise UsageError(self.tune_read_only)
        return tune.apply_plans(self._tune_request(), plans)

    def saved_profile(self) -> SavedProfile | None:
        from nodeagent.tuning import profile

        doc = profile.load_if_present(self.profile)  # where apply.apply saves (the state folder)
        return None if doc is None else SavedProfile(self.profile, profile.profile_path(self.profile), doc)

    def journals(self) -> list[Journal]:
        from nodeagent.app import tune

        return tune.journals()

    def revert(self, journal_id: str) -> list[Finding]:
        from nodeagent.app import tune

        return [f for _, _, findings in tune.revert(journal_id).done for f in findings]

    def bench(self, quick: bool, on_progress: Callable[[Progress], None]) -> BenchResult:
        from nodeagent.app import bench

        request = bench.BenchRequest(quick, self.profile).with_playbook(self.playbook)
        return bench.run(request, self.root, on_progress=on_progress)

    def verify(self, quick: bool, on_block: Callable[[Block, Estimate | None], None]) -> ProfileVerdict:
        """`nodeagent verify [--quick]` without a command: the built-in workload with this profile."""
        from nodeagent.app import verify

        if self.root not in (None, "/"):
            from nodeagent.core.errors import UsageError

            # The trials run here, on this machine's profile: a recording's node is not measured.
            raise UsageError(
                f"verify measures the machine it runs on, not a recording ({self.root}): "
                "run it on the node itself, without --root"
            )
        return verify.run(verify.VerifyRequest(self.profile or "default", (), quick), on_block=on_block)

    def history(self) -> list[Record]:
        from nodeagent.app import verify

        return verify.history()

    def inventory(self) -> Inventory:
        from nodeagent.core.errors import UsageError

        inv = self._fleet_request().inventory()
        if inv is None:
            raise UsageError("no inventory: start with `nodeagent tui --cluster hosts.yml`")
        return inv

    def _fleet_request(self) -> FleetRequest:
        from nodeagent.app.fleet import FleetRequest

        return FleetRequest(self.inventory_path)

    def run_cluster(self, on_done: Callable[[HostOutcome], None]) -> FleetReport:
        """The checks of `check --cluster` with the same playbook and baseline on every host."""
        from nodeagent.app import fleet

        source = fleet.SshSource(self.inventory(), self._fleet_request().workers)
        return fleet.check(source, fleet.FleetCheck(self._check_request()), on_done).report
