"""Algorithms 1 and 2 on aligned ticks (`nonstop.inference.phases`): the phase arithmetic, and a
tick-level model of the pool's aligned loop (virtual time: no clock, no thread) in which workers
that hold their phases leave no tick to β with N_I = the cycle in whole ticks, for constant
latencies between ticks (5.4 ticks: 6 workers) and variable ones."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.inference import pacing
from nonstop.inference.phases import TickPhases, next_phase_tick, phase_of
from nonstop.inference.schedulers import make_scheduler

FAST = settings(max_examples=60, deadline=None)
MARGIN, WINDOW = 0.03, 0.25  # in ticks: `pacing.alignment_margin` at 60 Hz, and the loop's quarter tick


def cycle_of(tau: float) -> int:
    return pacing.aligned_cycle_ticks(tau, 1.0, margin=MARGIN, window=WINDOW)


def run_ticks(n: int, rule: str, latency: Callable[[int, int], float], ticks: int) -> list[int]:
    """How many actions land on each tick when ``n`` workers run the pool's aligned loop with
    `TickPhases` (times in ticks): a start sits ``MARGIN`` past its tick's deadline, an action
    lands on the first deadline after it is submitted, Algorithm 1 pads every action to the
    running maximum τ̂ (``rule="max"``), and a worker starts again at its phase's first tick
    from the aligned one on."""
    phases = TickPhases(n, rule)  # type: ignore[arg-type]
    landed = [0] * (ticks + 1)
    tau_max = 0.0
    events: list[tuple[float, int, int, int, float]] = [(0.0, 0, r, 0, 0.0) for r in range(n)]  # all start at tick 0
    while events:
        time, done, r, k, tau = heapq.heappop(events)
        if not done:  # a start on a tick's publish: the inference ends τ later
            if time <= ticks:
                tau = latency(r, k)
                heapq.heappush(events, (time + MARGIN + tau, 1, r, k, tau))
            continue
        start = round(time - MARGIN - tau)
        phases.record(cycle_of(tau))
        tau_max = max(tau_max, tau)
        busy = tau_max if rule == "max" else tau  # Algorithm 1 pads to τ̂max; Algorithm 2 submits at once
        land = math.ceil(start + MARGIN + busy)
        if land <= ticks:
            landed[land] += 1
        heapq.heappush(events, (float(phases.next_start(r, start + cycle_of(busy))), 0, r, k + 1, 0.0))
    return landed


def beta_ticks(landed: list[int], warmup: int) -> int:
    return sum(1 for count in landed[warmup:] if count == 0)


# ----------------------------------------------------------------------------- the arithmetic


@FAST
@given(st.integers(1, 64), st.integers(1, 64))
def test_phases_are_spread_evenly_and_cover_the_cycle_with_enough_workers(n, cycle):
    phases = [phase_of(r, n, cycle) for r in range(n)]
    assert phases == sorted(phases) and 0 <= phases[0] and phases[-1] < cycle
    gaps = [b - a for a, b in zip(phases, phases[1:] + [phases[0] + cycle])]
    assert max(gaps) <= math.ceil(cycle / n) and min(gaps) >= cycle // n  # as even as whole ticks allow
    if n >= cycle:
        assert set(phases) == set(range(cycle))  # every tick of the cycle has a worker


@FAST
@given(st.integers(-1000, 10**6), st.integers(1, 200), st.data())
def test_the_next_phase_tick_is_the_first_one_at_or_after(tick, cycle, data):
    phase = data.draw(st.integers(0, cycle - 1))
    nxt = next_phase_tick(tick, phase, cycle)
    assert tick <= nxt < tick + cycle and nxt % cycle == phase


@FAST
@given(st.floats(0.0, 40.0), st.floats(0.0, 1.0))
def test_an_aligned_cycle_is_the_ticks_an_aligned_start_waits_for(tau, tau_m):
    # the loop's own arithmetic: from a start at a publish, `align_start` starts the next inference
    # `aligned_cycle_ticks` ticks later
    tau_m = max(tau_m, 1e-3)
    margin, window = pacing.alignment_margin(tau_m), 0.25 * tau_m
    cycle = pacing.aligned_cycle_ticks(tau * tau_m, tau_m, margin=margin, window=window)
    published = 100 * tau_m
    start, _ = pacing.align_start(published + margin + tau * tau_m, published, tau_m, margin=margin, window=window)
    assert max(1, round((start - margin - published) / tau_m)) == cycle


def test_tick_phases_follow_the_rule_and_check_their_arguments():
    worst, mean = TickPhases(3, "max"), TickPhases(3, "mean")
    assert worst.cycle is None and worst.next_start(2, 11) == 11  # nothing known: start when ready
    for cycle in (5, 6, 5, 5):
        worst.record(cycle)
        mean.record(cycle)
    assert worst.cycle == 6 and mean.cycle == 6  # the largest, and the mean 5.25 rounded up
    mean.record(5)
    mean.record(5)
    assert mean.cycle == 6 and [mean.phase(r) for r in range(3)] == [0, 2, 4]
    assert mean.next_start(1, 13) == 14 and mean.next_start(0, 12) == 12
    for bad in (
        lambda: TickPhases(0, "max"),
        lambda: TickPhases(2, "median"),
        lambda: worst.record(0),
        lambda: worst.next_start(3, 0),
    ):
        with pytest.raises((TypeError, ValueError)):
            bad()
    assert make_scheduler("max_time", 2).tick_rule == "max" and make_scheduler("exp_time", 2).tick_rule == "mean"
    assert make_scheduler("quantile_hold", 2).tick_rule is None  # it places starts on its own grid


# ----------------------------------------------------------------------------- the loop, tick by tick


@pytest.mark.parametrize("rule", ["max", "mean"])
def test_a_latency_between_ticks_needs_only_its_cycle_in_workers(rule):
    # 5.4 ticks cycles in 6: six workers on six phases leave no tick to β (theory ⌈5.4⌉ = 6); the
    # relative spacing 5.4/6 = 0.9 ticks, snapped to ticks, left one tick in six at N = 6..9
    landed = run_ticks(6, rule, lambda r, k: 5.4, 600)
    assert beta_ticks(landed, warmup=20) == 0
    assert beta_ticks(run_ticks(5, rule, lambda r, k: 5.4, 600), warmup=20) >= 580 // 6  # one short: a tick in six


@FAST
@given(st.floats(0.5, 30.0), st.sampled_from(["max", "mean"]), st.integers(0, 3))
def test_constant_latency_needs_its_aligned_cycle_in_workers(tau, rule, extra):
    n = cycle_of(tau) + extra
    assert beta_ticks(run_ticks(n, rule, lambda r, k: tau, 40 * n + 200), warmup=4 * n + 40) == 0


@FAST
@given(st.integers(2, 12), st.lists(st.floats(0.05, 0.9), min_size=5, max_size=40), st.integers(0, 2))
def test_algorithm_1_on_ticks_covers_every_tick_once_its_maximum_has_come(k, fractions, extra):
    # variable latency within (k − 1, k): the actions land τ̂max after their start once the largest
    # has been seen, every worker cycles in C = aligned_cycle(τ̂max) ticks on its own phase
    taus = [k - 1 + f for f in fractions]
    n = cycle_of(max(taus)) + extra
    landed = run_ticks(n, "max", lambda r, i: taus[(r * 7 + i) % len(taus)], 30 * len(taus) + 60 * n)
    first_max = 3 * len(taus) * k  # every draw has been seen by then, each worker re-spaced
    assert beta_ticks(landed, warmup=first_max) == 0


def test_algorithm_2_on_ticks_holds_phases_under_a_ray_like_latency():
    # 5 ticks + a call overhead (≈ Ray's: p50 0.2, p99 0.56 ticks): aligned cycles of 5 or 6
    # ticks, mean ≈ 5.4, so C = 6 and every worker makes its next phase tick: 6 workers suffice
    import numpy as np

    rng = np.random.default_rng(0)
    sigma = math.log(0.56 / 0.2) / 2.326
    taus = 5.0 + 0.2 * np.exp(sigma * rng.standard_normal((6, 400)))
    taus = np.minimum(taus, 5.95)  # the model's actions land 6 ticks after their start (p ≈ 2e-4 beyond)
    landed = run_ticks(6, "mean", lambda r, i: float(taus[r, i % 400]), 2000)
    assert beta_ticks(landed, warmup=60) == 0
