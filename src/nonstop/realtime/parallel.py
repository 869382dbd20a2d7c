"""The PettingZoo view: agents of any PettingZoo-speaking library play a seat world in realtime.

``step(actions)`` submits each seat's action to a world that keeps ticking (a seat missing from
``actions`` simply has none pending: its β acts) and returns at the next tick boundary with each
seat's observation, reward since the last step, and ``info`` holding the same ``nonstop_`` keys
as the Gymnasium view (`nonstop.realtime.gym.INFO_KEYS`: ticks elapsed, inaction ticks, delay), per
seat. It is a ``pettingzoo.ParallelEnv`` and passes ``pettingzoo.test.parallel_api_test``.

>>> env = make_parallel("multi/duel", clock="virtual", defaults={"second_0": "noop"})
>>> obs, infos = env.reset(seed=0)
>>> obs, rewards, terms, truncs, infos = env.step({"first_0": 0})       # second_0 has nothing pending
>>> int(infos["second_0"]["nonstop_inaction_ticks"]), int(infos["first_0"]["nonstop_delay"])
(1, 1)
>>> env.close()
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from nonstop.realtime.clock import Clock
from nonstop.realtime.gym import step_info, world_arguments
from nonstop.realtime.host import END_TERMINATED, END_TRUNCATED, EnvSource, Session
from nonstop.realtime.ticklog import TickLog

__all__ = ["RealtimeParallelEnv", "make_parallel"]


class RealtimeParallelEnv(ParallelEnv):
    """A seat world's `Session` as a ``pettingzoo.ParallelEnv`` (see the module docstring).

    ``reset(seed=s)`` (re)starts the world with that seed (the world keeps its clock and starts
    ticking at once); ``reset()`` without a seed starts the next episode the world is already in,
    asking the host to end the current one if it is still running. An agent that leaves the world
    mid-episode (dies) is reported terminated (or truncated) once and leaves ``agents``; after the
    last step of an episode every seat is terminated or truncated and ``agents`` is empty, as
    PettingZoo requires; the world has already moved on. ``think_time`` (virtual clock only): seconds each joint
    decision takes before it is submitted.
    """

    metadata = {"name": "nonstop_realtime_parallel_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, env: EnvSource, *, think_time: float = 0.0, **session_kwargs: Any) -> None:
        if not (isinstance(think_time, (int, float)) and not isinstance(think_time, bool) and think_time >= 0):
            raise ValueError(f"think_time must be a non-negative number of seconds, got {think_time!r}")
        self._env_source, self._kwargs, self.think_time = env, dict(session_kwargs), float(think_time)
        probe = Session(env, **self._kwargs)  # validates every argument now
        if think_time and not probe.clock.unmeasured(think_time):
            raise ValueError("think_time applies to the virtual clock; on the wall clock the agents' own time counts")
        self._clock: Clock = probe.clock
        self.session: Session | None = None
        self._start(self._kwargs.get("seed"))
        assert self.session is not None and self.session.seats is not None
        self.possible_agents: list[str] = list(self.session.seats)
        self.agents: list[str] = []
        self.observation_spaces: dict[str, Any] = dict(self.session.observation_spaces)
        self.action_spaces: dict[str, Any] = dict(self.session.action_spaces)
        self.tau_m: float = self.session.tau_m
        self.metadata = dict(type(self).metadata, render_fps=self.session.tick_hz)

    def observation_space(self, agent: str) -> Any:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self.action_spaces[agent]

    def _start(self, seed: int | None) -> None:
        if self.session is not None:
            self.session.stop()
        kwargs = dict(self._kwargs, seed=seed)
        kwargs["clock"] = self._clock.restarted()
        session = Session(self._env_source, **kwargs).start()
        if session.seats is None:
            session.stop()
            raise TypeError(f"env {session.env_id!r} has one seat: use nonstop.make (the Gymnasium view)")
        self.session = session
        self._clock = session.clock
        self._last = [slot.read() for slot in session.slots]
        self._episode = self._last[0].episode
        self._fresh = True  # no step since the world (re)started: reset() needs no new episode

    def _run_past(self, tick: int) -> list[Any]:
        """Simulate (virtual) or wait (wall) until a tick after ``tick`` is published; every seat's newest."""
        session = self.session
        if session is None:
            raise RuntimeError("this env is closed: make a new env")
        slots = session.slots
        due = session.origin + (tick + 1) * self.tau_m
        while slots[-1].read().tick <= tick:  # the virtual clock simulates to `due` at once; the wall clock watches
            session.run_until(self._clock.look_ahead(due, self.tau_m / 4, late=0.05 * self.tau_m))
        return [slot.read() for slot in slots]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if self.session is None:
            raise RuntimeError("reset() after close(): make a new env")
        if seed is not None:
            self._start(seed)
        elif not self._fresh:
            latest = [slot.read() for slot in self.session.slots]
            if latest[0].episode == self._episode:  # still mid-episode: ask the world to end it
                self.session.slot.request_reset()
                while latest[0].episode == self._episode:
                    latest = self._run_past(latest[0].tick)
            self._last, self._episode = latest, latest[0].episode
        self._fresh = False
        self.agents = list(self.possible_agents)
        obs = {seat: latest.obs for seat, latest in zip(self.possible_agents, self._last)}
        return obs, {seat: step_info(lt, lt, None) for seat, lt in zip(self.possible_agents, self._last)}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.session is None:
            raise RuntimeError("step() after close(): make a new env")
        if not self.agents:
            raise RuntimeError("step() with no live agents: call reset()")
        unknown = [seat for seat in actions if seat not in self.possible_agents]
        if unknown:
            raise KeyError(f"no seat {unknown} in {self.session.env_id!r}; its seats are {self.possible_agents}")
        session, prev = self.session, self._last
        if self.think_time:  # a virtual clock's alone (refused on the wall clock)
            self._clock.sleep_until(prev[0].time + self.think_time)
        seqs: list[int | None] = []
        live = set(self.agents)
        for i, seat in enumerate(self.possible_agents):
            if seat in live and seat in actions and actions[seat] is not None:
                seqs.append(
                    session.queues[i].submit(actions[seat], obs_tick=prev[i].tick, episode=prev[i].episode, worker=0)
                )
            else:
                seqs.append(None)
        latest = self._run_past(session.slot.read().tick)  # the next tick boundary after the submit
        ended = latest[0].episode != self._episode
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        for i, seat in enumerate(self.possible_agents):
            if seat not in live:  # its agent left earlier in this episode: PettingZoo reports it no more
                continue
            now, before = latest[i], prev[i]
            o, r, term, trunc = now.obs, now.total_reward - before.total_reward, now.terminated, now.truncated
            if ended:
                final = session.slots[i].read_final()
                if final.episode == self._episode:  # the terminal observation, kept for us
                    o, r, term, trunc = (
                        final.obs,
                        final.total_reward - before.total_reward,
                        final.terminated,
                        final.truncated,
                    )
                else:  # several episodes went by: the terminal one is gone
                    term, trunc = now.last_end == END_TERMINATED, now.last_end == END_TRUNCATED
                if not (term or trunc):
                    trunc = True  # the episode ended for every seat at once
            obs[seat], rewards[seat], terms[seat], truncs[seat] = o, float(r), bool(term), bool(trunc)
            infos[seat] = step_info(now, before, seqs[i])
        self._last = latest
        if ended:
            self._episode = latest[0].episode
            self.agents = []
        else:  # agents that left the world (died) while the others play on
            self.agents = [seat for seat in self.agents if not (terms[seat] or truncs[seat])]
        return obs, rewards, terms, truncs, infos

    def render(self) -> None:
        return None

    def state(self) -> np.ndarray:
        raise NotImplementedError("seat worlds expose per-seat observations only")

    def close(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None

    @property
    def tick_log(self) -> TickLog | None:
        return self.session.tick_log if self.session is not None else None


def make_parallel(
    env_id: EnvSource,
    *,
    clock: str | Clock = "virtual",
    defaults: dict[str, Any] | None = None,
    env_module: str | None = None,
    **kwargs: Any,
) -> RealtimeParallelEnv:
    """A realtime ``pettingzoo.ParallelEnv`` of a seat world: ``nonstop.make_parallel("multi/duel")``.

    ``defaults``: β per seat (``{seat: "noop" | "repeat" | callable}``; seats left out get the
    world's own). Other keyword arguments go to `Session` (``queue_mode``, ``seed``, ``env_kwargs`` …).
    A seat world of your own: ``"module:Id"`` or ``env_module=``, as `nonstop.make` takes them.
    """
    if defaults is not None and not isinstance(defaults, dict):
        raise TypeError(f"defaults must be a dict {{seat: β}}, got {type(defaults).__name__}")
    env, kwargs = world_arguments(env_id, env_module, kwargs)
    return RealtimeParallelEnv(env, clock=clock, default=defaults, **kwargs)
