"""Soft Actor-Critic's networks, losses and update (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms
and Applications"), for Box actions; its settings and its place in a run are `nonstop.learning.sac`, how
it acts `nonstop.learning.sacact`.

One update, as the learners run it; every line is the paper's, γ_n the semi-MDP's discount of the
decision's n ticks (`nonstop.learning.replay`: γ^n, 0 at a terminal)::

    (s, a, R, γ_n, s') ~ replay
    ã' ~ π(·|s')                                           # the current actor, reparameterised
    y   = R + γ_n · (min_i Q_targ,i(s', ã') − α·log π(ã'|s'))   # clipped double-Q soft target (eq. 3, 5)
    J_Q = ½·Σ_i (Q_i(s, a) − y)²                           # → the critics' block (eq. 5)
    ã ~ π(·|s)
    J_π = α·log π(ã|s) − min_i Q_i(s, ã)                   # critics held fixed → the actor's block (eq. 7)
    J_α = −α·(log π(ã|s) + H̄),  H̄ = −|A|                   # → log α (eq. 18)
    θ   ← Adam(θ, [∇J_Q, ∇J_π, ∇J_α])                      # one flat gradient, applied by the learners
    θ_targ ← (1 − τ)·θ_targ + τ·θ   after every update     # Polyak averaging, τ = 0.005

The three losses are taken at the same θ and applied as one Adam step on the flat θ: the learners'
contract is one gradient per update (round-robin learners compute theirs elsewhere and apply them in
turn), and the blocks are disjoint, so each block's Adam is its own. SB3 and CleanRL step the critic
first and take the actor's loss against the freshly stepped critic; here the actor's loss at update k
sees the critic after k critic steps where theirs sees k + 1, so the actor lags the critic by one Adam
step (a change of about ``lr`` in each weight). `nonstop bench reference` shows no gap from it.

`SACNetworks` holds everything SAC learns, in this ``parameters()`` order (the flat θ's blocks):

* ``encoder`` — observations to features: a flatten for vectors, the IMPALA ResNet for frames
  (`nonstop.policies.models.ImpalaResNet`, its head giving ``features`` numbers). It belongs to the
  critics' block: the critic loss trains it, the actor sees its features held fixed (as DrQ does);
* ``actor`` — the tanh-squashed Gaussian policy π(a|s): a mean and a log standard deviation;
* ``q1``, ``q2`` — the twin soft Q-functions Q(s, a) of the clipped double-Q target;
* ``temperature.log_alpha`` — log of the entropy coefficient α, learned (it is θ's last number).

Actions inside the networks are normalised to [-1, 1]: ``a = tanh(u)``; the world's action is
``a · scale + bias`` with the Box's bounds (`SACNetworks.scale`, `bias`: buffers, not parameters), and
log π is corrected for the squash and the scale (appendix C). RTAC, DCAC and BPQL build on
`GaussianHead` and these losses; TD3 on `QNetwork`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from nonstop.learning.algos import to_tensor
from nonstop.learning.optim import write_gradients

if TYPE_CHECKING:
    from nonstop.learning.replay import Batch

__all__ = [
    "SACNetworks",
    "GaussianHead",
    "GaussianActor",
    "QNetwork",
    "DeterministicActor",
    "LOG_STD_MIN",
    "LOG_STD_MAX",
    "SACLosses",
    "sac_losses",
    "LandingBatch",
    "landing_batch",
    "twin_critic_loss",
    "soft_actor_losses",
    "sac_backward",
]

# ------------------------------------------------------------------ the networks

#: the range a log standard deviation is squashed into (as CleanRL and Yarats et al. do)
LOG_STD_MIN: Final = -5.0
LOG_STD_MAX: Final = 2.0


def mlp(n_in: int, n_out: int, hidden: Sequence[int]) -> nn.Sequential:
    """Linear layers of widths ``hidden`` with ReLUs between (no hidden width: one linear layer)."""
    widths = [n_in, *hidden]
    layers: list[nn.Module] = []
    for cin, cout in zip(widths, widths[1:]):
        layers += [nn.Linear(cin, cout), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], n_out))
    return nn.Sequential(*layers)


class GaussianActor(nn.Module):
    """π(·|s): a Gaussian over u, squashed by tanh into [-1, 1]^|A|."""

    __constants__ = ["log_std_min", "log_std_max"]  # TorchScript reads no module globals

    def __init__(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(features, 2 * action_dim, hidden)
        self.log_std_min, self.log_std_max = LOG_STD_MIN, LOG_STD_MAX

    def forward(self, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and the log standard deviation of u for features ``f``."""
        mean, raw = self.net(f).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (
            torch.tanh(raw) + 1
        )  # into the range
        return mean, log_std

    def sample(self, f: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action ``ã = tanh(μ + σ·ξ)`` (normalised) and its log-probability
        log π(ã|s) in normalised units (the caller adds the Box's −Σ log scale). ``noise``: ξ (None: drawn)."""
        mean, log_std = self(f)
        xi = torch.randn_like(mean) if noise is None else noise
        u = mean + log_std.exp() * xi  # the reparameterisation trick (paper, eq. 11)
        # log N(u; μ, σ) − Σ log(1 − tanh²u) (paper, appendix C, eq. 26), with
        # log(1 − tanh²u) = 2·(log 2 − u − softplus(−2u)) computed stably
        log_normal = -0.5 * xi.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return torch.tanh(u), (log_normal - log_det).sum(-1)


class QNetwork(nn.Module):
    """Q(s, a) from features and a normalised action."""

    def __init__(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(features + action_dim, 1, hidden)

    def forward(self, f: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([f, a], dim=-1)).squeeze(-1)


class Temperature(nn.Module):
    """log α: one learned number (a module of its own, registered after the critics)."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha), dtype=torch.float32))


class GaussianHead(nn.Module):
    """What SAC's, RTAC's and DCAC's networks share, in this ``parameters()`` order: the encoder, the
    squashed-Gaussian actor, the critics a subclass adds (`add_critics`), log α last; and the Box's scale
    and bias as buffers.

    ``forward(obs)`` is what a worker computes: the actor's mean and log standard deviation side by side,
    ``(B, 2·|A|)``; the worker samples (training) or takes ``tanh(μ)`` (evaluation) itself.
    """

    scale: torch.Tensor  # buffers: the Box's half-width and centre
    bias: torch.Tensor

    def __init__(
        self,
        features: int,
        action_dim: int,
        hidden: Sequence[int],
        *,
        low: Sequence[float],
        high: Sequence[float],
        encoder: nn.Module | None = None,
        alpha: float = 1.0,
        critic_features: int | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder if encoder is not None else nn.Flatten()
        self.actor = GaussianActor(features, action_dim, hidden)
        # the critics' input width: the actor's features, or fewer where they see less (BPQL's, the world's state)
        self.add_critics(features if critic_features is None else critic_features, action_dim, hidden)
        self.temperature = Temperature(alpha)  # a submodule, so that log α comes last in parameters()
        lo, hi = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (hi - lo) / 2)  # the world's action = a · scale + bias
        self.register_buffer("bias", (hi + lo) / 2)

    def add_critics(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        """Register the critics (after the actor, before log α)."""
        raise NotImplementedError

    @property
    def log_alpha(self) -> nn.Parameter:
        """log α, the learned entropy coefficient's log (θ's last number)."""
        return self.temperature.log_alpha

    def sample_world(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action for observations ``x`` as the world takes it (``a · scale + bias``) and
        its log-probability in the world's units (log π of the normalised action − Σ log scale); the
        actor sees the encoder's features held fixed."""
        a, logp = self.actor.sample(self.encoder(x).detach())
        return a * self.scale + self.bias, logp - self.scale.log().sum()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.actor(self.encoder(obs))
        return torch.cat([mean, log_std], dim=-1)


class SACNetworks(GaussianHead):
    """Everything SAC learns, in one module (see the module docstring for the blocks' order).

    >>> nets = SACNetworks(3, 1, (8,), low=[-2.0], high=[2.0])
    >>> nets(torch.zeros(4, 3)).shape, [name for name, _ in nets.named_parameters()][-1]
    (torch.Size([4, 2]), 'temperature.log_alpha')
    """

    def add_critics(self, features: int, action_dim: int, hidden: Sequence[int]) -> None:
        self.q1 = QNetwork(features, action_dim, hidden)
        self.q2 = QNetwork(features, action_dim, hidden)

    def critic_parameters(self) -> list[nn.Parameter]:
        """The critics' block: the encoder and the twin Q-functions."""
        return [*self.encoder.parameters(), *self.q1.parameters(), *self.q2.parameters()]


# ------------------------------------------------------------------ the losses


class SACLosses(NamedTuple):
    """One batch's three losses (scalars) and what the progress line reports."""

    critic: torch.Tensor
    actor: torch.Tensor
    alpha: torch.Tensor
    target: torch.Tensor  # y, per transition (for tests)


def sac_losses(
    online: SACNetworks,
    target: SACNetworks,
    batch: Batch,
    *,
    target_entropy: float,
    noise_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> SACLosses:
    """The module docstring's losses for one batch. ``noise_next``, ``noise``: the ξ of ã' and ã (None:
    drawn; a test passes its own to compute the same numbers by hand)."""
    device = online.log_alpha.device  # the learner's device: the batch goes there from host replay
    obs, next_obs = to_tensor(batch.obs, device), to_tensor(batch.next_obs, device)
    a = (to_tensor(batch.action, device) - online.bias) / online.scale  # the world's action, normalised to [-1, 1]
    reward, discount = to_tensor(batch.reward, device), to_tensor(batch.discount, device)
    log_scale = online.scale.log().sum()  # log π of the world's action = log π of the normalised one − Σ log scale
    alpha = online.log_alpha.exp().detach()

    with torch.no_grad():
        a_next, logp_next = online.actor.sample(online.encoder(next_obs), noise_next)  # ã' ~ π(·|s')
        f_next = target.encoder(next_obs)
        q_next = torch.min(target.q1(f_next, a_next), target.q2(f_next, a_next))
        y = reward + discount * (q_next - alpha * (logp_next - log_scale))  # γ_n = 0 at a terminal: done masking

    f = online.encoder(obs)
    critic = twin_critic_loss(online, f, a, y)  # J_Q
    actor, temperature = soft_actor_losses(online, f, target_entropy, noise)  # J_π, J_α
    return SACLosses(critic, actor, temperature, y)


class LandingBatch(NamedTuple):
    """A batch sampled with its landing states, on the learner's device: ``s`` and ``s'`` (the world's states,
    the first ``obs_dim`` numbers of a stored frame), ``a`` normalised to [-1, 1], ``R``, ``γ_n``, Σ log scale
    (log π in the world's units = normalised log π − Σ log scale) and α, held fixed."""

    s: torch.Tensor
    s_next: torch.Tensor
    a: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    log_scale: torch.Tensor
    alpha: torch.Tensor


def landing_batch(online: SACNetworks, batch: Batch, obs_dim: int, algo: str) -> LandingBatch:
    """``batch``'s tensors for the learners that value the states actions acted on (BPQL, DMSAC); ``algo``
    names the learner in the one-line refusal of a batch sampled without its states."""
    if batch.state is None or batch.next_state is None:
        raise ValueError(f"{algo} learns on batches with their landing states: sample(states=True)")
    device = online.log_alpha.device
    return LandingBatch(
        to_tensor(batch.state[:, :obs_dim], device),
        to_tensor(batch.next_state[:, :obs_dim], device),
        (to_tensor(batch.action, device) - online.bias) / online.scale,
        to_tensor(batch.reward, device),
        to_tensor(batch.discount, device),
        online.scale.log().sum(),
        online.log_alpha.exp().detach(),
    )


def twin_critic_loss(online: SACNetworks, f: torch.Tensor, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """J_Q: both critics' squared error to the target ``y`` at features ``f`` and normalised actions ``a``
    (SAC's one-step ``y``, DCAC's resampled n-step one)."""
    return 0.5 * ((online.q1(f, a) - y).pow(2).mean() + (online.q2(f, a) - y).pow(2).mean())


def soft_actor_losses(
    online: SACNetworks, f: torch.Tensor, target_entropy: float, noise: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(J_π, J_α)`` at features ``f``: the actor against the smaller critic (the features held fixed:
    the actor never trains the encoder), and α toward the target entropy. ``noise``: ξ of ã (None: drawn)."""
    f_fixed = f.detach()
    a_pi, logp = online.actor.sample(f_fixed, noise)  # ã ~ π(·|s)
    logp = logp - online.scale.log().sum()  # in the world's units
    alpha = online.log_alpha.exp().detach()
    actor = (alpha * logp - torch.min(online.q1(f_fixed, a_pi), online.q2(f_fixed, a_pi))).mean()
    temperature = (-online.log_alpha.exp() * (logp.detach() + target_entropy)).mean()
    return actor, temperature


# ------------------------------------------------------------------ the update


def sac_backward(
    online: SACNetworks,
    target: SACNetworks,
    batch: Batch,
    *,
    autotune: bool,
    target_entropy: float,
    noise_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """One batch's gradient into each parameter's ``.grad``, each block from its own loss:
    ∇J_Q into the encoder and critics, ∇J_π into the actor, ∇J_α into log α (zero without autotune).
    Returns the critic loss (what the progress line shows as the loss). ``noise_next``, ``noise``: as
    `sac_losses`."""
    losses = sac_losses(online, target, batch, target_entropy=target_entropy, noise_next=noise_next, noise=noise)
    blocks = [(losses.critic, online.critic_parameters()), (losses.actor, list(online.actor.parameters()))]
    if autotune:  # else α is fixed: log α's gradient stays zero
        blocks.append((losses.alpha, [online.log_alpha]))
    write_gradients(online, blocks)
    return losses.critic.detach()


# ------------------------------------------------------------------ the evaluation actor


class DeterministicActor(nn.Module):
    """The evaluation actor `nonstop export` scripts: ``tanh(μ(s)) · scale + bias``, nothing sampled.
    Takes float32 inputs laid out as the networks take them (`FromObservations` prepares raw ones)."""

    def __init__(self, nets: GaussianHead) -> None:
        super().__init__()
        self.encoder, self.actor = nets.encoder, nets.actor
        # fixed numbers (no gradient), held as parameters so TorchScript and mypy both see tensors
        self.scale = nn.Parameter(nets.scale.clone(), requires_grad=False)
        self.bias = nn.Parameter(nets.bias.clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, _ = self.actor(self.encoder(x))
        return torch.tanh(mean) * self.scale + self.bias
