"""Shared-memory channels between the host and its agents (docs/design.md §1.3-1.4).

`LatestSlot` carries observations host → agents: capacity one, newest wins, a
seqlock guarantees no reader ever sees a torn value, across threads or
processes. `ActionQueue` carries actions agents → host: bounded, never blocks a
submitter, ``latest`` or ``fifo`` mode, every drop counted by cause.

Ownership: the process that calls ``create`` owns the segment and must call
``unlink`` (the session does, in ``finally`` and on Ctrl-C). Other processes
receive the channel by pickling it (only its name and layout travel) and only
``close`` their mapping. Nothing on a per-tick path pickles or allocates.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

import gymnasium as gym
import numpy as np

from nonstop.realtime.atomics import ACQUIRE, RELAXED, RELEASE, RobustLock, SharedWords, fence, require_atomics

__all__ = [
    "LatestSlot",
    "SharedSegment",
    "SegmentClosedError",
    "Observation",
    "ActionQueue",
    "ActionRecord",
    "TakeResult",
    "ActionCodec",
    "SEGMENT_PREFIX",
    "SeatCounts",
    "TickStamp",
]

#: Every segment nonstop creates starts with this, so leaks are easy to find in /dev/shm.
SEGMENT_PREFIX: Final = "nonstop_"


def _new_segment(nbytes: int, kind: str) -> shared_memory.SharedMemory:
    require_atomics()  # refuse before anything lands in /dev/shm
    name = f"{SEGMENT_PREFIX}{kind}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    return shared_memory.SharedMemory(name=name, create=True, size=max(int(nbytes), 8))


def close_segment(shm: shared_memory.SharedMemory) -> None:
    """Unmap ``shm`` in this process. A view a caller still holds keeps the mapping alive until it
    is dropped; the name can be unlinked all the same."""
    try:
        shm.close()
    except BufferError:
        pass


def remove_segment(shm: shared_memory.SharedMemory) -> None:
    """Remove ``shm``'s name from /dev/shm (the owner's last step); one already gone is fine."""
    try:
        shm.unlink()
    except FileNotFoundError:
        pass


class SegmentClosedError(AttributeError, ValueError):
    """A view of a shared-memory segment used after `SharedSegment.close` unmapped it in this
    process. A ValueError, like I/O on a closed file; an AttributeError too, as the dropped view
    is an attribute that is gone (``hasattr`` says False, ``getattr(x, name, default)`` works)."""


class SharedSegment:
    """One named shared-memory segment and who owns it: the creator (``_owner``) unlinks it,
    every other holder only closes its mapping. Subclasses set ``_shm`` and ``_owner``, name the
    attributes that view the mapping in ``_views`` and release their atomic views (`SharedWords`)
    in ``_release_views``. `close` drops the views (the mapping cannot be unmapped while one is
    held); using one afterwards raises `SegmentClosedError` naming the segment, and `closed` says so."""

    _shm: Any
    _owner: bool
    name: str
    #: the attributes that view the mapping (numpy arrays, memoryviews, `SharedWords`)
    _views: ClassVar[tuple[str, ...]] = ()

    @property
    def closed(self) -> bool:
        """Whether `close` has dropped this process's views of the segment."""
        return not any(name in self.__dict__ for name in self._views)

    def _release_views(self) -> None:
        """Release what must be released before the views are dropped (close `SharedWords`);
        it may find some views missing (an instance whose ``__init__`` failed half-way)."""

    def _drop_views(self) -> None:
        if self.closed:
            return
        self._release_views()
        for name in self._views:
            self.__dict__.pop(name, None)

    if not TYPE_CHECKING:  # at runtime only: to mypy a misspelt attribute stays an error

        def __getattr__(self, name: str) -> Any:
            # reached only when normal lookup fails: a view `close` dropped, a property that used
            # one (Python then retries the property's name here), or no such attribute
            cls = type(self)
            if name in cls._views or (hasattr(cls, name) and self.closed):
                raise SegmentClosedError(
                    f"{cls.__name__} {self.__dict__.get('name', '?')!r} is closed in this process "
                    f"(its views of the mapping are dropped; used: {name})",
                    name=name,
                    obj=self,
                )
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self)

    def close(self) -> None:
        """Unmap this process's views (idempotent). The owner keeps the name for `unlink`."""
        if self._shm is None:
            return
        self._drop_views()
        close_segment(self._shm)
        if not self._owner:
            self._shm = None

    def __del__(self) -> None:
        # A holder dropped without `close`: its atomic views pin the mapping, so release them
        # before SharedMemory's own __del__ tries to unmap (the name stays for the owner's unlink).
        try:
            self.close()
        except Exception:  # interpreter shutdown or a half-built instance
            pass

    def unlink(self) -> None:
        """Owner only: close and remove the segment (idempotent)."""
        shm = self._shm
        self.close()
        if self._owner and shm is not None:
            remove_segment(shm)
            self._shm = None


def _attach(name: str) -> shared_memory.SharedMemory:
    # Children are started with the spawn context and share their parent's
    # resource tracker, so attaching re-registers a name it already holds (a
    # no-op) and only the creator's unlink removes it.
    return shared_memory.SharedMemory(name=name, create=False)


# --------------------------------------------------------------------------- slot

# header words (int64): sequence, then control words shared by host and session
_SEQ, _STOP, _STATE, _RESETS, _HDR_WORDS = 0, 1, 2, 3, 8
#: The meta record written under the seqlock with each observation: one `struct` pack and one
#: unpack per publish/read (~0.1 µs each, against ~1 µs for a dozen numpy element writes). Fields
#: in the order of `Observation`; ints as int64, floats as float64, the two flags as bytes, padded
#: so the record stays a whole number of 8-byte words.
_META: Final = struct.Struct("<qddd??6xqqqqqq")
_META_FIELDS: Final = (
    "tick",
    "time",
    "reward",
    "total_reward",
    "terminated",
    "truncated",
    "episode",
    "inaction_ticks",
    "agent_ticks",
    "last_delay",
    "last_action_seq",
    "last_end",
)
_META_EMPTY: Final = (-1, 0.0, 0.0, 0.0, False, False, 0, 0, 0, -1, -1, 0)
_META_OFF: Final = _HDR_WORDS * 8
_FINAL_META_OFF: Final = _META_OFF + _META.size
_OBS_OFF: Final = _FINAL_META_OFF + _META.size  # 240: aligned for every numpy dtype


class Observation(NamedTuple):
    """One published observation. ``time`` is its tick's deadline on the session
    clock (tick 0: the origin), so readers know the tick grid. ``total_reward`` is cumulative over the whole
    run, so a reader gets "reward since my last read" as a difference and no
    reward is ever lost to a skipped tick. ``seq`` is the slot sequence it was read at.

    A named tuple rather than a dataclass: a reader builds one per read, and a tuple is the
    cheapest immutable record Python has (a few hundred ns against ~2 µs)."""

    obs: np.ndarray
    tick: int
    time: float
    reward: float
    total_reward: float
    terminated: bool
    truncated: bool
    episode: int
    inaction_ticks: int
    agent_ticks: int
    last_delay: int
    last_action_seq: int
    last_end: int
    seq: int


#: builds a named tuple from a ready tuple, skipping the keyword-parsing ``__new__`` (per-call paths)
_new_tuple = tuple.__new__


class TickStamp(NamedTuple):
    """What one publish says about the tick, the same for every seat of the world."""

    tick: int
    time: float
    episode: int
    last_end: int = 0
    terminated: bool = False
    truncated: bool = False
    final: bool = False  # also the final observation (`LatestSlot.read_final`)


class SeatCounts(NamedTuple):
    """What one publish says about one seat: its reward this tick and its counters."""

    reward: float = 0.0
    inaction_ticks: int = 0
    agent_ticks: int = 0
    last_delay: int = -1
    last_action_seq: int = -1


class LatestSlot(SharedSegment):
    """Capacity-one, newest-wins observation slot in shared memory.

    The single writer (the host) bumps the sequence to odd, writes, bumps to
    even; a reader retries while the sequence is odd or changed under it
    (a seqlock with acquire/release atomics and fences, `nonstop.realtime.atomics`),
    so a read is never torn, on any CPU.

    Besides the newest observation the slot keeps the **final** one: the last observation
    published with ``final=True`` (the host marks the observation that ends an episode). The
    world resets at once and overwrites the newest observation within the same tick, so a reader
    that wants the terminal state of an episode (a value bootstrap on truncation) fetches it with
    `read_final`.

    >>> import numpy as np
    >>> slot = LatestSlot.create(np.zeros((2, 2), np.uint8))
    >>> slot.publish(np.full((2, 2), 7, np.uint8), tick=3, time=0.05, reward=1.0)
    >>> got = slot.read()
    >>> (got.tick, int(got.obs.sum()), got.total_reward)
    (3, 28, 1.0)
    >>> slot.unlink()
    """

    _views = ("_hdr", "_seq", "_resets", "_stop", "_buf", "_obs", "_final_obs")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, *, _shm: Any = None) -> None:
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._owner = _shm is not None
        self._shm = _shm if _shm is not None else _attach(name)
        self._map()

    @staticmethod
    def _final_obs_offset(nbytes: int) -> int:
        return _OBS_OFF + -(-nbytes // 64) * 64

    def _map(self) -> None:
        buf = self._shm.buf
        self._buf = buf
        # the header words, atomic (see nonstop.realtime.atomics); the sequence's raw cell is the
        # per-tick path (~20 ns a call; its values are never negative)
        self._hdr = SharedWords(buf, 0, _HDR_WORDS)
        self._seq = self._hdr.cell(_SEQ)
        # the two control words the host polls every tick, raw too (never negative)
        self._resets, self._stop = self._hdr.cell(_RESETS), self._hdr.cell(_STOP)
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._obs = np.ndarray(self.shape, self.dtype, buf, _OBS_OFF)
        self._final_obs = np.ndarray(self.shape, self.dtype, buf, self._final_obs_offset(nbytes))
        self._total_reward = 0.0

    @classmethod
    def create(cls, example: np.ndarray | gym.Space) -> "LatestSlot":
        """Make a slot sized for observations like ``example`` (an array or a Box space)."""
        if isinstance(example, gym.spaces.Box) or isinstance(example, gym.spaces.Discrete):
            example = np.asarray(example.sample())
        arr = np.asarray(example)
        if arr.dtype == object:
            raise TypeError(f"LatestSlot needs a fixed-size numeric observation, got dtype {arr.dtype}")
        nbytes = cls._final_obs_offset(arr.nbytes) + arr.nbytes
        shm = _new_segment(nbytes, "slot")
        slot = cls(shm.name, arr.shape, arr.dtype.str, _shm=shm)
        for i in range(_HDR_WORDS):
            slot._hdr.store(i, 0)
        _META.pack_into(slot._buf, _META_OFF, *_META_EMPTY)
        _META.pack_into(slot._buf, _FINAL_META_OFF, *_META_EMPTY)
        return slot

    def __reduce__(self) -> tuple:
        return (LatestSlot, (self.name, self.shape, self.dtype.str))

    # ---- writer (host only)
    def publish(
        self,
        obs: np.ndarray,
        *,
        tick: int,
        time: float,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        episode: int = 0,
        inaction_ticks: int = 0,
        agent_ticks: int = 0,
        last_delay: int = -1,
        last_action_seq: int = -1,
        last_end: int = 0,
        final: bool = False,
    ) -> None:
        """Publish ``obs`` as the newest observation (and, with ``final=True``, also as the
        final one: see `read_final`). Integers must be ints (Python or numpy)."""
        self.write(
            obs,
            TickStamp(tick, time, episode, last_end, terminated, truncated, final),
            SeatCounts(reward, inaction_ticks, agent_ticks, last_delay, last_action_seq),
        )

    def write(
        self,
        obs: np.ndarray,
        stamp: tuple[int, float, int, int, bool, bool, bool],
        seat: tuple[float, int, int, int, int] | list[Any],
    ) -> None:
        """`publish` with its two records, for the host's per-tick path (no keyword parsing): ``stamp`` holds
        a `TickStamp`'s fields and ``seat`` a `SeatCounts`'s, in their order; the host passes a plain tuple
        and each seat's list of counts, kept in place (a NamedTuple's constructor costs a microsecond a seat a
        tick here)."""
        tick, time, episode, last_end, terminated, truncated, final = stamp
        reward, inaction_ticks, agent_ticks, last_delay, last_action_seq = seat
        self._total_reward = total = self._total_reward + reward
        buf, seq = self._buf, self._seq
        # odd: write in progress. From the word, not +1: a writer killed mid-write left it odd
        odd = seq.load(RELAXED) | 1
        seq.store(odd, RELAXED)
        fence(RELEASE)  # the odd sequence is visible before any byte of the data
        _META.pack_into(
            buf,
            _META_OFF,
            tick,
            time,
            reward,
            total,
            terminated,
            truncated,
            episode,
            inaction_ticks,
            agent_ticks,
            last_delay,
            last_action_seq,
            last_end,
        )
        self._obs[...] = obs
        if final:
            buf[_FINAL_META_OFF : _FINAL_META_OFF + _META.size] = buf[_META_OFF:_FINAL_META_OFF]
            self._final_obs[...] = obs
        seq.store(odd + 1, RELEASE)  # even: consistent, and the data is visible before it

    # ---- readers
    @property
    def seq(self) -> int:
        """Sequence number of the newest complete publish (even), cheap to poll."""
        return self._seq.load(ACQUIRE) & ~1

    def read(self, out: np.ndarray | None = None, *, timeout: float | None = None) -> Observation:
        """Copy the newest observation. Never torn; never blocks the writer. A reader that must not
        wait on a writer stopped mid-write (a server's request loop) passes ``timeout`` (seconds):
        past it, `TimeoutError` instead of more retries."""
        return self._read(self._obs, _META_OFF, out, timeout)

    def read_final(self, out: np.ndarray | None = None) -> Observation:
        """Copy the final observation: the last one published with ``final=True`` (the host
        publishes the observation that ends an episode so), tick -1 if none yet. Never torn."""
        return self._read(self._final_obs, _FINAL_META_OFF, out)

    def _read(
        self, src: np.ndarray, meta_off: int, out: np.ndarray | None, timeout: float | None = None
    ) -> Observation:
        load, buf, unpack = self._seq.load, self._buf, _META.unpack_from
        spins = 0
        give_up = None if timeout is None else time.perf_counter() + timeout
        while True:
            s1 = load(ACQUIRE)
            if not s1 & 1:
                meta = unpack(buf, meta_off)
                if out is None:
                    obs = src.copy()
                else:
                    np.copyto(out, src)
                    obs = out
                fence(ACQUIRE)  # the copy is complete before the sequence is checked again
                if load(RELAXED) == s1:
                    return _new_tuple(Observation, (obs, *meta, s1))
            spins += 1
            if spins > 64:
                if give_up is not None and time.perf_counter() > give_up:
                    raise TimeoutError(f"no consistent observation within {timeout:g}s: its writer stopped mid-write")
                time.sleep(0)

    # ---- control words (session <-> host)
    def request_stop(self) -> None:
        self._hdr.store(_STOP, 1)

    def request_reset(self) -> None:
        """Ask the host to end the current episode at its next tick (Gymnasium ``reset``)."""
        self._hdr.fetch_add(_RESETS, 1)  # any number of requesters: none is lost

    @property
    def reset_requests(self) -> int:
        return self._resets.load(ACQUIRE)

    @property
    def stop_requested(self) -> bool:
        return bool(self._stop.load(ACQUIRE))

    def control_polls(self) -> tuple[Callable[[int], int], Callable[[int], int]]:
        """The host's per-tick polls of the two control words, bound once: ``(stop, resets)``, each
        called with a memory order (``ACQUIRE``) for `stop_requested` (non-zero: stop) and
        `reset_requests`, without a property call a tick."""
        return self._stop.load, self._resets.load

    @property
    def host_state(self) -> int:
        return self._hdr.load(_STATE)

    @host_state.setter
    def host_state(self, value: int) -> None:
        self._hdr.store(_STATE, value)

    def _release_views(self) -> None:
        if "_hdr" in self.__dict__:
            self._hdr.close()


# --------------------------------------------------------------------------- actions


class ActionCodec:
    """Validates actions against a Gymnasium space and packs them into a fixed
    number of 8-byte words for the queue (``fmt``, a `struct` format: one int64
    for Discrete, float64s for the others). Discrete, MultiDiscrete, MultiBinary
    and Box spaces are supported."""

    def __init__(self, space: gym.Space) -> None:
        if isinstance(space, gym.spaces.Discrete):
            self.width = 1
        elif isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
            self.width = int(np.prod(space.shape))
        else:
            raise TypeError(f"nonstop supports Discrete, MultiDiscrete, MultiBinary and Box action spaces, got {space}")
        self.space = space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.fmt = "q" if self.discrete else f"{self.width}d"
        if isinstance(space, gym.spaces.Discrete):
            self._lo, self._hi = int(space.start), int(space.start) + int(space.n)

    def validate(self, action: Any) -> Any:
        """Return the action in canonical form or raise ValueError naming the space."""
        space = self.space
        if self.discrete:
            if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
                if isinstance(action, np.ndarray) and action.shape == () and np.issubdtype(action.dtype, np.integer):
                    action = int(action)
                else:
                    raise ValueError(f"action {action!r} is not an integer in {space}")
            if not self._lo <= action < self._hi:
                raise ValueError(f"action {action!r} is outside the action space {space}")
            return int(action)
        try:
            arr = np.asarray(action)
            if not isinstance(space, gym.spaces.Box) and not (
                np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)
            ):
                raise ValueError("not integers")
            arr = arr.astype(space.dtype)
        except (TypeError, ValueError):
            raise ValueError(f"action {action!r} is outside the action space {space}") from None
        if arr.shape != space.shape or not space.contains(arr):
            raise ValueError(f"action {action!r} is outside the action space {space}")
        return arr

    def words(self, action: Any) -> tuple:
        """A validated action as the values of ``fmt``."""
        if self.discrete:
            return (action,)
        return tuple(np.asarray(action, dtype=np.float64).ravel().tolist())

    def decode(self, words: tuple | np.ndarray) -> Any:
        """The action back from the values of ``fmt``: an int for Discrete, else an array of the space."""
        if self.discrete:
            return int(words[0])
        return np.asarray(words[: self.width], dtype=np.float64).astype(self.space.dtype).reshape(self.space.shape)


class ActionRecord(NamedTuple):
    """An agent action as the host receives it (a named tuple: the host builds one per action)."""

    action: Any
    obs_tick: int
    episode: int
    worker: int
    tau_theta: float
    submit_time: float
    seq: int


class TakeResult(NamedTuple):
    """What the host got from the queue at one tick, with what it discarded."""

    record: ActionRecord | None
    superseded: int
    stale: int


# header words (int64, atomic): write and read sequences, submit-side counters, the lock word
_W_SEQ, _R_SEQ, _SUBMITTED, _DROPPED_FULL, _REJECTED, _LOCK, _QHDR = 0, 1, 2, 3, 4, 5, 8
#: an entry: obs_tick, episode, worker (int64), tau_theta, submit_time (float64), seq (int64), then
#: the codec's action words; packed and unpacked with one `struct` call each
_ENTRY_FIXED: Final = "<qqqddq"
_EPISODE_WORD: Final = struct.Struct("<q")  # the entry's episode, at byte 8: scanned for staleness
_SEQ_WORD: Final = struct.Struct("<q")  # the entry's sequence number, at byte 40: set under the lock

QUEUE_MODES: Final = ("latest", "fifo")


class ActionQueue(SharedSegment):
    """Bounded action queue in shared memory; many submitters, one taker (the host).

    ``submit`` never blocks: when the queue is full the oldest pending action is
    dropped (counted as ``dropped_full``). ``take`` is called once per tick: in
    ``latest`` mode it returns the newest pending action and counts the older
    ones as superseded; in ``fifo`` mode it returns the oldest. Actions computed
    in an earlier episode are discarded as stale. Invalid actions are rejected
    at ``submit`` with a ValueError and counted; the host never sees them.

    The ring is guarded by a `RobustLock` in the segment's header: a submitter killed while it
    holds the lock (a few microseconds) cannot freeze the host, whose next ``take`` steals it. A
    dead submitter's half-written entry is never seen: the write sequence is stored last.

    >>> import gymnasium as gym
    >>> q = ActionQueue.create(gym.spaces.Discrete(4), mode="latest")
    >>> for a in (1, 2, 3):
    ...     _ = q.submit(a, obs_tick=0, episode=0)
    >>> got = q.take(episode=0)
    >>> (got.record.action, got.superseded)
    (3, 2)
    >>> q.unlink()
    """

    _views = ("_hdr", "_w_seq", "_r_seq", "_submitted", "_dropped_full", "_buf")

    def __init__(
        self,
        name: str,
        space: gym.Space,
        capacity: int,
        mode: str,
        *,
        _shm: Any = None,
    ) -> None:
        self.name = name
        self.space = space
        self.codec = ActionCodec(space)
        self.capacity = capacity
        self.mode = mode
        self._owner = _shm is not None
        self._shm = _shm if _shm is not None else _attach(name)
        self._entry = struct.Struct(_ENTRY_FIXED + self.codec.fmt)
        self._buf = self._shm.buf
        # the header words, atomic (nonstop.realtime.atomics); the sequences never go negative, so
        # their raw cells serve the per-tick path
        self._hdr = SharedWords(self._buf, 0, _QHDR)
        self._w_seq, self._r_seq = self._hdr.cell(_W_SEQ), self._hdr.cell(_R_SEQ)
        self._submitted, self._dropped_full = self._hdr.cell(_SUBMITTED), self._hdr.cell(_DROPPED_FULL)
        self._lock = RobustLock(self._hdr, _LOCK)

    @classmethod
    def create(cls, space: gym.Space, *, capacity: int = 16, mode: str = "latest") -> "ActionQueue":
        if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"queue capacity must be a positive integer, got {capacity!r}")
        if mode not in QUEUE_MODES:
            raise ValueError(f"queue mode must be one of {QUEUE_MODES}, got {mode!r}")
        codec = ActionCodec(space)
        nbytes = _QHDR * 8 + int(capacity) * struct.calcsize(_ENTRY_FIXED + codec.fmt)
        shm = _new_segment(nbytes, "queue")
        q = cls(shm.name, space, int(capacity), mode, _shm=shm)
        for i in range(_QHDR):
            q._hdr.store(i, 0)
        return q

    def __reduce__(self) -> tuple:
        return (ActionQueue, (self.name, self.space, self.capacity, self.mode))

    def _offset(self, s: int) -> int:
        return _QHDR * 8 + (s % self.capacity) * self._entry.size

    # ---- submitters
    def submit(
        self,
        action: Any,
        *,
        obs_tick: int,
        episode: int,
        worker: int = 0,
        tau_theta: float = 0.0,
        submit_time: float = 0.0,
        lock_timeout: float | None = None,
    ) -> int:
        """Enqueue an action; returns its sequence number. Never blocks (beyond a
        microsecond lock). Raises ValueError for an action outside the space.

        ``lock_timeout`` (seconds; 0: one non-blocking try) bounds the wait for the lock, for a
        submitter that must not wait on a taker stopped while holding it (a server's request
        loop): past it, `TimeoutError` and nothing is enqueued."""
        codec = self.codec
        try:
            action = codec.validate(action)
        except ValueError:
            self._hdr.fetch_add(_REJECTED, 1)
            raise
        try:  # packed before the lock: a bad argument must not leave half an entry in the ring
            entry = self._entry.pack(obs_tick, episode, worker, tau_theta, submit_time, 0, *codec.words(action))
        except struct.error as exc:
            raise TypeError(
                f"submit needs integer obs_tick, episode and worker and real tau_theta and submit_time, got "
                f"{obs_tick!r}, {episode!r}, {worker!r}, {tau_theta!r}, {submit_time!r} ({exc})"
            ) from None
        if not self._acquire(lock_timeout):
            raise TimeoutError(f"the action queue's lock was held for more than {lock_timeout:g}s (its taker stopped?)")
        try:  # the lock orders everything inside; the atomics keep lock-free readers exact
            w_seq, r_seq = self._w_seq, self._r_seq
            w = w_seq.load(RELAXED)
            r = r_seq.load(RELAXED)
            if w - r >= self.capacity:
                r_seq.store(r + 1, RELAXED)
                self._dropped_full.fetch_add(1, RELAXED)
            off = self._offset(w)
            self._buf[off : off + len(entry)] = entry
            _SEQ_WORD.pack_into(self._buf, off + 40, w)
            w_seq.store(w + 1, RELEASE)  # last: a submitter killed before it leaves no half entry
            self._submitted.fetch_add(1, RELAXED)
        finally:
            self._lock.release()
        return w

    def _acquire(self, timeout: float | None) -> bool:
        return self._lock.acquire(timeout=timeout)

    # ---- the host
    def pending(self) -> int:
        return self._w_seq.load(ACQUIRE) - self._r_seq.load(ACQUIRE)

    def pending_polls(self) -> tuple[Callable[[int], int], Callable[[int], int]]:
        """The loads of the write and read sequences, bound once: ``w(ACQUIRE) == r(RELAXED)`` is `take`'s
        own test for nothing pending (its answer then `TakeResult` ``(None, 0, 0)``), which the host makes
        before it calls `take`, saving a call a seat on every tick with no action waiting."""
        return self._w_seq.load, self._r_seq.load

    def take(self, *, episode: int) -> TakeResult:
        """Called by the host once per tick."""
        w_seq, r_seq = self._w_seq, self._r_seq
        if w_seq.load(ACQUIRE) == r_seq.load(RELAXED):  # fast path without the lock: nothing pending
            return _NOTHING
        superseded = stale = 0
        chosen: tuple | None = None
        buf, offset, entry_episode = self._buf, self._offset, _EPISODE_WORD.unpack_from
        with self._lock:
            w, r = w_seq.load(RELAXED), r_seq.load(RELAXED)
            if self.mode == "latest":
                # newest non-stale wins; everything older is superseded or stale
                for s in range(w - 1, r - 1, -1):
                    if entry_episode(buf, offset(s) + 8)[0] != episode:
                        stale += 1
                    elif chosen is None:
                        chosen = self._entry.unpack_from(buf, offset(s))
                    else:
                        superseded += 1
                r_seq.store(w, RELEASE)
            else:
                while r < w:
                    s, r = r, r + 1
                    if entry_episode(buf, offset(s) + 8)[0] != episode:
                        stale += 1
                        continue
                    chosen = self._entry.unpack_from(buf, offset(s))
                    break
                r_seq.store(r, RELEASE)
        if chosen is None:
            return TakeResult(None, superseded, stale)
        record = _new_tuple(ActionRecord, (self.codec.decode(chosen[6:]), *chosen[:6]))
        return TakeResult(record, superseded, stale)

    def counters(self) -> dict[str, int]:
        """Submit-side counters (the host's counts live in the tick log)."""
        hdr = self._hdr
        return {
            "submitted": hdr.load(_SUBMITTED),
            "dropped_full": hdr.load(_DROPPED_FULL),
            "rejected": hdr.load(_REJECTED),
            "pending": self.pending(),
        }

    @property
    def lock_steals(self) -> int:
        """How often this process took the queue's lock from a holder that had died."""
        return self._lock.steals

    def _release_views(self) -> None:
        if "_hdr" in self.__dict__:
            self._hdr.close()


_NOTHING: Final = TakeResult(None, 0, 0)
