"""Where a run's inference workers and learners run on this machine (the registry's built-in entries).

Each function takes the run (its parts are built) and returns one thing: an inference worker's
policy (``*_policy(run, i)``), or the run's learners (``*_learners(run, restart_budget)``). Ray's
counterparts are in `nonstop.experiment.raybackend`, the device learner's in
`nonstop.experiment.devicelearners`; which one a run uses is its config's
``inference_backend`` / ``learner_placement``, looked up in `nonstop.experiment.registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from nonstop.experiment.run import Part

if TYPE_CHECKING:
    from nonstop.experiment.run import Run
    from nonstop.learning.learners import LearnerSettings, Segments
    from nonstop.realtime.lifeline import RestartBudget

__all__ = [
    "thread_policy",
    "process_policy",
    "virtual_learners",
    "process_learners",
    "NoCluster",
    "policy_recipe",
    "placement_of",
    "in_thread",
    "in_process",
]


def policy_recipe(run: "Run", i: int) -> tuple[Any, int, Any]:
    """What every backend's policy is built from: the run's algorithm (its actor, for the world's spaces),
    worker ``i``'s seed and its declared latency (None: the model's own time only)."""
    latency = run.latency if run.latency.max_hint > 0 else None
    return run.algorithm, run.cfg.seed * 1000 + i, latency


def placement_of(run: "Run") -> dict[str, Any]:
    """Where the run's models run: ``device`` and ``dtype`` as its config says (`TrainConfig`)."""
    return {"device": run.cfg.device, "dtype": run.cfg.dtype}


def thread_policy(run: "Run", i: int) -> Any:
    """Worker ``i``'s actor in this process (`Algorithm.policy`), reading the shared weights."""
    from nonstop.learning.algos import make_policy

    algo, seed, latency = policy_recipe(run, i)
    return make_policy(algo, run.weights, seed, latency, **placement_of(run))


def process_policy(run: "Run", i: int) -> Any:
    """Worker ``i``'s model in its own process, one torch thread, computing from the host's one
    shared copy of θ; not waited for here (the pool starts every worker together)."""
    from nonstop.distributed.shared_params import make_shared_policy
    from nonstop.inference.workers import ProcessPolicy

    algo, seed, latency = policy_recipe(run, i)
    factory = partial(make_shared_policy, algo, run.weights, seed, latency, **placement_of(run))
    return ProcessPolicy(factory, trim_above=run.cfg.trim_above, wait=False)


def in_thread(run: "Run", factory: Callable[[], Any]) -> Any:
    """The policy ``factory()`` builds, in this process."""
    return factory()


def in_process(run: "Run", factory: Callable[[], Any]) -> Any:
    """The policy ``factory()`` builds, in a process of its own (started with the pool's others)."""
    from nonstop.inference.workers import ProcessPolicy

    return ProcessPolicy(factory, trim_above=run.cfg.trim_above, wait=False)


def learner_settings(run: "Run") -> "LearnerSettings":
    """The run's `LearnerSettings`, which every learner backend is built from."""
    from nonstop.learning.learners import LearnerSettings

    cfg = run.cfg
    return LearnerSettings(
        run.spec.model_obs_shape,
        run.spec.action_space,
        run.settings,
        n_learners=cfg.n_learners,
        mode=cfg.learner_mode,
        seed=cfg.seed,
        device=cfg.device,
        tau_l=cfg.tau_l,
    )


def segments_of(run: "Run") -> "Segments":
    """The run's shared segments its learners read and write."""
    from nonstop.learning.learners import Segments

    return Segments(run.state, run.weights, run.replay)


def virtual_learners(run: "Run", budget: "RestartBudget") -> Any:
    """N_L learners as timed processes of the virtual clock: an update takes ``tau_l`` (default τ_M)."""
    from nonstop.learning.learners import VirtualLearners

    return VirtualLearners(
        run.world.clock,
        run.tau_m,
        learner_settings(run),
        learners=[run.learning.learner(i) for i in range(run.cfg.n_learners)],
        segments=segments_of(run),
        restart_budget=budget,
    )


def process_learners(run: "Run", budget: "RestartBudget") -> Any:
    """N_L supervised learner processes on this host (wall clock)."""
    from nonstop.learning.learners import LearnerProcesses

    return LearnerProcesses(learner_settings(run), segments_of(run), restart_budget=budget, clock=run.world.clock)


class NoCluster(Part):
    """A run that needs no cluster: nothing to connect to or check."""

    name = "cluster"
    broadcast: Any = None

    def __init__(self, run: "Run") -> None:
        self.run = run

    def connect(self) -> None:
        """Nothing to connect to."""
