"""Inference staggering schedulers: pure logic, timings in, waits out (docs/design.md §2).

Every inference worker runs the same loop (Riemer et al. 2025, Algorithms 1-2), written out in
`nonstop.inference.rules`: an initial stagger, then the delay other workers handed it, a read of
the latest observation, the inference (τ measured), the rule's wait, the submit. A scheduler only
does arithmetic on the timings it is given, so it runs alike under both clocks and `simulate`.

This module is the front door: the factory `make_scheduler` and every public
name. The code is split by concern, each part pure and importable alone:
`nonstop.inference.rules` (the interface, the baselines, Algorithms 1 and 2),
`nonstop.inference.quantile_hold`, `nonstop.inference.autoscale` (N_I sized
online), `nonstop.inference.fill` (each action to the first tick it can fill) and `nonstop.inference.simulate` (the event loop), with their argument
checks in `nonstop.inference.checks`; `nonstop.inference.phases` reads
Algorithms 1 and 2 in whole ticks where the pool aligns starts to ticks.

Workers form a cycle 0, 1, ..., N-1, 0, ... and ``dist(x, y) = (x - y) mod N``
is how far worker ``x`` is behind worker ``y`` (the worker right after ``y``
has distance 1). With N workers and inference time τ, staggering spaces the
actions τ/N apart instead of firing all N at once:

>>> timeline = simulate(make_scheduler("max_time", 4), lambda worker, k: 1.0, 12)
>>> [round(t, 2) for t, _ in timeline]      # first round together, then τ/N apart
[1.0, 1.0, 1.0, 1.0, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75]
>>> [round(t, 2) for t, _ in simulate(make_scheduler("unstaggered", 4), lambda w, k: 1.0, 8)]
[1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

from typing import Any

from nonstop.inference.autoscale import AutoScheduler
from nonstop.inference.fill import FillScheduler
from nonstop.inference.quantile_hold import QuantileHoldScheduler
from nonstop.inference.rules import (
    ExpectedTimeScheduler,
    MaxTimeScheduler,
    Scheduler,
    SequentialScheduler,
    UnstaggeredScheduler,
)
from nonstop.inference.simulate import Iteration, simulate, simulate_iterations

__all__ = [
    "SCHEDULER_NAMES",
    "Scheduler",
    "SequentialScheduler",
    "UnstaggeredScheduler",
    "MaxTimeScheduler",
    "ExpectedTimeScheduler",
    "QuantileHoldScheduler",
    "AutoScheduler",
    "FillScheduler",
    "make_scheduler",
    "Iteration",
    "simulate",
    "simulate_iterations",
]

_REGISTRY: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (
        SequentialScheduler,
        UnstaggeredScheduler,
        MaxTimeScheduler,
        ExpectedTimeScheduler,
        QuantileHoldScheduler,
        AutoScheduler,
        FillScheduler,
    )
}
#: Valid names for `make_scheduler`.
SCHEDULER_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def make_scheduler(name: str, n_workers: int, **kwargs: Any) -> Scheduler:
    """Build a scheduler by name: one of `SCHEDULER_NAMES`.

    >>> make_scheduler("max_time", 4, initial_estimate=0.1)
    MaxTimeScheduler(n_workers=4, tau_max_estimate=0.1)
    >>> make_scheduler("fastest", 4)
    Traceback (most recent call last):
    ...
    ValueError: unknown scheduler 'fastest': valid names are sequential, unstaggered, max_time, exp_time, quantile_hold, auto, fill
    """
    if not isinstance(name, str):
        raise TypeError(f"scheduler name must be a str, got {type(name).__name__} {name!r}")
    try:
        cls = _REGISTRY[name]
    except KeyError:
        valid = ", ".join(SCHEDULER_NAMES)
        raise ValueError(f"unknown scheduler {name!r}: valid names are {valid}") from None
    try:
        return cls(n_workers, **kwargs)
    except TypeError as err:
        if "unexpected keyword argument" in str(err):
            raise TypeError(f"scheduler {name!r} got an unexpected option: {err}") from None
        raise
