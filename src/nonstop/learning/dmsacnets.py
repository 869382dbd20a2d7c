"""DMSAC's networks and losses (`nonstop.learning.dmsac` has the update's equations and the algorithm's place
in a run): SAC's actor and twin critics on the world's state, the model of one tick of the world, the rollout a
worker runs through the actions in flight, and the exported actor.

>>> import torch
>>> nets = DMSACNetworks(obs_dim=2, action_width=1, k=3, hidden=(8,), low=[-1.0], high=[1.0])
>>> x = torch.tensor([[0.5, -0.5] + [0.0, 0.0, 0.0] * 3])  # nothing in flight: the observation is the state
>>> bool(torch.equal(nets.present_state(x), x[:, :2])), nets(x).shape
(True, torch.Size([1, 2]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from nonstop.learning.algos import to_tensor
from nonstop.learning.sacupdate import SACNetworks, landing_batch, mlp, soft_actor_losses, twin_critic_loss

if TYPE_CHECKING:
    from nonstop.learning.replay import Batch

__all__ = ["Rollout", "DMSACNetworks", "PresentActor", "DMSACLosses", "dmsac_losses"]


class Rollout(nn.Module):
    """f_φ(s, a) = s + Δ_φ(s, a), one tick of the world (``a`` in the world's units, as the buffer holds it),
    and the rollout a worker runs with it through the ``k`` slots of actions in flight an observation of
    ``obs_dim`` numbers carries (`forward`; `DMSACNetworks` sets ``k``)."""

    __constants__ = ["obs_dim", "action_width", "k"]

    def __init__(self, obs_dim: int, action_width: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.obs_dim, self.action_width, self.k = int(obs_dim), int(action_width), 0
        self.dynamics = mlp(obs_dim + action_width, obs_dim, hidden)  # Δ_φ

    def step(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """f_φ(s, a): the state one tick after ``a`` acted on ``s``."""
        return s + self.dynamics(torch.cat([s, a], dim=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ŝ: the observation of tick ``t`` in ``x`` carried through the actions in flight its buffer holds,
        to the state at ``t + H``, H the largest ticks-to-apply among them (0 when none is in flight): at each
        tick ``t + u`` the action due then acts (the newest slot due at it; where none is, the one applied
        before holds). A slot is real where its age, ticks since its observation, is at least 1."""
        obs_dim, width, k = self.obs_dim, self.action_width, self.k
        s = x[:, :obs_dim]
        slots = x[:, obs_dim : obs_dim + k * (width + 2)].reshape(-1, k, width + 2)
        actions = slots[:, :, :width]
        due, real = slots[:, :, width], slots[:, :, width + 1] > 0.5
        rows = torch.arange(x.shape[0], device=x.device)
        horizon = torch.where(real, due, torch.zeros_like(due)).amax(dim=1)  # H
        landed = real & (due < 0.5)
        # argmax over a mask picks its first True: the newest slot (slots are newest first)
        held = actions[rows, landed.to(torch.float32).argmax(dim=1)] * landed.any(dim=1, keepdim=True).to(s.dtype)
        for u in range(1, k + 1):
            if bool((horizon < u - 0.5).all()):
                break
            due_now = real & ((due - float(u)).abs() < 0.5)
            a_u = torch.where(
                due_now.any(dim=1, keepdim=True), actions[rows, due_now.to(torch.float32).argmax(dim=1)], held
            )
            s = torch.where((horizon > u - 0.5).unsqueeze(1), self.step(s, a_u), s)
            held = a_u
        return s


class DMSACNetworks(SACNetworks):
    """SAC's networks on the world's ``obs_dim`` numbers, and the model of the world with its rollout
    (`Rollout`), registered after the critics and before log α. ``forward(x)`` is what a worker computes on
    an observation with ``k`` slots of the actions in flight: the actor's mean and log σ at the predicted state."""

    def __init__(
        self,
        obs_dim: int,
        action_width: int,
        k: int,
        hidden: Sequence[int],
        *,
        low: Sequence[float],
        high: Sequence[float],
        alpha: float = 1.0,
    ) -> None:
        super().__init__(obs_dim, action_width, hidden, low=low, high=high, alpha=alpha)
        self.obs_dim = int(obs_dim)
        self.rollout.k = int(k)

    def add_critics(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        super().add_critics(features, action_dim, hidden)
        self.rollout = Rollout(features, action_dim, hidden)

    def model_parameters(self) -> list[nn.Parameter]:
        """φ's block of θ."""
        return list(self.rollout.parameters())

    def present_state(self, x: torch.Tensor) -> torch.Tensor:
        """ŝ, the state the action decided on ``x`` will act on (`Rollout.forward`)."""
        return self.rollout(x)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.actor(self.rollout(obs))
        return torch.cat([mean, log_std], dim=-1)


class PresentActor(nn.Module):
    """The evaluation actor `nonstop export` scripts: ``tanh(μ(ŝ)) · scale + bias`` at the predicted state."""

    def __init__(self, nets: DMSACNetworks) -> None:
        super().__init__()
        self.actor, self.rollout = nets.actor, nets.rollout
        # fixed numbers (no gradient), held as parameters so TorchScript and mypy both see tensors
        self.scale = nn.Parameter(nets.scale.clone(), requires_grad=False)
        self.bias = nn.Parameter(nets.bias.clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, _ = self.actor(self.rollout(x))
        return torch.tanh(mean) * self.scale + self.bias


class DMSACLosses(NamedTuple):
    critic: torch.Tensor
    actor: torch.Tensor
    alpha: torch.Tensor
    model: torch.Tensor
    target: torch.Tensor  # y, per transition (for tests)


def dmsac_losses(
    online: DMSACNetworks,
    target: DMSACNetworks,
    batch: Batch,
    *,
    target_entropy: float,
    on_prediction: bool = False,
    noise_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> DMSACLosses:
    """`nonstop.learning.dmsac`'s losses for one batch sampled with its landing states. ``on_prediction``: the
    actor reads the state the model predicts from the observation each action was decided on, ŝ(x), as it
    acts, and is valued at the true state (else it reads the true state). ``noise_next``, ``noise``: ξ of
    ã', ã (None: drawn)."""
    s, s_next, a, reward, discount, log_scale, alpha = landing_batch(online, batch, online.obs_dim, "DMSAC")
    device = online.log_alpha.device

    with torch.no_grad():
        if on_prediction:  # what the actor reads: ŝ(x), ŝ(x')
            seen = online.rollout(to_tensor(batch.obs, device))
            seen_next = online.rollout(to_tensor(batch.next_obs, device))
        else:
            seen, seen_next = s, s_next
        a_next, logp_next = online.actor.sample(seen_next, noise_next)  # ã' ~ π(·|s') (or π(·|ŝ(x')))
        q_next = torch.min(target.q1(s_next, a_next), target.q2(s_next, a_next))
        y = reward + discount * (q_next - alpha * (logp_next - log_scale))

    critic = twin_critic_loss(online, s, a, y)  # J_Q
    if on_prediction:
        a_pi, logp = online.actor.sample(seen, noise)  # ã ~ π(·|ŝ(x)), valued at s
        logp = logp - log_scale
        actor = (alpha * logp - torch.min(online.q1(s, a_pi), online.q2(s, a_pi))).mean()
        temperature = (-online.log_alpha.exp() * (logp.detach() + target_entropy)).mean()
    else:
        actor, temperature = soft_actor_losses(online, s, target_entropy, noise)  # J_π, J_α
    one_tick = to_tensor(batch.n_ticks, device) == 1  # the next action landed a tick later: s' is f(s, a)
    change = (s_next - s)[one_tick]
    predicted = online.rollout.dynamics(torch.cat([s, to_tensor(batch.action, device)], dim=1))[one_tick]
    if len(change) >= 2:
        spread = change.var(dim=0, unbiased=False).clamp_min(1e-6)  # each dimension in its own units
        model = ((predicted - change).pow(2) / spread).mean()  # J_f
    else:  # no spread to measure the error in: φ rests this update
        model = predicted.sum() * 0.0
    return DMSACLosses(critic, actor, temperature, model, y)
