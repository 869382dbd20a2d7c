"""Stable-Baselines3 runs nonstop worlds unchanged (issue 9): its env checker passes, DQN and PPO
learn exactly as on plain CartPole-v1 on the virtual clock, and short wall-clock runs (a host
process, or host threads inside SubprocVecEnv's daemonic workers) work. Budgets are tiny: the
long runs belong in a benchmark."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import SubprocVecEnv

import nonstop

pytestmark = pytest.mark.usefixtures("no_shm_leak")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny MLPs: one thread is several times faster than two fighting over a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("env_id", ["CartPole", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_sb3_check_env(env_id):
    env = nonstop.make(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning from the checker is a failure here
            warnings.filterwarnings("ignore", message=".*(infinity|symmetric|normaliz).*")
            check_env(env)
    finally:
        env.close()


def _episode_returns(env: gymnasium.Env, algo, steps: int, **kwargs) -> list[float]:
    env = Monitor(env)
    try:
        algo("MlpPolicy", env, seed=0, device="cpu", **kwargs).learn(steps)
        return env.get_episode_rewards()
    finally:
        env.close()


@pytest.mark.parametrize(
    "algo, steps, kwargs",
    [
        (DQN, 500, dict(learning_starts=100, train_freq=8, buffer_size=1000)),
        (PPO, 256, dict(n_steps=128, batch_size=64, n_epochs=1)),
    ],
    ids=["DQN", "PPO"],
)
def test_virtual_clock_learns_exactly_as_plain_cartpole(algo, steps, kwargs):
    """Same seeds, same returns, episode for episode: a virtual-clock world with an agent that
    thinks in no time is CartPole-v1 itself, seen through Monitor (which owns info['episode'])."""
    plain = _episode_returns(gymnasium.make("CartPole-v1"), algo, steps, **kwargs)
    realtime = _episode_returns(nonstop.make("CartPole"), algo, steps, **kwargs)
    assert len(plain) >= 8
    assert realtime == plain


@pytest.mark.wall
def test_wall_clock_ppo_short_run():
    env = Monitor(nonstop.make("CartPole", clock="wall"))
    try:
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(64)
        assert model.num_timesteps == 64 and len(env.get_episode_rewards()) >= 1
    finally:
        env.close()
    log = env.unwrapped.session  # closed: the session is gone
    assert log is None


def _cartpole(clock: str):
    return lambda: nonstop.make("CartPole", clock=clock)


@pytest.mark.wall
def test_subproc_vec_env_on_both_clocks():
    """SubprocVecEnv's workers are daemonic: the wall-clock world's host runs there as a thread."""
    # fork: workers start in milliseconds instead of importing torch again (forkserver, SB3's
    # default, starts the same daemonic workers, only slower)
    venv = SubprocVecEnv([_cartpole("virtual"), _cartpole("wall")], start_method="fork")
    try:
        venv.seed(0)
        obs = venv.reset()
        assert obs.shape == (2, 4)
        dones = np.zeros(2, int)
        for _ in range(60):
            obs, rewards, done, infos = venv.step(np.array([1, 1]))
            dones += done
            assert all(int(i["nonstop_ticks_elapsed"]) >= 1 for i in infos)
            for i, d in zip(infos, done):
                if d:  # SB3's autoreset keeps the terminal observation
                    assert i["terminal_observation"].shape == (4,)
        assert (dones >= 2).all()  # pushing right always drops the pole within 60 ticks
        assert [m["render_fps"] for m in venv.get_attr("metadata")] == [50.0, 50.0]
    finally:
        venv.close()
