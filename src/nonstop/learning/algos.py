"""An algorithm is a part: what the replay, learners, weights and workers need of one, and nothing more.

nonstop's learning machinery is algorithm-free. Its state is one flat float32 vector θ (with Adam's
moments and a target copy: `nonstop.learning.weights.TrainingState`), learners hand in one flat
gradient per batch and apply it in their mode's order (`nonstop.learning.learners`), and workers read
θ from `SharedWeights`. An `Algorithm` fills in the rest:

* its **model**: ONE ``nn.Module`` holding every network it learns (DQN: the Q-network; SAC: the
  actor, twin critics and log α), laid out flat in ``parameters()`` order;
* its **update**: `Algorithm.backward` writes one batch's gradient into each parameter's ``.grad``;
  each block of the flat gradient is its own loss's gradient with respect to its own parameters
  (SAC: the critic loss into the critics, the actor loss with the critics held fixed into the actor,
  the temperature loss into log α). Adam on the flat vector is then each block's own Adam;
* its **target rule**: ``θ_target ← (1 − ρ)·θ_target + ρ·θ`` every ``target_every`` updates, with
  ``ρ = target_polyak`` (DQN: a hard copy, ρ = 1, every ``target_update`` updates; SAC: Polyak
  averaging, ρ = τ = 0.005, after every update). The rule is data, so every learner applies it alike;
* its **actor**: the `Policy` a worker runs (`Algorithm.policy`), and the standalone actor `nonstop
  export` writes (`Algorithm.export_module`);
* its **exploration figure** for the progress line (DQN: ε, annealed by ticks; SAC: the entropy
  coefficient α, read from θ), published in the weights' header (`SharedWeights.exploration`);
* its **spaces**: `Algorithm.check_spaces` refuses a world it cannot act in, in one line naming the
  ``--algo`` that can.

An algorithm is registered by name (`nonstop.experiment.registry`, kind ``algo``); its config
dataclass (``config_class``) generates ``nonstop train``'s flags and is saved with the run. An
`Algorithm` instance is plain data (its config and the world's spaces): it pickles to learner
processes and Ray actors.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

import gymnasium
import numpy as np

from nonstop.learning.weights import SharedWeights, load_flat
from nonstop.policies.base import Decision, Policy

if TYPE_CHECKING:
    import torch

    from nonstop.learning.optim import UpdateRule
    from nonstop.learning.replay import Batch

__all__ = [
    "Algorithm",
    "AlgoConfig",
    "ConfigBase",
    "ActorPolicy",
    "algorithm_of",
    "as_space",
    "to_tensor",
    "make_policy",
]


class EpsilonOf:
    """The ε a request lane explores with, read from the weights' header per decision (picklable: a child's
    lane explores as the learners anneal)."""

    def __init__(self, weights: Any) -> None:
        self.weights = weights

    def __call__(self) -> float:
        return float(self.weights.epsilon)


class AlgoConfig(Protocol):
    """What every algorithm's config dataclass offers (`DQNConfig`, `SACConfig`)."""

    gamma: float
    batch_size: int
    lr: float
    adam_eps: float
    learning_starts: int
    updates_per_transition: float
    replay_capacity: int

    def to_dict(self) -> dict[str, Any]: ...

    def for_run(self, ticks: int) -> Any: ...

    def target_rule(self) -> tuple[int, float]: ...

    def algorithm(self, obs_shape: tuple[int, ...], action_space: Any) -> "Algorithm": ...


class ConfigBase:
    """What every algorithm's config dataclass shares: its defaults per world family (``family_defaults``),
    its plain-data form (tuples as lists, for JSON) and back, and the one-line refusal of a bad value.
    A subclass is a ``@dataclass``; its name less ``Config`` names it in errors (``DQNConfig``: DQN)."""

    #: what each world family changes in the defaults (`for_family`)
    family_defaults: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def for_family(cls, family: str, **overrides: Any) -> Self:
        """The defaults, with what a world family changes (``family_defaults``), then ``overrides``."""
        return cls(**{**cls.family_defaults.get(family, {}), **overrides})

    def for_run(self, ticks: int) -> Self:
        """These settings for a run of ``ticks`` ticks (a setting left to the run's length is filled in:
        SAC's ``learning_starts``); as they are by default."""
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        out: Self = config_from_dict(cls, d, cls.__name__.removesuffix("Config"))
        return out

    def _need(self, ok: bool, name: str, what: str) -> None:
        """``__post_init__``'s check: ``name`` must be ``what``, or one line saying so."""
        if not ok:
            raise ValueError(f"{type(self).__name__}.{name} must be {what}, got {getattr(self, name)!r}")


def as_space(action_space: Any) -> gymnasium.Space:
    """An action space; an int ``n`` is ``Discrete(n)`` (the learners' older ``n_actions`` argument)."""
    if isinstance(action_space, (int, np.integer)) and not isinstance(action_space, bool):
        return gymnasium.spaces.Discrete(int(action_space))
    if not isinstance(action_space, gymnasium.Space):
        raise TypeError(f"an action space must be a gymnasium Space or a number of actions, got {action_space!r}")
    return action_space


def algorithm_of(cfg: Any, obs_shape: tuple[int, ...], action_space: Any) -> "Algorithm":
    """The algorithm ``cfg`` configures, for these observations and actions (``cfg`` may already be one)."""
    if isinstance(cfg, Algorithm):
        return cfg
    return cfg.algorithm(tuple(obs_shape), as_space(action_space))


def to_tensor(x: np.ndarray, device: "torch.device | None" = None) -> "torch.Tensor":
    """A host batch as a network takes it, on ``device`` (None: the CPU). Bytes travel (pinned,
    without blocking, to CUDA: `nonstop.inference.device.to_device`) and are scaled there: ``uint8``
    frames become float32 ``/ 255`` laid out ``(B, C, H, W)``."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x))
    if device is not None:
        from nonstop.inference.device import to_device

        t = to_device(t, device)
    if t.dtype == torch.uint8:
        t = t.float().div_(255.0)
        return t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2) if t.shape[-1] <= 4 else t
    return t.float()


class Algorithm:
    """One learning algorithm bound to its config and the world's spaces (see the module docstring).

    Subclasses set the class attributes and implement the methods that raise `NotImplementedError`.
    """

    #: its name in the registry and on the command line (``--algo``)
    name: ClassVar[str] = ""
    #: its config dataclass (an `AlgoConfig` with ``for_family`` and ``from_dict``)
    config_class: ClassVar[Any]
    #: what its exploration figure is called in progress rows and lines: ``epsilon`` or ``alpha``, each a
    #: column of progress.csv (`nonstop.learning.runlog.PROGRESS_COLUMNS`: a new name needs a new column)
    exploration_name: ClassVar[str] = "epsilon"

    # ------------------------------------------------------------------ what it declares it needs
    #: the actions it takes: ``discrete`` (a ``Discrete`` space) or ``box`` (a bounded ``Box`` of one axis)
    action_kind: ClassVar[str] = "discrete"
    #: the ``--algo`` a refused world is pointed to (one for the other kind of actions)
    instead: ClassVar[str] = ""
    #: whether it can learn from frames (an image encoder); if not, vector observations only
    takes_frames: ClassVar[bool] = True
    #: whether its actor and critic always see the actions in flight (RTAC, DCAC: their premise). Such an
    #: algorithm's config has ``buffer_slots``, the run's K (`nonstop.experiment.seating` sets it)
    needs_action_buffer: ClassVar[bool] = False
    #: what a transition's reward is framed by: ``action`` (the decision's, at its landing) or ``observation``
    #: (each observation's own step: RTAC's and DCAC's; `nonstop.learning.inflight.in_flight_recorder`)
    reward_framing: ClassVar[str] = "action"
    #: whether its critic learns on the observation each action acted on, known in hindsight (BPQL): the
    #: replay keeps those frames (`nonstop.learning.replay.ReplayBuffer.create`'s ``landing_states``)
    needs_landing_states: ClassVar[bool] = False
    #: named settings a run may start from (``--preset``): the paper's, per world family
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    #: the key its settings were saved under in a run's config.json before algorithms were parts (None: none)
    legacy_settings_key: ClassVar[str | None] = None
    #: the `TrainConfig` field its settings are in: the same for every algorithm (named for callers that
    #: build a config by field name)
    settings_field: ClassVar[str] = "algo_settings"

    def __init__(self, cfg: Any, obs_shape: tuple[int, ...], action_space: gymnasium.Space) -> None:
        if not isinstance(cfg, self.config_class):
            raise TypeError(f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(cfg).__name__}")
        self.cfg: Any = cfg
        self.obs_shape = tuple(int(s) for s in obs_shape)
        self.action_space: Any = action_space

    def __repr__(self) -> str:
        return f"{type(self).__name__}(obs_shape={self.obs_shape}, action_space={self.action_space!r})"

    # ------------------------------------------------------------------ the world it acts in
    @classmethod
    def check_spaces(cls, obs_space: gymnasium.Space, action_space: gymnasium.Space, env: str) -> None:
        """Refuse, in one line naming the ``--algo`` that fits, a world this algorithm cannot act in (its
        declared ``action_kind`` and ``takes_frames``)."""
        me, hint = cls.name.upper(), f": use --algo {cls.instead}" if cls.instead else ""
        if cls.action_kind == "discrete":
            if not isinstance(action_space, gymnasium.spaces.Discrete):
                raise ValueError(f"{me} needs a Discrete action space; {env} has {action_space}{hint}")
        else:
            if not isinstance(action_space, gymnasium.spaces.Box) or len(action_space.shape or ()) != 1:
                raise ValueError(f"{me} needs a Box action space of one axis; {env} has {action_space}{hint}")
            if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
                raise ValueError(
                    f"{me} rescales its actions to the Box's bounds; {env}'s are unbounded: {action_space}"
                )
        if obs_space.shape is None:
            raise ValueError(f"{me} needs array observations; {env} has {obs_space}")
        if not cls.takes_frames and len(obs_space.shape) != 1:
            raise ValueError(f"{me} learns from vector observations; {env}'s are {tuple(obs_space.shape)}{hint}")

    @classmethod
    def settings(cls, cfg: Any, family: str) -> Any:
        """The run's settings: ``cfg`` as given (a dict is read), else the world family's defaults."""
        if cfg is None:
            return cls.config_class.for_family(family)
        if isinstance(cfg, dict):
            return cls.config_class.from_dict(cfg)
        if not isinstance(cfg, cls.config_class):
            raise ValueError(f"--algo {cls.name} takes {cls.config_class.__name__} settings, got {type(cfg).__name__}")
        return cfg

    @classmethod
    def for_many_seats(cls, settings: Any, obs_shape: tuple[int, ...]) -> Any:
        """``settings`` for a world of more than two seats whose agents see ``obs_shape`` (DQN reads a grid
        window through GridConv); as they are by default."""
        return settings

    @classmethod
    def check_timing(cls, delay_ticks: float, scheduler: str) -> None:
        """Refuse, in one line, a run whose timing breaks this algorithm's premise: ``delay_ticks`` is the
        model's mean latency in ticks, ``scheduler`` the run's (`nonstop.learning.rtac.RTAC` needs the
        action just decided to land 2 ticks on or later). Most algorithms learn under any timing."""

    def check_fits(self, device: str) -> None:
        """Refuse (`nonstop.policies.models.ModelTooLargeError`) a model this machine cannot hold."""

    @property
    def action_shape(self) -> tuple[int, ...]:
        """One action as the replay stores it: ``()`` an int64 index, ``(d,)`` a float32 vector."""
        return () if self.action_kind == "discrete" else (int(self.action_space.shape[0]),)

    @property
    def action_start(self) -> int:
        """The first action of a ``Discrete(n, start=s)`` space (the replay stores indices from 0)."""
        return int(self.action_space.start) if self.action_kind == "discrete" else 0

    # ------------------------------------------------------------------ learning
    def build_model(self) -> "torch.nn.Module":
        """Every network it learns, in one module (θ is its ``parameters()``, flat)."""
        raise NotImplementedError

    def backward(self, online: "torch.nn.Module", target: "torch.nn.Module", batch: "Batch") -> "torch.Tensor":
        """One batch's gradient at ``online``'s parameters, written into each parameter's ``.grad``
        (zeroed first, in place); returns the loss to report (a tensor on the networks' device)."""
        raise NotImplementedError

    def sample(self, replay: Any, batch_size: int, rng: np.random.Generator) -> Any:
        """One batch for `backward` from ``replay`` (None: not yet). Transitions drawn uniformly; DCAC
        draws runs of consecutive transitions (its resampled n-step targets)."""
        return replay.sample(batch_size, rng)

    @property
    def target_every(self) -> int:
        """Updates between two applications of the target rule (the config's ``target_rule()``)."""
        every: int = self.cfg.target_rule()[0]
        return every

    @property
    def target_polyak(self) -> float:
        """ρ of the target rule ``θ_target ← (1 − ρ)·θ_target + ρ·θ`` (1: a copy; the config's ``target_rule()``)."""
        rho: float = self.cfg.target_rule()[1]
        return rho

    def update_rule(self) -> "UpdateRule":
        """How the learners apply this algorithm's gradient (`nonstop.learning.optim.UpdateRule`): Adam with
        the config's ``lr`` and ``adam_eps``, its target rule; TD3 holds its actor's block back."""
        from nonstop.learning.optim import UpdateRule

        return UpdateRule.of(self.cfg)

    def exploration(self, env_ticks: int, params: np.ndarray) -> float:
        """The exploration figure after ``env_ticks`` ticks with parameters ``params`` (published in the
        weights' header for the workers and the progress line)."""
        raise NotImplementedError

    def budget_notes(self, ticks: int) -> list[str]:
        """What this algorithm's settings cannot do in a run of ``ticks`` env ticks (a schedule that
        outlasts it), one line each with the numbers and the flag that changes it; said before it starts."""
        return []

    # ------------------------------------------------------------------ acting
    #: the actor a worker runs (an `ActorPolicy` subclass), built by `policy`
    policy_class: ClassVar[type["ActorPolicy"]]

    def policy_kwargs(self) -> dict[str, Any]:
        """What `policy_class` takes beside the model, the weights and the action space."""
        return {}

    def policy(
        self,
        model: "torch.nn.Module",
        weights: Any,
        *,
        seed: int | None = None,
        num_threads: int | None = 1,
        device: str = "cpu",
        dtype: str | None = None,
        policy_class: type["ActorPolicy"] | None = None,
    ) -> "ActorPolicy":
        """The actor a worker runs: ``model`` (from `build_model`) reading ``weights`` before it acts.
        ``policy_class``: a subclass of `policy_class` that reads the weights its own way (shared θ)."""
        cls = policy_class or self.policy_class
        return cls(
            model,
            weights,
            self.action_space,
            seed=seed,
            num_threads=num_threads,
            device=device,
            dtype=dtype,
            **self.policy_kwargs(),
        )

    def act_batch(self, output: np.ndarray, rng: np.random.Generator, *, explore: bool) -> np.ndarray:
        """Actions for a batch from the model's outputs (``model(obs)``, as an array): what a
        batching server answers its lanes with (``explore``: as while training)."""
        raise NotImplementedError

    def serve(self, forward: Any, *, seed: int | None = None) -> Any:
        """The batching server's forward pass, ``batch -> (b,) actions``, over ``forward`` (a
        `nonstop.inference.device.TorchForward` of `build_model`'s network): what it answers while training."""
        raise NotImplementedError

    def opponent_exploration(self) -> float:
        """The exploration figure a frozen snapshot of this learner acts with as a self-play opponent (the
        header its actor reads: DQN's final ε); an actor that explores by sampling reads none (0)."""
        return 0.0

    def lane_epsilon(self, weights: Any) -> Any:
        """What each request lane explores with on top of the server's answer (DQN: ε, read from the weights'
        header per decision: a picklable callable; an algorithm that explores in its actor: 0)."""
        return 0.0

    def export_module(self, model: "torch.nn.Module") -> "torch.nn.Module":
        """The standalone actor `nonstop export` scripts: observations in (as the env gives them),
        the deterministic action (or the scores whose argmax it is) out."""
        raise NotImplementedError

    def export_meta(self, model: "torch.nn.Module") -> dict[str, Any]:
        """What the export's ``meta.json`` says of the actor's input and output."""
        raise NotImplementedError

    # ------------------------------------------------------------------ plain data
    def config_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.cfg.to_dict()
        return out


def config_from_dict(cls: type, d: dict[str, Any], what: str) -> Any:
    """A config dataclass from its saved dict; unknown keys are one line naming them."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown {what} settings: {sorted(unknown)}")
    return cls(**d)


class ActorPolicy(Policy):
    """A worker's actor over ``model``, whose weights come from `SharedWeights`.

    Before each action it loads the newest published version if it is new (a private copy of one
    complete version: never a half-written one), then `_decide`\\ s. How the weights reach the model
    (`_refresh`) and how one forward pass runs (`_forward`) are overridable: process workers compute
    from the host's one shared copy of θ (`nonstop.distributed.shared_params`), Ray actors from the
    object store. Build it with its algorithm's `Algorithm.policy` in the worker's own process.
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
        from nonstop.inference.device import placement
        from nonstop.policies.placement import enter_device

        #: where the model runs and its precision (`nonstop.inference.device.placement`)
        self.device, self.dtype = placement(device, dtype)
        enter_device(self.device)  # cuda:N: the building thread's CUDA calls go to N
        self.model = model.to(self.device).eval()
        self.weights = weights
        self.action_space = action_space
        self.version = 0
        self._flat = np.empty(weights.n_params, np.float32)
        self._rng = np.random.default_rng(seed)
        self._threads = num_threads
        self._threads_set = False

    def seed(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray) -> Decision:
        if not self._threads_set and self._threads is not None:
            import torch

            torch.set_num_threads(self._threads)
            self._threads_set = True
        self._refresh()
        return Decision(self._decide(np.asarray(obs)))

    def _decide(self, obs: np.ndarray) -> Any:
        """The action for one observation (the weights are fresh)."""
        raise NotImplementedError

    def _refresh(self) -> None:
        """Load the newest published version into the model, if it is new (a private copy)."""
        if self.weights.version != self.version:
            self.version = self.weights.read_into(self._flat)
            load_flat(self.model, self._flat)

    def _forward(self, x: "torch.Tensor") -> "torch.Tensor":
        """``model(x)`` for the batch-of-one ``x``, without autograd, in the policy's precision."""
        import torch

        from nonstop.inference.device import autocast

        with torch.inference_mode(), autocast(self.device, self.dtype):
            out: torch.Tensor = self.model(x)
            return out.float()


def make_policy(
    algo: Algorithm,
    weights: Any,
    seed: int | None = None,
    latency: Any = None,
    *,
    device: str = "cpu",
    dtype: str | None = None,
) -> Policy:
    """A worker's actor for ``algo`` (module-level and picklable with functools.partial: worker threads and
    processes build it where they run); with a ``latency`` (a `nonstop.policies.latency.Latency`) the policy
    declares it per decision. ``device``/``dtype``: where its model runs (`nonstop.inference.device.placement`)."""
    policy: Policy = algo.policy(algo.build_model(), weights, seed=seed, device=device, dtype=dtype)
    if latency is not None:
        from nonstop.policies.latency import LatencyPolicy

        policy = LatencyPolicy(policy, latency, seed=seed)
    return policy
