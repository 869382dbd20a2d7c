"""torchrl wraps nonstop worlds unchanged (issue 9): GymWrapper passes check_env_specs on a
discrete and two continuous worlds, and its info reader turns nonstop's info keys into
tensors."""

from __future__ import annotations

import pytest
import torch
from torchrl.data import Unbounded
from torchrl.envs import GymWrapper
from torchrl.envs.libs.gym import default_info_dict_reader
from torchrl.envs.utils import check_env_specs

import nonstop
from nonstop.realtime.gym import INFO_KEYS

pytestmark = pytest.mark.usefixtures("no_shm_leak")


@pytest.mark.parametrize("env_id", ["CartPole", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_gym_wrapper_passes_check_env_specs(env_id):
    env = GymWrapper(nonstop.make(env_id))
    try:
        check_env_specs(env, seed=0)
        rollout = env.rollout(12)
        assert rollout["next", "reward"].shape == (len(rollout), 1)
    finally:
        env.close()


def test_info_dict_reader_reads_nonstop_keys():
    env = GymWrapper(nonstop.make("CartPole", think_time=1.5 / 50))
    try:
        specs = {key: Unbounded(shape=(), dtype=torch.int64) for key in INFO_KEYS}
        env.set_info_dict_reader(default_info_dict_reader(list(INFO_KEYS), spec=specs))
        check_env_specs(env, seed=0)
        rollout = env.rollout(5, policy=lambda td: td.set("action", env.action_spec.zero()))
        ticks = rollout["next", "nonstop_ticks_elapsed"]
        assert ticks.dtype == torch.int64 and ticks.flatten().tolist() == [2] * 5  # 1.5 ticks of thought: 2 a step
        inaction, agent = rollout["next", "nonstop_inaction_ticks"], rollout["next", "nonstop_agent_ticks"]
        assert (inaction + agent == ticks).all() and (inaction >= 1).all()  # β ticks while it thinks
    finally:
        env.close()
