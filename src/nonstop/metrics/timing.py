"""Timing metrics computed from the tick log and nothing else (docs/design.md §1.8): τ_I, inaction, delay,
lateness and episode returns, over a measured window of ticks.

The arithmetic lives beside the log, in `nonstop.realtime.ticksummary`, so that `TickLog.summary`
needs nothing above the realtime core (docs/architecture.md: realtime never imports metrics); this module is
where the metrics find it, and ``log.summary()`` is the same `summarize`.

>>> from nonstop.realtime.ticklog import TickLog, SOURCE_AGENT, SOURCE_DEFAULT
>>> log = TickLog(tau_m=0.5)
>>> for t in range(1, 5):
...     log.append(tick=t, deadline=t * 0.5, time=t * 0.5, episode=0, source=SOURCE_AGENT, delay=1)
>>> interaction_intervals(log).tolist(), summarize(log)["tau_i_mean_s"], log.summary()["tau_i_mean_s"]
([0.5, 0.5, 0.5], 0.5, 0.5)
"""

from __future__ import annotations

from nonstop.realtime.ticksummary import episode_returns, interaction_intervals, summarize

__all__ = ["summarize", "interaction_intervals", "episode_returns"]
