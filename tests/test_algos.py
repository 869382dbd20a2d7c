"""Algorithms are parts (issue 29): each one's update on a tiny net against a hand computation, the target
rule as data, the replay's float32 actions, the refusal of a mismatched space, and SAC's run, resume and
export through the same machinery as DQN's."""

from __future__ import annotations

import json
import math

import gymnasium
import numpy as np
import pytest
import torch

from nonstop.cli import main
from nonstop.learning.dqn import DQNConfig
from nonstop.learning.optim import apply_gradient, init_training
from nonstop.learning.replay import Batch, ReplayBuffer, ReplayRecorder
from nonstop.learning.sac import SACConfig
from nonstop.learning.sacupdate import sac_backward, sac_losses
from nonstop.learning.weights import SharedWeights, TrainingState

BOX = gymnasium.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _set(linear: torch.nn.Linear, weight: list[list[float]], bias: list[float]) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(weight))
        linear.bias.copy_(torch.tensor(bias))


def _tiny_sac(alpha: float = 0.5):
    """SAC on 1-d observations and a 1-d Box [-2, 2] with linear networks (no hidden layer), every number set."""
    algo = SACConfig(hidden=(), alpha=alpha).algorithm((1,), BOX)
    online, target = algo.build_model(), algo.build_model()
    _set(online.actor.net[0], [[0.4], [0.2]], [0.1, -0.3])  # μ = 0.4 s + 0.1; raw = 0.2 s − 0.3
    _set(online.q1.net[0], [[1.0, 0.5]], [0.2])  # Q1 = s + 0.5 a + 0.2
    _set(online.q2.net[0], [[-0.5, 1.5]], [0.0])  # Q2 = −0.5 s + 1.5 a
    _set(target.q1.net[0], [[0.8, 0.3]], [0.1])  # the targets differ from the online critics
    _set(target.q2.net[0], [[0.6, -0.4]], [0.3])
    return algo, online, target


def _by_hand(s: float, a_env: float, r: float, gamma_n: float, s2: float, xi2: float, xi: float, alpha: float):
    """SAC's losses computed with floats, line by line from the paper (what `sac_losses` must give)."""
    scale, log_scale = 2.0, math.log(2.0)

    def actor(x: float) -> tuple[float, float]:
        mean, raw = 0.4 * x + 0.1, 0.2 * x - 0.3
        return mean, -5.0 + 0.5 * 7.0 * (math.tanh(raw) + 1)

    def sample(x: float, noise: float) -> tuple[float, float]:
        mean, log_std = actor(x)
        u = mean + math.exp(log_std) * noise
        log_n = -0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)
        return math.tanh(u), log_n - math.log(1 - math.tanh(u) ** 2) - log_scale  # tanh and scale corrections

    q1, q2 = (lambda x, a: x + 0.5 * a + 0.2), (lambda x, a: -0.5 * x + 1.5 * a)
    q1_t, q2_t = (lambda x, a: 0.8 * x + 0.3 * a + 0.1), (lambda x, a: 0.6 * x - 0.4 * a + 0.3)
    a2, logp2 = sample(s2, xi2)
    y = r + gamma_n * (min(q1_t(s2, a2), q2_t(s2, a2)) - alpha * logp2)
    a = a_env / scale
    critic = 0.5 * ((q1(s, a) - y) ** 2 + (q2(s, a) - y) ** 2)
    a_pi, logp = sample(s, xi)
    actor_loss = alpha * logp - min(q1(s, a_pi), q2(s, a_pi))
    alpha_loss = -alpha * (logp + (-1.0))  # H̄ = −|A| = −1
    return {
        "y": y,
        "critic": critic,
        "actor": actor_loss,
        "alpha": alpha_loss,
        "q1_err": q1(s, a) - y,
        "a": a,
        "logp": logp,
    }


def _batch(s: float, a_env: float, r: float, gamma_n: float, s2: float) -> Batch:
    f = np.float32
    return Batch(
        np.array([[s]], f),
        np.array([[a_env]], f),
        np.array([r], f),
        np.array([gamma_n], f),
        np.array([[s2]], f),
        np.array([2], np.int32),
    )


def test_sac_losses_and_each_blocks_gradient_match_a_hand_computation():
    algo, online, target = _tiny_sac(alpha=0.5)
    xi2, xi = torch.tensor([[0.3]]), torch.tensor([[-0.2]])
    batch = _batch(0.5, 1.0, -1.0, 0.99**2, -0.5)  # a decision of 2 ticks: γ_n = γ²
    want = _by_hand(0.5, 1.0, -1.0, 0.99**2, -0.5, 0.3, -0.2, alpha=0.5)
    got = sac_losses(online, target, batch, target_entropy=algo.target_entropy, noise_next=xi2, noise=xi)
    assert algo.target_entropy == -1.0
    for name in ("critic", "actor", "alpha"):
        assert getattr(got, name).item() == pytest.approx(want[name], rel=1e-5, abs=1e-6), name
    assert got.target[0].item() == pytest.approx(want["y"], rel=1e-5)

    sac_backward(
        online, target, batch, autotune=algo.cfg.autotune, target_entropy=algo.target_entropy, noise_next=xi2, noise=xi
    )
    # J_Q's gradient reaches only the critics: ∂J_Q/∂(w_s, w_a, b) of Q1 is (Q1 − y)·(s, a, 1)
    err = want["q1_err"]
    np.testing.assert_allclose(online.q1.net[0].weight.grad.numpy(), [[err * 0.5, err * want["a"]]], rtol=1e-5)
    assert float(online.q1.net[0].bias.grad) == pytest.approx(err, rel=1e-5)
    # J_α's gradient w.r.t. log α: −α·(log π + H̄)
    assert float(online.log_alpha.grad) == pytest.approx(-0.5 * (want["logp"] - 1.0), rel=1e-5)
    # J_π's gradient reaches the actor (with the critics held fixed): a finite difference of the hand formula
    h, w = 1e-3, online.actor.net[0].weight.detach().clone()
    grad_mean_w = online.actor.net[0].weight.grad[0, 0].item()

    def actor_loss_at(dw: float) -> float:
        a2, o2, t2 = _tiny_sac(alpha=0.5)
        with torch.no_grad():
            o2.actor.net[0].weight.copy_(w)
            o2.actor.net[0].weight[0, 0] += dw
        return sac_losses(o2, t2, batch, target_entropy=-1.0, noise_next=xi2, noise=xi).actor.item()

    assert grad_mean_w == pytest.approx((actor_loss_at(h) - actor_loss_at(-h)) / (2 * h), rel=1e-3)


def test_sac_without_autotune_keeps_alpha_and_the_critics_take_no_actor_gradient():
    algo = SACConfig(hidden=(), autotune=False).algorithm((1,), BOX)
    online, target = algo.build_model(), algo.build_model()
    batch = _batch(0.5, 1.0, -1.0, 0.9, -0.5)
    from nonstop.learning.optim import flat_gradient

    xi2, xi = torch.tensor([[0.7]]), torch.tensor([[-1.1]])
    sac_backward(
        online, target, batch, autotune=algo.cfg.autotune, target_entropy=algo.target_entropy, noise_next=xi2, noise=xi
    )
    assert flat_gradient(online)[-1] == 0.0  # log α (θ's last number) takes no step
    # the critics' gradient is J_Q's alone: J_π (which reads the critics) adds nothing to it
    losses = sac_losses(online, target, batch, target_entropy=-1.0, noise_next=xi2, noise=xi)
    critic_only = torch.autograd.grad(losses.critic, online.critic_parameters())
    for p, g in zip(online.critic_parameters(), critic_only):
        torch.testing.assert_close(p.grad, g)


def test_dqn_update_matches_a_hand_computation():
    """DQN behind the same interface: y = R + γ_n·max Q_target(s'), Huber loss, gradient (Q − y)·s when |Q − y| < 1."""
    cfg = DQNConfig(hidden=(), lr=0.1)
    algo = cfg.algorithm((2,), gymnasium.spaces.Discrete(2))
    online, target = algo.build_model(), algo.build_model()
    _set(online.net[1], [[0.5, -0.2], [0.1, 0.3]], [0.0, 0.1])
    _set(target.net[1], [[0.2, 0.2], [-0.1, 0.4]], [0.05, 0.0])
    f = np.float32
    batch = Batch(
        np.array([[1.0, 2.0]], f),
        np.array([1]),
        np.array([0.5], f),
        np.array([0.81], f),
        np.array([[0.5, -1.0]], f),
        np.array([2], np.int32),
    )
    q = 0.1 * 1.0 + 0.3 * 2.0 + 0.1  # Q(s, a=1)
    y = 0.5 + 0.81 * max(0.2 * 0.5 - 0.2 + 0.05, -0.1 * 0.5 - 0.4 + 0.0)
    loss = algo.backward(online, target, batch)
    assert float(loss) == pytest.approx(0.5 * (q - y) ** 2, rel=1e-5)  # Huber, |q − y| < 1
    np.testing.assert_allclose(online.net[1].weight.grad.numpy(), [[0, 0], [(q - y) * 1.0, (q - y) * 2.0]], rtol=1e-5)
    assert (algo.target_every, algo.target_polyak) == (cfg.target_update, 1.0)


def test_the_target_rule_is_data_sac_averages_after_every_update_dqn_copies_every_n():
    for cfg, every, rho in ((SACConfig(tau=0.25), 1, 0.25), (DQNConfig(target_update=3), 3, 1.0)):
        state, weights = TrainingState.create(2), SharedWeights.create(2)
        try:
            model = torch.nn.Linear(1, 1)
            init_training(model, state, weights)
            start = state.target.copy()
            apply_gradient(state, weights, np.array([1.0, -1.0], np.float32), cfg)
            after_one = state.target.copy()
            if every == 1:
                np.testing.assert_allclose(after_one, start + rho * (state.params - start), rtol=1e-6)
            else:
                np.testing.assert_array_equal(after_one, start)  # no sync before update 3
                apply_gradient(state, weights, np.array([1.0, -1.0], np.float32), cfg)
                apply_gradient(state, weights, np.array([1.0, -1.0], np.float32), cfg)
                np.testing.assert_array_equal(state.target, state.params)  # a hard copy at update 3
            assert cfg.target_rule() == (every, rho)
        finally:
            state.unlink()
            weights.unlink()


def test_the_replay_keeps_box_actions_as_float32_vectors_in_the_semi_mdp():
    replay = ReplayBuffer.create(capacity=8, obs_shape=(1,), dtype=np.float32, action_shape=(2,))
    try:
        rec = ReplayRecorder(replay, gamma=0.5, history=8)
        for tick in range(4):
            agent = tick in (1, 3)  # tick 2 is β's: its reward belongs to tick 1's decision
            rec.on_tick(
                tick,
                agent=agent,
                action=np.array([0.25, -1.5]) * tick,
                obs_tick=tick - 1,
                reward=1.0,
                terminated=False,
                truncated=False,
            )
            rec.on_observation(tick, np.array([tick], np.float32))
        assert replay.transitions_written == 1
        b = replay.sample(1, np.random.default_rng(0))
        assert b.action.dtype == np.float32 and b.action.tolist() == [[0.25, -1.5]]
        assert b.reward.tolist() == [1.5] and b.discount.tolist() == [0.25] and b.n_ticks.tolist() == [2]
        assert b.obs.tolist() == [[0.0]] and b.next_obs.tolist() == [[2.0]]
    finally:
        replay.unlink()


def test_a_mismatched_space_is_refused_in_one_line_naming_the_right_algo(tmp_path, capsys):
    for argv, said in (
        (
            ["--algo", "sac", "--env", "CartPole"],
            "SAC needs a Box action space of one axis; CartPole has Discrete(2): use --algo dqn",
        ),
        (["--env", "Pendulum-v1"], "DQN needs a Discrete action space; Pendulum-v1 has Box"),
    ):
        out = tmp_path / argv[-1]
        assert main(["train", *argv, "--seconds", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "--algo" in err
        assert not out.exists()
    # and another algorithm's setting is refused at the door too
    assert (
        main(["train", "--algo", "sac", "--env", "Pendulum-v1", "--epsilon-ticks", "9", "--out", str(tmp_path / "x")])
        == 2
    )
    assert "--epsilon-ticks: not a setting of --algo sac" in capsys.readouterr().err


def _train_sac(run, capsys, seconds: str, *more: str) -> dict:
    assert (
        main(
            [
                "train",
                "--algo",
                "sac",
                "--env",
                "Pendulum-v1",
                "--seconds",
                seconds,
                "--learning-starts",
                "40",
                "--batch-size",
                "16",
                "--hidden",
                "16",
                "--replay-capacity",
                "5000",
                "--checkpoint-replay",
                "yes",
                "--progress-every",
                "2",
                "--out",
                str(run),
                *more,
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_a_sac_run_learns_checkpoints_resumes_and_reports_alpha(tmp_path, capsys, no_shm_leak):
    from nonstop.learning.checkpoint import latest_checkpoint
    from nonstop.learning.runlog import read_columns

    run = tmp_path / "sac"
    first = _train_sac(run, capsys, "4")
    config = json.loads((run / "config.json").read_text())
    assert config["algo"] == "sac" and config["algo_settings"]["hidden"] == [16] and "dqn" not in config
    ckpt = latest_checkpoint(run)
    assert first["updates"] > 0 and ckpt.updates == first["updates"]
    alpha = math.exp(ckpt.state["params"][-1].item())
    assert alpha != 1.0  # log α learned (θ's last number)
    progress = read_columns(run / "progress.csv")
    assert np.isfinite(progress["alpha"]).all() and np.isnan(progress["epsilon"]).all()

    assert main(["train", "--resume", str(run), "--seconds", "6", "--tau", "0.01"]) == 2  # a setting stays the run's
    assert "algo_settings.tau: saved 0.005, now 0.01" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--seconds", "6"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["updates"] > first["updates"]  # it went on from the checkpoint, as SAC
    assert json.loads((run / "config.json").read_text())["algo"] == "sac"
    assert main(["train", "--resume", str(run), "--seconds", "8", "--algo", "dqn"]) == 2
    assert "is a --algo sac run" in capsys.readouterr().err


def test_a_run_saved_with_a_dqn_key_before_algorithms_were_parts_still_exports_and_resumes(
    tmp_path, capsys, no_shm_leak
):
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.export import export_policy

    run = tmp_path / "dqn"
    assert main(["train", "--env", "CartPole", "--seconds", "1", "--learning-starts", "20", "--out", str(run)]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["algo"] == "dqn" and config["algo_settings"]["batch_size"] == 64 and "dqn" not in config
    old = {k: v for k, v in config.items() if k not in ("algo", "algo_settings")} | {"dqn": config["algo_settings"]}
    (run / "config.json").write_text(json.dumps(old))  # as runs were saved before --algo existed
    assert TrainConfig.from_dict(old).algo_settings.batch_size == 64
    assert export_policy(run)["algo"] == "dqn"  # an old run exports
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--seconds", "2"]) == 0  # and resumes, as dqn
    again = json.loads((run / "config.json").read_text())
    assert again["algo"] == "dqn" and again["algo_settings"] == config["algo_settings"] and "dqn" not in again
    with pytest.raises(ValueError, match="unknown config keys"):
        TrainConfig.from_dict({**old, "dqn_typo": 1})


def test_a_sac_export_acts_without_nonstop_as_nonstop_does(tmp_path, capsys, no_shm_leak):
    from test_export import _run_without_nonstop

    from nonstop.learning.checkpoint import latest_checkpoint
    from nonstop.learning.sac import SACPolicy
    from nonstop.learning.weights import load_flat

    run = tmp_path / "sac"
    _train_sac(run, capsys, "3")
    assert main(["export", str(run)]) == 0
    capsys.readouterr()
    export = run / "export"
    meta = json.loads((export / "policy.json").read_text())
    assert meta["algo"] == "sac" and meta["action_space"] == {"type": "Box", "shape": [1], "low": [-2.0], "high": [2.0]}
    assert meta["output"]["name"] == "action" and meta["network"] == "DeterministicActor"
    obs = np.array([0.6, -0.8, 1.5], np.float32)
    np.save(tmp_path / "obs.npy", obs)
    code = (
        f"import numpy as np, torch\nprogram = torch.jit.load({str(export / 'policy.torchscript.pt')!r})\n"
        "obs = torch.from_numpy(np.load('obs.npy'))\nprint(program(obs)[0].tolist())\n"
    )
    done = _run_without_nonstop(code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    action = json.loads(done.stdout.strip().splitlines()[-1])
    # nonstop's own actor, deterministic, on the checkpoint's parameters
    algo = SACConfig.from_dict(meta["sac"]).algorithm((3,), BOX)
    model = algo.build_model()
    load_flat(model, latest_checkpoint(run).state["params"].numpy())

    class _Weights:
        version, n_params = 0, sum(p.numel() for p in model.parameters())

    policy = SACPolicy(model, _Weights(), BOX, deterministic=True)  # type: ignore[arg-type]
    np.testing.assert_allclose(action, policy.act(obs).action, rtol=1e-5, atol=1e-6)
    assert -2.0 <= action[0] <= 2.0


class _SacSetup:
    """A replay of terminal transitions with Box actions (discount 0: the critics' target is the reward
    itself), SAC's master state and published weights: what any learner backend learns from."""

    def __init__(self):
        from nonstop.learning.weights import flat_parameters

        self.cfg = SACConfig(learning_starts=0, updates_per_transition=0, batch_size=32, hidden=(16,), lr=3e-3)
        self.algo = self.cfg.algorithm((3,), BOX)
        torch.manual_seed(0)
        model = self.algo.build_model()
        n = sum(p.numel() for p in model.parameters())
        self.replay = ReplayBuffer.create(capacity=256, obs_shape=(3,), dtype=np.float32, action_shape=(1,))
        self.state, self.weights = TrainingState.create(n), SharedWeights.create(n)
        init_training(model, self.state, self.weights)
        self.start = flat_parameters(model)
        rng = np.random.default_rng(0)
        for _ in range(200):  # reward = the action, from fixed random observations
            s, s2 = (self.replay.add_frame(rng.normal(size=3).astype(np.float32)) for _ in range(2))
            a = rng.uniform(-2, 2, size=1).astype(np.float32)
            self.replay.add_transition(s, a, float(a[0]), 0.0, 1, s2)

    def critic_loss(self, params: np.ndarray) -> float:
        from nonstop.learning.weights import load_flat

        online, target = self.algo.build_model(), self.algo.build_model()
        load_flat(online, np.array(params))
        load_flat(target, np.array(params))
        batch = self.replay.sample(256, np.random.default_rng(1))
        return sac_losses(online, target, batch, target_entropy=-1.0).critic.item()

    def close(self):
        for seg in (self.replay, self.state, self.weights):
            seg.unlink()


def _learned(setup: _SacSetup, before: float) -> None:
    """The critics fit the reward, the target critics followed by Polyak steps, and α moved."""
    params, target = np.array(setup.state.params), np.array(setup.state.target)
    assert setup.critic_loss(params) < 0.5 * before
    assert not np.array_equal(target, setup.start) and not np.array_equal(target, params)  # between: averaged
    assert params[-1] != setup.start[-1]  # log α learned


def test_sac_learns_through_the_process_learners(no_shm_leak):
    import time

    from nonstop.learning.learners import LearnerProcesses, LearnerSettings, Segments

    setup = _SacSetup()
    try:
        before = setup.critic_loss(setup.start)
        settings = LearnerSettings((3,), BOX, setup.cfg, n_learners=2, seed=0)
        group = LearnerProcesses(settings, Segments(setup.state, setup.weights, setup.replay)).start()
        try:
            deadline = time.monotonic() + 120
            while setup.state.updates < 150 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            group.stop()
        assert setup.state.updates >= 150 and group.report()["restarts"] == [0, 0]
        _learned(setup, before)
    finally:
        setup.close()


def test_sac_learns_through_the_device_learner(no_shm_leak):
    from nonstop.learning.devicelearner import DeviceLearner, DeviceTrainingState
    from nonstop.learning.learners import LearnerSettings, Segments

    setup = _SacSetup()
    try:
        before = setup.critic_loss(setup.start)
        dstate = DeviceTrainingState.from_host(setup.state, "cpu")
        segments = Segments(setup.state, setup.weights, setup.replay)
        learner = DeviceLearner(LearnerSettings((3,), BOX, setup.cfg), dstate, segments, seed=0)
        for _ in range(150):
            learner.apply(learner.gradient())
        learner.close()  # the newest version reaches the host
        assert dstate.target_syncs == 150  # SAC's rule: a Polyak step after every update
        _learned(setup, before)
    finally:
        setup.close()


@pytest.mark.slow
@pytest.mark.wall
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time (tests/test_ray_backend.py)
def test_sac_learns_through_ray_learners(no_shm_leak):
    pytest.importorskip("ray", reason="the Ray backend needs the [ray] extra")
    import os
    import time

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from nonstop.distributed.ray_backend import WeightBroadcast, local_cluster, ray_session
    from nonstop.distributed.ray_learners import RayLearners
    from nonstop.learning.learners import LearnerSettings, Segments

    setup = _SacSetup()
    try:
        before = setup.critic_loss(setup.start)
        with local_cluster(1, num_cpus=2) as c, ray_session(c.address):
            learners = RayLearners(
                LearnerSettings((3,), BOX, setup.cfg, n_learners=2, seed=0),
                Segments(setup.state, setup.weights, setup.replay),
                broadcast=WeightBroadcast(setup.weights),
            ).start()
            try:
                deadline = time.monotonic() + 120
                while learners.applied < 150 and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                learners.stop()
        assert learners.applied >= 150
        _learned(setup, before)
    finally:
        setup.close()


@pytest.mark.parametrize("backend", ["batched", "thread"])
def test_sac_runs_on_the_batching_server_and_the_device_learner(backend, no_shm_leak):
    """The batching server's lanes answer with SAC's sampled vectors (no ε on top), the device learner learns."""
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.loop import train

    settings = SACConfig(learning_starts=30, batch_size=16, hidden=(16,), replay_capacity=2000)
    # 6 s: 120 ticks of Pendulum at its 20 Hz control rate (the continuous family's), past learning_starts
    result = train(
        TrainConfig(
            env="Pendulum-v1",
            algo="sac",
            algo_settings=settings,
            seconds=6.0,
            backend=backend,
            learner_backend="device",
            n_inference=2,
            latency="2t",
        )
    )
    from nonstop.realtime.tickcolumns import SOURCE_AGENT

    log = result["tick_log"]
    agent = log["source"] == SOURCE_AGENT
    assert result["updates"] > 0 and agent.sum() > 30  # one batch at a time: the server answers both lanes per batch
    if backend == "batched":
        server = result["parts"]["batch_server"]
        assert (
            server["requests"] >= agent.sum() and server["failed_batches"] == 0
        )  # (b, 1) float answers, each lane its row


def test_sacs_server_answers_are_a_float_array_of_the_box_shape() -> None:
    """What the batching server's forward gives: SAC's sampled actions as one (b, d) float32 array inside the Box
    (no object array of vectors), each row drawn anew."""
    from nonstop.learning.sac import SAC

    space = gymnasium.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 4.0], np.float32))
    algo = SAC(SACConfig(hidden=(8,)), (3,), space)

    class Forward:  # a TorchForward's q_values: the actor's (b, 2·|A|) outputs
        @staticmethod
        def q_values(batch: np.ndarray) -> torch.Tensor:
            return torch.zeros(len(batch), 4)

    answers = algo.serve(Forward(), seed=3)(np.zeros((5, 3), np.float32))
    assert answers.dtype == np.float32 and answers.shape == (5, 2) and algo.action_shape == (2,)
    assert ((answers >= space.low) & (answers <= space.high)).all() and len({tuple(a) for a in answers.tolist()}) == 5


@pytest.mark.wall
def test_sac_on_batched_process_workers_gets_vectors_through_the_ring(no_shm_leak):
    """Wall clock, 2 workers in processes of their own, remote lanes of the run's server: SAC's vectors cross
    the lane ring (its action slots of the Box's shape and dtype) and are applied; nothing failed or died."""
    from nonstop.experiment import Run, TrainConfig
    from nonstop.realtime.tickcolumns import SOURCE_AGENT

    settings = SACConfig(learning_starts=20, batch_size=8, hidden=(16,), replay_capacity=2000)
    cfg = TrainConfig(
        env="Pendulum-v1",
        algo="sac",
        algo_settings=settings,
        clock="wall",
        backend="batched_process",
        seconds=3.0,
        n_inference=2,
    )
    run = Run(cfg)
    try:
        run.build().start()
        run.advance(3.0)
        ring = run.part("batch_server").remote.ring
        assert ring.action_shape == (1,) and ring.action_dtype == np.float32
    finally:
        run.teardown()
    report = run.summary(run.world.tick_log)["batch_server"]
    assert sum(run.pool.report()["deaths"]) == 0, run.pool.report()["events"]
    assert report["failed_batches"] == 0 and report["remote_lanes"]["fed"] == report["requests"] > 10
    assert (run.world.tick_log["source"] == SOURCE_AGENT).sum() > 10


class _Recording(gymnasium.Wrapper):
    """Pendulum that keeps every action the host applies to it."""

    applied: list = []

    def step(self, action):
        _Recording.applied.append(np.array(action, np.float32).tolist())
        return super().step(action)


def _recording_pendulum():
    return _Recording(gymnasium.make("Pendulum-v1"))


@pytest.mark.parametrize("beta, between", [("repeat", [1.5]), ("noop", [0.0])])
def test_beta_on_a_box_world_holds_the_last_action_or_applies_zeros(beta, between, no_shm_leak):
    """SAC's continuous worlds take today's β: repeat holds the last agent action, noop applies the Box's zeros."""
    from nonstop.realtime.host import Session
    from nonstop.realtime.tickcolumns import SOURCE_AGENT

    _Recording.applied = []
    with Session(env=_recording_pendulum, tick_hz=20, default=beta, clock="virtual") as world:
        world.run_for(2 / 20)
        world.queue.submit(np.array([1.5], np.float32), obs_tick=2, episode=0)
        world.run_for(3 / 20)
        sources = world.tick_log["source"].tolist()
    assert sources == [0, 0, SOURCE_AGENT, 0, 0]
    assert _Recording.applied == [[0.0], [0.0], [1.5], between, between]


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch 2.13's; export's own
def test_sac_on_frames_trains_its_impala_encoder_with_the_critics_only():
    """On frames the IMPALA encoder is the critics' block: J_Q trains it, the actor reads its features held fixed."""
    from nonstop.learning.optim import flat_gradient

    algo = SACConfig(k=0.25, features=32, hidden=(32,)).algorithm(
        (84, 84), gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    )
    online, target = algo.build_model(), algo.build_model()
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, size=(4, 84, 84), dtype=np.uint8)
    batch = Batch(
        frames,
        rng.uniform(-1, 1, (4, 2)).astype(np.float32),
        np.ones(4, np.float32),
        np.full(4, 0.99, np.float32),
        frames[::-1].copy(),
        np.ones(4, np.int32),
    )
    losses = sac_losses(online, target, batch, target_entropy=algo.target_entropy)
    encoder = list(online.encoder.parameters())
    from_actor = torch.autograd.grad(losses.actor, encoder, allow_unused=True)
    assert all(g is None for g in from_actor)  # the actor loss never reaches the encoder
    algo.backward(online, target, batch)
    grad = flat_gradient(online)
    assert np.isfinite(grad).all() and all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder)
    exported = torch.jit.script(algo.export_module(online.eval()))
    action = exported(torch.from_numpy(frames[0]))
    assert action.shape == (1, 2) and bool((action.abs() <= 1).all())


def test_the_progress_line_shows_each_algorithms_own_exploration_figure(tmp_path):
    from nonstop.learning.runlog import OPTIONAL_PROGRESS_COLUMNS, PROGRESS_COLUMNS, RunLog, progress_line

    sac = progress_line({"env_ticks": 300, "alpha": 0.25, "recent_return": -150.0})
    dqn = progress_line({"env_ticks": 300, "epsilon": 0.5})
    assert "α 0.250" in sac and "ε" not in sac
    assert "ε 0.500" in dqn and "α" not in dqn
    # a progress.csv written before the alpha column resumes with its own columns
    old = [c for c in PROGRESS_COLUMNS if c not in OPTIONAL_PROGRESS_COLUMNS]
    RunLog(tmp_path, {"env": "CartPole"}, tensorboard=False).close()
    (tmp_path / "progress.csv").write_text(",".join(old) + "\n" + ",".join(["1"] * len(old)) + "\n")
    log = RunLog(tmp_path, {"env": "CartPole"}, resume=True, tensorboard=False)
    try:
        log.log_progress({"env_ticks": 2, "epsilon": 0.4})
    finally:
        log.close()
    lines = (tmp_path / "progress.csv").read_text().splitlines()
    assert lines[0] == ",".join(old) and len(lines) == 3 and lines[2].count(",") == len(old) - 1


def test_sacs_actor_takes_a_device_and_dtype() -> None:
    """--dtype bf16 on the CPU: SAC's worker actor runs its forward in bfloat16 and still answers a float32
    action inside the Box, close to the fp32 actor's (the deterministic tanh(μ) of the same weights)."""
    from nonstop.learning.sac import SAC
    from nonstop.learning.weights import flat_parameters

    space = gymnasium.spaces.Box(-2.0, 2.0, (2,), np.float32)
    algo = SAC(SACConfig(hidden=(32, 32)), (3,), space)
    model = algo.build_model()
    weights = SharedWeights.create(sum(p.numel() for p in model.parameters()))
    try:
        weights.publish(flat_parameters(model))
        obs = np.array([0.3, -0.2, 0.9], np.float32)
        actions = {}
        for dtype in ("fp32", "bf16"):
            policy = algo.policy(algo.build_model(), weights, seed=0, device="cpu", dtype=dtype)
            policy.deterministic = True
            assert policy.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
            actions[dtype] = policy.act(obs).action
            assert actions[dtype].dtype == np.float32 and actions[dtype].shape == (2,)
        assert np.abs(actions["bf16"] - actions["fp32"]).max() < 0.05 and np.abs(actions["bf16"]).max() <= 2.0
    finally:
        weights.unlink()
