"""The host: a world that never waits (DESIGN §1).

`Host` is the tick loop, written once as a timed process (see `clock`): at
every deadline ``origin + t·τ_M`` it takes at most one agent action from the
`ActionQueue` (or applies β and counts inaction), steps the env, writes the
tick log and publishes the observation into the `LatestSlot`.

`Session` is what users hold: it owns the channels, runs the host in-process
on a `VirtualClock` or in its own process on the `WallClock`, and always ends
with every process reaped and every shared-memory segment unlinked, whether
the run finished, the env raised, or the user pressed Ctrl-C.

>>> with Session("theory/inaction", clock="virtual", seed=0) as world:
...     world.run_for(10 / 60)             # nobody acts: β every tick
...     _ = world.queue.submit(1, obs_tick=world.slot.read().tick, episode=0)
...     world.run_for(1 / 60)
>>> s = world.tick_log.summary()
>>> (s["ticks"], s["agent_ticks"], s["inaction_ticks"])
(11, 1, 10)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import traceback
from collections.abc import Callable
from typing import Any, Final

import gymnasium as gym
import numpy as np

from nonstop.realtime.channels import ActionQueue, LatestSlot
from nonstop.realtime.clock import Clock, TimedProcess, WallClock, make_clock, stopwatch
from nonstop.realtime.defaults import DefaultBehaviour, make_default
from nonstop.realtime.lifeline import hold_lifeline, raise_if_stop_requested, reap
from nonstop.realtime.ticklog import SOURCE_AGENT, SOURCE_DEFAULT, TickLog

__all__ = ["Host", "Session", "HostError", "EnvSource"]

#: An env id known to `nonstop.envs` or a zero-argument factory returning a gymnasium.Env.
EnvSource = str | Callable[[], gym.Env]

# host states published in the slot header
STATE_STARTING, STATE_RUNNING, STATE_STOPPED, STATE_FAILED = 0, 1, 2, 3
END_NONE, END_TERMINATED, END_TRUNCATED = 0, 1, 2


class HostError(RuntimeError):
    """The env raised inside the host. ``tick_log`` holds every tick up to the
    failure and ``env_traceback`` the env's own traceback."""

    def __init__(self, message: str, *, tick_log: TickLog | None, env_traceback: str) -> None:
        super().__init__(f"{message}\n--- env traceback ---\n{env_traceback}")
        self.tick_log = tick_log
        self.env_traceback = env_traceback


def scalar_actions(space: gym.Space) -> bool:
    """Whether every action of ``space`` is one number (the tick log's ``action`` column holds it;
    vector actions are logged as NaN). Decided once per space, not per tick."""
    return isinstance(space, gym.spaces.Discrete) or getattr(space, "shape", None) == ()


class Host:
    """The tick loop. Owns the env; reads the queue, writes the slot and the log.

    ``unthrottled=True`` ignores deadlines and ticks as fast as the env allows
    (benchmarks; the log still records the grid it would have kept).
    """

    def __init__(
        self,
        env: gym.Env,
        slot: LatestSlot,
        queue: ActionQueue,
        *,
        tau_m: float,
        default: DefaultBehaviour,
        seed: int | None = None,
        max_ticks: int | None = None,
        unthrottled: bool = False,
        meta: dict[str, Any] | None = None,
        recorder: Any = None,
    ) -> None:
        if not tau_m > 0:
            raise ValueError(f"tau_m must be positive, got {tau_m!r}")
        self.env = env
        self.slot = slot
        self.queue = queue
        self.tau_m = float(tau_m)
        self.default = default
        self.seed = seed
        self.max_ticks = max_ticks
        self.unthrottled = unthrottled
        self.log = TickLog(self.tau_m, meta=meta)
        self.episode = 0
        self.tick = 0
        self.origin = 0.0
        self._validate_default = queue.codec.validate
        #: optional per-tick observer (``nonstop.learning.replay.ReplayRecorder``): it sees every
        #: applied action, reward and observation, in the host's own process
        self.recorder = recorder

    def run(self, clock: Clock) -> TimedProcess:
        """The host as a timed process on ``clock``.

        The per-tick path is kept lean (the host must keep ≥ 90 % of a plain env loop, ``nonstop
        bench host``): positional `LatestSlot.write` and `TickLog.append_row`, locals for every
        attribute, and the action column's kind decided once for the action space.
        """
        slot, queue, env, recorder = self.slot, self.queue, self.env, self.recorder
        log_row, publish, take, beta = self.log.append_row, slot.write, queue.take, self.default
        tau_m, grace, unthrottled = self.tau_m, clock.tick_grace, self.unthrottled
        max_ticks = self.max_ticks if self.max_ticks is not None else float("inf")
        scalar = scalar_actions(queue.codec.space)
        validate_beta = beta.kind == "callable"
        nan = float("nan")
        obs, _ = env.reset(seed=self.seed)
        if recorder is not None:
            recorder.on_observation(0, obs)
        self.origin = origin = clock.now()
        inaction = agent = 0
        last_delay, last_seq, last_end = -1, -1, END_NONE
        resets_seen = slot.reset_requests
        slot.publish(obs, tick=0, time=origin, episode=0, last_delay=-1)
        slot.host_state = STATE_RUNNING
        tick = 0
        while not slot.stop_requested and tick < max_ticks:
            tick += 1
            deadline = origin + tick * tau_m
            if unthrottled:
                now = clock.now()
            else:
                now = (yield deadline + grace) - grace
            episode = self.episode
            taken = take(episode=episode)
            record = taken.record
            if record is not None:
                action = record.action
                beta.observe_agent_action(action)
                agent += 1
                obs_tick = record.obs_tick
                last_delay = delay = tick - obs_tick
                last_seq = record.seq
                source, worker, tau_theta = SOURCE_AGENT, record.worker, record.tau_theta
            else:
                action = beta(obs)
                if validate_beta:
                    action = self._validate_default(action)
                inaction += 1
                source, worker, delay, obs_tick, tau_theta = SOURCE_DEFAULT, -1, -1, -1, nan
            t0 = stopwatch()
            obs, reward, terminated, truncated, _ = env.step(action)
            step_s = stopwatch() - t0
            reward = float(reward)
            log_row(
                tick, deadline, now, source, worker, delay, obs_tick, float(action) if scalar else nan, tau_theta,
                reward, episode, terminated, truncated, taken.superseded, taken.stale, step_s,
            )  # fmt: skip
            if slot.reset_requests != resets_seen:  # a Gymnasium reset() asked to end the episode
                resets_seen = slot.reset_requests
                truncated = True
                self.log.set_last("truncated", 1)
            if recorder is not None:
                recorder.on_tick(
                    tick, agent=record is not None, action=action, obs_tick=obs_tick, reward=reward,
                    terminated=terminated, truncated=truncated, terminal_obs=obs,
                )  # fmt: skip
            if terminated or truncated:
                last_end = END_TERMINATED if terminated else END_TRUNCATED
                # the terminal observation first, so a reader polling now sees how it ended; marked
                # final, so it stays readable (`LatestSlot.read_final`) after the reset below
                publish(
                    obs, tick, deadline, reward, terminated, truncated, episode, inaction, agent, last_delay,
                    last_seq, last_end, True,
                )  # fmt: skip
                t0 = stopwatch()
                obs, _ = env.reset()  # the world does not wait: reset at once, log its cost
                self.log.set_last("reset_s", stopwatch() - t0)
                self.episode = episode = episode + 1
                beta.reset()
                reward = 0.0
            publish(
                obs, tick, deadline, reward, False, False, episode, inaction, agent, last_delay, last_seq, last_end
            )  # fmt: skip
            if recorder is not None:
                recorder.on_observation(tick, obs)
            self.tick = tick
        slot.host_state = STATE_STOPPED

    def finish_log(self) -> TickLog:
        self.log.meta["queue"] = self.queue.counters()
        self.log.meta["origin"] = self.origin
        return self.log


# ----------------------------------------------------------------------------- session


def _build_env(env: EnvSource, env_kwargs: dict[str, Any]) -> gym.Env:
    if isinstance(env, str):
        from nonstop.envs import make_env

        return make_env(env, **env_kwargs)
    built = env(**env_kwargs)
    if not isinstance(built, gym.Env):
        raise TypeError(f"env factory must return a gymnasium.Env, got {type(built).__name__}")
    return built


#: How the wall-clock host process may be scheduled (``Session(host_sched=...)``).
HOST_SCHED: Final = ("auto", "fifo", "nice", "normal")
#: SCHED_FIFO priority of the host: above every normal task, far below the kernel's own threads.
_FIFO_PRIORITY = 10
_NICE = -10


def raise_priority(policy: str, pid: int = 0) -> str:
    """Give process ``pid`` (0: this one) a realtime scheduling priority, as far as permitted.

    ``fifo``: SCHED_FIFO, so the host preempts every normal task the moment its deadline comes (on
    a loaded 2-core machine p99 tick lateness fell from ~18 ms to under 1 µs, ``nonstop bench clock``);
    the kernel's RT throttling still leaves others 5 % of each core. ``nice``: nice −10. ``auto``:
    fifo, else nice. Without the permission (CAP_SYS_NICE) nothing changes, silently. Returns the
    policy actually in force: ``"fifo"``, ``"nice"`` or ``"normal"``.
    """
    if policy not in HOST_SCHED:
        raise ValueError(f"host_sched must be one of {HOST_SCHED}, got {policy!r}")
    if policy in ("auto", "fifo"):
        try:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(_FIFO_PRIORITY))
            return "fifo"
        except (PermissionError, OSError, AttributeError):
            if policy == "fifo":
                return "normal"
    if policy in ("auto", "nice"):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, _NICE)
            return "nice"
        except (PermissionError, OSError, AttributeError):
            pass
    return "normal"


def _host_main(conn: Any, env: EnvSource, env_kwargs: dict, slot: LatestSlot, queue: ActionQueue, cfg: dict) -> None:
    """Entry point of the host process on the wall clock."""
    hold_lifeline()  # a host never ticks on for a dead session
    # The session owns shutdown: Ctrl-C reaches it, and it asks us to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host = None
    status, tb = "ok", ""
    try:
        world = _build_env(env, env_kwargs)
        default = make_default(cfg["default"], noop_action=cfg["noop_action"])
        host = Host(
            world, slot, queue, tau_m=cfg["tau_m"], default=default, seed=cfg["seed"],
            max_ticks=cfg["max_ticks"], unthrottled=cfg["unthrottled"], meta=cfg["meta"],
            recorder=cfg.get("recorder"),
        )  # fmt: skip
        clock = WallClock(origin=cfg["origin"], spin=cfg["spin"])
        # an unthrottled host never sleeps: at realtime priority it would take a core outright
        host.log.meta["host_sched"] = raise_priority(cfg["host_sched"]) if not cfg["unthrottled"] else "normal"
        parent = mp.parent_process()
        process = host.run(clock)
        wake = next(process)
        conn.send(("ready", host.origin))
        n = 0
        while True:
            woke = clock.sleep_until(wake)
            wake = process.send(woke)
            n += 1
            if n & 63 == 0 and parent is not None and not parent.is_alive():
                break  # orphaned: stop rather than tick forever
    except StopIteration:
        pass
    except BaseException:
        status, tb = "error", traceback.format_exc()
        slot.host_state = STATE_FAILED
    finally:
        payload = host.finish_log().to_arrays() if host is not None else None
        try:
            conn.send((status, (payload, tb)))
        except (BrokenPipeError, OSError):
            pass
        slot.close()
        queue.close()


class Session:
    """A realtime world for agents: channels + host on a clock.

    Parameters
    ----------
    env: an env id (see ``nonstop envs``) or a factory returning a gymnasium.Env
        (on the wall clock the factory must be picklable: a module-level function).
    clock: ``"virtual"`` (in-process discrete-event simulation), ``"wall"``
        (the host gets its own process) or a `Clock`.
    default: β — ``"noop"``, ``"repeat"`` or a callable ``obs -> action``;
        defaults to the env's own choice.
    queue_mode / queue_capacity: the action queue (``"latest"`` or ``"fifo"``, 16).
    tick_hz: overrides the env's natural rate.
    recorder: a per-tick observer run inside the host (``ReplayRecorder``: the
        learning replay); on the wall clock it must be picklable.
    host_sched: wall clock only: ``"auto"`` (default) runs the host process at SCHED_FIFO or,
        failing that, nice −10 where permitted (see `raise_priority`; what applied is in the tick
        log's meta as ``host_sched``); ``"fifo"``, ``"nice"`` or ``"normal"`` choose.
    """

    def __init__(
        self,
        env: EnvSource,
        *,
        clock: str | Clock = "virtual",
        default: str | Callable[[Any], Any] | None = None,
        queue_mode: str = "latest",
        queue_capacity: int = 16,
        tick_hz: float | None = None,
        seed: int | None = None,
        max_ticks: int | None = None,
        unthrottled: bool = False,
        env_kwargs: dict[str, Any] | None = None,
        spin: float = 0.001,
        start_timeout: float = 120.0,
        recorder: Any = None,
        host_sched: str = "auto",
    ) -> None:
        if not isinstance(env, str) and not callable(env):
            raise TypeError(f"env must be an env id or a factory, got {type(env).__name__}")
        if tick_hz is not None and not (isinstance(tick_hz, (int, float)) and tick_hz > 0 and tick_hz == tick_hz):
            raise ValueError(f"tick_hz must be a positive number, got {tick_hz!r}")
        if max_ticks is not None and (not isinstance(max_ticks, int) or max_ticks < 0):
            raise ValueError(f"max_ticks must be a non-negative integer, got {max_ticks!r}")
        if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an integer, got {seed!r}")
        self.env_source = env
        self.env_kwargs = dict(env_kwargs or {})
        self.clock = make_clock(clock)
        self.seed = seed
        self.max_ticks = max_ticks
        self.unthrottled = unthrottled
        self.spin = spin
        if host_sched not in HOST_SCHED:
            raise ValueError(f"host_sched must be one of {HOST_SCHED}, got {host_sched!r}")
        self.host_sched = host_sched
        self.start_timeout = start_timeout
        self.recorder = recorder
        self.env_id = env if isinstance(env, str) else getattr(env, "__name__", "custom")
        noop_action, default_name, natural_hz = 0, "noop", None
        if isinstance(env, str):
            from nonstop.envs import env_info

            info = env_info(env, **self.env_kwargs)
            noop_action, default_name, natural_hz = info.noop_action, info.default_beta, info.tick_hz
        if tick_hz is None and natural_hz is None:
            raise ValueError(f"env {self.env_id!r} has no natural tick rate: pass tick_hz=")
        self.tick_hz = float(tick_hz if tick_hz is not None else natural_hz)
        self.tau_m = 1.0 / self.tick_hz
        self.noop_action = noop_action
        self.default_spec = default if default is not None else default_name
        make_default(self.default_spec, noop_action=noop_action)  # validate at the door
        self.queue_mode, self.queue_capacity = queue_mode, queue_capacity
        self.slot: LatestSlot | None = None
        self.queue: ActionQueue | None = None
        self.host: Host | None = None
        self._process: Any = None
        self._conn: Any = None
        self._vproc: Any = None
        self._log: TickLog | None = None
        self._started = self._stopped = False
        self._notes: dict[str, Any] = {}
        self._origin = 0.0
        self._nominal: float | None = None  # virtual: run_for's own time, free of tick grace
        self.observation_space: gym.Space | None = None
        self.action_space: gym.Space | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def is_virtual(self) -> bool:
        return self.clock.is_virtual

    @property
    def running(self) -> bool:
        """Started and neither stopped nor failed (its channels can still be read)."""
        return self._started and not self._stopped

    def meta(self) -> dict[str, Any]:
        return {
            "env": self.env_id,
            "env_kwargs": self.env_kwargs,
            "tick_hz": self.tick_hz,
            "clock": "virtual" if self.is_virtual else "wall",
            "default": self.default_spec if isinstance(self.default_spec, str) else "callable",
            "queue_mode": self.queue_mode,
            "queue_capacity": self.queue_capacity,
            "seed": self.seed,
        }

    def start(self) -> "Session":
        if self._started:
            raise RuntimeError("session already started")
        self._started = True
        try:
            probe = _build_env(self.env_source, self.env_kwargs)
            self.observation_space, self.action_space = probe.observation_space, probe.action_space
            if not isinstance(self.observation_space, (gym.spaces.Box, gym.spaces.Discrete)):
                raise TypeError(f"nonstop needs a Box or Discrete observation space, got {self.observation_space}")
            self.slot = LatestSlot.create(self.observation_space)
            self.queue = ActionQueue.create(self.action_space, capacity=self.queue_capacity, mode=self.queue_mode)
            if self.is_virtual:
                default = make_default(self.default_spec, noop_action=self.noop_action)
                self.host = Host(
                    probe, self.slot, self.queue, tau_m=self.tau_m, default=default, seed=self.seed,
                    max_ticks=self.max_ticks, unthrottled=self.unthrottled, meta=self.meta(),
                    recorder=self.recorder,
                )  # fmt: skip
                # priority 1: at equal times, agents' events come before the tick
                self._vproc = self.clock.spawn(self.host.run(self.clock), name="host", priority=1)  # type: ignore[call-arg]
            else:
                probe.close()
                self._start_process()
        except BaseException:
            self._cleanup()
            raise
        return self

    def _start_process(self) -> None:
        if callable(self.default_spec) and not isinstance(self.default_spec, str):
            pass  # must be picklable; the spawn below says so clearly if not
        ctx = mp.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=False)
        cfg = {
            "tau_m": self.tau_m,
            "default": self.default_spec,
            "noop_action": self.noop_action,
            "seed": self.seed,
            "max_ticks": self.max_ticks,
            "unthrottled": self.unthrottled,
            "meta": self.meta(),
            "origin": self.clock.origin,  # type: ignore[attr-defined]
            "spin": self.spin,
            "recorder": self.recorder,
            "host_sched": self.host_sched,
        }
        self._conn = parent_conn
        process = ctx.Process(
            target=_host_main,
            args=(child_conn, self.env_source, self.env_kwargs, self.slot, self.queue, cfg),
            name=f"nonstop-host-{self.env_id}",
            daemon=True,
        )
        try:
            process.start()
        finally:
            child_conn.close()
        self._process = process  # only a started process is ever joined by _cleanup
        if not parent_conn.poll(self.start_timeout):
            raise TimeoutError(f"host process for {self.env_id!r} did not start within {self.start_timeout}s")
        kind, payload = parent_conn.recv()
        if kind != "ready":
            self._collect(kind, payload)
        self._origin = payload

    # ------------------------------------------------------------------ running
    def now(self) -> float:
        if self.is_virtual and self._nominal is not None:
            return max(self._nominal, self.clock.now() - self.clock.tick_grace)
        return self.clock.now()

    @property
    def origin(self) -> float:
        """Clock time of tick 0 (the tick grid is ``origin + t·τ_M``)."""
        return self.host.origin if self.host is not None else self._origin

    def run_for(self, seconds: float) -> None:
        """Let the world run for ``seconds`` of its clock (virtual: simulate; wall: wait and watch)."""
        if seconds < 0 or seconds != seconds:
            raise ValueError(f"seconds must be a non-negative number, got {seconds!r}")
        self.run_until(self.now() + seconds)

    def run_until(self, t: float) -> None:
        if not self._started or self._stopped:
            raise RuntimeError("session is not running")
        if self.is_virtual:
            try:
                # a tick due at t is processed `tick_grace` after it: include it
                self.clock.run_until(t + self.clock.tick_grace)  # type: ignore[attr-defined]
            except BaseException as exc:
                self._fail_virtual(exc)
            self._nominal = t
            return
        while self.clock.now() < t:
            raise_if_stop_requested()
            if self._conn.poll(0):
                try:
                    kind, payload = self._conn.recv()
                except EOFError:
                    self._host_died()
                self._collect(kind, payload)
                return
            if not self._process.is_alive():
                self._host_died()
            self.clock.sleep_until(min(t, self.clock.now() + 0.05))

    def _host_died(self) -> None:
        """The host process is gone without a word (SIGKILL, the OOM killer): say so, with how it died."""
        if self._process is not None:
            self._process.join(timeout=1)  # its pipe closes a moment before its exit status is known
        code = self._process.exitcode if self._process is not None else None
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        pid = self._process.pid if self._process is not None else "?"
        self._stopped = True
        self._cleanup()
        raise HostError(f"host process {pid} of {self.env_id!r} died ({how})", tick_log=None,
                        env_traceback="(none: the process was killed)")  # fmt: skip

    def _fail_virtual(self, exc: BaseException) -> None:
        if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM's SystemExit: the user's stop, not the env's failure
            raise exc
        self._log = self.host.finish_log() if self.host is not None else None
        self._stopped = True
        self._cleanup()
        raise HostError(
            f"env {self.env_id!r} raised {type(exc).__name__} inside the host",
            tick_log=self._log,
            env_traceback="".join(traceback.format_exception(exc)),
        ) from exc

    def _collect(self, kind: str, payload: Any) -> None:
        arrays, tb = payload if payload is not None else (None, "")
        if arrays is not None:
            self._log = TickLog.from_arrays(*arrays)
            self._log.meta.update(self._notes)
        if kind == "error":
            self._stopped = True
            self._cleanup()
            raise HostError(f"env {self.env_id!r} raised inside the host process", tick_log=self._log, env_traceback=tb)

    def annotate(self, key: str, value: Any) -> None:
        """Attach a run-level fact (a worker report, a config) to the tick log's meta."""
        self._notes[key] = value
        if self._log is not None:
            self._log.meta[key] = value

    @property
    def tick_log(self) -> TickLog:
        """The log so far (virtual: live; wall: available once stopped)."""
        if self._log is None and self.host is not None:
            log = self.host.finish_log()
        elif self._log is not None:
            log = self._log
        else:
            raise RuntimeError("the wall-clock tick log is available after stop()")
        log.meta.update(self._notes)
        return log

    def stop(self, timeout: float = 10.0) -> TickLog | None:
        """Stop the host, collect the log, reap the process, unlink shared memory. Idempotent."""
        if not self._started or self._stopped:
            self._cleanup()
            return self._log
        self._stopped = True
        try:
            if self.slot is not None:
                self.slot.request_stop()
            if self.is_virtual:
                if self._vproc is not None:
                    self._vproc.cancel()
                self._log = self.host.finish_log() if self.host is not None else None
                if self._log is not None:
                    self._log.meta.update(self._notes)
            elif self._process is not None:
                if self._conn.poll(timeout):
                    try:
                        kind, payload = self._conn.recv()
                    except EOFError:  # the host process died: nothing left to collect
                        return self._log
                    self._collect(kind, payload)
        finally:
            self._cleanup()
        return self._log

    def _cleanup(self) -> None:
        if self._process is not None:
            reap(self._process, timeout=5)
            self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.host is not None:
            try:
                self.host.env.close()
            except Exception:
                pass
        for channel in (self.slot, self.queue):
            if channel is not None:
                channel.unlink()

    def __del__(self) -> None:
        try:
            if self._started and not self._stopped:
                self.stop(timeout=1.0)
        except Exception:
            pass
