"""Classic control in realtime: CartPole at its natural 50 Hz.

Gymnasium's ``CartPole-v1`` integrates its physics with ``tau = 0.02`` s per step, so the realtime
world ticks at 50 Hz and a slow agent lets the pole fall. CartPole has no true no-op (0 pushes
left, 1 pushes right), which is why the sensible β is ``"repeat"``; ``noop_action = 0`` only covers
the ticks before the agent's first action.
"""

from __future__ import annotations

import numbers
from typing import Final, Literal

import gymnasium

from .spec import register

__all__ = ["CARTPOLE_TICK_HZ", "make_cartpole"]

CARTPOLE_TICK_HZ: Final = 50.0  # 1 / CartPoleEnv.tau


def make_cartpole(
    *, max_episode_steps: int = 500, render_mode: Literal["rgb_array", "human"] | None = None
) -> gymnasium.Env:
    """Build ``CartPole-v1`` for a 50 Hz realtime world (``max_episode_steps`` ticks at most).

    >>> env = make_cartpole()
    >>> env.unwrapped.tau * CARTPOLE_TICK_HZ
    1.0
    >>> env.reset(seed=0)[0].shape
    (4,)
    """
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, numbers.Integral):
        kind = type(max_episode_steps).__name__
        raise TypeError(f"max_episode_steps must be an int, got {kind} {max_episode_steps!r}")
    if max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    if render_mode not in (None, "rgb_array", "human"):
        raise ValueError(f"render_mode must be None, 'rgb_array' or 'human', got {render_mode!r}")
    return gymnasium.make("CartPole-v1", max_episode_steps=int(max_episode_steps), render_mode=render_mode)


register(
    "CartPole",
    make_cartpole,
    family="classic",
    tick_hz=CARTPOLE_TICK_HZ,
    noop_action=0,
    default_beta="repeat",
    description="CartPole-v1 at its natural 50 Hz (tau = 0.02 s); β repeats the last push",
)
