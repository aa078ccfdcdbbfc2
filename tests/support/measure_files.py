"""A measurement file as the measuring hook writes it (nodeagent/hooks/_nodeagent_measure.py: one
<pid>.json per process), for tests of how nodeagent reads and combines them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_measurement(folder: Path, pid: int, **fields: Any) -> None:
    """`folder`/<pid>.json: a process that measured 100 steps in 10 s after 5 warm-up steps and
    waited 2 s of them for input, with `fields` set on top."""
    doc = {
        "pid": pid,
        "source": "tf-data-loop",
        "steps": 105,
        "warmup_steps": 5,
        "measured_steps": 100,
        "seconds": 10.0,
        "steps_per_s": 10.0,
        "input_wait_s": 2.0,
        "input_wait_fraction": 0.2,
        "input_wait_unknown": None,
    }
    doc.update(fields)
    (folder / f"{pid}.json").write_text(json.dumps(doc))
