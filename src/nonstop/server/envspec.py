"""What the server knows about an env id: its spaces, seats, tick rate and β's no-op (`EnvSpec`),
probed once and shared by every session of that id, and the JSON form of a Gymnasium space that
the wire carries (`describe_space`; `nonstop.server.client` turns it back into a space).

>>> import gymnasium as gym
>>> describe_space(gym.spaces.Box(0.0, 1.0, (2,)))["high"], describe_space(gym.spaces.Discrete(3))
(1.0, {'type': 'Discrete', 'n': 3, 'start': 0})
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass
from typing import Any, Final

import gymnasium as gym
import numpy as np

from nonstop.realtime.host import is_seat_world

__all__ = ["SINGLE_SEAT", "EnvSpec", "describe_space"]

#: the seat name of a one-seat world (a several-seat world names its own: PettingZoo's agent names)
SINGLE_SEAT: Final = "agent"


@dataclass(frozen=True)
class EnvSpec:
    """What the server knows about one env id, computed once and shared by its sessions."""

    env_id: str
    tick_hz: float
    noop_action: Any
    default_beta: str
    description: str
    observation_space: gym.Space
    action_space: gym.Space
    action_meanings: list[str] | None = None
    #: a several-seat world's seats (PettingZoo's agent names), None for a one-seat world; the
    #: fields above are then the first seat's, and the per-seat ones below hold every seat's
    seats: tuple[str, ...] | None = None
    seat_observation_spaces: tuple[gym.Space, ...] = ()
    seat_action_spaces: tuple[gym.Space, ...] = ()
    seat_noops: tuple[Any, ...] = ()

    @classmethod
    def probe(cls, env_id: str) -> "EnvSpec":
        from nonstop.envs import env_info, make_env

        info = env_info(env_id)
        env = make_env(env_id)
        seats: tuple[str, ...] | None = None
        try:
            if is_seat_world(env):
                seats = tuple(str(a) for a in env.possible_agents)
                if not seats:
                    raise ValueError(f"env {env_id!r} has no seats (possible_agents is empty)")
                obs_spaces = tuple(env.observation_space(seat) for seat in seats)
                act_spaces = tuple(env.action_space(seat) for seat in seats)
                obs_space, act_space = obs_spaces[0], act_spaces[0]
            else:
                obs_space, act_space = env.observation_space, env.action_space
                obs_spaces, act_spaces = (obs_space,), (act_space,)
            meanings = getattr(getattr(env, "unwrapped", env), "get_action_meanings", None)
            meanings = list(meanings()) if callable(meanings) else None
        finally:
            env.close()
        for i, space in enumerate(obs_spaces):
            if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
                where = f" (seat {seats[i]!r})" if seats else ""
                raise TypeError(
                    f"env {env_id!r}: the server needs a Box or Discrete observation space, got {space}{where}"
                )
        noops = tuple(_seat_noop(info.noop_action, space) for space in act_spaces) if seats else ()
        noop = info.noop_action
        if not seats:  # a world that declares none (a Box world: Pendulum) gets its space's own, as each seat does
            with contextlib.suppress(TypeError):
                noop = _seat_noop(info.noop_action, act_space)
        return cls(
            env_id,
            info.tick_hz,
            noop,
            info.default_beta,
            info.description,
            obs_space,
            act_space,
            meanings,
            seats,
            obs_spaces if seats else (),
            act_spaces if seats else (),
            noops,
        )

    @property
    def seat_names(self) -> list[str]:
        """Every seat's name: the world's own, or `SINGLE_SEAT` for a one-seat world."""
        return list(self.seats) if self.seats is not None else [SINGLE_SEAT]

    def spaces(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "observation": describe_space(self.observation_space),
            "action": describe_space(self.action_space),
        }
        if self.seats is not None:
            out["seats"] = {
                seat: {"observation": describe_space(o), "action": describe_space(a)}
                for seat, o, a in zip(self.seats, self.seat_observation_spaces, self.seat_action_spaces)
            }
        return out


def _seat_noop(noop: Any, space: gym.Space) -> Any:
    """β's no-op for one seat's action space: the env's declared one where the space holds it, else
    the space's own (`nonstop.realtime.defaults.space_noop`)."""
    from nonstop.realtime.defaults import space_noop

    if noop is not None:
        try:
            if space.contains(np.asarray(noop, dtype=space.dtype) if space.shape else noop):
                return noop
        except (TypeError, ValueError):
            pass
    return space_noop(space)


def describe_space(space: gym.Space) -> dict[str, Any]:
    """A JSON description of a Gymnasium space that `nonstop.server.client` turns back into one."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        low, high = np.asarray(space.low), np.asarray(space.high)

        def bound(arr: np.ndarray) -> Any:
            if arr.size and np.all(arr == arr.flat[0]):
                return _finite(arr.flat[0])
            return [_finite(v) for v in arr.ravel().tolist()]

        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": space.dtype.str,
            "low": bound(low),
            "high": bound(high),
        }
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": space.n if isinstance(space.n, int) else list(space.n)}
    return {"type": type(space).__name__}


def _finite(v: Any) -> Any:
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)  # JSON has no infinities; "inf"/"-inf" are parsed back by the client
    return v
