"""The tick log at a thousand seats (issue 43 item 3): every seat's summary is folded for all seats at
once (numpy over the seats, not a Python loop a seat a chunk), and must give each seat the very
figures its own view gives, to the last bit, whatever the seats do: act on some ticks, idle, die
(absent), at any warm-up and end; teams are grouped in one pass. Its speed is `nonstop bench
ticklog`'s, never asserted here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.realtime.tickcolumns import SOURCE_ABSENT, SOURCE_AGENT, SOURCE_DEFAULT
from nonstop.realtime.ticklog import SEAT_COLUMNS, TickLog
from nonstop.realtime.ticksummary import summarize_seats, summarize_teams

TICK = 1 / 20


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def _log(seats: int, ticks: int, chunk_rows: int, seed: int, directory: Path | None = None) -> TickLog:
    """Seats that act on some ticks (each at its own rate: most always), idle on others, die for good
    from a tick of their own, with rewards and delays; an episode ends every 37 ticks."""
    rng = np.random.default_rng(seed)
    rate = np.where(rng.random(seats) < 0.6, 1.0, rng.random(seats))
    dies = np.where(rng.random(seats) < 0.3, rng.integers(1, ticks + 1, seats), ticks + 1)
    log = TickLog(TICK, seats=seats, chunk_rows=chunk_rows, directory=directory, max_pending=10_000)
    at = {q: k for k, q in enumerate(SEAT_COLUMNS)}
    for t in range(1, ticks + 1):
        v = np.zeros((len(SEAT_COLUMNS), seats))
        agent = rng.random(seats) < rate
        dead = t >= dies
        v[at["source"]] = np.where(dead, SOURCE_ABSENT, np.where(agent, SOURCE_AGENT, SOURCE_DEFAULT))
        v[at["delay"]] = np.where(agent & ~dead, rng.integers(1, 4, seats), -1)
        v[at["reward"]] = np.where(dead, 0.0, rng.normal(size=seats) / 7)
        v[at["superseded"]] = rng.integers(0, 2, seats)
        log.append_tick(
            t, t * TICK, t * TICK + rng.random() * 1e-4, episode=(t - 1) // 37, terminated=t % 37 == 0,
            truncated=False, step_s=1e-4, seats=v.reshape(-1),
        )  # fmt: skip
    return log


@settings(max_examples=25, deadline=None)
@given(
    seats=st.integers(1, 9),
    ticks=st.integers(1, 120),
    chunk_rows=st.integers(1, 40),
    warmup=st.integers(0, 30),
    end=st.one_of(st.none(), st.integers(1, 130)),
    seed=st.integers(0, 2**16),
)
def test_every_seat_folded_at_once_is_its_own_view_to_the_bit(
    seats: int, ticks: int, chunk_rows: int, warmup: int, end: int | None, seed: int
) -> None:
    log = _log(seats, ticks, chunk_rows, seed)
    together = summarize_seats(log, warmup_ticks=warmup, end_tick=end)
    for i in range(seats):
        alone = log.seat(i).summary(warmup_ticks=warmup, end_tick=end)
        assert _same(together[i], alone), i


def test_a_thousand_seats_on_disk_each_as_its_own_view(tmp_path: Path) -> None:
    log = _log(1000, 90, 130, seed=7, directory=tmp_path / "log")
    log.close()
    back = TickLog.open(tmp_path / "log")
    together = summarize_seats(back, warmup_ticks=5)
    assert [s["seat"] for s in together] == back.seat_names and len(together) == 1000
    for i in (0, 1, 499, 998, 999):
        assert _same(together[i], back.seat(i).summary(warmup_ticks=5)), i
    assert any(s["absent_ticks"] for s in together) and any(s["inaction_ticks"] for s in together)


def test_teams_are_grouped_in_one_pass_each_seat_in_its_own() -> None:
    row = {"agent_ticks": 1, "inaction_ticks": 1, "delay_histogram": {1: 1}, "reward_total": 1.0,
           "superseded": 0, "stale": 0, "episodes_completed": 1, "episode_return_mean": 1.0}  # fmt: skip
    seats = {f"s{i}": row for i in range(1000)}
    teams = summarize_teams(seats, {f"s{i}": f"s{i}" for i in range(1000)})  # a team a seat
    assert list(teams) == list(seats) and all(t["seats"] == [name] for name, t in teams.items())
    halves = summarize_teams(seats, {f"s{i}": "red" if i % 2 else "blue" for i in range(1000)})
    assert list(halves) == ["blue", "red"] and halves["red"]["agent_ticks"] == 500


def _vm_flags(address: int) -> list[str]:
    """The kernel's VmFlags of this process's mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_an_in_memory_log_of_a_thousand_seats_fills_blocks_refused_huge_pages() -> None:
    """A thousand seats' row is 72 KB: in huge pages, every 28th append faulted a 2 MB page in (1-5 ms
    on the tick path, `nonstop bench ticklog`'s chunked variant). Its blocks are now advised off huge
    pages (Linux: the mapping's ``nh`` flag), and every row reads back as written across chunks."""
    log = TickLog(TICK, seats=1000)
    rows = 2 * log.chunk_rows + 5
    for t in range(1, rows + 1):
        v = np.zeros((len(SEAT_COLUMNS), 1000))
        v[SEAT_COLUMNS.index("reward")] = np.arange(1000) + t
        log.append_tick(t, t * TICK, t * TICK, episode=0, terminated=False, truncated=False, step_s=0.0,
                        seats=v.reshape(-1))  # fmt: skip
    reward = log.block("reward")
    assert reward.shape == (rows, 1000) and (reward == np.arange(1000) + np.arange(1, rows + 1)[:, None]).all()
    if Path("/proc/self/smaps").is_file():
        block = log._block  # the open block, the one appends write
        assert "nh" in _vm_flags(block.__array_interface__["data"][0])


def test_bench_ticklog_sizes_a_thousand_seats_by_bytes_and_times_the_reports_sections(tmp_path, monkeypatch) -> None:
    """Past 162 seats the default rows keep 162 seats' bytes (50,000 rows of 1,000 seats' 72 KB would
    be 3.6 GB in the chunked variant); the result times the report's seat and team sections on the
    streamed log (its target in the JSON, never asserted here)."""
    import argparse

    from nonstop.bench import ticklog

    quick = argparse.Namespace(quick=True, rows=None, rss_at=None)
    assert ticklog._sizes(quick, 1000) == {"rows": 3240, "rss_at": 810}
    assert ticklog._sizes(argparse.Namespace(quick=False, rows=None, rss_at=None), 162) == ticklog.FULL_SEATS
    assert ticklog._sizes(quick, 1) == ticklog.QUICK
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    args = argparse.Namespace(
        quick=True, rows=300, rss_at=150, seats=1000, variants="streamed", rate=0.0, sched="normal"
    )  # fmt: skip
    result = ticklog.run(args)
    assert result["report_s"] > 0 and result["report_s_per_hour_at_20hz"] == result["report_s"] * 72_000 / 300
    assert isinstance(result["meets_report_target"], bool) and result["targets"]["report_s_per_hour_at_20hz"] > 0
    assert result["variants"]["streamed"]["append_us"]["n"] == 300
