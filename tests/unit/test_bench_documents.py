"""The parts of the verify and bench documents that are their objects' declarations
(docs/architecture.md, Documents): an A/B trial (nodeagent.bench.ab.Trial) and the benchmark's
bound (nodeagent.bench.run.Bound), written under the keys their readers use, in order, without what
the document leaves out."""

from __future__ import annotations

from nodeagent.bench import ab, run
from nodeagent.core import document

TRIAL_KEYS = [
    "trial",
    "block",
    "side",
    "rate",
    "wall_s",
    "interference",
    "input_wait_fraction",
    "error",
    "leftovers",
]


def test_a_trial_is_written_under_the_reports_keys_without_its_cpu_time() -> None:
    trial = ab.Trial(3, 2, "B", 101.5, 1.25, 0.02, input_wait=0.4, cpu_s=1.1, leftovers=["4242 sleep"])
    doc = document.dump(trial)
    assert list(doc) == TRIAL_KEYS
    assert doc == {
        "trial": 3,
        "block": 2,
        "side": "B",
        "rate": 101.5,
        "wall_s": 1.25,
        "interference": 0.02,
        "input_wait_fraction": 0.4,
        "error": None,
        "leftovers": ["4242 sleep"],
    }


def test_a_failed_trial_keeps_every_key() -> None:
    doc = document.dump(ab.Trial(1, 1, "A", None, 0.0, error="cannot start ./job: not found"))
    assert list(doc) == TRIAL_KEYS
    assert doc["rate"] is None and doc["interference"] is None and doc["error"].startswith("cannot start")


def test_the_bound_is_the_tighter_of_its_two_after_them() -> None:
    assert document.dump(run.Bound(1553.0, 1000.0, 2)) == {
        "stage": 1553.0,
        "cpu_budget": 1000.0,
        "cpus": 2,
        "value": 1000.0,
    }
    assert list(document.dump(run.Bound(None, None, None))) == ["stage", "cpu_budget", "cpus", "value"]
    assert document.dump(run.Bound(None, 5.0, 2))["value"] == 5.0
