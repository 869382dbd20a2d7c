"""TD3: Twin Delayed Deep Deterministic policy gradient (Fujimoto, van Hoof & Meger 2018, "Addressing
Function Approximation Error in Actor-Critic Methods"), for Box action spaces and vector observations.

One update, as the learners run it (the paper's Algorithm 1; γ_n the semi-MDP's discount of the decision's
n ticks, `nonstop.learning.replay`: γ^n, 0 at a terminal)::

    (s, a, R, γ_n, s') ~ replay
    ε  ~ clip(N(0, σ̃), −c, c)                                  # target policy smoothing (§5.3, eq. 14)
    ã' = clip(μ_targ(s') + ε, −1, 1)
    y  = R + γ_n · min_i Q_targ,i(s', ã')                      # clipped double-Q (§4.2, eq. 10)
    J_Q = Σ_i mean (Q_i(s, a) − y)²                            # → the critics' block, every update
    J_μ = −mean Q_1(s, μ(s))                                   # → the actor's block (deterministic PG)
    every d = 2 updates:                                        # delayed policy updates (§5.2)
        θ_μ ← Adam(θ_μ, ∇J_μ)
        θ_targ ← (1 − τ)·θ_targ + τ·θ                           # τ = 0.005, critics and actor alike

Acting: ``a = clip(μ(s) + N(0, σ), −1, 1)`` rescaled to the Box (σ = 0.1 of the half-width), uniformly
random over the Box until the learners' first update (``random_start``, as SAC's here and CleanRL's).

How it fits the learners' contract (one flat gradient per update, applied in turn: `nonstop.learning.optim`):

* the gradient holds both blocks at the same θ: J_Q's into the critics, J_μ's (the critics held fixed)
  into the actor. The actor's loss sees the critic before this update's critic step, where the paper's
  sees it after: the actor lags the critic by one Adam step (as SAC's does here, `nonstop.learning.sacupdate`);
* the delay is data: `TD3.update_rule` holds the actor's block back (`UpdateRule.delayed`), so on the
  updates in between its θ, Adam moments and step count stay as they are. Feeding Adam a zero gradient
  instead would not do: its first moment m decays but stays non-zero, so θ_μ would keep moving on the
  steps the paper skips. A learner does not know which update number its gradient will get (round-robin
  learners apply in turn), so it computes J_μ's gradient every time and the rule discards it on the
  updates in between: the same numbers as the paper's, one actor backward pass more per update;
* the target rule ``(every d, τ)`` is TD3's own: the targets move only on the actor's updates.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from nonstop.learning.algos import Algorithm, ConfigBase, to_tensor
from nonstop.learning.optim import write_gradients
from nonstop.learning.sac import learning_starts_for
from nonstop.learning.sacact import SACPolicy, sampled_server

if TYPE_CHECKING:
    import torch

    from nonstop.learning.optim import UpdateRule
    from nonstop.learning.replay import Batch

__all__ = ["TD3Config", "TD3", "TD3Policy", "td3_losses", "build_td3_networks"]


@dataclass
class TD3Config(ConfigBase):
    """TD3 hyper-parameters: the paper's (§6.1, Table 3) but the widths and batch, which are CleanRL's."""

    gamma: float = field(default=0.99, metadata={"help": "discount per env tick (semi-MDP: γ^n over n ticks)"})
    batch_size: int = field(default=256, metadata={"help": "transitions per gradient"})
    lr: float = field(default=1e-3, metadata={"help": "Adam step size of the actor and the critics (paper: 1e-3)"})
    adam_eps: float = field(default=1e-8, metadata={"help": "Adam epsilon"})
    tau: float = field(default=0.005, metadata={"help": "Polyak step of the targets on each actor update"})
    policy_delay: int = field(default=2, metadata={"help": "updates per actor and target update (d)"})
    policy_noise: float = field(
        default=0.2, metadata={"help": "σ̃ of the target policy smoothing noise, in half-widths of the Box"}
    )
    noise_clip: float = field(default=0.5, metadata={"help": "c: the smoothing noise is clipped to [−c, c]"})
    exploration_noise: float = field(
        default=0.1, metadata={"help": "σ of the Gaussian noise added to the actor's action while training"}
    )
    learning_starts: int | None = field(
        default=None,
        metadata={
            "help": "transitions in replay before learning, uniformly random ones with --random-start "
            "(default: a tenth of the run's ticks, at most 10,000)"
        },
    )
    random_start: bool = field(default=True, metadata={"help": "act uniformly over the Box until the first update"})
    updates_per_transition: float = field(
        default=1.0,
        metadata={
            "help": "updates per transition at most: learners pause when ahead of it, on either clock (0: no cap)"
        },
    )
    replay_capacity: int = field(default=1_000_000, metadata={"help": "most recent transitions kept"})
    hidden: tuple[int, ...] = field(default=(256, 256), metadata={"help": "MLP widths of the actor and each critic"})

    def __post_init__(self) -> None:
        need = self._need
        need(0.0 <= self.gamma <= 1.0, "gamma", "in [0, 1]")
        for name, value in (
            ("batch_size", self.batch_size),
            ("replay_capacity", self.replay_capacity),
            ("policy_delay", self.policy_delay),
        ):
            need(isinstance(value, int) and value >= 1, name, "a positive integer")
        need(
            self.learning_starts is None or (isinstance(self.learning_starts, int) and self.learning_starts >= 0),
            "learning_starts",
            "an integer >= 0 (or None: a tenth of the run's ticks)",
        )
        need(self.lr > 0 and math.isfinite(self.lr), "lr", "a positive number")
        need(0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        for name, noise in (
            ("policy_noise", self.policy_noise),
            ("noise_clip", self.noise_clip),
            ("exploration_noise", self.exploration_noise),
        ):
            need(noise >= 0 and math.isfinite(noise), name, "a number >= 0")
        need(self.updates_per_transition >= 0, "updates_per_transition", ">= 0")
        self.hidden = tuple(int(h) for h in self.hidden)

    def for_run(self, ticks: int) -> Self:
        """``learning_starts`` unset: a tenth of the run (`nonstop.learning.sac.learning_starts_for`)."""
        if self.learning_starts is not None:
            return self
        return dataclasses.replace(self, learning_starts=learning_starts_for(ticks, self.batch_size))

    def target_rule(self) -> tuple[int, float]:
        """``(every, ρ)``: Polyak averaging with ρ = τ on each actor update (every ``policy_delay``)."""
        return self.policy_delay, self.tau

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "TD3":
        return TD3(self, obs_shape, action_space)


def build_td3_networks(
    obs_dim: int, action_dim: int, hidden: tuple[int, ...], low: Any, high: Any
) -> "torch.nn.Module":
    """Everything TD3 learns, in this ``parameters()`` order: the twin critics ``q1``, ``q2``, then the actor
    ``mu`` (its block last, so the delayed block is θ's tail). ``forward(obs)`` is the actor's normalised
    action μ(s) = tanh(·) in [−1, 1]; ``scale`` and ``bias`` (buffers) map it to the Box."""
    import torch
    from torch import nn

    from nonstop.learning.sacupdate import QNetwork, mlp

    class TD3Networks(nn.Module):
        scale: torch.Tensor
        bias: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.q1 = QNetwork(obs_dim, action_dim, hidden)
            self.q2 = QNetwork(obs_dim, action_dim, hidden)
            self.mu = nn.Sequential(nn.Flatten(), mlp(obs_dim, action_dim, hidden), nn.Tanh())
            lo, hi = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
            self.register_buffer("scale", (hi - lo) / 2)
            self.register_buffer("bias", (hi + lo) / 2)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.mu(obs)

    return TD3Networks()


def deterministic_actor(nets: Any) -> "torch.nn.Module":
    """The evaluation actor `nonstop export` scripts: ``μ(s) · scale + bias``, nothing added."""
    from torch import nn

    class TD3Actor(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mu = nets.mu
            # fixed numbers (no gradient), held as parameters so TorchScript and mypy both see tensors
            self.scale = nn.Parameter(nets.scale.clone(), requires_grad=False)
            self.bias = nn.Parameter(nets.bias.clone(), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mu(x) * self.scale + self.bias

    return TD3Actor()


def td3_losses(
    online: Any, target: Any, batch: "Batch", cfg: TD3Config, smoothing: "torch.Tensor | None" = None
) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """``(J_Q, J_μ, y)`` of one batch (the module docstring). ``smoothing``: the target policy's noise before
    its clip (None: drawn ~ N(0, σ̃); a test passes its own)."""
    import torch

    device = online.scale.device  # the learner's: the batch goes there from host replay
    s, s_next = to_tensor(batch.obs, device).flatten(1), to_tensor(batch.next_obs, device).flatten(1)
    a = (to_tensor(batch.action, device) - online.bias) / online.scale  # the world's action, normalised
    reward, discount = to_tensor(batch.reward, device), to_tensor(batch.discount, device)
    with torch.no_grad():
        mu_next = target(s_next)
        noise = torch.randn_like(mu_next) * cfg.policy_noise if smoothing is None else smoothing
        a_next = (mu_next + noise.clamp(-cfg.noise_clip, cfg.noise_clip)).clamp(-1.0, 1.0)  # ã'
        q_next = torch.min(target.q1(s_next, a_next), target.q2(s_next, a_next))
        y = reward + discount * q_next  # γ_n = 0 at a terminal: done masking
    critic = (online.q1(s, a) - y).pow(2).mean() + (online.q2(s, a) - y).pow(2).mean()  # J_Q
    actor = -online.q1(s, online(s)).mean()  # J_μ; its gradient is taken w.r.t. the actor's block only
    return critic, actor, y


class TD3Policy(SACPolicy):
    """TD3's actor for a worker: ``clip(μ(s) + N(0, σ), −1, 1)`` rescaled to the Box while training (ξ from
    the policy's own generator; σ the weights' header figure, 0 for a frozen snapshot), ``μ(s)`` when
    ``deterministic``; uniformly random until the first update with ``random_start`` (SAC's rule)."""

    def _decide(self, obs: np.ndarray) -> np.ndarray:
        mu = self._forward(to_tensor(obs[None], self.device)).cpu().numpy()[0]  # also brings `version` up to date
        if self.random_start and not self.deterministic and self._untrained():
            return self._rng.uniform(self._low, self._high).astype(np.float32)
        sigma = 0.0 if self.deterministic else float(self.weights.epsilon)
        return to_box(mu[None], self._low, self._high, sigma, self._rng)[0]


def to_box(mu: np.ndarray, low: np.ndarray, high: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Actions from normalised ``(B, |A|)`` means: ``clip(μ + N(0, σ), −1, 1)`` rescaled to ``[low, high]``.

    >>> to_box(np.array([[0.5]]), np.array([-2.0]), np.array([2.0]), 0.0, np.random.default_rng(0)).tolist()
    [[1.0]]
    """
    a = np.asarray(mu, np.float64)
    if sigma > 0:
        a = a + sigma * rng.standard_normal(a.shape)
    scale, bias = (high - low) / 2, (high + low) / 2
    return np.clip(np.clip(a, -1.0, 1.0) * scale + bias, low, high).astype(np.float32)


class TD3(Algorithm):
    """TD3 for bounded Box actions from vector observations (the module docstring's update)."""

    name = "td3"
    config_class = TD3Config
    exploration_name = "epsilon"  # progress.csv's exploration column: here σ of the exploration noise
    action_kind = "box"
    instead = "dqn"
    takes_frames = False
    policy_class = TD3Policy
    cfg: TD3Config

    @property
    def action_dim(self) -> int:
        return int(self.action_space.shape[0])

    def build_model(self) -> "torch.nn.Module":
        space = self.action_space
        return build_td3_networks(
            int(np.prod(self.obs_shape)), self.action_dim, self.cfg.hidden, space.low.tolist(), space.high.tolist()
        )

    def backward(self, online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch") -> "torch.Tensor":
        nets: Any = online  # `build_td3_networks`' module: q1, q2, mu
        critic, actor, _ = td3_losses(nets, target, batch, self.cfg)
        critics = [*nets.q1.parameters(), *nets.q2.parameters()]
        write_gradients(nets, [(critic, critics), (actor, list(nets.mu.parameters()))])
        return critic.detach()

    def update_rule(self) -> "UpdateRule":
        """Adam and the target rule, the actor's block (θ's tail) held back but on every ``policy_delay``-th."""
        from nonstop.learning.optim import UpdateRule

        nets: Any = self.build_model()
        n = sum(p.numel() for p in nets.parameters())
        n_actor = sum(p.numel() for p in nets.mu.parameters())  # the actor's block is θ's tail
        every, tau = self.cfg.target_rule()
        return UpdateRule(self.cfg.lr, self.cfg.adam_eps, every, tau, delayed=(n - n_actor, n, every))

    def exploration(self, env_ticks: int, params: np.ndarray) -> float:
        return float(self.cfg.exploration_noise)

    def policy_kwargs(self) -> dict[str, Any]:
        return {"random_start": self.cfg.random_start}

    def act_batch(self, output: np.ndarray, rng: np.random.Generator, *, explore: bool) -> np.ndarray:
        space = self.action_space
        sigma = self.cfg.exploration_noise if explore else 0.0
        return to_box(output, np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), sigma, rng)

    def serve(self, forward: Any, *, seed: int | None = None) -> Any:
        return sampled_server(self, forward, seed=seed)  # SAC's: uniform until the first update, then noisy μ

    def export_module(self, model: "torch.nn.Module") -> "torch.nn.Module":
        from nonstop.policies.models import FromObservations

        return FromObservations(deterministic_actor(model), self.obs_shape)

    def export_meta(self, model: "torch.nn.Module") -> dict[str, Any]:
        space = self.action_space
        return {
            "output": {
                "name": "action",
                "shape": ["B", self.action_dim],
                "dtype": "float32",
                "action": "the output itself: μ(s) · scale + bias, deterministic, inside the Box",
            },
            "action_space": {
                "type": "Box",
                "shape": [self.action_dim],
                "low": space.low.tolist(),
                "high": space.high.tolist(),
            },
        }
