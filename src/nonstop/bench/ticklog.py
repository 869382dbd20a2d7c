"""``nonstop bench ticklog``: what one tick-log append costs over millions of rows, and the memory.

Each variant appends ``--rows`` rows (default 5 million; 60 Hz for 23 hours) in a fresh process,
timing every `TickLog.append_tick` on its own (``perf_counter_ns`` around the call, as the host
calls it), and reads the process's resident memory (``/proc/self/statm``) after ``--rss-at`` rows
(default 1 million) and at the end. The process is scheduled as the wall-clock host schedules
itself (``--sched``, default ``auto``: SCHED_FIFO where permitted, see
`nonstop.realtime.host.raise_priority`), and appends at ``--rate`` rows a second (default 200,000:
3,333 times a 60 Hz world, 10 times the fastest env nonstop hosts), a burst each millisecond with
a sleep to the next, as a host sleeps between ticks (a realtime task that never sleeps is throttled
by the kernel, which would be measured instead). Variants:

* ``floor`` — the same loop calling a bare ``struct.pack_into`` into one fixed row: what the
  machine itself adds to a ~1 µs call (preemption, interrupts). The noise floor of the figures.

* ``doubling`` — the tick log nonstop had before issue 14, rebuilt here as the baseline: one
  float64 block that doubles (``np.concatenate``) when full. Each doubling copies every row so far.
* ``chunked`` — today's `TickLog` with no directory: bounded chunks kept in memory, never copied.
* ``streamed`` — today's `TickLog` streaming to a directory (a temporary one, removed after):
  full chunks go to the background writer, memory holds a few chunks.

Targets (issue 14): ``streamed`` max append ≤ 1 ms, and its resident memory at the end within 10 %
of that at ``--rss-at`` rows. On a shared machine even the ``floor`` (a bare pack) sees stalls of
milliseconds, when other processes hold the cores, so ``meets_target`` asks that every append that
grows the log (``seal_max_ms``) is ≤ 1 ms, that memory is flat, and that the worst append is
≤ 1 ms or no worse than the floor's measured in the same run; ``meets_strict_max`` says whether
the worst append was ≤ 1 ms outright. ``seal_max_ms`` is the worst of the appends that grow the log (a
doubling, or a chunk sealed and handed to the writer): the cost the design itself adds, apart from
the machine's noise. ``writer_backlog`` is the most chunks that waited for the writer at
once (the appender never waits for it; a backlog costs memory instead); ``fresh_blocks``, the seals
that found none of the writer's paged-in blocks ready (their pages then fault on the tick path). ``slow_appends`` says
where every append over 0.5 ms happened: sealing a chunk, while the writer thread was writing one
(it shares the GIL), during a garbage collection, or none of these (``machine``: another process
or the hypervisor had the core; the ``floor`` variant's own slow appends are all of that kind). ``--rate 0`` appends back
to back, as fast as they go, and shows where the writer stops keeping up on this machine.

``--seats N`` logs a world of N seats (issue 32: 162 for MAgent2's battle): each append is one tick
of every seat, its per-seat quantities one (quantities × seats) block. The defaults then keep the
one-seat run's bytes (``--rate`` scaled to the same bytes a second, 20,000 rows quick and 50,000
full up to 162 seats, and past 162 the bytes of 162 seats' rows: 3,240 and 8,100 rows at 1,000 seats,
issue 43; no ``doubling`` variant unless named), and the result adds what a tick costs in memory:
``bytes_per_tick`` (the ``chunked`` variant's resident growth per row between the two readings),
``row_bytes`` (the row's own size) and ``memory_per_tick_vs_one_seat``: bytes per tick over the
one-seat row times the seat count (issue 32's target: ≤ 2, ``meets_memory_target``). Its seats are
named as battle's (``red_*``, then ``blue_*``) and each append is one of 64 rows of varied values (what
a run's log compresses like, not one repeated row), so that ``report_s`` can say what `nonstop report`'s
seat and team sections cost (issue 43): the ``streamed`` log reopened from its directory and every
seat and team summarized (`TickLog.summary` with the teams, as the report does), its wall seconds,
ticks a second, and ``report_s_per_hour_at_20hz`` for an hour of a 20 Hz world (target: seconds,
``REPORT_TARGET_S``).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from nonstop.bench.common import machine_info, percentiles, run_sizes, size_help
from nonstop.realtime.lifeline import reap

__all__ = ["DESCRIPTION", "add_arguments", "run", "render", "RESULT_KEYS"]

DESCRIPTION = (
    "tick-log append cost (p99, max) over 5M rows and resident memory: chunked/streamed vs the old doubling log"
)

QUICK = {"rows": 300_000, "rss_at": 100_000}
FULL = {"rows": 5_000_000, "rss_at": 1_000_000}
#: the sizes with ``--seats`` above 1 (a 162-seat row is 81 times a one-seat row)
QUICK_SEATS = {"rows": 20_000, "rss_at": 5_000}
FULL_SEATS = {"rows": 50_000, "rss_at": 10_000}
#: past this many seats the default rows shrink to keep this many seats' bytes (MAgent2's default battle)
SEATS_AT_FULL_ROWS = 162
VARIANTS = ("floor", "doubling", "chunked", "streamed")
MAX_APPEND_TARGET_MS = 1.0
#: memory per tick at most this many times the one-seat row times the seat count (issue 32)
MEMORY_PER_TICK_TARGET = 2.0
#: appends a second of a one-seat log; with ``--seats``, the same bytes a second
DEFAULT_RATE = 200_000.0
#: appends slower than this (ns) are attributed to a cause (``slow_appends`` of each variant)
SLOW_NS = 500_000
RSS_FLAT_TARGET = 0.10
#: `nonstop report`'s seat and team sections on an hour of a 20 Hz world's log, at most (issue 43: "in seconds")
REPORT_TARGET_S = 30.0
#: distinct rows the appends cycle through
VARIETY = 64

#: flat figures of the result (tests/test_bench_quick.py checks them)
RESULT_KEYS = (
    "rows",
    "streamed_p99_us",
    "streamed_max_ms",
    "streamed_seal_max_ms",
    "chunked_max_ms",
    "doubling_max_ms",
    "doubling_seal_max_ms",
    "floor_max_ms",
    "streamed_rss_growth",
    "streamed_writer_backlog",
    "meets_target",
    "seats",
    "bytes_per_tick",
    "memory_per_tick_vs_one_seat",
    "meets_memory_target",
    "report_s",
    "meets_report_target",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rows",
        type=int,
        default=None,
        help=size_help("rows appended per variant", "rows", QUICK, FULL) + "; with --seats: 50000, quick 20000",
    )
    p.add_argument(
        "--rss-at",
        type=int,
        default=None,
        help=size_help("rows at the first memory reading", "rss_at", QUICK, FULL) + "; with --seats: 10000, quick 5000",
    )
    p.add_argument(
        "--variants",
        default=None,
        help=f"comma-separated, of {', '.join(VARIANTS)} (default all; with --seats, all but doubling)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="appends per second, paced per millisecond (default 200000, or the same bytes a second with --seats; 0: unpaced)",
    )
    p.add_argument("--seats", type=int, default=1, help="seats of the logged world (default 1; MAgent2's battle: 162)")
    p.add_argument(
        "--sched",
        choices=("auto", "fifo", "nice", "normal"),
        default="auto",
        help="scheduling of the measuring process, as the host's (default auto)",
    )


_SHARED = struct.Struct("=9d")  # a row's shared columns, as `TickLog.append_tick` packs them


class _DoublingLog:
    """The pre-issue-14 tick log's append: one block that doubles when full (the baseline), with
    today's row (`RowLayout`) and call shape."""

    def __init__(self, width: int) -> None:
        self.rows = np.zeros((4096, width), np.float64)
        self._buffer = self.rows.data  # what append_tick packs into, as the tick log's own append does
        self._row_bytes = width * 8
        self.n = 0

    def grows_at(self, rows: int) -> np.ndarray:
        """1-based indices of the appends that double the block."""
        return 4096 * 2 ** np.arange(max(1, int(np.ceil(np.log2(max(rows, 1) / 4096))) + 1)) + 1

    def append_tick(
        self,
        tick: int,
        deadline: float,
        time_: float,
        *,
        episode: int,
        terminated: bool,
        truncated: bool,
        step_s: float,
        seats: np.ndarray,
    ) -> None:
        n = self.n
        if n == len(self.rows):
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
            self._buffer = self.rows.data
        _SHARED.pack_into(
            self._buffer,
            n * self._row_bytes,
            tick,
            deadline,
            time_,
            time_ - deadline,
            episode,
            terminated,
            truncated,
            step_s,
            0.0,
        )
        self.rows[n, 9:] = seats
        self.n = n + 1


class _Floor:
    """The same call shape, writing into one fixed row: the machine's own noise."""

    def __init__(self, width: int) -> None:
        self.row = np.zeros((1, width), np.float64)
        self.buf = self.row.data

    def append_tick(
        self,
        tick: int,
        deadline: float,
        time_: float,
        *,
        episode: int,
        terminated: bool,
        truncated: bool,
        step_s: float,
        seats: np.ndarray,
    ) -> None:
        _SHARED.pack_into(
            self.buf, 0, tick, deadline, time_, time_ - deadline, episode, terminated, truncated, step_s, 0.0
        )
        self.row[0, 9:] = seats

    def grows_at(self, rows: int) -> np.ndarray:
        return np.zeros(0, np.int64)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _seat_values(seats: int) -> np.ndarray:
    """`VARIETY` ticks' per-seat values as the host hands them over, each (quantities × seats) flattened:
    most seats act, some idle, a few are gone (absent); delays of one to three ticks, varied rewards."""
    from nonstop.realtime.ticklog import SEAT_COLUMNS

    rng = np.random.default_rng(0)
    values = np.zeros((VARIETY, len(SEAT_COLUMNS), seats))
    draw = rng.random((VARIETY, seats))
    source = np.where(draw < 0.95, 1, np.where(draw < 0.99, 0, -1))
    at = SEAT_COLUMNS.index
    values[:, at("source")] = source
    values[:, at("worker")] = np.where(source == 1, 0, -1)
    values[:, at("delay")] = np.where(source == 1, rng.integers(1, 4, (VARIETY, seats)), -1)
    values[:, at("obs_tick")] = 7
    values[:, at("action")] = rng.integers(0, 21, (VARIETY, seats))
    values[:, at("tau_theta")] = np.where(source == 1, 0.01, np.nan)
    values[:, at("reward")] = np.round(rng.normal(0, 0.1, (VARIETY, seats)), 3)
    return values.reshape(VARIETY, -1)


def _seat_names(seats: int) -> list[str]:
    """Battle's seat names: the first half red, the rest blue."""
    half = (seats + 1) // 2
    return [f"red_{i}" for i in range(half)] + [f"blue_{i}" for i in range(seats - half)]


def _report_seconds(directory: str) -> float:
    """What `nonstop report` spends on a log's seat and team sections: reopen it, summarize every seat and team."""
    from nonstop.envs.seats import teams_of
    from nonstop.realtime.ticklog import TickLog

    t0 = time.perf_counter()
    log = TickLog.open(directory)
    log.summary(teams=teams_of(log.seat_names) if log.seats > 1 else None)
    return time.perf_counter() - t0


def _measure(
    variant: str, rows: int, rss_at: int, rate: float, sched: str, seats: int, directory: str | None, conn: Any
) -> None:
    """Child process: append ``rows`` rows to one log, timing each; send the figures back."""
    from nonstop.realtime.host import raise_priority

    costs = np.full(rows, -1, np.int64)  # touched now, so it does not grow the memory readings
    log, grows = _new_log(variant, rows, seats, directory)
    values = _seat_values(seats)
    policy = raise_priority(sched) if sched != "normal" else "normal"  # after the writer thread started
    append, clock, sleep = log.append_tick, time.perf_counter_ns, time.sleep
    slow: list[tuple[int, int, int]] = []  # (row, start ns, cost ns) of appends over SLOW_NS
    gcs: list[tuple[int, int]] = []  # (start, end ns) of garbage collections during the loop
    gc_began = [0]

    def on_gc(phase: str, _: dict) -> None:
        if phase == "start":
            gc_began[0] = clock()
        else:
            gcs.append((gc_began[0], clock()))

    gc.callbacks.append(on_gc)
    tau = 1 / 60
    rss_first = 0
    burst = max(1, round(rate / 1000)) if rate > 0 else rows + 1
    period = burst / rate if rate > 0 else 0.0  # a burst a millisecond, or one append a 1/rate below 1,000 a second
    t_start = time.perf_counter()
    next_burst = t_start
    for t in range(1, rows + 1):
        deadline = t * tau
        t0 = clock()
        append(
            t,
            deadline,
            deadline + 1e-5,
            episode=t >> 12,
            terminated=False,
            truncated=False,
            step_s=1e-5,
            seats=values[t % VARIETY],
        )
        cost = costs[t - 1] = clock() - t0
        if cost > SLOW_NS:
            slow.append((t, t0, cost))
        if t == rss_at:
            rss_first = _rss_bytes()
        if t % burst == 0:  # the next burst is due a period after this one began
            next_burst += period
            pause = next_burst - time.perf_counter()
            if pause > 0:
                sleep(pause)
    wall = time.perf_counter() - t_start
    gc.callbacks.remove(on_gc)
    rss_end = _rss_bytes()
    backlog, fresh, busy, report_s = _close_streamed(log, variant, directory)
    grows = grows[grows <= rows]
    conn.send(
        {
            "sched": policy,
            **_append_figures(costs, grows),
            "rss_mb_at_first": rss_first / 2**20,
            "rss_mb_at_end": rss_end / 2**20,
            "rss_growth": (rss_end - rss_first) / rss_first if rss_first else None,
            "appends_per_s": rows / wall,
            "wall_s": wall,
            "writer_backlog": backlog,
            "fresh_blocks": fresh,
            "chunk_rows": int(getattr(log, "chunk_rows", 0)),
            "slow_appends": _attribute(slow, grows, busy, gcs),
            "report_s": report_s,
        }
    )
    conn.close()


def _new_log(variant: str, rows: int, seats: int, directory: str | None) -> tuple[Any, np.ndarray]:
    """The log ``variant`` names (``doubling``, ``floor``, or a `TickLog`, ``streamed`` to ``directory``),
    and the appends of ``rows`` that grow or seal it."""
    from nonstop.realtime.ticklog import RowLayout, TickLog

    width = RowLayout(seats).width
    if variant == "doubling":
        log: Any = _DoublingLog(width)
        return log, log.grows_at(rows)
    if variant == "floor":
        log = _Floor(width)
        return log, log.grows_at(rows)
    meta = {"seats": _seat_names(seats)} if seats > 1 else {}
    log = TickLog(1 / 60, directory=directory if variant == "streamed" else None, seats=seats, meta=meta)
    return log, np.arange(log.chunk_rows + 1, rows + 1, log.chunk_rows)  # the appends that seal a chunk


def _close_streamed(log: Any, variant: str, directory: str | None) -> tuple[int, int, list[Any], float | None]:
    """A streamed log's writer backlog, fresh blocks and busy spells (read before close() drops the
    writer), then the seconds ``nonstop report`` takes on it; zeros and None for the others."""
    if variant != "streamed":
        return 0, 0, [], None
    backlog, fresh, busy = log.writer_backlog, log._writer.fresh_blocks, list(log._writer.busy)
    log.close()
    assert directory is not None
    return backlog, fresh, busy, _report_seconds(directory)


def _append_figures(costs: np.ndarray, grows: np.ndarray) -> dict[str, Any]:
    """The appends' costs (ns): percentiles in µs, the worst, and the worst of those that sealed a chunk."""
    worst = np.argsort(costs)[-5:][::-1]
    stats = percentiles(costs, 1e-3)  # ns -> µs
    return {
        "append_us": stats,
        "max_ms": stats["max"] / 1e3,
        "seal_max_ms": float(costs[grows - 1].max()) / 1e6 if grows.size else 0.0,
        "seals": int(grows.size),
        "over_1ms": int((costs > 1_000_000).sum()),
        "worst": [{"row": int(i) + 1, "ms": float(costs[i]) / 1e6} for i in worst],
    }


def _attribute(
    slow: list[tuple[int, int, int]], grows: np.ndarray, busy: list[tuple[int, int]], gcs: list[tuple[int, int]]
) -> dict[str, Any]:
    """Where the appends over `SLOW_NS` happened: sealing a chunk, while the writer thread was
    writing one (it shares the GIL), during a garbage collection, or none of these (the machine:
    another process or the hypervisor held the core). Counts, and the worst few with their cause."""
    seals = set(int(g) for g in grows)

    def cause(row: int, start: int, cost: int) -> str:
        end = start + cost
        if row in seals:
            return "seal"
        if any(s < end and start < e for s, e in gcs):
            return "gc"
        if any(s < end and start < e for s, e in busy):
            return "writer busy"
        return "machine"

    tagged = [(row, cost, cause(row, start, cost)) for row, start, cost in slow]
    counts: dict[str, int] = {}
    for _, _, why in tagged:
        counts[why] = counts.get(why, 0) + 1
    worst = sorted(tagged, key=lambda x: -x[1])[:5]
    return {
        "over_ms": SLOW_NS / 1e6,
        "counts": counts,
        "worst": [{"row": row, "ms": cost / 1e6, "cause": why} for row, cost, why in worst],
    }


def _run_variant(variant: str, rows: int, rss_at: int, rate: float, sched: str, seats: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    tmp = tempfile.mkdtemp(prefix="nonstop-bench-ticklog-") if variant == "streamed" else None
    process = ctx.Process(
        target=_measure,
        args=(variant, rows, rss_at, rate, sched, seats, tmp and str(Path(tmp) / "log"), child),
        name=f"nonstop-bench-ticklog-{variant}",
    )
    process.start()
    child.close()
    try:
        result = parent.recv()
        if tmp is not None:
            result["chunk_files"] = len(list((Path(tmp) / "log").glob("chunk-*.npz")))
            result["disk_mb"] = sum(p.stat().st_size for p in (Path(tmp) / "log").iterdir()) / 2**20
        return result
    except EOFError:
        raise RuntimeError(f"the {variant} measurement process died (exit code {process.exitcode})") from None
    finally:
        parent.close()
        reap(process)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _sizes(args: Any, seats: int) -> dict[str, Any]:
    """Rows and the first memory reading: the options', else the defaults for one seat or for several
    (past 162 seats, the rows of 162 seats' bytes: a thousand seats' row is 72 KB)."""
    if seats == 1:
        return run_sizes(args, QUICK, FULL)
    scale = min(1.0, SEATS_AT_FULL_ROWS / seats)
    return run_sizes(
        args,
        {k: max(1, round(v * scale)) for k, v in QUICK_SEATS.items()},
        {k: max(1, round(v * scale)) for k, v in FULL_SEATS.items()},
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.realtime.ticklog import RowLayout

    seats = getattr(args, "seats", 1)
    if not isinstance(seats, int) or seats < 1:
        raise ValueError(f"--seats must be a positive integer, got {seats!r}")
    sizes = _sizes(args, seats)
    rows, rss_at = int(sizes["rows"]), int(sizes["rss_at"])
    if rss_at >= rows:
        raise ValueError(f"--rss-at ({rss_at:,}) must be below --rows ({rows:,})")
    named = getattr(args, "variants", None)
    if named is None:
        named = ",".join(v for v in VARIANTS if seats == 1 or v != "doubling")
    variants = [v.strip() for v in named.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or "streamed" not in variants:
        raise ValueError(f"--variants must name some of {', '.join(VARIANTS)}, streamed included; got {named!r}")
    one_row, row = RowLayout(1).width * 8, RowLayout(seats).width * 8
    rate = getattr(args, "rate", None)
    rate = DEFAULT_RATE * one_row / row if rate is None else rate
    if not rate >= 0:
        raise ValueError(f"--rate must be a non-negative number of appends per second, got {rate}")
    per = {v: _run_variant(v, rows, rss_at, rate, args.sched, seats) for v in variants}
    s = per["streamed"]
    chunked = per.get("chunked")
    # resident bytes a tick adds, in memory (the chunked log keeps every row): between the two readings
    bytes_per_tick = (
        (chunked["rss_mb_at_end"] - chunked["rss_mb_at_first"]) * 2**20 / (rows - rss_at) if chunked else float(row)
    )
    out: dict[str, Any] = {
        "bench": "ticklog",
        "machine": machine_info(),
        "rows": rows,
        "rss_at_rows": rss_at,
        "rate_per_s": rate,
        "seats": seats,
        "chunk_rows": s["chunk_rows"],
        "row_bytes": row,
        "one_seat_row_bytes": one_row,
        "bytes_per_tick": bytes_per_tick,
        "memory_per_tick_vs_one_seat": bytes_per_tick / (one_row * seats),
        "meets_memory_target": bool(bytes_per_tick <= MEMORY_PER_TICK_TARGET * one_row * seats),
        "streamed_p99_us": s["append_us"]["p99"],
        "streamed_max_ms": s["max_ms"],
        "streamed_seal_max_ms": s["seal_max_ms"],
        "chunked_max_ms": per["chunked"]["max_ms"] if "chunked" in per else -1.0,
        "doubling_max_ms": per["doubling"]["max_ms"] if "doubling" in per else -1.0,
        "doubling_seal_max_ms": per["doubling"]["seal_max_ms"] if "doubling" in per else -1.0,
        "floor_max_ms": per["floor"]["max_ms"] if "floor" in per else -1.0,
        "sched": s["sched"],
        "streamed_rss_growth": s["rss_growth"],
        "streamed_writer_backlog": s["writer_backlog"],
        "streamed_fresh_blocks": s["fresh_blocks"],
        "streamed_slow_appends": s["slow_appends"],
        "report_s": s["report_s"],
        "report_ticks_per_s": rows / s["report_s"] if s["report_s"] else None,
        "report_s_per_hour_at_20hz": s["report_s"] * 72_000 / rows if s["report_s"] else None,
        "meets_report_target": bool(s["report_s"] is not None and s["report_s"] * 72_000 / rows <= REPORT_TARGET_S),
        "floor_slow_appends": per["floor"]["slow_appends"] if "floor" in per else None,
        "targets": {
            "max_append_ms": MAX_APPEND_TARGET_MS,
            "rss_growth": RSS_FLAT_TARGET,
            "memory_per_tick_vs_one_seat": MEMORY_PER_TICK_TARGET,
            "report_s_per_hour_at_20hz": REPORT_TARGET_S,
        },
        "meets_strict_max": bool(s["max_ms"] <= MAX_APPEND_TARGET_MS),
        "meets_target": bool(
            s["seal_max_ms"] <= MAX_APPEND_TARGET_MS
            and abs(s["rss_growth"]) <= RSS_FLAT_TARGET
            and (s["max_ms"] <= MAX_APPEND_TARGET_MS or ("floor" in per and s["max_ms"] <= per["floor"]["max_ms"]))
            and bytes_per_tick <= MEMORY_PER_TICK_TARGET * one_row * seats
        ),
        "variants": per,
    }
    return out


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    seats = f", {result['seats']} seats" if result.get("seats", 1) > 1 else ""
    table = Table(title=f"nonstop bench ticklog: {result['rows']:,} appends per variant{seats}")
    for col in (
        "variant",
        "p50 µs",
        "p99 µs",
        "max ms",
        "growth appends max ms",
        "appends > 1 ms",
        f"RSS MB at {result['rss_at_rows']:,}",
        "RSS MB at end",
        "growth",
        "writer backlog",
    ):
        table.add_column(col, justify="right")
    for name, v in result["variants"].items():
        table.add_row(
            name,
            f"{v['append_us']['p50']:.2f}",
            f"{v['append_us']['p99']:.2f}",
            f"{v['max_ms']:.3f}",
            f"{v['seal_max_ms']:.3f}",
            f"{v['over_1ms']:,}",
            f"{v['rss_mb_at_first']:.0f}",
            f"{v['rss_mb_at_end']:.0f}",
            f"{v['rss_growth']:+.1%}",
            str(v["writer_backlog"]),
        )
    Console().print(table)
    for name, v in result["variants"].items():
        slow = v.get("slow_appends") or {}
        if slow.get("counts"):
            print(
                f"{name}: appends over {slow['over_ms']} ms by cause: "
                + ", ".join(f"{k} {n}" for k, n in slow["counts"].items())
            )
    print(
        f"memory per tick: {result['bytes_per_tick']:,.0f} B (row {result['row_bytes']:,} B), "
        f"{result['memory_per_tick_vs_one_seat']:.2f}x the one-seat row times {result['seats']} seat(s) "
        f"(target ≤ {MEMORY_PER_TICK_TARGET:g}x)"
    )
    if result.get("report_s") is not None:
        print(
            f"report's seat and team sections: {result['report_s']:.2f} s for {result['rows']:,} ticks "
            f"({result['report_ticks_per_s']:,.0f} ticks/s; an hour at 20 Hz: {result['report_s_per_hour_at_20hz']:.1f} s, "
            f"target ≤ {REPORT_TARGET_S:g} s)"
        )
    verdict = "meets" if result["meets_target"] else "misses"
    print(
        f"streamed {verdict} the targets (max append ≤ {MAX_APPEND_TARGET_MS} ms, memory flat within "
        f"{RSS_FLAT_TARGET:.0%}); worst doubling appends: "
        + ", ".join(
            f"row {w['row']:,}: {w['ms']:.0f} ms" for w in result["variants"].get("doubling", {}).get("worst", [])[:3]
        )
    )
