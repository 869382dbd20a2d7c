"""One session on the server: one realtime world (`Host` + `LatestSlot` + `ActionQueue`) owned
by one client, or, in a several-seat world (docs/design.md §4b), one slot and one queue per seat, each seat
held by one client (`ServerSession.claim`): the creator takes the first seat, others join. Its
host is a timed process (a generator yielding its next deadline, see `nonstop.realtime.clock`), so
a server need not spend a process or even a thread per session: a `TickPool` of a few threads, each
with a heap of ``(deadline, session)``, drives every host on the wall clock. The request-handling
event loop never ticks a world; it only reads slots, submits actions and parks futures that the
pool resolves when a tick arrives (`ServerSession.wait_tick`).

Its lifecycle is `nonstop.server.lifecycle`; `nonstop.server.sessions.SessionManager` (a `SessionHost`) admits,
tracks and ends many of them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import shutil
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any, Final, Protocol

import numpy as np

from nonstop.envs.seats import team_names, team_of
from nonstop.realtime.channels import ActionQueue, LatestSlot, Observation
from nonstop.realtime.clock import WallClock
from nonstop.realtime.defaults import make_default
from nonstop.realtime.hostloop import Host
from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog
from nonstop.server.envspec import EnvSpec
from nonstop.server.lifecycle import LIVE, TRANSITIONS, Lifecycle
from nonstop.server.liveworld import world_view
from nonstop.server.loopwaker import LoopWaker
from nonstop.server.protocol import ErrorCode, ProtocolError
from nonstop.server.replay import Replay, ReplayRecorder, SeatReplayRecorder, write_header
from nonstop.server.ticking import PhasedClock, PhaseSlots
from nonstop.server.tickprocs import RECENT_TICKS, SessionRecord


class SessionHost(Protocol):
    """What a session asks of the manager that owns it (`nonstop.server.sessions.SessionManager`), the
    only calls it makes back into it: declared here, so this module never names the manager's."""

    clock: WallClock
    pool: Any  # the tick threads (`nonstop.server.ticking.TickPool`)
    procs: Any  # the tick worker processes (`nonstop.server.tickprocs.TickProcs`), None: ticks run on `pool`
    warm: Any  # worlds built ahead of need (`nonstop.server.sessions.WarmEnvs`)
    max_waiters: int
    replay_dir: Path | None

    def ticklog_dir(self, sid: str) -> Path | None: ...

    def waker(self, loop: asyncio.AbstractEventLoop) -> LoopWaker: ...

    def end(self, session: "ServerSession", reason: str) -> None: ...

    def prune_replays(self) -> int: ...


__all__ = ["ServerSession", "Settings", "SESSION_CHUNK_ROWS"]

log = logging.getLogger("nonstop.server")

#: Rows per chunk of a session's tick log (server record and worker host): 2.3 minutes at 60 Hz, 1.2 MB.
SESSION_CHUNK_ROWS: Final = 8192
#: how long the event loop may retry reading an observation its tick worker is writing (s)
READ_PATIENCE: Final = 0.02
#: how long finalization waits for a tick worker to stop a host and send the rest of its record (s)
STOP_PATIENCE: Final = 30.0
#: how long a submit retries, yielding to the event loop, while a tick worker holds the action queue (s)
SUBMIT_PATIENCE: Final = 1.0
#: how long the live page waits for a tick worker's picture of a world (s)
WORLD_VIEW_TIMEOUT_S: Final = 2.0


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

    def __init__(self, sid: str, settings: Settings, spec: EnvSpec, manager: SessionHost) -> None:
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
        self.parked = 0  # waits its players have pending (event loop): activity, for the idle reaper
        self._end_listeners: list[Callable[[], None]] = []
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
            raise ProtocolError(
                ErrorCode.UNKNOWN_SEAT,
                f"session {self.sid} ({self.spec.env_id}) has no seat {seat!r}; its seats are {self.seat_names}",
            ) from None

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
                    raise ProtocolError(
                        ErrorCode.SEAT_TAKEN,
                        f"seat {seat!r} of session {self.sid} is held by another "
                        f"client; free seats: {self.free_seats()}",
                    )
            else:
                free = [i for i, h in enumerate(self.holders) if h is None]
                if not free:
                    raise ProtocolError(
                        ErrorCode.SESSION_FULL, f"session {self.sid} is full: its seats {self.seat_names} are all held"
                    )
                index = free[0]
            self.holders[index] = holder
        return index

    def team_seats(self, team: str) -> list[int]:
        """The indices of the seats of ``team`` (a seat's team: its name up to the last ``_``);
        ``UNKNOWN_TEAM`` for a team the env lacks (a one-seat world has none)."""
        teams = team_names(self.seat_names) if self.spec.seats is not None else []
        if team not in teams:
            where = f"its teams are {teams}" if teams else "it is a one-seat world"
            raise ProtocolError(
                ErrorCode.UNKNOWN_TEAM, f"session {self.sid} ({self.spec.env_id}) has no team {team!r}; {where}"
            )
        return [i for i, name in enumerate(self.seat_names) if team_of(name) == team]

    def claim_team(self, holder: Any, team: str) -> list[int]:
        """Seat ``holder`` at every seat of ``team`` at once (any other seat it held is freed for its β);
        returns their indices. ``UNKNOWN_TEAM``, ``SEAT_TAKEN`` (naming the seats another client holds),
        or the session's own state, with nothing claimed."""
        indices = self.team_seats(team)
        with self._state_lock:
            self._require_running()
            taken = [self.seat_names[i] for i in indices if self.holders[i] not in (None, holder)]
            if taken:
                raise ProtocolError(
                    ErrorCode.SEAT_TAKEN,
                    f"team {team!r} of session {self.sid}: seats {taken} are held by another client",
                )
            self.holders = [None if h is holder else h for h in self.holders]
            for i in indices:
                self.holders[i] = holder
        return indices

    def release(self, holder: Any) -> int:
        """Unseat ``holder`` (its seats are played by their β from now); returns how many seats
        other clients still hold."""
        with self._state_lock:
            self.holders = [None if h is holder else h for h in self.holders]
            return sum(h is not None for h in self.holders)

    def release_all(self) -> None:
        """Unseat everyone (the session has ended: no seat of it is held any more)."""
        with self._state_lock:
            self.holders = [None] * len(self.holders)

    def on_end(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from whichever thread ends it) once this session ends; at once if it has."""
        with self._state_lock:
            if self.state in LIVE:
                self._end_listeners.append(listener)
                return
        listener()

    def _ended(self) -> None:
        """Tell the listeners that this session ended (`SessionManager.end`)."""
        with self._state_lock:
            listeners, self._end_listeners = self._end_listeners, []
        for listener in listeners:
            try:
                listener()
            except Exception:  # a closed loop, a gone client: the others must hear it
                log.debug("session %s: an end listener failed\n%s", self.sid, traceback.format_exc())

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
                env = self.recorder = recorder(
                    env, directory=ticklogs / "replay" if ticklogs is not None else None, chunk_rows=SESSION_CHUNK_ROWS
                )
            self._open_channels()  # one slot and queue per seat (a one-seat world: lists of one, as Host takes)
            noops = spec.seat_noops if spec.seats is not None else (spec.noop_action,)
            default = [make_default(s.default, noop_action=noop) for noop in noops]
            self.host = Host(
                env,
                self.slots,
                self.queues,
                tau_m=1.0 / spec.tick_hz,
                default=default,
                seed=host_seed,
                max_ticks=s.max_ticks,
                meta={"env": spec.env_id, "session": self.sid, "clock": "wall", "default": s.default},
                log_dir=self.manager.ticklog_dir(self.sid),
                log_chunk_rows=SESSION_CHUNK_ROWS,
                seats=None if spec.seats is None else list(spec.seats),
            )
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
            self.record = SessionRecord(
                self.tau_m,
                directory=self.manager.ticklog_dir(self.sid),
                chunk_rows=SESSION_CHUNK_ROWS,
                seats=len(self.seat_names),
            )
            self._phases = proc.phases
            self._phase_slot, phase = proc.phases.acquire(self.tau_m)
            self._meta = {
                "env": spec.env_id,
                "session": self.sid,
                "clock": "wall",
                "default": s.default,
                "tick_proc": proc.index,
            }
            cfg = {
                "env": spec.env_id,
                "seed": s.seed,
                "record": s.record,
                "tau_m": self.tau_m,
                "default": s.default,
                "noop_action": spec.noop_action,
                "max_ticks": s.max_ticks,
                "origin": origin,
                "phase": phase,
                "meta": self._meta,
                "log_chunk_rows": SESSION_CHUNK_ROWS,
                "seats": None if spec.seats is None else list(spec.seats),
                "seat_noops": list(spec.seat_noops),
            }
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
            except BaseException as exc:  # the env raised: end this session only
                self.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                log.error("session %s: env raised\n%s", self.sid, traceback.format_exc())
                self.manager.end(self, f"env error: {self.error}")
                return None
            if host.tick >= self._next_wake:
                self._release_waiters(host.tick)
            return clock.origin + wake

    # ---- waiting for ticks (event loop side parks a future, the pool resolves it)
    def wait_tick(self, target: int, loop: asyncio.AbstractEventLoop, *, capped: bool = True) -> asyncio.Future:
        """A future resolved once tick ``target`` has been processed (or the session ended).
        ``capped``: refused with ``BACKPRESSURE`` past the manager's ``max_waiters`` (spectators,
        pushes); a player's waits are bounded per connection instead, so that others' waits never
        refuse a seat's ``step``."""
        fut = loop.create_future()
        board = self.board
        with self._state_lock:
            done = self.state is not Lifecycle.RUNNING or self._process is None or self.tick >= target
            if not done:
                if capped and len(self._waiters) >= self.manager.max_waiters:
                    raise ProtocolError(ErrorCode.BACKPRESSURE, f"more than {self.manager.max_waiters} waits pending")
                heapq.heappush(self._waiters, (target, next(self._wait_order), self.manager.waker(loop), fut))
                self._next_wake = self._waiters[0][0]
                if board is not None:
                    board.next_wake = self._next_wake
        if done:
            fut.set_result(None)
            return fut
        fut.add_done_callback(self._forget_waiter)
        if board is not None and board.tick >= target:  # the worker passed it before it saw the wake
            self._release_waiters(board.tick)
        return fut

    def _forget_waiter(self, fut: asyncio.Future) -> None:
        """A wait whose caller went away (its future cancelled) leaves the heap at once, not at its tick."""
        if not fut.cancelled():
            return
        with self._state_lock:
            kept = [w for w in self._waiters if w[3] is not fut]
            if len(kept) == len(self._waiters):
                return
            heapq.heapify(kept)
            self._waiters = kept
            self._next_wake = kept[0][0] if kept else float("inf")
            if self.board is not None and self.state is Lifecycle.RUNNING:
                self.board.next_wake = self._next_wake

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
                raise ProtocolError(
                    ErrorCode.BACKPRESSURE,
                    f"session {self.sid}: its tick worker is not finishing "
                    "an observation (stopped or overloaded?): retry shortly",
                ) from None

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

    def submit(
        self, action: Any, obs_tick: int, episode: int, *, lock_timeout: float | None = None, seat: int = 0
    ) -> tuple[int, int]:
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
                seq = self.queues[seat].submit(
                    action, obs_tick=obs_tick, episode=episode, submit_time=clock.now(), lock_timeout=lock_timeout
                )
            except (ValueError, OverflowError) as exc:  # a number past every float overflows: out of range too
                where = f" (seat {self.seat_names[seat]!r})" if self.spec.seats is not None else ""
                raise ProtocolError(ErrorCode.ACTION_OUT_OF_RANGE, f"action out of range: {exc}{where}") from None
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
                    raise ProtocolError(
                        ErrorCode.BACKPRESSURE,
                        f"session {self.sid}: its tick worker holds the "
                        "action queue (stopped or overloaded?): retry shortly",
                    ) from None
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
        except Exception:  # cleanup below must still run
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
                    except Exception:
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
                write_header(
                    directory, {**self.replay_header(), "end_reason": "the server died", "server_pid": os.getpid()}
                )
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
                log.warning(
                    "session %s: its tick worker did not stop it (%s); keeping what it recorded",
                    self.sid,
                    str(exc) or f"no reply within {STOP_PATIENCE:g}s",
                )
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
        header: dict[str, Any] = {
            "env": self.spec.env_id,
            "env_kwargs": {},
            "seed": s.seed,
            "warm_reset": self.warm,
            "tick_hz": self.spec.tick_hz,
            "default": s.default,
            "queue_mode": s.queue_mode,
            "session_id": self.sid,
            "end_reason": self.end_reason,
            "complete": not self.incomplete,
        }
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
        if self.state is Lifecycle.RUNNING:  # tick t is due at this + t·τ_M on CLOCK_MONOTONIC (time.perf_counter)
            info["tick0_monotonic_s"] = self.manager.pool.clock.origin + self.origin
        recent = self.recent_lateness() if self.state is Lifecycle.RUNNING and self._process is not None else None
        if recent is not None and recent.size:
            info["recent_lateness_ms"] = {
                "ticks": int(recent.size),
                "p50": float(np.percentile(recent, 50) * 1e3),
                "p99": float(np.percentile(recent, 99) * 1e3),
                "max": float(recent.max() * 1e3),
            }
        info["seats"] = self.seat_rows()
        if self.summary:
            info["summary"] = self.summary
        return info

    def seat_rows(self, indices: list[int] | None = None) -> list[dict[str, Any]]:
        """Each seat's counters (``indices``: only those seats', in that order): who holds it, its
        agent and inaction ticks, its last delay and return; while running from its slot, once ended
        from the tick log's summary."""
        running = self.state is Lifecycle.RUNNING and self._process is not None
        ended = {row["seat"]: row for row in self.summary.get("seats", [])} if self.summary else {}
        rows = []
        for i in range(len(self.seat_names)) if indices is None else indices:
            name = self.seat_names[i]
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
            rows.append(
                {
                    "seat": name,
                    "held": self.holders[i] is not None,
                    "agent_ticks": agent,
                    "inaction_ticks": inaction,
                    "inaction_fraction": inaction / acted if acted else None,
                    **row,
                }
            )
        return rows

    def world_view(self) -> dict[str, Any] | None:
        """The world's frame and its seats' positions (`nonstop.server.liveworld.world_view`), taken
        between ticks; None when the session is not ticking."""
        if self.state is not Lifecycle.RUNNING:
            return None
        if self.proc is not None:  # the env lives on a tick worker: ask it
            try:
                return self.proc.call("world", self.sid, timeout=WORLD_VIEW_TIMEOUT_S)
            except Exception:  # a busy or gone worker costs the page one picture
                return None
        with self._drive:
            host = self.host
            return None if host is None else world_view(host.env)


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
            out["seats"].append(
                {
                    "seat": name,
                    "agent_ticks": int(src.sum()),
                    "inaction_ticks": int(len(src) - src.sum()),
                    "delay_mean_ticks": float(agent.mean()) if agent.size else None,
                    "delay_p99_ticks": float(np.percentile(agent, 99)) if agent.size else None,
                    "total_reward": float(tick_log[prefix + "reward"].sum()),
                }
            )
    return out
