"""Acquire/release atomics on the 64-bit words nonstop's processes share (docs/design.md §4c).

Every shared-memory word that orders two processes (a seqlock sequence, a version, a turn, a
ring index, a counter two writers bump, a lock) goes through this module, so the channels are
correct on weakly ordered CPUs (aarch64: Graviton, Apple silicon) and not only under x86's store
ordering. The instructions come from `atomicshm` (C11/GCC ``__atomic`` builtins, MSVC intrinsics;
one wheel per platform, ~20 ns per call); without it `SharedWords` refuses with
`AtomicsUnavailableError` instead of letting two processes tear each other's data.

Memory model (C11 orders; a *fence* is ``atomic_thread_fence``). The data a word guards
(observations, parameters, frames) is plain memory copied by numpy; the fences order those copies
in hardware, and every protocol re-checks a word after copying and throws away a copy that raced
a writer, so a racing copy is never used.

* **Seqlock, one writer** (`LatestSlot`, the target network): the writer stores an odd sequence
  (relaxed: only it writes the word), then a **release fence** (the odd sequence becomes visible
  before any byte of the data), writes the data, then **release-stores** the next even sequence.
  A reader **acquire-loads** the sequence (retry while odd), copies the data, issues an
  **acquire fence** (the copy is complete before the re-check) and reloads the sequence
  (relaxed); it keeps the copy only if the two loads agree. If the copy saw any byte of a newer
  write, the fence pair makes the reload see that write's odd sequence, so a torn copy is never
  kept. A writer killed mid-write leaves the sequence odd: the next writer starts from the next
  odd number, so no reader ever accepts the half-written data. (The target network has several
  possible writers, Hogwild learners: they take turns through a `RobustLock`.)
* **Double buffer** (`SharedWeights`): the publisher stores ``begun = v`` (relaxed), release
  fence, copies into buffer ``v % 2``, release-stores ``done = v``. A reader acquire-loads
  ``done``, copies buffer ``done % 2``, acquire fence, loads ``begun``: the copy is whole iff no
  publish of ``done + 2`` (the next writer of that buffer) had begun.
* **Ring written by one writer** (replay transitions and frames): the writer issues a release
  fence before overwriting a slot (so the index that made the old slot content readable is
  visible first), writes, then release-stores the index. A sampler acquire-loads the index, copies,
  acquire fence, re-loads the index (or the slot's id) and drops samples the writer reached.
* **Handoff words** (round-robin turn, parallel-mode rounds, stop and state flags): the owner of
  the turn writes its data and then release-stores the next turn; the waiter acquire-loads it.
  A supervisor that skips a dead learner's turn uses compare-exchange, so it can never skip a
  live one's.
* **Counters with several writers** (Hogwild updates, queue counters): `SharedWords.fetch_add`,
  a single read-modify-write, so no increment is lost.
* **Two-sided wake-ups** (the server's tick board: one side stores a tick and loads a wake word,
  the other stores the wake word and loads the tick): sequentially consistent stores and loads,
  because store→load order is not kept by acquire/release (nor by x86).
* **Locks** (`RobustLock`): a word holding the owner's pid, taken with an acquire
  compare-exchange and freed with a release compare-exchange. A waiter that finds the owner dead
  (no such process, or a zombie) steals the word, so a SIGKILLed holder cannot keep it forever.
  What the dead holder was writing is whatever it left: each protected structure publishes its
  index last, so half a write is never visible.

>>> import numpy as np
>>> buf = np.zeros(4, np.int64)
>>> words = SharedWords(buf, count=4)
>>> words.store(0, -5); words.load(0)
-5
>>> words.fetch_add(1, 3), words.fetch_add(1, 3), words.load(1)
(0, 3, 6)
>>> words.compare_exchange(2, 0, 7), words.compare_exchange(2, 0, 8), words.load(2)
(True, False, 7)
>>> lock = RobustLock(words, 3)
>>> with lock:
...     lock.owner == os.getpid()
True
>>> lock.owner
0
>>> words.close()
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
import time
from types import ModuleType
from typing import Any, Final

_backend: ModuleType | None  # None where atomicshm is not importable (then every segment is refused)
try:  # the one backend: C11/MSVC atomics on any writable buffer
    import atomicshm as _backend
except ImportError as _exc:  # pragma: no cover - exercised by monkeypatching in the tests
    _backend = None
    _IMPORT_ERROR: str = f"{type(_exc).__name__}: {_exc}"

__all__ = [
    "RELAXED",
    "ACQUIRE",
    "RELEASE",
    "ACQ_REL",
    "SEQ_CST",
    "AtomicsUnavailableError",
    "SharedWords",
    "RobustLock",
    "fence",
    "pid_alive",
    "require_atomics",
    "FUTEX",
    "futex_wait",
    "futex_wake",
]

RELAXED: Final[int] = _backend.RELAXED if _backend else 0
ACQUIRE: Final[int] = _backend.ACQUIRE if _backend else 2
RELEASE: Final[int] = _backend.RELEASE if _backend else 3
ACQ_REL: Final[int] = _backend.ACQ_REL if _backend else 4
SEQ_CST: Final[int] = _backend.SEQ_CST if _backend else 5

_WRAP: Final = 1 << 64
_SIGN: Final = 1 << 63


class AtomicsUnavailableError(RuntimeError):
    """This platform has no atomics backend, so shared memory between processes is refused."""


def require_atomics() -> Any:
    """The atomics backend, or `AtomicsUnavailableError` saying how to get one. Every segment that
    processes share asks before it is created, so nothing is left in /dev/shm by a refusal."""
    if _backend is None:
        raise AtomicsUnavailableError(
            "nonstop's shared-memory channels need real atomics and the atomicshm package is not "
            f"importable here ({_IMPORT_ERROR}); install it with `pip install atomicshm` (wheels for "
            "Linux, macOS and Windows on x86-64 and arm64; elsewhere it builds with any C compiler). "
            "Without it two processes could read torn observations and weights, so nonstop refuses."
        )
    return _backend


def _fence_unavailable(order: int) -> None:
    require_atomics()


#: ``fence(order)`` is C11's ``atomic_thread_fence(order)``: ``RELEASE`` orders earlier accesses
#: before later stores, ``ACQUIRE`` orders earlier loads before later accesses (see the module
#: docstring). The backend's own function, so a per-tick fence costs one C call.
fence: Final = _backend.fence if _backend is not None else _fence_unavailable


def _signed(value: int) -> int:
    return value - _WRAP if value >= _SIGN else value


class SharedWords:
    """``count`` int64 words starting at byte ``offset`` of a writable buffer (a shared-memory
    segment's ``buf``, an mmap, a numpy array), each read and written atomically.

    Values are signed 64-bit. The raw `cell` of a word (an ``atomicshm.AtomicU64``) is the fast
    path for per-tick code: its results are *unsigned*, so use it only for words that never hold
    a negative number. The instance pins the buffer (a mapping cannot be closed under it) until
    `close`, which every `SharedSegment` calls before unmapping.
    """

    def __init__(self, buffer: Any, offset: int = 0, count: int = 1) -> None:
        backend = require_atomics()
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or offset % 8:
            raise ValueError(f"offset must be a non-negative multiple of 8 bytes, got {offset!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive integer, got {count!r}")
        try:
            self._view = backend.AtomicView(buffer)
        except BufferError as exc:
            raise TypeError(f"SharedWords needs a writable buffer ({exc})") from None
        if offset + 8 * count > self._view.nbytes:
            nbytes = self._view.nbytes
            self._view.close()
            raise ValueError(f"{count} words at byte {offset} do not fit in a buffer of {nbytes} bytes")
        self.offset, self.count = offset, count

    def _at(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise IndexError(f"word {i!r} out of range: {self.count} words")
        return self.offset + 8 * i

    def cell(self, i: int) -> Any:
        """The raw atomic cell of word ``i`` (unsigned results; see the class docstring)."""
        return self._view.cell_u64(self._at(i))

    def load(self, i: int, order: int = ACQUIRE) -> int:
        return _signed(self._view.load_u64(self._at(i), order))

    def store(self, i: int, value: int, order: int = RELEASE) -> None:
        self._view.store_u64(self._at(i), value, order)

    def fetch_add(self, i: int, delta: int = 1, order: int = ACQ_REL) -> int:
        """Add ``delta`` to word ``i`` in one indivisible step; returns the value before."""
        return _signed(self._view.fetch_add_u64(self._at(i), delta, order))

    def compare_exchange(self, i: int, expected: int, desired: int, order: int = ACQ_REL) -> bool:
        """Set word ``i`` to ``desired`` iff it holds ``expected``; returns whether it did."""
        fail = ACQUIRE if order in (ACQUIRE, ACQ_REL) else (SEQ_CST if order == SEQ_CST else RELAXED)
        return _signed(self._view.cas_u64(self._at(i), expected, desired, order, fail)) == expected

    @property
    def closed(self) -> bool:
        return self._view.closed

    def close(self) -> None:
        """Let go of the buffer (idempotent); every later access raises ValueError."""
        self._view.close()


_PROC: Final = os.path.isdir("/proc/self")
_pid = os.getpid()  # what a lock word holds; os.getpid() is a system call, so kept here (and renewed in a forked child)


def _renew_pid() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_pid)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie, dead but not yet reaped by its
    parent, counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    if not _PROC:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


class RobustLock:
    """A lock in one shared word that a dead holder cannot keep forever.

    The word holds 0 (free) or its holder's pid. `acquire` takes it with an acquire
    compare-exchange; a waiter backs off (yield, then sleeps up to 1 ms) and every few
    milliseconds checks whether the holder is still alive: if not (exited, killed, a zombie) it
    steals the word (counted in `steals`). Threads of one process exclude each other too, but a
    lock is not re-entrant. A holder's pid could in principle be reused by a new process before a
    waiter looks; the lock is then held until that process exits, never given to two holders.
    Every process sharing the lock must see the others' pids (one pid namespace), as nonstop's
    processes do: they are all children of the one that made the segment.

    Picklable state lives in the segment: build one in each process over the same word.

    >>> import numpy as np
    >>> words = SharedWords(np.zeros(1, np.int64))
    >>> lock = RobustLock(words, 0)
    >>> lock.acquire(), lock.acquire(timeout=0.01)
    (True, False)
    >>> lock.release(); lock.acquire(timeout=0)
    True
    >>> lock.release(); words.close()
    """

    #: how often a waiter looks at whether the holder is alive (seconds)
    CHECK_EVERY: Final = 0.005

    def __init__(self, words: SharedWords, index: int) -> None:
        if not isinstance(words, SharedWords):
            raise TypeError(f"RobustLock needs SharedWords, got {type(words).__name__}")
        if not 0 <= index < words.count:
            raise ValueError(f"no word {index!r}: the SharedWords hold {words.count}")
        self._words, self._index = words, index
        self._cell = words.cell(index)
        self._cas = self._cell.cas
        self.steals = 0

    @property
    def owner(self) -> int:
        """The pid holding the lock, 0 when free."""
        return self._cell.load(ACQUIRE)

    def acquire(self, timeout: float | None = None) -> bool:
        """Take the lock; ``timeout`` seconds at most (None: until it is free). Returns whether it
        was taken."""
        me, cas = _pid, self._cas
        if cas(0, me, ACQUIRE, RELAXED) == 0:
            return True
        return self._wait(me, timeout)

    def _wait(self, me: int, timeout: float | None) -> bool:
        cas = self._cas
        start = time.monotonic()
        deadline = None if timeout is None else start + max(0.0, timeout)
        check_at = start + self.CHECK_EVERY
        tries = 0
        while True:
            holder = cas(0, me, ACQUIRE, RELAXED)
            if holder == 0:
                return True
            tries += 1
            if tries < 32:
                time.sleep(0)  # lets a holder in this process (another thread) run: it needs the GIL
            else:
                time.sleep(min(0.001, 1e-5 * (tries - 31)))
            now = time.monotonic()
            if now >= check_at:
                check_at = now + self.CHECK_EVERY
                if holder != me and not pid_alive(holder) and cas(holder, me, ACQUIRE, RELAXED) == holder:
                    self.steals += 1
                    return True
            if deadline is not None and now >= deadline:
                return False

    def release(self) -> None:
        """Free the lock; RuntimeError if this process does not hold it."""
        held = self._cas(_pid, 0, RELEASE, RELAXED)
        if held != _pid:
            raise RuntimeError(f"release of a lock held by pid {held}, not by this process ({_pid})")

    def __enter__(self) -> "RobustLock":
        me = _pid
        if self._cas(0, me, ACQUIRE, RELAXED) != 0:  # the fast path inline: one call when free
            self._wait(me, None)
        return self

    def __exit__(self, *exc: object) -> None:
        held = self._cas(_pid, 0, RELEASE, RELAXED)
        if held != _pid:
            raise RuntimeError(f"release of a lock held by pid {held}, not by this process ({_pid})")


# ----------------------------------------------------------------------------- futex wake-ups

#: the futex system call's number on the Linux architectures nonstop runs on
_SYS_FUTEX: Final = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # not the _PRIVATE forms: the word lives in memory several processes map
_WAKE_ALL: Final = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex_syscall() -> Any:
    """libc's ``syscall`` set up for futex, or None where there is no Linux futex to call."""
    nr = _SYS_FUTEX.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or nr is None:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall  # a CDLL call releases the GIL while it sleeps
    except (OSError, AttributeError):  # pragma: no cover - a libc without syscall()
        return None
    call.restype = ctypes.c_long
    call.argtypes = [
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_uint32,
        ctypes.POINTER(_Timespec),
        ctypes.c_void_p,
        ctypes.c_uint32,
    ]
    return functools.partial(call, nr)


_futex = _futex_syscall()
#: whether `futex_wait` really sleeps in the kernel until a `futex_wake` (Linux on x86-64 and arm64);
#: elsewhere it sleeps a short slice and the waiter re-checks, as a polling loop would
FUTEX: Final = _futex is not None
#: the slice `futex_wait` sleeps where there is no futex (the polling loop it replaces)
POLL_SLICE: Final = 0.002


def futex_wait(address: int, expected: int, timeout: float) -> None:
    """Sleep while the 32-bit word at ``address`` (in memory shared by the processes that wake it)
    holds ``expected``, until a `futex_wake` on it or ``timeout`` seconds pass, whichever is first.

    It returns at once if the word already differs, so a waiter that read the word, found nothing
    to do and then calls this cannot miss a change made in between. It may also return early (a
    signal, a spurious wake-up): callers re-check their condition and wait again. Without a futex
    it sleeps ``min(timeout, POLL_SLICE)``."""
    if _futex is None:
        time.sleep(min(max(timeout, 0.0), POLL_SLICE))
        return
    timeout = max(timeout, 0.0)
    sec = int(timeout)
    ts = _Timespec(sec, int((timeout - sec) * 1e9))
    _futex(address, _FUTEX_WAIT, expected & 0xFFFFFFFF, ctypes.byref(ts), None, 0)  # EAGAIN/ETIMEDOUT/EINTR: return


def futex_wake(address: int, count: int = _WAKE_ALL) -> None:
    """Wake up to ``count`` processes sleeping in `futex_wait` on the word at ``address`` (all of
    them by default); nothing where there is no futex."""
    if _futex is not None:
        _futex(address, _FUTEX_WAKE, count, None, None, 0)
