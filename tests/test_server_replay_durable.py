"""A server session's replay is bounded in memory and survives the death of what recorded it (issue 14).

A session host as the server runs it (`Host` over a `ReplayRecorder` streaming beside its tick log),
driven on virtual time: however long it runs, the replay columns held in memory never exceed a chunk.
SIGKILL of the process recording it leaves a replay that `Replay.recover` (and a restarted server)
finalises up to its last durable chunk, and that re-simulates exactly.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from nonstop.realtime.lifeline import reap
from nonstop.server.replay import Replay, ReplayColumns, verify

WORLD = "theory/inaction"
CHUNK = 500


def _session(directory: Path, *, seed: int = 4, max_ticks: int | None = None):
    """A session's host as `ServerSession._start` builds it, with its replay header written."""
    from nonstop.envs import make_env
    from nonstop.realtime.channels import ActionQueue, LatestSlot
    from nonstop.realtime.defaults import make_default
    from nonstop.realtime.host import Host
    from nonstop.server.replay import ReplayRecorder, write_header
    from nonstop.server.envspec import EnvSpec

    spec = EnvSpec.probe(WORLD)
    env = ReplayRecorder(make_env(WORLD), directory=directory / "replay", chunk_rows=CHUNK)
    slot = LatestSlot.create(spec.observation_space)
    queue = ActionQueue.create(spec.action_space, capacity=16)
    host = Host(
        env,
        slot,
        queue,
        tau_m=1.0 / spec.tick_hz,
        default=make_default("noop", noop_action=spec.noop_action),
        seed=seed,
        max_ticks=max_ticks,
        meta={"env": WORLD, "clock": "virtual"},
        log_dir=directory,
        log_chunk_rows=CHUNK,
    )
    header = {
        "env": WORLD,
        "env_kwargs": {},
        "seed": seed,
        "warm_reset": False,
        "tick_hz": spec.tick_hz,
        "default": "noop",
        "queue_mode": "latest",
        "session_id": directory.name,
        "end_reason": "the server died",
        "complete": True,
        "server_pid": os.getpid(),
    }
    write_header(directory, header)
    return host, env, slot, queue


def _drive(host, queue, ticks: int, on_tick=lambda: None) -> None:
    """Tick the host ``ticks`` times on virtual time, an agent submitting now and then."""
    from nonstop.realtime.clock import VirtualClock

    process = host.run(VirtualClock())
    wake = next(process)
    rng = np.random.default_rng(0)
    for t in range(ticks):
        if t % 3 == 0:
            queue.submit(int(rng.integers(2)), obs_tick=host.tick, episode=host.episode, submit_time=wake)
        wake = process.send(wake)
        on_tick()


def test_a_long_session_holds_at_most_a_chunk_of_replay_columns(tmp_path, no_shm_leak):
    host, env, slot, queue = _session(tmp_path / "s1")
    held = []
    try:
        _drive(host, queue, 40 * CHUNK + 123, on_tick=lambda: held.append(env.columns.held_steps))
        host.close_log()
    finally:
        slot.unlink(), queue.unlink()
    cols = env.columns
    assert cols.steps == 40 * CHUNK + 123
    assert max(held) <= CHUNK and cols.max_held <= CHUNK, max(held)  # never more than a chunk in memory
    assert len(cols.reset_steps) <= CHUNK
    replay = Replay.from_session(env, host.log, {"env": WORLD, "seed": 4, "tick_hz": 60})
    assert replay.ticks == 40 * CHUNK + 123 and replay.reset_steps.tolist() == [0, 10_000, 20_000]  # 10k-tick episodes
    result = verify(replay)
    assert result.ok and result.checked == replay.ticks + len(replay.reset_steps)


def _record_until_killed(directory: str) -> None:
    host, env, slot, queue = _session(Path(directory))
    _drive(host, queue, 10**9)  # until SIGKILL


def test_a_killed_recorder_leaves_a_replay_that_verifies_up_to_its_last_durable_chunk(tmp_path, no_shm_leak):
    directory = tmp_path / "ticklogs" / "killed-session"
    child = mp.get_context("spawn").Process(target=_record_until_killed, args=(str(directory),))
    child.start()
    try:
        deadline = time.monotonic() + 120
        while len(list(directory.glob("chunk-*.npz"))) < 6:
            assert child.is_alive() and time.monotonic() < deadline, "the recorder never got going"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        reap(child)
    assert child.exitcode == -signal.SIGKILL
    chunks = len(list(directory.glob("chunk-*.npz")))
    on_disk = ReplayColumns.read_directory(directory / "replay")
    assert len(on_disk["step_hashes"]) % CHUNK == 0  # whole chunks only: a torn flush is cut off
    replay = Replay.recover(directory)
    assert replay.header["complete"] is False and replay.header["recovered"] is True
    assert replay.ticks >= (chunks - 1) * CHUNK and replay.ticks % CHUNK == 0, (replay.ticks, chunks)
    result = verify(replay)
    assert result.ok and result.checked == replay.ticks + len(replay.reset_steps)

    # a server starting on that replay directory finalises it (its recording process is dead)
    from nonstop.server.sessions import SessionManager

    header = json.loads((directory / "replay.json").read_text())
    header["server_pid"] = child.pid
    (directory / "replay.json").write_text(json.dumps(header))
    manager = SessionManager([WORLD], replay_dir=tmp_path)
    try:
        assert manager.replays_recovered == 1 and not directory.exists()
        saved = Replay.load(tmp_path / "killed-session.npz")
        assert saved.ticks == replay.ticks and saved.header["complete"] is False
    finally:
        manager.shutdown()


def test_a_live_servers_session_is_not_recovered_by_another(tmp_path, no_shm_leak):
    from nonstop.server.sessions import SessionManager

    host, env, slot, queue = _session(tmp_path / "ticklogs" / "live")  # server_pid: this live process
    try:
        _drive(host, queue, 3 * CHUNK)
        manager = SessionManager([WORLD], replay_dir=tmp_path)
        manager.shutdown()
        assert manager.replays_recovered == 0 and (tmp_path / "ticklogs" / "live").exists()
        host.close_log()
    finally:
        slot.unlink(), queue.unlink()


def test_replay_columns_validate_and_keep_a_consistent_prefix(tmp_path):
    with pytest.raises(ValueError, match="chunk_rows"):
        ReplayColumns(directory=tmp_path, chunk_rows=0)
    cols = ReplayColumns(2, directory=tmp_path / "r", chunk_rows=3)
    cols.add_reset(5)
    for i in range(7):
        cols.add_step([i, -i], 10 + i)
        if i == 4:
            cols.add_reset(6)  # a reset after step 5
    with open(tmp_path / "r" / "actions.f8", "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn write at the end of one column
    got = ReplayColumns.read_directory(tmp_path / "r")
    assert got["step_hashes"].tolist() == [10, 11, 12, 13, 14, 15]  # two whole chunks
    assert got["actions"].shape == (6, 2) and got["reset_steps"].tolist() == [0, 5]


def test_a_full_disk_keeps_the_replay_columns_in_memory_and_whole(tmp_path, monkeypatch):
    import builtins

    cols = ReplayColumns(directory=tmp_path / "r", chunk_rows=4)
    cols.add_reset(1)
    for i in range(5):
        cols.add_step(float(i), 10 + i)  # the first chunk reaches the files
    real_open = builtins.open

    def full_disk(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "a" in mode and str(path).endswith("step_hashes.u4"):
            f.write(b"\x00\x00")  # part of a value made it before the disk filled
            f.close()
            raise OSError(28, "No space left on device")
        return f

    monkeypatch.setattr(builtins, "open", full_disk)
    for i in range(5, 12):
        cols.add_step(float(i), 10 + i)
    monkeypatch.setattr(builtins, "open", real_open)
    assert cols.error is not None and cols.held_steps == 8  # kept in memory, nothing lost
    got = cols.read()
    assert got["step_hashes"].tolist() == list(range(10, 22)) and got["actions"][:, 0].tolist() == list(range(12))
