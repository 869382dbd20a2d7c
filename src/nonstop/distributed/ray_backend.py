"""Inference workers whose forward pass runs in a Ray actor, on any node (docs/design.md §5).

The pool, its scheduler, the latest slot and the action queue stay on the driver; a worker
thread there reads the newest observation, sends it to its actor, and submits the action that
comes back. The actor builds its policy once from a factory (shipped once, at creation, never
per call), and reports how long the forward pass took; the rest of the call's round trip
(serialisation, scheduling, network) is the **remote overhead**, recorded per action: it is part
of the delay the world sees.

Weights of a learning agent reach the actors through Ray's object store: `WeightBroadcast` puts
each published version once (a complete copy taken from `SharedWeights`, so never half-written)
and every call carries the version and a reference to it; an actor fetches the object only when
its version is behind.

A dead actor (killed, its node removed) makes its worker's call fail: the worker dies, the
`InferencePool` counts it and restarts the worker, which builds a fresh actor on a live node,
while the host covers the gap with β.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import numpy as np

from nonstop.distributed.backends import RAY_INSTALL_HINT, BackendUnavailable, check_backend
from nonstop.metrics.overhead import overhead_summary  # re-exported: it moved below the backends
from nonstop.policies.memory import DEFAULT_MIN_FREE, WorkingSetRelease, check_min_free
from nonstop.realtime.clock import stopwatch

__all__ = [
    "RayPolicy",
    "ray_session",
    "local_cluster",
    "WeightBroadcast",
    "ObjectStoreWeights",
    "check_placement",
    "choose_node",
    "pinned_to",
    "overhead_summary",
]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(f"backend 'ray' needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    return ray


def _loopback_ray() -> Any:
    """Ray, set up so that a Ray started here binds and advertises 127.0.0.1 only.

    Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, at import: without it a Ray started here
    advertises the machine's external interface, which a sandbox may not let it connect back to
    (a GCS that never answers, retried for minutes). The processes Ray starts read the variable;
    a Ray this process imported earlier gets the same setting on its constant. Only for a Ray
    started here: a driver joining a remote cluster must advertise a reachable address."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = _ray()
    from ray._private import ray_constants

    if getattr(ray_constants, "ENABLE_RAY_CLUSTER", False):
        ray_constants.ENABLE_RAY_CLUSTER = False
    return ray


def _init(ray: Any, **kwargs: Any) -> None:
    """``ray.init`` that leaves SIGTERM to nonstop. ``ray.init`` replaces the driver's SIGTERM
    handler with ``sys.exit(15)`` (a run then left with status 15, not 143, and said "exit requested
    (15)"), and Ray's core installs absl's failure handler, which printed a crash-like stack dump for
    a plain SIGTERM. The handler in place before is put back, and the dump is off unless the user set
    ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` themselves (it is the driver's; actors keep theirs)."""
    import signal

    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(**kwargs)
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)
    _raylet_notes_to_stderr()


def _raylet_notes_to_stderr() -> None:
    """Send what raylets tell the driver (such as "N PYTHON worker processes have been started",
    which 70 latency actors on a node trigger by design) to stderr, where warnings go: Ray prints
    them to stdout, from a thread, in the middle of a benchmark's output and its JSON. Ray's own
    printer, wrapped; left alone if Ray moved it."""
    try:
        from ray._private import worker
    except ImportError:
        return
    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "_nonstop_stderr", False):
        return

    def to_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and data.get("pid") == "raylet":
            data = {**data, "is_err": True}
        return printer(data, *args, **kwargs)

    to_stderr._nonstop_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


#: The niceness of the worker processes (actors) of a Ray started here. Ray's default, 15, makes an
#: actor yield its core to any process of default priority: on a loaded machine its forward pass
#: then waits for the CPU while the world's clock runs (measured on 2 busy cores: 8-18 % slower
#: than the same model in a process worker, called in turns). An actor here is a realtime worker.
WORKER_NICENESS: Final = 0


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Any]:
    """Connect to the Ray cluster at ``address`` (None/``"local"``: start a local one on
    127.0.0.1, no dashboard, its actors at `WORKER_NICENESS`) unless this process is connected
    already; disconnect on exit only if it connected here. Yields the ``ray`` module."""
    check_backend("ray", ray_address=address)
    ray = _ray()
    if ray.is_initialized():
        yield ray
        return
    if address in (None, "local"):
        ray = _loopback_ray()
        # address="local": a new Ray of our own. With None, ray.init joins whatever RAY_ADDRESS or
        # /tmp/ray/ray_current_cluster names (any test cluster started on this machine writes it, and
        # leaves it behind), and a dead one there is retried for minutes
        _init(
            ray,
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
            configure_logging=False,
            _system_config={"worker_niceness": WORKER_NICENESS},
        )
    else:
        _init(ray, address=address, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _node_ports() -> dict[str, int]:
    """Every port Ray would otherwise take at a fixed default (the dashboard agent 52365, metrics,
    the runtime-env agent) on a free one: a second Ray on this machine must not make a raylet
    fate-share with an agent that could not bind (seen as a GCS timeout)."""
    agent, metrics, runtime_env = _free_ports(3)
    return {"dashboard_agent_listen_port": agent, "metrics_export_port": metrics, "runtime_env_agent_port": runtime_env}


@contextmanager
def local_cluster(n_nodes: int = 2, *, num_cpus: int = 1, timeout: float = 120.0) -> Iterator[Any]:
    """A Ray cluster of ``n_nodes`` nodes on this machine (``ray.cluster_utils.Cluster``: every
    process on 127.0.0.1, free ports, no dashboard, actors at `WORKER_NICENESS`), this process
    connected to it; yields the cluster, whose nodes are all schedulable. Disconnects and shuts it
    down on exit."""
    if not isinstance(n_nodes, int) or isinstance(n_nodes, bool) or n_nodes < 1:
        raise ValueError(f"n_nodes must be an integer >= 1, got {n_nodes!r}")
    ray = _loopback_ray()  # head and nodes on 127.0.0.1
    if ray.is_initialized():
        raise RuntimeError("local_cluster() starts its own cluster: this process is connected to a Ray already")
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    (gcs,) = _free_ports(1)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": num_cpus,
            "include_dashboard": False,
            "node_ip_address": "127.0.0.1",
            "redis_port": gcs,
            "_system_config": {"worker_niceness": WORKER_NICENESS},
            **_node_ports(),
        },
    )
    try:

        def node_args() -> dict[str, Any]:  # fresh free ports for each node
            return {"num_cpus": num_cpus, "node_ip_address": "127.0.0.1", **_node_ports()}

        nodes: list[Any] = [cluster.head_node] + [cluster.add_node(**node_args()) for _ in range(n_nodes - 1)]
        if not cluster.address.startswith("127.0.0.1:"):
            raise RuntimeError(
                f"the local cluster advertises {cluster.address}, not loopback: set "
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before anything imports Ray"
            )
        _init(ray, address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        # a node is listed alive before the scheduler has its resources: a task pinned to each node
        # returns once that node can take actors
        here = ray.remote(num_cpus=0)(lambda: ray.get_runtime_context().get_node_id())
        pinned = [
            here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n.node_id, soft=False)).remote()
            for n in nodes
        ]
        ray.get(pinned, timeout=timeout)
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        _forget_address(cluster.gcs_address)


def _forget_address(gcs_address: str) -> None:
    """Remove /tmp/ray/ray_current_cluster if it names this (now stopped) cluster: a plain ``ray.init()``
    on this machine reads it, and would retry the dead address for minutes."""
    try:
        from ray._private import utils

        path = utils.get_ray_address_file(None)
        if utils.read_ray_address(None) == gcs_address:
            os.remove(path)
    except Exception:  # a private helper that moved, a file another process removed: nothing to undo
        pass


def _cpus(node: dict[str, Any]) -> float:
    """The CPUs a ``ray.nodes()`` row declares (0 for a node that declares none)."""
    return float(node.get("Resources", {}).get("CPU", 0.0))


def check_placement(n_actors: int, num_cpus: float, *, n_learners: int = 0) -> None:
    """A one-line error if the connected cluster cannot place ``n_actors`` inference actors and
    ``n_learners`` learner actors of ``num_cpus`` CPUs each (they would wait forever for a slot
    while β plays). Each live node holds as many as fit whole in its own CPUs."""
    if num_cpus <= 0:
        return
    nodes = [n for n in _ray().nodes() if n.get("Alive")]
    cpus = [_cpus(n) for n in nodes]
    total = sum(cpus)
    places = sum(math.floor(c / num_cpus + 1e-9) for c in cpus)  # an actor sits on one node: no halves add up
    need = n_actors + n_learners
    if need > places:
        what = f"{n_actors} Ray workers" + (f" and {n_learners} Ray learners" if n_learners else "")
        fewer = "fewer workers (--n-inference)" + (" or learners (--n-learners)" if n_learners else "")
        room = (
            f"the cluster has {total:g}"
            if places * num_cpus >= total - 1e-9
            else f"the cluster's {total:g}, split over {len(nodes)} nodes, hold only {places} such actors"
        )
        raise BackendUnavailable(
            f"{what} of {num_cpus:g} CPU each need {need * num_cpus:g} CPUs but {room}: use {fewer}, "
            "or add nodes to the cluster"
        )


def check_model_fits_nodes(
    k: float,
    *,
    n_actions: int,
    depth: int = 3,
    headroom: float = 1.25,
    learner_batch: int | None = None,
    same_padding: bool | None = None,
    fc_hidden: int | None = None,
) -> int:
    """A one-line error if the width-``k`` ResNet fits in no live node's memory for actors (Ray's
    ``memory`` resource): every actor would die building it. An inference actor holds θ and a
    forward pass's activations (`estimate_memory_bytes`, times ``headroom`` as `ensure_fits`
    counts it); with ``learner_batch`` a learner actor is checked too, which holds at least the
    online network, the target network and a gradient (3·|θ|) and a batch's activations. Both are
    lower bounds, so what this refuses could not have run. ``depth``, ``same_padding``, ``fc_hidden``: the
    network the run builds (`ARCH_OPTIONS`; by default the authors' ``impala``). Returns the largest node's bytes."""
    from nonstop.policies.models import ModelTooLargeError, count_parameters, estimate_memory_bytes

    nodes = [n for n in _ray().nodes() if n.get("Alive")]
    largest = max((int(n.get("Resources", {}).get("memory", 0)) for n in nodes), default=0)

    def estimate(batch: int = 1) -> int:
        return estimate_memory_bytes(
            k, n_actions, batch=batch, depth=depth, same_padding=same_padding, fc_hidden=fc_hidden
        )

    needs = [("Ray actor", int(estimate() * headroom))]
    if learner_batch is not None:
        theta = 4 * count_parameters(k, n_actions, depth=depth, same_padding=same_padding, fc_hidden=fc_hidden)
        forward = estimate(learner_batch)
        needs.append((f"Ray learner (batch {learner_batch})", int((forward + 2 * theta) * headroom)))
    for role, needed in needs:
        if needed > largest:
            raise ModelTooLargeError(
                f"IMPALA ResNet k={k:g} needs ~{needed / 1e9:.2f} GB per {role} (fp32 weights + activations, "
                f"x{headroom:g} headroom) but the largest of the cluster's {len(nodes)} nodes has {largest / 1e9:.2f} GB "
                "for actors: use a smaller --k, or add a node with more memory to the cluster"
            )
    return largest


class ObjectStoreWeights:
    """The `SharedWeights` reading interface (``version``, ``epsilon``, ``read_into``) over the
    newest version an actor fetched from Ray's object store; `RayPolicy` updates it per call."""

    def __init__(self, n_params: int) -> None:
        self.n_params = int(n_params)
        self.version = 0
        self.epsilon = 1.0
        self._flat: np.ndarray | None = None

    def update(self, version: int, epsilon: float, refs: list[Any]) -> None:
        self.epsilon = float(epsilon)
        if version != self.version and refs:
            self._flat = _ray().get(refs[0])  # one complete version (the object store is immutable)
            self.version = version

    def read_into(self, out: np.ndarray, *, timeout: float = 5.0) -> int:
        if self._flat is None:
            return 0
        out[:] = self._flat
        return self.version

    def current(self) -> tuple[int, np.ndarray | None]:
        """The newest fetched version and its array: a read-only view of the node's object store
        (zero copy: every actor on the node maps the same pages), pinned while referenced."""
        return self.version, self._flat


class WeightBroadcast:
    """Puts each version of `SharedWeights` into Ray's object store once, for every actor of a
    run; `current()` returns ``(version, epsilon, [ref])`` (the ref in a list so Ray passes it
    through instead of fetching it on every call)."""

    def __init__(self, weights: Any) -> None:
        self.weights = weights
        self._flat = np.empty(weights.n_params, np.float32)
        self._lock = threading.Lock()
        self._version = 0
        self._refs: list[Any] = []
        self.puts = 0

    def current(self) -> tuple[int, float, list[Any]]:
        with self._lock:
            if self.weights.version != self._version:
                version = self.weights.read_into(self._flat)
                if version != self._version:
                    self._refs = [_ray().put(self._flat.copy())]
                    self._version = version
                    self.puts += 1
            return self._version, self.weights.epsilon, self._refs


class _PolicyActor:
    """The actor: one policy, built once in the actor's process from ``factory``."""

    def __init__(
        self,
        factory: Callable[..., Any],
        torch_threads: int,
        n_params: int | None,
        trim_above: int | None = DEFAULT_MIN_FREE,
    ) -> None:
        try:
            import torch

            torch.set_num_threads(torch_threads)
        except ImportError:
            pass
        self.weights = ObjectStoreWeights(n_params) if n_params is not None else None
        self.policy = factory(weights=self.weights) if self.weights is not None else factory()
        self.release = WorkingSetRelease(trim_above)

    def where(self) -> tuple[str, int, int]:
        return _ray().get_runtime_context().get_node_id(), os.getpid(), os.nice(0)

    def act(self, obs: np.ndarray, weights: tuple[int, float, list[Any]] | None = None) -> tuple[Any, float]:
        t0 = stopwatch()
        if weights is not None and self.weights is not None:
            self.weights.update(*weights)
        decision = self.policy.act(obs)
        took = stopwatch() - t0
        self.release.after_pass()  # trims on its own thread while Ray sends the decision back
        return decision, took


_ACTOR_CLASS: Any = None


def choose_node(
    nodes: list[dict[str, Any]],
    held: dict[str, tuple[int, float]],
    num_cpus: float,
    exclude: frozenset[str] = frozenset(),
) -> str:
    """The node for the next actor of ``num_cpus`` CPUs: among the live nodes (``ray.nodes()``
    rows) that could ever hold it, the one least filled by the actors this process holds there
    (``held``: node -> (actors, CPUs)), counting CPUs against the node's own, then actors, then
    node id. Nodes of different sizes fill in proportion; actors that reserve no CPU spread evenly;
    a head started with no CPUs takes none of the actors that need one.

    >>> nodes = [{"NodeID": "a", "Alive": True, "Resources": {"CPU": 4.0}},
    ...          {"NodeID": "b", "Alive": True, "Resources": {"CPU": 1.0}}]
    >>> held = {}
    >>> for _ in range(5):
    ...     node = choose_node(nodes, held, 1)
    ...     n, cpus = held.get(node, (0, 0.0))
    ...     held[node] = (n + 1, cpus + 1)
    >>> sorted(held.items())
    [('a', (4, 4.0)), ('b', (1, 1.0))]
    """
    live = [n for n in nodes if n.get("Alive") and n["NodeID"] not in exclude]
    fit = [n for n in live if _cpus(n) + 1e-9 >= num_cpus]
    if not fit:
        have = ", ".join(f"{n['NodeID'][:8]}: {_cpus(n):g}" for n in live) or "none"
        raise BackendUnavailable(
            f"no live node of the cluster can hold an actor of {num_cpus:g} CPU (live nodes' CPUs: "
            f"{have}): add a node with {num_cpus:g} CPUs or more, or reserve fewer"
        )

    def fill(node: dict[str, Any]) -> tuple[float, int, str]:
        count, cpus = held.get(node["NodeID"], (0, 0.0))
        total = _cpus(node)
        return ((cpus + num_cpus) / total if num_cpus > 0 else 0.0), count, node["NodeID"]

    return min(fit, key=fill)["NodeID"]


class _Placement:
    """Where this process's actors are (node -> actors, CPUs), so the next goes to the least filled
    live node; an actor's slot is given back when it is released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, float]] = {}

    def take(self, num_cpus: float, exclude: frozenset[str] = frozenset()) -> str:
        nodes = _ray().nodes()
        with self._lock:
            node = choose_node(nodes, self._held, num_cpus, exclude)
            count, cpus = self._held.get(node, (0, 0.0))
            self._held[node] = (count + 1, cpus + num_cpus)
            return node

    def give_back(self, node: str, num_cpus: float) -> None:
        with self._lock:
            count, cpus = self._held.get(node, (0, 0.0))
            if count <= 1:
                self._held.pop(node, None)
            else:
                self._held[node] = (count - 1, max(0.0, cpus - num_cpus))


_placement = _Placement()


def pinned_to(node: str) -> Any:
    """Hard node affinity: the actor runs on ``node`` or, if that node is dead, fails to start
    (`ActorUnschedulableError`) and is placed again; soft affinity let a loaded Ray spill a live
    node's share onto another (seen: five actors meant for two nodes, all on the head)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = _ray().remote(_PolicyActor)
    return _ACTOR_CLASS


class RayPolicy:
    """A policy whose ``act`` runs in a Ray actor; a drop-in for `ProcessPolicy`.

    ``factory()`` builds the policy inside the actor (with ``broadcast``, ``factory(weights=...)``
    gets an `ObjectStoreWeights` kept current from the driver's `SharedWeights`). ``num_cpus`` is
    what the actor reserves (1 for a real model; 0 for a latency policy, which only sleeps).
    Each actor is pinned to the least filled live node that can hold it (`choose_node`). After
    each call ``overhead_s`` holds, per action, the round-trip time outside the forward pass, and
    ``compute_s`` the time inside the actor (which it returns beside the action). ``trim_above``: as
    for `ProcessPolicy`, the actor hands its forward pass's working set back after each pass.

    Needs a connected Ray (`ray_session`).
    """

    def __init__(
        self,
        factory: Callable[..., Any],
        *,
        num_cpus: float = 1,
        torch_threads: int = 1,
        broadcast: WeightBroadcast | None = None,
        start_timeout: float = 120.0,
        wait: bool = True,
        trim_above: int | None = DEFAULT_MIN_FREE,
    ) -> None:
        ray = _ray()
        if not ray.is_initialized():
            raise RuntimeError("RayPolicy needs a connected Ray: use nonstop.distributed.ray_backend.ray_session()")
        if not callable(factory):
            raise TypeError(f"factory must be a callable that builds a policy, got {type(factory).__name__}")
        if not (num_cpus >= 0):
            raise ValueError(f"num_cpus must be >= 0, got {num_cpus!r}")
        check_min_free(trim_above, "trim_above")
        self.broadcast = broadcast
        self.num_cpus = float(num_cpus)
        n_params = broadcast.weights.n_params if broadcast is not None else None
        self._args = (factory, torch_threads, n_params, trim_above)
        self.start_timeout = start_timeout
        self.node_id: str | None = None
        self.pid: int | None = None
        self.niceness: int | None = None  # the actor process's, once started (a cluster's worker_niceness)
        self.overhead_s: list[float] = []
        self.compute_s: list[
            float
        ] = []  # per call, the actor's own time (the forward pass; a weights fetch when behind)
        self.replaced = 0  # starts moved to another node because the chosen one died first
        self._node: str | None = None
        self._place()
        if wait:
            self.wait_started()

    def _place(self, exclude: frozenset[str] = frozenset()) -> None:
        """Create the actor on the least filled live node (not one of ``exclude``), pinned there."""
        self._node = _placement.take(self.num_cpus, exclude)
        self._actor = (
            _actor_class()
            .options(num_cpus=self.num_cpus, scheduling_strategy=pinned_to(self._node), max_restarts=0)
            .remote(*self._args)
        )
        self._probe = self._actor.where.remote()

    def wait_started(self, timeout: float | None = None) -> "RayPolicy":
        """Block until the actor has built its policy (``timeout``: ``start_timeout``); sets
        ``node_id`` and ``pid``. An actor whose node died before it could start there is placed
        again on another live node (``replaced`` counts it). A failed start releases the actor and
        raises."""
        if self.pid is not None:
            return self
        ray = _ray()
        timeout = self.start_timeout if timeout is None else timeout
        deadline = stopwatch() + timeout
        dead: set[str] = set()
        try:
            while True:
                try:
                    self.node_id, self.pid, self.niceness = ray.get(
                        self._probe, timeout=max(0.0, deadline - stopwatch())
                    )
                    return self
                except ray.exceptions.ActorUnschedulableError:
                    assert self._node is not None
                    dead.add(self._node)
                    self.close()
                    self.replaced += 1
                    self._place(frozenset(dead))
        except Exception as exc:
            self.close()
            raise RuntimeError(f"Ray actor did not start within {timeout:g}s: {exc}") from exc

    @classmethod
    def start_many(cls, factories: list[Callable[..., Any]], **options: Any) -> list["RayPolicy"]:
        """One started actor per factory, started together (each actor is a process that takes
        seconds to start: N at once cost about one start where the cores allow, not N)."""
        policies = [cls(factory, wait=False, **options) for factory in factories]
        try:
            for policy in policies:
                policy.wait_started()
        except BaseException:
            for policy in policies:
                policy.close()
            raise
        return policies

    def act(self, obs: np.ndarray) -> Any:
        ray = _ray()
        if self.pid is None:
            self.wait_started()
        weights = self.broadcast.current() if self.broadcast is not None else None
        t0 = stopwatch()
        try:
            decision, compute = ray.get(self._actor.act.remote(obs, weights))
        except ray.exceptions.RayActorError as exc:
            raise RuntimeError(f"Ray actor of pid {self.pid} died") from exc
        except ray.exceptions.RayTaskError as exc:
            raise RuntimeError(f"policy raised in its Ray actor: {exc}") from exc
        self.overhead_s.append(max(0.0, stopwatch() - t0 - compute))
        self.compute_s.append(compute)
        return decision

    def kill(self) -> None:
        """Kill the actor as a fault would (its next call fails)."""
        _ray().kill(self._actor, no_restart=True)

    def close(self) -> None:
        try:
            _ray().kill(self._actor, no_restart=True)
        except Exception:  # already dead, or Ray already shut down
            pass
        if self._node is not None:
            _placement.give_back(self._node, self.num_cpus)
            self._node = None
