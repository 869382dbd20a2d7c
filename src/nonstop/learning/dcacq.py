"""DCAC-Q: the Q-critic variant of the Delay-Correcting Actor-Critic that nonstop shipped as ``dcac`` before
it followed the paper (`nonstop.learning.dcac`). It keeps the paper's partial-trajectory resampling
but values the replayed action instead of resampling it:

* its critic is SAC's twin ``Q_i(x_0, a_0)`` with the replayed ``a_0`` kept (the paper's is a state
  value ``V(x_0)`` with ``a_0`` resampled), so only ``a_1 … a_{n−1}`` are resampled;
* its actor is SAC's one-step actor at ``x_0`` against ``min_i Q_i`` (the paper's back-propagates
  through the resampled action buffer into ``V(x̃_n)``);
* its losses are SAC's, each into its own block (no λ weighting), with SAC's learned α.

Because ``a_0`` is kept, its reward need not be independent of it, so it learns at any delay
(a 1-tick model included), where the paper's DCAC is refused. The target::

    x̃_1 = x_1;   ã_j ~ π(·|x̃_j);   x̃_{j+1} = x_{j+1} with a_1 … a_j replaced by ã_1 … ã_j
    y = Σ_{j<n} D_j r_j − α Σ_{0<j<n} D_j log π(ã_j|x̃_j) + D_n (min_i Q̄_i(x̃_n, ã_n) − α log π(ã_n|x̃_n))
    J_Q = ½·Σ_i (Q_i(x_0, a_0) − y)²;   J_π, J_α: SAC's at x_0

with ``D_0 = 1`` and ``D_{j+1} = D_j γ_j`` (``γ_j = γ^{ticks}``, 0 at a terminal); ``n`` from
`nonstop.learning.dcac.dcac_horizon` with ``first = 1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from nonstop.learning.dcac import SubTrajectories, dcac_horizon, resample, sample_subtrajectories
from nonstop.learning.rtac import BufferLayout, layout_of
from nonstop.learning.optim import write_gradients
from nonstop.learning.sac import SAC, SACConfig

if TYPE_CHECKING:
    import torch

    from nonstop.learning.sacupdate import SACNetworks

__all__ = ["dcac_target", "DCACQ", "DCACQConfig"]


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
        states, actions, log_probs = resample(obs, layout, n_max, sample, first=1)
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
class DCACQConfig(SACConfig):
    """DCAC-Q hyper-parameters: SAC's, and the longest resampled horizon."""

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
                raise ValueError(f"DCACQConfig.{name} must be an integer >= 0, got {getattr(self, name)!r}")

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "DCACQ":
        return DCACQ(self, obs_shape, action_space)


class DCACQ(SAC):
    """DCAC with SAC's Q-critics (the module docstring): SAC's networks on the observation with its actions
    in flight, learning from runs of consecutive transitions with resampled n-step targets."""

    name = "dcac-q"
    config_class = DCACQConfig
    cfg: DCACQConfig
    needs_action_buffer = True
    reward_framing = "observation"

    @property
    def layout(self) -> BufferLayout:
        return layout_of(self.obs_shape, self.action_dim, self.cfg.buffer_slots, "DCAC-Q")

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
        from nonstop.learning.sacupdate import soft_actor_losses, twin_critic_loss

        if not isinstance(batch, SubTrajectories):
            raise TypeError(
                "DCAC-Q learns from runs of consecutive transitions (DCACQ.sample); this learner handed it "
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
        n = dcac_horizon(obs, action, linked, layout, self.n_max, first=1)
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
