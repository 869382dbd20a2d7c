"""Is the machine, not the algorithm, the limit of a wall-clock run? Pure reading of its figures.

On the wall clock a busy machine shows up as inaction that no scheduler causes: the host starts
ticks late (its deadlines slip past a whole tick) and staggered workers, starved of CPU, act less
often than their schedule promises. `machine_limits` reads both from a tick-log summary
(`nonstop.metrics.timing.summarize`) and returns the sentences to print, empty when neither shows.

>>> figures = {"ticks": 3600, "overruns": 400, "lateness_p99_us": 40_000.0, "inaction_fraction": 0.45,
...            "tau_i_mean_ticks": 1.8, "tau_m_s": 1 / 60}
>>> for line in machine_limits(figures, clock="wall", scheduler="exp_time", n_inference=6,
...                            latency_mean_ticks=6.0, processes=8, cores=2):
...     print(line)
the world ran late: 400 of 3,600 ticks (11.1%) started a whole tick late or more (p99 lateness 40.0 ms)
staggered workers acted every 1.80 ticks where 6 workers of 6.0-tick latency should act every 1.00: they are starved of CPU
the machine, not the algorithm, is the limit here (8 busy processes on 2 cores): use --clock virtual (exact, any machine), fewer learners (--n-learners 1), a narrower model (--k), or a machine with more cores
>>> machine_limits(figures, clock="virtual", scheduler="exp_time", n_inference=6, latency_mean_ticks=6.0,
...                processes=8, cores=2)
[]
"""

from __future__ import annotations

import math
import os
import platform
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack for **kwargs is Python 3.12's

__all__ = [
    "machine_info",
    "LATE_FRACTION",
    "STARVED_INACTION",
    "STARVED_RATIO",
    "TRAIN_REMEDY",
    "machine_limits",
    "limit_findings",
    "limit_remedy",
    "RunShape",
]

#: Above this fraction of ticks started a whole tick late, the host is said to run late.
LATE_FRACTION: Final = 0.01
#: Workers acting this many times slower than their schedule (and with STARVED_INACTION or more inaction) are starved.
STARVED_RATIO: Final = 1.25
STARVED_INACTION: Final = 0.10
#: What `nonstop train` can change when its machine is the limit (`limit_remedy`'s default).
TRAIN_REMEDY: Final = (
    "use --clock virtual (exact, any machine), fewer learners (--n-learners 1), a narrower model "
    "(--k), or a machine with more cores"
)


class RunShape(TypedDict):
    """What `limit_findings` reads a run's figures against: its clock, scheduler, N_I and mean τ_θ in ticks."""

    clock: str
    scheduler: str
    n_inference: int
    latency_mean_ticks: float


def limit_findings(
    figures: Mapping[str, Any],
    *,
    clock: str,
    scheduler: str,
    n_inference: int,
    latency_mean_ticks: float,
) -> list[str]:
    """What shows the machine limits a run (late ticks, CPU-starved workers), one sentence each, or
    ``[]``. Only the wall clock can run late: a virtual-clock run always gets ``[]``.

    >>> limit_findings({"ticks": 600, "overruns": 60, "lateness_p99_us": 20_000.0}, clock="wall", scheduler="sequential",
    ...                n_inference=1, latency_mean_ticks=6.0)
    ['the world ran late: 60 of 600 ticks (10.0%) started a whole tick late or more (p99 lateness 20.0 ms)']
    """
    if clock not in ("wall", "virtual"):
        raise ValueError(f"clock must be 'wall' or 'virtual', got {clock!r}")
    if isinstance(n_inference, bool) or not isinstance(n_inference, int) or n_inference < 1:
        raise ValueError(f"n_inference must be an int >= 1, got {n_inference!r}")
    if not (
        isinstance(latency_mean_ticks, (int, float)) and math.isfinite(latency_mean_ticks) and latency_mean_ticks >= 0
    ):
        raise ValueError(f"latency_mean_ticks must be a finite number >= 0, got {latency_mean_ticks!r}")
    if clock == "virtual":
        return []
    lines = []
    ticks, overruns = int(figures.get("ticks", 0) or 0), int(figures.get("overruns", 0) or 0)
    if ticks and overruns / ticks > LATE_FRACTION:
        p99 = float(figures.get("lateness_p99_us", math.nan)) / 1000
        lines.append(
            f"the world ran late: {overruns:,} of {ticks:,} ticks ({overruns / ticks:.1%}) started a whole "
            f"tick late or more (p99 lateness {p99:.1f} ms)"
        )
    tau_i, inaction = (
        float(figures.get("tau_i_mean_ticks", math.nan)),
        float(figures.get("inaction_fraction", math.nan)),
    )
    expected = max(1.0, latency_mean_ticks / n_inference)
    if (
        scheduler != "sequential"
        and math.isfinite(tau_i)
        and tau_i > STARVED_RATIO * expected
        and math.isfinite(inaction)
        and inaction >= STARVED_INACTION
    ):
        lines.append(
            f"staggered workers acted every {tau_i:.2f} ticks where {n_inference} workers of "
            f"{latency_mean_ticks:.1f}-tick latency should act every {expected:.2f}: they are starved of CPU"
        )
    return lines


def limit_remedy(*, processes: int, cores: int, remedy: str = TRAIN_REMEDY, load_average: float | None = None) -> str:
    """The sentence that follows the findings: the machine is the limit, how loaded it is, what to change.

    >>> limit_remedy(processes=2, cores=2, remedy="use --clock virtual", load_average=3.46)
    'the machine, not the algorithm, is the limit here (2 busy processes on 2 cores, load average 3.5): use --clock virtual'
    """
    for name, value in (("processes", processes), ("cores", cores)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    load = f", load average {load_average:.1f}" if load_average is not None and math.isfinite(load_average) else ""
    return f"the machine, not the algorithm, is the limit here ({processes} busy processes on {cores} cores{load}): {remedy}"


def machine_limits(
    figures: Mapping[str, Any],
    *,
    processes: int,
    cores: int,
    remedy: str = TRAIN_REMEDY,
    load_average: float | None = None,
    **run: Unpack[RunShape],
) -> list[str]:
    """The sentences saying the machine limits this run (`limit_findings` of ``figures`` for ``run``, its
    `RunShape`) and what to change (`limit_remedy`), or ``[]``. Only the wall clock can run late: a
    virtual-clock run always gets ``[]``."""
    lines = limit_findings(figures, **run)
    remedy_line = limit_remedy(processes=processes, cores=cores, remedy=remedy, load_average=load_average)
    return [*lines, remedy_line] if lines else []


def machine_info() -> dict:
    """What the figures were measured on: cores, Python, platform, numpy, torch and its GPU (if any)."""
    info = {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "numpy": _numpy_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # torch is optional for most benchmarks
        info["torch"] = None
    return info


def _numpy_version() -> str:
    import numpy as np

    return np.__version__
