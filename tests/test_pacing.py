"""Properties of the worker loop's timing arithmetic (`nonstop.inference.pacing`): pure functions of
numbers, checked over the whole range of tick periods and times a world can have."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.inference import pacing
from nonstop.realtime.clock import VirtualClock, WallClock

TAU_M = st.floats(1e-3, 2.0)  # 1 kHz down to 0.5 Hz
TIME = st.floats(0.0, 1e5)
FRACTION = st.floats(0.0, 1.0, exclude_max=True)
EPS = 1e-9


@settings(max_examples=300, deadline=None)
@given(TIME, TIME, TAU_M)
def test_the_nearest_deadline_is_on_the_grid_and_within_half_a_tick(t, origin, tau_m):
    d = pacing.nearest_deadline(t, origin, tau_m)
    k = (d - origin) / tau_m
    assert abs(k - round(k)) < 1e-6 * max(1.0, abs(k))  # a whole number of ticks from the origin
    assert abs(d - t) <= tau_m / 2 + 1e-9 * max(1.0, abs(t), abs(origin))
    # the host's own float expression: a time already on a deadline maps to itself exactly
    assert pacing.nearest_deadline(d, origin, tau_m) == d


@given(TIME, TAU_M, st.integers(0, 10_000), st.floats(0.0, 0.49))
def test_deadline_at_answers_only_within_grace(origin, tau_m, k, off):
    grace = tau_m * 1e-3
    on_tick = origin + k * tau_m
    assert pacing.deadline_at(on_tick, origin, tau_m, grace) == pacing.nearest_deadline(on_tick, origin, tau_m)
    between = on_tick + max(off * tau_m, 2 * grace)
    assert pacing.deadline_at(between, origin, tau_m, grace) is None


@given(TIME, st.floats(0.0, 10.0), TAU_M)
def test_resync_keeps_the_schedule_unless_a_wake_is_a_tick_late(target, late, tau_m):
    """A timed process's own time after a wait is the clock's to say (`Clock.resync`)."""
    woke = target + late
    assert VirtualClock().resync(target, woke, tau_m) == target  # virtual time never drifts
    wall = WallClock(spin=0.0).resync(target, woke, tau_m)
    assert wall == (target if woke - target < tau_m else woke)
    assert wall >= target and woke - wall < tau_m  # never behind the clock by a tick or more


@given(st.floats(0.0, 1.0), st.floats(0.0, 10.0))
def test_inference_time_is_declared_on_virtual_and_measured_plus_declared_on_wall(compute, declared):
    """τ_θ = the clock's share of the measured compute (`Clock.real`) + the declared latency."""
    assert VirtualClock().real(compute) + declared == declared
    assert WallClock(spin=0.0).real(compute) + declared == compute + declared
    assert VirtualClock().unmeasured(compute) == compute and WallClock(spin=0.0).unmeasured(compute) == 0.0


@settings(max_examples=300, deadline=None)
@given(TIME, TAU_M, FRACTION, st.floats(0.0, 50.0))
def test_an_aligned_start_sits_on_a_publish_and_never_moves_far(published, tau_m, phase, ticks_later):
    margin, window = pacing.alignment_margin(tau_m), 0.25 * tau_m
    t = published + ticks_later * tau_m + phase * tau_m
    start, wait = pacing.align_start(t, published, tau_m, margin=margin, window=window)
    tol = 1e-7 * max(1.0, t)
    into = (start - margin - published) % tau_m
    assert min(into, tau_m - into) <= tol  # `margin` after some deadline of the tick grid
    if wait:
        assert start >= t - tol and start - t <= tau_m + margin + tol  # at the next publish at the latest
    else:
        assert t - window - tol <= start <= t + tol  # counted back to the publish it follows


@settings(max_examples=300, deadline=None)
@given(TIME, TAU_M, FRACTION, st.integers(0, 1000))
def test_the_phase_guard_holds_only_actions_about_to_hit_a_deadline(published, tau_m, phase, k):
    guard = pacing.phase_guard_width(tau_m)
    t = published + k * tau_m + phase * tau_m
    out = pacing.phase_guard(t, published, tau_m, guard)
    to_next = tau_m - (t - published) % tau_m
    if to_next < guard:
        assert out > t and out - t <= 1.25 * guard + 1e-9 * max(1.0, t)  # bounded extra delay
        past = (out - published) % tau_m
        assert past == pytest.approx(guard / 4, abs=1e-7 * max(1.0, t))  # just past the deadline
    else:
        assert out == t


@given(TIME, st.floats(1e-4, 10.0), st.floats(0.0, 1e3))
def test_a_restarted_worker_resumes_its_old_phase_at_the_first_slot_not_in_the_past(last_start, cycle, gap):
    now = last_start + gap
    at = pacing.restart_phase(now, last_start, cycle)
    k = (at - last_start) / cycle
    assert abs(k - round(k)) < 1e-6 * max(1.0, k)  # on the dead worker's phase
    assert at >= now - 1e-9 * max(1.0, now) and at - now < cycle + 1e-9 * max(1.0, now)
    assert pacing.restart_phase(last_start - gap, last_start, cycle) == last_start  # no slot before its own


@pytest.mark.parametrize("cycle", [0.0, -0.1, math.inf, math.nan])
def test_restart_phase_refuses_a_cycle_that_is_not_a_positive_time(cycle):
    with pytest.raises(ValueError, match="cycle must be a finite number of seconds > 0"):
        pacing.restart_phase(1.0, 0.5, cycle)
