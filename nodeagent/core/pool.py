"""A bounded pool of daemon threads with a time limit per job: the engine runs checks with it, and
the cluster runner hosts.

Why not concurrent.futures: a ThreadPoolExecutor's threads are joined at interpreter exit, so one
hung read (a dead NFS mount, a driver that never answers) or one SSH peer that stops talking would
hang the whole process; and waiting on its futures has no per-job limit. Here a job still running
past its limit is reported as `Overdue` and abandoned (its daemon thread dies with the process),
and a fresh worker takes its place, so the pool never shrinks (Fabric's GroupResult idea, without
its unbounded threads and untimed joins).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_POLL_S = 0.05  # how often overdue jobs are looked for while none finishes


@dataclass(frozen=True)
class Overdue:
    """A job that did not finish within `limit_s` seconds of starting, and was abandoned; or, with
    `budget`, one the whole run's deadline cut (running or not started yet)."""

    limit_s: float
    budget: bool = False


@dataclass(frozen=True)
class Done(Generic[T, R]):
    item: T
    outcome: R | Overdue
    duration_s: float


def bounded(
    items: Sequence[T],
    fn: Callable[[T], R],
    workers: int,
    limit_s: Callable[[T], float],
    thread_name: str = "nodeagent-pool",
    budget_s: float | None = None,
) -> Iterator[Done[T, R]]:
    """Run `fn` on every item, at most `workers` at once, yielding each as it finishes.

    `fn` must not raise (turn errors into its result: the pool cannot know what they mean).
    An item still running `limit_s(item)` seconds after it started yields `Overdue`. With
    `budget_s`, every item not done that long after the call yields `Overdue(budget_s, budget=True)`
    at that moment, and no item starts after it: a pre-flight gate never waits past its budget.
    """
    deadline = None if budget_s is None else time.monotonic() + budget_s
    jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[int, R, float]] = queue.SimpleQueue()
    started: dict[int, float] = {}
    lock = threading.Lock()
    for i in range(len(items)):
        jobs.put(i)

    # Workers wait for this before taking jobs: Thread.start() waits until the new thread runs, which
    # behind busy workers holding the GIL took 46 ms each (64 hosts: the last one began 3 s late).
    go = threading.Event()

    def worker() -> None:
        go.wait()
        while deadline is None or time.monotonic() < deadline:
            try:
                i = jobs.get_nowait()
            except queue.Empty:
                return
            t0 = time.monotonic()
            with lock:
                started[i] = t0
            result = fn(items[i])
            done.put((i, result, time.monotonic() - t0))

    def spawn() -> None:
        threading.Thread(target=worker, name=thread_name, daemon=True).start()

    for _ in range(max(1, min(workers, len(items)))):
        spawn()
    go.set()
    remaining = set(range(len(items)))
    while remaining:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            for i in sorted(remaining):
                with lock:
                    t0 = started.get(i)
                yield Done(items[i], Overdue(budget_s or 0.0, budget=True), 0.0 if t0 is None else now - t0)
            return
        wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - now))
        try:
            i, result, duration = done.get(timeout=wait)
        except queue.Empty:
            now = time.monotonic()
            with lock:
                running = [(i, now - t0) for i, t0 in started.items() if i in remaining]
            overdue = [(i, elapsed) for i, elapsed in running if elapsed > limit_s(items[i])]
            for i, elapsed in overdue:
                remaining.discard(i)
                yield Done(items[i], Overdue(limit_s(items[i])), elapsed)
                spawn()
            continue
        if i in remaining:
            remaining.discard(i)
            yield Done(items[i], result, duration)
