"""Give a policy worker's forward-pass working set back to the OS between passes.

A forward pass allocates its activations and scratch (about 6-9 MiB at k=7, 50 MiB at k=29, batch
1) and frees them when it ends, but glibc keeps freed memory in its heap for the next allocation:
each worker process then holds its own working set resident between passes, so N_I workers
that share one copy of θ still cost N_I working sets. `WorkingSetRelease` asks glibc to return that
memory (``malloc_trim(0)``) after each pass, on a thread of its own once the decision has gone
out, so the trim is never part of an action's delay.

Measured on 2 cores (one torch thread, `nonstop.bench.weights`' model): at k=7 the working set
kept between passes fell from 6-9 MiB to 0.7 MiB, with the forward pass unchanged within noise
(65-72 ms either way; the trim itself 0.6 ms). At k=1 re-faulting the pages made the pass 10-30 %
slower for 1.5 MiB saved, hence the threshold: only a heap holding more than ``min_free`` bytes
free is trimmed. Linux with glibc only; elsewhere (or with ``min_free=None``) it does nothing.

>>> r = WorkingSetRelease(min_free=None); r.after_pass(); r.close(); r.trims
0
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any

#: free bytes in the heap above which a pass's working set is handed back (k=1 keeps ~1.8 MiB)
DEFAULT_MIN_FREE = 4 * 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc() -> tuple[Any, Any] | None:
    """(malloc_trim, mallinfo2) of this process's C library, or None where they do not exist
    (not Linux, musl, a glibc older than 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        trim, info = libc.malloc_trim, libc.mallinfo2
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    info.argtypes, info.restype = [], _MallInfo2
    return trim, info


def check_min_free(value: object, what: str = "min_free") -> int | None:
    """``value`` if it is a number of bytes >= 0 or None, else a ValueError naming ``what``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{what} must be a number of bytes >= 0 or None (never trim), got {value!r}")
    return value


_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30}


def parse_min_free(text: str) -> int | None:
    """A ``--trim-above`` value: bytes, with an optional binary unit (KiB, MiB, GiB; K, M, G
    mean the same), or ``never`` (None). A ValueError says what is accepted.

    >>> parse_min_free("4MiB"), parse_min_free("512k"), parse_min_free("0"), parse_min_free("never")
    (4194304, 524288, 0, None)
    """
    raw = str(text).strip().lower().replace(" ", "")
    if raw in ("never", "none"):
        return None
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        value = -1.0
    if not (value >= 0 and value == value and value < 2**63):
        raise ValueError(
            f"--trim-above takes bytes with an optional unit (0, 4MiB, 512KiB, 1GiB) or 'never', got {text!r}"
        )
    return int(value)


def heap_free_bytes() -> int | None:
    """Bytes glibc holds free in its heaps (``mallinfo2().fordblks``), or None without glibc."""
    glibc = _glibc()
    return None if glibc is None else int(glibc[1]().fordblks)


class WorkingSetRelease:
    """After each forward pass (`after_pass`), a background thread trims the heap when it holds
    more than ``min_free`` bytes free. ``trims`` counts the trims done. ``close`` stops the
    thread; a worker process that simply exits needs no ``close`` (the thread is a daemon)."""

    def __init__(self, min_free: int | None = DEFAULT_MIN_FREE) -> None:
        self.min_free, self.trims = check_min_free(min_free), 0
        self._glibc = _glibc() if min_free is not None else None
        self._wake, self._closed = threading.Event(), False
        self._thread: threading.Thread | None = None
        if self._glibc is not None:
            self._thread = threading.Thread(target=self._run, name="nonstop-trim", daemon=True)
            self._thread.start()

    def after_pass(self) -> None:
        """A pass ended and its decision has gone out: trim in the background if worth it."""
        if self._thread is not None:
            self._wake.set()

    def _run(self) -> None:
        assert self._glibc is not None and self.min_free is not None
        trim, info = self._glibc
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            if info().fordblks > self.min_free:  # ctypes releases the GIL for both calls
                trim(0)
                self.trims += 1

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
