"""Algorithms 1 and 2 on aligned ticks: each worker holds an absolute phase of a whole-tick cycle
(pure arithmetic, like the rules it serves).

Where the pool aligns starts to ticks (the wall clock, `InferencePool` ``align_to_ticks``), a
cycle is whole ticks: an inference of 5.4 ticks starts again 6 ticks after its start
(`nonstop.inference.pacing.aligned_cycle_ticks`). The paper's rules space workers *relatively*,
``dist·δ/N`` seconds behind one another; snapped to ticks that spacing goes uneven (τ/N = 0.9
ticks left one tick in six without an action at N = 6..9), and re-spacing by whole-tick jumps
of the estimate compounds Algorithm 1's caveat (a worker padding when a new maximum arrives is
re-spaced short) into a tick per jump. Here the rules' estimate is read in whole ticks instead,
the cycle ``C``, and worker ``r`` of ``N`` owns the ticks ``k`` with ``k ≡ ⌊r·C/N⌋ (mod C)``,
counted from one origin (tick 0) for all: a worker ready early waits for its phase's next tick,
and when ``C`` changes every worker is re-spaced absolutely, at its next start, to its new phase.
With ``N ≥ C`` the phases cover every tick of the cycle, so an inference that fits ``C`` ticks
leaves no tick to β: N_I* = C, as the theory says for the cycle the ticks allow.

``C`` is the estimate of the rule in whole ticks: for Algorithm 1 (``"max"``) the longest
aligned cycle seen (its pad makes every cycle that long); for Algorithm 2 (``"mean"``) the mean
aligned cycle, rounded up (a cycle of ⌈mean⌉ fits the typical inference: a worker whose inference
runs past its next phase tick waits for the one after, which costs one tick, once, instead of
shifting its phase onto a neighbour's for good).

>>> phases = TickPhases(4, "max")
>>> phases.next_start(1, 7)          # no cycle known yet: start when ready
7
>>> phases.record(6); phases.cycle, [phases.phase(r) for r in range(4)]
(6, [0, 1, 3, 4])
>>> phases.next_start(1, 7), phases.next_start(1, 13), phases.next_start(3, 11)
(7, 13, 16)
"""

from __future__ import annotations

import math
import threading

from nonstop.inference.checks import check_count
from nonstop.inference.rules import TickRule

__all__ = ["TickPhases", "phase_of", "next_phase_tick"]


def phase_of(worker: int, n_workers: int, cycle: int) -> int:
    """The tick of a ``cycle``-tick cycle (0 .. cycle−1) that ``worker`` of ``n_workers`` owns:
    ``⌊worker·cycle/n_workers⌋``, spread as evenly as whole ticks allow, every tick owned when
    ``n_workers ≥ cycle``.

    >>> [phase_of(r, 6, 6) for r in range(6)], [phase_of(r, 7, 6) for r in range(7)]
    ([0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 3, 4, 5])
    """
    return worker * cycle // n_workers


def next_phase_tick(tick: int, phase: int, cycle: int) -> int:
    """The first tick at or after ``tick`` that is ``phase`` ticks into a ``cycle`` counted from
    tick 0.

    >>> next_phase_tick(12, 2, 6), next_phase_tick(14, 2, 6), next_phase_tick(15, 2, 6)
    (14, 14, 20)
    """
    return tick + (phase - tick) % cycle


class TickPhases:
    """The whole-tick cycle ``C`` of one pool and each worker's phase in it (module docstring).

    ``record(cycle_ticks)`` takes each inference's aligned cycle; ``next_start(worker, tick)``
    says on which tick a worker ready to start at ``tick`` starts. Thread-safe: the pool's
    workers share one.
    """

    def __init__(self, n_workers: int, rule: TickRule) -> None:
        self._n = check_count("n_workers", n_workers)
        if rule not in ("max", "mean"):
            raise ValueError(f"rule must be 'max' (Algorithm 1) or 'mean' (Algorithm 2), got {rule!r}")
        self.rule: TickRule = rule
        self._lock = threading.Lock()
        self._max = 0
        self._total = 0
        self._count = 0

    @property
    def n_workers(self) -> int:
        return self._n

    def record(self, cycle_ticks: int) -> None:
        """One inference's aligned cycle, in whole ticks (at least 1)."""
        cycle = check_count("cycle_ticks", cycle_ticks)
        with self._lock:
            self._max = max(self._max, cycle)
            self._total += cycle
            self._count += 1

    @property
    def cycle(self) -> int | None:
        """C: the rule's estimate in whole ticks (None before any inference)."""
        with self._lock:
            return self._cycle()

    def _cycle(self) -> int | None:
        if not self._count:
            return None
        if self.rule == "max":
            return self._max
        return max(1, math.ceil(self._total / self._count - 1e-9))

    def phase(self, worker: int) -> int:
        """The tick of the current cycle ``worker`` owns (0 before any inference)."""
        worker = self._check_worker(worker)
        with self._lock:
            cycle = self._cycle()
        return 0 if cycle is None else phase_of(worker, self._n, cycle)

    def next_start(self, worker: int, tick: int) -> int:
        """The tick on whose publish ``worker``, ready to start at ``tick``, starts: its phase's
        first tick at or after ``tick`` (``tick`` itself before any cycle is known)."""
        worker = self._check_worker(worker)
        with self._lock:
            cycle = self._cycle()
        if cycle is None:
            return tick
        return next_phase_tick(tick, phase_of(worker, self._n, cycle), cycle)

    def _check_worker(self, worker: int) -> int:
        if not 0 <= worker < self._n:
            raise ValueError(f"worker {worker!r} out of range: valid workers are 0..{self._n - 1}")
        return worker

    def __repr__(self) -> str:
        return f"TickPhases(n_workers={self._n}, rule={self.rule!r}, cycle={self.cycle!r})"
