"""One trial of ``nonstop bench nstar``: a pool of N latency-declaring workers in the inaction world on
either clock, its tick-log summary after warm-up; on Ray, the actors kept warm across a search's trials."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import numpy as np

__all__ = ["TRIAL_ENV", "TrialSpec", "WarmRayActors", "trial"]

#: the cheapest world: the env does not matter for N_I*, only the tick rate
TRIAL_ENV: Final = "theory/inaction"


class _KeptPolicy:
    """A warm Ray actor lent to one trial: its pool's stop leaves it running, and it reports only
    this trial's call overheads."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.overhead_s = policy, list[float]()
        self.node_id = policy.node_id

    def act(self, obs: Any) -> Any:
        seen = len(self.policy.overhead_s)
        decision = self.policy.act(obs)
        self.overhead_s.extend(self.policy.overhead_s[seen:])
        return decision

    def kill(self) -> None:
        self.policy.kill()

    def close(self) -> None:
        pass  # `WarmRayActors.close` ends it


class WarmRayActors:
    """Ray actors kept across the trials of one latency (a search runs many, each a few more
    workers): a trial of N workers borrows actors 0..N−1 and starts only those missing, together.
    A worker's latency draws then continue from trial to trial instead of restarting from its seed."""

    def __init__(self) -> None:
        self.key: Any = None
        self.actors: dict[int, Any] = {}
        self.started = 0
        self.per_node: dict[str, int] = {}  # actors started on each node (node id → count)

    def borrow(self, key: Any, factory: Any, n: int) -> None:
        """Have actors 0..n−1 of ``factory(i)`` for ``key`` started (a new key ends the old ones)."""
        from nonstop.distributed.ray_backend import RayPolicy

        if key != self.key:
            self.close()
            self.key = key
        missing = [i for i in range(n) if i not in self.actors]
        for i, policy in zip(missing, RayPolicy.start_many([factory(i) for i in missing], num_cpus=0)):
            self.actors[i] = policy  # num_cpus 0: a latency policy sleeps, it reserves no core
            self.per_node[str(policy.node_id)] = self.per_node.get(str(policy.node_id), 0) + 1
        self.started += len(missing)

    def get(self, key: Any, factory: Any, i: int) -> _KeptPolicy:
        if key != self.key or i not in self.actors:
            self.borrow(key, factory, i + 1)
        return _KeptPolicy(self.actors[i])

    def close(self) -> None:
        for policy in self.actors.values():
            policy.close()
        self.actors.clear()


@dataclass(frozen=True)
class TrialSpec:
    """What one trial runs: ``n_workers`` latency-declaring workers (or ``"auto"``) under ``scheduler``
    on ``clock``, measured over ``window_ticks`` after ``warmup_ticks``."""

    n_workers: int | str
    scheduler: str
    clock: str
    latency: Any
    seed: int
    warmup_ticks: int
    window_ticks: int
    backend: str = "thread"
    #: the estimate (seconds) Algorithm 1 or 2 starts from, staggering the first inferences by it
    #: over N (`initial_estimate`); None: the scheduler's own start
    initial: float | None = None


def trial(spec: TrialSpec, warm: WarmRayActors | None = None) -> dict[str, Any]:
    """One run of ``spec``; returns the tick-log summary after warm-up (counted from when the workers
    started: Ray actors take seconds to start). With ``warm`` a Ray trial borrows kept actors instead
    of starting its own."""
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.host import Session

    n_workers, latency, seed, backend = spec.n_workers, spec.latency, spec.seed, spec.backend
    warmup_ticks, window_ticks = spec.warmup_ticks, spec.window_ticks
    with Session(TRIAL_ENV, clock=spec.clock, seed=seed) as world:
        tau_m = world.tau_m

        space = world.action_space

        def factory(i: int) -> Any:
            return partial(_latency_policy, space, latency, seed * 100_003 + i)

        key = (repr(latency), seed)
        if warm is not None and isinstance(n_workers, int):
            warm.borrow(key, factory, n_workers)  # all of them at once, before the world counts

        def policy(i: int) -> Any:
            if backend == "ray":
                from nonstop.distributed.ray_backend import RayPolicy

                if warm is not None:
                    return warm.get(key, factory, i)
                return RayPolicy(factory(i), num_cpus=0)  # it sleeps: no core reserved
            return factory(i)()

        # by name: the pool binds a grid scheduler's period to τ_M and its origin to the tick grid
        chosen: Any = spec.scheduler
        if spec.initial is not None and isinstance(n_workers, int):
            chosen = make_scheduler(spec.scheduler, n_workers, initial_estimate=spec.initial)
        pool = InferencePool(world, policy, chosen, n_inference=n_workers).start()
        if backend == "ray":  # the warm-up counts from when the actors are up
            warmup_ticks += int(world.slot.read().tick)
        try:
            world.run_for((warmup_ticks + window_ticks + 1) * tau_m)
            # the window ends here: the ticks the host goes on making while the pool stops are β's
            end_tick = world.slot.read().tick
        finally:
            pool.stop()
    summary = world.tick_log.summary(warmup_ticks=warmup_ticks, end_tick=end_tick)
    log = world.tick_log
    keep = (log["tick"] > warmup_ticks) & (log["tick"] <= end_tick) & (log["source"] == 1)
    delays = log["delay"][keep]
    summary["delay_p99_ticks"] = float(np.percentile(delays, 99)) if delays.size else float("nan")
    taus = np.array([t for w in pool.workers for t in w.tau_thetas])
    summary["tau_theta_max_ticks"] = float(taus.max() / tau_m) if taus.size else float("nan")
    summary["tau_theta_mean_ticks"] = float(taus.mean() / tau_m) if taus.size else float("nan")
    # as the world sees it: from the start the schedule counts to the action in hand (the wake-up lag too)
    seen = np.array([t for w in pool.workers for t in w.world_taus])
    summary["world_taus_s"] = seen  # for the measured in-flight formula; not part of the row
    summary["tau_theta_world_max_ticks"] = float(seen.max() / tau_m) if seen.size else float("nan")
    summary["tau_theta_world_mean_ticks"] = float(seen.mean() / tau_m) if seen.size else float("nan")
    summary["n_workers_final"] = pool.n_inference
    overhead = world.tick_log.meta.get("workers", {}).get("remote_overhead_s")
    if overhead is not None:
        summary["remote_overhead_s"] = overhead
    # Algorithms 1 and 2 on the wall clock: the whole-tick cycle C their workers held phases of
    summary["tick_cycle"] = world.tick_log.meta.get("workers", {}).get("tick_cycle")
    return summary


def _latency_policy(space: Any, latency: Any, seed: int) -> Any:
    from nonstop.policies import ConstantPolicy, LatencyPolicy

    return LatencyPolicy(ConstantPolicy(space, 1), latency, seed=seed)
