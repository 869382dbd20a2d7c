"""Every seat of a team into one replay, each seat its own induced delayed semi-MDP (docs/multi-agent.md).

The host hands a recorder that ``records_seats`` every seat's part of each tick (`SeatArrays`), not the
first seat's alone. `SeatsRecorder` keeps one `ReplayRecorder` per recorded seat, all writing into
one `ReplayBuffer`: seat ``i``'s decisions, rewards and observations form its own transitions
(`nonstop.learning.replay`'s construction, Definition 1 of the paper), and the learner samples them
all alike. Each transition carries its seat's place ``j`` among the recorded seats, the agent index
that ``--agent-id`` shows the team's network (the replay adds it as it samples). A seat whose agent leaves the world (dies) closes its open decision on the tick it left,
as at an episode's end (γ = 0 when terminated: done masking; γ^n when truncated), and records
nothing more until the world resets.

The replay's header counts the world's ticks and episodes once, not once per seat: a tick counts as
the agent's when every recorded seat still present acted on it (its delay the largest of theirs), and
an episode's return is the sum of every recorded seat's rewards (the team's return).

>>> import gymnasium as gym
>>> import numpy as np
>>> from nonstop.learning.replay import ReplayBuffer
>>> from nonstop.realtime.channels import ActionQueue, LatestSlot
>>> from nonstop.realtime.defaults import make_default
>>> from nonstop.realtime.hostloop import SeatArrays
>>> space = gym.spaces.Discrete(3)
>>> queues = [ActionQueue.create(space) for _ in range(2)]
>>> slots = [LatestSlot.create(np.zeros(2, np.float32)) for _ in range(2)]
>>> seats = SeatArrays(slots, queues, [make_default("noop", noop_action=0) for _ in queues])
>>> replay = ReplayBuffer.create(capacity=64, obs_shape=(2,), dtype=np.float32)
>>> rec = SeatsRecorder(replay, [0, 1], gamma=0.9, history=8)
>>> seats.obs[:] = [np.zeros(2, np.float32), np.ones(2, np.float32)]
>>> rec.on_seats_observation(0, seats)
>>> for tick in (1, 2, 3):                       # both seats act on the previous tick's observation
...     for q in queues:
...         _ = q.submit(1, obs_tick=tick - 1, episode=0)
...     seats.act(tick, episode=0)
...     seats.reward[0], seats.reward[1] = 1.0, 2.0
...     rec.on_seats_tick(tick, seats, terminated=False, truncated=False)
...     rec.on_seats_observation(tick, seats)
>>> replay.transitions_written, replay.tick_counters()   # two closed decisions a seat; 3 ticks, all acted, delay 1
(4, (3, 3, 3))
>>> for channel in (*queues, *slots):
...     channel.unlink()
>>> replay.unlink()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from nonstop.learning.replay import ReplayBuffer, ReplayRecorder
from nonstop.realtime.tickcolumns import SOURCE_AGENT

__all__ = ["SeatsRecorder"]


class SeatsRecorder:
    """The host's recorder for the seats ``seats`` (indices into the world's seats), one
    `ReplayRecorder` each into ``replay`` (see the module docstring). Picklable, as a wall-clock host
    process receives it."""

    #: the host hands it every seat's arrays (`nonstop.realtime.hostloop.Host`)
    records_seats: Final = True

    def __init__(
        self, replay: ReplayBuffer, seats: Sequence[int], *, gamma: float, history: int = 256, action_start: int = 0
    ) -> None:
        indices = [int(i) for i in seats]
        if not indices or len(set(indices)) != len(indices) or min(indices) < 0:
            raise ValueError(f"seats must be distinct seat indices >= 0, got {list(seats)!r}")
        self.replay, self.seats = replay, indices
        self.recorders = [
            ReplayRecorder(replay, gamma=gamma, history=history, action_start=action_start, tally=False, agent=j)
            for j in range(len(indices))
        ]
        self._here = [True] * len(indices)  # whether each recorded seat's agent is still in this episode
        self._return, self._length = 0.0, 0

    @property
    def transitions(self) -> int:
        return sum(r.transitions for r in self.recorders)

    @property
    def skipped_old(self) -> int:
        return sum(r.skipped_old for r in self.recorders)

    def on_seats_observation(self, tick: int, seats: Any) -> None:
        """Each present recorded seat's observation published for ``tick``."""
        obs, here = seats.obs, self._here
        for j, (i, rec) in enumerate(zip(self.seats, self.recorders)):
            if here[j]:
                rec.on_observation(tick, obs[i])

    def on_seats_tick(self, tick: int, seats: Any, *, terminated: bool, truncated: bool) -> None:
        """One host tick (before `on_seats_observation` of it): each recorded seat still present, or
        leaving on this tick, gets its action, reward and how it ended."""
        source, obs_tick, reward, actions = seats.source, seats.obs_tick, seats.reward, seats.actions
        present, left, here = seats.present, seats.left, self._here
        acted, delay, total = True, 0, 0.0
        for j, (i, rec) in enumerate(zip(self.seats, self.recorders)):
            if not here[j]:
                continue
            agent = source[i] == SOURCE_AGENT
            seat_done = not present[i]  # it left on this tick
            r = float(reward[i])
            total += r
            if agent:
                delay = max(delay, tick - int(obs_tick[i]))
            else:
                acted = False
            rec.on_tick(
                tick,
                agent=agent,
                action=actions[i],
                obs_tick=int(obs_tick[i]),
                reward=r,
                terminated=terminated or (seat_done and left[i] == 1),
                truncated=truncated or (seat_done and left[i] == 2),
                terminal_obs=seats.obs[i],
            )
            if seat_done:
                here[j] = False
        self._return += total
        self._length += 1
        self.replay.count_tick(acted, delay)
        if terminated or truncated:
            self.replay.add_episode(tick, self._return, self._length)
            self._return, self._length = 0.0, 0
            self._here = [True] * len(self.seats)

    def __getstate__(self) -> dict[str, Any]:
        rec = self.recorders[0]
        return {
            "replay": self.replay,
            "seats": self.seats,
            "gamma": rec.gamma,
            "history": rec.history,
            "action_start": rec.action_start,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]  # a fresh recorder in the host's process
            state["replay"],
            state["seats"],
            gamma=state["gamma"],
            history=state["history"],
            action_start=state["action_start"],
        )
