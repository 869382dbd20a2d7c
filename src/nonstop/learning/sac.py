"""Soft Actor-Critic on the induced delayed semi-MDP (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications"), for Box action spaces.

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

Acting: until the learners' first update (``learning_starts`` transitions) the actor draws its actions
uniformly over the Box (``random_start``), as CleanRL, SB3 and Tianshou do: a fresh actor's samples
(σ ≈ 0.22 of the half-width, log σ starting mid-range) cover a sliver of the Box. Every backend's actor sees it the same way:
its weights are still the first version it loaded (`SACPolicy`, and the batching server's `SAC.serve`).

The actor is a Gaussian squashed by tanh and rescaled to the Box's bounds, ``a = tanh(u)·scale + bias``,
with log π corrected for the squash and the scale (appendix C). It samples while training and acts
``tanh(μ)`` for evaluation and export. The networks are in `nonstop.learning.sacnets`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple, Self

import numpy as np

from nonstop.learning.algos import ActorPolicy, Algorithm, ConfigBase, to_tensor

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import Batch
    from nonstop.learning.sacnets import SACNetworks

__all__ = [
    "SACConfig",
    "SAC",
    "SACPolicy",
    "SACLosses",
    "sac_losses",
    "twin_critic_loss",
    "soft_actor_losses",
    "write_gradients",
    "FAMILY_DEFAULTS",
    "learning_starts_for",
]

#: What each world family changes in `SACConfig`'s defaults (`SACConfig.for_family`); none so far: the defaults
#: are Tianshou's for MuJoCo and the RL Zoo's for Pendulum (Adam 1e-3 everywhere; α from 1, learned, as SB3's
#: and CleanRL's; HalfCheetah, seed 0, 30k steps: 2,071 at 1e-3 against 306 at 3e-4; SB3 2,728 and 297), with
#: uniformly random steps first, a tenth
#: of the run's ticks up to the RL Zoo's and Tianshou's 10,000 (HalfCheetah, Hopper, Walker2d: 100k ticks and
#: more), so a 10,000-tick Pendulum run starts learning at 1,000 (`learning_starts_for`)
#: the version of a run's weights that holds its initial θ (`init_training` publishes it first); a resumed
#: run publishes its restored θ next, so an actor that first sees a later version acts from its weights
_INITIAL_VERSION: Final = 1
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {}


@dataclass
class SACConfig(ConfigBase):
    """SAC hyper-parameters. Defaults are the paper's (Table 1) and CleanRL's."""

    family_defaults: ClassVar[dict[str, dict[str, Any]]] = FAMILY_DEFAULTS

    gamma: float = field(default=0.99, metadata={"help": "discount per env tick (semi-MDP: γ^n over n ticks)"})
    batch_size: int = field(default=256, metadata={"help": "transitions per gradient"})
    lr: float = field(
        default=1e-3,
        metadata={
            "help": "Adam step size of the actor, the critics and α (Tianshou's MuJoCo and the RL Zoo's Pendulum)"
        },
    )
    adam_eps: float = field(default=1e-8, metadata={"help": "Adam epsilon"})
    tau: float = field(default=0.005, metadata={"help": "Polyak step of the target critics after each update"})
    alpha: float = field(
        default=1.0, metadata={"help": "the entropy coefficient α at the start (learned with --autotune)"}
    )
    autotune: bool = field(default=True, metadata={"help": "learn α toward the target entropy −|A| (paper §5)"})
    learning_starts: int | None = field(
        default=None,
        metadata={
            "help": "transitions in replay before learning, uniformly random ones with --random-start "
            "(default: a tenth of the run's ticks, at most 10,000)"
        },
    )
    random_start: bool = field(
        default=True,
        metadata={
            "help": "act uniformly at random over the Box until the first update, as CleanRL, SB3 and Tianshou do"
        },
    )
    updates_per_transition: float = field(
        default=1.0,
        metadata={
            "help": "updates per transition at most: learners pause when ahead of it, on either clock (0: no cap)"
        },
    )
    replay_capacity: int = field(default=1_000_000, metadata={"help": "most recent transitions kept"})
    hidden: tuple[int, ...] = field(default=(256, 256), metadata={"help": "MLP widths of the actor and each critic"})
    features: int = field(default=256, metadata={"help": "frames: the IMPALA encoder's output width"})
    k: float = field(default=1, metadata={"help": "IMPALA ResNet width factor of the encoder (image observations)"})
    arch: str = field(default="impala", metadata={"help": "ResNet for frames: impala (15 conv layers) or 2xdeep (30)"})

    def __post_init__(self) -> None:
        need = self._need
        need(0.0 <= self.gamma <= 1.0, "gamma", "in [0, 1]")
        for name in ("batch_size", "replay_capacity", "features"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "a positive integer")
        need(
            self.learning_starts is None or (isinstance(self.learning_starts, int) and self.learning_starts >= 0),
            "learning_starts",
            "an integer >= 0 (or None: a tenth of the run's ticks)",
        )
        need(self.lr > 0 and math.isfinite(self.lr), "lr", "a positive number")
        need(0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        need(self.alpha > 0 and math.isfinite(self.alpha), "alpha", "a positive number")
        need(self.updates_per_transition >= 0, "updates_per_transition", ">= 0")
        self.hidden = tuple(int(h) for h in self.hidden)
        need(self.arch in ("impala", "2xdeep"), "arch", "impala or 2xdeep")

    def for_run(self, ticks: int) -> Self:
        """These settings for a run of ``ticks`` ticks: ``learning_starts`` unset is `learning_starts_for` it."""
        if self.learning_starts is not None:
            return self
        return dataclasses.replace(self, learning_starts=learning_starts_for(ticks, self.batch_size))

    def target_rule(self) -> tuple[int, float]:
        """``(every, ρ)``: Polyak averaging with ρ = τ after every update."""
        return 1, self.tau

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "SAC":
        """SAC with these settings, for these observations and actions."""
        return SAC(self, obs_shape, action_space)


#: the most uniformly random steps a run starts with (the RL Zoo's and Tianshou's MuJoCo figure)
MAX_LEARNING_STARTS = 10_000


def learning_starts_for(ticks: int, batch_size: int = 1) -> int:
    """The random steps a run of ``ticks`` ticks starts with when ``learning_starts`` is unset: a tenth of
    the run, at most `MAX_LEARNING_STARTS`, at least a batch. HalfCheetah's 100,000 ticks start with the
    RL Zoo's 10,000; a 10,000-tick Pendulum run with 1,000.

    >>> learning_starts_for(100_000), learning_starts_for(10_000), learning_starts_for(2_000_000), learning_starts_for(400, 256)
    (10000, 1000, 10000, 256)
    """
    return max(int(batch_size), min(MAX_LEARNING_STARTS, int(ticks) // 10))


class SACLosses(NamedTuple):
    """One batch's three losses (scalars) and what the progress line reports."""

    critic: "torch.Tensor"
    actor: "torch.Tensor"
    alpha: "torch.Tensor"
    target: "torch.Tensor"  # y, per transition (for tests)


def sac_losses(
    online: "SACNetworks",
    target: "SACNetworks",
    batch: "Batch",
    *,
    target_entropy: float,
    noise_next: "torch.Tensor | None" = None,
    noise: "torch.Tensor | None" = None,
) -> SACLosses:
    """The module docstring's losses for one batch. ``noise_next``, ``noise``: the ξ of ã' and ã (None:
    drawn; a test passes its own to compute the same numbers by hand)."""
    import torch

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


def twin_critic_loss(online: "SACNetworks", f: "torch.Tensor", a: "torch.Tensor", y: "torch.Tensor") -> "torch.Tensor":
    """J_Q: both critics' squared error to the target ``y`` at features ``f`` and normalised actions ``a``
    (SAC's one-step ``y``, DCAC's resampled n-step one)."""
    return 0.5 * ((online.q1(f, a) - y).pow(2).mean() + (online.q2(f, a) - y).pow(2).mean())


def soft_actor_losses(
    online: "SACNetworks", f: "torch.Tensor", target_entropy: float, noise: "torch.Tensor | None" = None
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """``(J_π, J_α)`` at features ``f``: the actor against the smaller critic (the features held fixed:
    the actor never trains the encoder), and α toward the target entropy. ``noise``: ξ of ã (None: drawn)."""
    import torch

    f_fixed = f.detach()
    a_pi, logp = online.actor.sample(f_fixed, noise)  # ã ~ π(·|s)
    logp = logp - online.scale.log().sum()  # in the world's units
    alpha = online.log_alpha.exp().detach()
    actor = (alpha * logp - torch.min(online.q1(f_fixed, a_pi), online.q2(f_fixed, a_pi))).mean()
    temperature = (-online.log_alpha.exp() * (logp.detach() + target_entropy)).mean()
    return actor, temperature


def write_gradients(online: "torch.nn.Module", blocks: list[tuple["torch.Tensor", list[Any]]]) -> None:
    """Each loss's gradient into its own parameters' ``.grad`` (zeroed first, written in place: a device
    learner's ``.grad`` are views of its flat gradient); a parameter no loss reaches keeps zero."""
    import torch

    online.zero_grad(set_to_none=False)
    for loss, params in blocks:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        for p, g in zip(params, grads):
            if g is None:
                continue
            if p.grad is None:
                p.grad = g.detach().clone()
            else:
                p.grad.copy_(g)


def sac_backward(
    online: "SACNetworks",
    target: "SACNetworks",
    batch: "Batch",
    cfg: SACConfig,
    target_entropy: float,
    *,
    noise_next: "torch.Tensor | None" = None,
    noise: "torch.Tensor | None" = None,
) -> "torch.Tensor":
    """One batch's gradient into each parameter's ``.grad``, each block from its own loss:
    ∇J_Q into the encoder and critics, ∇J_π into the actor, ∇J_α into log α (zero without autotune).
    Returns the critic loss (what the progress line shows as the loss). ``noise_next``, ``noise``: as
    `sac_losses`."""
    losses = sac_losses(online, target, batch, target_entropy=target_entropy, noise_next=noise_next, noise=noise)
    blocks = [(losses.critic, online.critic_parameters()), (losses.actor, list(online.actor.parameters()))]
    if cfg.autotune:
        blocks.append((losses.alpha, [online.log_alpha]))
    write_gradients(online, blocks)
    return losses.critic.detach()


class SACPolicy(ActorPolicy):
    """SAC's actor for a worker: a sampled action ``tanh(μ + σ·ξ)·scale + bias`` while training (ξ from the
    policy's own generator), ``tanh(μ)·scale + bias`` when ``deterministic``. Returns a float32 vector.
    ``placement``: `ActorPolicy`'s keywords (``seed``, ``num_threads``, ``device``, ``dtype``)."""

    def __init__(
        self,
        model: "torch.nn.Module",
        weights: Any,
        action_space: Any,
        *,
        deterministic: bool = False,
        random_start: bool = False,
        **placement: Any,
    ) -> None:
        super().__init__(model, weights, action_space, **placement)
        self.deterministic = bool(deterministic)
        #: act uniformly over the Box until the learners' first update (`SACConfig.random_start`)
        self.random_start = bool(random_start)
        self._first_version: int | None = None
        self._low, self._high = np.asarray(action_space.low, np.float32), np.asarray(action_space.high, np.float32)

    def _decide(self, obs: np.ndarray) -> np.ndarray:
        out = self._forward(to_tensor(obs[None], self.device)).cpu().numpy()  # also brings `version` up to date
        if self.random_start and not self.deterministic and self._untrained():
            return self._rng.uniform(self._low, self._high).astype(np.float32)
        return squash(out, self._low, self._high, None if self.deterministic else self._rng)[0]

    def _untrained(self) -> bool:
        """Whether the weights are still the first version this actor loaded, in a run that learns (the
        header's figure is α > 0; a frozen opponent's is 0: `Algorithm.opponent_exploration`). A fresh run
        publishes its initial θ once, and its learners publish the next version only after their first
        update, which waits for ``learning_starts`` transitions; so until then the actor acts uniformly. A
        resumed run republishes its trained θ at once (version 2 of its weights), so it acts from it."""
        if self._first_version is None:
            self._first_version = self.version
        return (
            self._first_version <= _INITIAL_VERSION
            and self.version == self._first_version
            and float(getattr(self.weights, "epsilon", 0.0)) > 0.0
        )


def squash(output: np.ndarray, low: np.ndarray, high: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    """Actions from the actor's ``(B, 2·|A|)`` outputs (mean, log std): sampled with ``rng``, or ``tanh(μ)``
    without one, rescaled to ``[low, high]``.

    >>> squash(np.array([[0.0, -1.0]]), np.array([-2.0]), np.array([2.0]), None).tolist()
    [[0.0]]
    """
    mean, log_std = np.split(np.asarray(output, np.float64), 2, axis=-1)
    u = mean if rng is None else mean + np.exp(log_std) * rng.standard_normal(mean.shape)
    scale, bias = (high - low) / 2, (high + low) / 2
    return np.clip(np.tanh(u) * scale + bias, low, high).astype(np.float32)


class SAC(Algorithm):
    """Soft Actor-Critic for Box actions (the module docstring's update), on vectors or frames."""

    name = "sac"
    config_class = SACConfig
    exploration_name = "alpha"
    action_kind = "box"
    instead = "dqn"
    policy_class = SACPolicy
    cfg: SACConfig

    @property
    def action_dim(self) -> int:
        return int(self.action_space.shape[0])

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (self.action_dim,)

    @property
    def action_start(self) -> int:
        return 0

    @property
    def target_entropy(self) -> float:
        """H̄ = −|A| (paper §5)."""
        return -float(self.action_dim)

    def _encoder(self) -> tuple[Any, int]:
        """The encoder and its output width: a flatten for vectors, the IMPALA ResNet for frames."""
        shape = self.obs_shape
        if len(shape) == 1:
            return None, int(shape[0])
        if len(shape) in (2, 3):
            from nonstop.policies.models import ARCH_DEPTHS, impala_resnet

            side = shape[0] if len(shape) == 2 or shape[-1] <= 4 else shape[1]
            channels = 1 if len(shape) == 2 else min(shape[0], shape[-1])
            net = impala_resnet(
                self.cfg.k, self.cfg.features, channels, input_hw=int(side), depth=ARCH_DEPTHS[self.cfg.arch]
            )
            return net, self.cfg.features
        raise ValueError(f"SAC has no encoder for observations of shape {shape}")

    def _networks_class(self) -> Any:
        """The module that holds this algorithm's networks (RTAC and DCAC name theirs; the build is shared)."""
        from nonstop.learning.sacnets import SACNetworks

        return SACNetworks

    def build_model(self) -> "torch.nn.Module":
        encoder, features = self._encoder()
        return self._networks_class()(
            features,
            self.action_dim,
            self.cfg.hidden,
            low=self.action_space.low.tolist(),
            high=self.action_space.high.tolist(),
            encoder=encoder,
            alpha=self.cfg.alpha,
            critic_features=self._critic_features(),
        )

    def _critic_features(self) -> int | None:
        """The critics' input width where it is not the actor's features (None: the same)."""
        return None

    def check_fits(self, device: str) -> None:
        if len(self.obs_shape) > 1:  # the IMPALA encoder each worker and learner builds
            from nonstop.policies.models import ARCH_DEPTHS, ensure_fits

            ensure_fits(self.cfg.k, device, n_actions=self.cfg.features, depth=ARCH_DEPTHS[self.cfg.arch])

    def backward(self, online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch") -> "torch.Tensor":
        return sac_backward(online, target, batch, self.cfg, self.target_entropy)  # type: ignore[arg-type]

    def exploration(self, env_ticks: int, params: np.ndarray) -> float:
        return float(np.exp(params[-1]))  # α = exp(log α), θ's last number

    def act_batch(self, output: np.ndarray, rng: np.random.Generator, *, explore: bool) -> np.ndarray:
        space = self.action_space
        return squash(
            output, np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), rng if explore else None
        )

    def serve(self, forward: Any, *, seed: int | None = None) -> Any:
        rng = np.random.default_rng(seed)
        refresh = getattr(forward, "refresh", None)  # how the learner's versions reach it (None: fixed θ)
        first: list[int] = []

        def sampled(batch: np.ndarray) -> np.ndarray:
            out = forward.q_values(batch).numpy()  # refreshes first: the version is current
            if self.cfg.random_start and refresh is not None:
                first[:] = first or [refresh.version]
                if first[0] <= _INITIAL_VERSION and refresh.version == first[0]:  # no update yet: uniform over the Box
                    space = self.action_space
                    return rng.uniform(space.low, space.high, (len(out), self.action_dim)).astype(np.float32)
            return self.act_batch(out, rng, explore=True)  # (b, d) float32

        return sampled

    def policy_kwargs(self) -> dict[str, Any]:
        return {"random_start": self.cfg.random_start}

    def export_module(self, model: "torch.nn.Module") -> "torch.nn.Module":
        from nonstop.learning.sacnets import DeterministicActor
        from nonstop.policies.models import FromObservations

        return FromObservations(DeterministicActor(model), self.obs_shape)  # type: ignore[arg-type]

    def export_meta(self, model: "torch.nn.Module") -> dict[str, Any]:
        space = self.action_space
        return {
            "output": {
                "name": "action",
                "shape": ["B", self.action_dim],
                "dtype": "float32",
                "action": "the output itself: tanh(μ(s)) · scale + bias, deterministic, inside the Box",
            },
            "action_space": {
                "type": "Box",
                "shape": [self.action_dim],
                "low": space.low.tolist(),
                "high": space.high.tolist(),
            },
        }
