"""Request lanes in other processes: frames to a batching server through shared memory (docs/design.md §7).

A `BatchingServer` serves lanes of its own process by reference (`BatchedPolicy`). A lane in
another process — an inference worker of another world, a process worker of a run — is a
`RemoteLane`: it writes its frame (uint8, or whatever fixed dtype the ring was made for) into its own
slot of a `LaneRing`, a shared-memory segment, and waits for the answer in the same slot. In the
server's process `RemoteLanes` owns the ring and runs one feeder thread that turns each new request
into a `Request` for the server (whose staging copy then reads the frame) and writes each answer back.

**Layout** (one segment, `nonstop_lanes_*`): a header of atomic words (stop, doorbell, two per lane:
the request's and the answer's sequence numbers), then per lane a request record (observation tick,
due ticks, submit time, the lane's tick grid), an answer record (status, action, batch size, obs and
due ticks, batch start and end, lateness), and one frame of the observation's shape and dtype; a ring made
for vector actions (a `Box`'s shape and dtype: SAC's) also holds one action per lane after the frames,
written before the answer's sequence as the record is (the record's action is then 0).

**Protocol** (`nonstop.realtime.atomics`). The lane copies its frame and record into its slot, then
release-stores the next request sequence and bumps the doorbell. The feeder acquire-loads a lane's
sequence, copies the frame into that lane's private buffer (allocated once), issues an acquire
fence and re-loads the sequence: a lane that wrote again under the copy is read again later, never
used torn. The feeder takes a lane's next request only after its previous one was answered, so the
private buffer is never rewritten under the server. An answer's record is written before its
sequence is release-stored; a lane accepts only the answer that carries its latest request's
sequence, so an answer to a request it gave up on is never taken for a newer one's.

**Ownership** (`nonstop.realtime.channels.SharedSegment`): the process that creates the ring owns and
unlinks it (`RemoteLanes.close`, in ``finally``); a lane pickled into a child carries only the
ring's name and layout, attaches, and only closes its mapping. Nothing on the per-request path
pickles or allocates an array: the frame moves by `numpy.copyto` into preallocated views.

>>> import threading
>>> import gymnasium as gym
>>> from nonstop.inference.batching import BatchingServer
>>> from nonstop.inference.batchsize import LatencyCurve
>>> from nonstop.realtime.clock import WallClock
>>> server = BatchingServer(lambda x: x.reshape(len(x), -1).sum(axis=1), LatencyCurve.linear(0.001, 0.0), clock=WallClock())
>>> lanes = RemoteLanes(server, np.zeros((2, 2), np.uint8), n_lanes=2)
>>> lane = lanes.lane(1, gym.spaces.Discrete(100), tau_m=1 / 60)   # pickle it into a child as is
>>> decision = lane.act(np.full((2, 2), 3, np.uint8))
>>> decision.action, decision.batch_size
(12, 1)
>>> lane.close(); lanes.close(); server.close()
"""

from __future__ import annotations

import math
import struct
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final

import gymnasium
import numpy as np

from nonstop.inference.batching import BatchingServer, LaneDecision, Request, ServerClosed, _Ticket, check_lane_settings
from nonstop.policies.base import Policy, _check_seed
from nonstop.realtime.atomics import ACQUIRE, RELAXED, RELEASE, SharedWords, fence
from nonstop.realtime.channels import SharedSegment, _attach, _new_segment
from nonstop.realtime.clock import WallClock

__all__ = ["LaneRing", "RemoteLane", "RemoteLanes", "LaneTimeout"]

# header words: stop (the server closed), doorbell (bumped by every request and answer), then per lane
# its request sequence and its answer sequence
_STOP, _BELL, _HDR = 0, 1, 8
#: a request: obs tick (-1: the lane's clock says), due ticks (0: the first a batch of one can make),
#: submit time, the lane's tick period and origin (seconds on the server's clock)
_REQUEST: Final = struct.Struct("<qqddd")
#: an answer: status (_OK, _CLOSED, _FAILED), action, batch size, obs tick, due tick, batch start, batch
#: end, seconds late
_ANSWER: Final = struct.Struct("<qqqqqddd")
_OK, _CLOSED, _FAILED = 1, 2, 3
_RECORDS: Final = 128  # bytes per lane for the two records (64-byte aligned)


class LaneTimeout(TimeoutError):
    """A remote lane waited longer than its ``wait_s`` for an answer (the server stalled or died)."""


def _align(n: int, to: int = 64) -> int:
    return -(-n // to) * to


class LaneRing(SharedSegment):
    """The shared-memory slots of ``n_lanes`` request lanes, each holding one frame of ``shape`` and
    ``dtype`` (the module docstring has the layout and the protocol). Made by `create` in the server's
    process (its owner, which unlinks it); a pickled ring attaches by name."""

    _views = ("_buf", "_words", "_frames", "_actions", "_req_cells", "_ans_cells", "_stop", "_bell")

    def __init__(
        self,
        name: str,
        n_lanes: int,
        shape: tuple[int, ...],
        dtype: str,
        action_shape: tuple[int, ...] = (),
        action_dtype: str = "<i8",
        *,
        _shm: Any = None,
    ) -> None:
        self.name = name
        self.n_lanes = int(n_lanes)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._owner = _shm is not None
        self._shm = _shm if _shm is not None else _attach(name)
        self.lane_refs = 0  # lanes unpickled in this process over this attachment (`RemoteLane.close`)
        buf = self._shm.buf
        self._buf = buf
        self._words = SharedWords(buf, 0, _HDR + 2 * self.n_lanes)
        self._stop, self._bell = self._words.cell(_STOP), self._words.cell(_BELL)
        # the sequences never go negative: their raw cells are the per-request path
        self._req_cells = [self._words.cell(_HDR + 2 * i) for i in range(self.n_lanes)]
        self._ans_cells = [self._words.cell(_HDR + 2 * i + 1) for i in range(self.n_lanes)]
        frame = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.records_at = _align(8 * (_HDR + 2 * self.n_lanes))
        first_frame = self.records_at + _RECORDS * self.n_lanes
        self._frame_stride = _align(frame)
        self._frames = [
            np.ndarray(self.shape, self.dtype, buf, first_frame + i * self._frame_stride) for i in range(self.n_lanes)
        ]
        #: a vector action's shape and dtype (``()``: an integer action, carried in the answer record)
        self.action_shape = tuple(int(d) for d in action_shape)
        self.action_dtype = np.dtype(action_dtype)
        first_action = first_frame + self.n_lanes * self._frame_stride
        stride = _align(int(np.prod(self.action_shape, dtype=np.int64)) * self.action_dtype.itemsize)
        self._actions = (
            [
                np.ndarray(self.action_shape, self.action_dtype, buf, first_action + i * stride)
                for i in range(self.n_lanes)
            ]
            if self.action_shape
            else []
        )

    @classmethod
    def nbytes(cls, n_lanes: int, example: np.ndarray, action: np.ndarray | None = None) -> int:
        actions = 0 if action is None or not action.shape else _align(action.nbytes)
        return _align(8 * (_HDR + 2 * n_lanes)) + n_lanes * (_RECORDS + _align(example.nbytes) + actions)

    @classmethod
    def create(cls, n_lanes: int, example: np.ndarray, action: np.ndarray | None = None) -> "LaneRing":
        """A ring of ``n_lanes`` slots for frames like ``example`` (its shape and dtype, fixed), and for
        actions like ``action`` (a vector's shape and dtype; None or a scalar: integer actions)."""
        if isinstance(n_lanes, bool) or not isinstance(n_lanes, int) or n_lanes < 1:
            raise ValueError(f"n_lanes must be an int >= 1, got {n_lanes!r}")
        example = np.asarray(example)
        if example.dtype == object or example.dtype.hasobject:
            raise TypeError(f"a lane ring carries fixed-size numeric frames, got dtype {example.dtype}")
        act = np.zeros((), np.int64) if action is None or np.asarray(action).shape == () else np.asarray(action)
        if act.dtype.kind not in "fiub":
            raise TypeError(f"a lane ring carries numeric actions, got dtype {act.dtype}")
        shm = _new_segment(cls.nbytes(n_lanes, example, act), "lanes")
        ring = cls(shm.name, n_lanes, example.shape, example.dtype.str, act.shape, act.dtype.str, _shm=shm)
        for i in range(ring._words.count):
            ring._words.store(i, 0)
        return ring

    def __reduce__(self) -> tuple:
        return (
            LaneRing,
            (self.name, self.n_lanes, self.shape, self.dtype.str, self.action_shape, self.action_dtype.str),
        )

    def _check(self, lane: int) -> int:
        if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < self.n_lanes:
            raise ValueError(f"no lane {lane!r}: the ring has lanes 0..{self.n_lanes - 1}")
        return lane

    def request_at(self, lane: int) -> int:
        return self.records_at + _RECORDS * lane

    def answer_at(self, lane: int) -> int:
        return self.records_at + _RECORDS * lane + 64

    def frame(self, lane: int) -> np.ndarray:
        """Lane ``lane``'s frame, a view into the segment."""
        return self._frames[self._check(lane)]

    @property
    def stopped(self) -> bool:
        return bool(self._stop.load(ACQUIRE))

    def stop(self) -> None:
        """Tell every lane the server is gone: a waiting lane raises `ServerClosed`."""
        self._stop.store(1, RELEASE)
        self._bell.fetch_add(1)

    def _release_views(self) -> None:
        for name in ("_req_cells", "_ans_cells", "_stop", "_bell"):
            self.__dict__.pop(name, None)
        if "_words" in self.__dict__:
            self._words.close()


def _backoff(spins: int) -> None:
    """A waiter's pause: yield the core first (an answer often comes within microseconds of a
    batch's end), then sleep a little longer each time, up to half a millisecond."""
    if spins < 16:
        time.sleep(0)
    else:
        time.sleep(min(5e-4, 1e-5 * (spins - 15)))


class RemoteLane(Policy):
    """A request lane in any process: a `Policy` whose forward pass is a request through a `LaneRing`
    to the `BatchingServer` that `RemoteLanes` feeds (make one with `RemoteLanes.lane`; it pickles as
    the ring's name, its slot and its settings, so it travels to a child process, a `ProcessPolicy`'s
    factory or a world of its own).

    ``act(obs, obs_tick=None)`` copies the frame into the slot, posts the request and waits for its
    answer: it yields the core, then sleeps in steps up to 0.5 ms, for at most ``wait_s`` seconds
    (`LaneTimeout`; None: for as long as the server lives), and raises `ServerClosed` as soon as the
    server closes, so a worker never hangs on a dead server (its pool restarts it, β covers the gap).
    The obs tick and due tick are reckoned as `BatchedPolicy` does, on the server's clock (a
    `WallClock` from ``clock_origin``, shared by every process of the machine). ``epsilon`` (a number
    or a picklable callable) explores on the answer, as a `BatchedPolicy` lane does.
    """

    def __init__(
        self,
        ring: LaneRing,
        index: int,
        action_space: gymnasium.Space | None = None,
        *,
        tau_m: float,
        origin: float = 0.0,
        clock_origin: float,
        due_ticks: int | None = None,
        epsilon: float | Callable[[], float] = 0.0,
        seed: int | None = None,
        wait_s: float | None = 10.0,
    ) -> None:
        if not isinstance(ring, LaneRing):
            raise TypeError(f"ring must be a LaneRing, got {type(ring).__name__}")
        ring._check(index)
        check_lane_settings(tau_m, due_ticks, epsilon, action_space)
        if wait_s is not None and not (isinstance(wait_s, (int, float)) and wait_s > 0):
            raise ValueError(f"wait_s must be a positive number of seconds or None, got {wait_s!r}")
        self.ring: Final = ring
        self.index: Final = index
        if action_space is not None:
            self.action_space = action_space
        self.tau_m, self.origin, self.clock_origin = float(tau_m), float(origin), float(clock_origin)
        self.due_ticks, self.epsilon, self.wait_s = due_ticks, epsilon, wait_s
        self._seed = _check_seed(seed)
        self._rng = np.random.default_rng(self._seed)
        self._clock = WallClock(origin=self.clock_origin, spin=0.0)
        self._frame = ring.frame(index)
        self._req, self._ans = ring._req_cells[index], ring._ans_cells[index]
        self._req_at, self._ans_at = ring.request_at(index), ring.answer_at(index)
        self._seq = self._req.load(ACQUIRE)  # a restarted worker's lane goes on from its slot's numbering
        self._attached = False  # True in a process that attached the ring by unpickling this lane
        self._closed = False
        self.answers = 0
        self.late = 0

    def __reduce__(self) -> tuple:
        kwargs = {
            "tau_m": self.tau_m,
            "origin": self.origin,
            "clock_origin": self.clock_origin,
            "due_ticks": self.due_ticks,
            "epsilon": self.epsilon,
            "seed": self._seed,
            "wait_s": self.wait_s,
        }
        return (_rebuild_lane, (self.ring, self.index, getattr(self, "action_space", None), kwargs))

    def seed(self, seed: int | None) -> None:
        self._seed = _check_seed(seed)
        self._rng = np.random.default_rng(self._seed)

    def act(self, obs: np.ndarray, obs_tick: int | None = None) -> LaneDecision:
        """Post ``obs`` and wait for its answer (class docstring)."""
        ring = self.ring
        if self._closed:
            raise ServerClosed(f"lane {self.index} is closed")
        if ring.closed or ring.stopped:
            raise ServerClosed("the batching server of this lane's ring is closed")
        buf, frame = ring._buf, self._frame
        if obs.shape != frame.shape:
            raise ValueError(
                f"lane {self.index}: observation {obs.dtype}{list(obs.shape)} does not fit the ring's "
                f"{frame.dtype}{list(frame.shape)} frames (one model, one input)"
            )
        np.copyto(frame, obs, casting="same_kind")
        submitted = self._clock.now()
        _REQUEST.pack_into(
            buf,
            self._req_at,
            -1 if obs_tick is None else int(obs_tick),
            self.due_ticks or 0,
            submitted,
            self.tau_m,
            self.origin,
        )
        seq = self._seq = self._seq + 1
        self._req.store(seq, RELEASE)  # the frame and the record are visible before the sequence
        ring._bell.fetch_add(1)
        try:
            self._wait(seq, submitted)
            status, action, batch_size, _, _, started, answered, late_by = _ANSWER.unpack_from(buf, self._ans_at)
        except ValueError:  # the owner unmapped the ring under a lane of its own process
            raise ServerClosed("the batching server's lane ring was closed while this lane waited") from None
        if status != _OK:
            if status == _CLOSED:
                raise ServerClosed("the batching server closed while this lane's request waited")
            raise RuntimeError(f"lane {self.index}: the batch's forward pass failed (the server's report says why)")
        self.answers += 1
        self.late += late_by > 0
        epsilon = self.epsilon() if callable(self.epsilon) else self.epsilon
        if epsilon > 0 and self._rng.random() < epsilon:
            space = self.action_space
            assert isinstance(space, gymnasium.spaces.Discrete)
            action = int(space.start + self._rng.integers(space.n))
        elif ring.action_shape:  # the vector written beside the record, before the sequence
            action = ring._actions[self.index].copy()
        tau_theta = answered - submitted
        return LaneDecision(action, 0.0, tau_theta, batch_size, late_by)

    def _wait(self, seq: int, submitted: float) -> None:
        ring, ans, spins = self.ring, self._ans, 0
        give_up = math.inf if self.wait_s is None else submitted + self.wait_s
        while True:
            got = ans.load(ACQUIRE)
            if got == seq:
                return
            if got > seq:  # cannot happen with one writer a slot; say so rather than wait forever
                raise RuntimeError(f"lane {self.index}: answer {got} for request {seq} (two writers on one slot?)")
            if ring.stopped:
                raise ServerClosed("the batching server closed while this lane waited")
            spins += 1
            if self._clock.now() > give_up:
                raise LaneTimeout(f"lane {self.index}: no answer within {self.wait_s:g}s (is the server alive?)")
            _backoff(spins)

    def close(self) -> None:
        """Unmap the ring in this process if this lane attached it (idempotent); the owner unlinks it."""
        self._closed = True
        self.__dict__.pop("_frame", None)  # this lane's own view pins the mapping
        if self._attached:  # the last lane of this process to let go of the ring unmaps it
            self._attached = False
            ring = self.ring
            ring.lane_refs -= 1
            if ring.lane_refs <= 0:
                ring.close()

    def __repr__(self) -> str:
        return f"RemoteLane(ring={self.ring.name!r}, lane={self.index}, tau_m={self.tau_m:g})"


def _rebuild_lane(ring: LaneRing, index: int, action_space: Any, kwargs: dict[str, Any]) -> RemoteLane:
    lane = RemoteLane(ring, index, action_space, **kwargs)
    lane._attached = True  # this process attached the ring to unpickle the lane: its lanes close it
    ring.lane_refs += 1
    return lane


class RemoteLanes:
    """The server's side of a `LaneRing`: owns the ring and feeds its lanes' requests to ``server``.

    One feeder thread polls the doorbell (yielding, then sleeping up to 0.5 ms when nothing moves),
    reads each new request into its lane's private buffer and submits it; the server's answer is
    written back into the lane's slot by the thread that settles it. ``tags`` (one per lane, default:
    the lane's index) name the lanes in the server's `BatchingServer.answered_by`, as a `BatchedPolicy`
    lane's tag does (a run's worker index). ``server`` must run on the wall clock: a virtual clock
    is one process's. `close` stops the feeder, tells waiting lanes the server is gone and unlinks the
    ring (idempotent; a context manager does it on exit).
    """

    def __init__(
        self,
        server: BatchingServer,
        example: np.ndarray,
        *,
        n_lanes: int,
        tags: Sequence[Hashable] | None = None,
        action_space: gymnasium.Space | None = None,
    ) -> None:
        if not isinstance(server, BatchingServer):
            raise TypeError(f"server must be a BatchingServer, got {type(server).__name__}")
        if not server.clock.spans_processes:
            raise ValueError("lanes in other processes need a wall-clock server: a virtual clock is one process's")
        if not isinstance(server.clock, WallClock):
            raise TypeError(f"remote lanes share the server's WallClock, got {type(server.clock).__name__}")
        if tags is not None and len(tags) != n_lanes:
            raise ValueError(f"tags names {len(tags)} lanes, the ring has {n_lanes}")
        action = None  # integer actions in the answer record; a Box's vectors in slots of its shape and dtype
        if isinstance(action_space, gymnasium.spaces.Box):
            action = np.zeros(action_space.shape, action_space.dtype)
        elif server.action_shape:
            action = np.zeros(server.action_shape, np.float32)
        if (() if action is None else action.shape) != server.action_shape:
            raise ValueError(
                f"the server answers actions of shape {server.action_shape}, the lanes' space "
                f"{action_space} has {() if action is None else action.shape}"
            )
        self.server: Final = server
        self.ring: Final = LaneRing.create(n_lanes, np.asarray(example), action)
        try:
            ring = self.ring
            self._private = [np.empty(ring.shape, ring.dtype) for _ in range(n_lanes)]
            self._tags = list(range(n_lanes)) if tags is None else list(tags)
            self._picked = [cell.load(ACQUIRE) for cell in ring._req_cells]  # the last request taken per lane
            self._busy = [False] * n_lanes  # a request of the lane is with the server
            self._answerers = [self._answerer(i) for i in range(n_lanes)]
            self.fed = 0
            self.reread = 0
            self.error: str | None = (
                None  # what stopped the feeder, if anything did before `close`  # requests read again because their lane wrote under the copy
            )
            self._stopped = threading.Event()
            self._thread = threading.Thread(target=self._feed, name="nonstop-lane-feeder", daemon=True)
            self._thread.start()
        except BaseException:
            self.ring.unlink()
            raise

    def lane(
        self,
        index: int,
        action_space: gymnasium.Space | None = None,
        *,
        tau_m: float,
        origin: float = 0.0,
        due_ticks: int | None = None,
        epsilon: float | Callable[[], float] = 0.0,
        seed: int | None = None,
        wait_s: float | None = 10.0,
    ) -> RemoteLane:
        """The `RemoteLane` of slot ``index`` for a world ticking every ``tau_m`` from ``origin`` (on the
        server's clock). One lane a slot at a time: a restarted worker's new lane may take its slot."""
        assert isinstance(self.server.clock, WallClock)
        return RemoteLane(
            self.ring,
            index,
            action_space,
            tau_m=tau_m,
            origin=origin,
            clock_origin=self.server.clock.origin,
            due_ticks=due_ticks,
            epsilon=epsilon,
            seed=seed,
            wait_s=wait_s,
        )

    # ------------------------------------------------------------------ the feeder
    def _feed(self) -> None:
        ring, server = self.ring, self.server
        bell, req_cells, spins = ring._bell, ring._req_cells, 0
        try:
            while not self._stopped.is_set():
                rung = bell.load(ACQUIRE)
                took = 0
                for i, cell in enumerate(req_cells):
                    if not self._busy[i] and cell.load(ACQUIRE) != self._picked[i]:
                        took += self._take(i)
                if took:
                    spins = 0
                    continue
                while bell.load(ACQUIRE) == rung and not self._stopped.is_set():
                    spins += 1
                    _backoff(spins)
                spins = 0
        except Exception as exc:  # kept for the report; the lanes are told at once
            if self._stopped.is_set():
                return  # the ring was closed under the feeder at the end
            self.error = f"{type(exc).__name__}: {exc}"
            ring.stop()  # every waiting lane raises ServerClosed instead of waiting out its wait_s
        finally:
            del server

    def _take(self, i: int) -> int:
        """Read lane ``i``'s new request (a seqlock-style read) and submit it; 1 if it was."""
        ring, buf, cell = self.ring, self.ring._buf, self.ring._req_cells[i]
        seq = cell.load(ACQUIRE)
        obs_tick, due_ticks, submitted, tau_m, origin = _REQUEST.unpack_from(buf, ring.request_at(i))
        np.copyto(self._private[i], ring._frames[i])
        fence(ACQUIRE)  # the copy is complete before the sequence is looked at again
        if cell.load(RELAXED) != seq:
            self.reread += 1
            return 0
        clock, curve = self.server.clock, self.server.curve
        if obs_tick < 0:  # the newest tick published by its submit time (as `BatchedPolicy.request` reckons)
            obs_tick = max(0, math.floor((submitted - origin - clock.tick_grace / 2) / tau_m))
        if due_ticks > 0:
            due_tick = obs_tick + due_ticks
        else:
            due_tick = max(obs_tick + 1, math.ceil((submitted + curve(1) - origin) / tau_m - 1e-9))
        request = Request(i, self._private[i], obs_tick, due_tick, origin + due_tick * tau_m, submitted)
        self._picked[i] = seq
        self._busy[i] = True
        self.fed += 1
        self.server.submit(request, self._answerers[i])
        return 1

    def _answerer(self, i: int) -> Callable[[_Ticket], None]:
        ring, server, tag, at = self.ring, self.server, self._tags[i], self.ring.answer_at(i)

        def answer(ticket: _Ticket) -> None:
            """Write the answer to lane ``i``'s request into its slot (on the thread that settles it)."""
            a, req = ticket.answer, ticket.request
            try:
                buf = ring._buf
                if a is None:
                    status = _CLOSED if isinstance(ticket.error, ServerClosed) else _FAILED
                    _ANSWER.pack_into(buf, at, status, -1, 0, req.obs_tick, req.due_tick, 0.0, 0.0, 0.0)
                else:
                    server.answered_by.setdefault(tag, {})[a.obs_tick] = a.batch_size
                    if ring.action_shape:
                        np.copyto(ring._actions[i], a.action, casting="same_kind")
                    _ANSWER.pack_into(
                        buf,
                        at,
                        _OK,
                        0 if ring.action_shape else int(a.action),
                        a.batch_size,
                        a.obs_tick,
                        a.due_tick,
                        a.started,
                        a.answered,
                        a.late_by,
                    )
                self._busy[i] = False
                ring._ans_cells[i].store(self._picked[i], RELEASE)  # the record is visible before the sequence
                ring._bell.fetch_add(1)  # the feeder looks again: the lane may have asked anew
            except (ValueError, AttributeError):  # the ring was closed at the end (SegmentClosedError is both)
                pass

        return answer

    # ------------------------------------------------------------------ the end
    def report(self) -> dict[str, Any]:
        return {
            "ring": self.ring.name,
            "lanes": self.ring.n_lanes,
            "fed": self.fed,
            "reread": self.reread,
            "error": self.error,
        }

    def close(self) -> None:
        """Stop feeding, tell every waiting lane the server is gone, unlink the ring (idempotent)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        ring = self.ring
        if not ring.closed:
            ring.stop()
        self._thread.join(timeout=5)
        ring.unlink()

    def __enter__(self) -> "RemoteLanes":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
