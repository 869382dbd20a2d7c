"""One learner whose whole update runs on the device (docs/design.md §7; docs/gpu.md).

A host learner (`nonstop.learning.learners.Learner`) computes its gradient on the device and brings it
back: Adam then runs on the host's shared master parameters (`TrainingState`) and every inference copy
reloads `SharedWeights` once per version. For a 1B-parameter model that is ~4 GB to the host and back
per update. A device learner keeps all of it where the update runs::

    batch  <- replay.sample(B)                      # host shared memory, pinned, sent without blocking
    loss   <- the algorithm's loss at θ; backward   # `Algorithm.backward`
    θ,m,v  <- Adam(θ, g) on the device              # `adam_step`: the host's numbers, bias correction included
    θ_target <- the algorithm's target rule         # `Algorithm.update_rule`: a copy or Polyak, on the device
    version += 1                                    # the batching server's model copies θ once per version

`DeviceTrainingState` owns the device's θ, Adam moments and target (flat float32 tensors: the
networks' parameters are views into them, so the Adam step on the flat vector is the step on the
network). It is uploaded once from the host `TrainingState` and written back only when someone needs
the host's copy (`to_host`: a checkpoint, a self-play snapshot, the end of the run), counted in
``host_writes``. A model in the same process — the batching server's — takes each new version by
``copy_into`` (device to device, counted in ``device_copies``). Workers that read `SharedWeights`
(thread or process workers) get each version published there by the learner (``publish_host``: one
host copy a version, counted too).

`DeviceLearners` drives one `DeviceLearner` on either clock: on a `VirtualClock` a timed process whose
update takes ``tau_l`` (as `VirtualLearners`), on the wall clock a thread of this process. One learner
a device: the flat state is one writer's.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from nonstop.inference.cudaops import HostOps, VersionHandoff, device_ops
from nonstop.inference.device import flat_parameters
from nonstop.learning.algos import algorithm_of
from nonstop.learning.optim import adam_step, step_target
from nonstop.learning.learners import IDLE_WAIT, LearnerSettings, Segments, ready_to_learn, updates_ahead
from nonstop.learning.weights import SharedWeights, TrainingState
from nonstop.realtime.clock import Clock, TimedProcess
from nonstop.realtime.deaths import Death, in_this_process, tell
from nonstop.realtime.lifeline import PartFailed, RestartBudget

if TYPE_CHECKING:
    import torch

__all__ = ["DeviceTrainingState", "DeviceLearner", "DeviceLearners", "bind_parameters"]

#: the loss is read back (a device sync) once in this many updates, for progress reports
LOSS_EVERY: Final = 32


def bind_parameters(model: "torch.nn.Module", flat: "torch.Tensor") -> None:
    """Make ``model``'s parameters views into ``flat`` (in ``parameters()`` order), keeping the
    values ``flat`` holds: a step on ``flat`` is then a step on the model, with no copy."""
    import torch

    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    if flat.shape != (n,):
        raise ValueError(f"the flat vector holds {flat.shape[0]} numbers but the model has {n} parameters")
    offset = 0
    with torch.no_grad():
        for p in params:
            p.data = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()


class DeviceTrainingState:
    """θ, Adam's moments and the target network of one run on ``device``, with a version counter.

    Owned by the run's process; one learner writes it (under ``lock``), any number of models in
    the process copy θ from it once per ``version`` (`copy_into`, under the same lock: on CUDA both
    issue their work on the device's default stream in lock order, so a copy never sees half a step).

    >>> import torch
    >>> host = TrainingState.create(3); host.params[:] = [1, 2, 3]
    >>> dev = DeviceTrainingState.from_host(host, "cpu"); dev.theta.tolist(), dev.version
    ([1.0, 2.0, 3.0], 0)
    >>> net = torch.nn.Linear(2, 1); dev.copy_into(net), net.weight.tolist(), dev.device_copies
    (0, [[1.0, 2.0]], 1)
    >>> host.unlink()
    """

    def __init__(
        self, theta: "torch.Tensor", adam_m: "torch.Tensor", adam_v: "torch.Tensor", target: "torch.Tensor"
    ) -> None:
        self.theta, self.adam_m, self.adam_v, self.target = theta, adam_m, adam_v, target
        self.device = theta.device
        self.lock = threading.Lock()
        #: updates applied on the device (each a new version of θ)
        self.version = 0
        #: target syncs made on the device (the host's target seqlock moves by 2 for each)
        self.target_syncs = 0
        #: times θ (and the rest) were written to the host (`to_host`), and copies of θ into a model (`copy_into`)
        self.host_writes = 0
        self.device_copies = 0
        self._host_version = 0  # the version the host's copy holds
        self._target_base = 0
        # streams (CUDA): the learner writes θ on its own, readers wait for its event (`VersionHandoff`)
        self.ops: HostOps = HostOps()
        self.handoff = VersionHandoff(self.ops)
        self._snapshot: Any = None  # a device copy of θ, m, v, target: what a checkpoint downloads, unlocked
        self._host_lock = threading.Lock()  # one host write at a time (the snapshot is one buffer)

    @classmethod
    def from_host(
        cls, state: TrainingState, device: "str | torch.device", *, ops: HostOps | None = None
    ) -> "DeviceTrainingState":
        """The host state uploaded to ``device`` once (a run's start, or a resume); ``ops`` (a test's fake)
        for the device's own (`nonstop.inference.cudaops`)."""
        import torch

        from nonstop.inference.device import resolve_device

        dev = resolve_device(str(device))
        ops = ops if ops is not None else device_ops(dev)
        ops.set_device()  # cuda:N: before the upload
        out = cls(
            *(
                torch.from_numpy(np.array(getattr(state, name), copy=True)).to(dev)
                for name in ("params", "adam_m", "adam_v", "target")
            )
        )
        out._target_base = state.target_version // 2 * 2
        out.ops, out.handoff = ops, VersionHandoff(ops)
        return out

    @property
    def n_params(self) -> int:
        return int(self.theta.numel())

    def copy_into(self, model: "torch.nn.Module") -> int:
        """Copy θ into ``model``'s parameters in place (a device copy where both live on the same device:
        no host memory in between; captured CUDA graphs see the new values). Returns the version copied."""
        import torch

        with self.lock, torch.no_grad():
            self.handoff.before_read()  # on the caller's stream (the server's): the learner's newest step done
            flat = flat_parameters(model)
            if flat is not None and flat.numel() == self.n_params:
                flat.copy_(self.theta)  # one flat copy (a `TorchForward`'s master is bound flat)
            else:
                offset = 0
                for p in model.parameters():
                    p.copy_(self.theta[offset : offset + p.numel()].view(p.shape))
                    offset += p.numel()
                if offset != self.n_params:
                    raise ValueError(f"the model has {offset} parameters, the learner's θ {self.n_params}")
            self.handoff.after_read("server")
            self.device_copies += 1
            return self.version

    def to_host(self, state: TrainingState, weights: SharedWeights | None = None, *, force: bool = False) -> bool:
        """Write θ, the moments and the target into the host ``state`` (and publish θ to ``weights``)
        if the host's copy is older than ``version`` (or ``force``). Returns whether it wrote. Under the lock
        only a device snapshot is taken (four device copies); the downloads run after it is released, so the
        learner goes on meanwhile."""
        with self._host_lock:
            return self._to_host(state, weights, force)

    def _to_host(self, state: TrainingState, weights: SharedWeights | None, force: bool) -> bool:
        import torch

        with self.lock:
            if self.version == self._host_version and not force:
                return False
            if self._snapshot is None:
                self._snapshot = torch.empty((4, self.n_params), dtype=self.theta.dtype, device=self.device)
            self.handoff.before_read()
            for row, tensor in zip(self._snapshot, (self.theta, self.adam_m, self.adam_v, self.target)):
                row.copy_(tensor.detach())
            self.handoff.after_read("host")
            version, target_version = self.version, self._target_base + 2 * self.target_syncs
        host = self._snapshot.cpu().numpy()  # unlocked: the learner steps on while this downloads
        for row, name in zip(host, ("params", "adam_m", "adam_v", "target")):
            getattr(state, name)[:] = row
        state.restore_counts(updates=state.updates, target_version=target_version)
        if weights is not None:
            weights.publish(state.params)
        self._host_version = version
        self.host_writes += 1
        return True

    def report(self) -> dict[str, Any]:
        return {
            "device": str(self.device),
            "versions": self.version,
            "target_syncs": self.target_syncs,
            "device_copies": self.device_copies,
            "host_writes": self.host_writes,
        }


class DeviceLearner:
    """One learner on ``dstate``'s device: its online network *is* θ (parameters bound to the flat
    vector), its target network the flat target; gradients land in one flat buffer (the ``.grad`` of
    each parameter is a view into it), so Adam runs on three flat tensors there.

    ``state`` (the host's) gives the update numbers (`TrainingState.claim_update`: the run's update
    count and pacing stay the host's) and, with ``publish_host``, ``weights`` gets θ once per version
    for workers that read it."""

    def __init__(
        self,
        settings: LearnerSettings,
        dstate: DeviceTrainingState,
        segments: Segments,
        seed: int | None = None,
        *,
        publish_host: bool = False,
    ) -> None:
        import torch

        #: the algorithm (``settings`` name it, the world's shapes; ``dstate``'s device, not theirs, is where it runs)
        self.algo = algorithm_of(settings.cfg, settings.obs_shape, settings.action_space)
        self.cfg, self.dstate = self.algo.cfg, dstate
        self.state, self.weights, self.replay = segments
        self.rule = self.algo.update_rule()  # how a gradient is applied (`nonstop.learning.optim`)
        self.publish_host = publish_host
        self.online = self.algo.build_model().to(dstate.device).train()
        self.target = self.algo.build_model().to(dstate.device).eval()
        bind_parameters(self.online, dstate.theta)
        bind_parameters(self.target, dstate.target)
        self._grad = torch.zeros_like(dstate.theta)
        offset = 0
        for p in self.online.parameters():
            p.grad = self._grad[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self._grad_ptrs = [p.grad.data_ptr() for p in self.online.parameters() if p.grad is not None]
        self.rng = np.random.default_rng(seed)
        self.updates = 0
        self._loss: Any = None
        self.stream = dstate.ops.stream()  # off the server's stream (CUDA); its steps reach readers by event

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        """The learner's thread: its device set, its work on its own stream."""
        self.dstate.ops.set_device()
        with self.dstate.ops.use_stream(self.stream):
            yield

    @property
    def ready(self) -> bool:
        return ready_to_learn(self.replay, self.cfg)

    @property
    def ahead(self) -> bool:
        return updates_ahead(self.state, self.replay, self.cfg)

    def gradient(self) -> "torch.Tensor | None":
        """Back-propagate one fresh batch at the current θ into the flat gradient buffer; returns the
        loss (on the device; ``None``: no batch yet)."""
        batch = self.algo.sample(self.replay, self.cfg.batch_size, self.rng)
        if batch is None:
            return None
        return self.algo.backward(self.online, self.target, batch)

    def _flat_grad(self) -> "torch.Tensor":
        import torch

        params = list(self.online.parameters())
        if [p.grad.data_ptr() if p.grad is not None else 0 for p in params] != self._grad_ptrs:
            # autograd replaced a view (it may, where layouts differ): gather into the buffer, on the device
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            self._grad.copy_(
                torch.cat([g.reshape(-1) for g in grads])
            )  # a new tensor first: some inputs view the buffer
            offset = 0
            for p in params:
                p.grad = self._grad[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
        return self._grad

    def apply(self, loss: "torch.Tensor") -> int:
        """Adam on θ with the gradient `gradient` left, the target sync at the host's cadence, a new
        version; returns the update's number."""
        d = self.dstate
        with d.lock:
            step = self.state.claim_update()
            d.handoff.before_write()  # every reader done with the last version
            adam_step(d.theta, d.adam_m, d.adam_v, self._flat_grad(), step, self.rule)
            if self.rule.syncs_target(step):
                step_target(d.target, d.theta, self.rule.target_polyak)  # as the host's `write_target`
                d.target_syncs += 1
            d.handoff.after_write()
            d.version += 1
        self.updates += 1
        self._loss = loss
        if self.updates % LOSS_EVERY == 1:
            self.state.loss = float(loss)  # a device sync, once in LOSS_EVERY updates
        if self.publish_host:
            d.to_host(self.state, self.weights)  # thread or process workers read the host's copy: once a version
        return step

    def close(self) -> None:
        """The end of the run: the last loss and the newest version reach the host (if it is still there)."""
        if self.state.closed:
            return
        if self._loss is not None:
            self.state.loss = float(self._loss)
        self.dstate.to_host(self.state, self.weights)


class DeviceLearners:
    """One `DeviceLearner` driven on the run's clock: a timed process of a `VirtualClock` (each update
    takes ``tau_l``; 0: one a tick), or a thread of this process on the wall clock. An update that
    raises is the learner's death: it goes on from the device state it left while ``budget`` allows,
    else ``failure`` is set and the run must end."""

    def __init__(
        self,
        learner: DeviceLearner,
        clock: Clock,
        tau_m: float,
        *,
        tau_l: float,
        mode: str = "round_robin",
        restart_budget: RestartBudget | None = None,
        say: Callable[[str], None] = tell,
    ) -> None:
        if not (tau_l >= 0 and np.isfinite(tau_l)):
            raise ValueError(f"tau_l must be a finite number of seconds >= 0, got {tau_l!r}")
        self.learner, self.clock, self.tau_m, self.mode = learner, clock, tau_m, mode
        self.period = tau_l if tau_l > 0 else tau_m
        self.budget = restart_budget if restart_budget is not None else RestartBudget()
        self.restarts = [0]
        self.events: list[tuple[float, int, str]] = []
        self.failure: PartFailed | None = None
        #: every death of the learner, each said at once on stderr (``say``)
        self.deaths: list[Death] = []
        self._say = say
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._killed = False

    local_processes: Final = 0  # a thread or a timed process of the run's own process

    def start(self) -> "DeviceLearners":
        if not self.clock.waits_block:  # a timed process the clock's simulation drives
            self.clock.spawn(self._timed(), name="device-learner", priority=3)
        else:
            self._thread = threading.Thread(target=self._threaded, name="nonstop-device-learner", daemon=True)
            self._thread.start()
        return self

    def kill(self, i: int = 0) -> None:
        """Make the learner's next update fail as a crash would (tests and drills)."""
        if i != 0:
            raise ValueError(f"no learner {i}; a device learner is learner 0")
        self._killed = True

    def _update(self) -> bool:
        """One update if the replay allows it; whether one was applied. A death is counted here."""
        learner = self.learner
        try:
            if self._killed:
                self._killed = False
                raise RuntimeError("learner 0 killed")
            if not learner.ready or learner.ahead:
                return False
            loss = learner.gradient()
            if loss is None:
                return False
            learner.apply(loss)
            return True
        except Exception as exc:  # a learner's error is its death, restarted under the budget
            self._died(exc)
            return False

    def _timed(self) -> TimedProcess:
        # the same cadence as VirtualLearners: the gradient at t, applied one period later
        t = self.clock.now()
        yield t
        learner = self.learner
        while not self._stop.is_set():
            loss = None
            try:
                if self._killed:
                    self._killed = False
                    raise RuntimeError("learner 0 killed")
                loss = learner.gradient() if learner.ready and not learner.ahead else None
            except Exception as exc:  # a death, restarted under the budget
                self._died(exc)
            t += self.period
            yield t
            if loss is not None and not self._stop.is_set():
                try:
                    learner.apply(loss)
                except Exception as exc:
                    self._died(exc)

    def _died(self, exc: BaseException) -> None:
        """The learner died: it goes on while the budget allows (from the device state it left), else the run ends."""
        why = "".join(traceback.format_exception_only(exc)).strip()
        now = self.clock.now()
        self.events.append((now, 0, f"died ({why})"))
        why_not = ""
        if self.budget.spend(now):
            self.restarts[0] += 1
            self.events.append((now, 0, "restarted"))
        else:
            spent = f"{self.restarts[0] + 1} deaths, more than {self.budget.describe()}"
            self.failure = PartFailed(f"learner 0 kept dying: {spent} (last: {why})")
            why_not = f"{spent}: the run stops"
            self._stop.set()
        death = Death.under(self.budget, "device learner 0", in_this_process(), why, why_not=why_not, now=now)
        self.deaths.append(death)
        self._say(death.line())

    def _threaded(self) -> None:
        replay = self.learner.replay
        with self.learner.on_stream():
            while not self._stop.is_set():
                seen = replay.transitions_written  # before the checks: a transition after them ends the wait
                if not self._update():  # too few transitions, at the cap, no batch: the next transition wakes it
                    replay.wait_for_transitions(seen, IDLE_WAIT)

    def stop(self) -> None:
        """Stop updating (the thread is joined); the newest version and the last loss reach the host."""
        self._stop.set()
        if self._thread is not None:
            self.learner.replay.wake_waiters()  # the thread waiting for transitions sees the stop now
            self._thread.join(timeout=30)
        self.learner.close()

    def report(self) -> dict[str, Any]:
        return {
            "n_learners": 1,
            "mode": self.mode,
            "backend": "device",
            "updates": self.learner.updates,
            "restarts": list(self.restarts),
            "events": [(round(t, 6), i, what) for t, i, what in self.events],
            **self.learner.dstate.report(),
        }
