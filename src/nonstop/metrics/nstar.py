"""N_I*: the fewest inference workers that eliminate inaction (paper, Remark 2).

Pure arithmetic and search; the trials themselves are passed in as a function.

>>> theoretical_nstar(70 / 60, 1 / 60)
70
>>> find_nstar(lambda n: 0.0 if n >= 7 else 0.2, guess=5, passes=lambda x: x == 0.0)
(7, {5: 0.2, 10: 0.0, 7: 0.0, 6: 0.2})
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["theoretical_nstar", "theoretical_nlstar", "find_nstar", "max_inaction_threshold", "NStarAboveLimit"]


def theoretical_nstar(tau_theta: float, tau_m: float) -> int:
    """⌈τ_θ/τ_M⌉ (Algorithm 1 with τ_θ = τ_θmax; Algorithm 2 with τ_θ = τ̄_θ).

    A relative tolerance of 1e-9 keeps 70·(1/60)/(1/60) from rounding up to 71.
    """
    if not tau_theta >= 0 or not tau_m > 0:
        raise ValueError(f"need tau_theta >= 0 and tau_m > 0, got {tau_theta!r}, {tau_m!r}")
    return max(1, math.ceil(tau_theta / tau_m - 1e-9))


def theoretical_nlstar(tau_l: float, batch_size: int, tau_m: float) -> int:
    """N_L* = ⌈τ_L/(B·τ_M)⌉ (paper §5.3, Figure 8): learners that together learn from every transition
    as the world makes them, when one update of ``batch_size`` transitions takes ``tau_l`` seconds.

    >>> theoretical_nlstar(0.25, 4, 1 / 60), theoretical_nlstar(0.1, 2, 1 / 60)   # 15/4 and 6/2 ticks
    (4, 3)
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    return theoretical_nstar(tau_l / batch_size, tau_m)


def max_inaction_threshold(theory: int) -> float:
    """The largest inaction fraction that still tells N_I* from N_I* − 1:
    one worker short leaves about 1/N_I* of ticks to β, so stay below half of it."""
    return 1.0 / (2 * theory)


class NStarAboveLimit(RuntimeError):
    """`find_nstar` reached ``limit`` workers without a pass; ``results`` holds every trial run."""

    def __init__(self, limit: int, results: dict[int, Any]) -> None:
        super().__init__(f"no N_I up to {limit} eliminated inaction")
        self.limit, self.results = limit, results


def find_nstar(
    trial: Callable[[int], Any],
    *,
    guess: int,
    passes: Callable[[Any], bool],
    limit: int = 100_000,
) -> tuple[int, dict[int, Any]]:
    """Smallest ``n`` with ``passes(trial(n))``, searched from ``guess``.

    Doubles upward until a pass, then bisects; every trial's result is returned
    so a report can show that N_I* − 1 indeed fails. Assumes passing is
    monotone in ``n`` (more workers never add inaction), which the report
    makes checkable.
    """
    if guess < 1:
        raise ValueError(f"guess must be >= 1, got {guess}")
    results: dict[int, Any] = {}

    def ok(n: int) -> bool:
        if n not in results:
            results[n] = trial(n)
        return passes(results[n])

    hi = guess
    while not ok(hi):
        if hi >= limit:
            raise NStarAboveLimit(limit, results)
        hi = min(limit, hi * 2)
    lo = 0  # invariant: lo fails (or is 0), hi passes
    if hi == guess and guess > 1:
        lo = guess - 1
        if ok(lo):
            lo, hi = 0, lo
    else:
        lo = hi // 2 if hi > guess else 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    if hi > 1:
        ok(hi - 1)  # make sure N_I* - 1 was tried
    return hi, results
