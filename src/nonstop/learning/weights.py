"""Model weights in shared memory (docs/design.md §3).

Two stores, both flat ``float32`` vectors of a model's parameters:

* `SharedWeights` — what inference workers read. Learners *publish* a whole
  parameter vector; a reader copies the newest complete one. It is a double
  buffer with two counters: ``begun`` (a publish has started writing buffer
  ``begun % 2``) and ``done`` (version ``done`` is complete in buffer
  ``done % 2``). A reader copies buffer ``done % 2`` and keeps the copy only if
  no later publish began writing into that same buffer meanwhile
  (``begun <= done + 1``), so no worker ever loads a half-written model. The
  counters are acquire/release atomics with fences between them and the copy
  (the protocol is in `nonstop.realtime.atomics`), and publishers take a
  `RobustLock` in the header, so any number of learners may publish and one
  killed mid-publish cannot stop the others. The header also carries the
  algorithm's exploration figure the trainer sets (``exploration``: DQN's ε,
  which its workers read; SAC's α, for the progress line).
* `TrainingState` — what learners update: the master parameters, Adam's two
  moment vectors, the target network's parameters (a seqlock: `write_target`,
  `read_target_into`) and the atomic counters that order updates (``updates``,
  claimed by fetch-add so no Hogwild update is lost; ``turn``). One segment;
  learners attach by pickling it.

Ownership: the trainer creates both and must ``unlink`` them; everyone else
only ``close``s.

>>> w = SharedWeights.create(3)
>>> w.publish(np.array([1.0, 2.0, 3.0], np.float32))
1
>>> out = np.zeros(3, np.float32); w.read_into(out), out.tolist()
(1, [1.0, 2.0, 3.0])
>>> w.unlink()
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, ClassVar, Final

import numpy as np

from nonstop.realtime.atomics import (
    ACQUIRE,
    RELAXED,
    RELEASE,
    RobustLock,
    SharedWords,
    fence,
    futex_wait,
    futex_wake,
)
from nonstop.realtime.channels import SharedSegment, _attach, _new_segment

if TYPE_CHECKING:
    import torch

__all__ = ["SharedWeights", "TrainingState", "flat_parameters", "load_flat"]

_BEGUN, _DONE, _EPS, _PUBLISH_LOCK, _HDR = 0, 1, 2, 3, 8  # header words (int64; word 2 holds a float64)
#: byte offset of an int64 header word's low 32 bits within it: the futex word its waiters sleep on
_LOW_HALF: Final = 0 if sys.byteorder == "little" else 4


def flat_parameters(model: "torch.nn.Module") -> np.ndarray:
    """All parameters of ``model`` as one new float32 vector (in ``model.parameters()`` order)."""
    import torch

    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().cpu().numpy().astype(np.float32)


def load_flat(model: "torch.nn.Module", flat: np.ndarray) -> None:
    """Copy a flat vector from `flat_parameters` into ``model``'s parameters.

    A copy, never a view: the caller's buffer is reused for the next version (and
    a learner loads its online and target networks through the same buffer).
    """
    import torch

    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    if flat.shape != (n,):
        raise ValueError(f"weights hold {flat.shape[0]} numbers but the model has {n} parameters")
    source = torch.from_numpy(flat)
    with torch.no_grad():
        offset = 0
        for p in params:
            p.copy_(source[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


class _Segment(SharedSegment):
    """A named shared-memory segment holding an int64 header (atomic words, `SharedWords`; the
    float64 view ``_hdr_f`` of the same words holds plain numbers) and float32 vectors of
    ``n_params`` numbers each, laid out in the order of ``_vectors`` (a subclass names them there
    and declares each as an ``np.ndarray`` attribute)."""

    _kind = "segment"
    _vectors: ClassVar[tuple[str, ...]] = ()
    _hdr: SharedWords
    _hdr_f: np.ndarray

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._views = ("_hdr", "_hdr_f", *cls._vectors)  # what close() drops

    def __init__(self, name: str, n_params: int, *, _shm: Any = None) -> None:
        self.name, self.n_params = name, int(n_params)
        self._shm = _shm if _shm is not None else _attach(name)
        self._owner = _shm is not None
        buf = self._shm.buf
        self._hdr = SharedWords(buf, 0, _HDR)
        self._hdr_f = np.ndarray((_HDR,), np.float64, buf, 0)
        off = _HDR * 8
        for vec in self._vectors:
            setattr(self, vec, np.ndarray((self.n_params,), np.float32, buf, off))
            off += self.n_params * 4
        #: where header word 0's low half lives in this process's mapping (`_wait_word`, `_wake_word`)
        self._futex_base = self._hdr_f.ctypes.data + _LOW_HALF

    @classmethod
    def create(cls, n_params: int) -> Any:
        if not isinstance(n_params, (int, np.integer)) or n_params < 1:
            raise ValueError(f"n_params must be a positive integer, got {n_params!r}")
        shm = _new_segment(_HDR * 8 + len(cls._vectors) * int(n_params) * 4, cls._kind)
        seg = cls(shm.name, int(n_params), _shm=shm)
        for i in range(_HDR):
            seg._hdr.store(i, 0)
        return seg

    def __reduce__(self) -> tuple:
        return (type(self), (self.name, self.n_params))

    def _release_views(self) -> None:
        if "_hdr" in self.__dict__:
            self._hdr.close()

    def _wait_word(self, i: int, seen: int, timeout: float) -> None:
        """Sleep while header word ``i`` still holds ``seen`` (its low 32 bits, which the kernel re-checks:
        a store made after the caller read ``seen`` is not missed), until its writer's `_wake_word` or
        ``timeout`` seconds. It may return early: callers re-check what they wait for."""
        futex_wait(self._futex_base + 8 * i, seen, timeout)

    def _wake_word(self, i: int) -> None:
        """Wake every process sleeping in `_wait_word` on header word ``i`` (its writer, after the store);
        nothing once this process has closed the segment."""
        if not self.closed:
            futex_wake(self._futex_base + 8 * i)


class SharedWeights(_Segment):
    """The published model for inference workers (see the module docstring)."""

    _kind = "weights"
    _vectors = ("_buf0", "_buf1")
    _buf0: np.ndarray  # the double buffer: version v lives in half v % 2
    _buf1: np.ndarray

    def __init__(self, name: str, n_params: int, *, _shm: Any = None) -> None:
        super().__init__(name, n_params, _shm=_shm)
        self._lock = RobustLock(self._hdr, _PUBLISH_LOCK)

    @property
    def version(self) -> int:
        """Number of complete publishes so far (0: nothing published yet)."""
        return self._hdr.load(_DONE)

    @property
    def exploration(self) -> float:
        """The algorithm's exploration figure (`nonstop.learning.algos.Algorithm.exploration`)."""
        return float(self._hdr_f[_EPS])

    @exploration.setter
    def exploration(self, value: float) -> None:
        self._hdr_f[_EPS] = value

    @property
    def epsilon(self) -> float:
        """DQN's name for `exploration`: the ε its workers explore with."""
        return float(self._hdr_f[_EPS])

    @epsilon.setter
    def epsilon(self, value: float) -> None:
        self._hdr_f[_EPS] = value

    def publish(self, flat: np.ndarray) -> int:
        """Write a full parameter vector; returns its version. Any number of publishers: they take
        turns through the header's lock (stolen from one that died mid-publish)."""
        hdr = self._hdr
        with self._lock:
            version = hdr.load(_DONE, RELAXED) + 1
            hdr.store(_BEGUN, version, RELAXED)
            fence(RELEASE)  # readers see ``begun`` move before any byte of the buffer changes
            (self._buf0 if version % 2 == 0 else self._buf1)[:] = flat
            hdr.store(_DONE, version, RELEASE)
        return version

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """The double buffer's two halves (version v lives in half ``v % 2``), for readers that
        compute from the shared memory in place (`nonstop.distributed.shared_params`); such a reader
        checks `intact` after using version v."""
        return self._buf0, self._buf1

    def intact(self, version: int) -> bool:
        """Whether the half holding ``version`` is still unchanged: no later publish has begun
        overwriting it. Call it after reading that half (the fence orders the reads before it)."""
        fence(ACQUIRE)
        return self._hdr.load(_BEGUN, RELAXED) <= version + 1

    def read_into(self, out: np.ndarray, *, timeout: float = 5.0) -> int:
        """Copy the newest complete version into ``out``; returns its version (0: none yet)."""
        deadline, hdr = None, self._hdr
        while True:
            version = hdr.load(_DONE, ACQUIRE)
            if version == 0:
                return 0
            out[:] = self._buf0 if version % 2 == 0 else self._buf1
            fence(ACQUIRE)  # the copy is complete before ``begun`` is checked
            if hdr.load(_BEGUN, RELAXED) <= version + 1:
                return version
            # two publishes overtook this copy: try again (rare: a publish is one memcpy)
            now = time.monotonic()
            deadline = deadline or now + timeout
            if now > deadline:
                raise TimeoutError("weights are republished faster than they can be copied")


# TrainingState's header words (int64; word 7 holds a float64). Private: every reader and writer goes
# through TrainingState's methods, which own the memory order of each word.
_UPDATE_BASE = 0  # updates made before this replay's transitions (after a resume without replay)
_TARGET_LOCK = 1  # one target-network writer at a time (a RobustLock)
_UPDATES = 3  # updates applied so far (claimed by fetch-add)
_TURN = 4  # round robin: whose turn it is (mod N_L); parallel: rounds finished
_TARGET_VERSION = 5  # the target network's seqlock: odd while a copy is being written
_STOP = 6  # learners asked to stop
_LOSS = 7  # float64: the loss of the latest update (for progress reports; orders nothing)


class TrainingState(_Segment):
    """Master parameters, Adam moments and target parameters of one training run,
    with the counters that order learners' updates.

    It owns its header: the words are reached only through the methods below (the round-robin turn,
    the update count and its base, the target's seqlock, the stop request, the latest loss), each
    with the atomic order its protocol needs.

    >>> state = TrainingState.create(2)
    >>> state.claim_update(), state.claim_update(), state.updates
    (1, 2, 2)
    >>> state.turn, state.pass_turn(0), state.pass_turn(0), state.turn
    (0, True, False, 1)
    >>> state.restore_counts(updates=10, target_version=4); state.mark_update_base(10)
    >>> state.updates, state.target_version, state.update_base
    (10, 4, 10)
    >>> state.unlink()
    """

    _kind = "train"
    _vectors = ("params", "adam_m", "adam_v", "target")
    params: np.ndarray  # the master parameters θ
    adam_m: np.ndarray  # Adam's first moment
    adam_v: np.ndarray  # Adam's second moment
    target: np.ndarray  # the target network's parameters

    def __init__(self, name: str, n_params: int, *, _shm: Any = None) -> None:
        super().__init__(name, n_params, _shm=_shm)
        self._target_lock = RobustLock(self._hdr, _TARGET_LOCK)

    # ---------------------------------------------------------------- the update count
    @property
    def updates(self) -> int:
        """Updates applied so far (an acquire load: the parameters they wrote are visible)."""
        return self._hdr.load(_UPDATES, ACQUIRE)

    def claim_update(self) -> int:
        """The number of the update about to be applied (1, 2, …): a fetch-add, so concurrent
        Hogwild learners get distinct numbers and the count loses nothing."""
        return self._hdr.fetch_add(_UPDATES, 1) + 1

    @property
    def update_base(self) -> int:
        """Updates made before the replay's first transition (`mark_update_base`; 0 otherwise)."""
        return self._hdr.load(_UPDATE_BASE, ACQUIRE)

    def mark_update_base(self, updates: int) -> None:
        """Record that the first ``updates`` updates were made on transitions this replay does not
        hold (a resume without the replay): learners pace themselves from the new transitions."""
        self._hdr.store(_UPDATE_BASE, _count("updates", updates), RELEASE)

    def restore_counts(self, *, updates: int, target_version: int) -> None:
        """Continue a checkpointed run: its update count and its target network's (even) version.
        Release stores, before any learner starts."""
        if _count("target_version", target_version) % 2:
            raise ValueError(f"target_version must be even (a complete copy), got {target_version!r}")
        self._hdr.store(_UPDATES, _count("updates", updates), RELEASE)
        self._hdr.store(_TARGET_VERSION, int(target_version), RELEASE)

    # ---------------------------------------------------------------- the turn
    @property
    def turn(self) -> int:
        """Round robin: the turn (learner ``turn % N_L`` applies next); parallel: rounds finished.
        An acquire load: the updates made before the turn moved are visible."""
        return self._hdr.load(_TURN, ACQUIRE)

    def advance_turn(self) -> int:
        """Move the turn on by one (an indivisible add); returns the new turn."""
        turn = self._hdr.fetch_add(_TURN, 1) + 1
        self._wake_word(_TURN)
        return turn

    def pass_turn(self, turn: int) -> bool:
        """Move the round-robin turn from ``turn`` to ``turn + 1``, only if it still is ``turn``
        (a supervisor skipping a dead learner can never skip a live one's turn)."""
        passed = self._hdr.compare_exchange(_TURN, turn, turn + 1)
        if passed:
            self._wake_word(_TURN)
        return passed

    def finish_round(self, round_: int) -> None:
        """Parallel mode: round ``round_``'s averaged update is applied; the round count becomes
        ``round_ + 1`` (a release store: the learners waiting on it see the update)."""
        self._hdr.store(_TURN, round_ + 1, RELEASE)
        self._wake_word(_TURN)

    def wait_turn(self, seen: int, timeout: float) -> None:
        """Sleep until the turn moves on from ``seen`` (whoever moves it wakes its waiters, and so does
        `request_stop`), or ``timeout`` seconds; it may return early: callers re-check the turn and the stop."""
        self._wait_word(_TURN, seen, timeout)

    # ---------------------------------------------------------------- the target network
    def write_target(self, polyak: float = 1.0) -> int:
        """Move the target network toward the master parameters, ``target ← (1 − ρ)·target + ρ·params``
        with ``ρ = polyak`` (1: a copy, DQN's; SAC's τ = 0.005: Polyak averaging), as a seqlock write, one
        writer at a time. Returns the new even target version."""
        if not 0.0 < polyak <= 1.0:
            raise ValueError(f"polyak must be in (0, 1], got {polyak!r}")
        hdr = self._hdr
        with self._target_lock:
            odd = hdr.load(_TARGET_VERSION, RELAXED) // 2 * 2 + 1  # from the word: a writer killed mid-copy left it odd
            hdr.store(_TARGET_VERSION, odd, RELAXED)
            fence(RELEASE)
            if polyak == 1.0:
                self.target[:] = self.params
            else:
                self.target += np.float32(polyak) * (self.params - self.target)
            hdr.store(_TARGET_VERSION, odd + 1, RELEASE)
        self._wake_word(_TARGET_VERSION)  # learners waiting for this copy to end (`wait_for_target`)
        return odd + 1

    def read_target_into(self, out: np.ndarray) -> int | None:
        """Copy the target network into ``out``; returns its version, or None if a write overlapped
        the copy (try again)."""
        hdr = self._hdr
        version = hdr.load(_TARGET_VERSION, ACQUIRE)
        if version % 2:
            return None
        out[:] = self.target
        fence(ACQUIRE)
        return version if hdr.load(_TARGET_VERSION, RELAXED) == version else None

    @property
    def target_version(self) -> int:
        """The target network's seqlock version: even when complete, odd while being written."""
        return self._hdr.load(_TARGET_VERSION, ACQUIRE)

    def wait_for_target(self, timeout: float) -> None:
        """While a copy is being written (the version odd), sleep until its writer ends it or ``timeout``
        seconds pass (a writer killed mid-copy leaves the version odd until the next one); at once otherwise."""
        version = self._hdr.load(_TARGET_VERSION, ACQUIRE)
        if version % 2:
            self._wait_word(_TARGET_VERSION, version, timeout)

    # ---------------------------------------------------------------- stop, loss
    @property
    def stop_requested(self) -> bool:
        return bool(self._hdr.load(_STOP, ACQUIRE))

    def request_stop(self) -> None:
        """Ask the learners to stop; those waiting for their turn or for a target copy are woken to see it."""
        self._hdr.store(_STOP, 1, RELEASE)
        self._wake_word(_TURN)
        self._wake_word(_TARGET_VERSION)

    @property
    def loss(self) -> float:
        """The loss of the latest update (a plain number for reports: it orders nothing)."""
        return float(self._hdr_f[_LOSS])

    @loss.setter
    def loss(self, value: float) -> None:
        self._hdr_f[_LOSS] = value


def _count(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)
