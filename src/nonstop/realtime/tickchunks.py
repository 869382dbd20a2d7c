"""A tick log's chunks: a completed block of rows held in memory and/or in its file (`Chunk`), and
the background thread that streams sealed chunks into a log's directory without ever making the
appender wait (`ChunkWriter`). `nonstop.realtime.ticklog.TickLog` seals the chunks and reads them.
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
import time
import warnings
import zipfile
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from nonstop.realtime.tickcolumns import (
    SEAT_COLUMNS,
    SHARED_COLUMNS,
    RowLayout,
    column_dtype,
    parse_seat_column,
    seat_column,
)
from nonstop.realtime.tickfiles import BLOCK_CHUNK_FORMAT, CHUNK_FORMAT, save_npz_atomic

__all__ = [
    "CHUNK_ROWS",
    "MAX_PENDING",
    "Chunk",
    "ChunkWriter",
    "chunk_arrays",
    "chunk_header",
    "chunk_rows_for",
    "lazy_block",
    "paged_in_block",
]

_ONE_SEAT: Final = RowLayout(1)

#: Rows per chunk: 64k ticks are 18 minutes at 60 Hz, 9.4 MB in memory, ~1 MB compressed on disk.
CHUNK_ROWS: Final = 65536
#: What one chunk of a one-seat log holds in memory; a several-seat log's chunks hold as much, in fewer rows.
CHUNK_BYTES: Final = CHUNK_ROWS * _ONE_SEAT.width * 8
#: Sealed chunks that may wait for the writer before an append waits for it (memory bound).
MAX_PENDING: Final = 4
#: Paged-in blocks the writer keeps ready for the appender's seals: two, so that a seal that comes
#: while the writer still writes the last chunk finds one too (a fresh block faults on the tick path).
SPARE_BLOCKS: Final = 2
#: the size of a transparent huge page: a smaller block gets none, so `lazy_block` needs no advice
_HUGE_PAGE: Final = 2 << 20


class Chunk:
    """One completed chunk: its rows in memory (a float64 row block in `RowLayout` order) and/or its
    file on disk. ``named_seats``: the file keeps seat i ≥ 1 as named columns ``seat{i}_…`` (every
    log written before the blocks); otherwise a per-seat quantity is one (rows × seats) array.

    ``tick_shift``/``episode_shift`` renumber a stitched segment onto the joined timeline."""

    __slots__ = ("rows", "path", "n", "index", "tick_shift", "episode_shift", "layout", "named_seats")

    def __init__(
        self,
        rows: np.ndarray | None,
        path: Path | None,
        n: int,
        index: int,
        layout: RowLayout = _ONE_SEAT,
        *,
        named_seats: bool = False,
    ) -> None:
        self.rows, self.path, self.n, self.index = rows, path, n, index
        self.layout = layout
        self.named_seats = named_seats
        self.tick_shift = self.episode_shift = 0

    def shifted(self, tick_shift: int, episode_shift: int) -> "Chunk":
        c = Chunk(self.rows, self.path, self.n, self.index, self.layout, named_seats=self.named_seats)
        c.tick_shift, c.episode_shift = self.tick_shift + tick_shift, self.episode_shift + episode_shift
        return c

    def _read(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Arrays ``names`` of the chunk's file, as stored."""
        if self.path is None:  # never: the writer sets the path before it drops the rows
            raise RuntimeError(f"tick-log chunk {self.index} has neither rows in memory nor a file")
        try:
            with np.load(self.path, allow_pickle=False) as data:
                return {name: data[name] for name in names}
        except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise ValueError(f"cannot read tick-log chunk {self.path}: {exc}") from exc

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Named columns (shared, seat 0's unprefixed, ``seat{i}_…``), one value per row each."""
        rows = self.rows  # read once: the writer may drop it once the file is in place
        if rows is not None:
            at = self.layout.__getitem__
            out = {name: rows[: self.n, at(name)].astype(column_dtype(name)) for name in names}
        elif self.named_seats or self.layout.seats == 1:
            out = self._read(names)
        else:  # a seat's column is one column of its quantity's block
            where = {name: parse_seat_column(name) for name in names}
            stored = self._read(sorted({name if at is None else at[0] for name, at in where.items()}))
            out = {name: stored[name] if at is None else stored[at[0]][:, at[1]] for name, at in where.items()}
        return self._shift(out)

    def blocks(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Shared columns by name (one value per row) and per-seat quantities as (rows × seats) blocks."""
        rows, seats = self.rows, self.layout.seats
        if rows is not None:
            out = {
                name: rows[: self.n, self.layout.block(name) if name in SEAT_COLUMNS else self.layout[name]].astype(
                    column_dtype(name)
                )
                for name in names
            }
        elif self.named_seats or seats == 1:
            wanted = [seat_column(name, i) for name in names for i in range(seats if name in SEAT_COLUMNS else 1)]
            stored = self._read(wanted)
            out = {
                name: np.stack([stored[seat_column(name, i)] for i in range(seats)], axis=1)
                if name in SEAT_COLUMNS
                else stored[name]
                for name in names
            }
        else:
            out = self._read(names)
        return self._shift(out)

    def _shift(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.tick_shift and "tick" in out:
            out["tick"] = out["tick"] + self.tick_shift
        if self.episode_shift and "episode" in out:
            out["episode"] = out["episode"] + self.episode_shift
        return out

    def row_block(self) -> np.ndarray:
        """The chunk's rows as one float64 block in `RowLayout` order (a view when in memory and unshifted)."""
        if self.rows is not None and not self.tick_shift and not self.episode_shift:
            return self.rows[: self.n]
        cols = self.blocks(SHARED_COLUMNS + SEAT_COLUMNS)
        return np.concatenate(
            [cols[name].astype(np.float64).reshape(self.n, -1) for name in SHARED_COLUMNS + SEAT_COLUMNS], axis=1
        )


def chunk_arrays(rows: np.ndarray, layout: RowLayout = _ONE_SEAT) -> dict[str, np.ndarray]:
    """A row block's columns as stored in a chunk file: the shared ones by name, each per-seat
    quantity as one (rows × seats) array (one value per row where there is one seat, as every
    one-seat log has always been stored)."""
    out = {name: rows[:, layout[name]].astype(column_dtype(name)) for name in SHARED_COLUMNS}
    for name in SEAT_COLUMNS:
        block = rows[:, layout.block(name)].astype(column_dtype(name))
        out[name] = block[:, 0] if layout.seats == 1 else block
    return out


def chunk_header(index: int, rows: int, seats: int) -> dict[str, object]:
    """A chunk file's header: a one-seat chunk's as always; a several-seat one says how many seats its blocks hold."""
    if seats == 1:
        return {"format": CHUNK_FORMAT, "index": index, "rows": rows}
    return {"format": BLOCK_CHUNK_FORMAT, "index": index, "rows": rows, "seats": seats}


def chunk_rows_for(requested: int, layout: RowLayout) -> int:
    """Rows per chunk for a log of ``layout``: ``requested``, capped (for several seats) so that a
    chunk holds no more than a one-seat chunk (`CHUNK_BYTES`): 65,536 rows at one seat, 804 at 162.

    >>> chunk_rows_for(CHUNK_ROWS, RowLayout(1)), chunk_rows_for(CHUNK_ROWS, RowLayout(162)), chunk_rows_for(16, RowLayout(162))
    (65536, 804, 16)
    """
    if layout.seats == 1:
        return requested
    return max(1, min(requested, CHUNK_BYTES // (layout.width * 8)))


def paged_in_block(shape: tuple[int, int]) -> np.ndarray:
    """A zeroed float64 block whose pages are already mapped. ``np.zeros`` maps pages lazily, so
    each first write to a page faults, and numpy asks for transparent huge pages on large arrays:
    a fault then zeroes 2 MB (with the kernel's ``defrag=madvise``, after compacting memory), which
    measured 1-5 ms on one append. Writing every page here moves that cost off the tick path."""
    block = np.empty(shape, np.float64)
    block.fill(0.0)
    return block


def lazy_block(shape: tuple[int, int]) -> np.ndarray:
    """A zeroed float64 block mapped lazily in small pages (an in-memory log's: nothing to page it in
    beside the appender). ``np.zeros`` asks for transparent huge pages on a large block, and each 2 MB
    first touch then costs the append that makes it 1-5 ms (every 28 rows at a thousand seats); refused
    huge pages, a 72 KB row faults 18 small pages, some microseconds. Where the kernel offers no such
    advice (not Linux), `np.zeros`."""
    nbytes = max(1, shape[0] * shape[1] * 8)
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is None or nbytes < _HUGE_PAGE:
        return np.zeros(shape, np.float64)
    memory = mmap.mmap(-1, nbytes)  # anonymous: zero-filled, each page mapped at its first write
    memory.madvise(advice)
    return np.frombuffer(memory, np.float64).reshape(shape)  # the array keeps the map alive


class ChunkWriter:
    """The background thread that writes sealed chunks of one `TickLog` into its directory.

    The hand-off never blocks the appender (the world never waits): a writer that falls more than
    ``max_pending`` chunks behind (a disk or a CPU far slower than the ticks) is warned about once
    and its backlog waits in memory until it catches up; ``max_backlog`` records the worst."""

    def __init__(
        self, directory: Path, max_pending: int, layout: RowLayout = _ONE_SEAT, block_rows: int = CHUNK_ROWS
    ) -> None:
        self.directory = directory
        self.block_shape = (block_rows, layout.width)
        self.layout = layout
        self.max_pending = max_pending
        self.max_backlog = 0
        # SimpleQueue: a seal's hand-off is one C call (a third of `queue.Queue`'s ~30 µs on the tick path)
        self.queue: queue.SimpleQueue[Chunk | None] = queue.SimpleQueue()
        #: blocks whose rows are safely on disk, for the appender to fill again: a block already
        #: paged in costs no page faults on the tick path (deque: thread-safe append/pop)
        self.free: deque[np.ndarray] = deque()
        #: seals that found no paged-in block (the appender then took lazily mapped pages)
        self.fresh_blocks = 0
        self.error: BaseException | None = None
        #: (start, end) `time.perf_counter_ns` of the last chunk writes: when the writer was busy
        #: (``nonstop bench ticklog`` tells a slow append that overlapped one from the machine's noise)
        self.busy: deque[tuple[int, int]] = deque(maxlen=1024)
        self.thread = threading.Thread(target=self._loop, name="nonstop-ticklog-writer", daemon=True)
        self.thread.start()

    def _stock_spare(self, shape: tuple[int, int]) -> None:
        """Have `SPARE_BLOCKS` paged-in blocks ready for the appender's next seals (this thread pays the faults)."""
        while len(self.free) < SPARE_BLOCKS:
            self.free.append(paged_in_block(shape))

    def submit(self, chunk: Chunk) -> None:
        self.queue.put_nowait(chunk)
        backlog = self.queue.qsize()
        if backlog > self.max_backlog:
            if backlog > self.max_pending >= self.max_backlog:
                warnings.warn(
                    f"tick log: the writer to {self.directory} is {backlog} chunks behind; they wait in "
                    "memory until it catches up (the world does not wait)",
                    RuntimeWarning,
                    stacklevel=3,
                )
            self.max_backlog = backlog

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    @staticmethod
    def _never_preempt_on_wake() -> None:
        """Under an ordinary (not realtime) host: SCHED_BATCH, the same share of the CPU but no preemption
        when woken. A seal wakes this thread; an ordinary thread woken on the appender's core preempts it,
        and the appender then waits behind the machine's other work for its next turn (1-5 ms at a third of
        the seals on a loaded 2-core machine, ``nonstop bench ticklog --sched normal``); a batch thread
        waits for the core to come free. `_follow_host_priority` still lifts it under a realtime host."""
        try:
            if os.sched_getscheduler(0) == os.SCHED_OTHER:
                os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except (AttributeError, OSError):  # not Linux, or not allowed: an ordinary thread, as before
            pass

    @staticmethod
    def _follow_host_priority() -> None:
        """Under a realtime host (its main thread at SCHED_FIFO, set after this thread started):
        take the lowest realtime priority, below the tick loop and above ordinary work, so that no
        ordinary process preempts the writer while it holds the GIL the tick loop needs."""
        try:
            if os.sched_getscheduler(os.getpid()) == os.SCHED_FIFO and os.sched_getscheduler(0) != os.SCHED_FIFO:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(os.sched_get_priority_min(os.SCHED_FIFO)))
        except (AttributeError, OSError):
            pass

    def _loop(self) -> None:
        self._never_preempt_on_wake()
        self._stock_spare(self.block_shape)  # before the first seal needs it (a chunk takes minutes to fill)
        while (chunk := self.queue.get()) is not None:
            self._follow_host_priority()
            began = time.perf_counter_ns()
            path = self.directory / f"chunk-{chunk.index:06d}.npz"
            rows = chunk.rows
            assert rows is not None
            try:
                header = chunk_header(chunk.index, chunk.n, self.layout.seats)
                save_npz_atomic(path, header, chunk_arrays(rows[: chunk.n], self.layout), fsync=True, compresslevel=1)
            except Exception as exc:  # keep the rows in memory: nothing is lost while the process lives
                if self.error is None:
                    warnings.warn(
                        f"tick log: cannot write {path} ({exc}); keeping its rows in memory",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                self.error = exc
                continue
            finally:
                self.busy.append((began, time.perf_counter_ns()))
            chunk.path = path
            chunk.rows = None  # from now on read back from the file: memory stays bounded
            if len(self.free) < SPARE_BLOCKS:
                self.free.append(rows)
            self._stock_spare(self.block_shape)
