"""Shared helpers for benchmarks: machine description and robust statistics."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

import numpy as np


def machine_info() -> dict:
    """What the figures were measured on."""
    info = {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "numpy": np.__version__,
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # torch is optional for most benchmarks
        info["torch"] = None
    return info


def percentiles(values: Sequence[float] | np.ndarray, scale: float = 1.0) -> dict:
    """p50/p90/p99/min/max of ``values`` times ``scale`` (e.g. 1e6 for µs)."""
    arr = np.asarray(values, dtype=np.float64) * scale
    if arr.size == 0:
        return {"n": 0}
    return {
        "n": int(arr.size),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }
