"""Figures of a training run: return over time, inaction and delay over time, delay histogram.

Each plot function takes plain arrays and a path and writes one PNG; `windowed_ticks` turns a tick
log into the per-window series the inaction/delay plot draws (docs/design.md §1.8: the figures come from
the tick log). Figures are drawn on matplotlib's Agg canvas through the object API (no pyplot), so
plotting needs no display, changes no global backend and is safe beside other plotting code.

>>> from nonstop.realtime.ticklog import TickLog, SOURCE_AGENT, SOURCE_DEFAULT
>>> log = TickLog(tau_m=0.25)
>>> for t in range(1, 9):
...     agent = t > 4 or t == 2
...     log.append(tick=t, deadline=t / 4, time=t / 4, source=SOURCE_AGENT if agent else SOURCE_DEFAULT,
...                delay=t if agent else -1)
>>> w = windowed_ticks(log, 4)
>>> (w["time_s"].tolist(), w["inaction_frac"].tolist(), w["delay_mean_ticks"].tolist())
([1.0, 2.0], [0.75, 0.0], [2.0, 6.5])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog

__all__ = ["windowed_ticks", "rolling_mean", "plot_return_over_time", "plot_inaction_delay", "plot_delay_histogram"]


def windowed_ticks(log: TickLog, window_ticks: int) -> dict[str, np.ndarray]:
    """Consecutive windows of ``window_ticks`` logged ticks (the last may be shorter).

    Returns ``time_s`` (world time at the window's last tick, ``tick·τ_M``), ``inaction_frac``
    (share of β ticks) and ``delay_mean_ticks`` (mean delay of the agent ticks; NaN where the
    window has none).
    """
    if isinstance(window_ticks, bool) or not isinstance(window_ticks, (int, np.integer)) or window_ticks < 1:
        raise ValueError(f"window_ticks must be a positive int, got {window_ticks!r}")
    tick, agent, delay = log["tick"], log["source"] == SOURCE_AGENT, log["delay"].astype(np.float64)
    starts = np.arange(0, len(tick), window_ticks)
    if not starts.size:
        empty = np.zeros(0)
        return {"time_s": empty, "inaction_frac": empty, "delay_mean_ticks": empty}
    lengths = np.diff(np.append(starts, len(tick)))
    agent_count = np.add.reduceat(agent.astype(np.float64), starts)
    delay_sum = np.add.reduceat(np.where(agent, delay, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        delay_mean = np.where(agent_count > 0, delay_sum / agent_count, np.nan)
    return {
        "time_s": tick[starts + lengths - 1] * log.tau_m,
        "inaction_frac": 1.0 - agent_count / lengths,
        "delay_mean_ticks": delay_mean,
    }


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each index (fewer at the start), NaN-free input assumed."""
    values = np.asarray(values, np.float64)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    sums = np.cumsum(np.insert(values, 0, 0.0))
    index = np.arange(1, len(values) + 1)
    lo = np.maximum(index - window, 0)
    return (sums[index] - sums[lo]) / (index - lo)


def _figure(width: float, height: float, rows: int = 1) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, axes


def _save(fig: Any, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_return_over_time(
    wall_s: np.ndarray, returns: np.ndarray, path: str | os.PathLike, *, smooth: int = 10, title: str = ""
) -> Path:
    """Each episode's return at the wall time it ended, with a rolling mean over ``smooth`` episodes."""
    wall_s, returns = np.asarray(wall_s, np.float64), np.asarray(returns, np.float64)
    if wall_s.shape != returns.shape or wall_s.ndim != 1:
        raise ValueError(f"wall_s and returns must be 1-D and the same length, got {wall_s.shape} and {returns.shape}")
    fig, (ax,) = _figure(8, 4)
    ax.scatter(wall_s, returns, s=10, alpha=0.4, label="episode return")
    if len(returns) >= 2:
        ax.plot(wall_s, rolling_mean(returns, smooth), color="C1", label=f"mean of the last {smooth}")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("return")
    ax.set_title(title or "Return over wall time")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return _save(fig, path)


def plot_inaction_delay(
    time_s: np.ndarray,
    inaction_frac: np.ndarray,
    delay_mean_ticks: np.ndarray,
    path: str | os.PathLike,
    *,
    xlabel: str = "time (s)",
    title: str = "",
) -> Path:
    """Two panels over time: inaction (% of ticks where β acted) and mean delay of applied actions (ticks)."""
    time_s = np.asarray(time_s, np.float64)
    fig, (top, bottom) = _figure(8, 5.5, rows=2)
    top.plot(time_s, 100 * np.asarray(inaction_frac, np.float64), color="C3")
    top.set_ylabel("inaction (% of ticks)")
    top.set_ylim(bottom=0)
    top.set_title(title or "Inaction and delay over time")
    bottom.plot(time_s, np.asarray(delay_mean_ticks, np.float64), color="C0")
    bottom.set_ylabel("mean delay (ticks)")
    bottom.set_xlabel(xlabel)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_delay_histogram(delays: np.ndarray, path: str | os.PathLike, *, title: str = "") -> Path:
    """Histogram of the delay (ticks from observation to applied action) of agent ticks, one bar per tick."""
    delays = np.asarray(delays)
    if delays.size == 0:
        raise ValueError("no delays to plot: the run has no agent-applied ticks")
    if (delays < 0).any():
        raise ValueError("delays must be >= 0 ticks (β ticks, logged as -1, are not agent actions)")
    counts = np.bincount(delays.astype(np.int64))
    fig, (ax,) = _figure(8, 4)
    ax.bar(np.arange(len(counts)), 100 * counts / delays.size, width=0.9)
    mean = float(delays.mean())
    ax.axvline(mean, color="C1", linestyle="--", label=f"mean {mean:.2f} ticks")
    ax.set_xlabel("delay (ticks)")
    ax.set_ylabel("% of agent ticks")
    ax.set_title(title or f"Delay of applied actions ({delays.size:,} agent ticks)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="best")
    return _save(fig, path)
