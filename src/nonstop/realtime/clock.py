"""Clocks: the world's time, and the one way a timed process reads or waits on it.

Everything that runs against the world's time (the host's tick loop, inference workers, their
timers, the sequential agent, learners on the virtual clock) is written once as a *timed process*:
a generator that yields the absolute time it wants to wake at (or ``(time, priority)`` to order
itself among wake-ups due at the same virtual instant) and receives the time it actually woke::

    def ticker(clock):
        woke = yield 1.0          # sleep until t = 1.0 on this clock
        ...

`WallClock` drives such a process on a thread and really waits; `VirtualClock`
is a discrete-event simulator that jumps straight to the next wake-up, so the
same code runs reproducibly and far faster than realtime.

A timed process runs the same lines on both clocks; what differs is the clock's to say
(`Clock.real`: real-world margins and measured work count on the wall clock, not on the virtual
one; `Clock.resync`, `Clock.for_threads`, `Clock.call_at`, `Clock.timed_call`, `Clock.restarted`,
`Clock.arrival`, `Clock.look_ahead`). Where a part itself takes another shape, it asks the clock
what it offers, not which clock it is: `Clock.waits_block` (a thread of its own, or a timed process
the clock drives) and `Clock.spans_processes` (whether a child process can share the time).

What is not the world's time reads the machine's clock where it is needed, not through a clock:
how long a piece of work took (`stopwatch`), a timeout on a pipe, a socket or a spin on shared
memory, a run's progress and a sweep's schedule in wall seconds, a benchmark's own measurements.

>>> clock = VirtualClock()
>>> seen = []
>>> def proc(name, period):
...     t = 0.0
...     for _ in range(3):
...         t += period
...         woke = yield t
...         seen.append((name, round(woke, 3)))
>>> _ = clock.spawn(proc("a", 0.5)); _ = clock.spawn(proc("b", 0.75))
>>> clock.run()
>>> seen
[('a', 0.5), ('b', 0.75), ('a', 1.0), ('b', 1.5), ('a', 1.5), ('b', 2.25)]
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import Any, Final, Protocol, TypeAlias

from nonstop.realtime import lifeline

#: What a timed process yields: the absolute time it wants to wake at, or ``(time, priority)`` to
#: order itself among wake-ups due at the same virtual instant (lower first; the wall clock ignores it).
Wake: TypeAlias = float | tuple[float, int]
#: A timed process: yields `Wake`s, receives the time it actually woke.
TimedProcess: TypeAlias = Generator[Wake, float, None]

__all__ = [
    "Clock",
    "WallClock",
    "VirtualClock",
    "ProcessThread",
    "Handle",
    "TimedProcess",
    "Wake",
    "make_clock",
    "stopwatch",
]

#: Measures how long a piece of work took (an env step, a forward pass). It is
#: not the world's time: under a VirtualClock the world's time is `clock.now()`.
stopwatch = time.perf_counter


class Clock(ABC):
    """One interface for wall and virtual time.

    ``now()`` is seconds since the clock's origin. ``spawn(process)`` runs a
    timed process on this clock. ``tick_grace`` is how long after a deadline the
    host processes a tick: zero on the wall clock (real lateness is measured),
    one microsecond on the virtual clock so that float rounding in a sum of
    waits never decides whether an action made its tick.
    """

    is_virtual: bool = False
    #: What a run's description calls this clock (``"wall"`` or ``"virtual"``).
    kind: str = "wall"
    tick_grace: float = 0.0
    #: Whether a wait blocks its thread for that long in wall time (the wall clock): a part that waits (a
    #: batching server, a device learner) runs on a thread of its own, and other threads run meanwhile (a
    #: server's stager copies frames while a forward pass runs). False where the clock simulates every wait
    #: on the caller's thread (the virtual clock): such a part is a timed process the clock drives, and
    #: nothing runs beside a computation.
    waits_block: bool = True
    #: Whether another process can read this clock's time (a child builds its own clock from this one's
    #: origin: the wall clock's CLOCK_MONOTONIC is the machine's). False where the time is a simulation
    #: inside this interpreter (the virtual clock): a host, or a lane, on it stays in this process.
    spans_processes: bool = True

    @abstractmethod
    def now(self) -> float:
        """Seconds since the clock's origin."""

    @abstractmethod
    def sleep_until(self, t: float) -> float:
        """Block the caller until time ``t``; return the time actually woken."""

    @abstractmethod
    def spawn(
        self, process: TimedProcess, *, name: str = "process", priority: int = 0, isolate: bool = False
    ) -> "Handle":
        """Run a timed process on this clock; return its handle. ``priority`` orders wake-ups due at the
        same virtual instant; ``isolate``: an error ends the process alone (kept on its handle)."""

    @abstractmethod
    def call_at(self, t: float, fn: Callable[[], None], *, priority: int = 0, isolate: bool = False) -> "Handle":
        """Run ``fn`` once at time ``t`` (at once if ``t`` has passed)."""

    def sleep(self, seconds: float) -> float:
        return self.sleep_until(self.now() + seconds)

    # ---- what differs between the clocks, so that a timed process runs the same lines on both
    @abstractmethod
    def real(self, seconds: float) -> float:
        """What ``seconds`` of real-world time amount to on this clock: a margin against a late wake-up,
        a guard before a deadline, a measured computation. All of them on the wall clock; none on the
        virtual clock, where events happen exactly when due and only declared latencies take time."""

    def unmeasured(self, seconds: float) -> float:
        """What work this clock cannot measure is taken to last: ``seconds`` (a stand-in such as τ_M for
        an update) on the virtual clock; none on the wall clock, where the work's own time has passed."""
        return seconds - self.real(seconds)

    @abstractmethod
    def resync(self, target: float, woke: float, period: float) -> float:
        """A timed process's own time after a wait aimed at ``target`` that ended at ``woke``: the target
        (its timings stay exact sums of waits), unless a real wake came a whole ``period`` late."""

    @abstractmethod
    def for_threads(self, interrupt: threading.Event) -> "Clock":
        """The clock for timed processes that share one interpreter (inference workers, their timers):
        on the wall clock threads that sleep, never spin (they share the GIL), and wake once
        ``interrupt`` is set; the virtual clock simulates them all itself."""

    @abstractmethod
    def restarted(self) -> "Clock":
        """The clock a restarted world runs on: this one on the wall clock (time goes on); a fresh
        simulation from 0 on the virtual clock (the new world's run is reproducible on its own)."""

    @abstractmethod
    def arrival(self, t: float) -> float:
        """When what was published for time ``t`` reaches a reader outside any timed process (a
        Gymnasium agent): now on the wall clock (the time it took to arrive has passed); ``t`` itself on
        the virtual clock (its tick grace is the simulator's, not the reader's)."""

    @abstractmethod
    def look_ahead(self, due: float, poll: float, *, late: float) -> float:
        """How far a reader outside any timed process runs a world that owes it something at ``due``:
        to ``due`` on the virtual clock (it happens exactly then); on the wall clock at most ``poll``
        from now and ``late`` past ``due`` (it may come late, and the reader looks again)."""

    def request_time(self, now: float, origin: float, period: float) -> float:
        """When a request made at ``now`` on a grid of ``period`` from ``origin`` starts counting its
        latency: ``now`` on the wall clock; on the virtual clock a request made on a tick's publish
        (``tick_grace`` after its deadline) counts from the deadline, as a worker's declared latency does
        (`resync`), so k ticks of latency started on tick t's observation land on tick t + k."""
        return now

    def timed_call(self, policy: object) -> Callable[..., Generator[Wake, float, Any]] | None:
        """How a timed process on this clock calls ``policy`` that takes time: None for a plain blocking
        ``act`` (a thread blocks in it); the policy's ``act_timed`` where the call must be waited for as
        a timed process (a batching server's lane on the virtual clock)."""
        return None

    def close(self) -> None:
        """Stop this clock's timers (`call_at` not yet due never runs); the virtual clock has none."""
        return None


class Handle(Protocol):
    """What `Clock.spawn` returns: whether the process still runs, the error that ended it."""

    @property
    def alive(self) -> bool: ...

    @property
    def error(self) -> BaseException | None: ...

    def finish(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` for the process to end (it was told to stop); whether it has."""
        ...


class ProcessThread(threading.Thread):
    """The daemon thread that drives one timed process on a `WallClock`; ``error`` is the
    exception that ended the process (None while it runs or after a normal end)."""

    error: BaseException | None = None

    @property
    def alive(self) -> bool:
        return self.is_alive()

    def finish(self, timeout: float | None = None) -> bool:
        self.join(timeout)
        return not self.is_alive()


class WallClock(Clock):
    """Real time from ``time.perf_counter`` (CLOCK_MONOTONIC, shared by every
    process on the machine, so clocks built with the same ``origin`` agree
    across processes).

    ``sleep_until`` sleeps until ``spin`` seconds before the deadline, then
    spins: on this machine kind p99 lateness drops from ~260 µs (plain sleep)
    to ~35 µs. A spinning thread holds the GIL, so worker threads that share a
    process use ``spin=0``.

    >>> clock = WallClock(spin=0.0)
    >>> woke = clock.sleep_until(clock.now() + 0.01)
    >>> woke >= 0.0
    True
    """

    is_virtual = False
    tick_grace = 0.0

    def __init__(
        self, *, origin: float | None = None, spin: float = 0.001, interrupt: threading.Event | None = None
    ) -> None:
        if spin < 0 or spin != spin:
            raise ValueError(f"spin must be a non-negative number of seconds, got {spin!r}")
        if interrupt is not None and not isinstance(interrupt, threading.Event):
            raise TypeError(f"interrupt must be a threading.Event, got {type(interrupt).__name__}")
        self.origin: Final[float] = time.perf_counter() if origin is None else float(origin)
        self.spin: Final[float] = float(spin)
        self.interrupt: Final[threading.Event | None] = interrupt
        self._threads: list[ProcessThread] = []
        self._timers: _Timers | None = None

    def real(self, seconds: float) -> float:
        return seconds

    def resync(self, target: float, woke: float, period: float) -> float:
        # a thread woken late (a loaded machine wakes sleepers milliseconds late) jitters one action
        # but never drifts its phase; only a wake a tick late resynchronises (rather than bursting)
        return target if woke - target < period else woke

    def for_threads(self, interrupt: threading.Event) -> "WallClock":
        return WallClock(origin=self.origin, spin=0.0, interrupt=interrupt)

    def restarted(self) -> "WallClock":
        return self

    def arrival(self, t: float) -> float:
        return self.now()

    def look_ahead(self, due: float, poll: float, *, late: float) -> float:
        return min(self.now() + poll, due + late)

    def call_at(self, t: float, fn: Callable[[], None], *, priority: int = 0, isolate: bool = False) -> "_Timers":
        """Run ``fn`` at ``t`` on this clock's timer thread (one for all its calls; ``fn`` must be quick)."""
        if self._timers is None:
            self._timers = _Timers(self)
        self._timers.add(t, fn)
        return self._timers

    def close(self) -> None:
        if self._timers is not None:
            self._timers.stop()

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def sleep_until(self, t: float) -> float:
        """Wait until ``t``; with an ``interrupt`` event, return early (before ``t``) once it is
        set, so a thread sleeping through a long inference latency can be stopped at once."""
        target = self.origin + t
        remaining = target - time.perf_counter()
        wait = self.interrupt.wait if self.interrupt is not None else None
        if remaining > self.spin:
            if wait is not None:
                if wait(remaining - self.spin):
                    return time.perf_counter() - self.origin
            else:
                time.sleep(remaining - self.spin)
        if self.spin > 0:
            while time.perf_counter() < target:
                pass
        else:
            # without spinning, sleep may return a hair early; never report before t
            while (left := target - time.perf_counter()) > 0:
                if wait is not None:
                    if wait(left):
                        break
                else:
                    time.sleep(left)
        return time.perf_counter() - self.origin

    def spawn(
        self, process: TimedProcess, *, name: str = "process", priority: int = 0, isolate: bool = False
    ) -> ProcessThread:
        """Drive ``process`` on a daemon thread. Exceptions are kept on the
        thread object as ``thread.error`` for the supervisor to read (every thread is isolated;
        ``priority`` orders only virtual instants). Setting the clock's ``interrupt`` event ends
        the process at its current wait."""

        interrupt = self.interrupt

        def drive() -> None:
            try:
                wake = next(process)
                while True:
                    woke = self.sleep_until(wake[0] if isinstance(wake, tuple) else wake)
                    if interrupt is not None and interrupt.is_set():
                        process.close()  # stopped mid-wait: end the process where it sleeps
                        return
                    wake = process.send(woke)
            except StopIteration:
                pass
            except BaseException as exc:  # handed to the supervisor
                thread.error = exc

        thread = ProcessThread(target=drive, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread


class _Timers:
    """One thread that runs a `WallClock`'s `call_at` calls at their times (a sooner one may arrive
    while it waits), until the clock is closed or its interrupt is set."""

    def __init__(self, clock: WallClock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="nonstop-timers", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def add(self, when: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._order), fn))
            self._cond.notify()

    def _ended(self) -> bool:
        interrupt = self._clock.interrupt
        return self._stopped or (interrupt is not None and interrupt.is_set())

    def _run(self) -> None:
        clock = self._clock
        while True:
            with self._cond:
                while not self._heap and not self._ended():
                    self._cond.wait(0.1)
                if self._ended():
                    return
                left = self._heap[0][0] - clock.now()
                if left > 0.002:  # sleep on the condition (a sooner call may arrive)
                    self._cond.wait(min(left - 0.001, 0.1))
                    continue
                when, _, fn = heapq.heappop(self._heap)
            clock.sleep_until(when)
            if self._ended():
                return
            try:
                fn()
            except BaseException as exc:  # kept, as a process thread keeps its error
                self.error = exc

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=2)

    def finish(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


class VirtualProcess:
    """Handle of a process running on a `VirtualClock`."""

    __slots__ = ("name", "process", "alive", "error", "cancelled")

    def __init__(self, name: str, process: TimedProcess) -> None:
        self.name = name
        self.process = process
        self.alive = True
        self.error: BaseException | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """Stop the process at its next wake-up (used to kill a worker)."""
        self.cancelled = True

    def finish(self, timeout: float | None = None) -> bool:
        """Nothing to wait for: a simulated process holds no thread, and runs only when the simulation
        does (one told to stop ends at its next wake-up)."""
        return True


class VirtualClock(Clock):
    """Deterministic discrete-event clock: nothing sleeps, time jumps to the
    next wake-up. Ties are broken by ``priority`` (lower first) then by the
    order events were scheduled, so a run is exactly reproducible.

    Errors raised inside a process propagate out of `run`/`run_until` unless
    the process was spawned with ``isolate=True`` (a worker that may die: its
    error is kept on the handle and the simulation goes on). ``KeyboardInterrupt``
    and ``SystemExit`` always propagate: a signal is never a process's death.
    """

    is_virtual = True
    kind = "virtual"
    tick_grace = 1e-6
    waits_block = False
    spans_processes = False

    def __init__(self) -> None:
        self._now = 0.0
        self._queue: list[tuple[float, int, int, VirtualProcess, bool]] = []
        self._priority: dict[int, int] = {}
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def spawn(
        self,
        process: TimedProcess,
        *,
        name: str = "process",
        priority: int = 0,
        isolate: bool = False,
    ) -> VirtualProcess:
        handle = VirtualProcess(name, process)
        self._priority[id(handle)] = priority
        self._step(handle, None, priority, isolate)
        return handle

    def _step(self, handle: VirtualProcess, woke: float | None, priority: int, isolate: bool) -> None:
        try:
            if handle.cancelled:
                handle.process.close()
                raise StopIteration
            wake = next(handle.process) if woke is None else handle.process.send(woke)
        except StopIteration:
            handle.alive = False
            self._priority.pop(id(handle), None)
            return
        except Exception as exc:
            handle.alive = False
            self._priority.pop(id(handle), None)
            handle.error = exc
            if not isolate:
                raise
            return
        except BaseException:
            # Ctrl-C or SIGTERM (SystemExit) raised while this process ran: the user's stop, never
            # this process's death, so it ends the whole simulation even for an isolated process
            handle.alive = False
            self._priority.pop(id(handle), None)
            raise
        wake_priority = priority
        if isinstance(wake, tuple):  # (time, priority): order this one wake-up among equal times
            wake, wake_priority = wake
        if wake != wake:
            raise ValueError(f"process {handle.name!r} asked to wake at NaN")
        heapq.heappush(self._queue, (max(float(wake), self._now), wake_priority, next(self._order), handle, isolate))

    def call_at(self, t: float, fn: Callable[[], None], *, priority: int = 0, isolate: bool = False) -> VirtualProcess:
        """Run ``fn`` once at virtual time ``t`` (now, before this returns, if ``t`` has passed)."""

        def once() -> TimedProcess:
            if t > self._now:
                yield t
            fn()

        return self.spawn(once(), name=getattr(fn, "__name__", "call"), priority=priority, isolate=isolate)

    def real(self, seconds: float) -> float:
        return 0.0

    def resync(self, target: float, woke: float, period: float) -> float:
        return target  # virtual time never drifts: a wait ends on its target

    def for_threads(self, interrupt: threading.Event) -> "VirtualClock":
        return self

    def restarted(self) -> "VirtualClock":
        return VirtualClock()

    def arrival(self, t: float) -> float:
        return t

    def look_ahead(self, due: float, poll: float, *, late: float) -> float:
        return due

    def request_time(self, now: float, origin: float, period: float) -> float:
        deadline = origin + round((now - origin) / period) * period
        return deadline if 0.0 <= now - deadline <= 2 * self.tick_grace else now

    def timed_call(self, policy: object) -> Callable[..., Generator[Wake, float, Any]] | None:
        timed = getattr(policy, "act_timed", None)
        return timed if callable(timed) else None

    def next_event_time(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def run_until(self, t: float) -> None:
        """Process every event due at or before ``t``, then set now to ``t``."""
        while self._queue and self._queue[0][0] <= t:
            if lifeline.pending_stop:
                lifeline.raise_if_stop_requested()
            wake, _, _, handle, isolate = heapq.heappop(self._queue)
            self._now = wake
            self._step(handle, wake, self._priority.get(id(handle), 0), isolate)
        self._now = max(self._now, t)

    def run(self, until: Callable[[], bool] | None = None, *, max_time: float = float("inf")) -> None:
        """Process events until none remain, ``until()`` is true, or ``max_time``."""
        while self._queue and self._queue[0][0] <= max_time:
            if until is not None and until():
                return
            if lifeline.pending_stop:
                lifeline.raise_if_stop_requested()
            wake, _, _, handle, isolate = heapq.heappop(self._queue)
            self._now = wake
            self._step(handle, wake, self._priority.get(id(handle), 0), isolate)

    def sleep_until(self, t: float) -> float:
        """For code outside any process (a Gymnasium agent's loop): advance the
        simulation to ``t``, running every event on the way."""
        self.run_until(t)
        return self._now


def make_clock(clock: str | Clock) -> Clock:
    """Accept ``"wall"``, ``"virtual"`` or a `Clock` instance."""
    if isinstance(clock, Clock):
        return clock
    if clock == "wall":
        return WallClock()
    if clock == "virtual":
        return VirtualClock()
    raise ValueError(f"clock must be 'wall', 'virtual' or a Clock instance, got {clock!r}")
