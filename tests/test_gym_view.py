"""The Gymnasium view (DESIGN §1, "Gymnasium view"): any Gymnasium agent runs
in realtime unchanged, and a slow one suffers inaction automatically."""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from nonstop.realtime.gym import RealtimeEnv, make

from conftest import ScriptedEnv, cartpole

pytestmark = pytest.mark.usefixtures("no_shm_leak")

HZ = 60
TAU = 1 / HZ


@pytest.fixture
def close_after():
    envs: list[RealtimeEnv] = []
    yield envs.append
    for env in envs:
        env.close()


@pytest.mark.parametrize("factory", [ScriptedEnv, cartpole], ids=["scripted", "cartpole"])
def test_passes_gymnasium_env_checker(factory, close_after):
    env = make(factory, tick_hz=HZ)
    close_after(env)
    assert isinstance(env, gymnasium.Env)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*infinity.*")  # CartPole's own Box bounds
        check_env(env, skip_render_check=True)


def test_fast_agent_suffers_no_inaction(close_after):
    env = make(ScriptedEnv, tick_hz=HZ)
    close_after(env)
    obs, info = env.reset(seed=0)
    assert obs[0] == 0 and info["nonstop_tick"] == 0
    for t in range(1, 41):
        action = t % 3
        obs, reward, terminated, truncated, info = env.step(action)
        assert (info["nonstop_ticks_elapsed"], info["nonstop_inaction_ticks"], info["nonstop_agent_ticks"], info["nonstop_delay"]) == (1, 0, 1, 1)
        assert obs[0] == t == info["nonstop_tick"] and obs[2] == action  # the tick applied *this* action
        assert reward == action + 1 and not terminated and not truncated
    s = env.tick_log.summary()
    assert (s["ticks"], s["inaction_ticks"]) == (40, 0)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_think_time_k_ticks_first_decision(k, close_after):
    env = make(ScriptedEnv, tick_hz=HZ, think_time=k * TAU)
    close_after(env)
    env.reset(seed=0)
    obs, reward, _, _, info = env.step(2)
    assert (info["nonstop_ticks_elapsed"], info["nonstop_inaction_ticks"], info["nonstop_delay"]) == (k, k - 1, k)
    assert reward == (k - 1) * 1 + 3  # β's noop pays 1 per tick, the agent's action 2 pays 3
    assert obs[0] == k and obs[2] == 2


@pytest.mark.parametrize("k", [1, 3])
def test_think_time_k_ticks_every_decision(k, close_after):
    env = make(ScriptedEnv, tick_hz=HZ, think_time=k * TAU)
    close_after(env)
    env.reset(seed=0)
    for _ in range(20):
        _, _, _, _, info = env.step(1)
        assert (info["nonstop_ticks_elapsed"], info["nonstop_inaction_ticks"], info["nonstop_delay"]) == (k, k - 1, k)


def test_fractional_think_time_matches_the_docstring(close_after):
    """2.5 ticks of thought end mid-tick, away from any deadline: every decision
    (the agent waits for the tick after submitting) spans 3 ticks, 2 of them β's."""
    env = make(ScriptedEnv, tick_hz=HZ, think_time=2.5 * TAU)
    close_after(env)
    env.reset(seed=0)
    for _ in range(20):
        _, _, _, _, info = env.step(1)
        assert (info["nonstop_ticks_elapsed"], info["nonstop_inaction_ticks"], info["nonstop_delay"]) == (3, 2, 3)
    s = env.tick_log.summary()
    assert (s["ticks"], s["agent_ticks"], s["delay_histogram"]) == (60, 20, {3: 20})
    assert s["tau_i_mean_ticks"] == pytest.approx(3.0)


@pytest.mark.parametrize("truncate", [False, True])
def test_episode_end_surfaces_and_reset_returns_new_first_obs(truncate, close_after):
    env = make(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 5, "truncate": truncate})
    close_after(env)
    obs, info = env.reset(seed=0)
    for t in range(1, 6):
        obs, reward, terminated, truncated, info = env.step(1)
        assert (terminated, truncated) == ((t == 5 and not truncate), (t == 5 and truncate))
    assert info["nonstop_episode"] == 1
    obs, info = env.reset()
    assert obs[1] == 0 and obs[3] == 1  # step 0 of episode 1
    assert info["nonstop_episode"] == 1 and info["nonstop_ticks_elapsed"] == 0
    obs, reward, terminated, truncated, info = env.step(2)
    assert obs[1] == 1 and obs[3] == 1 and not (terminated or truncated)
    log = env.tick_log
    assert log["episode"].tolist() == [0] * 5 + [1]
    assert log["terminated" if not truncate else "truncated"].tolist() == [0, 0, 0, 0, 1, 0]


@pytest.mark.parametrize("think_ticks", [0.0, 1.5])
def test_terminal_step_returns_terminal_observation(think_ticks, close_after):
    """At an episode end step() returns the terminal state (what a value bootstrap on truncation
    needs), even though the host reset the world in the same tick; reset() then gives the new
    episode's current observation. A slow agent (1.5 ticks per decision) lets the world run on
    into the next episode before it looks, and still gets the terminal state."""
    env = make(
        ScriptedEnv, tick_hz=HZ, think_time=think_ticks / HZ, env_kwargs={"episode_len": 3, "truncate": True}
    )
    close_after(env)
    env.reset(seed=0)
    truncated, seen = False, 0.0
    while not truncated:
        obs, reward, _, truncated, info = env.step(1)
        seen += reward
    assert (obs[1], obs[3]) == (3, 0)  # step 3 of episode 0, not step 0 of episode 1
    log = env.tick_log
    assert seen == log["reward"][log["episode"] == 0].sum()  # every reward of episode 0, none of episode 1
    assert (info["nonstop_tick"] > 3) == (think_ticks > 0)  # the slow agent looked after the world moved on
    obs, info = env.reset()
    assert obs[3] == 1 and info["nonstop_episode"] == 1


def test_reset_mid_episode_ends_it_as_truncated(close_after):
    env = make(ScriptedEnv, tick_hz=HZ)
    close_after(env)
    env.reset(seed=0)
    for _ in range(4):
        env.step(1)
    obs, info = env.reset()
    assert info["nonstop_episode"] == 1 and obs[1] == 0 and obs[3] == 1
    log = env.tick_log
    assert log["truncated"].tolist() == [0, 0, 0, 0, 1]
    assert log["episode"].tolist() == [0] * 5
    obs, _, terminated, truncated, info = env.step(0)
    assert not (terminated or truncated) and info["nonstop_episode"] == 1 and obs[1] == 1


def test_reset_with_seed_restarts_the_world_reproducibly(close_after):
    env = make(cartpole, tick_hz=HZ)
    close_after(env)

    def rollout(seed):
        obs, _ = env.reset(seed=seed)
        trace = [obs]
        for t in range(30):
            obs, *_ = env.step(t % 2)
            trace.append(obs)
        return np.array(trace)

    a, b, c = rollout(7), rollout(7), rollout(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_rejects_invalid_arguments_and_actions(close_after):
    with pytest.raises(ValueError, match="think_time"):
        make(ScriptedEnv, tick_hz=HZ, think_time=-1)
    env = make(ScriptedEnv, tick_hz=HZ)
    close_after(env)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"Discrete\(3\)"):
        env.step(7)
    _, _, _, _, info = env.step(1)  # unharmed
    assert info["nonstop_delay"] == 1


@pytest.mark.wall
def test_wall_think_time_rejected():
    with pytest.raises(ValueError, match="virtual clock"):
        make(ScriptedEnv, tick_hz=HZ, clock="wall", think_time=0.1)


@pytest.mark.wall
def test_wall_clock_smoke():
    hz = 50
    env = make(ScriptedEnv, clock="wall", tick_hz=hz)
    try:
        obs, info = env.reset()
        first_tick = info["nonstop_tick"]
        started = time.perf_counter()
        infos = []
        for t in range(25):
            obs, reward, terminated, truncated, info = env.step(t % 3)
            assert env.observation_space.contains(obs)
            assert obs[0] == info["nonstop_tick"]  # the observation of the tick reported
            assert info["nonstop_ticks_elapsed"] >= 1 and reward >= info["nonstop_ticks_elapsed"]
            infos.append(info)
        elapsed = time.perf_counter() - started
        ticks = sum(i["nonstop_ticks_elapsed"] for i in infos)
        assert ticks == infos[-1]["nonstop_tick"] - first_tick
        assert 0.7 * elapsed * hz - 2 <= ticks <= 1.3 * elapsed * hz + 2, (ticks, elapsed)
        on_time = sum(i["nonstop_delay"] == 1 and i["nonstop_inaction_ticks"] == 0 for i in infos)
        assert on_time >= len(infos) // 2, infos  # a fast agent mostly makes the next tick
    finally:
        env.close()
    log = env.session.tick_log if env.session is not None else None
    assert log is None  # closed
    assert not [p for p in mp.active_children() if p.name.startswith("nonstop-host")]
