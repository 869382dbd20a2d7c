"""Soft Actor-Critic on the induced delayed semi-MDP (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications"), for Box action spaces.

Here are its settings (`SACConfig`, the paper's and CleanRL's defaults) and its place in a run (`SAC`:
the model it builds, the gradient it hands the learners, the figure the workers read); its networks,
losses and update, top to bottom, are `nonstop.learning.sacupdate`, and how it acts (the worker's
sampled or ``tanh(μ)`` action, the batching server's, random steps first) `nonstop.learning.sacact`.
This module imports no torch: `nonstop train` reads `SACConfig` to build its flags without it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from nonstop.learning.algos import Algorithm, ConfigBase
from nonstop.learning.sacact import SACPolicy, box_export_meta, sampled_server, squash

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import Batch

__all__ = ["SACConfig", "SAC", "SACPolicy", "FAMILY_DEFAULTS", "learning_starts_for"]

#: What each world family changes in `SACConfig`'s defaults (`SACConfig.for_family`); none so far: the defaults
#: are Tianshou's for MuJoCo and the RL Zoo's for Pendulum (Adam 1e-3 everywhere; α from 1, learned, as SB3's
#: and CleanRL's; HalfCheetah, seed 0, 30k steps: 2,071 at 1e-3 against 306 at 3e-4; SB3 2,728 and 297), with
#: uniformly random steps first, a tenth
#: of the run's ticks up to the RL Zoo's and Tianshou's 10,000 (HalfCheetah, Hopper, Walker2d: 100k ticks and
#: more), so a 10,000-tick Pendulum run starts learning at 1,000 (`learning_starts_for`)
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


class SAC(Algorithm):
    """Soft Actor-Critic for Box actions (`nonstop.learning.sacupdate`'s update), on vectors or frames."""

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
        from nonstop.learning.sacupdate import SACNetworks

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
        from nonstop.learning.sacupdate import sac_backward

        return sac_backward(online, target, batch, autotune=self.cfg.autotune, target_entropy=self.target_entropy)  # type: ignore[arg-type]

    def exploration(self, env_ticks: int, params: np.ndarray) -> float:
        return float(np.exp(params[-1]))  # α = exp(log α), θ's last number

    def act_batch(self, output: np.ndarray, rng: np.random.Generator, *, explore: bool) -> np.ndarray:
        space = self.action_space
        return squash(
            output, np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), rng if explore else None
        )

    def serve(self, forward: Any, *, seed: int | None = None) -> Any:
        return sampled_server(self, forward, seed=seed)

    def policy_kwargs(self) -> dict[str, Any]:
        return {"random_start": self.cfg.random_start}

    def export_module(self, model: "torch.nn.Module") -> "torch.nn.Module":
        from nonstop.learning.sacupdate import DeterministicActor
        from nonstop.policies.models import FromObservations

        return FromObservations(DeterministicActor(model), self.obs_shape)  # type: ignore[arg-type]

    def export_meta(self, model: "torch.nn.Module") -> dict[str, Any]:
        return box_export_meta(self.action_space)
