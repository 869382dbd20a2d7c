"""Which θ team self-play is judged on, and how large a batch its learner draws: pure arithmetic for
`nonstop.experiment.teamplay` (no clock, no torch).

* **Trials** (`trial_picks`, `best_trial`). DQN's last θ can be a passive one (docs/multi-agent.md,
  "Team self-play"), so after self-play the run plays up to ``trial_episodes`` *trial* episodes
  against a random team, one a candidate θ, frozen: snapshots spread evenly over the run (the
  untrained snapshot 0 left out) and the last θ. The candidate that killed the most more than it
  lost is the one the judged episodes then play, ties to the newer. The trials are episodes of their
  own, before the judged ones and none of them: the judged figure is never the one that chose.
* **Batch** (`team_batch_size`). A team of S learning agents makes S transitions a tick; one update
  of ``batch_size`` every ``update_every`` ticks samples each of them ``batch_size / (update_every · S)``
  times on average, so the more agents, the less of what they did is ever learned from. The batch
  grows with S to keep at least `MIN_REPLAY_RATIO` samples a transition.

>>> trial_picks(40, 5)           # 40 candidates, 5 trials: spread over the run, the newest included
[7, 15, 23, 31, 39]
>>> best_trial([(3, 1), (9, 2), (9, 2), (0, 0)])   # (kills, deaths) of each candidate, oldest first
2
>>> team_batch_size(64, 4, 81), team_batch_size(64, 4, 484), team_batch_size(64, 4, 12)
(64, 378, 64)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

__all__ = ["MIN_REPLAY_RATIO", "trial_picks", "best_trial", "team_batch_size"]

#: samples a transition the team's learner draws at least: what batch 64 every 4 ticks draws for the 81
#: learning agents of the README's 162-seat battle (64 / 324 = 0.198), the run that learns reliably
MIN_REPLAY_RATIO: Final = 0.195


def trial_picks(candidates: int, trials: int) -> list[int]:
    """Indices of the ``candidates`` (oldest first) that get a trial: all of them when ``trials`` allows,
    else ``trials`` of them evenly spaced and counted back from the newest, which is always one."""
    if candidates < 0 or trials < 0:
        raise ValueError(f"candidates and trials must be >= 0, got {candidates} and {trials}")
    if trials >= candidates:
        return list(range(candidates))
    if trials == 0:
        return []
    step = candidates / trials
    return sorted({candidates - 1 - math.floor(k * step) for k in range(trials)})


def best_trial(results: Sequence[tuple[int, int]]) -> int:
    """The index of the best ``(kills, deaths)`` trial: the most kills beyond deaths, ties to the newest."""
    if not results:
        raise ValueError("no trial to choose from")
    return max(range(len(results)), key=lambda i: (results[i][0] - results[i][1], i))


def team_batch_size(batch_size: int, update_every: int, learning_agents: int) -> int:
    """``batch_size``, or more where ``learning_agents`` make so many transitions a tick that one batch
    every ``update_every`` ticks would sample each fewer than `MIN_REPLAY_RATIO` times."""
    for name, value in (("batch_size", batch_size), ("update_every", update_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return max(batch_size, math.ceil(MIN_REPLAY_RATIO * update_every * max(0, learning_agents)))
