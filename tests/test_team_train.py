"""``nonstop train`` on a world of many seats without self-play (issue 32 item 3; `nonstop.experiment.teamseats`):
every seat a lane of one batching server (``--backend batched``) or a pool a seat (``thread``), one θ
per team, every seat of the learning team its own delayed semi-MDP in one replay
(`nonstop.learning.seatreplay.SeatsRecorder`). Virtual clock."""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nonstop.cli import main
from nonstop.inference.batching import BatchingServer
from nonstop.inference.batchsize import LatencyCurve
from nonstop.inference.seatlanes import SeatLanes, TeamForward
from nonstop.learning.replay import ReplayBuffer
from nonstop.learning.runlog import read_ticklog
from nonstop.learning.seatreplay import SeatsRecorder
from nonstop.realtime.host import Session
from nonstop.realtime.tickcolumns import SOURCE_ABSENT, SOURCE_AGENT

pytest.importorskip("magent2")

DEATH_STEP = 5  # a_1 dies at this step


class Echo:
    """Two teams of two (``a_0``, ``a_1`` against ``b_0``, ``b_1``); each seat observes [step count], and
    its reward at a step is the action applied to it (a reward names its action). ``a_1`` is terminated
    at step `DEATH_STEP`; every agent is truncated at step 12."""

    metadata: dict[str, Any] = {"name": "echo"}

    def __init__(self) -> None:
        self.possible_agents = ["a_0", "a_1", "b_0", "b_1"]
        self.agents = list(self.possible_agents)
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0, 1e6, (1,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(9)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = {a: float(actions.get(a, 0)) for a in self.agents}
        terminated = {a: a == "a_1" and self.t == DEATH_STEP for a in self.agents}
        truncated = {a: self.t >= 12 for a in self.agents}
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def close(self) -> None:
        pass


def test_every_seat_of_a_team_is_its_own_semi_mdp_in_one_replay(no_shm_leak):
    """Seats a_0 and a_1 recorded, every seat driven by one batching server's lanes at one tick of delay:
    each recorded seat's decisions are its own transitions, a_1's end where it died (γ = 0) and none
    follow; the replay counts the world's ticks and its one episode once, not once per seat."""
    replay = ReplayBuffer.create(capacity=256, obs_shape=(1,), dtype=np.float32)
    recorder = SeatsRecorder(replay, [0, 1], gamma=1.0, history=32)
    world = Session(Echo, clock="virtual", tick_hz=10, seed=0, recorder=recorder).start()
    forward = TeamForward({"a": lambda x: np.full(len(x), 3), "b": lambda x: np.zeros(len(x), int)})
    server = BatchingServer(forward, LatencyCurve.linear(0.01, 0.0), clock=world.clock)
    lanes = SeatLanes(world, server, forward=forward).start()
    world.run_for(1.25)  # 12 ticks: a_1 dies at 5, the episode ends at 12
    lanes.stop()
    server.close()
    log = world.stop()
    n = replay.transitions_written
    cols = {name: replay.cols[name][:n].copy() for name in ("reward", "discount", "n_ticks")}
    ticks, agent_ticks, delay_sum = replay.tick_counters()
    episodes = replay.episodes_finished
    replay.unlink()
    a1 = log.block("source")[:, 1]
    assert (a1[:DEATH_STEP] == SOURCE_AGENT).all() and (a1[DEATH_STEP:12] == SOURCE_ABSENT).all()
    # a_0 acted on ticks 1..12 (11 decisions closed by the next, the last by the episode's end), a_1 on 1..5
    assert n == 12 + DEATH_STEP
    assert set(cols["reward"].tolist()) == {3.0} and (cols["n_ticks"] == 1).all()
    assert int((cols["discount"] == 0.0).sum()) == 1  # a_1's death (the time limit is no terminal state)
    assert (ticks, agent_ticks, delay_sum) == (12, 12, 12)  # counted once a tick: every recorded seat acted
    assert episodes == 1


def _train(tmp_path, *flags: str) -> tuple[dict[str, Any], Any]:
    out = tmp_path / "run"
    args = ["train", "--env", "multi/battle", "--env-arg", "map_size=16", "--clock", "virtual", "--seconds", "5"]
    args += ["--replay-capacity", "5000", "--learning-starts", "200", "--batch-size", "16", "--out", str(out), *flags]
    assert main(args) == 0
    return json.loads((out / "summary.json").read_text()), read_ticklog(out)


def test_train_batched_on_a_many_seat_world_one_server_acts_for_every_seat(tmp_path, no_shm_leak):
    """12 seats of multi/battle, each a lane of one batching server whose batch (0.5 tick + 0.01 a row)
    fits in a tick: every batch carries all 12 seats' rows, one pass a team; every seat acts at every
    tick at one tick of delay; the learning team's 6 seats fill one replay that the learner samples."""
    summary, log = _train(tmp_path, "--backend", "batched", "--n-inference", "1", "--batch-curve", "linear:0.5t,0.01t")
    assert summary["complete"] and summary["learning_team"] == "red"
    sizes = {int(b): n for b, n in summary["batch_server"]["batch_sizes"].items()}
    assert min(sizes) > 1 and max(sizes) == 12  # one forward pass a batch across seats
    lanes = summary["seat_lanes"]
    assert lanes["seats"] == 12 and lanes["team_passes"] == 2 * lanes["batches"]  # one pass a team a batch
    assert log.seats == 12 and len(log) == 100
    seats = log.summary()["seats"]
    assert set(seats) == {f"{t}_{i}" for t in ("red", "blue") for i in range(6)}
    for name, figures in seats.items():  # every seat's inaction and delay, from the log
        assert figures["inaction_ticks"] <= 2, name  # the first tick or two, before the first answer
        assert set(figures["delay_histogram"]) == {1}, name
    assert set(summary["teams"]) == {"red", "blue"} and summary["seats"]["blue_5"]["delay_mean_ticks"] == 1.0
    progress = (tmp_path / "run" / "progress.csv").read_text().splitlines()
    transitions = int(progress[-1].split(",")[progress[0].split(",").index("transitions")])
    assert transitions > 5 * 90  # the 6 learning seats' own transitions, about one a tick each
    assert summary["updates"] > 0
    assert multiprocessing.active_children() == []


def test_train_thread_backend_on_a_many_seat_world_gives_each_seat_a_pool(tmp_path, no_shm_leak):
    """The baseline: a pool of N_I = 2 staggered workers a seat at τ_θ = 2 ticks, the other team on its fixed θ."""
    summary, log = _train(tmp_path, "--backend", "thread", "--latency", "2t")
    assert summary["complete"] and "batch_server" not in summary
    seats = log.summary()["seats"]
    assert len(seats) == 12
    for name, figures in seats.items():
        assert figures["agent_ticks"] > 90 and max(int(d) for d in figures["delay_histogram"]) <= 3, name
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--interaction", "infer_then_learn"], "--interaction infer_then_learn drives one seat"),
        (["--backend", "batched_process", "--clock", "wall"], "--backend batched_process on a world of many seats"),
    ],
)
def test_what_a_many_seat_world_cannot_train_with_is_one_line(tmp_path, capsys, flags, said):
    out = tmp_path / "run"
    assert main(["train", "--env", "multi/battle", "--env-arg", "map_size=12", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_seat_lanes_epsilon_by_team_names_every_team():
    world = Session(Echo, clock="virtual", tick_hz=10, seed=0).start()
    forward = TeamForward({"a": lambda x: np.zeros(len(x), int), "b": lambda x: np.zeros(len(x), int)})
    server = BatchingServer(forward, LatencyCurve.linear(0.01, 0.0), clock=world.clock)
    try:
        with pytest.raises(ValueError, match=r"epsilon names no value for team\(s\) \['b'\]"):
            SeatLanes(world, server, forward=forward, epsilon={"a": 0.1})
    finally:
        server.close()
        world.stop()


def test_a_resumed_many_seat_run_plays_the_same_other_team(tmp_path, no_shm_leak):
    """The other team's fixed θ is saved with the run: resumed after the learner has moved on, it is the
    θ the run started with, not the learner's newer one."""
    import torch

    from nonstop.learning.checkpoint import load_checkpoint

    out = tmp_path / "run"
    args = ["train", "--env", "multi/battle", "--env-arg", "map_size=12", "--clock", "virtual", "--backend", "batched"]
    args += ["--n-inference", "1", "--replay-capacity", "2000", "--learning-starts", "20", "--batch-size", "8"]
    assert main([*args, "--seconds", "2", "--out", str(out)]) == 0
    assert main(["train", "--resume", str(out), "--seconds", "4"]) == 0
    first, second = (load_checkpoint(p) for p in sorted((out / "checkpoints").glob("ckpt-*.pt")))
    assert torch.equal(first["frozen_team_params"], second["frozen_team_params"])
    assert not torch.equal(second["frozen_team_params"], second["params"])  # the learner has moved on
    assert json.loads((out / "summary.json").read_text())["env_ticks_total"] == 80


def test_staggered_lanes_a_seat_on_one_server(tmp_path, no_shm_leak):
    """N_I = 2 lanes a seat (τ_θ's mean of 2 ticks), all on one server: where a round fits in a tick the
    two lane indices ask at the same ticks, so a batch carries both lanes of all 4 seats and each seat's
    newest answer wins (the other counted superseded), every seat acting at every tick."""
    out = tmp_path / "run"
    args = ["train", "--env", "multi/battle", "--env-arg", "map_size=12", "--clock", "virtual", "--backend", "batched"]
    args += ["--latency", "2t", "--batch-curve", "linear:0.5t,0.01t", "--replay-capacity", "2000", "--seconds", "3"]
    assert main([*args, "--out", str(out)]) == 0
    summary, log = json.loads((out / "summary.json").read_text()), read_ticklog(out)
    lanes = summary["seat_lanes"]
    assert summary["n_inference"] == 2 and lanes["n_inference"] == 2 and lanes["requests"] >= 2 * 4 * 55
    assert max(int(b) for b in summary["batch_server"]["batch_sizes"]) == 8  # 2 lanes × 4 seats in one batch
    seats = log.summary()["seats"]
    assert all(f["inaction_ticks"] <= 2 and f["superseded"] > 0 for f in seats.values())
