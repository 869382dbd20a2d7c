"""Timing metrics computed from the tick log and nothing else (DESIGN §1.8).

Symbols follow the paper: τ_M tick period, τ_I time between actions taken by
the agent (not by β), τ_θ inference time.

>>> from nonstop.realtime.ticklog import TickLog, SOURCE_AGENT, SOURCE_DEFAULT
>>> log = TickLog(tau_m=0.5)
>>> for t in range(1, 7):
...     agent = t % 2 == 0
...     log.append(tick=t, deadline=t * 0.5, time=t * 0.5, episode=0,
...                source=SOURCE_AGENT if agent else SOURCE_DEFAULT, delay=2 if agent else -1)
>>> s = summarize(log)
>>> (s["inaction_fraction"], s["tau_i_mean_s"], s["tau_i_cv"], s["delay_mean_ticks"])
(0.5, 1.0, 0.0, 2.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog

__all__ = ["summarize", "interaction_intervals", "episode_returns"]


def _window(tick: np.ndarray, warmup_ticks: int, end_tick: int | None) -> np.ndarray:
    """Rows measured: after the warm-up, up to and including ``end_tick``."""
    keep = tick > warmup_ticks
    return keep if end_tick is None else keep & (tick <= end_tick)


def interaction_intervals(log: TickLog, *, warmup_ticks: int = 0, end_tick: int | None = None) -> np.ndarray:
    """τ_I samples in seconds: gaps between consecutive agent-applied ticks."""
    tick = log["tick"]
    agent_ticks = tick[(log["source"] == SOURCE_AGENT) & _window(tick, warmup_ticks, end_tick)]
    return np.diff(agent_ticks) * log.tau_m


def episode_returns(
    log: TickLog, *, complete_only: bool = True, warmup_ticks: int = 0, end_tick: int | None = None
) -> list[float]:
    """Sum of rewards per episode; the last (unfinished) one is left out by default.

    Only episodes lying wholly in the measured window count (first tick after ``warmup_ticks``,
    and, with ``end_tick``, ended by then): an episode cut by the window's edge would report a
    partial return.
    """
    if len(log) == 0:
        return []
    tick, episode, reward = log["tick"], log["episode"], log["reward"]
    ended = (log["terminated"] | log["truncated"]).astype(bool)
    inside = _window(tick, warmup_ticks, end_tick)
    out = []
    for ep in np.unique(episode):
        mask = episode == ep
        if not inside[mask].all():
            continue
        if complete_only and not ended[mask].any():
            continue
        out.append(float(reward[mask].sum()))
    return out


def summarize(log: TickLog, *, warmup_ticks: int = 0, end_tick: int | None = None) -> dict[str, Any]:
    """Everything the tick log says about a run, over the ticks after ``warmup_ticks`` (and up to
    ``end_tick``, when given: e.g. the last tick before the agents were stopped). Every figure,
    episode returns included, uses that same window."""
    tau_m = log.tau_m
    tick = log["tick"]
    keep = _window(tick, warmup_ticks, end_tick)
    n = int(keep.sum())
    source = log["source"][keep]
    delay = log["delay"][keep]
    lateness = log["lateness"][keep]
    agent = source == SOURCE_AGENT
    n_agent = int(agent.sum())
    intervals = interaction_intervals(log, warmup_ticks=warmup_ticks, end_tick=end_tick)
    delays = delay[agent]
    hist_keys, hist_counts = np.unique(delays, return_counts=True) if n_agent else (np.array([]), np.array([]))
    tau_i_mean = float(intervals.mean()) if intervals.size else float("nan")
    returns = episode_returns(log, warmup_ticks=warmup_ticks, end_tick=end_tick)
    out: dict[str, Any] = {
        "ticks": n,
        "tau_m_s": tau_m,
        "duration_s": n * tau_m,
        "agent_ticks": n_agent,
        "inaction_ticks": n - n_agent,
        "inaction_fraction": (n - n_agent) / n if n else float("nan"),
        "tau_i_mean_s": tau_i_mean,
        "tau_i_mean_ticks": tau_i_mean / tau_m if intervals.size else float("nan"),
        "tau_i_cv": float(intervals.std() / intervals.mean()) if intervals.size and intervals.mean() > 0 else float("nan"),
        "delay_mean_ticks": float(delays.mean()) if n_agent else float("nan"),
        "delay_p50_ticks": float(np.percentile(delays, 50)) if n_agent else float("nan"),
        "delay_max_ticks": int(delays.max()) if n_agent else -1,
        "delay_histogram": {int(k): int(c) for k, c in zip(hist_keys, hist_counts)},
        "lateness_p50_us": float(np.percentile(lateness, 50) * 1e6) if n else float("nan"),
        "lateness_p99_us": float(np.percentile(lateness, 99) * 1e6) if n else float("nan"),
        "lateness_max_us": float(lateness.max() * 1e6) if n else float("nan"),
        "overruns": int((lateness >= tau_m).sum()),
        "superseded": int(log["superseded"][keep].sum()),
        "stale": int(log["stale"][keep].sum()),
        "episodes_completed": len(returns),
        "episode_return_mean": float(np.mean(returns)) if returns else float("nan"),
        "reward_total": float(log["reward"][keep].sum()),
        "actions_per_s": n_agent / (n * tau_m) if n else float("nan"),
    }
    queue = log.meta.get("queue")
    if isinstance(queue, dict):
        out["dropped_full"] = int(queue.get("dropped_full", 0))
        out["rejected"] = int(queue.get("rejected", 0))
        out["submitted"] = int(queue.get("submitted", 0))
    return out
