"""The policy interface that inference workers call.

A worker reads the latest observation, calls ``policy.act(obs)`` and gets a
`Decision`: the action, plus any inference time the policy *declares* rather
than spends. A real torch model declares nothing (its compute time ``τ_θ`` is
measured by the worker); a latency policy (`nonstop.policies.latency`) declares
a sampled ``τ_θ`` that the worker then sleeps (wall clock) or jumps (virtual
clock), so a 2-core machine can study 1B-parameter inference times honestly.

Every policy is deterministic under ``seed(s)`` and keeps its own random
generator: no global numpy/torch RNG state is read or written.
"""

from __future__ import annotations

import copy
import math
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import gymnasium
import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:  # torch is imported lazily: latency-only workers never pay for it
    import torch

__all__ = [
    "Decision",
    "Policy",
    "RandomPolicy",
    "NoopPolicy",
    "ConstantPolicy",
    "TorchPolicy",
    "obs_to_tensor",
]


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy returns for one observation.

    ``latency`` is the inference time in seconds the worker must *additionally*
    spend before submitting ``action`` (sleep on the wall clock, jump on the
    virtual clock). It is ``0.0`` for a real model, whose compute time is
    measured instead.

    >>> Decision(3)
    Decision(action=3, latency=0.0)
    >>> Decision(1, latency=-0.5)
    Traceback (most recent call last):
    ...
    ValueError: Decision.latency must be a finite number of seconds >= 0, got -0.5
    """

    action: Any
    latency: float = 0.0

    def __post_init__(self) -> None:
        lat = self.latency
        if not isinstance(lat, (int, float, np.floating, np.integer)) or not math.isfinite(lat) or lat < 0:
            raise ValueError(f"Decision.latency must be a finite number of seconds >= 0, got {lat!r}")


class Policy(ABC):
    """Maps an observation to a `Decision`. Subclasses set ``action_space``."""

    action_space: gymnasium.Space

    @abstractmethod
    def act(self, obs: np.ndarray) -> Decision:
        """Choose an action for ``obs`` (the latest observation)."""

    def seed(self, seed: int | None) -> None:  # noqa: B027 - stateless policies need nothing
        """Reseed every random generator the policy owns (no-op if it owns none)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(action_space={self.action_space!r})"


def _check_space(action_space: object) -> gymnasium.Space:
    if not isinstance(action_space, gymnasium.Space):
        raise TypeError(f"action_space must be a gymnasium.Space, got {type(action_space).__name__}: {action_space!r}")
    return action_space


def _check_seed(seed: object) -> int | None:
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0):
        raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
    return None if seed is None else int(seed)


class RandomPolicy(Policy):
    """Uniform over the action space, from the policy's own generator.

    >>> p = RandomPolicy(spaces.Discrete(4), seed=0)
    >>> a = [p.act(None).action for _ in range(5)]
    >>> p.seed(0); a == [p.act(None).action for _ in range(5)]
    True
    >>> all(isinstance(x, int) and 0 <= x < 4 for x in a)
    True
    """

    def __init__(self, action_space: gymnasium.Space, seed: int | None = None) -> None:
        self.action_space = _check_space(action_space)
        self._rng: np.random.Generator = np.random.default_rng()
        # non-Discrete spaces sample through a private copy so the caller's space keeps its RNG
        self._space: gymnasium.Space | None = None
        self.seed(seed)

    def seed(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(_check_seed(seed))
        if not isinstance(self.action_space, spaces.Discrete):
            self._space = copy.deepcopy(self.action_space)
            self._space.seed(int(self._rng.integers(2**32)))

    def act(self, obs: np.ndarray) -> Decision:
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            return Decision(int(space.start + self._rng.integers(space.n)))
        assert self._space is not None
        return Decision(self._space.sample())


class ConstantPolicy(Policy):
    """Always the same action (checked against the action space).

    >>> ConstantPolicy(spaces.Discrete(3), 2).act(None)
    Decision(action=2, latency=0.0)
    >>> ConstantPolicy(spaces.Discrete(3), 5)
    Traceback (most recent call last):
    ...
    ValueError: action 5 is not in the action space Discrete(3)
    """

    def __init__(self, action_space: gymnasium.Space, action: Any) -> None:
        self.action_space = _check_space(action_space)
        ok = action_space.contains(action) or (
            isinstance(action_space, spaces.Box) and action_space.contains(np.asarray(action, action_space.dtype))
        )
        if not ok:
            raise ValueError(f"action {action!r} is not in the action space {action_space}")
        self.action: Final = action

    def act(self, obs: np.ndarray) -> Decision:
        return Decision(self.action)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(action_space={self.action_space!r}, action={self.action!r})"


class NoopPolicy(ConstantPolicy):
    """Always the no-op action (``0`` by default, ALE's NOOP).

    >>> NoopPolicy(spaces.Discrete(18)).act(None).action
    0
    """

    def __init__(self, action_space: gymnasium.Space, noop: Any = 0) -> None:
        super().__init__(action_space, noop)


def obs_to_tensor(obs: np.ndarray, *, channels_last: bool | None = None) -> torch.Tensor:
    """A batch-of-one float tensor from one observation.

    * ``uint8`` pixels are scaled to ``[0, 1]`` (``/255``); other dtypes are cast to float32;
    * ``(H, W)`` → ``(1, 1, H, W)``; ``(H, W, C)`` → ``(1, C, H, W)``; ``(C, H, W)`` → ``(1, C, H, W)``;
      a 3-D array is taken as channels-last when ``channels_last`` is true, or (``None``) when its last
      axis is at most 4 long and its first is longer;
    * a vector ``(D,)`` → ``(1, D)``.

    >>> obs_to_tensor(np.full((84, 84), 255, np.uint8)).shape
    torch.Size([1, 1, 84, 84])
    >>> obs_to_tensor(np.zeros((84, 84, 3), np.uint8)).shape
    torch.Size([1, 3, 84, 84])
    >>> obs_to_tensor(np.array([0.5, 1.0])).tolist()
    [[0.5, 1.0]]
    """
    import torch

    arr = np.asarray(obs)
    if arr.dtype == np.uint8:
        t = torch.from_numpy(np.ascontiguousarray(arr)).to(torch.float32).div_(255.0)
    else:
        t = torch.as_tensor(arr, dtype=torch.float32)
    if t.ndim == 3:
        hwc = channels_last if channels_last is not None else (t.shape[-1] <= 4 < t.shape[0])
        if hwc:
            t = t.permute(2, 0, 1)
    elif t.ndim == 2:
        t = t.unsqueeze(0)
    elif t.ndim != 1:
        raise ValueError(f"observation must be 1-D, 2-D (H, W) or 3-D (H, W, C)/(C, H, W), got shape {arr.shape}")
    return t.unsqueeze(0)


class TorchPolicy(Policy):
    """Greedy (optionally ε-greedy) over the outputs of a torch module.

    ``model`` maps a ``(1, ...)`` float tensor (see `obs_to_tensor`) to
    ``(1, n)`` Q-values or logits; the action is their argmax. Inference runs
    under ``torch.inference_mode()``. ``num_threads`` (default 1: one core per
    inference process, as in the paper) is applied with ``torch.set_num_threads``
    on the first ``act`` of each process, since it is a per-process setting;
    ``None`` leaves torch's setting alone. ``device`` places the model and ``dtype``
    (``fp32``, ``bf16``, ``fp16``; None: bf16 on CUDA, fp32 elsewhere) is its autocast
    precision (`nonstop.inference.device`). The declared latency is ``0.0``: the
    worker measures the real compute time.

    Ownership: the policy holds ``model`` and never copies it; a learner that
    shares weights loads them into ``policy.model`` between calls.

    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    >>> _ = torch.nn.init.zeros_(net[1].weight); _ = net[1].bias.data.copy_(torch.tensor([0.0, 2.0, 1.0]))
    >>> TorchPolicy(net, spaces.Discrete(3)).act(np.zeros((2, 2), np.uint8))
    Decision(action=1, latency=0.0)
    """

    action_space: spaces.Discrete

    def __init__(
        self,
        model: torch.nn.Module,
        action_space: gymnasium.Space,
        *,
        epsilon: float = 0.0,
        num_threads: int | None = 1,
        device: str | torch.device = "cpu",
        channels_last: bool | None = None,
        seed: int | None = None,
        dtype: str | None = None,
    ) -> None:
        import torch

        from nonstop.policies.placement import enter_device, resolve_dtype

        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        space = _check_space(action_space)
        if not isinstance(space, spaces.Discrete):
            raise TypeError(f"TorchPolicy takes the argmax, so it needs a Discrete action space, got {action_space}")
        if not (isinstance(epsilon, (int, float)) and 0.0 <= epsilon <= 1.0):
            raise ValueError(f"epsilon must be a probability in [0, 1], got {epsilon!r}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
        self.action_space = space
        self.device: Final = torch.device(device)
        #: the precision the model runs in (autocast; None: bf16 on CUDA, fp32 elsewhere)
        self.dtype: Final = resolve_dtype(dtype, self.device)
        enter_device(self.device)  # cuda:N: the building thread's CUDA calls go to N (and each acting thread's: `act`)
        self.model = model.to(self.device).eval()
        self.epsilon = float(epsilon)
        self.num_threads: Final = num_threads
        self.channels_last: Final = channels_last
        self._threads_set_in_pid: int | None = None
        self._device_set_in_thread: int | None = threading.get_ident()
        self._rng = np.random.default_rng()
        self.seed(seed)

    def seed(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(_check_seed(seed))

    def q_values(self, obs: np.ndarray) -> torch.Tensor:
        """The model's outputs for ``obs``, shape ``(n_actions,)``, on the CPU."""
        import torch

        from nonstop.policies.placement import autocast, enter_device

        if self.num_threads is not None and self._threads_set_in_pid != os.getpid():
            torch.set_num_threads(self.num_threads)
            self._threads_set_in_pid = os.getpid()
        if self._device_set_in_thread != threading.get_ident():  # a worker thread's first act
            enter_device(self.device)
            self._device_set_in_thread = threading.get_ident()

        with torch.inference_mode(), autocast(self.device, self.dtype):
            x = obs_to_tensor(obs, channels_last=self.channels_last).to(self.device)
            out = self.model(x).reshape(-1).float().cpu()
        n = int(self.action_space.n)
        if out.numel() != n:
            raise ValueError(f"model returned {out.numel()} outputs for an action space of {n} actions")
        return out

    def act(self, obs: np.ndarray) -> Decision:
        space = self.action_space
        if self.epsilon > 0.0 and self._rng.random() < self.epsilon:
            return Decision(int(space.start + self._rng.integers(space.n)))
        return Decision(int(space.start + int(self.q_values(obs).argmax())))

    def __repr__(self) -> str:
        return (
            f"TorchPolicy(model={type(self.model).__name__}, action_space={self.action_space!r}, "
            f"epsilon={self.epsilon}, num_threads={self.num_threads}, device={str(self.device)!r})"
        )
