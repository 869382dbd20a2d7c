"""Team self-play at hundreds of agents (issue 43): a team's tick costs one clock event, not one a seat; a team
that records nothing keeps nothing; the team's replay says its size at the door and refuses one that would
not fit in memory, naming the capacity that would. Virtual clock."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nonstop.experiment.teamlearn import TeamReplay, check_team_replay_fits, team_replay_bytes
from nonstop.experiment.teamplay import TeamActor, TeamPlayConfig, train_teams
from nonstop.learning.replay import ReplayTooLargeError
from nonstop.realtime.host import Session

SEATS = 3  # a team
TICKS = 30


class Echo:
    """Two teams of `SEATS` (``a_*`` against ``b_*``): each seat sees [the step count], and is rewarded the
    action applied to it; ``a_1`` dies at step 7, the episode is truncated at step 40."""

    metadata: dict[str, Any] = {"name": "echo"}

    def __init__(self) -> None:
        self.possible_agents = [f"{team}_{i}" for team in "ab" for i in range(SEATS)]
        self.agents = list(self.possible_agents)
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0, 1e6, (1,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(5)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = {a: float(actions.get(a, 0)) for a in self.agents}
        terminated = {a: a == "a_1" and self.t == 7 for a in self.agents}
        truncated = {a: self.t >= 40 for a in self.agents}
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def close(self) -> None:
        pass


def test_a_team_submits_a_tick_in_one_clock_event_and_a_team_that_records_nothing_keeps_nothing() -> None:
    d = 2
    transitions: list[tuple[int, int, int, float, int, bool]] = []
    events: list[float] = []
    kept: list[int] = []

    def choose(obs: np.ndarray, episode: int) -> np.ndarray:
        return (obs[:, 0].astype(int) % 4) + 1  # never 0: a reward of 0 is β's no-op

    with Session(Echo, clock="virtual", seed=0, tick_hz=20, default="noop") as world:
        call_at = world.clock.call_at

        def counted(t: float, fn: Any, **kw: Any) -> Any:
            events.append(t)
            return call_at(t, fn, **kw)

        world.clock.call_at = counted  # type: ignore[method-assign]
        learner = TeamActor(
            world,
            list(range(SEATS)),
            choose,
            d,
            on_transition=lambda j, o, a, r, o2, died: transitions.append((j, int(o[0]), a, r, int(o2[0]), died)),
        )
        other = TeamActor(
            world, list(range(SEATS, 2 * SEATS)), choose, d, on_tick=lambda _: kept.append(sum(map(len, other.pending)))
        )
        for actor, name in ((learner, "a"), (other, "b")):
            world.clock.spawn(actor.process(), name=name, priority=2)
        world.run_for(TICKS / 20)
    assert learner.forwards >= TICKS - 1 and other.forwards == learner.forwards
    assert len(events) == learner.forwards + other.forwards  # one event a team a tick (a seat each before)
    assert kept and set(kept) == {0}  # the team that records nothing holds no decision for later
    # the transitions are still each seat's delayed semi-MDP: the decision on tick k, rewarded at k + d
    assert {j for j, *_ in transitions} == set(range(SEATS))
    for _, k, action, reward, k2, died in transitions:
        assert action == k % 4 + 1 and reward == action and (k2 == k + 1 or died)
    assert [(j, k) for j, k, *_, died in transitions if died] == [(1, 7 - d)]
    for j in range(SEATS):  # each seat's in order, one a tick
        ks = [k for i, k, *_ in transitions if i == j]
        assert ks == list(range(ks[0], ks[0] + len(ks)))


def test_the_team_replay_holds_what_its_size_says() -> None:
    shape = (13, 13, 5)
    replay = TeamReplay(1_000, shape)
    arrays = (replay.obs, replay.next_obs, replay.action, replay.reward, replay.discount, replay.agent)
    assert replay.nbytes == team_replay_bytes(1_000, shape) == sum(a.nbytes for a in arrays)
    assert team_replay_bytes(50_000, shape) == 169_900_000  # the default capacity: 162 MiB


def test_a_team_replay_too_large_is_refused_naming_the_capacity_that_fits() -> None:
    shape = (13, 13, 9)  # with MAgent2's minimap
    assert check_team_replay_fits(50_000, shape, available=2**31) == team_replay_bytes(50_000, shape)
    with pytest.raises(ReplayTooLargeError, match=r"lower --replay-capacity to about ([\d,]+)") as refused:
        check_team_replay_fits(2_000_000, shape, available=2**31)
    fits = int(str(refused.value).rsplit(" ", 1)[1].replace(",", ""))
    assert 0 < fits < 2_000_000
    assert check_team_replay_fits(fits, shape, available=2**31) <= 0.9 * 2**31  # the capacity it names fits
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        team_replay_bytes(0, shape)


def test_team_self_play_says_its_replay_first_and_refuses_one_that_would_not_fit(tmp_path) -> None:
    pytest.importorskip("magent2")
    pytest.importorskip("torch")
    base = dict(env="multi/battle", env_kwargs={"map_size": 12, "max_cycles": 10}, seconds=0.5, judge_episodes=1)
    with pytest.raises(ReplayTooLargeError, match="lower --replay-capacity"):
        train_teams(TeamPlayConfig(**base, replay_capacity=10**12), tmp_path / "huge", echo=lambda _: None)
    assert not (tmp_path / "huge").exists()  # refused before anything is written: the same --out can run next
    lines: list[str] = []
    train_teams(TeamPlayConfig(**base, replay_capacity=2_000), tmp_path / "small", echo=lines.append)
    size = team_replay_bytes(2_000, (13, 13, 5))
    assert lines[0] == (
        f"4 agents, red learning (2 agents); its replay: 2,000 transitions of (13, 13, 5) float16 windows, "
        f"{size / 2**20:,.0f} MiB (about 1,000 ticks of its agents' experience); batches of 64 every 4 ticks"
    )


def test_a_chosen_replay_capacity_is_the_teams_and_the_default_is_the_teams_own() -> None:
    """--replay-capacity (or a file's) is honoured, larger than 50,000 too; unset, the team's 50,000, not DQN's 1M."""
    from nonstop.experiment.config import TrainConfig
    from nonstop.learning.dqn import DQNConfig

    base = dict(env="multi/battle", clock="virtual", seconds=10.0, self_play=True)
    chosen = TeamPlayConfig.from_train_config(
        TrainConfig(**base, algo_settings=DQNConfig(replay_capacity=200_000)), tick_hz=20.0
    )
    assert chosen.replay_capacity == 200_000
    unset = TrainConfig(**base, algo_settings=DQNConfig())
    assert TeamPlayConfig.from_train_config(unset, tick_hz=20.0).replay_capacity == 50_000


def test_trials_is_a_flag_of_team_self_play_and_refused_where_nothing_reads_it(tmp_path, capsys) -> None:
    """--trials N sets the trial episodes (0: the last θ is judged); unset, 20; a two-seat world refuses it."""
    from nonstop.cli import main
    from nonstop.experiment.config import TrainConfig
    from nonstop.learning.dqn import DQNConfig

    base = dict(env="multi/battle", clock="virtual", seconds=10.0, self_play=True, algo_settings=DQNConfig())
    assert TeamPlayConfig.from_train_config(TrainConfig(**base), tick_hz=20.0).trial_episodes == 20
    assert TeamPlayConfig.from_train_config(TrainConfig(**base, trials=0), tick_hz=20.0).trial_episodes == 0
    assert TeamPlayConfig.from_train_config(TrainConfig(**base, trials=3), tick_hz=20.0).trial_episodes == 3
    with pytest.raises(ValueError, match="trials must be an integer >= 0, got -1"):
        TrainConfig(**base, trials=-1)
    saved = TrainConfig(**base, trials=3).to_dict()
    assert saved["trials"] == 3 and TrainConfig.from_dict(saved).trials == 3
    out = tmp_path / "run"
    assert main(["train", "--env", "multi/duel", "--trials", "3", "--out", str(out)]) == 2
    assert "--trials sets up self-play: add --self-play" in capsys.readouterr().err
    duel = ["train", "--env", "multi/duel", "--self-play", "--clock", "virtual", "--seconds", "1", "--trials", "3"]
    assert main([*duel, "--out", str(out)]) == 2
    assert "--trials chooses the judged θ of team self-play" in capsys.readouterr().err
    assert not out.exists()  # refused at the door
