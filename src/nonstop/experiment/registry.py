"""The parts a run is composed of, chosen by name: one table, one line a part.

A run never asks "is this self-play?", "is this Ray?": it asks the table for the part its config
names (`nonstop.experiment.config.TrainConfig`'s ``seating``, ``interaction``, ``inference_backend``,
``learner_placement`` and ``cluster``) and builds what comes back. Entries are ``"module:attr"``
strings, imported only when asked for, so a backend's library (Ray) is never imported by a run
that does not use it. A new driver or backend is a new module and one `register` call (or one line
in `_BUILTIN`).

>>> sorted(names("seating"))
['self_play', 'solo']
>>> lookup("seating", "solo").__name__
'SoloSeating'
>>> lookup("seating", "duet")
Traceback (most recent call last):
...
ValueError: unknown seating 'duet': use one of self_play, solo
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Final

__all__ = ["KINDS", "register", "lookup", "names"]

#: what each kind of part is chosen by (the config's field or property of that name)
KINDS: Final = ("seating", "driver", "policy_backend", "learners", "cluster", "algo")

_BUILTIN: dict[str, dict[str, Any]] = {
    # who sits where in the world, and which driver each seat gets
    "seating": {
        "solo": "nonstop.experiment.seating:SoloSeating",
        "self_play": "nonstop.experiment.selfplay:SelfPlaySeating",
    },
    # what drives the learner's seat: staggered workers beside asynchronous learners, or one loop that
    # infers and learns in turn (the paper's sequential baselines)
    "driver": {
        "staggered": "nonstop.experiment.drivers:StaggeredDriver",
        "infer_then_learn": "nonstop.experiment.drivers:SequentialDriver",
        "learn_then_infer": "nonstop.experiment.drivers:SequentialDriver",
    },
    # where one inference worker's policy runs
    "policy_backend": {
        "thread": "nonstop.experiment.backends:thread_policy",
        "process": "nonstop.experiment.backends:process_policy",
        "ray": "nonstop.experiment.raybackend:ray_policy",
        "batched": "nonstop.experiment.batchedbackend:batched_policy",  # request lanes of one batching server
        # the same server's lanes in worker processes, frames through a shared-memory lane ring
        "batched_process": "nonstop.experiment.batchedbackend:batched_process_policy",
    },
    # where the learners run
    "learners": {
        "virtual": "nonstop.experiment.backends:virtual_learners",
        "process": "nonstop.experiment.backends:process_learners",
        "ray": "nonstop.experiment.raybackend:ray_learners",
        # one learner whose parameters, Adam moments and target live on --device (either clock)
        "device": "nonstop.experiment.devicelearners:device_learners",
    },
    # what learns: an `nonstop.learning.algos.Algorithm` class (its config, model, update, actor, export)
    "algo": {
        "dqn": "nonstop.learning.dqn:DQN",
        "sac": "nonstop.learning.sac:SAC",
        # learning that pays for delay: the actions in flight in the state (nonstop.inference.inflight)
        "rtac": "nonstop.learning.rtac:RTAC",
        "dcac": "nonstop.learning.dcac:DCAC",
    },
    # what the run connects to before it starts anything
    "cluster": {
        "none": "nonstop.experiment.backends:NoCluster",
        "ray": "nonstop.experiment.raybackend:RayCluster",
    },
}


def register(kind: str, name: str, target: str | Callable[..., Any]) -> None:
    """Offer ``target`` (a callable, or ``"module:attr"`` imported when first asked for) as the part
    ``name`` of ``kind``; a config naming it then builds it."""
    if kind not in _BUILTIN:
        raise ValueError(f"unknown kind of part {kind!r}: use one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a part's name must be a non-empty str, got {name!r}")
    if not (callable(target) or (isinstance(target, str) and ":" in target)):
        raise TypeError(f"a part is a callable or 'module:attr', got {target!r}")
    _BUILTIN[kind][name] = target


def names(kind: str) -> list[str]:
    """The names offered for ``kind``."""
    return list(_BUILTIN[kind])


def lookup(kind: str, name: str) -> Any:
    """The part ``name`` of ``kind`` (imported now if it was registered by its path)."""
    table = _BUILTIN[kind]
    if name not in table:
        raise ValueError(f"unknown {kind.replace('_', ' ')} {name!r}: use one of {', '.join(sorted(table))}")
    target = table[name]
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
        table[name] = target
    return target
