"""`FillScheduler` (nonstop.inference.fill): its pure parts — the return it predicts per cap, the fit of
the cost of delay to rewards, and the rule itself on the event loop `simulate_iterations`. Its measured
return against Algorithm 2 and quantile_hold is in tests/test_bench_return.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.inference.fill import (
    BATCH,
    PLANS,
    PRIOR_STAY,
    TIE,
    FillScheduler,
    candidate_caps,
    fit_stay_probability,
    predict_fill_returns,
)
from nonstop.inference.schedulers import make_scheduler, simulate_iterations

FAST = settings(max_examples=40, deadline=None)


# --------------------------------------------------------------------------- the prediction


@pytest.mark.parametrize("k, p", [(1, 0.5), (3, 0.9), (5, 0.97)])
def test_constant_latency_with_enough_workers_fills_every_tick_at_its_own_delay(k, p):
    """τ_θ = k ticks and k workers one tick apart: every tick gets one action, k ticks after its
    observation, worth p**(k − 1) (Equation 4, host timing); no cap at or above k changes that."""
    got = predict_fill_returns([float(k)] * 10, k, [k, 2 * k, 10 * k], p, ticks=300)
    assert got == pytest.approx([p ** (k - 1)] * 3, abs=1e-12)


def test_a_fixed_hold_with_grid_starts_is_a_constant_delay():
    """τ_θ = 4 ticks, 6 workers: one start per tick (grid), each action held to exactly the cap, gives
    every tick an action ``cap`` ticks old (quantile_hold's hold, at a chosen cap)."""
    got = predict_fill_returns([4.0] * 10, 6, [4, 6], 0.9, ticks=300, starts="grid", fixed=True)
    assert got == pytest.approx([0.9**3, 0.9**5], abs=1e-12)
    with pytest.raises(ValueError, match="starts must be one of now, tick, grid"):
        predict_fill_returns([4.0], 2, [4], 0.9, starts="later")


def test_too_few_workers_leave_ticks_to_beta():
    """Two workers at τ_θ = 4 ticks make one action every 2 ticks: half the ticks are β's (worth 0)."""
    (got,) = predict_fill_returns([4.0] * 10, 2, [100], 1.0, ticks=400)
    assert got == pytest.approx(0.5, abs=0.01)


def test_a_tight_cap_costs_inaction_and_a_loose_one_delay():
    """Lognormal τ_θ (σ 0.5, mean 5 ticks), 5 workers, p = 0.97: a cap of the mean leaves many ticks
    empty, one of 6× the mean lets the queue age every action; the best lies between (the trade the
    scheduler tunes)."""
    taus = np.random.default_rng(0).lognormal(math.log(5) - 0.125, 0.5, 4096)
    tight, middle, loose = predict_fill_returns(taus, 5, [5, 12, 30], 0.97, ticks=3000)
    assert middle > tight + 0.05 and middle > loose + 0.05


def test_the_prediction_is_reproducible_and_checks_its_arguments():
    taus = [3.0, 4.0, 7.0]
    assert predict_fill_returns(taus, 3, [5, 9], 0.9, seed=4) == predict_fill_returns(taus, 3, [5, 9], 0.9, seed=4)
    with pytest.raises(ValueError, match="taus_ticks must be a non-empty"):
        predict_fill_returns([], 3, [5], 0.9)
    with pytest.raises(ValueError, match="p_minimax must be a probability"):
        predict_fill_returns(taus, 3, [5], 1.5)
    with pytest.raises(ValueError, match="n_workers must be >= 1"):
        predict_fill_returns(taus, 0, [5], 0.9)


def test_candidate_caps_span_the_mean_to_six_times_it_and_the_largest_tau():
    caps = candidate_caps([2.0, 4.0, 30.0])  # mean 12
    assert caps[0] == 9 and 72 in caps and 31 in caps and caps == sorted(set(caps))


# --------------------------------------------------------------------------- the cost of delay


def _batches(rewards_by_delay: dict[int, np.ndarray]) -> dict[int, list[float]]:
    return {
        d: [float(b.mean()) for b in np.split(r[: len(r) // BATCH * BATCH], len(r) // BATCH)]
        for d, r in rewards_by_delay.items()
    }


@FAST
@given(p=st.floats(0.9, 1.0), seed=st.integers(0, 10_000))
def test_the_fit_recovers_p_from_independent_bernoulli_rewards(p, seed):
    """Rewards r ~ Bernoulli(p**(d − 1)) at delays 3..12, 4000 ticks each and independent: the data
    outweigh the prior and p̂ lands within 0.01."""
    rng = np.random.default_rng(seed)
    rewards = {d: (rng.random(4000) < p ** (d - 1)).astype(float) for d in range(3, 13)}
    assert abs(fit_stay_probability(_batches(rewards)) - p) <= 0.01


def test_correlated_rewards_from_a_narrow_range_of_delays_leave_p_near_the_prior():
    """Two delays, 6 and 7, each reward repeated 30 times (what a state that stays put does to an
    oracle's rewards): the batch means vary as much as 30 × fewer rewards would, so the slope is weak
    evidence and p̂ stays closer to the prior than the raw slope — the failure a per-reward variance
    hides (it read p = 0.78 from 470 ticks of a p = 0.97 world)."""
    rng = np.random.default_rng(3)
    rewards = {d: np.repeat((rng.random(40) < 0.97 ** (d - 1)).astype(float), 30) for d in (6, 7)}
    means = {d: r.mean() for d, r in rewards.items()}
    raw = means[7] / means[6]
    fitted = fit_stay_probability(_batches(rewards))
    assert abs(fitted - PRIOR_STAY) < abs(raw - PRIOR_STAY)


def test_the_fit_reads_rewards_above_beta_and_falls_back_to_the_prior():
    # β earns 0.5; an action d ticks late earns 0.5 + 0.5·0.9**(d − 1) (± 0.01 between batches)
    jitter = [-0.01, 0.01, 0.0, 0.0] * 25
    batches = {d: [0.5 + 0.5 * 0.9 ** (d - 1) + j for j in jitter] for d in (2, 5)}
    assert fit_stay_probability(batches, beta_mean=0.5) == pytest.approx(0.9, abs=0.002)
    assert fit_stay_probability(batches, beta_mean=0.0) > 0.95  # read against 0 it is another law
    assert fit_stay_probability({4: [0.5] * 50}) == pytest.approx(PRIOR_STAY)  # one delay: no slope
    assert fit_stay_probability({4: [0.9] * 3, 6: [0.8] * 3}) == pytest.approx(PRIOR_STAY)  # too few batches
    assert fit_stay_probability({2: [0.5, 0.52] * 10, 4: [0.8, 0.82] * 10}) == 1.0  # later is better: no cost


def test_rewards_shown_to_the_scheduler_set_its_p():
    s = FillScheduler(2, period=1.0, origin=0.0)
    assert s.p_minimax == PRIOR_STAY
    rng = np.random.default_rng(0)
    for d in (4, 6, 8, 10):
        for r in rng.random(3000) < 0.95 ** (d - 1):
            s.observe_reward(float(r), d)
    for _ in range(50):
        s.observe_reward(0.0, None)  # β
    s._fit()
    assert s.p_minimax == pytest.approx(0.95, abs=0.01)
    assert FillScheduler(2, p_minimax=0.9).p_minimax == 0.9  # given: rewards are not needed
    with pytest.raises(ValueError, match="delay_ticks must be an int >= 1"):
        s.observe_reward(1.0, 0)
    with pytest.raises(ValueError, match="reward must be a finite number"):
        s.observe_reward(math.nan, 3)


# --------------------------------------------------------------------------- the rule


def _lognormal(seed: int, mean: float, sigma: float):
    rng = np.random.default_rng(seed)
    table = rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, (64, 4000))
    return lambda worker, k: float(table[worker, k % table.shape[1]])


@FAST
@given(
    n=st.integers(1, 12),
    mean=st.floats(0.5, 12.0),
    sigma=st.floats(0.05, 1.0),
    cap=st.integers(1, 40),
    seed=st.integers(0, 1000),
    plan=st.sampled_from(["now", "tick", "grid", "grid+fixed"]),
)
def test_held_actions_own_distinct_ticks_within_the_cap(n, mean, sigma, cap, seed, plan):
    """Every action the rule holds is released on a tick of its own (no two held actions share one, so
    none supersedes another), at most ``cap`` ticks after its observation's tick; an action past the
    cap goes the moment it is ready. (τ_θ is continuous here, so an action ready exactly on a tick,
    held for 0 s, has probability 0: a wait > 0 is a hold.)"""
    s = FillScheduler(n, period=1.0, origin=0.0, cap=cap, plan=plan)
    its = simulate_iterations(s, _lognormal(seed, mean, sigma), 300)
    held_ticks = []
    for it in its:
        assert it.wait >= 0.0
        if it.wait > 0.0:
            tick = round(it.fire_time)
            assert it.fire_time == pytest.approx(tick, abs=1e-9)  # on a tick
            assert 1 <= tick - math.floor(it.obs_time + 1e-9) <= cap
            if plan == "grid+fixed":
                assert tick - round(it.obs_time) == cap  # a grid start is on a tick; its action held to k + cap
            held_ticks.append(tick)
        if plan in ("tick", "grid", "grid+fixed"):
            assert it.obs_time == pytest.approx(round(it.obs_time), abs=1e-9)  # starts on a tick
    assert len(held_ticks) == len(set(held_ticks))
    assert s.held >= len(held_ticks) and s.unheld >= len(its) - len(held_ticks)


def test_how_workers_start_in_each_plan():
    grid = FillScheduler(3, period=1.0, origin=0.0, cap=10, plan="grid")
    assert [grid.take_delay(w, now=0.5) for w in range(3)] == [0.5, 1.5, 2.5]  # ticks 1, 2, 3: one start each
    tick = FillScheduler(3, period=1.0, origin=0.0, cap=10, plan="tick")
    assert [tick.take_delay(w, now=0.5) for w in range(3)] == [0.5, 0.5, 0.5]  # all on tick 1's observation
    with pytest.raises(ValueError, match="plan must be one of grid\\+fixed, grid, now, tick"):
        FillScheduler(2, plan="later")
    s = FillScheduler(3, period=1.0, origin=0.0, cap=10, plan="now")
    assert [s.start_delay(w) for w in range(3)] == [0.0, 1.0, 2.0]  # one tick apart, without an estimate
    assert FillScheduler(4, period=1.0, initial_estimate=8.0).start_delay(3) == 6.0  # over one τ_θ
    assert s.take_delay(0, now=2.5) == 0.0
    assert s.after_inference(0, 1.2) == pytest.approx(0.3)  # ready at 3.7: held for tick 4 (delay 2)


def test_the_plan_and_cap_are_tuned_to_the_best_predicted_return():
    """At the 32nd inference the scheduler predicts every plan at every candidate cap on its window and
    keeps the best; within TIE the earlier plan and the smaller cap win."""
    s = make_scheduler("fill", 5, period=1.0, origin=0.0, p_minimax=0.97)
    assert isinstance(s, FillScheduler) and s.cap is None  # untuned: every action is held
    taus = np.random.default_rng(1).lognormal(math.log(5) - 0.125, 0.5, 32).tolist()
    for i, tau in enumerate(taus):
        s.take_delay(i % 5, now=float(i))
        s.after_inference(i % 5, tau)
    assert s.tunes == 1
    caps = candidate_caps(taus)
    options = []
    for starts, fixed in PLANS:
        predicted = predict_fill_returns(taus, 5, caps, 0.97, ticks=2000, seed=0, starts=starts, fixed=fixed)
        cap = next(c for c, v in zip(caps, predicted) if v >= max(predicted) - TIE)
        options.append((max(predicted), f"{starts}{'+fixed' if fixed else ''}", cap))
    top = max(o[0] for o in options)
    _, plan, cap = next(o for o in options if o[0] >= top - TIE)
    assert (s.plan, s.cap) == (plan, cap)
    assert FillScheduler(2, period=1.0, cap=7).cap == 7  # a given cap is kept


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="p_minimax must be a probability"):
        FillScheduler(2, p_minimax=-0.1)
    with pytest.raises(ValueError, match="cap must be >= 1"):
        FillScheduler(2, cap=0)
    with pytest.raises(TypeError, match="seed must be an int"):
        FillScheduler(2, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no period: pass period=τ_M"):
        FillScheduler(2).start_delay(0)


def test_tuning_simulates_off_the_lock(monkeypatch):
    """fill's tuning (a simulation of the pool, 0.1-0.3 s at τ̄ 20 ticks and N 40) must not hold the
    scheduler's lock: on the wall clock every other worker would wait on it that long."""
    import nonstop.inference.fill as fill

    s = FillScheduler(2, period=1.0, origin=0.0, p_minimax=0.9)
    seen: list[bool] = []
    real = fill.predict_fill_returns

    def spy(*args, **kwargs):
        seen.append(s._lock.locked())
        return real(*args, **kwargs)

    monkeypatch.setattr(fill, "predict_fill_returns", spy)
    simulate_iterations(s, lambda worker, k: 3.4, 120)
    assert seen and not any(seen) and s.tunes >= 1 and s.cap is not None
