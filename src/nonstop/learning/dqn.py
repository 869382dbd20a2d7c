"""DQN on the induced delayed semi-MDP, with the paper's defaults (docs/design.md §3).

One update, as the learners run it (Mnih et al. 2015; van Hasselt et al. 2016 for
the double-DQN target)::

    (s, a, R, γ_n, s') ~ replay                      # R, γ_n: see learning/replay.py
    y      = R + γ_n · Q_target(s', argmax_a' Q(s', a'))   if double
             R + γ_n · max_a' Q_target(s', a')              otherwise
    loss   = Huber(Q(s, a) − y)                      # γ_n = 0 at a terminal: done masking
    g      = ∇loss, clipped to global norm `max_grad_norm`
    θ      ← Adam(θ, g)                              # applied by learners.py, in turn order
    θ_target ← θ  every `target_update` updates

`DQNPolicy` is the ε-greedy actor that inference workers run: it reloads the
newest published weights (`SharedWeights`) before acting, and reads ε from the
same header, which the trainer anneals 1.0 → 0.05 over the first tenth of the run's env ticks
(``epsilon_fraction``; ``epsilon_ticks`` when given: `DQNConfig.for_run`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

import numpy as np

from nonstop.learning.algos import ActorPolicy, Algorithm, ConfigBase, to_tensor
from nonstop.learning.optim import adam_step, apply_gradient, flat_gradient, init_training
from nonstop.learning.weights import SharedWeights
from nonstop.policies.base import Policy

if TYPE_CHECKING:
    import torch

    from nonstop.learning.replay import Batch

__all__ = [
    "DQNConfig",
    "DQN",
    "PAPER_PRESETS",
    "build_q_network",
    "DQNPolicy",
    "compute_gradient",
    "apply_gradient",
    "epsilon_at",
    "dqn_backward",
    # what every learner shares lives in `nonstop.learning.optim`; named here for the callers that import it from here
    "adam_step",
    "apply_gradient",
    "flat_gradient",
    "init_training",
]


#: the Q-networks for frames (`build_q_network`): the IMPALA ResNets, and GridConv for grid windows
ARCHS: Final = ("impala", "impala_padded", "2xdeep", "grid")

#: What each world family changes in `DQNConfig`'s defaults (`DQNConfig.for_family`): the paper's
#: Adam step per family, and what a small classic-control world needs to learn within 100k ticks.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "atari": {"lr": 1e-5},
    "gameboy": {"lr": 1e-3},
    "classic": {
        "lr": 5e-4,
        "batch_size": 64,
        "target_update": 500,
        "epsilon_ticks": 10_000,
        "learning_starts": 1000,
        "replay_capacity": 100_000,
        "double": True,
    },
}


@dataclass
class DQNConfig(ConfigBase):
    """DQN hyper-parameters. Defaults are the paper's (Implementation Details, §5)."""

    family_defaults: ClassVar[dict[str, dict[str, Any]]] = FAMILY_DEFAULTS

    gamma: float = field(default=0.99, metadata={"help": "discount per env tick (semi-MDP: γ^n over n ticks)"})
    batch_size: int = field(default=16, metadata={"help": "transitions per gradient"})
    lr: float = field(default=1e-5, metadata={"help": "Adam step size: 1e-5 Atari, 1e-3 Game Boy (paper)"})
    adam_eps: float = field(default=1.5e-4, metadata={"help": "Adam epsilon"})
    epsilon_start: float = field(default=1.0, metadata={"help": "exploration rate at tick 0"})
    epsilon_end: float = field(default=0.05, metadata={"help": "exploration rate after the anneal"})
    epsilon_ticks: int | None = field(
        default=None,
        metadata={"help": "env ticks of the linear ε anneal (none: --epsilon-fraction of the run's ticks)"},
    )
    epsilon_fraction: float = field(
        default=0.1,
        metadata={
            "help": "the share of the run's ticks ε anneals over where --epsilon-ticks is not given "
            "(SB3's exploration_fraction)"
        },
    )
    target_update: int = field(default=1000, metadata={"help": "updates between target-network syncs"})
    max_grad_norm: float = field(default=10.0, metadata={"help": "global gradient-norm clip"})
    double: bool = field(default=False, metadata={"help": "double DQN target"})
    learning_starts: int = field(default=1000, metadata={"help": "transitions in replay before learning"})
    updates_per_transition: float = field(
        default=1.0,
        metadata={
            "help": "updates per transition at most: learners pause when ahead of it, on either clock (0: no cap)"
        },
    )
    replay_capacity: int = field(default=1_000_000, metadata={"help": "most recent transitions kept (paper: 1M)"})
    hidden: tuple[int, ...] = field(default=(128, 128), metadata={"help": "MLP widths (vector observations)"})
    k: float = field(default=1, metadata={"help": "IMPALA ResNet width factor (image observations)"})
    arch: str = field(
        default="impala",
        metadata={
            "help": "ResNet for frames: impala (15 conv layers, the authors' "
            "ImpalaCNN: unpadded, a 512 head), impala_padded (the standard "
            "padded IMPALA net, a 256 head), 2xdeep (30 layers, the "
            "authors' deeper variant) or grid (two 3x3 convolutions for a many-agent world's small "
            "windows, GridConv: the default there)"
        },
    )

    def __post_init__(self) -> None:
        need = self._need
        need(0.0 <= self.gamma <= 1.0, "gamma", "in [0, 1]")
        for name in ("batch_size", "target_update", "replay_capacity"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "a positive integer")
        ticks = self.epsilon_ticks
        need(ticks is None or (isinstance(ticks, int) and ticks >= 1), "epsilon_ticks", "a positive integer (or None)")
        need(0.0 < self.epsilon_fraction <= 1.0, "epsilon_fraction", "in (0, 1]")
        need(isinstance(self.learning_starts, int) and self.learning_starts >= 0, "learning_starts", "an integer >= 0")
        need(self.lr > 0 and math.isfinite(self.lr), "lr", "a positive number")
        need(self.max_grad_norm > 0, "max_grad_norm", "positive")
        need(self.updates_per_transition >= 0, "updates_per_transition", ">= 0")
        need(0.0 <= self.epsilon_end <= self.epsilon_start <= 1.0, "epsilon_end", "<= epsilon_start, both in [0, 1]")
        self.hidden = tuple(int(h) for h in self.hidden)
        need(self.arch in ARCHS, "arch", "impala, impala_padded, 2xdeep or grid")

    def for_run(self, ticks: int) -> Self:
        """These settings for a run of ``ticks`` ticks: ``epsilon_ticks`` unset is ``epsilon_fraction`` of
        them (at least one), as SB3's ``exploration_fraction`` sizes its schedule to ``total_timesteps``.

        >>> DQNConfig().for_run(900).epsilon_ticks, DQNConfig(epsilon_ticks=5000).for_run(900).epsilon_ticks
        (90, 5000)
        """
        if self.epsilon_ticks is not None:
            return self
        return dataclasses.replace(self, epsilon_ticks=max(1, round(self.epsilon_fraction * int(ticks))))

    def target_rule(self) -> tuple[int, float]:
        """``(every, ρ)``: the target network is a copy of θ (ρ = 1) every ``target_update`` updates."""
        return self.target_update, 1.0

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "DQN":
        """DQN with these settings, for these observations and actions."""
        return DQN(self, obs_shape, action_space)


#: The settings the paper states (§5 Implementation Details, Appendix A); everything it leaves unsaid
#: (target period, Adam ε, learning starts) keeps nonstop's default, and its ε schedule stays the one
#: nonstop's paper runs have always used, 1 → 0.05 over the first 100,000 ticks, whatever the run's length
#: (not a tenth of it, as a run without a preset has: `DQNConfig.for_run`). Tetris: "one update on the
#: replay buffer for each action taken".
PAPER_EPSILON_TICKS: Final = 100_000
PAPER_PRESETS: dict[str, dict[str, Any]] = {
    "paper-atari": {
        "gamma": 0.99,
        "batch_size": 16,
        "lr": 1e-5,
        "replay_capacity": 1_000_000,
        "k": 1,
        "epsilon_ticks": PAPER_EPSILON_TICKS,
    },
    "paper-pokemon": {
        "gamma": 0.99,
        "batch_size": 16,
        "lr": 1e-3,
        "replay_capacity": 1_000_000,
        "k": 1,
        "epsilon_ticks": PAPER_EPSILON_TICKS,
    },
    "paper-tetris": {
        "gamma": 0.99,
        "batch_size": 16,
        "lr": 1e-3,
        "replay_capacity": 1_000_000,
        "k": 1,
        "updates_per_transition": 1.0,
        "epsilon_ticks": PAPER_EPSILON_TICKS,
    },
}


def epsilon_at(tick: int, cfg: DQNConfig) -> float:
    """Linear anneal ``epsilon_start → epsilon_end`` over ``epsilon_ticks`` env ticks (a run's settings:
    `DQNConfig.for_run` sizes an unset schedule to the run).

    >>> cfg = DQNConfig().for_run(1_000_000)
    >>> [round(epsilon_at(t, cfg), 3) for t in (0, 50_000, 10**6)]
    [1.0, 0.525, 0.05]
    """
    span = cfg.epsilon_ticks
    if span is None:
        raise ValueError("DQNConfig.epsilon_ticks is unset: size it to the run with DQNConfig.for_run(ticks)")
    if tick >= span:
        return cfg.epsilon_end
    return cfg.epsilon_start + max(0, tick) / span * (cfg.epsilon_end - cfg.epsilon_start)


def build_q_network(obs_shape: tuple[int, ...], n_actions: int, cfg: DQNConfig) -> "torch.nn.Module":
    """An MLP for vector observations, the paper's IMPALA ResNet (width ``k``) for frames."""
    from nonstop.policies.models import ARCH_OPTIONS, MLP, impala_resnet

    if len(obs_shape) == 1:
        return MLP(int(obs_shape[0]), n_actions, cfg.hidden)
    if cfg.arch == "grid":  # an agent's (H, W, C) window of a grid world
        from nonstop.policies.gridconv import GridConv

        return GridConv(obs_shape, n_actions)  # it refuses any other shape in one line
    if len(obs_shape) in (2, 3):
        channels, side = frame_dims(obs_shape)
        return impala_resnet(cfg.k, n_actions, channels, input_hw=side, **ARCH_OPTIONS[cfg.arch]).train()
    raise ValueError(f"no Q-network for observations of shape {obs_shape}")


def frame_dims(obs_shape: tuple[int, ...]) -> tuple[int, int]:
    """(channels, side) of a frame observation, as the ResNet takes it.

    >>> frame_dims((84, 84)), frame_dims((4, 84, 84)), frame_dims((84, 84, 3))
    ((1, 84), (4, 84), (3, 84))
    """
    side = obs_shape[0] if len(obs_shape) == 2 or obs_shape[-1] <= 4 else obs_shape[1]
    return (1 if len(obs_shape) == 2 else int(min(obs_shape[0], obs_shape[-1]))), int(side)


#: a host batch as the network takes it (kept under its old name: self-play and tests import it from here)
_to_tensor = to_tensor


def dqn_backward(
    online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch", cfg: DQNConfig
) -> "torch.Tensor":
    """The DQN loss of one batch at ``online``'s current parameters, back-propagated into each
    parameter's ``.grad`` (zeroed first, in place) and clipped to global norm ``max_grad_norm``.
    Returns the loss (a tensor on the network's device: reading it waits for the device)."""
    import torch
    import torch.nn.functional as F

    device = next(online.parameters()).device  # the learner's device: the batch goes there from host replay
    obs, next_obs = _to_tensor(batch.obs, device), _to_tensor(batch.next_obs, device)
    action = _to_tensor(batch.action, device).long()
    reward = _to_tensor(batch.reward, device).float()
    discount = _to_tensor(batch.discount, device).float()
    with torch.no_grad():
        next_q = target(next_obs)
        if cfg.double:
            best = online(next_obs).argmax(1, keepdim=True)
            bootstrap = next_q.gather(1, best).squeeze(1)
        else:
            bootstrap = next_q.max(1).values
        y = reward + discount * bootstrap  # discount is 0 at terminals: done masking
    q = online(obs).gather(1, action.unsqueeze(1)).squeeze(1)
    loss = F.smooth_l1_loss(q, y)
    online.zero_grad(set_to_none=False)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(online.parameters(), cfg.max_grad_norm)
    return loss.detach()


def compute_gradient(
    online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch", cfg: DQNConfig
) -> tuple[np.ndarray, float]:
    """The clipped DQN gradient of one batch at ``online``'s current parameters (`dqn_backward`).

    Returns the flat gradient (in ``parameters()`` order), on the host, and the loss.
    """
    loss = dqn_backward(online, target, batch, cfg)
    return flat_gradient(online), float(loss)


class DQNPolicy(ActorPolicy):
    """ε-greedy over a Q-network whose weights come from `SharedWeights`.

    Before each action it reloads the weights if a newer version was published
    (a copy of one complete version: never a half-written one) and reads ε from
    the weights' header. Build it with `make_dqn_policy` in the worker's own
    process (it is a module-level factory, so `ProcessPolicy` can spawn it).
    """

    def __init__(
        self,
        model: "torch.nn.Module",
        weights: SharedWeights,
        action_space: Any,
        *,
        seed: int | None = None,
        num_threads: int | None = 1,
        device: str = "cpu",
        dtype: str | None = None,
    ) -> None:
        super().__init__(model, weights, action_space, seed=seed, num_threads=num_threads, device=device, dtype=dtype)
        self.n = int(action_space.n)
        #: Q-value i is action ``start + i`` (a ``Discrete(n, start=s)`` space, e.g. Game Boy's six buttons)
        self.start = int(getattr(action_space, "start", 0))

    def _decide(self, obs: np.ndarray) -> int:
        """ε-greedy: ε is read from the weights' header, the action space's ``start`` added."""
        if self._rng.random() < self.weights.epsilon:
            return self.start + int(self._rng.integers(self.n))
        return self.start + self._greedy(to_tensor(obs[None], self.device))

    def _greedy(self, x: "torch.Tensor") -> int:
        """The index of the largest Q-value for the batch-of-one ``x``."""
        return int(self._forward(x).argmax(1))


def make_dqn_policy(
    obs_shape: tuple[int, ...],
    action_space: Any,
    cfg_dict: dict[str, Any],
    weights: SharedWeights,
    seed: int | None = None,
    latency: Any = None,
    *,
    device: str = "cpu",
    dtype: str | None = None,
) -> Policy:
    """Module-level factory (picklable with functools.partial) for worker threads and processes;
    with a ``latency`` (a `nonstop.policies.latency.Latency`) the policy declares it per decision.
    ``device``/``dtype``: where its model runs (`nonstop.inference.device.placement`)."""
    from nonstop.learning.algos import make_policy

    return make_policy(
        DQNConfig.from_dict(cfg_dict).algorithm(obs_shape, action_space),
        weights,
        seed,
        latency,
        device=device,
        dtype=dtype,
    )


class DQN(Algorithm):
    """Deep Q-learning on the semi-MDP (the module docstring's update), ε-greedy acting."""

    name = "dqn"
    config_class = DQNConfig
    exploration_name = "epsilon"
    action_kind = "discrete"
    instead = "sac"
    presets = PAPER_PRESETS
    legacy_settings_key = "dqn"  # runs saved before algorithms were parts keep their settings under "dqn"
    policy_class = DQNPolicy
    cfg: DQNConfig

    def build_model(self) -> "torch.nn.Module":
        return build_q_network(self.obs_shape, int(self.action_space.n), self.cfg)

    @classmethod
    def for_many_seats(cls, settings: DQNConfig, obs_shape: tuple[int, ...]) -> DQNConfig:
        """A many-seat world's small (H, W, C) windows (MAgent2's 13×13×5) through GridConv (``arch``
        ``grid``) where the default IMPALA ResNet was left in place."""
        import dataclasses

        if len(obs_shape) != 3 or settings.arch != "impala":
            return settings
        return dataclasses.replace(settings, arch="grid")

    def check_fits(self, device: str) -> None:
        if len(self.obs_shape) > 1 and self.cfg.arch != "grid":  # a ResNet each worker and learner builds
            from nonstop.policies.models import ARCH_OPTIONS, ensure_fits

            channels, side = frame_dims(self.obs_shape)  # the network `build_q_network` builds, counted as built
            n = int(self.action_space.n)
            ensure_fits(
                self.cfg.k, device, n_actions=n, in_channels=channels, input_hw=side, **ARCH_OPTIONS[self.cfg.arch]
            )

    def backward(self, online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch") -> "torch.Tensor":
        return dqn_backward(online, target, batch, self.cfg)

    def exploration(self, env_ticks: int, params: np.ndarray) -> float:
        return epsilon_at(env_ticks, self.cfg)

    def budget_notes(self, ticks: int) -> list[str]:
        cfg = self.cfg.for_run(ticks)  # the run's settings (an unset schedule is a share of these ticks)
        end = epsilon_at(ticks, cfg)
        if end == cfg.epsilon_end:
            return []
        return [
            f"ε anneals over {cfg.epsilon_ticks:,} ticks but this run has {ticks:,}: it ends at ε "
            f"{end:.3f}, not {cfg.epsilon_end:g}; --epsilon-ticks {max(1, ticks // 10):,} anneals "
            f"over a tenth of the run (the default where no --epsilon-ticks, world entry or --preset names one)"
        ]

    def act_batch(self, output: np.ndarray, rng: np.random.Generator, *, explore: bool) -> np.ndarray:
        # the greedy action; ε is each lane's own (it reads the weights' header)
        return np.asarray(output).argmax(axis=1) + self.action_start

    def serve(self, forward: Any, *, seed: int | None = None) -> Any:
        start = self.action_start  # Q-value i is action start + i (a Discrete(n, start=s) space)

        def greedy(batch: np.ndarray) -> np.ndarray:
            return forward(batch) + start  # the forward's own argmax (a CUDA graph's, where captured)

        return greedy

    def opponent_exploration(self) -> float:
        return float(self.cfg.epsilon_end)  # a snapshot opponent: ε-greedy at the learner's final ε

    def lane_epsilon(self, weights: Any) -> Any:
        from nonstop.learning.algos import EpsilonOf

        return EpsilonOf(weights)

    def export_module(self, model: "torch.nn.Module") -> "torch.nn.Module":
        from nonstop.policies.models import FromObservations

        return FromObservations(model, self.obs_shape)

    def export_meta(self, model: "torch.nn.Module") -> dict[str, Any]:
        n = int(self.action_space.n)
        return {
            "output": {
                "name": "q_values",
                "shape": ["B", n],
                "dtype": "float32",
                "action": "action_space.start + argmax over the last axis (greedy)",
            },
            "action_space": {"type": "Discrete", "n": n, "start": self.action_start},
            "n_actions": n,
        }
