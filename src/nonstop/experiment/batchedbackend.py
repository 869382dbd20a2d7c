"""The ``batched`` policy backend: every inference worker of a run is a request lane of one batching
inference server that owns the run's Q-network (docs/design.md §7; `nonstop.inference.batching`).

The first worker's policy builds the server and hangs it on the run as a part (`BatchServerPart`),
so it is one per run, however many seats, pools and restarts ask; the run's teardown closes it
(retired: it closes once the pools have released their lanes, whichever is torn down first). The
server's model takes the learners' weights once per published version, before a batch (from a device
learner, ``--learner-backend device``, by a device copy: `nonstop.experiment.devicelearners`); each lane
explores with the run's ε on the server's answer, so exploring costs the same time as acting.

What the run's config may say (read with defaults until `TrainConfig` has the fields):

* ``batch_curve``: the latency curve L(b) (`nonstop.inference.batchsize.CURVE_GRAMMAR`, e.g.
  ``linear:5t,0.25t``). Without it L(b) is the declared ``latency``'s mean for every b (a batch of
  any size costs one inference: batching at no cost), re-measured on the wall clock as it runs.
* ``max_batch`` (default 64), ``device`` (default ``cpu``; ``cuda``, ``cuda:N``, ``auto``) and ``dtype``
  (`nonstop.inference.device.resolve_dtype`). On CUDA the server's forward pass pads each batch to
  the next power of two (up to ``max_batch``) and replays a CUDA graph captured for that size.

The ``batched_process`` backend (wall clock; on the virtual clock it is ``batched``, a virtual clock
being one process's) serves the same server to workers in processes of their own: worker ``i`` is a
`nonstop.inference.workers.ProcessPolicy` whose process holds a `nonstop.inference.lanering.RemoteLane`
on slot ``i`` of a shared-memory `LaneRing` (no model, no torch in it), and the frames reach the server
through that ring. The observation still reaches each worker's process over the process backend's
pipe, as every process worker's does: the no-pickle path is the ring's, between the lanes and the
server (a world in its own process, as in ``nonstop bench gpu``, skips the pipe).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from nonstop.experiment.run import Part
from nonstop.experiment.registry import constraint

if TYPE_CHECKING:
    import torch

    from nonstop.experiment.run import Run
    from nonstop.inference.batching import BatchedPolicy, BatchingServer
    from nonstop.inference.batchsize import LatencyCurve
    from nonstop.inference.lanering import RemoteLane, RemoteLanes
    from nonstop.inference.seatlanes import TeamForward
    from nonstop.inference.workers import ProcessPolicy
    from nonstop.learning.weights import SharedWeights

__all__ = [
    "batched_policy",
    "batched_process_policy",
    "BatchServerPart",
    "DEFAULT_MAX_BATCH",
    "served_forward",
    "team_server",
]

DEFAULT_MAX_BATCH = 64


class BatchServerPart(Part):
    """The run's batching server as a part: nothing to start (it serves as soon as a lane asks),
    retired when the run closes, its report in ``summary.json`` under ``batch_server``."""

    name = "batch_server"

    def __init__(self, server: "BatchingServer", model_forward: Any = None) -> None:
        self.server = server
        #: the server's forward pass over the run's Q-network (a `TorchForward`: its model, its weights refresh)
        self.model_forward = model_forward
        #: the lane ring of the ``batched_process`` backend's workers (built by its first worker)
        self.remote: RemoteLanes | None = None

    def close(self) -> None:
        self.server.retire()  # closes now, or when the pools release their last lane
        self.release_ring()

    def release_ring(self) -> None:
        """Unlink the lane ring once the server is closed (its lanes' processes are gone by then)."""
        if self.remote is not None and self.server.closed:
            self.remote.close()

    def summary(self, run: "Run", tick_log: Any) -> dict[str, Any]:
        """The server's report, and the batch size of every action the learner's seat applied: the tick
        log's (worker, obs_tick) joined with the batch each lane's answer rode in (β ticks count 0)."""
        from nonstop.inference.batching import applied_batch_sizes

        report = self.server.report()
        if self.remote is not None:
            report["remote_lanes"] = self.remote.report()
        if tick_log is not None and len(tick_log):
            sizes = applied_batch_sizes(
                tick_log["worker"], tick_log["obs_tick"], tick_log["source"], self.server.answered_by
            )
            applied = sizes[sizes > 0]
            values, counts = np.unique(applied, return_counts=True)
            report["applied_batch_sizes"] = {int(b): int(n) for b, n in zip(values, counts)}
            report["applied_batch_size_mean"] = float(applied.mean()) if applied.size else None
        return {"batch_server": report}


class _WeightsRefresh:
    """Loads the newest published θ into the server's model before a batch, once per version."""

    def __init__(self, weights: "SharedWeights") -> None:
        self.weights = weights
        self.version = 0
        self._flat = np.empty(weights.n_params, np.float32)

    def __call__(self, model: "torch.nn.Module") -> bool:
        """Whether a new version was loaded: one flat upload into a flat-bound model, else one per parameter."""
        import torch

        from nonstop.inference.device import flat_parameters
        from nonstop.learning.weights import load_flat

        if self.weights.version == self.version:
            return False
        self.version = self.weights.read_into(self._flat)
        flat = flat_parameters(model)
        if flat is not None and flat.numel() == self._flat.size:
            with torch.no_grad():
                flat.copy_(torch.from_numpy(self._flat))
        else:
            load_flat(model, self._flat)
        return True


def _refresh(run: "Run") -> Any:
    """How new weights reach the server's model: from a device learner's θ by a device copy, else from the
    host's `SharedWeights`; either way once per version."""
    if constraint("learners", run.cfg.learner_placement).keeps_weights_on_device:
        from nonstop.experiment.devicelearners import DeviceRefresh, device_state_of

        return DeviceRefresh(device_state_of(run))
    return _WeightsRefresh(run.weights)


def _curve(run: "Run") -> "LatencyCurve":
    from nonstop.inference.batchsize import LatencyCurve, parse_curve

    spec = run.cfg.batch_curve
    if spec:
        return parse_curve(spec, tick_hz=run.tick_hz)
    return LatencyCurve.linear(run.latency.mean, 0.0)


class _Served:
    """The algorithm's answers over a device forward: called as the algorithm answers, and otherwise the
    device forward itself (its pinned staging, graph capture and timings stay visible to the server)."""

    def __init__(self, device_forward: Any, answer: Any) -> None:
        self._device_forward = device_forward
        self._answer = answer

    def __call__(self, batch: np.ndarray) -> Any:
        return self._answer(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device_forward, name)


def served_forward(run: "Run", params: np.ndarray | None = None, *, seed: int = 999) -> tuple[Any, Any]:
    """The algorithm's answers over a forward pass of a model of the run (the learner's θ, taken once per
    published version; with ``params``, those fixed parameters: a team that does not learn), and that
    forward pass (a `TorchForward`)."""
    from nonstop.inference.device import default_graph_sizes, placement, torch_forward
    from nonstop.learning.weights import load_flat

    model = run.algorithm.build_model()
    if params is not None:
        load_flat(model, params)
    max_batch = int(run.cfg.max_batch)
    device, _ = placement(run.cfg.device, run.cfg.dtype)
    q_argmax = torch_forward(
        model,
        str(device),
        dtype=run.cfg.dtype,
        graph_sizes=default_graph_sizes(device, max_batch),
        refresh=_refresh(run) if params is None else None,
    )
    # the algorithm's answers from that forward pass (`Algorithm.serve`: a greedy index, a sampled vector)
    return _Served(q_argmax, run.algorithm.serve(q_argmax, seed=run.cfg.seed * 1000 + seed)), q_argmax


def _build_server(run: "Run", forward: Any = None) -> tuple["BatchingServer", Any]:
    """The run's server over ``forward`` (default: the learner's, `served_forward`) and the learner's device forward."""
    from nonstop.inference.batching import BatchingServer

    q_argmax = None
    if forward is None:
        forward, q_argmax = served_forward(run)
    max_batch = int(run.cfg.max_batch)
    # overlap: the next batch's frames are staged while a forward runs (wall clock; a no-op on the virtual one);
    # example: every CUDA graph is captured on the server's thread as it starts, before any batch
    example = np.zeros(run.spec.obs_shape, run.spec.obs_space.dtype)
    server = BatchingServer(
        forward,
        _curve(run),
        clock=run.world.clock,
        max_batch=max_batch,
        overlap=True,
        example=example,
        action_shape=run.algorithm.action_shape,  # (d,) float vectors for a Box, () ints for Discrete
    )
    return server, q_argmax


def _server_part(run: "Run", forward: Any = None) -> BatchServerPart:
    """The run's server part, built (over ``forward``, default the learner's) by the first call."""
    part = run.part("batch_server")
    if part is None:
        part = BatchServerPart(*_build_server(run, forward))
        run.parts.append(part)  # closed with the run; appended, so a start loop in progress only calls its no-op start
    return part


def team_server(run: "Run", forward: "TeamForward") -> BatchServerPart:
    """The run's one server for a world of teams, over ``forward`` (a `TeamForward` of each team's
    `served_forward`): one pass a team present in a batch."""
    return _server_part(run, forward)


def batched_policy(run: "Run", i: int) -> "BatchedPolicy":
    """Worker ``i``'s request lane of the run's batching server (built by the first call)."""
    part = _server_part(run)
    weights = run.weights
    return part.server.lane(
        run.spec.action_space,
        tau_m=run.tau_m,
        origin=run.world.origin,
        epsilon=run.algorithm.lane_epsilon(weights),
        seed=run.cfg.seed * 1000 + i,
        tag=i,
    )


def _lane_in_this_process(lane: "RemoteLane") -> "RemoteLane":
    """A `ProcessPolicy` factory: the lane, unpickled in the worker's process (it attaches the ring)."""
    return lane


class _LaneWorker:
    """A worker process holding a remote lane, counted as an open lane of the server: a retired server
    (the run's teardown) closes, and its ring is unlinked, only once the pool has released every such
    worker, so no lane is told "closed" while its pool still runs (it would die and be restarted)."""

    def __init__(self, worker: "ProcessPolicy", part: BatchServerPart) -> None:
        self.worker, self.part = worker, part
        self._open = True
        part.server._lane_opened()

    def wait_started(self, timeout: float | None = None) -> "_LaneWorker":
        self.worker.wait_started(timeout)
        return self

    def act(self, obs: np.ndarray) -> Any:
        return self.worker.act(obs)

    def kill(self) -> None:
        self.worker.kill()

    def close(self) -> None:
        self.worker.close()  # the process is reaped first
        if self._open:
            self._open = False
            self.part.server._lane_closed()
            self.part.release_ring()


def batched_process_policy(run: "Run", i: int) -> _LaneWorker:
    """Worker ``i`` in a process of its own, a remote request lane of the run's batching server on slot
    ``i`` of the run's lane ring (the ring is made by the first call, one slot a worker)."""
    from nonstop.inference.lanering import RemoteLanes
    from nonstop.inference.workers import ProcessPolicy

    n_lanes = run.n_inference
    if not isinstance(n_lanes, int):
        raise ValueError(
            f"--backend batched_process makes one ring slot a worker: give --n-inference a number (got {n_lanes!r})"
        )
    part = _server_part(run)
    if part.remote is None:
        example = np.zeros(run.spec.obs_shape, run.spec.obs_space.dtype)  # the frames the world publishes
        part.remote = RemoteLanes(part.server, example, n_lanes=n_lanes, action_space=run.spec.action_space)
    if not 0 <= i < n_lanes:
        raise ValueError(f"worker {i}: the lane ring has slots 0..{n_lanes - 1} (one a worker)")
    lane = part.remote.lane(
        i,
        run.spec.action_space,
        tau_m=run.tau_m,
        origin=run.world.origin,
        epsilon=run.algorithm.lane_epsilon(run.weights),
        seed=run.cfg.seed * 1000 + i,
    )
    worker = ProcessPolicy(
        partial(_lane_in_this_process, lane), torch_threads=None, trim_above=run.cfg.trim_above, wait=False
    )  # no model in it: torch is never imported there
    return _LaneWorker(worker, part)
