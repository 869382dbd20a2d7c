"""`AutoScheduler`, beyond the paper: `QuantileHoldScheduler` that also sizes N_I online from the
τ_θ it has seen (the workers a start finds in flight), with hysteresis. Pure arithmetic like the
rules it extends; `InferencePool` starts and retires the workers it recommends.
"""

from __future__ import annotations

import math
import numbers
from statistics import NormalDist
from typing import Any

import numpy as np

from nonstop.inference.checks import check_count, check_fraction, check_seconds
from nonstop.inference.quantile_hold import QuantileHoldScheduler

__all__ = ["AutoScheduler"]


class AutoScheduler(QuantileHoldScheduler):
    """`QuantileHoldScheduler` that also sizes N_I online (beyond the paper).

    The workers a start needs are the inferences still in flight, ``B = Σ_j 1[τ_j > j·period]``
    (j = 0 is the one starting). From the τ_θ window the scheduler knows each ``p_j = P(τ_θ >
    j·period)``, so ``E[B] = Σ p_j`` (= E⌈τ_θ/period⌉) and ``Var[B] = Σ p_j(1 − p_j)`` for
    independent τ_θ; the recommendation is ``target_workers() = ⌈E[B] + z·sd[B]⌉`` with z the
    normal ``worker_quantile`` point (default 99.9 %), clamped to [min_workers, max_workers].
    Constant τ_θ gives sd 0 and exactly ⌈τ_θ/τ_M⌉.

    Hysteresis, so the count does not flap: it grows at once (too few workers means skipped
    slots) and shrinks only to ``⌈(E[B] + z·sd[B]) / (1 − hysteresis)⌉``.

    ``resize(n)`` is simple because workers have no phases here: a new worker takes the next
    free slot when it starts; a retired worker (index >= n) stops at its next loop top, and an
    inference it still has in flight keeps its release slot (its ``after_inference`` still
    answers). ``anchor`` is accepted for the pool's sake and only checked. ``hold``: the settings of
    the `QuantileHoldScheduler` it is (``period``, ``quantile``, ``window``, ``initial_estimate``, …).

    >>> s = AutoScheduler(1, period=1 / 60, max_workers=64)
    >>> s.take_delay(0, now=0.0), s.after_inference(0, 0.1)     # 6 ticks
    (0.0, 0.0)
    >>> s.target_workers()                                       # one sample: ⌈6⌉, sd 0
    6
    >>> s.resize(6)
    >>> [round(s.take_delay(m, now=0.1) * 60, 6) for m in range(1, 6)]   # new workers: one slot each
    [0.0, 1.0, 2.0, 3.0, 4.0]
    """

    name = "auto"
    resizable = True

    def __init__(
        self,
        n_workers: int,
        *,
        min_workers: int = 1,
        max_workers: int | None = None,
        hysteresis: float = 0.1,
        worker_quantile: float = 0.999,
        **hold: Any,
    ) -> None:
        super().__init__(n_workers, **hold)
        self._hysteresis = check_fraction("hysteresis", hysteresis)
        self._min = check_count("min_workers", min_workers)
        self._max = None if max_workers is None else check_count("max_workers", max_workers)
        if self._max is not None and self._max < self._min:
            raise ValueError(f"max_workers={self._max} is below min_workers={self._min}")
        self._check_in_bounds(self._n)
        self._z = NormalDist().inv_cdf(check_fraction("worker_quantile", worker_quantile, closed_low=False))
        self._recommended = self._n
        self._high_water = self._n  # indices in [n, high_water) are retired, not invalid
        self._busy: tuple[int, float, float] | None = None  # (samples seen, E[B], sd[B]) cache
        self._seen = 0

    @property
    def min_workers(self) -> int:
        return self._min

    @property
    def max_workers(self) -> int | None:
        return self._max

    def _check_in_bounds(self, n: int) -> None:
        if n < self._min or (self._max is not None and n > self._max):
            hi = "inf" if self._max is None else self._max
            raise ValueError(f"n_workers={n} is outside [min_workers, max_workers] = [{self._min}, {hi}]")

    def _clamp(self, n: int) -> int:
        n = max(n, self._min)
        return n if self._max is None else min(n, self._max)

    def _retired(self, worker: Any) -> bool:
        return (
            isinstance(worker, numbers.Integral)
            and not isinstance(worker, bool)
            and self._n <= int(worker) < self._high_water
        )

    def _record(self, tau: float) -> None:
        super()._record(tau)
        self._seen += 1

    def busy_workers(self) -> tuple[float, float]:
        """(E[B], sd[B]): mean and spread of the workers in flight at a start (class docstring)."""
        with self._lock:
            return self._busy_stats()

    def _busy_stats(self) -> tuple[float, float]:
        period = self._require_period()
        n = len(self._sorted)
        if not n:
            return float(self._periods(self._initial_estimate)), 0.0
        # recomputed every 16 samples: O(window) numpy work, not per call
        if self._busy is None or self._seen - self._busy[0] >= 16 or n < 64:
            taus = np.asarray(self._sorted)
            edges = np.arange(self._periods(taus[-1]) + 1) * period * (1.0 + 1e-9)
            p = (n - np.searchsorted(taus, edges, side="right")) / n  # P(τ_θ > j·period)
            self._busy = (self._seen, float(p.sum()), float(np.sqrt((p * (1.0 - p)).sum())))
        return self._busy[1], self._busy[2]

    def target_workers(self, tau_m: float | None = None) -> int:
        """Recommended N_I: ⌈E[B] + z·sd[B]⌉ with hysteresis (class docstring).

        ``tau_m`` binds the period if none is set yet (and is otherwise only checked). Before any
        inference time (and without an initial estimate) the recommendation is the current count.
        """
        if tau_m is not None:
            tau_m = check_seconds("tau_m", tau_m, positive=True)
        with self._lock:
            if self._period is None and tau_m is not None:
                self._period = tau_m
            if not self._sorted and self._initial_estimate == 0.0:
                return self._recommended
            mean, sd = self._busy_stats()
            load = mean + self._z * sd
            need = self._clamp(max(1, math.ceil(load - 1e-9)))
            if need > self._recommended:
                self._recommended = need
            else:
                keep = self._clamp(max(1, math.ceil(load / (1.0 - self._hysteresis) - 1e-9)))
                self._recommended = min(self._recommended, keep)
            return self._recommended

    def resize(self, n_workers: int, *, anchor: int | None = None) -> None:
        """Change N_I to ``n_workers`` (see the class docstring)."""
        new = check_count("n_workers", n_workers)
        self._check_in_bounds(new)
        with self._lock:
            if anchor is not None:
                self._check_worker(anchor)
            old = self._n
            if new > len(self._slot):
                grow = new - len(self._slot)
                self._slot.extend([None] * grow)
                self._free_at.extend([None] * grow)
                self._finished.extend([None] * grow)
            for m in range(old, new):  # a revived index starts afresh
                self._slot[m] = self._free_at[m] = self._finished[m] = None
            self._n = new
            self._high_water = max(self._high_water, old)
            self._recommended = new

    def __repr__(self) -> str:
        return (
            f"AutoScheduler(n_workers={self._n}, period={self._period!r}, hold_periods={self._hold!r}, "
            f"min_workers={self._min}, max_workers={self._max})"
        )
