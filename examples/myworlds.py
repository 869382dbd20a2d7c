"""A world of your own, as `nonstop train --env myworlds:Target-v0` finds it (docs/your-model.md).

Target-v0: a point on a plane steps up, down, left or right, or stays (Discrete(5)), towards a target
drawn at each reset; each tick's reward is minus the distance left, so an episode of 50 ticks earns
about −50 by wandering and about −10 by heading straight for the target and staying there. It declares
``render_fps`` 30: nonstop's world ticks 30 times a second.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

#: (dx, dy) of each action: stay, up, down, left, right
MOVES = np.array([(0, 0), (0, 1), (0, -1), (-1, 0), (1, 0)], dtype=np.float32) * 0.1


class Target(gymnasium.Env[np.ndarray, int]):
    metadata = {"render_modes": [], "render_fps": 30}

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(len(MOVES))
        self._at = np.zeros(2, np.float32)
        self._target = np.zeros(2, np.float32)

    def _obs(self) -> np.ndarray:
        return np.concatenate([self._at, self._target])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._at = np.zeros(2, np.float32)
        self._target = self.np_random.uniform(-0.8, 0.8, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._at = np.clip(self._at + MOVES[int(action)], -1.0, 1.0)
        return self._obs(), -float(np.linalg.norm(self._at - self._target)), False, False, {}


gymnasium.register("Target-v0", entry_point=f"{__name__}:Target", max_episode_steps=50)
