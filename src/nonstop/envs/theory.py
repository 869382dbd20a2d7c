"""The two worst-case MDPs from the proof of Theorem 1 (Riemer et al., ICLR 2025, Appendix B.2).

* :class:`InactionMDP` (Equation 3): every tick on which β acts instead of the agent costs one unit
  of reward, so the regret rate is exactly the inaction rate.
* :class:`DelayCycleMDP` (Equation 4): the right action depends on a state that drifts around a
  cycle, so an action computed from a state ``k`` transitions old is right only with probability
  ``p_minimax**k`` (k counts transitions: an action logged with delay ``d`` ticks has ``k = d − 1``).
* ``theory/still``: `DelayCycleMDP` with ``p_minimax = 1`` (`still_cycle`): the state never moves, so
  a late action is as good as a fresh one and only inaction costs reward, the control beside
  ``theory/delay-cycle`` when a scheduler trades delay for fewer β ticks.
* :class:`BanditMDP` (Equation 2): the bandit at the heart of the Ω(√T) learning lower bound that
  Equation 2 extends (Jaksch et al. 2010; Auer et al. 2002): one state, ``K`` arms paying
  Bernoulli(½), one of them, hidden, Bernoulli(½ + ε). Nothing drifts and nothing needs a fast
  answer, so an agent that acts every tick pays no inaction and no delay: all its regret is learning.

Both tick at 60 Hz like Atari, observe a one-hot ``float32`` vector of the state, never terminate
on their own and truncate after ``max_steps`` ticks so that auto-reset paths get exercised. Action 0
is always β's own action (the noop). The closed forms of the bounds are here too, so tests and
plots can put measurement next to theory.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Final

import gymnasium
import numpy as np
from gymnasium import spaces

from .spec import register

__all__ = [
    "InactionMDP",
    "DelayCycleMDP",
    "BanditMDP",
    "check_bandit_args",
    "THEORY_TICK_HZ",
    "delay_regret_per_step",
    "lag_transitions",
    "inaction_regret_rate",
    "check_delay_cycle_args",
    "still_cycle",
    "check_still_args",
]

THEORY_TICK_HZ: Final = 60.0
DEFAULT_MAX_STEPS: Final = 10_000


def inaction_regret_rate(tau_theta: float, tau_m: float) -> float:
    """Worst-case regret per second from inaction of a sequential agent (Equation 3, Remark 1).

    An agent whose inference takes ``tau_theta`` seconds acts on one tick in ``tau_theta / tau_m``;
    in :class:`InactionMDP` every other tick loses one unit of reward, so the regret per second is
    ``(tau_theta - tau_m) / (tau_m * tau_theta)``, and 0 when inference fits in a tick.

    >>> inaction_regret_rate(tau_theta=0.1, tau_m=0.02)   # acts 1 tick in 5: loses 40 of 50 per s
    40.0
    >>> inaction_regret_rate(0.01, 0.02)
    0.0
    """
    _check_positive("tau_theta", tau_theta)
    _check_positive("tau_m", tau_m)
    if tau_theta <= tau_m:
        return 0.0
    return (tau_theta - tau_m) / (tau_m * tau_theta)


def delay_regret_per_step(p_minimax: float, k: int) -> float:
    """Worst-case regret per agent step of an action ``k`` transitions stale (Equation 4): ``1 - p**k``.

    **Convention.** ``k`` is the lag in *transitions*: how many times the world moved between the
    state the action was computed from and the state it is applied in, the paper's "k step lag"
    (Appendix B.2: the state stays put k consecutive steps with probability ``p_minimax**k``).

    * nonstop's host publishes at tick ``t`` the state *after* step ``t`` and applies an action that
      arrives by deadline ``t + d`` at step ``t + d``, i.e. to the state after step ``t + d - 1``: an
      action logged with delay ``d`` ticks has ``k = d - 1`` (`lag_transitions`). A staggered agent
      with constant τ_θ has ``d = ⌈τ_θ/τ_M⌉`` on the virtual clock, so it pays ``1 - p**(⌈τ_θ/τ_M⌉ - 1)``;
      an agent that answers within one tick pays nothing.
    * Equation 4 writes ``k = ⌈τ_θ/τ_M⌉``: the paper's timing lets the world move at every tick of
      the inference *including the one at which the observation was taken*, one transition more
      than nonstop's host imposes. ``nonstop bench regret`` reports both.

    >>> delay_regret_per_step(0.5, 0), delay_regret_per_step(0.5, 2)
    (0.0, 0.75)
    >>> delay_regret_per_step(0.5, lag_transitions(delay_ticks=3))   # logged delay 3: 2 transitions
    0.75
    """
    if isinstance(p_minimax, bool) or not isinstance(p_minimax, numbers.Real):
        raise TypeError(f"p_minimax must be a real number, got {type(p_minimax).__name__} {p_minimax!r}")
    if not 0.0 <= p_minimax <= 1.0:
        raise ValueError(f"p_minimax must be in [0, 1], got {p_minimax!r}")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int (ticks of delay), got {type(k).__name__} {k!r}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return 1.0 - float(p_minimax) ** int(k)


def lag_transitions(delay_ticks: int) -> int:
    """Transitions an action with tick-log delay ``delay_ticks`` (≥ 1) is stale by: ``delay_ticks - 1``
    (see `delay_regret_per_step` for why)."""
    if isinstance(delay_ticks, bool) or not isinstance(delay_ticks, numbers.Integral):
        raise TypeError(f"delay_ticks must be an int, got {type(delay_ticks).__name__} {delay_ticks!r}")
    if delay_ticks < 1:
        raise ValueError(f"an applied action has a delay of at least 1 tick, got {delay_ticks}")
    return int(delay_ticks) - 1


class _OneHotMDP(gymnasium.Env[np.ndarray, np.int64]):
    """What both worst-case MDPs share: ``n_states`` states seen as a one-hot ``float32`` vector,
    ``n_actions`` actions with 0 as β's, a step counter that truncates after ``max_steps``, and
    ``info["state"]``. Subclasses choose the first state and the transition."""

    metadata = {"render_modes": [], "render_fps": THEORY_TICK_HZ}
    NOOP: Final = 0

    def __init__(self, n_states: int, n_actions: int, max_steps: int) -> None:
        _check_max_steps(max_steps)
        self.max_steps: Final = int(max_steps)
        self.observation_space = spaces.Box(0.0, 1.0, (n_states,), np.float32)
        self.action_space = spaces.Discrete(n_actions)
        self._n_actions: Final = n_actions
        self._one_hot: Final = np.eye(n_states, dtype=np.float32)
        self._state_index: int | None = None  # None until the first reset
        self._steps = 0

    @property
    def _state(self) -> int:
        """The current state's index (once the env has been reset)."""
        if self._state_index is None:
            raise RuntimeError("call reset() before step()")
        return self._state_index

    @_state.setter
    def _state(self, value: int) -> None:
        self._state_index = value

    def _initial_state(self) -> int:
        raise NotImplementedError

    def _info(self) -> dict[str, Any]:
        return {"state": self._state}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self._initial_state()
        self._steps = 0
        return self._one_hot[self._state].copy(), self._info()

    def _checked(self, action: Any) -> int:
        """The action as an int, once the env has been reset."""
        if self._state_index is None:
            raise RuntimeError("call reset() before step()")
        return _checked_action(action, self._n_actions)

    def _transition(self, reward: float) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Count the step (the subclass has moved ``_state``) and build ``step``'s answer."""
        self._steps += 1
        truncated = self._steps >= self.max_steps
        return self._one_hot[self._state].copy(), reward, False, truncated, self._info()


class InactionMDP(_OneHotMDP):
    """Equation 3's worst case: acting earns 1 per tick, β's noop earns 0.

    States ``s1`` (index 0) and ``s2`` (index 1); actions ``0 = a3`` (β's noop), ``1 = a1``,
    ``2 = a2``. Either agent action leads to ``s1`` and β's leads to ``s2``; the reward is 1 for a
    transition into ``s1``. The optimal reward rate is 1 per tick and β's is 0, so the regret is the
    number of β ticks. Episodes start in ``s2`` (nobody has acted yet).

    >>> env = InactionMDP(max_steps=3)
    >>> obs, info = env.reset(seed=0)
    >>> obs, info["state"]
    (array([0., 1.], dtype=float32), 1)
    >>> [env.step(a)[1] for a in (1, 0)]   # act, then let β idle
    [1.0, 0.0]
    >>> env.step(2)[1:4]   # third tick of max_steps=3: reward, terminated, truncated
    (1.0, False, True)
    """

    N_STATES: Final = 2

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        super().__init__(self.N_STATES, 3, max_steps)

    def _initial_state(self) -> int:
        return 1  # s2: nobody has acted yet

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        acted = self._checked(action) != self.NOOP
        self._state = 0 if acted else 1
        return self._transition(float(acted))


def check_delay_cycle_args(n: int = 8, p_minimax: float = 0.5, max_steps: int = DEFAULT_MAX_STEPS) -> None:
    """Validate :class:`DelayCycleMDP`'s arguments; shared with the registry's ``env_info``."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an int (number of states), got {type(n).__name__} {n!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if isinstance(p_minimax, bool) or not isinstance(p_minimax, numbers.Real):
        raise TypeError(f"p_minimax must be a real number, got {type(p_minimax).__name__} {p_minimax!r}")
    # The stay probability is the largest next-state probability, and n next states share 1,
    # so it cannot be below 1/n (Appendix B.2). Tolerance lets p_minimax=1/3 through for n=3.
    if not (p_minimax * n >= 1.0 - 1e-9 and p_minimax <= 1.0):
        raise ValueError(f"p_minimax must be in [1/n, 1] = [{1 / n:.6g}, 1] for n={n}, got {p_minimax!r}")
    _check_max_steps(max_steps)


class DelayCycleMDP(_OneHotMDP):
    """Equation 4's worst case: the right action follows a state that drifts around a cycle.

    States ``s_1..s_n`` (indices ``0..n-1``); actions ``0 = a0`` (β's own) and ``i = a_i``. Action
    ``a_i`` in state ``s_i`` earns 1, anything else 0. Then, whatever the action, the state stays with
    probability ``p_minimax`` and otherwise moves to the next state (``s_n`` wraps to ``s_1``). An
    up-to-date agent earns 1 per tick, β earns 0; an action computed from a state ``k`` transitions
    older than the one it is applied in earns ``p_minimax**k`` in expectation (for ``k < n``). The
    observation returned by ``step`` is the state the *next* action is applied in, so an agent acting
    on step ``t``'s observation at step ``t + d`` (a nonstop tick-log delay of ``d``) is ``k = d − 1``
    transitions stale; see `delay_regret_per_step` for how that relates to Equation 4's ``⌈τ_θ/τ_M⌉``.
    ``info["optimal_action"]`` is the rewarded action in the current state.

    >>> env = DelayCycleMDP(n=3, p_minimax=1.0)   # p = 1: the state never moves
    >>> obs, info = env.reset(seed=0)
    >>> right = info["optimal_action"]
    >>> env.step(right)[1], env.step(0)[1], env.step(right)[1]
    (1.0, 0.0, 1.0)
    """

    def __init__(self, n: int = 8, p_minimax: float = 0.5, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        check_delay_cycle_args(n, p_minimax, max_steps)
        super().__init__(int(n), int(n) + 1, max_steps)
        self.n: Final = int(n)
        self.p_minimax: Final = float(p_minimax)

    def _initial_state(self) -> int:
        # No state is special on a cycle, so start anywhere; the seed decides where.
        return int(self.np_random.integers(self.n))

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = 1.0 if self._checked(action) == self._state + 1 else 0.0
        # Draw every tick, even when p_minimax is 1, so one seed gives one random stream.
        if self.np_random.random() >= self.p_minimax:
            self._state = (self._state + 1) % self.n
        return self._transition(reward)

    def _info(self) -> dict[str, Any]:
        return {"state": self._state, "optimal_action": self._state + 1}


def still_cycle(n: int = 8, max_steps: int = DEFAULT_MAX_STEPS) -> DelayCycleMDP:
    """``theory/still``: a `DelayCycleMDP` whose state never moves (``p_minimax = 1``). An action is
    right however late it arrives, so delay costs nothing and a β tick still costs 1: the world in
    which only inaction counts.

    >>> env = still_cycle(n=4)
    >>> obs, info = env.reset(seed=3)
    >>> right = info["optimal_action"]
    >>> [env.step(a)[1] for a in (right, 0, right)], env.step(right)[4]["optimal_action"] == right
    ([1.0, 0.0, 1.0], True)
    """
    return DelayCycleMDP(n, 1.0, max_steps)


def check_still_args(n: int = 8, max_steps: int = DEFAULT_MAX_STEPS) -> None:
    """Validate `still_cycle`'s arguments; shared with the registry's ``env_info``."""
    check_delay_cycle_args(n, 1.0, max_steps)


def check_bandit_args(arms: int = 4, epsilon: float = 0.1, max_steps: int = DEFAULT_MAX_STEPS) -> None:
    """Validate :class:`BanditMDP`'s arguments; shared with the registry's ``env_info``."""
    if isinstance(arms, bool) or not isinstance(arms, numbers.Integral):
        raise TypeError(f"arms must be an int (number of arms), got {type(arms).__name__} {arms!r}")
    if arms < 2:
        raise ValueError(f"arms must be >= 2 (one arm leaves nothing to learn), got {arms}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"epsilon must be a real number, got {type(epsilon).__name__} {epsilon!r}")
    if not 0.0 < epsilon <= 0.5:
        raise ValueError(f"epsilon must be in (0, 0.5] (the best arm pays Bernoulli(1/2 + epsilon)), got {epsilon!r}")
    _check_max_steps(max_steps)


class BanditMDP(_OneHotMDP):
    """Equation 2's worst case: a ``K``-armed Bernoulli bandit, one hidden arm better by ``ε``.

    One state (observation ``[1.0]``); actions ``0`` (β's noop, pays 0) and ``1..K`` (the arms).
    Arm ``a`` pays 1 with probability ``½ + ε`` if it is the best arm, else ``½``. The best arm is
    drawn uniformly at each reset from the env's seed and shown only in ``info["best_arm"]`` (for
    measuring, never for the agent). This is the construction behind the Ω(√T) learning lower
    bound (Auer et al. 2002, Thm 5.1: with ``ε = ¼·√(K/T)`` any learner's expected regret over
    ``T`` steps is at least ``√(KT)/20``), which Jaksch et al. (2010) embed in an MDP and
    Equation 2 carries to realtime. ``gap(a)`` is the expected regret of one pull of ``a``.

    >>> env = BanditMDP(arms=3, epsilon=0.5)    # ε = ½: the best arm always pays, the others half the time
    >>> obs, info = env.reset(seed=1)
    >>> best = info["best_arm"]
    >>> env.step(best)[1], env.gap(best), env.gap(0), env.optimal_mean
    (1.0, 0.0, 1.0, 1.0)
    """

    def __init__(self, arms: int = 4, epsilon: float = 0.1, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        check_bandit_args(arms, epsilon, max_steps)
        super().__init__(1, int(arms) + 1, max_steps)
        self.arms: Final = int(arms)
        self.epsilon: Final = float(epsilon)
        self.optimal_mean: Final = 0.5 + self.epsilon
        self._best = 1

    def _initial_state(self) -> int:
        self._best = 1 + int(self.np_random.integers(self.arms))
        return 0

    def gap(self, action: Any) -> float:
        """Expected regret of one step taking ``action`` (β's noop forgoes the whole ``½ + ε``)."""
        a = _checked_action(action, self._n_actions)
        return self.optimal_mean if a == self.NOOP else (0.0 if a == self._best else self.epsilon)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = self._checked(action)
        mean = 0.0 if a == self.NOOP else (self.optimal_mean if a == self._best else 0.5)
        return self._transition(float(self.np_random.random() < mean))

    def _info(self) -> dict[str, Any]:
        return {"state": self._state, "best_arm": self._best}


def _checked_action(action: Any, n_actions: int) -> int:
    if isinstance(action, bool) or not isinstance(action, (numbers.Integral, np.ndarray)):
        raise TypeError(f"action must be an int in [0, {n_actions}), got {type(action).__name__} {action!r}")
    a = int(action)
    if not 0 <= a < n_actions:
        raise ValueError(f"action must be in [0, {n_actions}), got {a}")
    return a


def _check_max_steps(max_steps: Any) -> None:
    if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral):
        raise TypeError(f"max_steps must be an int, got {type(max_steps).__name__} {max_steps!r}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number of seconds, got {type(value).__name__} {value!r}")
    if not (math.isfinite(value) and float(value) > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


register(
    "theory/inaction",
    InactionMDP,
    family="theory",
    tick_hz=THEORY_TICK_HZ,
    noop_action=InactionMDP.NOOP,
    default_beta="noop",
    description="Theorem 1 worst case for inaction (Eq. 3): acting earns 1 per tick, β's noop 0",
    optimal_reward_rate=1.0,
    default_reward_rate=0.0,
)
register(
    "theory/delay-cycle",
    DelayCycleMDP,
    family="theory",
    tick_hz=THEORY_TICK_HZ,
    noop_action=DelayCycleMDP.NOOP,
    default_beta="noop",
    description="Theorem 1 worst case for delay (Eq. 4): n-state cycle, stay w.p. p_minimax",
    optimal_reward_rate=1.0,
    default_reward_rate=0.0,
    check=check_delay_cycle_args,
)
register(
    "theory/still",
    still_cycle,
    family="theory",
    tick_hz=THEORY_TICK_HZ,
    noop_action=DelayCycleMDP.NOOP,
    default_beta="noop",
    description="delay-cycle whose state never moves (p_minimax = 1): delay costs nothing, inaction 1 per tick",
    optimal_reward_rate=1.0,
    default_reward_rate=0.0,
    check=check_still_args,
)
register(
    "theory/bandit",
    BanditMDP,
    family="theory",
    tick_hz=THEORY_TICK_HZ,
    noop_action=BanditMDP.NOOP,
    default_beta="noop",
    description="Theorem 1 worst case for learning (Eq. 2): K Bernoulli arms, one hidden arm better by ε",
    default_reward_rate=0.0,
    check=check_bandit_args,
)
