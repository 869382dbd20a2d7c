"""RTAC's networks: SAC's squashed-Gaussian actor and a state-value network on the augmented state.

``forward(obs)`` is SAC's (the actor's mean and log standard deviation side by side), so SAC's
worker policy, batching answer and export serve RTAC unchanged. Parameters, in order: the encoder
(none for vectors), the actor, the value network, log α (last, as SAC's progress line reads it).

>>> import torch
>>> nets = RTACNetworks(5, 1, (8,), low=[-2.0], high=[2.0])
>>> nets(torch.zeros(4, 5)).shape, nets.value(torch.zeros(4, 5)).shape, [n for n, _ in nets.named_parameters()][-1]
(torch.Size([4, 2]), torch.Size([4, 1]), 'temperature.log_alpha')
"""

from __future__ import annotations

from collections.abc import Sequence

from nonstop.learning.sacnets import GaussianHead, mlp

__all__ = ["RTACNetworks"]


class RTACNetworks(GaussianHead):
    """The actor π(·|x), the value V(x) and log α, with the Box's scale and bias as buffers (SAC's head,
    `GaussianHead`, with a state value for critic)."""

    def add_critics(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        self.value = mlp(features, 1, hidden)
