"""What judging a node costs once its checks have run: a playbook's thresholds, a baseline's
comparison and folding their verdicts into the checks' findings (nodeagent.gate.judge.judged), as
`preflight --baseline` and every host of `check --cluster --playbook --baseline` pay it.

The node is the recorded K80 node with 12 ConnectX ports (tests/support/recorded_nodes.py) with two ports
disabled, against a baseline of it intact, under gpu-training.

Run: `.venv/bin/python tests/perf/gate_judging.py [--runs 300]`; prints the median and the spread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # tests.support.recorded_nodes, when run as a script


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()

    from nodeagent import engine
    from nodeagent.gate import baseline, judge
    from nodeagent.gate.playbook import load_playbook
    from nodeagent.host import open_host
    from tests.support.recorded_nodes import GPUS, HCAS, disable_port, node, record_limits

    with tempfile.TemporaryDirectory() as tmp:
        intact = node(Path(tmp), "gpu-01", GPUS, HCAS)
        record_limits(intact, "unlimited")
        down = node(Path(tmp), "gpu-02", GPUS, HCAS)
        record_limits(down, "unlimited")
        for device in ("mlx5_10", "mlx5_11"):
            disable_port(down, device)
        pb = load_playbook("gpu-training")
        checks = judge.selected_checks(pb, [], [])
        params = judge.check_params(pb, checks)
        with open_host(str(intact)) as host:
            good = judge.values_of(host, engine.run_report(host, checks, params))
        saved = Path(tmp) / "intact.json"
        baseline.save({"gpu-01": good}, saved, "gpu-01")
        with open_host(str(down)) as host:
            report = engine.run_report(host, checks, params)
            values = judge.values_of(host, report)
            times = []
            for _ in range(args.runs):
                loaded = baseline.load(saved)  # its reference is computed once per loaded baseline
                start = time.perf_counter()
                judge.judged(report.results, values, pb, loaded, host.name)
                times.append(time.perf_counter() - start)
    q = statistics.quantiles(times, n=10)
    print(
        f"judged (gpu-training thresholds + baseline + fold), {len(values)} values: median "
        f"{statistics.median(times) * 1000:.2f} ms over {args.runs} runs "
        f"(p10 {q[0] * 1000:.2f}, p90 {q[-1] * 1000:.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
