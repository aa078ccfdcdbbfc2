#!/usr/bin/env python3
"""The benchmark's figures against their targets, measured on this machine.

Runs `nodeagent bench` (full, not quick) with a tuned profile, then `nodeagent bench --quick` for
its wall time, and prints:
- tuned / naive (target >= 1.3), tuned / autotune (>= 1.0), tuned / bound (>= 0.9), each with
  the bootstrap 95% CI of the ratio where there is one;
- the 95% CI half-width of each config as % of its median (target <= 3%);
- the quick mode's wall time (target <= 60 s).

Prints figures; asserts nothing (performance is measured here, not in tests). The profile is made
in a temporary state folder with `nodeagent tune --apply --only numa-pinning,tf-threads,tf-data`
(process settings only: no root, nothing written to the machine) unless --state-dir is given.

Usage: python tests/perf/bench_report.py [--state-dir DIR] [--profile NAME] [--repeats N]
       [--processes N] [--skip-quick] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HELPFUL = "numa-pinning,tf-threads,tf-data"


def nodeagent(env: dict[str, str], *args: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def target(ok: bool | None) -> str:
    return "n/a" if ok is None else ("MET" if ok else "NOT MET")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--state-dir", type=Path, help="use this state folder's profile instead of making one"
    )
    parser.add_argument("--profile", default="default")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--skip-quick", action="store_true", help="do not time the quick mode")
    parser.add_argument("--json-out", type=Path, help="also save the full run's JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-report-") as tmp:
        env = dict(os.environ)
        env["NODEAGENT_STATE_DIR"] = str(args.state_dir or Path(tmp) / "state")
        if args.state_dir is None:
            made = nodeagent(
                env, "tune", "--apply", "--only", HELPFUL, "--profile", args.profile, timeout=120
            )
            if made.returncode != 0:
                print(f"could not make the profile:\n{made.stdout}{made.stderr}", file=sys.stderr)
                return 1
        extra = []
        if args.repeats:
            extra += ["--repeats", str(args.repeats)]
        if args.processes:
            extra += ["--processes", str(args.processes)]

        quick_s = None
        quick_rc = None
        if not args.skip_quick:
            # First, so the quick data set's one-time generation is not part of its figure: run
            # once to make the data, then time a second run (what CI pays once its cache is warm).
            nodeagent(env, "bench", "--quick", "--profile", args.profile, "--format", "json")
            start = time.monotonic()
            quick = nodeagent(env, "bench", "--quick", "--profile", args.profile, "--format", "json")
            quick_s = time.monotonic() - start
            quick_rc = quick.returncode

        start = time.monotonic()
        full = nodeagent(env, "bench", "--profile", args.profile, "--format", "json", *extra)
        full_s = time.monotonic() - start
    if full.returncode not in (0, 1) or not full.stdout.strip():
        print(f"nodeagent bench failed (exit {full.returncode}):\n{full.stderr[-4000:]}", file=sys.stderr)
        return 1
    doc: dict[str, Any] = json.loads(full.stdout)
    if args.json_out:
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n")
    report(doc, full_s, quick_s, quick_rc)
    return 0


def report(doc: dict[str, Any], full_s: float, quick_s: float | None, quick_rc: int | None) -> None:
    configs = doc["configs"]
    sizes = doc.get("sizes", {})
    print(
        f"nodeagent bench (full): {sizes.get('processes')} process(es) x {sizes.get('repeats')} repeats x "
        f"{sizes.get('steps')} steps, batch {sizes.get('batch')}, {sizes.get('image_size')} px; "
        f"{full_s:.0f} s wall"
    )
    print()
    print(
        f"{'config':14} {'status':8} {'median':>9} {'95% CI':>21} {'±%':>6} {'of bound':>9} {'wait':>6}"
        "  diagnosis"
    )
    for name, c in configs.items():
        ips = c.get("images_per_s")
        if not ips:
            print(f"{name:14} {c['status']:8} {c.get('reason', '')[:100]}")
            continue
        lo, hi = ips["ci95"]
        wait = c.get("input_wait_fraction")
        frac = c.get("fraction_of_bound")
        print(
            f"{name:14} {c['status']:8} {ips['median']:9.1f} [{lo:8.1f}, {hi:8.1f}] "
            f"{ips['half_width_pct']:5.1f}% {'-' if frac is None else f'{frac:.2f}':>9} "
            f"{'-' if wait is None else f'{wait:.0%}':>6}  {c.get('diagnosis') or ''}"
        )
    b = doc["bound"]
    print()
    print(
        f"bound: stage {fmt(b['stage'])} images/s, CPU budget {fmt(b['cpu_budget'])} images/s "
        f"({b['cpus']} CPUs); the bound is the smaller, {fmt(b['value'])}"
    )
    print()
    print("targets:")
    for key, want in (("tuned_vs_naive", 1.3), ("tuned_vs_autotune", 1.0)):
        v = doc["verdict"][key]
        if v["ratio"] is None:
            print(f"  {key:22} n/a ({v['reason']})")
            continue
        lo, hi = v["ratio_ci95"]
        print(
            f"  {key:22} {v['ratio']:.3f}  (95% CI {lo:.3f}-{hi:.3f}, {v['verdict']})  target >= {want}: "
            f"{target(v['ratio'] >= want)}"
        )
    tuned = configs.get("tuned", {})
    frac = tuned.get("fraction_of_bound")
    shown = "-" if frac is None else f"{frac:.3f}"
    print(f"  {'tuned / bound':22} {shown}  target >= 0.9: {target(None if frac is None else frac >= 0.9)}")
    if tuned.get("images_per_s") and b["stage"] and b["cpu_budget"]:
        m = tuned["images_per_s"]["median"]
        print(
            f"  {'':22} (of the stage bound {m / b['stage']:.3f}, "
            f"of the CPU budget {m / b['cpu_budget']:.3f})"
        )
    widths = {n: c["images_per_s"]["half_width_pct"] for n, c in configs.items() if c.get("images_per_s")}
    worst = max(widths.values()) if widths else None
    print(
        f"  {'CI half-width':22} "
        + ", ".join(f"{n} {w:.1f}%" for n, w in widths.items())
        + f"  target <= 3%: {target(None if worst is None else worst <= 3)}"
    )
    if quick_s is not None:
        print(
            f"  {'quick mode wall time':22} {quick_s:.1f} s (exit {quick_rc})  "
            f"target <= 60 s: {target(quick_s <= 60)}"
        )


if __name__ == "__main__":
    sys.exit(main())
