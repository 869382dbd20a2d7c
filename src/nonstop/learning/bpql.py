"""BPQL: SAC whose critic learns on the world's own state, in hindsight, while its actor acts on the delayed
observation with the actions in flight (Kim, Kim, Lee & Yoo 2023, "Belief Projection-Based Reinforcement
Learning for Environments with Delayed Feedback"), for Box actions and vector observations.

Under a delay the actor decides ``a_i`` on ``x_i``: the observation of tick ``o_i`` with the actions in
flight (`nonstop.inference.inflight`). SAC on ``x_i`` (``--delay-aware``) must learn a critic over that
augmented space, whose value hides the world's dynamics for the delay's length: the harder the longer the
delay. BPQL's critic instead is the undelayed one, ``Q_β(s, a)`` over the state ``s`` the action acted on,
which the replay knows once the action has landed: the host applies tick ``t_i``'s action to the state
tick ``t_i − 1`` left, ``s_i = obs(t_i − 1)`` (`nonstop.learning.replay`, ``landing_states``). The actor
is projected onto it: it maximises ``Q_β(s_i, ·)`` from what it saw, ``x_i``.

One update, as the learners run it; γ_n the semi-MDP's discount of the decision's n ticks::

    (x, s, a, R, γ_n, x', s') ~ replay                     # s, s': the states a and the next decision's action met
    ã' ~ π(·|x')
    y   = R + γ_n · (min_i Q_targ,i(s', ã') − α·log π(ã'|x'))   # the β-critic's soft target
    J_Q = ½·Σ_i (Q_i(s, a) − y)²                           # → the critics' block
    ã ~ π(·|x)
    J_π = α·log π(ã|x) − min_i Q_i(s, ã)                   # the critics held fixed → the actor's block
    J_α = −α·(log π(ã|x) + H̄),  H̄ = −|A|                   # → log α
    θ_targ ← (1 − τ)·θ_targ + τ·θ   after every update

Everything else is SAC's (`nonstop.learning.sac`, `sacupdate`, `sacact`): the networks (the critics
read the world's observation, the first ``obs_dim`` numbers of each stored frame), the optimiser, the
uniformly random start and the actor a worker runs. With a 1-tick model ``s_i = obs(o_i)``, the observation itself, and BPQL is SAC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from nonstop.learning.algos import to_tensor
from nonstop.learning.optim import write_gradients
from nonstop.learning.sac import SAC, SACConfig

if TYPE_CHECKING:
    import torch

    from nonstop.learning.rtac import BufferLayout
    from nonstop.learning.replay import Batch
    from nonstop.learning.sacupdate import SACNetworks

__all__ = ["BPQLConfig", "BPQL", "BPQLLosses", "bpql_losses"]


@dataclass
class BPQLConfig(SACConfig):
    """BPQL hyper-parameters: SAC's (the paper trains its β-critic and actor with SAC's settings)."""

    buffer_slots: int = field(
        default=0,
        metadata={"help": "K, the action buffer's slots in the observation (the run sets it from the latency)"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._need(isinstance(self.buffer_slots, int) and self.buffer_slots >= 0, "buffer_slots", "an integer >= 0")

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "BPQL":
        return BPQL(self, obs_shape, action_space)


class BPQLLosses(NamedTuple):
    critic: "torch.Tensor"
    actor: "torch.Tensor"
    alpha: "torch.Tensor"
    target: "torch.Tensor"  # y, per transition (for tests)


def bpql_losses(
    online: "SACNetworks",
    target: "SACNetworks",
    batch: "Batch",
    *,
    obs_dim: int,
    target_entropy: float,
    noise_next: "torch.Tensor | None" = None,
    noise: "torch.Tensor | None" = None,
) -> BPQLLosses:
    """The module docstring's losses for one batch sampled with its landing states. ``obs_dim``: how many
    leading numbers of a stored frame are the world's observation. ``noise_next``, ``noise``: ξ of ã', ã."""
    import torch

    from nonstop.learning.sacupdate import landing_batch

    s, s_next, a, reward, discount, log_scale, alpha = landing_batch(online, batch, obs_dim, "BPQL")
    device = online.log_alpha.device
    x, x_next = to_tensor(batch.obs, device), to_tensor(batch.next_obs, device)

    with torch.no_grad():
        a_next, logp_next = online.actor.sample(online.encoder(x_next), noise_next)  # ã' ~ π(·|x')
        f_next = target.encoder(s_next)
        q_next = torch.min(target.q1(f_next, a_next), target.q2(f_next, a_next))
        y = reward + discount * (q_next - alpha * (logp_next - log_scale))

    f_state = online.encoder(s)
    critic = 0.5 * ((online.q1(f_state, a) - y).pow(2).mean() + (online.q2(f_state, a) - y).pow(2).mean())
    a_pi, logp = online.actor.sample(online.encoder(x).detach(), noise)  # ã ~ π(·|x)
    logp = logp - log_scale
    f_fixed = f_state.detach()
    actor = (alpha * logp - torch.min(online.q1(f_fixed, a_pi), online.q2(f_fixed, a_pi))).mean()
    temperature = (-online.log_alpha.exp() * (logp.detach() + target_entropy)).mean()
    return BPQLLosses(critic, actor, temperature, y)


class BPQL(SAC):
    """SAC with the β-critic on the world's state (the module docstring's update)."""

    name = "bpql"
    config_class = BPQLConfig
    cfg: BPQLConfig
    takes_frames = False
    #: the actor always sees the actions in flight: what it decides from
    needs_action_buffer = True
    #: the critic learns on the states the actions acted on
    needs_landing_states = True

    @property
    def layout(self) -> "BufferLayout":
        from nonstop.learning.rtac import layout_of

        return layout_of(self.obs_shape, self.action_dim, self.cfg.buffer_slots, "BPQL")

    def _critic_features(self) -> int | None:
        return self.layout.obs_dim  # Q_β(s, a): the world's observation only

    def sample(self, replay: Any, batch_size: int, rng: np.random.Generator) -> Any:
        return replay.sample(batch_size, rng, states=True)

    def backward(self, online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch") -> "torch.Tensor":
        nets: Any = online  # `SACNetworks`, its critics on the world's observation
        frozen: Any = target
        losses = bpql_losses(nets, frozen, batch, obs_dim=self.layout.obs_dim, target_entropy=self.target_entropy)
        blocks = [(losses.critic, nets.critic_parameters()), (losses.actor, list(nets.actor.parameters()))]
        if self.cfg.autotune:
            blocks.append((losses.alpha, [nets.log_alpha]))
        write_gradients(nets, blocks)
        return losses.critic.detach()
