"""What a world is, and how one is built: a gymnasium.Env (one seat) or a seat world (docs/design.md §4b:
PettingZoo's parallel API, one observation and action space per seat, dict ``step``), named by an
env id or made by a factory. `Session` builds its worlds here; the server's env probe tells a seat
world from a gymnasium.Env here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol, TypeGuard

import gymnasium as gym

__all__ = ["EnvSource", "SeatWorld", "is_seat_world", "build_env", "per_seat", "MISSING"]

#: An env id known to `nonstop.envs` or a zero-argument factory returning a gymnasium.Env.
EnvSource = str | Callable[[], gym.Env]


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


def build_env(env: EnvSource, env_kwargs: dict[str, Any]) -> gym.Env:
    """The world ``env`` names (an id, built by `nonstop.envs.make_env`) or makes (a factory, called
    with ``env_kwargs``): a gymnasium.Env or a seat world; anything else is a `TypeError`."""
    if isinstance(env, str):
        from nonstop.envs import make_env

        return make_env(env, **env_kwargs)
    built = env(**env_kwargs)
    if not isinstance(built, gym.Env) and not is_seat_world(built):
        raise TypeError(
            f"env factory must return a gymnasium.Env or a PettingZoo ParallelEnv, got {type(built).__name__}"
        )
    return built


def per_seat(name: str, value: Any, seats: list[str]) -> list[Any]:
    """``value`` for every seat: a dict ``{seat: value}`` (every key a seat; missing seats get
    `MISSING`) or one value for all. A key that is no seat is a clear error."""
    if isinstance(value, dict):
        unknown = [k for k in value if k not in seats]
        if unknown:
            raise ValueError(f"{name} names seats {unknown} the env does not have; its seats are {seats}")
        return [value.get(seat, MISSING) for seat in seats]
    return [value] * len(seats)


#: what `per_seat` gives a seat its dict leaves out (the caller fills in its own fallback)
MISSING: Final = object()
