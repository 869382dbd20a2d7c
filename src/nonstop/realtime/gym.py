"""The Gymnasium view: any Gymnasium agent runs in realtime unchanged.

``step(a)`` submits ``a`` to a world that keeps ticking and returns the latest
observation at the next tick boundary. An agent slower than a tick suffers
inaction automatically, exactly as it would against the real world; ``info``
tells it how many ticks went by, how many of them were β's, and the delay of
its action (`INFO_KEYS`: flat ``nonstop_`` keys holding numpy integers, present after
``reset()`` too, so vector envs, SB3 and torchrl stack them; ``episode`` and every other key
the ecosystem owns are left alone).

>>> env = make("theory/inaction", clock="virtual", think_time=2.5 / 60)
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step(1)
>>> [int(info[k]) for k in ("nonstop_ticks_elapsed", "nonstop_inaction_ticks", "nonstop_delay")]
[3, 2, 3]
>>> env.close()
"""

from __future__ import annotations

from typing import Any, Final, SupportsFloat

import gymnasium as gym
import numpy as np

from nonstop.realtime.clock import Clock
from nonstop.realtime.ticklog import TickLog
from nonstop.realtime.host import END_TERMINATED, END_TRUNCATED, EnvSource, Session

__all__ = ["RealtimeEnv", "make", "INFO_KEYS", "step_info", "register_envs", "world_arguments"]

#: What nonstop adds to ``info`` (all numpy int64; the README has the table).
INFO_KEYS: Final = (
    "nonstop_tick",
    "nonstop_episode",
    "nonstop_ticks_elapsed",
    "nonstop_inaction_ticks",
    "nonstop_agent_ticks",
    "nonstop_delay",
)
#: What the in-process world env answers through `RealtimeEnv` on every host mechanism (static facts)
_STATIC_QUERIES: Final = ("get_action_meanings", "get_keys_to_action")


def step_info(latest: Any, prev: Any, seq: int | None) -> dict[str, Any]:
    """The ``nonstop_`` info of a step (`INFO_KEYS`) from two slot observations: ``prev`` at the
    last step's return, ``latest`` at this one's; ``seq`` is the submitted action's sequence
    number (None at reset), whose delay is reported once the host has applied it (else -1).
    One builder for every view: the Gymnasium env, the PettingZoo one and the remote client."""
    delay = latest.last_delay if seq is not None and latest.last_action_seq == seq else -1
    return {
        "nonstop_tick": np.int64(latest.tick),
        "nonstop_episode": np.int64(latest.episode),
        "nonstop_ticks_elapsed": np.int64(latest.tick - prev.tick),
        "nonstop_inaction_ticks": np.int64(latest.inaction_ticks - prev.inaction_ticks),
        "nonstop_agent_ticks": np.int64(latest.agent_ticks - prev.agent_ticks),
        "nonstop_delay": np.int64(delay),
    }


class RealtimeEnv(gym.Env):
    """A `Session` seen as a ``gymnasium.Env`` driven by one agent (worker 0).

    ``reset(seed=s)`` (re)starts the world with that seed; ``reset()`` after an
    episode ended returns the first observation of the episode the world has
    already started (the world does not wait for the agent); ``reset()`` in
    the middle of an episode asks the host to end it at its next tick.

    At an episode's end ``step`` returns the **terminal** observation (and the reward up to it),
    on both clocks; the world has already started the next episode, whose current observation
    ``reset()`` returns.

    ``think_time`` (virtual clock only) declares how many seconds each decision
    of the agent takes, so a slow agent can be studied without being slow.
    ``render_mode="rgb_array"``: ``render()`` returns the frame of the tick last returned.
    Attributes the env itself has (``get_action_meanings``, ``ale`` through ``unwrapped``) are
    reached through this env when the world runs in this process (virtual clock, thread host);
    a host process answers ``get_action_meanings`` only.

    Gymnasium's lifecycle holds: ``step`` before ``reset`` raises ``ResetNeeded``, anything after
    ``close`` raises ``ClosedEnvironmentError``, and ``action_space`` stays the same object across
    ``reset(seed=…)``, so ``action_space.seed(42)`` holds.

    >>> env = RealtimeEnv("CartPole", clock="virtual")
    >>> env.metadata["render_fps"], sorted(env.reset(seed=0)[1]) == sorted(INFO_KEYS)
    (50.0, True)
    >>> env.close()
    """

    metadata = {"render_modes": ["rgb_array", "human"]}

    def __init__(
        self, env: EnvSource, *, think_time: float = 0.0, render_mode: str | None = None, **session_kwargs: Any
    ) -> None:
        self._closed = True  # until the world exists: close() and __getattr__ stay safe
        self.session: Session | None = None
        if not (isinstance(think_time, (int, float)) and think_time >= 0):
            raise ValueError(f"think_time must be a non-negative number of seconds, got {think_time!r}")
        self._env_source = env
        self._session_kwargs = dict(session_kwargs, render_mode=render_mode)
        self.think_time = float(think_time)
        self.render_mode = render_mode
        probe = Session(env, **self._session_kwargs)  # validates every argument now, starts nothing
        if think_time and not probe.clock.unmeasured(think_time):
            raise ValueError("think_time applies to the virtual clock; on the wall clock the agent's own time counts")
        self._clock: Clock = probe.clock
        self._session_kwargs["clock"] = self._clock
        self.tick_hz = probe.tick_hz
        self.tau_m = probe.tau_m
        self.metadata = dict(type(self).metadata, render_fps=self.tick_hz)
        if isinstance(env, str):
            self.spec = _spec_for(env, dict(session_kwargs, think_time=think_time))
        self._static: dict[str, Any] = {}
        self._closed = False
        self._needs_reset = True
        # spaces come from a built env; build the session once to learn them
        self._restart(seed=session_kwargs.get("seed"))

    # ------------------------------------------------------------------ internals
    def _restart(self, seed: int | None) -> None:
        if self.session is not None:
            self.session.stop()
        kwargs = dict(self._session_kwargs, seed=seed)
        self._clock = kwargs["clock"] = self._clock.restarted()
        self.session = session = Session(self._env_source, **kwargs).start()
        if "action_space" not in self.__dict__:  # kept across restarts: its seeding must hold
            self.observation_space = session.observation_space
            self.action_space = session.action_space
        latest = session.slot.read()
        self._last = latest
        self._episode = latest.episode
        self._last_step_time = self._clock.now()
        self._session_seed = seed
        self._between_episodes = True  # a reset() now needs no new episode
        self._ended = False
        if not self._static and self._world_env() is None:
            self._static = _static_answers(self._env_source, session.env_kwargs)

    @property
    def _world(self) -> Session:
        """The running session: the world exists from ``__init__`` until `close`."""
        session = self.session
        if session is None:
            raise gym.error.ClosedEnvironmentError(
                "this env is closed: make a new env (nonstop.make or gymnasium.make)"
            )
        return session

    def _world_env(self) -> gym.Env | None:
        """The env the host steps, when it lives in this process."""
        session = self.__dict__.get("session")
        if session is None:
            return None
        if session.host is not None:
            return session.host.env
        return None

    def _next_tick_boundary(self, after_tick: int) -> Any:
        """Block (wall) or simulate (virtual) until a tick later than ``after_tick`` is published,
        and return that tick's last publication: at an episode end the host publishes twice in
        one tick (terminal, then the next episode's first observation), and the virtual clock
        only ever shows the second, so the wall clock waits for it too."""
        session = self._world
        slot = session.slot
        due = session.origin + (after_tick + 1) * self.tau_m  # the tick's deadline, on the grid
        while True:
            seq = slot.seq
            latest = slot.read()
            if latest.tick > after_tick:
                if not (latest.terminated or latest.truncated):
                    return latest
                self._await_publish(latest.seq)  # the reset observation follows at once
                continue
            session.run_until(max(self._clock.now(), due))
            self._await_publish(seq, spins=2000)

    def _await_publish(self, seq: int, spins: int | None = None) -> None:
        """Poll until the slot moves past ``seq`` (``spins`` × 20 µs at most, else until it does,
        watching the host: a failed host raises `HostError` from ``run_until``)."""
        session = self._world
        slot, n = session.slot, 0
        while slot.seq == seq:
            n += 1
            if spins is not None and n >= spins:
                return
            if n % 500 == 0:
                session.run_until(self._clock.now() + 1e-3)
            else:
                self._clock.sleep(20e-6)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise gym.error.ClosedEnvironmentError(
                f"{what}() after close(): make a new env (nonstop.make or gymnasium.make)"
            )

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self._check_open("reset")
        super().reset(seed=seed)
        if seed is not None and not (self._between_episodes and self._session_seed == seed and self._last.tick == 0):
            self._restart(seed)
        elif seed is None:
            latest = self._world.slot.read()
            if not self._between_episodes:
                # mid-episode: ask the world to end it, then wait for the new one
                self._world.slot.request_reset()
                while latest.episode == self._episode:
                    latest = self._next_tick_boundary(latest.tick)
            self._last, self._episode = latest, latest.episode
        self._between_episodes = self._needs_reset = self._ended = False
        self._last_step_time = self._clock.arrival(self._last.time)
        return self._last.obs, step_info(self._last, self._last, None)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self._check_open("step")
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step()")
        session = self._world
        prev = self._last
        if self.think_time:  # a virtual clock's alone (refused on the wall clock, where thinking takes its own time)
            # up to the instant the decision is ready, not past it: a tick due then still takes it
            self._clock.sleep_until(self._last_step_time + self.think_time)
        now = self._clock.now()
        seq = session.queue.submit(
            action,
            obs_tick=prev.tick,
            episode=prev.episode,
            worker=0,
            tau_theta=now - self._last_step_time,
            submit_time=now,
        )
        current_tick = session.slot.read().tick
        latest = self._next_tick_boundary(current_tick)
        # virtual: the agent sees the observation at its tick's deadline, not `grace` later
        self._last_step_time = self._clock.arrival(latest.time)
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
        info = step_info(latest, prev, seq)
        self._last = latest
        self._ended = terminated or truncated
        if self._ended:
            self._episode = latest.episode
            self._between_episodes = True
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        """The frame of the tick last returned (the terminal one after an episode's last step)."""
        self._check_open("render")
        frames = self._world.render_slot
        if self.render_mode != "rgb_array" or frames is None:  # a frame slot exists with rgb_array
            return None
        return (frames.read_final() if self._ended else frames.read()).obs

    def close(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None
        self._closed = True

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes RealtimeEnv lacks: the world env's own extras
        if name.startswith("__") or name in ("_static", "session"):
            raise AttributeError(name)
        world = self._world_env()
        if world is not None:
            return getattr(world.unwrapped, name)
        static = self.__dict__.get("_static", {})
        if name in static:
            return static[name]
        raise AttributeError(
            f"{type(self).__name__} has no attribute {name!r}; the world's own attributes are reachable "
            f"when its host runs in this process (clock='virtual' or host_mode='thread')"
        )

    @property
    def tick_log(self) -> TickLog | None:
        return self.session.tick_log if self.session is not None else None


def _static_answers(env: EnvSource, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Answers of a copy of the env for `_STATIC_QUERIES` (a host process keeps the world itself)."""
    from nonstop.realtime.worlds import build_env

    copy = build_env(env, {k: v for k, v in env_kwargs.items() if k != "render_mode"})
    try:
        answers = {}
        for name in _STATIC_QUERIES:
            method = getattr(copy.unwrapped, name, None)
            if method is not None:
                value = method()
                answers[name] = lambda value=value: value
        return answers
    finally:
        copy.close()


def gymnasium_id(env_id: str) -> str:
    """The Gymnasium id of a nonstop world: ``nonstop/<id>``, with ``/`` inside the id as ``-``
    (``theory/inaction`` → ``nonstop/theory-inaction``).

    >>> gymnasium_id("CartPole"), gymnasium_id("theory/delay-cycle")
    ('nonstop/CartPole', 'nonstop/theory-delay-cycle')
    """
    return "nonstop/" + env_id.replace("/", "-")


def _spec_for(env_id: str, kwargs: dict[str, Any]) -> gym.envs.registration.EnvSpec:
    clean = {k: v for k, v in kwargs.items() if not isinstance(v, Clock)}
    return gym.envs.registration.EnvSpec(
        id=gymnasium_id(env_id),
        entry_point="nonstop.realtime.gym:RealtimeEnv",
        kwargs=dict(clean, env=env_id),
        order_enforce=False,
        disable_env_checker=True,
    )


def register_envs() -> list[str]:
    """Register every one-seat nonstop world with Gymnasium as ``nonstop/<id>`` (done on ``import
    nonstop``; seat worlds, family ``multi``, have the PettingZoo view, `nonstop.make_parallel`).

    Gymnasium ≥ 1.0 loads no plugins by itself; ``gymnasium.make("nonstop:nonstop/CartPole")``
    imports nonstop first, and after ``import nonstop`` plain ``gymnasium.make("nonstop/CartPole")``
    works. Keyword arguments of ``gymnasium.make`` go to `RealtimeEnv` (``clock="wall"`` …).

    >>> import gymnasium
    >>> env = gymnasium.make("nonstop/CartPole")
    >>> env.spec.id, env.metadata["render_fps"]
    ('nonstop/CartPole', 50.0)
    >>> env.close()
    """
    from nonstop.envs import list_envs

    ids = []
    for info in list_envs():
        if info.family == "multi":  # seat worlds are PettingZoo's, not Gymnasium's: nonstop.make_parallel
            continue
        gym_id = gymnasium_id(info.env_id)
        if gym_id not in gym.registry:
            gym.register(gym_id, entry_point="nonstop.realtime.gym:RealtimeEnv", kwargs={"env": info.env_id})
        ids.append(gym_id)
    return ids


def make(
    env_id: EnvSource,
    *,
    clock: str | Clock = "virtual",
    default: Any = None,
    think_time: float = 0.0,
    env_module: str | None = None,
    **kwargs: Any,
) -> RealtimeEnv:
    """A realtime ``gymnasium.Env``: ``nonstop.make("Boxing", clock="wall")``.

    Keyword arguments go to `Session` (``queue_mode``, ``tick_hz``, ``seed``,
    ``env_kwargs`` …). A world of your own: ``make("mypkg.worlds:Target1D-v0")`` (Gymnasium's
    ``module:Id``) or ``make("Target1D-v0", env_module="mypkg.worlds")`` imports the module here
    and in every process that builds the world. ``tick_hz`` gives any world its rate, one whose
    Gymnasium class declares none included.

    >>> env = make("HalfCheetah-v5", tick_hz=20)
    >>> env.tick_hz, env.action_space.shape
    (20.0, (6,))
    >>> env.close()
    """
    env, kwargs = world_arguments(env_id, env_module, kwargs)
    return RealtimeEnv(env, clock=clock, default=default, think_time=think_time, **kwargs)


def world_arguments(env: EnvSource, env_module: str | None, kwargs: dict[str, Any]) -> tuple[EnvSource, dict[str, Any]]:
    """What `make` and `nonstop.make_parallel` hand their `Session`: the id with its module
    (`nonstop.envs.registry.qualify_env_id`), and ``tick_hz`` also among ``env_kwargs`` where
    the registry asks for a rate, so a world whose class declares none gets it there too."""
    if not isinstance(env, str):
        if env_module is not None:
            raise ValueError("env_module names the module of an env id; a factory brings its own module")
        return env, kwargs
    from nonstop.envs.registry import qualify_env_id

    env = qualify_env_id(env, env_module)
    tick_hz = kwargs.get("tick_hz")
    if tick_hz is not None:
        env_kwargs = dict(kwargs.get("env_kwargs") or {})
        given = env_kwargs.setdefault("tick_hz", tick_hz)
        if given is not tick_hz and given != tick_hz:
            raise ValueError(f"tick_hz={tick_hz!r} and env_kwargs tick_hz={env_kwargs['tick_hz']!r} disagree: give one")
        kwargs = dict(kwargs, env_kwargs=env_kwargs)
    return env, kwargs
