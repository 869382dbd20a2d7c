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
from nonstop.learning.replay import TERMINAL, ReplayBuffer, ReplayRecorder

__all__ = ["InFlightRecorder", "delay_aware_space", "in_flight_recorder"]


class InFlightRecorder(ReplayRecorder):
    """A `ReplayRecorder` whose frames are the observations its actors saw, actions in flight included."""

    def __init__(self, replay: ReplayBuffer, inflight: ActionBuffer, *, gamma: float, history: int = 4096,
                 action_start: int = 0) -> None:  # fmt: skip
        self.inflight = inflight
        super().__init__(replay, gamma=gamma, history=history, action_start=action_start)

    def _init(self) -> None:
        super()._init()
        self._terminal_tick = -1

    def __getstate__(self) -> dict:
        raise TypeError("a delay-aware replay recorder shares its action buffer with the pool: it runs in the "
                        "host's own process (the virtual clock, or a wall-clock host as a thread)")  # fmt: skip

    def on_observation(self, tick: int, obs: np.ndarray) -> None:
        if self._ring is None:
            self._ring = np.empty((self.history, *np.shape(obs)), np.asarray(obs).dtype)
        slot = tick % self.history
        self._ring[slot] = obs
        self._ring_tick[slot] = tick

    def on_tick(self, tick: int, *, agent: bool, action: Any, obs_tick: int, reward: float,
                terminated: bool, truncated: bool, terminal_obs: np.ndarray | None = None) -> None:  # fmt: skip
        if terminated or truncated:
            self._terminal_tick = tick
        super().on_tick(tick, agent=agent, action=action, obs_tick=obs_tick, reward=reward, terminated=terminated,
                        truncated=truncated, terminal_obs=terminal_obs)  # fmt: skip

    def _augmented(self, obs: np.ndarray, tick: int) -> np.ndarray:
        seen = self.inflight.seen(tick)
        if seen is None:  # no worker read it (an episode's terminal observation): the buffer as known now
            seen = self.inflight.encode(tick, episode=self.builder.episode)
        return np.concatenate([np.asarray(obs, np.float32).reshape(-1), seen])

    def _frame(self, tick: int) -> int | None:
        if tick == TERMINAL:
            if self._terminal_obs is None:
                return None
            return self.replay.add_frame(self._augmented(self._terminal_obs, self._terminal_tick))
        fid = self._stored.get(tick)
        if fid is None:
            slot = tick % self.history
            if self._ring is None or self._ring_tick[slot] != tick:
                return None
            fid = self._stored[tick] = self.replay.add_frame(self._augmented(self._ring[slot], tick))
        return fid


def delay_aware_space(obs_space: gym.Space, action_space: gym.Space, max_latency_s: float, tau_m: float
                      ) -> tuple[gym.spaces.Box, int]:  # fmt: skip
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


def in_flight_recorder(k: int, action_space: gym.Space, replay: ReplayBuffer, *, gamma: float, history: int,
                       action_start: int) -> tuple[ActionBuffer | None, ReplayRecorder]:  # fmt: skip
    """The learner's action buffer and the recorder that fills its replay: with ``k`` slots (``--delay-aware``)
    an `InFlightRecorder` reading the buffer; with ``k = 0`` no buffer and a plain `ReplayRecorder`."""
    if not k:
        return None, ReplayRecorder(replay, gamma=gamma, history=history, action_start=action_start)
    buf = ActionBuffer(action_space, k=k)
    return buf, InFlightRecorder(replay, buf, gamma=gamma, history=history, action_start=action_start)
