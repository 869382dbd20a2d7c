"""The server's tick plumbing: where sessions' worlds tick, apart from what a session is.

`TickPool` runs hosts' ticks on a few lanes (threads), each a heap of due jobs with a heartbeat so
`/health` can tell a lane is alive; `PhaseSlots` spreads sessions' tick phases over the period
(bit-reversed, so any number of them stays evenly spaced) and `PhasedClock` is a `WallClock`
shifted to one such phase; `WorkQueue` bounds the work the request loop hands out, with explicit
backpressure; `WarmEnvs` keeps built envs ready so a new session starts without the build.
`nonstop.server.sessions` (the session lifecycle, admission, the manager) and
`nonstop.server.tickprocs` (the same ticking in worker processes) both build on it.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import logging
import math
import secrets
import threading
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from nonstop.realtime.clock import WallClock
from nonstop.server.protocol import ErrorCode, ProtocolError

__all__ = ["TickPool", "PhaseSlots", "PhasedClock", "WorkQueue", "WarmEnvs"]

log = logging.getLogger("nonstop.server")


class _Heartbeat:
    """A no-op job each pool lane runs at a few Hz, so `/health` can tell a lane is alive even
    with no session on it."""

    def __init__(self, clock: WallClock, period: float) -> None:
        self.clock, self.period = clock, period
        self.last_beat = clock.now()
        self.cancelled = False

    def advance(self) -> float | None:
        self.last_beat = now = self.clock.now()
        return self.clock.origin + now + self.period


class _Lane(threading.Thread):
    """One pool thread: a heap of ``(absolute deadline, order, job)``; runs each job when due.
    A job has ``advance() -> next absolute deadline | None`` and a ``cancelled`` flag."""

    def __init__(self, index: int, clock: WallClock) -> None:
        super().__init__(name=f"nonstop-tick-{index}", daemon=True)
        self.clock = clock
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self.jobs = 0

    def add(self, job: Any, at: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._order), job))
            self.jobs += 1
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def run(self) -> None:
        origin = self.clock.origin
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    if self._heap:
                        left = self._heap[0][0] - (origin + self.clock.now())
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    else:
                        self._cond.wait()
                _, _, job = heapq.heappop(self._heap)
            nxt = None if job.cancelled else job.advance()
            with self._cond:
                if nxt is None:
                    self.jobs -= 1
                else:
                    heapq.heappush(self._heap, (nxt, next(self._order), job))


class TickPool:
    """A few threads that drive many hosts on the wall clock (never the event loop).

    Sessions go to the lane with the fewest jobs. Threads share the GIL, so more lanes do not add
    CPU; they bound how long one slow env step can delay the ticks of the others.
    """

    def __init__(self, threads: int = 2, *, heartbeat_hz: float = 10.0) -> None:
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        self.clock = WallClock(spin=0.0)
        self.phases = PhaseSlots()
        self._lanes = [_Lane(i, self.clock) for i in range(threads)]
        self._beats = [_Heartbeat(self.clock, 1.0 / heartbeat_hz) for _ in self._lanes]
        for lane, beat in zip(self._lanes, self._beats):
            lane.start()
            lane.add(beat, self.clock.origin + self.clock.now())

    def add(self, job: Any, at: float) -> None:
        """Schedule ``job`` (first ``advance`` at absolute perf-counter time ``at``)."""
        min(self._lanes, key=lambda lane: lane.jobs).add(job, at)

    def heartbeat_age(self) -> float:
        """Seconds since the least recently beating lane last ran (small means all alive)."""
        now = self.clock.now()
        return max(now - beat.last_beat for beat in self._beats)

    def close(self) -> None:
        for lane in self._lanes:
            lane.stop()
        for lane in self._lanes:
            lane.join(timeout=5)


# ----------------------------------------------------------------------------- phases


def _bit_reversed(n: int) -> list[int]:
    """0..n-1 (n a power of two) in bit-reversed order: each prefix is spread evenly over the range."""
    bits = n.bit_length() - 1
    return [int(format(i, f"0{bits}b")[::-1], 2) if bits else 0 for i in range(n)]


class PhaseSlots:
    """Spreads the sessions' tick grids over one tick period, so their deadlines do not bunch.

    Sessions started at random moments would sometimes tick within microseconds of each other and
    queue behind one another on the pool; a session here takes the least used of ``slots`` evenly
    spaced phases (in bit-reversed order, so every prefix of starts is spread evenly), and its
    ticks fall at ``phase + t·τ_M`` on the pool's clock. Pure bookkeeping; thread-safe.

    >>> slots = PhaseSlots(4)
    >>> [slots.acquire(1.0) for _ in range(5)]
    [(0, 0.0), (2, 0.5), (1, 0.25), (3, 0.75), (0, 0.0)]
    """

    def __init__(self, slots: int = 64) -> None:
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, got {slots!r}")
        self.slots = slots
        self._order = _bit_reversed(slots)
        self._used: dict[float, list[int]] = {}
        self._lock = threading.Lock()

    def acquire(self, tau_m: float) -> tuple[int, float]:
        with self._lock:
            used = self._used.setdefault(tau_m, [0] * self.slots)
            index = min(self._order, key=lambda i: used[i])  # min keeps the first of equals
            used[index] += 1
        return index, index * tau_m / self.slots

    def release(self, tau_m: float, index: int) -> None:
        with self._lock:
            self._used[tau_m][index] -= 1


class PhasedClock(WallClock):
    """The clock a session's host reads its origin from: the wall clock rounded up to the session's
    phase on the pool's grid, so the host's tick grid lands in its slot. The host reads ``now()``
    only for its origin; the pool hands it real wake times, so lateness is measured unrounded."""

    def __init__(self, origin: float, tau_m: float, phase: float) -> None:
        super().__init__(origin=origin, spin=0.0)
        self.tau_m, self.phase = tau_m, phase

    def now(self) -> float:
        t = super().now()
        return self.phase + math.ceil((t - self.phase) / self.tau_m) * self.tau_m


# ----------------------------------------------------------------------------- work queue


class WorkQueue:
    """A bounded thread pool for slow work (env builds, resets, replay writes).

    ``submit`` raises ``ProtocolError(BACKPRESSURE)`` once ``max_pending`` jobs are queued or
    running, instead of letting the backlog (and every client's latency) grow.
    """

    def __init__(self, workers: int = 2, max_pending: int = 16) -> None:
        if workers < 1 or max_pending < workers:
            raise ValueError(f"need workers >= 1 and max_pending >= workers, got {workers}, {max_pending}")
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="nonstop-work")
        self.max_pending = max_pending
        self._pending = 0
        self._lock = threading.Lock()
        self.refused = 0

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        with self._lock:
            if self._pending >= self.max_pending:
                self.refused += 1
                raise ProtocolError(
                    ErrorCode.BACKPRESSURE,
                    f"the server's work queue is full ({self.max_pending} jobs pending): retry shortly",
                )
            self._pending += 1
        fut = self._pool.submit(fn, *args)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _: Any) -> None:
        with self._lock:
            self._pending -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------- warm envs


class WarmEnvs:
    """Envs built and seeded ahead of time, so a session start costs one unseeded reset.

    Building an ALE env and its seeded reset (which reloads the ROM) take ~0.4 s here and hold the
    GIL: done on demand they stall every other session's ticks and make a start slow. So spares
    are built at startup and topped up only while no session is running. A client
    that leaves the seed to the server gets one of these instead: built by a background thread with
    a random seed that the replay records (``warm_reset``: the env was reset with the seed once
    before the host's own reset), so replays still re-simulate exactly.
    """

    def __init__(self, per_env: int, env_ids: list[str], idle: Callable[[], bool] = lambda: True) -> None:
        if not isinstance(per_env, int) or per_env < 0:
            raise ValueError(f"warm envs per env id must be a non-negative integer, got {per_env!r}")
        self.per_env = per_env
        self._idle = idle
        self._spares: dict[str, deque[tuple[gym.Env, int]]] = {e: deque() for e in env_ids}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        if per_env:
            self._thread = threading.Thread(target=self._fill, name="nonstop-warm", daemon=True)
            self._thread.start()

    def take(self, env_id: str) -> tuple[gym.Env | None, int]:
        """A warm env and its seed, or ``(None, fresh seed)`` when none is ready."""
        with self._cond:
            spares = self._spares.get(env_id)
            if spares:
                env, seed = spares.popleft()
                self._cond.notify()
                return env, seed
        return None, secrets.randbelow(2**31)

    def ready(self) -> dict[str, int]:
        with self._cond:
            return {e: len(q) for e, q in self._spares.items()}

    def wait_ready(self, timeout: float) -> bool:
        """Block until every env id has its spares (startup, benchmarks)."""
        with self._cond:
            return self._cond.wait_for(lambda: all(len(q) >= self.per_env for q in self._spares.values()), timeout)

    def _fill(self) -> None:
        from nonstop.envs import make_env

        def needed() -> bool:
            # only while no session runs: a build holds the GIL ~0.4 s and would stall their ticks
            return any(len(q) < self.per_env for q in self._spares.values()) and self._idle()

        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or needed(), timeout=1.0)
                if not self._stopping and not needed():
                    continue
                if self._stopping:
                    return
                env_id = next(e for e, q in self._spares.items() if len(q) < self.per_env)
            seed = secrets.randbelow(2**31)
            try:
                env = make_env(env_id)
                env.reset(seed=seed)
            except Exception:  # sessions fall back to building their own
                log.error("warm env %s failed to build\n%s", env_id, traceback.format_exc())
                return
            with self._cond:
                self._spares[env_id].append((env, seed))
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._cond:
            for spares in self._spares.values():
                while spares:
                    spares.popleft()[0].close()
