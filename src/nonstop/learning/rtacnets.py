"""RTAC's and DCAC's networks: SAC's squashed-Gaussian actor and twin *state* values on the augmented state.

``forward(obs)`` is SAC's (the actor's mean and log standard deviation side by side), so SAC's worker
policy, batching answer and export serve both unchanged. Parameters, in order: the encoder (none for
vectors), the actor, the value networks, log α (last, as SAC's progress line reads it).

`RTACNetworks` is Ramstedt & Pal's shared network (rtrl's ``MlpDouble``): the actor's hidden layers are
a trunk that the first value head also reads, so the one weighted loss trains the trunk from both the
actor and the critic; the second value is a network of its own (the twin of the clipped double-V
target). `DCACNetworks` is Bouteiller et al.'s: an actor and two value networks, nothing shared.

>>> import torch
>>> nets = RTACNetworks(5, 1, (8,), low=[-2.0], high=[2.0])
>>> nets(torch.zeros(4, 5)).shape, nets.values(torch.zeros(4, 5)).shape
(torch.Size([4, 2]), torch.Size([4, 2]))
>>> [n for n, _ in nets.named_parameters()][-1], DCACNetworks(5, 1, (8,), low=[-2.0], high=[2.0]).values(torch.zeros(3, 5)).shape
('temperature.log_alpha', torch.Size([3, 2]))
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from nonstop.learning.sacupdate import GaussianHead, mlp

__all__ = ["RTACNetworks", "DCACNetworks", "TwinValues", "ValuesOf"]


class TwinValues(GaussianHead):
    """A `GaussianHead` whose critics are two state values V_1(x), V_2(x): `values` gives both, ``(B, 2)``."""

    def values(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class RTACNetworks(TwinValues):
    """The actor π(·|x) and V_1(x) on one trunk (the actor's hidden layers), V_2(x) on its own, and log α."""

    def add_critics(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        width = hidden[-1] if hidden else features
        self.value_head = nn.Linear(width, 1)  # V_1 reads the actor's trunk
        self.value_twin = mlp(features, 1, hidden)  # V_2: a network of its own

    def trunk(self, f: torch.Tensor) -> torch.Tensor:
        """The hidden features the actor's head and V_1 share (the actor's layers but its last)."""
        out: torch.Tensor = self.actor.net[:-1](f)
        return out

    def values(self, x: torch.Tensor) -> torch.Tensor:
        f = self.encoder(x)
        return torch.cat([self.value_head(self.trunk(f)), self.value_twin(f)], dim=-1)


class DCACNetworks(TwinValues):
    """The actor π(·|x), two value networks V_1(x), V_2(x), and log α: nothing shared."""

    def add_critics(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        self.v1 = mlp(features, 1, hidden)
        self.v2 = mlp(features, 1, hidden)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        f = self.encoder(x)
        return torch.cat([self.v1(f), self.v2(f)], dim=-1)


class ValuesOf(nn.Module):
    """``nets.values`` as a module's ``forward`` (what `torch.func.functional_call` calls with other weights)."""

    def __init__(self, nets: TwinValues) -> None:
        super().__init__()
        self.nets = nets

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nets.values(x)
