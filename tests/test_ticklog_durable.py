"""The durable, streaming tick log (issue 14, docs/design.md §4c): bounded chunks, streamed to disk by the
host's own process, surviving SIGKILL, a torn last chunk skipped with a message, and chunks and
resume segments stitched back into the log that was written."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import warnings

import numpy as np
import pytest

from nonstop.metrics.timing import summarize
from nonstop.realtime.host import HostError, Session
from nonstop.realtime.ticklog import COLUMNS, SOURCE_AGENT, SOURCE_DEFAULT, TickLog, is_ticklog_dir

from conftest import ScriptedEnv, run_ticks

pytestmark = pytest.mark.usefixtures("no_shm_leak")


def fill(log: TickLog, n: int, *, seed: int = 0, first_tick: int = 1) -> None:
    """``n`` varied rows: agent and β ticks, delays, rewards, episodes that end now and then."""
    rng = np.random.default_rng(seed)
    episode = 0
    for t in range(first_tick, first_tick + n):
        agent = bool(rng.random() < 0.5)
        ended = bool(rng.random() < 0.05)
        log.append(
            tick=t,
            deadline=t * log.tau_m,
            time=t * log.tau_m + float(rng.exponential(1e-4)),
            source=SOURCE_AGENT if agent else SOURCE_DEFAULT,
            worker=int(rng.integers(0, 4)) if agent else -1,
            delay=int(rng.integers(0, 9)) if agent else -1,
            obs_tick=t - 3 if agent else -1,
            action=float(rng.integers(0, 3)),
            tau_theta=float(rng.random()) if agent else float("nan"),
            reward=float(rng.normal()),
            episode=episode,
            terminated=ended,
            superseded=int(rng.integers(0, 3)),
            step_s=float(rng.random() * 1e-5),
        )
        episode += ended


def assert_same_rows(a: TickLog, b: TickLog, *, skip: tuple[str, ...] = ()) -> None:
    assert len(a) == len(b)
    for name, (dtype, _) in COLUMNS.items():
        assert a[name].dtype == np.dtype(dtype), name
        if name not in skip:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# ----------------------------------------------------------------------------- chunks in memory


def test_in_memory_log_grows_by_chunks_without_copying_earlier_rows():
    log = TickLog(0.1, chunk_rows=16)
    fill(log, 40)
    first_block = log._chunks[0].rows
    fill(log, 100, first_tick=41)
    assert log._chunks[0].rows is first_block  # sealed chunks are never copied again
    assert [c.n for c in log._chunks] == [16] * 8 and len(log) == 140
    assert log["tick"].tolist() == list(range(1, 141))
    log.set_last("reset_s", 0.25)
    assert log["reset_s"][-1] == np.float32(0.25)
    back = TickLog.from_arrays(*log.to_arrays())
    assert_same_rows(back, log)


def test_bad_arguments_are_refused_at_the_door(tmp_path):
    with pytest.raises(ValueError, match="chunk_rows"):
        TickLog(0.1, chunk_rows=0)
    with pytest.raises(ValueError, match="tau_m"):
        TickLog(0.0)
    TickLog(0.1, directory=tmp_path / "d").close()
    with pytest.raises(FileExistsError, match="already holds a tick log"):
        TickLog(0.1, directory=tmp_path / "d")
    with pytest.raises(FileExistsError, match="already holds a tick log"):
        Session(ScriptedEnv, tick_hz=50, log_dir=tmp_path / "d")
    with pytest.raises(ValueError, match="log_chunk_rows"):
        Session(ScriptedEnv, tick_hz=50, log_chunk_rows=0)
    with pytest.raises(FileNotFoundError, match="no tick log"):
        TickLog.open(tmp_path / "nothing")


# ----------------------------------------------------------------------------- streaming to a directory


def test_streamed_log_equals_the_in_memory_log_and_keeps_memory_bounded(tmp_path):
    memory = TickLog(1 / 60, chunk_rows=32)
    streamed = TickLog(1 / 60, chunk_rows=32, directory=tmp_path / "log", max_pending=100, meta={"env": "x"})
    fill(memory, 1000)
    fill(streamed, 1000)
    assert_same_rows(streamed, memory)  # live: chunks on disk, pending ones and the open block
    deadline = time.monotonic() + 30
    while sum(c.rows is not None for c in streamed._chunks) > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sum(c.rows is not None for c in streamed._chunks) == 0  # written chunks leave memory
    streamed.close()
    files = sorted(p.name for p in (tmp_path / "log").iterdir())
    assert files == [f"chunk-{i:06d}.npz" for i in range(32)] + ["meta.json"]  # 31 full + the partial last
    back = TickLog.load(tmp_path / "log")
    assert back.complete and back.meta["env"] == "x" and back.tau_m == 1 / 60
    assert_same_rows(back, memory)
    assert summarize(back) == summarize(memory) or _same_summary(summarize(back), summarize(memory))
    with pytest.raises(RuntimeError, match="read-only"):
        fill(back, 1)


@pytest.mark.slow
def test_a_writer_behind_is_warned_about_and_never_blocks_the_appender(tmp_path):
    log = TickLog(0.1, chunk_rows=1, directory=tmp_path / "log", max_pending=2)
    with pytest.warns(RuntimeWarning, match="chunks behind; they wait in memory"):
        for t in range(1, 2001):  # a chunk a row: far faster than any writer
            log.append(tick=t, deadline=t / 10, time=t / 10, source=SOURCE_DEFAULT)
    assert log.writer_backlog > 2
    log.close()
    assert log.meta["ticklog_writer_max_backlog"] > 2
    assert TickLog.open(tmp_path / "log")["tick"].tolist() == list(range(1, 2001))


def _same_summary(a: dict, b: dict) -> bool:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert a[key] == pytest.approx(b[key], nan_ok=True, rel=1e-9), key
        else:
            assert a[key] == b[key], key
    return True


def test_summary_streams_chunk_by_chunk_and_matches_one_block(tmp_path):
    one = TickLog(0.02)
    many = TickLog(0.02, chunk_rows=7, directory=tmp_path / "log", max_pending=100)
    fill(one, 500, seed=3)
    fill(many, 500, seed=3)
    many.close()
    opened = TickLog.open(tmp_path / "log")
    for kwargs in ({}, {"warmup_ticks": 50}, {"warmup_ticks": 20, "end_tick": 333}):
        _same_summary(summarize(opened, **kwargs), summarize(one, **kwargs))


def test_torn_last_chunk_is_skipped_with_a_message(tmp_path):
    log = TickLog(0.1, chunk_rows=10, directory=tmp_path / "log")
    fill(log, 35)
    log.close()
    last = tmp_path / "log" / "chunk-000003.npz"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # as a power cut might leave it
    with pytest.warns(RuntimeWarning, match=r"torn or unreadable chunk .*chunk-000003\.npz"):
        back = TickLog.open(tmp_path / "log")
    assert len(back) == 30 and back["tick"].tolist() == list(range(1, 31))
    assert back.meta["skipped_chunks"] == ["chunk-000003.npz"]


def test_leftover_temporary_files_are_ignored(tmp_path):
    log = TickLog(0.1, chunk_rows=10, directory=tmp_path / "log")
    fill(log, 20)
    log.close()
    (tmp_path / "log" / ".chunk-000002.npz.1234.tmp").write_bytes(b"half a chunk")  # a writer killed mid-write
    (tmp_path / "log" / "chunk-000002.npz1234.tmp").write_bytes(b"half a chunk")  # ... by nonstop before 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(TickLog.open(tmp_path / "log")) == 20


# ----------------------------------------------------------------------------- stitching resume segments


def test_stitching_chunks_and_resume_segments_equals_the_log_written(tmp_path):
    """A run killed and resumed twice: three segments (an old single-file log, a streamed one, an
    in-memory one) stitch into the log of one continuous world."""
    tau = 1 / 60
    whole = TickLog(tau)
    fill(whole, 300, seed=5)
    cols = whole.columns()
    cuts = [0, 100, 220, 300]
    segments = []
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        seg = TickLog(tau, chunk_rows=16, directory=tmp_path / f"seg{i}" if i == 1 else None, max_pending=100)
        episode0 = int(cols["episode"][a])
        for r in range(a, b):  # each segment restarts its ticks and episodes from its own start
            seg.append(
                **{n: cols[n][r].item() for n in COLUMNS if n != "lateness"}
                | {"tick": int(cols["tick"][r]) - a, "episode": int(cols["episode"][r]) - episode0}
            )
        seg.close()
        segments.append(seg)
    segments[0].save(tmp_path / "seg0.npz")
    parts = [TickLog.load(tmp_path / "seg0.npz"), TickLog.open(tmp_path / "seg1"), segments[2]]
    # a new episode starts at each resume (the world cannot be rewound): renumber the whole log alike
    expected_episode = cols["episode"].copy()
    for a in cuts[1:-1]:
        if cols["episode"][a] == cols["episode"][a - 1]:
            expected_episode[a:] += 1
    stitched = TickLog.stitch(parts, names=["seg0.npz", "seg1", "live"])
    assert len(stitched) == 300
    np.testing.assert_array_equal(stitched["tick"], cols["tick"])
    np.testing.assert_array_equal(stitched["episode"], expected_episode)
    for name in COLUMNS:
        if name not in ("tick", "episode"):
            np.testing.assert_array_equal(stitched[name], cols[name], err_msg=name)
    assert [s["first_row"] for s in stitched.meta["segments"]] == [0, 100, 220]
    s = summarize(stitched)
    assert s["ticks"] == 300 and s["agent_ticks"] == summarize(whole)["agent_ticks"]


# ----------------------------------------------------------------------------- sessions


@pytest.mark.filterwarnings("ignore:tick log. the writer")  # 25-row chunks, simulated time: the writer lags
def test_virtual_session_streams_its_log_and_matches_one_without(tmp_path):
    def run(log_dir):
        with Session(
            ScriptedEnv, tick_hz=50, env_kwargs={"episode_len": 9}, seed=1, log_dir=log_dir, log_chunk_rows=25
        ) as world:
            for t in range(200):
                if t % 3 == 0:
                    latest = world.slot.read()
                    world.queue.submit(t % 3, obs_tick=latest.tick, episode=latest.episode)
                run_ticks(world, 1)
            world.annotate("note", 7)
        return world.tick_log

    plain, streamed = run(None), run(tmp_path / "log")
    measured = ("step_s", "reset_s")  # wall time the env took: differs from run to run
    assert_same_rows(streamed, plain, skip=measured)
    back = TickLog.open(tmp_path / "log")
    assert_same_rows(back, streamed)
    assert back.complete and back.meta["note"] == 7 and back.meta["queue"]["submitted"] > 0
    assert len(list((tmp_path / "log").glob("chunk-*.npz"))) == 8


@pytest.mark.wall
def test_wall_session_streams_from_the_host_process_and_reads_it_back(tmp_path):
    with Session(ScriptedEnv, tick_hz=200, clock="wall", log_dir=tmp_path / "log", log_chunk_rows=30) as world:
        world.run_for(0.6)
        live = world.tick_log  # the chunks on disk so far, while the host runs
    log = world.tick_log
    assert log.directory == tmp_path / "log" and log.complete
    assert 0 < len(live) <= len(log) and len(live) % 30 == 0
    assert log["tick"].tolist() == list(range(1, len(log) + 1))  # the partial last chunk was flushed
    assert log.meta["queue"]["submitted"] == 0 and "origin" in log.meta


@pytest.mark.wall
def test_sigkill_of_the_wall_host_keeps_every_completed_chunk(tmp_path):
    chunk = 40
    world = Session(ScriptedEnv, tick_hz=500, clock="wall", log_dir=tmp_path / "log", log_chunk_rows=chunk).start()
    try:
        deadline = time.monotonic() + 60
        while len(list((tmp_path / "log").glob("chunk-*.npz"))) < 3 and time.monotonic() < deadline:
            world.run_for(0.1)
        os.kill(world._process.pid, signal.SIGKILL)
        world._process.join(10)
        with pytest.raises(HostError, match="died") as excinfo:
            world.run_for(1.0)
    finally:
        world.stop()
    assert world._process is None
    assert not [p for p in mp.active_children() if p.name.startswith("nonstop-host")]
    log = excinfo.value.tick_log
    assert log is not None and not log.complete  # the host never closed it
    on_disk = sorted((tmp_path / "log").glob("chunk-*.npz"))
    assert len(on_disk) >= 3 and len(log) == chunk * len(on_disk)
    assert log["tick"].tolist() == list(range(1, len(log) + 1))  # every completed chunk, in order
    assert world.tick_log is log or len(world.tick_log) == len(log)
    assert is_ticklog_dir(tmp_path / "log") and summarize(log)["ticks"] == len(log)


@pytest.mark.wall
def test_wall_session_without_a_directory_sends_its_log_back_chunk_by_chunk():
    with Session(ScriptedEnv, tick_hz=200, clock="wall", log_chunk_rows=20) as world:
        world.run_for(0.5)
    log = world.tick_log
    assert log.directory is None and len(log) > 40
    assert [c.n for c in log._chunks[:-1]] == [20] * (len(log._chunks) - 1)  # the host's chunks, as they were
    assert log["tick"].tolist() == list(range(1, len(log) + 1))


def test_module_doctests():
    import doctest

    import nonstop.metrics.timing as timing_module
    import nonstop.realtime.ticklog as ticklog_module

    for module in (ticklog_module, timing_module):
        failures, tried = doctest.testmod(module, verbose=False, report=False)
        assert tried > 0 and failures == 0, module.__name__
