"""What an env id stands for: its realtime facts (`EnvInfo`) and the table of registered ids that
`register` fills as each family of worlds (atari, theory, gameboy, …) is imported.
`nonstop.envs.registry` resolves ids through this table; a family's module needs only this one.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Required, TypedDict

import gymnasium

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack for **kwargs is Python 3.12's

__all__ = [
    "EnvInfo",
    "EnvFacts",
    "Entry",
    "register",
    "REGISTRY",
    "ALE_ID",
    "FAMILIES",
    "DEFAULT_BETAS",
    "is_int",
    "is_real",
    "check_positive_real",
]

FAMILIES = ("atari", "gameboy", "theory", "classic", "continuous", "gymnasium", "multi")
DEFAULT_BETAS = ("noop", "repeat")

# Matches the two spellings of "any ALE game with the paper's defaults".
ALE_ID = re.compile(r"^(?:ALE/(?P<v5>[A-Za-z0-9]+)-v5|Atari/(?P<bare>[A-Za-z0-9]+))$")


@dataclass(frozen=True)
class EnvInfo:
    """The realtime facts about one environment id.

    ``tick_hz`` is the world's natural tick rate (``τ_M = 1 / tick_hz``); ``noop_action`` is what the
    ``"noop"`` default behaviour β applies (None: the action space's own, zeros for a ``Box``); ``default_beta`` is the β that makes sense for this world.
    The reward rates are per tick, where the theory knows them.

    >>> info = EnvInfo("theory/inaction", "theory", 60.0, 0, "noop", "Equation 3 MDP", 1.0, 0.0)
    >>> round(1 / info.tick_hz, 4), info.optimal_reward_rate - info.default_reward_rate
    (0.0167, 1.0)
    """

    env_id: str
    family: str
    tick_hz: float
    noop_action: Any
    default_beta: str
    description: str
    optimal_reward_rate: float | None = None
    default_reward_rate: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise TypeError(f"env_id must be a non-empty str, got {self.env_id!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        check_positive_real("tick_hz", self.tick_hz)
        if self.default_beta not in DEFAULT_BETAS:
            raise ValueError(f"default_beta must be one of {DEFAULT_BETAS}, got {self.default_beta!r}")
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a str, got {type(self.description).__name__}")
        for name in ("optimal_reward_rate", "default_reward_rate"):
            value = getattr(self, name)
            if value is not None and not is_real(value):
                raise TypeError(f"{name} must be a real number or None, got {value!r}")


class EnvFacts(TypedDict, total=False):
    """The facts `register` takes about an id: `EnvInfo`'s fields beside ``env_id`` (a ``family`` and a
    ``tick_hz`` always; ``noop_action`` 0, ``default_beta`` ``"noop"`` and ``description`` empty unless given)."""

    family: Required[str]
    tick_hz: Required[float]
    noop_action: Any
    default_beta: str
    description: str
    optimal_reward_rate: float | None
    default_reward_rate: float | None


@dataclass(frozen=True)
class Entry:
    factory: Callable[..., gymnasium.Env]
    info: EnvInfo
    check: Callable[..., None] | None


#: every registered id: its factory, facts and argument check (`nonstop.envs.registry` reads it)
REGISTRY: dict[str, Entry] = {}


def register(
    env_id: str,
    factory: Callable[..., gymnasium.Env],
    *,
    check: Callable[..., None] | None = None,
    **facts: Unpack[EnvFacts],
) -> None:
    """Register ``factory`` under ``env_id`` so :func:`make_env` can build it; ``facts``: the id's
    `EnvFacts` (``family``, ``tick_hz``, ``noop_action``, ``default_beta``, ``description``, the reward rates).

    ``factory(**kwargs)`` must return a fresh env. Keep it a module-level callable: worker processes
    rebuild envs from the id alone. ``check(**kwargs)``, if given, validates argument *values* for
    both :func:`make_env` and :func:`env_info`, so a bad value fails before anything is built.
    Registering an id again with different facts is an error; with the same facts (a module
    imported twice) the new factory replaces the old.
    """
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {factory!r}")
    if check is not None and not callable(check):
        raise TypeError(f"check must be callable or None, got {check!r}")
    if isinstance(env_id, str) and ALE_ID.match(env_id):
        raise ValueError(f"{env_id!r} is reserved for ALE games; pick another name")
    for name in facts:
        if name not in EnvFacts.__required_keys__ | EnvFacts.__optional_keys__:
            raise TypeError(f"register() got an unexpected keyword argument {name!r} (an EnvFacts field?)")
    tick_hz = facts.get("tick_hz")
    check_positive_real("tick_hz", tick_hz)  # before float(): float(True) would pass as 1 Hz
    info = EnvInfo(
        env_id=env_id,
        family=facts.get("family"),  # a missing one is refused by EnvInfo, naming its field
        tick_hz=float(tick_hz),  # checked above
        noop_action=facts.get("noop_action", 0),
        default_beta=facts.get("default_beta", "noop"),
        description=facts.get("description", ""),
        optimal_reward_rate=facts.get("optimal_reward_rate"),
        default_reward_rate=facts.get("default_reward_rate"),
    )
    existing = REGISTRY.get(env_id)
    # Same facts again means the module was imported twice (reload, doctest collection): harmless.
    if existing is not None and existing.info != info:
        raise ValueError(f"environment id {env_id!r} is already registered as {existing.info}")
    REGISTRY[env_id] = Entry(factory, info, check)


def is_int(value: Any) -> bool:
    # bool is an int subclass, but `max_steps=True` is a bug, not a count.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive_real(name: str, value: Any) -> None:
    if not is_real(value):
        raise TypeError(f"{name} must be a positive real number, got {type(value).__name__} {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
