"""Time a remote call spends outside its own work (a Ray actor's inference or learning step: the
round trip, serialisation, scheduling), summarised per call.

A pure function of numbers: the inference pool reports it for any policy that records
``overhead_s`` without knowing where that policy runs, and the Ray backend reports it for its
learners (`nonstop.distributed.ray_backend` re-exports it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["overhead_summary"]


def overhead_summary(samples: list[float], tau_m: float) -> dict[str, Any]:
    """Remote overhead per action: count, mean, p50, p99 in seconds and in ticks of ``tau_m``.

    >>> s = overhead_summary([0.001, 0.002, 0.003], 1 / 60)
    >>> s["n"], round(s["p50_s"], 4), round(s["p50_ticks"], 3)
    (3, 0.002, 0.12)
    >>> overhead_summary([], 1 / 60)["p99_s"] is None
    True
    """
    if not samples:
        return {"n": 0, "mean_s": None, "p50_s": None, "p99_s": None, "p50_ticks": None, "p99_ticks": None}
    a = np.asarray(samples, dtype=float)
    p50, p99 = (float(v) for v in np.percentile(a, [50, 99]))
    return {
        "n": int(a.size),
        "mean_s": float(a.mean()),
        "p50_s": p50,
        "p99_s": p99,
        "p50_ticks": p50 / tau_m,
        "p99_ticks": p99 / tau_m,
    }
