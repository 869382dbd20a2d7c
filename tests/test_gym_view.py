"""The Gymnasium view (docs/design.md §1, "Gymnasium view"): any Gymnasium agent runs
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

from conftest import ScriptedEnv, cartpole, slow_reset_cartpole

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
        assert (
            info["nonstop_ticks_elapsed"],
            info["nonstop_inaction_ticks"],
            info["nonstop_agent_ticks"],
            info["nonstop_delay"],
        ) == (1, 0, 1, 1)
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
    env = make(ScriptedEnv, tick_hz=HZ, think_time=think_ticks / HZ, env_kwargs={"episode_len": 3, "truncate": True})
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


# ---------------------------------------------------------------------------- issue 9: drop-in


def _episode_end_trace(clock: str) -> list[tuple]:
    """Three seeded CartPole episodes pushed right until the pole falls, reset() after each (each
    reset takes 5 ms, so the host's two publishes at an episode end are far apart on the wall)."""
    env = make(slow_reset_cartpole, clock=clock, tick_hz=20, default="repeat")
    trace = []
    try:
        obs, info = env.reset(seed=3)
        trace.append(("reset", obs.tolist(), int(info["nonstop_episode"])))
        for _ in range(3):
            terminated = truncated = False
            while not (terminated or truncated):
                obs, reward, terminated, truncated, info = env.step(1)
                trace.append(
                    (
                        obs.tolist(),
                        reward,
                        terminated,
                        truncated,
                        int(info["nonstop_episode"]),
                        int(info["nonstop_ticks_elapsed"]),
                        int(info["nonstop_delay"]),
                    )
                )
            obs, info = env.reset()
            trace.append(("reset", obs.tolist(), int(info["nonstop_episode"])))
    finally:
        env.close()
    return trace


@pytest.mark.wall
def test_wall_clock_episode_ends_match_the_virtual_clock_step_by_step():
    """At an episode end the host publishes twice in one tick (terminal, then the reset
    observation); the wall-clock view must return the terminal observation with its flag, as
    the virtual clock does, not the first publish a step early and the flag a step late."""
    virtual, wall = _episode_end_trace("virtual"), _episode_end_trace("wall")
    ends = [row for row in virtual if row[0] != "reset" and row[2]]
    assert len(ends) == 3  # three terminal steps, each terminated=True
    assert wall == virtual


def test_info_keys_are_namespaced_numpy_ints_after_reset_and_step(close_after):
    from nonstop.realtime.gym import INFO_KEYS

    env = make(ScriptedEnv, tick_hz=HZ)
    close_after(env)
    _, info = env.reset(seed=0)
    assert sorted(info) == sorted(INFO_KEYS)
    assert all(type(v) is np.int64 for v in info.values())
    assert info["nonstop_delay"] == -1  # no action yet: -1, never None
    _, _, _, _, info = env.step(1)
    assert sorted(info) == sorted(INFO_KEYS) and all(type(v) is np.int64 for v in info.values())
    assert "episode" not in info  # owned by RecordEpisodeStatistics / SB3's Monitor


def test_lifecycle_reset_before_step_nothing_after_close():
    env = make(ScriptedEnv, tick_hz=HZ)
    with pytest.raises(gymnasium.error.ResetNeeded, match="reset"):
        env.step(0)
    env.reset(seed=0)
    env.step(0)
    env.close()
    env.close()  # idempotent
    for call in (lambda: env.reset(), lambda: env.reset(seed=0), lambda: env.step(0)):
        with pytest.raises(gymnasium.error.ClosedEnvironmentError, match="close"):
            call()


def test_action_space_seeding_survives_reset_with_seed(close_after):
    env = make(ScriptedEnv, tick_hz=HZ)
    close_after(env)
    space = env.action_space
    space.seed(42)
    first = [space.sample() for _ in range(8)]
    space.seed(42)
    env.reset(seed=5)  # restarts the world with a new seed
    assert env.action_space is space
    assert [env.action_space.sample() for _ in range(8)] == first


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "MountainCarContinuous-v0"])
@pytest.mark.parametrize("default", ["noop", "repeat"])
def test_continuous_actions_get_a_vector_beta(env_id, default, close_after):
    """β for a Box space is zeros of its shape; agent vectors travel through the action queue."""
    env = make(env_id, default=default, think_time=0.09)  # 2.7 ticks at 30 Hz
    close_after(env)
    assert isinstance(env.session.noop_action, np.ndarray)
    assert env.session.noop_action.shape == env.action_space.shape and not env.session.noop_action.any()
    env.reset(seed=0)
    for _ in range(10):
        obs, reward, terminated, truncated, info = env.step(np.full(env.action_space.shape, 0.5, np.float32))
        assert env.observation_space.contains(obs) and np.isfinite(reward)
    s = env.tick_log.summary()
    assert s["inaction_ticks"] > 0 and s["agent_ticks"] == 10


def test_declared_noop_outside_the_space_is_refused():
    from nonstop.realtime.host import Session

    with pytest.raises(ValueError, match="noop_action"):
        Session("Pendulum-v1", env_kwargs={"noop_action": 7}).start()


def test_render_fps_spec_and_boxing_extras(close_after):
    env = make("Boxing", render_mode="rgb_array", env_kwargs={"max_episode_steps": 30})
    close_after(env)
    assert env.metadata["render_fps"] == 60.0 and "rgb_array" in env.metadata["render_modes"]
    assert env.spec is not None and env.spec.id == "nonstop/Boxing"
    assert env.get_action_meanings()[0] == "NOOP"
    assert env.unwrapped.ale.lives() >= 0
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(env.render(), obs)  # Boxing's observation is its screen
    obs, *_ = env.step(1)
    np.testing.assert_array_equal(env.render(), obs)


@pytest.mark.wall
def test_wall_clock_host_process_answers_static_queries_and_renders():
    env = make("Boxing", clock="wall", render_mode="rgb_array")
    try:
        assert env.session.mechanism == "process"
        assert env.get_action_meanings()[0] == "NOOP"
        with pytest.raises(AttributeError, match="in this process"):
            _ = env.unwrapped.ale
        env.reset()
        env.step(0)
        assert env.render().shape == (210, 160, 3)
    finally:
        env.close()


def test_gymnasium_make_finds_every_nonstop_world():
    import nonstop  # noqa: F401  (registers nonstop/<id> on import)
    from nonstop.envs import list_envs
    from nonstop.realtime.gym import gymnasium_id, register_envs

    assert "nonstop/CartPole" in gymnasium.registry
    register_envs()  # again: ids registered since the import (tests register their own) join
    assert {gymnasium_id(i.env_id) for i in list_envs() if i.family != "multi"} <= set(gymnasium.registry)
    env = gymnasium.make("nonstop/theory-inaction", think_time=2.5 / 60)
    try:
        env.reset(seed=0)
        *_, info = env.step(1)
        assert env.spec.id == "nonstop/theory-inaction" and int(info["nonstop_ticks_elapsed"]) == 3
    finally:
        env.close()


def test_gymnasium_make_imports_nonstop_by_module_prefix():
    import subprocess
    import sys

    code = (
        "import gymnasium, sys; env = gymnasium.make('nonstop:nonstop/CartPole'); env.reset(seed=0); "
        "print(env.spec.id, env.metadata['render_fps']); env.close()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["nonstop/CartPole", "50.0"]


def _daemon_child(queue):
    env = make("CartPole", clock="wall")
    try:
        env.reset(seed=0)
        obs, *_ = env.step(0)
        queue.put((env.session.mechanism, obs.shape))
    finally:
        env.close()


@pytest.mark.wall
def test_wall_clock_inside_a_daemonic_process_runs_its_host_in_a_thread():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_daemon_child, args=(queue,), daemon=True)
    p.start()
    try:
        assert queue.get(timeout=120) == ("thread", (4,))
    finally:
        p.join(timeout=30)
    assert p.exitcode == 0


@pytest.mark.wall
@pytest.mark.parametrize("guarded", [False, True, "stdin"])
def test_wall_clock_from_a_script_with_or_without_main_guard(guarded, tmp_path):
    import subprocess
    import sys
    import textwrap

    body = textwrap.dedent(
        """
        import nonstop
        env = nonstop.make("CartPole", clock="wall")
        env.reset(seed=0)
        for _ in range(5):
            env.step(1)
        print(env.session.mechanism)
        env.close()
        """
    )
    if guarded:
        body = 'if __name__ == "__main__":\n' + textwrap.indent(body, "    ")
    script = tmp_path / "agent.py"
    script.write_text(body)
    if guarded == "stdin":  # `python - < agent.py`: a spawned child cannot re-import "<stdin>"
        out = subprocess.run([sys.executable, "-"], input=body, capture_output=True, text=True, timeout=180)
    else:
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["process" if guarded is True else "thread"]
