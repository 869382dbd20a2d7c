"""``nonstop bench nstar``: measured N_I* against theory, per inference time.

For each τ_θ (in ticks) it searches the smallest N_I whose inaction over a
measurement window after warm-up is at most ``--max-inaction``, runs the
staggered workers for real on the chosen clock, and compares with ⌈τ_θmax/τ_M⌉
(Algorithm 1) or ⌈τ̄_θ/τ_M⌉ (Algorithm 2). Writes a plot like the paper's
Figure 7a (N_I* against τ_θ).

On the wall clock the workers are threads of this process (latency policies sleep, they use no
CPU), the host runs in its own process at SCHED_FIFO where permitted, and the pool aligns each
inference to a tick's publish (`InferencePool` ``align_to_ticks``). Each trial's window ends when
the agents are stopped, and the result records the machine's load average before and after: on
a shared machine the wall-clock figures are only as good as the quiet they were measured in.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from nonstop.bench.common import machine_info, parse_positive_list
from nonstop.metrics.nstar import find_nstar, max_inaction_threshold, theoretical_nstar

DESCRIPTION = "measured N_I* (fewest workers with no inaction) vs theory, per inference time (paper Fig. 7a)"
ENV = "theory/inaction"  # the cheapest world: the env does not matter for N_I*, only the tick rate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clock", choices=("virtual", "wall"), default="virtual")
    parser.add_argument("--scheduler", default="max_time,exp_time",
                        help="comma-separated schedulers (max_time, exp_time, unstaggered)")  # fmt: skip
    parser.add_argument("--tau-theta", default=None,
                        help="inference times in ticks, comma-separated (default 1,2,5,8,70,600 virtual; 1,5,8,70 wall)")  # fmt: skip
    parser.add_argument("--latency", choices=("constant", "lognormal"), default="constant",
                        help="latency distribution; lognormal is heavy-tailed with --sigma, mean = τ_θ")  # fmt: skip
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal sigma (default 0.5)")
    parser.add_argument("--max-inaction", type=float, default=None,
                        help="inaction fraction allowed after warm-up (default: 0 on the virtual clock with constant "
                        "latency, else 0.5%% capped at 1/(4·theory))")  # fmt: skip
    parser.add_argument("--window", type=float, default=None, help="measurement window in cycles of τ_θ (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="thread", metavar="thread|ray",
                        help="where each worker's policy runs on the wall clock: thread (default) or ray (a Ray actor, "
                        "spread over the cluster's nodes; theory then counts the measured τ_θ, remote overhead included)")
    parser.add_argument("--ray-address", default=None, metavar="HOST:PORT", help="Ray cluster (default: a local Ray)")
    parser.add_argument("--plot", default="runs/nstar.png", help="where to write the figure ('' for none)")


def trial(
    *,
    tau_ticks: float,
    n_workers: int,
    scheduler: str,
    clock: str,
    latency: str,
    sigma: float,
    seed: int,
    window_cycles: float,
    backend: str = "thread",
) -> dict[str, Any]:
    """One run with ``n_workers``; returns the tick-log summary after warm-up (counted from when
    the workers started: Ray actors take seconds to start)."""
    from functools import partial

    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.policies import Constant, ConstantPolicy, LatencyPolicy, LogNormal
    from nonstop.realtime.host import Session

    with Session(ENV, clock=clock, seed=seed) as world:
        tau_m = world.tau_m
        mean = tau_ticks * tau_m
        dist = Constant(mean) if latency == "constant" else LogNormal(mean / math.exp(sigma**2 / 2), sigma)

        space = world.action_space

        def policy(i: int) -> Any:
            factory = partial(_latency_policy, space, dist, seed * 100_003 + i)
            if backend == "ray":
                from nonstop.distributed.ray_backend import RayPolicy

                return RayPolicy(factory, num_cpus=0)  # it sleeps: no core reserved
            return factory()

        sched = make_scheduler(scheduler, n_workers)
        pool = InferencePool(world, policy, sched).start()
        started = int(world.slot.read().tick) if backend == "ray" else 0
        # warm-up: the first round (all workers start together) plus a cycle to settle
        warmup_ticks = started + int(math.ceil(3 * tau_ticks)) + 30
        window_ticks = int(max(window_cycles * tau_ticks, 240))
        try:
            world.run_for((warmup_ticks - started + window_ticks + 1) * tau_m)
            # the window ends here: the ticks the host goes on making while the pool stops are β's
            end_tick = world.slot.read().tick
        finally:
            pool.stop()
    summary = world.tick_log.summary(warmup_ticks=warmup_ticks, end_tick=end_tick)
    taus = np.array([t for w in pool.workers for t in w.tau_thetas])
    summary["tau_theta_max_ticks"] = float(taus.max() / tau_m) if taus.size else float("nan")
    summary["tau_theta_mean_ticks"] = float(taus.mean() / tau_m) if taus.size else float("nan")
    overhead = world.tick_log.meta.get("workers", {}).get("remote_overhead_s")
    if overhead is not None:
        summary["remote_overhead_s"] = overhead
    return summary


def _latency_policy(space: Any, dist: Any, seed: int) -> Any:
    from nonstop.policies import ConstantPolicy, LatencyPolicy

    return LatencyPolicy(ConstantPolicy(space, 1), dist, seed=seed)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nonstop.distributed.backends import check_backend

    backend = getattr(args, "backend", "thread")
    ray_address = getattr(args, "ray_address", None)
    if backend not in ("thread", "ray"):
        raise ValueError(f"bench nstar runs latency policies on backend 'thread' or 'ray', got {backend!r}")
    check_backend(backend, ray_address=ray_address, clock=args.clock)
    if backend == "ray":
        from nonstop.distributed.ray_backend import ray_session

        with ray_session(ray_address):
            result = _run(args, backend)
    else:
        result = _run(args, backend)
    result["backend"] = backend
    return result


def _run(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    schedulers = [s.strip() for s in args.scheduler.split(",") if s.strip()]
    from nonstop.inference.schedulers import make_scheduler

    for name in schedulers:
        make_scheduler(name, 1 if name == "sequential" else 2)  # unknown names fail here, before any run
    if args.tau_theta is not None:
        taus = parse_positive_list(args.tau_theta, "--tau-theta")
    elif args.quick:
        taus = [1, 2, 5, 8] if args.clock == "virtual" else [1, 5]
    else:
        taus = [1, 2, 5, 8, 70, 600] if args.clock == "virtual" else [1, 5, 8, 70]
    if args.sigma <= 0:
        raise ValueError(f"--sigma must be positive, got {args.sigma}")
    window = args.window if args.window is not None else (2.0 if args.quick else 4.0)
    exact = args.clock == "virtual" and args.latency == "constant"
    rows = []
    load_before = os.getloadavg()
    for name in schedulers:
        for tau in taus:
            theory_guess = theoretical_nstar(tau, 1.0)
            if args.max_inaction is not None:
                threshold = args.max_inaction
            elif exact:
                threshold = 0.0
            else:
                threshold = min(0.005, max_inaction_threshold(theory_guess) / 2)

            def run_n(n: int, tau: float = tau, name: str = name) -> dict[str, Any]:
                return trial(
                    tau_ticks=tau, n_workers=n, scheduler=name, clock=args.clock, latency=args.latency,
                    sigma=args.sigma, seed=args.seed, window_cycles=window, backend=backend,
                )  # fmt: skip

            nstar, results = find_nstar(run_n, guess=theory_guess, passes=lambda s, th=threshold: s["inaction_fraction"] <= th)
            at = results[nstar]
            if args.latency == "constant" and backend != "ray":
                theory = theory_guess
            else:  # Algorithm 1 pads to the largest τ_θ seen; Algorithm 2 tracks the mean
                key = "tau_theta_max_ticks" if name == "max_time" else "tau_theta_mean_ticks"
                theory = theoretical_nstar(at[key], 1.0)
            rows.append({
                "scheduler": name,
                "tau_theta_ticks": tau,
                "nstar_measured": nstar,
                "nstar_theory": theory,
                "matches_theory": nstar == theory,
                "within_theory_plus_1": nstar <= theory + 1,
                "max_inaction": threshold,
                "inaction_at_nstar": at["inaction_fraction"],
                "inaction_at_nstar_minus_1": results[nstar - 1]["inaction_fraction"] if nstar > 1 else None,
                "tau_i_mean_ticks": at["tau_i_mean_ticks"],
                "tau_i_cv": at["tau_i_cv"],
                "delay_mean_ticks": at["delay_mean_ticks"],
                "tau_theta_max_ticks": at["tau_theta_max_ticks"],
                "tau_theta_mean_ticks": at["tau_theta_mean_ticks"],
                "trials": {str(n): r["inaction_fraction"] for n, r in sorted(results.items())},
                "remote_overhead_s": at.get("remote_overhead_s"),
            })  # fmt: skip
    result: dict[str, Any] = {
        "clock": args.clock,
        "latency": args.latency,
        "sigma": args.sigma if args.latency == "lognormal" else None,
        "env": ENV,
        "rows": rows,
        "all_match_theory": all(r["matches_theory"] for r in rows),
        "all_within_theory_plus_1": all(r["within_theory_plus_1"] for r in rows),
        # the machine is shared: wall-clock figures are only as quiet as it was
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "machine": machine_info(),
    }
    if args.plot:
        result["plot"] = str(_plot(rows, Path(args.plot), args))
    return result


def _plot(rows: list[dict[str, Any]], path: Path, args: argparse.Namespace) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for name in dict.fromkeys(r["scheduler"] for r in rows):
        sub = [r for r in rows if r["scheduler"] == name]
        ax.plot([r["tau_theta_ticks"] for r in sub], [r["nstar_measured"] for r in sub], "o-", label=f"{name} (measured)")
    taus = sorted({r["tau_theta_ticks"] for r in rows})
    ax.plot(taus, [theoretical_nstar(t, 1.0) for t in taus], "k--", alpha=0.6, label="⌈τ_θ/τ_M⌉ (theory)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("τ_θ (ticks)")
    ax.set_ylabel("N_I* (workers)")
    ax.set_title(f"N_I* vs inference time — {args.clock} clock, {args.latency} latency")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def render(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"N_I* — {result['clock']} clock, {result['latency']} latency")
    for col in ("scheduler", "τ_θ (ticks)", "N_I* measured", "theory", "inaction at N_I*", "at N_I*−1",
                "τ_I (ticks)", "τ_I CV", "delay (ticks)", "threshold"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in result["rows"]:
        table.add_row(
            r["scheduler"], f"{r['tau_theta_ticks']:g}", str(r["nstar_measured"]), str(r["nstar_theory"]),
            f"{r['inaction_at_nstar']:.2%}",
            "—" if r["inaction_at_nstar_minus_1"] is None else f"{r['inaction_at_nstar_minus_1']:.2%}",
            f"{r['tau_i_mean_ticks']:.3f}", f"{r['tau_i_cv']:.3f}", f"{r['delay_mean_ticks']:.2f}",
            f"{r['max_inaction']:.2%}",
        )  # fmt: skip
    Console().print(table)
    if result.get("plot"):
        print(f"plot: {result['plot']}")
