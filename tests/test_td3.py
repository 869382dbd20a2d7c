"""TD3 (Fujimoto et al. 2018) as one file and one registry line: its door, its losses against numbers
computed by hand, its delayed actor and target updates through the learners' shared Adam, its actor, and a
short run that trains, checkpoints and exports."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
import torch

from nonstop.cli import main
from nonstop.learning.optim import UpdateRule, adam_step, apply_gradient, init_training
from nonstop.learning.replay import Batch
from nonstop.learning.td3 import TD3, TD3Config, TD3Policy, td3_losses, to_box
from nonstop.learning.weights import SharedWeights, TrainingState

BOX = gymnasium.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _set(linear: torch.nn.Linear, weight: list[list[float]], bias: list[float]) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(weight))
        linear.bias.copy_(torch.tensor(bias))


def _tiny_td3(**cfg):
    """TD3 on 1-d observations and a 1-d Box [-2, 2] with linear networks (no hidden layer), every number set."""
    algo = TD3Config(hidden=(), **cfg).algorithm((1,), BOX)
    online, target = algo.build_model(), algo.build_model()
    _set(online.q1.net[0], [[1.0, 0.5]], [0.2])  # Q1 = s + 0.5 a + 0.2
    _set(online.q2.net[0], [[-0.5, 1.5]], [0.0])  # Q2 = −0.5 s + 1.5 a
    _set(online.mu[1][0], [[0.4]], [0.1])  # μ = tanh(0.4 s + 0.1)
    _set(target.q1.net[0], [[0.8, 0.3]], [0.1])
    _set(target.q2.net[0], [[0.6, -0.4]], [0.3])
    _set(target.mu[1][0], [[-0.3]], [0.2])  # μ_targ = tanh(−0.3 s + 0.2)
    return algo, online, target


def test_the_door_refuses_a_world_td3_cannot_act_in_in_one_line(tmp_path, capsys):
    discrete = gymnasium.spaces.Discrete(2)
    vector = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
    with pytest.raises(
        ValueError, match=r"^TD3 needs a Box action space of one axis; CartPole has Discrete\(2\): use --algo dqn$"
    ):
        TD3.check_spaces(vector, discrete, "CartPole")
    with pytest.raises(ValueError, match="TD3 rescales its actions to the Box's bounds; W's are unbounded"):
        TD3.check_spaces(vector, gymnasium.spaces.Box(-np.inf, np.inf, (1,)), "W")
    frames = gymnasium.spaces.Box(0, 255, (84, 84), np.uint8)
    with pytest.raises(ValueError, match=r"TD3 learns from vector observations; F's are \(84, 84\)"):
        TD3.check_spaces(frames, BOX, "F")
    TD3.check_spaces(vector, BOX, "ok")  # a bounded Box from vectors: taken
    out = tmp_path / "cartpole"
    assert main(["train", "--algo", "td3", "--env", "CartPole", "--seconds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TD3 needs a Box action space of one axis; CartPole has Discrete(2)" in err
    assert not out.exists()


def test_bad_settings_are_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"TD3Config.policy_delay must be a positive integer, got 0"):
        TD3Config(policy_delay=0)
    with pytest.raises(ValueError, match=r"TD3Config.noise_clip must be a number >= 0"):
        TD3Config(noise_clip=-0.1)
    assert TD3Config().for_run(10_000).learning_starts == 1000  # a tenth of the run, as SAC's
    assert TD3Config().target_rule() == (2, 0.005)  # the targets move on the actor's updates only


def test_the_losses_are_the_papers_clipped_double_q_with_target_policy_smoothing():
    algo, online, target = _tiny_td3(policy_noise=0.2, noise_clip=0.5)
    s, a_env, r, gamma_n, s2 = 0.5, 1.0, 1.5, 0.9, -1.0
    batch = Batch(
        obs=np.array([[s]], np.float32),
        action=np.array([[a_env]], np.float32),
        reward=np.array([r], np.float32),
        discount=np.array([gamma_n], np.float32),
        next_obs=np.array([[s2]], np.float32),
        n_ticks=np.array([1]),
    )
    smoothing = torch.tensor([[0.9]])  # drawn ε before its clip: clipped to c = 0.5
    critic, actor, y = td3_losses(online, target, batch, algo.cfg, smoothing=smoothing)
    # by hand, line by line from the paper
    a2 = float(np.clip(np.tanh(-0.3 * s2 + 0.2) + min(0.9, 0.5), -1.0, 1.0))  # ã' (clipped to the Box)
    q_next = min(0.8 * s2 + 0.3 * a2 + 0.1, 0.6 * s2 - 0.4 * a2 + 0.3)
    y_hand = r + gamma_n * q_next
    a = a_env / 2.0  # the world's action, normalised
    critic_hand = (s + 0.5 * a + 0.2 - y_hand) ** 2 + (-0.5 * s + 1.5 * a - y_hand) ** 2
    actor_hand = -(s + 0.5 * np.tanh(0.4 * s + 0.1) + 0.2)  # −Q1(s, μ(s))
    assert y.item() == pytest.approx(y_hand, rel=1e-6)
    assert critic.item() == pytest.approx(critic_hand, rel=1e-6)
    assert actor.item() == pytest.approx(actor_hand, rel=1e-6)
    # the gradient: J_Q's into the critics only, J_μ's into the actor only (the critics held fixed); no
    # smoothing noise, so that y is known: ã' = μ_targ(s')
    algo.cfg.policy_noise = 0.0
    a2 = float(np.tanh(-0.3 * s2 + 0.2))
    y_hand = r + gamma_n * min(0.8 * s2 + 0.3 * a2 + 0.1, 0.6 * s2 - 0.4 * a2 + 0.3)
    algo.backward(online, target, batch)
    dmu = -0.5 * (1 - np.tanh(0.4 * s + 0.1) ** 2)  # ∂(−Q1(s, tanh(w s + b)))/∂b
    assert online.mu[1][0].bias.grad.item() == pytest.approx(dmu, rel=1e-5)
    assert online.q1.net[0].bias.grad.item() == pytest.approx(2 * (s + 0.5 * a + 0.2 - y_hand), rel=1e-5)


def _state(n: int) -> tuple[TrainingState, SharedWeights]:
    return TrainingState.create(n), SharedWeights.create(n)


def test_the_actor_and_targets_step_every_second_update_and_adam_leaves_the_actor_alone_between(no_shm_leak):
    """The actor's block (θ's tail) holds its θ and Adam moments still on the updates in between, and counts
    its own steps for the bias correction; the targets move (Polyak τ) only with it."""
    algo = TD3Config(hidden=(2,), lr=0.1, tau=0.5).algorithm((1,), BOX)
    rule = algo.update_rule()
    model = algo.build_model()
    n = sum(p.numel() for p in model.parameters())
    n_actor = sum(p.numel() for p in model.mu.parameters())
    assert rule.delayed == (n - n_actor, n, 2) and (rule.target_every, rule.target_polyak) == (2, 0.5)
    actor = slice(n - n_actor, n)
    state, weights = _state(n)
    try:
        init_training(model, state, weights)
        theta0 = state.params.copy()
        grad = np.linspace(-1.0, 1.0, n).astype(np.float32)
        assert apply_gradient(state, weights, grad, rule) == 1  # update 1: the critics only
        assert np.array_equal(state.params[actor], theta0[actor])
        assert not state.adam_m[actor].any() and not state.adam_v[actor].any()
        assert not np.array_equal(state.params[: n - n_actor], theta0[: n - n_actor])
        assert np.array_equal(state.target, theta0)  # no target step yet
        before = state.params.copy()
        assert apply_gradient(state, weights, grad, rule) == 2  # update 2: the actor's first step, the targets
        p, m, v = (torch.zeros(n_actor) for _ in range(3))
        p += torch.from_numpy(theta0[actor])
        adam_step(
            p, m, v, torch.from_numpy(grad[actor]), 1, UpdateRule(0.1, algo.cfg.adam_eps)
        )  # a fresh Adam's step 1
        assert np.allclose(state.params[actor], p.numpy(), atol=1e-7)
        assert np.allclose(state.target, theta0 + 0.5 * (state.params - theta0), atol=1e-6)
        # what the rule avoids: Adam fed a zero gradient still moves the actor through its moments
        moved = torch.from_numpy(state.params[actor].copy())
        m0, v0 = torch.from_numpy(state.adam_m[actor].copy()), torch.from_numpy(state.adam_v[actor].copy())
        adam_step(moved, m0, v0, torch.zeros(n_actor), 3, UpdateRule(0.1, algo.cfg.adam_eps))
        assert not np.allclose(moved.numpy(), state.params[actor])
        kept = state.params[actor].copy()
        apply_gradient(state, weights, grad, rule)  # update 3: the actor stays
        assert np.array_equal(state.params[actor], kept) and not np.array_equal(state.params, before)
    finally:
        state.unlink()
        weights.unlink()


def test_the_actor_acts_uniformly_first_then_its_mean_plus_clipped_gaussian_noise(no_shm_leak):
    algo, online, _ = _tiny_td3(exploration_noise=0.1)
    weights = SharedWeights.create(sum(p.numel() for p in online.parameters()))
    try:
        state = TrainingState.create(weights.n_params)
        try:
            init_training(online, state, weights)
            weights.exploration = algo.exploration(0, state.params)
            policy = algo.policy(algo.build_model(), weights, seed=0)
            assert isinstance(policy, TD3Policy)
            first = [float(policy.act(np.array([0.5], np.float32)).action[0]) for _ in range(200)]
            assert min(first) < -1.5 and max(first) > 1.5  # uniform over [-2, 2] before the first update
            weights.publish(state.params)  # a learner's update: the actor acts from θ
            mu = 2.0 * np.tanh(0.4 * 0.5 + 0.1)
            acts = np.array([policy.act(np.array([0.5], np.float32)).action[0] for _ in range(400)])
            assert abs(acts.mean() - mu) < 0.05 and 0.1 < acts.std() < 0.3  # σ = 0.1 of the half-width 2
            assert np.all((acts >= -2.0) & (acts <= 2.0))
        finally:
            state.unlink()
    finally:
        weights.unlink()
    assert to_box(np.array([[3.0]]), np.array([-2.0]), np.array([2.0]), 0.0, np.random.default_rng(0)).tolist() == [
        [2.0]
    ]


@pytest.mark.filterwarnings("ignore:.*torch.jit.load.*:DeprecationWarning")
def test_a_short_pendulum_run_learns_checkpoints_and_exports_the_deterministic_actor(tmp_path, capsys, no_shm_leak):
    from nonstop.experiment.export import export_policy
    from nonstop.learning.checkpoint import latest_checkpoint

    run = tmp_path / "td3"
    argv = ["train", "--algo", "td3", "--env", "Pendulum-v1", "--seconds", "10", "--latency", "1t"]
    argv += ["--hidden", "16", "--batch-size", "32", "--learning-starts", "50", "--out", str(run)]
    assert main(argv) == 0
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    config = json.loads((run / "config.json").read_text())
    assert config["algo"] == "td3" and config["algo_settings"]["policy_delay"] == 2
    assert done["updates"] > 100 and latest_checkpoint(run).updates == done["updates"]
    meta = export_policy(run)
    assert meta["algo"] == "td3" and meta["action_space"] == {"type": "Box", "shape": [1], "low": [-2.0], "high": [2.0]}
    program = torch.jit.load(meta["written"]["program"])
    out = program(torch.zeros(5, 3))
    assert out.shape == (5, 1) and bool(((out >= -2.0) & (out <= 2.0)).all())
