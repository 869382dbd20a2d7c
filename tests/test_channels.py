"""Shared-memory channels (docs/design.md §1.3-1.4): the action queue against a pure
model, the latest slot's round trip and its seqlock across processes."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from collections import deque
from dataclasses import dataclass, field

import gymnasium as gym
import hypothesis.extra.numpy as npst
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nonstop.realtime.channels import SEGMENT_PREFIX, ActionQueue, LatestSlot, SegmentClosedError
from nonstop.realtime.host import Session

from conftest import ScriptedEnv, publish_uniform_frames, run_ticks

pytestmark = pytest.mark.usefixtures("no_shm_leak")


# ----------------------------------------------------------------------------- queue model


@dataclass
class QueueModel:
    """The action queue of docs/design.md §1.3 in a dozen lines of plain Python."""

    capacity: int
    mode: str
    pending: deque = field(default_factory=deque)
    submitted: int = 0
    dropped_full: int = 0
    rejected: int = 0

    def submit(self, entry: dict) -> int:
        if len(self.pending) >= self.capacity:
            self.pending.popleft()
            self.dropped_full += 1
        entry = dict(entry, seq=self.submitted)
        self.pending.append(entry)
        self.submitted += 1
        return entry["seq"]

    def take(self, episode: int) -> tuple[dict | None, int, int]:
        chosen, superseded, stale = None, 0, 0
        if self.mode == "latest":
            for entry in reversed(self.pending):
                if entry["episode"] != episode:
                    stale += 1
                elif chosen is None:
                    chosen = entry
                else:
                    superseded += 1
            self.pending.clear()
        else:
            while self.pending:
                entry = self.pending.popleft()
                if entry["episode"] != episode:
                    stale += 1
                    continue
                chosen = entry
                break
        return chosen, superseded, stale


SPACE = gym.spaces.Discrete(6, start=-2)

submit_op = st.fixed_dictionaries(
    {
        "op": st.just("submit"),
        "action": st.integers(-4, 5),  # -4, -3 and 4, 5 are outside the space
        "episode_lag": st.sampled_from([0, 0, 0, 1, 2]),
        "obs_tick": st.integers(0, 10**6),
        "worker": st.integers(0, 63),
        "tau_theta": st.sampled_from([0.0, 0.25, 1.5, 1 / 3]),
    }
)
operations = st.lists(st.one_of(submit_op, st.just({"op": "take"}), st.just({"op": "new_episode"})), max_size=60)


@settings(
    max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(mode=st.sampled_from(["latest", "fifo"]), capacity=st.integers(1, 8), ops=operations)
def test_action_queue_matches_model(mode, capacity, ops):
    queue = ActionQueue.create(SPACE, capacity=capacity, mode=mode)
    model = QueueModel(capacity, mode)
    episode = applied = superseded = stale = 0
    try:
        for op in ops:
            if op["op"] == "new_episode":
                episode += 1
            elif op["op"] == "submit":
                entry = {
                    "action": op["action"],
                    "episode": max(episode - op["episode_lag"], 0),
                    "obs_tick": op["obs_tick"],
                    "worker": op["worker"],
                    "tau_theta": op["tau_theta"],
                }
                if not SPACE.contains(op["action"]):
                    with pytest.raises(ValueError, match=r"Discrete\(6, start=-2\)"):
                        queue.submit(op["action"], obs_tick=op["obs_tick"], episode=entry["episode"])
                    model.rejected += 1
                    continue
                seq = queue.submit(
                    op["action"],
                    obs_tick=entry["obs_tick"],
                    episode=entry["episode"],
                    worker=entry["worker"],
                    tau_theta=entry["tau_theta"],
                    submit_time=1.0,
                )
                assert seq == model.submit(entry)
            else:
                got = queue.take(episode=episode)
                want, want_sup, want_stale = model.take(episode)
                assert (got.superseded, got.stale) == (want_sup, want_stale)
                if want is None:
                    assert got.record is None
                else:
                    rec = got.record
                    assert (rec.action, rec.obs_tick, rec.episode, rec.worker, rec.tau_theta, rec.seq) == (
                        want["action"],
                        want["obs_tick"],
                        want["episode"],
                        want["worker"],
                        want["tau_theta"],
                        want["seq"],
                    )
                    assert type(rec.action) is int
                    applied += 1
                superseded += got.superseded
                stale += got.stale
            counters = queue.counters()
            assert counters == {
                "submitted": model.submitted,
                "dropped_full": model.dropped_full,
                "rejected": model.rejected,
                "pending": len(model.pending),
            }
            assert queue.pending() == len(model.pending) <= capacity
        # nothing is dropped silently
        c = queue.counters()
        assert c["submitted"] == applied + superseded + stale + c["dropped_full"] + c["pending"]
    finally:
        queue.unlink()


def test_action_queue_latest_and_fifo_by_hand():
    latest = ActionQueue.create(gym.spaces.Discrete(8), capacity=4, mode="latest")
    fifo = ActionQueue.create(gym.spaces.Discrete(8), capacity=4, mode="fifo")
    try:
        for q in (latest, fifo):
            for a in range(6):  # two more than fit: the two oldest are dropped
                q.submit(a, obs_tick=a, episode=0)
            assert q.counters()["dropped_full"] == 2
        got = latest.take(episode=0)
        assert (got.record.action, got.superseded, got.stale) == (5, 3, 0)
        assert latest.take(episode=0).record is None
        assert [fifo.take(episode=0).record.action for _ in range(4)] == [2, 3, 4, 5]
        assert fifo.take(episode=0).record is None
    finally:
        latest.unlink()
        fifo.unlink()


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(5, start=3),
        gym.spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32),
        gym.spaces.Box(0, 255, shape=(2, 2), dtype=np.uint8),
        gym.spaces.MultiDiscrete([3, 5, 2]),
        gym.spaces.MultiBinary(4),
    ],
    ids=str,
)
def test_action_codec_round_trips_every_supported_space(space):
    space.seed(0)
    q = ActionQueue.create(space, capacity=2, mode="fifo")
    try:
        for _ in range(20):
            action = space.sample()
            q.submit(action, obs_tick=0, episode=0)
            got = q.take(episode=0).record.action
            np.testing.assert_array_equal(np.asarray(got), np.asarray(action))
            assert space.contains(got if not isinstance(got, int) else np.int64(got))
    finally:
        q.unlink()


def test_action_queue_validates_its_arguments():
    with pytest.raises(ValueError, match="capacity"):
        ActionQueue.create(gym.spaces.Discrete(2), capacity=0)
    with pytest.raises(ValueError, match="capacity"):
        ActionQueue.create(gym.spaces.Discrete(2), capacity=True)
    with pytest.raises(ValueError, match="mode"):
        ActionQueue.create(gym.spaces.Discrete(2), mode="lifo")
    with pytest.raises(TypeError, match="Discrete, MultiDiscrete"):
        ActionQueue.create(gym.spaces.Tuple([gym.spaces.Discrete(2)]))


# ----------------------------------------------------------------------------- invalid actions


@pytest.mark.parametrize(
    "space, bad",
    [
        (gym.spaces.Discrete(3), 3),
        (gym.spaces.Discrete(3), -1),
        (gym.spaces.Discrete(3), 1.0),
        (gym.spaces.Discrete(3), True),
        (gym.spaces.Discrete(3), None),
        (gym.spaces.Discrete(3), np.array([1])),
        (gym.spaces.Box(-1, 1, (2,), np.float32), [2.0, 0.0]),
        (gym.spaces.Box(-1, 1, (2,), np.float32), [0.0]),
        (gym.spaces.Box(-1, 1, (2,), np.float32), [np.nan, 0.0]),
        (gym.spaces.MultiDiscrete([3, 3]), [3, 0]),
        (gym.spaces.MultiBinary(2), [2, 0]),
    ],
    ids=repr,
)
def test_invalid_action_rejected_with_space_named_and_counted(space, bad):
    q = ActionQueue.create(space)
    try:
        with pytest.raises(ValueError) as excinfo:
            q.submit(bad, obs_tick=0, episode=0)
        assert str(space) in str(excinfo.value)
        assert q.counters() == {"submitted": 0, "dropped_full": 0, "rejected": 1, "pending": 0}
    finally:
        q.unlink()


@pytest.mark.parametrize(
    "space, bad", [(gym.spaces.MultiDiscrete([3, 3]), [1.7, 0]), (gym.spaces.MultiBinary(2), [0.5, 1])], ids=repr
)
def test_fractional_multidiscrete_action_rejected(space, bad):
    assert not space.contains(np.asarray(bad))  # gymnasium itself says it is invalid
    q = ActionQueue.create(space)
    try:
        with pytest.raises(ValueError, match="outside the action space"):
            q.submit(bad, obs_tick=0, episode=0)
    finally:
        q.unlink()


@pytest.mark.parametrize("bad", ["left", {"a": 1}], ids=repr)
def test_non_numeric_box_action_rejected_naming_space(bad):
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    q = ActionQueue.create(space)
    try:
        with pytest.raises(ValueError) as excinfo:
            q.submit(bad, obs_tick=0, episode=0)
        assert str(space) in str(excinfo.value)
        assert q.counters()["rejected"] == 1
    finally:
        q.unlink()


def test_invalid_actions_leave_the_host_unharmed():
    with Session(ScriptedEnv, tick_hz=50) as world:
        run_ticks(world, 3)
        for bad in (3, -1, 0.5, "up"):
            with pytest.raises(ValueError, match=r"Discrete\(3\)"):
                world.queue.submit(bad, obs_tick=3, episode=0)
        world.queue.submit(2, obs_tick=3, episode=0)
        run_ticks(world, 3)
        log = world.tick_log
        summary = log.summary()
    assert log["tick"].tolist() == [1, 2, 3, 4, 5, 6]
    assert log["source"].tolist() == [0, 0, 0, 1, 0, 0]
    assert log["action"][3] == 2
    assert summary["rejected"] == 4 and summary["submitted"] == 1


# ----------------------------------------------------------------------------- latest slot

slot_arrays = npst.arrays(
    dtype=st.one_of(
        npst.boolean_dtypes(),
        npst.integer_dtypes(),
        npst.unsigned_integer_dtypes(),
        npst.floating_dtypes(),
        npst.complex_number_dtypes(),
    ),
    shape=npst.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    first=slot_arrays,
    data=st.data(),
    tick=st.integers(0, 2**40),
    when=st.floats(0, 1e6),
    reward=st.integers(-1000, 1000),
    flags=st.tuples(st.booleans(), st.booleans()),
    episode=st.integers(0, 10**6),
)
def test_latest_slot_round_trips_any_array_and_meta(first, data, tick, when, reward, flags, episode):
    second = data.draw(npst.arrays(first.dtype, first.shape))
    slot = LatestSlot.create(first)
    try:
        assert slot.name.startswith(SEGMENT_PREFIX)
        assert slot.read().tick == -1  # nothing published yet
        for i, arr in enumerate((first, second)):
            slot.publish(
                arr,
                tick=tick + i,
                time=when,
                reward=float(reward),
                terminated=flags[0],
                truncated=flags[1],
                episode=episode,
                inaction_ticks=3,
                agent_ticks=4,
                last_delay=5,
                last_action_seq=6,
                last_end=1,
            )
        got = slot.read()
        assert got.obs.dtype == first.dtype and got.obs.shape == first.shape
        assert got.obs.tobytes() == second.tobytes()  # bitwise: NaNs, signed zeros, byte order
        assert (got.tick, got.time, got.reward, got.total_reward) == (tick + 1, when, reward, 2.0 * reward)
        assert (got.terminated, got.truncated, got.episode) == (flags[0], flags[1], episode)
        assert (got.inaction_ticks, got.agent_ticks, got.last_delay, got.last_action_seq, got.last_end) == (
            3,
            4,
            5,
            6,
            1,
        )
        assert got.seq == 4 == slot.seq
        out = np.empty_like(first)
        assert slot.read(out=out).obs is out and out.tobytes() == second.tobytes()
    finally:
        slot.unlink()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    rewards=st.lists(st.integers(-50, 50), min_size=1, max_size=80),
    read_every=st.lists(st.booleans(), min_size=80, max_size=80),
)
def test_slot_reward_since_last_read_loses_nothing(rewards, read_every):
    """Rule 4: a slow reader skips ticks but, through total_reward, loses no reward."""
    slot = LatestSlot.create(np.zeros(2, np.float32))
    try:
        last_total, seen, last_tick = 0.0, 0.0, -1
        for t, r in enumerate(rewards, start=1):
            slot.publish(np.full(2, t, np.float32), tick=t, time=t * 0.1, reward=float(r))
            if read_every[t - 1]:
                got = slot.read()
                assert got.tick == t > last_tick and got.reward == r  # newest wins
                seen += got.total_reward - last_total
                last_total, last_tick = got.total_reward, got.tick
        seen += slot.read().total_reward - last_total
        assert seen == sum(rewards)
    finally:
        slot.unlink()


def test_slot_from_spaces_and_control_words():
    slot = LatestSlot.create(gym.spaces.Box(0, 255, (3, 4), np.uint8))
    other = pickle.loads(pickle.dumps(slot))  # what a child process receives: the name and layout
    try:
        assert (other.name, other.shape, other.dtype) == (slot.name, (3, 4), np.dtype(np.uint8))
        slot.publish(np.full((3, 4), 9, np.uint8), tick=1, time=0.5)
        assert other.read().obs.sum() == 9 * 12 and other.read().tick == 1
        assert not other.stop_requested and other.reset_requests == 0
        other.request_stop()
        other.request_reset()
        other.request_reset()
        slot.host_state = 2
        assert slot.stop_requested and slot.reset_requests == 2 and other.host_state == 2
    finally:
        other.close()
        slot.unlink()
        slot.unlink()  # idempotent
    discrete = LatestSlot.create(gym.spaces.Discrete(5))
    discrete.unlink()
    with pytest.raises(TypeError, match="fixed-size numeric"):
        LatestSlot.create(np.array([object()], dtype=object))


def test_segments_used_after_close_say_so():
    """`close` drops the views of the mapping; a later use names the segment instead of failing
    on a None, and the views stay typed (never Optional) for the per-tick paths."""
    slot = LatestSlot.create(np.zeros(3, np.uint8))
    queue = ActionQueue.create(gym.spaces.Discrete(4))
    reader = pickle.loads(pickle.dumps(slot))
    assert not (slot.closed or queue.closed or reader.closed)
    reader.close()
    assert reader.closed and not slot.closed
    with pytest.raises(SegmentClosedError, match=rf"LatestSlot '{slot.name}' is closed"):
        reader.read()
    slot.publish(np.ones(3, np.uint8), tick=0, time=0.0)  # the owner's views are untouched
    slot.unlink()
    queue.unlink()
    assert slot.closed and queue.closed
    with pytest.raises(SegmentClosedError, match="ActionQueue .* is closed .*used: _w_seq"):
        queue.pending()
    with pytest.raises(ValueError, match="closed .*used: seq"):  # a property; a ValueError, as I/O on a closed file
        _ = slot.seq
    assert not hasattr(slot, "_obs") and getattr(slot, "_obs", None) is None
    with pytest.raises(AttributeError, match="no attribute 'not_a_view'"):
        slot.not_a_view  # noqa: B018 - an ordinary missing attribute stays an AttributeError


def test_closed_tick_board_answers_its_last_tick():
    """The server's threads may read a board while finalization closes it: a closed board
    answers its last tick, ignores a new wake and has no recent lateness, instead of raising."""
    from nonstop.server.tickprocs import TickBoard

    board = TickBoard.create()
    reader = pickle.loads(pickle.dumps(board))  # the tick worker's attachment
    reader._q.store(0, 41)  # the worker's tick word
    assert board.tick == 41
    reader.close()
    board.unlink()
    assert board.closed and board.tick == 41 and board.recent_lateness().size == 0
    board.next_wake = 50  # ignored, not raised
    with pytest.raises(SegmentClosedError, match="TickBoard"):
        _ = board.next_wake


def test_slot_reads_are_never_torn_across_processes():
    """A spawned writer publishes frames whose every element equals its sequence
    number for ~1 s; every frame this process reads is uniform and its meta tick
    matches its content."""
    slot = LatestSlot.create(np.zeros((256, 512), np.int64))  # 1 MiB: a copy takes a while
    ctx = mp.get_context("spawn")
    ready, count = ctx.Event(), ctx.Value("q", 0)
    writer = ctx.Process(target=publish_uniform_frames, args=(slot, 1.0, ready, count), daemon=True)
    writer.start()
    try:
        assert ready.wait(60), "writer process did not start"
        reads = distinct = 0
        last_tick = -1
        out = np.empty((256, 512), np.int64)
        while writer.is_alive() or reads == 0:
            got = slot.read(out=out)
            if got.tick < 1:
                continue
            lo, hi = int(out.min()), int(out.max())
            assert lo == hi == got.tick, f"torn read: frame spans {lo}..{hi}, meta tick {got.tick}"
            assert got.total_reward == got.tick and got.episode == got.tick % 7
            assert got.tick >= last_tick  # newest wins, never goes back
            distinct += got.tick != last_tick
            last_tick = got.tick
            reads += 1
        writer.join(10)
        assert writer.exitcode == 0
        assert reads > 50 and distinct >= 5, (reads, distinct, count.value)
        assert slot.read().tick == count.value  # the final frame is there
    finally:
        if writer.is_alive():
            writer.kill()
            writer.join()
        slot.unlink()


def test_submit_with_a_non_integer_tick_is_refused_and_leaves_the_ring_intact():
    q = ActionQueue.create(gym.spaces.Discrete(4), capacity=2, mode="fifo")
    try:
        q.submit(1, obs_tick=0, episode=0)
        q.submit(2, obs_tick=1, episode=0)
        with pytest.raises(TypeError, match="integer obs_tick"):
            q.submit(3, obs_tick=2.5, episode=0)  # the ring is full: a half-written entry would clobber action 1
        assert q.counters() == {"submitted": 2, "dropped_full": 0, "rejected": 0, "pending": 2}
        assert [q.take(episode=0).record.action for _ in range(2)] == [1, 2]
    finally:
        q.unlink()


def test_final_observation_survives_the_next_publish():
    """The observation published with final=True stays readable after newer ones (terminal states)."""
    slot = LatestSlot.create(np.zeros(3, np.int32))
    try:
        assert slot.read_final().tick == -1  # no episode has ended yet
        slot.publish(np.full(3, 1, np.int32), tick=1, time=0.1, reward=2.0, truncated=True, episode=0, final=True)
        slot.publish(np.full(3, 9, np.int32), tick=1, time=0.1, episode=1)
        slot.publish(np.full(3, 8, np.int32), tick=2, time=0.2, reward=1.0, episode=1)
        final, latest = slot.read_final(), slot.read()
        assert (final.tick, final.episode, final.truncated, final.total_reward, final.obs.tolist()) == (
            1,
            0,
            True,
            2.0,
            [1, 1, 1],
        )
        assert (latest.tick, latest.episode, latest.total_reward, latest.obs.tolist()) == (2, 1, 3.0, [8, 8, 8])
    finally:
        slot.unlink()
