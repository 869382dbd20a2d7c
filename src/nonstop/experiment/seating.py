"""Who sits where: the world a run plays in, and the parts that drive its seats.

A seating (chosen by `TrainConfig.seating` through `nonstop.experiment.registry`) probes the
world once (`WorldSpec`: tick rate, the learner's spaces, the seats) and names the parts that
drive each seat. `SoloSeating` puts the learner alone in a one-seat world; the self-play seating
(`nonstop.experiment.selfplay.SelfPlaySeating`) puts a pool of its past snapshots on the second
seat of a two-seat world. In a world of teams, team self-play
(`nonstop.experiment.teamplay.TeamSelfPlaySeating`) stands in for self-play (`registry.stand_in`): the
registry's ``instead`` on the world's ``team_world`` fact (`team_world`), asked of the world only then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from nonstop.experiment.registry import lookup
from nonstop.envs.seats import team_seats

if TYPE_CHECKING:
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.run import Part
    from nonstop.experiment.run import Run

__all__ = ["WorldSpec", "probe_world", "SoloSeating", "team_world", "is_team_world", "agent_ids"]


def agent_ids(mode: str, seats: list[str] | None, env: str) -> Any:
    """What ``--agent-id mode`` adds for a world of ``seats`` (`nonstop.policies.agentid.AgentId`, ``n`` the
    largest team's seats), None for ``none``; one line where no team's seats share a θ."""
    from nonstop.policies.agentid import AgentId

    if mode == "none":
        return None
    if seats is None:
        raise ValueError(f"--agent-id {mode}: {env} is a one-seat world, so no seats share a θ to tell apart")
    teams = team_seats(seats)
    largest = max(len(t) for t in teams.values())
    if len(seats) <= 2 or largest < 2:
        raise ValueError(
            f"--agent-id {mode}: {env}'s seats ({', '.join(seats)}) are one agent a side, so no seats of a team "
            "share a θ to tell apart"
        )
    return AgentId(mode, largest)


def is_team_world(env_id: str, env_kwargs: dict[str, Any]) -> bool:
    """Whether ``env_id`` is a world of more than two seats in at least two teams (built once to ask)."""
    from nonstop.envs import make_env

    kwargs = {k: v for k, v in env_kwargs.items() if k != "tick_hz"}
    env = make_env(env_id, **kwargs)
    try:
        seats = [str(a) for a in getattr(env, "possible_agents", [])]
    finally:
        env.close()
    return len(seats) > 2 and len(team_seats(seats)) >= 2


def team_world(cfg: "TrainConfig") -> bool:
    """The world fact ``team_world`` (registry ``world_fact``): whether ``cfg``'s world is a world of teams."""
    return is_team_world(cfg.env, cfg.env_kwargs)


@dataclass
class WorldSpec:
    """What a run needs to know of its world before building anything."""

    tick_hz: float
    family: str
    obs_space: gym.spaces.Space
    action_space: gym.spaces.Space
    #: the world's seats (the learner's first), None for a one-seat world
    seats: list[str] | None
    #: what the host builds: the env id, or a factory (a seat world whose frames are shrunk)
    env_source: Any
    #: the learner's algorithm (`nonstop.learning.algos.Algorithm`) and its settings (the config's, else the
    #: env family's), declared latency and N_I
    #: what learns: the `nonstop.learning.algos.Algorithm` class ``--algo`` names, then the one built for the world
    algorithm_class: Any = None
    algorithm: Any = None
    settings: Any = None
    latency: Any = None
    n_inference: int | str = 1
    #: ``--delay-aware``: the action buffer's K slots (0: off); ``obs_space`` is then the augmented one
    inflight_k: int = 0
    #: ``--agent-id``: each seat's identity that a team's shared network sees (None: off); ``obs_space`` stays
    #: the world's, the network's input is ``model_obs_shape``
    agent_id: Any = None

    @property
    def tau_m(self) -> float:
        return 1.0 / self.tick_hz

    @property
    def obs_shape(self) -> tuple[int, ...]:
        assert self.obs_space.shape is not None  # probe_world refuses a world without array observations
        return tuple(self.obs_space.shape)

    @property
    def model_obs_shape(self) -> tuple[int, ...]:
        """What the learner's network takes: the observation, widened by the agent's id under ``--agent-id``."""
        return self.obs_shape if self.agent_id is None else tuple(self.agent_id.obs_shape(self.obs_shape))


def probe_world(
    cfg: "TrainConfig",
    adapt: Callable[[Any], tuple[Any, Any]] | None = None,
    settings: Callable[[WorldSpec, Any], Any] | None = None,
) -> WorldSpec:
    """Build the env once to read its spaces and seats, then close it. ``adapt(probe)`` may wrap a
    seat world and return ``(probe, env_source)`` (self-play shrinks two-player Atari frames);
    ``settings(spec, s)`` may change the learner's settings ``s`` for the world before its model is built."""
    from nonstop.envs import env_info, make_env
    from nonstop.realtime.host import is_seat_world

    info = env_info(cfg.env, **cfg.env_kwargs)
    probe: Any = make_env(cfg.env, **cfg.env_kwargs)  # a gymnasium.Env or a seat world
    source: Any = cfg.env
    if adapt is not None and is_seat_world(probe):
        probe, source = adapt(probe)
    seats: list[str] | None = None
    try:
        if is_seat_world(probe):
            seats = [str(a) for a in probe.possible_agents]
            obs_space, action_space = probe.observation_space(seats[0]), probe.action_space(seats[0])
        else:
            obs_space, action_space = probe.observation_space, probe.action_space
    finally:
        probe.close()
    algorithm_class = lookup("algo", cfg.algo)
    algorithm_class.check_spaces(obs_space, action_space, cfg.env)  # one line naming the --algo that fits
    spec = WorldSpec(
        tick_hz=info.tick_hz,
        family=info.family,
        obs_space=obs_space,
        action_space=action_space,
        seats=seats,
        env_source=source,
        algorithm_class=algorithm_class,
    )
    spec.agent_id = agent_ids(cfg.agent_id, seats, cfg.env)
    if spec.agent_id is not None:
        spec.agent_id.obs_shape(spec.obs_shape)  # a shape that takes no id is said now
    _learner_settings(cfg, spec, settings)
    return spec


def many_seat_settings(spec: WorldSpec, settings: Any) -> Any:
    """A world of more than two seats: the learner's settings as its algorithm reads such a world's
    observations (`Algorithm.for_many_seats`)."""
    if spec.seats is None or len(spec.seats) <= 2:
        return settings
    return spec.algorithm_class.for_many_seats(settings, spec.obs_shape)


def _learner_settings(
    cfg: "TrainConfig", spec: WorldSpec, adjust: Callable[[WorldSpec, Any], Any] | None = None
) -> None:
    """The learner's settings, declared latency and N_I, in ``spec``; a model that cannot fit, or
    a latency that does not parse, fails here, before anything is built."""
    import math

    from nonstop.policies.latency import parse_latency

    from nonstop.inference.device import placement

    # a model is placed and sized only where something learns: a run of stand-ins (compare's) needs no torch
    learns = cfg.learning != "none"
    device = placement(cfg.device, cfg.dtype)[0] if learns else None  # a device this machine lacks is said now
    algo = spec.algorithm_class
    spec.settings = algo.settings(cfg.algo_settings, spec.family)
    if adjust is not None:
        spec.settings = adjust(spec, spec.settings)
    spec.settings = spec.settings.for_run(round(cfg.seconds * spec.tick_hz))  # a setting left to the run's length
    spec.latency = parse_latency(cfg.latency, tick_hz=spec.tick_hz)
    algo.check_timing(spec.latency.mean / spec.tau_m, cfg.scheduler)  # RTAC refuses a delay under 2 ticks
    # the actor and critic see the actions in flight (an algorithm that needs them always does)
    if cfg.delay_aware or algo.needs_action_buffer:
        from nonstop.learning.inflight import delay_aware_space

        spec.obs_space, spec.inflight_k = delay_aware_space(
            spec.obs_space, spec.action_space, spec.latency.max_hint, spec.tau_m
        )
        if algo.needs_action_buffer:  # its settings say where the buffer sits in its observations
            import dataclasses

            spec.settings = dataclasses.replace(spec.settings, buffer_slots=spec.inflight_k)
    spec.algorithm = spec.settings.algorithm(spec.model_obs_shape, spec.action_space)
    if learns:
        spec.algorithm.check_fits(str(device))
    # Algorithm 2's N_I* = ⌈τ̄_θ/τ_M⌉ by default, so the staggered agent acts at every tick
    spec.n_inference = cfg.n_inference or (
        1 if cfg.scheduler == "sequential" else max(1, math.ceil(spec.latency.mean / spec.tau_m - 1e-9))
    )
    scheduler(cfg, spec.n_inference)  # the scheduler's own settings are checked now, before anything is built


def scheduler(cfg: "TrainConfig", n_inference: int | str) -> Any:
    """What an inference pool of this run is given: the scheduler's name, or (with ``scheduler_args``)
    the scheduler built with them; an unknown setting is one line naming the scheduler."""
    if not cfg.scheduler_args:
        return cfg.scheduler
    from nonstop.inference.schedulers import make_scheduler

    if not isinstance(n_inference, int):
        raise ValueError("--scheduler-arg sets a scheduler of a fixed N_I: it does not combine with --n-inference auto")
    try:
        return make_scheduler(cfg.scheduler, n_inference, **cfg.scheduler_args)
    except TypeError as exc:
        raise ValueError(f"--scheduler-arg: {exc}") from None


def build_world(run: "Run", log_dir: Any, recorder: Any = None) -> Any:
    """The run's world: a `Session` on the config's clock, its recorder (default the learner's) filling
    the learner's replay; ``log_dir``: stream the tick log there."""
    from nonstop.realtime.host import Session

    cfg, spec = run.cfg, run.spec
    if isinstance(spec.env_source, str):
        source: dict[str, Any] = {"env": cfg.env, "env_kwargs": cfg.env_kwargs}
    else:  # a factory: the registry's facts the Session would look up by id
        source = {"env": spec.env_source, "tick_hz": spec.tick_hz}
    # a delay-aware recorder shares the pool's action buffer: the host runs in this process
    host_mode = "thread" if spec.inflight_k else "auto"
    world = Session(
        **source,
        clock=cfg.clock,
        seed=cfg.seed,
        recorder=run.learning.recorder if recorder is None else recorder,
        log_dir=log_dir,
        default=cfg.default,
        host_mode=host_mode,
    )
    world.start()
    return world


class SoloSeating:
    """The learner alone in a one-seat world; on a world of more than two seats, the learner's team
    beside the others (registry seating ``teams``: `nonstop.experiment.teamseats.TeamSeats`). A
    two-seat world is refused: it takes --self-play."""

    def __init__(self, cfg: "TrainConfig") -> None:
        self.cfg = cfg
        #: the seat the learner plays (None: the one seat of a one-seat world)
        self.learner_seat: str | None = None
        #: on a world of many seats, who sits where (None: a one-seat world)
        self.teams: Any = None

    def describe(self) -> WorldSpec:
        spec = probe_world(self.cfg, settings=many_seat_settings)
        if spec.seats is not None and len(spec.seats) <= 2:
            raise ValueError(
                f"{self.cfg.env} is a world of {len(spec.seats)} seats ({', '.join(spec.seats)}): train on "
                "it with --self-play (the learner against its own past snapshots)"
            )
        if spec.seats is not None:
            self.teams = lookup("seating", "teams")(self.cfg, spec)
        return spec

    def world(self, run: "Run", log_dir: Any) -> Any:
        return build_world(run, log_dir, recorder=None if self.teams is None else self.teams.recorder(run))

    def parts(self, run: "Run") -> list["Part"]:
        if self.teams is not None:
            return list(self.teams.parts(run))
        return list(lookup("driver", self.cfg.interaction)(run, seat=self.learner_seat))

    def announce(self, run: "Run") -> str | None:
        """A line for the user about the seating (None: nothing to say)."""
        return None if self.teams is None else str(self.teams.announce(run))
