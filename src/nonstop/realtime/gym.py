"""The Gymnasium view: any Gymnasium agent runs in realtime unchanged.

``step(a)`` submits ``a`` to a world that keeps ticking and returns the latest
observation at the next tick boundary. An agent slower than a tick suffers
inaction automatically, exactly as it would against the real world; ``info``
tells it how many ticks went by, how many of them were β's, and the delay of
its action.

>>> env = make("theory/inaction", clock="virtual", think_time=2.5 / 60)
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step(1)
>>> (info["ticks_elapsed"], info["inaction_ticks"], info["delay"])
(3, 2, 3)
>>> env.close()
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from nonstop.realtime.clock import Clock
from nonstop.realtime.host import END_TERMINATED, END_TRUNCATED, EnvSource, Session

__all__ = ["RealtimeEnv", "make"]


class RealtimeEnv(gym.Env):
    """A `Session` seen as a ``gymnasium.Env`` driven by one agent (worker 0).

    ``reset(seed=s)`` (re)starts the world with that seed; ``reset()`` after an
    episode ended returns the first observation of the episode the world has
    already started (the world does not wait for the agent); ``reset()`` in
    the middle of an episode asks the host to end it at its next tick.

    At an episode's end ``step`` returns the **terminal** observation (and the reward up to it);
    the world has already started the next episode, whose current observation ``reset()`` returns.

    ``think_time`` (virtual clock only) declares how many seconds each decision
    of the agent takes, so a slow agent can be studied without being slow.
    """

    metadata = {"render_modes": []}

    def __init__(self, env: EnvSource, *, think_time: float = 0.0, **session_kwargs: Any) -> None:
        if not (isinstance(think_time, (int, float)) and think_time >= 0):
            raise ValueError(f"think_time must be a non-negative number of seconds, got {think_time!r}")
        self._env_source = env
        self._session_kwargs = session_kwargs
        self.think_time = float(think_time)
        probe = Session(env, **session_kwargs)  # validates every argument now, starts nothing
        if think_time and not probe.is_virtual:
            raise ValueError("think_time applies to the virtual clock; on the wall clock the agent's own time counts")
        self._clock: Clock = probe.clock
        self._session_kwargs["clock"] = self._clock
        self.tick_hz = probe.tick_hz
        self.tau_m = probe.tau_m
        self.session: Session | None = None
        # spaces come from a built env; build the session once to learn them
        self._restart(seed=session_kwargs.get("seed"))

    # ------------------------------------------------------------------ internals
    def _restart(self, seed: int | None) -> None:
        if self.session is not None:
            self.session.stop()
        kwargs = dict(self._session_kwargs, seed=seed)
        if self._clock.is_virtual:
            from nonstop.realtime.clock import VirtualClock

            self._clock = kwargs["clock"] = VirtualClock()
        self.session = Session(self._env_source, **kwargs).start()
        self.observation_space = self.session.observation_space
        self.action_space = self.session.action_space
        latest = self.session.slot.read()
        self._last = latest
        self._episode = latest.episode
        self._last_step_time = self._clock.now()
        self._session_seed = seed
        self._between_episodes = True  # a reset() now needs no new episode

    def _next_tick_boundary(self, after_tick: int) -> Any:
        """Block (wall) or simulate (virtual) until a tick later than ``after_tick`` is published."""
        session = self.session
        slot = session.slot
        if self._clock.is_virtual:
            session.run_until(session.host.origin + (after_tick + 1) * self.tau_m)
            return slot.read()
        while True:
            seq = slot.seq
            latest = slot.read()
            if latest.tick > after_tick:
                return latest
            next_deadline = latest.time + (after_tick + 1 - latest.tick) * self.tau_m
            session.run_until(max(self._clock.now(), next_deadline))
            # the host publishes right after the deadline: poll briefly
            spins = 0
            while slot.seq == seq and spins < 2000:
                spins += 1
                self._clock.sleep(20e-6)

    def _info(self, latest: Any, prev: Any, seq: int | None) -> dict[str, Any]:
        delay = latest.last_delay if seq is not None and latest.last_action_seq == seq else None
        return {
            "tick": latest.tick,
            "episode": latest.episode,
            "ticks_elapsed": latest.tick - prev.tick,
            "inaction_ticks": latest.inaction_ticks - prev.inaction_ticks,
            "agent_ticks": latest.agent_ticks - prev.agent_ticks,
            "delay": delay,
        }

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and not (self._between_episodes and self._session_seed == seed and self._last.tick == 0):
            self._restart(seed)
        elif seed is None:
            latest = self.session.slot.read()
            if not self._between_episodes:
                # mid-episode: ask the world to end it, then wait for the new one
                self.session.slot.request_reset()
                while latest.episode == self._episode:
                    latest = self._next_tick_boundary(latest.tick)
            self._last, self._episode = latest, latest.episode
        self._between_episodes = False
        self._last_step_time = self._last.time if self._clock.is_virtual else self._clock.now()
        return self._last.obs, self._info(self._last, self._last, None)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        session = self.session
        if session is None:
            raise RuntimeError("call reset() before step()")
        prev = self._last
        if self._clock.is_virtual and self.think_time:
            # up to the instant the decision is ready, not past it: a tick due then still takes it
            self._clock.run_until(self._last_step_time + self.think_time)  # type: ignore[attr-defined]
        now = self._clock.now()
        seq = session.queue.submit(
            action, obs_tick=prev.tick, episode=prev.episode, worker=0, tau_theta=now - self._last_step_time, submit_time=now
        )
        current_tick = session.slot.read().tick
        latest = self._next_tick_boundary(current_tick)
        # virtual: the agent sees the observation at its tick's deadline, not `grace` later
        self._last_step_time = latest.time if self._clock.is_virtual else self._clock.now()
        obs, reward = latest.obs, latest.total_reward - prev.total_reward
        terminated = truncated = False
        if latest.episode != self._episode:
            # the world reset at once: the newest observation is the next episode's; the terminal
            # one is kept in the slot as the final observation (what a value bootstrap needs)
            final = session.slot.read_final()
            if final.episode == self._episode:
                obs, reward = final.obs, final.total_reward - prev.total_reward
                terminated, truncated = final.terminated, final.truncated
            else:  # more than one episode ended since the agent last looked: its terminal state is gone
                terminated = latest.last_end == END_TERMINATED
                truncated = latest.last_end == END_TRUNCATED
        info = self._info(latest, prev, seq)
        self._last = latest
        if terminated or truncated:
            self._episode = latest.episode
            self._between_episodes = True
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None

    @property
    def tick_log(self):  # noqa: ANN201 - TickLog
        return self.session.tick_log if self.session is not None else None


def make(
    env_id: EnvSource,
    *,
    clock: str | Clock = "virtual",
    default: Any = None,
    think_time: float = 0.0,
    **kwargs: Any,
) -> RealtimeEnv:
    """A realtime ``gymnasium.Env``: ``nonstop.make("Boxing", clock="wall")``.

    Keyword arguments go to `Session` (``queue_mode``, ``tick_hz``, ``seed``,
    ``env_kwargs`` …).
    """
    return RealtimeEnv(env_id, clock=clock, default=default, think_time=think_time, **kwargs)
