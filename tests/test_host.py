"""The host and its session: one test (or more) per rule of the realtime
contract (docs/design.md §1), failures, Ctrl-C and the tick log."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import numpy as np
import pytest

from nonstop.metrics.timing import episode_returns, interaction_intervals, summarize
from nonstop.realtime.host import HostError, Session
from nonstop.realtime.ticklog import COLUMNS, SOURCE_AGENT, SOURCE_DEFAULT, TickLog

from conftest import ScriptedEnv, always_two, cartpole, failing_env, out_of_space, run_ticks, tick_mod3

pytestmark = pytest.mark.usefixtures("no_shm_leak")

HZ = 50
TAU = 1 / HZ


def scripted(**env_kwargs) -> Session:
    return Session(ScriptedEnv, tick_hz=HZ, env_kwargs=env_kwargs, seed=0)


# ----------------------------------------------------------------------------- rule 1: the world ticks on its own


def test_rule1_ticks_on_absolute_deadlines_without_any_agent():
    with scripted() as world:
        run_ticks(world, 250)
        log, origin = world.tick_log, world.host.origin
        latest = world.slot.read()
    assert log["tick"].tolist() == list(range(1, 251))
    np.testing.assert_array_equal(log["deadline"], origin + log["tick"] * TAU)
    assert np.abs(log["lateness"]).max() < 1e-12
    # the env stepped once per tick: its own step counter is the tick
    assert latest.tick == 250 and latest.obs[0] == 250


def test_rule1_run_for_k_periods_runs_k_ticks():
    with Session(ScriptedEnv, tick_hz=60) as world:
        world.run_for(10 / 60)
        assert len(world.tick_log) == 10
        world.queue.submit(1, obs_tick=world.slot.read().tick, episode=0)
        world.run_for(1 / 60)
        s = world.tick_log.summary()
    assert (s["ticks"], s["agent_ticks"], s["inaction_ticks"]) == (11, 1, 10)


def test_session_origin_is_tick_zero_time():
    with scripted() as world:
        assert world.origin == 0.0
        run_ticks(world, 5)
        assert world.origin == world.host.origin == 0.0


def test_channels_and_spaces_exist_from_start_on():
    """Before `start` a session has no slot, queue or spaces: asking names the env and the fix
    (they are typed as always present, never Optional)."""
    world = Session(ScriptedEnv, tick_hz=HZ)
    for name in ("slot", "queue", "observation_space", "action_space"):
        with pytest.raises(RuntimeError, match=r"has no .* before start\(\): call start\(\)"):
            getattr(world, name)
    with world:
        assert world.slot.read().tick == 0 and world.queue.pending() == 0
        assert world.action_space.contains(1) and world.observation_space.shape is not None


def test_max_ticks_ends_the_world():
    with Session(ScriptedEnv, tick_hz=HZ, max_ticks=7) as world:
        world.run_for(1.0)
        assert len(world.tick_log) == 7 and world.slot.read().tick == 7


# ----------------------------------------------------------------------------- rule 2: β and inaction


def test_rule2_noop_when_nobody_acts_counts_inaction():
    with scripted() as world:
        run_ticks(world, 10)
        log, latest = world.tick_log, world.slot.read()
    assert (log["source"] == SOURCE_DEFAULT).all()
    assert (log["action"] == 0).all() and (log["worker"] == -1).all() and (log["delay"] == -1).all()
    assert np.isnan(log["tau_theta"]).all()
    assert latest.inaction_ticks == 10 and latest.agent_ticks == 0
    s = log.summary()
    assert (s["inaction_ticks"], s["inaction_fraction"], s["agent_ticks"]) == (10, 1.0, 0)


def test_rule2_repeat_repeats_last_agent_action_within_the_episode():
    with Session(ScriptedEnv, tick_hz=HZ, default="repeat", env_kwargs={"episode_len": 6}) as world:
        run_ticks(world, 2)
        world.queue.submit(2, obs_tick=2, episode=0)
        run_ticks(world, 6)  # ticks 3..8; the episode ends at tick 6
        log = world.tick_log
    assert log["source"].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    # β: noop before the first agent action, then repeat it, then noop again in the new episode
    assert log["action"].tolist() == [0, 0, 2, 2, 2, 2, 0, 0]
    assert log.summary()["inaction_ticks"] == 7


def test_rule2_callable_default_sees_latest_observation():
    with Session(ScriptedEnv, tick_hz=HZ, default=tick_mod3) as world:
        run_ticks(world, 9)
        log = world.tick_log
    # β at tick t sees the observation after tick t−1, whose first element is t−1
    assert log["action"].tolist() == [(t - 1) % 3 for t in range(1, 10)]
    assert (log["source"] == SOURCE_DEFAULT).all()
    with Session(ScriptedEnv, tick_hz=HZ, default=always_two) as world:
        run_ticks(world, 3)
        assert world.tick_log["action"].tolist() == [2, 2, 2]


def test_rule2_callable_default_with_invalid_output_fails_loudly():
    with pytest.raises(HostError, match="outside the action space Discrete"):
        with Session(ScriptedEnv, tick_hz=HZ, default=out_of_space) as world:
            world.run_for(0.1)


def test_default_validated_at_the_door():
    with pytest.raises(ValueError, match="default behaviour"):
        Session(ScriptedEnv, tick_hz=HZ, default="sulk")
    with pytest.raises(TypeError, match="default behaviour"):
        Session(ScriptedEnv, tick_hz=HZ, default=3)


# ----------------------------------------------------------------------------- rule 3: actions and the queue


def test_rule3_action_carries_obs_tick_worker_and_tau_theta():
    with scripted() as world:
        run_ticks(world, 4)
        world.queue.submit(1, obs_tick=2, episode=0, worker=5, tau_theta=0.25, submit_time=world.now())
        run_ticks(world, 1)
        log = world.tick_log
    row = {name: log[name][4] for name in COLUMNS}
    assert row["tick"] == 5 and row["source"] == SOURCE_AGENT
    assert (row["worker"], row["obs_tick"], row["delay"], row["action"]) == (5, 2, 3, 1)
    assert row["tau_theta"] == np.float32(0.25)
    assert row["reward"] == 2.0  # ScriptedEnv pays action + 1


def test_rule3_latest_mode_applies_newest_and_counts_superseded():
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"n_actions": 8}) as world:
        run_ticks(world, 1)
        for a in (3, 5, 7):
            world.queue.submit(a, obs_tick=1, episode=0, worker=a)
        run_ticks(world, 2)
        log = world.tick_log
    assert log["source"].tolist() == [0, 1, 0]  # no backlog: the next tick is β's
    assert (log["action"][1], log["worker"][1], log["superseded"][1]) == (7, 7, 2)
    assert log.summary()["superseded"] == 2


def test_rule3_fifo_applies_one_per_tick_in_order_and_drops_oldest_when_full():
    with Session(ScriptedEnv, tick_hz=HZ, queue_mode="fifo", queue_capacity=4, env_kwargs={"n_actions": 8}) as world:
        run_ticks(world, 1)
        for a in range(7):  # three more than fit
            world.queue.submit(a, obs_tick=1, episode=0)
        counters = world.queue.counters()
        run_ticks(world, 6)
        log = world.tick_log
        s = log.summary()
    assert counters == {"submitted": 7, "dropped_full": 3, "rejected": 0, "pending": 4}
    assert log["source"].tolist() == [0, 1, 1, 1, 1, 0, 0]
    assert log["action"][1:5].tolist() == [3, 4, 5, 6]
    assert log["delay"][1:5].tolist() == [1, 2, 3, 4]  # a backlog is delay
    assert (log["superseded"] == 0).all()
    assert s["dropped_full"] == 3 and s["submitted"] == 7


@pytest.mark.parametrize("mode", ["latest", "fifo"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule3_every_action_is_accounted_for(mode, seed):
    """submitted = applied + superseded + stale + dropped_full + pending."""
    rng = np.random.default_rng(seed)
    with Session(ScriptedEnv, tick_hz=HZ, queue_mode=mode, queue_capacity=3, env_kwargs={"episode_len": 13}) as world:
        for _ in range(200):
            latest = world.slot.read()
            for _ in range(int(rng.integers(0, 4))):
                episode = latest.episode - 1 if rng.random() < 0.2 and latest.episode > 0 else latest.episode
                world.queue.submit(int(rng.integers(0, 3)), obs_tick=latest.tick, episode=episode)
            run_ticks(world, 1)
        log = world.tick_log
        counters = world.queue.counters()
    s = summarize(log)
    assert s["stale"] > 0 and s["dropped_full"] + s["superseded"] > 0  # the schedule exercised every path
    applied = int((log["source"] == SOURCE_AGENT).sum())
    accounted = applied + s["superseded"] + s["stale"] + counters["dropped_full"] + counters["pending"]
    assert counters["submitted"] == accounted
    assert s["submitted"] == counters["submitted"]


# ----------------------------------------------------------------------------- rule 4: the latest slot


def test_rule4_slot_holds_newest_tick_and_reward_since_last_read():
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 4}) as world:
        last_total, collected = world.slot.read().total_reward, 0.0
        for t in range(1, 31):
            if t % 5 == 0:
                world.queue.submit(2, obs_tick=world.slot.read().tick, episode=world.slot.read().episode)
            run_ticks(world, 1)
            got = world.slot.read()
            assert got.tick == t and got.obs[0] == t  # newest wins, fields match the tick
            if t % 3 == 0:  # a slow reader that skips ticks
                collected += got.total_reward - last_total
                last_total = got.total_reward
        log = world.tick_log
        got = world.slot.read()
    collected += got.total_reward - last_total
    assert collected == log["reward"].sum() == got.total_reward
    assert got.episode == 7 and got.agent_ticks == 6 and got.inaction_ticks == 24
    assert got.last_delay == 1


# ----------------------------------------------------------------------------- rule 5: delay


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_rule5_action_submitted_k_ticks_after_its_observation_has_delay_k(k):
    with scripted() as world:
        run_ticks(world, 3)
        seen = world.slot.read()
        run_ticks(world, k - 1)  # the agent thinks while the world goes on
        world.queue.submit(1, obs_tick=seen.tick, episode=seen.episode)
        run_ticks(world, 1)
        log = world.tick_log
        latest = world.slot.read()
    applied = log["source"] == SOURCE_AGENT
    assert log["tick"][applied].tolist() == [3 + k]
    assert log["delay"][applied].tolist() == [k]
    assert latest.last_delay == k and latest.inaction_ticks == 3 + k - 1


def test_rule5_agent_process_on_the_virtual_clock():
    """An agent written as a timed process, thinking τ_θ = 2.5·τ_M per decision."""
    think = 2.5 * TAU
    with scripted() as world:
        clock = world.clock

        def agent():
            while True:
                seen = world.slot.read()
                woke = yield clock.now() + think
                world.queue.submit(1, obs_tick=seen.tick, episode=seen.episode, tau_theta=think, submit_time=woke)

        clock.spawn(agent(), name="agent")
        run_ticks(world, 400)
        log = world.tick_log
    agent = log["source"] == SOURCE_AGENT
    np.testing.assert_array_equal(log["delay"][agent], log["tick"][agent] - log["obs_tick"][agent])
    assert (log["tau_theta"][agent] == np.float32(think)).all()
    s = summarize(log, warmup_ticks=10)
    # one action every 2.5 ticks: τ_I = τ_θ, inaction 1 − 1/2.5
    assert s["tau_i_mean_ticks"] == pytest.approx(2.5, abs=0.02)
    assert s["inaction_fraction"] == pytest.approx(0.6, abs=0.01)
    assert set(s["delay_histogram"]) <= {3, 4}


# ----------------------------------------------------------------------------- rule 6: episodes


def test_rule6_auto_reset_episode_counter_and_reset_time():
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 5}) as world:
        run_ticks(world, 12)
        log, latest = world.tick_log, world.slot.read()
    assert log["episode"].tolist() == [0] * 5 + [1] * 5 + [2] * 2
    assert np.flatnonzero(log["terminated"]).tolist() == [4, 9]
    assert not log["truncated"].any()
    assert (log["reset_s"][[4, 9]] > 0).all() and (np.delete(log["reset_s"], [4, 9]) == 0).all()
    # the world did not wait: the tick after the end is the new episode's first
    assert latest.episode == 2 and latest.obs[1] == 2 and latest.obs[3] == 2
    assert episode_returns(log) == [5.0, 5.0]


def test_rule6_truncation_is_logged_as_truncated():
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 3, "truncate": True}) as world:
        run_ticks(world, 7)
        log = world.tick_log
    assert np.flatnonzero(log["truncated"]).tolist() == [2, 5]
    assert not log["terminated"].any() and log["episode"][-1] == 2


def test_rule6_actions_from_previous_episode_dropped_as_stale():
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 5}) as world:
        run_ticks(world, 3)
        seen = world.slot.read()
        run_ticks(world, 2)  # the episode ends at tick 5 while the agent thinks
        world.queue.submit(2, obs_tick=seen.tick, episode=seen.episode)
        world.queue.submit(1, obs_tick=seen.tick, episode=seen.episode)
        run_ticks(world, 1)
        log = world.tick_log
        latest = world.slot.read()
    assert (log["source"][5], log["stale"][5], log["episode"][5]) == (SOURCE_DEFAULT, 2, 1)
    assert log.summary()["stale"] == 2 and latest.agent_ticks == 0


def test_gym_reset_request_ends_the_episode_as_truncated():
    with scripted() as world:
        run_ticks(world, 3)
        world.slot.request_reset()
        run_ticks(world, 2)
        log = world.tick_log
    assert log["truncated"].tolist() == [0, 0, 0, 1, 0]
    assert log["episode"].tolist() == [0, 0, 0, 0, 1]


# ----------------------------------------------------------------------------- rule 7: two clocks, one code path


def test_rule7_virtual_runs_are_reproducible():
    def run() -> tuple[TickLog, list]:
        obs = []
        with Session(cartpole, tick_hz=HZ, seed=3, default="repeat") as world:
            for t in range(150):
                latest = world.slot.read()
                obs.append(latest.obs.copy())
                if t % 3 == 0:
                    world.queue.submit(int(latest.obs[2] > 0), obs_tick=latest.tick, episode=latest.episode)
                run_ticks(world, 1)
            return world.tick_log, obs

    (a, obs_a), (b, obs_b) = run(), run()
    for name in COLUMNS:
        if name not in ("step_s", "reset_s"):  # wall-time measurements of the env's own cost
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    np.testing.assert_array_equal(np.array(obs_a), np.array(obs_b))
    assert a["episode"][-1] >= 1  # CartPole fell at least once: resets are reproducible too


@pytest.mark.wall
def test_rule7_wall_clock_runs_the_same_host():
    hz, env_kwargs = 100, {"episode_len": 7}
    with Session(ScriptedEnv, tick_hz=hz, clock="wall", env_kwargs=env_kwargs, seed=0) as world:
        started = time.perf_counter()
        world.run_for(0.8)
        elapsed = time.perf_counter() - started
    log = world.tick_log
    assert world._process is None
    n = len(log)
    expected = elapsed * hz
    assert 0.8 * expected <= n <= 1.2 * expected + 2, (n, expected)
    assert log["tick"].tolist() == list(range(1, n + 1))
    assert np.percentile(log["lateness"], 50) < 0.005
    assert (log["lateness"] >= 0).all()
    # absolute deadlines on the wall clock too
    np.testing.assert_allclose(np.diff(log["deadline"]), 1 / hz, rtol=0, atol=1e-9)
    assert log.meta["clock"] == "wall"
    # the same ticks on the virtual clock give the same world
    with Session(ScriptedEnv, tick_hz=hz, env_kwargs=env_kwargs, seed=0, max_ticks=n) as twin:
        twin.run_for(n / hz + 1)
        vlog = twin.tick_log
    for name in ("tick", "source", "action", "reward", "episode", "terminated", "truncated"):
        np.testing.assert_array_equal(log[name], vlog[name], err_msg=name)


# ----------------------------------------------------------------------------- rule 8: the tick log


def test_rule8_tick_log_save_load_round_trip(tmp_path):
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 6}, seed=4) as world:
        for t in range(40):
            if t % 4 == 0:
                world.queue.submit(
                    t % 3,
                    obs_tick=world.slot.read().tick,
                    episode=world.slot.read().episode,
                    worker=t % 2,
                    tau_theta=t / 100,
                )
            run_ticks(world, 1)
        log = world.tick_log
    path = log.save(tmp_path / "run")
    assert path.suffix == ".npz" and path.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    loaded = TickLog.load(path)
    assert len(loaded) == len(log) == 40 and loaded.tau_m == log.tau_m
    for name in COLUMNS:
        assert loaded[name].dtype == np.dtype(COLUMNS[name][0])
        np.testing.assert_array_equal(loaded[name], log[name], err_msg=name)
    assert loaded.meta == log.meta
    assert loaded.meta["queue"]["submitted"] == 10 and loaded.meta["env"] == "ScriptedEnv"
    a, b = loaded.summary(), log.summary()
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key] or (a[key] != a[key] and b[key] != b[key]), key


def test_rule8_load_rejects_what_is_not_a_tick_log(tmp_path):
    with pytest.raises(FileNotFoundError):
        TickLog.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(ValueError, match="tick log"):
        TickLog.load(tmp_path / "other.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="tick log"):
        TickLog.load(tmp_path / "junk.npz")


def test_rule8_summarize_hand_built_log():
    tau = 0.1
    log = TickLog(tau, meta={"queue": {"submitted": 9, "dropped_full": 1, "rejected": 2}})
    agent = {2: 1, 3: 2, 5: 2, 8: 4}  # tick -> delay: τ_I = 1, 2, 3 ticks
    for t in range(1, 11):
        src = SOURCE_AGENT if t in agent else SOURCE_DEFAULT
        log.append(
            tick=t,
            deadline=t * tau,
            time=t * tau + (0.002 if t == 10 else 0.0),
            source=src,
            delay=agent.get(t, -1),
            obs_tick=t - agent.get(t, t + 1),
            reward=1.0 if src else 0.0,
            episode=0 if t <= 6 else 1,
            terminated=t == 6,
            superseded=1 if t == 5 else 0,
        )
    np.testing.assert_allclose(interaction_intervals(log), [0.1, 0.2, 0.3])
    s = summarize(log)
    assert (s["ticks"], s["agent_ticks"], s["inaction_ticks"]) == (10, 4, 6)
    assert s["inaction_fraction"] == 0.6
    assert s["tau_i_mean_s"] == pytest.approx(0.2)
    assert s["tau_i_mean_ticks"] == pytest.approx(2.0)
    assert s["tau_i_cv"] == pytest.approx(np.sqrt(2 / 3) / 2)
    assert s["delay_histogram"] == {1: 1, 2: 2, 4: 1}
    assert (s["delay_mean_ticks"], s["delay_max_ticks"]) == (2.25, 4)
    assert s["lateness_max_us"] == pytest.approx(2000)
    assert s["superseded"] == 1 and s["episodes_completed"] == 1 and s["episode_return_mean"] == 3.0
    assert (s["dropped_full"], s["rejected"], s["submitted"]) == (1, 2, 9)
    w = summarize(log, warmup_ticks=4)
    assert (w["ticks"], w["agent_ticks"]) == (6, 2) and w["tau_i_mean_s"] == pytest.approx(0.3)


def test_episode_returns_use_the_same_window_as_every_other_figure():
    """Warm-up and window end apply to episode returns too: an episode that began during the
    warm-up (or runs past the window's end) would report a partial return."""
    tau = 0.05
    log = TickLog(tau)
    for t in range(1, 13):  # episodes of 4 ticks; rewards 1, 10, 100 per tick in episodes 0, 1, 2
        episode = (t - 1) // 4
        log.append(
            tick=t,
            deadline=t * tau,
            time=t * tau,
            source=SOURCE_AGENT,
            delay=1,
            reward=10.0**episode,
            episode=episode,
            terminated=t % 4 == 0,
        )
    assert summarize(log)["episode_return_mean"] == pytest.approx((4 + 40 + 400) / 3)
    w = summarize(log, warmup_ticks=2)  # episode 0 began in the warm-up
    assert (w["episodes_completed"], w["episode_return_mean"]) == (2, 220.0)
    assert w["reward_total"] == 2 + 40 + 400
    e = summarize(log, warmup_ticks=2, end_tick=10)  # and episode 2 ends after the window
    assert (e["ticks"], e["episodes_completed"], e["episode_return_mean"]) == (8, 1, 40.0)
    assert episode_returns(log, warmup_ticks=4) == [40.0, 400.0]


def test_rule8_metrics_come_from_the_log():
    """The session's own counters agree with what the log says."""
    with Session(ScriptedEnv, tick_hz=HZ, env_kwargs={"episode_len": 9}) as world:
        for t in range(60):
            if t % 2:
                world.queue.submit(1, obs_tick=world.slot.read().tick, episode=world.slot.read().episode)
            run_ticks(world, 1)
        latest = world.slot.read()
        s = world.tick_log.summary()
    assert (s["agent_ticks"], s["inaction_ticks"]) == (latest.agent_ticks, latest.inaction_ticks) == (30, 30)
    assert s["reward_total"] == latest.total_reward
    assert s["episodes_completed"] == latest.episode == 6


# ----------------------------------------------------------------------------- failures


def test_env_error_in_virtual_host_raises_host_error_with_log():
    with pytest.raises(HostError) as excinfo:
        with Session(failing_env, tick_hz=HZ) as world:
            world.run_for(1.0)
    err = excinfo.value
    assert "scripted failure at step 7" in err.env_traceback and "RuntimeError" in err.env_traceback
    assert "scripted failure at step 7" in str(err) and "failing_env" in str(err)
    assert err.tick_log["tick"].tolist() == [1, 2, 3, 4, 5, 6]
    assert world.tick_log is err.tick_log
    with pytest.raises(RuntimeError, match="not running"):
        world.run_for(0.1)


@pytest.mark.wall
def test_env_error_in_wall_host_process_raises_host_error_with_log():
    with pytest.raises(HostError) as excinfo:
        with Session(failing_env, tick_hz=100, clock="wall") as world:
            world.run_for(5.0)
    err = excinfo.value
    assert "scripted failure at step 7" in err.env_traceback and "Traceback" in err.env_traceback
    assert err.tick_log["tick"].tolist() == [1, 2, 3, 4, 5, 6]
    assert world._process is None
    assert not [p for p in mp.active_children() if p.name.startswith("nonstop-host")]


@pytest.mark.wall
def test_ctrl_c_on_the_wall_clock_reaps_the_host():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGINT))
    started = None
    try:
        with pytest.raises(KeyboardInterrupt):
            with Session(ScriptedEnv, tick_hz=100, clock="wall") as world:
                started = time.perf_counter()
                timer.start()
                world.run_for(20.0)
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert time.perf_counter() - started < 10
    assert world._process is None
    assert not [p for p in mp.active_children() if p.name.startswith("nonstop-host")]
    assert len(world.tick_log) > 10  # the log up to the interrupt was still collected


@pytest.mark.wall
def test_killed_wall_host_raises_host_error():
    world = Session(ScriptedEnv, tick_hz=100, clock="wall").start()
    try:
        world.run_for(0.1)
        os.kill(world._process.pid, signal.SIGKILL)
        world._process.join(5)
        with pytest.raises(HostError, match="died"):
            world.run_for(1.0)
    finally:
        try:
            world.stop()
        except EOFError:
            pass
    assert world._process is None


# ----------------------------------------------------------------------------- session validation


def test_session_validates_at_the_door():
    with pytest.raises(ValueError, match="tick_hz"):
        Session(ScriptedEnv, tick_hz=0)
    with pytest.raises(ValueError, match="natural tick rate"):
        Session(ScriptedEnv)
    with pytest.raises(ValueError, match="max_ticks"):
        Session(ScriptedEnv, tick_hz=HZ, max_ticks=-1)
    with pytest.raises(TypeError, match="seed"):
        Session(ScriptedEnv, tick_hz=HZ, seed=1.5)
    with pytest.raises(TypeError, match="env must be"):
        Session(42, tick_hz=HZ)
    with pytest.raises(ValueError, match="seconds"):
        with scripted() as world:
            world.run_for(-1)
    world = scripted().start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            world.start()
    finally:
        world.stop()
        world.stop()  # idempotent
