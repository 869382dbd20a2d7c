"""Policies for inference workers: the `Policy` interface, simple policies, torch models
(the paper's IMPALA ResNet scaled by ``k``, an MLP) and latency policies.

The torch models are loaded on first use, so a worker that only runs latency
policies never imports torch.

>>> from gymnasium import spaces
>>> p = LatencyPolicy(RandomPolicy(spaces.Discrete(18), seed=0), parse_latency("10ms"))
>>> p.act(None).latency
0.01
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nonstop.policies.base import (
    ConstantPolicy,
    Decision,
    NoopPolicy,
    Policy,
    RandomPolicy,
    TorchPolicy,
    obs_to_tensor,
)
from nonstop.policies.latency import (
    LATENCY_GRAMMAR,
    Constant,
    Empirical,
    Latency,
    LatencyPolicy,
    LogNormal,
    Normal,
    parse_latency,
)

if TYPE_CHECKING:
    from nonstop.policies.models import (
        MLP,
        PAPER_K,
        PAPER_PARAM_LABELS,
        PARAM_TABLE,
        ImpalaResNet,
        ModelTooLargeError,
        available_memory_bytes,
        count_parameters,
        ensure_fits,
        estimate_memory_bytes,
        impala_resnet,
        module_parameters,
    )

_MODELS = (
    "MLP",
    "PAPER_K",
    "PAPER_PARAM_LABELS",
    "PARAM_TABLE",
    "ImpalaResNet",
    "ModelTooLargeError",
    "available_memory_bytes",
    "count_parameters",
    "ensure_fits",
    "estimate_memory_bytes",
    "impala_resnet",
    "module_parameters",
)

__all__ = [
    "Decision",
    "Policy",
    "RandomPolicy",
    "NoopPolicy",
    "ConstantPolicy",
    "TorchPolicy",
    "obs_to_tensor",
    "Latency",
    "Constant",
    "Normal",
    "LogNormal",
    "Empirical",
    "LatencyPolicy",
    "parse_latency",
    "LATENCY_GRAMMAR",
    *_MODELS,
]


def __getattr__(name: str) -> Any:  # PEP 562: import torch models only when asked for
    if name in _MODELS:
        return getattr(importlib.import_module("nonstop.policies.models"), name)
    raise AttributeError(f"module 'nonstop.policies' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
