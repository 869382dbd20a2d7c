"""DCAC, the Delay-Correcting Actor-Critic (Bouteiller, Ramstedt, Beltrame, Pal, Binas, *Reinforcement
Learning with Random Delays*, ICLR 2021): SAC on the observation augmented with the actions in
flight, with multi-step value targets made on-policy by *partial trajectory resampling*.

A replayed sub-trajectory ``x_0, a_0, r_0, x_1, …, x_n`` was collected by an older policy. Its
rewards ``r_0 … r_{n−1}`` (observation-framed: the world's rewards between two decisions'
observations) were caused by actions already in flight at ``x_0``, as long as none of ``a_1 …
a_{n−1}`` had landed by ``x_n``'s observation. Those actions only sit in the later states' buffers,
so they can be replaced in hindsight by actions of the *current* policy, and the n-step soft target
along the resampled states ``x̃_j`` is then on-policy::

    x̃_1 = x_1;   ã_j ~ π(·|x̃_j);   x̃_{j+1} = x_{j+1} with a_1 … a_j replaced by ã_1 … ã_j
    y = Σ_{j<n} D_j r_j − α Σ_{0<j<n} D_j log π(ã_j|x̃_j) + D_n (min_i Q̄_i(x̃_n, ã_n) − α log π(ã_n|x̃_n))

with ``D_0 = 1`` and ``D_{j+1} = D_j γ_j`` (``γ_j = γ^{ticks}``, 0 at a terminal). ``a_0``, the action
being valued, stays. In the buffer encoding (`nonstop.inference.inflight`, newest slot first) the
action decided on ``x_m`` sits in slot ``j − 1 − m`` of ``x_j``; `dcac_horizon` checks that against
the replayed actions themselves and stops ``n`` where a resampled action would already have been
applied (its ticks to apply < 1), where the chain of transitions breaks, or at ``K``. The critic
``Q_i(x_0, a_0)`` regresses on ``y``; the actor and the temperature are SAC's on ``x_0``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from nonstop.learning.rtac import BufferLayout, layout_of
from nonstop.learning.sac import soft_actor_losses, twin_critic_loss, write_gradients
from nonstop.learning.sac import SAC, SACConfig

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.sacnets import SACNetworks

__all__ = ["SubTrajectories", "sample_subtrajectories", "dcac_horizon", "resample", "dcac_target", "DCAC", "DCACConfig"]


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
    obs: "torch.Tensor", action: "torch.Tensor", linked: "torch.Tensor", layout: BufferLayout, n_max: int
) -> "torch.Tensor":
    """Per run, the longest ``n ≤ n_max`` over which resampling is exact: for every ``1 < j ≤ n`` the run
    is linked up to ``x_j``, slot ``j − 1 − m`` of ``x_j`` holds the replayed ``a_m`` (m < j), and every
    resampled one (m ≥ 1) is still ≥ 1 tick from being applied. ``(B,)`` int64, at least 1."""
    import torch

    batch = obs.shape[0]
    n = torch.ones(batch, dtype=torch.int64, device=obs.device)
    alive = torch.ones(batch, dtype=torch.bool, device=obs.device)
    for j in range(2, min(n_max, layout.k, action.shape[1]) + 1):
        ok = linked[:, j - 1].bool()
        for m in range(j):
            slot = j - 1 - m
            held = obs[:, j, layout.action_at(slot)]
            ok &= (held == action[:, m]).all(dim=1)
            if m >= 1:
                ok &= obs[:, j, layout.due_at(slot)] >= 1
        alive &= ok
        n = torch.where(alive, torch.full_like(n, j), n)
    return n


def resample(
    obs: "torch.Tensor",
    layout: BufferLayout,
    n: int,
    sample: Callable[["torch.Tensor"], tuple["torch.Tensor", "torch.Tensor"]],
) -> tuple[list["torch.Tensor"], list["torch.Tensor"], list["torch.Tensor"]]:
    """``(x̃_1 … x̃_n, ã_1 … ã_n, log π(ã_j|x̃_j))``: the states with ``a_1 … a_{j−1}`` replaced in their
    buffers by the current policy's ``ã_1 … ã_{j−1}``, and its action and log-probability at each."""
    from nonstop.learning.rtac import with_own_action

    states: list[torch.Tensor] = []
    actions: list[torch.Tensor] = []
    log_probs: list[torch.Tensor] = []
    for j in range(1, n + 1):
        x = obs[:, j]
        for m, a in enumerate(actions, start=1):  # ã_m sits in slot j − 1 − m of x_j
            x = with_own_action(x, a, layout, slot=j - 1 - m)
        a_j, logp_j = sample(x)
        states.append(x)
        actions.append(a_j)
        log_probs.append(logp_j.reshape(-1))
    return states, actions, log_probs


def dcac_target(
    obs: "torch.Tensor",
    reward: "torch.Tensor",
    discount: "torch.Tensor",
    n: "torch.Tensor",
    *,
    layout: BufferLayout,
    sample: Callable[["torch.Tensor"], tuple["torch.Tensor", "torch.Tensor"]],
    q_target: Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"],
    alpha: float,
) -> "torch.Tensor":
    """The resampled n-step soft target ``y`` of each run (the module docstring), ``n`` per run from
    `dcac_horizon`; ``q_target(x, a)`` is the smaller of the target critics, ``(B,)``. No gradient."""
    import torch

    with torch.no_grad():
        n_max = int(n.max())
        states, actions, log_probs = resample(obs, layout, n_max, sample)
        y = torch.zeros_like(reward[:, 0])
        cum = torch.ones_like(y)  # D_j
        for j in range(n_max + 1):
            if j >= 1:
                entropy = alpha * log_probs[j - 1]
                at_end = n == j
                boot = q_target(states[j - 1], actions[j - 1]).reshape(-1) - entropy
                y = y + torch.where(at_end, cum * boot, torch.where(n > j, -cum * entropy, torch.zeros_like(y)))
            if j < n_max:
                y = y + torch.where(n > j, cum * reward[:, j], torch.zeros_like(y))
                cum = cum * torch.where(n > j, discount[:, j], torch.ones_like(y))
        return y


# ----------------------------------------------------------------------------- the algorithm


@dataclass
class DCACConfig(SACConfig):
    """DCAC hyper-parameters: SAC's, and the longest resampled horizon."""

    lr: float = field(default=3e-4, metadata={"help": "Adam step size of the actor, the critics and α (paper: 3e-4)"})

    n_steps: int = field(
        default=0, metadata={"help": "the longest n of the resampled targets (0: K, the buffer's slots)"}
    )
    buffer_slots: int = field(
        default=0,
        metadata={"help": "K, the action buffer's slots in the observation (the run sets it from the latency)"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("n_steps", "buffer_slots"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 0):
                raise ValueError(f"DCACConfig.{name} must be an integer >= 0, got {getattr(self, name)!r}")

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "DCAC":
        return DCAC(self, obs_shape, action_space)


class DCAC(SAC):
    """The Delay-Correcting Actor-Critic (the module docstring): SAC's networks on the observation with its
    actions in flight, learning from runs of consecutive transitions with resampled n-step targets."""

    name = "dcac"
    config_class = DCACConfig
    cfg: DCACConfig
    needs_action_buffer = True
    reward_framing = "observation"

    @property
    def layout(self) -> BufferLayout:
        return layout_of(self.obs_shape, self.action_dim, self.cfg.buffer_slots, "DCAC")

    @property
    def n_max(self) -> int:
        k = self.cfg.buffer_slots
        return max(1, min(self.cfg.n_steps or k, k))

    def sample(self, replay: Any, batch_size: int, rng: np.random.Generator) -> Any:
        return sample_subtrajectories(replay, batch_size, self.n_max, rng)

    def backward(
        self, online_module: "torch.nn.Module", target_module: "torch.nn.Module", batch: Any
    ) -> "torch.Tensor":
        import torch

        from nonstop.learning.algos import to_tensor

        if not isinstance(batch, SubTrajectories):
            raise TypeError(
                "DCAC learns from runs of consecutive transitions (DCAC.sample); this learner handed it "
                f"a {type(batch).__name__}: use --learner-backend virtual, process or device"
            )
        online, target = cast("SACNetworks", online_module), cast("SACNetworks", target_module)
        device = online.log_alpha.device
        obs, action = to_tensor(batch.obs, device), to_tensor(batch.action, device)
        reward, discount = to_tensor(batch.reward, device), to_tensor(batch.discount, device)
        linked = torch.from_numpy(batch.linked).to(device)
        scale, bias = online.scale, online.bias
        alpha = online.log_alpha.exp().detach()

        def q_bar(x: "torch.Tensor", a: "torch.Tensor") -> "torch.Tensor":
            f, a_n = target.encoder(x), (a - bias) / scale
            return torch.min(target.q1(f, a_n), target.q2(f, a_n))

        layout = self.layout
        n = dcac_horizon(obs, action, linked, layout, self.n_max)
        # the buffer holds actions as the world takes them: resampled in the world's units
        y = dcac_target(
            obs, reward, discount, n, layout=layout, sample=online.sample_world, q_target=q_bar, alpha=float(alpha)
        )
        f = online.encoder(obs[:, 0])
        critic = twin_critic_loss(online, f, (action[:, 0] - bias) / scale, y)
        actor, temperature = soft_actor_losses(online, f, self.target_entropy)
        blocks = [(critic, online.critic_parameters()), (actor, list(online.actor.parameters()))]
        if self.cfg.autotune:
            blocks.append((temperature, [online.log_alpha]))
        write_gradients(online, blocks)
        self.last_horizon = float(n.float().mean())  # what the resampling reached, for tests and curiosity
        return critic.detach()
