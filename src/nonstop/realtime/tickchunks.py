"""A tick log's chunks: a completed block of rows held in memory and/or in its file (`Chunk`), and
the background thread that streams sealed chunks into a log's directory without ever making the
appender wait (`ChunkWriter`). `nonstop.realtime.ticklog.TickLog` seals the chunks and reads them.
"""

from __future__ import annotations

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

from nonstop.realtime.tickcolumns import COLUMNS, column_dtype
from nonstop.realtime.tickfiles import CHUNK_FORMAT, save_npz_atomic

__all__ = ["CHUNK_ROWS", "MAX_PENDING", "Chunk", "ChunkWriter", "chunk_arrays", "paged_in_block"]

_NAMES: Final = tuple(COLUMNS)
_INDEX: Final = {name: i for i, name in enumerate(_NAMES)}

#: Rows per chunk: 64k ticks are 18 minutes at 60 Hz, 9.4 MB in memory, ~1 MB compressed on disk.
CHUNK_ROWS: Final = 65536
#: Sealed chunks that may wait for the writer before an append waits for it (memory bound).
MAX_PENDING: Final = 4


class Chunk:
    """One completed chunk: its rows in memory (a float64 row block) and/or its file on disk.

    ``tick_shift``/``episode_shift`` renumber a stitched segment onto the joined timeline."""

    __slots__ = ("rows", "path", "n", "index", "tick_shift", "episode_shift", "at")

    def __init__(self, rows: np.ndarray | None, path: Path | None, n: int, index: int,
                 at: dict[str, int] = _INDEX) -> None:  # fmt: skip
        self.rows, self.path, self.n, self.index = rows, path, n, index
        self.at = at  # column name -> its place in a row
        self.tick_shift = self.episode_shift = 0

    def shifted(self, tick_shift: int, episode_shift: int) -> "Chunk":
        c = Chunk(self.rows, self.path, self.n, self.index, self.at)
        c.tick_shift, c.episode_shift = self.tick_shift + tick_shift, self.episode_shift + episode_shift
        return c

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self.rows  # read once: the writer may drop it once the file is in place
        if rows is not None:
            out = {name: rows[: self.n, self.at[name]].astype(column_dtype(name)) for name in names}
        elif self.path is None:  # never: the writer sets the path before it drops the rows
            raise RuntimeError(f"tick-log chunk {self.index} has neither rows in memory nor a file")
        else:
            try:
                with np.load(self.path, allow_pickle=False) as data:
                    out = {name: data[name] for name in names}
            except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as exc:
                raise ValueError(f"cannot read tick-log chunk {self.path}: {exc}") from exc
        if self.tick_shift and "tick" in out:
            out["tick"] = out["tick"] + self.tick_shift
        if self.episode_shift and "episode" in out:
            out["episode"] = out["episode"] + self.episode_shift
        return out


def chunk_arrays(rows: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
    return {name: rows[:, i].astype(column_dtype(name)) for i, name in enumerate(names)}


def paged_in_block(shape: tuple[int, int]) -> np.ndarray:
    """A zeroed float64 block whose pages are already mapped. ``np.zeros`` maps pages lazily, so
    each first write to a page faults, and numpy asks for transparent huge pages on large arrays:
    a fault then zeroes 2 MB (with the kernel's ``defrag=madvise``, after compacting memory), which
    measured 1-5 ms on one append. Writing every page here moves that cost off the tick path."""
    block = np.empty(shape, np.float64)
    block.fill(0.0)
    return block


class ChunkWriter:
    """The background thread that writes sealed chunks of one `TickLog` into its directory.

    The hand-off never blocks the appender (the world never waits): a writer that falls more than
    ``max_pending`` chunks behind (a disk or a CPU far slower than the ticks) is warned about once
    and its backlog waits in memory until it catches up; ``max_backlog`` records the worst."""

    def __init__(self, directory: Path, max_pending: int, names: Sequence[str] = _NAMES, block_rows: int = CHUNK_ROWS) -> None:
        self.directory = directory
        self.block_shape = (block_rows, len(names))
        self.names = names
        self.max_pending = max_pending
        self.max_backlog = 0
        self.queue: queue.Queue[Chunk | None] = queue.Queue()
        #: blocks whose rows are safely on disk, for the appender to fill again: a block already
        #: paged in costs no page faults on the tick path (deque: thread-safe append/pop)
        self.free: deque[np.ndarray] = deque()
        self.error: BaseException | None = None
        #: (start, end) `time.perf_counter_ns` of the last chunk writes: when the writer was busy
        #: (``nonstop bench ticklog`` tells a slow append that overlapped one from the machine's noise)
        self.busy: deque[tuple[int, int]] = deque(maxlen=1024)
        self.thread = threading.Thread(target=self._loop, name="nonstop-ticklog-writer", daemon=True)
        self.thread.start()

    def _stock_spare(self, shape: tuple[int, int]) -> None:
        """Have one paged-in block ready for the appender's next seal (this thread pays the faults)."""
        if not self.free:
            self.free.append(paged_in_block(shape))

    def submit(self, chunk: Chunk) -> None:
        self.queue.put_nowait(chunk)
        backlog = self.queue.qsize()
        if backlog > self.max_backlog:
            if backlog > self.max_pending >= self.max_backlog:
                warnings.warn(f"tick log: the writer to {self.directory} is {backlog} chunks behind; they wait in "
                              "memory until it catches up (the world does not wait)", RuntimeWarning, stacklevel=3)  # fmt: skip
            self.max_backlog = backlog

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

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
        self._stock_spare(self.block_shape)  # before the first seal needs it (a chunk takes minutes to fill)
        while (chunk := self.queue.get()) is not None:
            self._follow_host_priority()
            began = time.perf_counter_ns()
            path = self.directory / f"chunk-{chunk.index:06d}.npz"
            rows = chunk.rows
            assert rows is not None
            try:
                header = {"format": CHUNK_FORMAT, "index": chunk.index, "rows": chunk.n}
                save_npz_atomic(path, header, chunk_arrays(rows[: chunk.n], self.names), fsync=True, compresslevel=1)
            except Exception as exc:  # keep the rows in memory: nothing is lost while the process lives
                if self.error is None:
                    warnings.warn(f"tick log: cannot write {path} ({exc}); keeping its rows in memory",
                                  RuntimeWarning, stacklevel=1)  # fmt: skip
                self.error = exc
                continue
            finally:
                self.busy.append((began, time.perf_counter_ns()))
            chunk.path = path
            chunk.rows = None  # from now on read back from the file: memory stays bounded
            if len(self.free) < 2:
                self.free.append(rows)
            self._stock_spare(self.block_shape)
