"""A world of the user's own: registered with Gymnasium when this module is imported.

Target1D-v0: a point on a line walks left, stays or walks right (Discrete(3)) towards a target drawn
at each reset; the reward is minus the distance left. It declares ``render_fps`` 20, its tick rate.
Each import appends this process's id to the file named by ``$USERWORLD_IMPORT_LOG`` (if set), so a
test can see which processes imported the module.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium
import numpy as np

if os.environ.get("USERWORLD_IMPORT_LOG"):
    with open(os.environ["USERWORLD_IMPORT_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")


class Target1D(gymnasium.Env[np.ndarray, int]):
    metadata = {"render_modes": [], "render_fps": 20}

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(3)
        self._x = self._target = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self._x, self._target], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._x, self._target = 0.0, float(self.np_random.uniform(-0.8, 0.8))
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._x = float(np.clip(self._x + 0.1 * (int(action) - 1), -1.0, 1.0))
        return self._obs(), -abs(self._x - self._target), False, False, {}


gymnasium.register("Target1D-v0", entry_point=f"{__name__}:Target1D", max_episode_steps=40)
