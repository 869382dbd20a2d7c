"""Shared-memory channels between the host and its agents (DESIGN §1.3-1.4).

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

import multiprocessing as mp
import os
import time
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Final

import gymnasium as gym
import numpy as np

__all__ = [
    "LatestSlot",
    "Observation",
    "ActionQueue",
    "ActionRecord",
    "TakeResult",
    "ActionCodec",
    "SEGMENT_PREFIX",
]

#: Every segment nonstop creates starts with this, so leaks are easy to find in /dev/shm.
SEGMENT_PREFIX: Final = "nonstop_"


def _new_segment(nbytes: int, kind: str) -> shared_memory.SharedMemory:
    name = f"{SEGMENT_PREFIX}{kind}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    return shared_memory.SharedMemory(name=name, create=True, size=max(int(nbytes), 8))


def _attach(name: str) -> shared_memory.SharedMemory:
    # Children are started with the spawn context and share their parent's
    # resource tracker, so attaching re-registers a name it already holds (a
    # no-op) and only the creator's unlink removes it.
    return shared_memory.SharedMemory(name=name, create=False)


# --------------------------------------------------------------------------- slot

# header words (int64): sequence, then control words shared by host and session
_SEQ, _STOP, _STATE, _RESETS, _HDR_WORDS = 0, 1, 2, 3, 8
# meta words (float64), written under the seqlock together with the observation
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
_M = {name: i for i, name in enumerate(_META_FIELDS)}


@dataclass(frozen=True, slots=True)
class Observation:
    """One published observation. ``time`` is its tick's deadline on the session
    clock (tick 0: the origin), so readers know the tick grid. ``total_reward`` is cumulative over the whole
    run, so a reader gets "reward since my last read" as a difference and no
    reward is ever lost to a skipped tick."""

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


class LatestSlot:
    """Capacity-one, newest-wins observation slot in shared memory.

    The single writer (the host) bumps the sequence to odd, writes, bumps to
    even; a reader retries while the sequence is odd or changed under it
    (a seqlock), so a read is never torn.

    >>> import numpy as np
    >>> slot = LatestSlot.create(np.zeros((2, 2), np.uint8))
    >>> slot.publish(np.full((2, 2), 7, np.uint8), tick=3, time=0.05, reward=1.0)
    >>> got = slot.read()
    >>> (got.tick, int(got.obs.sum()), got.total_reward)
    (3, 28, 1.0)
    >>> slot.unlink()
    """

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, *, _shm: Any = None) -> None:
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._owner = _shm is not None
        self._shm = _shm if _shm is not None else _attach(name)
        self._map()

    def _map(self) -> None:
        buf = self._shm.buf
        self._hdr = np.ndarray((_HDR_WORDS,), np.int64, buf, 0)
        self._meta = np.ndarray((len(_META_FIELDS),), np.float64, buf, _HDR_WORDS * 8)
        off = (_HDR_WORDS + len(_META_FIELDS)) * 8
        self._obs = np.ndarray(self.shape, self.dtype, buf, off)
        self._staging = np.empty(len(_META_FIELDS), np.float64)
        self._total_reward = 0.0

    @classmethod
    def create(cls, example: np.ndarray | gym.Space) -> "LatestSlot":
        """Make a slot sized for observations like ``example`` (an array or a Box space)."""
        if isinstance(example, gym.spaces.Box) or isinstance(example, gym.spaces.Discrete):
            example = np.asarray(example.sample())
        arr = np.asarray(example)
        if arr.dtype == object:
            raise TypeError(f"LatestSlot needs a fixed-size numeric observation, got dtype {arr.dtype}")
        nbytes = (_HDR_WORDS + len(_META_FIELDS)) * 8 + arr.nbytes
        shm = _new_segment(nbytes, "slot")
        slot = cls(shm.name, arr.shape, arr.dtype.str, _shm=shm)
        slot._hdr[:] = 0
        slot._meta[:] = 0
        slot._meta[_M["tick"]] = -1
        slot._meta[_M["last_delay"]] = -1
        slot._meta[_M["last_action_seq"]] = -1
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
    ) -> None:
        self._total_reward += reward
        m = self._staging
        m[0] = tick
        m[1] = time
        m[2] = reward
        m[3] = self._total_reward
        m[4] = terminated
        m[5] = truncated
        m[6] = episode
        m[7] = inaction_ticks
        m[8] = agent_ticks
        m[9] = last_delay
        m[10] = last_action_seq
        m[11] = last_end
        hdr = self._hdr
        hdr[_SEQ] += 1  # odd: write in progress
        self._meta[:] = m
        self._obs[...] = obs
        hdr[_SEQ] += 1  # even: consistent

    # ---- readers
    @property
    def seq(self) -> int:
        """Sequence number of the newest complete publish (even), cheap to poll."""
        return int(self._hdr[_SEQ]) & ~1

    def read(self, out: np.ndarray | None = None) -> Observation:
        """Copy the newest observation. Never torn; never blocks the writer."""
        hdr, meta, src = self._hdr, self._meta, self._obs
        spins = 0
        while True:
            s1 = int(hdr[_SEQ])
            if s1 & 1 == 0:
                m = meta.copy()
                if out is None:
                    obs = src.copy()
                else:
                    np.copyto(out, src)
                    obs = out
                if int(hdr[_SEQ]) == s1:
                    break
            spins += 1
            if spins > 64:
                time.sleep(0)
        return Observation(
            obs=obs,
            tick=int(m[0]),
            time=float(m[1]),
            reward=float(m[2]),
            total_reward=float(m[3]),
            terminated=bool(m[4]),
            truncated=bool(m[5]),
            episode=int(m[6]),
            inaction_ticks=int(m[7]),
            agent_ticks=int(m[8]),
            last_delay=int(m[9]),
            last_action_seq=int(m[10]),
            last_end=int(m[11]),
            seq=s1,
        )

    # ---- control words (session <-> host)
    def request_stop(self) -> None:
        self._hdr[_STOP] = 1

    def request_reset(self) -> None:
        """Ask the host to end the current episode at its next tick (Gymnasium ``reset``)."""
        self._hdr[_RESETS] += 1

    @property
    def reset_requests(self) -> int:
        return int(self._hdr[_RESETS])

    @property
    def stop_requested(self) -> bool:
        return bool(self._hdr[_STOP])

    @property
    def host_state(self) -> int:
        return int(self._hdr[_STATE])

    @host_state.setter
    def host_state(self, value: int) -> None:
        self._hdr[_STATE] = value

    def close(self) -> None:
        if self._shm is not None:
            self._hdr = self._meta = self._obs = None  # type: ignore[assignment]
            try:
                self._shm.close()
            except BufferError:  # a caller still holds a view; the unlink below still frees the name
                pass
            if not self._owner:
                self._shm = None

    def unlink(self) -> None:
        """Owner only: close and remove the segment (idempotent)."""
        shm = self._shm
        self.close()
        if self._owner and shm is not None:
            try:
                shm.unlink()
            except FileNotFoundError:
                pass
            self._shm = None


# --------------------------------------------------------------------------- actions


class ActionCodec:
    """Validates actions against a Gymnasium space and packs them into a fixed
    number of float64 words for the queue. Discrete, MultiDiscrete,
    MultiBinary and Box spaces are supported."""

    def __init__(self, space: gym.Space) -> None:
        if isinstance(space, gym.spaces.Discrete):
            self.width = 1
        elif isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
            self.width = int(np.prod(space.shape))
        else:
            raise TypeError(
                f"nonstop supports Discrete, MultiDiscrete, MultiBinary and Box action spaces, got {space}"
            )
        self.space = space
        if isinstance(space, gym.spaces.Discrete):
            self._lo, self._hi = int(space.start), int(space.start) + int(space.n)

    def validate(self, action: Any) -> Any:
        """Return the action in canonical form or raise ValueError naming the space."""
        space = self.space
        if isinstance(space, gym.spaces.Discrete):
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

    def encode(self, action: Any, out: np.ndarray) -> None:
        if self.width == 1 and isinstance(self.space, gym.spaces.Discrete):
            out[0] = action
        else:
            out[: self.width] = np.asarray(action, dtype=np.float64).ravel()

    def decode(self, words: np.ndarray) -> Any:
        if isinstance(self.space, gym.spaces.Discrete):
            return int(words[0])
        return words[: self.width].astype(self.space.dtype).reshape(self.space.shape)


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """An agent action as the host receives it."""

    action: Any
    obs_tick: int
    episode: int
    worker: int
    tau_theta: float
    submit_time: float
    seq: int


@dataclass(frozen=True, slots=True)
class TakeResult:
    """What the host got from the queue at one tick, with what it discarded."""

    record: ActionRecord | None
    superseded: int
    stale: int


# header words (int64)
_W_SEQ, _R_SEQ, _SUBMITTED, _DROPPED_FULL, _REJECTED, _QHDR = 0, 1, 2, 3, 4, 8
# fixed entry words (float64) before the action words
_E_OBS_TICK, _E_EPISODE, _E_WORKER, _E_TAU, _E_TIME, _E_SEQ, _E_FIXED = 0, 1, 2, 3, 4, 5, 6

QUEUE_MODES: Final = ("latest", "fifo")


class ActionQueue:
    """Bounded action queue in shared memory; many submitters, one taker (the host).

    ``submit`` never blocks: when the queue is full the oldest pending action is
    dropped (counted as ``dropped_full``). ``take`` is called once per tick: in
    ``latest`` mode it returns the newest pending action and counts the older
    ones as superseded; in ``fifo`` mode it returns the oldest. Actions computed
    in an earlier episode are discarded as stale. Invalid actions are rejected
    at ``submit`` with a ValueError and counted; the host never sees them.

    >>> import gymnasium as gym
    >>> q = ActionQueue.create(gym.spaces.Discrete(4), mode="latest")
    >>> for a in (1, 2, 3):
    ...     _ = q.submit(a, obs_tick=0, episode=0)
    >>> got = q.take(episode=0)
    >>> (got.record.action, got.superseded)
    (3, 2)
    >>> q.unlink()
    """

    def __init__(
        self,
        name: str,
        space: gym.Space,
        capacity: int,
        mode: str,
        lock: Any,
        *,
        _shm: Any = None,
    ) -> None:
        self.name = name
        self.space = space
        self.codec = ActionCodec(space)
        self.capacity = capacity
        self.mode = mode
        self._lock = lock
        self._owner = _shm is not None
        self._shm = _shm if _shm is not None else _attach(name)
        self._row = _E_FIXED + self.codec.width
        buf = self._shm.buf
        self._hdr = np.ndarray((_QHDR,), np.int64, buf, 0)
        self._entries = np.ndarray((capacity, self._row), np.float64, buf, _QHDR * 8)

    @classmethod
    def create(cls, space: gym.Space, *, capacity: int = 16, mode: str = "latest", ctx: Any = None) -> "ActionQueue":
        if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"queue capacity must be a positive integer, got {capacity!r}")
        if mode not in QUEUE_MODES:
            raise ValueError(f"queue mode must be one of {QUEUE_MODES}, got {mode!r}")
        codec = ActionCodec(space)
        nbytes = _QHDR * 8 + int(capacity) * (_E_FIXED + codec.width) * 8
        shm = _new_segment(nbytes, "queue")
        lock = (ctx or mp.get_context("spawn")).Lock()
        q = cls(shm.name, space, int(capacity), mode, lock, _shm=shm)
        q._hdr[:] = 0
        return q

    def __reduce__(self) -> tuple:
        return (ActionQueue, (self.name, self.space, self.capacity, self.mode, self._lock))

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
    ) -> int:
        """Enqueue an action; returns its sequence number. Never blocks (beyond a
        microsecond lock). Raises ValueError for an action outside the space."""
        try:
            action = self.codec.validate(action)
        except ValueError:
            with self._lock:
                self._hdr[_REJECTED] += 1
            raise
        with self._lock:
            hdr = self._hdr
            w = int(hdr[_W_SEQ])
            if w - int(hdr[_R_SEQ]) >= self.capacity:
                hdr[_R_SEQ] += 1
                hdr[_DROPPED_FULL] += 1
            row = self._entries[w % self.capacity]
            row[_E_OBS_TICK] = obs_tick
            row[_E_EPISODE] = episode
            row[_E_WORKER] = worker
            row[_E_TAU] = tau_theta
            row[_E_TIME] = submit_time
            row[_E_SEQ] = w
            self.codec.encode(action, row[_E_FIXED:])
            hdr[_W_SEQ] = w + 1
            hdr[_SUBMITTED] += 1
        return w

    # ---- the host
    def pending(self) -> int:
        return int(self._hdr[_W_SEQ]) - int(self._hdr[_R_SEQ])

    def take(self, *, episode: int) -> TakeResult:
        """Called by the host once per tick."""
        hdr = self._hdr
        if hdr[_W_SEQ] == hdr[_R_SEQ]:  # fast path without the lock: nothing pending
            return _NOTHING
        superseded = stale = 0
        chosen: np.ndarray | None = None
        with self._lock:
            w, r = int(hdr[_W_SEQ]), int(hdr[_R_SEQ])
            if self.mode == "latest":
                # newest non-stale wins; everything older is superseded or stale
                for s in range(w - 1, r - 1, -1):
                    row = self._entries[s % self.capacity]
                    if int(row[_E_EPISODE]) != episode:
                        stale += 1
                    elif chosen is None:
                        chosen = row.copy()
                    else:
                        superseded += 1
                hdr[_R_SEQ] = w
            else:
                while r < w:
                    row = self._entries[r % self.capacity]
                    r += 1
                    if int(row[_E_EPISODE]) != episode:
                        stale += 1
                        continue
                    chosen = row.copy()
                    break
                hdr[_R_SEQ] = r
        record = None
        if chosen is not None:
            record = ActionRecord(
                action=self.codec.decode(chosen[_E_FIXED:]),
                obs_tick=int(chosen[_E_OBS_TICK]),
                episode=int(chosen[_E_EPISODE]),
                worker=int(chosen[_E_WORKER]),
                tau_theta=float(chosen[_E_TAU]),
                submit_time=float(chosen[_E_TIME]),
                seq=int(chosen[_E_SEQ]),
            )
        return TakeResult(record, superseded, stale)

    def counters(self) -> dict[str, int]:
        """Submit-side counters (the host's counts live in the tick log)."""
        hdr = self._hdr
        return {
            "submitted": int(hdr[_SUBMITTED]),
            "dropped_full": int(hdr[_DROPPED_FULL]),
            "rejected": int(hdr[_REJECTED]),
            "pending": int(hdr[_W_SEQ] - hdr[_R_SEQ]),
        }

    def close(self) -> None:
        if self._shm is not None:
            self._hdr = self._entries = None  # type: ignore[assignment]
            try:
                self._shm.close()
            except BufferError:
                pass
            if not self._owner:
                self._shm = None

    def unlink(self) -> None:
        shm = self._shm
        self.close()
        if self._owner and shm is not None:
            try:
                shm.unlink()
            except FileNotFoundError:
                pass
            self._shm = None


_NOTHING: Final = TakeResult(None, 0, 0)
