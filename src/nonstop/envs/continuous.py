"""Continuous control in realtime: Pendulum and three MuJoCo robots at their natural control rates.

Each world ticks at ``1 / dt``, the physics time one env step integrates, so a slow agent lets the
body move on without it: Pendulum-v1 (dt 0.05 s) at 20 Hz; HalfCheetah-v5 (5 × 0.01 s) at 20 Hz;
Hopper-v5 and Walker2d-v5 (4 × 0.002 s) at 125 Hz. Pendulum's class says ``render_fps`` 30: that is
its drawing rate, not its physics, hence its entry here.

β, per world:

- **Pendulum-v1: noop** (zero torque). Zero torque is a true rest action of the pendulum: gravity
  alone acts, and its reward charges every unit of torque (−0.001·u²), so a tick without the agent
  adds no push the agent did not choose for that tick.
- **HalfCheetah, Hopper, Walker2d: repeat** (hold the last torques). A motor driver holds its last
  command until a new one arrives (a zero-order hold, the setting of the real-time actor-critic);
  zeros would drop Hopper and Walker at every late tick, and inaction would measure falling rather
  than lateness.

``pixels=True`` observes the world's rendered frame instead of its state vector, through the
preprocessing Atari's ``preprocess=True`` applies (84×84 grayscale ``uint8``, area averaged), so it
reaches the same encoder (the IMPALA network). MuJoCo draws off screen through EGL where no display
exists (``MUJOCO_GL=egl`` unless set); Pendulum's frames need pygame (``gymnasium[classic-control]``).

MuJoCo is imported only when one of its worlds is built (``pip install 'nonstop[mujoco]'``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from typing import Any, Final, Literal

import gymnasium
import numpy as np

from .atari import PREPROCESSED_SHAPE, AreaResize
from .spec import is_int, register

__all__ = ["CONTINUOUS_WORLDS", "make_continuous", "GrayFrames"]

#: id → (tick rate in Hz, β, what it is)
CONTINUOUS_WORLDS: Final = {
    "Pendulum-v1": (20.0, "noop", "Pendulum-v1 swing-up at its natural 20 Hz (dt 0.05 s); β: zero torque"),
    "HalfCheetah-v5": (20.0, "repeat", "MuJoCo HalfCheetah-v5 at its natural 20 Hz (dt 0.05 s); β holds the torques"),
    "Hopper-v5": (125.0, "repeat", "MuJoCo Hopper-v5 at its natural 125 Hz (dt 0.008 s); β holds the torques"),
    "Walker2d-v5": (125.0, "repeat", "MuJoCo Walker2d-v5 at its natural 125 Hz (dt 0.008 s); β holds the torques"),
}
#: the side MuJoCo draws a frame at: twice the preprocessed side, so the area average sees 2×2 pixels
_RENDER_SIDE: Final = 2 * PREPROCESSED_SHAPE[0]


class GrayFrames(gymnasium.ObservationWrapper[np.ndarray, Any, Any], gymnasium.utils.RecordConstructorArgs):
    """Observe ``env.render()``'s RGB frame in grayscale (``uint8``, ITU-R 601 luma in integers, so
    every machine gets the same bytes) instead of the env's own observation; ``env`` must render
    ``rgb_array`` frames of a fixed ``shape`` (height, width).

    >>> class Lamp(gymnasium.Env):
    ...     observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,))
    ...     action_space = gymnasium.spaces.Discrete(1)
    ...     render_mode = "rgb_array"
    ...     def reset(self, *, seed=None, options=None):
    ...         return np.zeros(1, np.float32), {}
    ...     def render(self):
    ...         return np.full((2, 3, 3), (255, 0, 0), np.uint8)  # pure red
    >>> GrayFrames(Lamp(), (2, 3)).reset()[0]
    array([[76, 76, 76],
           [76, 76, 76]], dtype=uint8)
    """

    def __init__(self, env: gymnasium.Env, shape: tuple[int, int]) -> None:
        if env.render_mode != "rgb_array":
            raise ValueError(
                f"GrayFrames needs an env that renders rgb_array frames, got render_mode={env.render_mode!r}"
            )
        gymnasium.utils.RecordConstructorArgs.__init__(self, shape=shape)
        gymnasium.ObservationWrapper.__init__(self, env)
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        frame = np.asarray(self.env.render(), dtype=np.uint32)
        luma = (frame[..., 0] * 299 + frame[..., 1] * 587 + frame[..., 2] * 114 + 500) // 1000
        return luma.astype(np.uint8)


def make_continuous(
    gym_id: str,
    *,
    pixels: bool = False,
    max_episode_steps: int | None = None,
    render_mode: Literal["rgb_array", "human"] | None = None,
) -> gymnasium.Env:
    """Build ``gym_id`` (a key of `CONTINUOUS_WORLDS`) for its realtime world: Gymnasium's own env,
    its state vector observed, or (``pixels=True``) its 84×84 grayscale frame.

    >>> env = make_continuous("Pendulum-v1")
    >>> env.unwrapped.dt * CONTINUOUS_WORLDS["Pendulum-v1"][0]
    1.0
    >>> env.reset(seed=0)[0].shape, env.action_space.shape
    ((3,), (1,))
    """
    if gym_id not in CONTINUOUS_WORLDS:
        raise ValueError(f"no continuous world {gym_id!r}; these are: {', '.join(CONTINUOUS_WORLDS)}")
    if not isinstance(pixels, bool):
        raise TypeError(f"pixels must be true or false, got {type(pixels).__name__} {pixels!r}")
    if max_episode_steps is not None and not (is_int(max_episode_steps) and max_episode_steps >= 1):
        raise ValueError(f"max_episode_steps must be an integer >= 1 or None, got {max_episode_steps!r}")
    if render_mode not in (None, "rgb_array", "human"):
        raise ValueError(f"render_mode must be None, 'rgb_array' or 'human', got {render_mode!r}")
    mujoco = gym_id != "Pendulum-v1"
    if mujoco and importlib.util.find_spec("mujoco") is None:
        raise ModuleNotFoundError(
            f"{gym_id} needs MuJoCo, which is not installed: pip install 'nonstop[mujoco]'", name="mujoco"
        )
    if mujoco:
        _mujoco_warnings_as_python_warnings()
    kwargs: dict[str, Any] = {"max_episode_steps": max_episode_steps} if max_episode_steps is not None else {}
    if not pixels:
        return gymnasium.make(gym_id, render_mode=render_mode, **kwargs)
    if render_mode == "human":
        raise ValueError(
            "pixels=True observes the rendered frames (rgb_array); it does not combine with render_mode='human'"
        )
    if mujoco:
        if not os.environ.get("MUJOCO_GL") and not os.environ.get("DISPLAY"):
            os.environ["MUJOCO_GL"] = "egl"  # off-screen drawing on a machine without a display
        kwargs.update(width=_RENDER_SIDE, height=_RENDER_SIDE)
    env = gymnasium.make(gym_id, render_mode="rgb_array", **kwargs)
    side = _RENDER_SIDE if mujoco else 500  # Pendulum draws 500×500 frames
    return AreaResize(GrayFrames(env, (side, side)), PREPROCESSED_SHAPE)


def _mujoco_warnings_as_python_warnings() -> None:
    """MuJoCo's own warnings (mujoco 3.3+ calls the models' ``settotalmass`` deprecated) as Python
    warnings, shown once, where MuJoCo would print each and append it to ``MUJOCO_LOG.TXT`` in the
    current directory; a handler the user installed is left alone."""
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(message: str) -> None:
    warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def _register() -> None:
    for gym_id, (tick_hz, beta, description) in CONTINUOUS_WORLDS.items():
        register(
            gym_id,
            functools.partial(make_continuous, gym_id),
            family="continuous",
            tick_hz=tick_hz,
            noop_action=None,  # the action space's zeros (`nonstop.realtime.defaults.space_noop`)
            default_beta=beta,
            description=description,
        )


_register()
