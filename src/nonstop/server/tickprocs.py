"""The tick pool spread over a few worker processes, past the one-core limit of one GIL.

Why: an ALE step holds the GIL (~110 µs for Boxing), so one Python process ticking 64 sessions at
60 Hz, plus the request loop beside it, runs at ~90 % of one core and its ticks queue: lateness
grows to tens or hundreds of milliseconds. A `TickProcs` pool runs the ticking in ``n`` spawned
worker processes instead, each with one tick lane (the same `_Lane` heap of deadlines as the
in-process pool) over the hosts it was given.

What runs where: the **server process** owns every session — admission, the lifecycle state
machine, its `LatestSlot`, `ActionQueue` and `TickBoard` in shared memory (it creates and unlinks
them), the replay file, the request loop. A **worker process** only builds envs (its own warm
spares, since an env cannot move between processes), runs hosts on their tick grids, and hands a
host's tick log and replay record back when the server stops it. Agents' observations and actions
go through the shared-memory channels, never through the worker's pipe; the pipe carries commands
(start, stop), their replies, and one short note whenever a tick the server waits for has come.

A worker ignores SIGINT and SIGTERM (the server owns shutdown: it ends every session, collects
every log, then tells each worker to exit) and exits on its own when its pipe to the server closes,
so a killed server leaves no worker behind. Its tick lane runs at realtime priority where permitted
(`nonstop.realtime.host.raise_priority`), the policy of every wall-clock host in nonstop.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import multiprocessing as mp
import multiprocessing.synchronize
import signal
import threading
import traceback
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any, Final

import numpy as np

from nonstop.realtime.channels import SEGMENT_PREFIX, ActionQueue, LatestSlot, SharedSegment
from nonstop.realtime.clock import WallClock
from nonstop.realtime.lifeline import hold_lifeline, reap

__all__ = ["TickBoard", "TickProcs", "RECENT_TICKS"]

log = logging.getLogger("nonstop.server")

#: `/sessions` reports each running session's lateness over this many most recent ticks
RECENT_TICKS: Final = 600
#: "no tick awaited" in a board's next-wake word
NO_WAKE: Final = 1 << 62
_TICK, _WAKE, _ORIGIN, _RING = 0, 1, 2, 3


class TickBoard(SharedSegment):
    """Per-session words shared by the server and the worker that ticks it.

    ``tick`` (the newest tick processed) and a ring of the last `RECENT_TICKS` ticks' lateness are
    written by the worker; ``next_wake`` (the earliest tick a client waits for) by the server. The
    worker sends a note when ``tick`` reaches ``next_wake``, so the server's waiters are released
    without polling. The server creates and unlinks it; the worker attaches by name.

    >>> board = TickBoard.create()
    >>> board.tick, board.next_wake
    (0, 4611686018427387904)
    >>> board.unlink()
    """

    def __init__(self, name: str, *, _shm: Any = None) -> None:
        self.name = name
        self._owner = _shm is not None
        self._last_tick = 0
        self._shm = _shm if _shm is not None else shared_memory.SharedMemory(name=name, create=False)
        self._q = self._shm.buf.cast("q")
        self._d = np.ndarray((_RING + RECENT_TICKS,), np.float64, self._shm.buf)

    @classmethod
    def create(cls) -> "TickBoard":
        import os
        import uuid

        name = f"{SEGMENT_PREFIX}board_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=8 * (_RING + RECENT_TICKS))
        board = cls(name, _shm=shm)
        board._d[:] = 0.0
        board._q[_TICK] = 0
        board._q[_WAKE] = NO_WAKE
        return board

    def __reduce__(self) -> tuple:
        return (TickBoard, (self.name,))

    # The server's threads may read a board while finalization closes it: a closed board answers
    # with its last tick and ignores writes instead of raising.
    @property
    def tick(self) -> int:
        q = self._q
        try:
            return q[_TICK] if q is not None else self._last_tick
        except ValueError:  # released meanwhile
            return self._last_tick

    @property
    def next_wake(self) -> int:
        return self._q[_WAKE]

    @next_wake.setter
    def next_wake(self, tick: float) -> None:
        q = self._q
        try:
            if q is not None:
                q[_WAKE] = NO_WAKE if tick == float("inf") else int(tick)
        except ValueError:  # released meanwhile
            pass

    @property
    def origin(self) -> float:
        return float(self._d[_ORIGIN])

    def recent_lateness(self) -> np.ndarray:
        """Lateness (s) of the last ``min(tick, RECENT_TICKS)`` ticks, in no particular order."""
        tick, d = self.tick, self._d
        if d is None:
            return np.zeros(0)
        ring = d[_RING:]
        return ring.copy() if tick >= RECENT_TICKS else ring[1 : tick + 1].copy()

    def _drop_views(self) -> None:
        if self._q is not None:
            self._last_tick = self._q[_TICK]
            self._q.release()
        self._q = self._d = None  # type: ignore[assignment]


class SharedLock(mp.synchronize.Lock):
    """A spawn-context lock that may travel to a process that is already running.

    A `multiprocessing` lock refuses to be pickled except while a child is being spawned; on POSIX
    its semaphore is named, so the receiver can open it by name at any time while the creator still
    holds it. The server keeps each session's `ActionQueue` (and so its lock) until the worker has
    stopped the session's host.
    """

    def __init__(self) -> None:
        super().__init__(ctx=mp.get_context("spawn"))

    def __getstate__(self) -> tuple:
        lock = self._semlock
        if lock.name is None:  # pragma: no cover - Windows: no named semaphores
            raise TypeError("this platform cannot pass a lock to a running process")
        return (lock.handle, lock.kind, lock.maxvalue, lock.name)


class _SharedLocks:
    """The ``ctx`` for `ActionQueue.create` whose queues a running tick worker can attach."""

    @staticmethod
    def Lock() -> SharedLock:  # noqa: N802 - the multiprocessing context's method name
        return SharedLock()


SHARED_LOCKS: Final = _SharedLocks()


# ----------------------------------------------------------------------------- worker side


class _WorkerJob:
    """One host on a worker's lane: ticks it, fills its board, notes awaited ticks to the server."""

    def __init__(self, sid: str, host: Any, process: Any, board: TickBoard, clock: WallClock, note: Callable) -> None:
        self.sid, self.host, self.process, self.board, self.clock, self.note = sid, host, process, board, clock, note
        self.cancelled = False
        self.drive = threading.Lock()
        self.due = 0.0  # the deadline the host last yielded (clock time)
        self.noted = -1  # the next-wake value already noted (never note one twice)
        self.env: Any = None
        self.recorder: Any = None

    def advance(self) -> float | None:
        with self.drive:
            if self.cancelled:
                return None
            now = self.clock.now()
            try:
                wake = self.process.send(now)
            except StopIteration:
                self.cancelled = True
                self.note(("ended", self.sid, "max_ticks reached"))
                return None
            except BaseException as exc:  # noqa: BLE001 - the env raised: end this session only
                self.cancelled = True
                error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                log.error("session %s: env raised\n%s", self.sid, traceback.format_exc())
                self.note(("ended", self.sid, f"env error: {error}"))
                return None
            board = self.board
            tick = self.host.tick
            board._d[_RING + tick % RECENT_TICKS] = now - self.due
            q = board._q
            q[_TICK] = tick
            wake_at = q[_WAKE]
            if tick >= wake_at and wake_at != self.noted:
                self.noted = wake_at
                self.note(("tick", self.sid, tick))
            self.due = wake
            return self.clock.origin + wake


def _worker_main(conn: Any, index: int, env_ids: list[str], warm: int, sched: str) -> None:
    """Entry point of a tick worker: a command loop on the main thread, one tick lane beside it."""
    from types import SimpleNamespace

    from nonstop.envs import make_env
    from nonstop.realtime.defaults import make_default
    from nonstop.realtime.host import Host, raise_priority
    from nonstop.server.replay import ReplayRecorder
    from nonstop.server.sessions import PhasedClock, WarmEnvs, _Lane

    hold_lifeline()  # a killed server leaves no worker behind, even one busy ticking
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server owns shutdown
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    send_lock = threading.Lock()

    def note(message: tuple) -> None:
        with send_lock:
            try:
                conn.send(message)
            except (OSError, ValueError):  # the server is gone; the command loop exits on EOF
                pass

    class RealtimeLane(_Lane):
        def run(self) -> None:
            # this thread only (Linux schedules threads): env builds and commands stay at normal priority
            note(("sched", raise_priority(sched)))
            super().run()

    clock = WallClock(spin=0.0)
    lane = RealtimeLane(index, clock)
    lane.start()
    jobs: dict[str, _WorkerJob] = {}
    spares = WarmEnvs(warm, env_ids, idle=lambda: not jobs)

    def start(sid: str, cfg: dict, slot: LatestSlot, queue: ActionQueue, board: TickBoard) -> dict:
        env, seed, warmed = None, cfg["seed"], False
        try:
            if seed is None:  # the client left the seed to us: a warm env, already reset with its seed
                env, seed = spares.take(cfg["env"])
                warmed = env is not None
            if env is None:
                env = make_env(cfg["env"])
            if cfg["record"]:
                env = ReplayRecorder(env)
            default = make_default(cfg["default"], noop_action=cfg["noop_action"])
            host = Host(env, slot, queue, tau_m=cfg["tau_m"], default=default, seed=None if warmed else seed,
                        max_ticks=cfg["max_ticks"], meta=cfg["meta"])  # fmt: skip
            process = host.run(PhasedClock(cfg["origin"], cfg["tau_m"], cfg["phase"]))
            job = _WorkerJob(sid, host, process, board, WallClock(origin=cfg["origin"], spin=0.0), note)
            job.env, job.recorder = env, env if cfg["record"] else None
            job.due = first = next(process)  # env.reset happens here
        except BaseException:
            if env is not None:
                env.close()
            slot.close(), queue.close(), board.close()
            raise
        board._d[_ORIGIN] = host.origin
        jobs[sid] = job
        lane.add(job, cfg["origin"] + first)
        return {"seed": seed, "warm": warmed, "origin": host.origin}

    def stop(sid: str) -> dict | None:
        job = jobs.pop(sid, None)
        if job is None:
            return None
        with job.drive:  # waits for a tick in progress
            job.cancelled = True
            job.process.close()
        out: dict[str, Any] = {"log": job.host.finish_log().to_arrays(), "recorder": None}
        rec = job.recorder
        if rec is not None:
            out["recorder"] = SimpleNamespace(action_width=rec.action_width, actions=rec.actions,
                                              step_hashes=rec.step_hashes, reset_steps=rec.reset_steps,
                                              reset_hashes=rec.reset_hashes)  # fmt: skip
        try:
            job.env.close()
        except Exception:  # noqa: BLE001
            pass
        job.host.slot.close(), job.host.queue.close(), job.board.close()
        return out

    handlers = {"start": start, "stop": stop}
    sent_ready: dict[str, int] = {}
    try:
        while True:
            if not conn.poll(0.2):
                ready = spares.ready()
                if ready != sent_ready:
                    sent_ready = ready
                    note(("warm", ready))
                continue
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return  # the server is gone
            if message[0] == "exit":
                return
            kind, request, args = message
            try:
                reply = ("reply", request, True, handlers[kind](*args))
            except BaseException as exc:  # noqa: BLE001 - the server turns it into a session error
                reply = ("reply", request, False, f"{type(exc).__name__}: {exc}")
            note(reply)
    finally:
        lane.stop()
        lane.join(timeout=5)
        for sid in list(jobs):
            stop(sid)
        spares.close()


# ----------------------------------------------------------------------------- server side


class TickProc:
    """The server's handle on one worker: commands with replies, notes dispatched to callbacks."""

    def __init__(self, index: int, env_ids: list[str], warm: int, sched: str, on_note: Callable[[tuple], None],
                 on_exit: Callable[["TickProc"], None]) -> None:  # fmt: skip
        from nonstop.server.sessions import PhaseSlots

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child, index, env_ids, warm, sched),
                                   name=f"nonstop-tick-proc-{index}", daemon=True)  # fmt: skip
        self.process.start()
        child.close()
        self.index = index
        self.phases = PhaseSlots()  # each worker spreads its own sessions over the tick period
        self.sessions = 0
        self.warm_ready: dict[str, int] = {e: 0 for e in env_ids}
        self.sched = "starting"  # the tick thread's scheduling policy in force, once it reports it
        self._on_note, self._on_exit = on_note, on_exit
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, concurrent.futures.Future] = {}
        self.alive = True
        self._reader = threading.Thread(target=self._read, name=f"nonstop-tick-proc-{index}-reader", daemon=True)
        self._reader.start()

    def call(self, kind: str, *args: Any, timeout: float = 120.0) -> Any:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if not self.alive:
                raise RuntimeError(f"tick worker {self.index} has exited")
            request = next(self._ids)
            self._pending[request] = fut
            self._conn.send((kind, request, args))
        return fut.result(timeout)

    def _read(self) -> None:
        try:
            while True:
                message = self._conn.recv()
                kind = message[0]
                if kind == "reply":
                    _, request, ok, payload = message
                    with self._lock:
                        fut = self._pending.pop(request, None)
                    if fut is not None:
                        fut.set_result(payload) if ok else fut.set_exception(RuntimeError(payload))
                elif kind == "warm":
                    self.warm_ready = message[1]
                elif kind == "sched":
                    self.sched = message[1]
                else:
                    try:
                        self._on_note(message)
                    except Exception:  # noqa: BLE001 - one bad note must not cut the worker off
                        log.error("tick worker %d: note %r failed\n%s", self.index, message, traceback.format_exc())
        except (EOFError, OSError):
            pass
        finally:
            with self._lock:
                self.alive = False
                pending, self._pending = list(self._pending.values()), {}
            for fut in pending:
                fut.set_exception(RuntimeError(f"tick worker {self.index} exited"))
            self._on_exit(self)

    def close(self, timeout: float = 30.0) -> None:
        with self._lock:
            try:
                if self.alive:
                    self._conn.send(("exit",))
            except (OSError, ValueError):
                pass
        reap(self.process, timeout)
        self._reader.join(timeout=5)
        self._conn.close()


class TickProcs:
    """``n`` tick worker processes; a new session goes to the one with the fewest sessions.

    ``warm`` spare envs per env id are split over the workers (each builds its own share).
    ``on_note(message)`` gets every note (``("tick", sid, tick)``, ``("ended", sid, reason)``);
    ``on_exit(proc)`` runs when a worker's pipe closes (it exited or died).
    """

    def __init__(self, n: int, env_ids: list[str], *, warm: int = 0, sched: str = "auto",
                 on_note: Callable[[tuple], None], on_exit: Callable[[TickProc], None]) -> None:  # fmt: skip
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"tick processes must be a positive integer, got {n!r}")
        share = [warm // n + (1 if i < warm % n else 0) for i in range(n)]
        self.procs: list[TickProc] = []
        try:
            for i in range(n):
                self.procs.append(TickProc(i, env_ids, share[i], sched, on_note, on_exit))
        except BaseException:
            self.close()
            raise
        self._lock = threading.Lock()

    def pick(self) -> TickProc:
        with self._lock:
            live = [p for p in self.procs if p.alive]
            if not live:
                raise RuntimeError("every tick worker has exited")
            proc = min(live, key=lambda p: p.sessions)
            proc.sessions += 1
            return proc

    def release(self, proc: TickProc) -> None:
        with self._lock:
            proc.sessions -= 1

    def warm_ready(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for proc in self.procs:
            for env_id, n in proc.warm_ready.items():
                out[env_id] = out.get(env_id, 0) + n
        return out

    def all_alive(self) -> bool:
        return all(p.alive and p.process.is_alive() for p in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
