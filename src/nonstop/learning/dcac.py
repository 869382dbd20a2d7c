"""DCAC, the Delay-Correcting Actor-Critic (Bouteiller, Ramstedt, Beltrame, Pal, Binas, *Reinforcement
Learning with Random Delays*, ICLR 2021): a soft actor-critic whose critic is a *state* value of the
augmented state ``x = (s, action buffer)``, with multi-step targets made on-policy by *partial
trajectory resampling*.

A replayed sub-trajectory ``x_0, a_0, r_0, x_1, …, x_n`` was collected by an older policy. Its rewards
``r_0 … r_{n−1}`` (observation-framed: the world's rewards between two decisions' observations) were
caused by actions already in flight at ``x_0``, as long as none of ``a_0 … a_{n−1}`` had landed by
``x_n``'s observation. Those actions then only sit in the later states' buffers, so they can be
replaced in hindsight by actions of the *current* policy, and the n-step soft value of ``x_0`` along
the resampled states ``x̃_j`` is on-policy. One update, as the paper's equations (its n-step value
estimate v̂, the critic loss and the actor loss through the resampled buffer) and its code write it::

    (x_0, r_0, γ_0, x_1, …, x_n) ~ replay               # runs of consecutive transitions, n per run
    x̃_0 = x_0;   ã_j ~ π(·|x̃_j)  (reparameterised);   x̃_{j+1} = x_{j+1} with a_0 … a_j replaced by ã_0 … ã_j
    D_0 = 1,  D_{j+1} = D_j·γ_j                        # γ_j = γ^ticks, 0 at a terminal
    y   = Σ_{j<n} D_j·(c·r_j − α·log π(ã_j|x̃_j)) + D_n·min_i V̄_i(x̃_n)         # no gradient
    L_V = Σ_i mean (V_i(x_0) − y)²
    L_π = −mean [ Σ_{j<n} D_j·(−α·log π(ã_j|x̃_j)) + D_n·min_i V_i(x̃_n) ]      # V's weights held fixed
    L   = λ·L_π + (1 − λ)·L_V,   λ = 0.2;   θ ← Adam(θ, ∇L);   θ̄ ← (1 − τ)·θ̄ + τ·θ

``L_π``'s gradient flows through every resampled action: into ``V(x̃_n)``'s buffer, and into each later
``ã_j`` whose state ``x̃_j`` holds the earlier ones. The networks (`nonstop.learning.rtacnets.DCACNetworks`)
are an actor and two value networks, stepped together by the one loss; settings are the paper's
(Adam 3·10⁻⁴, batch 256, τ 0.005, reward scale c = 5, α = 1 fixed, λ = 0.2).

In the buffer encoding (`nonstop.inference.inflight`, newest slot first) the action decided on
``x_m`` sits in slot ``j − 1 − m`` of ``x_j``. `dcac_horizon` checks that against the replayed actions
themselves and stops ``n`` where a resampled action would already have been applied (its ticks to
apply < 1 at ``x_n``), where the chain of transitions breaks, or at ``K``. A run whose own action had
already landed at ``x_1`` (``n = 0``) gives no target and is left out of the batch's means; a model
whose actions always land on the next tick gives none, so DCAC is refused there at the door as RTAC is
(`DCAC.check_timing`; `nonstop.learning.dcacq`'s Q-critic keeps ``a_0`` and learns at any delay).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from nonstop.learning.rtac import (
    RTAC,
    ActorCritic,
    BufferLayout,
    RTACConfig,
    Sampler,
    frozen_values,
    layout_of,
    refuse_undelayed,
    sample_action,
    with_own_action,
)
from nonstop.learning.optim import write_gradients

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.rtacnets import DCACNetworks

__all__ = [
    "SubTrajectories",
    "sample_subtrajectories",
    "dcac_horizon",
    "resample",
    "DCACLosses",
    "dcac_losses",
    "DCAC",
    "DCACConfig",
]


class SubTrajectories(NamedTuple):
    """``batch`` runs of ``n`` consecutive replayed transitions: states ``(B, n + 1, D)``, actions
    ``(B, n, A)``, rewards and discounts ``(B, n)``, and ``linked`` ``(B, n)``: whether transition
    ``j`` continues the chain (its ``s`` is transition ``j − 1``'s ``s'``; always true at ``j = 0``)."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    linked: np.ndarray


def sample_subtrajectories(
    replay: "ReplayBuffer", batch_size: int, n: int, rng: np.random.Generator
) -> SubTrajectories | None:
    """Runs of ``n`` consecutive transitions drawn uniformly from the replay (None until it holds ``n``).
    A run whose frames or slots the writer recycled while they were copied is dropped."""
    from nonstop.realtime.atomics import ACQUIRE, fence

    count = replay.transitions_written
    size = min(count, replay.capacity - 1)
    if size < n:
        return None
    first = count - size
    nums = first + rng.integers(0, size - n + 1, batch_size)[:, None] + np.arange(n)[None, :]
    idx = nums % replay.capacity
    c = replay.cols
    s_f, n_f = c["s_frame"][idx], c["next_frame"][idx]
    action, reward, discount = c["action"][idx], c["reward"][idx], c["discount"][idx]
    frames = np.concatenate([s_f, n_f[:, -1:]], axis=1)
    obs = replay.frames[frames % replay.frame_capacity]
    fence(ACQUIRE)
    ok = (replay.frame_id[frames % replay.frame_capacity] == frames).all(axis=1)
    ok &= nums[:, 0] >= replay.transitions_written - replay.capacity + 1
    linked = np.ones_like(s_f, dtype=bool)
    linked[:, 1:] = s_f[:, 1:] == n_f[:, :-1]
    keep = np.flatnonzero(ok)
    if keep.size == 0:
        return None
    if action.ndim == 2:
        action = action[:, :, None].astype(np.float32)  # Discrete indices: one column
    return SubTrajectories(
        obs[keep].astype(np.float32), action[keep].astype(np.float32), reward[keep], discount[keep], linked[keep]
    )


def dcac_horizon(
    obs: "torch.Tensor",
    action: "torch.Tensor",
    linked: "torch.Tensor",
    layout: BufferLayout,
    n_max: int,
    *,
    first: int = 0,
) -> "torch.Tensor":
    """Per run, the longest ``n ≤ n_max`` over which resampling from ``a_first`` on is exact: for every
    ``1 ≤ j ≤ n`` the run is linked up to ``x_j``, slot ``j − 1 − m`` of ``x_j`` holds the replayed ``a_m``
    (m < j), and every resampled one (m ≥ ``first``) is still ≥ 1 tick from being applied. ``(B,)`` int64.
    ``first = 0`` (DCAC's state value: ``a_0`` resampled too) gives 0 where ``a_0`` had landed by ``x_1``;
    ``first = 1`` (`nonstop.learning.dcacq`'s Q(x_0, a_0)) is at least 1."""
    import torch

    batch = obs.shape[0]
    n = torch.full((batch,), first, dtype=torch.int64, device=obs.device)
    alive = torch.ones(batch, dtype=torch.bool, device=obs.device)
    for j in range(first + 1, min(n_max, layout.k, action.shape[1]) + 1):
        ok = linked[:, j - 1].bool().clone()
        for m in range(j):
            slot = j - 1 - m
            ok &= (obs[:, j, layout.action_at(slot)] == action[:, m]).all(dim=1)
            if m >= first:
                ok &= obs[:, j, layout.due_at(slot)] >= 1
        alive &= ok
        n = torch.where(alive, torch.full_like(n, j), n)
    return n


def resample(
    obs: "torch.Tensor", layout: BufferLayout, n: int, sample: Sampler, *, first: int = 0, last_action: bool = True
) -> tuple[list["torch.Tensor"], list["torch.Tensor"], list["torch.Tensor"]]:
    """``(x̃_first … x̃_n, ã_first … ã_n, log π(ã_j|x̃_j))``: each ``x_j`` with ``a_first … a_{j−1}`` replaced
    in its buffer by the current policy's ``ã_first … ã_{j−1}``, and the policy's action and log-probability
    at it (``last_action`` False: none at ``x̃_n``, which a state value does not need). Gradients flow from
    each ``ã_j`` into every later state that holds it."""
    states: list[torch.Tensor] = []
    actions: list[torch.Tensor] = []
    log_probs: list[torch.Tensor] = []
    for j in range(first, n + 1):
        x = obs[:, j]
        for m, a in enumerate(actions, start=first):  # ã_m sits in slot j − 1 − m of x_j
            x = with_own_action(x, a, layout, slot=j - 1 - m)
        states.append(x)
        if j == n and not last_action:
            break
        a_j, logp_j = sample(x)
        actions.append(a_j)
        log_probs.append(logp_j.reshape(-1))
    return states, actions, log_probs


class DCACLosses(NamedTuple):
    """One batch's losses (scalars), the target ``y`` per run, and the runs that gave one (``n ≥ 1``)."""

    total: "torch.Tensor"  # L = λ·L_π + (1 − λ)·L_V
    critic: "torch.Tensor"  # L_V
    actor: "torch.Tensor"  # L_π
    target: "torch.Tensor"  # y, (B,) (0 where n = 0)
    used: "torch.Tensor"  # n ≥ 1, (B,) bool


def dcac_losses(
    obs: "torch.Tensor",
    reward: "torch.Tensor",
    discount: "torch.Tensor",
    n: "torch.Tensor",
    *,
    layout: BufferLayout,
    nets: ActorCritic,
    reward_scale: float = 1.0,
    actor_weight: float = 0.2,
) -> DCACLosses:
    """The module docstring's losses for runs ``obs`` ``(B, n_max + 1, D)``, ``reward`` and ``discount``
    ``(B, n_max)``, with ``n`` per run from `dcac_horizon` (``first = 0``), of ``nets`` (`ActorCritic`:
    its ``sample`` draws reparameterised actions in the world's units). ``total``'s gradient is the update."""
    import torch

    sample, values, values_frozen, values_target, alpha = nets

    n_max = int(n.max())
    # x̃_0 … x̃_n and log π(ã_j|x̃_j), j < n
    states, _, log_probs = resample(obs, layout, n_max, sample, first=0, last_action=False)
    used = n >= 1
    weight = used.float() / used.sum().clamp(min=1)  # the mean over the runs that gave a target
    zero = torch.zeros_like(reward[:, 0])
    boot_frozen, boot_target = zero, zero
    if n_max >= 1:
        later = torch.cat(states[1:])  # x̃_1 … x̃_n, stacked: one forward pass each
        end = (n - 1).clamp(min=0)[None, :, None]

        def at_end(v: "torch.Tensor") -> "torch.Tensor":  # min_i V_i(x̃_{n_b}) of each run b
            return v.reshape(n_max, -1, 2).min(dim=-1, keepdim=True).values.gather(0, end).reshape(-1)

        with torch.no_grad():
            boot_target = at_end(values_target(later.detach()))
        boot_frozen = at_end(values_frozen(later))
    y, ret = zero, zero  # ret: the actor's objective, the same sum with gradients and without the rewards
    cum = torch.ones_like(zero)  # D_j
    for j in range(n_max + 1):
        ending, going = n == j, n > j
        y = y + torch.where(ending, cum * boot_target, zero)
        ret = ret + torch.where(ending, cum * boot_frozen, zero)
        if j < n_max:
            entropy = alpha * log_probs[j]
            y = y + torch.where(going, cum * (reward_scale * reward[:, j] - entropy.detach()), zero)
            ret = ret - torch.where(going, cum * entropy, zero)
            cum = cum * torch.where(going, discount[:, j], torch.ones_like(zero))
    y = y.detach()
    critic = ((values(obs[:, 0]) - y[:, None]).pow(2).sum(dim=-1) * weight).sum()  # Σ_i mean (V_i(x_0) − y)²
    actor = -(ret * weight).sum()
    total = actor_weight * actor + (1.0 - actor_weight) * critic
    return DCACLosses(total, critic, actor, torch.where(used, y, zero), used)


# ----------------------------------------------------------------------------- the algorithm


@dataclass
class DCACConfig(RTACConfig):
    """DCAC hyper-parameters: RTAC's (the paper's settings are the same: Adam 3e-4, α 1, reward scale 5,
    λ 0.2), and the longest resampled horizon."""

    n_steps: int = field(
        default=0, metadata={"help": "the longest n of the resampled targets (0: K, the buffer's slots)"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.n_steps, int) and self.n_steps >= 0):
            raise ValueError(f"DCACConfig.n_steps must be an integer >= 0, got {self.n_steps!r}")

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "DCAC":
        return DCAC(self, obs_shape, action_space)


class DCAC(RTAC):
    """The Delay-Correcting Actor-Critic (the module docstring's update): an actor and twin state values on
    the observation with its actions in flight, learning from runs of consecutive transitions."""

    name = "dcac"
    config_class = DCACConfig
    cfg: DCACConfig

    @classmethod
    def check_timing(cls, delay_ticks: float, scheduler: str) -> None:
        """DCAC's premise (the paper's action delay ≥ 1 step): the action just decided lands after the next
        decision's observation, so the rewards up to it can be credited to the buffer alone."""
        refuse_undelayed("DCAC", delay_ticks, scheduler, instead="dcac-q")

    @property
    def layout(self) -> BufferLayout:
        return layout_of(self.obs_shape, self.action_dim, self.cfg.buffer_slots, "DCAC")

    @property
    def n_max(self) -> int:
        k = self.cfg.buffer_slots
        return max(1, min(self.cfg.n_steps or k, k))

    def sample(self, replay: Any, batch_size: int, rng: np.random.Generator) -> Any:
        return sample_subtrajectories(replay, batch_size, self.n_max, rng)

    def _networks_class(self) -> Any:
        from nonstop.learning.rtacnets import DCACNetworks

        return DCACNetworks

    def losses(  # type: ignore[override]
        self,
        online: "DCACNetworks",
        target: "DCACNetworks",
        batch: Any,
        noise: "Callable[[int], torch.Tensor] | None" = None,
    ) -> DCACLosses:
        """`dcac_losses` of one batch of runs on these networks. ``noise(j)``: ξ of the j-th resampled action."""
        import torch

        from nonstop.learning.algos import to_tensor

        if not isinstance(batch, SubTrajectories):
            raise TypeError(
                "DCAC learns from runs of consecutive transitions (DCAC.sample); this learner handed it "
                f"a {type(batch).__name__}: use --learner-backend virtual, process or device"
            )
        device = online.log_alpha.device
        obs, action = to_tensor(batch.obs, device), to_tensor(batch.action, device)
        reward, discount = to_tensor(batch.reward, device), to_tensor(batch.discount, device)
        linked = torch.from_numpy(batch.linked).to(device)
        layout = self.layout
        n = dcac_horizon(obs, action, linked, layout, self.n_max, first=0)
        drawn = itertools.count()  # which resampled action: 0 for ã_0 on

        def sample(x: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
            return sample_action(online, x, None if noise is None else noise(next(drawn)))

        out = dcac_losses(
            obs,
            reward,
            discount,
            n,
            layout=layout,
            nets=ActorCritic(
                sample=sample,
                values=online.values,
                values_frozen=lambda x: frozen_values(online, x),
                values_target=target.values,
                alpha=float(online.log_alpha.detach().exp()),
            ),
            reward_scale=self.cfg.reward_scale,
            actor_weight=self.cfg.actor_weight,
        )
        self.last_horizon = float(n.float().mean())  # what the resampling reached, for tests and curiosity
        return out

    def backward(
        self, online_module: "torch.nn.Module", target_module: "torch.nn.Module", batch: Any
    ) -> "torch.Tensor":
        online, target = cast("DCACNetworks", online_module), cast("DCACNetworks", target_module)
        out = self.losses(online, target, batch)
        from nonstop.learning.algos import to_tensor

        alpha_loss = self.temperature_loss(online, to_tensor(batch.obs[:, 0], online.log_alpha.device))
        write_gradients(online, [(out.total + alpha_loss, list(online.parameters()))])
        return out.critic.detach()
