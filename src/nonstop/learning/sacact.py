"""How SAC acts (`nonstop.learning.sac`): the worker's actor, the batching server's answer and the
exported program's description; the update is `nonstop.learning.sacupdate`.

The actor's output is the squashed Gaussian's mean and log standard deviation side by side,
``(B, 2·|A|)``; an action is ``tanh(μ + σ·ξ)·scale + bias`` while training and ``tanh(μ)·scale + bias``
for evaluation and export (`squash`), inside the Box.

Until the learners' first update (``learning_starts`` transitions) the actor draws its actions
uniformly over the Box (``random_start``), as CleanRL, SB3 and Tianshou do: a fresh actor's samples
(σ ≈ 0.22 of the half-width, log σ starting mid-range) cover a sliver of the Box. Every backend's actor
sees it the same way: its weights are still the first version it loaded (`SACPolicy`, `sampled_server`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from nonstop.learning.algos import ActorPolicy, to_tensor

if TYPE_CHECKING:
    import torch

__all__ = ["SACPolicy", "squash", "sampled_server", "box_export_meta", "INITIAL_VERSION"]

#: the version of a run's weights that holds its initial θ (`init_training` publishes it first); a resumed
#: run publishes its restored θ next, so an actor that first sees a later version acts from its weights
INITIAL_VERSION: Final = 1


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
            self._first_version <= INITIAL_VERSION
            and self.version == self._first_version
            and float(getattr(self.weights, "epsilon", 0.0)) > 0.0
        )


def sampled_server(algo: Any, forward: Any, *, seed: int | None = None) -> Any:
    """`SAC.serve` (and TD3's): the batching server's answer to a batch of observations, ``algo``'s
    `act_batch` while exploring, uniform over the Box while the learner's θ is still its first version
    (with ``random_start``)."""
    rng = np.random.default_rng(seed)
    refresh = getattr(forward, "refresh", None)  # how the learner's versions reach it (None: fixed θ)
    space = algo.action_space
    first: list[int] = []

    def sampled(batch: np.ndarray) -> np.ndarray:
        out = forward.q_values(batch).numpy()  # refreshes first: the version is current
        if algo.cfg.random_start and refresh is not None:
            first[:] = first or [refresh.version]
            if first[0] <= INITIAL_VERSION and refresh.version == first[0]:  # no update yet: uniform over the Box
                return rng.uniform(space.low, space.high, (len(out), algo.action_dim)).astype(np.float32)
        return algo.act_batch(out, rng, explore=True)  # (b, d) float32

    return sampled


def box_export_meta(space: Any) -> dict[str, Any]:
    """`SAC.export_meta`: what the exported program's output is, for the Box ``space``."""
    return {
        "output": {
            "name": "action",
            "shape": ["B", int(space.shape[0])],
            "dtype": "float32",
            "action": "the output itself: tanh(μ(s)) · scale + bias, deterministic, inside the Box",
        },
        "action_space": {
            "type": "Box",
            "shape": [int(space.shape[0])],
            "low": space.low.tolist(),
            "high": space.high.tolist(),
        },
    }
