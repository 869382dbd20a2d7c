"""A quick-draw duel: a two-seat realtime world whose optimum is known exactly (docs/design.md §4b).

Each round the signal is off for a random number of ticks (``min_wait`` to ``max_wait``, drawn
from the env's seeded generator), then turns on. Whoever *draws* (action 1) first after the signal
wins the round: +1 to the winner, −1 to the loser; both on the same tick: 0 each. Drawing while the
signal is still off is a false start: −1 to that seat, +1 to the other (both: 0 each), except in
the first ``holster`` ticks of a round, where draws are ignored (a draw computed on the previous
round's signal and applied late must not decide the next round). A round nobody wins within
``timeout`` ticks of the signal scores 0. An episode is ``rounds`` rounds.

Observation (each seat the same): ``[signal, ticks since the signal / timeout]``, float32.
Action: ``Discrete(2)``, 0 = hold (β's no-op), 1 = draw.

The best reply is to draw on the first observation that shows the signal, so with that policy on
both seats the round goes to the seat whose action reaches the world first: the one with the
smaller delay (ticks from the observation to the tick its action is applied) wins every round,
equal delays tie (delays below ``holster`` ticks). The value of lower latency is exact:
``rounds`` points per episode. `DrawOnSignal` is that policy.

>>> env = QuickDrawDuel(rounds=1, min_wait=2, max_wait=2, holster=0)
>>> obs, _ = env.reset(seed=0)
>>> for _ in range(2):
...     obs, rewards, term, trunc, _ = env.step({"first_0": 0, "second_0": 0})
>>> float(obs["first_0"][0])                     # the signal is on
1.0
>>> obs, rewards, term, trunc, _ = env.step({"first_0": 1, "second_0": 0})
>>> rewards, term["first_0"]
({'first_0': 1.0, 'second_0': -1.0}, True)
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from gymnasium import spaces

from nonstop.policies.base import Decision, Policy

from .spec import register

__all__ = ["QuickDrawDuel", "ContinuousQuickDraw", "DrawOnSignal", "DUEL_TICK_HZ", "SEATS"]

DUEL_TICK_HZ: Final = 60.0
SEATS: Final = ("first_0", "second_0")
HOLD, DRAW = 0, 1

try:  # the PettingZoo API is spoken without pettingzoo installed; with it, the duel is a ParallelEnv
    from pettingzoo import ParallelEnv as _Base
except ImportError:  # pragma: no cover - pettingzoo is in the `multi` and `test` extras
    _Base = object


class QuickDrawDuel(_Base):
    """Two seats, one signal, first to draw wins (see the module docstring)."""

    metadata = {"name": "quick_draw_duel_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self, rounds: int = 10, min_wait: int = 30, max_wait: int = 90, timeout: int = 60, holster: int = 15
    ) -> None:
        for name, value in (
            ("rounds", rounds),
            ("min_wait", min_wait),
            ("max_wait", max_wait),
            ("timeout", timeout),
            ("holster", holster + 1),
        ):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if max_wait < min_wait:
            raise ValueError(f"max_wait ({max_wait}) must be at least min_wait ({min_wait})")
        if holster >= min_wait:
            raise ValueError(f"holster ({holster}) must be below min_wait ({min_wait}): the signal comes after it")
        self.holster = int(holster)
        self.rounds, self.min_wait, self.max_wait, self.timeout = (
            int(rounds),
            int(min_wait),
            int(max_wait),
            int(timeout),
        )
        self.possible_agents = list(SEATS)
        self.agents: list[str] = []
        self._obs_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self._act_space: spaces.Space = spaces.Discrete(2)
        self.observation_spaces = {a: self._obs_space for a in SEATS}
        self.action_spaces: dict[str, spaces.Space] = {a: self._act_space for a in SEATS}
        self._rng = np.random.default_rng()
        self.round = self.countdown = self.since = self.elapsed = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def draws(self, action: Any) -> bool:
        """Whether ``action`` is a draw (the discrete duel: action 1)."""
        return int(action) == DRAW

    def _new_round(self) -> None:
        self.countdown = int(self._rng.integers(self.min_wait, self.max_wait + 1))
        self.since = -1  # ticks since the signal; -1 while it is off
        self.elapsed = 0  # ticks since the round began

    def _observe(self) -> dict[str, np.ndarray]:
        on = self.since >= 0
        obs = np.array([1.0 if on else 0.0, min(self.since, self.timeout) / self.timeout if on else 0.0], np.float32)
        return {a: obs.copy() for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(SEATS)
        self.round = 0
        self._new_round()
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset()")
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise KeyError(f"no seat {sorted(unknown)}; the seats are {self.agents}")
        a, b = (self.draws(actions[seat]) if seat in actions else False for seat in SEATS)
        if self.elapsed < self.holster:
            a = b = False
        self.elapsed += 1
        r = 0.0
        ended = False
        if self.since < 0:  # signal off: a draw is a false start
            if a or b:
                r, ended = (0.0 if a and b else (-1.0 if a else 1.0)), True
            else:
                self.countdown -= 1
                if self.countdown <= 0:
                    self.since = 0
        else:
            if a or b:
                r, ended = (0.0 if a and b else (1.0 if a else -1.0)), True
            else:
                self.since += 1
                ended = self.since >= self.timeout
        if ended:
            self.round += 1
            self._new_round()
        done = self.round >= self.rounds
        rewards = {SEATS[0]: r, SEATS[1]: -r}
        obs = self._observe()
        terminated = {seat: done for seat in self.agents}
        truncated = {seat: False for seat in self.agents}
        infos: dict[str, dict] = {seat: {"round": self.round} for seat in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        """Nothing to release (no window, no emulator); defined here so that the duel closes like any
        env without pettingzoo installed, where its base class is ``object`` (`nonstop train` closes
        the env it probes)."""


register(
    "multi/duel",
    QuickDrawDuel,
    family="multi",
    tick_hz=DUEL_TICK_HZ,
    noop_action=HOLD,
    default_beta="noop",
    description="two seats, quick-draw duel: first to draw after a random signal wins the round (+1/−1)",
)


class ContinuousQuickDraw(QuickDrawDuel):
    """The quick-draw duel with a Box action, for continuous learners (SAC's self-play seats).

    Action: ``Box(-1, 1, (1,))``, a draw when it is above 0; β's no-op is the space's zeros, a hold.
    Everything else is `QuickDrawDuel`'s: the same rounds, signal, holster and rewards, drawn from the
    same seeded generator, so a seed gives the same signals in both worlds.

    >>> env = ContinuousQuickDraw(rounds=1, min_wait=2, max_wait=2, holster=0)
    >>> _ = env.reset(seed=0)
    >>> for _ in range(2):
    ...     _ = env.step({"first_0": np.zeros(1, np.float32), "second_0": np.full(1, -0.5, np.float32)})
    >>> obs, rewards, term, trunc, _ = env.step({"first_0": np.full(1, 0.3, np.float32), "second_0": np.zeros(1)})
    >>> rewards, term["first_0"]
    ({'first_0': 1.0, 'second_0': -1.0}, True)
    """

    metadata = {"name": "quick_draw_duel_continuous_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self, rounds: int = 10, min_wait: int = 30, max_wait: int = 90, timeout: int = 60, holster: int = 15
    ) -> None:
        super().__init__(rounds, min_wait, max_wait, timeout, holster)
        self._act_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_spaces = {a: self._act_space for a in SEATS}

    def draws(self, action: Any) -> bool:
        """Whether ``action`` (one number, as an array or a float) is a draw: above 0."""
        value = np.asarray(action, np.float64).reshape(-1)
        if value.size != 1 or not np.isfinite(value[0]):
            raise ValueError(f"a continuous duel's action is one finite number in [-1, 1], got {action!r}")
        return bool(value[0] > 0.0)


register(
    "multi/duel-continuous",
    ContinuousQuickDraw,
    family="multi",
    tick_hz=DUEL_TICK_HZ,
    noop_action=None,  # the Box's zeros: a hold
    default_beta="noop",
    description="the quick-draw duel with a Box(-1, 1, (1,)) action, a draw above 0 (continuous learners: --algo sac)",
)


class DrawOnSignal(Policy):
    """The duel's best reply: draw on the first observation that shows the signal, else hold.

    >>> DrawOnSignal().act(np.array([1.0, 0.0], np.float32)).action
    1
    """

    def __init__(self) -> None:
        self.action_space = spaces.Discrete(2)

    def act(self, obs: np.ndarray) -> Decision:
        return Decision(DRAW if obs[0] >= 0.5 else HOLD)
