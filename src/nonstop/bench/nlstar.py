"""``nonstop bench nlstar``: how many learners keep up with a 60 Hz world (the paper's Figure 8).

For each model width ``k`` and batch size ``B``:

* ``tau_l_update_s``: the median time of one DQN update (gradient of ``B`` transitions of 84×84×1
  frames, then the Adam step), measured in one learner process with one torch thread;
* ``tau_l_per_transition_s = tau_l_update_s / B`` and the theory ``N_L* = ⌈(τ_L/B)/τ_M⌉``:
  learners needed to learn from every transition as the world produces them (60 per second);
* the **measured** ``N_L*``: real `LearnerProcesses` (round-robin) on a full replay, N_L = 1, 2, …
  up to the machine's cores, each run for ``--window`` seconds; the first N_L whose aggregate
  throughput (updates/s × B) reaches 60 transitions/s. With the default process backend, past the
  core count a measurement would only show the cores running out, so larger N_L* are reported as
  theory only; ``--backend ray`` measures past this machine's cores (Figure 8's large models):
  the learners are Ray actors (`RayLearners`, round-robin) on the cluster at ``--ray-address``, or,
  without one, on a local ``ray.cluster_utils.Cluster`` of ``--nodes`` nodes on 127.0.0.1 (no
  dashboard), up to ``--max-learners``;
* the throughput scaling from N_L = 1 to 2 (target: near-linear on 2 cores);
* the replay's own rates on 84×84 frames: transitions inserted per second (a frame copy and a
  transition row, as the host's recorder does each tick) and transitions sampled per second in
  batches of 32, against the 60 per second one realtime session produces.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nonstop.bench.common import usable_cores

__all__ = ["DESCRIPTION", "add_arguments", "run", "render"]

DESCRIPTION = "N_L*: learners needed to learn from every transition at 60 Hz, by model size and batch (Figure 8)"
TICK_HZ = 60.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", default="1,2", help="IMPALA widths, comma-separated (default 1,2)")
    p.add_argument("--batch", default="16,32", help="batch sizes, comma-separated (default 16,32)")
    p.add_argument("--window", type=float, default=8.0, help="seconds each N_L is measured for")
    p.add_argument(
        "--declared-tau-l",
        default=None,
        metavar="TICKS,TICKS",
        help="instead of timing updates: the virtual clock with this declared τ_L per update (ticks), N_L* "
        "measured by whole training runs at each N_L, for each --batch",
    )
    p.add_argument(
        "--backend",
        choices=("process", "ray"),
        default="process",
        help="process: learner processes on this machine, up to its cores (default); ray: Ray actors, "
        "past the local cores (a local 127.0.0.1 cluster without --ray-address)",
    )
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT", help="Ray cluster for --backend ray")
    p.add_argument(
        "--nodes", type=int, default=2, help="nodes of the local Ray cluster without --ray-address (default 2)"
    )
    p.add_argument(
        "--max-learners",
        type=int,
        default=None,
        help="largest N_L measured (default: this machine's cores; with --backend ray 2x them)",
    )
    p.add_argument(
        "--plot",
        default="runs/nlstar.png",
        help="where to write the Figure 8 plot (default runs/nlstar.png, beside bench nstar's; '' for none)",
    )
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(p, what="each learner's update", dtype=False)


def _numbers(text: str, kind: type, name: str) -> list[Any]:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"{name} must be positive numbers, got {text!r}")
    return values


def _parts(k: float, batch: int, capacity: int = 2048) -> tuple[Any, ...]:
    import torch

    from nonstop.learning.dqn import DQNConfig, build_q_network, init_training
    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.weights import SharedWeights, TrainingState

    cfg = DQNConfig.for_family(
        "atari", k=k, batch_size=batch, learning_starts=0, replay_capacity=capacity, updates_per_transition=0
    )  # throughput: learners never pause
    torch.manual_seed(0)
    model = build_q_network((84, 84), 18, cfg)
    n = sum(p.numel() for p in model.parameters())
    state, weights = TrainingState.create(n), SharedWeights.create(n)
    init_training(model, state, weights)
    replay = ReplayBuffer.create(capacity=capacity, obs_shape=(84, 84), dtype=np.uint8)
    rng = np.random.default_rng(0)
    prev = replay.add_frame(rng.integers(0, 256, (84, 84), np.uint8))
    for _ in range(capacity):
        f = replay.add_frame(rng.integers(0, 256, (84, 84), np.uint8))
        replay.add_transition(prev, int(rng.integers(18)), float(rng.normal()), 0.99, 1, f)
        prev = f
    return cfg, model, n, state, weights, replay


def _update_time(k: float, batch: int, repeats: int, device: str = "cpu") -> tuple[float, int]:
    """Median seconds of one update in this process (one torch thread), and the parameter count."""
    import torch

    from nonstop.learning.learners import Learner, LearnerSettings, Segments, apply

    torch.set_num_threads(1)
    cfg, _, n, state, weights, replay = _parts(k, batch)
    try:
        learner = Learner(
            0, LearnerSettings((84, 84), 18, cfg, device=device), Segments(state, weights, replay), seed=0
        )
        times = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            out = learner.gradient()
            if out is None:
                raise RuntimeError("the bench's replay holds too few transitions for one batch")
            apply(state, weights, out[0], out[1], cfg)
            times.append(time.perf_counter() - t0)
        return float(np.median(times[1:])), n
    finally:
        for seg in (state, weights, replay):
            seg.unlink()


def _throughput(k: float, batch: int, n_learners: int, window: float, device: str = "cpu") -> float:
    """Transitions learned per second by ``n_learners`` round-robin learner processes."""
    from nonstop.learning.learners import LearnerProcesses, LearnerSettings, Segments

    cfg, _, _, state, weights, replay = _parts(k, batch)
    group = None
    try:
        settings = LearnerSettings((84, 84), 18, cfg, n_learners=n_learners, seed=0, device=device)
        group = LearnerProcesses(settings, Segments(state, weights, replay)).start()
        return _learned_per_s(state, n_learners, batch, window)
    finally:
        if group is not None:
            group.stop()
        for seg in (state, weights, replay):
            seg.unlink()


def _throughput_ray(k: float, batch: int, n_learners: int, window: float, device: str = "cpu") -> float:
    """Transitions learned per second by ``n_learners`` round-robin Ray learner actors (Ray connected)."""
    from nonstop.distributed.ray_backend import WeightBroadcast
    from nonstop.distributed.ray_learners import RayLearners
    from nonstop.learning.learners import LearnerSettings, Segments

    cfg, _, _, state, weights, replay = _parts(k, batch)
    group = None
    try:
        group = RayLearners(
            LearnerSettings((84, 84), 18, cfg, n_learners=n_learners, seed=0),
            Segments(state, weights, replay),
            broadcast=WeightBroadcast(weights),
            start_timeout=300.0,
        ).start()
        return _learned_per_s(state, n_learners, batch, window, failure=lambda: group.failure)
    finally:
        if group is not None:
            group.stop()
        for seg in (state, weights, replay):
            seg.unlink()


def _learned_per_s(
    state: Any, n_learners: int, batch: int, window: float, failure: Callable[[], BaseException | None] = lambda: None
) -> float:
    """Transitions learned per second over ``window``, once every learner is up and learning (two
    updates each, or two minutes); a learner group's failure is raised, not measured as slowness."""
    deadline = time.monotonic() + 120
    while state.updates < 2 * n_learners and time.monotonic() < deadline and failure() is None:
        time.sleep(0.05)
    if failure() is not None:
        raise RuntimeError(str(failure()))
    u0, t0 = state.updates, time.monotonic()
    time.sleep(window)
    return (state.updates - u0) * batch / (time.monotonic() - t0)


def _ray_cluster(address: str | None, nodes: int, learners: int) -> Any:
    """A connected Ray for the Ray learners: the cluster at ``address``, or a local one of ``nodes``
    nodes on 127.0.0.1 with room for ``learners`` one-CPU actors (logical CPUs: past the cores)."""
    from nonstop.distributed.ray_backend import local_cluster, ray_session

    if address not in (None, "local"):
        return ray_session(address)
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"--nodes must be an integer >= 1, got {nodes!r}")
    return local_cluster(nodes, num_cpus=math.ceil(learners / nodes))


def replay_rates(n: int = 20_000, batch: int = 32) -> dict[str, float]:
    """Insert and sample rates of a `ReplayBuffer` of 84×84 uint8 frames, in transitions per second."""
    from nonstop.learning.replay import ReplayBuffer

    rb = ReplayBuffer.create(capacity=n, obs_shape=(84, 84), dtype=np.uint8)
    try:
        frame = np.random.default_rng(0).integers(0, 256, (84, 84), np.uint8)
        prev = rb.add_frame(frame)
        t0 = time.perf_counter()
        for i in range(n):
            f = rb.add_frame(frame)
            rb.add_transition(prev, i % 18, 1.0, 0.99, 1, f)
            prev = f
        insert = n / (time.perf_counter() - t0)
        rng = np.random.default_rng(1)
        rounds = max(1, n // batch // 4)
        t0 = time.perf_counter()
        for _ in range(rounds):
            rb.sample(batch, rng)
        sample = rounds * batch / (time.perf_counter() - t0)
    finally:
        rb.unlink()
    return {"replay_insert_per_s": insert, "replay_sample_per_s": sample}


#: world seconds of each virtual-clock trial of `virtual_nlstar`, and the learned share that counts as every transition
VIRTUAL_SECONDS = 20.0
VIRTUAL_SHARE = 0.98


def learned_share(
    tau_l_ticks: float, batch: int, n_learners: int, *, seconds: float = VIRTUAL_SECONDS, seed: int = 0
) -> dict[str, Any]:
    """One measured trial on the virtual clock: a whole training run (`nonstop.experiment.train`) on
    ``theory/delay-cycle`` at 60 Hz, one worker acting every tick, ``n_learners`` learners each taking
    the declared ``tau_l_ticks`` per update of ``batch`` transitions, no cap on updates per transition.
    The share learned from is updates × B over the transitions made after ``learning_starts``: what
    the run did, through its replay, learner group and clock, not N·B/τ_L computed."""
    from nonstop.experiment import TrainConfig, train
    from nonstop.learning.dqn import DQNConfig

    starts = 10
    cfg = TrainConfig(
        env="theory/delay-cycle",
        env_kwargs={"n": 8, "p_minimax": 0.97},
        seconds=seconds,
        latency="1t",
        scheduler="exp_time",
        n_learners=n_learners,
        tau_l=tau_l_ticks / TICK_HZ,
        seed=seed,
        algo_settings=DQNConfig(
            batch_size=batch, updates_per_transition=0, learning_starts=starts, hidden=(16,), replay_capacity=5000
        ),
    )
    out = train(cfg)
    made = max(1, int(out["transitions"]) - starts)
    return {
        "updates": int(out["updates"]),
        "transitions": int(out["transitions"]),
        "share": int(out["updates"]) * batch / made,
    }


def virtual_nlstar(
    tau_l_ticks: float, batch: int, *, seconds: float = VIRTUAL_SECONDS, seed: int = 0
) -> dict[str, Any]:
    """N_L* measured on the virtual clock for a declared τ_L (ticks per update of ``batch``): the fewest
    learners whose run learns from every transition (share ≥ `VIRTUAL_SHARE`), found by `find_nstar`
    from the formula, beside the formula ⌈τ_L/(B·τ_M)⌉ and every trial's share."""
    from nonstop.metrics.nstar import find_nstar, theoretical_nlstar

    theory = theoretical_nlstar(tau_l_ticks / TICK_HZ, batch, 1 / TICK_HZ)
    nstar, trials = find_nstar(
        lambda n: learned_share(tau_l_ticks, batch, n, seconds=seconds, seed=seed),
        guess=theory,
        passes=lambda t: t["share"] >= VIRTUAL_SHARE,
        limit=64,
    )
    return {
        "tau_l_ticks": tau_l_ticks,
        "batch": batch,
        "nlstar_theory": theory,
        "nlstar_measured": nstar,
        "shares": {str(n): round(t["share"], 4) for n, t in sorted(trials.items())},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    declared = getattr(args, "declared_tau_l", None)
    if declared:  # the virtual clock, a declared τ_L per update: N_L* measured by whole runs
        taus = _numbers(declared, float, "--declared-tau-l")
        batches = _numbers(args.batch, int, "--batch")
        rows = [virtual_nlstar(t, b, seconds=10.0 if args.quick else VIRTUAL_SECONDS) for t in taus for b in batches]
        return {
            "clock": "virtual",
            "tick_hz": TICK_HZ,
            "rows": rows,
            "all_match_theory": all(r["nlstar_measured"] == r["nlstar_theory"] for r in rows),
        }
    ks = _numbers(args.k, float, "--k")
    batches = _numbers(args.batch, int, "--batch")
    if not args.window > 0:
        raise ValueError(f"--window must be positive seconds, got {args.window}")
    window = min(args.window, 3.0) if args.quick else args.window
    if args.quick:
        ks, batches = ks[:1], batches[:1]
    from nonstop.inference.device import resolve_device

    device = str(resolve_device(getattr(args, "device", "cpu")))  # CUDA asked where torch finds none: one line
    cores = usable_cores()
    backend = getattr(args, "backend", "process")
    if backend == "ray" and device != "cpu":
        raise ValueError(
            f"--device {device} with --backend ray: Ray learners update on their nodes' CPUs; use --backend process"
        )
    max_learners = getattr(args, "max_learners", None)
    if max_learners is None:
        max_learners = cores if backend == "process" else 2 * cores
    if not isinstance(max_learners, int) or max_learners < 1:
        raise ValueError(f"--max-learners must be an integer >= 1, got {max_learners!r}")
    if backend == "process" and max_learners > cores:
        raise ValueError(f"--max-learners {max_learners} is past this machine's {cores} cores: use --backend ray")
    tau_m = 1 / TICK_HZ
    rows = []
    with (
        _ray_cluster(getattr(args, "ray_address", None), getattr(args, "nodes", 2), max_learners)
        if backend == "ray"
        else contextlib.nullcontext()
    ):
        for k in ks:
            for batch in batches:
                rows.append(
                    _row(k, batch, window, max_learners, backend, quick=bool(args.quick), tau_m=tau_m, device=device)
                )
    rates = replay_rates(5_000 if args.quick else 50_000)
    result = {
        "tick_hz": TICK_HZ,
        "device": device,
        "cores": cores,
        "backend": backend,
        "max_learners": max_learners,
        "window_s": window,
        "load_average": os.getloadavg()[0],
        "rows": rows,
        **rates,
        "replay_rates_over_one_session": {k: v / TICK_HZ for k, v in rates.items()},
    }
    if args.plot:
        result["plot"] = str(_plot(rows, Path(args.plot)))
    return result


def _row(
    k: float,
    batch: int,
    window: float,
    max_learners: int,
    backend: str,
    *,
    quick: bool,
    tau_m: float,
    device: str = "cpu",
) -> dict[str, Any]:
    """One (k, B): the update time, N_L* in theory, and the measured N_L* (throughput per N_L up to ``max_learners``)."""
    tau_update, n_params = _update_time(k, batch, repeats=3 if quick else 10, device=device)
    per_transition = tau_update / batch
    theory = max(1, math.ceil(per_transition / tau_m))
    throughputs: dict[int, float] = {}
    measured = None
    measure = _throughput_ray if backend == "ray" else _throughput
    window = max(window, 4 * tau_update)  # several updates per learner, or the count is quantised to 0 or 1
    for n_l in range(1, max_learners + 1):
        throughputs[n_l] = measure(k, batch, n_l, window, device)
        if throughputs[n_l] >= TICK_HZ and measured is None:
            measured = n_l
        if measured is not None and n_l >= 2:
            break
    return {
        "k": k,
        "batch": batch,
        "params": n_params,
        "tau_l_update_s": tau_update,
        "tau_l_per_transition_s": per_transition,
        "tau_l_over_tau_m": per_transition / tau_m,
        "nlstar_theory": theory,
        "nlstar_measured": measured,
        "window_s": window,
        "measured_beyond_cores": measured is None,  # past the N_L measured (the cores, or --max-learners)
        "throughput_transitions_per_s": {str(n): round(v, 1) for n, v in throughputs.items()},
        "scaling_1_to_2": throughputs[2] / throughputs[1] if 2 in throughputs and throughputs[1] > 0 else None,
    }


def _plot(rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    for batch in sorted({r["batch"] for r in rows}):
        sel = [r for r in rows if r["batch"] == batch]
        x = [r["tau_l_over_tau_m"] for r in sel]
        ax.plot(x, [r["nlstar_theory"] for r in sel], "o--", label=f"theory, B={batch}")
        meas = [(xi, r["nlstar_measured"]) for xi, r in zip(x, sel) if r["nlstar_measured"] is not None]
        if meas:
            ax.plot(*zip(*meas), "s", markersize=9, fillstyle="none", label=f"measured, B={batch}")
    ax.set_xlabel("τ_L per transition / τ_M")
    ax.set_ylabel("N_L*")
    ax.set_title("Learners to learn from every transition at 60 Hz")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    if result.get("clock") == "virtual":
        table = Table(title="N_L* on the virtual clock, declared τ_L (whole training runs per N_L)")
        for col in ("τ_L/update (ticks)", "B", "N_L* theory", "N_L* measured", "share learned per N_L"):
            table.add_column(col)
        for r in result["rows"]:
            table.add_row(
                f"{r['tau_l_ticks']:g}",
                str(r["batch"]),
                str(r["nlstar_theory"]),
                str(r["nlstar_measured"]),
                ", ".join(f"{n}: {v:.2f}" for n, v in r["shares"].items()),
            )
        Console().print(table)
        return

    table = Table(
        title=f"N_L* at {result['tick_hz']:g} Hz ({result['cores']} cores, load {result['load_average']:.1f})"
    )
    for col in (
        "k",
        "B",
        "params",
        "τ_L/update",
        "τ_L/transition ÷ τ_M",
        "N_L* theory",
        "N_L* measured",
        "scaling 1→2",
    ):
        table.add_column(col)
    for r in result["rows"]:
        measured = (
            str(r["nlstar_measured"])
            if r["nlstar_measured"] is not None
            else f"> {result.get('max_learners', result['cores'])}"
        )
        scaling = f"{r['scaling_1_to_2']:.2f}x" if r["scaling_1_to_2"] else "—"
        table.add_row(
            f"{r['k']:g}",
            str(r["batch"]),
            f"{r['params']:,}",
            f"{r['tau_l_update_s'] * 1e3:.1f} ms",
            f"{r['tau_l_over_tau_m']:.3f}",
            str(r["nlstar_theory"]),
            measured,
            scaling,
        )
    Console().print(table)
    print(
        f"replay: {result['replay_insert_per_s']:,.0f} inserts/s, {result['replay_sample_per_s']:,.0f} samples/s "
        f"(one realtime session produces {result['tick_hz']:g}/s)"
    )
    if result.get("plot"):
        print(f"plot: {result['plot']}")
