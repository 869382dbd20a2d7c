"""The one training loop, and the rows it reports.

`Run.run_for` lets a started run go for a number of world seconds, in slices, calling back after
each: the API's `train` (here) collects rows there, and a run directory (`nonstop.experiment.record`,
through `Run.execute`) logs, draws and checkpoints there. Both use that one loop.

>>> cfg = TrainConfig(env="CartPole", seconds=4.0, algo_settings={"learning_starts": 50, "replay_capacity": 10_000})
>>> result = train(cfg)
>>> result["ticks"], result["updates"] > 100, result["summary"]["inaction_ticks"] < 5
(200, True, True)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nonstop.experiment.config import TrainConfig
from nonstop.experiment.run import Run

__all__ = ["train", "ProgressRows"]


def train(
    cfg: TrainConfig,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    progress_every: float = 5.0,
) -> dict[str, Any]:
    """Run ``cfg`` to the end and return what happened (summary, returns, updates).

    ``on_progress(row)`` is called every ``progress_every`` world seconds.
    Everything started is stopped and every segment unlinked, even on Ctrl-C.
    """
    from nonstop.metrics.timing import episode_returns, summarize

    run = Run(cfg)
    started = time.monotonic()
    records: dict[str, list[dict[str, Any]]] = {}
    try:
        run.build().start()
        rows = ProgressRows(run, started)

        def on_slice(_: float) -> None:
            for kind, found in run.records(rows.episodes()).items():
                records.setdefault(kind, []).extend(found)
            if on_progress is not None:
                on_progress(rows.progress())

        run.run_for(cfg.seconds, every=progress_every, on_slice=on_slice)
        parts = run.summary(run.world.tick_log)
    finally:
        run.teardown()
    log = run.world.tick_log
    return {
        "config": cfg.to_dict(),
        "ticks": len(log),
        "updates": run.final_updates,
        # the recorder counts where the host runs: here when it runs in this process (the virtual clock's
        # simulation), else in the host's own process, whose count this one never sees
        "transitions": run.recorder.transitions if run.world.host is not None else None,
        "episode_returns": episode_returns(log),
        "summary": summarize(log),
        "tick_log": log,
        "wall_s": time.monotonic() - started,
        "n_inference": run.n_inference,
        "parts": parts,  # each part's own figures (self-play: its pool's snapshots; learners: restarts)
        **records,
    }


class ProgressRows:
    """Turns a run's shared counters into progress rows (differences over each interval) and
    finished-episode rows; the same on both clocks, since the host's recorder keeps the counts
    in the replay's shared header.

    ``wall_offset`` is the wall time the run had already spent before this segment (a resumed
    run's last ``wall_s`` on disk), so ``wall_s`` keeps counting across a resume the way
    ``env_ticks`` does and "return over wall time" draws one run, not two overlaid."""

    def __init__(self, run: Run, wall0: float, wall_offset: float = 0.0) -> None:
        if not (isinstance(wall_offset, (int, float)) and math.isfinite(wall_offset) and wall_offset >= 0):
            raise ValueError(f"wall_offset must be a finite number of seconds >= 0, got {wall_offset!r}")
        self.run, self.wall0 = run, wall0 - float(wall_offset)  # wall_s = now - wall0 = offset + segment time
        self.prev = (0, 0, 0, run.state.updates, wall0)
        self.returns: list[float] = []
        self.seen_episodes = 0

    def episodes(self) -> list[dict[str, Any]]:
        out = []
        run = self.run
        for i, end_tick, ret, length in run.replay.episodes_since(self.seen_episodes):
            out.append(
                {
                    "episode": run.episode_offset + i,
                    "end_tick": run.tick_offset + end_tick,
                    "wall_s": round(time.monotonic() - self.wall0, 3),
                    "return": ret,
                    "length_ticks": length,
                }
            )
            self.returns.append(ret)
        self.seen_episodes = run.replay.episodes_finished
        return out

    def progress(self) -> dict[str, Any]:
        run = self.run
        ticks, agent, delay_sum = run.replay.tick_counters()
        updates, now = run.state.updates, time.monotonic()
        p_ticks, p_agent, p_delay, p_updates, p_wall = self.prev
        d_ticks, d_agent = ticks - p_ticks, agent - p_agent
        self.prev = (ticks, agent, delay_sum, updates, now)
        nan = float("nan")
        return {
            "wall_s": round(now - self.wall0, 3),
            "env_ticks": run.tick_offset + ticks,
            "episodes": run.episode_offset + run.replay.episodes_finished,
            "tau_i_mean_ticks": d_ticks / d_agent if d_agent else nan,
            "inaction_frac": (d_ticks - d_agent) / d_ticks if d_ticks else nan,
            "delay_mean_ticks": (delay_sum - p_delay) / d_agent if d_agent else nan,
            "updates": updates,
            "updates_per_s": (updates - p_updates) / (now - p_wall) if now > p_wall else nan,
            "transitions": run.replay.transitions_written,
            "recent_return": float(np.mean(self.returns[-20:])) if self.returns else nan,
            # the algorithm's exploration figure under its own name (`Algorithm.exploration_name`)
            run.algorithm.exploration_name: run.weights.exploration,
            "loss": run.state.loss if updates else nan,
        }
