"""``nonstop plan``: the capacity planner's command (`nonstop.metrics.capacity` does the counting and timing)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nonstop.metrics.capacity import (
    PROCESS_BASE_BYTES,
    positive_number,
    plan,
    SAMPLE_K,
    Timing,
    measure_times,
)

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=float, default=None, help="IMPALA ResNet width (k=1,7,29,98 ≈ 1M,10M,100M,1B parameters)")
    p.add_argument("--latency", default=None, help="declared forward time instead of a model, with its unit: 80ms, 5t or 0.2s")
    p.add_argument("--forward-ms", type=float, default=None, help="forward time measured elsewhere (ms, batch 1)")
    p.add_argument("--update-ms", type=float, default=None, help="one learner update of --batch-size, measured elsewhere (ms)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where --k's times are measured: one CPU core (default) or this machine's GPU")
    p.add_argument("--hz", type=float, default=60.0, help="tick rate of the world (default 60)")
    p.add_argument("--batch-size", type=int, default=16, help="learner batch size B (paper: 16)")
    p.add_argument("--nodes", type=int, default=1, help="nodes the inference workers spread over (weights reach each)")
    p.add_argument("--weights-every", type=int, default=1, help="updates between weight broadcasts (default 1)")
    p.add_argument("--process-mb", type=float, default=PROCESS_BASE_BYTES / 2**20,
                   help="resident memory of a worker process without its model (MiB, default 300)")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def run_plan(args: argparse.Namespace) -> int:
    from nonstop.policies.models import count_flops, count_parameters, estimate_memory_bytes

    if args.k is None and args.latency is None and args.forward_ms is None:
        raise ValueError("give a model: --k WIDTH (the paper's ResNet), or --latency / --forward-ms")
    if args.k is not None and args.latency is not None:
        raise ValueError("give --k or --latency, not both (--forward-ms overrides a measured forward time)")
    positive_number("--hz", args.hz)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be a positive integer, got {args.batch_size}")
    forward = args.forward_ms / 1000 if args.forward_ms is not None else None
    update = args.update_ms / 1000 if args.update_ms is not None else None
    for name, v in (("--forward-ms", forward), ("--update-ms", update)):
        if v is not None:
            positive_number(name, v)
    if args.latency is not None and forward is None:
        from nonstop.policies.latency import parse_latency

        forward = parse_latency(args.latency, tick_hz=args.hz).mean
    n_params = activation = flops = None
    source = "declared"
    timing: Timing | None = None
    if args.k is not None:
        positive_number("--k", args.k)
        n_params = count_parameters(args.k)  # analytic: no model is built to count
        flops = count_flops(args.k)
        activation = estimate_memory_bytes(args.k) - 4 * n_params
        if forward is None or update is None:
            on = "one CPU core" if args.device == "cpu" else "the GPU"
            sample = args.k if args.device == "cuda" else min(args.k, SAMPLE_K)
            what = f"k={sample:g}" + (f", to extrapolate to k={args.k:g} by FLOPs" if sample != args.k else "")
            print(f"nonstop plan: timing the ResNet at {what} on {on} (a few seconds)...", file=sys.stderr, flush=True)
            timing = measure_times(args.k, args.batch_size, device=args.device)
            forward = timing.forward_s if forward is None else forward
            update = timing.update_s if update is None else update
            source = timing.describe(args.k, args.batch_size)
    assert forward is not None, "a model (--k, --latency or --forward-ms) was required above"
    result = plan(forward_s=forward, update_s=update, tick_hz=args.hz, batch_size=args.batch_size, n_params=n_params,
                  activation_bytes=activation or 0, process_base_bytes=int(args.process_mb * 2**20), nodes=args.nodes,
                  weights_every=args.weights_every)  # fmt: skip
    result.update(k=args.k, times=source, flops_forward=flops)
    if timing is not None:
        result["sample"] = {"k": timing.sample_k, "update_batch": timing.sample_batch, "extrapolated": timing.extrapolated}
        if args.device == "cuda":
            # each worker and learner ran on a GPU of its own at the measured speed (CPU cores stay for the processes)
            result["gpus"] = result["n_inference_star"] + (result["n_learners_star"] or 0)
    if args.json:
        print(json.dumps(result))
    else:
        _render(result)
    return 0


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def _render(r: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    t = Table(title=f"nonstop plan — {'k=' + format(r['k'], 'g') if r['k'] else 'declared latency'} at {r['tick_hz']:g} Hz")
    t.add_column("figure")
    t.add_column("value", justify="right")
    if r.get("flops_forward"):
        t.add_row("forward FLOPs (batch 1)", f"{r['flops_forward'] / 1e9:,.2f} G")
    t.add_row("τ_θ (forward)", f"{r['tau_theta_s'] * 1e3:.2f} ms = {r['tau_theta_ticks']:.2f} ticks")
    if r["tau_l_update_s"] is not None:
        t.add_row(f"τ_L (update of {r['batch_size']})", f"{r['tau_l_update_s'] * 1e3:.2f} ms")
    t.add_row("times", r["times"])
    t.add_row("N_I* = ⌈τ_θ/τ_M⌉", str(r["n_inference_star"]))
    t.add_row("N_L* = ⌈(τ_L/B)/τ_M⌉", "— (give --update-ms)" if r["n_learners_star"] is None else str(r["n_learners_star"]))
    t.add_row("cores (workers + learners + host)", str(r["cores"]))
    if "gpus" in r:
        t.add_row("GPUs (workers + learners, each as fast as the one measured)", str(r["gpus"]))
    mem = r.get("memory_bytes")
    if mem:
        t.add_row("|θ| (float32)", f"{r['n_params']:,} params = {_bytes(mem['theta'])}")
        t.add_row("memory, N_I* copies of θ", _bytes(mem["inference_separate_copies"]))
        t.add_row("memory, one shared θ per node", _bytes(mem["inference_shared_weights"]))
    for name, v in r["traffic_bytes_per_s"].items():
        t.add_row(f"traffic: {name}", f"{_bytes(v)}/s")
    Console().print(t)


HELP = 'capacity planner: N_I*, N_L*, cores, memory and traffic a model needs at a tick rate'


run = run_plan
