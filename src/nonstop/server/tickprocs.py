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

Healing: every `RECORD_EVERY` seconds a worker sends the server what its hosts recorded since the
last time (tick-log rows, replay actions and observation hashes; one note for all its sessions) and
a heartbeat. So when a worker dies, the server still holds each of its sessions' record up to at
most `RECORD_EVERY` before the death: it ends those sessions (their worlds died with the worker; a
world rebuilt elsewhere would not be the same world) and writes their replays from that record,
marked incomplete, then starts a replacement worker (`TickProcs.replace`). A worker that stops
answering (SIGSTOP, a hung env) is not given new sessions while it is silent.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import multiprocessing as mp
import signal
import threading
import traceback
from collections.abc import Callable
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.realtime.atomics import SEQ_CST, SharedWords, require_atomics
from nonstop.realtime.channels import SEGMENT_PREFIX, ActionQueue, LatestSlot, SharedSegment
from nonstop.realtime.clock import WallClock
from nonstop.realtime.lifeline import hold_lifeline, reap
from nonstop.server.ticking import PhasedClock, PhaseSlots, WarmEnvs, _Lane
from nonstop.realtime.ticklog import CHUNK_ROWS, TickLog

__all__ = ["TickBoard", "TickProcs", "RECENT_TICKS", "RECORD_EVERY", "SessionRecord"]

log = logging.getLogger("nonstop.server")

#: `/sessions` reports each running session's lateness over this many most recent ticks
RECENT_TICKS: Final = 600
#: the clock of the pool's bookkeeping (record notes, heartbeats): time is injected, never read directly
_CLOCK: Final = WallClock(spin=0.0)
#: "no tick awaited" in a board's next-wake word
NO_WAKE: Final = 1 << 62
#: seconds between a worker's record notes (and heartbeats): what a worker's death can lose
RECORD_EVERY: Final = 0.2
#: a worker not heard from for this long gets no new session, and /health reports it (an env build
#: can hold a worker's GIL ~0.4 s, so well above that)
SILENT_AFTER: Final = 3.0
#: tick workers replaced within one minute at most (more is a crash loop, not bad luck)
MAX_REPLACEMENTS: Final = 5
#: a worker starting up (spawn, imports, its first envs) has this long before its silence counts
STARTUP_GRACE: Final = 60.0
_TICK, _WAKE, _ORIGIN, _RING = 0, 1, 2, 3


class TickBoard(SharedSegment):
    """Per-session words shared by the server and the worker that ticks it.

    ``tick`` (the newest tick processed) and a ring of the last `RECENT_TICKS` ticks' lateness are
    written by the worker; ``next_wake`` (the earliest tick a client waits for) by the server. The
    worker sends a note when ``tick`` reaches ``next_wake``, so the server's waiters are released
    without polling. The server creates and unlinks it; the worker attaches by name.

    ``tick`` and ``next_wake`` are sequentially consistent atomics: the worker stores the tick then
    loads the wake word, the server stores the wake word then loads the tick, and store→load order
    needs SEQ_CST (acquire/release, and x86 itself, let a load pass an earlier store), so at least
    one side always sees the other and no waiter is left behind.

    >>> board = TickBoard.create()
    >>> board.tick, board.next_wake
    (0, 4611686018427387904)
    >>> board.next_wake = 3  # the server: a client waits for tick 3
    >>> board.publish_tick(3, 0.002), board.tick, board.recent_lateness().tolist()  # the worker
    (3, 3, [0.0, 0.0, 0.002])
    >>> board.unlink()
    """

    _views = ("_q", "_d")

    def __init__(self, name: str, *, _shm: Any = None) -> None:
        self.name = name
        self._owner = _shm is not None
        self._last_tick = 0
        self._shm = _shm if _shm is not None else shared_memory.SharedMemory(name=name, create=False)
        self._q = SharedWords(self._shm.buf, 0, 2)  # tick, next_wake
        self._d = np.ndarray((_RING + RECENT_TICKS,), np.float64, self._shm.buf)

    @classmethod
    def create(cls) -> "TickBoard":
        import os
        import uuid

        require_atomics()
        name = f"{SEGMENT_PREFIX}board_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=8 * (_RING + RECENT_TICKS))
        board = cls(name, _shm=shm)
        board._d[:] = 0.0
        board._q.store(_TICK, 0, SEQ_CST)
        board._q.store(_WAKE, NO_WAKE, SEQ_CST)
        return board

    def __reduce__(self) -> tuple:
        return (TickBoard, (self.name,))

    # The server's threads may read a board while finalization closes it: a closed board answers
    # with its last tick and ignores writes instead of raising.
    @property
    def tick(self) -> int:
        try:
            return self._q.load(_TICK, SEQ_CST)
        except ValueError:  # closed (SegmentClosedError), or released meanwhile
            return self._last_tick

    @property
    def next_wake(self) -> int:
        return self._q.load(_WAKE, SEQ_CST)

    @next_wake.setter
    def next_wake(self, tick: float) -> None:
        try:
            self._q.store(_WAKE, NO_WAKE if tick == float("inf") else int(tick), SEQ_CST)
        except ValueError:  # closed (SegmentClosedError), or released meanwhile
            pass

    @property
    def origin(self) -> float:
        return float(self._d[_ORIGIN])

    # the worker's side
    def set_origin(self, origin: float) -> None:
        """The session's clock origin, once its host has started (a plain number: it orders nothing)."""
        self._d[_ORIGIN] = origin

    def publish_tick(self, tick: int, lateness: float) -> int:
        """The worker processed ``tick``, ``lateness`` seconds after it was due: record both, then
        return the wake word (store then load, both SEQ_CST: see the class docstring)."""
        self._d[_RING + tick % RECENT_TICKS] = lateness
        self._q.store(_TICK, tick, SEQ_CST)
        return self._q.load(_WAKE, SEQ_CST)

    def recent_lateness(self) -> np.ndarray:
        """Lateness (s) of the last ``min(tick, RECENT_TICKS)`` ticks, in no particular order."""
        tick = self.tick
        d = self.__dict__.get("_d")  # None once closed
        if d is None:
            return np.zeros(0)
        ring = d[_RING:]
        return ring.copy() if tick >= RECENT_TICKS else ring[1 : tick + 1].copy()

    def _release_views(self) -> None:
        if "_q" in self.__dict__:
            self._last_tick = self._q.load(_TICK, SEQ_CST)
            self._q.close()


class SessionRecord:
    """What a session's host has recorded, kept by the server as the worker streams it.

    Tick-log rows go into a chunked `TickLog` (``self.log``) that streams to ``directory`` when
    given (the server's ``REPLAYS/ticklogs/<sid>/``), and, when the session records a replay, the
    `ReplayRecorder`'s columns (actions, step and reset hashes, reset steps) into `ReplayColumns`
    streaming to ``directory/replay/``: memory stays bounded by a chunk of each however long the
    session runs, and a dead worker's (or server's) session is finalised from the files. ``add``
    appends one delta (a dict from the worker, from its reader thread or at stop: serialized by a
    lock); `finish` closes the log and flushes the columns.

    >>> from array import array
    >>> rec = SessionRecord(1 / 60)
    >>> rec.add({"rows": np.zeros((3, 18)), "actions": array("d", [1.0, 0.0, 2.0]),
    ...          "step_hashes": array("I", [7, 8, 9]), "reset_steps": array("q", [0]),
    ...          "reset_hashes": array("I", [5]), "action_width": 1, "held": 3})
    >>> rec.ticks, list(rec.columns.actions), len(rec.finish({"env": "x"})), rec.worker_held
    (3, [1.0, 0.0, 2.0], 3, 3)
    """

    def __init__(self, tau_m: float, *, directory: Any = None, chunk_rows: int = CHUNK_ROWS, seats: int = 1) -> None:
        self.log = TickLog(tau_m, directory=directory, chunk_rows=chunk_rows, seats=seats)
        self.directory, self.chunk_rows = directory, chunk_rows
        self._lock = threading.Lock()
        self._finished = False
        self.columns: Any = None  # the replay's `ReplayColumns`, from the first delta that has them
        self.worker_held = 0  # rows the worker last said it still holds in memory

    @property
    def ticks(self) -> int:
        return len(self.log)

    @property
    def has_replay(self) -> bool:
        return self.columns is not None

    def add(self, delta: dict[str, Any]) -> None:
        from nonstop.server.replay import ReplayColumns

        with self._lock:
            if self._finished:  # a late delta after the tail: the log is closed
                return
            rows = delta["rows"]
            if len(rows):
                self.log.append_rows(rows)
            self.worker_held = int(delta.get("held", self.worker_held))
            if "actions" in delta:
                if self.columns is None:
                    where = None if self.directory is None else Path(self.directory) / "replay"
                    self.columns = ReplayColumns(
                        int(delta["action_width"]), directory=where, chunk_rows=self.chunk_rows
                    )
                self.columns.extend(delta)

    def finish(self, meta: dict[str, Any]) -> TickLog:
        """Close the log (the last partial chunk written, ``meta`` recorded), flush the replay
        columns, and return the log."""
        with self._lock:
            self._finished = True
            self.log.meta.update(meta)
            self.log.close()
            if self.columns is not None:
                self.columns.flush()
            return self.log


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
        self.sent_rows = 0  # how much of the tick log the server has

    def record_delta(self) -> dict[str, Any]:
        """What the host recorded since the last delta (taken between ticks)."""
        with self.drive:
            log = self.host.log
            n = len(log)
            delta: dict[str, Any] = {"rows": log.rows(self.sent_rows, n)}
            self.sent_rows = n
            log.release(n)  # the server has them now: the worker keeps no rows it has sent
            delta["held"] = log.held_rows
            rec = self.recorder
            if rec is not None:  # handed over and forgotten here: the worker holds only what it has not sent
                delta.update(rec.columns.take())
        return delta

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
            except BaseException as exc:  # the env raised: end this session only
                self.cancelled = True
                error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                log.error("session %s: env raised\n%s", self.sid, traceback.format_exc())
                self.note(("ended", self.sid, f"env error: {error}"))
                return None
            tick = self.host.tick
            wake_at = self.board.publish_tick(tick, now - self.due)
            if tick >= wake_at and wake_at != self.noted:
                self.noted = wake_at
                self.note(("tick", self.sid, tick))
            self.due = wake
            return self.clock.origin + wake


def _listed(item: Any) -> list[Any]:
    return list(item) if isinstance(item, (list, tuple)) else [item]


def _worker_main(conn: Any, index: int, env_ids: list[str], warm: int, sched: str) -> None:
    """Entry point of a tick worker: a command loop on the main thread, one tick lane beside it."""
    hold_lifeline()  # a killed server leaves no worker behind, even one busy ticking
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server owns shutdown
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    worker = _Worker(conn, index, env_ids, warm, sched)
    try:
        worker.serve()
    finally:
        worker.close()


class _RealtimeLane(_Lane):
    """A worker's tick lane, its thread raised to ``sched`` (Linux schedules threads: env builds and
    commands stay at normal priority) and the priority in force noted to the server."""

    def __init__(self, index: int, clock: WallClock, sched: str, note: Callable[[tuple], None]) -> None:
        super().__init__(index, clock)
        self.sched, self.note = sched, note

    def run(self) -> None:
        from nonstop.realtime.host import raise_priority

        self.note(("sched", raise_priority(self.sched)))
        super().run()


class _Worker:
    """One tick worker's state: its sessions' jobs on one lane, its warm envs, and the pipe to the
    server (commands in, notes and replies out, sent under one lock: the lane notes ticks too)."""

    def __init__(self, conn: Any, index: int, env_ids: list[str], warm: int, sched: str) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.lane = _RealtimeLane(index, WallClock(spin=0.0), sched, self.note)
        self.lane.start()
        self.jobs: dict[str, _WorkerJob] = {}
        self.spares = WarmEnvs(warm, env_ids, idle=lambda: not self.jobs)

    def note(self, message: tuple) -> None:
        with self.send_lock:
            try:
                self.conn.send(message)
            except (OSError, ValueError):  # the server is gone; the command loop exits on EOF
                pass

    def serve(self) -> None:
        """Answer commands until the server says exit or goes away; between them, stream records
        (the worker's heartbeat) and say when the warm envs' readiness changes."""
        handlers: dict[str, Callable[..., Any]] = {"start": self.start, "stop": self.stop, "world": self.world}
        sent_ready: dict[str, int] = {}
        last_records = _CLOCK.now()
        while True:
            if _CLOCK.now() - last_records >= RECORD_EVERY:
                self.send_records()
                last_records = _CLOCK.now()
            if not self.conn.poll(RECORD_EVERY):
                ready = self.spares.ready()
                if ready != sent_ready:
                    sent_ready = ready
                    self.note(("warm", ready))
                continue
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return  # the server is gone
            if message[0] == "exit":
                return
            kind, request, args = message
            try:
                reply = ("reply", request, True, handlers[kind](*args))
            except BaseException as exc:  # the server turns it into a session error
                reply = ("reply", request, False, f"{type(exc).__name__}: {exc}")
            self.note(reply)

    def close(self) -> None:
        self.lane.stop()
        self.lane.join(timeout=5)
        for sid in list(self.jobs):
            self.stop(sid)
        self.spares.close()

    def start(
        self,
        sid: str,
        cfg: dict,
        slot: LatestSlot | list[LatestSlot],
        queue: ActionQueue | list[ActionQueue],
        board: TickBoard,
    ) -> dict:
        """Build the env and host of session ``sid`` (a several-seat world: ``cfg["seats"]``, one
        slot, queue and β per seat) and put it on the lane."""
        from nonstop.envs import make_env

        env: Any = None  # a gymnasium.Env, or a seat world (PettingZoo's parallel API)
        seed, warmed = cfg["seed"], False
        try:
            if seed is None:  # the client left the seed to us: a warm env, already reset with its seed
                env, seed = self.spares.take(cfg["env"])
                warmed = env is not None
            if env is None:
                env = make_env(cfg["env"])
            env = _recorded(env, cfg)
            host = _session_host(env, cfg, slot, queue, None if warmed else seed)
            process = host.run(PhasedClock(cfg["origin"], cfg["tau_m"], cfg["phase"]))
            job = _WorkerJob(sid, host, process, board, WallClock(origin=cfg["origin"], spin=0.0), self.note)
            job.env, job.recorder = env, env if cfg["record"] else None
            job.due = first = next(process)  # env.reset happens here
        except BaseException:
            if env is not None:
                env.close()
            for channel in (*_listed(slot), *_listed(queue), board):
                channel.close()
            raise
        board.set_origin(host.origin)
        self.jobs[sid] = job
        self.lane.add(job, cfg["origin"] + first)
        return {"seed": seed, "warm": warmed, "origin": host.origin}

    def stop(self, sid: str) -> dict | None:
        job = self.jobs.pop(sid, None)
        if job is None:
            return None
        with job.drive:  # waits for a tick in progress
            job.cancelled = True
            job.process.close()
        log = job.host.finish_log()
        # the server has the record up to the last delta: only the rest crosses the pipe
        out: dict[str, Any] = {"tail": job.record_delta(), "meta": dict(log.meta), "tau_m": log.tau_m}
        try:
            job.env.close()
        except Exception:
            pass
        for channel in (*job.host.slots, *job.host.queues, job.board):
            channel.close()
        return out

    def send_records(self) -> None:
        deltas = {}
        for sid, job in list(self.jobs.items()):
            delta = job.record_delta()
            if len(delta["rows"]) or delta.get("reset_steps"):
                deltas[sid] = delta
        self.note(("records", deltas))  # also the worker's heartbeat

    def world(self, sid: str) -> dict | None:
        """The live page's picture of session ``sid``'s world (`nonstop.server.liveworld.world_view`)."""
        from nonstop.server.liveworld import world_view

        job = self.jobs.get(sid)
        if job is None:
            return None
        with job.drive:  # between ticks: the env is not stepping
            return world_view(job.env)


def _recorded(env: Any, cfg: dict) -> Any:
    """``env`` wrapped in a recorder if session ``cfg`` records."""
    from nonstop.server.replay import ReplayRecorder, SeatReplayRecorder

    if cfg["record"]:
        env = ReplayRecorder(env) if cfg.get("seats") is None else SeatReplayRecorder(env)
    return env


def _session_host(env: Any, cfg: dict, slot: Any, queue: Any, seed: int | None) -> Any:
    """The `Host` that ticks ``env`` for session ``cfg`` (β per seat on a several-seat world)."""
    from nonstop.realtime.defaults import make_default
    from nonstop.realtime.host import Host

    seats = cfg.get("seats")
    if seats is None:
        default: Any = make_default(cfg["default"], noop_action=cfg["noop_action"])
    else:
        default = [make_default(cfg["default"], noop_action=noop) for noop in cfg["seat_noops"]]
    return Host(
        env,
        slot,
        queue,
        tau_m=cfg["tau_m"],
        default=default,
        seed=seed,
        max_ticks=cfg["max_ticks"],
        meta=cfg["meta"],
        seats=seats,
        log_chunk_rows=cfg.get("log_chunk_rows", CHUNK_ROWS),
    )


# ----------------------------------------------------------------------------- server side


class TickProc:
    """The server's handle on one worker: commands with replies, notes dispatched to callbacks."""

    def __init__(
        self,
        index: int,
        env_ids: list[str],
        warm: int,
        sched: str,
        on_note: Callable[[tuple], None],
        on_exit: Callable[["TickProc"], None],
        on_records: Callable[[dict], None],
    ) -> None:

        self.args = (index, env_ids, warm, sched, on_note, on_exit, on_records)  # a replacement's

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker_main,
            args=(child, index, env_ids, warm, sched),
            name=f"nonstop-tick-proc-{index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.index = index
        self.phases = PhaseSlots()  # each worker spreads its own sessions over the tick period
        self.sessions = 0
        self.warm_ready: dict[str, int] = {e: 0 for e in env_ids}
        self.sched = "starting"  # the tick thread's scheduling policy in force, once it reports it
        self._on_note, self._on_exit, self._on_records = on_note, on_exit, on_records
        self.last_heard = self.started = _CLOCK.now()
        self.heard = False
        self.first_word = threading.Event()  # set by the first message: spawned, imported, listening
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
                self.last_heard, self.heard = _CLOCK.now(), True
                self.first_word.set()
                kind = message[0]
                if kind == "records":
                    self._on_records(message[1])
                elif kind == "reply":
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
                    except Exception:  # one bad note must not cut the worker off
                        log.error("tick worker %d: note %r failed\n%s", self.index, message, traceback.format_exc())
        except (EOFError, OSError):
            pass
        finally:
            with self._lock:
                self.alive = False
                pending, self._pending = list(self._pending.values()), {}
            self.first_word.set()  # nobody waits for a dead worker's first word
            for fut in pending:
                fut.set_exception(RuntimeError(f"tick worker {self.index} exited"))
            self._on_exit(self)

    @property
    def responsive(self) -> bool:
        """Alive and heard from within `SILENT_AFTER` (a stopped or hung worker is not), or still
        within its `STARTUP_GRACE` and not heard from yet."""
        now = _CLOCK.now()
        if not self.heard:
            return self.alive and now - self.started < STARTUP_GRACE
        return self.alive and now - self.last_heard < SILENT_AFTER

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
    ``on_exit(proc)`` runs when a worker's pipe closes (it exited or died); ``on_records(deltas)``
    gets each worker's periodic ``{sid: record delta}`` (see `SessionRecord`).
    """

    def __init__(
        self,
        n: int,
        env_ids: list[str],
        *,
        warm: int = 0,
        sched: str = "auto",
        on_note: Callable[[tuple], None],
        on_exit: Callable[[TickProc], None],
        on_records: Callable[[dict], None] = lambda deltas: None,
    ) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"tick processes must be a positive integer, got {n!r}")
        share = [warm // n + (1 if i < warm % n else 0) for i in range(n)]
        self.procs: list[TickProc] = []
        self._lock = threading.Lock()
        self._closing = False
        self.replaced = 0
        self._replaced_at: list[float] = []  # recent replacements: a worker that dies at start is not respawned forever
        try:
            for i in range(n):
                self.procs.append(TickProc(i, env_ids, share[i], sched, on_note, on_exit, on_records))
        except BaseException:
            self.close()
            raise

    def wait_ready(self, timeout: float = STARTUP_GRACE) -> bool:
        """Block until every worker has spoken (spawned, imported, its command loop running)."""
        end = _CLOCK.now() + timeout
        for proc in list(self.procs):
            if not proc.first_word.wait(max(0.0, end - _CLOCK.now())):
                return False
        return True

    def pick(self) -> TickProc:
        """The worker for a new session: the answering one with the fewest sessions."""
        with self._lock:
            live = [p for p in self.procs if p.alive]
            if not live:
                raise RuntimeError("every tick worker has exited")
            proc = min(live, key=lambda p: (not p.responsive, p.sessions))
            proc.sessions += 1
            return proc

    def replace(self, dead: TickProc) -> TickProc | None:
        """Start a worker in place of ``dead`` (same index and share of warm envs) and reap the dead
        one; None when the pool is closing, ``dead`` was already replaced, or `MAX_REPLACEMENTS`
        workers were replaced within the last minute (a crash loop: /health stays unhealthy)."""
        with self._lock:
            if self._closing or dead not in self.procs:
                return None
            now = _CLOCK.now()
            self._replaced_at = [t for t in self._replaced_at if now - t < 60.0]
            if len(self._replaced_at) >= MAX_REPLACEMENTS:
                log.error(
                    "tick worker %d not replaced: %d workers died within a minute", dead.index, len(self._replaced_at)
                )
                return None
            self._replaced_at.append(now)
            fresh = TickProc(*dead.args)
            self.procs[self.procs.index(dead)] = fresh
            self.replaced += 1
        dead.process.join(5)  # reaped: no zombie
        dead._conn.close()
        return fresh

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
        """Every worker alive and answering."""
        return all(p.responsive and p.process.is_alive() for p in self.procs)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            procs = list(self.procs)
        for proc in procs:
            proc.close()
