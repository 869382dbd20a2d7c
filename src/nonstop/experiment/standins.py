"""Runs that only act: staggered workers whose policy stands in for a model, and nothing learning.

A stand-in is a random action returned after the declared latency (a `LatencyPolicy` over a
`RandomPolicy`), so a run measures what the schedulers do with time and nothing else: what
``nonstop compare`` composes, one `nonstop.experiment.run.Run` per scheduler on the same world seed
and latency. Worker ``i`` of a run with seed ``s`` draws its latencies from seed ``s·100003 + i``, so
every scheduler sees the same draws per worker. Where each stand-in runs (a thread, a process, a Ray
actor) is the run's ``policy_host`` (`nonstop.experiment.registry`).

>>> from nonstop.experiment.config import TrainConfig
>>> from nonstop.experiment.run import Run
>>> run = Run(TrainConfig(env="theory/inaction", seconds=1.0, interaction="stand_in", latency="4t"))
>>> try:
...     _ = run.build().start()
...     run.advance(1.0)
... finally:
...     run.teardown()
>>> [p.name for p in run.parts], run.pool.n_inference, run.world.tick_log.summary(warmup_ticks=8)["inaction_ticks"]
(['cluster', 'learning', 'pool'], 4, 0)
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from nonstop.experiment.drivers import InferencePart
from nonstop.experiment.run import Part
from nonstop.experiment.registry import lookup

if TYPE_CHECKING:
    from nonstop.experiment.run import Run

__all__ = ["StandInDriver", "NoLearning", "stand_in_policy"]


def stand_in_policy(space: Any, latency: Any, seed: int) -> Any:
    """A random action from ``space`` after a latency drawn from ``latency`` (picklable, for any host)."""
    from nonstop.policies import LatencyPolicy, RandomPolicy

    return LatencyPolicy(RandomPolicy(space), latency, seed=seed)


def StandInDriver(run: "Run", *, seat: str | None) -> list[Part]:
    """N_I stand-in workers on ``seat`` under the run's scheduler; no learners."""
    host = lookup("policy_host", run.cfg.inference_backend)
    space, latency, seed = run.action_space, run.latency, run.cfg.seed

    def policy(i: int) -> Any:
        return host(run, partial(stand_in_policy, space, latency, seed * 100_003 + i))

    return [InferencePart("pool", policy, run.n_inference, seat=seat, mark_start=True)]


class NoLearning(Part):
    """What a run that learns nothing has in place of the learning core: no parameters, no replay, no
    recorder; its episodes are the world's."""

    name = "learning"
    state: Any = None
    weights: Any = None
    recorder: Any = None
    replay_restored = False

    def __init__(self, run: "Run") -> None:
        self.replay = _WorldEpisodes(run)

    def sync_host(self) -> None:
        """No parameters to bring up to date."""


class _WorldEpisodes:
    """The episodes a run's world has finished (a run without a replay counts them here)."""

    def __init__(self, run: "Run") -> None:
        self._run = run

    @property
    def episodes_finished(self) -> int:
        world = self._run.world
        return 0 if world is None else int(world.slot.read().episode)
