"""A batching inference server: one model, many request lanes (docs/design.md §7).

On an accelerator an inference worker is not a process but a **request lane**: the schedulers still
decide when each lane reads the latest observation; the lane's forward pass is a request to one
`BatchingServer`, which owns the model and serves every lane of every seat, world and session.

* A request is (lane, observation, the observation's tick, the tick its action is due). The server
  serves the requests due soonest first (earliest deadline first) and takes as many as its latency
  curve L(b) allows while the most urgent one that can still be met is met
  (`nonstop.inference.batchsize.choose_batch_size`). A request that misses its tick anyway is
  answered late and counted (how many, by how much), never dropped.
* A **block** request carries many lanes' rows at once (``lanes``: row i is lane ``lanes[i]``'s;
  `nonstop.inference.seatlanes.SeatLanes` sends one a team a tick): it is served whole, in one batch,
  its answer an array of actions, one a row. A thousand seats are then a few requests, not a thousand.
* A lane's τ_θ is its request's whole time, queue + batch: the `LaneDecision` it gets reports it with
  the batch size it was served in, so staggering, N_I* and delay keep their meaning.
* The forward pass is injected: ``forward(batch) -> actions`` (or Q-values, one row per observation:
  the argmax is taken). `nonstop.inference.device.torch_forward` builds one for a torch model. A
  forward with ``takes_lanes = True`` is called ``forward(batch, lanes)``, each row's lane beside it
  (one θ per team: `nonstop.inference.seatlanes.TeamForward`).

**Two clocks.** On the wall clock the server is a thread and a lane blocks on its request's event,
so an `InferencePool` drives `BatchedPolicy` lanes unchanged (``act`` blocks; the pool measures τ_θ,
which is queue + batch). On the virtual clock the server is a timed process: a batch of ``b`` takes
L(b) virtual seconds, and a lane waits for its answer as a timed process (`BatchedPolicy.act_timed`,
a generator to ``yield from``). A lane cannot instead *declare* its τ_θ from ``act(obs)`` as a
latency policy does: a batch's size, hence its duration, depends on requests that arrive after the
lane's (same-instant ones included, which the simulator runs one after another), and a declared
latency is fixed when ``act`` returns. In a schedule where each answer's time is fixed on arrival,
no request can join a batch whose earlier members were already told when it ends (L grows with b):
every batch is a batch of one. So on the virtual clock ``act`` refuses, and an `InferencePool`
needs its lane hook (docs/gpu.md): to call ``act_timed`` where it calls ``act``.

**Ownership** (STYLE: one place owns each buffer). A request holds its observation by reference: the
lane owns that array and must not write it until answered (an `InferencePool` worker reads a fresh
copy from the latest slot for every inference, so it never does). The server owns one staging
buffer ``(max_batch, *obs_shape)`` into which a batch's frames are copied in EDF order (two with
``overlap``: the next batch's are copied while a forward runs); ``forward`` may read it only during the
call (it is reused). Lanes in other processes (`nonstop.inference.lanering`) keep this: their frames
arrive through a shared-memory lane ring into a private buffer per lane, which their requests hold.

>>> from nonstop.inference.batchsize import LatencyCurve
>>> from nonstop.realtime.clock import VirtualClock
>>> clock = VirtualClock()
>>> server = BatchingServer(lambda x: x.sum(axis=1), LatencyCurve.linear(0.010, 0.002), clock=clock)
>>> got = []
>>> def lane(policy, value):
...     decision = yield from policy.act_timed(np.array([value, 1]), obs_tick=0)
...     got.append((decision.action, decision.batch_size, round(decision.tau_theta, 6)))
>>> for v in (1, 2, 3):
...     _ = clock.spawn(lane(server.lane(tau_m=1 / 60), v))
>>> clock.run()
>>> got                                # one batch of 3: L(3) = 10 ms + 3 * 2 ms
[(2, 3, 0.016), (3, 3, 0.016), (4, 3, 0.016)]
>>> server.close(); server.report()["batch_sizes"]
{3: 1}
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass
from typing import Any, Final

import gymnasium
import numpy as np

from nonstop.inference.batchrows import Answer, Request, applied_batch_sizes, per_ticket, row_lanes
from nonstop.inference.batchsize import LatencyCurve, choose_batch_size
from nonstop.policies.base import Decision, Policy, _check_seed
from nonstop.realtime.clock import Clock, Wake, stopwatch

__all__ = [
    "BatchingServer",
    "BatchedPolicy",
    "LaneDecision",
    "LaneSettings",
    "Request",
    "Answer",
    "ServerClosed",
    "applied_batch_sizes",
    "check_lane_settings",
]

#: Virtual-clock priorities at one instant: workers 0 (after a tick 2), the host 1, learners 3; a batch
#: starts and ends at 4, after every request of its instant; a waiting lane looks at 5, after the server.
_SERVE: Final = 4
_LANE: Final = 5


class ServerClosed(RuntimeError):
    """The server was closed while a request waited (or after): no action comes, β covers the tick."""


class _Ticket:
    """A request in flight: its answer or its error arrives once; wall-clock lanes wait on ``event``, a
    lane in another process is told by ``on_settle`` (called once, on the thread that settles it)."""

    __slots__ = ("request", "answer", "error", "event", "on_settle")

    def __init__(
        self, request: Request, event: threading.Event | None, on_settle: Callable[["_Ticket"], None] | None = None
    ) -> None:
        self.request = request
        self.answer: Answer | None = None
        self.error: BaseException | None = None
        self.event = event
        self.on_settle = on_settle

    @property
    def done(self) -> bool:
        return self.answer is not None or self.error is not None

    def settle(self, answer: Answer | None, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.answer, self.error = answer, error
        if self.event is not None:
            self.event.set()
        if self.on_settle is not None:
            self.on_settle(self)

    def result(self) -> Answer:
        if self.error is not None:
            raise self.error
        assert self.answer is not None, "result() before the ticket settled"
        return self.answer


class BatchingServer:
    """One model serving many request lanes, in batches sized by its latency curve (module docstring).

    ``forward(batch) -> ndarray`` takes ``(b, *obs_shape)`` and returns ``b`` actions or ``(b, n)``
    scores (argmax per row); with ``action_shape`` (a vector action's, e.g. a `Box`'s ``(d,)``) it returns
    ``(b, *action_shape)`` actions, each lane answered with its row. ``curve`` is L(b); on the wall clock it is re-measured as the server runs
    (``measure``, default: on the wall clock only), on the virtual clock it *is* the time a batch takes.
    ``max_batch`` bounds a batch (and the staging buffer). `lane` makes a `BatchedPolicy` per lane;
    `close` answers every waiting lane with `ServerClosed` and stops the thread.

    ``overlap`` (wall clock): while a batch runs its forward pass, a stager thread copies the frames of
    the requests waiting (EDF order, up to ``max_batch``) into a second staging buffer, so the next
    batch finds them in place and only those that arrived or moved since are copied after the forward
    (on a GPU, where `nonstop.inference.device.TorchForward` uploads from a pinned buffer, this is the
    host side of overlapping the next upload with the running forward). The running batch's buffer is
    never written: the two buffers swap at each batch. ``report()["staged_ahead"]`` counts the rows
    that were in place.

    **A device forward** (`nonstop.inference.device.TorchForward`) may offer more, each used where present:
    ``graph_sizes`` (the sizes it pads a batch to: the curve is kept and read at the padded size),
    ``staging(rows, shape, dtype)`` (its pinned host buffers: the staging buffers are those, so a frame is
    copied once, from the request into memory the device reads), ``bind_thread()`` (called first on the
    server's thread: the device set there) and ``prepare(example)`` (every graph captured before the first
    batch is served: on the server's thread at its start when ``example``, one observation, is given,
    else when the first request declares the shape; `wait_ready` waits for it), and ``last`` (the call's
    `BatchTiming`: a call that captured is not measured, and the device's own time is kept beside the
    host's). The first batch of each size never enters L(b): it bears the warm-up (a capture, cuDNN's
    choice), 100-1,000 times a replay. Waking: a request wakes the server only when it sleeps for want of
    work, and the stager only when it sleeps while a forward runs (it then copies every request that came:
    one wake-up for many); a forward's start wakes the stager once. Never a wake-up per request per thread.
    """

    def __init__(
        self,
        forward: Callable[..., Any],  # (batch) -> actions; (batch, lanes) where it takes lanes
        curve: LatencyCurve,
        *,
        clock: Clock,
        max_batch: int = 64,
        measure: bool | None = None,
        overlap: bool = False,
        example: np.ndarray | None = None,
        action_shape: tuple[int, ...] = (),
    ) -> None:
        _check_server_args(forward, curve, clock, max_batch, overlap)
        self.forward: Final = forward
        self._takes_lanes: Final = getattr(forward, "takes_lanes", False) is True  # forward(batch, lanes)
        self.action_shape: Final = tuple(int(d) for d in action_shape)
        self.curve: Final = curve
        self.clock: Final = clock
        self.max_batch: Final = max_batch
        #: the server serves on a thread of its own (the clock's waits block in wall time); else each busy
        #: period is a timed process the clock drives, a batch of b taking L(b) of its time
        self.threaded: Final = clock.waits_block
        self.measure: Final = self.threaded if measure is None else bool(measure)
        self.overlap: Final = overlap and clock.waits_block  # a stager copying beside the forward needs threads
        #: a lone block may be the forward's input as it is: no pinned buffers, no stager swapping them
        self._unpinned: Final = not callable(getattr(forward, "staging", None)) and not self.overlap
        self._init_queue(max_batch)
        self._init_report()
        self._init_forward(example)
        self._thread: threading.Thread | None = None
        self._stager: threading.Thread | None = None
        if self.threaded:
            self._thread = threading.Thread(target=self._serve_wall, name="nonstop-batch-server", daemon=True)
            self._thread.start()
        if self.overlap:
            self._stager = threading.Thread(target=self._stage_ahead, name="nonstop-batch-stager", daemon=True)
            self._stager.start()

    def _init_queue(self, max_batch: int) -> None:
        """The request queue, the staging buffers and the flags the server, the stager and the lanes share."""
        self._cond = threading.Condition()  # the lock, and the server thread's wake-up
        self._stage_wake = threading.Condition(self._cond._lock)  # type: ignore[attr-defined]  # the stager's, same lock
        self._server_idle = False  # the server thread sleeps for want of a request: the next one wakes it
        self._stager_idle = False  # the stager sleeps: a request during a forward wakes it (once, however many come)
        self._queue: list[tuple[float, int, _Ticket]] = []  # EDF heap: (due, arrival order, ticket)
        self._order = itertools.count()
        self._lanes = itertools.count()
        self._in_flight: list[_Ticket] = []
        self._busy_until = -math.inf  # virtual: the running batch's end
        self._serving = False  # virtual: a busy period (a timed process) is running
        self._closed = False
        self._retired = False  # close once the last open lane is closed
        self._open_lanes = 0
        self._staging: np.ndarray | None = None  # the buffer the next batch is stacked in
        self._spare: np.ndarray | None = None  # overlap: the other one (the running batch's)
        self._staged: list[_Ticket | None] = [None] * max_batch  # whose frame each row of `_staging` holds
        self._stage_lock = threading.Lock()  # held by the stager while it copies; the server takes it to swap
        self._forward_running = False
        self._arrivals = 0  # requests queued so far: the stager looks again when it moves
        self.staged_ahead = 0

    def _init_report(self) -> None:
        """What the report says: requests, batch sizes, late answers, failures and wake-ups."""
        self.requests = 0
        self.batch_sizes: dict[int, int] = {}
        #: the batch each answer rode in, by the lane's tag (its worker index) and observation tick: what
        #: `applied_batch_sizes` joins onto a tick log's (worker, obs_tick)
        self.answered_by: dict[Hashable, dict[int, int]] = {}
        self.late = 0
        self.late_by_total = 0.0
        self.late_by_max = 0.0
        self.failed_batches = 0
        self.answered_closed = 0
        self.wakeups = 0  # times a request woke the server thread or the stager

    def _init_forward(self, example: np.ndarray | None) -> None:
        """The device forward's offers: its padded sizes, and with ``example`` its staging and graphs now."""
        forward = self.forward
        #: the padded sizes seen (their first batch is not measured), and why a server could not start
        self._warm: set[int] = set()
        self.prepare_error: BaseException | None = None
        self._ready = threading.Event()
        self._prepared = not callable(getattr(forward, "prepare", None))
        sizes = getattr(forward, "graph_sizes", ())
        if sizes:
            self.curve.set_padding(sizes)
        if example is not None:
            example = np.asarray(example)
            self._make_staging(example.shape, example.dtype)
            if not self.threaded and not self._prepared:
                self._prepare(example)
        self._example = example

    # ------------------------------------------------------------------ lanes and requests
    def lane(
        self,
        action_space: gymnasium.Space | None = None,
        *,
        tau_m: float,
        origin: float = 0.0,
        due_ticks: int | None = None,
        epsilon: float | Callable[[], float] = 0.0,
        seed: int | None = None,
        tag: Hashable | None = None,
    ) -> "BatchedPolicy":
        """A new request lane (a `Policy`) for a world ticking every ``tau_m`` from ``origin``. ``tag`` (the
        tick log's worker index of the lane; a restarted worker's new lane keeps it): its answers' batch
        sizes are kept in `answered_by` under it."""
        settings = LaneSettings(tau_m, origin=origin, due_ticks=due_ticks, epsilon=epsilon)
        return BatchedPolicy(self, next(self._lanes), action_space, settings, seed=seed, tag=tag)

    def _make_staging(self, shape: tuple[int, ...], dtype: Any) -> None:
        """The staging buffer(s): the forward's pinned ones where it offers them."""
        make = getattr(self.forward, "staging", None)
        if callable(make):
            self._staging = make(self.max_batch, shape, dtype)
            self._spare = make(self.max_batch, shape, dtype) if self.overlap else None
        else:
            self._staging = np.empty((self.max_batch, *shape), dtype)
            self._spare = np.empty_like(self._staging) if self.overlap else None

    def _prepare(self, example: np.ndarray) -> None:
        """Capture the forward's graphs (once); an error is kept and fails every batch after."""
        try:
            self.forward.prepare(example)  # type: ignore[attr-defined]  # present: checked in __init__
        except Exception as exc:  # said by every batch's error (one line: the size that did not fit)
            self.prepare_error = exc
        self._prepared = True

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wall clock: wait until the server has captured its forward's graphs (if any) and serves;
        returns whether it did within ``timeout``. Raises the capture's error, if it failed."""
        if not self.threaded or self._prepared and self._example is not None:
            ok = True
        else:
            ok = self._ready.wait(timeout)
        if self.prepare_error is not None:
            raise self.prepare_error
        return ok

    def submit(self, request: Request, on_settle: Callable[[_Ticket], None] | None = None) -> _Ticket:
        """Queue ``request``; the returned ticket settles when its batch ends (or the server closes).
        ``on_settle(ticket)`` is called then, on the settling thread (a lane of another process is
        answered so: `nonstop.inference.lanering`); without it a wall-clock ticket carries an event."""
        obs = request.obs
        if request.lanes is not None:  # a block: its rows are what the staging buffer holds
            if not 1 <= request.rows <= self.max_batch or len(obs) != request.rows:
                raise ValueError(
                    f"a block request needs 1..{self.max_batch} rows (max_batch), one a lane: got {len(obs)} "
                    f"rows for {request.rows} lanes"
                )
            obs = obs[0]
        ticket = _Ticket(request, threading.Event() if self.threaded and on_settle is None else None, on_settle)
        with self._cond:
            if self._staging is None:
                self._make_staging(obs.shape, obs.dtype)
            assert self._staging is not None
            if obs.shape != self._staging.shape[1:] or obs.dtype != self._staging.dtype:
                raise ValueError(
                    f"lane {request.lane}: observation {obs.dtype}{list(obs.shape)} does not match the "
                    f"server's {self._staging.dtype}{list(self._staging.shape[1:])} (one model, one input)"
                )
            if self._closed:
                ticket.settle(None, ServerClosed("the batching server is closed"))
                self.answered_closed += 1
                return ticket
            self.requests += 1
            self._arrivals += 1
            heapq.heappush(self._queue, (request.due, next(self._order), ticket))
            if self.threaded:
                if self._server_idle:  # one wake-up, and only for a server asleep for want of work
                    self._server_idle = False
                    self.wakeups += 1
                    self._cond.notify()
                elif self._stager_idle and self._forward_running:  # coalesced: the stager copies all that came
                    self._stager_idle = False
                    self.wakeups += 1
                    self._stage_wake.notify()
            elif not self._serving:
                self._serving = True
                self.clock.spawn(self._busy_period(), name="batch-server", priority=_SERVE)
        return ticket

    def together(self) -> threading.Condition:
        """``with server.together(): submit(...)…``: requests submitted inside are queued before any batch
        is taken from them (the server's lock, re-entrant), so one batch can hold them all."""
        return self._cond

    def wait_timed(self, ticket: _Ticket) -> Generator[Wake, float, Answer]:
        """Virtual clock: wait for ``ticket`` as a timed process (``yield from``); return its answer.
        A request not in the running batch is answered at that batch's end at the earliest, so the
        lane looks again at each batch's end, after the server."""
        while not ticket.done:
            if not self._serving:
                raise RuntimeError(f"lane {ticket.request.lane}: its request is queued but no batch is coming")
            yield (max(self._busy_until, self.clock.now()), _LANE)
        return ticket.result()

    def wait(self, ticket: _Ticket) -> Answer:
        """Wall clock: block until ``ticket`` settles; return its answer."""
        event = ticket.event
        assert event is not None, "wait() is the wall clock's (without on_settle); the virtual clock's is wait_timed()"
        while not event.wait(0.5):
            if self._thread is None or not self._thread.is_alive():
                ticket.settle(None, ServerClosed("the batching server's thread ended"))
        return ticket.result()

    # ------------------------------------------------------------------ serving
    def _take(self, now: float) -> list[_Ticket]:
        """The next batch, EDF order (under the lock); a block is taken whole (the first always)."""
        head = heapq.nsmallest(self.max_batch, self._queue)
        dues = [due for due, _, ticket in head for _ in range(ticket.request.rows)]
        b = choose_batch_size(now, dues, self.curve, max_batch=self.max_batch, tolerance=self.clock.tick_grace)
        batch, rows = [heapq.heappop(self._queue)[2]], head[0][2].request.rows
        while self._queue and rows + self._queue[0][2].request.rows <= b:
            rows += self._queue[0][2].request.rows
            batch.append(heapq.heappop(self._queue)[2])
        self._in_flight = batch
        return batch

    def _compute(self, batch: list[_Ticket]) -> np.ndarray | BaseException:
        """Stack the batch's frames into the staging buffer (rows the stager filled during the last
        forward are in place already) and run the forward pass. A batch of one block is its own input:
        its rows are contiguous already (unless the forward reads pinned buffers: they are the staging)."""
        staging, staged = self._staging, self._staged
        assert staging is not None
        b = 0
        try:
            if self.prepare_error is not None:
                raise self.prepare_error
            if len(batch) == 1 and batch[0].request.lanes is not None and self._unpinned:
                staging, b = batch[0].request.obs, batch[0].request.rows  # read during the call only, like staging
            for ticket in batch if b == 0 else ():
                k = ticket.request.rows
                if staged[b] is ticket:
                    self.staged_ahead += k
                else:  # a row's frame, or a block's rows
                    staging[b : b + k] = ticket.request.obs
                b += k
            if self.overlap:  # the stager fills the other buffer while this one is read
                with self._stage_lock, self._cond:
                    self._staging, self._spare = self._spare, staging
                    self._staged = [None] * self.max_batch
                    self._forward_running = True
                    self._stage_wake.notify()  # the stager's one wake-up a batch
            try:
                if self._takes_lanes:
                    out = np.asarray(self.forward(staging[:b], row_lanes(batch)))
                else:
                    out = np.asarray(self.forward(staging[:b]))
            finally:
                if self.overlap:
                    with self._stage_lock, self._cond:  # the stager is between copies
                        self._forward_running = False
            if self.action_shape:
                if out.shape != (b, *self.action_shape) or out.dtype == object:
                    raise ValueError(
                        f"forward returned {out.dtype}{list(out.shape)} for a batch of {b}: want "
                        f"({b}, {', '.join(map(str, self.action_shape))}) actions"
                    )
                return out
            if out.ndim == 2 and out.shape[0] == b:
                out = out.argmax(axis=1)
            if out.shape != (b,):
                raise ValueError(
                    f"forward returned shape {out.shape} for a batch of {b}: want ({b},) actions or ({b}, n) scores"
                )
            return out
        except Exception as exc:  # handed to the lanes of this batch
            return exc

    def _finish(self, batch: list[_Ticket], outcome: np.ndarray | BaseException, started: float, ended: float) -> None:
        b = sum(ticket.request.rows for ticket in batch)
        self.batch_sizes[b] = self.batch_sizes.get(b, 0) + 1
        if isinstance(outcome, BaseException):
            self.failed_batches += 1
            error = RuntimeError(f"the batch's forward pass failed: {type(outcome).__name__}: {outcome}")
            error.__cause__ = outcome
            for ticket in batch:
                ticket.settle(None, error)
            return
        grace = self.clock.tick_grace
        for ticket, action in zip(batch, per_ticket(batch, outcome, self.action_shape)):
            req = ticket.request
            late_by = ended - req.due if ended > req.due + grace else 0.0
            if late_by > 0:
                self.late += 1
                self.late_by_total += late_by
                self.late_by_max = max(self.late_by_max, late_by)
            ticket.settle(
                Answer(req.lane, action, req.obs_tick, req.due_tick, req.submitted, started, ended, b, late_by)
            )

    def _busy_period(self) -> Generator[Wake, float, None]:
        """Virtual clock: serve batches back to back while requests wait; a batch of b takes L(b)."""
        try:
            while True:
                yield (self.clock.now(), _SERVE)  # every request of this instant is in
                with self._cond:
                    if self._closed or not self._queue:
                        return
                    # the batch starts when its requests were made, as their lanes count it (a request on a
                    # tick's publish counts from the deadline: `BatchedPolicy.request`), not before the last ends
                    start = max(self._busy_until, max(t.request.submitted for _, _, t in self._queue))
                    batch = self._take(start)
                outcome = self._compute(batch)  # with the weights of the batch's start
                self._busy_until = end = start + self.curve(len(batch))
                yield (end, _SERVE)
                with self._cond:
                    self._in_flight = []
                    if self._closed:
                        return
                    self._finish(batch, outcome, start, end)
        finally:
            self._serving = False

    def _serve_wall(self) -> None:
        """Wall clock: a thread; takes the next batch as soon as one is waiting and the last is done."""
        bind = getattr(self.forward, "bind_thread", None)
        if callable(bind):
            bind()  # cuda:N: the device set on this thread before its first CUDA call
        if self._example is not None and not self._prepared:
            self._prepare(self._example)  # every graph captured before the first batch
        self._ready.set()
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._server_idle = True
                    self._cond.wait()
                self._server_idle = False
                if self._closed:
                    return
            if not self._prepared:  # the first request declared the shape: capture before serving it
                assert self._staging is not None
                self._prepare(np.zeros(self._staging.shape[1:], self._staging.dtype))
            with self._cond:
                if self._closed or not self._queue:
                    continue
                started = self.clock.now()
                batch = self._take(started)
            t0 = stopwatch()
            outcome = self._compute(batch)
            took = stopwatch() - t0
            with self._cond:
                self._in_flight = []
                if self.measure and not isinstance(outcome, BaseException):
                    self._measure(len(batch), took)
                self._finish(batch, outcome, started, self.clock.now())

    def _measure(self, b: int, took: float) -> None:
        """L(b) re-measured as it runs, on replays only, at the padded size: the first batch of a size (its
        warm-up: a graph's capture) and any call that captured never enter it (under the lock)."""
        size = self.curve.padded(b)
        timing = getattr(self.forward, "last", None)
        if timing is not None and not getattr(timing, "measurable", True):
            return
        if size not in self._warm:
            self._warm.add(size)
            return
        self.curve.observe(size, took, getattr(timing, "device_s", None))

    def _stage_ahead(self) -> None:
        """Overlap (wall clock): while a forward runs, copy the waiting requests' frames, EDF order,
        into the next batch's buffer (`_compute` uses the rows whose ticket is still in its place)."""
        seen = -1
        while True:
            with self._cond:
                while not self._closed and not (self._forward_running and self._arrivals != seen):
                    self._stager_idle = True
                    self._stage_wake.wait()
                self._stager_idle = False
                if self._closed:
                    return
            with self._stage_lock:
                with self._cond:
                    if not self._forward_running:
                        continue
                    seen = self._arrivals
                    order = [t for _, _, t in heapq.nsmallest(self.max_batch, self._queue)]
                staging, staged = self._staging, self._staged
                assert staging is not None
                j = 0
                for ticket in order:  # each frame is its lane's, unwritten until answered
                    k = ticket.request.rows
                    if j + k > self.max_batch:
                        break
                    if staged[j] is not ticket:
                        staging[j : j + k] = ticket.request.obs  # one row's frame broadcasts into its row
                        staged[j] = ticket
                    j += k

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """Answer every waiting lane with `ServerClosed` (no action: β covers its ticks) and stop the
        thread; idempotent. A request after this is answered the same way at once."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            waiting = [t for _, _, t in self._queue] + self._in_flight
            self._queue.clear()
            self._cond.notify_all()
            self._stage_wake.notify_all()
        for ticket in waiting:
            if not ticket.done:
                self.answered_closed += 1
            ticket.settle(None, ServerClosed("the batching server closed while this request waited"))
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._stager is not None:
            self._stager.join(timeout=10)

    def retire(self) -> None:
        """Close once every lane made so far is closed (now, if none is open). Whoever owns the server
        may be torn down before the pools that own its lanes: their lanes then finish their requests,
        the pools stop and release them, and the last release closes the server."""
        with self._cond:
            self._retired = True
            now = self._open_lanes == 0
        if now:
            self.close()

    def _lane_opened(self) -> None:
        with self._cond:
            self._open_lanes += 1

    def _lane_closed(self) -> None:
        with self._cond:
            self._open_lanes -= 1
            now = self._retired and self._open_lanes == 0
        if now:
            self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def report(self) -> dict[str, Any]:
        """What the server did: requests, batches by size, late answers and by how much, the curve."""
        batches = sum(self.batch_sizes.values())
        served = sum(b * n for b, n in self.batch_sizes.items())
        return {
            "clock": self.clock.kind,
            "max_batch": self.max_batch,
            "requests": self.requests,
            "batches": batches,
            "batch_size_mean": served / batches if batches else None,
            "batch_sizes": dict(sorted(self.batch_sizes.items())),
            "late": self.late,
            "late_by_mean_s": self.late_by_total / self.late if self.late else 0.0,
            "late_by_max_s": self.late_by_max,
            "failed_batches": self.failed_batches,
            "wakeups": self.wakeups,
            "prepare_error": None if self.prepare_error is None else str(self.prepare_error),
            "overlap": self.overlap,
            "staged_ahead": self.staged_ahead,
            "answered_closed": self.answered_closed,
            "curve": self.curve.describe(),
        }

    def __enter__(self) -> "BatchingServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class LaneDecision(Decision):
    """A lane's `Decision`: ``tau_theta`` is its request's whole time (queue + batch), ``batch_size``
    the batch it rode in, ``late_by`` the seconds past its due tick's deadline (0.0: on time).
    ``latency`` is what the pool still has to wait: 0.0 on the wall clock (the time has passed and is
    measured), ``tau_theta`` from ``act_timed`` (the time has passed on the virtual clock too)."""

    tau_theta: float = 0.0
    batch_size: int = 1
    late_by: float = 0.0


def _check_server_args(forward: Any, curve: Any, clock: Any, max_batch: Any, overlap: Any) -> None:
    """`BatchingServer`'s arguments, checked at the door with one line each."""
    if not callable(forward):
        raise TypeError(f"forward must be a callable batch -> actions, got {type(forward).__name__}")
    if not isinstance(curve, LatencyCurve):
        raise TypeError(f"curve must be a LatencyCurve, got {type(curve).__name__}")
    if not isinstance(clock, Clock):
        raise TypeError(f"clock must be a nonstop Clock, got {type(clock).__name__}")
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")


def check_lane_settings(tau_m: Any, due_ticks: Any, epsilon: Any, action_space: Any) -> None:
    """The settings every request lane takes (`BatchedPolicy` here, `RemoteLane` in another process),
    checked at the door with one line each."""
    if isinstance(tau_m, bool) or not isinstance(tau_m, (int, float)) or not (tau_m > 0 and math.isfinite(tau_m)):
        raise ValueError(f"tau_m must be a positive number of seconds, got {tau_m!r}")
    if due_ticks is not None and (isinstance(due_ticks, bool) or not isinstance(due_ticks, int) or due_ticks < 1):
        raise ValueError(
            f"due_ticks must be an int >= 1 or None (the first tick a batch of one makes), got {due_ticks!r}"
        )
    if not callable(epsilon) and not (isinstance(epsilon, (int, float)) and 0.0 <= epsilon <= 1.0):
        raise ValueError(f"epsilon must be a probability in [0, 1] or a callable returning one, got {epsilon!r}")
    if epsilon != 0.0 and not isinstance(action_space, gymnasium.spaces.Discrete):
        raise TypeError(f"exploring (epsilon > 0) draws from a Discrete action space, got {action_space!r}")


@dataclass(frozen=True)
class LaneSettings:
    """A lane's world grid (ticks every ``tau_m`` from ``origin``), the tick its requests are due
    (``due_ticks`` after the observation's; None: the first a batch of one makes) and its exploration
    (``epsilon``: a probability, or a callable read per decision). Checked with the action space, by
    `check_lane_settings`, where a lane is made."""

    tau_m: float
    origin: float = 0.0
    due_ticks: int | None = None
    epsilon: float | Callable[[], float] = 0.0


class BatchedPolicy(Policy):
    """A request lane: a `Policy` whose forward pass is a request to a `BatchingServer`.

    Make one with `BatchingServer.lane`. The lane tags each request with its observation's tick
    (``obs_tick``, or the latest tick of its world's grid ``origin + t·tau_m``) and the tick its action
    is due: ``obs_tick + due_ticks``, or by default the first tick a batch of one started now could
    make (the freshest action possible). ``epsilon`` (a number, or a callable read per decision: DQN's
    annealed ε) replaces the answer by a uniform random action of a `Discrete` ``action_space``; the
    request is made all the same, so exploring changes no timing.

    On the wall clock `act` blocks until the answer comes (an `InferencePool` drives the lane
    unchanged); on the virtual clock the lane waits as a timed process: ``yield from
    lane.act_timed(obs)`` (see the module docstring for why ``act`` cannot declare the time instead).
    """

    def __init__(
        self,
        server: BatchingServer,
        lane: int,
        action_space: gymnasium.Space | None,
        settings: LaneSettings,
        *,
        seed: int | None = None,
        tag: Hashable | None = None,
    ) -> None:
        if not isinstance(server, BatchingServer):
            raise TypeError(f"server must be a BatchingServer, got {type(server).__name__}")
        check_lane_settings(settings.tau_m, settings.due_ticks, settings.epsilon, action_space)
        self.server: Final = server
        self.lane: Final = lane
        if action_space is not None:
            self.action_space = action_space
        # each a plain attribute: a request reads them with no hop through ``settings``
        self.tau_m: Final = float(settings.tau_m)
        self.origin: Final = float(settings.origin)
        self.due_ticks: Final = settings.due_ticks
        self.epsilon: Final = settings.epsilon
        self.tag: Final = tag
        self.answers = 0
        self.late = 0
        self.last_answer: Answer | None = None
        self._rng = np.random.default_rng(_check_seed(seed))
        self._closed = False
        server._lane_opened()

    def seed(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(_check_seed(seed))

    def request(self, obs: np.ndarray, obs_tick: int | None = None) -> Request:
        """The request for ``obs``, tagged with its tick and due tick on this lane's world grid."""
        if self._closed:
            raise ServerClosed(f"lane {self.lane} is closed")
        clock, tau_m, origin = self.server.clock, self.tau_m, self.origin
        now = clock.now()
        if obs_tick is None:  # the newest tick published by now (a tick is published `tick_grace` after its deadline)
            obs_tick = max(0, math.floor((now - origin - clock.tick_grace / 2) / tau_m))
        now = clock.request_time(now, origin, tau_m)  # a request made on a tick's publish counts from its deadline
        if self.due_ticks is not None:
            due_tick = obs_tick + self.due_ticks
        else:
            due_tick = max(obs_tick + 1, math.ceil((now + self.server.curve(1) - origin) / tau_m - 1e-9))
        return Request(self.lane, np.asarray(obs), int(obs_tick), int(due_tick), origin + due_tick * tau_m, now)

    def act(self, obs: np.ndarray, obs_tick: int | None = None) -> LaneDecision:
        """Wall clock: submit and block until the batch is done."""
        if not self.server.threaded:
            raise TypeError(
                "on the virtual clock a request lane waits for its batch as a timed process: "
                "`yield from lane.act_timed(obs)` (an InferencePool needs its lane hook: docs/gpu.md)"
            )
        answer = self.server.wait(self.server.submit(self.request(obs, obs_tick)))
        return self._decide(answer, latency=0.0)

    def act_timed(self, obs: np.ndarray, obs_tick: int | None = None) -> Generator[Wake, float, LaneDecision]:
        """Virtual clock: submit, wait for the batch as a timed process, return the decision (its
        ``latency`` is τ_θ, already waited)."""
        if self.server.threaded:
            raise TypeError("act_timed is the virtual clock's; on the wall clock call act(obs)")
        answer = yield from self.server.wait_timed(self.server.submit(self.request(obs, obs_tick)))
        return self._decide(answer, latency=answer.tau_theta)

    def _decide(self, answer: Answer, *, latency: float) -> LaneDecision:
        self.answers += 1
        self.late += answer.late_by > 0
        self.last_answer = answer
        if self.tag is not None:  # one writer per tag (the worker's lane): no lock needed
            self.server.answered_by.setdefault(self.tag, {})[answer.obs_tick] = answer.batch_size
        action = answer.action
        epsilon = self.epsilon() if callable(self.epsilon) else self.epsilon
        if epsilon > 0 and self._rng.random() < epsilon:
            space = self.action_space
            assert isinstance(space, gymnasium.spaces.Discrete)
            action = int(space.start + self._rng.integers(space.n))
        return LaneDecision(action, latency, answer.tau_theta, answer.batch_size, answer.late_by)

    def close(self) -> None:
        """This lane is done (the server goes on serving the others, and a retired one closes with its
        last lane); idempotent."""
        if not self._closed:
            self._closed = True
            self.server._lane_closed()

    def __repr__(self) -> str:
        return f"BatchedPolicy(lane={self.lane}, tau_m={self.tau_m:g}, due_ticks={self.due_ticks})"
