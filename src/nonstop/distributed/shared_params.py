"""One copy of θ per host: inference workers that compute straight from `SharedWeights` (docs/design.md §5).

A `DQNPolicy` copies every published version into its own model, so N_I process workers hold
N_I copies of θ. `SharedParameters` instead points a model's parameters at the shared-memory
buffer that holds the newest complete version (a view, no copy), so every worker on a host reads
the same physical pages and memory grows with |θ|, not N_I·|θ|.

Never a half-read model: the weights are double-buffered (see `nonstop.learning.weights`). A
forward pass on version v reads buffer v % 2; the next publish (v+1) writes the other buffer; only
a publish of v+2, which reuses buffer v % 2, could tear it. So after each forward pass the policy
checks that no publish past v+1 has begun (`intact`) and otherwise recomputes on the newest
version — a seqlock around the forward pass instead of around a copy.

>>> import numpy as np, torch
>>> from nonstop.learning.weights import SharedWeights
>>> model = torch.nn.Linear(2, 1)
>>> w = SharedWeights.create(3)
>>> _ = w.publish(np.array([1.0, 2.0, 0.5], np.float32))
>>> shared = SharedParameters(model, w); shared.refresh()
1
>>> float(model(torch.ones(1, 2))), shared.intact()
(3.5, True)
>>> del model, shared; w.unlink()
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nonstop.learning.dqn import DQNConfig, DQNPolicy, build_q_network
from nonstop.learning.weights import SharedWeights
from nonstop.policies.base import Policy

__all__ = ["SharedParameters", "SharedDQNPolicy", "make_shared_dqn_policy", "ObjectStoreDQNPolicy",
           "make_object_store_dqn_policy"]


class SharedParameters:
    """Binds ``model``'s parameters to views of ``weights``' newest complete buffer.

    The model must have exactly ``weights.n_params`` parameters (in ``parameters()`` order, as
    `flat_parameters` lays them out); it becomes read-only in effect (inference only).
    """

    def __init__(self, model: Any, weights: SharedWeights) -> None:
        import torch

        self.model, self.weights = model, weights
        self._params = list(model.parameters())
        n = sum(p.numel() for p in self._params)
        if n != weights.n_params:
            raise ValueError(f"weights hold {weights.n_params} numbers but the model has {n} parameters")
        # the two halves of the double buffer as tensors sharing the segment's memory
        self._buffers = tuple(torch.from_numpy(half) for half in weights.buffers())
        for p in self._params:
            p.requires_grad_(False)
        self.version = 0

    def refresh(self) -> int:
        """Point the parameters at the newest complete version (no copy); returns it (0: none)."""
        version = self.weights.version
        if version != self.version and version > 0:
            _bind(self._params, self._buffers[version % 2])
            self.version = version
        return self.version

    def intact(self) -> bool:
        """True if no publish has begun overwriting the buffer the parameters point at."""
        return self.weights.intact(self.version)


class SharedDQNPolicy(DQNPolicy):
    """A `DQNPolicy` whose Q-network computes from the host's one shared copy of θ."""

    def __init__(self, model: Any, weights: SharedWeights, action_space: Any, *, seed: int | None = None,
                 num_threads: int | None = 1) -> None:  # fmt: skip
        super().__init__(model, weights, action_space, seed=seed, num_threads=num_threads)
        self._flat = np.empty(0, np.float32)  # the base class's private copy is not needed
        self.shared = SharedParameters(self.model, weights)

    def _refresh(self) -> None:
        pass  # the views are re-pointed inside `_greedy`, around the pass they must keep whole

    def _greedy(self, x: Any) -> int:
        import torch

        while True:
            self.version = self.shared.refresh()
            with torch.inference_mode():
                q = self.model(x)
            if self.shared.intact():  # else two publishes overtook this pass: compute again
                return int(q.argmax(1))


def make_shared_dqn_policy(obs_shape: tuple[int, ...], action_space: Any, cfg_dict: dict[str, Any],
                           weights: SharedWeights, seed: int | None = None, latency: Any = None, *,
                           device: str = "cpu", dtype: str | None = None) -> Policy:  # fmt: skip
    """`make_dqn_policy` with one shared copy of θ per host (picklable with functools.partial). On a
    GPU (``device`` not the CPU) the model cannot compute from host memory: it keeps its own copy on
    the device, loaded once per version (`make_dqn_policy`); ``dtype`` likewise needs its own copy."""
    import gc

    from nonstop.inference.device import placement

    dev, dt = placement(device, dtype)
    if dev.type != "cpu" or str(dt) != "torch.float32":
        from nonstop.learning.dqn import make_dqn_policy

        return make_dqn_policy(obs_shape, action_space, cfg_dict, weights, seed, latency, device=device, dtype=dtype)

    cfg = DQNConfig.from_dict(cfg_dict)
    model = build_q_network(obs_shape, int(action_space.n), cfg).eval()
    shared = SharedDQNPolicy(model, weights, action_space, seed=seed)
    shared.shared.refresh()  # drops the freshly initialised parameters for views of the shared copy
    gc.collect()
    if latency is not None:
        from nonstop.policies.latency import LatencyPolicy

        return LatencyPolicy(shared, latency, seed=seed)
    return shared


def _bind(params: list[Any], flat: Any) -> None:
    """Point each parameter at its slice of the flat tensor (``flat_parameters`` order), no copy."""
    offset = 0
    for p in params:
        p.data = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


class ObjectStoreDQNPolicy(DQNPolicy):
    """A `DQNPolicy` in a Ray actor that computes from the version in the node's object store
    (`nonstop.distributed.ray_backend.ObjectStoreWeights`): its parameters are views of the array
    ``ray.get`` maps from the object store, so the actors on one node share one copy of θ per
    version instead of one each. A Ray object never changes once put, so no pass can tear; the
    version in use stays pinned while the parameters point at it."""

    def __init__(self, model: Any, weights: Any, action_space: Any, *, seed: int | None = None,
                 num_threads: int | None = 1) -> None:  # fmt: skip
        if not hasattr(weights, "current"):
            raise TypeError(f"ObjectStoreDQNPolicy reads ObjectStoreWeights (a Ray actor's), got {type(weights).__name__}")
        super().__init__(model, weights, action_space, seed=seed, num_threads=num_threads)
        self._flat = np.empty(0, np.float32)  # the base class's private copy is not needed
        self._store: Any = weights  # ObjectStoreWeights: version, epsilon and current(), as SharedWeights reads
        self._params = list(self.model.parameters())
        for p in self._params:
            p.requires_grad_(False)

    def _refresh(self) -> None:
        import warnings

        import torch

        version, flat = self._store.current()
        if version != self.version and flat is not None:
            with warnings.catch_warnings():  # the object store's pages are read-only, and only read here
                warnings.simplefilter("ignore", UserWarning)
                _bind(self._params, torch.from_numpy(flat))
            self.version = version


def make_object_store_dqn_policy(obs_shape: tuple[int, ...], action_space: Any, cfg_dict: dict[str, Any],
                                 seed: int | None = None, latency: Any = None, *, weights: Any) -> Policy:  # fmt: skip
    """The Ray actors' factory (`RayPolicy` passes ``weights``): a `ObjectStoreDQNPolicy`."""
    import gc

    cfg = DQNConfig.from_dict(cfg_dict)
    model = build_q_network(obs_shape, int(action_space.n), cfg).eval()
    policy: Policy = ObjectStoreDQNPolicy(model, weights, action_space, seed=seed)
    gc.collect()
    if latency is not None:
        from nonstop.policies.latency import LatencyPolicy

        policy = LatencyPolicy(policy, latency, seed=seed)
    return policy
