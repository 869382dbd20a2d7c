"""RTAC, the Real-Time Actor-Critic (Ramstedt & Pal, *Real-Time Reinforcement Learning*, NeurIPS 2019).

The real-time MDP: while the agent computes its next action the world moves under the action it
sent before, so its state is augmented with the action being applied, ``x_t = (s_t, a_t)``, and the
action it picks, ``a_{t+1}``, becomes part of the *next* state. In nonstop the pool knows every
action in flight, so ``x`` is the observation with its action buffer (`nonstop.inference.inflight`),
and the action decided on ``x`` is the newest slot of the next decision's ``x'``. The reward between
two decisions' observations does not depend on the action just decided (it lands later), so RTAC
learns a state-value function ``V(x)`` instead of ``Q(x, a)``, and the actor's gradient flows
through ``V`` of the next augmented state, whose action component is the actor's own output::

    a ~ π(·|x)  (reparameterised),   x'(a) = x' with its newest buffered action replaced by a
    critic:  y = r + γ_n · V̄(x'(a)) − α · log π(a|x)           (no gradient; γ_n = 0 at a terminal)
             L_V = ½ (V(x) − y)²
    actor:   L_π = α · log π(a|x) − γ_n · V(x'(a))              (the KL to exp(γ V(x'(·))/α), up to a constant)

Rewards are *observation-framed* (``r`` is the world's reward between the two decisions'
observations: `nonstop.learning.inflight`), which is what makes ``r`` independent of ``a``. The
paper's settings: Adam 3·10⁻⁴, γ 0.99, batch 256, 2 × 256 hidden units, target smoothing 0.005,
reward scale 5, entropy scale α 1, 10,000 transitions before learning, one update per step.

>>> import torch
>>> layout = BufferLayout(obs_dim=1, action_width=1, k=1)
>>> x_next = torch.tensor([[0.5, 9.0, 2.0, 1.0]])  # observation 0.5, then the slot: action 9, due in 2, age 1
>>> with_own_action(x_next, torch.tensor([[0.25]]), layout).tolist()
[[0.5, 0.25, 2.0, 1.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["BufferLayout", "with_own_action", "rtac_losses"]


@dataclass(frozen=True)
class BufferLayout:
    """Where the action buffer sits in an augmented observation: ``obs_dim`` world numbers, then ``k``
    slots of ``action_width`` action numbers, ticks to apply and age (newest slot first)."""

    obs_dim: int
    action_width: int
    k: int

    @property
    def slot_width(self) -> int:
        return self.action_width + 2

    def action_at(self, slot: int) -> slice:
        """The columns of slot ``slot``'s action."""
        start = self.obs_dim + slot * self.slot_width
        return slice(start, start + self.action_width)

    def due_at(self, slot: int) -> int:
        """The column of slot ``slot``'s ticks to apply."""
        return self.obs_dim + slot * self.slot_width + self.action_width


def with_own_action(x: "torch.Tensor", action: "torch.Tensor", layout: BufferLayout, slot: int = 0) -> "torch.Tensor":
    """``x`` with the action in buffer slot ``slot`` replaced by ``action`` (gradients flow into ``action``)."""
    import torch

    cols = layout.action_at(slot)
    return torch.cat([x[:, : cols.start], action, x[:, cols.stop :]], dim=1)


def rtac_losses(
    obs: "torch.Tensor",
    reward: "torch.Tensor",
    discount: "torch.Tensor",
    next_obs: "torch.Tensor",
    *,
    sample: Callable[["torch.Tensor"], tuple["torch.Tensor", "torch.Tensor"]],
    value: Callable[["torch.Tensor"], "torch.Tensor"],
    value_target: Callable[["torch.Tensor"], "torch.Tensor"],
    alpha: float,
    layout: BufferLayout,
    reward_scale: float = 1.0,
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """``(L_V, L_π)`` of one batch (see the module docstring). ``sample(x) -> (a, log π(a|x))`` draws
    reparameterised actions; ``value`` and ``value_target`` map ``(B, D)`` to ``(B,)`` or ``(B, 1)``.
    The actor loss also reaches ``value``'s parameters: apply each loss's gradient to its own network."""
    import torch

    action, log_prob = sample(obs)
    x_next = with_own_action(next_obs, action, layout)
    with torch.no_grad():
        y = reward_scale * reward + discount * value_target(x_next).reshape(-1) - alpha * log_prob.reshape(-1)
    critic_loss = 0.5 * (value(obs).reshape(-1) - y).pow(2).mean()
    actor_loss = (alpha * log_prob.reshape(-1) - discount * value(x_next).reshape(-1)).mean()
    return critic_loss, actor_loss
