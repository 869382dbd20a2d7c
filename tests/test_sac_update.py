"""SAC's acting before it learns: uniformly random actions over the Box until the learners' first update
(CleanRL, SB3 and Tianshou all start so), on every way an actor reads its weights."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from nonstop.learning.sac import SAC, SACConfig
from nonstop.learning.weights import SharedWeights, flat_parameters

BOX = gymnasium.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _algo(**kw) -> SAC:
    return SACConfig(hidden=(8,), **kw).algorithm((3,), BOX)


def _pushed_high(algo: SAC) -> np.ndarray:
    """θ whose actor's mean is +10 whatever the observation: its samples sit at the Box's top, 2.0."""
    model = algo.build_model()
    with torch.no_grad():
        last = model.actor.net[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([10.0, -5.0]))  # μ = 10, log σ at its floor
    return flat_parameters(model)


def _actions(policy, n: int = 200) -> np.ndarray:
    return np.array([policy.act(np.zeros(3, np.float32)).action[0] for _ in range(n)])


@pytest.fixture
def weights():
    algo = _algo()
    w = SharedWeights.create(_pushed_high(algo).size)
    yield w
    w.unlink()


def test_the_actor_acts_uniformly_over_the_box_until_a_second_version_is_published(weights) -> None:
    algo = _algo()
    flat = _pushed_high(algo)
    weights.publish(flat)  # the run's initial θ: version 1
    weights.exploration = 1.0  # the trainer's header: α
    policy = algo.policy(algo.build_model(), weights, seed=0)
    before = _actions(policy)
    # the old actor's samples all sat at 2.0 (its mean); uniform ones spread over [-2, 2]
    assert before.min() < -1.5 and before.max() > 1.5 and abs(before.mean()) < 0.4
    assert np.all((before >= -2.0) & (before <= 2.0)) and before.dtype == np.float32
    weights.publish(flat)  # the learners' first update
    after = _actions(policy, 50)
    assert np.allclose(after, 2.0, atol=1e-3)


def test_a_frozen_opponent_and_an_actor_without_random_start_act_from_their_weights(weights) -> None:
    flat = _pushed_high(_algo())
    weights.publish(flat)
    weights.exploration = 0.0  # a frozen snapshot's header (SAC's opponent_exploration)
    algo = _algo()
    assert np.allclose(_actions(algo.policy(algo.build_model(), weights, seed=0), 20), 2.0, atol=1e-3)
    weights.exploration = 1.0
    plain = _algo(random_start=False)
    assert np.allclose(_actions(plain.policy(plain.build_model(), weights, seed=0), 20), 2.0, atol=1e-3)
    deterministic = algo.policy(algo.build_model(), weights, seed=0)
    deterministic.deterministic = True  # evaluation and export act tanh(μ)
    assert np.allclose(_actions(deterministic, 5), 2.0, atol=1e-3)


class _Refresh:
    version = 0


class _Forward:
    """A batching server's forward pass: its model's outputs and how new versions reach it."""

    def __init__(self, algo: SAC) -> None:
        self.model = algo.build_model()
        from nonstop.learning.weights import load_flat

        load_flat(self.model, _pushed_high(algo))
        self.refresh = _Refresh()

    def q_values(self, batch: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return self.model(torch.from_numpy(batch))


def test_the_batching_servers_answers_are_uniform_until_the_served_model_takes_a_new_version() -> None:
    algo = _algo()
    forward = _Forward(algo)
    serve = algo.serve(forward, seed=0)
    before = serve(np.zeros((400, 3), np.float32))
    assert before.shape == (400, 1) and before.dtype == np.float32
    assert before.min() < -1.5 and before.max() > 1.5
    forward.refresh.version = 1  # the learners' first update reached the server's model
    assert np.allclose(serve(np.zeros((8, 3), np.float32)), 2.0, atol=1e-3)


def test_random_start_is_a_setting_saved_with_the_run() -> None:
    cfg = SACConfig()
    assert cfg.random_start and cfg.to_dict()["random_start"] is True
    assert SACConfig.from_dict({**cfg.to_dict(), "random_start": False}).random_start is False


def test_learning_starts_left_unset_is_a_tenth_of_the_run_up_to_the_rl_zoos_10000(no_shm_leak) -> None:
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.run import Run

    assert SACConfig().learning_starts is None and SACConfig().for_run(100_000).learning_starts == 10_000
    assert SACConfig(learning_starts=7).for_run(100_000).learning_starts == 7  # given: kept
    cfg = TrainConfig(env="Pendulum-v1", clock="virtual", seconds=100.0, algo="sac", latency="1t")
    run = Run(cfg)
    try:
        run.build()
        assert run.settings.learning_starts == 256  # 2,000 ticks: a tenth is 200, at least a batch
        assert cfg.algo_settings.learning_starts == 256  # saved with the run: a resume keeps it
    finally:
        run.teardown()


def test_a_process_workers_actor_on_the_hosts_shared_theta_starts_uniform_too(weights) -> None:
    """Process workers compute from the host's one shared copy of θ (`make_shared_policy`): its version
    moves inside the forward pass, and the actor reads it there."""
    from nonstop.distributed.shared_params import make_shared_policy

    algo = _algo()
    flat = _pushed_high(algo)
    weights.publish(flat)
    weights.exploration = 1.0
    policy = make_shared_policy(algo, weights, 0)
    before = _actions(policy)
    assert before.min() < -1.5 and before.max() > 1.5
    weights.publish(flat)
    assert np.allclose(_actions(policy, 20), 2.0, atol=1e-3)


def test_a_resumed_run_acts_from_its_restored_theta_not_uniformly(weights) -> None:
    """A resume publishes the initial θ and then the checkpoint's at once (version 2): its actors act from
    the trained weights while the learners wait for their first new update."""
    algo = _algo()
    flat = _pushed_high(algo)
    weights.publish(flat)  # init_training
    weights.publish(flat)  # the checkpoint's θ, restored before any worker starts
    weights.exploration = 1.0
    assert np.allclose(_actions(algo.policy(algo.build_model(), weights, seed=0), 20), 2.0, atol=1e-3)
    forward = _Forward(algo)
    forward.refresh.version = 2  # the batching server's model took the restored θ
    assert np.allclose(algo.serve(forward, seed=0)(np.zeros((8, 3), np.float32)), 2.0, atol=1e-3)
