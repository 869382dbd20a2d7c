"""Atomic files: the one writer behind every file nonstop must never leave half-written.

Checkpoints, ``config.json`` and ``summary.json`` of a run, the tick log's chunks and ``meta.json``,
replay headers: each is written to a temp file beside its final name (same filesystem, so the
rename is atomic), then ``os.replace``-d onto it. A reader sees the old file or the whole new one,
never half of one; an interrupted write (an exception, Ctrl-C) removes the temp file and leaves the
final name untouched. Only a SIGKILL can leave a temp file (``.NAME.<random>.tmp``) behind.
The file gets the mode an ``open(path, "w")`` would give it (0666 less the user's umask), not the
0600 of ``mkstemp``: a run's files are as readable as any other file the user writes.

``durable=True`` (the default) also fsyncs the file before the rename and the directory after it,
so the new file survives a power cut too; ``durable=False`` skips both (a file that is cheap to
lose but must never be torn).

This module imports nothing of nonstop, so every layer (the realtime core, learning, the server)
may use it.

>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "summary.json"
>>> _ = write_atomic(path, b'{"ticks": 60}')
>>> path.read_text()
'{"ticks": 60}'
>>> try:
...     with atomic_file(path) as f:
...         _ = f.write(b'{"tic')
...         raise KeyboardInterrupt  # cut off mid-write
... except KeyboardInterrupt:
...     pass
>>> path.read_text(), sorted(p.name for p in path.parent.iterdir())  # the old file, no temp left
('{"ticks": 60}', ['summary.json'])
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Final

__all__ = ["TMP_SUFFIX", "atomic_file", "write_atomic"]

#: Suffix of the temp files `atomic_file` writes (``.NAME.<random>.tmp``), for sweeping orphans.
TMP_SUFFIX: Final = ".tmp"


@contextmanager
def atomic_file(path: str | os.PathLike, *, durable: bool = True) -> Iterator[BinaryIO]:
    """Open ``path`` for writing so that it is always either the old file or the whole new one.

    Yields a binary file that is really a temp file beside ``path`` (its directory is created if
    missing). When the block ends normally the file is flushed and renamed onto ``path`` (with
    ``durable``: fsynced first, and the directory fsynced after, so the rename survives a power
    cut); if anything (even Ctrl-C) interrupts the block, the temp file is removed and ``path`` is
    untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets; these are a user's files
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def write_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` through `atomic_file`; returns the path."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"write_atomic writes bytes, got {type(data).__name__} (encode text first)")
    with atomic_file(path, durable=durable) as f:
        f.write(data)
    return Path(path)


def _umask() -> int:
    """The process's umask: Linux shows it in /proc; elsewhere it is read by setting it and setting it
    back (POSIX has no getter; another thread creating a file in between would see 022)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
