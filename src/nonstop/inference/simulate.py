"""A tiny discrete-event loop that runs a `Scheduler` the way the inference workers do, with no
clock and no threads: the pure rules' test bench (and the schedulers' doctests).

>>> from nonstop.inference.rules import MaxTimeScheduler
>>> [round(t, 2) for t, _ in simulate(MaxTimeScheduler(2), lambda worker, k: 1.0, 6)]
[1.0, 1.0, 2.0, 2.5, 3.0, 3.5]
"""

from __future__ import annotations

import heapq
import itertools
import numbers
from collections.abc import Callable
from typing import NamedTuple

from nonstop.inference.rules import Scheduler

__all__ = ["Iteration", "simulate", "simulate_iterations"]


class Iteration(NamedTuple):
    """One pass of one worker through the loop, as `simulate_iterations` saw it."""

    worker: int
    index: int  # type: ignore[assignment]  # the worker's k-th loop (0-based); a public field name that shadows tuple.index
    start: float  # top of the loop, before take_delay
    delay: float  # take_delay(worker)
    tau_theta: float
    wait: float  # after_inference(worker, tau_theta)
    fire_time: float  # submit

    @property
    def obs_time(self) -> float:
        """When the observation was read and inference began."""
        return self.start + self.delay

    @property
    def done_time(self) -> float:
        """When inference finished (after_inference was called)."""
        return self.start + self.delay + self.tau_theta


_TOP, _DONE, _FIRE = 0, 1, 2


def simulate_iterations(
    scheduler: Scheduler,
    latencies: Callable[[int, int], float],
    n_actions: int,
    *,
    on_fire: Callable[[Scheduler, float, int], None] | None = None,
) -> list[Iteration]:
    """Run the worker loop on a discrete-event timeline until ``n_actions`` submissions.

    ``latencies(worker, k)`` is the inference time of ``worker``'s k-th loop.
    All workers begin at t = 0. Events at the same instant run in the order
    they were scheduled (first round: worker order). ``take_delay`` is told the
    worker's time. With a scheduler that ``frees_workers``, the worker starts its
    next loop as soon as its inference ends and its action fires ``wait`` later on
    its own. ``on_fire(scheduler, time, worker)`` runs after each submission and may
    ``resize`` an `AutoScheduler`: new workers start at that instant, retired ones
    stop at their next loop top. Returns the iterations in submission order.
    """
    if isinstance(n_actions, bool) or not isinstance(n_actions, numbers.Integral) or n_actions < 0:
        raise ValueError(f"n_actions must be an int >= 0, got {n_actions!r}")
    frees = scheduler.frees_workers
    heap: list[tuple[float, int, int, int, int]] = []
    order = itertools.count()
    running: set[int] = set()
    loops: dict[int, int] = {}
    inflight: dict[int, tuple[int, int, float, float, float, float]] = {}  # action id -> its loop so far
    out: list[Iteration] = []

    def push(time: float, kind: int, worker: int, action: int = -1) -> None:
        heapq.heappush(heap, (time, next(order), kind, worker, action))

    def spawn(now: float) -> None:
        for worker in range(scheduler.n_workers):
            if worker not in running:
                running.add(worker)
                push(now + scheduler.start_delay(worker), _TOP, worker)

    spawn(0.0)
    while heap and len(out) < n_actions:
        now, action, kind, worker, aid = heapq.heappop(heap)
        if kind == _TOP:
            if worker >= scheduler.n_workers:
                running.discard(worker)
                continue
            delay = scheduler.take_delay(worker, now=now)
            k = loops.get(worker, 0)
            loops[worker] = k + 1
            tau = float(latencies(worker, k))
            inflight[action] = (worker, k, now, delay, tau, 0.0)
            push(now + delay + tau, _DONE, worker, action)
        elif kind == _DONE:
            w, k, start, delay, tau, _ = inflight[aid]
            wait = scheduler.after_inference(worker, tau)
            inflight[aid] = (w, k, start, delay, tau, wait)
            push(now + wait, _FIRE, worker, aid)
            if frees:
                push(now, _TOP, worker)
        else:
            w, k, start, delay, tau, wait = inflight.pop(aid)
            out.append(Iteration(worker, k, start, delay, tau, wait, now))
            if len(out) == n_actions:
                break
            if on_fire is not None:
                on_fire(scheduler, now, worker)
                spawn(now)
            if not frees:
                push(now, _TOP, worker)
    return out


def simulate(
    scheduler: Scheduler,
    latencies: Callable[[int, int], float],
    n_actions: int,
    *,
    on_fire: Callable[[Scheduler, float, int], None] | None = None,
) -> list[tuple[float, int]]:
    """``(fire_time, worker)`` of the first ``n_actions`` submissions (see `simulate_iterations`).

    >>> from nonstop.inference.rules import ExpectedTimeScheduler
    >>> s = ExpectedTimeScheduler(2)
    >>> [(round(t, 2), w) for t, w in simulate(s, lambda worker, k: 1.0, 6)]
    [(1.0, 0), (1.0, 1), (2.0, 0), (2.5, 1), (3.0, 0), (3.5, 1)]
    """
    its = simulate_iterations(scheduler, latencies, n_actions, on_fire=on_fire)
    return [(it.fire_time, it.worker) for it in its]
