"""Timing metrics computed from the tick log and nothing else (docs/design.md §1.8): pure functions of its
columns, folded chunk by chunk.

Symbols follow the paper: τ_M tick period, τ_I time between actions taken by the agent (not by
β), τ_θ inference time.

They live beside the log, in the realtime core, so that `TickLog.summary` needs nothing above it
(docs/architecture.md: realtime imports no metrics); `nonstop.metrics.timing` is their public name among
the metrics. They read a log only through `TickColumns` and import nothing from its storage.

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

from nonstop.realtime.tickcolumns import SOURCE_AGENT, TickColumns

__all__ = ["summarize", "interaction_intervals", "episode_returns"]


def _window(tick: np.ndarray, warmup_ticks: int, end_tick: int | None) -> np.ndarray:
    """Rows measured: after the warm-up, up to and including ``end_tick``."""
    keep = tick > warmup_ticks
    return keep if end_tick is None else keep & (tick <= end_tick)


def interaction_intervals(log: TickColumns, *, warmup_ticks: int = 0, end_tick: int | None = None) -> np.ndarray:
    """τ_I samples in seconds: gaps between consecutive agent-applied ticks."""
    tick = log["tick"]
    agent_ticks = tick[(log["source"] == SOURCE_AGENT) & _window(tick, warmup_ticks, end_tick)]
    return np.diff(agent_ticks) * log.tau_m


class _EpisodeReturns:
    """Per-episode reward sums folded chunk by chunk: ``{episode: [return, ended, inside]}``."""

    def __init__(self) -> None:
        self.episodes: dict[int, list] = {}

    def add(self, episode: np.ndarray, reward: np.ndarray, ended: np.ndarray, inside: np.ndarray) -> None:
        if not episode.size:
            return
        starts = np.flatnonzero(np.diff(episode)) + 1  # an episode is a run of equal ids
        bounds = np.concatenate([[0], starts, [episode.size]])
        ended_any = np.logical_or.reduceat(ended, bounds[:-1])
        inside_all = np.logical_and.reduceat(inside, bounds[:-1])
        for i, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            part = float(reward[a:b].sum())
            entry = self.episodes.get(ep := int(episode[a]))
            if entry is None:
                self.episodes[ep] = [part, bool(ended_any[i]), bool(inside_all[i])]
            else:
                entry[0] += part
                entry[1] = entry[1] or bool(ended_any[i])
                entry[2] = entry[2] and bool(inside_all[i])

    def returns(self, complete_only: bool) -> list[float]:
        return [ret for _, (ret, ended, inside) in sorted(self.episodes.items())
                if inside and (ended or not complete_only)]  # fmt: skip


def episode_returns(
    log: TickColumns, *, complete_only: bool = True, warmup_ticks: int = 0, end_tick: int | None = None
) -> list[float]:
    """Sum of rewards per episode; the last (unfinished) one is left out by default.

    Only episodes lying wholly in the measured window count (first tick after ``warmup_ticks``,
    and, with ``end_tick``, ended by then): an episode cut by the window's edge would report a
    partial return. Folded chunk by chunk (`TickLog.iter_chunks`).
    """
    acc = _EpisodeReturns()
    for c in log.iter_chunks(("tick", "episode", "reward", "terminated", "truncated")):
        acc.add(c["episode"], c["reward"], (c["terminated"] | c["truncated"]).astype(bool),
                _window(c["tick"], warmup_ticks, end_tick))  # fmt: skip
    return acc.returns(complete_only)


def _percentile_of_counts(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile`` (linear) of the multiset ``values`` (sorted) repeated ``counts`` times."""
    n = int(counts.sum())
    h = (n - 1) * q / 100
    lo, hi = int(np.floor(h)), int(np.ceil(h))
    ends = np.cumsum(counts)
    a, b = float(values[np.searchsorted(ends, lo, side="right")]), float(values[np.searchsorted(ends, hi, side="right")])
    return a + (h - lo) * (b - a)


_SUMMARY_COLUMNS = ("tick", "source", "delay", "lateness", "reward", "episode", "terminated", "truncated",
                    "superseded", "stale")  # fmt: skip


def summarize(log: TickColumns, *, warmup_ticks: int = 0, end_tick: int | None = None) -> dict[str, Any]:
    """Everything the tick log says about a run, over the ticks after ``warmup_ticks`` (and up to
    ``end_tick``, when given: e.g. the last tick before the agents were stopped). Every figure,
    episode returns included, uses that same window.

    Computed chunk by chunk (`TickLog.iter_chunks`), so a log on disk is never loaded whole: counts,
    sums, the delay histogram (its mean and median are exact from it), τ_I's mean and spread
    (Chan's parallel update) and the episode returns are folded a chunk at a time. Only the
    lateness percentiles need every value: that one column (8 bytes a tick, 17 MB for 10 h at
    60 Hz) is gathered."""
    tau_m = log.tau_m
    n = n_agent = superseded = stale = overruns = 0
    reward_total = 0.0
    delay_counts: dict[int, int] = {}
    lateness_parts: list[np.ndarray] = []
    last_agent_tick: int | None = None
    iv_n, iv_mean, iv_m2 = 0, 0.0, 0.0  # τ_I samples (s): count, mean, sum of squared deviations
    returns = _EpisodeReturns()
    for c in log.iter_chunks(_SUMMARY_COLUMNS):
        tick = c["tick"]
        keep = _window(tick, warmup_ticks, end_tick)
        returns.add(c["episode"], c["reward"], (c["terminated"] | c["truncated"]).astype(bool), keep)
        k = int(keep.sum())
        if not k:
            continue
        n += k
        agent = c["source"][keep] == SOURCE_AGENT
        n_agent += int(agent.sum())
        keys, counts = np.unique(c["delay"][keep][agent], return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            delay_counts[key] = delay_counts.get(key, 0) + count
        agent_ticks = tick[keep][agent]
        if agent_ticks.size:
            if last_agent_tick is not None:
                agent_ticks = np.concatenate([[last_agent_tick], agent_ticks])
            last_agent_tick = int(agent_ticks[-1])
            x = np.diff(agent_ticks) * tau_m
            if x.size:
                m = x.mean()
                m2 = float(((x - m) ** 2).sum())
                total = iv_n + x.size
                delta = m - iv_mean
                iv_m2 += m2 + delta * delta * iv_n * x.size / total
                iv_mean = float(m) if not iv_n else iv_mean + delta * x.size / total
                iv_n = total
        lateness = c["lateness"][keep]
        lateness_parts.append(lateness)
        overruns += int((lateness >= tau_m).sum())
        superseded += int(c["superseded"][keep].sum())
        stale += int(c["stale"][keep].sum())
        reward_total += float(c["reward"][keep].sum())
    lateness = np.concatenate(lateness_parts) if lateness_parts else np.zeros(0)
    hist_keys = np.array(sorted(delay_counts), np.int64)
    hist_counts = np.array([delay_counts[k] for k in hist_keys.tolist()], np.int64)
    delay_sum = int((hist_keys * hist_counts).sum())
    iv_std = float(np.sqrt(iv_m2 / iv_n)) if iv_n else float("nan")
    ep_returns = returns.returns(complete_only=True)
    out: dict[str, Any] = {
        "ticks": n,
        "tau_m_s": tau_m,
        "duration_s": n * tau_m,
        "agent_ticks": n_agent,
        "inaction_ticks": n - n_agent,
        "inaction_fraction": (n - n_agent) / n if n else float("nan"),
        "tau_i_mean_s": iv_mean if iv_n else float("nan"),
        "tau_i_mean_ticks": iv_mean / tau_m if iv_n else float("nan"),
        "tau_i_cv": iv_std / iv_mean if iv_n and iv_mean > 0 else float("nan"),
        "delay_mean_ticks": delay_sum / n_agent if n_agent else float("nan"),
        "delay_p50_ticks": _percentile_of_counts(hist_keys, hist_counts, 50) if n_agent else float("nan"),
        "delay_max_ticks": int(hist_keys[-1]) if n_agent else -1,
        "delay_histogram": {int(k): int(c) for k, c in zip(hist_keys, hist_counts)},
        "lateness_p50_us": float(np.percentile(lateness, 50) * 1e6) if n else float("nan"),
        "lateness_p99_us": float(np.percentile(lateness, 99) * 1e6) if n else float("nan"),
        "lateness_max_us": float(lateness.max() * 1e6) if n else float("nan"),
        "overruns": overruns,
        "superseded": superseded,
        "stale": stale,
        "episodes_completed": len(ep_returns),
        "episode_return_mean": float(np.mean(ep_returns)) if ep_returns else float("nan"),
        "reward_total": reward_total,
        "actions_per_s": n_agent / (n * tau_m) if n else float("nan"),
    }
    queue = log.meta.get("queue")
    if isinstance(queue, dict):
        out["dropped_full"] = int(queue.get("dropped_full", 0))
        out["rejected"] = int(queue.get("rejected", 0))
        out["submitted"] = int(queue.get("submitted", 0))
    return out
