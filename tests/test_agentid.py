"""``--agent-id``: a team's seats sharing one θ told apart (issue 32 item 3; `nonstop.policies.agentid`).

The transform's shapes for (H, W, C) and (d,) observations; the replay storing each transition's agent
index and adding the identity as it samples; the batched forward and the team self-play learner applying
it; refusals at the door; and the reason for the option, on the virtual clock: a world where every seat
sees the same observation but seat k is rewarded only for action k. One shared θ without the id cannot
serve both seats (its greedy actions are one action for both); with ``--agent-id onehot`` it learns both."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nonstop.cli import main
from nonstop.envs.spec import REGISTRY, register
from nonstop.inference.seatlanes import TeamForward
from nonstop.learning.replay import ReplayBuffer
from nonstop.policies.agentid import AgentId, IdentifiedPolicy
from nonstop.policies.base import Decision, Policy

WORLD = "nonstop-test/seat-roles"


class SeatRoles:
    """Two teams of two (``a_0``, ``a_1`` learn; ``b_0``, ``b_1`` play a fixed θ). Every seat observes the
    same constant vector; ``a_k`` is rewarded 1 for action ``k`` and 0 otherwise, ``b_*`` never. Episodes
    of 50 steps. The best a team's shared θ can do is 2 a tick, one per seat."""

    metadata: dict[str, Any] = {"name": "seat-roles"}

    def __init__(self, **kwargs: Any) -> None:
        self.possible_agents = ["a_0", "a_1", "b_0", "b_1"]
        self.agents = list(self.possible_agents)
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0.0, 1.0, (3,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.array([1.0, 0.5, 0.0], np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = {a: float(a.startswith("a_") and int(actions.get(a, 0)) == int(a[-1])) for a in self.agents}
        done = self.t >= 50
        obs = self._obs()
        terminated = {a: False for a in self.agents}
        truncated = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def close(self) -> None:
        pass


@pytest.fixture
def seat_roles():
    register(WORLD, SeatRoles, family="multi", tick_hz=20.0)
    yield WORLD
    REGISTRY.pop(WORLD, None)


# ----------------------------------------------------------------------------- the transform


@pytest.mark.parametrize(
    "mode, shape, widened",
    [
        ("none", (13, 13, 5), (13, 13, 5)),
        ("index", (13, 13, 5), (13, 13, 6)),
        ("onehot", (13, 13, 5), (13, 13, 9)),
        ("none", (3,), (3,)),
        ("index", (3,), (4,)),
        ("onehot", (3,), (7,)),
    ],
)
def test_the_id_widens_image_channels_and_vector_features(mode, shape, widened):
    ids = AgentId(mode, 4)
    assert ids.obs_shape(shape) == widened
    obs = np.random.default_rng(0).random((3, *shape)).astype(np.float32)
    out = ids(obs, np.array([0, 3, 1]))
    assert out.shape == (3, *widened) and out.dtype == np.float32
    np.testing.assert_array_equal(out[..., : shape[-1]], obs)  # the observation itself unchanged
    extra = out[..., shape[-1] :]
    if mode == "onehot":  # constant planes (or features): 1 at the agent's index
        for row, k in enumerate([0, 3, 1]):
            expect = np.zeros(4, np.float32)
            expect[k] = 1.0
            assert np.all(extra[row] == expect)
    elif mode == "index":
        for row, k in enumerate([0, 3, 1]):
            assert np.all(extra[row] == np.float32(k / 3))
    np.testing.assert_array_equal(ids.one(obs[1], 3), out[1])


def test_uint8_frames_get_the_id_at_pixel_scale_and_bad_input_is_refused():
    ids = AgentId("onehot", 2)
    out = ids(np.zeros((1, 4, 4, 1), np.uint8), np.array([1]))
    assert out.dtype == np.uint8 and out.shape == (1, 4, 4, 3)
    assert np.all(out[..., 1] == 0) and np.all(out[..., 2] == 255)
    with pytest.raises(ValueError, match="agent id must be one of none, index, onehot"):
        AgentId("name", 2)
    with pytest.raises(ValueError, match=r"agent indices must lie in \[0, 2\)"):
        ids(np.zeros((1, 3), np.float32), np.array([2]))
    with pytest.raises(ValueError, match=r"this world's are \(84, 84\)"):
        ids.obs_shape((84, 84))
    assert AgentId.from_dict(ids.to_dict()) == ids and pickle.loads(pickle.dumps(ids)) == ids


def test_an_identified_policy_shows_its_agent_to_the_policy_it_wraps():
    seen: list[np.ndarray] = []

    class Record(Policy):
        def act(self, obs: np.ndarray) -> Decision:
            seen.append(obs)
            return Decision(0)

    IdentifiedPolicy(Record(), AgentId("onehot", 3), 2).act(np.ones(2, np.float32))
    assert seen[0].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0]


# ----------------------------------------------------------------------------- learning and acting


def test_the_replay_stores_the_agent_index_and_adds_its_id_when_sampled(no_shm_leak):
    """Frames are stored as the world published them; each sampled transition's obs and next obs get
    the identity of the agent that recorded it; a learner in another process (unpickled) does the same."""
    ids = AgentId("onehot", 2)
    rb = ReplayBuffer.create(capacity=8, obs_shape=(2,), dtype=np.float32, agent_id=ids)
    try:
        assert rb.frames.shape[1:] == (2,)
        for agent in (0, 1):
            f0 = rb.add_frame(np.full(2, agent, np.float32))
            f1 = rb.add_frame(np.full(2, agent + 10, np.float32))
            rb.add_transition(f0, agent, 0.0, 0.9, 1, f1, agent)
        for replay in (rb, pickle.loads(pickle.dumps(rb))):
            b = replay.sample(32, np.random.default_rng(0))
            assert b.obs.shape == (32, 4) and b.next_obs.shape == (32, 4)
            for obs, nxt, action in zip(b.obs, b.next_obs, b.action):
                assert obs.tolist() == [action, action, *np.eye(2)[action]]
                assert nxt.tolist() == [action + 10, action + 10, *np.eye(2)[action]]
            if replay is not rb:
                replay.close()
        plain = rb.snapshot()
        assert plain["agent"][:2].tolist() == [0, 1]
    finally:
        rb.unlink()


def test_the_team_forward_adds_each_lanes_agent_before_its_teams_model():
    rows: dict[str, np.ndarray] = {}

    def model(team: str) -> Any:
        def forward(batch: np.ndarray) -> np.ndarray:
            rows[team] = batch
            return np.zeros(len(batch), int)

        return forward

    forward = TeamForward({"a": model("a"), "b": model("b")}, agent_id=AgentId("index", 3))
    for lane, (team, agent) in enumerate([("a", 0), ("a", 2), ("b", 1)]):
        forward.assign(lane, team, agent)
    forward(np.zeros((3, 2), np.float32), [0, 1, 2])
    assert rows["a"][:, -1].tolist() == [0.0, 1.0] and rows["b"][:, -1].tolist() == [0.5]
    assert rows["a"].shape == (2, 3)


def test_team_self_play_learner_keeps_agents_apart_in_its_replay():
    """The team self-play DQN (`nonstop.experiment.teamlearn`): its Q-network takes the widened
    observation, its replay stores the world's and adds each agent's id as it samples."""
    from nonstop.experiment.teamlearn import TeamLearner
    from nonstop.experiment.teamplay import TeamPlayConfig

    cfg = TeamPlayConfig(env="none", n_step=1, arch="mlp", hidden=8, batch_size=4, learning_starts=0)
    learner = TeamLearner(cfg, (13, 13, 5), 3, agent_id=AgentId("onehot", 2))
    assert learner.net_shape == (13, 13, 7) and learner.replay.obs.shape[1:] == (13, 13, 5)
    frame = np.zeros((13, 13, 5), np.float32)
    for agent in (0, 1, 0, 1):
        learner.add(agent, frame, agent, 1.0, frame, True)
    obs, action, _, next_obs, _ = learner.replay.sample(16, np.random.default_rng(0))
    assert obs.shape == (16, 13, 13, 7)
    for o, n, a in zip(obs, next_obs, action):
        assert np.all(o[..., 5 + a] == 1) and np.all(o[..., 5 + 1 - a] == 0) and np.all(n[..., 5 + a] == 1)
    learner.update()  # the widened batch goes through the Q-network
    assert learner.updates == 1
    acts = learner.act(np.zeros((2, 13, 13, 7), np.float32), 0.0)
    assert acts.shape == (2,)


# ----------------------------------------------------------------------------- the door


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--env", "theory/inaction", "--agent-id", "onehot"], "is a one-seat world, so no seats share a θ"),
        (
            ["--env", "multi/duel", "--self-play", "--agent-id", "index"],
            "are one agent a side, so no seats of a team share a θ",
        ),
        (["--env", WORLD, "--agent-id", "onehot", "--delay-aware"], "does not combine with an actor that sees"),
    ],
)
def test_where_an_agent_id_cannot_apply_is_one_line(seat_roles, tmp_path, capsys, flags, said):
    out = tmp_path / "run"
    assert main(["train", *flags, "--clock", "virtual", "--seconds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "ticklog").exists()


# ----------------------------------------------------------------------------- the reason for the option


def _train(world: str, out: Path, agent_id: str, seconds: float = 40.0, backend: str = "thread") -> None:
    args = ["train", "--env", world, "--clock", "virtual", "--backend", backend, "--seconds", str(seconds)]
    args += ["--lr", "1e-3", "--gamma", "0.5", "--batch-size", "32", "--learning-starts", "100"]
    args += ["--epsilon-ticks", "300", "--epsilon-end", "0.05", "--target-update", "50", "--hidden", "32"]
    args += ["--replay-capacity", "5000", "--seed", "1", "--agent-id", agent_id, "--out", str(out)]
    assert main(args) == 0


def _greedy_reward(out: Path) -> tuple[float, dict[str, Any]]:
    """Reward a tick of the exported network's greedy actions for the learning team's seats a_0 and a_1
    (the best is 2: each seat's own action), and the export's meta."""
    import torch

    assert main(["export", str(out)]) == 0
    meta = json.loads((out / "export" / "policy.json").read_text())
    program = torch.jit.load(str(out / "export" / "policy.torchscript.pt"))
    obs = np.array([1.0, 0.5, 0.0], np.float32)
    ids = AgentId.from_dict(meta["agent_id"]) if "agent_id" in meta else AgentId("none", 2)
    reward = 0.0
    for k in (0, 1):
        q = program(torch.as_tensor(ids.one(obs, k)))
        reward += float(int(q.argmax()) == k)
    return reward, meta


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("backend", ["thread", "batched"])
def test_a_shared_theta_serves_every_seat_only_when_it_sees_who_it_acts_for(backend, seat_roles, tmp_path, no_shm_leak):
    """Same observation for a_0 and a_1, each rewarded for its own action. Without the id the one θ
    answers both seats alike: at most half the optimal reward. With ``--agent-id onehot`` it learns both
    within 40 world seconds (800 ticks); the tick log's reward rate at the end says so too. Acted for by
    a pool a seat (``thread``) or by one batching server for every seat (``batched``: `TeamForward`)."""
    from nonstop.learning.runlog import read_ticklog

    rates = {}
    for mode in ("none", "onehot"):
        out = tmp_path / mode
        _train(seat_roles, out, mode, backend=backend)
        reward, meta = _greedy_reward(out)
        rates[mode] = reward
        log = read_ticklog(out)
        late = log.seat("a_0")["reward"][-200:].sum() + log.seat("a_1")["reward"][-200:].sum()
        rates[mode + "_log"] = float(late) / 200
        if mode == "onehot":
            assert meta["agent_id"]["mode"] == "onehot" and meta["input"]["shape"] == [5]
        else:
            assert "agent_id" not in meta and meta["input"]["shape"] == [3]
    assert rates["none"] <= 1.0, rates  # one action for both seats: one of them unserved
    assert rates["onehot"] == 2.0, rates
    assert rates["none_log"] < 1.2 < 1.7 < rates["onehot_log"], rates


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_resume_keeps_the_agent_id_and_refuses_another(seat_roles, tmp_path, capsys, no_shm_leak):
    out = tmp_path / "run"
    _train(seat_roles, out, "index", seconds=3.0)
    assert json.loads((out / "config.json").read_text())["agent_id"] == "index"
    assert main(["train", "--resume", str(out), "--seconds", "5"]) == 0  # the widened network's checkpoint loads
    assert json.loads((out / "config.json").read_text())["agent_id"] == "index"
    assert json.loads((out / "summary.json").read_text())["env_ticks_total"] == 100
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--seconds", "6", "--agent-id", "onehot"]) == 2
    err = capsys.readouterr().err
    assert "the run was trained with --agent-id index" in err and len(err.strip().splitlines()) == 1
    _, meta = _greedy_reward(out)
    assert meta["agent_id"] == {"mode": "index", "n_agents": 2, "layout": meta["agent_id"]["layout"]}
    assert meta["input"]["shape"] == [4]


# ----------------------------------------------------------------------------- (H, W, C) windows: MAgent2's battle


def test_battle_windows_get_id_channels_in_team_training_and_team_self_play(tmp_path, no_shm_leak):
    """multi/battle's 13×13×5 windows, --arch grid: the batched server's team passes, the replay's
    samples and the exported network take 13×13×(5 + 2) with ``onehot`` on 2 seats a team; team self-play
    runs with it and saves it beside its Q-network."""
    pytest.importorskip("magent2")
    import torch

    from nonstop.experiment.teamplay import TeamPlayConfig, train_teams

    out = tmp_path / "run"
    args = ["train", "--env", "multi/battle", "--env-arg", "map_size=12", "--clock", "virtual", "--backend"]
    args += ["batched", "--n-inference", "1", "--replay-capacity", "2000", "--learning-starts", "20"]
    args += ["--batch-size", "8", "--seconds", "2", "--agent-id", "onehot", "--out", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["updates"] > 0
    assert summary["seat_lanes"]["team_passes"] > 0
    assert main(["export", str(out)]) == 0
    meta = json.loads((out / "export" / "policy.json").read_text())
    assert meta["input"]["shape"] == [13, 13, 7] and meta["agent_id"]["n_agents"] == 2

    cfg = TeamPlayConfig(
        env="multi/battle",
        env_kwargs={"map_size": 12, "max_cycles": 20},
        seconds=2.0,
        judge_episodes=1,
        learning_starts=50,
        batch_size=16,
        latency_ticks=2,
        update_every=2,
        agent_id="index",
    )
    team = train_teams(cfg, tmp_path / "team", echo=lambda line: None)
    assert team["updates"] > 0
    saved = torch.load(tmp_path / "team" / "team_q.pt", weights_only=False)
    assert saved["agent_id"] == {"mode": "index", "n_agents": 2}
    first = next(v for k, v in saved["q"].items() if k.endswith("weight") and v.ndim == 4)
    assert first.shape[1] == 6  # the first convolution takes the window's 5 channels and the id's 1
