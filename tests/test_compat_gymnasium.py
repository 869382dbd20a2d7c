"""Gymnasium's own vector envs and wrappers run nonstop worlds unchanged (issue 9):
AsyncVectorEnv (daemonic workers) on both clocks, SyncVectorEnv's info stacking across episode
ends, RecordEpisodeStatistics (which owns info['episode']), AtariPreprocessing and RecordVideo on
Boxing."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.wrappers import AtariPreprocessing, RecordEpisodeStatistics, RecordVideo

import nonstop
from nonstop.realtime.gym import INFO_KEYS

pytestmark = pytest.mark.usefixtures("no_shm_leak")


def _cartpole(clock: str):
    return lambda: nonstop.make("CartPole", clock=clock)


def _push_right(venv, steps: int) -> tuple[np.ndarray, dict]:
    ends = np.zeros(venv.num_envs, int)
    for _ in range(steps):
        _, _, terminated, truncated, infos = venv.step(np.ones(venv.num_envs, int))
        ends += terminated | truncated
        for key in INFO_KEYS:
            assert infos[key].dtype == np.int64 and infos[key].shape == (venv.num_envs,)
    return ends, infos


@pytest.mark.wall
def test_async_vector_env_on_both_clocks():
    """AsyncVectorEnv's workers are daemonic; the wall-clock world's host runs there as a thread."""
    venv = AsyncVectorEnv([_cartpole("virtual"), _cartpole("wall")])
    try:
        obs, infos = venv.reset(seed=0)
        assert obs.shape == (2, 4) and (infos["nonstop_delay"] == -1).all()
        ends, _ = _push_right(venv, 60)
        assert (ends >= 2).all()  # each world ended episodes and autoreset them
    finally:
        venv.close()


def test_sync_vector_env_stacks_info_across_episode_ends():
    venv = SyncVectorEnv([_cartpole("virtual"), _cartpole("virtual")])
    try:
        venv.reset(seed=[1, 2])
        ends, infos = _push_right(venv, 40)
        assert (ends >= 2).all()
        assert (infos["nonstop_ticks_elapsed"] >= 0).all()
    finally:
        venv.close()


def test_record_episode_statistics_counts_every_reward():
    env = RecordEpisodeStatistics(nonstop.make("CartPole"))
    try:
        env.reset(seed=0)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(1)
            total += reward
            done = terminated or truncated
        assert info["episode"]["r"] == total and info["episode"]["l"] == int(total)
        assert int(info["nonstop_ticks_elapsed"]) == 1  # nonstop's keys live beside it
    finally:
        env.close()


def test_atari_preprocessing_on_boxing():
    """AtariPreprocessing reads ALE through env.unwrapped (ale, get_action_meanings, _frameskip):
    it reaches the world's own emulator on the virtual clock."""
    world = nonstop.make("Boxing")
    try:
        env = AtariPreprocessing(world, noop_max=5, frame_skip=4)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (84, 84) and obs.dtype == np.uint8
        for _ in range(5):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.shape == (84, 84) and obs.any()
        assert int(env.unwrapped.tick_log.summary()["ticks"]) >= 20  # four ticks a step, plus no-ops
    finally:
        world.close()


@pytest.mark.slow
def test_record_video_on_boxing(tmp_path):
    env = RecordVideo(
        nonstop.make("Boxing", render_mode="rgb_array", env_kwargs={"max_episode_steps": 40}),
        video_folder=str(tmp_path / "videos"),
        episode_trigger=lambda episode: True,
        disable_logger=True,
    )
    try:
        env.reset(seed=0)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            done = terminated or truncated
    finally:
        env.close()
    videos = list((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000
