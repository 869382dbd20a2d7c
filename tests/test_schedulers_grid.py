"""The grid schedulers (docs/design.md §2, beyond the paper): quantile_hold's one start per period,
auto's online N_I, and the episode catch-up copies, checked on the pure `simulate` and on raw call
sequences like the paper's Algorithms 1 and 2 in test_schedulers.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.inference.schedulers import (
    AutoScheduler,
    MaxTimeScheduler,
    QuantileHoldScheduler,
    make_scheduler,
    simulate,
    simulate_iterations,
)

FAST = settings(max_examples=50, deadline=None)
TOL = 1e-9


def constant(tau: float):
    return lambda worker, k: tau


def table(taus: np.ndarray):
    """Latencies from an (n_workers, n_loops) array: the same draw whatever the event order."""
    return lambda worker, k: float(taus[worker, k % taus.shape[1]])


def gaps(times: list[float]) -> np.ndarray:
    return np.diff(np.asarray(times))


# --------------------------------------------------------------------------- quantile_hold (beyond the paper)


def release_ticks(its, period: float = 1.0) -> np.ndarray:
    """The grid tick each fired action lands on (fires at or before a grid line count for it)."""
    return np.ceil(np.array([it.fire_time for it in its]) / period - 1e-9).astype(int)


def empty_ticks(its, start: int) -> tuple[int, int]:
    """(ticks from ``start`` to the last release with no action landing, ticks counted)."""
    ticks = release_ticks(its)
    end = int(np.quantile(ticks, 0.98))
    covered = np.zeros(end + 1, bool)
    covered[ticks[ticks <= end]] = True
    return int((~covered[start:]).sum()), end + 1 - start


@FAST
@given(tau=st.floats(0.2, 12.0), extra=st.integers(0, 3))
def test_quantile_hold_constant_latency_is_one_action_per_period(tau, extra):
    """Constant τ_θ: ⌈τ/period⌉ workers suffice, every period gets exactly one action, and each
    action lands ⌈τ/period⌉ periods after its start (no spread, no headroom)."""
    n = math.ceil(tau - 1e-9) + extra
    s = make_scheduler("quantile_hold", n, period=1.0)
    its = simulate_iterations(s, constant(tau), 30 * n + 40)
    later = its[2 * n + 2 :]
    assert np.allclose(gaps([it.fire_time for it in later]), 1.0, atol=1e-9)
    q = math.ceil(tau - 1e-9)
    assert s.hold_periods == q and s.skipped_slots == 0
    assert all(abs(it.fire_time - it.obs_time - q) < 1e-9 for it in later)


@FAST
@given(n=st.integers(1, 12), seed=st.integers(0, 2**32 - 1), sigma=st.floats(0.0, 1.5), mean=st.floats(0.3, 8.0))
def test_quantile_hold_releases_are_never_early_and_sit_on_their_slot(n, seed, sigma, mean):
    """Every action fires no earlier than its inference ends, and either at once (late) or on the
    grid at its start + Q periods; starts are on the grid and no two share a slot."""
    s = make_scheduler("quantile_hold", n, period=1.0)
    taus = np.random.default_rng(seed).lognormal(math.log(mean), sigma, size=(n, 60))
    its = simulate_iterations(s, table(taus), 20 * n)
    for it in its:
        assert it.fire_time >= it.done_time - 1e-9
        assert it.wait == 0.0 or abs(it.fire_time - round(it.fire_time)) < 1e-9
        assert abs(it.obs_time - round(it.obs_time)) < 1e-9
    starts = [round(it.obs_time) for it in its]
    assert len(set(starts)) == len(starts)


def test_quantile_hold_needs_far_fewer_workers_than_the_paper_under_lognormal_latency():
    """τ̄_θ = 20 periods, σ = 0.5: 1.5·τ̄ workers leave under 0.5 % of ticks empty after warm-up,
    while Algorithm 2 with the same workers leaves many (its actions bunch and gap)."""
    tau, n, sigma = 20.0, 30, 0.5
    taus = np.random.default_rng(0).lognormal(math.log(tau) - sigma**2 / 2, sigma, size=(n, 2000))
    hold = simulate_iterations(make_scheduler("quantile_hold", n, period=1.0), table(taus), 9000)
    empty, counted = empty_ticks(hold, 4000)
    assert empty / counted <= 0.005, (empty, counted)
    exp = simulate_iterations(make_scheduler("exp_time", n), table(taus), 9000)
    empty_exp, counted_exp = empty_ticks(exp, 4000)
    assert empty_exp / counted_exp > 0.05


def test_quantile_hold_counts_slots_no_worker_was_free_for():
    s = make_scheduler("quantile_hold", 2, period=1.0)
    its = simulate_iterations(s, constant(5.0), 40)  # needs 5 workers: 3 slots in 5 pass unstarted
    assert s.skipped_slots > 0
    assert np.allclose(gaps([it.obs_time for it in its[4:]])[::2], 5.0 - 1.0, atol=1e-9) or s.skipped_slots >= 40


def test_quantile_hold_period_binding_and_validation():
    s = make_scheduler("quantile_hold", 2)
    with pytest.raises(RuntimeError, match="has no period: pass period="):
        s.take_delay(0, now=0.0)
    s.bind(period=0.5, origin=10.0)
    assert s.period == 0.5 and s.take_delay(0, now=10.2) == pytest.approx(0.3)
    s.bind(period=1.0, origin=0.0)  # already set: kept
    assert s.period == 0.5
    with pytest.raises(ValueError, match="period must be a finite number of seconds > 0"):
        make_scheduler("quantile_hold", 2, period=0.0)
    with pytest.raises(ValueError, match=r"quantile must be in \(0, 1\)"):
        make_scheduler("quantile_hold", 2, quantile=1.0)
    with pytest.raises(TypeError, match="now must be a time in seconds"):
        s.take_delay(0, now="1")


# --------------------------------------------------------------------------- auto (quantile_hold + N_I online)


@FAST
@given(tau=st.floats(1e-3, 2.0), period=st.floats(1e-3, 0.1), lo=st.integers(1, 4), span=st.integers(0, 40))
def test_auto_target_for_constant_latency_is_ceil_tau_over_period_clamped(tau, period, lo, span):
    s = make_scheduler("auto", lo, min_workers=lo, max_workers=lo + span, period=period, hysteresis=0.0)
    s.take_delay(0, now=0.0)
    s.after_inference(0, tau)
    expected = min(max(math.ceil(tau / period * (1 - 1e-9)), lo), lo + span)
    assert s.target_workers(period) == expected


def test_auto_target_before_any_sample_is_the_current_count():
    assert make_scheduler("auto", 3, period=1 / 60).target_workers() == 3
    assert make_scheduler("auto", 3, period=1 / 60, initial_estimate=0.1).target_workers() == 6


def test_auto_target_covers_the_spread_of_workers_in_flight():
    """Lognormal τ_θ: the target sits a few standard deviations above E⌈τ/period⌉ (≈ τ̄ + ½),
    well under Algorithm 1's ⌈τ_max/period⌉, and it does not shrink on a small wobble."""
    s = make_scheduler("auto", 1, period=1.0, max_workers=10_000)
    taus = np.random.default_rng(1).lognormal(math.log(20.0) - 0.125, 0.5, size=4000)
    for tau in taus:
        s.take_delay(0)
        s.after_inference(0, float(tau))
    mean, sd = s.busy_workers()
    assert mean == pytest.approx(np.ceil(taus[-4096:]).mean(), rel=1e-9)
    target = s.target_workers()
    assert mean + 2 * sd < target <= mean + 3.2 * sd + 1
    assert target < 1.5 * 20 < taus.max()
    assert s.target_workers() == target


def test_auto_hysteresis_holds_the_count_on_a_small_drop():
    s = make_scheduler("auto", 1, period=0.1, hysteresis=0.1)
    s.take_delay(0, now=0.0)
    s.after_inference(0, 0.6)
    assert s.target_workers() == 6
    for _ in range(100):  # the mean falls to ~0.55: 6 workers no longer keep a 10 % margin over 5.5
        s.take_delay(0)
        s.after_inference(0, 0.55)
    assert s.target_workers() == 6
    for _ in range(5000):  # well below: shrink, to ⌈3 / (1 − 0.1)⌉ = 4 (keeping the margin)
        s.take_delay(0)
        s.after_inference(0, 0.3)
    assert s.target_workers() == 4


def test_auto_retired_worker_keeps_its_release_slot():
    s = make_scheduler("auto", 4, period=1.0, initial_estimate=5.0)
    assert [s.take_delay(w, now=0.0) for w in range(4)] == [0.0, 1.0, 2.0, 3.0]
    s.resize(2)
    assert s.after_inference(3, 1.0) == pytest.approx(3.0 + 5.0 - 4.0)  # released at its slot + Q
    assert s.take_delay(3) == 0.0 and s.start_delay(3) == 0.0  # retired: no slot taken
    with pytest.raises(ValueError, match="worker 4 out of range"):
        s.after_inference(4, 1.0)  # never a worker: still an error
    s.resize(4)
    assert s.take_delay(3, now=4.0) == 0.0  # revived: the next free slot


@FAST
@given(n=st.integers(1, 8), m=st.integers(1, 8), tau=st.floats(0.5, 6.0))
def test_auto_resize_keeps_one_start_per_period(n, m, tau):
    s = make_scheduler("auto", n, max_workers=8, period=1.0)
    resized: list[float] = []

    def on_fire(sched, now, worker):
        if not resized and now >= 4 * tau + 4:
            sched.resize(m)
            resized.append(now)

    its = simulate_iterations(s, constant(tau), 20 * (n + m) + 60, on_fire=on_fire)
    assert s.n_workers == m and resized
    starts = sorted(it.obs_time for it in its if it.obs_time > resized[0])
    assert all(abs(x - round(x)) < 1e-9 for x in starts)  # on the grid
    assert len(set(round(x) for x in starts)) == len(starts)  # one start per slot
    if m >= math.ceil(tau - 1e-9):  # enough workers: no slot skipped after the resize
        late = [x for x in starts if x > resized[0] + tau + 2][: 3 * m]
        assert np.allclose(gaps(late), 1.0, atol=1e-9)


def test_auto_is_quantile_hold_when_not_resized():
    taus = np.random.default_rng(2).lognormal(-2.0, 0.4, size=(5, 50))
    a = simulate(make_scheduler("auto", 5, period=0.02), table(taus), 200)
    q = simulate(make_scheduler("quantile_hold", 5, period=0.02), table(taus), 200)
    assert a == q
    assert isinstance(make_scheduler("auto", 5), QuantileHoldScheduler)
    assert isinstance(make_scheduler("auto", 5), AutoScheduler)
    assert isinstance(make_scheduler("max_time", 5), MaxTimeScheduler)


# --------------------------------------------------------------------------- episode catch-up


def _run_episode(sched: QuantileHoldScheduler, taus: list[float], episode_of_slot: list[int], period: float = 1.0):
    """Drive ``sched`` by hand, one worker per slot (enough workers): returns per slot
    (start, done, grid release, copy release or None)."""
    out = []
    for w, (tau, ep) in enumerate(zip(taus, episode_of_slot)):
        start = sched.take_delay(w, now=0.0)
        pad = sched.after_inference(w, tau)
        early = sched.early_release(w, ep)
        done = start + tau
        out.append((start, done, done + pad, None if early is None else done + early))
    return out


@FAST
@given(seed=st.integers(0, 2**32 - 1), hold=st.integers(2, 40), n=st.integers(2, 60), sigma=st.floats(0.0, 1.5))
def test_catch_up_copies_fill_distinct_ticks_before_the_grid_takes_over(seed, hold, n, sigma):
    """Every copy: released on the grid, at or after its inference ended, one per period, before the
    release of the episode's first slot (where the grid takes over) or in a gap the grid leaves;
    the grid releases are untouched."""
    rng = np.random.default_rng(seed)
    taus = list(rng.lognormal(math.log(hold / 3), sigma, n) if sigma else np.full(n, hold / 3))
    with_copies = make_scheduler("quantile_hold", n, period=1.0, initial_estimate=float(hold))
    without = make_scheduler("quantile_hold", n, period=1.0, initial_estimate=float(hold), early_release=False)
    a, b = _run_episode(with_copies, taus, [0] * n), _run_episode(without, taus, [0] * n)
    assert [r[:3] for r in a] == [r[:3] for r in b]  # the grid is the same with or without copies
    assert all(r[3] is None for r in b) and without.early_copies == 0
    first_release = a[0][2]
    copies = [r[3] for r in a if r[3] is not None]
    assert len(copies) == with_copies.early_copies == len(set(copies))
    grid = {round(r[2]) for r in a if r[2] == pytest.approx(round(r[2]))}
    for _start, done, release, copy in a:
        if copy is not None:
            assert copy >= done - TOL and copy == pytest.approx(round(copy))
            # a catch-up copy comes before the grid takes over; a gap copy before its own release, in
            # a period no grid release fills (unless Q shrank after the gap was handed out: then the
            # two share the tick and the host counts one superseded)
            assert copy < first_release - TOL or copy < release - TOL
            if not sigma:
                assert round(copy) not in grid
    # the first report, its copy queue empty, gets a copy exactly when its period precedes the grid
    assert (a[0][3] is not None) == (math.ceil(a[0][1] - 1e-9) < first_release - TOL)


def test_catch_up_serves_the_newest_episode_only():
    s = make_scheduler("quantile_hold", 6, period=1.0, initial_estimate=10.0)
    for w in range(6):
        s.take_delay(w, now=0.0)
    assert s.after_inference(0, 1.0) == 9.0 and s.early_release(0, 3) == 0.0  # episode 3: copy at 1
    assert s.after_inference(1, 1.0) == 9.0 and s.early_release(1, 2) is None  # an older episode: stale
    assert s.after_inference(2, 1.0) == 9.0 and s.early_release(2, 4) == 0.0  # a newer one starts afresh
    assert s.after_inference(3, 1.0) == 9.0 and s.early_release(3, 4) == 0.0  # at 4 (slot 3, done at 4)
    assert s.early_release(3, 4) is None  # one copy per inference
    assert s.early_copies == 3
    with pytest.raises(TypeError, match="episode must be an int"):
        s.early_release(4, 1.5)
    with pytest.raises(TypeError, match="early_release must be a bool"):
        make_scheduler("auto", 2, early_release=1)


def _reset_run(*, early: bool, queue_mode: str = "latest", tau: float = 20.0, seed: int = 0):
    from nonstop.bench.nstar import make_latency
    from nonstop.inference.workers import InferencePool
    from nonstop.policies import ConstantPolicy, LatencyPolicy
    from nonstop.realtime.host import Session

    with Session(
        "theory/inaction", clock="virtual", seed=seed, env_kwargs={"max_steps": 2500}, queue_mode=queue_mode
    ) as world:
        latency = make_latency("lognormal", tau * world.tau_m, 1.0)
        sched = make_scheduler("auto", 1, max_workers=512, early_release=early)
        pool = InferencePool(
            world, lambda i: LatencyPolicy(ConstantPolicy(world.action_space, 1), latency, seed=i), sched
        ).start()
        world.run_for(10_000 * world.tau_m)
        pool.stop()
    return world.tick_log.summary(warmup_ticks=2500), pool, sched


def test_catch_up_cuts_the_cost_of_a_reset_from_the_hold_to_about_one_inference():
    """Lognormal σ = 1, τ̄_θ = 20 ticks, 2,500-tick episodes: the hold Q is ~300 ticks, so without
    catch-up about Q of every 2,500 ticks go to β after each reset; with it about τ̄_θ do."""
    before, _, sched = _reset_run(early=False)
    after, pool, _ = _reset_run(early=True)
    hold = sched.hold_periods
    assert hold > 150
    assert before["inaction_fraction"] > 0.6 * hold / 2500  # the reset costs most of Q
    assert after["inaction_fraction"] < before["inaction_fraction"] / 3
    assert after["inaction_fraction"] < 2 * 20 / 2500 + 0.002  # about τ̄_θ per reset
    assert pool.early_copies > 0 and pool.report()["early_copies"] == pool.early_copies


def test_catch_up_never_copies_into_a_fifo_queue():
    """A fifo queue carries distinct commands: a copy would run one twice."""
    _, pool, sched = _reset_run(early=True, queue_mode="fifo")
    assert pool.early_copies == 0 and sched.early_copies == 0


def test_copies_fill_the_gap_a_growing_hold_leaves():
    """Q grows from 2 to 3 periods: the releases jump from 2 to 4 and period 3 would go to β; the
    next action that finishes before it (and whose own release is later) is copied there."""
    s = make_scheduler("quantile_hold", 4, period=1.0, initial_estimate=2.0)
    assert s.take_delay(0, now=0.0) == 0.0
    assert s.after_inference(0, 2.5) == 0.0 and s.hold_periods == 3  # late: Q grows
    assert s.early_release(0, 0) is None  # ended after its own release: nothing to fill yet
    assert [s.take_delay(w, now=0.0) for w in (1, 2)] == [1.0, 2.0]  # releases 4 and 5: period 3 is a gap
    assert s.after_inference(2, 0.5) == 2.5 and s.early_release(2, 0) == 0.5  # a copy at 3
    assert s.after_inference(1, 1.0) == 2.0 and s.early_release(1, 0) is None  # the gap is taken
    off = make_scheduler("quantile_hold", 4, period=1.0, initial_estimate=2.0, early_release=False)
    off.take_delay(0, now=0.0), off.after_inference(0, 2.5), off.take_delay(1, now=0.0), off.take_delay(2, now=0.0)
    assert off.after_inference(2, 0.5) == 2.5 and off.early_release(2, 0) is None and off.early_copies == 0


def test_skipped_slots_are_never_filled_by_copies():
    """One worker for an inference of ~2.5 periods: slots 1 and 2 pass with no worker free. A copy
    there would repeat a decision for want of a worker and let N_I* fall below ⌈τ̄_θ/τ_M⌉."""
    s = make_scheduler("quantile_hold", 1, period=1.0, initial_estimate=3.0)
    assert s.take_delay(0, now=0.0) == 0.0
    assert s.after_inference(0, 2.5) == 0.5 and s.early_release(0, 0) is None  # grid from period 3
    assert s.take_delay(0, now=2.5) == 0.5 and s.skipped_slots == 2  # slot 3, released at 6
    assert s.after_inference(0, 0.5) == 2.5 and s.early_release(0, 0) is None  # periods 4, 5 stay β's
    assert s.early_copies == 0
