"""RTAC, the Real-Time Actor-Critic (Ramstedt & Pal, *Real-Time Reinforcement Learning*, NeurIPS 2019).

The real-time MDP: while the agent computes its next action the world moves under the action it
sent before, so its state is augmented with the action being applied, ``x_t = (s_t, a_t)``, and the
action it picks, ``a_{t+1}``, becomes part of the *next* state. In nonstop the pool knows every
action in flight, so ``x`` is the observation with its action buffer (`nonstop.inference.inflight`),
and the action decided on ``x`` is the newest slot of the next decision's ``x'``. The reward between
two decisions' observations, ``r(x)``, is caused by the actions already in ``x`` (the one just decided
lands later), so RTAC learns a state value ``V(x)`` instead of ``Q(x, a)`` and trains its actor
through the value of the next state, whose action component is the actor's own output. One update,
as the paper's Algorithm 1 and rtrl's ``rtac.py`` write it::

    (x, r, γ_n, x') ~ replay                     # γ_n = γ^ticks, 0 at a terminal
    a ~ π(·|x)  (reparameterised);  x'(a) = x' with its newest buffered action replaced by a
    y   = c·r + γ_n · min_i V̄_i(x'(a)) − α·log π(a|x)        # twin target values, no gradient
    L_V = Σ_i mean (V_i(x) − y)²                             # both values regress on y
    L_π = mean [ α·log π(a|x) − γ_n · min_i V_i(x'(a)) ]     # V's weights held fixed: ∇ flows through a
    L   = λ·L_π + (1 − λ)·L_V,   λ = 0.2                     # ONE loss on ONE network
    θ ← Adam(θ, ∇L);   θ̄ ← (1 − τ)·θ̄ + τ·θ

The network is one (`nonstop.learning.rtacnets.RTACNetworks`, rtrl's ``MlpDouble``): the actor's
hidden layers are a trunk the first value head shares, the second value is its twin, so ∇L trains
the trunk from both losses at once. The actor's term sees ``V`` with its weights held fixed (rtrl's
``model_nograd``). The paper's settings: Adam 3·10⁻⁴, γ 0.99, batch 256, 2 × 256 hidden units,
τ 0.005, reward scale c = 5, entropy scale α 1 (fixed), 10,000 transitions before learning, one
update per step. rtrl also normalises the values with PopArt; nonstop does not (θ is one flat vector
every learner steps alike, and PopArt's statistics would be state outside it): lower ``--reward-scale``
where the returns are large.

Rewards are *observation-framed* (``r`` is the world's reward between the two decisions'
observations: `nonstop.learning.inflight`), which is what makes ``r`` independent of ``a``; where it
is not (an action landing on the next tick, or the sequential scheduler) RTAC is refused at the door
(`RTAC.check_timing`).

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
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from nonstop.learning.optim import write_gradients
from nonstop.learning.sac import SAC, SACConfig

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import Batch
    from nonstop.learning.rtacnets import RTACNetworks, TwinValues

__all__ = [
    "ActorCritic",
    "BufferLayout",
    "with_own_action",
    "RTACLosses",
    "rtac_losses",
    "RTAC",
    "RTACConfig",
    "layout_of",
    "sample_action",
    "frozen_values",
    "refuse_undelayed",
]

#: ``sample(x) -> (a, log π(a|x))``: reparameterised actions in the world's units, ``(B, A)`` and ``(B,)``
Sampler = Callable[["torch.Tensor"], tuple["torch.Tensor", "torch.Tensor"]]
#: ``values(x) -> (B, 2)``: the twin state values V_1(x), V_2(x)
Values = Callable[["torch.Tensor"], "torch.Tensor"]


class ActorCritic(NamedTuple):
    """The actor-critic a loss reads, as functions: ``sample`` draws the actor's reparameterised actions;
    ``values``, ``values_frozen`` (the same weights, held fixed: gradients flow only into the input) and
    ``values_target`` map ``(B, D)`` to the twin values ``(B, 2)``; ``alpha`` is the entropy temperature α."""

    sample: Sampler
    values: Values
    values_frozen: Values
    values_target: Values
    alpha: float


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


class RTACLosses(NamedTuple):
    """One batch's losses (scalars) and the value target ``y`` per transition (for tests)."""

    total: "torch.Tensor"  # L = λ·L_π + (1 − λ)·L_V
    critic: "torch.Tensor"  # L_V
    actor: "torch.Tensor"  # L_π
    target: "torch.Tensor"  # y
    obs: "torch.Tensor"  # x, as the networks took it


def rtac_losses(
    obs: "torch.Tensor",
    reward: "torch.Tensor",
    discount: "torch.Tensor",
    next_obs: "torch.Tensor",
    *,
    nets: ActorCritic,
    layout: BufferLayout,
    reward_scale: float = 1.0,
    actor_weight: float = 0.2,
) -> RTACLosses:
    """The module docstring's losses for one batch of ``nets`` (`ActorCritic`). ``total``'s gradient is
    the update."""
    import torch

    sample, values, values_frozen, values_target, alpha = nets

    action, log_prob = sample(obs)  # a ~ π(·|x)
    log_prob = log_prob.reshape(-1)
    x_next = with_own_action(next_obs, action, layout)  # x'(a)
    with torch.no_grad():
        v_bar = values_target(x_next).min(dim=-1).values
        y = reward_scale * reward + discount * v_bar - alpha * log_prob
    critic = (values(obs) - y[:, None]).pow(2).mean(dim=0).sum()  # Σ_i mean (V_i(x) − y)²
    actor = (alpha * log_prob - discount * values_frozen(x_next).min(dim=-1).values).mean()
    total = actor_weight * actor + (1.0 - actor_weight) * critic
    return RTACLosses(total, critic, actor, y, obs)


def sample_action(
    nets: "TwinValues", x: "torch.Tensor", noise: "torch.Tensor | None" = None
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """A reparameterised action for ``x`` in the world's units and its log-probability there; gradients flow
    into the actor *and* into ``x`` (DCAC's actor loss reaches earlier resampled actions through it).
    ``noise``: ξ (None: drawn; a test passes its own)."""
    a, logp = nets.actor.sample(nets.encoder(x), noise)
    return a * nets.scale + nets.bias, logp - nets.scale.log().sum()


def frozen_values(nets: "TwinValues", x: "torch.Tensor") -> "torch.Tensor":
    """``nets.values(x)`` with its weights held fixed (rtrl's ``model_nograd``): the gradient reaches ``x``
    only, so an actor's loss through V trains the actor and not V."""
    import torch

    from nonstop.learning.rtacnets import ValuesOf

    held = {f"nets.{name}": p.detach() for name, p in nets.named_parameters()}
    out: torch.Tensor = torch.func.functional_call(ValuesOf(nets), held, (x,))
    return out


# ----------------------------------------------------------------------------- the algorithm


def refuse_undelayed(algo: str, delay_ticks: float, scheduler: str, instead: str) -> None:
    """Refuse, in one line, a timing under which the reward between two decisions' observations depends on
    the action just decided: an action landing on the next tick, or the sequential scheduler (RTAC's and
    DCAC's premise). ``instead``: the ``--algo`` that learns there."""
    if scheduler == "sequential":
        raise ValueError(
            f"{algo} needs the world to move on while the model computes; the sequential scheduler applies each "
            f"action before the next observation, so the reward depends on it: use --scheduler max_time, or --algo {instead}"
        )
    ticks = math.ceil(delay_ticks - 1e-9)
    if ticks < 2:
        raise ValueError(
            f"{algo} needs a delay of at least 2 ticks (the reward must not depend on the action just decided); "
            f"this --latency gives {ticks} tick{'' if ticks == 1 else 's'}: use 2t or more, or --algo {instead}"
        )


@dataclass
class RTACConfig(SACConfig):
    """RTAC hyper-parameters: SAC's networks and optimiser, with the paper's settings (Table 2 of Ramstedt
    & Pal 2019) where they differ: a fixed entropy scale, a reward scale, 10,000 transitions first, and
    rtrl's weighting of the actor's and the critic's losses in the one loss."""

    lr: float = field(default=3e-4, metadata={"help": "Adam step size of the actor, the value and α (paper: 3e-4)"})
    alpha: float = field(default=1.0, metadata={"help": "the entropy scale α (the paper's: 1, fixed)"})
    autotune: bool = field(default=False, metadata={"help": "learn α toward the target entropy −|A| instead"})
    learning_starts: int | None = field(
        default=10_000, metadata={"help": "transitions in replay before learning (paper: 10,000)"}
    )
    reward_scale: float = field(
        default=5.0, metadata={"help": "rewards are multiplied by this in the value target (paper: 5)"}
    )
    actor_weight: float = field(
        default=0.2,
        metadata={"help": "λ of the one loss λ·L_π + (1 − λ)·L_V (rtrl's and the DCAC code's loss_alpha: 0.2)"},
    )
    buffer_slots: int = field(
        default=0,
        metadata={"help": "K, the action buffer's slots in the observation (the run sets it from the latency)"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if not (self.reward_scale > 0 and math.isfinite(self.reward_scale)):
            raise ValueError(f"{name}.reward_scale must be a positive number, got {self.reward_scale!r}")
        if not (isinstance(self.actor_weight, (int, float)) and 0.0 < self.actor_weight < 1.0):
            raise ValueError(f"{name}.actor_weight must be in (0, 1), got {self.actor_weight!r}")
        if not (isinstance(self.buffer_slots, int) and self.buffer_slots >= 0):
            raise ValueError(f"{name}.buffer_slots must be an integer >= 0, got {self.buffer_slots!r}")

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
    """The Real-Time Actor-Critic (the module docstring's update): one network, the actor and a state value
    on a shared trunk with a twin value, on the observation with its actions in flight."""

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
        refuse_undelayed("RTAC", delay_ticks, scheduler, instead="sac")

    @property
    def layout(self) -> BufferLayout:
        return layout_of(self.obs_shape, self.action_dim, self.cfg.buffer_slots, "RTAC")

    def _networks_class(self) -> Any:
        from nonstop.learning.rtacnets import RTACNetworks

        return RTACNetworks

    def losses(
        self, online: "RTACNetworks", target: "RTACNetworks", batch: "Batch", noise: "torch.Tensor | None" = None
    ) -> RTACLosses:
        """`rtac_losses` of one replayed batch on these networks. ``noise``: ξ of the actor's sample."""
        from nonstop.learning.algos import to_tensor

        device = online.log_alpha.device
        obs, next_obs = to_tensor(batch.obs, device), to_tensor(batch.next_obs, device)
        reward, discount = to_tensor(batch.reward, device), to_tensor(batch.discount, device)
        return rtac_losses(
            obs,
            reward,
            discount,
            next_obs,
            nets=ActorCritic(
                sample=lambda x: sample_action(online, x, noise),
                values=online.values,
                values_frozen=lambda x: frozen_values(online, x),
                values_target=target.values,
                alpha=float(online.log_alpha.detach().exp()),
            ),
            layout=self.layout,
            reward_scale=self.cfg.reward_scale,
            actor_weight=self.cfg.actor_weight,
        )

    def backward(
        self, online_module: "torch.nn.Module", target_module: "torch.nn.Module", batch: "Batch"
    ) -> "torch.Tensor":
        online, target = cast("RTACNetworks", online_module), cast("RTACNetworks", target_module)
        out = self.losses(online, target, batch)
        alpha_loss = self.temperature_loss(online, out.obs)
        write_gradients(online, [(out.total + alpha_loss, list(online.parameters()))])
        return out.critic.detach()

    def temperature_loss(self, online: "TwinValues", x: "torch.Tensor") -> "torch.Tensor":
        """J_α = −α·(log π(a|x) + H̄) at states ``x`` with ``--autotune`` (its gradient reaches log α
        alone: added to the one loss, it is log α's own), else 0."""
        import torch

        if not self.cfg.autotune:
            return torch.zeros((), device=online.log_alpha.device)
        with torch.no_grad():
            logp = sample_action(online, x)[1]
        return (-online.log_alpha.exp() * (logp + self.target_entropy)).mean()
