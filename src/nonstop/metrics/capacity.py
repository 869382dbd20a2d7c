"""The capacity a model needs at a tick rate: N_I*, N_L*, cores, memory and traffic (what nonstop plan answers).

From a model's forward time τ_θ and update time τ_L (timed here for the paper's ResNet at
width ``--k``, or declared with ``--latency``/``--forward-ms``/``--update-ms`` for other
hardware), a tick rate and a batch size, it computes with the paper's formulas:

* ``N_I* = ⌈τ_θ/τ_M⌉`` inference workers (Algorithms 1–2: staggered, they act at every tick);
* ``N_L* = ⌈(τ_L/B)/τ_M⌉`` learners (each update learns from B transitions in τ_L; the world
  makes one transition per tick);
* cores: one per worker and learner (one torch thread each) plus one for the host and env;
* memory of N_I inference workers, each with its own copy of θ and with one shared copy per host
  (``|θ|`` × 4 bytes once, plus each worker's activations and process base);
* network traffic per second when the workers run on other nodes: observations out and actions
  back (one each per action, one action per tick at N_I*), and weight broadcasts (one version per
  ``--weights-every`` updates, fetched once per node).

``--k``'s parameters, FLOPs and memory are counted without building the model
(`nonstop.policies.models.count_parameters`, `count_flops`); on a CPU core its times come from a
short sample of a model no wider than `SAMPLE_K`, scaled by FLOPs (`measure_times`), so any k is
planned in seconds and ~0.6 GB, and Ctrl-C or SIGTERM ends it at once.

>>> p = plan(forward_s=0.1, update_s=0.4, tick_hz=60, batch_size=16, obs_bytes=7056,
...          deployment=Deployment(n_params=1_000_000))
>>> p["n_inference_star"], p["n_learners_star"], p["cores"]
(6, 2, 9)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "time_forward",
    "PROCESS_BASE_BYTES",
    "ACTION_BYTES",
    "plan",
    "Deployment",
    "SAMPLE_K",
    "CALL_BUDGET_S",
    "Timing",
    "measure_times",
]


#: Resident memory of a worker process before its model (Python, torch, numpy), declared default.
PROCESS_BASE_BYTES: Final = 300 * 2**20


#: Bytes of one action on the wire (an int64 action, its obs tick and worker).
ACTION_BYTES: Final = 24


_EPS = 1e-9


def positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Deployment:
    """How the model is laid out over the machines, for `plan`'s memory and weight traffic.

    ``n_params`` is |θ| (None: memory and weight traffic unknown); each worker holds
    ``activation_bytes`` + ``process_base_bytes`` beside θ; the inference workers spread over
    ``nodes`` (weights reach each node once per broadcast), and the weights go out once per
    ``weights_every`` updates.

    >>> Deployment(nodes=0)
    Traceback (most recent call last):
    ...
    ValueError: nodes must be a positive integer, got 0
    """

    n_params: int | None = None
    activation_bytes: int = 0
    process_base_bytes: int = PROCESS_BASE_BYTES
    nodes: int = 1
    weights_every: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"nodes must be a positive integer, got {self.nodes!r}")
        every = self.weights_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"weights_every must be a positive integer of updates, got {every!r}")


def plan(
    *,
    forward_s: float,
    tick_hz: float,
    batch_size: int = 16,
    update_s: float | None = None,
    obs_bytes: int = 84 * 84,
    deployment: Deployment = Deployment(),
) -> dict[str, Any]:
    """The plan as a dict (all sizes in bytes, rates per second of the world); pure arithmetic.

    ``update_s`` is one learner update of ``batch_size`` transitions (None: N_L* unknown);
    ``deployment`` says how θ is laid out (`Deployment`; default: |θ| unknown, one node).
    """
    tau_theta = positive_number("forward time", forward_s)
    hz = positive_number("tick rate (--hz)", tick_hz)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")
    tau_m = 1.0 / hz
    n_i = max(1, math.ceil(tau_theta / tau_m - _EPS))
    n_l = None
    tau_l_per_transition = None
    if update_s is not None:
        tau_l = positive_number("update time", update_s)
        tau_l_per_transition = tau_l / batch_size
        n_l = max(1, math.ceil(tau_l_per_transition / tau_m - _EPS))
    actions_per_s = hz  # at N_I* the agent acts at every tick
    result: dict[str, Any] = {
        "tick_hz": hz,
        "tau_m_s": tau_m,
        "tau_theta_s": tau_theta,
        "tau_theta_ticks": tau_theta / tau_m,
        "tau_l_update_s": update_s,
        "tau_l_per_transition_s": tau_l_per_transition,
        "batch_size": batch_size,
        "n_inference_star": n_i,
        "n_learners_star": n_l,
        "cores": n_i + (n_l or 0) + 1,  # + the host and its env
        "n_params": deployment.n_params,
        "traffic_bytes_per_s": {
            "observations": actions_per_s * obs_bytes,
            "actions": actions_per_s * ACTION_BYTES,
        },
    }
    if deployment.n_params is not None:
        theta = 4 * int(deployment.n_params)  # float32
        per_worker = deployment.activation_bytes + deployment.process_base_bytes
        nodes = deployment.nodes
        result["memory_bytes"] = {
            "theta": theta,
            "inference_separate_copies": n_i * (theta + per_worker),
            "inference_shared_weights": theta * nodes + n_i * per_worker,
        }
        if n_l is not None:
            # weights reach the workers once per `weights_every` updates; learners learning from every
            # transition make hz/B updates per second
            versions_per_s = hz / batch_size / deployment.weights_every
            result["weight_versions_per_s"] = versions_per_s
            result["traffic_bytes_per_s"]["weights"] = versions_per_s * theta * nodes
    return result


#: The widest ResNet timed on a CPU core. k = 7's forward pass takes ~63 ms there (BENCHMARKS.md),
#: so each timed call is short (Ctrl-C and SIGTERM are served between torch calls, never during one),
#: building it takes 47 MB, and its convs are wide enough to run at the core's steady FLOP rate
#: (k = 1's 16 channels reach a quarter of it), so wider models' times extrapolate by FLOPs.
SAMPLE_K: Final = 7


#: The longest one timed torch call may take: a signal waits for the op in the main thread to end.
CALL_BUDGET_S: Final = 0.25


@dataclass(frozen=True)
class Timing:
    """What `measure_times` found: the asked model's forward (batch 1) and update (batch B) times,
    and the sample they came from (``extrapolated``: a narrower model or a smaller batch, scaled by
    FLOPs and parameters)."""

    forward_s: float
    update_s: float
    sample_k: float
    sample_batch: int
    extrapolated: bool
    where: str

    def describe(self, k: float, batch_size: int) -> str:
        if not self.extrapolated:
            return f"measured on this machine ({self.where})"
        sample = f"k={self.sample_k:g}" + (
            f", update at batch {self.sample_batch}" if self.sample_batch != batch_size else ""
        )
        return f"extrapolated by FLOPs to k={k:g}, batch {batch_size} from {sample} measured on this machine ({self.where})"


def measure_times(
    k: float,
    batch_size: int,
    *,
    device: str = "cpu",
    n_actions: int = 18,
    repeats: int = 5,
    sample_k: float = SAMPLE_K,
    call_budget_s: float = CALL_BUDGET_S,
    dtype: Any = None,
) -> Timing:
    """Forward time (batch 1) and update time (batch ``batch_size``: forward, backward, Adam step)
    of the width-``k`` ResNet on one core of this machine (``device="cpu"``) or on its GPU (``"cuda"``:
    each pass timed to its end with ``torch.cuda.synchronize``).

    On a CPU core a model wider than ``sample_k`` is never built: the ``sample_k`` model is timed and
    its times scaled by `count_flops` (forward and backward) and `count_parameters` (Adam's step), so
    k = 98 (1B parameters, 4 GB, ~10 s a forward pass) is planned in seconds and ~0.5 GB. The update is
    timed at the largest batch whose forward and backward fit in ``call_budget_s`` and scaled to
    ``batch_size`` by FLOPs too. On a GPU the asked model is timed as it is (small models there are
    bound by kernel launches, not FLOPs, so their times do not scale).
    ``dtype`` (a torch dtype; None: fp32) times the forward pass under autocast to it.
    """
    import numpy as np
    import torch

    from nonstop.policies.models import count_flops, count_parameters, impala_resnet
    from nonstop.realtime.clock import WallClock

    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--device cuda: CUDA is not available on this machine (use --device cpu, or --forward-ms/--update-ms "
            "measured on the GPU machine)"
        )
    clock = WallClock(spin=0.0)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    k_s = k if device == "cuda" else min(k, sample_k)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = impala_resnet(k_s, n_actions, device=device)  # a model that cannot fit fails here, naming the budget
        forward = _median_forward_s(model, device, dtype, repeats, clock.now, sync)
        # a forward and backward pass costs about three forward passes' FLOPs per transition
        b_s = batch_size if device == "cuda" else max(1, min(batch_size, int(call_budget_s / (3 * forward))))
        passes, steps = _update_times(model, b_s, device, max(2, repeats // 2), clock.now, sync)
    finally:
        torch.set_num_threads(threads)
    flops = count_flops(k, n_actions) / count_flops(k_s, n_actions)
    params = count_parameters(k, n_actions) / count_parameters(k_s, n_actions)
    return Timing(
        forward_s=forward * flops,
        update_s=float(np.median(passes)) * batch_size / b_s * flops + float(np.median(steps)) * params,
        sample_k=k_s,
        sample_batch=b_s,
        extrapolated=(k_s != k or b_s != batch_size),
        where="one core" if device == "cpu" else _gpu_name(),
    )


def _median_forward_s(
    model: Any, device: str, dtype: Any, repeats: int, now: Callable[[], float], sync: Callable[[], Any]
) -> float:
    """The median of ``repeats`` timed batch-1 forward passes, after warming (allocations, cuDNN's choice)."""
    import numpy as np
    import torch

    from nonstop.policies.placement import autocast

    x1 = torch.zeros(1, 1, 84, 84, device=device)
    forwards: list[float] = []
    with torch.inference_mode(), autocast(torch.device(device), dtype or torch.float32):
        for _ in range(2 if device == "cuda" else 1):  # warm: allocations, cuDNN's algorithm choice
            model(x1)
        sync()
        for _ in range(repeats):
            t0 = now()
            model(x1)
            sync()
            forwards.append(now() - t0)
    return float(np.median(forwards))


def _update_times(
    model: Any, batch: int, device: str, timed: int, now: Callable[[], float], sync: Callable[[], Any]
) -> tuple[list[float], list[float]]:
    """``timed`` updates of ``batch`` transitions: each forward and backward pass, and each Adam step."""
    import torch

    xb = torch.zeros(batch, 1, 84, 84, device=device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    passes, steps = [], []
    for i in range(timed + 1):
        t0 = now()
        opt.zero_grad()
        model(xb).max(1).values.mean().backward()
        sync()
        t1 = now()
        opt.step()
        sync()
        if i:  # the first update allocates the gradients and Adam's moments: not timed
            passes.append(t1 - t0)
            steps.append(now() - t1)
    return passes, steps


def _gpu_name() -> str:
    import torch

    return f"GPU: {torch.cuda.get_device_name(0)}"


def time_forward(model: Any, x: Any, device: Any, warmup: int, repeats: int, max_seconds: float) -> list[float]:
    """Seconds of each of up to ``repeats`` forward passes of ``model`` on ``x`` (after ``warmup``), each
    timed to its end on the device; stops early past ``max_seconds`` once 3 are in."""
    import torch

    from nonstop.realtime.clock import WallClock

    clock = WallClock(spin=0.0)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        for _ in range(warmup):
            model(x)
        sync()
        samples: list[float] = []
        started = clock.now()
        for _ in range(repeats):
            t0 = clock.now()
            model(x)
            sync()
            samples.append(clock.now() - t0)
            if len(samples) >= 3 and clock.now() - started > max_seconds:
                break
    return samples
