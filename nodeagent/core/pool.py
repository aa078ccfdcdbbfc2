"""A bounded pool of daemon threads with a time limit per job: the engine runs checks with it, and
the cluster runner hosts.

Why not concurrent.futures: a ThreadPoolExecutor's threads are joined at interpreter exit, so one
hung read (a dead NFS mount, a driver that never answers) or one SSH peer that stops talking would
hang the whole process; and waiting on its futures has no per-job limit. Here a job still running
past its limit is reported as `Overdue` and abandoned (its daemon thread dies with the process),
and a fresh worker takes its place, so the pool never shrinks (Fabric's GroupResult idea, without
its unbounded threads and untimed joins).

`in_processes` spreads work that is CPU-bound in Python over the machine's cores: threads share one
interpreter lock, so a fleet's SSH handshakes and its checks of hundreds of pulled recordings ran on
one core however many the controller has. It forks worker processes that each take a share of the
items and run them (on their own bounded threads), and streams their results back.
"""

from __future__ import annotations

import gc
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

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


# --- Worker processes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Lost:
    """An item whose worker process ended, or stopped answering, before it gave the item's result."""

    reason: str


def can_fork() -> bool:
    """Whether in_processes can run here (it forks: Linux and the other Unixes, not Windows)."""
    import multiprocessing  # here: only fleets use it, every other command starts without it

    return "fork" in multiprocessing.get_all_start_methods()


# What a worker process runs: its share of the items in, (index in the share, result) out.
Share = Callable[[Sequence[T]], Iterable[tuple[int, R]]]


def in_processes(
    items: Sequence[T],
    run: Share[T, R],
    processes: int,
    quiet_s: float,
) -> Iterator[tuple[T, R | Lost]]:
    """`run` over `items` in `processes` forked worker processes, each on an interleaved share
    (items[k::processes]); each result is yielded with its item as soon as its process sends it.

    run(share) yields (index in share, result) for every item of its share, and must not raise.
    Results cross a pipe, so they must pickle; `run`, the items and everything else the workers
    use are this process's own, copied at the fork (no start-up, no import, no pickling of code).
    The items of a process that ends before giving all its results (killed, crashed), or that sends
    nothing for `quiet_s` seconds while it owes some (then it is killed), yield `Lost` with why.
    Closing the iterator early kills the workers; they never outlive it.

    Forked where other threads run, a worker could find a lock held forever by a thread that does
    not exist in it: workers touch no stream of this process (their standard output and error go to
    /dev/null), and the caller forks before starting its own threads."""
    import multiprocessing

    count = max(1, min(processes, len(items)))
    ctx = multiprocessing.get_context("fork")
    workers: list[_Worker] = []
    # Objects that exist before the fork are not scanned by the workers' collector: their pages
    # stay shared with this process instead of being copied on the collector's first pass.
    gc.freeze()
    try:
        for k in range(count):
            share = list(range(k, len(items), count))
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_work,
                args=(writer, run, [items[i] for i in share]),
                name=f"nodeagent-worker-{k}",
                daemon=True,
            )
            proc.start()
            writer.close()
            workers.append(_Worker(proc, reader, share, time.monotonic(), set(range(len(share)))))
    finally:
        gc.unfreeze()
    try:
        yield from _gather(items, workers, quiet_s)
    finally:
        for w in workers:
            w.stop()


@dataclass
class _Worker:
    proc: BaseProcess
    reader: Connection
    share: list[int]  # indices into the items
    heard: float  # when it last sent something (or started)
    owed: set[int]  # indices into `share` not answered yet

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.reader.close()

    def ended(self) -> str:
        """Why the process is gone, once it is."""
        self.proc.join(5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"its worker process was killed ({name}{', out of memory?' if -code == 9 else ''})"
        return f"its worker process ended (exit code {code}) before giving its result"


def _gather(items: Sequence[T], workers: list[_Worker], quiet_s: float) -> Iterator[tuple[T, R | Lost]]:
    from multiprocessing.connection import wait

    live = list(workers)
    while live:
        now = time.monotonic()
        timeout = max(0.0, min(w.heard + quiet_s for w in live) - now)
        ready = wait([w.reader for w in live], timeout)
        for w in [w for w in live if w.reader in ready]:
            try:
                message: tuple[str, Any] = w.reader.recv()
            except (EOFError, OSError):
                message = ("gone", w.ended())
            except Exception as e:  # a result that does not unpickle
                message = ("gone", f"its result could not be read back from its worker ({e})")
            w.heard = time.monotonic()
            kind, body = message
            if kind == "result":
                index, result = body
                w.owed.discard(index)
                yield items[w.share[index]], result
                continue
            if kind == "failed":
                body = f"its worker process failed ({body})"
            yield from _lost(items, w, str(body))
            live.remove(w)
        now = time.monotonic()
        for w in [w for w in live if now - w.heard > quiet_s]:
            w.proc.kill()
            yield from _lost(items, w, f"its worker process gave nothing for {quiet_s:g}s and was stopped")
            live.remove(w)
        for w in [w for w in live if not w.owed]:
            live.remove(w)


def _lost(items: Sequence[T], w: _Worker, reason: str) -> Iterator[tuple[T, Lost]]:
    for index in sorted(w.owed):
        yield items[w.share[index]], Lost(reason)
    w.owed.clear()


def _work(
    conn: Connection, run: Callable[[Sequence[T]], Iterable[tuple[int, R]]], share: Sequence[T]
) -> None:
    """A worker process's life: its share's results sent as they come, then its end."""
    # Fresh streams: a thread of the parent may have held the old ones' locks at the fork.
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        for index, result in run(share):
            conn.send(("result", (index, result)))
    except BaseException as e:  # reported to the parent, which names it for the items still owed
        conn.send(("failed", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()
