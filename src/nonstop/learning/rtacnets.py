"""RTAC's networks: SAC's squashed-Gaussian actor and a state-value network on the augmented state.

``forward(obs)`` is SAC's (the actor's mean and log standard deviation side by side), so SAC's
worker policy, batching answer and export serve RTAC unchanged. Parameters, in order: the encoder
(none for vectors), the actor, the value network, log α (last, as SAC's progress line reads it).

>>> nets = RTACNetworks(5, 1, (8,), low=[-2.0], high=[2.0])
>>> nets(torch.zeros(4, 5)).shape, nets.value(torch.zeros(4, 5)).shape, [n for n, _ in nets.named_parameters()][-1]
(torch.Size([4, 2]), torch.Size([4, 1]), 'temperature.log_alpha')
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from nonstop.learning.sacnets import GaussianActor, Temperature, mlp

__all__ = ["RTACNetworks"]


class RTACNetworks(nn.Module):
    """The actor π(·|x), the value V(x) and log α, with the Box's scale and bias as buffers."""

    scale: torch.Tensor  # buffers: the Box's half-width and centre
    bias: torch.Tensor

    def __init__(
        self,
        features: int,
        action_dim: int,
        hidden: Sequence[int],
        *,
        low: Sequence[float],
        high: Sequence[float],
        encoder: nn.Module | None = None,
        alpha: float = 1.0,
    ) -> None:
        super().__init__()
        self.encoder = encoder if encoder is not None else nn.Flatten()
        self.actor = GaussianActor(features, action_dim, hidden)
        self.value = mlp(features, 1, hidden)
        self.temperature = Temperature(alpha)
        lo, hi = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (hi - lo) / 2)
        self.register_buffer("bias", (hi + lo) / 2)

    @property
    def log_alpha(self) -> nn.Parameter:
        return self.temperature.log_alpha

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.actor(self.encoder(obs))
        return torch.cat([mean, log_std], dim=-1)
