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


@FAST
@given(p=st.floats(0.8, 1.0), seed=st.integers(0, 10_000))
def test_the_fit_recovers_p_from_bernoulli_rewards(p, seed):
    """Rewards r ~ Bernoulli(p**(d − 1)) at delays 3..12, 4000 ticks each: p̂ within 0.01."""
    rng = np.random.default_rng(seed)
    bins = {}
    for d in range(3, 13):
        r = (rng.random(4000) < p ** (d - 1)).astype(float)
        bins[d] = (r.size, float(r.sum()), float((r * r).sum()))
    fitted = fit_stay_probability(bins)
    assert fitted is not None and abs(fitted - p) <= 0.01


def test_the_fit_reads_rewards_above_beta_and_needs_two_delays():
    # β earns 0.5; an action d ticks late earns 0.5 + 0.5·0.9**(d − 1): the gain above β decays by 0.9
    bins = {d: (100, 100 * (0.5 + 0.5 * 0.9 ** (d - 1)), 100 * (0.5 + 0.5 * 0.9 ** (d - 1)) ** 2) for d in (2, 5)}
    assert fit_stay_probability(bins, beta_mean=0.5) == pytest.approx(0.9)
    assert fit_stay_probability(bins, beta_mean=0.0) != pytest.approx(0.9)  # read against 0 it is another law
    assert fit_stay_probability({4: (1000, 500.0, 500.0)}) is None
    assert fit_stay_probability({4: (5, 5.0, 5.0), 6: (5, 4.0, 4.0)}) is None  # too few ticks per delay
    assert fit_stay_probability({2: (100, 50.0, 50.0), 4: (100, 80.0, 80.0)}) == 1.0  # later is better: no cost


def test_rewards_shown_to_the_scheduler_set_its_p():
    s = FillScheduler(2, period=1.0, origin=0.0)
    assert s.p_minimax == 0.99  # the prior
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
@given(n=st.integers(1, 12), mean=st.floats(0.5, 12.0), sigma=st.floats(0.05, 1.0), cap=st.integers(1, 40),
       seed=st.integers(0, 1000))  # fmt: skip
def test_held_actions_own_distinct_ticks_within_the_cap(n, mean, sigma, cap, seed):
    """Every action the rule holds is released on a tick of its own (no two held actions share one, so
    none supersedes another), at most ``cap`` ticks after its observation's tick; an action past the
    cap goes the moment it is ready. (τ_θ is continuous here, so an action ready exactly on a tick,
    held for 0 s, has probability 0: a wait > 0 is a hold.)"""
    s = FillScheduler(n, period=1.0, origin=0.0, cap=cap)
    its = simulate_iterations(s, _lognormal(seed, mean, sigma), 300)
    held_ticks = []
    for it in its:
        assert it.wait >= 0.0
        if it.wait > 0.0:
            tick = round(it.fire_time)
            assert it.fire_time == pytest.approx(tick, abs=1e-9)  # on a tick
            assert 1 <= tick - math.floor(it.obs_time + 1e-9) <= cap
            held_ticks.append(tick)
    assert len(held_ticks) == len(set(held_ticks))
    assert s.held >= len(held_ticks) and s.unheld >= len(its) - len(held_ticks)


def test_starts_never_wait_and_read_the_tick_they_fall_in():
    s = FillScheduler(3, period=1.0, origin=0.0, cap=10)
    assert [s.start_delay(w) for w in range(3)] == [0.0, 1.0, 2.0]  # one tick apart, without an estimate
    assert FillScheduler(4, period=1.0, initial_estimate=8.0).start_delay(3) == 6.0  # over one τ_θ
    assert s.take_delay(0, now=2.5) == 0.0
    assert s.after_inference(0, 1.2) == pytest.approx(0.3)  # ready at 3.7: held for tick 4 (delay 2)


def test_the_cap_is_tuned_to_the_best_predicted_return():
    """At the 32nd inference the scheduler predicts each candidate cap on its window and keeps the best."""
    s = make_scheduler("fill", 5, period=1.0, origin=0.0, p_minimax=0.97)
    assert isinstance(s, FillScheduler) and s.cap is None  # untuned: every action is held
    taus = np.random.default_rng(1).lognormal(math.log(5) - 0.125, 0.5, 32).tolist()
    for i, tau in enumerate(taus):
        s.take_delay(i % 5, now=float(i))
        s.after_inference(i % 5, tau)
    assert s.tunes == 1 and s.cap is not None
    caps = candidate_caps(taus)
    predicted = predict_fill_returns(taus, 5, caps, 0.97, ticks=2000, seed=0)
    assert s.cap == caps[int(np.argmax(predicted))]
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
