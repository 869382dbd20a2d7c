"""Seats as arrays in the tick log (issue 32): each per-seat quantity a (ticks × seats) block in memory
and in the chunks, logs written before (one named column per seat and quantity) read unchanged, and
summaries per seat and per team folded in one pass."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from nonstop.realtime.tickchunks import CHUNK_ROWS, chunk_rows_for
from nonstop.realtime.ticklog import (
    COLUMNS,
    SEAT_COLUMNS,
    SHARED_COLUMNS,
    SOURCE_AGENT,
    SOURCE_DEFAULT,
    RowLayout,
    TickLog,
)
from nonstop.realtime.ticksummary import summarize_seats

OLD = Path(__file__).parent / "data" / "ticklog-named-seats"
EXPECTED = json.loads((OLD / "expected.json").read_text())
TICK = 1 / 60
SEATS = 50
DTYPES = {name: np.dtype(dtype) for name, (dtype, _) in COLUMNS.items()}


def _same(a, b) -> bool:
    """Equal, with NaN equal to NaN and JSON's string keys equal to int keys (a delay histogram)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {str(k) for k in a} == {str(k) for k in b} and all(_same(a[k], b.get(k, b.get(str(k)))) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def _as_before(summary: dict) -> dict:
    """A summary with only the figures the code before the blocks gave: ``absent_ticks`` (ticks a
    seat's agent had left the world, counted since) must be 0 in every log of that code's time."""
    summary = dict(summary)
    assert summary.pop("absent_ticks") == 0
    if "seats" in summary:
        summary["seats"] = {name: _as_before(seat) for name, seat in summary["seats"].items()}
    return summary


def _old(name: str) -> TickLog:
    path = OLD / name
    return TickLog.load(path) if name.endswith(".npz") else TickLog.open(path)


# ----------------------------------------------------------------------------- logs written before the blocks


@pytest.mark.parametrize("name", ["duel", "duel.npz", "solo"])
def test_logs_written_with_named_seat_columns_read_unchanged(name: str) -> None:
    """Two-seat and one-seat logs written by the code before the blocks (tests/data/ticklog-named-seats,
    made by its make.py with main's code): every column, the summary and every seat's summary are
    what that code read from them."""
    expected, log = EXPECTED[name], _old(name)
    assert (len(log), log.seats, log.seat_names) == (expected["rows"], expected["seats"], expected["seat_names"])
    columns = log.columns()
    assert list(columns) == list(COLUMNS) + [f"seat{i}_{c}" for i in range(1, log.seats) for c in SEAT_COLUMNS]
    for column, values in expected["columns"].items():
        assert _same(columns[column].tolist(), values), column
        assert columns[column].dtype == DTYPES[column.split("_", 1)[1] if column.startswith("seat1_") else column]
    assert _same(_as_before(log.summary()), expected["summary"])
    for seat, summary in expected["seat_summaries"].items():
        assert _same(_as_before(log.seat(seat).summary()), summary), seat


def test_an_old_two_seat_log_reads_as_blocks_and_by_seat() -> None:
    log, expected = _old("duel"), EXPECTED["duel"]["columns"]
    assert log.block("delay").tolist() == [list(pair) for pair in zip(expected["delay"], expected["seat1_delay"])]
    assert log.block("reward").shape == (50, 2) and log.block("reward").dtype == np.float64
    assert log["seat1_source"].tolist() == log.seat("second_0")["source"].tolist() == expected["seat1_source"]
    assert log.tail("seat1_reward", 3).tolist() == expected["seat1_reward"][-3:]
    chunks = list(log.iter_blocks(["tick", "source"]))
    assert [len(c["tick"]) for c in chunks] == [16, 16, 16, 2] and all(c["source"].shape[1] == 2 for c in chunks)
    assert list(log.summary()["seats"]) == ["first_0", "second_0"]


def _fill(log: TickLog, ticks: int, seed: int = 0, first_tick: int = 1) -> dict[str, np.ndarray]:
    """Append ``ticks`` ticks of random per-seat values (an episode ends every 23 ticks); what was
    written, each per-seat quantity as (ticks × seats) in its column's dtype."""
    rng = np.random.default_rng(seed)
    seats, at = log.seats, {q: k for k, q in enumerate(SEAT_COLUMNS)}
    written: dict[str, list] = {name: [] for name in SHARED_COLUMNS + SEAT_COLUMNS}
    for t in range(first_tick, first_tick + ticks):
        v = np.zeros((len(SEAT_COLUMNS), seats))
        agent = rng.random(seats) < 0.4
        v[at["source"]] = np.where(agent, SOURCE_AGENT, SOURCE_DEFAULT)
        v[at["worker"]] = np.where(agent, rng.integers(0, 4, seats), -1)
        v[at["delay"]] = np.where(agent, rng.integers(0, 9, seats), -1)
        v[at["obs_tick"]] = np.where(agent, t - v[at["delay"]], -1)
        v[at["action"]] = rng.integers(0, 5, seats)
        v[at["tau_theta"]] = np.where(agent, rng.random(seats), np.nan)
        v[at["reward"]] = rng.normal(size=seats)
        v[at["superseded"]] = rng.integers(0, 3, seats)
        v[at["stale"]] = rng.integers(0, 2, seats)
        episode, ended = (t - 1) // 23, t % 23 == 0
        log.append_tick(
            t,
            t * TICK,
            t * TICK + 1e-5,
            episode=episode,
            terminated=ended,
            truncated=False,
            step_s=1e-4,
            seats=v.reshape(-1),
        )
        shared = {
            "tick": t,
            "deadline": t * TICK,
            "time": t * TICK + 1e-5,
            "lateness": (t * TICK + 1e-5) - t * TICK,
            "episode": episode,
            "terminated": ended,
            "truncated": False,
            "step_s": 1e-4,
            "reset_s": 0.0,
        }
        for name in SHARED_COLUMNS:
            written[name].append(shared[name])
        for q in SEAT_COLUMNS:
            written[q].append(v[at[q]])
    return {name: np.asarray(values, np.float64).astype(DTYPES[name]) for name, values in written.items()}


def _assert_holds(log: TickLog, written: dict[str, np.ndarray]) -> None:
    blocks = log.blocks()
    for name, values in written.items():
        got = blocks[name]
        assert got.dtype == values.dtype and got.shape == values.shape, name
        assert np.array_equal(got, values, equal_nan=got.dtype.kind == "f"), name
    for seat in (0, 1, log.seats - 1):
        for q in SEAT_COLUMNS:
            named = q if seat == 0 else f"seat{seat}_{q}"
            kind = written[q].dtype.kind == "f"
            assert np.array_equal(log[named], written[q][:, seat], equal_nan=kind), named
            assert np.array_equal(log.seat(seat)[q], written[q][:, seat], equal_nan=kind), named


def test_a_fifty_seat_log_round_trips_through_chunks_on_disk(tmp_path: Path) -> None:
    log = TickLog(
        TICK,
        directory=tmp_path / "log",
        chunk_rows=16,
        seats=SEATS,
        max_pending=16,
        meta={"seats": [f"a{i}" for i in range(SEATS)]},
    )
    written = _fill(log, 70)
    _assert_holds(log, written)  # in memory (and the chunks the writer already has on disk)
    log.close()
    files = sorted((tmp_path / "log").glob("chunk-*.npz"))
    assert len(files) == 5  # 4 full chunks of 16 and the last 6 rows
    with np.load(files[0]) as chunk:
        header = json.loads(bytes(chunk["__header__"]).decode())
        assert header["format"] == "nonstop.ticklog.chunk/2" and header["seats"] == SEATS
        assert sorted(n for n in chunk.files if n != "__header__") == sorted(COLUMNS)  # 18 arrays, no seat{i}_…
        assert chunk["delay"].shape == (16, SEATS) and chunk["delay"].dtype == np.int32 and chunk["tick"].shape == (16,)
    back = TickLog.open(tmp_path / "log")
    assert (len(back), back.seats, back.complete) == (70, SEATS, True)
    assert back.seat_names[-1] == "a49" and back.seat("a49").name == "a49"
    _assert_holds(back, written)
    assert np.array_equal(back.rows(0), log.rows(0), equal_nan=True) and back.rows(0).shape == (
        70,
        RowLayout(SEATS).width,
    )
    one = TickLog.load(back.save(tmp_path / "one.npz"))  # one file: blocks as well
    _assert_holds(one, written)
    with np.load(tmp_path / "one.npz") as data:
        assert data["reward"].shape == (70, SEATS) and "seat1_reward" not in data.files


def test_a_many_seat_log_moves_between_processes_as_rows_and_stitches(tmp_path: Path) -> None:
    first = TickLog(TICK, chunk_rows=8, seats=SEATS)
    written = _fill(first, 30)
    receiver = TickLog(TICK, directory=tmp_path / "received", chunk_rows=8, seats=SEATS, max_pending=16)
    receiver.append_rows(first.rows(0, 13))
    receiver.append_rows(first.rows(13))
    receiver.close()
    _assert_holds(TickLog.open(tmp_path / "received"), written)
    with pytest.raises(ValueError, match=f"shape \\(n, {RowLayout(SEATS).width}\\)"):
        receiver.append_rows(np.zeros((1, 18)))
    second = TickLog(TICK, seats=SEATS)
    _fill(second, 5, seed=1)
    joined = TickLog.stitch([TickLog.open(tmp_path / "received"), second])
    assert len(joined) == 35 and joined["tick"].tolist()[28:32] == [29, 30, 31, 32]
    assert joined.block("delay").shape == (35, SEATS)


def test_an_old_log_and_a_new_one_stitch(tmp_path: Path) -> None:
    """A run resumed after the upgrade: its old segment keeps named columns, its new one blocks."""
    old = _old("duel")
    new = TickLog(TICK, directory=tmp_path / "new", chunk_rows=4, seats=2, meta=dict(old.meta))
    written = _fill(new, 10)
    new.close()
    joined = TickLog.stitch([old, TickLog.open(tmp_path / "new")])
    assert len(joined) == 60 and joined.seats == 2
    assert joined.block("reward")[50:].tolist() == written["reward"].tolist()
    assert (
        joined["seat1_delay"].tolist() == EXPECTED["duel"]["columns"]["seat1_delay"] + written["delay"][:, 1].tolist()
    )


def test_a_log_directory_refuses_a_chunk_of_another_seat_count(tmp_path: Path) -> None:
    log = TickLog(TICK, directory=tmp_path / "log", chunk_rows=4, seats=3)
    _fill(log, 8)
    log.close()
    other = TickLog(TICK, directory=tmp_path / "other", chunk_rows=4, seats=4)
    _fill(other, 4)
    other.close()
    shutil.copy(tmp_path / "other" / "chunk-000000.npz", tmp_path / "log" / "chunk-000002.npz")
    with pytest.warns(RuntimeWarning, match="holds 4 seats, the log 3"):
        back = TickLog.open(tmp_path / "log")
    assert len(back) == 8


def test_per_seat_values_are_appended_as_one_block_only() -> None:
    log = TickLog(TICK, seats=3)
    with pytest.raises(TypeError, match="use append_tick"):
        log.append_row(1, TICK, TICK, SOURCE_DEFAULT, -1, -1, -1, 0.0, float("nan"), 0.0, 0, False, False, 0, 0, 0.0)
    with pytest.raises(KeyError, match="no column 'seat3_delay'"):
        log["seat3_delay"]
    with pytest.raises(KeyError, match="no per-seat quantity 'tick'"):
        log.block("tick")


def test_a_many_seat_chunk_holds_what_a_one_seat_chunk_holds() -> None:
    """Memory stays bounded whatever the seat count: a chunk is at most a one-seat chunk's bytes."""
    one = RowLayout(1).width * 8 * CHUNK_ROWS
    for seats in (2, 50, 162, 1000):
        rows = chunk_rows_for(CHUNK_ROWS, RowLayout(seats))
        assert rows * RowLayout(seats).width * 8 <= one < (rows + 1) * RowLayout(seats).width * 8
    assert TickLog(TICK, seats=162).chunk_rows == 804 and TickLog(TICK).chunk_rows == CHUNK_ROWS
    assert RowLayout(162).width * 8 <= 2 * RowLayout(1).width * 8 * 162  # issue 32: ≤ 2× the one-seat row per seat


# ----------------------------------------------------------------------------- summaries


def test_every_seat_is_summarized_in_one_pass_as_its_own_view_would_be(tmp_path: Path) -> None:
    log = TickLog(
        TICK,
        directory=tmp_path / "log",
        chunk_rows=16,
        seats=12,
        max_pending=16,
        meta={"queues": [{"submitted": i, "dropped_full": 0, "rejected": 0} for i in range(12)]},
    )
    _fill(log, 100, seed=3)
    log.close()
    back = TickLog.open(tmp_path / "log")
    for source in (log, back):
        seats = source.summary(warmup_ticks=10)["seats"]
        assert list(seats) == source.seat_names
        for i, name in enumerate(source.seat_names):
            assert _same(seats[name], source.seat(i).summary(warmup_ticks=10)), name
            assert seats[name]["submitted"] == i and seats[name]["seat"] == name
    assert _same(summarize_seats(back, end_tick=50), [back.seat(i).summary(end_tick=50) for i in range(12)])


def test_teams_sum_their_seats() -> None:
    log = TickLog(TICK, seats=6, meta={"seats": ["r0", "r1", "r2", "b0", "b1", "b2"]})
    written = _fill(log, 46)  # two whole episodes
    teams = {"r0": "red", "r1": "red", "r2": "red", "b0": "blue", "b1": "blue"}  # b2 on no team
    summary = log.summary(teams=teams)
    red, blue = summary["teams"]["red"], summary["teams"]["blue"]
    assert red["seats"] == ["r0", "r1", "r2"] and blue["seats"] == ["b0", "b1"]
    agent = written["source"] == SOURCE_AGENT
    assert red["agent_ticks"] == int(agent[:, :3].sum()) and red["inaction_ticks"] == int((~agent[:, :3]).sum())
    assert red["delay_mean_ticks"] == pytest.approx(written["delay"][:, :3][agent[:, :3]].mean())
    assert blue["delay_max_ticks"] == int(written["delay"][:, 3:5][agent[:, 3:5]].max())
    assert red["reward_total"] == pytest.approx(written["reward"][:, :3].sum())
    assert red["episode_return_mean"] == pytest.approx(
        written["reward"][:, :3].sum() / 2
    )  # each episode: the team's sum
    worst = max((~agent[:, i]).mean() for i in range(3))
    assert red["inaction_fraction_max"] == pytest.approx(worst)
    with pytest.raises(ValueError, match=r"names seats \['x9'\]"):
        log.summary(teams={"x9": "red"})
    assert "teams" in TickLog(TICK).summary(teams={"seat0": "solo"})  # one seat: a team of one
