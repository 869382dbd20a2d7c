"""Equation 2 of ``nonstop bench regret``: learning regret when learners fall behind, on `BanditMDP`
with UCB1 learners that take τ_L per transition, and on CartPole with nonstop's DQN."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "BanditLearner",
    "EQ2_SETTINGS",
    "NEVER_TRUNCATE",
    "PASS_Z",
    "agrees",
    "learning_rows",
    "measure_learning",
    "real_env_learning",
]

#: a row passes a convention when the measured delay regret is within this many standard errors
PASS_Z = 3.0

#: the worlds here never truncate an episode (the theorem is about a continuing world)
NEVER_TRUNCATE = 10**12


def agrees(measured: float, expected: float, stderr: float) -> bool:
    """Within `PASS_Z` standard errors (exact when there is no spread)."""
    se = stderr if math.isfinite(stderr) else 0.0
    return bool(abs(measured - expected) <= PASS_Z * se + 1e-9)


class BanditLearner:
    """UCB1 (Auer et al. 2002) on a one-state bandit: what learners have learned, and the arm to pull.

    ``learn(arm, reward)`` is one learning step on one transition; ``choose()`` is the policy on what
    was learned so far: every arm once (lowest first), then ``argmax mean + √(2·ln n / n_a)`` (ties
    to the lowest arm). Deterministic, so a learner that falls behind repeats its last choice until
    it learns again: its policy after ``n`` learned steps is the keep-pace learner's after ``n``.

    >>> lr = BanditLearner(2)
    >>> lr.choose(), lr.learn(0, 1.0), lr.choose(), lr.learn(1, 0.0), lr.choose()
    (0, None, 1, None, 0)
    """

    def __init__(self, arms: int) -> None:
        if isinstance(arms, bool) or not isinstance(arms, int) or arms < 1:
            raise ValueError(f"arms must be an int >= 1, got {arms!r}")
        self.counts = np.zeros(arms, np.int64)
        self.sums = np.zeros(arms, np.float64)

    @property
    def learned(self) -> int:
        return int(self.counts.sum())

    def learn(self, arm: int, reward: float) -> None:
        self.counts[arm] += 1
        self.sums[arm] += reward

    def choose(self) -> int:
        untried = np.flatnonzero(self.counts == 0)
        if untried.size:
            return int(untried[0])
        index = self.sums / self.counts + np.sqrt(2.0 * math.log(self.learned) / self.counts)
        return int(np.argmax(index))


class _LearnedArmPolicy:
    """The acting policy: the arm `BanditLearner` would pull now (action = arm + 1; 0 is β's)."""

    def __new__(cls, action_space: Any, learner: BanditLearner) -> Any:
        from nonstop.policies.base import Decision, Policy

        class LearnedArmPolicy(Policy):
            def __init__(self) -> None:
                self.action_space = action_space

            def act(self, obs: np.ndarray) -> Decision:
                return Decision(learner.choose() + 1)

        return LearnedArmPolicy()


class _TransitionStream:
    """Host recorder: every agent tick of the bandit is one transition ``(arm, reward)``, in order.

    Learners take the *newest* transition nobody has taken; the older ones left behind are never
    learned from and are counted (`skipped`), so nothing is lost silently."""

    def __init__(self) -> None:
        self.arms: list[int] = []
        self.rewards: list[float] = []
        self.next_free = 0  # first transition neither taken nor skipped
        self.taken = 0
        self.skipped = 0

    def on_observation(self, tick: int, obs: np.ndarray) -> None:
        pass

    def on_tick(
        self,
        tick: int,
        *,
        agent: bool,
        action: Any,
        obs_tick: int,
        reward: float,
        terminated: bool,
        truncated: bool,
        terminal_obs: np.ndarray | None = None,
    ) -> None:
        if agent:
            self.arms.append(int(action) - 1)
            self.rewards.append(float(reward))

    def take_newest(self) -> int | None:
        newest = len(self.arms) - 1
        if newest < self.next_free:
            return None
        self.skipped += newest - self.next_free
        self.taken += 1
        self.next_free = newest + 1
        return newest


def _learner_process(
    clock: Any,
    stream: _TransitionStream,
    learner: BanditLearner,
    *,
    index: int,
    n_learners: int,
    tau_l: float,
    tau_m: float,
    stop: list[bool],
) -> Any:
    """One of ``n_learners`` learners: each takes ``tau_l`` per transition, staggered by ``tau_l/N_L``."""
    t = clock.now() + index * tau_l / n_learners
    yield (t, 3)  # priority 3: after the host's tick at the same instant (priority 1)
    while not stop[0]:
        i = stream.take_newest()
        if i is None:  # nothing new: wait for the next tick's transition
            t = (math.floor(t / tau_m + 1e-9) + 1) * tau_m
            yield (t, 3)
            continue
        t += tau_l
        yield (t, 3)
        learner.learn(stream.arms[i], stream.rewards[i])


def measure_learning(
    *, arms: int, epsilon: float, n_learners: int, tau_l_ticks: float, steps: int, seed: int
) -> dict[str, Any]:
    """One virtual-clock run on `BanditMDP`: one worker with τ_θ = τ_M (an action every tick, computed
    on the newest observation: no inaction, no delay) and ``n_learners`` learners taking
    ``tau_l_ticks`` each per transition. Returns the learning-regret curve over ``steps`` agent steps
    and the learners' counts."""
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.metrics.regret import learning_regret_curve
    from nonstop.policies import Constant, LatencyPolicy
    from nonstop.realtime.clock import VirtualClock
    from nonstop.realtime.host import Session

    stream, learner, stop = _TransitionStream(), BanditLearner(arms), [False]
    kwargs = {"arms": arms, "epsilon": epsilon, "max_steps": NEVER_TRUNCATE}
    with Session("theory/bandit", clock="virtual", seed=seed, env_kwargs=kwargs, recorder=stream) as world:
        tau_m = world.tau_m
        pool = InferencePool(
            world,
            lambda i: LatencyPolicy(_LearnedArmPolicy(world.action_space, learner), Constant(tau_m)),
            make_scheduler("sequential", 1),
        ).start()
        clock = world.clock
        assert isinstance(clock, VirtualClock)  # clock="virtual" above
        for i in range(n_learners):
            clock.spawn(
                _learner_process(
                    clock,
                    stream,
                    learner,
                    index=i,
                    n_learners=n_learners,
                    tau_l=tau_l_ticks * tau_m,
                    tau_m=tau_m,
                    stop=stop,
                ),
                name=f"bandit-learner-{i}",
                priority=3,
            )
        try:
            world.run_for((steps + 4) * tau_m)
        finally:
            stop[0] = True
            pool.stop()
        assert world.host is not None  # a virtual-clock world's host runs in this process
        env: Any = world.host.env.unwrapped  # the bandit MDP (its gap() is not on gymnasium.Env)
        gaps = [env.gap(a) for a in range(arms + 1)]
    curve = learning_regret_curve(world.tick_log, gaps)
    if curve.size < steps:
        raise RuntimeError(f"the bandit run made {curve.size} agent steps, fewer than the {steps} asked for")
    summary = world.tick_log.summary()
    return {
        "curve": curve[:steps],
        "transitions": len(stream.arms),
        "taken": stream.taken,
        "skipped": stream.skipped,
        "inaction_fraction": summary["inaction_fraction"],
        "delay_mean_ticks": summary["delay_mean_ticks"],
    }


#: Eq. 2's learner settings (N_L, τ_L in ticks): keeping pace first (the reference), then behind
#: with f = 1/2, 1/4, 1/8, then slow learners that keep pace in numbers (N_L = N_L* = 4)
EQ2_SETTINGS = ((1, 1.0), (2, 4.0), (1, 4.0), (1, 8.0), (4, 4.0))
#: keys of each Equation 2 row
EQ2_ROW_KEYS = (
    "n_learners",
    "tau_l_ticks",
    "nl_star",
    "learned_fraction_predicted",
    "learned_fraction_measured",
    "never_learned_fraction",
    "learned_fraction_pass",
    "steps",
    "seeds",
    "inaction_fraction",
    "delay_mean_ticks",
    "learning_regret",
    "learning_regret_se",
    "predicted_regret",
    "prediction_error",
    "prediction_error_se",
    "prediction_pass",
    "gap_to_keep_pace",
    "gap_to_keep_pace_se",
    "gap_z",
    "sqrt_law_regret",
)


def _mean_se(values: list[float]) -> tuple[float, float | None]:
    x = np.asarray(values, dtype=np.float64)
    return float(x.mean()), (float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else None)


def learning_rows(*, arms: int, epsilon: float, steps: int, seeds: int, seed: int) -> dict[str, Any]:
    """Equation 2 on `BanditMDP`: one row per learner setting of `EQ2_SETTINGS`, paired over seeds,
    and the Ω(√T) bound on its own hard instance (see the module docstring)."""
    from nonstop.metrics.regret import eq2_hard_epsilon, eq2_lower_bound

    runs = {
        cfg: [
            measure_learning(
                arms=arms, epsilon=epsilon, n_learners=cfg[0], tau_l_ticks=cfg[1], steps=steps, seed=seed + k
            )
            for k in range(seeds)
        ]
        for cfg in EQ2_SETTINGS
    }
    pace = [r["curve"] for r in runs[EQ2_SETTINGS[0]]]
    rows = []
    for (n_l, tau_l), outs in runs.items():
        reference = (n_l, tau_l) == EQ2_SETTINGS[0]  # compared with itself: no check, no gap
        rows.append(_row(n_l, tau_l, outs, pace, steps, reference))
    hard_eps = eq2_hard_epsilon(arms, steps)
    hard_mean, hard_se = _hard_instance(arms, hard_eps, steps, seeds, seed)
    bound = eq2_lower_bound(arms, steps)
    return {
        "rows": rows,
        "arms": arms,
        "epsilon": epsilon,
        "steps": steps,
        "seeds": seeds,
        "learned_fraction_passes": sum(r["learned_fraction_pass"] for r in rows),
        "prediction_passes": sum(bool(r["prediction_pass"]) for r in rows),
        "prediction_checks": sum(r["prediction_pass"] is not None for r in rows),
        "hard_instance": {
            "epsilon": hard_eps,
            "learning_regret": hard_mean,
            "learning_regret_se": hard_se,
            "lower_bound": bound,
            "lower_bound_holds": bool(hard_mean >= bound),
            "regret_over_sqrt_steps": hard_mean / math.sqrt(steps),
        },
    }


def _row(
    n_l: int, tau_l: float, outs: list[dict[str, Any]], pace: list[Any], steps: int, reference: bool
) -> dict[str, Any]:
    """``n_l`` learners of ``tau_l`` ticks over the seeds' runs ``outs``: the fraction of transitions
    learned against Equation 2's, and the regret against the keep-pace curves ``pace`` rescaled."""
    from nonstop.metrics.regret import learned_fraction, rescaled_regret

    tau_m = 1.0 / 60.0
    seeds = len(outs)
    f = learned_fraction(n_l, tau_l * tau_m, tau_m)
    taken, skipped = sum(o["taken"] for o in outs), sum(o["skipped"] for o in outs)
    measured_f = taken / (taken + skipped)
    final = [float(o["curve"][-1]) for o in outs]
    predicted = [rescaled_regret(c, f, steps) for c in pace]
    err, err_se = _mean_se([a - b for a, b in zip(final, predicted)])
    gap, gap_se = _mean_se([a - float(c[-1]) for a, c in zip(final, pace)])
    reg, reg_se = _mean_se(final)
    return {
        "n_learners": n_l,
        "tau_l_ticks": tau_l,
        "nl_star": math.ceil(tau_l - 1e-9),
        "learned_fraction_predicted": f,
        "learned_fraction_measured": measured_f,
        "never_learned_fraction": skipped / (taken + skipped),
        # the last transition or two may still be in a learner's hands when the run ends
        "learned_fraction_pass": bool(abs(measured_f - f) <= 2.0 * n_l * seeds / (taken + skipped) + 1e-9),
        "steps": steps,
        "seeds": seeds,
        "inaction_fraction": float(np.mean([o["inaction_fraction"] for o in outs])),
        "delay_mean_ticks": float(np.mean([o["delay_mean_ticks"] for o in outs])),
        "learning_regret": reg,
        "learning_regret_se": reg_se,
        "predicted_regret": None if reference else float(np.mean(predicted)),
        "prediction_error": None if reference else err,
        "prediction_error_se": None if reference else err_se,
        "prediction_pass": None if reference else agrees(err, 0.0, err_se if err_se is not None else float("nan")),
        "gap_to_keep_pace": None if reference else gap,
        "gap_to_keep_pace_se": None if reference else gap_se,
        "gap_z": (gap / gap_se) if gap_se and not reference else None,
        "sqrt_law_regret": float(np.mean([c[-1] for c in pace])) / math.sqrt(f),
    }


def _hard_instance(arms: int, epsilon: float, steps: int, seeds: int, seed: int) -> tuple[float, float | None]:
    """The learning regret (mean, SE over seeds) of one learner on Equation 2's hard instance."""
    hard = [
        float(
            measure_learning(
                arms=arms, epsilon=epsilon, n_learners=1, tau_l_ticks=1.0, steps=steps, seed=seed + 1000 + k
            )["curve"][-1]
        )
        for k in range(seeds)
    ]
    return _mean_se(hard)


def real_env_learning(*, seconds: float, seed: int) -> dict[str, Any]:
    """Equation 2 on CartPole with nonstop's DQN (`nonstop.experiment.train`, virtual clock, one learner):
    an update per transition (τ_L = τ_M, keeping pace) against one per four (τ_L = 4·τ_M). Measured:
    updates per transition against `learned_fraction` (a check) and the return of the last quarter
    of the run (a measurement: one seed each, so no verdict on the gap)."""
    from nonstop.envs.classic import CARTPOLE_TICK_HZ
    from nonstop.learning.dqn import DQNConfig
    from nonstop.metrics.regret import learned_fraction
    from nonstop.experiment import TrainConfig, train

    tau_m = 1.0 / CARTPOLE_TICK_HZ
    out: dict[str, Any] = {}
    for name, tau_l_ticks in (("keep_pace", 1), ("behind", 4)):
        dqn = DQNConfig.for_family("classic")
        result = train(
            TrainConfig(env="CartPole", seconds=seconds, tau_l=tau_l_ticks * tau_m, seed=seed, algo_settings=dqn)
        )
        log = result["tick_log"]
        ends = log["tick"][(log["terminated"] == 1) | (log["truncated"] == 1)]
        returns = np.asarray(result["episode_returns"], dtype=np.float64)[: ends.size]
        late = returns[ends > 0.75 * result["ticks"]]
        learnable = max(1, result["ticks"] - dqn.learning_starts)
        f = learned_fraction(1, tau_l_ticks * tau_m, tau_m)
        measured = result["updates"] / learnable
        out[name] = {
            "tau_l_ticks": tau_l_ticks,
            "updates": result["updates"],
            "ticks": result["ticks"],
            "updates_per_transition": measured,
            "learned_fraction_predicted": f,
            "learned_fraction_pass": bool(abs(measured - f) <= 0.01),
            "episodes": int(returns.size),
            "last_quarter_mean_return": float(late.mean()) if late.size else None,
            "last_quarter_episodes": int(late.size),
        }
    a, b = out["keep_pace"]["last_quarter_mean_return"], out["behind"]["last_quarter_mean_return"]
    out["return_gap"] = None if a is None or b is None else a - b
    out["seconds"], out["seed"], out["env"] = seconds, seed, "CartPole"
    return out
