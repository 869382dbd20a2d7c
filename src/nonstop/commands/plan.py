"""``nonstop plan``: the capacity planner's command (`nonstop.metrics.capacity` does the counting and timing)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nonstop.commands._flags import add_device_arguments
from nonstop.metrics.capacity import (
    PROCESS_BASE_BYTES,
    Deployment,
    positive_number,
    plan,
    SAMPLE_K,
    Timing,
    measure_times,
)

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--k", type=float, default=None, help="IMPALA ResNet width (k=1,7,29,98 ≈ 1M,10M,100M,1B parameters)"
    )
    p.add_argument(
        "--latency", default=None, help="declared forward time instead of a model, with its unit: 80ms, 5t or 0.2s"
    )
    p.add_argument("--forward-ms", type=float, default=None, help="forward time measured elsewhere (ms, batch 1)")
    p.add_argument(
        "--update-ms", type=float, default=None, help="one learner update of --batch-size, measured elsewhere (ms)"
    )
    add_device_arguments(p, what="--k's model (its times measured there: one CPU core, or this machine's GPU)")
    p.add_argument(
        "--batch-curve",
        action="append",
        default=None,
        metavar="[NAME=]SPEC|FILE",
        help="a measured batch latency curve L(b) (linear:A,C, table:b=T,..., or a file `nonstop bench gpu "
        "--save-curve` wrote): how many worlds one device runs at --hz, the batch they settle on and the "
        "lanes a world needs; repeat with NAME= per card to ask which card runs --worlds",
    )
    p.add_argument(
        "--worlds", type=int, default=None, help="with --batch-curve: the worlds to run (which curve keeps up)"
    )
    p.add_argument("--max-batch", type=int, default=64, help="with --batch-curve: the largest batch (default 64)")
    p.add_argument("--hz", type=float, default=60.0, help="tick rate of the world (default 60)")
    p.add_argument("--batch-size", type=int, default=16, help="learner batch size B (paper: 16)")
    p.add_argument("--nodes", type=int, default=1, help="nodes the inference workers spread over (weights reach each)")
    p.add_argument("--weights-every", type=int, default=1, help="updates between weight broadcasts (default 1)")
    p.add_argument(
        "--process-mb",
        type=float,
        default=PROCESS_BASE_BYTES / 2**20,
        help="resident memory of a worker process without its model (MiB, default 300)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def run_plan(args: argparse.Namespace) -> int:
    from nonstop.policies.models import count_flops, count_parameters, estimate_memory_bytes

    if args.batch_curve:
        return _plan_curves(args)
    if args.k is None and args.latency is None and args.forward_ms is None:
        raise ValueError("give a model: --k WIDTH (the paper's ResNet), or --latency / --forward-ms, or --batch-curve")
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
            from nonstop.inference.device import placement

            try:
                device, dtype = placement(args.device, args.dtype)  # CUDA asked of a machine without: one line
            except ValueError as exc:
                raise ValueError(
                    f"--device {args.device}: {exc}; or plan from --forward-ms/--update-ms measured on the GPU machine"
                ) from None
            if device.type == "cuda":
                import torch

                torch.cuda.set_device(device)
            args.device = device.type
            on = "one CPU core" if args.device == "cpu" else "the GPU"
            sample = args.k if args.device == "cuda" else min(args.k, SAMPLE_K)
            what = f"k={sample:g}" + (f", to extrapolate to k={args.k:g} by FLOPs" if sample != args.k else "")
            print(f"nonstop plan: timing the ResNet at {what} on {on} (a few seconds)...", file=sys.stderr, flush=True)
            timing = measure_times(args.k, args.batch_size, device=args.device, dtype=dtype)
            forward = timing.forward_s if forward is None else forward
            update = timing.update_s if update is None else update
            source = timing.describe(args.k, args.batch_size)
    assert forward is not None, "a model (--k, --latency or --forward-ms) was required above"
    result = plan(
        forward_s=forward,
        update_s=update,
        tick_hz=args.hz,
        batch_size=args.batch_size,
        deployment=Deployment(
            n_params=n_params,
            activation_bytes=activation or 0,
            process_base_bytes=int(args.process_mb * 2**20),
            nodes=args.nodes,
            weights_every=args.weights_every,
        ),
    )
    result.update(k=args.k, times=source, flops_forward=flops)
    if timing is not None:
        result["sample"] = {
            "k": timing.sample_k,
            "update_batch": timing.sample_batch,
            "extrapolated": timing.extrapolated,
        }
        if args.device == "cuda":
            # each worker and learner ran on a GPU of its own at the measured speed (CPU cores stay for the processes)
            result["gpus"] = result["n_inference_star"] + (result["n_learners_star"] or 0)
    if args.json:
        print(json.dumps(result))
    else:
        _render(result)
    return 0


def parse_named_curve(text: str, tick_hz: float) -> tuple[str, Any]:
    """``NAME=SPEC`` (or a bare SPEC or FILE, named after itself) as ``(name, LatencyCurve)``.

    >>> name, curve = parse_named_curve("h100=linear:1ms,0.25ms", 60.0); name, round(curve(4), 6)
    ('h100', 0.002)
    """
    import re

    from nonstop.inference.batchsize import parse_curve

    m = re.match(r"^([A-Za-z][\w.-]*)=(.+)$", text.strip())
    name, spec = (m.group(1), m.group(2)) if m else (text.strip(), text.strip())
    try:
        return name, parse_curve(spec, tick_hz=tick_hz)
    except ValueError as exc:
        raise ValueError(f"--batch-curve: {exc}") from None


def plan_curves(curves: list[tuple[str, Any]], *, tick_hz: float, max_batch: int, worlds: int | None) -> dict[str, Any]:
    """What each measured curve allows at ``tick_hz``: the most worlds one device keeps up with (every world
    asking once a tick: some b with L(b) <= b·τ_M/K), the batch they settle on, and the lanes a world
    needs (⌈L(b)/τ_M⌉ for the forward pass, ⌈2·L(b)/τ_M⌉ when a request waits out the running batch first,
    as `nonstop bench lanes` reads them); with ``worlds``, which curves keep up with that many."""
    import math

    from nonstop.inference.batchsize import steady_batch, worlds_ceiling

    tau_m = 1.0 / tick_hz
    rows = []
    for name, curve in curves:
        ceiling, at = worlds_ceiling(curve, tau_m, max_batch)
        row: dict[str, Any] = {
            "name": name,
            "curve": curve.description,
            "worlds_ceiling": ceiling,
            "ceiling_batch": at,
            "L1_ms": curve(1) * 1e3,
            "L_max_batch_ms": curve(max_batch) * 1e3,
        }
        k = worlds if worlds is not None else ceiling
        b = steady_batch(curve, tau_m, k, max_batch) if k >= 1 else None
        row["worlds"] = k
        row["keeps_up"] = b is not None
        row["steady_batch"] = b
        if b is not None:
            ticks = curve(b) / tau_m
            row.update(
                L_steady_ticks=ticks,
                lanes_forward=max(1, math.ceil(ticks - 1e-9)),
                lanes_with_queue=max(1, math.ceil(2 * ticks - 1e-9)),
            )
        rows.append(row)
    out: dict[str, Any] = {"tick_hz": tick_hz, "max_batch": max_batch, "worlds": worlds, "curves": rows}
    if worlds is not None:
        out["cards_that_keep_up"] = [r["name"] for r in rows if r["keeps_up"]]
    return out


def _plan_curves(args: argparse.Namespace) -> int:
    positive_number("--hz", args.hz)
    if args.max_batch < 1:
        raise ValueError(f"--max-batch must be a positive integer, got {args.max_batch}")
    if args.worlds is not None and args.worlds < 1:
        raise ValueError(f"--worlds must be a positive integer, got {args.worlds}")
    curves = [parse_named_curve(text, args.hz) for text in args.batch_curve]
    result = plan_curves(curves, tick_hz=args.hz, max_batch=args.max_batch, worlds=args.worlds)
    if args.json:
        print(json.dumps(result))
        return 0
    from nonstop._console import Console
    from rich.table import Table

    t = Table(title=f"nonstop plan — worlds one device runs at {args.hz:g} Hz (batches up to {args.max_batch})")
    for col in ("curve", "L(1) ms", "most worlds", "at batch", "worlds", "keeps up", "steady batch", "lanes/world"):
        t.add_column(col, justify="left" if col == "curve" else "right")
    for r in result["curves"]:
        lanes = f"{r['lanes_forward']}–{r['lanes_with_queue']}" if r["keeps_up"] else "—"
        t.add_row(
            r["name"],
            f"{r['L1_ms']:.3g}",
            str(r["worlds_ceiling"]),
            str(r["ceiling_batch"]),
            str(r["worlds"]),
            "yes" if r["keeps_up"] else "no",
            str(r["steady_batch"] or "—"),
            lanes,
        )
    Console().print(t)
    if args.worlds is not None:
        keep = result["cards_that_keep_up"]
        Console().print(f"{args.worlds} worlds: {', '.join(keep) if keep else 'no curve given keeps up'}", markup=False)
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

    t = Table(
        title=f"nonstop plan — {'k=' + format(r['k'], 'g') if r['k'] else 'declared latency'} at {r['tick_hz']:g} Hz"
    )
    t.add_column("figure")
    t.add_column("value", justify="right")
    if r.get("flops_forward"):
        t.add_row("forward FLOPs (batch 1)", f"{r['flops_forward'] / 1e9:,.2f} G")
    t.add_row("τ_θ (forward)", f"{r['tau_theta_s'] * 1e3:.2f} ms = {r['tau_theta_ticks']:.2f} ticks")
    if r["tau_l_update_s"] is not None:
        t.add_row(f"τ_L (update of {r['batch_size']})", f"{r['tau_l_update_s'] * 1e3:.2f} ms")
    t.add_row("times", r["times"])
    t.add_row("N_I* = ⌈τ_θ/τ_M⌉", str(r["n_inference_star"]))
    t.add_row(
        "N_L* = ⌈(τ_L/B)/τ_M⌉", "— (give --update-ms)" if r["n_learners_star"] is None else str(r["n_learners_star"])
    )
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


HELP = "capacity planner: N_I*, N_L*, cores, memory and traffic a model needs at a tick rate"


run = run_plan
