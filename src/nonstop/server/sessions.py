"""Many realtime sessions in one process: lifecycle, admission, the manager and its reaper (DESIGN §4).

The plumbing the sessions tick on (`TickPool`, phases, `WorkQueue`, warm envs) lives in
`nonstop.server.ticking`, which the tick worker processes (`nonstop.server.tickprocs`) share.

A session is one realtime world (`Host` + `LatestSlot` + `ActionQueue`) owned by one client, or,
in a several-seat world (DESIGN §4b), one slot and one queue per seat, each seat held by one client
(`ServerSession.claim`): the creator takes the first seat, others join. Its
host is a timed process (a generator yielding its next deadline, see `nonstop.realtime.clock`), so
a server need not spend a process or even a thread per session: a `TickPool` of a few threads, each
with a heap of ``(deadline, session)``, drives every host on the wall clock. The request-handling
event loop never ticks a world; it only reads slots, submits actions and parks futures that the
pool resolves when a tick arrives (`ServerSession.wait_tick`).

Lifecycle, an explicit state machine (`Lifecycle`, `TRANSITIONS`)::

    created ──► starting ──► running ──► ended ──► closed
       └───────────┴────────────┴──────────┘ (start failure, timeout, connection lost, close, error)

*ended* means the world stopped ticking and its replay is being finalized; *closed* means every
resource (env, shared memory) is released. Every path into *ended* goes through
`SessionManager.end`, which always finishes in *closed*.

Slow work (building an env, resetting it, writing a replay) runs on a bounded `WorkQueue` that
refuses with a ``BACKPRESSURE`` error instead of growing, and never on the tick pool.

Past one core (``tick_procs=n``): the pool's threads share this process's GIL, and an ALE step
holds it, so 64 Atari sessions at 60 Hz plus the request loop saturate one core and ticks queue.
With ``tick_procs`` the hosts tick on ``n`` worker processes instead (`nonstop.server.tickprocs`):
each session is still admitted, tracked through its lifecycle, ended and finalized here, its
channels and `TickBoard` are created and unlinked here and its replay written here; a worker only
builds envs, runs hosts on their tick grids and hands back each host's log and replay record.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import json
import logging
import os
import shutil
import threading
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Final

import numpy as np

from nonstop.realtime.channels import ActionQueue, LatestSlot, Observation
from nonstop.realtime.clock import WallClock
from nonstop.realtime.defaults import make_default
from nonstop.realtime.host import HOST_SCHED, Host
from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog
from nonstop.server.envspec import SINGLE_SEAT, EnvSpec
from nonstop.server.protocol import ErrorCode, ProtocolError
from nonstop.server.replay import Replay, ReplayRecorder, SeatReplayRecorder, write_header
from nonstop.server.ticking import PhasedClock, PhaseSlots, TickPool, WarmEnvs, WorkQueue
from nonstop.server.tickprocs import RECENT_TICKS, SessionRecord, TickProcs

__all__ = ["Lifecycle", "TRANSITIONS", "TickPool", "WorkQueue", "EnvSpec", "ServerSession", "SessionManager",
           "SINGLE_SEAT"]

log = logging.getLogger("nonstop.server")


class Lifecycle(str, Enum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    ENDED = "ended"
    CLOSED = "closed"


#: Allowed transitions; anything else is a bug and raises.
TRANSITIONS: Final = {
    Lifecycle.CREATED: {Lifecycle.STARTING, Lifecycle.ENDED},
    Lifecycle.STARTING: {Lifecycle.RUNNING, Lifecycle.ENDED},
    Lifecycle.RUNNING: {Lifecycle.ENDED},
    Lifecycle.ENDED: {Lifecycle.CLOSED},
    Lifecycle.CLOSED: set(),
}
LIVE: Final = frozenset({Lifecycle.CREATED, Lifecycle.STARTING, Lifecycle.RUNNING})
#: Rows per chunk of a session's tick log (server record and worker host): 2.3 minutes at 60 Hz, 1.2 MB.
SESSION_CHUNK_ROWS: Final = 8192
#: how long the event loop may retry reading an observation its tick worker is writing (s)
READ_PATIENCE: Final = 0.02
#: how long finalization waits for a tick worker to stop a host and send the rest of its record (s)
STOP_PATIENCE: Final = 30.0
#: how long a submit retries, yielding to the event loop, while a tick worker holds the action queue (s)
SUBMIT_PATIENCE: Final = 1.0


# ----------------------------------------------------------------------------- session


@dataclass
class Settings:
    """Resolved per-session settings (the wire's `SessionConfig` after the server's defaults)."""

    env: str
    default: str
    queue_mode: str
    record: bool
    encoding: str
    max_ticks: int | None
    seed: int | None
    episode_id: str | None


class ServerSession:
    """One realtime world on the server.

    Threads: the tick pool calls `advance`; the event loop calls `read`, `submit`, `wait_tick`;
    a work-queue thread calls `_start` and `_finalize`. ``_drive`` serialises the host between the
    pool and finalization; ``_chan`` guards the channels against being read after they are unlinked.

    Seats: ``slots``/``queues`` hold one channel per seat (``seat_names``; one, `SINGLE_SEAT`, for
    a one-seat world), ``holders`` the client holding each seat (None: its β plays it). `read`,
    `submit` and `read_final` take the seat's index; `claim` and `release` seat and unseat clients.
    """

    def __init__(self, sid: str, settings: Settings, spec: EnvSpec, manager: "SessionManager") -> None:
        self.sid = sid
        self.settings = settings
        self.spec = spec
        self.manager = manager
        self.state = Lifecycle.CREATED
        self.end_reason: str | None = None
        self.error: str | None = None
        self.created = manager.clock.now()
        self.last_activity = self.created
        self.ended_at: float | None = None
        self.replay_path: Path | None = None
        self.summary: dict[str, Any] = {}
        self.cancelled = False  # the pool skips a cancelled job
        self.step_count = 0
        self._phase_slot: int | None = None
        self.warm = False  # started on a pre-built env (reset with its seed before the host's reset)
        self._state_lock = threading.Lock()
        self._drive = threading.Lock()
        self._chan = threading.Lock()
        self._waiters: list[tuple[int, int, LoopWaker, asyncio.Future]] = []
        self._wait_order = itertools.count()
        self._next_wake = float("inf")
        self.slots: list[LatestSlot] = []
        self.queues: list[ActionQueue] = []
        self.seat_names = spec.seat_names
        #: the client holding each seat (any object; None: the seat is free and its β plays it)
        self.holders: list[Any] = [None] * len(self.seat_names)
        self.host: Host | None = None
        self.recorder: ReplayRecorder | SeatReplayRecorder | None = None
        self.clock: WallClock | None = None
        self._process: Any = None
        self._phases: PhaseSlots | None = None
        self.proc: Any = None  # the `TickProc` ticking this session, when the pool is processes
        self.board: Any = None  # its `TickBoard` (tick, next wake, recent lateness) with that worker
        self.record: SessionRecord | None = None  # what that worker has sent of its host's record
        self.origin = 0.0  # pool-clock time of tick 0
        self.tau_m = 1.0 / spec.tick_hz
        self.finalized = threading.Event()
        self.incomplete = False  # its replay and summary miss the last ticks (its tick worker died)
        self._meta: dict[str, Any] = {}

    @property
    def slot(self) -> LatestSlot | None:
        """The first seat's slot (the only one of a one-seat world)."""
        return self.slots[0] if self.slots else None

    @property
    def queue(self) -> ActionQueue | None:
        """The first seat's action queue."""
        return self.queues[0] if self.queues else None

    # ---- seats
    def seat_index(self, seat: str) -> int:
        """The index of the seat named ``seat``; ``UNKNOWN_SEAT`` for a seat the env lacks."""
        try:
            return self.seat_names.index(seat)
        except ValueError:
            raise ProtocolError(ErrorCode.UNKNOWN_SEAT, f"session {self.sid} ({self.spec.env_id}) has no seat "
                                f"{seat!r}; its seats are {self.seat_names}") from None  # fmt: skip

    def claim(self, holder: Any, seat: str | None = None) -> int:
        """Seat ``holder`` at ``seat`` (a name) or, with None, at the first free seat; returns the
        seat's index. ``UNKNOWN_SEAT``, ``SEAT_TAKEN``, ``SESSION_FULL``, or the session's own
        state (``SESSION_ENDED``, ``NO_SESSION`` while it starts) when it cannot."""
        with self._state_lock:
            self._require_running()
            if seat is not None:
                index = self.seat_index(seat)
                other = self.holders[index]
                if other is not None and other is not holder:
                    raise ProtocolError(ErrorCode.SEAT_TAKEN, f"seat {seat!r} of session {self.sid} is held by another "
                                        f"client; free seats: {self.free_seats()}")  # fmt: skip
            else:
                free = [i for i, h in enumerate(self.holders) if h is None]
                if not free:
                    raise ProtocolError(ErrorCode.SESSION_FULL, f"session {self.sid} is full: its seats "
                                        f"{self.seat_names} are all held")  # fmt: skip
                index = free[0]
            self.holders[index] = holder
        return index

    def release(self, holder: Any) -> int:
        """Unseat ``holder`` (its seats are played by their β from now); returns how many seats
        other clients still hold."""
        with self._state_lock:
            self.holders = [None if h is holder else h for h in self.holders]
            return sum(h is not None for h in self.holders)

    def free_seats(self) -> list[str]:
        return [name for name, h in zip(self.seat_names, self.holders) if h is None]

    # ---- lifecycle
    def transition(self, new: Lifecycle) -> bool:
        """Move to ``new`` if allowed from the current state; False if already past it."""
        with self._state_lock:
            if new not in TRANSITIONS[self.state]:
                return False
            self.state = new
            return True

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def touch(self) -> None:
        self.last_activity = self.manager.clock.now()

    def _start(self) -> None:
        """Build the env and channels, reset (tick 0), hand the host to the pool. Work-queue thread."""
        from nonstop.envs import make_env

        if not self.transition(Lifecycle.STARTING):
            return
        if self.manager.procs is not None:
            self._start_remote()
            return
        with self._drive:  # finalization (if the session ends meanwhile) waits for the build
            spec, s = self.spec, self.settings
            env: Any = None  # a gymnasium.Env, or a seat world (PettingZoo's parallel API)
            host_seed = s.seed
            if s.seed is None:  # the client left the seed to us: a warm env, already reset with its seed
                env, s.seed = self.manager.warm.take(spec.env_id)
                self.warm = env is not None
                host_seed = None if self.warm else s.seed
            if env is None:
                env = make_env(spec.env_id)
            if s.record:  # its columns stream beside the tick log: bounded memory, durable chunks
                recorder = SeatReplayRecorder if spec.seats is not None else ReplayRecorder
                ticklogs = self.manager.ticklog_dir(self.sid)  # set: recording needs a replay directory
                env = self.recorder = recorder(env, directory=ticklogs / "replay" if ticklogs is not None else None,
                                               chunk_rows=SESSION_CHUNK_ROWS)  # fmt: skip
            self._open_channels()  # one slot and queue per seat (a one-seat world: lists of one, as Host takes)
            noops = spec.seat_noops if spec.seats is not None else (spec.noop_action,)
            default = [make_default(s.default, noop_action=noop) for noop in noops]
            self.host = Host(
                env, self.slots, self.queues, tau_m=1.0 / spec.tick_hz, default=default, seed=host_seed, max_ticks=s.max_ticks,
                meta={"env": spec.env_id, "session": self.sid, "clock": "wall", "default": s.default},
                log_dir=self.manager.ticklog_dir(self.sid), log_chunk_rows=SESSION_CHUNK_ROWS,
                seats=None if spec.seats is None else list(spec.seats),
            )  # fmt: skip
            pool = self.manager.pool
            self.clock = WallClock(origin=pool.clock.origin, spin=0.0)
            self._phases = pool.phases
            self._phase_slot, phase = pool.phases.acquire(self.tau_m)
            self._process = self.host.run(PhasedClock(pool.clock.origin, self.tau_m, phase))
            first = next(self._process)  # env.reset(seed) happens here, off the pool
            self.origin = self.host.origin
            self._write_replay_header()
            if not self.transition(Lifecycle.RUNNING):  # ended while starting: finalize cleans up
                return
        self.manager.pool.add(self, self.clock.origin + first)

    def _open_channels(self) -> None:
        """One slot and one action queue per seat (made here, unlinked by `_finalize`)."""
        spec, s = self.spec, self.settings
        obs_spaces = spec.seat_observation_spaces or (spec.observation_space,)
        act_spaces = spec.seat_action_spaces or (spec.action_space,)
        with self._chan:
            for obs_space, act_space in zip(obs_spaces, act_spaces):
                self.slots.append(LatestSlot.create(obs_space))
                self.queues.append(ActionQueue.create(act_space, capacity=16, mode=s.queue_mode))

    def _start_remote(self) -> None:
        """`_start` on a tick worker process: channels and board made here, env and host there."""
        from nonstop.server.tickprocs import TickBoard

        with self._drive:  # finalization (if the session ends meanwhile) waits for the start
            spec, s = self.spec, self.settings
            assert self.manager.procs is not None, "_start comes here when ticks run on worker processes"
            self.proc = proc = self.manager.procs.pick()
            self._open_channels()
            with self._chan:
                self.board = TickBoard.create()
            origin = self.manager.pool.clock.origin
            self.clock = WallClock(origin=origin, spin=0.0)
            self.record = SessionRecord(self.tau_m, directory=self.manager.ticklog_dir(self.sid),
                                        chunk_rows=SESSION_CHUNK_ROWS, seats=len(self.seat_names))  # fmt: skip
            self._phases = proc.phases
            self._phase_slot, phase = proc.phases.acquire(self.tau_m)
            self._meta = {"env": spec.env_id, "session": self.sid, "clock": "wall", "default": s.default,
                          "tick_proc": proc.index}  # fmt: skip
            cfg = {"env": spec.env_id, "seed": s.seed, "record": s.record, "tau_m": self.tau_m, "default": s.default,
                   "noop_action": spec.noop_action, "max_ticks": s.max_ticks, "origin": origin, "phase": phase,
                   "meta": self._meta, "log_chunk_rows": SESSION_CHUNK_ROWS,
                   "seats": None if spec.seats is None else list(spec.seats), "seat_noops": list(spec.seat_noops)}  # fmt: skip
            slots, queues = (self.slot, self.queue) if spec.seats is None else (self.slots, self.queues)
            started = proc.call("start", self.sid, cfg, slots, queues, self.board)
            s.seed, self.warm, self.origin = started["seed"], started["warm"], started["origin"]
            self._process = proc  # a host runs there now: finalization must stop it
            self._write_replay_header()
            self.transition(Lifecycle.RUNNING)  # if it ended while starting, finalization stops it

    def advance(self) -> float | None:
        """Tick the host once (tick-pool thread); returns the next absolute deadline or None."""
        with self._drive:
            host, clock = self.host, self.clock
            if self.cancelled or host is None or clock is None:  # (both set by _start before the pool drives it)
                return None
            try:
                wake = self._process.send(clock.now())
            except StopIteration:
                self.manager.end(self, "max_ticks reached")
                return None
            except BaseException as exc:  # noqa: BLE001 - the env raised: end this session only
                self.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                log.error("session %s: env raised\n%s", self.sid, traceback.format_exc())
                self.manager.end(self, f"env error: {self.error}")
                return None
            if host.tick >= self._next_wake:
                self._release_waiters(host.tick)
            return clock.origin + wake

    # ---- waiting for ticks (event loop side parks a future, the pool resolves it)
    def wait_tick(self, target: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """A future resolved once tick ``target`` has been processed (or the session ended)."""
        fut = loop.create_future()
        board = self.board
        with self._state_lock:
            done = self.state is not Lifecycle.RUNNING or self._process is None or self.tick >= target
            if not done:
                if len(self._waiters) >= self.manager.max_waiters:
                    raise ProtocolError(ErrorCode.BACKPRESSURE, f"more than {self.manager.max_waiters} waits pending")
                heapq.heappush(self._waiters, (target, next(self._wait_order), self.manager.waker(loop), fut))
                self._next_wake = self._waiters[0][0]
                if board is not None:
                    board.next_wake = self._next_wake
        if done:
            fut.set_result(None)
        elif board is not None and board.tick >= target:  # the worker passed it before it saw the wake
            self._release_waiters(board.tick)
        return fut

    def _release_waiters(self, tick: float) -> None:
        with self._state_lock:
            while self._waiters and self._waiters[0][0] <= tick:
                _, _, waker, fut = heapq.heappop(self._waiters)
                waker.resolve(fut)
            self._next_wake = self._waiters[0][0] if self._waiters else float("inf")
            if self.board is not None and self.state is Lifecycle.RUNNING:
                self.board.next_wake = self._next_wake

    # ---- channels
    def _require_running(self) -> None:
        if self.state is Lifecycle.RUNNING:
            return
        if self.state in (Lifecycle.ENDED, Lifecycle.CLOSED):
            raise ProtocolError(ErrorCode.SESSION_ENDED, f"session {self.sid} has ended ({self.end_reason})")
        raise ProtocolError(ErrorCode.NO_SESSION, f"session {self.sid} is {self.state.value}, not running yet")

    def read(self, seat: int = 0) -> Observation:
        """Seat ``seat``'s newest observation (event loop). Never waits long on a tick worker: a worker
        stopped mid-write costs this reader `READ_PATIENCE` and a ``BACKPRESSURE`` error, not a frozen loop."""
        with self._chan:
            self._require_running()
            try:
                return self.slots[seat].read(timeout=READ_PATIENCE)
            except TimeoutError:
                raise ProtocolError(ErrorCode.BACKPRESSURE, f"session {self.sid}: its tick worker is not finishing "
                                    "an observation (stopped or overloaded?): retry shortly") from None  # fmt: skip

    def read_final(self, seat: int = 0) -> Observation:
        """Seat ``seat``'s terminal observation of the last episode that ended (tick -1 if none yet)."""
        with self._chan:
            self._require_running()
            return self.slots[seat].read_final()

    @property
    def tick(self) -> int:
        board = self.board
        if board is not None:
            return board.tick
        return self.host.tick if self.host is not None else -1

    def recent_lateness(self) -> np.ndarray:
        """Lateness (s) of the most recent ticks (up to `RECENT_TICKS`), a snapshot."""
        if self.board is not None:
            return self.board.recent_lateness()
        host = self.host
        return host.log.tail("lateness", RECENT_TICKS) if host is not None else np.zeros(0)

    def submit(self, action: Any, obs_tick: int, episode: int, *, lock_timeout: float | None = None,
               seat: int = 0) -> tuple[int, int]:  # fmt: skip
        """Enqueue ``action`` for seat ``seat``; `TimeoutError` when the queue's lock is not free
        within ``lock_timeout``; ``ACTION_OUT_OF_RANGE`` for an action outside that seat's space."""
        with self._chan:
            self._require_running()
            clock = self.clock
            assert clock is not None, "_start made it before running"
            tick = self.tick
            if obs_tick > tick:
                raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"obs_tick {obs_tick} is in the future (tick {tick})")
            try:
                seq = self.queues[seat].submit(action, obs_tick=obs_tick, episode=episode,
                                               submit_time=clock.now(), lock_timeout=lock_timeout)  # fmt: skip
            except ValueError as exc:
                where = f" (seat {self.seat_names[seat]!r})" if self.spec.seats is not None else ""
                raise ProtocolError(ErrorCode.ACTION_OUT_OF_RANGE, f"{exc}{where}") from None
        self.step_count += 1
        return seq, tick

    async def submit_async(self, action: Any, obs_tick: int, episode: int, seat: int = 0) -> tuple[int, int]:
        """`submit` from the event loop, which must never wait on a lock a tick worker can hold (a
        worker stopped inside ``take`` would freeze every client): non-blocking tries of the queue's
        lock, yielding to the loop between them, for up to `SUBMIT_PATIENCE`; then ``BACKPRESSURE``."""
        loop = asyncio.get_running_loop()
        give_up, pause = loop.time() + SUBMIT_PATIENCE, 0.0002
        while True:
            try:
                return self.submit(action, obs_tick, episode, lock_timeout=0, seat=seat)
            except TimeoutError:
                if loop.time() > give_up:
                    raise ProtocolError(ErrorCode.BACKPRESSURE, f"session {self.sid}: its tick worker holds the "
                                        "action queue (stopped or overloaded?): retry shortly") from None  # fmt: skip
            await asyncio.sleep(pause)
            pause = min(2 * pause, 0.02)

    def request_reset(self) -> None:
        with self._chan:
            self._require_running()
            self.slots[0].request_reset()  # the episode ends for every seat at once

    # ---- end
    def _finalize(self) -> None:
        """Stop ticking, write the replay, release everything, enter *closed*. Work thread."""
        try:
            tick_log, recorder = None, self.recorder
            with self._drive:  # waits for a tick (or a start) in progress
                if self.proc is not None:
                    if self._process is not None:  # the worker runs its host: stop it, take its log
                        tick_log, recorder = self._stop_remote()
                elif self._process is not None:
                    self._process.close()
                    tick_log = self.host.close_log() if self.host is not None else None
            if tick_log is not None:
                with self._chan:
                    try:
                        last = [slot.read(timeout=READ_PATIENCE) for slot in self.slots]
                    except TimeoutError:  # its writer died or stopped mid-write
                        last = []
                self.summary = {"ticks": len(tick_log), **_tick_summary(tick_log, self.seat_names)}
                if self.incomplete:  # the last ticks (at most RECORD_EVERY) died with the tick worker
                    self.summary["complete"] = False
                if last:
                    self.summary["total_reward"] = last[0].total_reward
                if recorder is not None and self.manager.replay_dir is not None:
                    replay = Replay.from_session(recorder, tick_log, self.replay_header())
                    self.replay_path = replay.save(self.manager.replay_dir / f"{self.sid}.npz")
                    self.manager.prune_replays()
            ticklog_dir = self.manager.ticklog_dir(self.sid)
            if ticklog_dir is not None:  # the replay (if recorded) keeps the session now
                shutil.rmtree(ticklog_dir, ignore_errors=True)
        except Exception:  # noqa: BLE001 - cleanup below must still run
            log.error("session %s: finalize failed\n%s", self.sid, traceback.format_exc())
        finally:
            with self._chan:
                if self._phase_slot is not None and self._phases is not None:  # acquired together
                    self._phases.release(self.tau_m, self._phase_slot)
                    self._phase_slot = None
                if self.proc is not None and self.manager.procs is not None:  # a proc comes from procs
                    self.manager.procs.release(self.proc)
                if self.host is not None:
                    try:
                        self.host.env.close()
                    except Exception:  # noqa: BLE001
                        pass
                for channel in (*self.slots, *self.queues, self.board):
                    if channel is not None:
                        channel.unlink()
                self.host = self.recorder = self._process = self.proc = None
            self.transition(Lifecycle.CLOSED)
            self.finalized.set()

    def _write_replay_header(self) -> None:
        """The replay's header beside the streaming log, for `Replay.recover` should this process die."""
        directory = self.manager.ticklog_dir(self.sid)
        if self.settings.record and directory is not None:
            try:
                write_header(directory, {**self.replay_header(), "end_reason": "the server died",
                                         "server_pid": os.getpid()})  # fmt: skip
            except OSError as exc:  # a full disk: the session runs on; only a recovery would miss it
                log.warning("session %s: cannot write its replay header (%s)", self.sid, exc)

    def _stop_remote(self) -> tuple[TickLog | None, Any]:
        """Stop the host on its worker; its log and replay record from what the worker streamed
        plus the tail it sends now, or, if the worker died, from what it streamed before."""
        tail = None
        if self.proc.alive:
            try:
                tail = self.proc.call("stop", self.sid, timeout=STOP_PATIENCE)
            except (RuntimeError, TimeoutError) as exc:  # died meanwhile, or stopped: keep what it streamed
                log.warning("session %s: its tick worker did not stop it (%s); keeping what it recorded", self.sid,
                            str(exc) or f"no reply within {STOP_PATIENCE:g}s")  # fmt: skip
                tail = None
        record = self.record
        assert record is not None, "_start_remote made it"
        if tail is not None:
            record.add(tail["tail"])
            meta = tail["meta"]
        else:
            meta = {**self._meta, "incomplete": True}
            self.incomplete = True
        tick_log = record.finish(meta)
        if not record.ticks:
            return None, None
        return tick_log, record.columns if record.has_replay else None

    def replay_header(self) -> dict[str, Any]:
        s = self.settings
        header: dict[str, Any] = {"env": self.spec.env_id, "env_kwargs": {}, "seed": s.seed, "warm_reset": self.warm,
                  "tick_hz": self.spec.tick_hz,
                  "default": s.default, "queue_mode": s.queue_mode, "session_id": self.sid,
                  "end_reason": self.end_reason, "complete": not self.incomplete}  # fmt: skip
        if self.spec.seats is not None:
            header["seats"] = list(self.spec.seats)
            header["action_widths"] = [int(np.prod(a.shape)) if a.shape else 1 for a in self.spec.seat_action_spaces]
        return header

    def info(self) -> dict[str, Any]:
        now = self.manager.clock.now()
        info = {
            "session_id": self.sid,
            "lifecycle": self.state.value,
            "env": self.spec.env_id,
            "tick": self.tick if self.state is Lifecycle.RUNNING else self.summary.get("ticks", -1),
            "age_s": round(now - self.created, 3),
            "idle_s": round(now - self.last_activity, 3),
            "step_count": self.step_count,
            "end_reason": self.end_reason,
            "record": self.settings.record,
            "replay": str(self.replay_path) if self.replay_path else None,
        }
        if self.record is not None:  # rows the tick worker still holds in memory (bounded: about a chunk)
            info["worker_held_rows"] = self.record.worker_held
        recent = self.recent_lateness() if self.state is Lifecycle.RUNNING and self._process is not None else None
        if recent is not None and recent.size:
            info["recent_lateness_ms"] = {"ticks": int(recent.size), "p50": float(np.percentile(recent, 50) * 1e3),
                                          "p99": float(np.percentile(recent, 99) * 1e3),
                                          "max": float(recent.max() * 1e3)}  # fmt: skip
        info["seats"] = self.seat_rows()
        if self.summary:
            info["summary"] = self.summary
        return info

    def seat_rows(self) -> list[dict[str, Any]]:
        """Each seat's counters: who holds it, its agent and inaction ticks, its last delay and
        return; while running from its slot, once ended from the tick log's summary."""
        running = self.state is Lifecycle.RUNNING and self._process is not None
        ended = {row["seat"]: row for row in self.summary.get("seats", [])} if self.summary else {}
        rows = []
        for i, name in enumerate(self.seat_names):
            obs = None
            if running:
                try:
                    obs = self.read(i)
                except ProtocolError:
                    obs = None
            if obs is not None:
                agent, inaction = obs.agent_ticks, obs.inaction_ticks
                row: dict[str, Any] = {"last_delay": obs.last_delay, "total_reward": obs.total_reward}
            else:
                done = ended.get(name) or (self.summary if i == 0 else {})
                agent, inaction = done.get("agent_ticks", 0), done.get("inaction_ticks", 0)
                row = {"last_delay": None, "total_reward": done.get("total_reward")}
                for key in ("delay_mean_ticks", "delay_p99_ticks"):
                    if key in done:
                        row[key] = done[key]
            acted = agent + inaction
            rows.append({"seat": name, "held": self.holders[i] is not None, "agent_ticks": agent,
                         "inaction_ticks": inaction, "inaction_fraction": inaction / acted if acted else None,
                         **row})  # fmt: skip
        return rows


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class LoopWaker:
    """Resolves futures of one event loop from tick threads, one loop wake-up per batch.

    ``call_soon_threadsafe`` per future costs a self-pipe write each (a syscall that also hands the
    GIL around); with many sessions due close together, the futures released while the loop has not
    yet run share one wake-up instead.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._ready: list[asyncio.Future] = []
        self._lock = threading.Lock()
        self._armed = False

    def resolve(self, fut: asyncio.Future) -> None:
        """Any thread: resolve ``fut`` on its loop soon."""
        with self._lock:
            self._ready.append(fut)
            if self._armed:
                return
            self._armed = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready, self._armed = self._ready, [], False
        for fut in ready:
            _resolve(fut)


def _tick_summary(tick_log: Any, seats: list[str] | None = None) -> dict[str, Any]:
    """Agent and inaction ticks and lateness; with several ``seats``, each seat's counters, delay
    and return under ``seats`` (the top-level counters are the first seat's)."""
    if not len(tick_log):
        return {}
    source, lateness = tick_log["source"], tick_log["lateness"]
    out: dict[str, Any] = {
        "agent_ticks": int(source.sum()),
        "inaction_ticks": int(len(source) - source.sum()),
        "lateness_p50_ms": float(np.percentile(lateness, 50) * 1e3),
        "lateness_p99_ms": float(np.percentile(lateness, 99) * 1e3),
        "lateness_max_ms": float(lateness.max() * 1e3),
    }
    if seats is not None and len(seats) > 1 and getattr(tick_log, "seats", 1) == len(seats):
        out["seats"] = []
        for i, name in enumerate(seats):
            prefix = "" if i == 0 else f"seat{i}_"
            src, delay = tick_log[prefix + "source"], tick_log[prefix + "delay"]
            agent = delay[src == SOURCE_AGENT]
            out["seats"].append({
                "seat": name, "agent_ticks": int(src.sum()), "inaction_ticks": int(len(src) - src.sum()),
                "delay_mean_ticks": float(agent.mean()) if agent.size else None,
                "delay_p99_ticks": float(np.percentile(agent, 99)) if agent.size else None,
                "total_reward": float(tick_log[prefix + "reward"].sum()),
            })  # fmt: skip
    return out


# ----------------------------------------------------------------------------- manager


class SessionManager:
    """Owns every session, the tick pool, the work queue and the idle reaper.

    Parameters
    ----------
    envs: env ids clients may choose (the first is the default); each is probed once here.
    max_sessions: live sessions allowed at once; one more gets ``CAPACITY_REACHED``.
    warm_envs: envs per env id kept built and seeded ahead of time (see `WarmEnvs`); with tick
        processes, split over them (each builds its share: an env cannot move between processes).
    tick_threads: threads of the in-process tick pool (``tick_procs=0``).
    tick_procs: 0 ticks every session on threads of this process; ``n > 0`` ticks them on ``n``
        worker processes (`nonstop.server.tickprocs`): past one core, since one GIL holds ALE steps,
        while this process still owns every session, its channels and its replay.
    tick_sched: the workers' tick lanes' scheduling (`nonstop.realtime.host.raise_priority`).
    idle_timeout: a running session whose client sent nothing for this long is ended (this is how
        a vanished client's session ends when no disconnect ever arrives).
    replay_dir: where replays go; ``None`` disables recording.
    replay_keep, replay_max_mb: the replay directory's retention: after each replay is written (and
        once at start), the oldest ``*.npz`` files are deleted until at most ``replay_keep`` files and
        ``replay_max_mb`` MB remain (0: no limit). The newest replay is always kept.
    """

    def __init__(
        self,
        envs: list[str] | tuple[str, ...] = ("Boxing",),
        *,
        max_sessions: int = 64,
        idle_timeout: float = 60.0,
        replay_dir: str | os.PathLike | None = None,
        record: bool = True,
        encoding: str = "b64",
        tick_threads: int = 2,
        tick_procs: int = 0,
        tick_sched: str = "auto",
        work_workers: int = 2,
        max_pending_work: int = 16,
        max_waiters: int = 64,
        reap_interval: float = 0.25,
        keep_closed: int = 256,
        warm_envs: int = 0,
        replay_keep: int = 1000,
        replay_max_mb: float = 0.0,
    ) -> None:
        if not envs or not all(isinstance(e, str) and e for e in envs):
            raise ValueError(f"envs must be a non-empty list of env ids, got {envs!r}")
        if not isinstance(max_sessions, int) or isinstance(max_sessions, bool) or max_sessions < 1:
            raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be a positive number of seconds, got {idle_timeout!r}")
        if encoding not in ("b64", "list", "none"):
            raise ValueError(f"encoding must be 'b64', 'list' or 'none', got {encoding!r}")
        if not isinstance(tick_procs, int) or isinstance(tick_procs, bool) or tick_procs < 0:
            raise ValueError(f"tick_procs must be a non-negative integer, got {tick_procs!r}")
        if tick_sched not in HOST_SCHED:
            raise ValueError(f"tick_sched must be one of {HOST_SCHED}, got {tick_sched!r}")
        if not isinstance(replay_keep, int) or isinstance(replay_keep, bool) or replay_keep < 0:
            raise ValueError(f"replay_keep must be a non-negative integer (0: no limit), got {replay_keep!r}")
        if isinstance(replay_max_mb, bool) or not isinstance(replay_max_mb, (int, float)) or not replay_max_mb >= 0:
            raise ValueError(f"replay_max_mb must be a non-negative number (0: no limit), got {replay_max_mb!r}")
        self.replay_keep = replay_keep
        self.replay_max_bytes = int(replay_max_mb * 1e6)
        self._prune_lock = threading.Lock()
        self.replays_pruned = 0
        self.specs = {env_id: EnvSpec.probe(env_id) for env_id in dict.fromkeys(envs)}  # loaded once, shared
        self.default_env = envs[0]
        self.max_sessions = max_sessions
        self.idle_timeout = float(idle_timeout)
        self.replay_dir = Path(replay_dir) if replay_dir is not None else None
        if self.replay_dir is not None:
            self.replay_dir.mkdir(parents=True, exist_ok=True)
        self.record = bool(record) and self.replay_dir is not None
        self.replays_recovered = self.recover_replays()
        self.prune_replays()
        self.encoding = encoding
        self.max_waiters = max_waiters
        self.clock = WallClock(spin=0.0)
        self.pool = TickPool(tick_threads)
        self.work = WorkQueue(work_workers, max_pending_work)
        self._closer = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="nonstop-close")
        self._lock = threading.Lock()
        self.sessions: dict[str, ServerSession] = {}
        self._wakers: dict[int, LoopWaker] = {}
        self._closed: deque[ServerSession] = deque(maxlen=keep_closed)
        self._shutdown = threading.Event()
        self.refused_capacity = 0
        self.procs: TickProcs | None = None
        if tick_procs:
            self.procs = TickProcs(tick_procs, list(self.specs), warm=warm_envs, sched=tick_sched,
                                   on_note=self._on_note, on_exit=self._on_proc_exit,
                                   on_records=self._on_records)  # fmt: skip
            if not self.procs.wait_ready():  # a crowd arriving at once must not wait on imports
                log.warning("tick workers still silent after startup; sessions may start slowly")
            warm_envs = 0  # the workers keep the spares
        self.warm = WarmEnvs(warm_envs, list(self.specs), idle=lambda: self.live_count() == 0)
        self._reaper = threading.Thread(target=self._reap, args=(reap_interval,), name="nonstop-reaper", daemon=True)
        self._reaper.start()

    def _on_note(self, note: tuple) -> None:
        """A tick worker's note (its reader thread): an awaited tick came, or a host stopped."""
        kind, sid, value = note
        session = self.sessions.get(sid)
        if session is None:
            return
        if kind == "tick":  # the worker may be further on by now: release up to where it is
            session._release_waiters(max(value, session.tick))
        elif kind == "ended":
            self.end(session, value)

    def _on_records(self, deltas: dict[str, dict]) -> None:
        """A tick worker's periodic record of its sessions (its reader thread)."""
        for sid, delta in deltas.items():
            session = self.sessions.get(sid)
            if session is not None and session.record is not None:
                session.record.add(delta)

    def recover_replays(self) -> int:
        """Finalise the replays of sessions a dead server left behind: each ``ticklogs/<sid>/`` whose
        server process is gone becomes ``<sid>.npz`` (`Replay.recover`: marked incomplete, its ticks
        up to the last durable chunk), then is removed. Returns how many were recovered."""
        if self.replay_dir is None or not (self.replay_dir / "ticklogs").is_dir():
            return 0
        recovered = 0
        for directory in sorted((self.replay_dir / "ticklogs").iterdir()):
            try:
                pid = int(json.loads((directory / "replay.json").read_text()).get("server_pid", 0))
            except (OSError, ValueError, AttributeError):
                continue  # no header (never recorded, or not ours): left as it is
            if pid and _process_alive(pid):
                continue  # another server on this directory is still writing it
            try:
                Replay.recover(directory).save(self.replay_dir / f"{directory.name}.npz")
            except (OSError, ValueError) as exc:
                log.warning("cannot recover the replay of session %s from %s: %s", directory.name, directory, exc)
                continue
            shutil.rmtree(directory, ignore_errors=True)
            recovered += 1
        if recovered:
            log.info("recovered %d replays of sessions a dead server left in %s", recovered, self.replay_dir / "ticklogs")
        return recovered

    def ticklog_dir(self, sid: str) -> Path | None:
        """Where a session's tick log streams while it runs (removed once its replay is written)."""
        return self.replay_dir / "ticklogs" / sid if self.replay_dir is not None else None

    def _on_proc_exit(self, proc: Any) -> None:
        """A tick worker's pipe closed (its reader thread). Its worlds died with it: end their sessions
        (each replay is written from the record the worker streamed), then start a replacement."""
        if self._shutdown.is_set():
            return
        proc.process.join(2)
        code = proc.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        log.error("tick worker %d died (%s): ending its sessions and starting a replacement", proc.index, how)
        for session in list(self.sessions.values()):
            if session.proc is proc:
                self.end(session, f"tick worker died ({how}); the world is gone: reset to start a new session")
        assert self.procs is not None, "only tick workers report their exit"
        try:
            self.procs.replace(proc)
        except Exception:  # noqa: BLE001 - /health stays unhealthy and says why
            log.error("could not start a replacement for tick worker %d\n%s", proc.index, traceback.format_exc())

    def waker(self, loop: asyncio.AbstractEventLoop) -> LoopWaker:
        """The `LoopWaker` of ``loop`` (one per event loop; a server has one, tests may have several)."""
        waker = self._wakers.get(id(loop))
        if waker is None or waker.loop is not loop:
            with self._lock:
                waker = self._wakers[id(loop)] = LoopWaker(loop)
        return waker

    # ---- sessions
    def live_count(self) -> int:
        return sum(1 for s in list(self.sessions.values()) if s.live)

    def create(self, config: Any, *, seed: int | None = None, episode_id: str | None = None) -> ServerSession:
        """Admit a session (state *created*) or raise CAPACITY_REACHED / VALIDATION_ERROR."""
        env_id = config.env or self.default_env
        spec = self.specs.get(env_id)
        if spec is None:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR, f"env {env_id!r} is not served here; served: {', '.join(self.specs)}"
            )
        if config.record and self.replay_dir is None:
            raise ProtocolError(
                ErrorCode.VALIDATION_ERROR, "this server records no replays (start it with --replay-dir)"
            )
        settings = Settings(
            env=env_id,
            default=config.default or spec.default_beta,
            queue_mode=config.queue_mode,
            record=self.record if config.record is None else bool(config.record),
            encoding=config.encoding or self.encoding,
            max_ticks=config.max_ticks,
            seed=seed,
            episode_id=episode_id,
        )
        with self._lock:
            if self._shutdown.is_set():
                raise ProtocolError(ErrorCode.SESSION_ERROR, "the server is shutting down")
            if self.live_count() >= self.max_sessions:
                self.refused_capacity += 1
                raise ProtocolError(
                    ErrorCode.CAPACITY_REACHED, f"server at capacity ({self.max_sessions} sessions): retry later"
                )
            session = ServerSession(uuid.uuid4().hex[:12], settings, spec, self)
            self.sessions[session.sid] = session
        return session

    async def start(self, session: ServerSession, *, timeout: float = 30.0) -> None:
        """Start ``session`` on the work queue (backpressure if full); end it on failure."""
        try:
            fut = self.work.submit(session._start)
        except ProtocolError:
            self.end(session, "refused: work queue full")
            raise
        try:
            await asyncio.wait_for(asyncio.wrap_future(fut), timeout)
        except asyncio.TimeoutError:
            self.end(session, "start timeout")
            raise ProtocolError(ErrorCode.FACTORY_ERROR, f"session did not start within {timeout}s") from None
        except Exception as exc:  # noqa: BLE001 - the env factory failed
            self.end(session, f"start failed: {exc}")
            message = f"could not start env {session.spec.env_id!r}: {exc}"
            raise ProtocolError(ErrorCode.FACTORY_ERROR, message) from None
        if session.state is not Lifecycle.RUNNING:
            raise ProtocolError(ErrorCode.SESSION_ENDED, f"session ended while starting ({session.end_reason})")

    def get(self, sid: str) -> ServerSession | None:
        return self.sessions.get(sid)

    def ended(self, sid: str) -> ServerSession | None:
        """A recently closed session (kept for ``/sessions``), or None."""
        with self._lock:
            return next((s for s in self._closed if s.sid == sid), None)

    def end(self, session: ServerSession, reason: str) -> None:
        """End ``session`` (idempotent, any thread): stop its ticks now, finalize it off-thread."""
        if not session.transition(Lifecycle.ENDED):
            return
        session.end_reason = reason
        session.ended_at = self.clock.now()
        session.cancelled = True
        with session._state_lock:
            waiters, session._waiters = session._waiters, []
            session._next_wake = float("inf")
        for _, _, waker, fut in waiters:
            waker.resolve(fut)
        try:
            self._closer.submit(self._finalize, session)
        except RuntimeError:  # closer already shut down: finalize here
            self._finalize(session)

    def _finalize(self, session: ServerSession) -> None:
        session._finalize()
        with self._lock:
            self.sessions.pop(session.sid, None)
            self._closed.append(session)

    def _reap(self, interval: float) -> None:
        while not self._shutdown.wait(interval):
            now = self.clock.now()
            for session in list(self.sessions.values()):
                if session.live and now - session.last_activity > self.idle_timeout:
                    self.end(session, f"idle timeout ({self.idle_timeout:g}s without a message)")

    # ---- views
    def list_sessions(self) -> list[dict[str, Any]]:
        with self._lock:
            everyone = list(self.sessions.values()) + list(self._closed)
        return [s.info() for s in everyone]

    def health(self) -> dict[str, Any]:
        """Healthy when every pool lane beat recently and every running session ticked recently."""
        beat_age = self.pool.heartbeat_age()
        stalled = []
        now = self.clock.now()
        for s in list(self.sessions.values()):
            clock = s.clock
            if s.state is Lifecycle.RUNNING and s._process is not None and clock is not None:
                behind = clock.now() - (s.origin + s.tick / s.spec.tick_hz)
                if behind > 0.5 + 5.0 / s.spec.tick_hz:
                    stalled.append({"session_id": s.sid, "behind_s": round(behind, 3)})
        procs_alive = self.procs is None or self.procs.all_alive()
        healthy = beat_age < 1.0 and not stalled and procs_alive
        return {
            "status": "healthy" if healthy else "unhealthy",
            "ticks_advancing": healthy,
            "pool_heartbeat_age_s": round(beat_age, 4),
            "stalled_sessions": stalled,
            "live_sessions": self.live_count(),
            "max_sessions": self.max_sessions,
            "work_pending": self.work.pending,
            "tick_procs": 0 if self.procs is None else len(self.procs.procs),
            "tick_procs_alive": procs_alive,
            "tick_procs_replaced": 0 if self.procs is None else self.procs.replaced,
            "tick_procs_silent": [] if self.procs is None else [p.index for p in self.procs.procs if not p.responsive],
            "replays_pruned": self.replays_pruned,
            "replays_recovered": self.replays_recovered,
            "tick_sched": [] if self.procs is None else [p.sched for p in self.procs.procs],
            "warm_envs_ready": self.warm.ready() if self.procs is None else self.procs.warm_ready(),
            "uptime_s": round(now, 3),
        }

    def list_replays(self) -> list[dict[str, Any]]:
        if self.replay_dir is None:
            return []
        out = []
        for path in sorted(self.replay_dir.glob("*.npz")):
            out.append({"name": path.name, "path": str(path), "bytes": path.stat().st_size})
        return out

    def prune_replays(self) -> int:
        """Apply the retention policy to the replay directory, oldest first; returns files deleted."""
        if self.replay_dir is None or not (self.replay_keep or self.replay_max_bytes):
            return 0
        with self._prune_lock:
            found = []
            for path in self.replay_dir.glob("*.npz"):
                try:
                    st = path.stat()
                except OSError:  # deleted meanwhile
                    continue
                found.append((st.st_mtime_ns, path.name, st.st_size, path))
            found.sort()
            total = sum(f[2] for f in found)
            deleted = 0
            for _, _, size, path in found[:-1]:  # the newest always stays
                if not ((self.replay_keep and len(found) - deleted > self.replay_keep)
                        or (self.replay_max_bytes and total > self.replay_max_bytes)):  # fmt: skip
                    break
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                deleted += 1
                total -= size
            self.replays_pruned += deleted
        if deleted:
            log.info("replay retention: deleted the %d oldest replays in %s", deleted, self.replay_dir)
        return deleted

    def shutdown(self, timeout: float = 30.0) -> None:
        """End every session (replays flushed), then stop the reaper, pool and queues."""
        self._shutdown.set()
        sessions = list(self.sessions.values())
        for session in sessions:
            self.end(session, "server shutdown")
        for session in sessions:
            session.finalized.wait(timeout)
        self._reaper.join(timeout=5)
        self._closer.shutdown(wait=True)
        self.work.close()
        self.pool.close()
        self.warm.close()
        if self.procs is not None:
            self.procs.close()
