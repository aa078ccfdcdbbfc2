"""The golden documents under tests/golden: real outputs of nodeagent on recorded machines, with the
fields that differ between two runs on the same input (durations, times, the version) masked."""

from __future__ import annotations

from typing import Any

# What differs between two runs on the same input.
VOLATILE = {
    "duration_s",
    "started",
    "finished",
    "elapsed_s",
    "generated_at",
    "nodeagent_version",
    "version",
    "time",
    "timestamp",
}


def stable(doc: Any) -> Any:
    """`doc` with every VOLATILE field's value replaced by "<volatile>"."""
    if isinstance(doc, dict):
        return {k: ("<volatile>" if k in VOLATILE else stable(v)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [stable(v) for v in doc]
    return doc
