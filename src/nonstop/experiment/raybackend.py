"""Inference workers and learners as Ray actors on any node of a cluster (the registry's ``ray`` entries).

`RayCluster` connects before anything starts, checks that the cluster can place and hold every
actor the run will start (CPUs, and memory for the ResNet each builds), and puts each weight
version into Ray's object store once (`WeightBroadcast`) for the actors to read.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

from nonstop.experiment.backends import learner_settings, policy_recipe, segments_of
from nonstop.experiment.run import Part

if TYPE_CHECKING:
    from nonstop.experiment.run import Run
    from nonstop.realtime.lifeline import RestartBudget

__all__ = ["RayCluster", "ray_policy", "ray_learners", "in_ray_actor"]


def ray_policy(run: "Run", i: int) -> Any:
    """Worker ``i`` as a Ray actor: the model is built in the actor and computes from views of the
    version in its node's object store (one copy of θ per node, not per actor)."""
    from nonstop.distributed.ray_backend import RayPolicy
    from nonstop.distributed.shared_params import make_object_store_policy

    algo, seed, latency = policy_recipe(run, i)
    factory = partial(make_object_store_policy, algo, seed=seed, latency=latency)
    # not waited for here: the pool starts every actor together, then waits for them all
    return RayPolicy(
        factory,
        broadcast=run.cluster.broadcast,
        num_cpus=0 if latency is not None else 1,
        trim_above=run.cfg.trim_above,
        wait=False,
    )


def in_ray_actor(run: "Run", factory: Callable[[], Any]) -> Any:
    """The policy ``factory()`` builds, in a Ray actor (no CPU reserved for one that sleeps through a declared
    latency); the pool starts every actor together."""
    from nonstop.distributed.ray_backend import RayPolicy

    return RayPolicy(factory, num_cpus=0 if run.latency.max_hint > 0 else 1, wait=False)


def ray_learners(run: "Run", budget: "RestartBudget") -> Any:
    """N_L learners as Ray actors; the replay and the master parameters stay on this host."""
    from nonstop.distributed.ray_learners import RayLearners

    # Ray learners run on their nodes' CPUs (TrainConfig refuses another device with Ray)
    return RayLearners(
        learner_settings(run),
        segments_of(run),
        broadcast=run.cluster.broadcast,
        restart_budget=budget,
        clock=run.world.clock,
        tau_m=run.tau_m,
    )


def _on_ray(kind: str, name: str) -> bool:
    """Whether the part ``name`` of ``kind`` runs on this cluster (it requires it, `registry.Constraint`)."""
    from nonstop.experiment.registry import constraint

    return constraint(kind, name).requires.get("cluster") == _CLUSTER


_CLUSTER = "ray"  # this cluster's name in the registry


class RayCluster(Part):
    """The run's connection to Ray, checked for room before any actor starts; closed last."""

    name = "cluster"

    def __init__(self, run: "Run") -> None:
        self.run = run
        self.broadcast: Any = None
        self._stack: ExitStack | None = None

    def connect(self) -> None:
        """Connect and check that the cluster can place and hold this run's actors: CPUs for every actor
        that reserves one, memory for the ResNet each builds. Each refusal is one line. Idempotent."""
        if self._stack is not None:
            return
        from nonstop.distributed.backends import check_backend
        from nonstop.distributed.ray_backend import check_model_fits_nodes, check_placement, ray_session

        run, cfg = self.run, self.run.cfg
        check_backend("ray", ray_address=cfg.ray_address, clock=cfg.clock)  # Ray installed, an address that answers
        stack = ExitStack()
        try:
            stack.enter_context(ray_session(cfg.ray_address))
            workers = run.n_inference if isinstance(run.n_inference, int) else 1
            inference_cpus = (
                workers if _on_ray("policy_backend", cfg.inference_backend) and run.latency.max_hint <= 0 else 0
            )
            learner_cpus = cfg.n_learners if _on_ray("learners", cfg.learner_placement) else 0
            check_placement(inference_cpus, 1, n_learners=learner_cpus)
            if len(run.spec.obs_shape) > 1 and (inference_cpus or learner_cpus):  # a ResNet each actor builds
                from nonstop.policies.models import ARCH_OPTIONS

                # a Box's actor: about one ResNet of 256 features
                outputs = int(run.spec.action_space.n) if run.algorithm.action_kind == "discrete" else 256
                check_model_fits_nodes(
                    run.settings.k,
                    n_actions=outputs,
                    learner_batch=run.settings.batch_size if learner_cpus else None,
                    **ARCH_OPTIONS[run.settings.arch],  # the network the run builds, counted as built
                )
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def notes(self, run: "Run") -> list[str]:
        cfg = run.cfg
        staggered = cfg.interaction == "staggered" and cfg.scheduler in ("max_time", "exp_time")
        if staggered and _on_ray("policy_backend", cfg.inference_backend):
            # measured (docs/scale.md): a Ray call's overhead varies, and the paper's schedulers lose their
            # stagger under any spread; quantile_hold keeps it
            return [
                f"note: Ray workers' calls vary in time, and {cfg.scheduler} loses its stagger under that spread "
                "(more inaction at the same N_I); --scheduler fill (the best return measured) or quantile_hold keeps it"
            ]
        return []

    def start(self, run: "Run") -> None:
        from nonstop.distributed.ray_backend import WeightBroadcast

        self.connect()
        if run.weights is not None:  # one put per version, for inference actors and learners (a run that learns)
            self.broadcast = WeightBroadcast(run.weights)

    def close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
