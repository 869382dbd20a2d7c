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

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from nonstop.learning.sac import SAC, SACConfig, write_gradients

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import Batch
    from nonstop.learning.rtacnets import RTACNetworks

__all__ = ["BufferLayout", "with_own_action", "rtac_losses", "RTAC", "RTACConfig", "layout_of"]


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


# ----------------------------------------------------------------------------- the algorithm


@dataclass
class RTACConfig(SACConfig):
    """RTAC hyper-parameters: SAC's networks and optimiser, with the paper's settings (Table 2 of Ramstedt
    & Pal 2019) where they differ: a fixed entropy scale, a reward scale, 10,000 transitions first."""

    lr: float = field(default=3e-4, metadata={"help": "Adam step size of the actor, the value and α (paper: 3e-4)"})
    alpha: float = field(default=1.0, metadata={"help": "the entropy scale α (the paper's: 1, fixed)"})
    autotune: bool = field(default=False, metadata={"help": "learn α toward the target entropy −|A| instead"})
    learning_starts: int | None = field(
        default=10_000, metadata={"help": "transitions in replay before learning (paper: 10,000)"}
    )
    reward_scale: float = field(
        default=5.0, metadata={"help": "rewards are multiplied by this in the value target (paper: 5)"}
    )
    buffer_slots: int = field(
        default=0,
        metadata={"help": "K, the action buffer's slots in the observation (the run sets it from the latency)"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.reward_scale > 0 and math.isfinite(self.reward_scale)):
            raise ValueError(f"RTACConfig.reward_scale must be a positive number, got {self.reward_scale!r}")
        if not (isinstance(self.buffer_slots, int) and self.buffer_slots >= 0):
            raise ValueError(f"RTACConfig.buffer_slots must be an integer >= 0, got {self.buffer_slots!r}")

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "RTAC":
        return RTAC(self, obs_shape, action_space)


def layout_of(obs_shape: tuple[int, ...], action_dim: int, k: int, algo: str) -> BufferLayout:
    """Where the action buffer sits in an observation of ``obs_shape`` (K slots of ``action_dim`` + 2)."""
    if k < 1 or len(obs_shape) != 1 or obs_shape[0] <= k * (action_dim + 2):
        raise ValueError(
            f"{algo} learns on vector observations carrying the actions in flight; got observations "
            f"{obs_shape} with {k} buffer slots (the run sets them: train it with nonstop train)"
        )
    return BufferLayout(obs_dim=obs_shape[0] - k * (action_dim + 2), action_width=action_dim, k=k)


class RTAC(SAC):
    """The Real-Time Actor-Critic (the module docstring's update): SAC's actor, a state-value network
    instead of twin Q-networks, on the observation with its actions in flight."""

    name = "rtac"
    config_class = RTACConfig
    cfg: RTACConfig
    #: the run gives its actor the actions in flight whatever --delay-aware says
    needs_action_buffer = True
    #: transitions run between two decisions' observations (`nonstop.learning.inflight`)
    reward_framing = "observation"

    @classmethod
    def check_timing(cls, delay_ticks: float, scheduler: str) -> None:
        """RTAC's premise: the reward between two decisions' observations does not depend on the action
        just decided, which holds only when that action lands 2 ticks on or later (and never when the
        sequential scheduler applies each action before the next observation)."""
        if scheduler == "sequential":
            raise ValueError(
                "RTAC needs the world to move on while the model computes; the sequential scheduler applies each "
                "action before the next observation, so the reward depends on it: use --scheduler max_time"
            )
        ticks = math.ceil(delay_ticks - 1e-9)
        if ticks < 2:
            raise ValueError(
                f"RTAC needs a delay of at least 2 ticks (the reward must not depend on the action just decided); "
                f"this --latency gives {ticks} tick{'' if ticks == 1 else 's'}: use 2t or more, or --algo sac"
            )

    @property
    def layout(self) -> BufferLayout:
        return layout_of(self.obs_shape, self.action_dim, self.cfg.buffer_slots, "RTAC")

    def build_model(self) -> "torch.nn.Module":
        from nonstop.learning.rtacnets import RTACNetworks

        encoder, features = self._encoder()
        return RTACNetworks(
            features,
            self.action_dim,
            self.cfg.hidden,
            low=self.action_space.low.tolist(),
            high=self.action_space.high.tolist(),
            encoder=encoder,
            alpha=self.cfg.alpha,
        )

    def backward(
        self, online_module: "torch.nn.Module", target_module: "torch.nn.Module", batch: "Batch"
    ) -> "torch.Tensor":
        from nonstop.learning.algos import to_tensor

        online, target = cast("RTACNetworks", online_module), cast("RTACNetworks", target_module)
        device = online.log_alpha.device
        obs, next_obs = to_tensor(batch.obs, device), to_tensor(batch.next_obs, device)
        reward, discount = to_tensor(batch.reward, device), to_tensor(batch.discount, device)
        alpha = float(online.log_alpha.detach().exp())
        sample = online.sample_world  # the buffer holds actions as the world takes them
        critic, actor = rtac_losses(
            obs,
            reward,
            discount,
            next_obs,
            sample=sample,
            value=lambda x: online.value(online.encoder(x)).squeeze(-1),
            value_target=lambda x: target.value(target.encoder(x)).squeeze(-1),
            alpha=alpha,
            layout=self.layout,
            reward_scale=self.cfg.reward_scale,
        )
        blocks = [
            (critic, [*online.encoder.parameters(), *online.value.parameters()]),
            (actor, list(online.actor.parameters())),
        ]
        if self.cfg.autotune:
            with_logp = sample(obs)[1].detach()
            blocks.append(((-online.log_alpha.exp() * (with_logp + self.target_entropy)).mean(), [online.log_alpha]))
        write_gradients(online, blocks)
        return critic.detach()
