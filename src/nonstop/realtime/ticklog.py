"""The tick log: one row per tick, the single source of truth (docs/design.md §1.8), kept in bounded chunks
that can stream to disk as the world runs (docs/design.md §4c).

Every metric nonstop reports (τ_I, inaction, delay, lateness, regret) is computed from these
columns, so any figure can be traced back to ticks.

**In memory.** Rows are packed into a preallocated float64 block of `CHUNK_ROWS` rows (one
`struct` pack per tick, no allocation on the per-tick path). A row holds the columns every seat
shares, then each per-seat quantity (source, delay, reward, ...) as one block of seats
(`RowLayout`): over a chunk, a quantity is a (ticks × seats) slice, whatever the seat count, and a
tick of a several-seat world is one copy of the host's (quantities × seats) array (`append_tick`).
A several-seat log's chunks hold as many bytes as a one-seat log's, in fewer rows (`chunk_rows_for`). A full block is *sealed*: it joins
the list of completed chunks and a fresh block is allocated (``np.zeros``, which maps zeroed pages
lazily: O(1), not a copy). Nothing is ever doubled and copied, so no append stalls the world.
A streaming log's blocks are paged in off the tick path (the first at construction, the next by
the writer thread): a first write to a lazily mapped huge page costs milliseconds.

**On disk** (``TickLog(..., directory=D)``, written by the process that appends, i.e. the host)::

    D/meta.json             {"format": "nonstop.ticklog.dir/1", "tau_m", "meta", "chunk_rows", "complete", ...}
    D/chunk-000000.npz      the first CHUNK_ROWS rows, one compressed column per name of `COLUMNS`
    D/chunk-000001.npz      ...

A several-seat world's chunk keeps each per-seat quantity as one (rows × seats) array under its
plain name (``delay``), not a named column per seat: 162 seats make 18 arrays, not 1,458 columns.
Logs written before that (``seat{i}_delay``, …) read as they always did: ``log["seat1_delay"]``,
`seat`, `summary` and every reader work on both.

A sealed chunk is handed (a queue put, never a wait) to a background writer thread of the same
process, which writes it to a temporary file (zlib level 1: ~0.1 s of CPU and ~1 MB for 64k rows),
fsyncs it and renames it into place. A chunk file is therefore either absent or whole, whatever
ends the process (SIGKILL and OOM kills included): every chunk completed before the end survives.
Once written, a chunk leaves memory (read back from its file when asked) and its block is reused
for the rows to come, so memory holds the open block, two paged-in spares (`SPARE_BLOCKS`) and the
few chunks not yet written: about ``max_pending`` + 3 blocks while the writer keeps up (a 60 Hz
world fills a chunk in 18 minutes).
A writer that falls further behind is warned about once and its backlog waits in memory: the world
never waits for the disk. The writer spends its time in compression and I/O, which release the
GIL; under a SCHED_FIFO host it takes the lowest realtime priority, so no ordinary process can
preempt it while it holds the GIL the tick loop needs (``nonstop bench ticklog`` measures the
appends). `close` seals the last partial chunk and rewrites ``meta.json`` with ``complete: true``
and the final run-level meta. A writer that cannot write (a full disk) warns once and keeps the
chunk in memory: nothing is lost while the process lives. Reading a live log from another thread
than the appender's is not supported (a reused block may be refilled under the reader).

**Reading back.** `TickLog.open` (or `TickLog.load` on a directory) lists the chunk files in
order, each checked by its zip header; the last one is read through (zip CRC-32 of every column),
since only it can have been cut short by a crash outside nonstop's control (a power cut, a copy).
A torn or unreadable chunk is skipped with a `RuntimeWarning` naming it. An opened log is
read-only and loads nothing up front: ``log["delay"]`` reads that column chunk by chunk, and
`iter_chunks` gives summaries a chunk at a time (`nonstop.realtime.ticksummary.summarize` folds
every figure chunk by chunk). `TickLog.stitch` joins logs (resume segments) into one timeline without
loading them. Old single-file logs (``ticklog.npz``, `save`) load as before. `iter_blocks` and
`block` read per-seat quantities as (ticks × seats) arrays, and `summary` folds every seat's figures
(and, given a team map, every team's) in one pass over the chunks.

`TickLog` lives here, `SeatLog` (one seat's view) in `nonstop.realtime.tickseat`; the chunks and their writer thread in
`nonstop.realtime.tickchunks`, the file formats and atomic writes in `nonstop.realtime.tickfiles`.

>>> log = TickLog(tau_m=1 / 60)
>>> log.append(tick=1, deadline=1 / 60, time=1 / 60, source=SOURCE_AGENT, worker=0, delay=2,
...            obs_tick=-1, action=3, reward=1.0, episode=0)
>>> log.append(tick=2, deadline=2 / 60, time=2 / 60, source=SOURCE_DEFAULT, action=0, episode=0)
>>> (len(log), log["source"].tolist(), log["delay"].tolist())
(2, [1, 0], [2, -1])

Streaming to a directory, then reading it back:

>>> import tempfile
>>> d = Path(tempfile.mkdtemp()) / "ticklog"
>>> log = TickLog(0.5, directory=d, chunk_rows=4)
>>> for t in range(1, 11):
...     log.append(tick=t, deadline=t / 2, time=t / 2, source=SOURCE_DEFAULT, episode=0)
>>> log.close()
>>> sorted(p.name for p in d.iterdir())
['chunk-000000.npz', 'chunk-000001.npz', 'chunk-000002.npz', 'meta.json']
>>> back = TickLog.open(d)
>>> (len(back), back["tick"].tolist()[-3:], back.complete)
(10, [8, 9, 10], True)
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.realtime.tickcolumns import (
    COLUMNS,
    SEAT_COLUMNS,
    SHARED_COLUMNS,
    SOURCE_AGENT,
    SOURCE_DEFAULT,
    RowLayout,
    TickColumns,
    column_dtype,
    column_names,
    seat_column,
)
from nonstop.realtime.tickchunks import (
    CHUNK_ROWS,
    MAX_PENDING,
    Chunk,
    ChunkWriter,
    chunk_arrays,
    chunk_rows_for,
    lazy_block,
    paged_in_block,
)
from nonstop.realtime.tickfiles import (
    BLOCK_LOG_FORMAT,
    CHUNK_FILE_RE,
    DIR_FORMAT,
    LOG_FORMAT,
    META_FILE,
    check_chunk,
    is_ticklog_dir,
    load_npz,
    save_npz_atomic,
    write_json_atomic,
)
from nonstop.realtime.tickseat import SeatLog
from nonstop.realtime.ticksummary import summarize, summarize_seats, summarize_teams

__all__ = [
    "TickLog",
    "COLUMNS",
    "CHUNK_ROWS",
    "SOURCE_AGENT",
    "SOURCE_DEFAULT",
    "SEAT_COLUMNS",
    "SHARED_COLUMNS",
    "RowLayout",
    "SeatLog",
    "TickColumns",
    "column_names",
    "save_npz_atomic",
    "load_npz",
    "is_ticklog_dir",
]

_ROW: Final = struct.Struct(f"={len(COLUMNS)}d")  # one row of a one-seat log's float64 block, native byte order
_SHARED_ROW: Final = struct.Struct(f"={len(SHARED_COLUMNS)}d")  # the shared columns that begin every row


# ----------------------------------------------------------------------------- the log


class TickLog:
    """Columnar tick log in bounded chunks (see the module docstring). ``meta`` holds run-level
    facts (env, τ_M, clock, queue counters) that travel with the columns.

    ``directory``: stream completed chunks there as they fill (refused if it already holds a
    tick log). ``chunk_rows``: rows per chunk (for several seats, at most what fits a one-seat
    chunk's bytes: `chunk_rows_for`). ``max_pending``: unwritten chunks beyond which the
    writer is warned about (the appender never waits for it). ``capacity`` is accepted for compatibility and ignored.
    ``seats``: the world's seat count; each per-seat quantity then keeps a block of ``seats`` values a row.
    """

    def __init__(
        self,
        tau_m: float,
        *,
        capacity: int | None = None,
        meta: dict[str, Any] | None = None,
        directory: str | os.PathLike | None = None,
        chunk_rows: int = CHUNK_ROWS,
        max_pending: int = MAX_PENDING,
        seats: int = 1,
    ) -> None:
        if not tau_m > 0:
            raise ValueError(f"tau_m must be a positive number of seconds, got {tau_m!r}")
        if not isinstance(chunk_rows, (int, np.integer)) or isinstance(chunk_rows, bool) or chunk_rows < 1:
            raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be a positive integer, got {max_pending!r}")
        self.tau_m = float(tau_m)
        #: where each value sits in a row: the shared columns, then each `SEAT_COLUMNS` quantity's block of seats
        self.layout = RowLayout(seats)
        #: seats of the world (docs/design.md §4b)
        self.seats = self.layout.seats
        self._width = self.layout.width
        self._row_bytes = self._width * 8
        self._seat_start = len(SHARED_COLUMNS)  # where a row's per-seat blocks start, in `append_tick`
        self.meta: dict[str, Any] = dict(meta or {})
        self.chunk_rows = chunk_rows_for(int(chunk_rows), self.layout)
        self._chunk_rows = self.chunk_rows  # the open block's size: 0 once read-only, so an append is refused
        self._chunks: list[Chunk] = []
        # a streaming log (the realtime path) pages its block in now, not on the tick path (see
        # `paged_in_block`); an in-memory one maps it lazily, in small pages, costing nothing until it fills
        shape = (self._chunk_rows, self._width)
        self._block = paged_in_block(shape) if directory is not None else lazy_block(shape)
        self._block_buffer = self._block.data  # what `append_row` packs into (a buffer, as struct asks)
        # the block's values in one flat view: `append_tick` copies a row's seat values into a slice of it
        # (a memoryview slice takes an array at a third of numpy's cost for a few values)
        self._block_values: Any = self._block.reshape(-1).data  # Any: its stub's slice takes no ndarray
        self._n_block = 0  # rows in the open block
        self._n_done = 0  # rows in completed chunks
        self._n_released = self._released_chunks = 0  # completed chunks dropped by `release` (rows, chunks)
        self._readonly = False
        self.directory: Path | None = None
        #: whether the log was closed normally (False for a log read back from a run that was killed)
        self.complete = True
        self._writer: ChunkWriter | None = None
        if directory is not None:
            self.directory = Path(directory)
            if self.directory.exists() and (
                any(self.directory.glob("chunk-*.npz")) or (self.directory / META_FILE).exists()
            ):
                raise FileExistsError(
                    f"{self.directory} already holds a tick log: move it away or choose another directory"
                )
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write_meta(complete=False)
            # the writer also keeps paged-in spare blocks ready, so no seal hands the appender fresh pages
            self._writer = ChunkWriter(self.directory, max_pending, self.layout, self._chunk_rows)

    def __len__(self) -> int:
        return self._n_done + self._n_block

    def __repr__(self) -> str:
        where = f", directory={str(self.directory)!r}" if self.directory is not None else ""
        return (
            f"TickLog({len(self)} rows in {len(self._chunks) + bool(self._n_block)} chunks, tau_m={self.tau_m}{where})"
        )

    # ---- writing
    def append(
        self,
        *,
        tick: int,
        deadline: float,
        time: float,
        source: int,
        worker: int = -1,
        delay: int = -1,
        obs_tick: int = -1,
        action: float = float("nan"),
        tau_theta: float = float("nan"),
        reward: float = 0.0,
        episode: int = 0,
        terminated: bool = False,
        truncated: bool = False,
        superseded: int = 0,
        stale: int = 0,
        step_s: float = 0.0,
        reset_s: float = 0.0,
    ) -> None:
        """Add one tick by column name (see `COLUMNS`); ``lateness`` is computed."""
        self.append_row(
            tick,
            deadline,
            time,
            source,
            worker,
            delay,
            obs_tick,
            action,
            tau_theta,
            reward,
            episode,
            terminated,
            truncated,
            superseded,
            stale,
            step_s,
            reset_s,
        )

    def append_row(
        self,
        tick: int,
        deadline: float,
        time: float,
        source: int,
        worker: int,
        delay: int,
        obs_tick: int,
        action: float,
        tau_theta: float,
        reward: float,
        episode: int,
        terminated: bool,
        truncated: bool,
        superseded: int,
        stale: int,
        step_s: float,
        reset_s: float = 0.0,
    ) -> None:
        """`append` with positional arguments in `COLUMNS` order (less ``lateness``), for a one-seat
        log: one `struct` pack straight into the open block (~0.3 µs); a full block is sealed first
        (a list append and a lazily zeroed allocation, no copy). A log of several seats takes
        `append_tick`."""
        if self.seats != 1:
            raise TypeError(f"append_row writes one seat's values; this log has {self.seats} seats: use append_tick")
        n = self._n_block
        if n == self._chunk_rows:
            self._seal()
            n = 0
        _ROW.pack_into(
            self._block_buffer,
            n * self._row_bytes,
            tick,
            deadline,
            time,
            time - deadline,
            episode,
            terminated,
            truncated,
            step_s,
            reset_s,
            source,
            worker,
            delay,
            obs_tick,
            action,
            tau_theta,
            reward,
            superseded,
            stale,
        )
        self._n_block = n + 1

    def append_tick(
        self,
        tick: int,
        deadline: float,
        time: float,
        *,
        episode: int,
        terminated: bool,
        truncated: bool,
        step_s: float,
        seats: np.ndarray | memoryview,
    ) -> None:
        """One tick of a world of any seat count: the shared columns, and ``seats``, every seat's
        values of this tick as one float64 array of ``len(SEAT_COLUMNS) × seats`` values, quantity by
        quantity (`RowLayout`; the host's `SeatArrays.values`, flattened, passed as its memoryview
        ``flat_view``, which copies faster than the array). One `struct` pack and one copy into the open
        block, whatever the seat count (~1 µs at one seat and at 162).

        >>> log = TickLog(1 / 60, seats=2)
        >>> values = np.zeros((len(SEAT_COLUMNS), 2))
        >>> values[SEAT_COLUMNS.index("delay")] = (-1, 3)
        >>> log.append_tick(1, 1 / 60, 1 / 60, episode=0, terminated=False, truncated=False, step_s=0.0,
        ...                 seats=values.reshape(-1))
        >>> log.block("delay").tolist(), log["seat1_delay"].tolist()
        ([[-1, 3]], [3])
        """
        n = self._n_block
        if n == self._chunk_rows:
            self._seal()
            n = 0
        _SHARED_ROW.pack_into(
            self._block_buffer,
            n * self._row_bytes,
            tick,
            deadline,
            time,
            time - deadline,
            episode,
            terminated,
            truncated,
            step_s,
            0.0,
        )
        start = n * self._width + self._seat_start  # this row's per-seat blocks
        self._block_values[start : start + self._width - self._seat_start] = seats
        self._n_block = n + 1

    def append_rows(self, rows: np.ndarray) -> None:
        """Append a block of rows in row order (`RowLayout`, what `rows` gives): how a process that
        receives another's log as it goes keeps it in bounded chunks (streamed to its directory, if any)."""
        rows = np.asarray(rows, np.float64)
        if rows.ndim != 2 or rows.shape[1] != self._width:
            raise ValueError(f"rows must have shape (n, {self._width}), got {rows.shape}")
        i = 0
        while i < len(rows):
            if self._n_block == self._chunk_rows:
                self._seal()
            take = min(self._chunk_rows - self._n_block, len(rows) - i)
            self._block[self._n_block : self._n_block + take] = rows[i : i + take]
            self._n_block += take
            i += take

    def release(self, upto: int) -> None:
        """Forget the completed in-memory chunks that lie wholly before row ``upto`` (rows another
        process already has): memory then holds the open chunk and at most one completed one.
        ``len`` still counts them; reading (`rows`, columns) starts after them."""
        while self._chunks and self._chunks[0].rows is not None and self._n_released + self._chunks[0].n <= upto:
            self._n_released += self._chunks.pop(0).n
            self._released_chunks += 1

    @property
    def held_rows(self) -> int:
        """Rows this log holds in memory or on disk (all of them, less what `release` dropped)."""
        return len(self) - self._n_released

    def set_last(self, column: str, value: float) -> None:
        """Amend the newest row (the host adds the reset time after the step)."""
        if not self._n_block:
            raise IndexError("set_last: the log has no open row to amend")
        self._block[self._n_block - 1, self.layout[column]] = value

    def _seal(self) -> None:
        """The open block becomes a completed chunk (to the writer, if streaming); a fresh one opens."""
        if self._readonly:
            raise RuntimeError("this tick log was read back from disk (or stitched): it is read-only")
        n = self._n_block
        chunk = Chunk(self._block, None, n, len(self._chunks) + self._released_chunks, self.layout)
        self._chunks.append(chunk)
        self._n_done += n
        writer = self._writer
        if writer is not None and writer.free:
            self._block = writer.free.pop()  # rows past the open count are never read: no need to clear
        else:
            if writer is not None:
                writer.fresh_blocks += 1
            self._block = lazy_block((self._chunk_rows, self._width))
        self._block_buffer = self._block.data
        self._block_values = self._block.reshape(-1).data
        self._n_block = 0
        if writer is not None:
            writer.submit(chunk)

    def write_meta(self) -> None:
        """Rewrite the directory's ``meta.json`` with the current ``meta`` (e.g. facts noted after
        the host closed the log); the chunks are untouched."""
        if self.directory is None:
            raise ValueError("this tick log has no directory")
        self._write_meta(complete=self.complete and self._writer is None)

    def _write_meta(self, *, complete: bool) -> None:
        assert self.directory is not None
        record = {
            "format": DIR_FORMAT,
            "tau_m": self.tau_m,
            "chunk_rows": self.chunk_rows,
            "complete": complete,
            "meta": self.meta,
        }
        if self.seats > 1:  # one-seat directories stay exactly as before
            record["seats"] = self.seats
        if complete:
            record["rows"] = len(self)
            unwritten = [c.index for c in self._chunks if c.path is None]
            if unwritten:
                record["unwritten_chunks"] = unwritten
        write_json_atomic(self.directory / META_FILE, record)

    def close(self) -> None:
        """Streaming logs: write the last partial chunk, wait for the writer, and mark the
        directory complete (with the final meta). In-memory logs: nothing to do. Idempotent;
        the log stays readable afterwards, and read-only."""
        if self._writer is None:
            return
        if self._n_block:
            self._seal()
        writer, self._writer = self._writer, None
        writer.close()
        self._freeze()
        self.meta["ticklog_writer_max_backlog"] = writer.max_backlog
        self._write_meta(complete=True)

    @property
    def writer_backlog(self) -> int:
        """The most chunks that waited for the writer at once (a few while it keeps up)."""
        return (
            self._writer.max_backlog
            if self._writer is not None
            else int(self.meta.get("ticklog_writer_max_backlog", 0))
        )

    # ---- reading
    def _all_chunks(self) -> list[Chunk]:
        chunks = list(self._chunks)
        if self._n_block:
            chunks.append(Chunk(self._block, None, self._n_block, len(chunks), self.layout))
        return chunks

    def _check(self, names: Iterable[str]) -> list[str]:
        names = list(names)
        for name in names:
            if name not in self.layout:
                raise KeyError(self.layout.unknown(name))
        return names

    def iter_chunks(self, columns: Iterable[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """The log a chunk at a time: ``{column: array}`` per chunk, in tick order (each chunk
        read from its file when it is on disk, so memory holds one chunk at a time). A column is
        named as in `COLUMNS` (a per-seat one: the first seat's) or ``seat{i}_<quantity>``."""
        names = self._check(column_names(self.seats) if columns is None else columns)
        for chunk in self._all_chunks():
            if chunk.n:
                yield chunk.columns(names)

    def iter_blocks(self, columns: Iterable[str] = SHARED_COLUMNS + SEAT_COLUMNS) -> Iterator[dict[str, np.ndarray]]:
        """The log a chunk at a time, each per-seat quantity (`SEAT_COLUMNS`) as one (ticks × seats)
        array and each shared column as one value a tick (the same for a log written with named
        seat columns: its columns are stacked)."""
        names = list(columns)
        for name in names:
            if name not in SEAT_COLUMNS and name not in SHARED_COLUMNS:
                raise KeyError(f"no column or per-seat quantity {name!r}; they are {', '.join(COLUMNS)}")
        for chunk in self._all_chunks():
            if chunk.n:
                yield chunk.blocks(names)

    def block(self, quantity: str) -> np.ndarray:
        """Per-seat ``quantity`` (one of `SEAT_COLUMNS`) over the whole log: a (ticks × seats) array."""
        if quantity not in SEAT_COLUMNS:
            raise KeyError(f"no per-seat quantity {quantity!r}; they are {', '.join(SEAT_COLUMNS)}")
        parts = [c[quantity] for c in self.iter_blocks([quantity])]
        if not parts:
            return np.zeros((0, self.seats), column_dtype(quantity))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __getitem__(self, column: str) -> np.ndarray:
        self._check([column])
        parts = [c[column] for c in self.iter_chunks([column])]
        if not parts:
            return np.zeros(0, column_dtype(column))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def tail(self, column: str, n: int) -> np.ndarray:
        """The last ``n`` values of ``column``, reading only the chunks they lie in."""
        self._check([column])
        parts, have = [], 0
        for chunk in reversed(self._all_chunks()):
            if have >= n:
                break
            if chunk.n:
                parts.append(chunk.columns([column])[column])
                have += chunk.n
        if not parts:
            return np.zeros(0, column_dtype(column))
        return np.concatenate(parts[::-1])[-n:] if n else np.zeros(0, column_dtype(column))

    def columns(self) -> dict[str, np.ndarray]:
        """Every column by name (`column_names`: a seat's own as ``seat{i}_…``), as logs always read."""
        return {name: self[name] for name in column_names(self.seats)}

    def blocks(self) -> dict[str, np.ndarray]:
        """Every column, each per-seat quantity as one (ticks × seats) array (`iter_blocks`, joined)."""
        parts = list(self.iter_blocks())
        names = SHARED_COLUMNS + SEAT_COLUMNS
        if not parts:
            return {
                name: np.zeros((0, self.seats) if name in SEAT_COLUMNS else 0, column_dtype(name)) for name in names
            }
        return {name: np.concatenate([p[name] for p in parts]) for name in names}

    # ---- moving between processes and disk
    def rows(self, start: int, stop: int | None = None) -> np.ndarray:
        """A copy of rows ``start:stop`` in row order (`RowLayout`): what a process that streams its
        log to another sends as it goes."""
        n = len(self)
        stop = n if stop is None else min(stop, n)
        if start < self._n_released:
            raise ValueError(f"rows before {self._n_released} were released from this tick log")
        parts, offset = [], self._n_released
        for block in self.row_blocks():  # skips whole chunks before ``start`` without copying them
            end = offset + len(block)
            if end > start and offset < stop:
                parts.append(block[max(start - offset, 0) : stop - offset])
            offset = end
            if offset >= stop:
                break
        if not parts:
            return np.zeros((0, self._width), np.float64)
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def to_arrays(self) -> tuple[np.ndarray, dict[str, Any], float]:
        """``(rows, meta, tau_m)``: every row as one float64 block (a copy), for a pipe."""
        blocks = list(self.row_blocks())
        rows = np.concatenate(blocks) if blocks else np.zeros((0, self._width), np.float64)
        return rows, dict(self.meta), self.tau_m

    def row_blocks(self) -> Iterator[np.ndarray]:
        """Each chunk as a float64 row block in `RowLayout` order (a view of the in-memory rows, or read from its file)."""
        for chunk in self._all_chunks():
            if chunk.n:
                yield chunk.row_block()

    @classmethod
    def from_row_blocks(
        cls, blocks: Iterable[np.ndarray], meta: dict[str, Any], tau_m: float, seats: int = 1
    ) -> "TickLog":
        """A log whose completed chunks are ``blocks`` (float64 rows in `RowLayout` order), not copied."""
        log = cls(tau_m, meta=meta, seats=seats)
        width = log._width
        for block in blocks:
            block = np.asarray(block, np.float64)
            if block.ndim != 2 or block.shape[1] != width:
                raise ValueError(f"row blocks must have shape (n, {width}), got {block.shape}")
            log._chunks.append(Chunk(block, None, len(block), len(log._chunks), log.layout))
            log._n_done += len(block)
        return log

    @classmethod
    def from_arrays(cls, rows: np.ndarray, meta: dict[str, Any], tau_m: float, seats: int = 1) -> "TickLog":
        """The inverse of `to_arrays`: ``rows`` become the log's completed chunks (views, no copy)."""
        rows = np.asarray(rows, np.float64)
        blocks = (rows[i : i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS))
        return cls.from_row_blocks(blocks, meta, tau_m, seats)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the whole log to one ``.npz`` file atomically: a crash never leaves half a log.
        (Loads every column: a streaming log is already on disk, see `directory`.)"""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(".npz")
        header: dict[str, Any] = {"format": LOG_FORMAT, "tau_m": self.tau_m, "meta": self.meta}
        if self.seats > 1:  # each per-seat quantity one (ticks × seats) array, as in the chunks
            header.update(format=BLOCK_LOG_FORMAT, seats=self.seats)
        rows = np.concatenate(list(self.row_blocks()) or [np.zeros((0, self._width))])
        return save_npz_atomic(path, header, chunk_arrays(rows, self.layout))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TickLog":
        """Read a log back: a tick-log directory (`open`) or a single ``.npz`` file (`save`)."""
        if Path(path).is_dir():
            return cls.open(path)
        header, data = load_npz(path, (LOG_FORMAT, BLOCK_LOG_FORMAT), "tick log")
        seats = int(header.get("seats", 1))
        named = header["format"] == LOG_FORMAT  # seats as named columns: logs from before the blocks
        names = column_names(seats) if named else SHARED_COLUMNS + SEAT_COLUMNS
        missing = [c for c in names if c not in data]
        if missing:
            raise ValueError(f"cannot read tick log {path}: it lacks columns {missing}")
        parts = {name: data[name] for name in SHARED_COLUMNS}
        for q in SEAT_COLUMNS:
            parts[q] = np.stack([data[seat_column(q, i)] for i in range(seats)], axis=1) if named else data[q]
        rows = np.concatenate(
            [parts[name].astype(np.float64).reshape(len(parts["tick"]), -1) for name in SHARED_COLUMNS + SEAT_COLUMNS],
            axis=1,
        )
        return cls.from_arrays(rows, header.get("meta", {}), header["tau_m"], seats)

    @classmethod
    def open(cls, directory: str | os.PathLike) -> "TickLog":
        """A read-only log over the chunk files of ``directory``, loading no column up front.

        A torn or unreadable chunk (only the last can be, after a crash nonstop could not see
        coming) is skipped with a `RuntimeWarning`; its name is kept in ``meta["skipped_chunks"]``.
        """
        directory = Path(directory)
        meta_path = directory / META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(f"no tick log at {directory} (no {META_FILE})")
        try:
            record = json.loads(meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read tick log {meta_path}: {exc}") from exc
        if not isinstance(record, dict) or record.get("format") != DIR_FORMAT:
            raise ValueError(f"{meta_path} is not a nonstop tick log directory")
        files = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := CHUNK_FILE_RE.fullmatch(p.name)))
        log = cls(record["tau_m"], meta=dict(record.get("meta") or {}), chunk_rows=1, seats=int(record.get("seats", 1)))
        log.complete = bool(record.get("complete"))
        log.directory = directory
        skipped = []
        for i, (index, path) in enumerate(files):
            try:
                n, named = check_chunk(path, full=i == len(files) - 1, seats=log.seats)
            except ValueError as exc:
                skipped.append(path.name)
                warnings.warn(
                    f"tick log: skipping {exc} (the log keeps {log._n_done:,} rows before it)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            log._chunks.append(Chunk(None, path, n, index, log.layout, named_seats=named))
            log._n_done += n
        if skipped:
            log.meta["skipped_chunks"] = skipped
        log._freeze()
        return log

    def _freeze(self) -> None:
        self._readonly = True
        self._block = np.zeros((0, self._width), np.float64)
        self._block_buffer = self._block.data
        self._block_values = self._block.reshape(-1).data
        self._n_block = self._chunk_rows = 0

    @classmethod
    def stitch(cls, logs: Sequence["TickLog"], names: Sequence[str] | None = None) -> "TickLog":
        """Join logs (a run's resume segments, oldest first) into one read-only log on one
        timeline, loading nothing: each segment's ticks continue from the previous segment's last
        tick and its episodes from the previous one's last episode (the world cannot be rewound, so
        a resumed segment is new world time). Deadlines and times stay on each segment's own clock.
        ``meta`` is the newest segment's, with ``segments``: where each began."""
        if not logs:
            raise ValueError("stitch needs at least one tick log")
        tau_m = logs[0].tau_m
        for log in logs:
            if not np.isclose(log.tau_m, tau_m):
                raise ValueError(f"cannot stitch tick logs of different tick periods ({tau_m} and {log.tau_m})")
        seats = logs[0].seats
        if any(log.seats != seats for log in logs):
            raise ValueError(f"cannot stitch tick logs of different seat counts ({[log.seats for log in logs]})")
        out = cls(tau_m, meta=dict(logs[-1].meta), chunk_rows=1, seats=seats)
        tick_shift = episode_shift = 0
        segments = []
        for i, log in enumerate(logs):
            segments.append(
                {
                    "name": names[i] if names is not None else str(i),
                    "first_row": out._n_done,
                    "rows": len(log),
                    "tick_shift": tick_shift,
                }
            )
            last_tick, last_episode = None, None
            for chunk in log._all_chunks():
                if not chunk.n:
                    continue
                out._chunks.append(chunk.shifted(tick_shift, episode_shift))
                out._n_done += chunk.n
            if len(log):
                last = out._chunks[-1].columns(["tick", "episode"])
                last_tick, last_episode = int(last["tick"][-1]), int(last["episode"][-1])
                tick_shift, episode_shift = last_tick, last_episode + 1
        out.meta["segments"] = segments
        out._freeze()
        return out

    def summary(self, *, teams: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """Metrics computed from the columns, chunk by chunk; see `nonstop.realtime.ticksummary.summarize`
        (also `nonstop.metrics.timing.summarize`). The top-level figures are the first seat's; a
        several-seat log adds ``seats``: every seat's own summary by name (what `seat` gives, folded
        for every seat in one pass over the chunks: `summarize_seats`). ``teams``, a map seat name
        → team, adds ``teams``: each team's figures over its seats (`summarize_teams`).

        >>> log = TickLog(1.0, seats=3, meta={"seats": ["a", "b", "c"]})
        >>> values = np.zeros((len(SEAT_COLUMNS), 3))
        >>> values[SEAT_COLUMNS.index("source")] = (SOURCE_AGENT, SOURCE_DEFAULT, SOURCE_AGENT)
        >>> values[SEAT_COLUMNS.index("reward")] = (1.0, 0.5, -1.0)
        >>> log.append_tick(1, 1.0, 1.0, episode=0, terminated=False, truncated=False, step_s=0.0,
        ...                 seats=values.reshape(-1))
        >>> s = log.summary(teams={"a": "red", "b": "red", "c": "blue"})
        >>> s["seats"]["b"]["inaction_ticks"], s["teams"]["red"]["reward_total"], s["teams"]["blue"]["seats"]
        (1, 1.5, ['c'])
        """
        out = summarize(self, **kwargs)
        if self.seats > 1 or teams is not None:
            per_seat = dict(zip(self.seat_names, summarize_seats(self, **kwargs)))
            if self.seats > 1:
                out["seats"] = per_seat
            if teams is not None:
                out["teams"] = summarize_teams(per_seat, teams)
        return out

    @property
    def seat_names(self) -> list[str]:
        """The seats' names (``meta["seats"]``; ``seat0``, ``seat1``, … where the world named none)."""
        names = self.meta.get("seats")
        if isinstance(names, list) and len(names) == self.seats:
            return [str(n) for n in names]
        return [f"seat{i}" for i in range(self.seats)]

    def seat(self, seat: int | str) -> "SeatLog":
        """The log as seat ``seat`` (index or name) sees it: its own source, delay, reward, … under
        the unprefixed names, so every metric (``.summary()``: τ_I, inaction, delay) works per seat."""
        names = self.seat_names
        if isinstance(seat, str):
            if seat not in names:
                raise KeyError(f"no seat {seat!r}; the seats are {names}")
            seat = names.index(seat)
        if not isinstance(seat, (int, np.integer)) or isinstance(seat, bool) or not 0 <= seat < self.seats:
            raise IndexError(f"seat must be a name or an index in [0, {self.seats}), got {seat!r}")
        return SeatLog(self, int(seat))
