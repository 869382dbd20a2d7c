"""Team self-play (`nonstop.experiment.teamplay`) and each team's matches (`nonstop.experiment.teamstats`):
the team's one forward pass a tick lands every seat's action τ_θ later, every agent's transitions
form its own delayed semi-MDP in one replay, kills and deaths are counted from the world, and
``nonstop report`` shows every seat, every team and each team's rates over time. Virtual clock."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nonstop.studies.report import build_report
from nonstop.experiment.teamplay import TeamActor, TeamPlayConfig, is_team_world, team_seats, train_teams
from nonstop.experiment.teamtrials import MIN_REPLAY_RATIO, best_trial, team_batch_size, trial_picks
from nonstop.experiment.teamstats import TEAMS_FILE, TeamTally, read_team_rows, team_figures, write_team_rows
from nonstop.realtime.host import Session
from nonstop.realtime.ticklog import SOURCE_AGENT

DEATH_TICK = 7  # a_1 dies at this step


class ActionEcho:
    """Two teams of two (``a_0``, ``a_1`` against ``b_0``, ``b_1``). Each seat's observation is
    [the world's step count]; its reward at a step is the action applied to it then (so a reward names
    the action). ``a_1`` is terminated at step `DEATH_TICK`; the episode is truncated at step 40."""

    metadata: dict[str, Any] = {"name": "action_echo"}

    def __init__(self) -> None:
        self.possible_agents = ["a_0", "a_1", "b_0", "b_1"]
        self.agents = list(self.possible_agents)
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0, 1e6, (1,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(5)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.array([self.t], np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = {a: float(actions.get(a, 0)) for a in self.agents}
        terminated = {a: a == "a_1" and self.t == DEATH_TICK for a in self.agents}
        truncated = {a: self.t >= 40 for a in self.agents}
        obs = self._obs()
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def close(self) -> None:
        pass


def test_team_seats_group_by_name() -> None:
    assert team_seats(["red_0", "red_1", "blue_0", "blue_1", "blue_2"]) == {"red": [0, 1], "blue": [2, 3, 4]}


@pytest.mark.parametrize("d", [1, 3])
def test_one_pass_a_tick_lands_every_action_d_ticks_later_and_forms_each_agents_semi_mdp(d: int) -> None:
    transitions: list[tuple[np.ndarray, int, float, np.ndarray, bool]] = []
    batches: list[int] = []

    def choose(obs: np.ndarray, episode: int) -> np.ndarray:
        batches.append(len(obs))
        return (obs[:, 0].astype(int) % 4) + 1  # 1..4, never 0: a reward of 0 is β's no-op

    tally = TeamTally(ActionEcho())
    with Session(lambda: tally, clock="virtual", seed=0, tick_hz=20, default="noop") as world:
        actor = TeamActor(
            world, [0, 1], choose, d, on_transition=lambda j, *t: transitions.append(t)
        )  # team a; team b is β's
        world.clock.spawn(actor.process(), name="team a", priority=2)
        world.run_for(30 / 20)
    log = world.tick_log
    delay, source = log.block("delay"), log.block("source")
    steady = slice(d + 2, 30)
    a0 = source[steady, 0] == SOURCE_AGENT
    assert a0.all() and (delay[steady, 0] == d).all()  # no inaction, every action d ticks late
    assert (source[DEATH_TICK + 1 : 30, 1] != SOURCE_AGENT).all()  # a_1 left: nothing applied for it
    assert (source[steady, 2:] != SOURCE_AGENT).all()  # team b is nobody's
    assert max(batches) == 2 and min(batches[DEATH_TICK + 2 :]) == 1  # one pass for the team; a_1 gone from it
    # each transition: the decision on tick k's observation, rewarded by the tick it was applied at (k + d)
    for obs, action, reward, next_obs, done in transitions:
        k = int(obs[0])
        assert action == k % 4 + 1 and reward == action  # the reward of tick k + d is this action's
        assert int(next_obs[0]) == k + 1 and not done or done
    dones = [t for t in transitions if t[4]]
    assert len(dones) == 1 and int(dones[0][0][0]) == DEATH_TICK - d  # a_1's last decision, applied as it died
    assert tally.deaths == {"a": 1, "b": 0} or tally.finished  # counted from the world's terminations


def test_tally_and_team_figures_round_trip(tmp_path) -> None:
    tally = TeamTally(ActionEcho())
    tally.reset()
    for _ in range(40):
        tally.step({a: 1 for a in tally.env.agents})
    tally.reset()
    ((deaths, returns),) = tally.take_finished()
    assert deaths == {"a": 1, "b": 0} and tally.kills(deaths) == {"a": 0, "b": 1}
    assert returns == {"a": 40.0 + DEATH_TICK, "b": 80.0}
    from nonstop.experiment.teamstats import EpisodeEnd, team_row

    rows = [
        team_row(
            EpisodeEnd(e, 40 * (e + 1), 1.0),
            t,
            "learner" if t == "a" else "random",
            seats=2,
            deaths=d,
            kills=k,
            score=0.0,
        )
        for e in range(4)
        for t, d, k in (("a", e % 2, 1), ("b", 1, e % 2))
    ]
    write_team_rows(tmp_path / TEAMS_FILE, rows[:4])
    write_team_rows(tmp_path / TEAMS_FILE, rows[4:])
    back = read_team_rows(tmp_path / TEAMS_FILE)
    assert back == rows
    figures = team_figures(back, recent=2)
    assert figures["a"]["win_rate"] == 0.5 and figures["a"]["kill_rate"] == 0.5  # 1 of b's 2 seats a match
    assert figures["b"]["survival_rate"] == 0.5 and figures["b"]["players"] == {"random": 4}


def test_magent_tally_counts_the_living_not_the_terminated() -> None:
    """MAgent2 terminates every agent when a side is wiped out: survivors are read off its grid."""
    pytest.importorskip("magent2")
    from nonstop.envs import make_env

    tally = TeamTally(make_env("multi/battle", map_size=12, max_cycles=30))
    tally.reset(seed=0)
    grid = tally.env.unwrapped.env
    handles = tally.env.unwrapped.handles
    assert tally._living() == [int(grid.get_num(h)) for h in handles] == [2, 2]
    rng = np.random.default_rng(0)
    while tally.env.agents:
        tally.step({a: int(rng.integers(21)) for a in tally.env.agents})
    assert tally.deaths == {t: 2 - n for t, n in zip(("red", "blue"), tally._living())}


def test_team_self_play_on_battle_writes_teams_csv_and_report(tmp_path) -> None:
    pytest.importorskip("magent2")
    pytest.importorskip("torch")
    assert is_team_world("multi/battle", {"map_size": 12}) and not is_team_world("multi/duel", {})
    cfg = TeamPlayConfig(
        env="multi/battle",
        env_kwargs={"map_size": 12, "max_cycles": 20},
        seconds=2.0,
        judge_episodes=3,
        learning_starts=50,
        batch_size=16,
        latency_ticks=2,
        snapshot_every=1.0,
        update_every=2,
    )
    lines: list[str] = []
    summary = train_teams(cfg, tmp_path, echo=lines.append)
    assert summary["judged_episodes"] == 3 and summary["updates"] > 0 and summary["snapshots"] >= 2
    # the judged episodes measure what self-play learned: nothing learns from the random team
    judged_updates = [re.search(r"([\d,]+) updates", line) for line in lines if "against random" in line]
    assert len(judged_updates) >= 3
    assert {int(m.group(1).replace(",", "")) for m in judged_updates if m} == {summary["updates"]}
    rows = read_team_rows(tmp_path / TEAMS_FILE)
    assert {r["team"] for r in rows} == {"red", "blue"}
    assert [r["player"] for r in rows if r["team"] == "blue"][-3:] == ["random"] * 3
    red = [r["player"] for r in rows if r["team"] == "red"]
    first = next(i for i, p in enumerate(red) if p != "learner")
    trials = summary["trial_episodes"]  # self-play, the trials of candidate θs, then the judged θ
    assert trials >= 1 and all(p.startswith("trial ") for p in red[first : first + trials])
    assert set(red[:first] + red[first + trials :]) == {"learner"} and len(red) - first - trials >= 3
    report = build_report(tmp_path)
    assert set(report.summary["seats"]) == {"red_0", "red_1", "blue_0", "blue_1"}
    assert set(report.summary["teams"]) == {"red", "blue"}
    assert report.summary["teams"]["red"]["delay_mean_ticks"] == pytest.approx(2.0, abs=0.2)  # τ_θ = 2 ticks
    assert "red.win_rate" in report.summary["team_matches"] and report.plots["team_rates"].is_file()
    assert json.loads((tmp_path / "summary.json").read_text())["learning_team"] == "red"


def test_the_train_command_routes_a_team_world_to_team_self_play(tmp_path, capsys) -> None:
    pytest.importorskip("magent2")
    from nonstop.cli import main

    argv = ["train", "--env", "multi/battle", "--env-arg", "map_size=12", "--self-play", "--seconds", "1"]
    assert main([*argv, "--clock", "wall", "--out", str(tmp_path / "a")]) != 0
    assert "runs on the virtual clock: add --clock virtual" in capsys.readouterr().err
    assert main([*argv, "--clock", "virtual", "--algo", "sac", "--out", str(tmp_path / "b")]) != 0
    assert "--self-play on a team world learns with DQN: --algo sac" in capsys.readouterr().err


def test_team_self_play_is_the_registered_seating_that_stands_in_for_self_play_in_a_world_of_teams(
    tmp_path, capsys
) -> None:
    pytest.importorskip("magent2")
    from nonstop.cli import main
    from nonstop.experiment import registry
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.registry import stand_in

    def seating_for(cfg):
        return stand_in("seating", cfg.seating, cfg)

    assert registry.runs_as("seating", "self_play", {"team_world": True}) == "team_self_play"
    assert registry.runs_as("seating", "self_play", {"team_world": False}) == "self_play"
    assert "team_self_play" not in registry.names("seating")  # it only stands in: no config names it
    assert registry.alone("seating", "team_self_play").__name__ == "TeamSelfPlaySeating"
    assert registry.alone("seating", "self_play") is None
    assert seating_for(TrainConfig(env="multi/duel", self_play=True, clock="virtual")) == "self_play"
    team = TrainConfig(env="multi/battle", env_kwargs={"map_size": 12}, self_play=True, clock="virtual")
    assert seating_for(team) == "team_self_play" and seating_for(TrainConfig(env="multi/battle")) == "solo"
    argv = ["train", "--env", "multi/battle", "--env-arg", "map_size=12", "--env-arg", "max_cycles=20"]
    argv += ["--self-play", "--clock", "virtual", "--seconds", "2", "--learning-starts", "50", "--batch-size", "16"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["run_dir"] == str(tmp_path / "run") and out["complete"] and out["judged_episodes"] == 20
    assert 0.0 <= out["judged_win_rate"] <= 1.0 and (tmp_path / "run" / TEAMS_FILE).is_file()
    assert main([*argv, "--out", str(tmp_path / "run")]) != 0  # a second run into it is refused in one line
    assert "already holds a run: choose a new --out" in capsys.readouterr().err


# ------------------------------------------------------------------ the judged θ and the team's batch


@given(candidates=st.integers(0, 200), trials=st.integers(0, 40))
def test_trials_spread_over_the_run_and_always_try_the_last_theta(candidates: int, trials: int) -> None:
    picks = trial_picks(candidates, trials)
    assert picks == sorted(set(picks)) and all(0 <= i < candidates for i in picks)
    assert len(picks) == min(candidates, trials)
    if picks:
        assert picks[-1] == candidates - 1  # the last θ is always a candidate
    if 2 <= trials < candidates:  # evenly spaced: no gap more than one step wider than another
        gaps = np.diff([-1, *picks])
        assert gaps.max() - gaps.min() <= 1


def test_the_best_trial_killed_the_most_beyond_its_deaths_ties_to_the_newer() -> None:
    assert best_trial([(66, 91), (138, 12), (0, 0)]) == 1  # a passive last θ is not the one judged
    assert best_trial([(5, 0), (6, 1), (0, 9)]) == 1
    with pytest.raises(ValueError, match="no trial"):
        best_trial([])


def test_the_batch_grows_with_the_learning_team_and_keeps_the_162_seat_run_as_it_was() -> None:
    assert team_batch_size(64, 4, 81) == 64  # the README's 81 learning agents: unchanged
    assert team_batch_size(64, 4, 12) == 64  # a small team never gets less than it asked for
    big = team_batch_size(64, 4, 484)  # map 110: 484 learning agents
    assert big / (4 * 484) >= MIN_REPLAY_RATIO > 64 / (4 * 484) * 5  # each transition sampled 6× as often as before
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        team_batch_size(0, 4, 81)


def test_the_judged_episodes_play_the_best_trials_theta_tried_on_episodes_of_their_own(tmp_path, monkeypatch) -> None:
    """The trials play candidate θs against a random team, frozen, before the judged episodes; the judged
    ones play the candidate `best_trial` picks from the trials' own rows (here: forced to the oldest,
    not the last θ), and none of them is a trial."""
    pytest.importorskip("magent2")
    torch = pytest.importorskip("torch")
    from nonstop.experiment import teamplay

    seen: list[list[tuple[int, int]]] = []

    def oldest(results: list[tuple[int, int]]) -> int:
        seen.append(list(results))
        return 0

    monkeypatch.setattr(teamplay, "best_trial", oldest)
    cfg = TeamPlayConfig(
        env="multi/battle",
        env_kwargs={"map_size": 12, "max_cycles": 20},
        seconds=5.0,
        judge_episodes=3,
        trial_episodes=3,
        learning_starts=20,
        batch_size=1,  # 2 learning agents, a batch every 8 ticks: the team's batch is 4 (the floor on samples)
        update_every=8,
        latency_ticks=2,
        snapshot_every=1.0,
    )
    lines: list[str] = []
    summary = train_teams(cfg, tmp_path, echo=lines.append)
    assert summary["batch_size"] == 4 and "batches of 4 every 8 ticks" in lines[0]
    rows = read_team_rows(tmp_path / TEAMS_FILE)
    red = {r["episode"]: r for r in rows if r["team"] == "red"}
    blue = {r["episode"]: r for r in rows if r["team"] == "blue"}
    trials = sorted(e for e, r in red.items() if r["player"].startswith("trial "))
    assert summary["trial_episodes"] == len(trials) == 3 and trials == list(range(trials[0], trials[0] + 3))
    assert all(blue[e]["player"] == "random" for e in trials)
    assert seen == [[(red[e]["kills"], red[e]["deaths"]) for e in trials]]  # chosen on the trials' own rows
    judged = [e for e in red if e > trials[-1]]
    assert len(judged) >= 3 and all(red[e]["player"] == "learner" and blue[e]["player"] == "random" for e in judged)
    oldest_trial = red[trials[0]]["player"]
    assert oldest_trial.startswith("trial snapshot ") and trials[0] not in judged
    chosen = summary["judged_theta"]
    assert f"trial snapshot {chosen['snapshot']}" == oldest_trial and chosen["updates"] < summary["updates"]
    assert f"judged θ: snapshot {chosen['snapshot']}" in "\n".join(lines)
    saved = torch.load(tmp_path / "team_q.pt", weights_only=False)
    differs = [not torch.equal(saved["q"][k], saved["last_q"][k]) for k in saved["q"]]
    assert any(differs)  # the judged θ saved is the chosen snapshot, not the last θ
