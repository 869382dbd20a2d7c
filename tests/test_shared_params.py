"""One copy of θ per host: workers computing straight from `SharedWeights` (no private copy)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from nonstop.distributed.shared_params import SharedParameters, make_shared_policy
from nonstop.learning.dqn import DQNConfig, build_q_network, make_dqn_policy
from nonstop.learning.weights import SharedWeights, flat_parameters


@pytest.fixture
def weights():
    w = SharedWeights.create(3)
    yield w
    w.unlink()


def test_parameters_are_views_of_the_newest_buffer(weights):
    model = torch.nn.Linear(2, 1)
    shared = SharedParameters(model, weights)
    assert shared.refresh() == 0  # nothing published: the model keeps its own parameters
    weights.publish(np.array([1.0, 2.0, 0.5], np.float32))
    assert shared.refresh() == 1
    assert float(model(torch.ones(1, 2))) == 3.5
    weights.publish(np.array([0.0, 0.0, -1.0], np.float32))  # v2 goes to the other buffer
    assert shared.intact() and float(model(torch.ones(1, 2))) == 3.5  # still v1, whole
    assert shared.refresh() == 2 and float(model(torch.ones(1, 2))) == -1.0
    assert np.shares_memory(model.weight.detach().numpy(), weights._buf0)  # no copy: the segment itself


def test_two_publishes_overtaking_a_pass_are_detected(weights):
    model = torch.nn.Linear(2, 1)
    shared = SharedParameters(model, weights)
    weights.publish(np.ones(3, np.float32))
    shared.refresh()
    weights.publish(np.ones(3, np.float32))
    assert shared.intact()  # v2 wrote the other buffer
    weights.publish(np.zeros(3, np.float32))  # v3 reuses v1's buffer: a pass on v1 may be torn
    assert not shared.intact()


def test_wrong_size_is_rejected(weights):
    with pytest.raises(ValueError, match="weights hold 3 numbers but the model has 5"):
        SharedParameters(torch.nn.Linear(4, 1), weights)


def test_shared_policy_acts_like_the_copying_policy():
    cfg = DQNConfig.for_family("classic")
    space = gym.spaces.Discrete(2)
    model = build_q_network((4,), 2, cfg)
    w = SharedWeights.create(sum(p.numel() for p in model.parameters()))
    try:
        w.publish(flat_parameters(model))
        w.epsilon = 0.0
        shared = make_shared_policy(cfg.algorithm((4,), space), w, 0)
        copying = make_dqn_policy((4,), space, cfg.to_dict(), w, 0)
        rng = np.random.default_rng(0)
        for _ in range(20):
            obs = rng.normal(size=4).astype(np.float32)
            assert shared.act(obs).action == copying.act(obs).action
        w.publish(-flat_parameters(model))  # a new version reaches both
        for _ in range(20):
            obs = rng.normal(size=4).astype(np.float32)
            assert shared.act(obs).action == copying.act(obs).action
        assert shared.version == copying.version == 2
        del shared, copying
    finally:
        w.unlink()


@pytest.mark.parametrize("epsilon", [0.0, 1.0])
def test_shared_policy_acts_in_a_space_that_starts_at_one(epsilon):
    """Game Boy's Discrete(6, start=1): the shared-weights policy's actions, greedy or random, are
    1..6 as the copying policy's are (it returned 0..5, an action the world does not have)."""
    cfg = DQNConfig.for_family("classic")
    space = gym.spaces.Discrete(6, start=1)
    model = build_q_network((4,), 6, cfg)
    w = SharedWeights.create(sum(p.numel() for p in model.parameters()))
    try:
        w.publish(flat_parameters(model))
        w.epsilon = epsilon
        shared = make_shared_policy(cfg.algorithm((4,), space), w, 0)
        copying = make_dqn_policy((4,), space, cfg.to_dict(), w, 0)
        rng = np.random.default_rng(0)
        for _ in range(50):
            obs = rng.normal(size=4).astype(np.float32)
            action = shared.act(obs).action
            assert space.contains(action) and action == copying.act(obs).action
        del shared, copying
    finally:
        w.unlink()


def test_doctests_of_the_distributed_modules():
    import doctest

    import nonstop.distributed.backends as backends
    import nonstop.distributed.ray_backend as ray_backend
    import nonstop.distributed.shared_params as shared_params

    for module in (backends, shared_params, ray_backend):
        failures, tried = doctest.testmod(module, verbose=False, report=False)
        assert tried > 0 and failures == 0, module.__name__
