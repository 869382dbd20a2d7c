"""The host's tick loop: a world that never waits (docs/design.md §1).

`Host` is the tick loop, written once as a timed process (see `clock`): at
every deadline ``origin + t·τ_M`` it takes at most one agent action from the
`ActionQueue` (or applies β and counts inaction), steps the env, writes the
tick log and publishes the observation into the `LatestSlot`. It owns no clock,
process or channel of its own: `nonstop.realtime.host.Session` (and the server's
sessions) make those and drive it.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import gymnasium as gym
import numpy as np

from nonstop.realtime.channels import ActionQueue, LatestSlot
from nonstop.realtime.clock import Clock, stopwatch
from nonstop.realtime.defaults import DefaultBehaviour
from nonstop.realtime.ticklog import CHUNK_ROWS, SOURCE_AGENT, SOURCE_DEFAULT, TickLog

__all__ = ["Host", "HostError", "scalar_actions"]


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

    Seats (docs/design.md §4b): with ``seats`` (the agent names of a PettingZoo-style parallel env, whose
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

