"""Seats (docs/design.md §4b): several agents in one world, each with its own queue, β, log columns,
metrics and inference pool; the one-seat world is the same loop and writes the same log."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nonstop.envs.duel import DrawOnSignal, QuickDrawDuel
from nonstop.inference.schedulers import make_scheduler
from nonstop.inference.workers import InferencePool
from nonstop.policies import Constant, LatencyPolicy, LogNormal
from nonstop.realtime.host import Session
from nonstop.realtime.ticklog import COLUMNS, SEAT_COLUMNS, TickLog

TICK = 1 / 60
SEATS = ["first_0", "second_0"]


def _pool(world, seat, ticks, scheduler="sequential", n=1):
    policy = lambda i: LatencyPolicy(DrawOnSignal(), Constant(ticks * TICK))  # noqa: E731
    return InferencePool(world, policy, make_scheduler(scheduler, n), seat=seat).start()


# ----------------------------------------------------------------------------- the log


def test_one_seat_log_is_unchanged(tmp_path):
    with Session("theory/inaction", clock="virtual", seed=0, log_dir=tmp_path / "log") as world:
        world.run_for(5 * TICK)
    log = TickLog.open(tmp_path / "log")
    assert log.seats == 1 and world.seats is None and len(world.slots) == 1
    assert list(log.columns()) == list(COLUMNS)
    record = json.loads((tmp_path / "log" / "meta.json").read_text())
    assert "seats" not in record and "seats" not in record["meta"]
    with np.load(next((tmp_path / "log").glob("chunk-*.npz"))) as chunk:
        assert sorted(n for n in chunk.files if n != "__header__") == sorted(COLUMNS)


def test_seat_log_round_trips_on_disk_and_in_one_file(tmp_path):
    with Session("multi/duel", clock="virtual", seed=0, log_dir=tmp_path / "log", log_chunk_rows=16) as world:
        world.queues[1].submit(1, obs_tick=0, episode=0)
        world.run_for(40 * TICK)
    for log in (TickLog.open(tmp_path / "log"), TickLog.load(world.tick_log.save(tmp_path / "one.npz"))):
        assert log.seats == 2 and log.seat_names == SEATS
        assert set(log.columns()) == set(COLUMNS) | {f"seat1_{c}" for c in SEAT_COLUMNS}
        second = log.seat("second_0")
        assert second["source"].tolist()[0] == 1 and second["source"].tolist()[1:] == [0] * 39
        assert log.seat(0)["source"].tolist() == [0] * 40
        assert second.summary()["agent_ticks"] == 1 and log.seat(0).summary()["agent_ticks"] == 0
    with pytest.raises(KeyError, match="no seat 'third_0'"):
        log.seat("third_0")
    with pytest.raises(IndexError):
        log.seat(2)
    with pytest.raises(ValueError, match="different seat counts"):
        TickLog.stitch([log, TickLog(TICK)])


# ----------------------------------------------------------------------------- the host


def test_each_seat_has_its_own_queue_beta_and_counters():
    with Session(
        "multi/duel",
        clock="virtual",
        seed=1,
        default={"first_0": "repeat", "second_0": "noop"},
        queue_mode={"second_0": "fifo"},
        queue_capacity={"second_0": 4},
    ) as world:
        assert world.seats == SEATS and len(world.slots) == len(world.queues) == 2
        assert world.queues[0].mode == "latest" and world.queues[1].mode == "fifo"
        assert world.queues[1].capacity == 4
        world.run_for(3 * TICK)
        for _ in range(3):  # fifo: one per tick, in order
            world.queues[1].submit(0, obs_tick=world.slots[1].read().tick, episode=0)
        world.run_for(5 * TICK)
        first, second = world.slots[0].read(), world.slots[1].read()
    log = world.tick_log
    assert (first.tick, second.tick) == (8, 8)
    assert (first.inaction_ticks, second.inaction_ticks) == (8, 5)
    assert log.seat(1)["source"].tolist() == [0, 0, 0, 1, 1, 1, 0, 0]
    assert log.seat(1)["delay"].tolist()[3:6] == [1, 2, 3]
    assert log.meta["default"] == {"first_0": "repeat", "second_0": "noop"}
    assert log.seat("second_0").meta["queue"]["submitted"] == 3


def test_bad_seat_configuration_is_refused_at_the_door():
    with pytest.raises(ValueError, match="seats \\['third_0'\\] the env does not have"):
        Session("multi/duel", clock="virtual", default={"third_0": "noop"}).start()
    with pytest.raises(ValueError, match="default behaviour must be one of"):
        Session("multi/duel", clock="virtual", default={"first_0": "nope"})
    with pytest.raises(TypeError, match="has one seat"):
        Session("theory/inaction", clock="virtual", default={"agent_0": "noop"}).start()
    with Session("multi/duel", clock="virtual") as world:
        with pytest.raises(KeyError, match="no seat 'third_0'"):
            InferencePool(world, lambda i: DrawOnSignal(), make_scheduler("sequential", 1), seat="third_0")
        with pytest.raises(ValueError):
            world.queues[1].submit(5, obs_tick=0, episode=0)  # outside that seat's space


def test_seat_world_on_the_wall_clock(tmp_path):
    with Session("multi/duel", clock="wall", seed=0, host_mode="process", log_dir=tmp_path / "log") as world:
        world.queues[1].submit(1, obs_tick=0, episode=0)
        world.run_for(0.3)
        assert world.slots[1].read().tick > 0
    log = world.tick_log
    assert log.seats == 2 and len(log) >= 5
    assert log.seat(1).summary()["agent_ticks"] == 1 and log.seat(0).summary()["agent_ticks"] == 0


# ----------------------------------------------------------------------------- the duel


def test_duel_the_faster_seat_wins_every_round():
    """Both seats play the best reply; the faster one (1 tick) beats the slower one (5 ticks) every
    round, and the tick log shows each seat's own inaction and delay (docs/design.md §1 per seat)."""
    rounds = 4
    with Session("multi/duel", clock="virtual", seed=3, env_kwargs={"rounds": rounds}) as world:
        with _pool(world, "first_0", 1), _pool(world, "second_0", 5):
            world.run_for(2 * rounds * 90 * TICK)
    log = world.tick_log
    fast, slow = log.seat("first_0").summary(warmup_ticks=10), log.seat("second_0").summary(warmup_ticks=10)
    episodes = log["episode"]
    done = range(int(episodes.max()))  # every completed episode, the first included
    assert len(done) >= 2
    assert [log["reward"][episodes == e].sum() for e in done] == [rounds] * len(done)
    assert [log["seat1_reward"][episodes == e].sum() for e in done] == [-rounds] * len(done)
    assert fast["episode_return_mean"] == rounds and slow["episode_return_mean"] == -rounds
    assert log.summary(warmup_ticks=10)["seats"]["second_0"] == slow
    assert fast["inaction_fraction"] == 0 and fast["delay_max_ticks"] == 1
    assert slow["delay_p50_ticks"] == 5
    assert slow["inaction_fraction"] == pytest.approx(4 / 5, abs=0.02)


def test_duel_staggering_removes_the_slow_seats_inaction_but_not_its_delay():
    rounds = 4
    with Session("multi/duel", clock="virtual", seed=3, env_kwargs={"rounds": rounds}) as world:
        with _pool(world, "first_0", 1), _pool(world, "second_0", 5, "max_time", 5):
            world.run_for(2 * rounds * 90 * TICK)
    log = world.tick_log
    slow = log.seat("second_0").summary(warmup_ticks=20)
    # the only β ticks left: the first ticks of each new episode, while the actions still in flight
    # (computed in the episode before) are dropped as stale
    starts = log["tick"][np.flatnonzero(np.diff(log["episode"])) + 1]
    beta = log["tick"][(log["seat1_source"] == 0) & (log["tick"] > 20)]
    assert beta.size and all(((t - starts >= 0) & (t - starts < 5)).any() for t in beta)
    assert slow["inaction_fraction"] < 0.03 and slow["delay_p50_ticks"] == 5
    assert slow["episode_return_mean"] == -rounds  # delay, not inaction, decides a quick-draw
    assert "workers:second_0" in world.tick_log.meta and "workers:first_0" in world.tick_log.meta


def test_duel_equal_latency_ties():
    with Session("multi/duel", clock="virtual", seed=5, env_kwargs={"rounds": 3}) as world:
        with _pool(world, "first_0", 2, "max_time", 2), _pool(world, "second_0", 2, "max_time", 2):
            world.run_for(6 * 90 * TICK)
    s = world.tick_log.seat(0).summary()
    assert s["episodes_completed"] >= 1 and s["episode_return_mean"] == 0


def test_duel_validates_its_arguments():
    with pytest.raises(ValueError, match="max_wait"):
        QuickDrawDuel(min_wait=10, max_wait=5)
    with pytest.raises(ValueError, match="holster"):
        QuickDrawDuel(min_wait=10, max_wait=20, holster=10)
    env = QuickDrawDuel()
    env.reset(seed=0)
    with pytest.raises(KeyError, match="no seat"):
        env.step({"third_0": 1})


def test_duel_closes_without_pettingzoo(tmp_path):
    """The duel needs no extra: without pettingzoo its base class is ``object``, and `nonstop train
    --env multi/duel --self-play` closed the env it probes with an AttributeError."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class _Missing(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'pettingzoo':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Missing())\n"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    code = (
        "from nonstop.envs.duel import QuickDrawDuel\n"
        "assert QuickDrawDuel.__mro__[1] is object, QuickDrawDuel.__mro__\n"
        "env = QuickDrawDuel()\n"
        "env.reset(seed=0)\n"
        "env.close()\n"
        "env.close()\n"
        "print('closed')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src)])}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "closed", done.stderr[-2000:]


def test_duel_close_is_idempotent():
    env = QuickDrawDuel(rounds=1)
    env.reset(seed=0)
    env.close()
    env.close()


# ----------------------------------------------------------------------------- the PettingZoo view


def test_parallel_view_passes_pettingzoos_api_test():
    from pettingzoo.test import parallel_api_test

    import nonstop

    env = nonstop.make_parallel("multi/duel", clock="virtual", env_kwargs={"rounds": 2, "min_wait": 20, "max_wait": 25})
    try:
        parallel_api_test(env, num_cycles=1000)
    finally:
        env.close()


def test_parallel_view_plays_in_realtime_per_seat():
    """A missing seat has nothing pending (β acts, counted per seat); a slow joint decision costs
    both seats inaction; rewards reach each seat and add up to the tick log's."""
    import nonstop

    env = nonstop.make_parallel(
        "multi/duel",
        clock="virtual",
        seed=2,
        think_time=2.5 * TICK,
        defaults={"second_0": "noop"},
        env_kwargs={"rounds": 2},
    )
    obs, infos = env.reset()
    assert env.agents == SEATS and set(infos["first_0"]) >= {"nonstop_delay", "nonstop_inaction_ticks"}
    totals = {seat: 0.0 for seat in SEATS}
    steps = 0
    while env.agents:
        actions = {"first_0": int(obs["first_0"][0] >= 0.5)}  # second_0 never acts
        obs, rewards, terms, truncs, infos = env.step(actions)
        steps += 1
        for seat in SEATS:
            totals[seat] += rewards[seat]
        first, second = infos["first_0"], infos["second_0"]
        assert first["nonstop_ticks_elapsed"] == 3 and first["nonstop_inaction_ticks"] == 2
        assert first["nonstop_delay"] == 3 and second["nonstop_delay"] == -1
        assert second["nonstop_inaction_ticks"] == second["nonstop_ticks_elapsed"] == 3
    assert terms == {"first_0": True, "second_0": True}
    assert totals == {"first_0": 2.0, "second_0": -2.0}
    log = env.tick_log
    assert log["reward"].sum() == 2.0 and log["seat1_reward"].sum() == -2.0
    assert log.seat("second_0").summary()["agent_ticks"] == 0
    assert log.seat("first_0").summary()["agent_ticks"] == steps
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"first_0": 0})
    env.reset()
    with pytest.raises(KeyError, match="no seat \\['third_0'\\]"):
        env.step({"third_0": 1})
    with pytest.raises(ValueError):
        env.step({"first_0": 7})  # outside that seat's space: refused, the world unharmed
    env.step({"first_0": 0})
    env.close()


def test_parallel_view_refuses_one_seat_worlds_and_bad_defaults():
    import nonstop

    with pytest.raises(TypeError, match="one seat"):
        nonstop.make_parallel("theory/inaction")
    with pytest.raises(TypeError, match="defaults must be a dict"):
        nonstop.make_parallel("multi/duel", defaults="noop")


@pytest.mark.wall
def test_parallel_view_on_the_wall_clock():
    import nonstop

    env = nonstop.make_parallel("multi/duel", clock="wall", seed=0, host_mode="thread")
    try:
        obs, _ = env.reset()
        ticks = 0
        for _ in range(10):
            obs, rewards, terms, truncs, infos = env.step({"first_0": 0, "second_0": 0})
            assert infos["first_0"]["nonstop_ticks_elapsed"] >= 1
            ticks += int(infos["first_0"]["nonstop_ticks_elapsed"])
        assert ticks >= 10
        session = env.session
    finally:
        env.close()
    assert session.tick_log.seats == 2 and len(session.tick_log) >= ticks


# ----------------------------------------------------------------------------- two-player Atari


def test_two_player_boxing_gives_each_seat_its_own_actions_and_score():
    import multi_agent_ale_py  # noqa: F401 - in the test extra: two-player Atari is tested, never skipped
    from nonstop.envs import make_env

    env = make_env("multi/Boxing")
    assert env.possible_agents == SEATS and env.action_space("first_0").n == 18
    with Session("multi/Boxing", clock="virtual", seed=0, max_ticks=600) as world:
        fire = 1  # the minimal action set's FIRE: a punch
        for t in range(0, 600, 4):
            world.run_until(world.origin + t * TICK)
            world.queues[0].submit(fire, obs_tick=world.slot.read().tick, episode=world.slot.read().episode)
        world.run_for(10 * TICK)
    log = world.tick_log
    first, second = log.seat("first_0").summary(), log.seat("second_0").summary()
    assert log.seats == 2 and len(log) == 600
    assert first["agent_ticks"] == 150 and second["agent_ticks"] == 0 and second["inaction_ticks"] == 600
    assert np.array_equal(log["action"][log["source"] == 1], np.full(150, 1.0))
    assert set(log["seat1_action"].tolist()) == {0.0}
    with pytest.raises(ValueError, match="no two-player Atari game"):
        make_env("multi/Boxing").__class__("Pacman")


# ----------------------------------------------------------------------------- bench duel


def test_bench_duel_pairings_show_inaction_removed_and_delay_kept():
    from nonstop.bench.duel import DuelSetup, play

    even = play(0, False, DuelSetup(matches=3, rounds=3))
    assert even["score_differential"] == 0 and even["win_rate"] == 0.5
    seq, stag = play(4, False, DuelSetup(matches=3, rounds=3)), play(4, True, DuelSetup(matches=3, rounds=3))
    assert seq["score_differential"] == stag["score_differential"] == -3 and seq["win_rate"] == stag["win_rate"] == 0
    assert (
        seq["inaction_fraction"] == pytest.approx(4 / 5, abs=0.02) and stag["inaction_fraction"] < 0.05
    )  # β only at match starts (stale drops)
    assert seq["delay_mean_ticks"] == 5 and stag["delay_mean_ticks"] == pytest.approx(5, abs=0.05)
    assert stag["n_inference"] == 5
    with pytest.raises(ValueError, match="matches"):
        play(1, True, DuelSetup(matches=0))


def test_bench_host_steps_a_seat_world():
    from nonstop.bench.host import host_loop, raw_loop

    assert raw_loop("multi/duel", 200)["steps_per_s"] > 0
    assert host_loop("multi/duel", 200)["steps_per_s"] > 0  # raises unless the host ran all 200 ticks


def test_a_second_seat_pool_that_holds_its_actions_submits_them_for_its_own_seat():
    """quantile_hold releases held actions later, through the pool's release path: they must reach
    the pool's own seat's queue (they once went to the first seat's)."""
    from nonstop.inference.schedulers import make_scheduler

    with Session("multi/duel", clock="virtual", seed=3, env_kwargs={"rounds": 4}) as world:
        slow = lambda i: LatencyPolicy(DrawOnSignal(), LogNormal(5 * TICK, 0.3))  # noqa: E731
        with InferencePool(world, slow, make_scheduler("quantile_hold", 12), seat="second_0").start():
            world.run_for(600 * TICK)
    from nonstop.realtime.ticklog import SOURCE_AGENT

    log = world.tick_log
    assert not (log["source"] == SOURCE_AGENT).any()  # nothing reached the seat without a pool
    assert (log["seat1_source"] == SOURCE_AGENT).sum() > 300
    assert log.seat("second_0").summary(warmup_ticks=60)["inaction_fraction"] < 0.1
