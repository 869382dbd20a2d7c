"""The semi-MDP replay (Definition 1), tick by tick on a scripted env."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time

import numpy as np
import pytest
from conftest import run_ticks, scripted_env

import nonstop.learning.replay as replay_module
from nonstop.learning.replay import TERMINAL, ReplayBuffer, ReplayRecorder, ReplayTooLargeError, SemiMDPBuilder
from nonstop.realtime.atomics import FUTEX
from nonstop.realtime.host import Session

G = 0.5


def test_builder_accumulates_beta_rewards_into_the_open_decision():
    b = SemiMDPBuilder(gamma=G)
    assert b.on_tick(1, agent=False, action=0, obs_tick=-1, reward=7.0) == []  # before any decision: no owner
    assert b.on_tick(2, agent=True, action=1, obs_tick=0, reward=1.0) == []
    assert b.on_tick(3, agent=False, action=0, obs_tick=-1, reward=2.0) == []
    assert b.on_tick(4, agent=False, action=0, obs_tick=-1, reward=4.0) == []
    (t,) = b.on_tick(5, agent=True, action=2, obs_tick=3, reward=8.0)
    assert (t.s_tick, t.action, t.n_ticks, t.next_tick) == (0, 1, 3, 3)
    assert t.reward == pytest.approx(1.0 + G * 2.0 + G**2 * 4.0)
    assert t.discount == pytest.approx(G**3)


def test_builder_closes_at_episode_end_with_done_masking():
    b = SemiMDPBuilder(gamma=G)
    b.on_tick(1, agent=True, action=1, obs_tick=0, reward=1.0)
    (t,) = b.on_tick(2, agent=False, action=0, obs_tick=-1, reward=1.0, terminated=True)
    assert (t.next_tick, t.discount, t.n_ticks, t.reward) == (TERMINAL, 0.0, 2, 1.5)
    b.on_tick(3, agent=True, action=0, obs_tick=2, reward=1.0)
    (t,) = b.on_tick(4, agent=True, action=1, obs_tick=3, reward=1.0, truncated=True)[-1:]
    # truncation is not a terminal state: bootstrap from the last observation with γ^n
    assert (t.next_tick, t.discount, t.episode) == (TERMINAL, G, 1)


def test_staggered_decisions_overlap_in_time():
    """Delay 3, one action per tick: s' of each decision is the next action's observation."""
    b = SemiMDPBuilder(gamma=G)
    out = []
    for tick in range(3, 8):
        out += b.on_tick(tick, agent=True, action=tick % 2, obs_tick=tick - 3, reward=float(tick))
    assert [(t.s_tick, t.next_tick, t.n_ticks, t.reward) for t in out] == [
        (0, 1, 1, 3.0),
        (1, 2, 1, 4.0),
        (2, 3, 1, 5.0),
        (3, 4, 1, 6.0),
    ]


def test_recorder_in_a_virtual_session_stores_the_right_frames(no_shm_leak):
    """A sequential agent acting every 2 ticks with delay 2, episodes of 7 ticks.
    ScriptedEnv's obs[0] is the tick that produced it, so every frame names itself."""
    replay = ReplayBuffer.create(capacity=64, obs_shape=(4,), dtype=np.float64)
    recorder = ReplayRecorder(replay, gamma=G, history=32)
    try:
        with Session(
            scripted_env, env_kwargs={"episode_len": 7}, clock="virtual", tick_hz=60, recorder=recorder
        ) as world:
            for _ in range(10):
                obs = world.slot.read()
                world.queue.submit(1, obs_tick=obs.tick, episode=obs.episode)
                run_ticks(world, 2)
            log = world.tick_log
        n = replay.size
        assert n == recorder.transitions > 5
        c = {k: v[:n] for k, v in replay.cols.items()}
        s_obs = replay.frames[c["s_frame"] % replay.frame_capacity]
        next_obs = replay.frames[c["next_frame"] % replay.frame_capacity]
        ticks, src, rew, ep = log["tick"], log["source"], log["reward"], log["episode"]
        # rebuild every transition independently from the tick log and compare
        for i in range(n):
            s_tick = int(s_obs[i, 0])
            start = np.flatnonzero((log["obs_tick"] == s_tick) & (src == 1))[0]
            e = ep[start]
            later = np.flatnonzero((ticks > ticks[start]) & (ep == e) & (src == 1))
            end_of_ep = np.flatnonzero((ep == e) & ((log["terminated"] == 1) | (log["truncated"] == 1)))
            stop = later[0] if later.size else end_of_ep[0] + 1
            span = rew[start:stop]
            assert c["n_ticks"][i] == len(span)
            assert c["reward"][i] == pytest.approx(sum(G**k * r for k, r in enumerate(span)))
            if later.size:
                assert next_obs[i, 0] == log["obs_tick"][later[0]] and c["discount"][i] == pytest.approx(G ** len(span))
            else:  # ended with the episode: s' is the terminal observation (step 7 of the episode)
                assert next_obs[i, 1] == 7 and c["discount"][i] == 0.0
    finally:
        replay.unlink()


def test_replay_ring_keeps_the_newest_and_samples_across_processes(no_shm_leak):
    rb = ReplayBuffer.create(capacity=8, obs_shape=(3,), dtype=np.uint8)
    try:
        prev = rb.add_frame(np.zeros(3, np.uint8))
        for i in range(1, 30):
            f = rb.add_frame(np.full(3, i, np.uint8))
            rb.add_transition(prev, i, float(i), 0.9, 1, f)
            prev = f
        assert rb.size == 8 and rb.transitions_written == 29
        ctx = mp.get_context("spawn")
        with ctx.Pool(1) as pool:
            actions, obs, nxt = pool.apply(_sample_in_child, (pickle.loads(pickle.dumps(rb)),))
        assert min(actions) >= 29 - 7 + 1  # only the newest transitions, less the one being rewritten next
        assert (obs[:, 0] + 1 == nxt[:, 0]).all() and (obs[:, 0] + 1 == actions).all()
    finally:
        rb.unlink()


def _sample_in_child(rb: ReplayBuffer):
    b = rb.sample(64, np.random.default_rng(1))
    out = (b.action.tolist(), b.obs.copy(), b.next_obs.copy())
    rb.close()
    return out


def test_recycled_frames_are_dropped_not_returned():
    rb = ReplayBuffer.create(capacity=4, obs_shape=(1,), dtype=np.int64)
    try:
        f0 = rb.add_frame(np.array([0]))
        rb.add_transition(f0, 0, 0.0, 1.0, 1, f0)
        rb.add_transition(f0, 0, 0.0, 1.0, 1, f0)
        for i in range(rb.frame_capacity):  # recycle every frame slot
            rb.add_frame(np.array([i + 1]))
        assert rb.sample(4, np.random.default_rng(0)) is None and rb.dropped_recycled == 4
    finally:
        rb.unlink()


def test_bad_replay_arguments_fail_clearly():
    with pytest.raises(ValueError, match="positive integer"):
        ReplayBuffer.create(capacity=0, obs_shape=(4,))
    with pytest.raises(ReplayTooLargeError, match="lower --replay-capacity"):
        ReplayBuffer.create(capacity=10**9, obs_shape=(84, 84))
    with pytest.raises(ValueError, match="gamma"):
        SemiMDPBuilder(gamma=1.5)


def test_recorder_reports_every_finished_episode(no_shm_leak):
    replay = ReplayBuffer.create(capacity=64, obs_shape=(4,), dtype=np.float64)
    try:
        with Session(
            scripted_env,
            env_kwargs={"episode_len": 5},
            clock="virtual",
            tick_hz=60,
            recorder=ReplayRecorder(replay, gamma=G),
        ) as world:
            run_ticks(world, 23)
        # β (noop, action 0) earns 1 per tick: four whole episodes of 5 ticks
        assert replay.episodes_finished == 4
        assert replay.episodes_since(2) == [(2, 15, 5.0, 5), (3, 20, 5.0, 5)]
    finally:
        replay.unlink()


def test_a_sample_overtaken_by_the_writer_is_dropped():
    """The writer laps the ring while a sampler copies frames: every sampled row is now stale."""
    rb = ReplayBuffer.create(capacity=8, obs_shape=(1,), dtype=np.int64)
    try:
        prev = rb.add_frame(np.array([0]))
        for i in range(8):
            f = rb.add_frame(np.array([i + 1]))
            rb.add_transition(prev, i, 0.0, 1.0, 1, f)
            prev = f
        frames = rb.frames

        class LappingWriter:  # stands in for the frame array: the writer moves on during the copy
            def __getitem__(self, index):
                rb._hdr[0] += rb.capacity
                return frames[index]

        rb.frames = LappingWriter()
        assert rb.sample(4, np.random.default_rng(0)) is None and rb.dropped_recycled == 4
        rb.frames = frames
    finally:
        rb.unlink()


def test_a_snapshot_restores_into_a_fresh_buffer_and_issues_no_frame_id_twice(no_shm_leak):
    rb = ReplayBuffer.create(capacity=4, obs_shape=(2,), dtype=np.float32)
    fresh = ReplayBuffer.create(capacity=4, obs_shape=(2,), dtype=np.float32)
    other = ReplayBuffer.create(capacity=4, obs_shape=(3,), dtype=np.float32)
    try:
        ids = [rb.add_frame(np.full(2, i, np.float32)) for i in range(3)]
        rb.add_transition(ids[0], 1, 0.5, 0.99, 1, ids[1])
        rb.add_transition(ids[1], 0, 1.5, 0.99, 2, ids[2])
        snap = rb.snapshot()
        assert snap["header"].tolist() == [2, 3]
        rb.add_transition(ids[2], 1, 9.0, 0.0, 1, ids[2])  # after the snapshot: not in it
        assert snap["reward"][:2].tolist() == [0.5, 1.5] and snap["reward"][2] == 0.0
        fresh.restore(snap)
        assert fresh.transitions_written == 2 and fresh.add_frame(np.zeros(2, np.float32)) == 3
        batch = fresh.sample(8, np.random.default_rng(0))
        assert batch is not None and set(batch.reward.tolist()) <= {0.5, 1.5}
        with pytest.raises(ValueError, match=r"frames of shape \(\d+, 2\).*this replay \(\d+, 3\)"):
            other.restore(snap)
        assert other.transitions_written == 0  # refused whole: nothing written
    finally:
        for b in (rb, fresh, other):
            b.unlink()


def _write_one_later(rb: ReplayBuffer, written, delay: float) -> None:
    time.sleep(delay)
    f0, f1 = rb.add_frame(np.zeros(1, np.uint8)), rb.add_frame(np.ones(1, np.uint8))
    written.value = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    rb.add_transition(f0, 1, 1.0, 0.9, 1, f1)
    rb.close()


@pytest.mark.wall
def test_a_sampler_waiting_for_transitions_wakes_when_another_process_writes(no_shm_leak):
    rb = ReplayBuffer.create(capacity=8, obs_shape=(1,), dtype=np.uint8)
    ctx = mp.get_context("spawn")
    written = ctx.Value("d", 0.0)
    try:
        p = ctx.Process(target=_write_one_later, args=(pickle.loads(pickle.dumps(rb)), written, 0.3))
        p.start()
        try:
            deadline, rounds, count = time.monotonic() + 60.0, 0, 0
            while count == 0 and time.monotonic() < deadline:  # a wait may return early (a signal)
                count = rb.wait_for_transitions(0, timeout=30.0)
                rounds += 1
            woke = time.monotonic()
        finally:
            p.join(30)
        assert p.exitcode == 0 and count == 1 and written.value > 0
        assert woke - written.value < 2.0  # woken by the write, not by the 30 s timeout
        if FUTEX:  # slept in the kernel until the write: not a polling loop's hundreds of rounds
            assert rounds <= 3
        assert rb._words.load(replay_module._WAITERS) == 0  # the waiter is no longer counted
    finally:
        rb.unlink()


@pytest.mark.wall
def test_a_wait_for_transitions_times_out_when_nothing_comes_and_returns_at_once_when_some_did(no_shm_leak):
    rb = ReplayBuffer.create(capacity=8, obs_shape=(1,), dtype=np.uint8)
    try:
        start = time.monotonic()
        assert rb.wait_for_transitions(0, timeout=0.2) == 0
        took = time.monotonic() - start
        assert took < 5.0
        if FUTEX:
            assert took >= 0.19  # slept the whole timeout: nothing wakes it
        f0, f1 = rb.add_frame(np.zeros(1, np.uint8)), rb.add_frame(np.ones(1, np.uint8))
        rb.add_transition(f0, 1, 1.0, 0.9, 1, f1)
        start = time.monotonic()
        assert rb.wait_for_transitions(0, timeout=30.0) == 1  # more than it saw: no wait at all
        assert time.monotonic() - start < 5.0
        assert rb._words.load(replay_module._WAITERS) == 0
    finally:
        rb.unlink()


def test_the_writer_makes_no_wake_call_while_nobody_waits(no_shm_leak, monkeypatch):
    wakes: list[int] = []
    monkeypatch.setattr(replay_module, "futex_wake", wakes.append)
    rb = ReplayBuffer.create(capacity=8, obs_shape=(1,), dtype=np.uint8)
    try:
        f0, f1 = rb.add_frame(np.zeros(1, np.uint8)), rb.add_frame(np.ones(1, np.uint8))
        for _ in range(5):
            rb.add_transition(f0, 1, 1.0, 0.9, 1, f1)
        assert wakes == []  # the host's per-transition cost stays one store and one load
        rb._words.store(replay_module._WAITERS, 1)  # as a sampler does while it sleeps
        rb.add_transition(f0, 1, 1.0, 0.9, 1, f1)
        assert wakes == [rb._count_address]
        rb._words.store(replay_module._WAITERS, 0)
    finally:
        rb.unlink()
