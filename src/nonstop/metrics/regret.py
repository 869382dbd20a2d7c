"""Realtime regret measured from the tick log, next to Theorem 1's closed forms.

Riemer et al. (ICLR 2025), Theorem 1, proved in Appendix B.2 with two worst-case MDPs
(`nonstop.envs.theory`):

* **Equation 1, the split.** Regret against the world's optimum is the sum of learning (the policy
  itself against the optimum), inaction (β's ticks) and delay (the agent's ticks against the same
  policy acting undelayed): `regret_split`, from one run's rewards.
* **Equation 3, inaction.** On `InactionMDP` an agent tick earns 1 and a β tick earns 0, so the
  regret rate is ``(optimal reward − achieved reward) / duration``; a sequential agent with
  inference time τ_θ loses ``(τ̄_θ − τ̄_M)/(τ̄_M·τ̄_θ)`` per second (`eq3_inaction_regret_rate`).
* **Equation 2, learning.** ``Δ_learn(τ) ∈ Ω(√(τ/τ̄_I))`` (Appendix B.2): the Ω(√𝒯) regret of
  learning over 𝒯 steps, with 𝒯 = τ/τ̄_I *because* asynchronous learning learns from every
  interaction (assumption 4). The content that can be measured is that ``Δ_learn`` is a function
  of the transitions *learned from*, not of seconds: when learning falls behind (``N_L < N_L* =
  ⌈τ̄_L/τ_M⌉``) only a fraction ``f = N_L·τ_M/τ̄_L`` of transitions is learned from
  (`learned_fraction`) and the learner's policy after ``T`` steps is the keep-pace learner's after
  ``f·T``, each kept for ``1/f`` steps, so ``Δ_behind(T) = Δ_pace(f·T)/f`` (`rescaled_regret`),
  which is ``√(T/f)`` on the √ law. `learning_regret_curve` measures ``Δ_learn`` from the tick log;
  `eq2_lower_bound` is the bound's constant on its bandit (`nonstop.envs.theory.BanditMDP`).
* **Equation 4, delay.** On `DelayCycleMDP` the right action follows a drifting state, so an action
  computed ``k`` transitions ago is right with probability ``p_minimax**k``: regret per agent step
  ``1 − p_minimax**k`` with ``k = ⌈τ_θ/τ_M⌉`` (`eq4_delay_regret_per_step`).

Everything here is numbers in, numbers out: measurements are computed from the tick-log columns
(docs/design.md §1.8), never from counters. Standard errors use batch means, because consecutive ticks are
correlated (a state that stays put makes several delayed actions right in a row).

A note on ``k`` in the host. The observation published at tick ``t`` is the state *after* step
``t``, and the action applied at tick ``t + d`` meets the state after step ``t + d − 1``: an action
with delay ``d`` (the tick log's ``delay`` column) is ``d − 1`` transitions late. On the virtual
clock τ_θ = k ticks gives ``d = k``, so the measured delay regret is ``1 − p**(k−1)``, one factor
of ``p`` below Equation 4 at ``⌈τ_θ/τ_M⌉``. The paper's model lets the world move once more while
the agent thinks. `predicted_delay_regret_per_step` gives the host's exact expectation.

>>> from nonstop.realtime.ticklog import TickLog, SOURCE_AGENT, SOURCE_DEFAULT
>>> log = TickLog(tau_m=0.5)
>>> for t, agent in enumerate([1, 0, 1, 0], start=1):  # every other tick is β's
...     log.append(tick=t, deadline=t / 2, time=t / 2, source=agent, delay=2 if agent else -1,
...                reward=float(agent))
>>> inaction_regret_rate(log, 1.0)        # 2 of 4 reward units lost in 2 s
1.0
>>> eq3_inaction_regret_rate(tau_theta=1.0, tau_m=0.5)   # acting every 2nd tick: the same
1.0
>>> delay_regret_per_step(log)            # both agent ticks earned their 1
0.0
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces

from nonstop.envs.theory import delay_regret_per_step as eq4_delay_regret_per_step
from nonstop.envs.theory import inaction_regret_rate as eq3_inaction_regret_rate
from nonstop.policies.base import Decision, Policy
from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog

__all__ = [
    "RegretEstimate",
    "RegretSplit",
    "regret_split",
    "tick_log_regret_split",
    "inaction_regret_rate",
    "inaction_regret_estimate",
    "delay_regret_per_step",
    "delay_regret_estimate",
    "predicted_delay_regret_per_step",
    "batch_means_stderr",
    "eq3_inaction_regret_rate",
    "eq4_delay_regret_per_step",
    "ObservedStatePolicy",
    "DEFAULT_BATCHES",
    "learned_fraction",
    "learning_regret_curve",
    "rescaled_regret",
    "eq2_lower_bound",
    "eq2_hard_epsilon",
]

#: Batches for batch-means standard errors: enough for a stable spread, each still long
#: next to the correlation time of the theory MDPs.
DEFAULT_BATCHES = 20


class RegretEstimate(NamedTuple):
    """A measured regret with its batch-means standard error over ``n`` samples (ticks or steps)."""

    value: float
    stderr: float
    n: int


# ----------------------------------------------------------------------------- validation


def _check_log(log: Any) -> TickLog:
    if not isinstance(log, TickLog):
        raise TypeError(f"log must be a nonstop TickLog, got {type(log).__name__}")
    return log


def _check_warmup(warmup_ticks: Any) -> int:
    if isinstance(warmup_ticks, bool) or not isinstance(warmup_ticks, numbers.Integral) or warmup_ticks < 0:
        raise ValueError(f"warmup_ticks must be an int >= 0, got {warmup_ticks!r}")
    return int(warmup_ticks)


def _check_reward(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite reward per tick, got {value!r}")
    return float(value)


def _check_probability(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"p_minimax must be a probability in [0, 1], got {p!r}")
    return float(p)


# ----------------------------------------------------------------------------- statistics


def batch_means_stderr(values: Any, n_batches: int = DEFAULT_BATCHES) -> float:
    """Standard error of ``mean(values)`` for a correlated series, by batch means.

    The series is cut into ``n_batches`` consecutive batches (the remainder at the end is left out
    of the spread); the spread of the batch means over ``sqrt(n_batches)`` is the standard error.
    NaN when fewer than two batches of at least one value exist.

    >>> batch_means_stderr([1.0, 1.0, 1.0, 1.0])
    0.0
    >>> round(batch_means_stderr([0, 1, 0, 1, 1, 1, 0, 0], n_batches=4), 4)
    0.2041
    """
    if isinstance(n_batches, bool) or not isinstance(n_batches, numbers.Integral) or n_batches < 2:
        raise ValueError(f"n_batches must be an int >= 2, got {n_batches!r}")
    x = np.asarray(values, dtype=np.float64).ravel()
    b = min(int(n_batches), x.size)
    if b < 2:
        return float("nan")
    m = x.size // b
    means = x[: b * m].reshape(b, m).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(b))


# ----------------------------------------------------------------------------- Equation 1


class RegretSplit(NamedTuple):
    """Equation 1 measured over ``ticks`` ticks, per tick: ``regret = learning + inaction + delay``.

    ``regret`` is the world's optimal reward per tick less the reward earned; ``learning`` what the
    policy itself lacks (the optimum less the same policy acting at every tick with no delay,
    ``undelayed``); ``inaction`` what the β ticks lose against ``undelayed``; ``delay`` what the agent's
    own ticks lose against it (its actions met a world that had moved)."""

    reward_per_tick: float
    regret: float
    learning: float
    inaction: float
    delay: float
    inaction_fraction: float
    ticks: int


def regret_split(rewards: Any, agent: Any, *, optimal_rate: float, undelayed_rate: float) -> RegretSplit:
    """Split the regret of one run into Equation 1's three terms (`RegretSplit`), from each tick's
    reward and whether the agent (True) or β (False) acted on it. ``optimal_rate``: the world's best
    reward per tick; ``undelayed_rate``: the same policy's when it acts at every tick with no delay.
    The terms add up to the regret by construction; what can fail is each term against its own law
    (Equations 3 and 4, ``tests/test_regret.py``). NaN figures for no ticks.

    >>> s = regret_split([1, 0, 1, 0.5], [True, False, True, True], optimal_rate=1.0, undelayed_rate=0.9)
    >>> [round(x, 3) for x in (s.regret, s.learning, s.inaction, s.delay)], s.inaction_fraction
    ([0.375, 0.1, 0.225, 0.05], 0.25)
    """
    r = np.asarray(rewards, dtype=np.float64).ravel()
    a = np.asarray(agent, dtype=bool).ravel()
    if r.shape != a.shape:
        raise ValueError(f"rewards and agent must have one entry per tick, got {r.size} and {a.size}")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    optimal = _check_reward("optimal_rate", optimal_rate)
    undelayed = _check_reward("undelayed_rate", undelayed_rate)
    n = int(r.size)
    if not n:
        nan = float("nan")
        return RegretSplit(nan, nan, optimal - undelayed, nan, nan, nan, 0)
    shortfall = undelayed - r
    return RegretSplit(
        reward_per_tick=float(r.mean()),
        regret=float(optimal - r.mean()),
        learning=optimal - undelayed,
        inaction=float(shortfall[~a].sum() / n),
        delay=float(shortfall[a].sum() / n),
        inaction_fraction=float((~a).mean()),
        ticks=n,
    )


def tick_log_regret_split(
    log: TickLog, *, optimal_rate: float, undelayed_rate: float, warmup_ticks: int = 0, end_tick: int | None = None
) -> RegretSplit:
    """`regret_split` over the ticks of ``log`` after ``warmup_ticks`` (and up to ``end_tick``)."""
    log = _check_log(log)
    tick = log["tick"]
    keep = tick > _check_warmup(warmup_ticks)
    if end_tick is not None:
        keep &= tick <= end_tick
    return regret_split(
        log["reward"][keep],
        log["source"][keep] == SOURCE_AGENT,
        optimal_rate=optimal_rate,
        undelayed_rate=undelayed_rate,
    )


# ----------------------------------------------------------------------------- Equation 3


def _inaction_series(log: TickLog, optimal_rate_per_tick: float, warmup_ticks: int) -> np.ndarray:
    """Regret per second contributed by each kept tick: (optimal − achieved reward) / τ_M."""
    keep = log["tick"] > warmup_ticks
    return (optimal_rate_per_tick - log["reward"][keep]) / log.tau_m


def inaction_regret_rate(log: TickLog, optimal_rate_per_tick: float = 1.0, *, warmup_ticks: int = 0) -> float:
    """Measured regret per second: ``(optimal − achieved reward) / duration`` over the ticks after
    ``warmup_ticks`` (duration = ticks · τ_M). Compare with `eq3_inaction_regret_rate`.

    ``optimal_rate_per_tick`` is the reward per tick of the oracle that acts every tick (1 on
    `InactionMDP`). On that MDP the result is the number of β ticks per second. NaN if no tick is
    left after warm-up.
    """
    log = _check_log(log)
    series = _inaction_series(
        log, _check_reward("optimal_rate_per_tick", optimal_rate_per_tick), _check_warmup(warmup_ticks)
    )
    return float(series.mean()) if series.size else float("nan")


def inaction_regret_estimate(
    log: TickLog,
    optimal_rate_per_tick: float = 1.0,
    *,
    warmup_ticks: int = 0,
    n_batches: int = DEFAULT_BATCHES,
) -> RegretEstimate:
    """`inaction_regret_rate` with its batch-means standard error (``n`` = ticks used)."""
    log = _check_log(log)
    series = _inaction_series(
        log, _check_reward("optimal_rate_per_tick", optimal_rate_per_tick), _check_warmup(warmup_ticks)
    )
    value = float(series.mean()) if series.size else float("nan")
    return RegretEstimate(value, batch_means_stderr(series, n_batches), int(series.size))


# ----------------------------------------------------------------------------- Equation 4


def _agent_mask(log: TickLog, warmup_ticks: int) -> np.ndarray:
    return (log["tick"] > warmup_ticks) & (log["source"] == SOURCE_AGENT)


def delay_regret_per_step(log: TickLog, optimal_reward_per_step: float = 1.0, *, warmup_ticks: int = 0) -> float:
    """Measured regret per agent-applied step: ``optimal − mean reward over agent ticks``.

    On `DelayCycleMDP` (optimal 1 per step) this is the share of agent actions that met a state the
    agent did not see. β ticks are left out: their cost is inaction, not delay (Theorem 1 keeps the
    terms apart). NaN if no agent tick is left after warm-up. Compare with
    `eq4_delay_regret_per_step` and `predicted_delay_regret_per_step`.
    """
    return delay_regret_estimate(log, optimal_reward_per_step, warmup_ticks=warmup_ticks).value


def delay_regret_estimate(
    log: TickLog,
    optimal_reward_per_step: float = 1.0,
    *,
    warmup_ticks: int = 0,
    n_batches: int = DEFAULT_BATCHES,
) -> RegretEstimate:
    """`delay_regret_per_step` with its batch-means standard error (``n`` = agent steps used)."""
    log = _check_log(log)
    optimal = _check_reward("optimal_reward_per_step", optimal_reward_per_step)
    rewards = log["reward"][_agent_mask(log, _check_warmup(warmup_ticks))]
    if not rewards.size:
        return RegretEstimate(float("nan"), float("nan"), 0)
    series = optimal - rewards
    return RegretEstimate(float(series.mean()), batch_means_stderr(series, n_batches), int(series.size))


def predicted_delay_regret_per_step(log: TickLog, p_minimax: float, *, warmup_ticks: int = 0) -> float:
    """What `DelayCycleMDP` should cost the best delayed policy, given the delays in ``log``.

    An action applied with delay ``d`` ticks meets the state ``d − 1`` transitions after the one it
    was computed from (module docstring), so the expectation is the mean over agent ticks of
    Equation 4 at that lag, ``1 − p_minimax**(d − 1)`` (exact while the lag is below the cycle
    length ``n``). NaN if no agent tick is left after warm-up.

    >>> from nonstop.realtime.ticklog import TickLog
    >>> log = TickLog(tau_m=1 / 60)
    >>> for t in (1, 2):
    ...     log.append(tick=t, deadline=t / 60, time=t / 60, source=1, delay=3)
    >>> predicted_delay_regret_per_step(log, 0.5)    # 2 transitions late: 1 − 0.5²
    0.75
    """
    log = _check_log(log)
    p = _check_probability(p_minimax)
    delay = log["delay"][_agent_mask(log, _check_warmup(warmup_ticks))]
    if not delay.size:
        return float("nan")
    lag = delay.astype(np.float64) - 1.0  # `lag_transitions`, vectorised: agent ticks have d >= 1
    return float(np.mean(1.0 - p**lag))


# ----------------------------------------------------------------------------- Equation 2


def _check_positive_seconds(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not (math.isfinite(float(value)) and float(value) > 0)
    ):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def learned_fraction(n_learners: int, tau_l: float, tau_m: float) -> float:
    """Share of transitions ``N_L`` learners learn from when each takes ``τ_L`` per transition and
    the world makes one per ``τ_M``: ``min(1, N_L·τ_M/τ_L)``. It is 1 exactly when ``N_L ≥ N_L* =
    ⌈τ_L/τ_M⌉`` (the paper's N_L*, §5.3), Equation 2's assumption 4.

    >>> learned_fraction(1, 4 / 60, 1 / 60), learned_fraction(4, 4 / 60, 1 / 60)
    (0.25, 1.0)
    """
    if isinstance(n_learners, bool) or not isinstance(n_learners, numbers.Integral) or n_learners < 1:
        raise ValueError(f"n_learners must be an int >= 1, got {n_learners!r}")
    tau_l = _check_positive_seconds("tau_l", tau_l)
    tau_m = _check_positive_seconds("tau_m", tau_m)
    return min(1.0, int(n_learners) * tau_m / tau_l)


def learning_regret_curve(log: TickLog, gap_by_action: Any) -> np.ndarray:
    """Cumulative learning regret after each agent step: ``Σ gap(a)`` over the agent ticks, in order.

    ``gap_by_action[a]`` is the expected regret of taking action ``a`` once (on `BanditMDP`, 0 for
    the best arm, ε for the others). β ticks are left out: their cost is inaction, not learning
    (Theorem 1 keeps the terms apart). Using the expected gap of the chosen action rather than the
    reward drawn (pseudo-regret) removes the reward noise and leaves the learner's own.

    >>> from nonstop.realtime.ticklog import TickLog
    >>> log = TickLog(tau_m=1 / 60)
    >>> for t, a in enumerate([1, 2, 0, 2], start=1):
    ...     log.append(tick=t, deadline=t / 60, time=t / 60, source=int(a != 0), action=a)
    >>> learning_regret_curve(log, [0.6, 0.1, 0.0]).tolist()   # arm 2 is best; β's tick is left out
    [0.1, 0.1, 0.1]
    """
    log = _check_log(log)
    gaps = np.asarray(gap_by_action, dtype=np.float64)
    if gaps.ndim != 1 or not gaps.size or not np.all(np.isfinite(gaps)) or np.any(gaps < 0):
        raise ValueError(f"gap_by_action must be a non-empty 1-D array of finite gaps >= 0, got {gap_by_action!r}")
    actions = log["action"][log["source"] == SOURCE_AGENT]
    if not np.all(np.isfinite(actions)):
        raise ValueError("learning_regret_curve needs Discrete actions (the log has vector actions)")
    index = actions.astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= gaps.size):
        raise ValueError(f"an applied action lies outside gap_by_action (0..{gaps.size - 1}): {int(index.max())}")
    return np.cumsum(gaps[index])


def rescaled_regret(curve: Any, fraction: float, steps: int) -> float:
    """Equation 2 read in transitions learned from: the regret after ``steps`` agent steps of a learner
    that learns from a ``fraction`` f of them, predicted from the cumulative regret ``curve`` of the
    same learner keeping pace: ``curve(f·steps)/f`` (linear between steps; ``curve[i]`` is the regret
    after ``i + 1`` steps). Its policy after ``n`` steps is the keep-pace one after ``f·n``, held
    for ``1/f`` steps.

    >>> rescaled_regret([1.0, 2.0, 2.5, 3.0], 0.5, 4)   # keep-pace regret after 2 steps, twice over
    4.0
    >>> rescaled_regret([1.0, 2.0, 2.5, 3.0], 1.0, 3)
    2.5
    """
    c = np.asarray(curve, dtype=np.float64)
    if c.ndim != 1 or not c.size:
        raise ValueError("curve must be a non-empty 1-D array of cumulative regrets")
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or not 1 <= steps <= c.size:
        raise ValueError(f"steps must be an int in [1, {c.size}] (the curve's length), got {steps!r}")
    x = fraction * int(steps)  # learned steps, a real number
    at = np.interp(x, np.arange(1, c.size + 1, dtype=np.float64), c, left=float(c[0]) * x)
    return float(at / fraction)


def eq2_hard_epsilon(arms: int, steps: int) -> float:
    """The gap of the bandit behind Equation 2's Ω(√T) for a horizon of ``steps``: ``¼·√(K/T)``
    (Auer et al. 2002, Thm 5.1), at most ½.

    >>> eq2_hard_epsilon(4, 400)
    0.025
    """
    if isinstance(arms, bool) or not isinstance(arms, numbers.Integral) or arms < 2:
        raise ValueError(f"arms must be an int >= 2, got {arms!r}")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    return min(0.5, 0.25 * math.sqrt(arms / steps))


def eq2_lower_bound(arms: int, steps: int) -> float:
    """Equation 2's worst case with its constant: no learner's expected regret over ``steps`` steps on
    the ``arms``-armed bandit with gap `eq2_hard_epsilon` (best arm drawn uniformly) is below
    ``min(√(K·T), T)/20`` (Auer et al. 2002, Thm 5.1). Equation 2 writes it ``Ω(√(τ/τ̄_I))``.

    >>> eq2_lower_bound(4, 400)
    2.0
    """
    eq2_hard_epsilon(arms, steps)  # validates both
    return min(math.sqrt(arms * steps), steps) / 20.0


# ----------------------------------------------------------------------------- the best delayed policy


class ObservedStatePolicy(Policy):
    """The best policy on `DelayCycleMDP` that sees only its (delayed) observation.

    The observation is the one-hot state ``s_i`` (index ``i − 1``); the policy answers ``a_i``,
    i.e. ``argmax(obs) + 1`` (action 0 is β's). On a long cycle no later state is likelier than the
    observed one, so no delayed policy does better (Appendix B.2).

    >>> p = ObservedStatePolicy(spaces.Discrete(5))
    >>> p.act(np.array([0, 0, 1, 0], np.float32))
    Decision(action=3, latency=0.0)
    >>> ObservedStatePolicy(spaces.Box(0, 1, (2,)))
    Traceback (most recent call last):
    ...
    TypeError: ObservedStatePolicy needs a Discrete action space (a_0 = β's, a_i for s_i), got Box(0.0, 1.0, (2,), float32)
    """

    action_space: spaces.Discrete

    def __init__(self, action_space: gymnasium.Space) -> None:
        if not isinstance(action_space, spaces.Discrete):
            raise TypeError(
                f"ObservedStatePolicy needs a Discrete action space (a_0 = β's, a_i for s_i), got {action_space}"
            )
        if action_space.n < 2 or action_space.start != 0:
            raise ValueError(f"ObservedStatePolicy needs Discrete(n + 1) with n >= 1 states, got {action_space}")
        self.action_space = action_space

    def act(self, obs: np.ndarray) -> Decision:
        x = np.asarray(obs)
        if x.ndim != 1 or x.size + 1 != self.action_space.n:
            raise ValueError(f"expected a one-hot observation of {self.action_space.n - 1} states, got shape {x.shape}")
        return Decision(int(np.argmax(x)) + 1)
