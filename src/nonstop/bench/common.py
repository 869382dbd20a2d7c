"""Shared helpers for benchmarks: machine description, robust statistics, run sizes, option
parsing."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nonstop.metrics.limits import machine_info  # noqa: F401  (re-exported: the benches' JSON carries it)


#: said beside every quick run's figures: its sizes suit a smoke check, not a measurement
QUICK_NOTE = (
    "quick run (--quick): sizes small enough for a CI smoke check, not the measurement; "
    "its meets_target is indicative only: judge the targets on a run without --quick"
)


def verdict(ok: bool, quick: bool = False) -> str:
    """A target's verdict for a human table (rich markup); a quick run says it is not the measurement.

    >>> verdict(True)
    '[green]meets[/]'
    >>> verdict(False, quick=True)
    '[red]misses[/] [dim](quick run)[/]'
    """
    word = "[green]meets[/]" if ok else "[red]misses[/]"
    return word + (" [dim](quick run)[/]" if quick else "")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS tells it), else all of them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


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


def run_sizes(args: Any, quick: Mapping[str, float], full: Mapping[str, float]) -> dict[str, Any]:
    """How big a benchmark run is: each size from its option (``args.<key>``, ``--<key>``) when
    given, else the ``--quick`` or full default. Every size must be positive.

    >>> import argparse
    >>> run_sizes(argparse.Namespace(quick=True, steps=None, repeats=5), {"steps": 2, "repeats": 1}, {"steps": 9, "repeats": 3})
    {'steps': 2, 'repeats': 5}
    >>> run_sizes(argparse.Namespace(quick=False, steps=0), {"steps": 2}, {"steps": 9})
    Traceback (most recent call last):
    ...
    ValueError: --steps must be positive, got 0
    """
    sizes = dict(quick if getattr(args, "quick", False) else full)
    for key in sizes:
        value = getattr(args, key, None)
        if value is not None:
            sizes[key] = value
    bad = {f"--{key.replace('_', '-')}": value for key, value in sizes.items() if not value > 0}  # NaN too
    if bad:
        raise ValueError(f"{', '.join(bad)} must be positive, got {', '.join(map(str, bad.values()))}")
    return sizes


def size_help(what: str, key: str, quick: Mapping[str, float], full: Mapping[str, float]) -> str:
    """An option's help naming its full and quick defaults."""
    return f"{what} (default {full[key]:g}, quick {quick[key]:g})"


def parse_positive_list(text: str, option: str) -> list[float]:
    """``"1,5,8"`` -> ``[1.0, 5.0, 8.0]``: comma-separated positive finite numbers, for ``option``.

    >>> parse_positive_list("1, 2.5,", "--ticks")
    [1.0, 2.5]
    >>> parse_positive_list("1,-2", "--ticks")
    Traceback (most recent call last):
    ...
    ValueError: --ticks values must be positive finite numbers, got '1,-2'
    """
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ValueError(f"{option} takes comma-separated numbers, got {text!r}") from exc
    if not values or any(not (v > 0) or math.isinf(v) for v in values):
        raise ValueError(f"{option} values must be positive finite numbers, got {text!r}")
    return values


def interval(values: list[float | None]) -> dict[str, Any]:
    """Mean and 95 % interval over seeds (Student's t; one seed: no interval).

    >>> {k: round(v, 3) for k, v in interval([1.0, 2.0, 3.0]).items()}
    {'mean': 2.0, 'low': -0.484, 'high': 4.484, 'n': 3}
    """
    from nonstop.metrics.tquantile import t_quantile_95

    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    n = int(arr.size)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = float(arr.mean())
    if n == 1:
        return {"mean": mean, "low": None, "high": None, "n": 1}
    half = t_quantile_95(n - 1) * float(arr.std(ddof=1)) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}
