"""The fleet's progress bar: on stderr when it is a terminal (or one is forced as rich allows), and
without importing rich at all when it is not (a script, a batch job, a pipe)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SHOW = (
    "import sys\n"
    "from types import SimpleNamespace\n"
    "from nodeagent.render.progress import progress\n"
    "with progress(2, 'check') as done:\n"
    "    done(SimpleNamespace(ok=True)); done(SimpleNamespace(ok=False))\n"
    "print('rich' in sys.modules)\n"
)


@pytest.mark.parametrize(
    ("env", "rich_loaded"),
    [({}, False), ({"FORCE_COLOR": "1"}, True), ({"TTY_COMPATIBLE": "1"}, True)],
    ids=["pipe", "FORCE_COLOR", "TTY_COMPATIBLE"],
)
def test_rich_draws_the_bar_only_where_a_terminal_may_be(env: dict[str, str], rich_loaded: bool) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.run(
        [sys.executable, "-c", SHOW], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == str(rich_loaded)
    assert ("1 failed" in proc.stderr) is rich_loaded  # the bar's own text, on stderr
