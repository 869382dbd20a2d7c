"""The replay of a delay-aware run: each stored observation is the one its actor saw, the world's
observation followed by the actions in flight (`nonstop.inference.inflight.ActionBuffer`).

The pool's workers hand their policy ``augment(obs, tick)``; the buffer remembers the encoding it
appended for each tick a worker read (`ActionBuffer.seen`). This recorder writes the semi-MDP of
`nonstop.learning.replay` exactly as `ReplayRecorder` does, but a frame it copies into the replay is
the observation of that tick with the encoding an actor saw beside it. A decision's observation
``s`` and the next decision's ``s'`` were both read by a worker, so both carry what the actor saw;
only an episode's terminal observation, which no worker reads, carries the buffer as the pool knew
it at that tick (`ActionBuffer.encode`). The learner therefore samples, in every transition, the
same augmented observation the actor acted on, and DCAC finds in it the buffer it resamples.

Both live in the host's process (a virtual clock, or a wall-clock host run as a thread): the buffer
is an ordinary object the pool and the recorder share.

>>> import gymnasium as gym
>>> from nonstop.inference.inflight import ActionBuffer
>>> from nonstop.learning.replay import ReplayBuffer
>>> buf = ActionBuffer(gym.spaces.Discrete(2), k=1)
>>> rb = ReplayBuffer.create(capacity=8, obs_shape=(2 + buf.width,), dtype=np.float32)
>>> rec = InFlightRecorder(rb, buf, gamma=0.9)
>>> for t in range(3):
...     rec.on_observation(t, np.array([t, 10 * t], np.float32))
>>> buf.decided("w", obs_tick=0, episode=0, action=1, due_tick=1)
>>> _ = buf.augment(np.zeros(2, np.float32), tick=1, episode=0)  # a worker reads tick 1
>>> rec.on_tick(1, agent=True, action=1, obs_tick=0, reward=1.0, terminated=False, truncated=False)
>>> rec.on_tick(2, agent=True, action=0, obs_tick=1, reward=0.0, terminated=False, truncated=False)
>>> b = rb.sample(1, np.random.default_rng(0))
>>> b.obs.tolist(), b.next_obs.tolist()  # tick 0: nothing in flight yet; tick 1: action 1 (one-hot), due now
([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], [[1.0, 10.0, 0.0, 1.0, 0.0, 1.0]])
>>> rb.unlink()
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from nonstop.inference.inflight import ActionBuffer, buffer_slots
from nonstop.learning.replay import TERMINAL, ReplayBuffer, ReplayRecorder, Transition

__all__ = ["InFlightRecorder", "ObservationFramedBuilder", "delay_aware_space", "in_flight_recorder", "FRAMINGS"]

#: how a transition's reward is framed: ``action`` (the semi-MDP: the rewards after its action lands)
#: or ``observation`` (the rewards between its observation and the next decision's: RTAC, DCAC)
FRAMINGS = ("action", "observation")


class ObservationFramedBuilder:
    """Pure logic: host ticks in, *observation-framed* transitions out (RTAC and DCAC learn on these).

    The semi-MDP of `nonstop.learning.replay` credits a decision with the rewards after its action
    lands. Here a decision's transition runs from its observation to the next decision's, and its
    reward is the world's, tick by tick, in between: for decisions on observations ``o_i < o_{i+1}``::

        s = obs(o_i),  a = a_i,  R = Σ_{k=o_i+1}^{o_{i+1}} γ^{k−o_i−1} r(k),  γ_i = γ^{o_{i+1}−o_i},  s' = obs(o_{i+1})

    With the actions in flight in the state this is the delayed MDP the papers learn on: ``R`` was
    caused by actions already in flight at ``s`` whenever ``a_i`` lands after ``o_{i+1}``. At an
    episode end ``T`` the open decision closes on the terminal observation (``γ_i = 0`` when it
    terminated). A decision on an observation no newer than the open one's (an older action landing
    late) opens nothing and is counted in ``out_of_order``.

    >>> b = ObservationFramedBuilder(gamma=0.5)
    >>> for t, r in enumerate([1.0, 2.0, 4.0, 8.0], start=1):
    ...     out = b.on_tick(t, agent=t in (2, 4), action=t, obs_tick=t - 2, reward=r)
    >>> [(x.s_tick, x.action, x.reward, x.n_ticks, x.next_tick) for x in out]  # rewards of ticks 1 and 2
    [(0, 2, 2.0, 2, 2)]
    """

    def __init__(self, gamma: float) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.episode = 0
        self.out_of_order = 0
        # r(k) for every tick k from `_base` on: all a transition can still need (none before the open
        # decision's observation), however many ticks lie between two decisions
        self._rewards: list[float] = []
        self._base: int | None = None
        self._open: tuple[int, Any] | None = None

    def _reward(self, start: int, stop: int) -> float:
        """Σ_{k=start+1}^{stop} γ^{k−start−1} r(k)."""
        assert self._base is not None and start + 1 >= self._base, (start, self._base)
        first = start + 1 - self._base
        return float(sum(self.gamma**i * r for i, r in enumerate(self._rewards[first : stop + 1 - self._base])))

    def _forget_through(self, tick: int) -> None:
        """Drop the rewards of ticks up to ``tick`` (no transition to come starts before it)."""
        if self._base is not None and tick >= self._base:
            del self._rewards[: tick + 1 - self._base]
            self._base = tick + 1

    def on_tick(
        self,
        tick: int,
        *,
        agent: bool,
        action: Any,
        obs_tick: int,
        reward: float,
        terminated: bool = False,
        truncated: bool = False,
    ) -> list[Transition]:
        if self._base is None:
            self._base = tick
        self._rewards.append(float(reward))
        out: list[Transition] = []
        if agent:
            if self._open is None or obs_tick > self._open[0]:
                if self._open is not None:
                    o, a = self._open
                    n = obs_tick - o
                    out.append(Transition(o, a, self._reward(o, obs_tick), self.gamma**n, n, obs_tick, self.episode))
                self._open = (obs_tick, action)
                self._forget_through(obs_tick)
            else:
                self.out_of_order += 1
        if terminated or truncated:
            if self._open is not None:
                o, a = self._open
                n = tick - o
                out.append(
                    Transition(
                        o, a, self._reward(o, tick), 0.0 if terminated else self.gamma**n, n, TERMINAL, self.episode
                    )
                )
            self._open = None
            self.episode += 1
            self._rewards, self._base = [], None  # the next episode's rewards start at the next tick
        return out


class InFlightRecorder(ReplayRecorder):
    """A `ReplayRecorder` whose frames are the observations its actors saw, actions in flight included."""

    def __init__(
        self,
        replay: ReplayBuffer,
        inflight: ActionBuffer,
        *,
        gamma: float,
        history: int = 4096,
        action_start: int = 0,
        framing: str = "action",
    ) -> None:
        if framing not in FRAMINGS:
            raise ValueError(f"framing must be one of {FRAMINGS}, got {framing!r}")
        self.inflight, self.framing = inflight, framing
        super().__init__(replay, gamma=gamma, history=history, action_start=action_start)

    def _init(self) -> None:
        super()._init()
        self._terminal_tick = self._terminal_episode = -1
        if self.framing == "observation":  # RTAC, DCAC: rewards between two decisions' observations
            self.builder = ObservationFramedBuilder(self.gamma)  # type: ignore[assignment]

    def __getstate__(self) -> dict:
        raise TypeError(
            "a delay-aware replay recorder shares its action buffer with the pool: it runs in the "
            "host's own process (the virtual clock, or a wall-clock host as a thread)"
        )

    def on_observation(self, tick: int, obs: np.ndarray) -> None:
        if self._ring is None:
            self._ring = np.empty((self.history, *np.shape(obs)), np.asarray(obs).dtype)
        slot = tick % self.history
        self._ring[slot] = obs
        self._ring_tick[slot] = tick

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
        # the pool's record learns what the host did: the applied decision landed, the rest due by now never will
        self.inflight.landed(tick, episode=self.builder.episode, obs_tick=obs_tick if agent else None)
        if terminated or truncated:  # its terminal frame carries this episode's buffer at this tick
            self._terminal_tick, self._terminal_episode = tick, self.builder.episode
        super().on_tick(
            tick,
            agent=agent,
            action=action,
            obs_tick=obs_tick,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            terminal_obs=terminal_obs,
        )

    def _augmented(self, obs: np.ndarray, tick: int, episode: int, *, terminal: bool = False) -> np.ndarray:
        seen = None if terminal else self.inflight.seen(tick, episode=episode)
        if seen is None:  # no worker read it (an episode's terminal observation): the buffer as known now
            seen = self.inflight.encode(tick, episode=episode)
        return np.concatenate([np.asarray(obs, np.float32).reshape(-1), seen])

    def _frame(self, tick: int, episode: int) -> int | None:
        if tick == TERMINAL:
            if self._terminal_obs is None:
                return None
            return self.replay.add_frame(
                self._augmented(self._terminal_obs, self._terminal_tick, self._terminal_episode, terminal=True)
            )
        fid = self._stored.get(tick)
        if fid is None:
            slot = tick % self.history
            if self._ring is None or self._ring_tick[slot] != tick:
                return None
            fid = self._stored[tick] = self.replay.add_frame(self._augmented(self._ring[slot], tick, episode))
        return fid


def delay_aware_space(
    obs_space: gym.Space, action_space: gym.Space, max_latency_s: float, tau_m: float
) -> tuple[gym.spaces.Box, int]:
    """``--delay-aware``: the observation space an actor and its critic see (the world's, flattened, then
    ``K`` slots of the action buffer, float32) and ``K`` (the latency's declared maximum in ticks)."""
    k = buffer_slots(max_latency_s, tau_m)
    buf = ActionBuffer(action_space, k=k)
    shape = buf.augmented_shape(tuple(obs_space.shape or ()))
    low = np.full(shape, -np.inf, np.float32)
    low[: shape[0] - buf.width] = np.asarray(getattr(obs_space, "low", -np.inf), np.float32).reshape(-1)
    high = np.full(shape, np.inf, np.float32)
    high[: shape[0] - buf.width] = np.asarray(getattr(obs_space, "high", np.inf), np.float32).reshape(-1)
    return gym.spaces.Box(low, high, shape, np.float32), k


def in_flight_recorder(
    k: int,
    action_space: gym.Space,
    replay: ReplayBuffer,
    *,
    gamma: float,
    history: int,
    action_start: int,
    framing: str = "action",
) -> tuple[ActionBuffer | None, ReplayRecorder]:
    """The learner's action buffer and the recorder that fills its replay: with ``k`` slots (``--delay-aware``)
    an `InFlightRecorder` reading the buffer, its rewards framed as the algorithm learns them; with
    ``k = 0`` no buffer and a plain `ReplayRecorder`."""
    if not k:
        return None, ReplayRecorder(replay, gamma=gamma, history=history, action_start=action_start)
    buf = ActionBuffer(action_space, k=k)
    return buf, InFlightRecorder(replay, buf, gamma=gamma, history=history, action_start=action_start, framing=framing)
