"""The host with seats as arrays (issue 31 item 4): a world of many seats runs the same lines as one
seat, and every seat's action, delay, reward and counters land where the contract says, tick by tick."""

from __future__ import annotations

import numpy as np
from conftest import run_ticks
from gymnasium import spaces

from nonstop.realtime.host import Session
from nonstop.realtime.ticklog import SOURCE_AGENT, SOURCE_DEFAULT
from nonstop.realtime.tickcolumns import SOURCE_ABSENT

SEATS = 12
TICK = 1 / 20


class Crowd:
    """A seat world of `SEATS` seats (PettingZoo's parallel API). Seat i's reward each step is its
    action + i/100; seats 9, 10 and 11 leave the world (absent from the step's dicts: no observation,
    no reward) at ticks 5, 9 and 13 of each episode; an episode is 17 steps. Every step's joint
    action is kept in ``self.steps``."""

    metadata = {"name": "crowd_v0"}

    def __init__(self) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(SEATS)]
        self.gone = {"agent_9": 5, "agent_10": 9, "agent_11": 13}
        self.steps: list[dict[str, int]] = []
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(3)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.possible_agents.index(agent), self.t], np.float32)

    def _here(self) -> list[str]:
        return [a for a in self.possible_agents if self.t < self.gone.get(a, 10**9)]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        return {a: self._obs(a) for a in self.possible_agents}, {a: {} for a in self.possible_agents}

    def step(self, actions: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
        self.steps.append(dict(actions))
        self.t += 1
        here = self._here()
        rewards = {a: float(actions[a]) + self.possible_agents.index(a) / 100 for a in here}
        end = self.t == 17
        return (
            {a: self._obs(a) for a in here},
            rewards,
            {a: end for a in here},
            {a: False for a in here},
            {a: {} for a in here},
        )

    def close(self) -> None:
        pass


def test_many_seats_some_slow_some_gone_checked_tick_by_tick() -> None:
    """Seats 0-3 act every tick (delay 1 + i), seats 4-7 every third tick, 8-11 never (β: noop, or
    repeat for seat 8); seats 9-11 leave the world mid-episode and are absent until it resets. The
    log's blocks hold each seat's applied action, delay and reward as the world saw them, and each
    seat's slot its own counters."""
    default = {f"agent_{i}": "noop" for i in range(SEATS)} | {"agent_8": "repeat"}
    expected_delay = np.full((40, SEATS), -1)
    with Session(Crowd, clock="virtual", tick_hz=1 / TICK, seed=0, default=default) as world:
        assert world.seats is not None and len(world.seats) == SEATS
        for t in range(40):  # before tick t + 1
            latest = world.slots[0].read()
            for i in range(8):
                if i < 4 or t % 3 == 0:
                    obs_tick = max(latest.tick - i, 0)
                    world.queues[i].submit((t + i) % 3, obs_tick=obs_tick, episode=latest.episode)
                    expected_delay[t, i] = t + 1 - obs_tick
            run_ticks(world, 1)
        env = world.host.env
        counters = [world.slots[i].read() for i in range(SEATS)]
    log = world.tick_log
    assert len(log) == 40 and log.seats == SEATS
    source, delay, action, reward = log.block("source"), log.block("delay"), log.block("action"), log.block("reward")
    assert source.shape == (40, SEATS)
    applied = np.array([[step.get(a, np.nan) for a in env.possible_agents] for step in env.steps])
    assert np.array_equal(action, applied, equal_nan=True)  # what the log says was applied is what the world got
    assert np.array_equal(source == SOURCE_AGENT, expected_delay >= 0)
    assert np.array_equal(delay, expected_delay)
    ticks_in_episode = (log["tick"] - 1) % 17 + 1
    for i, name in enumerate(env.possible_agents):
        here = ticks_in_episode < env.gone.get(name, 10**9)
        assert np.allclose(reward[here, i], applied[here, i] + i / 100), name
        assert (reward[~here, i] == 0).all(), name  # gone: no reward
        # it left after the step that first lacked it: absent (no action sent, no inaction) until the reset
        absent = ticks_in_episode > env.gone.get(name, 10**9)
        assert np.array_equal(source[:, i] == SOURCE_ABSENT, absent), name
        assert np.isnan(applied[absent, i]).all(), name
    assert (applied[:, 9:][source[:, 9:] == SOURCE_DEFAULT] == 0).all()  # nobody acted: β's noop
    assert (applied[source[:, 8] == SOURCE_DEFAULT, 8] == 0).all()
    assert log["terminated"].nonzero()[0].tolist() == [16, 33] and log["episode"][-1] == 2
    for i, seen in enumerate(counters):
        assert (seen.tick, seen.agent_ticks, seen.inaction_ticks) == (
            40,
            int((source[:, i] == 1).sum()),
            int((source[:, i] == 0).sum()),
        )
    assert counters[9].obs[1] == 4  # seat 9 left after tick 4 of episode 2: its last observation stays
    assert counters[9].terminated and not counters[0].terminated  # marked as gone until the reset
    summary = log.summary(teams={f"agent_{i}": "fast" if i < 4 else "rest" for i in range(SEATS)})
    assert summary["seats"]["agent_3"]["delay_mean_ticks"] == expected_delay[:, 3].mean()  # it acted every tick
    assert summary["teams"]["fast"]["inaction_ticks"] == 0 and summary["teams"]["fast"]["delay_max_ticks"] == 4
    assert summary["seats"]["agent_11"]["agent_ticks"] == 0
    gone_11 = int((ticks_in_episode > 13).sum())
    assert summary["seats"]["agent_11"]["absent_ticks"] == gone_11
    assert summary["seats"]["agent_11"]["inaction_ticks"] == 40 - gone_11  # absent ticks are no inaction


def test_one_seat_and_many_seats_run_the_same_loop() -> None:
    """A gymnasium env is `SeatArrays` of one seat: its log is the one-seat log of always."""
    with Session("theory/inaction", clock="virtual", seed=0) as world:
        run_ticks(world, 3)
        host = world.host
        assert host.seat_arrays.values.shape == (9, 1) and type(host.world).__name__ == "OneSeatWorld"
    with Session(Crowd, clock="virtual", tick_hz=1 / TICK, seed=0) as crowd:
        assert crowd.host.seat_arrays.values.shape == (9, SEATS) and type(crowd.host.world).__name__ == "ParallelWorld"
