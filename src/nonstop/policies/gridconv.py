"""A small convolutional Q-network for the grid windows many-agent worlds give each agent (MAgent2's
13×13×5 in ``multi/battle``): two 3×3 convolutions, one hidden layer, a score per action. The
observation comes channels-last, as the world gives it (``(b, H, W, C)`` floats), and is laid out
channels-first inside.

>>> import torch
>>> net = GridConv((13, 13, 5), 21)
>>> net(torch.zeros(4, 13, 13, 5)).shape, sum(p.numel() for p in net.parameters())
(torch.Size([4, 21]), 87429)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["GridConv"]


class GridConv(nn.Module):
    """``(b, H, W, C)`` grid windows → ``(b, n_actions)`` scores (see the module docstring)."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, *, channels: int = 16, hidden: int = 64) -> None:
        super().__init__()
        if len(obs_shape) != 3 or min(obs_shape[:2]) < 5:
            raise ValueError(f"GridConv takes (H, W, C) windows of at least 5×5, got {tuple(obs_shape)!r}")
        for name, value in (("n_actions", n_actions), ("channels", channels), ("hidden", hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        h, w, c = (int(v) for v in obs_shape)
        self.body = nn.Sequential(
            nn.Conv2d(c, channels, 3),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(channels * (h - 4) * (w - 4), hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.permute(0, 3, 1, 2))
