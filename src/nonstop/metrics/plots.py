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
import re
from pathlib import Path
from typing import Any

import numpy as np

from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog

__all__ = [
    "windowed_ticks",
    "episode_starts",
    "rolling_mean",
    "plot_return_over_time",
    "plot_inaction_delay",
    "plot_delay_histogram",
    "latency_words",
    "seconds_words",
]


def seconds_words(seconds: float) -> str:
    """A duration as a reader writes it.

    >>> seconds_words(0.1), seconds_words(0.05), seconds_words(2.0), seconds_words(0.0004)
    ('0.1 s', '50 ms', '2 s', '0.4 ms')
    """
    if seconds >= 0.1 or seconds == 0:
        return f"{seconds:.3g} s"
    return f"{seconds * 1e3:.3g} ms"


_LATENCY_REPR = re.compile(r"^(\w+)\((.*)\)$")


def latency_words(latency: object) -> str:
    """A latency model in words for a title, from the model or its repr (never the repr itself).

    >>> latency_words("Constant(seconds=0.1)")
    'model latency 0.1 s'
    >>> latency_words("Normal(mu=0.05, std=0.005)")
    'model latency normal, mean 50 ms, sd 5 ms'
    >>> latency_words("LogNormal(median=0.1, sigma=0.5)")
    'model latency lognormal, median 0.1 s, σ 0.5'
    >>> latency_words("Empirical(n=400, mean=0.0095, max=0.02, source='k98.txt')")
    'model latency measured (400 samples, mean 9.5 ms, max 20 ms)'
    """
    m = _LATENCY_REPR.match(str(latency).strip())
    if m is None:
        return f"model latency {latency}"
    kind, fields = m[1], dict(re.findall(r"(\w+)=('[^']*'|[^,]+)", m[2]))

    def sec(key: str) -> str:
        try:
            return seconds_words(float(fields[key]))
        except (KeyError, ValueError):
            return fields.get(key, "?")

    if kind == "Constant":
        return f"model latency {sec('seconds')}"
    if kind == "Normal":
        return f"model latency normal, mean {sec('mu')}, sd {sec('std')}"
    if kind == "LogNormal":
        return f"model latency lognormal, median {sec('median')}, σ {fields.get('sigma', '?')}"
    if kind == "Empirical":
        return f"model latency measured ({fields.get('n', '?')} samples, mean {sec('mean')}, max {sec('max')})"
    return f"model latency {kind.lower()} ({', '.join(f'{k} {v}' for k, v in fields.items())})"


def episode_starts(log: TickLog) -> np.ndarray:
    """World times (``tick·τ_M``) of the ticks where a new episode began: the resets a strip marks.

    >>> log = TickLog(tau_m=0.5)
    >>> for t, ep in enumerate([0, 0, 0, 1, 1, 2], start=1):
    ...     log.append(tick=t, deadline=t / 2, time=t / 2, episode=ep, source=SOURCE_AGENT, delay=1)
    >>> episode_starts(log).tolist()
    [2.0, 3.0]
    """
    tick, episode = log["tick"], log["episode"]
    if len(tick) < 2:
        return np.zeros(0)
    return tick[1:][np.diff(episode) != 0] * log.tau_m


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
    time_s: np.ndarray,
    returns: np.ndarray,
    path: str | os.PathLike,
    *,
    smooth: int = 10,
    title: str = "",
    xlabel: str = "world time (s)",
) -> Path:
    """Each episode's return at the time it ended (world seconds, ``end_tick·τ_M``, unless ``xlabel``
    says otherwise), with a rolling mean over ``smooth`` episodes."""
    time_s, returns = np.asarray(time_s, np.float64), np.asarray(returns, np.float64)
    if time_s.shape != returns.shape or time_s.ndim != 1:
        raise ValueError(f"time_s and returns must be 1-D and the same length, got {time_s.shape} and {returns.shape}")
    fig, (ax,) = _figure(8, 3.6)
    ax.scatter(time_s, returns, s=10, alpha=0.4, label="episode return")
    if len(returns) >= 2:
        ax.plot(time_s, rolling_mean(returns, smooth), color="C1", label=f"mean of the last {smooth}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("return")
    ax.set_title(title or "Episode return over world time")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return _save(fig, path)


def plot_inaction_delay(
    time_s: np.ndarray,
    inaction_frac: np.ndarray,
    delay_mean_ticks: np.ndarray,
    path: str | os.PathLike,
    *,
    xlabel: str = "world time (s)",
    title: str = "",
    resets_s: np.ndarray | None = None,
) -> Path:
    """Two panels over time: inaction (% of ticks where β acted) and mean delay of applied actions (ticks).
    ``resets_s``: the episode resets' times, marked on both strips (a window holding a reset shows its
    ticks of β: the new episode's first actions are still being computed), labelled once."""
    time_s = np.asarray(time_s, np.float64)
    fig, (top, bottom) = _figure(8, 4.6, rows=2)
    inaction = 100 * np.asarray(inaction_frac, np.float64)
    delay = np.asarray(delay_mean_ticks, np.float64)
    top.plot(time_s, inaction, color="C3")
    top.set_ylabel("inaction (% of ticks)")
    # from 0, and never a magnified sliver: a flat 0 % reads as 0 on a 0-5 % axis
    top.set_ylim(0, max(5.0, 1.1 * float(np.nanmax(inaction, initial=0.0))))
    top.set_title(title or "Inaction and delay over world time")
    bottom.plot(time_s, delay, color="C0")
    bottom.set_ylabel("mean delay (ticks)")
    finite = delay[np.isfinite(delay)]
    bottom.set_ylim(0, max(2.0, 1.15 * float(finite.max())) if finite.size else 2.0)
    bottom.set_xlabel(xlabel)
    resets = np.zeros(0) if resets_s is None else np.asarray(resets_s, np.float64)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if resets.size:  # a rug along the bottom of each strip: one mark per reset
            ax.plot(
                resets,
                np.zeros_like(resets),
                "|",
                color="0.45",
                markersize=9,
                clip_on=False,
                transform=ax.get_xaxis_transform(),
                label=f"episode reset ({resets.size:,})",
            )
    if resets.size:
        top.legend(loc="upper right", fontsize=8)
    return _save(fig, path)


def plot_delay_histogram(delays: np.ndarray, path: str | os.PathLike, *, title: str = "") -> Path:
    """Histogram of the delay (ticks from observation to applied action) of agent ticks, one bar per tick."""
    delays = np.asarray(delays)
    if delays.size == 0:
        raise ValueError("no delays to plot: the run has no agent-applied ticks")
    if (delays < 0).any():
        raise ValueError("delays must be >= 0 ticks (β ticks, logged as -1, are not agent actions)")
    values = delays.astype(np.int64)
    low, high = int(values.min()), int(values.max())
    counts = np.bincount(values - low)  # one bar per tick of delay, from the least seen to the most
    fig, (ax,) = _figure(8, 3.6)
    ax.bar(np.arange(low, high + 1), 100 * counts / delays.size, width=0.8)
    pad = max(1.5, 0.04 * (high - low))  # a lone bar stands between its neighbours, not across the axis
    ax.set_xlim(low - pad, high + pad)
    if high - low <= 24:  # whole ticks only: a delay is a whole number of ticks
        ax.set_xticks(range(int(np.ceil(low - pad)), int(np.floor(high + pad)) + 1))
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=12))
    mean = float(delays.mean())
    if high > low:  # one bar is its own mean
        ax.axvline(mean, color="C1", linestyle="--", label=f"mean {mean:.2f} ticks")
        ax.legend(loc="best")
    ax.set_xlabel("delay (ticks)")
    ax.set_ylabel("% of agent ticks")
    ax.set_title(title or f"Delay of the agent's actions ({delays.size:,} actions applied)")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)
