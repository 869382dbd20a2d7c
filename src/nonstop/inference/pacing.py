"""The timing arithmetic of an inference worker's loop (`nonstop.inference.workers`), as pure
functions of numbers: times in seconds on the world's clock, ``tau_m`` the tick period τ_M.

The worker loop keeps the plumbing (waits, reads, submits); what it computes about time is here,
so it runs identically on both clocks and is tested on its own (doctests, and properties in
``tests/test_pacing.py``). A tick's deadline is ``origin + t·τ_M`` (docs/design.md §1.1); its observation
is published just after it.

>>> nearest_deadline(1.02, origin=0.0, tau_m=0.1), deadline_at(1.0000001, 0.0, 0.1, grace=1e-6)
(1.0, 1.0)

What differs between the clocks is not here but the clock's: a worker's own time after a wait
(`nonstop.realtime.clock.Clock.resync`) and the share of measured compute in τ_θ (`Clock.real`).
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "NEXT_OBSERVATION_MARGIN",
    "align_start",
    "aligned_cycle_ticks",
    "alignment_margin",
    "deadline_at",
    "nearest_deadline",
    "phase_guard",
    "phase_guard_width",
    "restart_phase",
]

#: On the wall clock, a worker that already acted on the newest observation waits this long past
#: the next deadline before reading again (the host publishes a tick's observation just after it).
NEXT_OBSERVATION_MARGIN: Final = 2e-4


def nearest_deadline(t: float, origin: float, tau_m: float) -> float:
    """The tick deadline nearest to ``t``: ``origin + round((t − origin)/τ_M)·τ_M``, the host's own
    expression, so a worker's time and the host's tick compare equal as floats.

    >>> nearest_deadline(0.26, origin=0.0, tau_m=0.1), nearest_deadline(0.34, 0.0, 0.1)
    (0.30000000000000004, 0.30000000000000004)
    """
    return origin + round((t - origin) / tau_m) * tau_m


def deadline_at(t: float, origin: float, tau_m: float, grace: float) -> float | None:
    """The deadline ``t`` falls on (within ``grace``, the virtual clock's slack between a deadline
    and the host's processing of it), or ``None`` when ``t`` lies between ticks.

    >>> deadline_at(0.3, 0.0, 0.1, grace=1e-9), deadline_at(0.35, 0.0, 0.1, grace=1e-9)
    (0.30000000000000004, None)
    """
    deadline = nearest_deadline(t, origin, tau_m)
    return deadline if abs(t - deadline) <= grace else None


def alignment_margin(tau_m: float) -> float:
    """How long after a deadline an aligned inference starts: its observation is out by then.

    >>> alignment_margin(1 / 60), alignment_margin(0.001)
    (0.0005, 6.25e-05)
    """
    return min(0.0005, tau_m / 16)


def align_start(t: float, published: float, tau_m: float, *, margin: float, window: float) -> tuple[float, bool]:
    """Where an inference due at ``t`` starts when starts align to a tick's publish (the pool's
    ``align_to_ticks``), given ``published``, the time of the newest observation's tick.
    Returns ``(start, wait)``:

    * due from ``margin`` up to ``window`` into a tick: it counts as started at that tick's publish
      (``start`` ≤ ``t``, no wait), so a cycle stays a whole number of ticks instead of creeping by
      the submit overhead each round;
    * due earlier (before the observation is out) or later (it would compute on the same, older
      observation anyway): it waits until ``start``, the publish of the same or the next tick, and
      reads the observation again.

    >>> align_start(1.02, 1.0, 0.1, margin=0.005, window=0.025)
    (1.005, False)
    >>> align_start(1.002, 1.0, 0.1, margin=0.005, window=0.025), align_start(1.05, 1.0, 0.1, margin=0.005, window=0.025)
    ((1.005, True), (1.105, True))
    """
    into_tick = (t - published) % tau_m
    at_publish = t - into_tick + margin
    if margin <= into_tick <= window:
        return at_publish, False
    return (at_publish if into_tick < margin else at_publish + tau_m), True


def aligned_cycle_ticks(tau_theta: float, tau_m: float, *, margin: float, window: float) -> int:
    """The whole ticks from one aligned start (`align_start`) to the next, for an inference of
    ``tau_theta`` started at a publish: one ready up to ``window`` into a tick (its publish
    ``margin`` past the deadline included) counts as starting at that tick's publish, one ready
    later waits for the next. Never less than one tick (a new observation).

    >>> m, w = 0.0005, 0.25 / 60
    >>> [aligned_cycle_ticks(k / 60, 1 / 60, margin=m, window=w) for k in (0.2, 5.003, 5.2, 5.4, 6.0)]
    [1, 5, 5, 6, 6]
    """
    ticks = math.floor(tau_theta / tau_m + 1e-9)
    late = tau_theta - ticks * tau_m  # how far into its tick the inference is ready, after its publish
    return max(1, ticks if late <= window - margin else ticks + 1)


def phase_guard_width(tau_m: float) -> float:
    """How close before a deadline an action counts as landing on it (`phase_guard`).

    >>> phase_guard_width(1 / 60), phase_guard_width(0.004)
    (0.001, 0.0005)
    """
    return min(0.001, tau_m / 8)


def phase_guard(t: float, published: float, tau_m: float, guard: float) -> float:
    """When to submit an action ready at ``t`` on the wall clock. An action landing a hair before a
    deadline makes that tick or misses it at the whim of jitter: one within ``guard`` of the next
    deadline (counted from ``published``, a tick's time) is held until ``guard/4`` past it, so which
    tick it lands on is decided, not random (at most ``1.25·guard`` extra delay). Others go at ``t``.

    >>> phase_guard(1.05, 1.0, 0.1, guard=0.001), round(phase_guard(1.0995, 1.0, 0.1, guard=0.001), 6)
    (1.05, 1.10025)
    """
    to_next = tau_m - (t - published) % tau_m
    return t + to_next + guard / 4 if to_next < guard else t


def restart_phase(now: float, last_start: float, cycle: float) -> float:
    """Where a restarted worker re-takes its dead predecessor's place in the stagger: the first
    start of its old phase (``last_start + k·cycle``) at or after ``now``, so the spacing
    re-converges at once.

    >>> restart_phase(now=1.25, last_start=1.0, cycle=0.1), restart_phase(now=0.5, last_start=1.0, cycle=0.1)
    (1.3, 1.0)
    """
    if not (cycle > 0 and math.isfinite(cycle)):
        raise ValueError(f"cycle must be a finite number of seconds > 0, got {cycle!r}")
    missed = max(0, -(-(now - last_start) // cycle))
    return last_start + missed * cycle
