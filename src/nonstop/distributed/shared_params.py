"""One copy of θ per host: inference workers that compute straight from `SharedWeights` (docs/design.md §5).

An actor (`nonstop.learning.algos.ActorPolicy`) copies every published version into its own model, so N_I process workers hold
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

from nonstop.learning.algos import Algorithm, make_policy
from nonstop.learning.weights import SharedWeights
from nonstop.policies.base import Policy

__all__ = [
    "SharedParameters",
    "SharedForward",
    "make_shared_policy",
    "ObjectStoreParameters",
    "make_object_store_policy",
]


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


class SharedForward:
    """Mixed into an actor (`nonstop.learning.algos.ActorPolicy`): its model computes from the host's one
    shared copy of θ. The views are re-pointed inside `_forward`, around the pass they must keep whole."""

    model: Any
    weights: SharedWeights
    version: int

    def __init__(self, model: Any, weights: SharedWeights, action_space: Any, **kwargs: Any) -> None:
        super().__init__(model, weights, action_space, **kwargs)  # type: ignore[call-arg]
        self._flat = np.empty(0, np.float32)  # the base class's private copy is not needed
        self.shared = SharedParameters(self.model, weights)

    def _refresh(self) -> None:
        pass

    def _forward(self, x: Any) -> Any:
        import torch

        while True:
            self.version = self.shared.refresh()
            with torch.inference_mode():
                out = self.model(x)
            if self.shared.intact():  # else two publishes overtook this pass: compute again
                return out.float()


#: each actor class's shared-θ variant (``Shared`` + its name, made once, on first use in a process)
_SHARED: dict[type, type] = {}


def _variant(table: dict[type, type], mixin: type, cls: type, prefix: str) -> type:
    if cls not in table:
        table[cls] = type(
            prefix + cls.__name__, (mixin, cls), {"__doc__": f"{cls.__name__} reading θ {prefix.lower()}"}
        )
    return table[cls]


def make_shared_policy(
    algo: Algorithm,
    weights: SharedWeights,
    seed: int | None = None,
    latency: Any = None,
    *,
    device: str = "cpu",
    dtype: str | None = None,
) -> Policy:
    """``algo``'s actor with one shared copy of θ per host (picklable with functools.partial). On a
    GPU (``device`` not the CPU) the model cannot compute from host memory: it keeps its own copy on
    the device, loaded once per version (`make_policy`); ``dtype`` likewise needs its own copy."""
    import gc

    from nonstop.inference.device import placement

    dev, dt = placement(device, dtype)
    if dev.type != "cpu" or str(dt) != "torch.float32":
        return make_policy(algo, weights, seed, latency, device=device, dtype=dtype)
    policy: Any = algo.policy(
        algo.build_model().eval(),
        weights,
        seed=seed,
        policy_class=_variant(_SHARED, SharedForward, algo.policy_class, "Shared"),
    )
    policy.shared.refresh()  # drops the freshly initialised parameters for views of the shared copy
    gc.collect()
    if latency is not None:
        from nonstop.policies.latency import LatencyPolicy

        return LatencyPolicy(policy, latency, seed=seed)
    out: Policy = policy
    return out


def _bind(params: list[Any], flat: Any) -> None:
    """Point each parameter at its slice of the flat tensor (``flat_parameters`` order), no copy."""
    offset = 0
    for p in params:
        p.data = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


class ObjectStoreParameters:
    """Mixed into an actor (`nonstop.learning.algos.ActorPolicy`) in a Ray actor: it computes from the
    version in the node's object store (`nonstop.distributed.ray_backend.ObjectStoreWeights`): its
    parameters are views of the array ``ray.get`` maps from the object store, so the actors on one node
    share one copy of θ per version instead of one each. A Ray object never changes once put, so no pass
    can tear; the version in use stays pinned while the parameters point at it."""

    model: Any
    version: int

    def __init__(self, model: Any, weights: Any, action_space: Any, **kwargs: Any) -> None:
        if not hasattr(weights, "current"):
            raise TypeError(
                f"{type(self).__name__} reads ObjectStoreWeights (a Ray actor's), got {type(weights).__name__}"
            )
        super().__init__(model, weights, action_space, **kwargs)  # type: ignore[call-arg]
        self._flat = np.empty(0, np.float32)  # the base class's private copy is not needed
        self._store: Any = weights  # ObjectStoreWeights: version, exploration and current(), as SharedWeights reads
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


#: each actor class's object-store variant (``ObjectStore`` + its name, made once, on first use in a process)
_OBJECT_STORE: dict[type, type] = {}


def make_object_store_policy(algo: Algorithm, seed: int | None = None, latency: Any = None, *, weights: Any) -> Policy:
    """The Ray actors' factory (`RayPolicy` passes ``weights``): ``algo``'s actor on the object store's θ."""
    import gc

    policy: Policy = algo.policy(
        algo.build_model().eval(),
        weights,
        seed=seed,
        policy_class=_variant(_OBJECT_STORE, ObjectStoreParameters, algo.policy_class, "ObjectStore"),
    )
    gc.collect()
    if latency is not None:
        from nonstop.policies.latency import LatencyPolicy

        policy = LatencyPolicy(policy, latency, seed=seed)
    return policy
