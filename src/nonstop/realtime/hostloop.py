"""The host's tick loop: a world that never waits (docs/design.md §1).

`Host` is the tick loop, written once as a timed process (see `clock`): at
every deadline ``origin + t·τ_M`` it takes at most one agent action from each
seat's `ActionQueue` (or applies that seat's β and counts its inaction), steps the env, writes the
tick log and publishes each seat's observation into its `LatestSlot`. It owns no clock,
process or channel of its own: `nonstop.realtime.host.Session` (and the server's
sessions) make those and drive it.

Seats are arrays (docs/design.md §4b): `SeatArrays` holds every seat's part of a tick, indexed by
seat, and a world is stepped through one adapter (`OneSeatWorld` for a gymnasium.Env,
`ParallelWorld` for PettingZoo's parallel API), so one seat and 162 run the same lines.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any, Final

import gymnasium as gym
import numpy as np

from nonstop.realtime.atomics import ACQUIRE, RELAXED
from nonstop.realtime.channels import ActionQueue, LatestSlot
from nonstop.realtime.clock import Clock, stopwatch
from nonstop.realtime.defaults import DefaultBehaviour
from nonstop.realtime.tickcolumns import SOURCE_ABSENT
from nonstop.realtime.ticklog import CHUNK_ROWS, SEAT_COLUMNS, SOURCE_AGENT, SOURCE_DEFAULT, TickLog

__all__ = ["Host", "HostError", "SeatArrays", "OneSeatWorld", "ParallelWorld", "scalar_actions"]


# host states published in the slot header
STATE_STARTING, STATE_RUNNING, STATE_STOPPED, STATE_FAILED = 0, 1, 2, 3
END_NONE, END_TERMINATED, END_TRUNCATED = 0, 1, 2
NAN: Final = float("nan")
_REWARD: Final = SEAT_COLUMNS.index("reward")  # the reward's row of `SeatArrays.values`
# the log's codes as floats: a memoryview of float64 takes a float a third faster than an int
_AGENT, _DEFAULT, _ABSENT, _NONE = float(SOURCE_AGENT), float(SOURCE_DEFAULT), float(SOURCE_ABSENT), -1.0
#: the places in each seat's `SeatArrays.counts`: a `SeatCounts`'s fields, in its order
COUNT_REWARD, COUNT_INACTION, COUNT_AGENT, COUNT_DELAY, COUNT_SEQ = range(5)


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


def _checked(beta: DefaultBehaviour, validate: Any) -> Any:
    """``beta`` whose every action is checked (``validate``) against its seat's action space."""

    def choose(obs: Any) -> Any:
        return validate(beta(obs))

    return choose


class SeatArrays:
    """Every seat's part of the tick loop, as arrays indexed by seat (one seat or 162, the same code).

    ``values`` is this tick's log values of every seat: a (quantities × seats) float64 array in `SEAT_COLUMNS`
    order, which the tick log copies whole (`TickLog.append_tick`, through ``flat``). Its rows are ``source``,
    ``worker``, ``delay``, ``obs_tick``, ``action``, ``tau_theta``, ``reward``, ``superseded`` and ``stale``: each a
    memoryview of its row, indexed by seat (a single value is written or read through one at half a numpy item's
    cost). ``obs`` and ``actions``: each seat's newest observation and the action applied this tick. ``counts``:
    what each seat's slot publishes besides, a `SeatCounts`'s fields as one list per seat (``[reward,
    inaction_ticks, agent_ticks, last_delay, last_seq]``, indexed by `COUNT_REWARD` …; updated in place, so a
    publish passes it as it is). ``present``: whether each seat's agent is still in the world this episode; a seat
    whose agent has left (died) is absent until the world resets: no action reaches the world for it, its log values
    say so (``source`` `SOURCE_ABSENT`, no inaction counted), whatever its agent still submits is drained and
    counted ``stale``, and its slot keeps its last observation, marked terminated (``left``: 1) or truncated (2).
    Owned by the host: one writer, in the host's thread.

    >>> from nonstop.realtime.defaults import make_default
    >>> space = gym.spaces.Discrete(2)
    >>> queues = [ActionQueue.create(space), ActionQueue.create(space)]
    >>> slots = [LatestSlot.create(np.zeros(1)), LatestSlot.create(np.zeros(1))]
    >>> seats = SeatArrays(slots, queues, [make_default("noop", noop_action=0) for _ in queues])
    >>> _ = queues[1].submit(1, obs_tick=0, episode=0)
    >>> seats.act(3, episode=0)
    >>> seats.actions, seats.source.tolist(), seats.delay.tolist(), seats.counts
    ([0, 1], [0.0, 1.0], [-1.0, 3.0], [[0.0, 1, 0, -1, -1], [0.0, 0, 1, 3, 0]])
    >>> for channel in (*queues, *slots):
    ...     channel.unlink()
    """

    def __init__(self, slots: list[LatestSlot], queues: list[ActionQueue], defaults: list[DefaultBehaviour]) -> None:
        n = len(queues)
        self.n = n
        self.values = np.zeros((len(SEAT_COLUMNS), n))
        #: ``values`` as one row of the log's per-seat blocks (a view: what `TickLog.append_tick` copies)
        self.flat = self.values.reshape(-1)
        #: ``flat``'s memoryview: what the host hands the log each tick (a view copies into a view at half
        #: the cost of an ndarray)
        self.flat_view: Any = self.flat.data
        rows: list[Any] = [self.flat_view[k * n : (k + 1) * n] for k in range(len(SEAT_COLUMNS))]  # format "d": Any
        (
            self.source,
            self.worker,
            self.delay,
            self.obs_tick,
            self.action,
            self.tau_theta,
            self.reward,
            self.superseded,
            self.stale,
        ) = rows
        self.obs: list[Any] = [None] * n
        self.actions: list[Any] = [None] * n
        self.counts: list[list[Any]] = [[0.0, 0, 0, -1, -1] for _ in range(n)]
        self.present = [True] * n
        self.left = [0] * n  # how each absent seat's agent left: 1 terminated, 2 truncated
        self._all_present = True
        self._rows = tuple(rows)
        self._betas_row = [False] * n  # whether seat i's source … tau_theta hold β's values already
        self._writes, self._betas = [s.write for s in slots], defaults
        # what `act` reads of each seat, in one tuple a seat: its index, its queue's two sequence loads and its
        # take, its β, its β as the loop calls it (a callable β's action is checked against its seat's space; a
        # built-in β's is right by construction), its counts, and whether the log holds its action (one number)
        self._per_seat = [
            (
                i,
                *q.pending_polls(),
                q.take,
                b,
                _checked(b, q.codec.validate) if b.kind == "callable" else b,
                c,
                scalar_actions(q.codec.space),
            )
            for i, (q, b, c) in enumerate(zip(queues, defaults, self.counts))
        ]
        self._publishes = [(i, write, c) for i, (write, c) in enumerate(zip(self._writes, self.counts))]

    def act(self, tick: int, episode: int) -> None:
        """Each seat's action for ``tick`` into ``actions``: its agent's newest (counted; its delay is
        ``tick − obs_tick``) or, with none ready, its β's (inaction); this tick's log values with it."""
        source, worker, delay, obs_tick, action, tau_theta, _, superseded, stale = self._rows
        actions, present, obs, betas_row = self.actions, self.present, self.obs, self._betas_row
        for i, written, read, take, beta, choose, counts, logged in self._per_seat:
            if written(ACQUIRE) == read(RELAXED):  # nothing pending: `take`'s own fast path, without its call
                record = None
                superseded[i] = stale[i] = 0
            else:
                record, superseded[i], stale[i] = take(episode=episode)
            if not present[i]:  # its agent has left: what it still sends is dropped, and counted
                stale[i] += superseded[i] + (record is not None)
                superseded[i] = 0
                source[i], worker[i], delay[i], obs_tick[i], tau_theta[i] = _ABSENT, _NONE, _NONE, _NONE, NAN
                actions[i], action[i], betas_row[i] = None, NAN, False
                continue
            if record is not None:
                a = record.action
                beta.observe_agent_action(a)
                counts[COUNT_AGENT] += 1
                counts[COUNT_DELAY] = delay[i] = tick - record.obs_tick
                counts[COUNT_SEQ] = record.seq
                source[i], worker[i], obs_tick[i], tau_theta[i] = (
                    _AGENT,
                    record.worker,
                    record.obs_tick,
                    record.tau_theta,
                )
                betas_row[i] = False
            else:
                a = choose(obs[i])
                counts[COUNT_INACTION] += 1
                if not betas_row[i]:  # a run of β ticks writes β's values once: the row keeps them
                    source[i], worker[i], delay[i], obs_tick[i], tau_theta[i] = _DEFAULT, _NONE, _NONE, _NONE, NAN
                    betas_row[i] = True
            actions[i] = a
            action[i] = a if logged else NAN  # a number of any kind: the memoryview converts it

    def publish(
        self, tick: int, time: float, episode: int, last_end: int, ended: tuple[bool, bool] | None = None
    ) -> None:
        """Each seat's observation into its slot, with its reward and counters. ``ended``: how the
        episode ended (``(terminated, truncated)``), for its terminal observation, published as final."""
        if ended is None:
            stamp = (tick, time, episode, last_end, False, False, False)  # a TickStamp's fields
        else:
            stamp = (tick, time, episode, last_end, ended[0], ended[1], True)
        if ended is not None or self._all_present:
            obs, reward = self.obs, self.reward
            for i, write, counts in self._publishes:
                counts[COUNT_REWARD] = reward[i]
                write(obs[i], stamp, counts)  # `LatestSlot.write`: `LatestSlot.publish` without its keywords
            return
        for write, obs, counts, reward, how in zip(self._writes, self.obs, self.counts, self.reward, self.left):
            counts[COUNT_REWARD] = reward  # a seat whose agent has left reads how it left, until the world resets
            write(obs, (tick, time, episode, last_end, how == 1, how == 2, False), counts)

    def leave(self, i: int, how: int) -> None:
        """Seat ``i``'s agent has left the world this tick (``how``: 1 terminated, 2 truncated)."""
        self.present[i], self.left[i], self._all_present = False, how, False

    def new_episode(self) -> None:
        """The world reset: no reward yet, and every β starts afresh (``repeat`` has no last action)."""
        self.values[_REWARD] = 0.0
        self.present[:], self.left[:], self._all_present = [True] * self.n, [0] * self.n, True
        for beta in self._betas:
            beta.reset()


class OneSeatWorld:
    """A gymnasium.Env as a world of one seat: its observation, action and reward as seat 0's."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self._step = env.step

    def start(self, seats: SeatArrays, seed: int | None) -> None:
        seats.obs[0], _ = self.env.reset(seed=seed)

    def reset(self, seats: SeatArrays) -> None:
        seats.obs[0], _ = self.env.reset()

    def step(self, seats: SeatArrays) -> tuple[bool, bool, float]:
        """Step with seat 0's action; ``(terminated, truncated, seconds the env's step took)``."""
        t0 = stopwatch()
        obs, reward, terminated, truncated, _ = self._step(seats.actions[0])
        step_s = stopwatch() - t0
        seats.obs[0] = obs
        seats.reward[0] = reward
        return terminated, truncated, step_s


class ParallelWorld:
    """A seat world (PettingZoo's parallel API: ``reset`` and ``step`` take and give dicts by seat
    name) as arrays by seat index. A seat's agent that is terminated or truncated while others play
    on, or that is absent from a step's dicts, leaves its seat (`SeatArrays.leave`): from the next tick
    no action is sent for it and it gets no reward; its slot keeps its last observation. The episode
    ends for every seat when no seat is left (terminated if any seat's last step said so)."""

    def __init__(self, env: Any, names: list[str]) -> None:
        self.env, self.names = env, names
        self._step = env.step

    def start(self, seats: SeatArrays, seed: int | None) -> None:
        obs, _ = self.env.reset(seed=seed)
        seats.obs[:] = [obs[name] for name in self.names]

    def reset(self, seats: SeatArrays) -> None:
        obs, _ = self.env.reset()
        seats.obs[:] = [obs[name] for name in self.names]

    def step(self, seats: SeatArrays) -> tuple[bool, bool, float]:
        """Step with every present seat's action; ``(terminated, truncated, seconds the env's step took)``."""
        names, present = self.names, seats.present
        joint = dict(zip(names, seats.actions))
        if not all(present):
            joint = {name: a for name, a, here in zip(names, seats.actions, present) if here}
        t0 = stopwatch()
        obs, rewards, terminated, truncated, _ = self._step(joint)
        step_s = stopwatch() - t0
        last, reward = seats.obs, seats.reward
        for i, name in enumerate(names):
            if not present[i]:
                reward[i] = 0.0
                continue
            o = obs.get(name)
            if o is None:  # gone without a word
                reward[i] = rewards.get(name, 0.0)
                seats.leave(i, 1)
                continue
            last[i] = o
            reward[i] = rewards.get(name, 0.0)
            if terminated.get(name) or truncated.get(name):
                seats.leave(i, 1 if terminated.get(name) else 2)
        if any(present):
            return False, False, step_s
        ended_terminated = any(terminated.values())
        return ended_terminated, not ended_terminated, step_s


class Host:
    """The tick loop. Owns the env; reads the queues, writes the slots and the log.

    Seats (docs/design.md §4b): with ``seats`` (the agent names of a PettingZoo-style parallel env, whose
    ``step`` takes and returns dicts keyed by seat), ``slot``, ``queue`` and ``default`` are
    sequences, one per seat: each seat reads its own observations, reward and counters from its
    slot, has its own queue (mode, capacity) and β, and its own values in the tick log (each per-seat
    quantity a block of seats: `TickLog.append_tick`). A plain ``gymnasium.Env`` is the one-seat case
    of the same loop: `SeatArrays` of one seat, stepped through `OneSeatWorld`. A seat world's agent
    that is done while others play on leaves its seat (`ParallelWorld`); the episode ends for every
    seat at once when none is left. The first seat's
    slot carries the session's requests (stop, reset); ``slot``, ``queue`` and ``default`` are the
    first seat's.

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
            raise ValueError(
                f"need one slot, queue and default per seat ({n}), got {len(self.slots)}, "
                f"{len(self.queues)} and {len(self.defaults)}"
            )
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
        #: every seat's part of the tick, indexed by seat
        self.seat_arrays = SeatArrays(self.slots, self.queues, self.defaults)
        self.world = OneSeatWorld(env) if self.seats is None else ParallelWorld(env, self.seats)
        #: optional per-tick observer (``nonstop.learning.replay.ReplayRecorder``): it sees the first
        #: seat's applied action, reward and observation of every tick, in the host's own process; one
        #: that ``records_seats`` (`nonstop.learning.seatreplay.SeatsRecorder`) sees every seat's
        self.recorder = recorder
        self._records_seats = getattr(recorder, "records_seats", False) is True
        #: where ``env.render()``'s frame of every tick goes (``render_mode="rgb_array"``), or None
        self.render_slot = render_slot

    def _publish_frame(self, tick: int, time: float, episode: int, final: bool = False) -> None:
        render_slot = self.render_slot  # set: the host publishes frames only where there is one
        frame = self.env.render()
        if frame is not None and render_slot is not None:
            render_slot.publish(np.asarray(frame), tick=tick, time=time, episode=episode, final=final)

    def run(self, clock: Clock) -> Generator[float, float, None]:  # a TimedProcess yielding plain deadlines
        """The host as a timed process on ``clock`` (docs/design.md §1): at each deadline every seat
        gets its agent's action or β's, the world steps once, the log gets the tick, and each seat's
        slot the newest observation; an episode's end resets the world at once.

        The per-tick path is kept lean (the host must keep ≥ 90 % of a plain env loop, ``nonstop
        bench host``): per-seat values go into preallocated arrays and reach the log in one copy.
        """
        seats, world, log, recorder, control = self.seat_arrays, self.world, self.log, self.recorder, self.slot
        tau_m, grace, unthrottled = self.tau_m, clock.tick_grace, self.unthrottled
        max_ticks = self.max_ticks if self.max_ticks is not None else float("inf")
        frames = self.render_slot is not None
        # the per-tick calls, bound once (an attribute lookup each saved a tick; docs/design.md §1's budget)
        act, step, append_tick, publish, now_of = seats.act, world.step, log.append_tick, seats.publish, clock.now
        stop_poll, resets_poll = control.control_polls()
        values = seats.flat_view
        world.start(seats, self.seed)
        if recorder is not None:
            self._record_observation(0)
        self.origin = origin = clock.now()
        last_end, resets_seen = END_NONE, control.reset_requests
        publish(0, origin, 0, last_end)
        if frames:
            self._publish_frame(0, origin, 0)
        for s in self.slots:
            s.host_state = STATE_RUNNING
        tick, episode = 0, self.episode
        while not stop_poll(ACQUIRE) and tick < max_ticks:
            tick += 1
            deadline = origin + tick * tau_m
            now = now_of() if unthrottled else (yield deadline + grace) - grace
            act(tick, episode)
            terminated, truncated, step_s = step(seats)
            append_tick(
                tick,
                deadline,
                now,
                episode=episode,
                terminated=terminated,
                truncated=truncated,
                step_s=step_s,
                seats=values,
            )
            if resets_poll(ACQUIRE) != resets_seen:  # a Gymnasium reset() asked to end the episode
                resets_seen, truncated = control.reset_requests, True
                log.set_last("truncated", 1)
            if recorder is not None:
                self._record_tick(tick, terminated, truncated)
            if terminated or truncated:
                last_end = END_TERMINATED if terminated else END_TRUNCATED
                # the terminal observation first, so a reader polling now sees how it ended; marked
                # final, so it stays readable (`LatestSlot.read_final`) after the reset below
                publish(tick, deadline, episode, last_end, (terminated, truncated))
                if frames:
                    self._publish_frame(tick, deadline, episode, final=True)
                episode = self._new_episode()  # the world does not wait: reset at once, log its cost
            publish(tick, deadline, episode, last_end)
            if frames:
                self._publish_frame(tick, deadline, episode)
            if recorder is not None:
                self._record_observation(tick)
            self.tick = tick
        for s in self.slots:
            s.host_state = STATE_STOPPED

    def _record_tick(self, tick: int, terminated: bool, truncated: bool) -> None:
        """The recorder's view of this tick: the first seat's action, reward and observation (every
        seat's, to a recorder that ``records_seats``)."""
        seats = self.seat_arrays
        assert self.recorder is not None
        if self._records_seats:
            self.recorder.on_seats_tick(tick, seats, terminated=terminated, truncated=truncated)
            return
        self.recorder.on_tick(
            tick,
            agent=bool(seats.source[0] == SOURCE_AGENT),
            action=seats.actions[0],
            obs_tick=int(seats.obs_tick[0]),
            reward=float(seats.reward[0]),
            terminated=terminated,
            truncated=truncated,
            terminal_obs=seats.obs[0],
        )

    def _record_observation(self, tick: int) -> None:
        """The recorder's view of the observation published for ``tick`` (after any reset at it)."""
        assert self.recorder is not None
        if self._records_seats:
            self.recorder.on_seats_observation(tick, self.seat_arrays)
        else:
            self.recorder.on_observation(tick, self.seat_arrays.obs[0])

    def _new_episode(self) -> int:
        """Reset the world (its cost in the log's ``reset_s``); the new episode's number."""
        t0 = stopwatch()
        self.world.reset(self.seat_arrays)
        self.log.set_last("reset_s", stopwatch() - t0)
        self.seat_arrays.new_episode()
        self.episode += 1
        return self.episode

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
