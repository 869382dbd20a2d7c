"""Timing metrics computed from the tick log and nothing else (docs/design.md §1.8): pure functions of its
columns, folded chunk by chunk.

Symbols follow the paper: τ_M tick period, τ_I time between actions taken by the agent (not by
β), τ_θ inference time.

They live beside the log, in the realtime core, so that `TickLog.summary` needs nothing above it
(docs/architecture.md: realtime imports no metrics); `nonstop.metrics.timing` is their public name among
the metrics. They read a log only through `TickColumns` (`TickBlocks` for every seat at once) and
import nothing from its storage.

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

from nonstop.realtime.tickcolumns import SOURCE_ABSENT, SOURCE_AGENT, TickBlocks, TickColumns

__all__ = ["summarize", "summarize_seats", "summarize_teams", "interaction_intervals", "episode_returns"]


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
        return [
            ret for _, (ret, ended, inside) in sorted(self.episodes.items()) if inside and (ended or not complete_only)
        ]


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
        acc.add(
            c["episode"],
            c["reward"],
            (c["terminated"] | c["truncated"]).astype(bool),
            _window(c["tick"], warmup_ticks, end_tick),
        )
    return acc.returns(complete_only)


def _percentile_of_counts(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile`` (linear) of the multiset ``values`` (sorted) repeated ``counts`` times."""
    n = int(counts.sum())
    h = (n - 1) * q / 100
    lo, hi = int(np.floor(h)), int(np.ceil(h))
    ends = np.cumsum(counts)
    a, b = (
        float(values[np.searchsorted(ends, lo, side="right")]),
        float(values[np.searchsorted(ends, hi, side="right")]),
    )
    return a + (h - lo) * (b - a)


_SUMMARY_COLUMNS = (
    "tick",
    "source",
    "delay",
    "lateness",
    "reward",
    "episode",
    "terminated",
    "truncated",
    "superseded",
    "stale",
)


class _Fold:
    """What `summarize` computes, folded a chunk at a time: counts, sums, the delay histogram (its
    mean and median are exact from it), τ_I's mean and spread (Chan's parallel update), the episode
    returns, and the lateness values (the one column its percentiles need whole)."""

    def __init__(self, tau_m: float, warmup_ticks: int, end_tick: int | None) -> None:
        self.tau_m, self.warmup_ticks, self.end_tick = tau_m, warmup_ticks, end_tick
        self.n = self.n_agent = self.n_absent = self.superseded = self.stale = self.overruns = 0
        self.reward_total = 0.0
        self.delay_counts: dict[int, int] = {}
        self.lateness_parts: list[np.ndarray] = []
        self.last_agent_tick: int | None = None
        self.iv_n, self.iv_mean, self.iv_m2 = 0, 0.0, 0.0  # τ_I samples (s): count, mean, sum of squared deviations
        self.returns = _EpisodeReturns()

    def add(self, c: dict[str, np.ndarray]) -> None:
        """One chunk of `_SUMMARY_COLUMNS` (one seat's values)."""
        tick, tau_m = c["tick"], self.tau_m
        keep = _window(tick, self.warmup_ticks, self.end_tick)
        self.returns.add(c["episode"], c["reward"], (c["terminated"] | c["truncated"]).astype(bool), keep)
        k = int(keep.sum())
        if not k:
            return
        self.n += k
        source = c["source"][keep]
        agent = source == SOURCE_AGENT
        self.n_agent += int(agent.sum())
        self.n_absent += int((source == SOURCE_ABSENT).sum())  # the seat's agent had left: neither acted nor idle
        keys, counts = np.unique(c["delay"][keep][agent], return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            self.delay_counts[key] = self.delay_counts.get(key, 0) + count
        agent_ticks = tick[keep][agent]
        if agent_ticks.size:
            if self.last_agent_tick is not None:
                agent_ticks = np.concatenate([[self.last_agent_tick], agent_ticks])
            self.last_agent_tick = int(agent_ticks[-1])
            x = np.diff(agent_ticks) * tau_m
            if x.size:
                m = x.mean()
                m2 = float(((x - m) ** 2).sum())
                total = self.iv_n + x.size
                delta = m - self.iv_mean
                self.iv_m2 += m2 + delta * delta * self.iv_n * x.size / total
                self.iv_mean = float(m) if not self.iv_n else self.iv_mean + delta * x.size / total
                self.iv_n = total
        lateness = c["lateness"][keep]
        self.lateness_parts.append(lateness)
        self.overruns += int((lateness >= tau_m).sum())
        self.superseded += int(c["superseded"][keep].sum())
        self.stale += int(c["stale"][keep].sum())
        self.reward_total += float(c["reward"][keep].sum())

    def lateness_figures(self) -> dict[str, float]:
        """The lateness percentiles (µs): the world's, the same for every seat."""
        lateness = np.concatenate(self.lateness_parts) if self.lateness_parts else np.zeros(0)
        n = self.n
        return {
            "lateness_p50_us": float(np.percentile(lateness, 50) * 1e6) if n else float("nan"),
            "lateness_p99_us": float(np.percentile(lateness, 99) * 1e6) if n else float("nan"),
            "lateness_max_us": float(lateness.max() * 1e6) if n else float("nan"),
        }

    def result(self, queue: Any, lateness: dict[str, float] | None = None) -> dict[str, Any]:
        """The figures; ``queue``: the seat's queue counters from the log's meta, if any; ``lateness``:
        `lateness_figures`, where they were computed once for many seats."""
        tau_m, n, n_agent, iv_n, iv_mean = self.tau_m, self.n, self.n_agent, self.iv_n, self.iv_mean
        present = n - self.n_absent  # ticks the seat's agent was in the world
        hist_keys = np.array(sorted(self.delay_counts), np.int64)
        hist_counts = np.array([self.delay_counts[k] for k in hist_keys.tolist()], np.int64)
        delay_sum = int((hist_keys * hist_counts).sum())
        iv_std = float(np.sqrt(self.iv_m2 / iv_n)) if iv_n else float("nan")
        ep_returns = self.returns.returns(complete_only=True)
        out: dict[str, Any] = {
            "ticks": n,
            "tau_m_s": tau_m,
            "duration_s": n * tau_m,
            "agent_ticks": n_agent,
            "inaction_ticks": present - n_agent,
            "inaction_fraction": (present - n_agent) / present if present else float("nan"),
            "absent_ticks": self.n_absent,
            "tau_i_mean_s": iv_mean if iv_n else float("nan"),
            "tau_i_mean_ticks": iv_mean / tau_m if iv_n else float("nan"),
            "tau_i_cv": iv_std / iv_mean if iv_n and iv_mean > 0 else float("nan"),
            "delay_mean_ticks": delay_sum / n_agent if n_agent else float("nan"),
            "delay_p50_ticks": _percentile_of_counts(hist_keys, hist_counts, 50) if n_agent else float("nan"),
            "delay_max_ticks": int(hist_keys[-1]) if n_agent else -1,
            "delay_histogram": {int(k): int(c) for k, c in zip(hist_keys, hist_counts)},
            **(lateness if lateness is not None else self.lateness_figures()),
            "overruns": self.overruns,
            "superseded": self.superseded,
            "stale": self.stale,
            "episodes_completed": len(ep_returns),
            "episode_return_mean": float(np.mean(ep_returns)) if ep_returns else float("nan"),
            "reward_total": self.reward_total,
            "actions_per_s": n_agent / (n * tau_m) if n else float("nan"),
        }
        if isinstance(queue, dict):
            out["dropped_full"] = int(queue.get("dropped_full", 0))
            out["rejected"] = int(queue.get("rejected", 0))
            out["submitted"] = int(queue.get("submitted", 0))
        return out


def summarize(log: TickColumns, *, warmup_ticks: int = 0, end_tick: int | None = None) -> dict[str, Any]:
    """Everything the tick log says about a run, over the ticks after ``warmup_ticks`` (and up to
    ``end_tick``, when given: e.g. the last tick before the agents were stopped). Every figure,
    episode returns included, uses that same window.

    Computed chunk by chunk (`TickLog.iter_chunks`), so a log on disk is never loaded whole: counts,
    sums, the delay histogram (its mean and median are exact from it), τ_I's mean and spread
    (Chan's parallel update) and the episode returns are folded a chunk at a time. Only the
    lateness percentiles need every value: that one column (8 bytes a tick, 17 MB for 10 h at
    60 Hz) is gathered."""
    fold = _Fold(log.tau_m, warmup_ticks, end_tick)
    for c in log.iter_chunks(_SUMMARY_COLUMNS):
        fold.add(c)
    return fold.result(log.meta.get("queue"))


def summarize_seats(log: TickBlocks, *, warmup_ticks: int = 0, end_tick: int | None = None) -> list[dict[str, Any]]:
    """`summarize` for every seat, in seat order, in one pass over the chunks (each read once,
    its per-seat quantities as (ticks × seats) blocks: `TickLog.iter_blocks`), each with ``seat``:
    its name. The same figures as ``summarize(log.seat(i))``, seat by seat, to the last bit: every
    seat is folded at once (`_SeatsFold`), a thousand seats in numpy calls, not a loop a seat a chunk."""
    fold = _SeatsFold(log.seats, log.tau_m, warmup_ticks, end_tick)
    for c in log.iter_blocks(_SUMMARY_COLUMNS):
        fold.add(c)
    queues = log.meta.get("queues")
    if not (isinstance(queues, list) and len(queues) == log.seats):
        queues = [log.meta.get("queue")] * log.seats  # as `TickLog.seat` reads them
    return [{**fold.result(i, queue), "seat": name} for i, (queue, name) in enumerate(zip(queues, log.seat_names))]


def _rows_sum(values: np.ndarray) -> np.ndarray:
    """Each seat's sum over a chunk's rows of a (rows × seats) block, as a one-seat column's ``.sum()``
    adds them (numpy's pairwise sum along a contiguous row: the same bits for one seat or a thousand)."""
    return np.ascontiguousarray(values.T).sum(axis=1)


class _SeatsFold:
    """`_Fold` for every seat at once: the same arithmetic, each step on a (seats,) array instead of a
    number, so each seat's figures are the bits `_Fold` gives its column. The shared columns (lateness,
    episodes) are folded once. τ_I's samples differ in count from seat to seat: seats with as many
    samples in a chunk are stacked and reduced together (most seats act alike: a few groups a chunk)."""

    def __init__(self, seats: int, tau_m: float, warmup_ticks: int, end_tick: int | None) -> None:
        self.seats, self.tau_m, self.warmup_ticks, self.end_tick = seats, tau_m, warmup_ticks, end_tick
        self.n = self.overruns = 0
        zeros = np.zeros(seats, np.int64)
        self.n_agent, self.n_absent, self.superseded, self.stale = (
            zeros.copy(),
            zeros.copy(),
            zeros.copy(),
            zeros.copy(),
        )
        self.reward_total = np.zeros(seats)
        self.delay_counts: dict[int, np.ndarray] = {}
        self.lateness_parts: list[np.ndarray] = []
        self.last_agent_tick = np.full(seats, -1, np.int64)  # -1: none yet (ticks start at 1)
        self.has_last = np.zeros(seats, bool)
        self.iv_n, self.iv_mean, self.iv_m2 = zeros.copy(), np.zeros(seats), np.zeros(seats)
        #: episode -> [each seat's return so far, ended, inside], as `_EpisodeReturns` keeps it for one seat
        self.episodes: dict[int, list] = {}
        self._lateness: dict[str, float] | None = None

    def _returns(self, episode: np.ndarray, reward: np.ndarray, ended: np.ndarray, inside: np.ndarray) -> None:
        if not episode.size:
            return
        starts = np.flatnonzero(np.diff(episode)) + 1
        bounds = np.concatenate([[0], starts, [episode.size]])
        ended_any = np.logical_or.reduceat(ended, bounds[:-1])
        inside_all = np.logical_and.reduceat(inside, bounds[:-1])
        by_seat = np.ascontiguousarray(reward.T)
        for i, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            part = by_seat[:, a:b].sum(axis=1)
            entry = self.episodes.get(ep := int(episode[a]))
            if entry is None:
                self.episodes[ep] = [part, bool(ended_any[i]), bool(inside_all[i])]
            else:
                entry[0] = entry[0] + part
                entry[1] = entry[1] or bool(ended_any[i])
                entry[2] = entry[2] and bool(inside_all[i])

    def add(self, c: dict[str, np.ndarray]) -> None:
        """One chunk of `_SUMMARY_COLUMNS`: shared columns one value a tick, per-seat ones (ticks × seats)."""
        tick, tau_m = c["tick"], self.tau_m
        keep = _window(tick, self.warmup_ticks, self.end_tick)
        self._returns(c["episode"], c["reward"], (c["terminated"] | c["truncated"]).astype(bool), keep)
        k = int(keep.sum())
        if not k:
            return
        self.n += k
        source = c["source"][keep]
        agent = source == SOURCE_AGENT
        self.n_agent += agent.sum(axis=0)
        self.n_absent += (source == SOURCE_ABSENT).sum(axis=0)
        delay = c["delay"][keep]
        for key in np.unique(delay[agent]).tolist():
            counts = ((delay == key) & agent).sum(axis=0)
            self.delay_counts[key] = self.delay_counts.get(key, 0) + counts
        self._intervals(tick[keep], agent)
        lateness = c["lateness"][keep]
        self.lateness_parts.append(lateness)
        self.overruns += int((lateness >= tau_m).sum())
        self.superseded += c["superseded"][keep].sum(axis=0).astype(np.int64)
        self.stale += c["stale"][keep].sum(axis=0).astype(np.int64)
        self.reward_total += _rows_sum(c["reward"][keep])

    def _intervals(self, tick: np.ndarray, agent: np.ndarray) -> None:
        """τ_I's samples of the chunk (gaps between a seat's agent ticks, the last one before it first),
        merged into each seat's mean and spread as `_Fold` merges them (Chan's parallel update)."""
        acted = agent.sum(axis=0)
        samples = acted - 1 + self.has_last  # the gaps each seat's agent ticks make, with the one before
        for count, with_last in set(zip(acted.tolist(), self.has_last.tolist())):
            if not count:
                continue
            seats = np.flatnonzero((acted == count) & (self.has_last == with_last))
            ticks = np.broadcast_to(tick, (len(seats), len(tick)))[agent[:, seats].T].reshape(len(seats), count)
            if with_last:
                ticks = np.concatenate([self.last_agent_tick[seats, None], ticks], axis=1)
            self.last_agent_tick[seats] = ticks[:, -1]
            size = int(samples[seats[0]])
            if not size:
                continue
            x = np.diff(ticks, axis=1) * self.tau_m
            m = x.mean(axis=1)
            m2 = ((x - m[:, None]) ** 2).sum(axis=1)
            n_before = self.iv_n[seats]
            total = n_before + size
            delta = m - self.iv_mean[seats]
            self.iv_m2[seats] += m2 + delta * delta * n_before * size / total
            self.iv_mean[seats] = np.where(n_before == 0, m, self.iv_mean[seats] + delta * size / total)
            self.iv_n[seats] = total
        self.has_last |= acted > 0

    def result(self, seat: int, queue: Any) -> dict[str, Any]:
        """Seat ``seat``'s figures, as `_Fold.result` gives them for its column."""
        fold = _Fold(self.tau_m, self.warmup_ticks, self.end_tick)
        fold.n, fold.overruns = self.n, self.overruns
        fold.n_agent, fold.n_absent = int(self.n_agent[seat]), int(self.n_absent[seat])
        fold.superseded, fold.stale = int(self.superseded[seat]), int(self.stale[seat])
        fold.reward_total = float(self.reward_total[seat])
        fold.delay_counts = {key: int(counts[seat]) for key, counts in self.delay_counts.items() if counts[seat]}
        fold.iv_n, fold.iv_mean, fold.iv_m2 = int(self.iv_n[seat]), float(self.iv_mean[seat]), float(self.iv_m2[seat])
        fold.returns.episodes = {
            ep: [float(ret[seat]), ended, inside] for ep, (ret, ended, inside) in self.episodes.items()
        }
        return fold.result(queue, self._lateness_figures())

    def _lateness_figures(self) -> dict[str, float]:
        """The lateness percentiles, computed once for every seat (the column is the world's, not a seat's)."""
        if self._lateness is None:
            fold = _Fold(self.tau_m, self.warmup_ticks, self.end_tick)
            fold.n, fold.lateness_parts = self.n, self.lateness_parts
            self._lateness = fold.lateness_figures()
        return self._lateness


def summarize_teams(seats: dict[str, dict[str, Any]], teams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each team's figures from its seats' summaries (``seats``: seat name → `summarize`'s dict;
    ``teams``: seat name → team; seats it leaves out belong to no team): its seats, their agent
    and inaction ticks summed (``inaction_fraction`` over all of them, ``inaction_fraction_max`` the
    worst seat's), their delay histograms merged (mean, max), rewards, superseded and stale summed,
    and ``episode_return_mean``: the team's return an episode (every seat shares the world's
    episodes, so it is the sum of its seats' means).

    >>> one = {"agent_ticks": 3, "inaction_ticks": 1, "delay_histogram": {1: 2, 3: 1}, "reward_total": 2.0,
    ...        "superseded": 0, "stale": 0, "episodes_completed": 1, "episode_return_mean": 2.0}
    >>> two = {**one, "agent_ticks": 1, "inaction_ticks": 3, "delay_histogram": {5: 1}}
    >>> t = summarize_teams({"a": one, "b": two}, {"a": "red", "b": "red"})["red"]
    >>> t["seats"], t["inaction_fraction"], t["inaction_fraction_max"], t["delay_mean_ticks"], t["episode_return_mean"]
    (['a', 'b'], 0.5, 0.75, 2.5, 4.0)
    """
    unknown = [seat for seat in teams if seat not in seats]
    if unknown:
        raise ValueError(f"the team map names seats {unknown} the log does not have; its seats are {list(seats)}")
    out: dict[str, dict[str, Any]] = {}
    by_team: dict[Any, list[str]] = {team: [] for team in teams.values()}
    for seat in seats:  # one pass: a thousand seats in a thousand teams is not a million comparisons
        if seat in teams:
            by_team[teams[seat]].append(seat)
    for team, members in by_team.items():
        rows = [seats[seat] for seat in members]
        agent, inaction = sum(r["agent_ticks"] for r in rows), sum(r["inaction_ticks"] for r in rows)
        histogram: dict[int, int] = {}
        for r in rows:
            for delay, count in r["delay_histogram"].items():
                histogram[int(delay)] = histogram.get(int(delay), 0) + int(count)
        delays = sum(d * c for d, c in histogram.items())
        fractions = [
            r["inaction_ticks"] / (r["agent_ticks"] + r["inaction_ticks"])
            for r in rows
            if r["agent_ticks"] + r["inaction_ticks"]
        ]
        means = [r["episode_return_mean"] for r in rows]
        out[str(team)] = {
            "seats": members,
            "agent_ticks": agent,
            "inaction_ticks": inaction,
            "inaction_fraction": inaction / (agent + inaction) if agent + inaction else float("nan"),
            "inaction_fraction_max": max(fractions) if fractions else float("nan"),
            "delay_mean_ticks": delays / agent if agent else float("nan"),
            "delay_max_ticks": max(histogram) if histogram else -1,
            "delay_histogram": dict(sorted(histogram.items())),
            "reward_total": float(sum(r["reward_total"] for r in rows)),
            "superseded": sum(r["superseded"] for r in rows),
            "stale": sum(r["stale"] for r in rows),
            "episodes_completed": min((r["episodes_completed"] for r in rows), default=0),
            "episode_return_mean": float(sum(means)) if means and all(m == m for m in means) else float("nan"),
        }
    return out
