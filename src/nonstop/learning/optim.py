"""What every learner does with one flat gradient, whatever the algorithm: Adam, the target rule, publish.

The learners' contract (`nonstop.learning.learners`): an `nonstop.learning.algos.Algorithm` writes one
batch's gradient into its model's ``.grad`` (`flat_gradient` gathers it, in ``parameters()`` order), and
the learners apply it as one `UpdateRule`::

    m ← β1·m + (1−β1)·g;   v ← β2·v + (1−β2)·g²               # Adam (Kingma & Ba), on the flat θ
    θ ← θ − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε)
    θ_target ← (1 − ρ)·θ_target + ρ·θ   every ``target_every`` updates   # ρ = 1: a copy (DQN); τ: Polyak

A rule may hold one block of θ back (``delayed``): TD3's actor steps on one update in ``every`` only.
On the other updates the block's θ, m and v are left as they are, and its bias correction counts its
own steps (t = update // every), as a separate optimizer for that block would: Adam fed a zero gradient
instead would still move it (m decays but stays non-zero).

The same numbers run on the host's shared master parameters (`apply_gradient`) and on a device
learner's tensors (`nonstop.learning.devicelearner`), so both take the same steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from nonstop.learning.weights import SharedWeights, TrainingState, flat_parameters

if TYPE_CHECKING:
    import torch

__all__ = [
    "ADAM_BETAS",
    "write_gradients",
    "UpdateRule",
    "adam_step",
    "apply_gradient",
    "flat_gradient",
    "init_training",
    "step_target",
]

#: Adam's decay rates (Kingma & Ba's defaults, the paper's)
ADAM_BETAS: Final = (0.9, 0.999)


@dataclass(frozen=True)
class UpdateRule:
    """How one flat gradient is applied: Adam's step size and ε, the target rule, and a block held back.

    ``delayed``: ``(start, stop, every)``, the slice ``θ[start:stop]`` steps only on updates whose number is
    a multiple of ``every`` (None: every block steps on every update).

    >>> UpdateRule(lr=1e-3, adam_eps=1e-8, target_every=2, target_polyak=0.005, delayed=(4, 6, 2)).steps_block(3)
    False
    """

    lr: float
    adam_eps: float
    target_every: int = 1
    target_polyak: float = 1.0
    delayed: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"UpdateRule.lr must be a positive number, got {self.lr!r}")
        if not (isinstance(self.target_every, int) and self.target_every >= 1):
            raise ValueError(f"UpdateRule.target_every must be an integer >= 1, got {self.target_every!r}")
        if not 0.0 < self.target_polyak <= 1.0:
            raise ValueError(f"UpdateRule.target_polyak must be in (0, 1], got {self.target_polyak!r}")
        if self.delayed is not None:
            start, stop, every = self.delayed
            if not (0 <= start < stop and every >= 1):
                raise ValueError(f"UpdateRule.delayed must be (start < stop, every >= 1), got {self.delayed!r}")

    @classmethod
    def of(cls, source: Any) -> "UpdateRule":
        """``source`` as a rule: a rule itself, or an algorithm's config (its ``lr``, ``adam_eps`` and
        ``target_rule()``; no block held back)."""
        if isinstance(source, UpdateRule):
            return source
        every, polyak = source.target_rule()
        return cls(float(source.lr), float(source.adam_eps), int(every), float(polyak))

    def steps_block(self, step: int) -> bool:
        """Whether the held-back block steps on update number ``step``."""
        return self.delayed is None or step % self.delayed[2] == 0

    def syncs_target(self, step: int) -> bool:
        """Whether the target rule applies after update number ``step``."""
        return step % self.target_every == 0


def _adam(
    p: "torch.Tensor", m: "torch.Tensor", v: "torch.Tensor", g: "torch.Tensor", t: int, lr: float, eps: float
) -> None:
    """Adam's step number ``t`` (1, 2, …) on flat tensors, in place (the module docstring's two lines)."""
    b1, b2 = ADAM_BETAS
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    denom = v.sqrt().div_(math.sqrt(1 - b2**t)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - b1**t))


def adam_step(p: "torch.Tensor", m: "torch.Tensor", v: "torch.Tensor", g: "torch.Tensor", step: int, rule: Any) -> None:
    """One Adam step of update number ``step`` (1, 2, …) on flat float32 tensors, in place, wherever they
    live; ``rule``: an `UpdateRule` (or an algorithm's config). A delayed block steps only on its updates,
    counting its own steps for the bias correction (the module docstring)."""
    rule = UpdateRule.of(rule)
    if rule.delayed is None:
        _adam(p, m, v, g, step, rule.lr, rule.adam_eps)
        return
    start, stop, every = rule.delayed
    for lo, hi in ((0, start), (stop, p.numel())):  # the blocks that step every update
        if hi > lo:
            _adam(p[lo:hi], m[lo:hi], v[lo:hi], g[lo:hi], step, rule.lr, rule.adam_eps)
    if rule.steps_block(step):
        s = slice(start, stop)
        _adam(p[s], m[s], v[s], g[s], step // every, rule.lr, rule.adam_eps)


def step_target(target: "torch.Tensor", params: "torch.Tensor", polyak: float) -> None:
    """``target ← (1 − ρ)·target + ρ·params`` on tensors, in place (ρ = 1: a copy)."""
    if polyak == 1.0:
        target.copy_(params)
    else:
        target.lerp_(params, polyak)


def apply_gradient(state: TrainingState, weights: SharedWeights, grad: np.ndarray, rule: Any) -> int:
    """One Adam step on the master parameters, the target rule, publish to workers (``rule``: an
    `UpdateRule`, or an algorithm's config for a rule without a held block).

    The caller either guarantees exclusive access (round-robin turn) or, for Hogwild, deliberately does
    not: the update number is then still claimed by an atomic fetch-add (no update is lost from the count,
    and each target sync happens once), and the target copy and the publish take their own locks. Returns
    this update's number.
    """
    import torch

    rule = UpdateRule.of(rule)
    step = state.claim_update()
    p, m, v = (torch.from_numpy(a) for a in (state.params, state.adam_m, state.adam_v))
    adam_step(p, m, v, torch.from_numpy(grad), step, rule)
    if rule.syncs_target(step):
        state.write_target(rule.target_polyak)
    weights.publish(state.params)
    return step


def flat_gradient(model: "torch.nn.Module") -> np.ndarray:
    """The ``.grad`` of every parameter of ``model`` as one new float32 vector on the host (in
    ``parameters()`` order; a parameter no loss reached contributes zeros, as the flat layout needs)."""
    import torch

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    return torch.cat([g.reshape(-1) for g in grads]).float().cpu().numpy().copy()  # to the host's master θ


def init_training(model: "torch.nn.Module", state: TrainingState, weights: SharedWeights) -> None:
    """Start a run from ``model``'s initial parameters: θ and the target equal, Adam's moments zero."""
    flat = flat_parameters(model)
    state.params[:] = flat
    state.target[:] = flat
    state.adam_m[:] = 0
    state.adam_v[:] = 0
    weights.publish(flat)


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
