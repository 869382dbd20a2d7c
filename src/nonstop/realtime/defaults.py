"""Default behaviour β: what the world does at a tick when no agent action is ready
(docs/design.md §1.2). Every tick on which β acts is inaction.

>>> beta = make_default("repeat", noop_action=0)
>>> beta(None), beta.observe_agent_action(3), beta(None)
(0, None, 3)

``random`` draws a uniformly random action of the action space at every inaction tick, as the
paper's authors' experiments do; the host binds it to its seat's space and seed:

>>> beta = make_default("random", noop_action=0)
>>> beta.bind(gym.spaces.Discrete(4), seed=0)
>>> [int(beta(None)) for _ in range(6)] == [int(beta2) for beta2 in _draws(4, 0, 6)]
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import copy

import gymnasium as gym
import numpy as np

__all__ = ["DefaultBehaviour", "make_default", "space_noop", "DEFAULT_NAMES"]

DEFAULT_NAMES = ("noop", "repeat", "random")


class DefaultBehaviour:
    """β as a callable ``beta(obs) -> action``.

    ``noop`` applies the env's no-op action; ``repeat`` applies the last agent
    action of the current episode (the no-op before the first one); ``random`` a
    uniformly random action of the seat's action space, drawn afresh each tick from
    its own seeded generator (`bind`, which the host calls); a user callable
    receives the latest observation. ``reset`` is called at every episode boundary.
    """

    def __init__(self, kind: str, noop_action: Any, fn: Callable[[Any], Any] | None = None) -> None:
        self.kind = kind
        self.noop_action = noop_action
        self._fn = fn
        self._last: Any = noop_action
        self._space: gym.Space | None = None

    def bind(self, space: gym.Space, seed: int | None) -> None:
        """Give β its seat's action space and seed (only ``random`` uses them): a private copy of
        the space, seeded, so β's draws neither disturb nor depend on anyone else's sampling."""
        if self.kind == "random":
            self._space = copy.deepcopy(space)
            self._space.seed(seed)

    def __call__(self, obs: Any) -> Any:
        if self.kind == "noop":
            return self.noop_action
        if self.kind == "repeat":
            return self._last
        if self.kind == "random":
            if self._space is None:
                raise RuntimeError("the random default behaviour has no action space: call bind(space, seed) first")
            return self._space.sample()
        fn = self._fn
        if fn is None:  # never: make_default gives every callable kind its function
            raise RuntimeError(f"default behaviour {self.kind!r} has no function to call")
        return fn(obs)

    def observe_agent_action(self, action: Any) -> None:
        self._last = action

    def reset(self) -> None:
        self._last = self.noop_action

    def __repr__(self) -> str:
        return f"DefaultBehaviour({self.kind!r})"


def make_default(spec: str | Callable[[Any], Any] | DefaultBehaviour, *, noop_action: Any = 0) -> DefaultBehaviour:
    """Build β from ``"noop"``, ``"repeat"``, ``"random"`` or a callable ``obs -> action``."""
    if isinstance(spec, DefaultBehaviour):
        return spec
    if isinstance(spec, str):
        if spec not in DEFAULT_NAMES:
            raise ValueError(f"default behaviour must be one of {', '.join(DEFAULT_NAMES)} or a callable, got {spec!r}")
        if noop_action is None and spec != "random":
            raise ValueError(f"default {spec!r} needs the env's noop action, and this env declares none")
        return DefaultBehaviour(spec, noop_action)
    if callable(spec):
        return DefaultBehaviour("callable", noop_action, spec)
    raise TypeError(f"default behaviour must be 'noop', 'repeat', 'random' or a callable, got {type(spec).__name__}")


def _draws(n: int, seed: int, k: int) -> list[Any]:
    """``k`` draws of a seeded ``Discrete(n)``, as a bound random β makes them (for the doctest)."""
    space = gym.spaces.Discrete(n)
    space.seed(seed)
    return [space.sample() for _ in range(k)]


def space_noop(space: gym.Space) -> Any:
    """The action that does nothing in ``space``, as β's ``noop`` applies it: ``start`` of a
    ``Discrete``; zeros for ``Box``/``MultiBinary`` (clipped into a ``Box`` that excludes 0);
    ``start`` of each ``MultiDiscrete`` entry. Other spaces need a declared β.

    >>> space_noop(gym.spaces.Box(-2.0, 2.0, (1,)))
    array([0.], dtype=float32)
    >>> space_noop(gym.spaces.Discrete(3, start=1))
    1
    """
    if isinstance(space, gym.spaces.Discrete):
        return int(space.start)
    if isinstance(space, gym.spaces.Box):
        return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high).astype(space.dtype)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.zeros(space.shape, space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.asarray(space.start, dtype=space.dtype).copy()
    raise TypeError(f"nonstop knows no no-op for the action space {space}: pass default=<callable obs -> action>")
