"""Regret from the tick log against Theorem 1 (Equations 3 and 4), and ``nonstop bench regret``."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.bench import regret as bench
from nonstop.bench import regretlearn
from nonstop.metrics.regret import (
    ObservedStatePolicy,
    RegretEstimate,
    batch_means_stderr,
    delay_regret_estimate,
    delay_regret_per_step,
    eq3_inaction_regret_rate,
    eq4_delay_regret_per_step,
    inaction_regret_estimate,
    inaction_regret_rate,
    predicted_delay_regret_per_step,
    eq2_hard_epsilon,
    eq2_lower_bound,
    learned_fraction,
    learning_regret_curve,
    regret_split,
    rescaled_regret,
    tick_log_regret_split,
)
from nonstop.policies.base import Decision, Policy
from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog
from nonstop.envs import theory

TAU_M = 1 / 60


def hand_log(rows: list[tuple[int, float, int]], tau_m: float = TAU_M) -> TickLog:
    """A tick log from (source, reward, delay) rows, ticks numbered from 1."""
    log = TickLog(tau_m)
    for t, (source, reward, delay) in enumerate(rows, start=1):
        log.append(
            tick=t,
            deadline=t * tau_m,
            time=t * tau_m,
            source=source,
            reward=reward,
            delay=delay if source == SOURCE_AGENT else -1,
            obs_tick=t - delay if source == SOURCE_AGENT else -1,
        )
    return log


# ----------------------------------------------------------------------------- pure metrics


def test_inaction_regret_rate_on_a_hand_built_log():
    # 6 ticks at 60 Hz (0.1 s): 4 agent ticks earn 1, 2 β ticks earn 0 -> 2 lost in 0.1 s
    log = hand_log([(1, 1.0, 1), (0, 0.0, -1), (1, 1.0, 2), (1, 1.0, 2), (0, 0.0, -1), (1, 1.0, 1)])
    assert inaction_regret_rate(log, 1.0) == pytest.approx(20.0)
    assert inaction_regret_rate(log) == pytest.approx(20.0)  # InactionMDP's optimum is the default
    # the warm-up drops the first two ticks: 1 lost in 4 ticks
    assert inaction_regret_rate(log, 1.0, warmup_ticks=2) == pytest.approx(1 / (4 * TAU_M))
    # another optimum: (2·6 − 4) lost over 0.1 s
    assert inaction_regret_rate(log, 2.0) == pytest.approx(80.0)
    est = inaction_regret_estimate(log, 1.0, n_batches=3)
    assert isinstance(est, RegretEstimate) and est.n == 6 and est.value == pytest.approx(20.0)
    # batches of two ticks lose 1, 0 and 1 units (30, 0, 30 per s): spread 17.3/√3
    assert est.stderr == pytest.approx(10.0)


def test_delay_regret_counts_agent_ticks_only():
    # β ticks earn 0 but are inaction, not delay: left out. Agent ticks: 1, 0, 1, 1 -> regret 1/4.
    log = hand_log([(1, 1.0, 3), (0, 0.0, -1), (1, 0.0, 3), (0, 0.0, -1), (1, 1.0, 3), (1, 1.0, 3)])
    assert delay_regret_per_step(log) == pytest.approx(0.25)
    assert delay_regret_per_step(log, warmup_ticks=3) == pytest.approx(0.0)
    est = delay_regret_estimate(log, n_batches=2)
    assert est.n == 4 and est.value == pytest.approx(0.25) and est.stderr == pytest.approx(0.25)
    # an action d ticks late is d − 1 transitions late: 1 − p²
    assert predicted_delay_regret_per_step(log, 0.5) == pytest.approx(0.75)


def test_empty_selections_are_nan_not_errors():
    log = hand_log([(0, 0.0, -1)] * 4)
    assert math.isnan(delay_regret_per_step(log))
    assert delay_regret_estimate(log).n == 0
    assert math.isnan(predicted_delay_regret_per_step(log, 0.9))
    assert math.isnan(inaction_regret_rate(log, warmup_ticks=10))
    assert math.isnan(batch_means_stderr([1.0]))


def test_batch_means_stderr_matches_iid_formula_for_independent_draws():
    x = np.random.default_rng(0).normal(size=40_000)
    assert batch_means_stderr(x) == pytest.approx(1 / math.sqrt(x.size), rel=0.4)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda log: inaction_regret_rate(object()), TypeError, "TickLog"),
        (lambda log: inaction_regret_rate(log, float("nan")), ValueError, "optimal_rate_per_tick"),
        (lambda log: inaction_regret_rate(log, warmup_ticks=-1), ValueError, "warmup_ticks"),
        (lambda log: delay_regret_per_step(log, True), ValueError, "optimal_reward_per_step"),
        (lambda log: predicted_delay_regret_per_step(log, 1.5), ValueError, "p_minimax"),
        (lambda log: batch_means_stderr([1.0, 2.0], n_batches=1), ValueError, "n_batches"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(hand_log([(1, 1.0, 1)]))


def test_theory_functions_are_re_exported():
    assert eq3_inaction_regret_rate is theory.inaction_regret_rate
    assert eq4_delay_regret_per_step is theory.delay_regret_per_step
    assert eq3_inaction_regret_rate(4 * TAU_M, TAU_M) == pytest.approx(45.0)  # (4 − 1)/4 of 60 ticks/s
    assert eq4_delay_regret_per_step(0.9, 4) == pytest.approx(1 - 0.9**4)


def test_observed_state_policy_answers_the_observed_state():
    policy = ObservedStatePolicy(spaces.Discrete(9))
    for i in range(8):
        assert policy.act(np.eye(8, dtype=np.float32)[i]).action == i + 1
    with pytest.raises(ValueError, match="one-hot observation of 8 states"):
        policy.act(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="Discrete"):
        ObservedStatePolicy(spaces.Box(0, 1, (3,)))
    # on a world that never moves (p = 1) the delayed agent is always right
    env = theory.DelayCycleMDP(n=5, p_minimax=1.0)
    obs, _ = env.reset(seed=0)
    assert env.step(policy_for(env).act(obs).action)[1] == 1.0


def policy_for(env) -> ObservedStatePolicy:
    return ObservedStatePolicy(env.action_space)


# ----------------------------------------------------------------------------- Theorem 1, measured


@pytest.mark.parametrize("tau_ticks", [2.0, 2.5, 4.0])
def test_sequential_inaction_regret_matches_equation_3(tau_ticks):
    log = bench.measure(
        "theory/inaction", tau_ticks=tau_ticks, scheduler="sequential", n_workers=1, seconds=30.0, seed=0
    )
    measured = inaction_regret_rate(log, 1.0, warmup_ticks=bench.warmup_ticks(tau_ticks))
    assert measured == pytest.approx(eq3_inaction_regret_rate(tau_ticks * TAU_M, TAU_M), rel=0.02)


@pytest.mark.parametrize(
    "tau_ticks, continuous, ceil_form", [(1.5, 1 / 3, 1 / 2), (2.5, 0.6, 2 / 3), (3.2, 0.6875, 0.75)]
)
def test_remark_1_at_non_integer_ratios_is_the_continuous_form(tau_ticks, continuous, ceil_form):
    """Remark 1's inaction for a sequential agent reads 1 − τ_M/τ_θ or, counting whole ticks,
    1 − 1/⌈τ_θ/τ_M⌉; they coincide at integer ratios. The host realises the continuous form: a
    worker restarts at once on the newest observation after each submit, so its actions land
    τ_θ apart (at 2.5 ticks: ticks 3, 5, 8, 10, ... two in five), not every ⌈τ_θ/τ_M⌉ ticks."""
    log = bench.measure(
        "theory/inaction", tau_ticks=tau_ticks, scheduler="sequential", n_workers=1, seconds=60.0, seed=0
    )
    inaction = log.summary(warmup_ticks=bench.warmup_ticks(tau_ticks))["inaction_fraction"]
    assert inaction == pytest.approx(continuous, abs=0.005)
    assert abs(inaction - ceil_form) > 0.05


@pytest.mark.parametrize("tau_ticks", [2.0, 4.0, 7.5])
def test_staggering_drives_inaction_regret_to_zero(tau_ticks):
    n = math.ceil(tau_ticks)
    log = bench.measure("theory/inaction", tau_ticks=tau_ticks, scheduler="max_time", n_workers=n, seconds=30.0, seed=0)
    warm = bench.warmup_ticks(tau_ticks)
    assert inaction_regret_rate(log, 1.0, warmup_ticks=warm) == pytest.approx(0.0, abs=1e-9)


def test_delay_regret_stays_with_staggering_and_follows_equation_4():
    p, tau_ticks = 0.9, 4.0
    cycle = {"n": 64, "p_minimax": p}
    warm = bench.warmup_ticks(tau_ticks)
    staggered = bench.measure(
        "theory/delay-cycle",
        tau_ticks=tau_ticks,
        scheduler="max_time",
        n_workers=4,
        seconds=300.0,
        seed=1,
        env_kwargs=cycle,
    )
    est = delay_regret_estimate(staggered, warmup_ticks=warm)
    assert staggered.summary(warmup_ticks=warm)["inaction_ticks"] == 0  # inaction is gone ...
    assert set(staggered["delay"][(staggered["tick"] > warm)].tolist()) == {4}
    assert est.n > 15_000 and 0 < est.stderr < 0.01
    # ... delay regret is not: Equation 4 at the lag the host imposes (d − 1 = 3 transitions)
    assert abs(est.value - eq4_delay_regret_per_step(p, 3)) < 4 * est.stderr
    assert est.value == pytest.approx(
        predicted_delay_regret_per_step(staggered, p, warmup_ticks=warm), abs=4 * est.stderr
    )
    # and stays below the paper's ⌈τ_θ/τ_M⌉ = 4 by one factor of p (a worst-case lower bound for its model)
    assert est.value < eq4_delay_regret_per_step(p, 4) - 4 * est.stderr


# ----------------------------------------------------------------------------- the benchmark


def _bench_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    bench.add_arguments(parser)
    return parser.parse_args(argv)


#: docs/paper.md's command, run here as written (plus --json and a --plot) and checked; tests/test_doc_commands.py
#: lists it as run here (CHECKED_HERE) rather than running the same bench again only to see it exit 0
QUICK_COMMAND = "nonstop bench regret --quick"


@pytest.mark.slow
def test_bench_quick_returns_the_documented_keys(tmp_path, capsys):
    import json

    from nonstop.cli import main

    plot = tmp_path / "regret.png"
    assert main([*QUICK_COMMAND.split()[1:], "--json", "--plot", str(plot)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    json.dumps(result, allow_nan=False)  # strict JSON: no NaN anywhere
    assert result["p_minimax"] == 0.9 and result["n_states"] == 64
    assert [r["tau_theta_ticks"] for r in result["rows"]] == [1.0, 2.5, 4.0, 8.0]
    assert "eq3_at_staggered_tau_i" not in result["rows"][0]  # an identity: dropped
    # Equation 4: the host's convention (d − 1 transitions) passes every row; the paper's k = ⌈τ_θ/τ_M⌉ passes
    # where the host's law says it should — where its value lies within 3 SE of the host's expectation — computed
    # here from each row's own numbers, not a constant
    assert result["eq4_host_convention_passes"] == 4
    expected = [
        abs(r["predicted_delay_regret_per_step"] - r["eq4_delay_regret_per_step"])
        <= bench.PASS_Z * (r["staggered_delay_regret_per_step_se"] or 0.0)
        for r in result["rows"]
    ]
    assert [r["eq4_paper_convention_pass"] for r in result["rows"]] == expected
    assert result["eq4_paper_convention_passes"] == result["eq4_paper_convention_expected_passes"] == sum(expected)
    # which to trust, and the row that decides it: at τ_θ = 1 tick the paper charges 1 − p, the host and the
    # measurement nothing
    acc = result["eq4_account"]
    assert acc["trust"] == "host" and acc["host_passes"] == 4 and acc["paper_lower_bound_fails"] >= 1
    case = acc["separating_case"]
    assert case["tau_theta_ticks"] == 1 and case["measured"] == 0.0 == case["host"]
    assert case["paper"] == pytest.approx(1 - result["p_minimax"])
    assert not any(r["eq4_paper_lower_bound_holds"] for r in result["rows"])
    # Remark 1 at τ_θ = 2.5 ticks: the continuous form, not the ceiling one
    assert [r["remark1_form_realised"] for r in result["rows"]] == ["both", "continuous", "both", "both"]
    for row in result["rows"]:
        assert set(bench.ROW_KEYS) <= set(row)
        assert row["staggered_inaction_regret_rate"] == pytest.approx(0.0, abs=1e-9)
        if row["tau_theta_ticks"] > 1:
            assert row["sequential_ratio_to_eq3"] == pytest.approx(1.0, abs=0.02)
            assert row["staggered_delay_regret_per_step"] > 0.2  # the delay term stays
    assert result["delay_vs_predicted_max_z"] < 4
    assert plot.stat().st_size > 10_000
    # Equation 2: every learner setting learns from the predicted share and follows Δ_pace(f·T)/f
    eq2 = result["eq2"]
    assert "real_env" not in eq2  # CartPole's DQN runs only in a full run
    assert [(r["n_learners"], r["tau_l_ticks"]) for r in eq2["rows"]] == list(regretlearn.EQ2_SETTINGS)
    for row in eq2["rows"]:
        assert set(regretlearn.EQ2_ROW_KEYS) <= set(row)
        assert row["inaction_fraction"] == 0.0 and row["delay_mean_ticks"] == 1.0  # all regret is learning
    assert eq2["learned_fraction_passes"] == len(eq2["rows"])
    assert eq2["prediction_checks"] == len(eq2["rows"]) - 1  # the reference is not compared with itself
    assert eq2["prediction_passes"] >= eq2["prediction_checks"] - 1  # 3-SE checks: one miss in four is chance
    assert eq2["hard_instance"]["lower_bound_holds"]


def test_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="--ticks"):
        bench.run(_bench_args(["--ticks", "1,x"]))
    with pytest.raises(ValueError, match="p_minimax"):
        bench.run(_bench_args(["--p-minimax", "0.001"]))
    with pytest.raises(ValueError, match="--n-states"):
        bench.run(_bench_args(["--ticks", "80"]))


def test_delay_convention_an_agent_within_one_tick_pays_no_delay_regret():
    """The convention of `theory.delay_regret_per_step`: k counts transitions, and an action logged
    with delay d is d − 1 transitions stale. A sequential agent answering in exactly one tick
    (d = 1) is never wrong on DelayCycleMDP, whatever p, while Equation 4 read with
    k = ⌈τ_θ/τ_M⌉ = 1 would charge it 1 − p = 0.5 per step."""
    p = 0.5
    log = bench.measure(
        "theory/delay-cycle",
        tau_ticks=1.0,
        scheduler="sequential",
        n_workers=1,
        seconds=20.0,
        seed=3,
        env_kwargs={"n": 16, "p_minimax": p},
    )
    warm = bench.warmup_ticks(1.0)
    est = delay_regret_estimate(log, warmup_ticks=warm)
    assert set(log["delay"][(log["source"] == SOURCE_AGENT) & (log["tick"] > warm)].tolist()) == {1}
    assert est.n > 1000 and est.value == 0.0
    assert predicted_delay_regret_per_step(log, p, warmup_ticks=warm) == 0.0
    assert theory.delay_regret_per_step(p, theory.lag_transitions(1)) == 0.0
    assert eq4_delay_regret_per_step(p, 1) == 0.5  # the paper's timing: one transition more
    with pytest.raises(ValueError, match="at least 1 tick"):
        theory.lag_transitions(0)


# ----------------------------------------------------------------------------- Equation 2


def test_bandit_mdp_pays_the_best_arm_more_and_hides_it_from_the_observation():
    env = theory.BanditMDP(arms=3, epsilon=0.25, max_steps=50_000)
    obs, info = env.reset(seed=5)
    best = info["best_arm"]
    assert obs.tolist() == [1.0] and 1 <= best <= 3
    pays = {a: np.mean([env.step(a)[1] for _ in range(4000)]) for a in range(4)}
    assert pays[0] == 0.0  # β's noop
    assert pays[best] == pytest.approx(0.75, abs=0.03)
    assert all(pays[a] == pytest.approx(0.5, abs=0.03) for a in (1, 2, 3) if a != best)
    assert [env.gap(a) for a in range(4)] == [0.75] + [0.0 if a == best else 0.25 for a in (1, 2, 3)]
    bests = {theory.BanditMDP(arms=3).reset(seed=s)[1]["best_arm"] for s in range(40)}
    assert bests == {1, 2, 3}  # drawn from the seed, every arm possible


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"arms": 1}, "arms must be >= 2"),
        ({"epsilon": 0.0}, "epsilon must be in"),
        ({"epsilon": 0.6}, "epsilon"),
        ({"arms": 2.0}, "arms must be an int"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bandit_mdp_rejects_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        theory.BanditMDP(**kwargs)


def test_eq2_arithmetic():
    assert learned_fraction(1, 4 * TAU_M, TAU_M) == 0.25
    assert learned_fraction(3, 4 * TAU_M, TAU_M) == 0.75 and learned_fraction(4, 4 * TAU_M, TAU_M) == 1.0
    # Δ_pace(f·T)/f: a learner that learns from half the steps pays the keep-pace regret at T/2, twice
    curve = np.sqrt(np.arange(1, 101, dtype=float))
    assert rescaled_regret(curve, 0.5, 100) == pytest.approx(2 * math.sqrt(50))
    assert rescaled_regret(curve, 1.0, 100) == curve[-1]
    assert rescaled_regret(curve, 0.25, 2) == pytest.approx(2.0)  # below the first step: linear from 0
    assert eq2_hard_epsilon(4, 100) == 0.05 and eq2_hard_epsilon(16, 1) == 0.5
    assert eq2_lower_bound(4, 100) == 1.0 and eq2_lower_bound(100, 4) == 0.2  # min(√(KT), T)/20
    log = TickLog(TAU_M)
    for t, (source, action) in enumerate([(1, 1), (0, 0), (1, 2), (1, 1)], start=1):
        log.append(tick=t, deadline=t * TAU_M, time=t * TAU_M, source=source, action=action)
    assert learning_regret_curve(log, [0.5, 0.0, 0.1]).tolist() == [0.0, 0.1, 0.1]  # β's tick is inaction
    with pytest.raises(ValueError, match="outside gap_by_action"):
        learning_regret_curve(log, [0.5, 0.0])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: learned_fraction(0, 1.0, 1.0), ValueError, "n_learners"),
        (lambda: learned_fraction(1, 0.0, 1.0), ValueError, "tau_l"),
        (lambda: rescaled_regret([1.0, 2.0], 0.0, 2), ValueError, "fraction"),
        (lambda: rescaled_regret([1.0, 2.0], 0.5, 3), ValueError, "steps"),
        (lambda: rescaled_regret([], 0.5, 1), ValueError, "curve"),
        (lambda: eq2_lower_bound(1, 10), ValueError, "arms"),
        (lambda: learning_regret_curve(hand_log([(1, 0.0, 1)]), [-1.0]), ValueError, "gap_by_action"),
    ],
)
def test_eq2_bad_inputs_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bandit_learner_is_ucb1():
    lr = regretlearn.BanditLearner(3)
    for arm, reward in ((0, 1.0), (1, 0.0), (2, 0.0)):
        assert lr.choose() == arm  # every arm once, lowest first
        lr.learn(arm, reward)
    assert lr.choose() == 0 and lr.learned == 3  # the only arm that paid
    for _ in range(200):  # with enough pulls each, the arm that keeps paying wins
        lr.learn(0, 0.0), lr.learn(1, 1.0), lr.learn(2, 0.0)
    assert lr.choose() == 1 and lr.learned == 603


def test_learners_that_fall_behind_skip_transitions_and_pay_the_rescaled_regret():
    """Equation 2's assumption 4 realised and broken on the virtual clock: N_L = 1 learner with
    τ_L = τ_M learns from every transition, with τ_L = 4·τ_M from one in four (the rest are counted,
    never learned from); the behind learner pays about Δ_pace(T/4)·4, well above Δ_pace(T)."""
    steps, seeds = 3000, 6
    pace = [
        regretlearn.measure_learning(arms=4, epsilon=0.1, n_learners=1, tau_l_ticks=1.0, steps=steps, seed=s)
        for s in range(seeds)
    ]
    behind = [
        regretlearn.measure_learning(arms=4, epsilon=0.1, n_learners=1, tau_l_ticks=4.0, steps=steps, seed=s)
        for s in range(seeds)
    ]
    for out in pace:
        assert out["skipped"] == 0 and out["taken"] >= out["transitions"] - 2
        assert out["inaction_fraction"] == 0.0 and out["delay_mean_ticks"] == 1.0
    for out in behind:
        assert out["skipped"] / (out["skipped"] + out["taken"]) == pytest.approx(0.75, abs=0.002)
    final_pace = np.array([o["curve"][-1] for o in pace])
    final_behind = np.array([o["curve"][-1] for o in behind])
    predicted = np.array([rescaled_regret(o["curve"], 0.25, steps) for o in pace])
    diff = final_behind - predicted
    se = diff.std(ddof=1) / math.sqrt(seeds)
    assert abs(diff.mean()) <= 3 * se + 5.0
    gap = final_behind - final_pace
    assert gap.mean() > 3 * gap.std(ddof=1) / math.sqrt(seeds)  # falling behind costs regret


def test_bench_eq2_rejects_bad_arguments():
    with pytest.raises(ValueError, match="--learn-seeds"):
        bench.run(
            _bench_args(["--quick", "--ticks", "1", "--seconds", "1", "--delay-seconds", "1", "--learn-seeds", "1"])
        )
    with pytest.raises(ValueError, match="epsilon"):
        bench.run(
            _bench_args(["--quick", "--ticks", "1", "--seconds", "1", "--delay-seconds", "1", "--epsilon", "0.7"])
        )


# ----------------------------------------------------------------------------- Equation 1


def test_regret_split_on_a_hand_built_log():
    """β ticks lose the undelayed rate (β earns 0 here), agent ticks what they fall short of it, and
    the policy itself what it lacks of the optimum; the three add up to the regret."""
    s = regret_split([0.0, 1.0, 0.5, 0.0], [False, True, True, False], optimal_rate=1.0, undelayed_rate=0.8)
    assert s.ticks == 4 and s.inaction_fraction == 0.5 and s.reward_per_tick == pytest.approx(0.375)
    assert (s.learning, s.inaction, s.delay) == pytest.approx((0.2, 0.4, (0.8 - 1.0 + 0.8 - 0.5) / 4))
    assert s.regret == pytest.approx(0.625)
    log = hand_log([(0, 0.0, -1), (SOURCE_AGENT, 1.0, 2), (SOURCE_AGENT, 0.5, 2), (0, 0.0, -1)])
    assert tick_log_regret_split(log, optimal_rate=1.0, undelayed_rate=0.8) == s
    assert tick_log_regret_split(log, optimal_rate=1.0, undelayed_rate=0.8, warmup_ticks=1, end_tick=3).ticks == 2
    empty = regret_split([], [], optimal_rate=1.0, undelayed_rate=1.0)
    assert empty.ticks == 0 and math.isnan(empty.regret)
    with pytest.raises(ValueError, match="one entry per tick"):
        regret_split([1.0, 0.0], [True], optimal_rate=1.0, undelayed_rate=1.0)
    with pytest.raises(ValueError, match="undelayed_rate must be a finite reward"):
        regret_split([1.0], [True], optimal_rate=1.0, undelayed_rate=math.inf)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.floats(-5, 5), st.booleans()), min_size=1, max_size=60),
    optimal=st.floats(-5, 5),
    undelayed=st.floats(-5, 5),
)
def test_regret_split_terms_add_up_and_follow_the_ticks(rows, optimal, undelayed):
    rewards, agent = [r for r, _ in rows], [a for _, a in rows]
    s = regret_split(rewards, agent, optimal_rate=optimal, undelayed_rate=undelayed)
    assert s.learning + s.inaction + s.delay == pytest.approx(s.regret, abs=1e-9)
    beta = [r for r, a in rows if not a]
    assert s.inaction == pytest.approx(sum(undelayed - r for r in beta) / len(rows), abs=1e-9)
    assert s.inaction_fraction == len(beta) / len(rows)


class _SometimesRandom(Policy):
    """The observed-state policy that, with probability ``epsilon``, answers a uniformly random state's
    action instead: a policy with its own shortfall (Equation 1's learning term) on `DelayCycleMDP`."""

    def __init__(self, space: spaces.Discrete, epsilon: float, seed: int) -> None:
        self.inner, self.epsilon = ObservedStatePolicy(space), epsilon
        self.action_space, self.rng = space, np.random.default_rng(seed)

    def act(self, obs):
        if self.rng.random() < self.epsilon:
            return Decision(int(self.rng.integers(1, self.action_space.n)))
        return self.inner.act(obs)


def _cycle_run(tau_ticks: float, scheduler: str, n: int, *, seed: int, seconds: float, p: float, epsilon: float):
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.policies import Constant, LatencyPolicy
    from nonstop.realtime.host import Session

    kwargs = {"n": 64, "p_minimax": p, "max_steps": 10**9}
    with Session("theory/delay-cycle", clock="virtual", seed=seed, env_kwargs=kwargs) as world:
        latency = Constant(tau_ticks * world.tau_m)
        pool = InferencePool(
            world,
            lambda i: LatencyPolicy(_SometimesRandom(world.action_space, epsilon, seed * 100 + i), latency),
            make_scheduler(scheduler, n),
        ).start()
        try:
            world.run_for(bench.warmup_ticks(tau_ticks) * world.tau_m + seconds)
        finally:
            pool.stop()
    log, warm = world.tick_log, bench.warmup_ticks(tau_ticks)
    rewards = log["reward"][log["tick"] > warm]
    return log, warm, float(rewards.mean()), batch_means_stderr(rewards)


def test_equation_1_the_three_terms_measured_apart_sum_to_the_regret():
    """Equation 1 on `DelayCycleMDP` (p = 0.8) with a policy that errs 30 % of the time, each term
    measured in its own run (own seed) and the sum held to the regret of a fourth:

    * learning: the optimum (1) less the policy acting at every tick undelayed (τ_θ = 1 tick, d = 1);
    * inaction: Remark 1's share of β ticks for one worker at τ_θ = 3 ticks (2/3) × what a β tick
      loses against that undelayed rate (β earns 0);
    * delay: the per-step loss at d = 3 ticks measured with no inaction (3 staggered workers), × the
      share of agent ticks (1/3);
    * measured: one sequential worker at τ_θ = 3 ticks, which pays all three at once.

    The sum must match within 3 combined standard errors (batch means), each run's below 0.012 so the
    check has teeth. The undelayed rate cancels in the sum (1 − u + ⅔u + ⅓(u − s) = 1 − ⅓s): what is
    held is that β's share is Equation 3's and that an agent action costs the same delay whether or
    not β ticks surround it; either failing would miss by more."""
    p, eps, seconds = 0.8, 0.3, 150.0
    _, _, undelayed, _ = _cycle_run(1.0, "sequential", 1, seed=11, seconds=seconds, p=p, epsilon=eps)
    _, _, delayed, se_d = _cycle_run(3.0, "max_time", 3, seed=12, seconds=seconds, p=p, epsilon=eps)
    log, warm, reward, se = _cycle_run(3.0, "sequential", 1, seed=13, seconds=seconds, p=p, epsilon=eps)
    assert max(se_d, se) < 0.012
    beta_share = 1 - 1 / 3  # Remark 1 (Eq. 3): one action every 3 ticks
    learning, inaction, delay = 1.0 - undelayed, beta_share * undelayed, (1 - beta_share) * (undelayed - delayed)
    assert learning > 0.2 and inaction > 0.4 and delay > 0.05  # all three terms count here
    regret = 1.0 - reward
    error = 3 * math.sqrt(((1 - beta_share) * se_d) ** 2 + se**2)  # the sum does not depend on u (above)
    assert abs(learning + inaction + delay - regret) <= error
    # the same run split by `regret_split`, read against the undelayed rate, gives the same terms
    split = tick_log_regret_split(log, optimal_rate=1.0, undelayed_rate=undelayed, warmup_ticks=warm)
    assert split.inaction_fraction == pytest.approx(beta_share, abs=0.002)
    assert split.inaction == pytest.approx(inaction, abs=0.01) and split.delay == pytest.approx(
        delay, abs=3 * se + 0.01
    )
