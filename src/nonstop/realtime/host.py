"""The host: a world that never waits (DESIGN §1).

`Host` is the tick loop, written once as a timed process (see `clock`): at
every deadline ``origin + t·τ_M`` it takes at most one agent action from the
`ActionQueue` (or applies β and counts inaction), steps the env, writes the
tick log and publishes the observation into the `LatestSlot`.

`Session` is what users hold: it owns the channels, runs the host in-process
on a `VirtualClock` or in its own process on the `WallClock` (a thread where no
process can start: `host_mechanism`), and always ends
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
import ast
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any, Final, NoReturn, Protocol, TypeGuard

import gymnasium as gym
import numpy as np

from nonstop.realtime.channels import ActionQueue, LatestSlot
from nonstop.realtime.clock import Clock, VirtualClock, WallClock, make_clock, stopwatch
from nonstop.realtime.defaults import DefaultBehaviour, make_default, space_noop
from nonstop.realtime.lifeline import hold_lifeline, raise_if_stop_requested, reap
from nonstop.realtime.ticklog import SOURCE_AGENT, SOURCE_DEFAULT, CHUNK_ROWS, TickLog, is_ticklog_dir

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

    Seats (DESIGN §4b): with ``seats`` (the agent names of a PettingZoo-style parallel env, whose
    ``step`` takes and returns dicts keyed by seat), ``slot``, ``queue`` and ``default`` are
    sequences, one per seat: each seat reads its own observations, reward and counters from its
    slot, has its own queue (mode, capacity) and β, and its own tick-log columns (`SEAT_COLUMNS`).
    A plain ``gymnasium.Env`` is the one-seat case of the same loop: seat 0 is handled inline,
    the other seats (none here) in a loop after it. A seat world's episode ends for every seat at
    once, when any seat is terminated or truncated.

    ``unthrottled=True`` ignores deadlines and ticks as fast as the env allows
    (benchmarks; the log still records the grid it would have kept). ``log_dir``: the tick log
    streams its completed chunks there as the world runs (see `TickLog`); `close_log` ends it.
    """

    def __init__(
        self,
        env: gym.Env,
        slot: LatestSlot | list[LatestSlot],
        queue: ActionQueue | list[ActionQueue],
        *,
        tau_m: float,
        default: DefaultBehaviour | list[DefaultBehaviour],
        seed: int | None = None,
        max_ticks: int | None = None,
        unthrottled: bool = False,
        meta: dict[str, Any] | None = None,
        recorder: Any = None,
        render_slot: LatestSlot | None = None,
        log_dir: str | os.PathLike | None = None,
        log_chunk_rows: int = CHUNK_ROWS,
        seats: list[str] | None = None,
    ) -> None:
        if not tau_m > 0:
            raise ValueError(f"tau_m must be positive, got {tau_m!r}")
        self.env = env
        #: the seats' names (a parallel env), or None (a gymnasium env: one seat)
        self.seats = None if seats is None else [str(s) for s in seats]
        self.slots = list(slot) if isinstance(slot, (list, tuple)) else [slot]
        self.queues = list(queue) if isinstance(queue, (list, tuple)) else [queue]
        self.defaults = list(default) if isinstance(default, (list, tuple)) else [default]
        n = 1 if self.seats is None else len(self.seats)
        if not n or not len(self.slots) == len(self.queues) == len(self.defaults) == n:
            raise ValueError(f"need one slot, queue and default per seat ({n}), got {len(self.slots)}, "
                             f"{len(self.queues)} and {len(self.defaults)}")  # fmt: skip
        self.slot, self.queue, self.default = self.slots[0], self.queues[0], self.defaults[0]
        for i, (beta, q) in enumerate(zip(self.defaults, self.queues)):  # a random β draws from its seat's space
            beta.bind(q.space, None if seed is None else seed * 7919 + i)
        self.tau_m = float(tau_m)
        self.seed = seed
        self.max_ticks = max_ticks
        self.unthrottled = unthrottled
        #: with ``log_dir``, completed chunks of the log stream there from this process as it runs
        meta = dict(meta or {})
        if self.seats is not None:
            meta["seats"] = self.seats
        self.log = TickLog(self.tau_m, meta=meta, directory=log_dir, chunk_rows=log_chunk_rows, seats=n)
        self.episode = 0
        self.tick = 0
        self.origin = 0.0
        self._validate_default = self.queue.codec.validate
        #: optional per-tick observer (``nonstop.learning.replay.ReplayRecorder``): it sees every
        #: applied action, reward and observation, in the host's own process
        self.recorder = recorder
        #: where ``env.render()``'s frame of every tick goes (``render_mode="rgb_array"``), or None
        self.render_slot = render_slot

    def _publish_frame(self, tick: int, time: float, episode: int, final: bool = False) -> None:
        render_slot = self.render_slot  # set: the host publishes frames only where there is one
        frame = self.env.render()
        if frame is not None and render_slot is not None:
            render_slot.publish(np.asarray(frame), tick=tick, time=time, episode=episode, final=final)

    def run(self, clock: Clock) -> Generator[float, float, None]:  # a TimedProcess yielding plain deadlines
        """The host as a timed process on ``clock``.

        The per-tick path is kept lean (the host must keep ≥ 90 % of a plain env loop, ``nonstop
        bench host``): positional `LatestSlot.write` and `TickLog.append_row`, locals for every
        attribute, and the action column's kind decided once for the action space. Seat 0 is
        handled inline; seats 1, 2, … (a seat world) in a loop after it, each with its own queue,
        β, slot and log columns.
        """
        slot, queue, recorder = self.slot, self.queue, self.recorder
        # a gymnasium.Env, or (``multi``) a seat world whose reset/step take and return dicts by seat
        env: Any = self.env
        log_row, publish, take, beta = self.log.append_row, slot.write, queue.take, self.default
        tau_m, grace, unthrottled = self.tau_m, clock.tick_grace, self.unthrottled
        max_ticks = self.max_ticks if self.max_ticks is not None else float("inf")
        scalar = scalar_actions(queue.codec.space)
        validate_beta = beta.kind == "callable"
        nan = float("nan")
        multi = self.seats is not None
        names = self.seats if self.seats is not None else []
        first = names[0] if multi else None
        others = range(1, len(self.queues))  # empty for one seat: the loops below cost nothing
        o_take = [q.take for q in self.queues]
        o_beta = self.defaults
        o_publish = [s.write for s in self.slots]
        o_scalar = [scalar_actions(q.codec.space) for q in self.queues]
        o_validate = [q.codec.validate if b.kind == "callable" else None for q, b in zip(self.queues, o_beta)]
        o_obs: list[Any] = [None] * len(self.queues)
        o_action: list[Any] = [None] * len(self.queues)
        o_reward = [0.0] * len(self.queues)
        o_inaction, o_agent = [0] * len(self.queues), [0] * len(self.queues)
        o_delay, o_seq = [-1] * len(self.queues), [-1] * len(self.queues)
        seat_values: list[float] = []
        if multi:
            obs_all, _ = env.reset(seed=self.seed)
            obs = obs_all[first]
            for i in others:
                o_obs[i] = obs_all[names[i]]
        else:
            obs, _ = env.reset(seed=self.seed)
        if recorder is not None:
            recorder.on_observation(0, obs)
        self.origin = origin = clock.now()
        inaction = agent = 0
        last_delay, last_seq, last_end = -1, -1, END_NONE
        resets_seen = slot.reset_requests
        slot.publish(obs, tick=0, time=origin, episode=0, last_delay=-1)
        for i in others:
            self.slots[i].publish(o_obs[i], tick=0, time=origin, episode=0, last_delay=-1)
        frames = self.render_slot is not None
        if frames:
            self._publish_frame(0, origin, 0)
        for s in self.slots:
            s.host_state = STATE_RUNNING
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
            if multi:
                seat_values.clear()
                for i in others:  # the other seats: the same steps, their own queue, β and counters
                    got = o_take[i](episode=episode)
                    rec = got.record
                    if rec is not None:
                        a = rec.action
                        o_beta[i].observe_agent_action(a)
                        o_agent[i] += 1
                        o_delay[i] = d = tick - rec.obs_tick
                        o_seq[i] = rec.seq
                        seat_values += (SOURCE_AGENT, rec.worker, d, rec.obs_tick)
                        tt = rec.tau_theta
                    else:
                        a = o_beta[i](o_obs[i])
                        validate = o_validate[i]
                        if validate is not None:
                            a = validate(a)
                        o_inaction[i] += 1
                        seat_values += (SOURCE_DEFAULT, -1, -1, -1)
                        tt = nan
                    o_action[i] = a
                    seat_values += (float(a) if o_scalar[i] else nan, tt, 0.0, got.superseded, got.stale)
                o_action[0] = action
                t0 = stopwatch()
                obs_all, rewards, terms, truncs, _ = env.step(dict(zip(names, o_action)))
                step_s = stopwatch() - t0
                terminated, truncated = any(terms.values()), any(truncs.values())
                obs = obs_all.get(first, obs)
                reward = float(rewards.get(first, 0.0))
                for k, i in enumerate(others):
                    o_obs[i] = obs_all.get(names[i], o_obs[i])
                    o_reward[i] = r = float(rewards.get(names[i], 0.0))
                    seat_values[9 * k + 6] = r
            else:
                t0 = stopwatch()
                obs, reward, terminated, truncated, _ = env.step(action)
                step_s = stopwatch() - t0
                reward = float(reward)
            log_row(
                tick, deadline, now, source, worker, delay, obs_tick, float(action) if scalar else nan, tau_theta,
                reward, episode, terminated, truncated, taken.superseded, taken.stale, step_s, 0.0, *seat_values,
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
                for i in others:
                    o_publish[i](
                        o_obs[i], tick, deadline, o_reward[i], terminated, truncated, episode, o_inaction[i],
                        o_agent[i], o_delay[i], o_seq[i], last_end, True,
                    )  # fmt: skip
                if frames:
                    self._publish_frame(tick, deadline, episode, final=True)
                t0 = stopwatch()
                obs, _ = env.reset()  # the world does not wait: reset at once, log its cost
                self.log.set_last("reset_s", stopwatch() - t0)
                if multi:
                    obs_all, obs = obs, obs[first]
                    for i in others:
                        o_obs[i] = obs_all[names[i]]
                        o_reward[i] = 0.0
                self.episode = episode = episode + 1
                for b in o_beta:
                    b.reset()
                reward = 0.0
            publish(
                obs, tick, deadline, reward, False, False, episode, inaction, agent, last_delay, last_seq, last_end
            )  # fmt: skip
            for i in others:
                o_publish[i](
                    o_obs[i], tick, deadline, o_reward[i], False, False, episode, o_inaction[i], o_agent[i],
                    o_delay[i], o_seq[i], last_end,
                )  # fmt: skip
            if frames:
                self._publish_frame(tick, deadline, episode)
            if recorder is not None:
                recorder.on_observation(tick, obs)
            self.tick = tick
        for s in self.slots:
            s.host_state = STATE_STOPPED

    def finish_log(self) -> TickLog:
        self.log.meta["queue"] = self.queue.counters()
        if self.seats is not None:
            self.log.meta["queues"] = [q.counters() for q in self.queues]
        self.log.meta["origin"] = self.origin
        return self.log

    def close_log(self) -> TickLog:
        """`finish_log`, then (streaming logs) write the last partial chunk and the final meta."""
        log = self.finish_log()
        log.close()
        return log


# ----------------------------------------------------------------------------- session


class SeatWorld(Protocol):
    """What nonstop reads of a several-seat world beside its dict ``reset``/``step``: PettingZoo's
    parallel API."""

    possible_agents: list[str]

    def observation_space(self, agent: str) -> gym.Space: ...

    def action_space(self, agent: str) -> gym.Space: ...

    def close(self) -> None: ...


def is_seat_world(env: Any) -> TypeGuard[SeatWorld]:
    """Whether ``env`` is a several-seat world: PettingZoo's parallel API (``possible_agents``,
    per-seat ``observation_space(seat)``/``action_space(seat)``, dict ``step``), not a gymnasium.Env."""
    return not isinstance(env, gym.Env) and hasattr(env, "possible_agents") and callable(getattr(env, "step", None))


def _build_env(env: EnvSource, env_kwargs: dict[str, Any]) -> gym.Env:
    if isinstance(env, str):
        from nonstop.envs import make_env

        return make_env(env, **env_kwargs)
    built = env(**env_kwargs)
    if not isinstance(built, gym.Env) and not is_seat_world(built):
        raise TypeError(f"env factory must return a gymnasium.Env or a PettingZoo ParallelEnv, got {type(built).__name__}")
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


#: Where the wall-clock host runs (``Session(host_mode=...)``).
HOST_MODES: Final = ("auto", "process", "thread")
RENDER_MODES: Final = (None, "rgb_array", "human")


def _guarded_by_main_check(path: str, line: int) -> bool:
    """Whether ``line`` of the script at ``path`` lies inside ``if __name__ == "__main__":``."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return True  # cannot tell: assume the usual guarded script
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
                return True
    return False


def main_reimport_safe() -> bool:
    """Whether a spawned child can re-import ``__main__`` without re-running this very call.

    Python's ``spawn`` start method imports the parent's main script again in the child. A script
    that starts a wall-clock session at top level, without an ``if __name__ == "__main__":``
    guard, would then start it again in the child, which multiprocessing forbids. We look at
    the call stack: if it passes through ``__main__``'s top-level code outside such a guard,
    spawning is not safe.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return True  # interactive, ``python -c``, notebooks: nothing is re-imported
    if not os.path.isfile(path):
        return False  # ``python - < script``: a child cannot re-import "<stdin>" at all
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            return _guarded_by_main_check(path, frame.f_lineno)
        frame = frame.f_back
    return True


def host_mechanism(requested: str) -> str:
    """``"process"`` or ``"thread"``: where a wall-clock host runs for ``host_mode=requested``.

    ``"auto"`` gives the host its own process (its own interpreter and GIL, realtime priority:
    ``nonstop bench clock``), except where no child process can be started: inside a daemonic
    process (Gymnasium's ``AsyncVectorEnv`` and SB3's ``SubprocVecEnv`` workers) or from the
    top level of a script without a ``__main__`` guard (see `main_reimport_safe`). There the host
    runs as a thread of this process, on the same clock and channels.
    """
    if requested not in HOST_MODES:
        raise ValueError(f"host_mode must be one of {HOST_MODES}, got {requested!r}")
    if requested == "process" and mp.current_process().daemon:
        raise RuntimeError(
            "host_mode='process' cannot start a host process inside a daemonic process "
            "(multiprocessing forbids it); use host_mode='auto' or 'thread'"
        )
    if requested != "auto":
        return requested
    if mp.current_process().daemon or not main_reimport_safe():
        return "thread"
    return "process"


def _host_main(conn: Any, env: EnvSource, env_kwargs: dict, slot: LatestSlot, queue: ActionQueue, cfg: dict) -> None:
    """Entry point of the host on the wall clock: its own process, or a thread of the session's
    (``cfg["thread"]``: then the channels are the session's own objects and stay open)."""
    in_thread = cfg.get("thread", False)
    if not in_thread:
        hold_lifeline()  # a host process never ticks on for a dead session
        # The session owns shutdown: Ctrl-C reaches it, and it asks us to stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    host = None
    status, tb = "ok", ""
    try:
        world = _build_env(env, env_kwargs)
        if cfg.get("seats") is not None:  # one β per seat
            default: Any = [make_default(d, noop_action=n) for d, n in zip(cfg["default"], cfg["noop_action"])]
        else:
            default = make_default(cfg["default"], noop_action=cfg["noop_action"])
        host = Host(
            world, slot, queue, tau_m=cfg["tau_m"], default=default, seed=cfg["seed"],
            max_ticks=cfg["max_ticks"], unthrottled=cfg["unthrottled"], meta=cfg["meta"],
            recorder=cfg.get("recorder"), render_slot=cfg.get("render_slot"),
            log_dir=cfg["log_dir"], log_chunk_rows=cfg["log_chunk_rows"], seats=cfg.get("seats"),
        )  # fmt: skip
        clock = WallClock(origin=cfg["origin"], spin=cfg["spin"])
        # an unthrottled host never sleeps: at realtime priority it would take a core outright
        host.log.meta["host_sched"] = raise_priority(cfg["host_sched"]) if not cfg["unthrottled"] else "normal"
        parent = None if in_thread else mp.parent_process()
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
        payload: Any = None
        if host is not None:
            try:
                # streaming to a directory: the parent reads the chunks there, nothing big crosses the pipe
                payload = {"directory": str(host.log.directory)} if host.log.directory is not None else None
                log = host.close_log()
                if payload is None:  # in memory: chunk by chunk, never the whole log as one copy
                    for rows in log.row_blocks():
                        conn.send(("chunk", rows))
                    payload = {"meta": log.meta, "tau_m": log.tau_m, "seats": log.seats}
            except BaseException:
                if status == "ok":
                    status, tb = "error", traceback.format_exc()
        try:
            conn.send((status, (payload, tb)))
        except (BrokenPipeError, OSError):
            pass
        if host is not None and in_thread:
            host.env.close()
        if not in_thread:
            for channel in _channels(slot, queue, cfg.get("render_slot")):
                channel.close()


def _channels(*items: Any) -> list[Any]:
    """Channels (or lists of them, one per seat) flattened, Nones left out."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out.extend(c for c in item if c is not None)
        elif item is not None:
            out.append(item)
    return out


def _per_seat(name: str, value: Any, seats: list[str]) -> list[Any]:
    """``value`` for every seat: a dict ``{seat: value}`` (every key a seat; missing seats get
    ``fallback``) or one value for all. A key that is no seat is a clear error."""
    if isinstance(value, dict):
        unknown = [k for k in value if k not in seats]
        if unknown:
            raise ValueError(f"{name} names seats {unknown} the env does not have; its seats are {seats}")
        return [value.get(seat, _MISSING) for seat in seats]
    return [value] * len(seats)


_MISSING: Final = object()


def _describe_default(spec: Any) -> Any:
    if isinstance(spec, dict):
        return {seat: _describe_default(v) for seat, v in spec.items()}
    return spec if isinstance(spec, str) else "callable"


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

    Seats (DESIGN §4b): an env that speaks PettingZoo's parallel API (``multi/duel``, a factory
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
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a path, got {type(log_dir).__name__}")
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        if not isinstance(log_chunk_rows, int) or isinstance(log_chunk_rows, bool) or log_chunk_rows < 1:
            raise ValueError(f"log_chunk_rows must be a positive integer, got {log_chunk_rows!r}")
        self.log_chunk_rows = log_chunk_rows
        if self.log_dir is not None and is_ticklog_dir(self.log_dir):
            raise FileExistsError(f"{self.log_dir} already holds a tick log: move it away or choose another log_dir")
        self.start_timeout = start_timeout
        self.recorder = recorder
        self.env_id = env if isinstance(env, str) else getattr(env, "__name__", "custom")
        # None: the action space's own no-op (`space_noop`), known once the env is built
        noop_action, default_name, natural_hz = None, "noop", None
        self._noop_declared = False
        if isinstance(env, str):
            from nonstop.envs import env_info

            info = env_info(env, **self.env_kwargs)
            default_name, natural_hz = info.default_beta, info.tick_hz
            if info.family != "gymnasium" or "noop_action" in self.env_kwargs:
                noop_action, self._noop_declared = info.noop_action, True
        hz = tick_hz if tick_hz is not None else natural_hz
        if hz is None:
            raise ValueError(f"env {self.env_id!r} has no natural tick rate: pass tick_hz=")
        self.tick_hz = float(hz)
        self.tau_m = 1.0 / self.tick_hz
        self.noop_action = noop_action
        self.default_spec = default if default is not None else default_name
        for spec in default.values() if isinstance(default, dict) else [default if default is not None else default_name]:  # validate at the door
            make_default(spec, noop_action=0 if noop_action is None else noop_action)
        self.queue_mode, self.queue_capacity = queue_mode, queue_capacity
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
        self.mechanism = "virtual" if self.clock.is_virtual else None
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
            raise RuntimeError(f"the session of {self.env_id!r} has no {what} before start(): call start() "
                               "or use it in a `with` block")  # fmt: skip
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
            probe = _build_env(self.env_source, self.env_kwargs)
            if is_seat_world(probe):
                self._open_seats(probe)
            else:
                if isinstance(self.default_spec, dict) or isinstance(self.queue_mode, dict) or isinstance(self.queue_capacity, dict):
                    raise TypeError(f"env {self.env_id!r} has one seat: per-seat default/queue_mode/queue_capacity "
                                    "(a dict) need a seat world (a PettingZoo ParallelEnv)")  # fmt: skip
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
            if isinstance(self.clock, VirtualClock):  # is_virtual
                if self.seats is not None:
                    default: Any = [make_default(d, noop_action=n) for d, n in zip(self._seat_defaults, self._seat_noops)]
                else:
                    spec = self.default_spec
                    assert not isinstance(spec, dict), "start() refuses per-seat defaults for a one-seat world"
                    default = make_default(spec, noop_action=self.noop_action)
                self.host = Host(
                    probe, self._host_slots(), self._host_queues(), tau_m=self.tau_m, default=default, seed=self.seed,
                    max_ticks=self.max_ticks, unthrottled=self.unthrottled, meta=self.meta(),
                    recorder=self.recorder, render_slot=self.render_slot,
                    log_dir=self.log_dir, log_chunk_rows=self.log_chunk_rows, seats=self.seats,
                )  # fmt: skip
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
        defaults = _per_seat("default", self.default_spec, seats)
        modes = _per_seat("queue_mode", self.queue_mode, seats)
        capacities = _per_seat("queue_capacity", self.queue_capacity, seats)
        fallback = self._env_default_name()
        self._seat_defaults = [fallback if d is _MISSING else d for d in defaults]
        self._seat_noops = []
        for i, seat in enumerate(seats):
            obs_space, act_space = probe.observation_space(seat), probe.action_space(seat)
            if not isinstance(obs_space, (gym.spaces.Box, gym.spaces.Discrete)):
                raise TypeError(f"nonstop needs a Box or Discrete observation space, got {obs_space} for seat {seat!r}")
            self.observation_spaces[seat], self.action_spaces[seat] = obs_space, act_space
            self.slots.append(LatestSlot.create(obs_space))
            mode = "latest" if modes[i] is _MISSING else modes[i]
            capacity = 16 if capacities[i] is _MISSING else capacities[i]
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

    def _resolve_noop(self, queue: ActionQueue | None = None, space: gym.Space | None = None, *,
                      beta_only: Any = ()) -> Any:  # fmt: skip
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
            raise TypeError(f"a wall-clock session runs on a WallClock (its origin is shared with the host), "
                            f"got {type(self.clock).__name__}")  # fmt: skip
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
                target=_host_main,
                args=(child_conn, self.env_source, self.env_kwargs, self._host_slots(), self._host_queues(), cfg),
                name=f"nonstop-host-{self.env_id}",
                daemon=True,
            )
            thread.start()
            self._process = thread
            self._await_ready(parent_conn)
            return
        process = ctx.Process(
            target=_host_main,
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
                tick_log=None, env_traceback="(no traceback: the process ended before the host began)",
            ) from None
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
        if isinstance(self.clock, VirtualClock):  # is_virtual
            try:
                # a tick due at t is processed `tick_grace` after it: include it
                self.clock.run_until(t + self.clock.tick_grace)
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
        raise HostError(f"host process {pid} of {self.env_id!r} died ({how})", tick_log=self._log_on_disk(),
                        env_traceback="(none: the process was killed)")  # fmt: skip

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
            if self.is_virtual:
                if self._vproc is not None:
                    self._vproc.cancel()
                if self.host is not None:
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
        for channel in _channels(self.slots or self._slot, self.queues or self._queue, self.render_slot):
            channel.unlink()

    def __del__(self) -> None:
        try:
            if self._started and not self._stopped:
                self.stop(timeout=1.0)
        except Exception:
            pass
