"""Many realtime sessions in one process: admission, the manager and its reaper (docs/design.md §4).

One session (`ServerSession`, a world owned by its clients) is `nonstop.server.session`, its
lifecycle (`Lifecycle`, `TRANSITIONS`: created → starting → running → ended → closed) is
`nonstop.server.lifecycle`; both stay importable from here. The plumbing the sessions tick on
(`TickPool`, phases, `WorkQueue`, warm envs) lives in `nonstop.server.ticking`, which the tick
worker processes (`nonstop.server.tickprocs`) share.

Every path into *ended* goes through `SessionManager.end`, which always finishes in *closed*.
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
import dataclasses
import json
import logging
import os
import shutil
import threading
import traceback
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from nonstop.realtime.clock import WallClock
from nonstop.server.envspec import SINGLE_SEAT, EnvSpec
from nonstop.server.lifecycle import LIVE as LIVE, TRANSITIONS, Lifecycle
from nonstop.server.loopwaker import LoopWaker
from nonstop.server.protocol import ErrorCode, ProtocolError
from nonstop.server.replay import Replay
from nonstop.server.settings import ManagerSettings
from nonstop.server.session import (
    READ_PATIENCE as READ_PATIENCE,
    SESSION_CHUNK_ROWS as SESSION_CHUNK_ROWS,
    STOP_PATIENCE as STOP_PATIENCE,
    SUBMIT_PATIENCE as SUBMIT_PATIENCE,
    ServerSession,
    Settings,
)
from nonstop.server.ticking import TickPool, WarmEnvs, WorkQueue
from nonstop.server.tickprocs import TickProcs

__all__ = [
    "Lifecycle",
    "TRANSITIONS",
    "TickPool",
    "WorkQueue",
    "EnvSpec",
    "ServerSession",
    "SessionManager",
    "ManagerSettings",
    "SINGLE_SEAT",
]

log = logging.getLogger("nonstop.server")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


# ----------------------------------------------------------------------------- manager


class SessionManager:
    """Owns every session, the tick pool, the work queue and the idle reaper.

    ``envs``: env ids clients may choose (the first is the default); each is probed once here.
    ``settings`` (or the options named like its fields, over it): admission, ticking, reaping and
    recording (`nonstop.server.settings.ManagerSettings`). Past one core, ``tick_procs=n`` ticks the
    sessions on ``n`` worker processes (`nonstop.server.tickprocs`), since one GIL holds ALE steps,
    while this process still owns every session, its channels and its replay.
    """

    def __init__(
        self, envs: list[str] | tuple[str, ...] = ("Boxing",), settings: ManagerSettings | None = None, **options: Any
    ) -> None:
        if not envs or not all(isinstance(e, str) and e for e in envs):
            raise ValueError(f"envs must be a non-empty list of env ids, got {envs!r}")
        self.settings = conf = dataclasses.replace(settings or ManagerSettings(), **options)
        self.replay_keep = conf.replay_keep
        self.replay_max_bytes = int(conf.replay_max_mb * 1e6)
        self._prune_lock = threading.Lock()
        self.replays_pruned = 0
        self.specs = {env_id: EnvSpec.probe(env_id) for env_id in dict.fromkeys(envs)}  # loaded once, shared
        self.default_env = envs[0]
        self.max_sessions = conf.max_sessions
        self.idle_timeout = float(conf.idle_timeout)
        self.replay_dir = Path(conf.replay_dir) if conf.replay_dir is not None else None
        if self.replay_dir is not None:
            self.replay_dir.mkdir(parents=True, exist_ok=True)
        self.record = bool(conf.record) and self.replay_dir is not None
        self.replays_recovered = self.recover_replays()
        self.prune_replays()
        self.encoding = conf.encoding
        self.max_waiters = conf.max_waiters
        self.clock = WallClock(spin=0.0)
        self.pool = TickPool(conf.tick_threads)
        self.work = WorkQueue(conf.work_workers, conf.max_pending_work)
        self._closer = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="nonstop-close")
        self._lock = threading.Lock()
        self.sessions: dict[str, ServerSession] = {}
        self._wakers: dict[int, LoopWaker] = {}
        self._closed: deque[ServerSession] = deque(maxlen=conf.keep_closed)
        self._shutdown = threading.Event()
        self.refused_capacity = 0
        self.procs: TickProcs | None = None
        if conf.tick_procs:
            self._start_procs(conf)
        warm = 0 if self.procs is not None else conf.warm_envs  # with tick workers, the workers keep the spares
        self.warm = WarmEnvs(warm, list(self.specs), idle=lambda: self.live_count() == 0)
        self._reaper = threading.Thread(
            target=self._reap, args=(conf.reap_interval,), name="nonstop-reaper", daemon=True
        )
        self._reaper.start()

    def _start_procs(self, conf: ManagerSettings) -> None:
        self.procs = procs = TickProcs(
            conf.tick_procs,
            list(self.specs),
            warm=conf.warm_envs,
            sched=conf.tick_sched,
            on_note=self._on_note,
            on_exit=self._on_proc_exit,
            on_records=self._on_records,
        )
        if not procs.wait_ready():  # a crowd arriving at once must not wait on imports
            log.warning("tick workers still silent after startup; sessions may start slowly")

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
            log.info(
                "recovered %d replays of sessions a dead server left in %s", recovered, self.replay_dir / "ticklogs"
            )
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
        except Exception:  # /health stays unhealthy and says why
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

    def create(
        self,
        config: Any,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        replacing: ServerSession | None = None,
    ) -> ServerSession:
        """Admit a session (state *created*) or raise CAPACITY_REACHED / VALIDATION_ERROR.
        ``replacing``: a live session that ends once this one has started (a client's restart),
        not counted against capacity."""
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
            live = self.live_count() - (replacing is not None and replacing.live)
            if live >= self.max_sessions:
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
        except Exception as exc:  # the env factory failed
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
        session.release_all()  # nobody holds a seat of an ended session
        session._ended()
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
                if not session.live:
                    continue
                if not session.parked and now - session.last_activity > self.idle_timeout:
                    self.end(session, f"idle timeout ({self.idle_timeout:g}s without a message)")
                else:
                    self._expire_holders(session, now)

    def _expire_holders(self, session: ServerSession, now: float) -> None:
        """Free the seats of holders without a socket (HTTP, MCP) that sent nothing for the idle
        timeout and wait for nothing: no disconnect will ever say they left."""
        gone = {
            id(h): h
            for h in list(session.holders)
            if getattr(h, "expires", False) and not h.waits and now - h.last_activity > self.idle_timeout
        }
        for holder in gone.values():
            if session.release(holder) == 0:
                self.end(session, f"idle timeout ({self.idle_timeout:g}s without a message from its players)")
                return
            log.info(
                "session %s: a player silent for %gs gave its seats up; β plays them", session.sid, self.idle_timeout
            )

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
                if not (
                    (self.replay_keep and len(found) - deleted > self.replay_keep)
                    or (self.replay_max_bytes and total > self.replay_max_bytes)
                ):
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
