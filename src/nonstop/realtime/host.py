"""The session: a realtime world for agents, and the facade users hold (docs/design.md §1).

`Session` owns the channels, runs the host (`nonstop.realtime.hostloop.Host`, the tick loop)
in-process on a `VirtualClock` or in its own process on the `WallClock` (a thread where no
process can start: `host_mechanism`, in `nonstop.realtime.hostproc`), and always ends
with every process reaped and every shared-memory segment unlinked, whether
the run finished, the env raised, or the user pressed Ctrl-C.

The host's names (`Host`, `HostError`, the slot's states, `raise_priority`, `is_seat_world`, …)
are importable from here as before; they live in `hostloop`, `hostproc` and `worlds`.

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
import threading
import traceback
from collections.abc import Callable
from typing import Any, Final, NoReturn

import gymnasium as gym
import numpy as np

from nonstop.realtime.channels import ActionQueue, LatestSlot
from nonstop.realtime.clock import Clock, WallClock, make_clock
from nonstop.realtime.defaults import make_default, space_noop
from nonstop.realtime.hostloop import (
    END_NONE as END_NONE,
    END_TERMINATED as END_TERMINATED,
    END_TRUNCATED as END_TRUNCATED,
    STATE_FAILED as STATE_FAILED,
    STATE_RUNNING as STATE_RUNNING,
    STATE_STARTING as STATE_STARTING,
    STATE_STOPPED as STATE_STOPPED,
    Host,
    HostError,
    scalar_actions as scalar_actions,
)
from nonstop.realtime.hostproc import (
    HOST_MODES,
    HOST_SCHED,
    flat_channels,
    host_main,
    host_mechanism as host_mechanism,
    main_reimport_safe as main_reimport_safe,
    raise_priority as raise_priority,
)
from nonstop.realtime.lifeline import raise_if_stop_requested, reap
from nonstop.realtime.ticklog import CHUNK_ROWS, TickLog, is_ticklog_dir
from nonstop.realtime.worlds import MISSING, EnvSource, SeatWorld as SeatWorld, build_env, is_seat_world, per_seat

__all__ = ["Host", "Session", "HostError", "EnvSource"]

RENDER_MODES: Final = (None, "rgb_array", "human")


def _describe_default(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {seat: _describe_default(v) for seat, v in spec.items()}
    return spec if isinstance(spec, str) else "callable"


def _check_session_args(env: Any, tick_hz: Any, max_ticks: Any, seed: Any, host_mode: Any, render_mode: Any) -> None:
    """`Session`'s arguments that need no env to check, each refused at the door in one line."""
    if not isinstance(env, str) and not callable(env):
        raise TypeError(f"env must be an env id or a factory, got {type(env).__name__}")
    if tick_hz is not None and not (isinstance(tick_hz, (int, float)) and tick_hz > 0 and tick_hz == tick_hz):
        raise ValueError(f"tick_hz must be a positive number, got {tick_hz!r}")
    if max_ticks is not None and (not isinstance(max_ticks, int) or max_ticks < 0):
        raise ValueError(f"max_ticks must be a non-negative integer, got {max_ticks!r}")
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    if host_mode not in HOST_MODES:
        raise ValueError(f"host_mode must be one of {HOST_MODES}, got {host_mode!r}")
    if render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {render_mode!r}")


def _checked_log_dir(log_dir: Any, log_chunk_rows: Any) -> str | None:
    """``log_dir`` as a path string (None: the tick log stays in memory), refused if it already holds a log."""
    if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError(f"log_dir must be a path, got {type(log_dir).__name__}")
    path = None if log_dir is None else os.fspath(log_dir)
    if not isinstance(log_chunk_rows, int) or isinstance(log_chunk_rows, bool) or log_chunk_rows < 1:
        raise ValueError(f"log_chunk_rows must be a positive integer, got {log_chunk_rows!r}")
    if path is not None and is_ticklog_dir(path):
        raise FileExistsError(f"{path} already holds a tick log: move it away or choose another log_dir")
    return path


class Session:
    """A realtime world for agents: channels + host on a clock.

    Parameters
    ----------
    env: an env id (see ``nonstop envs``) or a factory returning a gymnasium.Env
        (on the wall clock the factory must be picklable: a module-level function).
    clock: ``"virtual"`` (in-process discrete-event simulation), ``"wall"``
        (the host gets its own process, or a thread: ``host_mode``) or a `Clock`.
    default: β — ``"noop"``, ``"repeat"``, ``"random"`` or a callable ``obs -> action``;
        defaults to the env's own choice. In a seat world, also ``{seat: β}`` (seats left out get
        the env's choice).
    queue_mode / queue_capacity: the action queue (``"latest"`` or ``"fifo"``, 16); in a seat
        world also ``{seat: value}``.

    Seats (docs/design.md §4b): an env that speaks PettingZoo's parallel API (``multi/duel``, a factory
    returning a ``pettingzoo.ParallelEnv``) gets one `LatestSlot` and one `ActionQueue` per seat
    (``slots``/``queues``, in the order of ``seats``; ``slot``/``queue`` are the first seat's),
    each with its own β, and the tick log gets each seat's columns (``tick_log.seat(name)``).
    A gymnasium env is the one-seat case: ``seats`` is None and ``slots == [slot]``.

    tick_hz: overrides the env's natural rate.
    recorder: a per-tick observer run inside the host (``ReplayRecorder``: the
        learning replay); on the wall clock it must be picklable.
    host_mode: wall clock only: ``"auto"`` (default), ``"process"`` or ``"thread"``; see
        `host_mechanism` (``"auto"`` runs the host in a thread only where no process can start).
    render_mode: ``"rgb_array"`` publishes ``env.render()``'s frame of every tick into
        `render_slot` (``"human"``: the env draws its own window); passed to the env factory.
    host_sched: wall clock only: ``"auto"`` (default) runs the host process at SCHED_FIFO or,
        failing that, nice −10 where permitted (see `raise_priority`; what applied is in the tick
        log's meta as ``host_sched``); ``"fifo"``, ``"nice"`` or ``"normal"`` choose.
    log_dir: a directory the tick log streams to as the world runs, in bounded chunks written by
        the host's own process (see `TickLog`): every completed chunk survives whatever ends the
        process, SIGKILL included, and memory stays bounded however long the world runs. Without
        it the log stays in memory (in chunks, never doubled and copied) and, on the wall clock,
        comes back through a pipe when the session stops. ``log_chunk_rows``: rows per chunk.

    >>> with Session("multi/duel", clock="virtual", seed=0, default={"second_0": "noop"},
    ...              env_kwargs={"holster": 0}) as duel:
    ...     _ = duel.queues[1].submit(1, obs_tick=0, episode=0)   # second_0 draws early: a false start
    ...     duel.run_for(2 / 60)
    >>> duel.seats, duel.tick_log.seat("second_0").summary()["reward_total"]
    (['first_0', 'second_0'], -1.0)
    """

    def __init__(
        self,
        env: EnvSource,
        *,
        clock: str | Clock = "virtual",
        default: str | Callable[[Any], Any] | dict[str, Any] | None = None,
        queue_mode: str | dict[str, str] = "latest",
        queue_capacity: int | dict[str, int] = 16,
        tick_hz: float | None = None,
        seed: int | None = None,
        max_ticks: int | None = None,
        unthrottled: bool = False,
        env_kwargs: dict[str, Any] | None = None,
        spin: float = 0.001,
        start_timeout: float = 120.0,
        recorder: Any = None,
        host_sched: str = "auto",
        host_mode: str = "auto",
        render_mode: str | None = None,
        log_dir: str | os.PathLike | None = None,
        log_chunk_rows: int = CHUNK_ROWS,
    ) -> None:
        _check_session_args(env, tick_hz, max_ticks, seed, host_mode, render_mode)
        self.env_source = env
        self.env_kwargs = dict(env_kwargs or {})
        self.host_mode, self.render_mode = host_mode, render_mode
        if render_mode is not None:
            self.env_kwargs["render_mode"] = render_mode
        self.clock = make_clock(clock)
        self.seed = seed
        self.max_ticks = max_ticks
        self.unthrottled = unthrottled
        self.spin = spin
        if host_sched not in HOST_SCHED:
            raise ValueError(f"host_sched must be one of {HOST_SCHED}, got {host_sched!r}")
        self.host_sched = host_sched
        self.log_dir = _checked_log_dir(log_dir, log_chunk_rows)
        self.log_chunk_rows = log_chunk_rows
        self.start_timeout = start_timeout
        self.recorder = recorder
        self.env_id = env if isinstance(env, str) else getattr(env, "__name__", "custom")
        noop_action, default_name, natural_hz = self._env_defaults(env)
        hz = tick_hz if tick_hz is not None else natural_hz
        if hz is None:
            raise ValueError(f"env {self.env_id!r} has no natural tick rate: pass tick_hz=")
        self.tick_hz = float(hz)
        self.tau_m = 1.0 / self.tick_hz
        self.noop_action = noop_action
        self.default_spec = default if default is not None else default_name
        for spec in (
            default.values() if isinstance(default, dict) else [default if default is not None else default_name]
        ):  # validate at the door
            make_default(spec, noop_action=0 if noop_action is None else noop_action)
        self.queue_mode, self.queue_capacity = queue_mode, queue_capacity
        self._init_channels()

    def _env_defaults(self, env: EnvSource) -> tuple[Any, str, float | None]:
        """What the registry says of ``env``: its no-op action (None: the action space's own, `space_noop`,
        known once the env is built), its default β's name and its natural tick rate (None for a factory)."""
        self._noop_declared = False
        if not isinstance(env, str):
            return None, "noop", None
        from nonstop.envs import env_info

        info = env_info(env, **self.env_kwargs)
        noop_action = None
        if info.family != "gymnasium" or "noop_action" in self.env_kwargs:
            noop_action, self._noop_declared = info.noop_action, True
        return noop_action, info.default_beta, info.tick_hz

    def _init_channels(self) -> None:
        """The seats, their channels and the host's handles: none until `start` makes them."""
        #: the seats' names in a seat world (PettingZoo's agent names), None for a gymnasium env
        self.seats: list[str] | None = None
        self.slots: list[LatestSlot] = []
        self.queues: list[ActionQueue] = []
        self.observation_spaces: dict[str, gym.Space] = {}
        self.action_spaces: dict[str, gym.Space] = {}
        self._slot: LatestSlot | None = None
        self._queue: ActionQueue | None = None
        #: ``render_mode="rgb_array"``: the frame of the newest tick (and, as final, of the last episode end)
        self.render_slot: LatestSlot | None = None
        # a clock no child process can read runs the host in this process, a timed process of its own
        # simulation ("virtual"); else `start` picks the mechanism (`host_mechanism`)
        self.mechanism = None if self.clock.spans_processes else self.clock.kind
        self.host: Host | None = None
        self._process: Any = None
        self._conn: Any = None
        self._child_conn: Any = None
        self._vproc: Any = None
        self._log: TickLog | None = None
        self._received: list[np.ndarray] = []  # the wall host's in-memory log, chunk by chunk
        self._started = self._stopped = False
        self._notes: dict[str, Any] = {}
        self._origin = 0.0
        self._nominal: float | None = None  # virtual: run_for's own time, free of tick grace
        self._observation_space: gym.Space | None = None
        self._action_space: gym.Space | None = None

    # ------------------------------------------------------------------ channels (from start() on)
    def _built(self, value: Any, what: str) -> Any:
        if value is None:
            raise RuntimeError(
                f"the session of {self.env_id!r} has no {what} before start(): call start() or use it in a `with` block"
            )
        return value

    @property
    def slot(self) -> LatestSlot:
        """Seat 0's latest-observation slot (`slots`: every seat's)."""
        return self._built(self._slot, "observation slot")

    @property
    def queue(self) -> ActionQueue:
        """Seat 0's action queue (`queues`: every seat's)."""
        return self._built(self._queue, "action queue")

    @property
    def observation_space(self) -> gym.Space:
        """Seat 0's observation space, from the built env (`observation_spaces`: every seat's)."""
        return self._built(self._observation_space, "observation space")

    @property
    def action_space(self) -> gym.Space:
        """Seat 0's action space, from the built env (`action_spaces`: every seat's)."""
        return self._built(self._action_space, "action space")

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Session":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Started and neither stopped nor failed (its channels can still be read)."""
        return self._started and not self._stopped

    def meta(self) -> dict[str, Any]:
        return {
            "env": self.env_id,
            "env_kwargs": self.env_kwargs,
            "tick_hz": self.tick_hz,
            "clock": self.clock.kind,
            "default": _describe_default(self.default_spec),
            "queue_mode": self.queue_mode,
            "queue_capacity": self.queue_capacity,
            "seed": self.seed,
        }

    def start(self) -> "Session":
        if self._started:
            raise RuntimeError("session already started")
        self._started = True
        try:
            probe = build_env(self.env_source, self.env_kwargs)
            if is_seat_world(probe):
                self._open_seats(probe)
            else:
                if (
                    isinstance(self.default_spec, dict)
                    or isinstance(self.queue_mode, dict)
                    or isinstance(self.queue_capacity, dict)
                ):
                    raise TypeError(
                        f"env {self.env_id!r} has one seat: per-seat default/queue_mode/queue_capacity "
                        "(a dict) need a seat world (a PettingZoo ParallelEnv)"
                    )
                self._observation_space, self._action_space = probe.observation_space, probe.action_space
                if not isinstance(self._observation_space, (gym.spaces.Box, gym.spaces.Discrete)):
                    raise TypeError(f"nonstop needs a Box or Discrete observation space, got {self._observation_space}")
                self._slot = LatestSlot.create(self._observation_space)
                self.slots = [self._slot]
                self._queue = ActionQueue.create(self._action_space, capacity=self.queue_capacity, mode=self.queue_mode)
                self.queues = [self._queue]
                self.noop_action = self._resolve_noop(beta_only=getattr(probe.unwrapped, "beta_only_actions", ()))
            if self.render_mode == "rgb_array":
                probe.reset(seed=self.seed)
                frame = probe.render()
                if frame is None:
                    raise TypeError(f"env {self.env_id!r} rendered nothing with render_mode='rgb_array'")
                self.render_slot = LatestSlot.create(np.asarray(frame))
            if not self.clock.spans_processes:  # the host is a timed process of this clock's simulation
                if self.seats is not None:
                    default: Any = [
                        make_default(d, noop_action=n) for d, n in zip(self._seat_defaults, self._seat_noops)
                    ]
                else:
                    spec = self.default_spec
                    assert not isinstance(spec, dict), "start() refuses per-seat defaults for a one-seat world"
                    default = make_default(spec, noop_action=self.noop_action)
                self.host = Host(
                    probe,
                    self._host_slots(),
                    self._host_queues(),
                    tau_m=self.tau_m,
                    default=default,
                    seed=self.seed,
                    max_ticks=self.max_ticks,
                    unthrottled=self.unthrottled,
                    meta=self.meta(),
                    recorder=self.recorder,
                    render_slot=self.render_slot,
                    log_dir=self.log_dir,
                    log_chunk_rows=self.log_chunk_rows,
                    seats=self.seats,
                )
                # priority 1: at equal times, agents' events come before the tick
                self._vproc = self.clock.spawn(self.host.run(self.clock), name="host", priority=1)
            else:
                probe.close()
                self._start_process()
        except BaseException:
            self._cleanup()
            raise
        return self

    def _host_slots(self) -> Any:
        return self.slots if self.seats is not None else self._slot

    def _host_queues(self) -> Any:
        return self.queues if self.seats is not None else self._queue

    def _open_seats(self, probe: Any) -> None:
        """A seat world: one slot, one queue (its own mode and capacity) and one β per seat."""
        seats = [str(a) for a in probe.possible_agents]
        if not seats:
            raise ValueError(f"env {self.env_id!r} has no seats (possible_agents is empty)")
        self.seats = seats
        defaults = per_seat("default", self.default_spec, seats)
        modes = per_seat("queue_mode", self.queue_mode, seats)
        capacities = per_seat("queue_capacity", self.queue_capacity, seats)
        fallback = self._env_default_name()
        self._seat_defaults = [fallback if d is MISSING else d for d in defaults]
        self._seat_noops = []
        for i, seat in enumerate(seats):
            obs_space, act_space = probe.observation_space(seat), probe.action_space(seat)
            if not isinstance(obs_space, (gym.spaces.Box, gym.spaces.Discrete)):
                raise TypeError(f"nonstop needs a Box or Discrete observation space, got {obs_space} for seat {seat!r}")
            self.observation_spaces[seat], self.action_spaces[seat] = obs_space, act_space
            self.slots.append(LatestSlot.create(obs_space))
            mode = "latest" if modes[i] is MISSING else modes[i]
            capacity = 16 if capacities[i] is MISSING else capacities[i]
            self.queues.append(ActionQueue.create(act_space, capacity=capacity, mode=mode))
            self._seat_noops.append(self._resolve_noop(self.queues[-1], act_space))
        self._slot, self._queue = self.slots[0], self.queues[0]
        self._observation_space, self._action_space = self.observation_spaces[seats[0]], self.action_spaces[seats[0]]
        self.noop_action = self._seat_noops[0]

    def _env_default_name(self) -> Any:
        if isinstance(self.env_source, str):
            from nonstop.envs import env_info

            return env_info(self.env_source, **self.env_kwargs).default_beta
        return "noop"

    def seat_index(self, seat: int | str) -> int:
        """The index of ``seat`` (a name or an index); a clear error for a seat the world lacks."""
        names = self.seats if self.seats is not None else ["agent_0"]
        if isinstance(seat, str):
            if seat not in names:
                raise KeyError(f"no seat {seat!r} in {self.env_id!r}; its seats are {names}")
            return names.index(seat)
        if isinstance(seat, (int, np.integer)) and not isinstance(seat, bool) and 0 <= seat < len(names):
            return int(seat)
        raise KeyError(f"no seat {seat!r} in {self.env_id!r}; its seats are {names}")

    def _resolve_noop(
        self, queue: ActionQueue | None = None, space: gym.Space | None = None, *, beta_only: Any = ()
    ) -> Any:
        """β's no-op for this action space: the declared one (checked), else the space's own. An env
        whose ``beta_only_actions`` holds the declared noop takes it from β although its agents
        cannot choose it (Game Boy's ``action_set="paper"``: the six buttons, noop left to β)."""
        queue = self._queue if queue is None else queue
        space = self._action_space if space is None else space
        if queue is None or space is None:
            raise RuntimeError("the noop action is resolved once the session's channels exist (in start())")
        if self.noop_action is not None:
            if self._noop_declared and self.noop_action in tuple(beta_only):
                return self.noop_action
            try:
                return queue.codec.validate(self.noop_action)
            except ValueError:
                if self._noop_declared:
                    raise ValueError(
                        f"env {self.env_id!r} declares noop_action={self.noop_action!r}, which is not in its "
                        f"action space {space}"
                    ) from None
        try:
            return space_noop(space)
        except TypeError:
            if callable(self.default_spec):
                return None
            raise

    def _start_process(self) -> None:
        if not isinstance(self.clock, WallClock):
            raise TypeError(
                f"a wall-clock session runs on a WallClock (its origin is shared with the host), "
                f"got {type(self.clock).__name__}"
            )
        self.mechanism = host_mechanism(self.host_mode)
        ctx = mp.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=False)
        cfg = {
            "tau_m": self.tau_m,
            "default": self._seat_defaults if self.seats is not None else self.default_spec,
            "noop_action": self._seat_noops if self.seats is not None else self.noop_action,
            "seats": self.seats,
            "seed": self.seed,
            "max_ticks": self.max_ticks,
            "unthrottled": self.unthrottled,
            "meta": self.meta(),
            "origin": self.clock.origin,
            "spin": self.spin,
            "recorder": self.recorder,
            "host_sched": self.host_sched,
            "render_slot": self.render_slot,
            "thread": self.mechanism == "thread",
            "log_dir": self.log_dir,
            "log_chunk_rows": self.log_chunk_rows,
        }
        cfg["meta"]["host_mechanism"] = self.mechanism
        self._conn = parent_conn
        if self.mechanism == "thread":
            # no pickling, no re-import: the host shares this interpreter (and its GIL)
            self._child_conn = child_conn
            thread = threading.Thread(
                target=host_main,
                args=(child_conn, self.env_source, self.env_kwargs, self._host_slots(), self._host_queues(), cfg),
                name=f"nonstop-host-{self.env_id}",
                daemon=True,
            )
            thread.start()
            self._process = thread
            self._await_ready(parent_conn)
            return
        process = ctx.Process(
            target=host_main,
            args=(child_conn, self.env_source, self.env_kwargs, self._host_slots(), self._host_queues(), cfg),
            name=f"nonstop-host-{self.env_id}",
            daemon=True,
        )
        try:
            process.start()
        finally:
            child_conn.close()
        self._process = process  # only a started process is ever joined by _cleanup
        self._await_ready(parent_conn)

    def _await_ready(self, parent_conn: Any) -> None:
        if not parent_conn.poll(self.start_timeout):
            raise TimeoutError(f"host process for {self.env_id!r} did not start within {self.start_timeout}s")
        try:
            kind, payload = parent_conn.recv()
        except EOFError:
            raise HostError(
                f"host process for {self.env_id!r} died while starting (its stderr says why)",
                tick_log=None,
                env_traceback="(no traceback: the process ended before the host began)",
            ) from None
        if kind != "ready":
            self._collect(kind, payload)
        self._origin = payload

    # ------------------------------------------------------------------ running
    def now(self) -> float:
        if self._nominal is not None:  # set by a simulated run_until alone
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
        if self.host is not None:  # the host runs in this process, a timed process of the simulation
            try:
                # a tick due at t is processed `tick_grace` after it: include it
                self.clock.sleep_until(t + self.clock.tick_grace)
            except BaseException as exc:
                self._fail_virtual(exc)
            self._nominal = t
            return
        while self.clock.now() < t:
            raise_if_stop_requested()
            if self._conn.poll(0):
                try:
                    kind, payload = self._receive()
                except EOFError:
                    self._host_died()
                self._collect(kind, payload)
                return
            if not self._process.is_alive():
                self._host_died()
            self.clock.sleep_until(min(t, self.clock.now() + 0.05))

    def _host_died(self) -> NoReturn:
        """The host is gone without a word (SIGKILL, the OOM killer): say so, with how it died; the
        error carries the log as far as it reached disk (with ``log_dir``)."""
        process = self._process
        pid: int | str | None
        if isinstance(process, threading.Thread):
            pid, how = os.getpid(), "its thread ended"
        else:
            if process is not None:
                process.join(timeout=1)  # its pipe closes a moment before its exit status is known
            code = process.exitcode if process is not None else None
            if code is not None and code < 0:
                try:
                    how = f"killed by {signal.Signals(-code).name}"
                except ValueError:
                    how = f"killed by signal {-code}"
            else:
                how = f"exit code {code}"
            pid = process.pid if process is not None else "?"
        self._stopped = True
        self._cleanup()
        raise HostError(
            f"host process {pid} of {self.env_id!r} died ({how})",
            tick_log=self._log_on_disk(),
            env_traceback="(none: the process was killed)",
        )

    def _fail_virtual(self, exc: BaseException) -> None:
        if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM's SystemExit: the user's stop, not the env's failure
            raise exc
        self._log = self.host.close_log() if self.host is not None else None
        self._stopped = True
        self._cleanup()
        raise HostError(
            f"env {self.env_id!r} raised {type(exc).__name__} inside the host",
            tick_log=self._log,
            env_traceback="".join(traceback.format_exception(exc)),
        ) from exc

    def _receive(self) -> tuple[str, Any]:
        """The host process's next message; the log's chunks that precede its last one are gathered."""
        while True:
            kind, payload = self._conn.recv()
            if kind != "chunk":
                return kind, payload
            self._received.append(payload)

    def _log_on_disk(self) -> TickLog | None:
        """The wall-clock host's streamed log as far as it reached disk (the host died or still runs)."""
        if self.log_dir is None or not is_ticklog_dir(self.log_dir):
            return None
        self._log = TickLog.open(self.log_dir)
        self._log.meta.update(self._notes)
        return self._log

    def _collect(self, kind: str, payload: Any) -> None:
        arrays, tb = payload if payload is not None else (None, "")
        if isinstance(arrays, dict) and "directory" in arrays:  # the host streamed its log: read its chunks
            self._log = TickLog.open(arrays["directory"])
            self._log.meta.update(self._notes)
            if self._notes:
                self._log.write_meta()
        elif arrays is not None:
            self._log = TickLog.from_row_blocks(self._received, arrays["meta"], arrays["tau_m"], arrays.get("seats", 1))
            self._received = []
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
        """The log so far (virtual: live; wall: its chunks on disk so far with ``log_dir``, else
        available once stopped)."""
        if self._log is None and self.host is not None:
            log = self.host.finish_log()
        elif self._log is not None:
            log = self._log
        elif self.log_dir is not None and is_ticklog_dir(self.log_dir):
            log = TickLog.open(self.log_dir)  # the wall host is still running: what reached disk
        else:
            raise RuntimeError("the wall-clock tick log is available after stop() (or pass log_dir=)")
        log.meta.update(self._notes)
        return log

    def stop(self, timeout: float = 10.0) -> TickLog | None:
        """Stop the host, collect the log, reap the process, unlink shared memory. Idempotent."""
        if not self._started or self._stopped:
            self._cleanup()
            return self._log
        self._stopped = True
        try:
            if self._slot is not None:
                self._slot.request_stop()
            if self.host is not None:  # the host runs in this process
                if self._vproc is not None:
                    self._vproc.cancel()
                self.host.finish_log().meta.update(self._notes)
                self._log = self.host.close_log()
            elif self._process is not None:
                if self._conn.poll(timeout):
                    try:
                        kind, payload = self._receive()
                    except EOFError:  # the host process died: what it streamed to disk is all there is
                        return self._log_on_disk()
                    self._collect(kind, payload)
        finally:
            self._cleanup()
        return self._log

    def _cleanup(self) -> None:
        if isinstance(self._process, threading.Thread):
            if self._slot is not None:
                self._slot.request_stop()
            self._process.join(timeout=5)  # stop was requested; a thread ends its own tick loop
            self._process = None
            self._child_conn.close()
            self._child_conn = None
        if self._process is not None:
            reap(self._process, timeout=5)
            self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.host is not None:
            self.host.log.close()  # idempotent: a streaming log's writer is never left behind
            try:
                self.host.env.close()
            except Exception:
                pass
        for channel in flat_channels(self.slots or self._slot, self.queues or self._queue, self.render_slot):
            channel.unlink()

    def __del__(self) -> None:
        try:
            if self._started and not self._stopped:
                self.stop(timeout=1.0)
        except Exception:
            pass
