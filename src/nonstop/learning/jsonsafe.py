"""Values made JSON-safe: what the run log's ``summary.json`` and the trackers (wandb, MLflow) both
write, so one function decides how a numpy scalar, a tuple or a NaN is written.

>>> import numpy as np
>>> from pathlib import Path
>>> json_safe({"ticks": np.int64(60), "delay": float("nan"), "seats": ("a", "b"), 3: Path("x")})
{'ticks': 60, 'delay': None, 'seats': ['a', 'b'], '3': 'x'}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["json_safe"]


def json_safe(value: Any) -> Any:
    """``value`` with mappings and sequences made dicts (string keys) and lists, numpy scalars made
    Python numbers, non-finite floats made None, and anything else not JSON made its ``str``."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
